"""State transforms: the initial state as parameters (`ji.free_initial_state`) and
Galerkin reduction (`PODModel`, made by `ji.pod_reduce`), on the forwarding base of
`_transforms.py`."""

from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._linalg._misc import matmul
from ._base import ODEModel
from ._checks import check_model
from ._parameters import Parameters
from ._transforms import AbstractSameParameters, AbstractTransformedODE


# --------------------------------------------------------------------------------------
# The initial state as parameters


class InitialStateModel(AbstractTransformedODE):
    """An `ODEModel` whose initial state is estimated along with its parameters: the
    parameter vector is `w = (x(t0), p)`, states first. Made by `ji.free_initial_state`;
    every analysis (`ji.sensitivity`, `ji.estimate`, `ji.profile`) applies unchanged.
    Fields: `base` (the model), `parameters` (the states' initial values, then the
    model's parameters), `t0`, `n_states`, `free` (which states' initial values are
    parameters)."""

    base: ODEModel
    parameters: Parameters
    t0: float | Array
    n_states: int = eqx.field(static=True)
    free: tuple[int, ...] | None = eqx.field(static=True, default=None)

    @property
    def description(self):
        some = "" if self.free is None else f"{self.n_states} of "
        return f"{type(self.base).__name__} with {some}its initial state as parameters"

    def base_theta(self, theta):
        return self.base.parameters.view(theta.values[self.n_states :])

    def initial_state(self, theta):
        x0 = theta.values[: self.n_states]
        if self.free is not None:
            full = self.base.lift(self.base.initial_state(self.base_theta(theta)))
            x0 = jnp.asarray(full, dtype=x0.dtype).at[jnp.asarray(self.free)].set(x0)
        return self.base.restrict(x0)


def _state_names(model: ODEModel, d: int) -> tuple[str, ...]:
    names = model.state_names
    if names is None or len(names) != d:
        names = tuple(f"x{i + 1}" for i in range(d))
    clash = set(names) & set(model.parameters.names)
    if clash:
        raise ValueError(
            f"State names {sorted(clash)} are also parameter names; rename them "
            "(state_names class attribute) so that w = (x, p) has unique labels."
        )
    return tuple(names)


def free_initial_state(
    model: ODEModel,
    x0: ArrayLike | None = None,
    *,
    lower: ArrayLike | None = None,
    upper: ArrayLike | None = None,
    t0: float | None = None,
    states: Sequence[str] | None = None,
) -> InitialStateModel:
    """The model with its initial state (or some of it) turned into parameters,
    `w = (x(t0), p)`: initial conditions declared unknown.

    **Arguments:**

    - `model`: an `ODEModel` whose state is a 1-D array.
    - `x0`: the nominal initial state (default: the model's, at its nominal parameters).
      For a reduced-order model this is the full-space state (`model.lift`), mapped to
      the reduced one by `model.restrict`, so perturbations live in the full space.
    - `lower`, `upper`: bounds of the states (default unbounded).
    - `t0`: the initial time (default the model's).
    - `states`: the names of the states whose initial values are unknown (default all);
      the others keep the model's own initial values (which may depend on its
      parameters). `x0`, `lower` and `upper` then refer to these states only.

    **Returns:** an `InitialStateModel` with parameter names `state_names + parameter
    names`, ready for `ji.estimate` (joint state and parameter estimation from an output
    time series) and `ji.sensitivity` (the delay-coordinate Jacobian).

    **Example:**

    ```python
    aug = ji.free_initial_state(ji.models.load("colpitts"))
    aug.parameters.names   # ('x1', 'x2', 'x3', 'p1', 'p2', 'p3', 'p4')
    ```
    """
    check_model(model)
    if not isinstance(model, ODEModel):
        raise TypeError(f"free_initial_state needs an ODEModel, got {type(model).__name__}.")
    p = model.parameters
    if x0 is None:
        x0 = model.lift(model.initial_state(p.view(p.nominal)))
    x0 = jnp.asarray(x0, dtype=float)
    if x0.ndim != 1:
        raise ValueError(f"The state must be a 1-D array, got shape {x0.shape}.")
    d = x0.shape[0]
    names = _state_names(model, d)
    free = None
    if states is not None:
        if isinstance(states, str):
            states = [states]
        unknown = [n for n in states if n not in names]
        if unknown or not states:
            raise ValueError(
                f"Unknown states {unknown or list(states)}; the states are {list(names)}."
            )
        free = tuple(names.index(n) for n in states)
        names = tuple(names[i] for i in free)
        if x0.shape[0] == d and len(free) != d:
            x0 = x0[jnp.asarray(free)]
        d = len(free)
    if x0.shape != (d,):
        raise ValueError(f"x0 needs shape ({d},) (one value per unknown state), got {x0.shape}.")
    lo = jnp.full(d, -jnp.inf) if lower is None else jnp.broadcast_to(jnp.asarray(lower), (d,))
    up = jnp.full(d, jnp.inf) if upper is None else jnp.broadcast_to(jnp.asarray(upper), (d,))
    params = Parameters(
        names + p.names,
        jnp.concatenate([x0, p.nominal]),
        jnp.concatenate([lo, p.lower]),
        jnp.concatenate([up, p.upper]),
    )
    return InitialStateModel(
        base=model,
        parameters=params,
        t0=model.t0 if t0 is None else t0,
        n_states=d,
        free=free,
    )


# --------------------------------------------------------------------------------------
# Galerkin reduction


class PODModel(AbstractSameParameters, AbstractTransformedODE):
    """A Galerkin-projected reduced-order model `y ~ basis @ y~ + mean`:
    `y~' = basis^T f(t, basis y~ + mean, theta)`, `y~(t0) = basis^T (y0(theta) - mean)`,
    output `h(t, basis y~ + mean, theta)`. Made by `ji.pod_reduce`; `lift` and `restrict`
    map between the reduced and the full state, so perturbation analyses of the full and
    the reduced model share the full-space perturbations and responses. Fields: `base`
    (the full model), `basis` (`(n, k)`, orthonormal columns), `mean` (`(n,)`)."""

    base: ODEModel
    basis: Float[Array, "n k"]
    mean: Float[Array, " n"]

    @property
    def state_names(self):
        return None

    def jacobian_sparsity(self):
        return None  # the reduced state's Jacobian is dense

    @property
    def description(self):
        return f"{self.basis.shape[1]}-mode POD model of {type(self.base).__name__}"

    def lift(self, x):
        return matmul(self.basis, x) + self.mean

    def restrict(self, y):
        return matmul(self.basis.T, y - self.mean)

    def apply_event(self, i, t, x, theta):
        return self.restrict(self.base.apply_event(i, t, self.lift(x), theta))

    def vector_field(self, t, x, theta):
        return matmul(self.basis.T, self.base.vector_field(t, self.lift(x), theta))

    def initial_state(self, theta):
        return self.restrict(self.base.lift(self.base.initial_state(theta)))

    def output(self, t, x, theta):
        return self.base.output(t, self.lift(x), theta)
