"""Profile-likelihood confidence intervals (Raue et al. 2009): from a fit, each
parameter is walked outwards on both sides, the others re-estimated at every value,
until twice the rise of the negative log-likelihood reaches the chi-square quantile;
the crossing is then found by bracketing. An end that the profile never crosses before
the bound is open (the data do not bound the parameter on that side)."""

import warnings
from collections.abc import Sequence

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike
from tqdm.auto import tqdm

from .._model._base import Integrator
from .._model._checks import check_count, check_theta
from .._problem._base import check_problem, Problem
from .._runtime._choice import Choice
from .._runtime._context import clean_errors
from ._multistart import objective
from ._optimizers import AbstractOptimizer, checked_optimizer


class IntervalEnd(Choice):
    """How an interval ends on one side: `crossed` (the profile crosses the threshold
    there), `open` (it stays below the threshold up to the parameter's bound: the end
    is the bound, and the data do not bound the parameter on that side), `at_bound`
    (the estimate itself lies at that bound), `failed` (the fits failed before
    either)."""

    crossed = "crossed"
    open = "open"
    at_bound = "at bound"
    failed = "failed"


class LikelihoodInterval(eqx.Module):
    """A profile-likelihood confidence interval of one parameter (estimation scale).

    **Fields:** `name`, `estimate` (the fit's value), `lower`, `upper` (the ends),
    `lower_end`, `upper_end` (how each side ends: a `ji.IntervalEnd`), `level`, `threshold`
    (the rise of -log L at the ends: half the chi-square quantile with one degree of
    freedom), `values` and `cost` (every profile point computed, sorted: the
    negative log-likelihood with the others re-estimated), `fits`.
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

    @property
    def bounded(self) -> bool:
        """Whether the data bound the parameter on both sides (both ends crossed)."""
        return self.lower_end == IntervalEnd.crossed and self.upper_end == IntervalEnd.crossed

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "estimate": self.estimate,
            "lower": self.lower,
            "upper": self.upper,
            "lower_end": str(self.lower_end.value),
            "upper_end": str(self.upper_end.value),
            "level": self.level,
        }

    def __repr__(self) -> str:
        def end(v, kind):
            return f"{v:.6g}" + ("" if kind == IntervalEnd.crossed else f" ({kind.value})")

        return (
            f"{self.name} = {self.estimate:.6g}, {100 * self.level:g}% profile interval "
            f"[{end(self.lower, self.lower_end)}, {end(self.upper, self.upper_end)}]"
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


class _Side(eqx.Module):
    """The walk to one side: `fit(value, guess) -> (estimates of the others, nll)`."""

    theta: np.ndarray
    j: int
    best: float
    threshold: float
    fit: object
    points: list

    def rise(self, value, guess):
        est, nll = self.fit(value, guess)
        self.points.append((value, nll))
        return est, nll - self.best

    def walk(self, direction: int, step: float, bound: float, max_points: int, xtol: float):
        """The end on this side: `(value, IntervalEnd)`."""
        v0 = float(self.theta[self.j])
        if (bound - v0) * direction <= 0:
            return v0, IntervalEnd.at_bound
        prev_v, prev_r = v0, 0.0
        prev_est = np.delete(self.theta, self.j)
        for _ in range(max_points):
            v = v0 + direction * min(abs(bound - v0), abs(prev_v - v0) + step)
            est, r = self.rise(v, prev_est)
            tries = 0
            while not np.isfinite(r) and tries < 4:  # a failed fit: a shorter step
                step /= 4
                v = prev_v + direction * step
                est, r = self.rise(v, prev_est)
                tries += 1
            if not np.isfinite(r):
                return prev_v, IntervalEnd.failed
            if r >= self.threshold:
                return self._bracket(prev_v, prev_r, prev_est, v, r, xtol), IntervalEnd.crossed
            if v == bound:
                return bound, IntervalEnd.open
            # aim the next step at about a third of the threshold's rise
            gained = r - prev_r
            step = step * (2.0 if gained < self.threshold / 6 else 1.0)
            prev_v, prev_r, prev_est = v, r, est
        return prev_v, IntervalEnd.failed

    def _bracket(self, a, ra, est_a, b, rb, xtol):
        """The crossing of `rise = threshold` between `a` (below) and `b` (above), by
        regula falsi (Illinois) on the profile, each fit from the nearest point below."""
        t = self.threshold
        fa, fb = ra - t, rb - t
        side = 0
        for _ in range(40):
            if abs(b - a) <= xtol:
                break
            c = b - fb * (b - a) / (fb - fa) if fb != fa else 0.5 * (a + b)
            if not (min(a, b) < c < max(a, b)):
                c = 0.5 * (a + b)
            est_c, rc = self.rise(c, est_a)
            fc = rc - t
            if not np.isfinite(fc):
                c = 0.5 * (a + b)
                est_c, rc = self.rise(c, est_a)
                fc = rc - t
                if not np.isfinite(fc):
                    break
            if abs(fc) <= 1e-6 * t:
                return c
            if fc < 0:
                a, fa, est_a = c, fc, est_c
                if side == -1:
                    fb /= 2
                side = -1
            else:
                b, fb = c, fc
                if side == 1:
                    fa /= 2
                side = 1
        return b - fb * (b - a) / (fb - fa) if fb != fa else 0.5 * (a + b)


@clean_errors
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

    Each side is walked from `theta` in steps of about one Wald standard deviation
    (doubled while the profile rises slowly), every fit starting from its neighbour's
    estimate (`optimizer`, default `ji.FisherLM()`, at most `max_steps` steps each);
    the crossing is then bracketed to `xtol` on the estimation scale. A side that
    reaches the bound below the threshold ends there, `open`; a side whose fits fail
    ends `failed` at the last good value. A profile point below the fit's -log L means
    `theta` was not the optimum: a warning says so, and the rise is measured from
    `theta`'s value.

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
    best = float(objective(problem, theta, integrator, derivatives=False))
    if not np.isfinite(best):
        raise ValueError("The model cannot be solved at theta: give the fit's estimate.")
    from scipy.special import chdtri  # (kept out of `import jaxident`)

    threshold = 0.5 * float(chdtri(1, 1.0 - level))  # the chi-square(1) quantile
    var = _wald_variances(problem, theta, integrator)
    out = {}
    for j in tqdm(idx, desc="profile intervals", disable=not progress or len(idx) < 2):
        out[box.names[j]] = _interval(problem, theta, j, var[j], best, threshold, level,
                                      optimizer, integrator, max_steps, max_points,
                                      xtol)  # fmt: skip
    return out


def _interval(problem, theta, j, var, best, threshold, level, optimizer, integrator,
              max_steps, max_points, xtol) -> LikelihoodInterval:  # fmt: skip
    box = problem.parameters
    lo, up = float(box.lower[j]), float(box.upper[j])
    free = np.arange(box.p) != j

    def fit(value, guess):  # (each optimizer clips the start into the bounds)
        start = theta.copy()
        start[j], start[free] = value, guess
        est, nll, *_ = optimizer.fit(problem, start, free, integrator, max_steps)
        return np.asarray(est)[free], float(nll)

    side = _Side(theta, j, best, threshold, fit, [(float(theta[j]), best)])
    step = _first_step(var, up - lo)
    a, a_end = side.walk(-1, step, lo, max_points, xtol)
    b, b_end = side.walk(+1, step, up, max_points, xtol)
    values, cost = map(np.asarray, zip(*sorted(side.points)))
    if np.nanmin(cost) < best - 1e-6 * max(1.0, abs(best)):
        warnings.warn(
            f"The profile of {box.names[j]} found -log L {np.nanmin(cost):.6g} below the "
            f"fit's {best:.6g}: theta is not the optimum; fit again from there.",
            stacklevel=3,
        )
    return LikelihoodInterval(
        name=box.names[j], estimate=float(theta[j]), lower=float(a), upper=float(b),
        lower_end=a_end, upper_end=b_end, level=float(level), threshold=threshold,
        values=values, cost=cost, fits=len(side.points) - 1,
    )  # fmt: skip
