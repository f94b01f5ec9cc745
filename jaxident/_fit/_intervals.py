"""Profile-likelihood confidence intervals (Raue et al. 2009): from a fit, each
parameter is walked outwards on both sides, the others re-estimated at every value,
until twice the rise of the negative log-likelihood reaches the chi-square quantile;
the crossing is then found by bracketing. An end that the profile never crosses before
the bound is open (the data do not bound the parameter on that side)."""

import warnings
from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike
from tqdm.auto import tqdm

from .._model._base import Integrator
from .._model._checks import check_count, check_theta
from .._problem._base import check_problem, Problem
from .._runtime._choice import Choice
from ._multistart import objective
from ._optimizers import AbstractOptimizer, checked_optimizer, failure


class IntervalEnd(Choice):
    """How an interval ends on one side: `crossed` (the profile crosses the threshold
    there: the data bound the parameter), `partner` (it crosses there only because a
    re-estimated parameter sits at one of its bounds, named in the interval's
    `lower_partner` / `upper_partner`: with that bound widened the profile stays lower,
    so the end is the box's, not the data's), `open` (it stays below the threshold up to
    the parameter's own bound: the end is the bound), `at_bound` (the estimate itself
    lies at that bound), `failed` (the fits failed before either: the reason is in
    `lower_reason` / `upper_reason`)."""

    crossed = "crossed"
    partner = "at a partner's bound"
    open = "open"
    at_bound = "at bound"
    failed = "failed"


class LikelihoodInterval(eqx.Module):
    """A profile-likelihood confidence interval of one parameter (estimation scale).

    **Fields:** `name`, `estimate` (the fit's value), `lower`, `upper` (the ends),
    `lower_end`, `upper_end` (how each side ends: a `ji.IntervalEnd`), `lower_partner`,
    `upper_partner` (the re-estimated parameter whose bound sets that end, or `None`),
    `lower_reason`, `upper_reason` (why a `failed` end failed, else ""), `level`,
    `threshold` (the rise of -log L at the ends: half the chi-square quantile with one
    degree of freedom), `values` and `cost` (every converged profile point, sorted: the
    negative log-likelihood with the others re-estimated), `fits` (the fits run),
    `failed_points` (profile values whose fits failed from every start, with the
    reasons: `((value, reason), ...)`), `at` (every parameter's value at the fit the
    profile started from: the `theta` given, or the better fit its profiles found).
    **Methods:** `describe(side)`, `ends(digits)` (the ends as text), `to_dict`.
    """

    name: str
    estimate: float
    lower: float
    upper: float
    lower_end: IntervalEnd
    upper_end: IntervalEnd
    level: float
    threshold: float
    values: np.ndarray
    cost: np.ndarray
    fits: int
    lower_partner: str | None = None
    upper_partner: str | None = None
    lower_reason: str = ""
    upper_reason: str = ""
    failed_points: tuple = ()
    at: np.ndarray | None = None

    @property
    def bounded(self) -> bool:
        """Whether the data bound the parameter on both sides (both ends crossed, neither
        set by a partner's bound)."""
        return self.lower_end == IntervalEnd.crossed and self.upper_end == IntervalEnd.crossed

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "estimate": self.estimate,
            "lower": self.lower,
            "upper": self.upper,
            "lower_end": str(self.lower_end.value),
            "upper_end": str(self.upper_end.value),
            "lower_partner": self.lower_partner,
            "upper_partner": self.upper_partner,
            "lower_reason": self.lower_reason,
            "upper_reason": self.upper_reason,
            "level": self.level,
        }

    def describe(self, side: str) -> str:
        """How the `"lower"` or `"upper"` end ended, in words."""
        kind = getattr(self, f"{side}_end")
        if kind == IntervalEnd.partner:
            return f"set by {getattr(self, f'{side}_partner')}'s bound"
        if kind == IntervalEnd.failed:
            return f"failed: {getattr(self, f'{side}_reason')}"
        return "" if kind == IntervalEnd.crossed else str(kind.value)

    def ends(self, digits: int = 6) -> str:
        """`"[lower, upper]"` with `digits` significant digits, each end followed by how
        it ended where it did not cross (`describe`)."""

        def end(side):
            how = self.describe(side)
            return f"{getattr(self, side):.{digits}g}" + (f" ({how})" if how else "")

        return f"[{end('lower')}, {end('upper')}]"

    def __repr__(self) -> str:
        return (
            f"{self.name} = {self.estimate:.6g}, {100 * self.level:g}% profile interval "
            f"{self.ends()}"
        )


