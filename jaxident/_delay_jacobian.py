"""The delay-coordinate map and its Jacobian (Schumann-Bischoff, Luther & Parlitz 2016,
Phys. Rev. E 94, 032221): `G(x(t), p) = [y(t), y(t + tau), ..., y(t + (K-1) tau)]`,
differentiated by forward mode through diffrax with respect to the current state and
the parameters, `w = (x, p)` (the sensitivity layer of the delay analysis), and states
on an attractor to evaluate it at.
"""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._checks import check_model, check_theta
from ._context import clean_errors
from ._model import Delegating, Integrator, ODEModel
from ._parameters import Parameters
from ._sensitivity import sensitivity
from ._simulate import simulate


# --------------------------------------------------------------------------------------
# The model with its initial state as parameters


class InitialStateModel(Delegating, ODEModel):
    """An `ODEModel` whose initial state is estimated along with its parameters: the
    parameter vector is `w = (x(t0), p)`, states first. Made by `ji.free_initial_state`;
    every analysis (`ji.sensitivity`, `ji.estimate`, `ji.profile`) applies unchanged."""

    base: ODEModel
    parameters: Parameters
    t0: float | Array
    n_states: int = eqx.field(static=True)

    @property
    def state_names(self):
        return self.base.state_names

    @property
    def description(self):
        return f"{type(self.base).__name__} with its initial state as parameters"

    def _theta(self, theta):
        return self.base.parameters.view(theta.values[self.n_states :])

    def vector_field(self, t, x, theta):
        return self.base.vector_field(t, x, self._theta(theta))

    def initial_state(self, theta):
        return self.base.restrict(theta.values[: self.n_states])

    def lift(self, x):
        return self.base.lift(x)

    def restrict(self, y):
        return self.base.restrict(y)

    def output(self, t, x, theta):
        return self.base.output(t, x, self._theta(theta))


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
) -> InitialStateModel:
    """The model with its initial state turned into parameters, `w = (x(t0), p)`.

    **Arguments:**

    - `model`: an `ODEModel` whose state is a 1-D array.
    - `x0`: the nominal initial state (default: the model's, at its nominal parameters).
      For a reduced-order model this is the full-space state (`model.lift`), mapped to
      the reduced one by `model.restrict`, so perturbations live in the full space.
    - `lower`, `upper`: bounds of the states (default unbounded).
    - `t0`: the initial time (default the model's).

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
    lo = jnp.full(d, -jnp.inf) if lower is None else jnp.broadcast_to(jnp.asarray(lower), (d,))
    up = jnp.full(d, jnp.inf) if upper is None else jnp.broadcast_to(jnp.asarray(upper), (d,))
    params = Parameters(
        names + p.names,
        jnp.concatenate([x0, p.nominal]),
        jnp.concatenate([lo, p.lower]),
        jnp.concatenate([up, p.upper]),
    )
    return InitialStateModel(
        base=model, parameters=params, t0=model.t0 if t0 is None else t0, n_states=d
    )


# --------------------------------------------------------------------------------------
# The delay-coordinate Jacobian


def _check_delay(tau, K):
    if not isinstance(K, (int, np.integer)) or K < 2:
        raise ValueError(f"K (the number of delay coordinates) must be an integer >= 2, got {K!r}.")
    if not isinstance(tau, jax.core.Tracer):
        t = np.asarray(tau, dtype=float)
        if not np.all(np.isfinite(t)) or np.any(t <= 0):
            raise ValueError(f"The delay tau must be positive and finite, got {tau!r}.")


@clean_errors
def delay_jacobian(
    model: ODEModel,
    x: ArrayLike | Sequence,
    theta: ArrayLike | dict | Sequence | None = None,
    *,
    tau: float | ArrayLike,
    K: int,
    t: float | None = None,
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> Float[Array, "rows w"]:
    """The Jacobian `DG` of the delay-coordinate map
    `G(x, p) = [y(t), y(t + tau), ..., y(t + (K-1) tau)]` with respect to the current
    state `x = x(t)` and the parameters `p` (Schumann-Bischoff et al. 2016, eqs. 4-6).

    **Arguments:**

    - `model`: an `ODEModel` with a 1-D state; multivariate outputs give `K * n_outputs`
      rows (time-major).
    - `x`: the state at time `t`, shape `(D,)`.
    - `theta`: the parameters (default nominal).
    - `tau`: the delay; `K`: the number of delay coordinates (the paper recommends
      `K >= 2 (D + N_p) + 1`).
    - `t`: the time of `x` (default the model's `t0`; irrelevant for autonomous models).
    - `integrator`, `throw`: as for `ji.sensitivity_matrix`.

    **Returns:** `(K * n_outputs, D + N_p)`, columns `(x1..xD, p1..pNp)`, float64.
    Jittable and vmappable over `x`, `theta` and `tau`.
    """
    _check_delay(tau, K)
    aug = free_initial_state(model, t0=t)
    x = jnp.asarray(x, dtype=float)
    d = aug.n_states
    if x.shape != (d,):
        raise ValueError(f"x must have shape ({d},), got {x.shape}.")
    theta = check_theta(model, theta)
    w = jnp.concatenate([x, theta])
    times = aug.t0 + jnp.asarray(tau, dtype=float) * jnp.arange(K, dtype=float)
    return sensitivity(aug, w, times, integrator=integrator, throw=throw).matrix


def attractor_states(
    model: ODEModel,
    theta: ArrayLike | dict | Sequence | None = None,
    *,
    n: int,
    spacing: float,
    transient: float = 0.0,
    x0: ArrayLike | None = None,
    integrator: Integrator | None = None,
) -> Float[Array, "n D"]:
    """`n` states along one trajectory, `spacing` apart, after a `transient` (the paper
    integrates 1e6 steps of 0.1 and keeps every 100th state: `spacing=10`).

    **Raises:** the solver's error when the integration fails.
    """
    check_model(model)
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}.")
    if not (spacing > 0 and transient >= 0):
        raise ValueError("Need spacing > 0 and transient >= 0.")
    if x0 is not None:
        theta = jnp.concatenate([jnp.asarray(x0, dtype=float), check_theta(model, theta)])
        model = free_initial_state(model, x0)
    times = float(model.t0) + transient + spacing * jnp.arange(n, dtype=float)
    traj = simulate(model, theta, times, integrator=integrator, throw=True)
    return traj.xs
