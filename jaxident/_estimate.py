"""Least-squares (re-)estimation of model parameters."""

from collections.abc import Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from ._checks import check_model, check_theta, check_times, n_outputs
from ._context import callback_free, clean_errors, is_traced
from ._model import AbstractModel, Integrator
from ._nonsmooth import ld_jvp
from ._sensitivity import directions_matrix
from ._simulate import solve, Trajectory


class OptaxLD(eqx.Module):
    """Estimation by an optax optimiser following the generalized gradient of the
    least-squares objective, `mu = 2 sum_i S^L(t_i)^T (y(t_i) - y_i)` (Abdelfattah et
    al. 2024, Proposition 2, eq. 25), with `S^L` the L-sensitivities for `M = [d I]`.
    For nonsmooth models, where the gradient may not exist, and for large problems.
    A first-order method: on small, ill-conditioned problems the default
    Levenberg-Marquardt solver of `ji.estimate` needs far fewer steps.

    **Arguments:**

    - `optimizer`: an optax transformation (default Adam with learning rate `1e-2`
      halving every 300 steps, in coordinates where each parameter starts at magnitude
      1).
    - `max_steps`: iteration cap.
    - `gtol`: stop when the generalized gradient's infinity norm (scaled) falls below.
    - `direction`: the probing direction `d` (default `e_1`).
    """

    optimizer: optax.GradientTransformation = eqx.field(static=True, default=None)
    max_steps: int = 5000
    gtol: float = 1e-10
    direction: tuple[float, ...] | None = None


_NOT_CONVERGED = (
    "the solver did not converge within its step cap, or the model could not be solved "
    "near the estimate; raise max_steps, start closer, or check identifiability"
)


class Estimate(eqx.Module):
    """The result of `ji.estimate`.

    **Fields:** `names`, `theta` (the estimate), `theta0` (the start), `residuals`
    (weighted, at the estimate), `cost` (their sum of squares), `jacobian` (of the
    weighted residuals with respect to `theta`), `steps`, `ok`, `at_bound` (which
    parameters ended on a bound).

    **Properties:** `covariance` (`s^2 (J^T J)^{-1}` with `s^2 = cost / (n - p)`, from the
    SVD of `J`; infinite when `J` is rank deficient), `std_errors`, `relative_std`
    (`sigma_theta / |theta|`), `confidence_intervals(level)` (Student t), and `message`
    (why it failed, or "").
    """

    names: tuple[str, ...] = eqx.field(static=True)
    theta: Float[Array, " p"]
    theta0: Float[Array, " p"]
    residuals: Float[Array, " n"]
    cost: Float[Array, ""]
    jacobian: Float[Array, "n p"]
    steps: Int[Array, ""]
    ok: Bool[Array, ""]
    at_bound: Bool[Array, " p"]

    @property
    def message(self) -> str:
        return "" if bool(np.all(np.asarray(self.ok))) else _NOT_CONVERGED

    @property
    def dof(self) -> int:
        return int(np.isfinite(np.asarray(self.residuals)).sum()) - len(self.names)

    @property
    def covariance(self) -> np.ndarray:
        J = np.asarray(self.jacobian)
        p = J.shape[1]
        _, s, vt = np.linalg.svd(J, full_matrices=False)
        if s[-1] <= p * np.finfo(float).eps * s[0] or self.dof <= 0:
            return np.full((p, p), np.inf)
        s2 = float(self.cost) / self.dof
        return s2 * (vt.T / s**2) @ vt

    @property
    def std_errors(self) -> np.ndarray:
        return np.sqrt(np.diag(self.covariance))

    @property
    def relative_std(self) -> np.ndarray:
        return self.std_errors / np.abs(np.asarray(self.theta))

    def confidence_intervals(self, level: float = 0.95) -> np.ndarray:
        """`(p, 2)` Student-t intervals at `level`."""
        from scipy.stats import t as student

        if not 0 < level < 1:
            raise ValueError(f"level must lie in (0, 1), got {level}.")
        q = student.ppf(0.5 + level / 2, max(self.dof, 1))
        th = np.asarray(self.theta)
        se = self.std_errors
        return np.stack([th - q * se, th + q * se], axis=1)

    def to_dict(self) -> dict:
        se = self.std_errors
        return {
            "names": list(self.names),
            "theta": np.asarray(self.theta).tolist(),
            "theta0": np.asarray(self.theta0).tolist(),
            "std_errors": [None if not np.isfinite(v) else float(v) for v in se],
            "cost": float(self.cost),
            "steps": int(self.steps),
            "ok": bool(self.ok),
            "message": self.message,
            "at_bound": np.asarray(self.at_bound).tolist(),
        }

    def __repr__(self) -> str:
        th = np.asarray(self.theta)
        se = self.std_errors
        w = max(len(n) for n in self.names)
        lines = [
            f"Estimate ({'converged' if bool(self.ok) else 'NOT converged: ' + self.message}; "
            f"{int(self.steps)} steps, cost {float(self.cost):.6g}, {self.dof} dof)"
        ]
        for i, n in enumerate(self.names):
            extra = "  (at a bound)" if bool(self.at_bound[i]) else ""
            err = f"+- {se[i]:.3g}" if np.isfinite(se[i]) else "+- inf (not identifiable)"
            lines.append(f"  {n:<{w}} = {th[i]:.10g}  {err}{extra}")
        return "\n".join(lines)


