"""Dependency analysis of one Jacobian of outputs with respect to unknowns: its null
space says which quantities the outputs cannot determine, and its pseudo-inverse how
uncertain and correlated the others are (Schumann-Bischoff, Luther & Parlitz 2016,
sections II A and II B).
"""

import itertools
import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._linalg._dependence import Dependence, dependence as _dependence, dependent_sets
from .._linalg._misc import matmul
from .._linalg._rank import (
    AbstractRankRule,
    GivenRank,
    rank_and_threshold,
    RelativeTolerance,
    warn_if_near_threshold,
)
from .._linalg._scaling import equilibrate
from .._runtime._results import RESULTS, succeeded
from .._solve._sensitivity_result import Sensitivity


# --------------------------------------------------------------------------------------
# Dependency analysis of one Jacobian (section II A) and correlations (section II B)


def _pivot_scores(VB: Array, combos: Array) -> Array:
    """`sigma_min(V_B[combo])` for each candidate set of pivot rows. `V_B` is orthonormal,
    so this lies in `[0, 1]` and bounds the entries of `V~_B` by its inverse. (The paper
    ranks by `sigma_min / sigma_max`, which is blind to scale: with `D_N = 1` every row,
    even a vanishing one, scores 1.)"""
    sub = VB[combos]  # (C, D_N, D_N)
    return jnp.linalg.svd(sub, compute_uv=False)[:, -1]


def _transformed_basis(VB: Array, pivots: Array) -> Array:
    """`V~_B = V_B V_B1^{-1}` (eq. 22, rows back in the original order): the basis of the
    null space that is the identity on the pivot rows."""
    VB1 = VB[pivots]
    Vt = jnp.linalg.solve(VB1.T, VB.T).T
    return Vt.at[pivots].set(jnp.eye(pivots.shape[0], dtype=VB.dtype))


def _uncertainty(s: Array, V: Array, c: Array) -> tuple[Array, Array]:
    """Measure of uncertainty `v_k` (eq. 33) and the correlation matrix (eq. 34) from the
    SVD of the equilibrated Jacobian `DG C^{-1} = U S V^T`: `Sigma_w = C^{-1} V S^-2 V^T
    C^{-1}`, so `v_k` is in the units of the unknowns and `rho` is unit-free. A singular
    value that is exactly zero is replaced by `eps^2 * sigma_1`, so a null direction
    shows as a huge, finite `v_k`."""
    floor = jnp.finfo(s.dtype).eps ** 2 * s[0]
    A = V / jnp.maximum(s, floor)[None, :]
    cov = matmul(A, A.T)
    v = jnp.sqrt(jnp.diag(cov))
    rho = cov / (v[:, None] * v[None, :])
    return v / c, jnp.clip(rho, -1.0, 1.0)


class _SVD(eqx.Module):
    """The SVD of the column-equilibrated Jacobian `DG C^{-1}` (so that nullity, null
    basis and zero entries do not depend on the units of the unknowns), with `c`."""

    s: Float[Array, " w"]
    V: Float[Array, "w w"]
    c: Float[Array, " w"]
    result: RESULTS

    @property
    def ok(self):
        return succeeded(self.result)


def _svd_of(DG: Array, equilibrated: bool = True) -> _SVD:
    ok = jnp.all(jnp.isfinite(DG))
    safe = jnp.where(ok, DG, 0.0)
    safe, c = equilibrate(safe) if equilibrated else (safe, jnp.ones(DG.shape[1], DG.dtype))
    rows, cols = DG.shape
    # fewer rows (K x outputs) than unknowns: all n right singular vectors, and zeros for
    # the singular values beyond the rows (those directions are in the null space)
    _, s, Vt = jnp.linalg.svd(safe, full_matrices=rows < cols)
    s = jnp.concatenate([s, jnp.zeros(cols - s.shape[0], s.dtype)])
    nan = jnp.asarray(jnp.nan, DG.dtype)
    result = RESULTS.where(ok, RESULTS.successful, RESULTS.nonfinite_matrix)
    return _SVD(jnp.where(ok, s, nan), jnp.where(ok, Vt.T, nan), c, result)


