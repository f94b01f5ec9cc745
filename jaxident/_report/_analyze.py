"""`ji.analyze`: the complete identifiability answer for a model or a problem in one
call: the numerical rank and its margin, the parameters without effect on the outputs,
every parameter in a non-identifiable direction grouped into minimal dependent sets, the
identifiable combinations (monomials read off the null directions on the log scale,
linear combinations otherwise), the column subset selection with its metrics, and
marginal uncertainties from the noise model. Every decision is the rank rule's
(`ji.linalg.dependence`); a decision within a factor 10 of its threshold is taken again
on sensitivities solved 100 times more accurately, and called undecided if it is still
that close."""

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from .._fit._profile import profile as profile_likelihood
from .._identify._css import select_parameters
from .._linalg._combinations import linear_combinations, monomial_exponents
from .._linalg._covariance import equilibrated, marginal, principal_directions, thin_svd
from .._linalg._css._base import AbstractColumnSelectionMethod
from .._linalg._css._srrqr import StrongRRQR
from .._linalg._dependence import components, dependence, dependent_sets, near_at_accuracy
from .._linalg._rank import (
    AbstractRankRule,
    near_threshold,
    NearThresholdWarning,
    rank_and_threshold,
    RelativeTolerance,
    with_accuracy,
)
from .._linalg._selection import Selection
from .._model._base import AbstractModel, Integrator
from .._model._checks import check_theta
from .._problem._base import Experiment, from_scale, Problem
from .._problem._predict import estimation_units, problem_sensitivity
from .._problem._scale import Scale
from .._runtime._config import answering_once
from .._solve._rosenbrock import Rodas4
from .._solve._sensitivity_result import Sensitivity
from ._result import decades, Group, Report
from ._structure import (
    box,
    Direction,
    FINER,
    Finer,
    generic_check,
    generic_evidence,
    measure,
    measured,
    POINTS,
    size,
)


def _combinations(names, N, monomial: bool, log_units: bool):
    """What the data determine about a group with null directions `N` (`g x d`, log
    units where `monomial`), as text: monomials where the directions are small integers
    (then also their exponents), else linear combinations."""
    g, d = N.shape
    if g == d:
        return (), None
    exps = monomial_exponents(N) if monomial else None
    if exps is not None:
        return tuple(_monomial(names, a) for a in exps), exps
    log = "log " if log_units else ""
    texts = []
    for c in linear_combinations(N):
        terms = " ".join(f"{x:+.3g} {log}{n}" for n, x in zip(names, c) if abs(x) > 1e-6)
        texts.append(f"{terms} near theta")
    return tuple(texts), None


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


def _rows(problem: Problem, sens) -> np.ndarray:
    """Row scales for a problem without a noise model (sigma = 1): each row by the RMS
    value of its output over the data, so that no change of an output's units changes
    a decision."""
    which = np.nonzero(np.asarray(problem.observed))[2]
    y = np.asarray(sens.outputs)[: which.size]
    scale = np.ones(np.asarray(sens.matrix).shape[0])
    for o in np.unique(which):
        rms = math.sqrt(float(np.mean(y[which == o] ** 2)))
        scale[: which.size][which == o] = rms if rms > 0 and math.isfinite(rms) else 1.0
    return scale


def _tolerances(integrator, factor: float = 1.0):
    """The integrator with its tolerances as arrays (traced in the compiled solve, so
    that a re-solve at other tolerances reuses its compilation), `factor` times tighter
    (rtol never below 1e-13)."""
    rtol = max(float(integrator.rtol) / factor, 1e-13)
    if integrator.atol is None:  # (relative to each state's size, from rtol)
        return eqx.tree_at(lambda i: i.rtol, integrator, jnp.asarray(rtol, dtype=float))
    atol = float(integrator.atol) * rtol / float(integrator.rtol)
    as_array = (jnp.asarray(rtol, dtype=float), jnp.asarray(atol, dtype=float))
    return eqx.tree_at(lambda i: (i.rtol, i.atol), integrator, as_array)


