"""Model transforms: a model wrapping another with its parameters or its state mapped.
Fixed parameters and changes of units (`ji.fix_parameters`, `ji.change_units`) here,
and the state transforms of `_transforms_state.py` (the initial state as parameters,
Galerkin reduction), share one forwarding base per kind of model, so every model method
(switching times, lift/restrict, the DAE's algebraic guess, ...) reaches the wrapped
model."""

from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

from ._base import AbstractModel, AlgebraicModel, DAEModel, Integrator, ODEModel
from ._checks import check_model
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

    def jacobian_sparsity(self):
        """The base's: a transform keeps the state (one that changes it says so)."""
        return self.base.jacobian_sparsity()

    def parameter_dependence(self):
        """Not known through a transform that maps the parameters (every one may
        matter), the base's where it keeps them (`AbstractSameParameters`)."""
        return None

    def output_scalings(self):
        """As `parameter_dependence`: none through a transform that maps the
        parameters, the base's where it keeps them."""
        return None

    def output_offsets(self):
        return None


class AbstractSameParameters(AbstractTransformedModel):
    """A transform that keeps the base's parameters and initial time."""

    @property
    def parameters(self) -> Parameters:
        return self.base.parameters

    def parameter_dependence(self):
        return self.base.parameter_dependence()

    def output_scalings(self):
        return self.base.output_scalings()

    def output_offsets(self):
        return self.base.output_offsets()

    @property
    def t0(self):
        return self.base.t0


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

    def reinitialize(self, x, theta):
        return self.base.reinitialize(x, self.base_theta(theta))

    def event_times(self, theta):
        return self.base.event_times(self.base_theta(theta))

    def event_triggers(self, t, x, theta):
        return self.base.event_triggers(t, x, self.base_theta(theta))

    def apply_event(self, i, t, x, theta):
        return self.base.apply_event(i, t, x, self.base_theta(theta))

    @property
    def fires_at_t0(self):
        return self.base.fires_at_t0

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
    `fixed_values`: fixed parameters (`scale = 1`) and changes of units (all free).

    Fields: `base` (the model), `parameters` (the free ones, in their units),
    `free_index` (their positions among the base's), `fixed_values` (the base's
    vector with the fixed ones at their values), `scale` (the unit of each free one
    in the base's units)."""

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


def reparameterize(model, parameters, free_index, fixed_values, scale):
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
    """`model` with the parameters in `values` (`{name: value}`) held at those values.

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
    return reparameterize(model, sub, free, jnp.asarray(full), jnp.ones(len(free)))


def change_units(model: AbstractModel, units: Mapping[str, float]) -> AbstractReparameterized:
    """`model` with parameters measured in other `units`: `units[name] = u` measures
    that parameter in multiples of `u` of its old unit, `theta = u * theta_new` (a rate
    in 1/s with `u = 1/60` becomes a rate in 1/min). Nominal values and bounds are
    converted; names stay. Sensitivities scale by `u`; identifiability decisions do
    not change (tests/model/test_units.py).

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
    return reparameterize(model, new, every, jnp.asarray(params.nominal), jnp.asarray(u))


# --------------------------------------------------------------------------------------
# Switching times that depend on the parameters


class TimeWarped(AbstractSameParameters, AbstractTransformedODE):
    """The model in a warped time `s` that moves with its switching times, so that a
    right-hand side which jumps at `tau(theta)` (a `piecewise` in `time < t_1`, a step in
    an input) gets the true derivative with respect to `theta` through `tau`.

    `t = w(s; theta)` is piecewise linear with knots `t0` and the sorted switching and
    event times:
    it maps each `tau_j` at the point (`stop_gradient(tau_j)`) to `tau_j(theta)`. In `s`
    the switch never moves, `x_s(s) = x(w(s))` solves `dx_s/ds = w'(s) f(w(s), x_s)`, and
    its tangent is continuous; back in `t`, `dx/dtheta = dx_s/dtheta - f w_theta`, which
    jumps at `tau` by `(f(tau-) - f(tau+)) dtau/dtheta`: the jump condition of the
    sensitivities at a discontinuity (as for an event). An output at the observation
    time `t_i` is read at `x_s(w^{-1}(t_i))`, to first order `x_s + delta f` with
    `delta = w^{-1}(t_i) - stop_gradient(w^{-1}(t_i))`.

    Every value is the base model's to the last bit (`w(s) = s` and `w'(s) = 1` at the
    point; only tangents differ), so simulations and step counts do not change. Made
    inside the solves for an ODE model that declares `switching_times` or
    `event_times`.

    A switch after `t_end` (the last observation time) does not move: nothing observed
    depends on it, and its sensitivity is exactly zero (the warp would otherwise stretch
    the last observed segment, whose tangents cancel only up to the solver's error)."""

    base: ODEModel
    t_end: Float[Array, ""] | None = None

    def _segment(self, s, theta):
        """The knot at the start of the segment holding `s` (moving, and at the point)
        and the segment's slope `dt/ds`."""
        t0 = jnp.asarray(self.base.t0, dtype=float)
        tau = _moving_times(self.base, theta)
        if self.t_end is not None:
            fixed = lax.stop_gradient(tau)
            tau = jnp.where(fixed > self.t_end, fixed, tau)
        k = jnp.concatenate([t0[None], jnp.sort(jnp.maximum(tau, t0))])
        kr = lax.stop_gradient(k)
        j = jnp.clip(jnp.searchsorted(kr, s, side="right") - 1, 0, k.size - 1)
        nxt = jnp.minimum(j + 1, k.size - 1)
        width = kr[nxt] - kr[j]
        inner = (j < k.size - 1) & (width > 0) & jnp.isfinite(width)  # (an event at inf)
        slope = jnp.where(inner, (k[nxt] - k[j]) / jnp.where(inner, width, 1.0), 1.0)
        return k[j], kr[j], slope

    def _warp(self, s, theta):
        a, ar, slope = self._segment(s, theta)
        w = a + (s - ar) * slope
        return s + (w - lax.stop_gradient(w)), 1.0 + (slope - lax.stop_gradient(slope))

    def vector_field(self, t, x, theta):
        tw, slope = self._warp(t, theta)
        return jax.tree.map(lambda v: slope * v, self.base.vector_field(tw, x, theta))

    def event_triggers(self, t, x, theta):
        return self.base.event_triggers(self._warp(t, theta)[0], x, theta)

    def output(self, t, x, theta):
        a, ar, slope = self._segment(t, theta)
        s = ar + (t - a) / slope  # w^{-1}(t)
        delta = s - lax.stop_gradient(s)
        f = self.vector_field(t, x, theta)
        x = jax.tree.map(lambda xi, fi: xi + delta * jnp.where(jnp.isfinite(fi), fi, 0.0), x, f)
        return self.base.output(t, x, theta)


def _moving_times(model: ODEModel, th: ParameterValues):
    """The switching and event times of `model` at `th`, one vector, or `None`."""
    parts = [ts for ts in (model.switching_times(th), model.event_times(th)) if ts is not None]
    if not parts:
        return None
    return jnp.concatenate([jnp.atleast_1d(jnp.asarray(ts, dtype=float)) for ts in parts])


def time_warped(model: AbstractModel, th: ParameterValues, t_end=None) -> AbstractModel:
    """`TimeWarped(model, t_end)` for an ODE model with switching or event times at `th`,
    else `model` (`t_end`: the last observation time, after which a switch moves
    nothing)."""
    if isinstance(model, (DAEModel, AlgebraicModel, TimeWarped)) or not isinstance(model, ODEModel):
        return model
    if _moving_times(model, th) is None:
        return model
    return TimeWarped(model, None if t_end is None else jnp.asarray(t_end, dtype=float))