@eqx.filter_jit
def _svd_kernel(DG: Array, equilibrated: bool) -> _SVD:
    """`_svd_of` as one compiled call (the host layer's arrays are concrete; each of its
    operations would otherwise be compiled on its own)."""
    return _svd_of(DG, equilibrated)


@eqx.filter_jit
def _finish(svd: _SVD, VB: Array, piv: Array):
    """`(V~, v, rho)`: the transformed null basis (eq. 22) and the uncertainties and
    correlations (eqs. 33-34), as one compiled call."""
    # eq. 22 in the units of the unknowns: V~ does not depend on the basis of the null
    # space, so C^{-1} V~_eq C_piv is the paper's V_B V_B1^{-1} of DG itself.
    if piv.shape[0]:
        Vt = _transformed_basis(VB, piv) * svd.c[piv][None, :] / svd.c[:, None]
    else:
        Vt = VB
    v, rho = _uncertainty(svd.s, svd.V, svd.c)
    return Vt, v, rho


_MAX_PIVOT_SETS = 20_000


def _combos(n_w: int, nullity: int, candidates: Sequence[int]) -> np.ndarray:
    return np.asarray(list(itertools.combinations(candidates, nullity)), dtype=int).reshape(
        -1, nullity
    )


# every point's scores as one compiled call (on the host, each operation would be
# compiled on its own)
_all_pivot_scores = jax.jit(jax.vmap(_pivot_scores, in_axes=(0, None)))


def best_pivots(VBs, nullity: int, candidates: Sequence[int]) -> np.ndarray:
    """The `nullity` pivot rows for null bases `VBs` (`(m, n_w, nullity)`, one per point):
    every candidate set scored by the median over the points of `sigma_min(V_B1)` where
    there are at most 20,000 sets; beyond that (tens of non-identifiable parameters),
    the greedy rank-revealing choice: the first `nullity` pivots of a column-pivoted QR
    of the candidate rows of the first basis (`V_B1` then has `sigma_min` within a
    factor `sqrt(nullity (n - nullity) + 1) 2^nullity` of the best, Gu & Eisenstat)."""
    candidates = list(candidates)
    if nullity == 0:
        return np.zeros(0, dtype=int)
    if math.comb(len(candidates), nullity) > _MAX_PIVOT_SETS:
        import scipy.linalg as sl  # (tens of non-identifiable parameters only)

        rows = np.asarray(VBs[0])[candidates]
        perm = sl.qr(rows.T, pivoting=True, mode="r")[1]
        return np.sort(np.asarray(candidates)[perm[:nullity]])
    combos = jnp.asarray(_combos(len(candidates), nullity, candidates))
    scores = _all_pivot_scores(jnp.asarray(VBs), combos)
    return np.asarray(combos)[int(np.argmax(np.median(np.asarray(scores), axis=0)))]


def _candidate_indices(names, candidates) -> list[int]:
    if isinstance(candidates, str):
        candidates = (candidates,)
    unknown = [c for c in candidates if c not in names]
    if unknown:
        raise ValueError(f"Unknown pivot_candidates {unknown}; the quantities are {list(names)}.")
    return [names.index(c) for c in candidates]


def _resolve_pivots(names, pivots, nullity):
    if pivots is None:
        return None
    if isinstance(pivots, str):
        pivots = (pivots,)
    idx = []
    for p in pivots:
        if p not in names:
            raise ValueError(f"Unknown pivot {p!r}; the quantities are {list(names)}.")
        idx.append(names.index(p))
    if len(set(idx)) != len(idx):
        raise ValueError(f"Repeated pivots {list(pivots)}.")
    if len(idx) != nullity:
        raise ValueError(
            f"The null space has dimension {nullity}, so exactly {nullity} pivots are needed; "
            f"got {list(pivots)}."
        )
    return np.asarray(idx, dtype=int)