def _decide(problem, th, integrator, rank, method, noise_model, throw=True):
    """The sensitivities at `th` and every decision on them: the selection, whose
    `dependence` holds the rank, 'no effect' and membership (one rule, one matrix);
    `None` where the solve fails and `throw` is off. The default rule (`rank` `None`,
    or `RelativeTolerance()`) decides at the accuracy of these sensitivities; a rule
    that knows an accuracy keeps it (a re-solve decides at the first solve's)."""
    sens = problem_sensitivity(problem, th, integrator=integrator, throw=throw)
    if not bool(sens.ok):
        return None
    rule = with_accuracy(RelativeTolerance() if rank is None else rank, sens.accuracy)
    with warnings.catch_warnings():  # one decision, one warning (in analyze)
        warnings.simplefilter("ignore", NearThresholdWarning)
        sel = select_parameters(
            _weighted(problem, sens, noise_model),
            problem.parameters.names,
            method=method,
            rank=rule,
            units=estimation_units(problem, th),
        )
    return sens, rule, sel


def _group_directions(circuits, g, scale, plu):
    """The null directions of the circuits in group `g` (index tuple), on the log scale
    of each parameter (`plu`: estimation units per log unit, 1 where a parameter stays
    linear), restricted to the group and orthonormal (`len(g) x d`)."""
    V = np.stack([c.direction for c in circuits if set(c.involved) <= set(g)], axis=1)
    W = (V / scale[:, None] / plu[:, None])[list(g)]
    Q, R = np.linalg.qr(W)
    return Q[:, np.abs(np.diag(R)) > 1e-12 * np.abs(R).max()]


def _symmetric(problem, th, integrator, rule, groups_log, log_ok):
    """Per group (its null directions on the log scale, `p x d`), whether they are null
    directions at a second point too (each parameter moved by 10-25%, less where the
    model cannot be solved there): a scaling symmetry, `theta_i -> c^a_i theta_i`, has
    the same null directions on the log scale everywhere."""
    if not groups_log:
        return []
    for move in (1.0, 0.2, 0.04):
        th2 = _moved(problem, th, move)
        sens2 = problem_sensitivity(problem, th2, integrator=integrator, throw=False)
        if bool(sens2.ok):
            break
    else:
        return [False] * len(groups_log)
    A, c = equilibrated(_log_columns(np.asarray(sens2.matrix), th2, problem.scales)[0])
    s = thin_svd(A, compute_uv=False)
    tau = float(rank_and_threshold(rule, s, A.shape)[1]) if s.size and s[0] > 0 else 0.0
    out = []
    for W, idx in groups_log:
        ok = bool(np.all(log_ok[list(idx)]))
        for w in W.T:
            v = w * c
            ok = ok and float(np.linalg.norm(A @ v)) <= tau * float(np.linalg.norm(v))
        out.append(ok)
    return out


