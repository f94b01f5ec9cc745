"""Model transforms: a model wrapping another with its parameters or its state mapped.
Fixed parameters and changes of units (`ji.fix_parameters`, `ji.change_units`), the
initial state as parameters (`ji.free_initial_state`) and Galerkin reduction
(`PODModel`, made by `ji.pod_reduce`) share one forwarding base per kind of model, so
every model method (switching times, lift/restrict, the DAE's algebraic guess, ...)
reaches the wrapped model."""

from collections.abc import Mapping, Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._checks import check_model
from ._linalg._misc import matmul
from ._model import AbstractModel, AlgebraicModel, DAEModel, Integrator, ODEModel
from ._parameters import Parameters, ParameterValues


class AbstractTransformedModel(AbstractModel):
    """A model defined through another, `base`. `base_theta` maps this model's
    parameters to the base's (default: the same); times, output names, integrator and
    state names are the base's."""

    base: eqx.AbstractVar[AbstractModel]

    def base_theta(self, theta: ParameterValues) -> ParameterValues:
        return self.base.parameters.view(theta.values)

    @property
    def times(self):
        return self.base.times

    @property
    def output_names(self):
        return self.base.output_names

    @property
    def integrator(self) -> Integrator:
        return self.base.integrator

    @property
    def state_names(self):
        return self.base.state_names


class AbstractTransformedODE(AbstractTransformedModel, ODEModel):
    """Forwards every `ODEModel` method to `base`, with `base_theta(theta)`."""

    base: eqx.AbstractVar[ODEModel]

    def vector_field(self, t, x, theta):
        return self.base.vector_field(t, x, self.base_theta(theta))

    def initial_state(self, theta):
        return self.base.initial_state(self.base_theta(theta))

    def output(self, t, x, theta):
        return self.base.output(t, x, self.base_theta(theta))

    def switching_times(self, theta):
        return self.base.switching_times(self.base_theta(theta))

    def lift(self, x):
        return self.base.lift(x)

    def restrict(self, y):
        return self.base.restrict(y)


class AbstractTransformedDAE(AbstractTransformedModel, DAEModel):
    """Forwards every `DAEModel` method to `base`, with `base_theta(theta)`."""

    base: eqx.AbstractVar[DAEModel]

    def differential(self, t, x, w, theta):
        return self.base.differential(t, x, w, self.base_theta(theta))

    def algebraic(self, t, x, w, theta):
        return self.base.algebraic(t, x, w, self.base_theta(theta))

    def initial_state(self, theta):
        return self.base.initial_state(self.base_theta(theta))

    def initial_algebraic_guess(self, theta):
        return self.base.initial_algebraic_guess(self.base_theta(theta))

    def output(self, t, x, w, theta):
        return self.base.output(t, x, w, self.base_theta(theta))


class AbstractTransformedAlgebraic(AbstractTransformedModel, AlgebraicModel):
    """Forwards every `AlgebraicModel` method to `base`, with `base_theta(theta)`."""

    base: eqx.AbstractVar[AlgebraicModel]

    @property
    def conditions(self):
        return self.base.conditions

    def response(self, u, theta):
        return self.base.response(u, self.base_theta(theta))


# --------------------------------------------------------------------------------------
# Fixed parameters and changes of units: theta_base = fixed.at[free_index].set(scale * theta)


class AbstractReparameterized(AbstractTransformedModel):
    """The base's parameters `theta_base[free_index] = scale * theta`, the others held at
    `fixed_values`: fixed parameters (`scale = 1`) and changes of units (all free)."""

    parameters: Parameters
    free_index: tuple[int, ...] = eqx.field(static=True)
    fixed_values: Float[Array, " p_base"]
    scale: Float[Array, " p"]

    def base_theta(self, theta: ParameterValues) -> ParameterValues:
        values = self.fixed_values.at[jnp.asarray(self.free_index)].set(self.scale * theta.values)
        return self.base.parameters.view(values)

    def full_theta(self, theta: ParameterValues) -> ParameterValues:
        """The base model's full parameter vector."""
        return self.base_theta(theta)

    @property
    def fixed(self) -> dict[str, float]:
        """`{name: value}` of the held parameters of the base."""
        free = set(self.free_index)
        names = self.base.parameters.names
        return {names[i]: float(self.fixed_values[i]) for i in range(len(names)) if i not in free}

    @property
    def t0(self):
        return self.base.t0

    @property
    def description(self):
        if self.fixed:
            return f"{type(self.base).__name__} with {', '.join(self.fixed)} fixed"
        return f"{type(self.base).__name__} in changed units"


class ReparameterizedODEModel(AbstractReparameterized, AbstractTransformedODE):
    """An `ODEModel` with parameters fixed or in other units (`ji.fix_parameters`,
    `ji.change_units`)."""

    base: ODEModel


class ReparameterizedDAEModel(AbstractReparameterized, AbstractTransformedDAE):
    """A `DAEModel` with parameters fixed or in other units."""

    base: DAEModel


class ReparameterizedAlgebraicModel(AbstractReparameterized, AbstractTransformedAlgebraic):
    """An `AlgebraicModel` with parameters fixed or in other units."""

    base: AlgebraicModel


def _reparameterize(model, parameters, free_index, fixed_values, scale):
    for kind, cls in ((DAEModel, ReparameterizedDAEModel), (ODEModel, ReparameterizedODEModel),
                      (AlgebraicModel, ReparameterizedAlgebraicModel)):  # fmt: skip
        if isinstance(model, kind):
            return cls(parameters, free_index, fixed_values, scale, base=model)
    raise TypeError(
        f"Expected an ODEModel, DAEModel or AlgebraicModel, got {type(model).__name__}."
    )