def _wald_variances(problem, theta, integrator) -> np.ndarray:
    """Each parameter's variance from the Fisher information at `theta` (NaN where it
    cannot be had), computed once for every interval."""
    _, _, H = objective(problem, theta, integrator, derivatives=True)
    try:
        return np.diag(np.linalg.pinv(H))
    except np.linalg.LinAlgError:
        return np.full(theta.shape, np.nan)


def _first_step(var: float, width: float) -> float:
    """A step of about one Wald standard deviation (`var` the variance), kept between
    1e-3 and 0.1 of the box's width."""
    std = np.sqrt(var) if np.isfinite(var) and var > 0 else 0.1 * width
    return float(np.clip(std, 1e-3 * width, 0.1 * width))


# The walk aims each step at a rise of `_TARGET` times the threshold (about eight points
# a side for a quadratic profile, as Data2Dynamics' adaptive steps aim at a fixed change
# of the likelihood); a step whose rise exceeds `_JUMP` targets and four times the last
# step's (scaled to the step's length) is a jump (`_Walk.side`).
_TARGET = 0.25
_JUMP = 2.0
# A partner's bound sets an end where widening it lowers the rise there by this fraction
# of the threshold.
_PARTNER = 0.1
# A profile point this far below the fit's -log L (or 1e-6 of it) shows a better optimum:
# a decrease no likelihood-based conclusion notices is left to the fits' noise.
_BETTER = 1e-3


class _Point(NamedTuple):
    """A converged profile point: the value, -log L, the others' estimates, which of them
    ended at a bound."""

    value: float
    nll: float
    est: np.ndarray
    bound: np.ndarray


# Starts drawn in the others' box where a jump stays after the shorter steps (another
# branch of the valley, as a flip-flop optimum's, cannot be reached along this one).
_RESTARTS = 4


def restarts(lower, upper, seed: int, n: int = _RESTARTS) -> list[np.ndarray]:
    """`n` Latin-hypercube starts in the box `[lower, upper]` (NumPy, seeded: a profile's
    points are reproducible, and no small programs are compiled for them); none where a
    bound is infinite."""
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        return []
    rng = np.random.default_rng(seed)
    u = (np.argsort(rng.random((n, lower.size)), axis=0) + rng.random((n, lower.size))) / n
    return list(lower + u * (upper - lower))


def extrapolate(a: float, est_a, b: float, est_b, value: float) -> np.ndarray:
    """The others' start at `value` along the line through two profile points `(a,
    est_a)` and `(b, est_b)` (the valley's direction); `est_b` where `a == b`."""
    if a == b:
        return est_b
    return est_b + (est_b - est_a) / (b - a) * (value - b)


def _secant(a, fa, b, fb) -> float:
    """The zero of the line through `(a, fa)` and `(b, fb)` (their middle where flat)."""
    return b - fb * (b - a) / (fb - fa) if fb != fa else 0.5 * (a + b)


class _Better(Exception):
    """A profile point below the fit's -log L: the fit was not the optimum."""

    def __init__(self, theta, nll):
        self.theta, self.nll = theta, nll