def analyze(
    target: Problem | AbstractModel,
    theta: ArrayLike | dict | Sequence | None = None,
    *,
    rank: AbstractRankRule | None = None,
    method: AbstractColumnSelectionMethod = StrongRRQR(),
    threshold: float = 1.0,
    sigma: float | ArrayLike | None = None,
    integrator: Integrator | None = None,
    name: str | None = None,
    profile: bool = False,
    progress: bool = True,
    generic: bool | None = None,
    generic_points: int = POINTS,
) -> Report:
    """The complete identifiability report of a model or a problem at `theta`.

    **Arguments:**

    - `target`: a `ji.Problem` (several experiments, a noise model, parameters on their
      estimation scales; e.g. from `ji.petab.load`) or a model (one experiment at
      `model.times`, without data; with `sigma`, a scalar, one per output or one per
      datum `(n_times, n_outputs)`, as its noise model, else sigma = 1, and each
      output's rows scaled by its RMS value for the decisions; for a relative error
      model, build a `ji.Problem` with the data).
    - `theta`: the parameters (on the estimation scale for a problem); default nominal.
    - `rank`: the rank rule (default `RelativeTolerance` at the accuracy of the
      sensitivities); `method`: the column subset selection (default `StrongRRQR()`).
    - `threshold`: in decades: an identifiable parameter whose marginal standard
      deviation exceeds it (one decade by default, i.e. a 1-sigma interval wider than a
      factor 10 either way) is flagged as practically non-identifiable. A parameter at
      (or within 1e-9 of its box width of) 0 on a linear scale has no size to measure
      decades by: its standard deviation is reported as it is, and not flagged.
    - `sigma`: for a model, its noise model (see `target`); without it every datum has
      sigma = 1 and the standard deviations, and so the practical verdicts, scale with
      the true noise level (the report says so).
    - `integrator`: a `ji.Integrator` for the sensitivities (default the model's).
    - `name`: the report's title (default the problem's or the model's name).
    - `progress`: a progress bar for the profiles.

    **How it decides** (all by the rank rule's threshold `tau`, `ji.linalg.dependence`):

    - *No effect*: a column whose norm on the estimation scale (times the box width
      for a linear-scale parameter) is below `tau` times the largest.
    - *Non-identifiable*: a parameter whose equilibrated column lies within `tau` of
      the span of the others (moving it alone, with the best compensation, changes the
      outputs by no more than the rank rule resolves). Its minimal dependent sets, the
      null directions (as many as `p - rank`, each checked) and the identifiable
      combinations follow. No threshold on the components of a null vector, whose sizes
      depend on the SVD's basis and the units.
    - *Undecided*: where a decision sits within a factor 10 of its threshold, the
      sensitivities are solved again at 100 times tighter tolerances (`rtol / 100`)
      and the decisions taken again; a parameter whose decision is still that close is
      undecided at this accuracy, never called identifiable.

    A group whose null directions on the log scale are null directions at a second
    point too (each parameter moved by 10-25%, or less where the model cannot be solved
    there) is a scaling symmetry: `prod theta_i^a_i` cannot be determined for a null
    vector `a`, and the monomials orthogonal to every null vector can (`beta*I0`,
    `k1*V`), reported with small integer exponents. Otherwise the group's identifiable
    linear combinations (of the log parameters) at `theta` are reported.

    **Structural or weak.** Below the threshold live two different things: a structural
    non-identifiability (null at every point) and a real but tiny effect (a fast
    reversible binding, a saturation far from its constant), which symbolic tools
    (STRIKE-GOLDD, StructuralIdentifiability.jl) call identifiable. A null direction is
    *structural* where it is exact (its singular value at rounding level and a scaling
    symmetry at the second point, or a column without any effect) or, for a close call,
    where sensitivities solved 100 times more accurately show no real effect (a value
    10 times their accuracy, or the same in both solves while the matrix moved more)
    and it is null at every point of a Latin-hypercube sample of the box (8 points, the
    same rank rule). Otherwise it is *weak* (`Report.weakly_identifiable`): structurally
    identifiable, not from data of this precision; its standard deviations are finite.
    Each verdict says why (`Report.evidence`, `Group.evidence`).

    - `generic`: `None` (default): the checks for close calls only; `True`: for every
      null direction, the exact ones too (a direction exact here can be resolved far
      away in the box); `False`: none (every null direction structural, at this point).
    - `generic_points`: the size of the sample of the box.

    The standard deviations are marginal: from the pseudo-inverse of the Fisher
    information on the subspace the rank resolves and the weak directions, every
    identifiable combination free to move; infinite for the structurally
    non-identifiable parameters (they lie in null directions).

    - `profile`: confirm each practically non-identifiable parameter by its profile
      likelihood (`ji.profile`, 9 values over `threshold` decades either side, the
      others re-estimated in their bounds): confirmed when twice the negative
      log-likelihood stays within 3.84 (the 95% chi-square quantile, one degree of
      freedom) of its minimum over the range.

    **Returns:** a `Report`.
    """
    problem, noise_model = _as_problem(target, sigma)
    _check_arguments(threshold, generic, generic_points)
    th = np.asarray(check_theta(problem, theta), dtype=float)
    names = problem.parameters.names
    p = len(names)
    base = _tolerances(
        _for_one_answer(problem.model.integrator if integrator is None else integrator)
    )
    with answering_once():
        decided = _decisions(problem, th, base, rank, method, noise_model)
    rule, sel = decided.rule, decided.selection
    dep = sel.dependence
    S = np.asarray(decided.sens.matrix)
    k = int(dep.rank)
    s = np.asarray(dep.singular_values)
    p_effect = p - int(np.sum(np.asarray(dep.no_effect)))
    margin = float(s[k - 1] / s[k]) if 0 < k < p_effect and s[k] > 0 else math.inf
    near, near_msg = near_threshold(rule, s, S.shape)
    if near:
        _warn_near(near_msg)
    circuits, undecided = dependent_sets(dep, undecided=decided.near)
    zero_column, member = np.asarray(dep.no_effect), np.asarray(dep.dependent)
    no_effect = zero_column & ~undecided
    with answering_once():
        found = _structure(
            problem, th, base, decided, noise_model, circuits, undecided, generic, generic_points
        )
    groups, weak, evidence, checked = found.groups, found.weak, found.evidence, found.checked
    decided_out = (no_effect | (member & ~undecided)) & ~weak
    # marginal uncertainties on the resolved subspace and the weak directions (real:
    # finite); inf in the structural null directions
    std, W = marginal(S, np.flatnonzero(~zero_column | weak), k + found.n_weak)
    std = np.where((zero_column | member) & ~weak, np.inf, std)
    units = estimation_units(problem, th)
    per_decade = decades(np.ones(p), th, problem.scales)
    usable = ~(zero_column | member | undecided | weak) & np.isfinite(
        decades(np.ones(p), th, problem.scales, units)
    )
    weak_directions = principal_directions(W, per_decade, usable, threshold)
    flagged = usable & (decades(std, th, problem.scales, units) > threshold)
    profiles = {}
    if profile:
        profiles = _profiles(problem, th, flagged, per_decade, threshold, integrator, progress)
    return Report(
        name=name or problem.name or type(problem.model).__name__,
        names=names,
        theta=th,
        scales=problem.scales,
        singular_values=s / s[0] if s[0] > 0 else s,
        rank=k,
        rank_rule=rule.describe(s, S.shape),
        margin=margin,
        non_identifiable=tuple(n for n, o in zip(names, decided_out) if o),
        groups=tuple(groups),
        selection=sel,
        std=std,
        threshold=float(threshold),
        weak_directions=tuple(weak_directions),
        noise_model=noise_model,
        n_data=int(S.shape[0]),
        near_threshold=near_msg if near else None,
        profiles=profiles,
        no_effect=tuple(n for n, z in zip(names, no_effect & ~weak) if z),
        undecided=tuple(n for n, u in zip(names, undecided) if u),
        units=units,
        accuracy=decided.first.accuracy,
        resolved_rtol=decided.resolved,
        distance=np.asarray(dep.distance) / float(dep.threshold)
        if float(dep.threshold) > 0
        else np.asarray(dep.distance),
        null_directions=tuple(
            _log_direction(c.direction, np.asarray(dep.scale), found.plu) for c in circuits
        ),
        weakly_identifiable=tuple(n for n, w in zip(names, weak) if w),
        evidence=evidence,
        checked=checked,
    )


