"""PEtab's noise distributions as objects that carry their behaviour: the log-density
of a datum, its part of the cost, the scores, the closed-form noise level at the
optimum and the Fisher information of the noise's scale. Each kernel and host routine
asks the distribution; none compares its name or its type. A name (`"normal"`,
`"laplace"`: PEtab's `noiseDistribution`) becomes an object at the edge
(`as_noises`)."""

import abc
import math
from types import ModuleType
from typing import ClassVar

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike


class AbstractNoise(eqx.Module):
    """The distribution of a datum on its transformed scale, around the model's output,
    with scale `sigma` (the standard deviation, or Laplace's `b`).

    Every method takes the weighted residual `r = (h(y) - h(m)) / sigma` and the array
    module (`np`, the default, or `jax.numpy`), so the host and the compiled kernels
    compute it the same way.
    """

    name: ClassVar[str]
    # the likelihood's kinks: a gradient-based fit's first-order test cannot hold where
    # a residual is zero (Laplace's |r|)
    kinks: ClassVar[bool]
    # the Fisher information of `ln sigma` in one datum
    scale_information: ClassVar[float]
    # whether the best scaling of an observable has the closed form of least squares
    # (a quadratic cost in the output: hierarchical fits)
    quadratic: ClassVar[bool]

    def __str__(self) -> str:
        return self.name

    @abc.abstractmethod
    def log_density(self, r: ArrayLike, sigma: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`ln p` of the datum on its transformed scale."""

    @abc.abstractmethod
    def cost(self, r: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """The datum's part of `-2 ln p` that moves with the output."""

    @abc.abstractmethod
    def score(self, r: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`d(-ln p)/dr`."""

    @abc.abstractmethod
    def scale_score(self, r: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """`d(-ln p)/d ln sigma` at fixed output."""

    @abc.abstractmethod
    def scale_at_optimum(self, u: ArrayLike, where: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """The factor `c` of the noise level that maximizes the likelihood of residuals
        `u / c` over `where` (`u`: the residuals at `c = 1`)."""

    @abc.abstractmethod
    def scale_curvature(self, r: ArrayLike, xp: ModuleType = np) -> ArrayLike:
        """The curvature of `-ln p` in `ln sigma` at fixed output, relative to its
        expected value (`scale_information`): below 1 where the noise level is too
        large for the residual."""


def _mean(values, where, xp):
    n = xp.maximum(xp.sum(where), 1).astype(values.dtype)
    return xp.sum(xp.where(where, values, 0.0)) / n


class Normal(AbstractNoise):
    """Normal noise: `ln p = -ln(2 pi sigma^2) / 2 - r^2 / 2`; the cost `r^2`, the
    score `r`, the scale score `1 - r^2`, the noise level at the optimum
    `sqrt(mean u^2)`, the information of `ln sigma` 2."""

    name: ClassVar[str] = "normal"
    kinks: ClassVar[bool] = False
    scale_information: ClassVar[float] = 2.0
    quadratic: ClassVar[bool] = True

    def log_density(self, r, sigma, xp=np):
        return -0.5 * xp.log(2 * math.pi * sigma**2) - 0.5 * r**2

    def cost(self, r, xp=np):
        return r**2

    def score(self, r, xp=np):
        return r

    def scale_score(self, r, xp=np):
        return 1.0 - r**2

    def scale_at_optimum(self, u, where, xp=np):
        return xp.sqrt(_mean(u**2, where, xp))

    def scale_curvature(self, r, xp=np):
        return r**2


class Laplace(AbstractNoise):
    """Laplace noise with scale `b` (PEtab's `sigma`): `ln p = -ln(2 b) - |r|`; the
    cost `2 |r|`, the score `sign(r)`, the scale score `1 - |r|`, the noise level at
    the optimum `mean |u|`, the information of `ln b` 1. Its likelihood has a kink
    wherever a residual is zero."""

    name: ClassVar[str] = "laplace"
    kinks: ClassVar[bool] = True
    scale_information: ClassVar[float] = 1.0
    quadratic: ClassVar[bool] = False

    def log_density(self, r, sigma, xp=np):
        return -xp.log(2 * sigma) - xp.abs(r)

    def cost(self, r, xp=np):
        return 2.0 * xp.abs(r)

    def score(self, r, xp=np):
        return xp.sign(r)

    def scale_score(self, r, xp=np):
        return 1.0 - xp.abs(r)

    def scale_at_optimum(self, u, where, xp=np):
        return _mean(xp.abs(u), where, xp)

    def scale_curvature(self, r, xp=np):
        return xp.abs(r)


NOISES: dict[str, type[AbstractNoise]] = {"normal": Normal, "laplace": Laplace}


def per_output(noises, method, *arrays, xp=np):
    """`method(noise)` (e.g. `lambda d: d.cost`) of each output's noise on that output's
    slice of `arrays` (outputs on the last axis, broadcast together), stacked back on
    the last axis."""
    arrays = xp.broadcast_arrays(*arrays)
    return xp.stack(
        [method(d)(*(a[..., o] for a in arrays), xp=xp) for o, d in enumerate(noises)], axis=-1
    )


def as_noises(noises, what: str) -> tuple[AbstractNoise, ...]:
    """`noises` (objects, or PEtab's names) as noise objects; anything else is a
    `ValueError` naming `what` and the names."""
    out = []
    for d in noises:
        if isinstance(d, AbstractNoise):
            out.append(d)
        elif isinstance(d, str) and d in NOISES:
            out.append(NOISES[d]())
        else:
            names = ", ".join(repr(n) for n in NOISES)
            raise ValueError(
                f"{what} must be ji.Normal(), ji.Laplace() or one of {names}, got {d!r}."
            )
    return tuple(out)
