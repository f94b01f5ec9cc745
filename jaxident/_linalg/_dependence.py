"""Which parameters a sensitivity matrix determines, decided by rank under one rule.

Two decisions, both against the threshold `tau` of the rank rule, neither on the
components of a null vector (whose sizes depend on the basis an SVD returns and on the
units of the columns):

1. **No effect.** A column whose norm, in units that make the columns comparable (the
   estimation scale: log-scale parameters are unit-free there; a linear-scale
   parameter's column times its box width), lies below the rule's threshold on those
   norms. It is decided before equilibration, which would blow a column at rounding
   level up to unit norm and drag other parameters into false null directions. Without
   such units only a zero column has no effect.
2. **Membership.** Of the other columns, equilibrated to unit norm, column `i` lies in a
   non-identifiable direction iff its distance to the span of the others is within the
   threshold, `d_i = min_x |a_i - A_{-i} x| <= tau`: moving parameter `i` alone, with the
   best compensation by all others, changes the outputs by no more than the rank rule
   can resolve. `d_i` is the distance of `a_i` to the span of the other columns as the
   rule resolves it (their left singular vectors above `tau`; `1 / sqrt((A^T A)^{-1}_ii)`
   at full rank): no null basis is chosen, so no basis and no change of units moves
   it, exact symmetries and near-null directions are treated alike, and no exact
   dependency among the other columns lets rounding noise stand in for a compensation.

A decision within a factor 10 of its threshold is `near` (the caller re-solves more
accurately, then calls it undecided). Minimal dependent sets follow on the host
(`dependent_sets`): for each pivot, the smallest subset of the basis columns within whose
span the pivot's column lies, by the same distance test.

The first part (`dependence`) is jittable and vmappable; `dependent_sets` is NumPy on
concrete values.
"""

from collections.abc import Iterable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .._runtime._host import array_module
from ._misc import after, column_norms, eps, matmul, reduce_to_square, svdvals, vector_norm
from ._rank import AbstractRankRule, RelativeTolerance


class Dependence(eqx.Module):
    """What the columns of a sensitivity matrix determine (`ji.linalg.dependence`).

    **Fields:**

    - `norms`: the column norms in comparable units (rows weighted as given, each column
      times its `units`), and `effect_threshold` the rule's threshold on them;
      `no_effect`: columns at or below it.
    - `scale`: the column norms by which the others were equilibrated (1 for a
      no-effect column, which is set to zero).
    - `singular_values`: of the equilibrated matrix (no-effect columns zero),
      descending; `rank` and `threshold` (`tau`): the rule's decision on them.
    - `distance`: `d_i`, the distance of each equilibrated column to the span of the
      others as the rule resolves it (0 for a no-effect column).
    - `dependent`: `d_i <= tau` (no-effect columns excluded): the parameter lies in a
      non-identifiable direction.
    - `near`: a decision (`norms` or `distance`) within a factor 10 of its threshold
      (above rounding level): more accurate sensitivities may change it.
    - `R`: the triangular factor of the equilibrated matrix, for `dependent_sets`.

    `non_identifiable` is `no_effect | dependent`.
    """

    norms: Float[Array, " p"]
    effect_threshold: Float[Array, ""]
    no_effect: Bool[Array, " p"]
    scale: Float[Array, " p"]
    singular_values: Float[Array, " p"]
    rank: Int[Array, ""]
    threshold: Float[Array, ""]
    distance: Float[Array, " p"]
    dependent: Bool[Array, " p"]
    near: Bool[Array, " p"]
    R: Float[Array, "p p"]

    @property
    def non_identifiable(self) -> Bool[Array | np.ndarray, "*batch p"]:
        return self.no_effect | self.dependent

    @property
    def nullity(self) -> Int[Array | np.ndarray, "*batch"]:
        """`p - rank`: one null direction per no-effect column and per unresolved
        singular value of the others."""
        return self.distance.shape[-1] - self.rank