class _Walk:
    """The profile of parameter `j` from the fit `theta` (its -log L `best`): every fit
    run, the converged points and the failed values."""

    def __init__(self, problem, theta, j, best, threshold, optimizer, integrator, max_steps):
        self.problem, self.theta, self.j, self.best = problem, theta, j, best
        self.threshold, self.optimizer, self.integrator = threshold, optimizer, integrator
        self.max_steps = max_steps
        self.free = np.arange(theta.size) != j
        box = problem.parameters
        self.lower, self.upper = np.asarray(box.lower, float), np.asarray(box.upper, float)
        # below the fit by more than this is a better optimum (less is the fits' noise)
        self.tol = max(_BETTER, 1e-6 * abs(best))
        self.fits = 0
        self.points = [_Point(float(theta[j]), best, theta[self.free],
                              np.zeros(theta.size - 1, bool))]  # fmt: skip
        self.failed: list[tuple[float, str]] = []

    def fit(self, value, guess, problem=None):
        """One fit of the others at `value` from `guess`: a `_Point` if it converged, else
        `(None, reason)`."""
        start = self.theta.copy()
        start[self.j] = value
        start[self.free] = np.clip(guess, self.lower[self.free], self.upper[self.free])
        problem = self.problem if problem is None else problem
        est, nll, _, result, bound, _ = self.optimizer.fit(
            problem, start, self.free, self.integrator, self.max_steps
        )
        self.fits += 1
        nll, why = float(nll), failure(nll, result, self.max_steps)
        if why:
            return None, why
        est = np.asarray(est, float)
        return _Point(float(value), nll, est[self.free], np.asarray(bound)[self.free]), ""

    def solve(self, value, guesses, every=False):
        """The profile point at `value`: the first converged fit from `guesses` (with
        `every`, the lowest of all of them), or `None` with the last reason."""
        found, reason, tried = None, "", []
        for g in guesses:
            g = np.clip(g, self.lower[self.free], self.upper[self.free])
            if any(np.array_equal(g, t) for t in tried):
                continue
            tried.append(g)
            point, why = self.fit(value, g)
            if point is None:
                reason = why
                continue
            if found is None or point.nll < found.nll:
                found = point
            if not every:
                break
        if found is None:
            self.failed.append((float(value), reason))
            return None, reason
        self.points.append(found)
        if found.nll < self.best - self.tol:
            better = self.theta.copy()
            better[self.j], better[self.free] = found.value, found.est
            raise _Better(better, found.nll)
        return found, ""

    def predict(self, path, value):
        """The others' start at `value`: extrapolated along the path's last two points,
        or the last point's estimate."""
        if len(path) < 2:
            return path[-1].est
        return extrapolate(path[-2].value, path[-2].est, path[-1].value, path[-1].est, value)

    def side(self, direction: int, step: float, bound: float, max_points: int, xtol: float):
        """The end on one side: `(value, IntervalEnd, partner, reason)`."""
        v0 = float(self.theta[self.j])
        if (bound - v0) * direction <= 0:
            return v0, IntervalEnd.at_bound, None, ""
        target, step0 = _TARGET * self.threshold, step
        path, restarted = [self.points[0]], False
        expected, last = 0.0, step  # the last step's rise and length
        for _ in range(max_points):
            prev = path[-1]
            v = prev.value + direction * step
            if (bound - v) * direction <= 0.5 * xtol:
                v = bound  # (exactly: the bound is the end where the profile stays below)
            point, why = self.solve(v, [self.predict(path, v), prev.est])
            if point is None:  # a failed fit: a shorter step
                if step / 4 < xtol:
                    return prev.value, IntervalEnd.failed, None, why
                step /= 4
                continue
            rise = point.nll - prev.nll
            if rise > max(_JUMP * target, 4 * expected * (step / last) ** 2):  # a jump
                if step / 2 >= step0 / 4:  # first shorter steps (a continuation)
                    step /= 2
                    continue
                # where it stays, the point again from the earlier points' and the fit's
                # estimates, and once a side from starts across the box
                guesses = [p.est for p in path[::-1][1:3]] + [self.theta[self.free]]
                if not restarted:
                    restarted = True
                    lo, up = self.lower[self.free], self.upper[self.free]
                    guesses += restarts(lo, up, len(self.points))
                again, _ = self.solve(v, guesses, every=True)
                if again is not None and again.nll < point.nll:
                    point = again
                if point.nll - prev.nll > _JUMP * target and step / 2 >= xtol:
                    step /= 2
                    continue
            path.append(point)
            if point.nll - self.best >= self.threshold:
                return self.cross(prev, point, xtol)
            if v == bound:
                return bound, IntervalEnd.open, None, ""
            expected, last = max(point.nll - prev.nll, 0.0), step
            step *= float(np.clip(target / expected, 0.5, 2.0)) if expected > 0 else 2.0
        why = f"max_points={max_points} profile points before the threshold or the bound"
        return prev.value, IntervalEnd.failed, None, why

    def cross(self, a, b, xtol):
        """The crossing of `rise = threshold` between the points `a` (below) and `b`
        (above), by regula falsi (Illinois), each fit from the interpolation of the two
        sides' estimates; then whether a partner's bound sets it."""
        t = self.best + self.threshold
        fa, fb = a.nll - t, b.nll - t
        side = 0
        for _ in range(40):
            if abs(b.value - a.value) <= xtol:
                break
            c = _secant(a.value, fa, b.value, fb)
            if not (min(a.value, b.value) < c < max(a.value, b.value)):
                c = 0.5 * (a.value + b.value)
            w = (c - a.value) / (b.value - a.value)
            point, _ = self.solve(c, [a.est + w * (b.est - a.est), a.est, b.est])
            if point is None:
                break
            fc = point.nll - t
            if abs(fc) <= 1e-6 * self.threshold:
                a = b = point
                break
            if fc < 0:
                a, fa = point, fc
                if side == -1:
                    fb /= 2
                side = -1
            else:
                b, fb = point, fc
                if side == 1:
                    fa /= 2
                side = 1
        if a is b:
            value = a.value
        else:
            value = _secant(a.value, fa, b.value, fb)
        partner = self.partner(b)
        kind = IntervalEnd.crossed if partner is None else IntervalEnd.partner
        return float(value), kind, partner, ""

    def partner(self, point):
        """The re-estimated parameter whose bound holds the profile up at `point`, or
        `None`: of those at a bound there, the one whose bound, widened by its box's
        width, lowers the rise the most (by at least `_PARTNER` of the threshold)."""
        names = [n for n, f in zip(self.problem.parameters.names, self.free) if f]
        others = np.flatnonzero(self.free)
        found, most = None, _PARTNER * self.threshold
        for k in np.flatnonzero(point.bound):
            i = others[k]
            lo, up = self.lower.copy(), self.upper.copy()
            width = up[i] - lo[i]
            if not np.isfinite(width):
                continue
            if point.est[k] - lo[i] <= up[i] - point.est[k]:
                lo[i] -= width
            else:
                up[i] += width
            wider = eqx.tree_at(lambda p: (p.parameters.lower, p.parameters.upper),
                                self.problem, (jnp.asarray(lo), jnp.asarray(up)))  # fmt: skip
            relaxed, _ = self.fit(point.value, point.est, wider)
            if relaxed is not None and point.nll - relaxed.nll > most:
                found, most = names[k], point.nll - relaxed.nll
        return found


