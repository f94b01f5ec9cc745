"""`ji.analyze`: the complete identifiability answer for a model or a problem in one
call: the numerical rank and its margin, every parameter in a non-identifiable
direction grouped into dependent sets, the identifiable combinations (monomials read
off the null space on the log scale, linear combinations otherwise), the column subset
selection with its metrics, and practical identifiability from the noise model."""

import math
import warnings
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from .._fit._profile import profile_problem
from .._identify._css import select_parameters
from .._identify._estimability import estimability
from .._linalg._css._srrqr import StrongRRQR
from .._linalg._rank import (
    _decision,
    AbstractRankRule,
    near_threshold,
    NearThresholdWarning,
    RelativeTolerance,
    support_threshold,
    with_accuracy,
)
from .._model._base import AbstractModel
from .._model._checks import check_theta
from .._problem._base import Experiment, from_scale, Problem
from .._problem._predict import problem_sensitivity
from .._problem._scale import Scale
from ._result import decades, Group, Report


def _components(sets: Sequence[Sequence[str]], names: Sequence[str]) -> list[tuple[str, ...]]:
    parent = {n: n for n in names}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for s in sets:
        for a in s[1:]:
            parent[find(a)] = find(s[0])
    groups: dict[str, list[str]] = {}
    for s in sets:
        for a in s:
            groups.setdefault(find(a), [])
    for n in names:
        if find(n) in groups:
            groups[find(n)].append(n)
    return [tuple(g) for g in groups.values()]


def _integer_vector(v: np.ndarray, max_den: int = 24) -> np.ndarray | None:
    """`v` up to scale as a vector of small integers, or None when it is not one."""
    v = v / np.abs(v).max()
    fr = [Fraction(float(x)).limit_denominator(max_den) for x in v]
    lcm = 1
    for f in fr:
        lcm = lcm * f.denominator // math.gcd(lcm, f.denominator)
    ints = np.array([int(f * lcm) for f in fr])
    if np.abs(ints / np.abs(ints).max() - v).max() > 1e-6:
        return None
    return ints // np.gcd.reduce(np.abs(ints[ints != 0]))


