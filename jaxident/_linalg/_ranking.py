"""Criteria that rank parameters by how estimable they are, given the ones already
selected (the first step of stepwise selection; Alberton et al. 2013, section 4).

Each criterion acts on a scaled sensitivity matrix `B` (rows: observations, columns:
parameters) and a boolean mask of the parameters already selected, and returns

- `order`: every column index, the not-selected ones best first, the selected ones last;
- `scores`: one dimensionless score per column, larger is better, `-inf` for the
  selected ones. A parameter whose score is not above the criterion's `cutoff` is not
  a candidate: its effect is negligible, or already explained by the selected ones.
  The default cutoff, `1e-8`, is about the square root of float64's machine epsilon:
  a column whose (orthogonal) part is below it relative to the largest column adds
  less than `eps` to the Fisher matrix `B^T B` relative to its largest entry, so the
  Fisher test could not tell it from rounding.

Pure `jax.numpy`; jittable and vmappable.
"""

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ._misc import column_norms, matmul, qrcp, svdvals
from ._rank import AbstractRankRule, RelativeTolerance


class AbstractRankingCriterion(eqx.Module):
    """A ranking of parameters for stepwise selection (see the module docstring).

    Subclasses implement `__call__(B, selected) -> (order, scores)` and declare a
    `cutoff`: the score a parameter must exceed to be a candidate.
    """

    cutoff: eqx.AbstractVar[float]
    name: ClassVar[str]

    @abc.abstractmethod
    def __call__(
        self, B: Float[Array, "n p"], selected: Bool[Array, " p"]
    ) -> tuple[Int[Array, " p"], Float[Array, " p"]]:
        """The ranking of the not-selected columns of `B`."""

    def eligible(self, scores: Float[Array, " p"]) -> Bool[Array, " p"]:
        return scores > self.cutoff


def _order_by(scores: Array) -> Array:
    # Stable: among equal scores the earlier column comes first.
    return jnp.argsort(-scores, stable=True).astype(jnp.int32)


def _max_norm(B: Array) -> tuple[Array, Array]:
    norms = column_norms(B)
    top = jnp.max(norms)
    return norms, jnp.where(top > 0, top, 1.0)


def _project_out(B: Array, selected: Array) -> Array:
    """`B` with the span of its selected columns removed (the residual of every column
    after regression on the selected ones), from an SVD so that dependent or zero
    selected columns are harmless."""
    A = jnp.where(selected[None, :], B, 0.0)
    U, s, _ = jnp.linalg.svd(A, full_matrices=False)
    keep = jnp.arange(s.shape[0], dtype=jnp.int32) < RelativeTolerance()(s, B.shape)
    U = jnp.where(keep[None, :], U, 0.0)
    for _ in range(2):  # twice is enough (Kahan-Parlett) for a clean projection
        B = B - matmul(U, matmul(U.T, B))
    return B


class SensitivityNorm(AbstractRankingCriterion):
    """The magnitude of each parameter's effect: the norm of its (scaled) sensitivity
    vector `||b_j||`, relative to the largest (Alberton et al. 2013, section 2). Ignores
    correlation with the selected parameters.

    **Arguments:** `cutoff` (default `1e-8`): smaller relative norms are negligible.
    """

    cutoff: float = 1e-8
    name: ClassVar[str] = "sensitivity norm"

    def __call__(self, B, selected):
        norms, top = _max_norm(B)
        scores = jnp.where(selected, -jnp.inf, norms / top)
        return _order_by(scores), scores


class Orthogonalization(AbstractRankingCriterion):
    """The orthogonalization ranking of Yao, Shaw, Kou, McAuley & Bacon (2003), used by
    Alberton et al. (2013): repeatedly take the parameter whose sensitivity vector has
    the largest part orthogonal to those already taken (the selected ones first), and
    remove that direction from the rest. The score of a parameter is the norm of that
    orthogonal part when it was taken, relative to the largest column norm of `B`:
    it is small when the parameter has little effect or its effect is a combination of
    better-ranked ones. (This is QR with column pivoting on `B` with the selected
    columns forced first.)

    **Arguments:** `cutoff` (default `1e-8`): the relative orthogonal part below which a
    parameter is not a candidate (Yao et al. use an absolute cut-off on the same
    quantity).
    """

    cutoff: float = 1e-8
    name: ClassVar[str] = "orthogonalization (Yao et al. 2003)"

    def __call__(self, B, selected):
        n, p = B.shape
        _, top = _max_norm(B)
        Rm = jnp.where(selected[None, :], 0.0, _project_out(B, selected))
        # QR with column pivoting takes, at each step, the column with the largest part
        # orthogonal to those taken; |R_ii| is that part. The selected columns are zero
        # in Rm, so they are never taken.
        R, perm = qrcp(Rm)
        steps = min(n, p)
        taken = perm[:steps]
        d = jnp.abs(jnp.diagonal(R))[:steps]
        picked = jnp.zeros(p, bool).at[taken].set(d > 0) & ~selected
        pick_at = jnp.full(p, steps, jnp.int32).at[taken].set(jnp.arange(steps, dtype=jnp.int32))
        # Columns never taken (or taken with nothing left) score 0.
        scores = jnp.zeros(p, B.dtype).at[taken].set(d) / top
        scores = jnp.where(picked, scores, 0.0)
        scores = jnp.where(selected, -jnp.inf, scores)
        # Taken columns in the order taken, then the rest by column, the selected last.
        key = jnp.where(picked, pick_at.astype(B.dtype), steps + 1.0 - scores)
        key = jnp.where(selected, jnp.inf, key)
        return jnp.argsort(key, stable=True).astype(jnp.int32), scores