def _distance(R: Array, i: Array, tau: Array) -> Array:
    """`|a_i - P a_i|` with `P` the projector onto the left singular vectors of `R`
    without column `i` whose singular values exceed `tau`."""
    others = jnp.where(jnp.arange(R.shape[1]) == i, 0.0, R)
    U, s, _ = jnp.linalg.svd(others, full_matrices=False)
    Q = jnp.where(s > tau, 1.0, 0.0)[None, :] * U
    a = R[:, i]
    return vector_norm(a - matmul(Q, matmul(Q.T, a)))


def _window(x, tau, rounding, factor):
    """`x` within `factor` of `tau` either way, the lower end never below rounding."""
    return (x > jnp.maximum(tau / factor, rounding)) & (x <= factor * tau)


def dependence(
    S: Float[Array, "n p"],
    rank: AbstractRankRule = RelativeTolerance(),
    units: Float[Array, " p"] | None = None,
    row_scale: Float[Array, " n"] | None = None,
    factor: float = 10.0,
) -> Dependence:
    """Decide, by rank under one rule, which columns of `S` have no effect and which lie
    in a non-identifiable direction (module docstring).

    **Arguments:**

    - `S`: an `(n, p)` sensitivity matrix (finite), rows weighted by their noise.
    - `rank`: the rank rule; its `threshold` decides all three questions.
    - `units`: `(p,)`, the size of a unit move of each parameter (1 on a log scale; the
      box width on a linear one), so that the column norms compare. Without them (a
      matrix in unknown units) only a zero column has no effect: a decision on norms
      in arbitrary units would change with the units.
    - `row_scale`: positive scales to divide the rows by first (default none).
    - `factor`: how close to a threshold a decision is `near`.

    **Returns:** a `Dependence`. Jittable and vmappable.
    """
    n, p = S.shape
    if row_scale is not None:
        S = S / row_scale[:, None]
    c = column_norms(S)
    rounding = max(n, p) * eps(c)
    if units is None:  # no comparable units: only a zero column has no effect
        norms = c
        tau_c = jnp.zeros((), c.dtype)
        no_effect = c == 0
        near_c = jnp.zeros(p, bool)
    else:
        norms = c * jnp.abs(units)
        ordered = jnp.sort(norms)[::-1]
        tau_c = rank.threshold(ordered, (n, p))
        no_effect = norms <= tau_c
        near_c = _window(norms, tau_c, rounding * ordered[0], factor)
    scale = jnp.where(no_effect | (c == 0), 1.0, c)
    A = jnp.where(no_effect[None, :], 0.0, S / scale[None, :])
    R = reduce_to_square(A)
    s = svdvals(R)
    k = rank(s, (n, p))
    tau = rank.threshold(s, (n, p))
    R = after(R, s)
    # each column's distance to the span of the others, as the rule resolves it: the
    # other columns' left singular vectors above the threshold (a dependency among them
    # that is exact, or below the threshold, adds no direction, however the SVD
    # rounds it: no huge compensation through rounding noise)
    d = jax.vmap(lambda i: _distance(R, i, tau))(jnp.arange(p))
    d = jnp.where(no_effect, 0.0, d)
    dependent = ~no_effect & (d <= tau)
    near = near_c | (~no_effect & _window(d, tau, rounding * s[0], factor))
    return Dependence(
        norms=norms,
        effect_threshold=tau_c,
        no_effect=no_effect,
        scale=scale,
        singular_values=s,
        rank=k,
        threshold=tau,
        distance=d,
        dependent=dependent,
        near=near,
        R=R,
    )


def near_at_accuracy(dep: Dependence, accuracy: float, factor: float = 10.0) -> Array | np.ndarray:
    """Which decisions of `dep` lie within `factor * accuracy` of their thresholds,
    measured on the scale of the matrix (`accuracy` relative to the largest column norm
    for "no effect", to `sigma_1` for the distances): for sensitivities computed more
    accurately than the threshold asks (re-solved after a decision was `near`), a
    quantity is placed on one side of its threshold once its error cannot reach it."""
    xp = array_module(dep)
    norms, effect, distance, threshold, no_effect = (
        xp.asarray(a)
        for a in (dep.norms, dep.effect_threshold, dep.distance, dep.threshold, dep.no_effect)
    )
    s1 = xp.asarray(dep.singular_values)[..., 0]
    top = xp.max(norms, axis=-1)
    near_c = xp.abs(norms - effect[..., None]) <= factor * accuracy * top[..., None]
    near_c = near_c & (effect[..., None] > 0)
    near_d = xp.abs(distance - threshold[..., None]) <= factor * accuracy * s1[..., None]
    return near_c | (~no_effect & near_d)


