"""Profile likelihood: hold a parameter on a grid, re-estimate the others; of a model's
least squares (`ji.estimate`'s engine) or of a problem's likelihood (the multi-start
engine, `_multistart._fit_problem`)."""

from collections.abc import Mapping, Sequence

import equinox as eqx
import numpy as np
import optimistix as optx
from jaxtyping import ArrayLike
from tqdm.auto import tqdm

from .. import plot
from .._model._base import AbstractModel, Integrator
from .._model._checks import check_model, check_theta
from .._model._transforms import fix_parameters
from .._problem._base import Problem
from .._runtime._context import clean_errors
from .._solve._simulate import Trajectory
from ._estimate import estimate
from ._multistart import fit_once


class Profile(eqx.Module):
    """The result of `ji.profile`: one parameter held at each of `values`, the others
    re-estimated.

    **Fields:** `name` (the profiled parameter), `values`, `names` (the re-estimated
    ones), `estimates` (`(n_values, p - 1)`), `cost` (`(n_values,)`: the least-squares
    cost of a model's fit, the negative log-likelihood of a problem's), `ok`.

    **Methods:** `slope`, `to_dict`, `plot` (the profile and the re-estimated
    parameters).
    """

    name: str = eqx.field(static=True)
    values: np.ndarray
    names: tuple[str, ...] = eqx.field(static=True)
    estimates: np.ndarray
    cost: np.ndarray
    ok: np.ndarray

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
        }

    def __repr__(self) -> str:
        x = np.asarray(self.values)
        return (
            f"Profile of {self.name} over [{x.min():.4g}, {x.max():.4g}] ({x.size} values, "
            f"{int((~self.ok).sum())} failed); re-estimated: {', '.join(self.names)}; "
            f"cost in [{np.nanmin(self.cost):.3g}, {np.nanmax(self.cost):.3g}]"
        )


@clean_errors
def profile(
    model: AbstractModel | Problem,
    data: ArrayLike | Sequence | Trajectory | str | None = None,
    name: str | Sequence[str] | ArrayLike | None = None,
    values: ArrayLike | Sequence | None = None,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    progress: bool = True,
    **kwargs,
) -> "Profile | dict[str, Profile]":
    """Profile of one parameter: hold `name` at each of `values` and re-estimate all the
    others by `ji.estimate` (Schumann-Bischoff et al. 2016, Figs. 9 and 18; Raue et al.
    2009). The walk starts at the value nearest `theta0[name]` and moves outwards, each fit
    starting from its neighbour's estimate.

    **A problem** (`ji.profile(problem, "k", values)`, `ji.profile(problem, ["k", "V"])`,
    or every parameter with no name; `theta0=fits.best` profiles at a fit): the negative
    log-likelihood, the others re-estimated in their bounds by the multi-start engine
    (`ji.estimate(problem, ...)`'s fit, noise parameters included); `values` on the
    estimation scale (default 15 values across the parameter's bounds). Returns a
    `Profile` for one name, else `{name: Profile}`.

    **A model:** `model`, `data`, `times`, `theta0` and `**kwargs` (`sigma`, `solver`,
    `bounds`, `max_steps`, `integrator`) as for `ji.estimate`; `name` and `values` the
    profiled parameter and its grid.

    **Returns:** a `Profile` (failed fits are NaN with `ok = False`, not an error).

    **Example:**

    ```python
    aug = ji.free_initial_state(ji.models.load("colpitts"))
    prof = ji.profile(aug, data, "p4", jnp.linspace(5.5, 7.0, 16))
    prof.slope()   # {'x1': ..., 'p1': < 0, 'p2': < 0, 'p3': ~ 0}
    ```
    """
    if isinstance(model, Problem):
        if isinstance(data, (str, list, tuple)):  # ji.profile(problem, "k", values)
            if values is not None:
                raise TypeError("ji.profile(problem, names, values): values given twice.")
            data, name, values = None, data, name
        if data is not None or times is not None:
            raise TypeError("A problem holds its data and times: give neither.")
        names = model.parameters.names if name is None else name
        one = isinstance(names, str)
        out = {
            n: profile_problem(model, n, values, theta0=theta0, progress=progress, **kwargs)
            for n in ([names] if one else names)
        }
        return out[names] if one else out
    if data is None or name is None or values is None:
        raise TypeError("Give the data, the parameter's name and its values.")
    check_model(model)
    params = model.parameters
    j = params.index(name)
    values = _grid(values)
    theta0 = np.asarray(check_theta(model, theta0))
    free = [i for i in range(params.p) if i != j]
    est, cost, ok = _walk(values, theta0[j], theta0[free], name, progress, _model_fit(
        model, data, times, name, kwargs))  # fmt: skip
    return Profile(
        name=name,
        values=values,
        names=tuple(params.names[i] for i in free),
        estimates=est,
        cost=cost,
        ok=ok,
    )


