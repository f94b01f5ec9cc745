"""Profile likelihood of one parameter: hold it on a grid, re-estimate the others."""

from collections.abc import Sequence

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike

from ._checks import check_model, check_theta
from ._context import clean_errors
from ._estimate import estimate
from ._model import AbstractModel
from ._simulate import Trajectory


class Profile(eqx.Module):
    """The result of `ji.profile`: one parameter held at each of `values`, the others
    re-estimated.

    **Fields:** `name` (the profiled parameter), `values`, `names` (the re-estimated
    ones), `estimates` (`(n_values, p - 1)`), `cost` (`(n_values,)`), `ok`.
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
    model: AbstractModel,
    data: ArrayLike | Sequence | Trajectory,
    name: str,
    values: ArrayLike | Sequence,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    progress: bool = True,
    **kwargs,
) -> Profile:
    """Profile of one parameter: hold `name` at each of `values` and re-estimate all the
    others by `ji.estimate` (Schumann-Bischoff et al. 2016, Figs. 9 and 18; Raue et al.
    2009). The walk starts at the value nearest `theta0[name]` and moves outwards, each fit
    starting from its neighbour's estimate.

    **Arguments:** `model`, `data`, `times`, `theta0` and `**kwargs` (`sigma`, `solver`,
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
    from ._transforms import fix_parameters

    check_model(model)
    params = model.parameters
    j = params.index(name)
    values = np.asarray(values, dtype=float).reshape(-1)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("values must be a non-empty array of finite numbers.")
    values = np.sort(values)
    theta0 = np.asarray(check_theta(model, theta0))
    free = [i for i in range(params.p) if i != j]
    start = int(np.argmin(np.abs(values - theta0[j])))
    order = list(range(start, values.size)) + list(range(start - 1, -1, -1))
    est = np.full((values.size, len(free)), np.nan)
    cost = np.full(values.size, np.nan)
    ok = np.zeros(values.size, bool)
    kwargs.setdefault("throw", False)
    from tqdm.auto import tqdm

    for step, i in enumerate(tqdm(order, desc=f"profile {name}", disable=not progress)):
        if step == 0 or i == start - 1:
            guess = theta0[free]
            if i == start - 1 and ok[start]:
                guess = est[start]
        reduced = fix_parameters(model, {name: values[i]})
        fit = estimate(reduced, data, times, theta0=guess, **kwargs)
        if bool(fit.ok):
            est[i], cost[i], ok[i] = np.asarray(fit.theta), float(fit.cost), True
            guess = est[i]
    return Profile(
        name=name,
        values=values,
        names=tuple(params.names[i] for i in free),
        estimates=est,
        cost=cost,
        ok=ok,
    )
