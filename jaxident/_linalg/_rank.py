"""Numerical rank (CSS paper, Pearce et al. 2022, section 3.5)."""

import abc
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from ._misc import eps, reduce_to_square, svdvals


class AbstractRankRule(eqx.Module):
    """How the number `k` of identifiable parameters is read off the singular values.

    Subclasses implement `__call__(singular_values, shape) -> k` with the singular values
    in descending order and `shape` the shape `(n, p)` of the matrix they came from.
    """

    @abc.abstractmethod
    def __call__(
        self, sigma: Float[Array | np.ndarray, " p"], shape: tuple[int, int]
    ) -> Int[Array, ""]:
        """Return the numerical rank as a traced integer."""

    @abc.abstractmethod
    def threshold(
        self, sigma: Float[Array | np.ndarray, " p"], shape: tuple[int, int]
    ) -> Float[Array, ""]:
        """The size `tau` below which the rule calls a singular value zero: the one
        threshold of every decision taken with this rule (the rank, 'no effect' and
        membership in a non-identifiable direction, `ji.linalg.dependence`)."""

    @abc.abstractmethod
    def describe(
        self,
        sigma: Float[Array | np.ndarray, " p"] | None = None,
        shape: tuple[int, int] | None = None,
    ) -> str:
        """A sentence for reports, e.g. `sigma_{k+1} <= 1e-8 * sigma_1`."""


class RelativeTolerance(AbstractRankRule):
    """`k = #{i : sigma_i > rtol * sigma_1}`, the numerical rank of paper eq. (3.5).

    **Arguments:**

    - `rtol`: relative tolerance. The default `None` means `max(n, p) * eps`, or the
      accuracy of the matrix where it is known (a `ji.Sensitivity` records it), whichever
      is larger: a rank decision never asks for more digits than the entries have. Pass
      a number to decide at that tolerance (the CSS paper's code used `1e-8`).
    - `accuracy`: the relative accuracy of the matrix (set by the library from a
      `Sensitivity`; used only when `rtol` is `None`).
    """

    rtol: float | None = None
    accuracy: float | None = None

    def __check_init__(self):
        for name in ("rtol", "accuracy"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and 0 <= v < 1):
                raise ValueError(
                    f"RelativeTolerance({name}={v!r}): need a number in [0, 1) (a relative "
                    "tolerance on sigma_i / sigma_1), or None."
                )

    def _rtol(self, sigma, shape):
        if self.rtol is None:
            base = max(shape) * eps(sigma)
            if self.accuracy is not None:
                base = jnp.maximum(base, jnp.asarray(self.accuracy, sigma.dtype))
            return base
        return jnp.asarray(self.rtol, sigma.dtype)

    def threshold(self, sigma: Float[Array | np.ndarray, " p"], shape: tuple[int, int]):
        return self._rtol(sigma, shape) * sigma[0]

    def __call__(self, sigma, shape):
        tol = self._rtol(sigma, shape) * sigma[0]
        return jnp.sum(sigma > tol).astype(jnp.int32)

    def describe(
        self,
        sigma: Float[Array | np.ndarray, " p"] | None = None,
        shape: tuple[int, int] | None = None,
    ) -> str:
        if self.rtol is None and self.accuracy is not None:
            return (
                f"sigma_i > max({self.accuracy:.1e}, max(n, p)*eps)*sigma_1 (relative "
                "tolerance at the accuracy of S)"
            )
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

    def threshold(self, sigma: Float[Array | np.ndarray, " p"], shape: tuple[int, int]):
        return jnp.asarray(self.atol, sigma.dtype)

    def describe(
        self,
        sigma: Float[Array | np.ndarray, " p"] | None = None,
        shape: tuple[int, int] | None = None,
    ) -> str:
        return f"sigma_i > {self.atol:g} (absolute noise level)"


class LargestGap(AbstractRankRule):
    """`k` at the largest ratio `sigma_k / sigma_{k+1}` (paper section 3.5).

    **Arguments:**

    - `min_gap`: a ratio that counts as a gap. When no ratio exceeds it the matrix is
      taken to have full rank `p`. The default `1e3` asks for a drop of three orders of
      magnitude in one step: the paper's plain rule, `min_gap=1.0` (always pick the
      largest ratio, even a small one), finds a "gap" in every matrix and under-ranks
      full-rank models (SVIR 3 of 4, SIR 1 of 2, alpha-pinene 4 of 5, whose largest
      ratios are 23, 1.1 and 2).

    Exactly zero singular values count as an infinite gap at the first zero.
    """

    min_gap: float = 1e3

    def threshold(self, sigma: Float[Array | np.ndarray, " p"], shape: tuple[int, int]):
        """The geometric middle of the gap the rule chooses (`gap_middle`)."""
        return gap_middle(sigma, self(sigma, shape), shape)

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

    def describe(
        self,
        sigma: Float[Array | np.ndarray, " p"] | None = None,
        shape: tuple[int, int] | None = None,
    ) -> str:
        return f"largest gap sigma_k/sigma_(k+1) (min_gap={self.min_gap:g})"