def _check_arguments(threshold, generic, generic_points) -> None:
    if isinstance(threshold, bool) or not (isinstance(threshold, (int, float)) and threshold > 0):
        raise ValueError(f"threshold must be a positive number of decades, got {threshold!r}.")
    if generic is not None and not isinstance(generic, bool):
        raise ValueError(f"generic must be True, False or None, got {generic!r}.")
    if isinstance(generic_points, bool) or not (
        isinstance(generic_points, (int, np.integer)) and generic_points >= 1
    ):
        raise ValueError(f"generic_points must be a positive integer, got {generic_points!r}.")


def _warn_near(near_msg: str) -> None:
    warnings.warn(
        f"analyze: the numerical rank is close to the threshold ({near_msg}); a change "
        "of the tolerance or more accurate sensitivities (integrator=ji.Integrator(..., "
        "rtol=...)) may change the decision.",
        NearThresholdWarning,
        stacklevel=3,
    )


class _Structure(NamedTuple):
    groups: list  # structural groups, then weak ones (`Group.structural`)
    weak: np.ndarray  # the weakly identifiable parameters
    evidence: dict  # {name: why} for each structurally non-identifiable one
    checked: dict  # what telling them apart cost (Report.checked)
    n_weak: int  # the weak null directions (real: resolved by the standard deviations)
    plu: np.ndarray  # estimation units per log unit of each parameter