def _mapping(model, values, what):
    params = model.parameters
    if not isinstance(values, Mapping):
        raise TypeError(
            f"{what} must be a dict {{name: value}}, e.g. "
            f"{{{params.names[0]!r}: {float(params.nominal[0]):g}}}; got a "
            f"{type(values).__name__}."
        )
    out = {}
    for name, v in values.items():
        params.index(name)  # unknown names raise, with a suggestion
        v = float(v)
        if not np.isfinite(v):
            raise ValueError(f"Non-finite value {v} for {name!r} in {what}.")
        out[name] = v
    return out


def fix_parameters(model: AbstractModel, values: Mapping[str, float]) -> AbstractReparameterized:
    """The model with the parameters in `values` held at those values.

    The returned model has only the free parameters (in their original order, with
    their nominal values and bounds), so every analysis and `ji.estimate` applies to it
    unchanged; `.fixed` lists the fixed ones and `.full_theta` rebuilds the full vector.

    **Raises:** `ValueError` for unknown names, non-finite values, values outside the
    bounds, or when nothing would be left free.

    **Example:**

    ```python
    reduced = ji.fix_parameters(model, {"theta3": 1.5})
    reduced.parameters.names   # ('theta1', 'theta2', 'theta4')
    ```
    """
    check_model(model)
    values = _mapping(model, values, "values")
    params = model.parameters
    fixed_idx = {params.index(n) for n in values}
    free = tuple(i for i in range(params.p) if i not in fixed_idx)
    if not free:
        raise ValueError("Fixing every parameter leaves nothing to analyse or estimate.")
    full = np.asarray(params.nominal, dtype=float).copy()
    for n, v in values.items():
        j = params.index(n)
        lo, up = float(params.lower[j]), float(params.upper[j])
        if not lo <= v <= up:
            raise ValueError(
                f"Fixed value {v:g} for {n!r} lies outside its bounds [{lo:g}, {up:g}]; "
                "fix it inside, or widen the model's bounds (model.parameters.replace)."
            )
        full[j] = v
    sub = Parameters(
        [params.names[i] for i in free],
        *(np.asarray(a)[list(free)] for a in (params.nominal, params.lower, params.upper)),
    )
    return _reparameterize(model, sub, free, jnp.asarray(full), jnp.ones(len(free)))


def change_units(model: AbstractModel, units: Mapping[str, float]) -> AbstractReparameterized:
    """The model with parameters measured in other units: `units[name] = u` measures
    that parameter in multiples of `u` of its old unit, `theta = u * theta_new` (a rate
    in 1/s with `u = 1/60` becomes a rate in 1/min). Nominal values and bounds are
    converted; names stay. Sensitivities scale by `u`; identifiability decisions do
    not change (tests/test_units.py).

    **Example:**

    ```python
    per_minute = ji.change_units(model, {"beta": 1 / 60})
    per_minute.parameters.nominal[0]   # 60 x model.parameters.nominal[0]
    ```
    """
    check_model(model)
    units = _mapping(model, units, "units")
    params = model.parameters
    u = np.ones(params.p)
    for n, v in units.items():
        if v <= 0:
            raise ValueError(f"The unit of {n!r} must be positive, got {v}.")
        u[params.index(n)] = v
    new = Parameters(
        params.names, np.asarray(params.nominal) / u, np.asarray(params.lower) / u,
        np.asarray(params.upper) / u,
    )  # fmt: skip
    every = tuple(range(params.p))
    return _reparameterize(model, new, every, jnp.asarray(params.nominal), jnp.asarray(u))


# --------------------------------------------------------------------------------------
# The initial state as parameters


class InitialStateModel(AbstractTransformedODE):
    """An `ODEModel` whose initial state is estimated along with its parameters: the
    parameter vector is `w = (x(t0), p)`, states first. Made by `ji.free_initial_state`;
    every analysis (`ji.sensitivity`, `ji.estimate`, `ji.profile`) applies unchanged."""

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


class PODModel(AbstractTransformedODE):
    """A Galerkin-projected reduced-order model `y ~ basis @ y~ + mean`:
    `y~' = basis^T f(t, basis y~ + mean, theta)`, `y~(t0) = basis^T (y0(theta) - mean)`,
    output `h(t, basis y~ + mean, theta)`. Made by `ji.pod_reduce`; `lift` and `restrict`
    map between the reduced and the full state, so perturbation analyses of the full and
    the reduced model share the full-space perturbations and responses."""

    base: ODEModel
    basis: Float[Array, "n k"]
    mean: Float[Array, " n"]

    @property
    def parameters(self) -> Parameters:
        return self.base.parameters

    @property
    def t0(self):
        return self.base.t0

    @property
    def state_names(self):
        return None

    @property
    def description(self):
        return f"{self.basis.shape[1]}-mode POD model of {type(self.base).__name__}"

    def lift(self, x):
        return matmul(self.basis, x) + self.mean

    def restrict(self, y):
        return matmul(self.basis.T, y - self.mean)

    def vector_field(self, t, x, theta):
        return matmul(self.basis.T, self.base.vector_field(t, self.lift(x), theta))

    def initial_state(self, theta):
        return self.restrict(self.base.lift(self.base.initial_state(theta)))

    def output(self, t, x, theta):
        return self.base.output(t, self.lift(x), theta)