def _check_data(data, n_times, n_out):
    if isinstance(data, Trajectory):
        data = data.ys
    data = jnp.asarray(data, dtype=float)
    rows = n_times * n_out
    if data.shape == (n_times, n_out) or data.shape == (rows,):
        data = data.reshape(-1)
    elif n_out == 1 and data.shape == (n_times,):
        pass
    else:
        raise ValueError(
            f"data has shape {data.shape}; expected ({n_times}, {n_out}) (times x outputs) or "
            f"({rows},) in time-major order."
        )
    if not isinstance(data, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(data))):
        raise ValueError("data contains NaN or inf; drop those observations (or times).")
    return data


def _transform(theta0, lower, upper, bounded):
    """z -> theta: scaled (theta = s z), or, for parameters with two finite bounds when
    `bounded`, a sigmoid onto the box: in log-space when both bounds are positive (rate
    constants spanning decades), `exp(log lo + log(up/lo) sigmoid(z))`, else
    `lo + (up - lo) sigmoid(z)`."""
    scale = jnp.where(jnp.abs(theta0) > 0, jnp.abs(theta0), 1.0)
    box = bounded & jnp.isfinite(lower) & jnp.isfinite(upper)
    logbox = box & (lower > 0)

    def warp(x):
        return jnp.where(logbox, jnp.log(jnp.where(logbox, x, 1.0)), x)

    lo = jnp.where(box, warp(lower), 0.0)
    width = jnp.where(box, warp(upper) - lo, 1.0)
    frac = jnp.clip((warp(theta0) - lo) / width, 1e-6, 1 - 1e-6)
    z0 = jnp.where(box, jnp.log(frac) - jnp.log1p(-frac), theta0 / scale)

    def to_theta(z):
        inside = lo + width * jax.nn.sigmoid(z)
        inside = jnp.where(logbox, jnp.exp(jnp.where(logbox, inside, 0.0)), inside)
        return jnp.where(box, inside, scale * z)

    return to_theta, z0


# A failed solve at a trial point must look like a very bad point, not NaN: the
# solver then rejects the step (and NaN would reach the linear solve and raise).
_FAILED_RESIDUAL = 1e8


def finite_residual(r: Array) -> Array:
    """`r`, or a large constant wherever the model could not be solved (NaN/inf)."""
    ok = jnp.all(jnp.isfinite(r))
    return jnp.where(ok, r, jnp.asarray(_FAILED_RESIDUAL, r.dtype))