# --------------------------------------------------------------------------------------
# Host side: minimal dependent sets (NumPy, concrete values)


def _residual(A: np.ndarray, j: int, G) -> tuple[float, np.ndarray]:
    """`(d_j(A_{G+j}), x)`: the distance of column `j` to the span of the columns `G`
    and the least-squares coefficients."""
    G = list(G)
    if not G:
        return float(np.linalg.norm(A[:, j])), np.zeros(0)
    x = np.linalg.lstsq(A[:, G], A[:, j], rcond=None)[0]
    return float(np.linalg.norm(A[:, j] - A[:, G] @ x)), x


class Circuit(eqx.Module):
    """A minimal dependent set: the `pivot` column lies within the threshold of the span
    of `members` (and of no proper subset of them); `direction` is the null direction
    `e_pivot - sum x_l e_l` (unit norm, equilibrated units) and `residual` its
    `|A v| / |v|`. `involved` are the pivot and those members that are themselves
    non-identifiable (or undecided): a member that the direction needs only with a small
    component, and that moves the outputs above the threshold when it moves alone, is
    part of the direction but identifiable."""

    pivot: int
    members: tuple[int, ...]
    direction: np.ndarray
    residual: float
    involved: tuple[int, ...] = ()

    @property
    def support(self) -> tuple[int, ...]:
        return tuple(sorted((self.pivot, *self.members)))


def circuit(A: np.ndarray, j: int, basis, tau: float) -> Circuit:
    """The minimal subset `G` of `basis` (independent columns of the equilibrated `A`)
    with `d_j(A_{G+j}) <= tau`: the least-squares coefficients of column `j` on the
    basis, their smallest dropped while the distance stays within `tau` (a bisection:
    dropping columns never shrinks it), then each remaining column dropped where it can
    be. In exact arithmetic this is the fundamental circuit of `j`. Where even the whole
    basis leaves `j` farther than `tau`, `G` is the whole basis and `residual` says so."""
    basis = [int(b) for b in basis]
    _, x = _residual(A, j, basis)
    order = [basis[i] for i in np.argsort(np.abs(x), kind="stable")]
    lo, hi = 0, len(order)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _residual(A, j, order[mid:])[0] <= tau:
            lo = mid
        else:
            hi = mid - 1
    G = order[lo:]
    for g in list(G):
        H = [h for h in G if h != g]
        if _residual(A, j, H)[0] <= tau:
            G = H
    r, x = _residual(A, j, G)
    v = np.zeros(A.shape[1])
    v[j] = 1.0
    v[G] = -x
    norm = np.linalg.norm(v)
    return Circuit(
        pivot=int(j),
        members=tuple(sorted(G)),
        direction=v / norm,
        residual=r / norm,
    )


def null_pivots(A: np.ndarray, columns, preferred, nullity: int) -> np.ndarray:
    """`nullity` pivots among `columns` of the equilibrated `A`: the greedy
    rank-revealing choice (column-pivoted QR) on the rows of the null basis of
    `A[:, columns]` (its last `nullity` right singular vectors), taking a `preferred`
    column (one that is itself non-identifiable) wherever one is left with a row
    outside the span of those chosen. The choice depends on the null space only, not
    on the basis an SVD returns for it, and the other columns then form a
    well-conditioned basis."""
    columns = [int(c) for c in columns]
    if nullity <= 0 or not columns:
        return np.zeros(0, dtype=int)
    _, _, Vt = np.linalg.svd(A[:, columns], full_matrices=False)
    rows = Vt[len(columns) - nullity :].T.copy()  # (len(columns), nullity)
    pref = np.array([c in set(int(i) for i in preferred) for c in columns])
    chosen: list[int] = []
    for _ in range(nullity):
        norms = np.linalg.norm(rows, axis=1)
        norms[chosen] = -1.0
        best_pref = np.where(pref, norms, -1.0)
        i = int(np.argmax(best_pref)) if best_pref.max() > 1e-6 else int(np.argmax(norms))
        chosen.append(i)
        q = rows[i] / np.linalg.norm(rows[i])
        rows = rows - np.outer(rows @ q, q)
    return np.asarray([columns[i] for i in chosen], dtype=int)