class NSRGA(AbstractRankingCriterion):
    """The non-square relative gain array `NSRGA = B o (B^+)^T` (Alberton et al. 2013,
    eq. 6; Cao & Rossiter 1997). The sum of column `j` is `(B^+ B)_jj`, the leverage of
    parameter `j`: the share of its sensitivity vector that the data can separate from
    the others (1 when every parameter is separable, less when columns are
    collinear). Computed on `B` with the span of the selected columns removed, so that a
    parameter already explained by the selection scores 0; ties are broken by the
    column norm.

    **Arguments:** `cutoff` (default `1e-8`), `rank`: the rank rule that decides which
    singular values the pseudo-inverse keeps (default `RelativeTolerance()`,
    `max(n, p) eps`). It judges them against the largest column of `B` (as if that
    were the largest singular value), so that columns already explained by the
    selection, whose residual is rounding, fall out.
    """

    cutoff: float = 1e-8
    rank: AbstractRankRule = RelativeTolerance()
    name: ClassVar[str] = "NSRGA (Cao & Rossiter 1997)"

    def __check_init__(self):
        if not isinstance(self.rank, AbstractRankRule):
            raise TypeError(
                f"rank must be a rank rule such as RelativeTolerance(), got {self.rank!r}."
            )

    def __call__(self, B, selected):
        norms, top = _max_norm(B)
        Rm = jnp.where(selected[None, :], 0.0, _project_out(B, selected))
        _, s, vt = jnp.linalg.svd(Rm, full_matrices=False)
        # The rule sees the largest column of B in front of the residual's singular
        # values: a relative rule's threshold is then relative to B, not to what the
        # selection left over.
        reference = jnp.maximum(top, s[0])
        k = self.rank(jnp.concatenate([reference[None], s]), B.shape) - 1
        keep = jnp.arange(s.shape[0], dtype=k.dtype) < k
        lev = jnp.sum(jnp.where(keep[:, None], vt, 0.0) ** 2, axis=0)
        scores = jnp.where(selected, -jnp.inf, lev)
        # Leverages that agree to 1e-9 are ties: the larger effect first.
        coarse = jnp.round(jnp.where(selected, -1.0, lev) * 1e9)
        order = jnp.lexsort((-norms, -coarse)).astype(jnp.int32)
        return order, scores


class CollinearityIndex(AbstractRankingCriterion):
    """Importance over collinearity (Brun, Reichert & Kunsch 2001): the score of
    parameter `j` is `(||b_j|| / max_k ||b_k||) / gamma_{S+j}`, where
    `gamma_K = 1 / sigma_min(B~_K)` is Brun's collinearity index of the set `K` (the
    selected parameters `S` and `j`) and `B~` has unit-norm columns. A parameter that
    is nearly a combination of the selected ones has a large `gamma` and a small score.

    **Arguments:** `cutoff` (default `1e-8`).
    """

    cutoff: float = 1e-8
    name: ClassVar[str] = "collinearity index (Brun et al. 2001)"

    def __call__(self, B, selected):
        n, p = B.shape
        norms, top = _max_norm(B)
        unit = B / jnp.where(norms > 0, norms, 1.0)[None, :]
        # The columns in the coordinates of an orthonormal basis of their span: r <= n
        # rows, the same singular values for every subset.
        _, s, vt = jnp.linalg.svd(unit, full_matrices=False)
        C = s[:, None] * vt
        r = C.shape[0]
        size = jnp.sum(selected).astype(jnp.int32) + 1

        def smallest(j):
            mask = selected.at[j].set(True)
            sv = svdvals(jnp.where(mask[None, :], C, 0.0))
            return jnp.where(size <= r, sv[jnp.clip(size - 1, 0, r - 1)], 0.0)

        sigma_min = jax.vmap(smallest)(jnp.arange(p))
        scores = jnp.where(norms > 0, norms / top * sigma_min, 0.0)
        scores = jnp.where(selected, -jnp.inf, scores)
        return _order_by(scores), scores