def _structure(problem, th, base, decided, noise_model, circuits, undecided, generic, points):
    """Every null direction of the decisions at `th`, structural or weak
    (`_structure` module): exact ones (at rounding level, and a scaling symmetry at a
    second point) are structural; for the rest the sensitivities are solved `FINER` times
    more accurately and decided again 10 times above every small value that is not a
    real effect (`Finer.threshold`): what resolves there is weak, what is still null is
    checked over a Latin-hypercube sample of the box (null at every point: structural)."""
    names, p = problem.parameters.names, problem.parameters.p
    dep, rule = decided.selection.dependence, decided.rule
    plu, log_ok = _per_log_unit(problem, th)
    units = estimation_units(problem, th)
    zero = np.asarray(dep.no_effect) & ~undecided
    out = (np.asarray(dep.dependent) & ~undecided) | zero  # non-identifiable at the threshold
    found = _groups(problem, th, base, rule, circuits, np.asarray(dep.scale), plu, log_ok)
    groups, dirs, sym = _with_no_effect(names, zero, *found)
    S_here = _weighted(problem, decided.sens, noise_model)
    here = measure(S_here, rule, units)
    exact = [size(here, d) <= here.rounding and s for d, s in zip(dirs, sym)]
    checked = {"finer": None, "points": (0, 0)}
    if generic is False or (generic is None and all(exact)):
        why = ["exact: " + _EXACT[d.no_effect] if e else _OFF for d, e in zip(dirs, exact)]
        verdicts = [(True, size(here, d), w) for d, w in zip(dirs, why)]
        return _assembled(names, out, undecided, groups, dirs, verdicts, [], checked, 0, plu)
    matrix = _matrix_at(problem, th, base, noise_model)
    if decided.resolved is not None and decided.resolved > 0:  # already solved finer
        fine = (S_here, units, float(decided.sens.accuracy), float(decided.resolved))
        first = measure(_weighted(problem, decided.first, noise_model), rule, units)
    else:
        fine, first = matrix(None, FINER), here
    weak_groups = []
    if fine is not None:  # decided again where the finer solve shows real effects
        S_f, _, acc, checked["finer"] = fine
        fine_m = here if S_f is S_here else measure(S_f, rule, units)
        finer = Finer(first, fine_m, acc, float(base.rtol), checked["finer"])
        frule = RelativeTolerance(accuracy=finer.threshold())
        fdep = dependence(jnp.asarray(S_f), frule, units=jnp.asarray(units))
        fcirc, fund = dependent_sets(fdep)
        fzero = np.asarray(fdep.no_effect) & ~fund
        found = _groups(problem, th, base, rule, fcirc, np.asarray(fdep.scale), plu, log_ok)
        fgroups, fdirs, fsym = _with_no_effect(names, fzero, *found)
        still = {names.index(n) for g in fgroups for n in g.names}
        if any(out[i] and i not in still for i in np.flatnonzero(fund)):
            # a finer decision that does not fit the others: the first groups stay
            fgroups, fdirs, fsym, still = groups, dirs, sym, set(np.flatnonzero(out))
        for d, g in zip(dirs, groups):  # resolved by the finer decisions: real effects
            real = tuple(n for n in g.names if names.index(n) not in still and out[names.index(n)])
            if real:
                weak_groups.append((_part(g, real), size(finer.fine, d), finer.why(d)))
        groups, dirs, sym = fgroups, fdirs, fsym
        here = measured(fdep, S_f)
        exact = [size(here, d) <= here.rounding and s for d, s in zip(dirs, sym)]
    check = [i for i, e in enumerate(exact) if generic or not e]
    lo, up = box(problem.parameters.lower, problem.parameters.upper, th, problem.scales)
    resolved, solved = [], 0
    if check:
        resolved, solved = generic_check([dirs[i] for i in check], matrix, (lo, up), rule, points)
        checked["points"] = (solved, points)
    verdicts = [(True, size(here, d), "exact: " + _EXACT[d.no_effect]) for d in dirs]
    for i, r in zip(check, resolved):
        s = size(here, dirs[i])
        verdicts[i] = (not r or solved == 0, s, generic_evidence(s, r, solved, points))
    n_struct = sum(d.count for d, v in zip(dirs, verdicts) if v[0])
    n_weak = max(0, p - int(dep.rank) - n_struct)
    return _assembled(
        names, out, undecided, groups, dirs, verdicts, weak_groups, checked, n_weak, plu
    )


def _with_no_effect(names, zero, groups, dirs, sym):
    """The groups, directions and symmetries with each parameter without effect first,
    a group of its own."""
    alone = np.flatnonzero(zero)
    return (
        [_alone(names[i]) for i in alone] + list(groups),
        [Direction((int(i),), 1, True) for i in alone] + list(dirs),
        [True] * alone.size + list(sym),
    )