def dependent_sets(
    dep: Dependence,
    pivots: Sequence[int] | np.ndarray | None = None,
    undecided: Bool[ArrayLike, " p"] | None = None,
) -> tuple[list[Circuit], np.ndarray]:
    """The minimal dependent sets of a single `Dependence` `dep` (concrete values), and which
    parameters are undecided because the decisions do not fit together. A column with
    no effect is a set of its own (no members, its unit vector as direction).

    Without `pivots`, one per null direction the rank leaves among the columns with an
    effect: pivots chosen among the `dependent` columns (`null_pivots`), each with its
    circuit on the basis of the other columns with an effect. A null direction that no
    dependent column can pivot (possible only near the threshold) takes another column
    as pivot, which is then undecided. With `pivots` (e.g. the columns a selection
    rejected), one circuit per pivot that is `dependent`, in their order, on the basis
    of the other columns that are neither pivots nor without effect.

    Undecided are also: the columns `undecided` marks on entry (e.g. decisions near
    their thresholds), a pivot whose circuit leaves its column farther than the
    threshold (its null direction does not verify), and a dependent column in no
    circuit. Undecided columns in a circuit are named in its `involved`.

    **Returns:** `(circuits, undecided)`, the latter a boolean `(p,)` mask.
    """
    R = np.asarray(dep.R, dtype=float)
    tau = float(dep.threshold)
    no_effect = np.asarray(dep.no_effect, bool)
    dependent = np.asarray(dep.dependent, bool)
    p = R.shape[1]
    undecided = np.zeros(p, bool) if undecided is None else np.array(undecided, bool)
    with_effect = np.flatnonzero(~no_effect)
    zero = []
    for i in np.flatnonzero(no_effect) if pivots is None else pivots:
        if no_effect[int(i)]:
            e = np.zeros(p)
            e[int(i)] = 1.0
            zero.append(
                Circuit(pivot=int(i), members=(), direction=e, residual=0.0, involved=(int(i),))
            )
    if pivots is None:
        nullity = with_effect.size - int(dep.rank)
        piv = null_pivots(R, with_effect, np.flatnonzero(dependent), nullity)
        undecided[piv] |= ~dependent[piv]
        left_out = set(int(j) for j in piv)
    else:
        left_out = set(int(j) for j in pivots)
        piv = np.asarray([int(j) for j in pivots if dependent[int(j)]], dtype=int)
    basis = [int(i) for i in with_effect if int(i) not in left_out]
    out = []
    for j in piv:
        c = circuit(R, int(j), basis, tau)
        if c.residual * np.linalg.norm(c.direction / c.direction[c.pivot]) > tau:
            undecided[c.pivot] = True
        named = dependent | undecided
        involved = tuple(sorted(i for i in c.support if named[i]))
        out.append(eqx.tree_at(lambda x: x.involved, c, involved))
    in_sets = set(i for c in out for i in c.involved)
    for i in np.flatnonzero(dependent):
        if int(i) not in in_sets:
            undecided[i] = True
    if pivots is None:
        return zero + out, undecided
    order = {int(j): k for k, j in enumerate(pivots)}
    return sorted(zero + out, key=lambda c: order[c.pivot]), undecided


def components(sets: Iterable[Iterable[int]], p: int) -> list[tuple[int, ...]]:
    """The connected components of overlapping index `sets` (of indices below `p`),
    each sorted, in the order of their smallest index."""
    parent = list(range(p))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    seen = set()
    for s in sets:
        s = list(s)
        seen.update(s)
        for a in s[1:]:
            parent[find(a)] = find(s[0])
    groups: dict[int, list[int]] = {}
    for i in sorted(seen):
        groups.setdefault(find(i), []).append(i)
    return sorted((tuple(g) for g in groups.values()), key=lambda g: g[0])