@eqx.filter_jit
def _estimate(model, data, sigma, times, theta0, lower, upper, bounded, solver, max_steps, integ):
    to_theta, z0 = _transform(theta0, lower, upper, bounded)

    def outputs(theta):
        solved = solve(model, theta, times, integ, diffrax.ForwardMode())
        return solved.ys.reshape(-1)

    def residual(z, _):
        return finite_residual((outputs(to_theta(z)) - data) / sigma)

    if isinstance(solver, OptaxLD):
        M = directions_matrix(
            jnp.zeros_like(theta0).at[0].set(1.0)
            if solver.direction is None
            else jnp.asarray(solver.direction, dtype=float)
        )
        opt = solver.optimizer
        if opt is None:
            opt = optax.adam(optax.exponential_decay(1e-2, 300, 0.5))

        def grad_z(z):
            theta = to_theta(z)
            y, Y = ld_jvp(outputs, (theta,), (M,))
            r = (y - data) / sigma
            mu = 2.0 * (Y[:, 1:] / sigma[:, None]).T @ r  # eq. 25
            _, dtheta_dz = jax.jvp(to_theta, (z,), (jnp.ones_like(z),))
            return mu * dtheta_dz

        def cond(c):
            _, _, step, gmax = c
            return (step < solver.max_steps) & (gmax > solver.gtol)

        def body(c):
            z, state, step, _ = c
            g = grad_z(z)
            # optax schedules mix integer step counts with floats: allow that even when
            # the caller runs with strict dtype promotion.
            with jax.numpy_dtype_promotion("standard"):
                updates, state = opt.update(g, state, z)
                z = optax.apply_updates(z, updates)
            return z, state, step + 1, jnp.max(jnp.abs(g))

        with jax.numpy_dtype_promotion("standard"):
            state0 = opt.init(z0)
        init = (z0, state0, jnp.asarray(0), jnp.asarray(jnp.inf))
        z, _, steps, gmax = jax.lax.while_loop(cond, body, init)
        ok = gmax <= solver.gtol
    else:
        sol = optx.least_squares(residual, solver, z0, max_steps=max_steps, throw=False)
        z, steps = sol.value, sol.stats["num_steps"]
        ok = sol.result == optx.RESULTS.successful
    theta = to_theta(z)
    r = residual(z, None)
    J = jax.jacfwd(lambda th: (outputs(th) - data) / sigma)(theta)
    ok = ok & jnp.all(jnp.isfinite(r)) & jnp.all(jnp.isfinite(J))
    width = upper - lower
    at_bound = (
        bounded
        & jnp.isfinite(width)
        & ((jnp.abs(theta - lower) <= 1e-6 * width) | (jnp.abs(upper - theta) <= 1e-6 * width))
    )
    return theta, r, jnp.sum(r**2), J, jnp.asarray(steps), ok, at_bound