_EXACT = {
    True: "no effect at all, to rounding",
    False: "a scaling symmetry, null to rounding here and at a second point",
}
_OFF = "at this point (the check over the box was off)"


def _assembled(names, out, undecided, groups, dirs, verdicts, weak_groups, checked, n_weak, plu):
    """The `_Structure` of groups with their directions and verdicts `(structural, size,
    evidence)` and the weak groups found by the finer decisions `(group, size,
    evidence)`: parameters that are non-identifiable at the threshold (`out`) and not
    undecided. A structural parameter without effect is named in `Report.no_effect`, not
    as a group."""
    weak = np.zeros(len(names), bool)
    evidence, final = {}, []
    for g, d, (structural, s, why) in zip(groups, dirs, verdicts):
        kept = tuple(n for n in g.names if out[names.index(n)])
        if not kept:
            continue
        g = _part(g, kept)
        if not (structural and d.no_effect):
            final.append(dataclasses.replace(g, structural=structural, size=s, evidence=why))
        for n in kept:
            if structural:
                evidence[n] = why
            elif not undecided[names.index(n)]:
                weak[names.index(n)] = True
    for g, s, why in weak_groups:
        final.append(dataclasses.replace(g, structural=False, size=s, evidence=why))
        weak[[names.index(n) for n in g.names]] = True
    final.sort(key=lambda g: not g.structural)
    return _Structure(final, weak, evidence, checked, n_weak, plu)


def _alone(name: str) -> Group:
    """A parameter without effect as a group of its own."""
    return Group((name,), np.ones((1, 1)), (), False, None)


def _part(g: Group, kept: tuple[str, ...]) -> Group:
    """The group `g` restricted to the parameters `kept` (its combinations only where
    all are kept)."""
    if kept == g.names:
        return g
    rows = [g.names.index(n) for n in kept]
    return Group(kept, np.asarray(g.directions)[rows], (), False, None)


def _weighted(problem, sens, noise_model) -> np.ndarray:
    """The sensitivities with the rows the decisions take: noise-weighted, or each
    output's rows by its RMS value without a noise model."""
    S = np.asarray(sens.matrix)
    return S if noise_model else S / _rows(problem, sens)[:, None]


def _matrix_at(problem, th, base, noise_model):
    """`matrix(theta, factor)` for `_structure.generic_check`: the weighted sensitivities at
    `theta` (`th` where `None`) solved `factor` times more accurately than `base`, the
    estimation units there, their accuracy and rtol; `None` where the solve fails."""

    def matrix(theta, factor):
        at = th if theta is None else np.asarray(theta, dtype=float)
        integ = base if factor == 1 else _tolerances(base, factor)
        sens = problem_sensitivity(problem, at, integrator=integ, throw=False)
        if not bool(sens.ok) or not np.all(np.isfinite(np.asarray(sens.matrix))):
            return None
        rtol = float(integ.rtol)
        acc = 10 * rtol if sens.accuracy is None else float(sens.accuracy)
        return _weighted(problem, sens, noise_model), estimation_units(problem, at), acc, rtol

    return matrix


def _for_one_answer(integrator: Integrator) -> Integrator:
    """The integrator of the report's few solves, compiled for an answer computed once
    (with `answering_once`: without LLVM's passes): a Rosenbrock solver's stages as a
    loop where the choice was left to it (`unroll=None`): a report's first call is
    dominated by compilation, which this shortens more than the slower solves cost."""
    solver = integrator.solver
    if isinstance(solver, Rodas4) and solver.unroll is None:
        return eqx.tree_at(
            lambda i: i.solver, integrator, dataclasses.replace(solver, unroll=False)
        )
    return integrator


def _as_problem(target, sigma):
    """The API edge: `(problem, noise_model)`; a model alone is one experiment at its
    own times without data, its noise `sigma` (else 1, and no noise model)."""
    if isinstance(target, Problem):
        return target, True
    sigma_ = 1.0 if sigma is None else sigma
    return Problem(target, Experiment(np.asarray(target.times), sigma=sigma_)), sigma is not None


class _Decided(NamedTuple):
    sens: Sensitivity  # the sensitivities the decisions were taken on
    rule: AbstractRankRule
    selection: Selection  # its `dependence` holds every decision
    resolved: float | None  # the re-solve's rtol (negative: it failed); None: none
    near: np.ndarray  # the decisions still within reach of their threshold
    first: Sensitivity  # the first solve (`sens` itself where no re-solve was taken)