class GivenRank(AbstractRankRule):
    """The rank `k` given by the caller (a number, not a decision); its threshold is the
    geometric middle of `sigma_k` and `sigma_{k+1}` (`gap_middle`), where the decisions
    that follow from `k` (membership in its null directions) are taken."""

    k: int

    def __check_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer)) or self.k < 0:
            raise ValueError(f"GivenRank needs a non-negative integer k, got {self.k!r}.")

    def __call__(self, sigma, shape):
        return jnp.asarray(min(int(self.k), sigma.shape[0]), jnp.int32)

    def threshold(self, sigma: Float[Array | np.ndarray, " p"], shape: tuple[int, int]):
        return gap_middle(sigma, self(sigma, shape), shape)

    def describe(
        self,
        sigma: Float[Array | np.ndarray, " p"] | None = None,
        shape: tuple[int, int] | None = None,
    ) -> str:
        return f"k = {self.k} given"


def gap_middle(sigma: Float[Array, " p"], k: Int[Array, ""], shape) -> Float[Array, ""]:
    """`sqrt(sigma_k sigma_{k+1})`, the geometric middle of the gap below the first `k`
    singular values (never below rounding level, `max(n, p) eps sigma_1`); rounding
    level at `k = p`."""
    p = sigma.shape[0]
    rounding = max(shape) * eps(sigma) * sigma[0]
    kept = sigma[jnp.clip(k - 1, 0, p - 1)]
    dropped = sigma[jnp.clip(k, 0, p - 1)]
    middle = jnp.sqrt(kept * jnp.maximum(dropped, rounding))
    return jnp.where(k < p, jnp.maximum(middle, rounding), rounding)


def numerical_rank(S: ArrayLike, rank: AbstractRankRule = RelativeTolerance()) -> Int[Array, ""]:
    """Numerical rank of `S` under `rank` (default: relative tolerance `max(n,p)*eps`).

    **Arguments:**

    - `S`: an `(n, p)` matrix.
    - `rank`: a rank rule, e.g. `RelativeTolerance(1e-8)`, `AbsoluteTolerance(1e-6)` or
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
    return rank(svdvals(reduce_to_square(S)), S.shape)


def with_accuracy(rule: AbstractRankRule, accuracy: float | None) -> AbstractRankRule:
    """The default relative rule made aware of the accuracy of the matrix."""
    if (
        accuracy is not None
        and isinstance(rule, RelativeTolerance)
        and rule.rtol is None
        and rule.accuracy is None
    ):
        return RelativeTolerance(accuracy=float(accuracy))
    return rule


@eqx.filter_jit
def rank_and_threshold(rule: AbstractRankRule, sigma, shape):
    """The rule's rank and threshold, as one compiled call:
    on the host, the rule's few array operations would each be compiled on their own."""
    return rule(sigma, shape), rule.threshold(sigma, shape)


def near_threshold(rule: AbstractRankRule, sigma, shape, factor: float = 10.0):
    """`(near, message)`: whether the decision of `rule` on the singular values `sigma`
    would change if the threshold moved by `factor` either way (never below rounding
    level, `max(n, p) eps sigma_1`, where no decision can move). Host-side, on concrete
    values."""
    s = np.asarray(sigma, dtype=float)
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s)) or s[0] <= 0:
        return False, ""
    k, tol = rank_and_threshold(rule, s, tuple(shape))
    k, tol = int(k), float(tol)
    rounding = max(shape) * float(np.finfo(s.dtype).eps) * s[0]
    kept = s[k - 1] if k > 0 else np.inf
    dropped = s[k] if k < s.size else 0.0
    near = kept <= factor * tol or dropped > max(tol / factor, rounding)
    if not near:
        return False, ""
    after = (
        f" and sigma_{k + 1}/sigma_1 = {dropped / s[0]:.2e}"
        if k < s.size
        else " (full rank: no sigma_" + f"{k + 1})"
    )
    return True, (
        f"rank {k}: sigma_{k}/sigma_1 = {kept / s[0]:.2e}{after} against the "
        f"threshold {tol / s[0]:.2e}*sigma_1"
    )


def warn_if_near_threshold(rule: AbstractRankRule, sigma, shape, what: str) -> None:
    """Warn when a rank decision sits within a factor 10 of its threshold (host-side; a
    no-op on traced values)."""
    if isinstance(sigma, jax.core.Tracer):
        return
    near, msg = near_threshold(rule, sigma, shape)
    if near:
        warnings.warn(
            f"{what}: the numerical rank is close to the threshold ({msg}); a change of "
            "the tolerance or more accurate sensitivities (smaller rtol) may change the "
            "decision.",
            NearThresholdWarning,
            stacklevel=3,
        )


class NearThresholdWarning(UserWarning):
    """A rank decision lies within a factor 10 of its threshold."""


def warn_if_low_precision(S: Array) -> None:
    if S.dtype == jnp.float32 or S.dtype == jnp.float16 or S.dtype == jnp.bfloat16:
        warnings.warn(
            f"A rank decision on a {S.dtype} matrix: singular values below about "
            f"{float(jnp.finfo(S.dtype).eps):.1e} * sigma_1 cannot be told apart from "
            "zero. jaxident enables float64 on import; pass float64 arrays (and do not set "
            "JAXIDENT_X64=0) for identifiability work.",
            stacklevel=3,
        )