def _grid(values) -> np.ndarray:
    values = np.asarray(values, dtype=float).reshape(-1)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("values must be a non-empty array of finite numbers.")
    return np.sort(values)


def _walk(values, at, guess0, name, progress, fit):
    """The profile walk: from the value nearest `at` outwards, each fit (`fit(value,
    guess) -> (estimates, cost, ok)`) starting from its neighbour's estimate."""
    start = int(np.argmin(np.abs(values - at)))
    order = list(range(start, values.size)) + list(range(start - 1, -1, -1))
    est = np.full((values.size, guess0.size), np.nan)
    cost = np.full(values.size, np.nan)
    ok = np.zeros(values.size, bool)
    guess = guess0
    for i in tqdm(order, desc=f"profile {name}", disable=not progress):
        if i == start - 1:
            guess = est[start] if ok[start] else guess0
        e, c, good = fit(values[i], guess)
        if good:
            est[i], cost[i], ok[i] = e, c, True
            guess = e
    return est, cost, ok


def _model_fit(model, data, times, name, kwargs):
    kwargs.setdefault("throw", False)

    def fit(value, guess):
        reduced = fix_parameters(model, {name: value})
        est = estimate(reduced, data, times, theta0=guess, **kwargs)
        return np.asarray(est.theta), float(est.cost), bool(est.ok)

    return fit


def profile_problem(
    problem: Problem,
    name: str,
    values: ArrayLike | None = None,
    *,
    theta0: ArrayLike | Mapping | None = None,
    integrator: Integrator | None = None,
    max_steps: int = 100,
    progress: bool = True,
) -> Profile:
    """The profile likelihood of one parameter of a problem (on its estimation scale):
    held at each of `values` (default 15 across its bounds), the others re-estimated in
    their bounds by the multi-start engine's fit (one compilation for every value),
    walking outwards from the value nearest `theta0`. `cost` is the negative
    log-likelihood (noise parameters, Laplace noise and transformations included)."""
    j = problem.parameters.index(name)
    if values is None:
        lo, up = float(problem.parameters.lower[j]), float(problem.parameters.upper[j])
        if not (np.isfinite(lo) and np.isfinite(up)):
            raise ValueError(f"{name!r} has an infinite bound: give the profile's values.")
        values = np.linspace(lo, up, 15)
    values = _grid(values)
    theta0 = np.asarray(check_theta(problem, theta0), dtype=float)
    integrator = problem.model.integrator if integrator is None else integrator
    free = np.arange(problem.parameters.p) != j
    others = np.flatnonzero(free)

    def fit(value, guess):
        start = theta0.copy()
        start[j], start[others] = value, guess
        theta, nll, _, result, _ = fit_once(problem, start, free, integrator, max_steps, 1e-8)
        # a point counts where the fit converged or used its steps (its cost is then an
        # upper bound of the profile), not where it stagnated or the model failed
        usable = (result == optx.RESULTS.successful) | (
            result == optx.RESULTS.nonlinear_max_steps_reached
        )
        good = np.isfinite(float(nll)) and bool(usable)
        return np.asarray(theta)[others], float(nll), good

    est, cost, ok = _walk(values, theta0[j], theta0[others], name, progress, fit)
    names = tuple(problem.parameters.names[i] for i in others)
    return Profile(name=name, values=values, names=names, estimates=est, cost=cost, ok=ok)