def likelihood_intervals(
    problem: Problem,
    theta: ArrayLike | Sequence[float],
    names: str | Sequence[str] | None = None,
    *,
    level: float = 0.95,
    optimizer: AbstractOptimizer | None = None,
    integrator: Integrator | None = None,
    max_steps: int = 100,
    max_points: int = 50,
    xtol: float = 1e-4,
    progress: bool = True,
) -> dict[str, LikelihoodInterval]:
    """Profile-likelihood confidence intervals (Raue et al. 2009) at a fit `theta` (the
    best fit, `ji.estimate(problem, starts=N).theta`; estimation scales): for each of
    `names` (default every parameter) the set of values whose profile (the negative
    log-likelihood with the others re-estimated) rises above its value at `theta` by
    less than half the chi-square quantile of `level` with one degree of freedom (1.92
    at 95%). Unlike the Fisher information's intervals they follow the likelihood, so
    they are asymmetric where it is, and open where the data do not bound a parameter.

    Each side is walked from `theta` along the valley (as Data2Dynamics' and pyPESTO's
    profiles): every point re-estimates the others (`optimizer`, default
    `ji.FisherLM()`, at most `max_steps` steps) from the path's extrapolation, then
    from its neighbour's estimate; a point counts only where its fit converged at the
    value reported (else it is in `failed_points` with the reason, and the step is
    shortened). The steps adapt to a rise of a quarter of the threshold each (the first
    about one Wald standard deviation); a step that rises more than twice that and more
    than four times the last step's (scaled to its length) is a jump: it is shortened,
    down to a quarter of the first step, and where the jump stays the point is solved
    again from the earlier points' and the fit's estimates (once a side also from four
    Latin-hypercube starts across the box) and shortened while it stays, so that a fit
    left in a higher valley (where a partner reached its bound, say) does not pass for
    the profile. The crossing is bracketed to
    `xtol` on the estimation scale. Each end says how it ended (`ji.IntervalEnd`):
    crossed; set by a partner's bound (the parameter at a bound there whose bound,
    widened, lowers the rise by a tenth of the threshold or more: named); open at the
    parameter's own bound; the estimate at its bound; failed, with the reason (a side
    whose fits fail, or that uses `max_points` points). A profile point below the fit's
    -log L (by more than 1e-3) means `theta` was not the optimum: every parameter is
    fitted again from there, a warning says so, and the intervals start again from the
    new fit (their `estimate`s its values, their `at` the whole fit).

    **Arguments:** `problem` (a `ji.Problem`), `theta`, `names`, `level` (default 0.95),
    `integrator` (default the model's), `optimizer`, `max_steps`, `max_points` (per
    side), `xtol`, `progress` (a progress bar over the parameters).

    **Returns:** `{name: ji.LikelihoodInterval}` (ends, how each ends, every profile
    point computed); `ji.plot.intervals` draws them.
    """
    check_problem(problem, "ji.likelihood_intervals")
    if not (isinstance(level, float | int) and 0 < level < 1) or isinstance(level, bool):
        raise ValueError(f"level must lie in (0, 1), got {level!r}.")
    check_count("max_steps", max_steps)
    check_count("max_points", max_points)
    if isinstance(xtol, bool) or not (isinstance(xtol, float | int) and 0 < xtol < np.inf):
        raise ValueError(f"xtol must be a positive number, got {xtol!r}.")
    theta = np.asarray(check_theta(problem, theta), dtype=float)
    box = problem.parameters
    lower, upper = np.asarray(box.lower, float), np.asarray(box.upper, float)
    outside = (theta < lower) | (theta > upper)
    if outside.any():
        raise ValueError(
            f"theta lies outside the bounds for {[n for n, o in zip(box.names, outside) if o]}."
        )
    names = box.names if names is None else (names,) if isinstance(names, str) else names
    idx = [box.index(n) for n in names]
    optimizer = checked_optimizer(optimizer)
    integrator = problem.model.integrator if integrator is None else integrator
    from scipy.special import chdtri  # (kept out of `import jaxident`)

    threshold = 0.5 * float(chdtri(1, 1.0 - level))  # the chi-square(1) quantile
    for _ in range(_REFITS + 1):
        best = float(objective(problem, theta, integrator, derivatives=False))
        if not np.isfinite(best):
            raise ValueError("The model cannot be solved at theta: give the fit's estimate.")
        var = _wald_variances(problem, theta, integrator)
        out = {}
        try:
            for j in tqdm(idx, desc="profile intervals", disable=not progress or len(idx) < 2):
                walk = _Walk(problem, theta, j, best, threshold, optimizer, integrator, max_steps)
                out[box.names[j]] = _interval(walk, var[j], level, max_points, xtol)
            return out
        except _Better as found:
            theta = _refit(problem, found, optimizer, integrator, max_steps)
            warnings.warn(
                f"The profile of {box.names[j]} found -log L {found.nll:.6g} below the fit's "
                f"{best:.6g}: theta was not the optimum. Refitted from there (-log L "
                f"{float(objective(problem, theta, integrator, derivatives=False)):.6g}); the "
                "intervals are those of the new fit, their `estimate`s its values.",
                stacklevel=3,
            )
    raise RuntimeError(
        f"The profiles found a better optimum {_REFITS + 1} times over: fit the problem from "
        "more starts (ji.estimate(problem, starts=...)) and give its best theta."
    )