@clean_errors
def estimate(
    model: AbstractModel,
    data: ArrayLike | Sequence | Trajectory,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    sigma: ArrayLike | Sequence | float = 1.0,
    solver=None,
    bounds: bool | tuple = False,
    max_steps: int = 256,
    integrator: Integrator | None = None,
    throw: bool = True,
) -> Estimate:
    """Least-squares estimation of the model's parameters from measured outputs
    (`min sum_i ||(y(t_i, theta) - y_i) / sigma_i||^2`, Abdelfattah et al. 2024 eq. 24).

    To re-estimate a reduced set, pass a reduced model (`ji.fix_parameters`, or
    `reduction.reduced_model`): its fixed parameters are held.

    **Arguments:**

    - `model`: the model whose `parameters` are estimated.
    - `data`: `(n_times, n_outputs)` measurements (or `(n_times,)` for one output), or a
      `Trajectory` from `ji.simulate` (its outputs).
    - `times`: their times (default `model.times`).
    - `theta0`: the starting point (default the nominal values).
    - `sigma`: measurement standard deviations: a scalar, one per output, or one per
      observation (`(times, outputs)` or flattened).
    - `solver`: an optimistix least-squares solver (default
      `optx.LevenbergMarquardt(rtol=1e-10, atol=1e-10)`), or `ji.OptaxLD(...)` to follow
      the generalized gradient of eq. (25) with an optax optimiser.
    - `bounds`: `False` (unconstrained, in coordinates scaled by `|theta0|`), `True` (the
      model's bounds) or `(lower, upper)`: enforced by a smooth change of variables, so
      estimates stay inside. Parameters with an infinite bound are left unconstrained.
    - `max_steps`: iteration cap of the optimistix solver.
    - `throw`: raise when the solve did not converge (default); else see `ok`.

    **Returns:** an `Estimate` with standard errors and confidence intervals. Jittable,
    and vmappable over `data`, `theta0` and `sigma` (a batch of data sets); under a trace
    a failure with `throw=True` is a run-time error, so use `throw=False` under `vmap`.

    **Example:**

    ```python
    reduced = ji.fix_parameters(model, {"theta3": 1.33})
    est = ji.estimate(reduced, data, theta0=[0.1, 30.0, -2.0])
    ```
    """
    check_model(model)
    times = check_times(model, times)
    theta0 = check_theta(model, theta0)
    integ = model.integrator if integrator is None else integrator
    n_out = n_outputs(model, theta0)
    data = _check_data(data, times.shape[0], n_out)
    sigma = jnp.asarray(sigma, dtype=float)
    n_times = times.shape[0]
    if sigma.shape in ((), (n_out,), (n_times, n_out)):
        sigma = jnp.broadcast_to(sigma, (n_times, n_out)).reshape(-1)
    elif sigma.shape != data.shape:
        raise ValueError(
            f"sigma has shape {sigma.shape}; give a scalar, one per output ({n_out},), or "
            f"one per observation ({n_times}, {n_out}) (times x outputs) or "
            f"({n_times * n_out},)."
        )
    traced = is_traced(data, sigma, bounds, theta0)
    if not traced and not bool(jnp.all(jnp.isfinite(sigma) & (sigma > 0))):
        raise ValueError("sigma must be positive and finite.")
    if bounds is True:
        lower, upper = model.parameters.lower, model.parameters.upper
    elif bounds is False or bounds is None:
        lower, upper = jnp.full_like(theta0, -jnp.inf), jnp.full_like(theta0, jnp.inf)
    else:
        lower, upper = (jnp.asarray(b, dtype=float) for b in bounds)
        if lower.shape != theta0.shape or upper.shape != theta0.shape:
            raise ValueError(f"bounds need shape {theta0.shape} each.")
    bounded = bounds is not False and bounds is not None
    if bounded and not traced and not bool(jnp.all(lower < upper)):
        raise ValueError("Need lower < upper for every parameter.")
    if bounded and not traced:
        out = np.flatnonzero(np.asarray((theta0 < lower) | (theta0 > upper)))
        if out.size:
            names = [model.parameters.names[i] for i in out]
            raise ValueError(
                f"theta0 lies outside the bounds for {names}: start inside the box, or "
                "widen the bounds (they are not clipped silently)."
            )
    if solver is None:
        solver = optx.LevenbergMarquardt(rtol=1e-10, atol=1e-10)
    if not isinstance(solver, (optx.AbstractLeastSquaresSolver, optx.AbstractMinimiser, OptaxLD)):
        raise TypeError(
            "solver must be an optimistix least-squares solver or ji.OptaxLD, "
            f"got {type(solver).__name__}."
        )
    args = (model, data, sigma, times, theta0, lower, upper, bounded, solver, max_steps, integ)
    with callback_free(*args):  # its status is `ok`: no check inside needs a callback
        theta, r, cost, J, steps, ok, at_bound = _estimate(*args)
    est = Estimate(
        names=model.parameters.names,
        theta=theta,
        theta0=theta0,
        residuals=r,
        cost=cost,
        jacobian=J,
        steps=steps,
        ok=ok,
        at_bound=at_bound,
    )
    if throw and traced:  # under a caller's jit or vmap: checked at run time
        return eqx.error_if(est, ~ok, f"Estimation failed: {_NOT_CONVERGED}.")
    if throw and not bool(ok):
        raise RuntimeError(f"Estimation failed: {est.message}.\n{est!r}")
    return est


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

    def plot(self, *, true: dict | None = None):
        from .plot import profile as _plot

        return _plot(self, true=true)

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
    from ._reduce import fix_parameters

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
