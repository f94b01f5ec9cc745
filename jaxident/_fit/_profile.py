"""Profile likelihood: hold a parameter on a grid, re-estimate the others by the
multi-start engine's fit (`ji.estimate`'s optimizer); a model with data is a problem
(`Problem.from_model`)."""

from collections.abc import Sequence

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike
from tqdm.auto import tqdm

from .. import plot
from .._model._base import Integrator
from .._model._checks import check_count, check_theta
from .._problem._base import check_problem, Problem
from .._runtime._results import RESULTS, status_array, succeeded
from ._intervals import extrapolate, restarts
from ._optimizers import AbstractOptimizer, checked_optimizer, failure


class Profile(eqx.Module):
    """The result of `ji.profile`: one parameter held at each of `values`, the others
    re-estimated.

    **Fields:** `name` (the profiled parameter), `values`, `names` (the re-estimated
    ones), `estimates` (`(n_values, p - 1)`), `cost` (`(n_values,)`: the negative
    log-likelihood), `result` (`ji.RESULTS` per value: `fit_failed` where the fit did
    not converge at its value; those points' `estimates` and `cost` are NaN; `ok` is
    where it did), `reasons` (why each failed, "" where it converged).

    **Methods:** `slope`, `to_dict`, `plot` (the profile and the re-estimated
    parameters).
    """

    name: str = eqx.field(static=True)
    values: np.ndarray
    names: tuple[str, ...] = eqx.field(static=True)
    estimates: np.ndarray
    cost: np.ndarray
    result: RESULTS
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> np.ndarray:
        """Which points' fits converged at their value."""
        return succeeded(self.result)

    def slope(self, at: float | None = None) -> dict[str, float]:
        """`d(estimate)/d(profiled value)` of each re-estimated parameter by central
        differences of the profile at the point nearest `at` (default the middle): the
        local direction of dependence."""
        x = np.asarray(self.values)
        i = len(x) // 2 if at is None else int(np.argmin(np.abs(x - at)))
        i = min(max(i, 1), len(x) - 2)
        d = (self.estimates[i + 1] - self.estimates[i - 1]) / (x[i + 1] - x[i - 1])
        return dict(zip(self.names, d.tolist()))

    def plot(self, **kwargs):
        return plot.profile(self, **kwargs)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "values": np.asarray(self.values).tolist(),
            "names": list(self.names),
            "estimates": np.asarray(self.estimates).tolist(),
            "cost": np.asarray(self.cost).tolist(),
            "ok": np.asarray(self.ok).tolist(),
            "reasons": list(self.reasons),
        }

    def __repr__(self) -> str:
        x = np.asarray(self.values)
        return (
            f"Profile of {self.name} over [{x.min():.4g}, {x.max():.4g}] ({x.size} values, "
            f"{int((~self.ok).sum())} failed); re-estimated: {', '.join(self.names)}; "
            f"cost in [{np.nanmin(self.cost):.3g}, {np.nanmax(self.cost):.3g}]"
        )


def profile(
    problem: Problem,
    name: str | Sequence[str] | None = None,
    values: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    integrator: Integrator | None = None,
    max_steps: int = 100,
    progress: bool = True,
    optimizer: AbstractOptimizer | None = None,
) -> "Profile | dict[str, Profile]":
    """The profile likelihood (Raue et al. 2009; Schumann-Bischoff et al. 2016, Figs. 9
    and 18): hold the parameter `name` at each of `values` and re-estimate all the others
    in their bounds, by the multi-start engine's fit (`ji.estimate(problem)`'s, noise
    parameters, Laplace noise and observable transformations included; one compilation
    for every value). The walk starts at the value nearest `theta0[name]` (default the
    nominal values; `theta0=fit.theta` profiles at a fit) and moves outwards, each fit
    starting from its neighbour's estimate. `optimizer`: how each fit steps
    (`ji.estimate`'s; default `ji.FisherLM()`).

    - `problem`: a `ji.Problem`; a model with data becomes one by
      `ji.Problem.from_model(model, data, times, sigma)`.
    - `name`: one parameter, several, or `None` for every one.
    - `values`: the grid on the parameter's estimation scale (default 15 values across
      its bounds).
    - `integrator`: default the model's; `max_steps`: of each fit; `progress`: a progress
      bar over the values.

    **Returns:** a `Profile` for one name (its `cost` the negative log-likelihood; a
    failed fit is NaN with `ok = False`, not an error), else `{name: Profile}`.

    **Example:**

    ```python
    aug = ji.free_initial_state(ji.models.load("colpitts"))
    problem = ji.Problem.from_model(aug, data, times)
    prof = ji.profile(problem, "p4", jnp.linspace(5.5, 7.0, 16))
    prof.slope()   # {'x1': ..., 'p1': < 0, 'p2': < 0, 'p3': ~ 0}
    ```
    """
    check_problem(problem, "ji.profile")
    check_count("max_steps", max_steps)
    names = problem.parameters.names if name is None else name
    one = isinstance(names, str)
    optimizer = checked_optimizer(optimizer)
    out = {
        n: _profile(problem, n, values, theta0, integrator, max_steps, progress, optimizer)
        for n in ([names] if one else names)
    }
    return out[names] if one else out


def _grid(values) -> np.ndarray:
    values = np.asarray(values, dtype=float).reshape(-1)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("values must be a non-empty array of finite numbers.")
    return np.sort(values)


