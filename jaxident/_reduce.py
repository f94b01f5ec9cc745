"""Models with some parameters fixed: the reduced models of identifiability analyses."""

from collections.abc import Mapping

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._model import AbstractModel, AlgebraicModel, DAEModel, Delegating, ODEModel
from ._parameters import Parameters, ParameterValues


def _split(model: AbstractModel, values: Mapping[str, float]):
    params = model.parameters
    if not isinstance(values, Mapping):
        raise TypeError(
            "values must be a dict {name: value} of the parameters to fix, e.g. "
            f"{{{params.names[0]!r}: {float(params.nominal[0]):g}}}; got a "
            f"{type(values).__name__}."
        )
    for name in values:
        params.index(name)  # unknown names raise, with a suggestion
    fixed_idx = [params.index(n) for n in values]
    free_idx = tuple(i for i in range(params.p) if i not in fixed_idx)
    if not free_idx:
        raise ValueError("Fixing every parameter leaves nothing to analyse or estimate.")
    full = np.asarray(params.nominal, dtype=float).copy()
    for n, v in values.items():
        v = float(v)
        if not np.isfinite(v):
            raise ValueError(f"Non-finite value {v} for fixed parameter {n!r}.")
        lo, up = float(params.lower[params.index(n)]), float(params.upper[params.index(n)])
        if not lo <= v <= up:
            raise ValueError(
                f"Fixed value {v:g} for {n!r} lies outside its bounds [{lo:g}, {up:g}]; "
                "fix it inside, or widen the model's bounds (model.parameters.replace)."
            )
        full[params.index(n)] = v
    free = Parameters(
        [params.names[i] for i in free_idx],
        np.asarray(params.nominal)[list(free_idx)],
        np.asarray(params.lower)[list(free_idx)],
        np.asarray(params.upper)[list(free_idx)],
    )
    return free, free_idx, jnp.asarray(full)


class _Reduced(Delegating):
    """Shared helpers of the fixed-parameter wrappers (a plain mixin, no state)."""

    def full_theta(self, theta: ParameterValues) -> ParameterValues:
        full = self.fixed_values.at[jnp.asarray(self.free_index)].set(theta.values)
        return self.base.parameters.view(full)

    @property
    def fixed(self) -> dict[str, float]:
        free = set(self.free_index)
        names = self.base.parameters.names
        return {names[i]: float(self.fixed_values[i]) for i in range(len(names)) if i not in free}

    @property
    def state_names(self):
        return self.base.state_names

    @property
    def t0(self):
        return self.base.t0

    @property
    def description(self):
        return f"{type(self.base).__name__} with {', '.join(self.fixed)} fixed"


class FixedODEModel(_Reduced, ODEModel):
    """An `ODEModel` with some parameters fixed; made by `ji.fix_parameters`."""

    base: ODEModel
    parameters: Parameters
    free_index: tuple[int, ...] = eqx.field(static=True)
    fixed_values: Float[Array, " p_full"]

    def vector_field(self, t, x, theta):
        return self.base.vector_field(t, x, self.full_theta(theta))

    def initial_state(self, theta):
        return self.base.initial_state(self.full_theta(theta))

    def output(self, t, x, theta):
        return self.base.output(t, x, self.full_theta(theta))

    def switching_times(self, theta):
        return self.base.switching_times(self.full_theta(theta))

    def lift(self, x):
        return self.base.lift(x)

    def restrict(self, y):
        return self.base.restrict(y)


class FixedDAEModel(_Reduced, DAEModel):
    """A `DAEModel` with some parameters fixed; made by `ji.fix_parameters`."""

    base: DAEModel
    parameters: Parameters
    free_index: tuple[int, ...] = eqx.field(static=True)
    fixed_values: Float[Array, " p_full"]

    def differential(self, t, x, w, theta):
        return self.base.differential(t, x, w, self.full_theta(theta))

    def algebraic(self, t, x, w, theta):
        return self.base.algebraic(t, x, w, self.full_theta(theta))

    def initial_state(self, theta):
        return self.base.initial_state(self.full_theta(theta))

    def initial_algebraic_guess(self, theta):
        return self.base.initial_algebraic_guess(self.full_theta(theta))

    def output(self, t, x, w, theta):
        return self.base.output(t, x, w, self.full_theta(theta))


class FixedAlgebraicModel(_Reduced, AlgebraicModel):
    """An `AlgebraicModel` with some parameters fixed; made by `ji.fix_parameters`."""

    base: AlgebraicModel
    parameters: Parameters
    free_index: tuple[int, ...] = eqx.field(static=True)
    fixed_values: Float[Array, " p_full"]

    @property
    def conditions(self):
        return self.base.conditions

    def response(self, u, theta):
        return self.base.response(u, self.full_theta(theta))


def fix_parameters(model: AbstractModel, values: Mapping[str, float]):
    """The model with the parameters in `values` held at those values.

    The returned model has only the free parameters (in their original order, with
    their nominal values and bounds), so every analysis and `ji.estimate` applies to it
    unchanged; `.fixed` lists the fixed ones and `.full_theta` rebuilds the full vector.

    **Raises:** `ValueError` for unknown names, non-finite values, or when nothing would
    be left free.

    **Example:**

    ```python
    reduced = ji.fix_parameters(model, {"theta3": 1.5})
    reduced.parameters.names   # ('theta1', 'theta2', 'theta4')
    ```
    """
    free, free_idx, full = _split(model, values)
    if isinstance(model, DAEModel):
        return FixedDAEModel(model, free, free_idx, full)
    if isinstance(model, ODEModel):
        return FixedODEModel(model, free, free_idx, full)
    if isinstance(model, AlgebraicModel):
        return FixedAlgebraicModel(model, free, free_idx, full)
    raise TypeError(
        f"Expected an ODEModel, DAEModel or AlgebraicModel, got {type(model).__name__}."
    )