def dependency_lines(result, basis_label: bool = False) -> list[str]:
    """The report lines shared by `Estimability` and `DelayEstimability`: what is
    estimable, which quantities to fix, and the dependent sets."""
    lines = [f"  locally estimable: {', '.join(result.estimable) or '(none)'}"]
    if result.nullity:
        lines.append(
            f"  fix these {result.nullity} to make the rest estimable: {', '.join(result.pivots)}"
        )
        for k, st in enumerate(result.dependent_sets):
            label = f" (v~{k + 1})" if basis_label else ""
            lines.append(f"  dependent set {k + 1}{label}: {', '.join(st)}")
    return lines


def _fmt_sets(names, mask) -> list[tuple[str, ...]]:
    return [tuple(n for n, m in zip(names, col) if m) for col in np.asarray(mask).T]


def _defaults(dtype, rank, zero_tol):
    eps = float(jnp.finfo(dtype).eps)
    if rank is None:
        rank = RelativeTolerance(max(1e-10, 1e3 * eps))
    if zero_tol is None:
        zero_tol = max(1e-6, 1e3 * eps)
    return rank, zero_tol


class Estimability(eqx.Module):
    """Dependency and correlation analysis of one delay-coordinate Jacobian (or any
    Jacobian of outputs with respect to unknowns), from `ji.estimability`.

    **Fields:**

    - `names`: the unknowns `w` (states, then parameters).
    - `singular_values`, `nullity` (`D_N`), `rank_rule` (how `D_N` was decided).
    - `basis`: the orthonormal null basis `V_B` (`(N_w, D_N)`, the last right singular
      vectors) of the column-equilibrated Jacobian `DG C^{-1}`: every decision (nullity,
      pivots, vanishing components) is taken there, so none depends on the units of the
      unknowns. A null vector in the original units is `C^{-1} v`.
    - `scale`: the column norms `C` of `DG` (the equilibration).
    - `pivots`: the `D_N` quantities whose rows of `V_B` form the best-conditioned
      `V_B1` (or the ones you passed); fixing them makes every other quantity locally
      estimable.
    - `transformed`: `V~_B = V_B V_B1^{-1}` (eq. 22) of `DG` in the units of the
      unknowns, the identity on the pivot rows (its zero entries are decided in
      equilibrated units).
    - `estimable`: the quantities outside every non-identifiable direction. By default
      decided by rank (`ji.linalg.dependence`): a quantity is non-estimable iff its
      equilibrated column lies within the rank rule's threshold of the span of the
      others (`decision`), whatever the basis of the null space; with `zero_tol`
      given (or `equilibrate=False`), the paper's rule: its row of `V_B` vanishes
      (below `zero_tol`).
    - `dependent_sets`: per pivot, the quantities that move together: the minimal set
      whose span the pivot's column lies in (by the same distance test), or with
      `zero_tol` the nonzero entries of that column of `V~_B`.
    - `uncertainty`: `v_k` (eq. 33); `correlation`: Pearson's `rho` (eq. 34).
    - `zero_tol`: the paper's threshold for "vanishing" basis components, or `None`
      where the decisions are by rank; `decision`: the `ji.linalg.Dependence` then.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    singular_values: Float[Array, " w"]
    nullity: int = eqx.field(static=True)
    rank_rule: str = eqx.field(static=True)
    basis: Float[Array, "w n"]
    scale: Float[Array, " w"]
    pivots: tuple[str, ...] = eqx.field(static=True)
    transformed: Float[Array, "w n"]
    uncertainty: Float[Array, " w"]
    correlation: Float[Array, "w w"]
    zero_tol: float | None = eqx.field(static=True)
    decision: Dependence | None = None

    @property
    def estimable(self) -> tuple[str, ...]:
        if self.decision is not None:
            out = np.asarray(self.decision.non_identifiable)
            return tuple(n for n, o in zip(self.names, out) if not o)
        vb = np.abs(np.asarray(self.basis))
        return tuple(n for n, r in zip(self.names, vb) if np.all(r <= self.zero_tol))

    def _circuits(self):
        piv = [self.names.index(n) for n in self.pivots]
        return dependent_sets(self.decision, pivots=piv)[0]

    def _scaled_transformed(self) -> np.ndarray:
        """`V~_B` in equilibrated units (`C V~_B C_pivots^{-1}`), where zero entries are
        decided."""
        c = np.asarray(self.scale)
        piv = [self.names.index(n) for n in self.pivots]
        return np.asarray(self.transformed) * c[:, None] / c[piv][None, :]

    @property
    def dependent_sets(self) -> list[tuple[str, ...]]:
        if self.decision is not None:
            return [tuple(self.names[i] for i in c.involved) for c in self._circuits()]
        vt = np.abs(self._scaled_transformed())
        scale = np.maximum(vt.max(axis=0, keepdims=True), 1.0)
        return _fmt_sets(self.names, vt > self.zero_tol * scale)

    def dependence(self, a: str, b: str) -> list[int]:
        """Per basis vector `v~^(i)`: `+1` if `Delta a > 0` goes with `Delta b > 0` in the
        null space (eq. 26), `-1` if with `Delta b < 0`, `0` if either does not move."""
        i, j = self.names.index(a), self.names.index(b)
        if self.decision is not None:
            signs = {c.pivot: c for c in self._circuits()}
            out = []
            for n in self.pivots:
                c = signs.get(self.names.index(n))
                v = np.zeros(len(self.names)) if c is None else c.direction
                both = i in (c.support if c else ()) and j in (c.support if c else ())
                out.append(int(np.sign(v[i] * v[j])) if both else 0)
            return out
        vt = self._scaled_transformed()
        scale = np.maximum(np.abs(vt).max(axis=0), 1.0)
        nz = np.abs(vt) > self.zero_tol * scale
        return [
            int(np.sign(vt[i, c] * vt[j, c]) * (nz[i, c] & nz[j, c])) for c in range(vt.shape[1])
        ]

    def to_dict(self) -> dict:
        return {
            "names": list(self.names),
            "singular_values": np.asarray(self.singular_values).tolist(),
            "nullity": self.nullity,
            "rank_rule": self.rank_rule,
            "pivots": list(self.pivots),
            "estimable": list(self.estimable),
            "dependent_sets": [list(s) for s in self.dependent_sets],
            "transformed_basis": np.asarray(self.transformed).tolist(),
            "uncertainty": np.asarray(self.uncertainty).tolist(),
            "correlation": np.asarray(self.correlation).tolist(),
        }

    def __repr__(self) -> str:
        s = np.asarray(self.singular_values)
        head = (
            f"Estimability of {len(self.names)} unknowns: nullity {self.nullity} "
            f"({self.rank_rule}), sigma_min/sigma_1 = {s[-1] / s[0]:.2e}"
        )
        return "\n".join([head, *dependency_lines(self)])


def estimability(
    DG: ArrayLike | Sensitivity,
    names: Sequence[str] | None = None,
    *,
    nullity: int | None = None,
    rank: AbstractRankRule | None = None,
    pivots: Sequence[str] | None = None,
    pivot_candidates: Sequence[str] | None = None,
    zero_tol: float | None = None,
    equilibrate: bool = True,
) -> Estimability:
    """Null-space dependency analysis and correlation analysis of a Jacobian `DG` of
    outputs with respect to unknowns (Schumann-Bischoff et al. 2016, section II).

    **Arguments:**

    - `DG`: `(rows, N_w)`, e.g. from `ji.delay_jacobian`, or a `ji.Sensitivity` (which
      brings its names and its accuracy for the default rank rule).
    - `names`: labels of the columns (default `w1..wN`).
    - `nullity`: the null-space dimension `D_N`; default: decided by `rank` (the paper
      calls `sigma_i` zero when `sigma_i / sigma_1 ~ 1e-15`; the default rule,
      `RelativeTolerance(max(1e-10, 1000 eps))`, is `1e-10` in float64, the accuracy of a
      Jacobian from an ODE solve at `rtol = 1e-10`, and `1.2e-4` in float32).
    - `pivots`: the `D_N` quantities defining `V_B1` (eq. 22); default: the set whose
      `V_B1` has the largest `sigma_min / sigma_max` among `pivot_candidates` (default
      all unknowns).
    - `zero_tol`: the paper's rule instead of the default decision by rank: a quantity
      is non-estimable when its row of the orthonormal `V_B` has a component above
      `zero_tol`, and a dependent set holds the entries of a column of `V~_B` above
      `zero_tol` times its largest. By default (`None`) both are decided by rank
      (`ji.linalg.dependence`): non-estimable iff the quantity's equilibrated column
      lies within the rank rule's threshold of the span of the others, and each
      dependent set is the minimal set whose span the pivot's column lies in. The
      size of a null-vector component depends on the basis of the null space and on
      the units; the distance depends on neither.
    - `equilibrate`: `True` (default): the SVD of `DG` with unit column norms, so that
      the nullity, the null basis and its zero entries do not depend on the units of the
      unknowns; `False`: of `DG` as given, the convention of Schumann-Bischoff et al.
      (2016), for reproducing their numbers (with the paper's `zero_tol` rule, default
      `max(1e-6, 1000 eps)`).

    **Returns:** an `Estimability`. With `nullity` given (an int) it is jittable and
    vmappable; otherwise `D_N` is read on the host.
    """
    if isinstance(DG, Sensitivity):
        names = DG.names if names is None else names
        if rank is None:
            rank = RelativeTolerance(accuracy=DG.accuracy)
        DG = DG.matrix
    DG = jnp.asarray(DG)
    if not jnp.issubdtype(DG.dtype, jnp.floating):
        DG = DG.astype(float)
    by_rank = zero_tol is None and bool(equilibrate)
    rank, zero_tol = _defaults(DG.dtype, rank, zero_tol)
    if DG.ndim != 2:
        raise ValueError(f"DG must be a matrix, got shape {DG.shape}.")
    n_w = DG.shape[1]
    names = tuple(f"w{i + 1}" for i in range(n_w)) if names is None else tuple(names)
    if len(names) != n_w:
        raise ValueError(f"{len(names)} names for {n_w} columns.")
    if not isinstance(DG, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(DG))):
        raise ValueError("DG contains NaN or inf (a failed solve?).")
    svd = _svd_kernel(DG, bool(equilibrate))
    if nullity is None:
        if isinstance(DG, jax.core.Tracer):
            raise ValueError("Under jit or vmap, pass nullity=... (an int).")
        nullity = n_w - int(rank_and_threshold(rank, svd.s, DG.shape)[0])
        rule = rank.describe(svd.s, DG.shape)
        warn_if_near_threshold(rank, svd.s, DG.shape, "estimability")
        decide = rank
    else:
        rule = f"nullity {nullity} given"
        decide = None
    if not 0 <= nullity <= n_w:
        raise ValueError(f"nullity must lie in [0, {n_w}], got {nullity}.")
    if decide is None:
        decide = GivenRank(n_w - int(nullity))
    decision = _decide(DG, decide) if by_rank else None
    VB = svd.V[:, n_w - nullity :]
    piv = _resolve_pivots(names, pivots, nullity)
    if piv is None:
        cand = (
            range(n_w) if pivot_candidates is None else _candidate_indices(names, pivot_candidates)
        )
        if nullity and isinstance(VB, jax.core.Tracer):
            raise ValueError("Under jit or vmap, pass pivots=... as well as nullity.")
        if decision is not None and not isinstance(decision.rank, jax.core.Tracer):
            # pivots among the quantities in a null direction
            out = np.asarray(decision.non_identifiable)
            inside = [i for i in cand if out[i]]
            cand = inside if len(inside) >= nullity else cand
        piv = best_pivots(VB[None], nullity, cand)
    Vt, v, rho = _finish(svd, VB, jnp.asarray(piv, dtype=int))
    return Estimability(
        names=names,
        singular_values=svd.s,
        nullity=int(nullity),
        rank_rule=rule,
        basis=VB,
        scale=svd.c,
        pivots=tuple(names[i] for i in piv),
        transformed=Vt,
        uncertainty=v,
        correlation=rho,
        zero_tol=None if by_rank else float(zero_tol),
        decision=decision,
    )


@eqx.filter_jit
def _decide(DG: Array, rule: AbstractRankRule) -> Dependence:
    """The decisions by rank (`ji.linalg.dependence`, no units: only a zero column has
    no effect), as one compiled call."""
    return _dependence(DG, rule)