# How often the intervals start again from a better optimum their profiles found.
_REFITS = 3


def _refit(problem, found, optimizer, integrator, max_steps) -> np.ndarray:
    """The fit of every parameter from the better profile point `found`; the point
    itself where the fit does not improve on it."""
    free = np.ones(found.theta.size, bool)
    est, nll, *_ = optimizer.fit(problem, found.theta, free, integrator, max_steps)
    est, nll = np.asarray(est, float), float(nll)
    return est if np.isfinite(nll) and nll <= found.nll else found.theta


def _interval(walk: _Walk, var, level, max_points, xtol) -> LikelihoodInterval:
    j = walk.j
    lo, up = float(walk.lower[j]), float(walk.upper[j])
    step = _first_step(var, up - lo)
    a, a_end, a_partner, a_why = walk.side(-1, step, lo, max_points, xtol)
    b, b_end, b_partner, b_why = walk.side(+1, step, up, max_points, xtol)
    lowest = {}  # (a value solved again from more starts keeps its lowest fit)
    for p in walk.points:
        lowest[p.value] = min(p.nll, lowest.get(p.value, np.inf))
    values, cost = (np.asarray(x, float) for x in zip(*sorted(lowest.items())))
    return LikelihoodInterval(
        name=walk.problem.parameters.names[j], estimate=float(walk.theta[j]), lower=float(a),
        upper=float(b), lower_end=a_end, upper_end=b_end, level=float(level),
        threshold=walk.threshold, values=values, cost=cost, fits=walk.fits,
        lower_partner=a_partner, upper_partner=b_partner, lower_reason=a_why,
        upper_reason=b_why, failed_points=tuple(walk.failed), at=walk.theta.copy(),
    )  # fmt: skip
