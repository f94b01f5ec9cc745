"""PEtab's noise distributions as objects that carry their behaviour: the
log-density of a datum, its part of the cost, the scores, and the Fisher information
of the noise's scale. Each kernel and host routine asks the distribution; none compares
its name."""

import math
from types import ModuleType

import numpy as np
from jaxtyping import ArrayLike

from .._runtime._choice import Choice


class Noise(Choice):
    """`normal` or `laplace`: the distribution of a datum on its transformed scale,
    around the model's output, with scale `sigma` (the standard deviation, or Laplace's
    `b`). A `Noise` is the string it is named by (`Noise.laplace == "laplace"`), so
    tables and user code may give either.

    Every method takes the weighted residual `r = (h(y) - h(m)) / sigma` and the array
    module (`np`, the default, or `jax.numpy`), so the host and the compiled kernels
    compute it the same way.
    """

    normal = "normal"
    laplace = "laplace"

    def log_density(self, r: ArrayLike, sigma: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`ln p` of the datum on its transformed scale."""
        if self is Noise.normal:
            return -0.5 * xp.log(2 * math.pi * sigma**2) - 0.5 * r**2
        return -xp.log(2 * sigma) - xp.abs(r)

    def cost(self, r: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """The datum's part of `-2 ln p` that moves with the output: `r^2` or `2 |r|`."""
        return r**2 if self is Noise.normal else 2.0 * xp.abs(r)

    def score(self, r: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`d(-ln p)/dr`: `r` or `sign(r)`."""
        return r if self is Noise.normal else xp.sign(r)

    def scale_score(self, r: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`d(-ln p)/d ln sigma` at fixed output: `1 - r^2` or `1 - |r|`."""
        return 1.0 - (r**2 if self is Noise.normal else xp.abs(r))

    def scale_at_optimum(self, u: ArrayLike, where: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """The factor `c` of the noise level that maximizes the likelihood of residuals
        `u / c` over `where` (`u`: the residuals at `c = 1`): `sqrt(mean u^2)` (normal),
        `mean |u|` (Laplace)."""
        n = xp.maximum(xp.sum(where), 1).astype(u.dtype)
        if self is Noise.normal:
            return xp.sqrt(xp.sum(xp.where(where, u**2, 0.0)) / n)
        return xp.sum(xp.where(where, xp.abs(u), 0.0)) / n

    def scale_curvature(self, r: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """The curvature of `-ln p` in `ln sigma` at fixed output, relative to its
        expected value (`scale_information`): `r^2` or `|r|` (below 1 where the noise
        level is too large for the residual)."""
        return r**2 if self is Noise.normal else xp.abs(r)

    @property
    def scale_information(self) -> float:
        """The Fisher information of `ln sigma` in one datum: 2 (normal) or 1
        (Laplace)."""
        return 2.0 if self is Noise.normal else 1.0


def per_output(noises, method, *arrays, xp=np):
    """`method` (an unbound `Noise` method, e.g. `Noise.cost`) of each output's noise
    on that output's slice of `arrays` (outputs on the last axis, broadcast together),
    stacked back on the last axis."""
    arrays = xp.broadcast_arrays(*arrays)
    return xp.stack(
        [method(d, *(a[..., o] for a in arrays), xp=xp) for o, d in enumerate(noises)], axis=-1
    )


def as_noises(noises, what: str) -> tuple[Noise, ...]:
    """`noises` as `Noise`s; an unknown name is a `ValueError` naming `what`."""
    return tuple(Noise.of(d, what) for d in noises)