def _decisions(problem, th, base, rank, method, noise_model) -> _Decided:
    """Every decision at `th`, taken again on sensitivities solved 100 times more
    accurately where one is within reach of its threshold."""
    sens, rule, sel = _decide(problem, th, base, rank, method, noise_model)
    if not (np.any(np.asarray(sel.dependence.near)) and sens.accuracy is not None):
        return _Decided(sens, rule, sel, None, np.asarray(sel.dependence.near), sens)
    # the same threshold (the question asked), on sensitivities with more digits: a
    # quantity that was near it because of the solver's error moves away from it; one
    # that is truly of its size stays near it (undecided)
    finer = _tolerances(base, 100.0)
    again = _decide(problem, th, finer, rule, method, noise_model, throw=False)
    if again is None:  # the finer solve failed: the first decisions stand
        near = np.asarray(sel.dependence.near)
        return _Decided(sens, rule, sel, -float(finer.rtol), near, sens)
    first, (sens, rule, sel) = sens, again
    near = np.asarray(near_at_accuracy(sel.dependence, sens.accuracy))
    return _Decided(sens, rule, sel, float(finer.rtol), near, first)


def _per_log_unit(problem, th):
    """Each parameter's estimation units per log unit, and whether it has a log (a
    linear-scale parameter at 0 has none)."""
    lin = from_scale(th, problem.scales)
    log_ok = np.array([sc != Scale.lin or v != 0 for sc, v in zip(problem.scales, lin)])
    plu = np.array(
        [Scale(sc).per_log_unit(v) if ok else 1.0 for sc, v, ok in zip(problem.scales, lin, log_ok)]
    )
    return plu, log_ok


def _groups(problem, th, base, rule, circuits, scale, plu, log_ok):
    """The non-identifiable groups (connected dependent sets), each with its null
    directions on the log scale and what the data still determine about it; with each
    group's `Direction` (the columns of its dependent sets, its number of directions)
    and whether it is a scaling symmetry at a second point."""
    names, p = problem.parameters.names, problem.parameters.p
    dependent = [c for c in circuits if c.members]
    index_groups = components([c.involved for c in dependent], p)
    groups_log = [(_group_directions(dependent, g, scale, plu), g) for g in index_groups]
    symmetric = _symmetric(problem, th, base, rule, _groups_full(groups_log, p), log_ok)
    groups, directions = [], []
    for (Ng, g), sym in zip(groups_log, symmetric):
        gnames = tuple(names[i] for i in g)
        texts, exps = _combinations(gnames, Ng, sym, bool(np.all(log_ok[list(g)])))
        groups.append(Group(gnames, Ng, texts, exps is not None, exps))
        columns = sorted({i for c in dependent if set(c.involved) <= set(g) for i in c.support})
        directions.append(Direction(tuple(columns), int(Ng.shape[1]), False))
    return groups, directions, symmetric


def _profiles(problem, th, flagged, per_decade, threshold, integrator, progress):
    """The profile likelihood of each `flagged` parameter over `threshold` decades
    either side of `th` (9 values, clipped to its bounds)."""
    out = {}
    units = np.where(per_decade > 0, 1 / per_decade, 1.0)  # estimation units per decade
    for i in np.flatnonzero(flagged):
        n = problem.parameters.names[i]
        values = th[i] + np.linspace(-1.0, 1.0, 9) * threshold * units[i]
        lo, up = problem.parameters.lower[i], problem.parameters.upper[i]
        values = np.clip(values, float(lo), float(up))
        out[n] = profile_likelihood(
            problem, n, np.unique(values), theta0=th, integrator=integrator, progress=progress
        )
    return out


def _groups_full(groups_log, p):
    """The groups' directions as `p`-vectors (zero outside the group)."""
    out = []
    for Ng, g in groups_log:
        W = np.zeros((p, Ng.shape[1]))
        W[list(g)] = Ng
        out.append((W, g))
    return out


def _log_direction(v, scale, plu):
    """A null direction from equilibrated units to the log scale of each parameter,
    unit norm, its largest component positive."""
    w = v / scale / plu
    w = w / np.linalg.norm(w)
    return w if w[np.argmax(np.abs(w))] > 0 else -w
