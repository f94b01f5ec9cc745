"""Numerical rank (CSS paper, Pearce et al. 2022, section 3.5)."""

import abc
import warnings

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from ._misc import eps, reduce_to_square, svdvals


class AbstractRankRule(eqx.Module):
    """How the number `k` of identifiable parameters is read off the singular values.

    Subclasses implement `__call__(singular_values, shape) -> k` with the singular values
    in descending order and `shape` the shape `(n, p)` of the matrix they came from.
    """

    @abc.abstractmethod
    def __call__(self, sigma: Float[Array, " p"], shape: tuple[int, int]) -> Int[Array, ""]:
        """Return the numerical rank as a traced integer."""

    @abc.abstractmethod
    def describe(self, sigma: Float[Array, " p"] | None = None, shape=None) -> str:
        """A sentence for reports, e.g. `sigma_{k+1} <= 1e-8 * sigma_1`."""


class RelativeTolerance(AbstractRankRule):
    """`k = #{i : sigma_i > rtol * sigma_1}`, the numerical rank of paper eq. (3.5).

    **Arguments:**

    - `rtol`: relative tolerance. The default `None` means `max(n, p) * eps`, the right
      value when the entries of `S` are accurate to rounding. For a sensitivity matrix
      that is only accurate to the ODE solver's tolerance, pass that tolerance (the CSS
      paper's code used `1e-8`).
    """

    rtol: float | None = None

    def _rtol(self, sigma, shape):
        if self.rtol is None:
            return max(shape) * eps(sigma)
        return jnp.asarray(self.rtol, sigma.dtype)

    def __call__(self, sigma, shape):
        tol = self._rtol(sigma, shape) * sigma[0]
        return jnp.sum(sigma > tol).astype(jnp.int32)

    def describe(self, sigma=None, shape=None):
        if self.rtol is None:
            if shape is not None:
                return f"sigma_i > {max(shape)}*eps*sigma_1 (relative tolerance)"
            return "sigma_i > max(n, p)*eps*sigma_1 (relative tolerance)"
        return f"sigma_i > {self.rtol:g}*sigma_1 (relative tolerance)"


class AbsoluteTolerance(AbstractRankRule):
    """`k = #{i : sigma_i > atol}`: `atol` bounds the absolute error (noise level) in the
    entries of `S` (paper section 3.5)."""

    atol: float

    def __check_init__(self):
        if not self.atol >= 0:
            raise ValueError(f"AbsoluteTolerance needs atol >= 0, got {self.atol!r}.")

    def __call__(self, sigma, shape):
        return jnp.sum(sigma > self.atol).astype(jnp.int32)

    def describe(self, sigma=None, shape=None):
        return f"sigma_i > {self.atol:g} (absolute noise level)"


class LargestGap(AbstractRankRule):
    """`k` at the largest ratio `sigma_k / sigma_{k+1}` (paper section 3.5).

    **Arguments:**

    - `min_gap`: a ratio that counts as a gap. When no ratio exceeds it the matrix is
      taken to have full rank `p`. The default `1.0` is the paper's plain rule (always
      pick the largest ratio, even a small one).

    Exactly zero singular values count as an infinite gap at the first zero.
    """

    min_gap: float = 1.0

    def __call__(self, sigma, shape):
        p = sigma.shape[0]
        if p == 1:
            return jnp.where(sigma[0] > 0, 1, 0).astype(jnp.int32)
        num = sigma[:-1]
        den = sigma[1:]
        tiny = jnp.finfo(sigma.dtype).tiny
        ratio = jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), jnp.inf)
        ratio = jnp.where(num > tiny, ratio, 0.0)  # below a zero there is no gap
        i = jnp.argmax(ratio).astype(jnp.int32)
        k = jnp.where(ratio[i] > self.min_gap, i + 1, p)
        return jnp.where(sigma[0] > 0, k, 0).astype(jnp.int32)

    def describe(self, sigma=None, shape=None):
        return f"largest gap sigma_k/sigma_(k+1) (min_gap={self.min_gap:g})"


def numerical_rank(S: ArrayLike, rule: AbstractRankRule = RelativeTolerance()) -> Int[Array, ""]:
    """Numerical rank of `S` under `rule` (default: relative tolerance `max(n,p)*eps`).

    **Arguments:**

    - `S`: an `(n, p)` matrix.
    - `rule`: a rank rule, e.g. `RelativeTolerance(1e-8)`, `AbsoluteTolerance(1e-6)` or
      `LargestGap()`.

    **Returns:** the rank as a scalar integer array (jittable and vmappable).

    **Example:**

    ```python
    k = ji.linalg.numerical_rank(S, ji.linalg.LargestGap())
    ```
    """
    S = jnp.asarray(S)
    if S.ndim != 2:
        raise ValueError(f"numerical_rank needs a 2-D matrix, got shape {S.shape}.")
    warn_if_low_precision(S)
    return rule(svdvals(reduce_to_square(S)), S.shape)


def warn_if_low_precision(S: Array) -> None:
    if S.dtype == jnp.float32 or S.dtype == jnp.float16 or S.dtype == jnp.bfloat16:
        warnings.warn(
            f"A rank decision on a {S.dtype} matrix: singular values below about "
            f"{float(jnp.finfo(S.dtype).eps):.1e} * sigma_1 cannot be told apart from "
            "zero. jaxident enables float64 on import; pass float64 arrays (and do not set "
            "JAXIDENT_X64=0) for identifiability work.",
            stacklevel=3,
        )