def _complement(N: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the complement of the columns of `N` (`g x d`)."""
    U = np.linalg.svd(N, full_matrices=True)[0]
    return U[:, N.shape[1] :]


def _echelon(A: np.ndarray) -> np.ndarray:
    """The reduced row echelon form of a full-row-rank `A` (partial pivoting)."""
    A = A.copy()
    r = 0
    for c in range(A.shape[1]):
        if r == A.shape[0]:
            break
        i = r + int(np.argmax(np.abs(A[r:, c])))
        if abs(A[i, c]) < 1e-8 * np.abs(A).max():
            continue
        A[[r, i]] = A[[i, r]]
        A[r] /= A[r, c]
        for j in range(A.shape[0]):
            if j != r:
                A[j] -= A[j, c] * A[r]
        r += 1
    return A


def _combinations(names, N, monomial: bool, log_units: bool):
    """What the data determine about a group with null directions `N` (`g x d`, log
    units where `log_scale`): monomials `prod theta_i^a_i` with small integers `a`
    orthogonal to every null direction, else linear combinations."""

    g, d = N.shape
    if g == d:
        return (), None
    if monomial:
        rows = [_integer_vector(r) for r in _echelon(N.T)]
        if all(r is not None for r in rows):
            M = np.array([[int(x) for x in r] for r in rows])
            # two bases of the same lattice, from the parameters in their order and in
            # reverse (the echelon form frees the last variables): the one with fewer divisions
            # reads best (`N*k, I*k, S*k` rather than `S/I, S/N, S*k`)
            bases = [_monomial_basis(M, N, order) for order in (np.arange(g), np.arange(g)[::-1])]
            bases = [b for b in bases if b is not None]
            if bases:
                best = min(bases, key=lambda b: int(np.sum(b < 0)))
                return tuple(_monomial(names, a) for a in best), best
    texts = []
    for c in _complement(N).T:
        c = c / np.abs(c).max()
        log = "log " if log_units else ""
        terms = " ".join(f"{x:+.3g} {log}{n}" for n, x in zip(names, c) if abs(x) > 1e-6)
        texts.append(f"locally {terms}")
    return tuple(texts), None


def rational_null_space(M) -> list[list[Fraction]]:
    """A basis of the null space of the integer matrix `M` in exact rationals: from its
    reduced row echelon form (unique), one vector per free column, 1 there and minus the
    pivot rows' entries at the pivot columns (the basis sympy's `Matrix.nullspace`
    gives)."""
    A = [[Fraction(int(x)) for x in row] for row in np.asarray(M)]
    n = np.shape(M)[1]
    pivots: list[int] = []
    for c in range(n):
        r = len(pivots)
        p = next((i for i in range(r, len(A)) if A[i][c] != 0), None)
        if p is None:
            continue
        A[r], A[p] = A[p], A[r]
        A[r] = [x / A[r][c] for x in A[r]]
        for i in range(len(A)):
            if i != r and A[i][c] != 0:
                f = A[i][c]
                A[i] = [a - f * b for a, b in zip(A[i], A[r])]
        pivots.append(c)
    basis = []
    for free in (c for c in range(n) if c not in pivots):
        v = [Fraction(0)] * n
        v[free] = Fraction(1)
        for row, c in enumerate(pivots):
            v[c] = -A[row][free]
        basis.append(v)
    return basis


def _monomial_basis(M, N, order):
    """Integer exponent vectors spanning the null space of the integer matrix `M` (the
    monomials orthogonal to the null directions `N`), computed with the columns in
    `order`; `None` if one is not orthogonal to `N` (rounding in `M`)."""
    out = []
    for b in rational_null_space(M[:, order]):
        den = math.lcm(*(x.denominator for x in b))
        a = np.zeros(len(order), dtype=int)
        a[order] = [int(x * den) for x in b]
        a = a // np.gcd.reduce(np.abs(a[a != 0]))
        if a[np.flatnonzero(a)[0]] < 0:
            a = -a
        if np.abs(N.T @ a).max() > 1e-6 * np.linalg.norm(a):
            return None
        out.append(a)
    return np.array(out, dtype=int)


def _monomial(names, a) -> str:
    def power(n, k):
        return n if k == 1 else f"{n}^{k}"

    num = [power(n, k) for n, k in zip(names, a) if k > 0]
    den = [power(n, -k) for n, k in zip(names, a) if k < 0]
    top = "*".join(num) if num else "1"
    if not den:
        return top
    bottom = den[0] if len(den) == 1 else "(" + "*".join(den) + ")"
    return f"{top}/{bottom}"


def _log_columns(S, th, scales):
    """`S` with each column on the log scale of its parameter (a column scaling: rank,
    null-space support and selection do not change; null vectors become exponents),
    and which columns could be (a parameter at 0 on a linear scale stays linear)."""
    lin = from_scale(th, scales)
    log_ok = np.array([sc != Scale.lin or v != 0 for sc, v in zip(scales, lin)])
    col = [Scale(sc).per_log_unit(v) if ok else 1.0 for sc, v, ok in zip(scales, lin, log_ok)]
    return S * np.asarray(col)[None, :], log_ok


def _null_log_units(est) -> np.ndarray:
    N = np.asarray(est.basis) / np.asarray(est.scale)[:, None]
    return N / np.linalg.norm(N, axis=0, keepdims=True)


def _moved(problem, th, size: float = 1.0):
    """A second point, each parameter moved by 10-25% (times `size`; deterministic),
    inside its bounds."""
    rng = np.random.default_rng(0)
    lo, up = np.asarray(problem.parameters.lower), np.asarray(problem.parameters.upper)
    out = []
    for t, sc, a, b in zip(th, problem.scales, lo, up):
        f = size * rng.uniform(0.1, 0.25) * rng.choice([-1, 1])
        if sc == Scale.log10:
            v = t + f * math.log10(math.e)
        else:
            v = t + f if sc == Scale.log else t * (1 + f)
        if t == 0 and sc == Scale.lin:
            v = f
        if not a <= v <= b:
            v = t - (v - t)
        out.append(v if a <= v <= b else t)
    return np.asarray(out)


def _practical(S, th, scales, keep, rank, threshold):
    """Standard deviations (estimation units) and weak directions from the Fisher
    information `S^T S` of the columns `keep`, in decades of each parameter.

    The SVD of the equilibrated columns (never `S^T S`, which squares the condition
    number and rounds a small eigenvalue to zero or below) splits the directions into
    those the rank rule resolves and those it does not. The covariance is the inverse on
    the resolved subspace; a parameter with a component above the noise level
    (`support_threshold`) in an unresolved direction has std inf, and one below it is
    not touched by that direction: a near-null direction never spreads inf to every
    parameter."""
    p = len(th)
    std = np.full(p, np.inf)
    if not keep:
        return std, []
    per_decade = decades(np.ones(p), th, scales)
    G = np.where(per_decade > 0, 1 / per_decade, 1.0)[keep]  # estimation units per decade
    A = S[:, keep] * G[None, :]  # columns in decades
    c = np.linalg.norm(A, axis=0)
    c = np.where(c > 0, c, 1.0)
    _, s, Vt = np.linalg.svd(A / c, full_matrices=True)
    s = np.concatenate([s, np.zeros(len(keep) - s.size)])
    k = int(_decision(rank, s, A.shape)[0]) if s[0] > 0 else 0
    W = Vt[:k].T / s[:k] / c[:, None]  # covariance = W W^T, in decades
    dec = np.sqrt(np.sum(W**2, axis=1))
    unresolved = np.linalg.norm(Vt[k:].T, axis=1) if k < len(keep) else np.zeros(len(keep))
    dec[unresolved > support_threshold(rank, s, A.shape)] = np.inf
    std[keep] = dec * G
    weak = []
    P, sd, _ = np.linalg.svd(W, full_matrices=False)  # covariance eigen-directions
    for j in range(k):
        if sd[j] > threshold:
            v = np.zeros(p)
            v[keep] = P[:, j]
            weak.append((1 / sd[j], float(sd[j]), v))
    for j in range(k, len(keep)):
        v = np.zeros(p)
        v[keep] = Vt[j] / c
        weak.append((float(s[j]), math.inf, v / np.linalg.norm(v)))
    # a direction's sign is the SVD's choice: its largest component is made positive, so
    # that a report reads the same whatever LAPACK (or a GPU) computed it
    return std, [(a, b, v if v[np.argmax(np.abs(v))] > 0 else -v) for a, b, v in weak]


def analyze(
    target: Problem | AbstractModel,
    theta=None,
    *,
    rank: AbstractRankRule | None = None,
    method=StrongRRQR(),
    threshold: float = 1.0,
    sigma=None,
    integrator=None,
    name: str | None = None,
    profile: bool = False,
    progress: bool = True,
) -> Report:
    """The complete identifiability report of a model or a problem at `theta`.

    **Arguments:**

    - `target`: a `ji.Problem` (several experiments, a noise model, parameters on their
      estimation scales; e.g. from `ji.petab.load`) or a model (one experiment at
      `model.times`, without data; with `sigma`, a scalar, one per output or one per
      datum `(n_times, n_outputs)`, as its noise model, else sigma = 1; for a
      relative error model, build a `ji.Problem` with the data).
    - `theta`: the parameters (on the estimation scale for a problem); default nominal.
    - `rank`: the rank rule (default `RelativeTolerance` at the accuracy of the
      sensitivities); `method`: the column subset selection (default `StrongRRQR()`).
    - `threshold`: in decades: an identifiable parameter whose standard deviation
      exceeds it (one decade by default, i.e. a 1-sigma interval wider than a factor 10
      either way) is flagged as practically non-identifiable. A parameter at 0 on a
      linear scale has no size to measure decades by: its standard deviation is
      reported as it is, and not flagged.
    - `sigma`: for a model, its noise model (see `target`); without it every datum has
      sigma = 1 and the standard deviations, and so the practical verdicts, scale with
      the true noise level (the report says so).
    - `integrator`: a `ji.Integrator` for the sensitivities (default the model's; a
      smaller `rtol` gives more accurate sensitivities where a decision is a close call).
    - `name`: the report's title (default the problem's or the model's name).
    - `progress`: a progress bar for the profiles.

    Non-identifiable directions are found on the log scale of each parameter (for a
    parameter estimated on a linear scale, the column is multiplied by its value). A
    group whose null directions there are the same at a second point (each parameter
    moved by 10-25%, or less where the model cannot be solved there) is a scaling
    symmetry: `prod theta_i^a_i` cannot be determined
    for a null vector `a`, and the monomials orthogonal to every null vector can
    (`beta*I0`, `k1*V`), reported with small integer exponents. Otherwise the group's
    identifiable linear combinations (of the log parameters) at `theta` are reported.

    - `profile`: confirm each practically non-identifiable parameter by its profile
      likelihood (`ji.profile_problem`, 9 values over `threshold` decades either side,
      the others re-estimated in their bounds): confirmed when twice the negative
      log-likelihood stays within 3.84 (the 95% chi-square quantile, one degree of
      freedom) of its minimum over the range.

    **Returns:** a `Report`.
    """
    if isinstance(target, Problem):
        problem = target
        noise_model = True
    else:
        noise_model = sigma is not None
        times = np.asarray(target.times)
        problem = Problem(target, Experiment(times, sigma=1.0 if sigma is None else sigma))
    if isinstance(threshold, bool) or not (isinstance(threshold, (int, float)) and threshold > 0):
        raise ValueError(f"threshold must be a positive number of decades, got {threshold!r}.")
    sens = problem_sensitivity(problem, theta, integrator=integrator)
    S = np.asarray(sens.matrix)
    names = problem.parameters.names
    th = np.asarray(check_theta(problem, theta), dtype=float)
    rank = with_accuracy(RelativeTolerance() if rank is None else rank, sens.accuracy)
    S_log, log_ok = _log_columns(S, th, problem.scales)
    with warnings.catch_warnings():  # one decision, one warning (below)
        warnings.simplefilter("ignore", NearThresholdWarning)
        est = estimability(S_log, names, rank=rank)
        selection = select_parameters(sens, method=method, rank=rank)
    p = len(names)
    k = p - est.nullity
    s = np.asarray(est.singular_values)
    rel = s / s[0] if s[0] > 0 else s
    margin = float(s[k - 1] / s[k]) if 0 < k < p and s[k] > 0 else math.inf
    near, near_msg = near_threshold(rank, s, S_log.shape)
    if near:
        warnings.warn(
            f"analyze: the numerical rank is close to the threshold ({near_msg}); a change "
            "of the tolerance or more accurate sensitivities (integrator=ji.Integrator(..., "
            "rtol=...)) may change the decision.",
            NearThresholdWarning,
            stacklevel=2,
        )
    non_id = tuple(n for n in names if n not in est.estimable)
    groups = []
    if est.nullity:
        N = _null_log_units(est)
        # A scaling symmetry (theta_i -> c^a_i theta_i) has the same null direction on
        # the log scale everywhere: compare with the null space at a second point
        # (each parameter moved by up to 25%, on its estimation scale).
        P2 = None
        for size in (1.0, 0.2, 0.04):  # smaller moves where the model cannot be solved
            th2 = _moved(problem, th, size)
            sens2 = problem_sensitivity(problem, th2, integrator=integrator, throw=False)
            if not bool(sens2.ok):
                continue
            S2 = np.asarray(sens2.matrix)
            V2 = np.linalg.svd(_log_columns(S2, th2, problem.scales)[0] / est.scale[None, :])[2]
            P2 = V2[p - est.nullity :].T  # the null space there, equilibrated units
            break
        for g in _components(est.dependent_sets, names):
            idx = [names.index(n) for n in g]
            U, sv, _ = np.linalg.svd(N[idx], full_matrices=False)
            d = int(np.sum(sv > 1e-8 * max(sv.max(), 1e-300)))
            Ng = U[:, :d]
            # the group's null directions, back in equilibrated units, must lie in the
            # null space at the second point
            full = np.zeros((p, d))
            full[idx] = Ng * np.asarray(est.scale)[idx, None]
            full /= np.linalg.norm(full, axis=0, keepdims=True)
            off = np.inf if P2 is None else np.linalg.norm(full - P2 @ (P2.T @ full))
            symmetric = bool(np.all(log_ok[idx]) and off < 1e-4)
            texts, exps = _combinations(g, Ng, symmetric, bool(np.all(log_ok[idx])))
            groups.append(Group(tuple(g), Ng, texts, exps is not None, exps))
    # practical identifiability: the Fisher information with the non-identifiable
    # parameters held fixed, on the subspace the rank rule resolves
    keep = [i for i, n in enumerate(names) if n not in non_id]
    std, weak = _practical(S, th, problem.scales, keep, rank, threshold)
    g = decades(np.ones(p), th, problem.scales)
    g = np.where(g > 0, 1 / g, 1.0)  # estimation units per decade
    dec_std = decades(std, th, problem.scales)
    profiles = {}
    if profile:
        for n in [names[i] for i in range(p) if names[i] not in non_id and dec_std[i] > threshold]:
            i = names.index(n)
            values = th[i] + np.linspace(-1.0, 1.0, 9) * threshold * g[i]
            lo, up = problem.parameters.lower[i], problem.parameters.upper[i]
            values = np.clip(values, float(lo), float(up))
            profiles[n] = profile_problem(
                problem, n, np.unique(values), theta0=th, integrator=integrator, progress=progress
            )
    return Report(
        name=name or problem.name or type(problem.model).__name__,
        names=names,
        theta=th,
        scales=problem.scales,
        singular_values=rel,
        rank=int(k),
        rank_rule=est.rank_rule,
        margin=margin,
        non_identifiable=non_id,
        groups=tuple(groups),
        selection=selection,
        std=std,
        threshold=float(threshold),
        weak_directions=tuple(weak),
        noise_model=noise_model,
        n_data=int(S.shape[0]),
        near_threshold=near_msg if near else None,
        profiles=profiles,
    )