def _walk(values, at, guess0, name, progress, fit, box):
    """The profile walk: from the value nearest `at` outwards, each fit (`fit(value,
    guess) -> (estimates, cost, reason)`, `reason` "" where it converged) starting from
    the extrapolation of the last two points along the valley, then from its neighbour's
    estimate; a step that rises by more than `_JUMP` is approached again in halves
    (`_reach`); then `_mend`."""
    start = int(np.argmin(np.abs(values - at)))
    est = np.full((values.size, guess0.size), np.nan)
    cost = np.full(values.size, np.nan)
    reasons = ["not computed"] * values.size
    bar = tqdm(total=values.size, desc=f"profile {name}", disable=not progress)
    for order in (range(start, values.size), range(start - 1, -1, -1)):
        path = [start] if order.start < start and not reasons[start] else []
        for i in order:
            guesses = [guess0] if not path else [est[path[-1]]]
            if len(path) > 1:
                a, b = path[-2], path[-1]
                guesses.insert(0, extrapolate(values[a], est[a], values[b], est[b], values[i]))
            for g in guesses:
                e, c, why = fit(values[i], g)
                if not why:
                    break
            if path and cost[path[-1]] - np.nanmin(cost) < _FAR:
                k = path[-1]
                e, c, why = _reach(fit, values[k], est[k], cost[k], values[i], (e, c, why))
            reasons[i] = why
            if not why:
                est[i], cost[i] = e, c
                path.append(i)
            bar.update()
    bar.close()
    _mend(values, est, cost, reasons, fit, box)
    return est, cost, np.array([not r for r in reasons]), tuple(reasons)


# Neighbouring profile points whose -log L differ by more than this are solved again
# (half the 95% threshold's rise, 1.92): by halving the step to them, and from each
# other's estimates. Points this far above the lowest are walked without halving.
_JUMP = 0.96
_FAR = 10.0


def _reach(fit, a, est_a, cost_a, b, found, depth: int = 3):
    """The fit at `b` from the converged point `(a, est_a, cost_a)`, `found` the one
    already had: where it failed or rises by more than `_JUMP`, the point at the middle
    first and `b` from there (a continuation along the valley, `depth` halvings at
    most), the lower of the two kept."""
    e, c, why = found
    if depth == 0 or (not why and c - cost_a <= _JUMP):
        return found
    m = 0.5 * (a + b)
    em, cm, whym = _reach(fit, a, est_a, cost_a, m, fit(m, est_a), depth - 1)
    if whym:
        return found
    again = _reach(fit, m, em, cm, b, fit(b, em + (em - est_a)), depth - 1)
    if not again[2] and (why or again[1] < c):
        return again
    return found


def _mend(values, est, cost, reasons, fit, box, sweeps: int = 3):
    """Each point solved again where a neighbour's -log L is lower by more than `_JUMP`
    or it failed (a fit left in a higher valley, or unconverged, where the walk's start
    led it): from that neighbour's estimate, and where the jump stays and the point lies
    within `_FAR` of the lowest, from starts across the others' box (`box`: their
    bounds), in sweeps both ways until nothing improves. A profile is the lowest -log L
    at each value."""
    n = values.size

    def jump(i, k):
        return not reasons[k] and (bool(reasons[i]) or cost[i] - cost[k] > _JUMP)

    def better(i, e, c, why):
        if why or not (reasons[i] or c < cost[i]):
            return False
        est[i], cost[i], reasons[i] = e, c, ""
        return True

    for sweep in range(sweeps):
        improved = False
        for order in (range(1, n), range(n - 2, -1, -1)):
            for i in order:
                k = i - 1 if order.step == 1 else i + 1
                if jump(i, k):
                    improved |= better(i, *fit(values[i], est[k]))
                if jump(i, k) and sweep == 0 and cost[k] - np.nanmin(cost) < _FAR:
                    for g in restarts(*box, i):
                        improved |= better(i, *fit(values[i], g))
        if not improved:
            return


def _profile(problem, name, values, theta0, integrator, max_steps, progress, optimizer):
    """The profile of one parameter (`ji.profile`)."""
    j = problem.parameters.index(name)
    lo, up = float(problem.parameters.lower[j]), float(problem.parameters.upper[j])
    if values is None:
        if not (np.isfinite(lo) and np.isfinite(up)):
            raise ValueError(f"{name!r} has an infinite bound: give the profile's values.")
        values = np.linspace(lo, up, 15)
    values = _grid(values)
    outside = (values < lo) | (values > up)
    if outside.any():
        raise ValueError(
            f"{name}: the profile values {values[outside][:5].tolist()} lie outside its "
            f"bounds [{lo:g}, {up:g}] (on its estimation scale). A profile point holds "
            "the parameter at the value reported; give values inside the bounds, or widen "
            "them."
        )
    theta0 = np.asarray(check_theta(problem, theta0), dtype=float)
    integrator = problem.model.integrator if integrator is None else integrator
    free = np.arange(problem.parameters.p) != j
    others = np.flatnonzero(free)

    box = (np.asarray(problem.parameters.lower, float)[others],
           np.asarray(problem.parameters.upper, float)[others])  # fmt: skip

    def fit(value, guess):
        start = theta0.copy()
        start[j], start[others] = value, guess
        theta, nll, _, result, *_ = optimizer.fit(problem, start, free, integrator, max_steps)
        # a point counts where its fit converged at the value: one that used its steps
        # or stagnated is no profile point
        why = failure(nll, result, max_steps)
        if why:
            return None, np.nan, why
        return np.asarray(theta)[others], float(nll), ""

    est, cost, ok, reasons = _walk(values, theta0[j], theta0[others], name, progress, fit, box)
    names = tuple(problem.parameters.names[i] for i in others)
    return Profile(name=name, values=values, names=names, estimates=est, cost=cost,
                   result=status_array(ok, RESULTS.fit_failed), reasons=reasons)  # fmt: skip
