"""PEtab's scales, one small type for both of their uses: the scale a parameter is
estimated on (`parameterScale`) and the one an observable's data are compared on
(`observableTransformation`)."""

import math
from types import ModuleType

import numpy as np
from jaxtyping import ArrayLike

from .._runtime._choice import Choice


_LN10 = math.log(10.0)


class Scale(Choice):
    """`lin`, `log` or `log10`: the map `h` from a positive quantity `x` to the value on
    this scale (`h(x) = x`, `ln x`, `log10 x`). A `Scale` is the string it is named by
    (`Scale.log10 == "log10"`), so tables and user code may give either.

    Each method takes the array module (`np`, the default, or `jax.numpy`) of its
    argument, so the host and the compiled kernels compute it the same way.
    """

    lin = "lin"
    log = "log"
    log10 = "log10"

    def forward(self, x: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`h(x)`: a quantity on this scale."""
        if self is Scale.lin:
            return x
        return xp.log(x) if self is Scale.log else xp.log10(x)

    def inverse(self, v: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`h^-1(v)`: a value on this scale as the quantity."""
        if self is Scale.lin:
            return v
        return xp.exp(v) if self is Scale.log else 10.0**v

    def inverse_derivative(self, v: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`d h^-1(v) / dv`: how fast the quantity moves with its value on this scale
        (`1`, `e^v` or `10^v ln 10`); the chain-rule factor of an estimation scale."""
        if self is Scale.lin:
            return xp.ones_like(v)
        return xp.exp(v) if self is Scale.log else 10.0**v * _LN10

    def derivative(self, x: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`h'(x)`: `1`, `1/x` or `1/(x ln 10)`."""
        if self is Scale.lin:
            return xp.ones_like(x)
        return 1.0 / x if self is Scale.log else 1.0 / (x * _LN10)

    def log_jacobian(self, x: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`-ln h'(x)`, the term a datum's log-density on this scale loses when it is
        written as a density of `x` (PEtab's likelihood of a log-normal datum):
        `0`, `ln x` or `ln(x ln 10)`."""
        if self is Scale.lin:
            return xp.zeros_like(x)
        return xp.log(x) if self is Scale.log else xp.log(x) + math.log(_LN10)

    def unit(self, width: ArrayLike) -> ArrayLike:
        """The size of a unit move on this scale that makes parameters compare: the
        box's `width` on the linear scale (a move across the box), 1 on a log one (a
        factor `e` or 10, free of the parameter's units)."""
        return width if self is Scale.lin else np.ones_like(width)

    def per_log_unit(self, x: ArrayLike) -> ArrayLike:
        """`x h'(x)`: how far the value on this scale moves when `x` grows by a factor
        `e` (to first order): `x`, `1` or `1 / ln 10`."""
        if self is Scale.lin:
            return x
        return 1.0 if self is Scale.log else 1.0 / _LN10


def as_scales(scales, what: str) -> tuple[Scale, ...]:
    """`scales` as `Scale`s; an unknown name is a `ValueError` naming `what`."""
    return tuple(Scale.of(s, what) for s in scales)
