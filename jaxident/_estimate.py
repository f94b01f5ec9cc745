"""Least-squares (re-)estimation of model parameters: the one re-estimation engine that
`ji.profile`, `ji.set_by_set` and `ji.one_by_one` run."""

from collections.abc import Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from ._checks import check_model, check_theta, check_times, n_outputs
from ._context import callback_free, clean_errors, is_traced
from ._linalg._rank import RelativeTolerance
from ._measurements import (
    bounds_of,
    box_transform,
    check_data,
    free_mask,
    MeasurementError,
    sigma_of,
)
from ._model import AbstractModel, Integrator
from ._simulate import solve, Trajectory
from ._solvers import LevenbergMarquardt, OptaxLD


class Estimate(eqx.Module):
    """The result of `ji.estimate`.

    **Fields:** `names`, `theta` (the estimate; held parameters keep their starting
    values), `theta0` (the start), `free` (which parameters were estimated), `residuals`
    (weighted, at the estimate), `cost` (their sum of squares), `jacobian` (of the
    weighted residuals with respect to every parameter, held ones included: the
    weighted sensitivity matrix at the estimate), `steps`, `result` (an
    `optimistix.RESULTS`: `successful`, `max_steps_reached`, `nonlinear_divergence`),
    `at_bound` (which parameters ended on a bound).

    **Properties:** `ok` (`result == successful`), `message` (why it failed, or ""),
    `covariance` (`s^2 (J_f^T J_f)^{-1}` over the free columns with
    `s^2 = cost / (n - p_free)`, from the SVD of `J_f`; zero rows and columns for held
    parameters; infinite when `J_f` is rank deficient), `std_errors`, `relative_std`
    (`sigma_theta / |theta|`), `confidence_intervals(level)` (Student t).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    theta: Float[Array, " p"]
    theta0: Float[Array, " p"]
    free: Bool[Array, " p"]
    residuals: Float[Array, " n"]
    cost: Float[Array, ""]
    jacobian: Float[Array, "n p"]
    steps: Int[Array, ""]
    result: optx.RESULTS
    at_bound: Bool[Array, " p"]

    @property
    def ok(self) -> Bool[Array, "..."]:
        return self.result == optx.RESULTS.successful

    @property
    def message(self) -> str:
        """Why the estimation failed ("" when it did not); under `vmap`, the first
        failure's reason."""
        ok = np.asarray(self.ok)
        if bool(np.all(ok)):
            return ""
        first = int(np.flatnonzero(~ok.reshape(-1))[0])
        code = int(np.asarray(self.result._value).reshape(-1)[first])
        return {
            int(optx.RESULTS.max_steps_reached._value): (
                "the solver did not converge within max_steps; raise max_steps, start "
                "closer, or check identifiability"
            ),
        }.get(
            code,
            "the model could not be solved at or near the estimate (NaN or inf "
            "residuals or sensitivities); start closer or check the integrator",
        )

    @property
    def dof(self) -> int:
        n_free = int(np.asarray(self.free).sum())
        return int(np.isfinite(np.asarray(self.residuals)).sum()) - n_free

    @property
    def covariance(self) -> np.ndarray:
        free = np.asarray(self.free)
        J = np.asarray(self.jacobian)[:, free]
        p = free.size
        cov = np.zeros((p, p))
        if J.shape[1] == 0:
            return cov
        _, s, vt = np.linalg.svd(J, full_matrices=False)
        full_rank = int(RelativeTolerance()(jnp.asarray(s), J.shape)) == J.shape[1]
        if not full_rank or self.dof <= 0:
            cov[np.ix_(free, free)] = np.inf
            return cov
        s2 = float(self.cost) / self.dof
        cov[np.ix_(free, free)] = s2 * (vt.T / s**2) @ vt
        return cov

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
            "free": np.asarray(self.free).tolist(),
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
        free = np.asarray(self.free)
        w = max(len(n) for n in self.names)
        lines = [
            f"Estimate ({'converged' if bool(self.ok) else 'NOT converged: ' + self.message}; "
            f"{int(self.steps)} steps, cost {float(self.cost):.6g}, {self.dof} dof)"
        ]
        for i, n in enumerate(self.names):
            if not free[i]:
                lines.append(f"  {n:<{w}} = {th[i]:.10g}  (held)")
                continue
            extra = "  (at a bound)" if bool(self.at_bound[i]) else ""
            err = f"+- {se[i]:.3g}" if np.isfinite(se[i]) else "+- inf (not identifiable)"
            lines.append(f"  {n:<{w}} = {th[i]:.10g}  {err}{extra}")
        return "\n".join(lines)


_FAILED_RESIDUAL = 1e8


@eqx.filter_jit
def _fit(model, data, sigma, times, theta0, free, lower, upper, bounded, solver, max_steps, integ):
    """The estimation kernel: every array an argument, so one compilation serves every
    start, data set, error model and free-parameter mask of a model."""
    to_theta, z0 = box_transform(theta0, lower, upper, bounded)

    def outputs(theta):
        return solve(model, theta, times, integ, diffrax.ForwardMode()).ys.reshape(-1)

    def params(z):
        return jnp.where(free, to_theta(z), theta0)

    if isinstance(solver, OptaxLD):
        z, steps, result = solver.minimise(outputs, params, z0, data, sigma, free)
    else:
        lm = isinstance(solver, LevenbergMarquardt)

        def residual(z, _):
            r = (outputs(params(z)) - data) / sigma
            # ji.LevenbergMarquardt rejects a trial point where the model cannot be
            # solved; to other solvers such a point must look very bad, not NaN (NaN
            # would reach their linear solves).
            return r if lm else jnp.where(jnp.all(jnp.isfinite(r)), r, _FAILED_RESIDUAL)

        options = {"free": free} if lm else None
        sol = optx.least_squares(
            residual, solver, z0, options=options, max_steps=max_steps, throw=False
        )
        z, steps, result = sol.value, sol.stats["num_steps"], sol.result
    theta = params(z)

    def weighted(th):
        r = (outputs(th) - data) / sigma
        return r, r

    J, r = jax.jacfwd(weighted, has_aux=True)(theta)  # one solve gives both
    finite = jnp.all(jnp.isfinite(r)) & jnp.all(jnp.isfinite(J))
    result = optx.RESULTS.where(
        (result == optx.RESULTS.successful) & ~finite, optx.RESULTS.nonlinear_divergence, result
    )
    width = upper - lower
    at_bound = (
        free
        & bounded
        & jnp.isfinite(width)
        & ((jnp.abs(theta - lower) <= 1e-6 * width) | (jnp.abs(upper - theta) <= 1e-6 * width))
    )
    return theta, r, jnp.sum(r**2), J, jnp.asarray(steps), result, at_bound


class LeastSquares(eqx.Module):
    """A checked weighted least-squares problem of a model: data, standard deviations,
    times, bounds and integrator. `ji.estimate` builds one per call; the stepwise
    procedures build one and `fit` it for every candidate set."""

    model: AbstractModel
    data: Float[Array, " n"]
    sigma: Float[Array, " n"]
    times: Float[Array, " t"]
    theta0: Float[Array, " p"]
    lower: Float[Array, " p"]
    upper: Float[Array, " p"]
    bounded: bool = eqx.field(static=True)
    integrator: Integrator

    @classmethod
    def build(cls, model, data, times=None, theta0=None, sigma=1.0, bounds=False,
              integrator=None) -> "LeastSquares":  # fmt: skip
        check_model(model)
        times = check_times(model, times)
        theta0 = check_theta(model, theta0)
        n_out = n_outputs(model, theta0)
        data = check_data(data, times.shape[0], n_out)
        traced = is_traced(data, sigma, bounds, theta0)
        sigma = sigma_of(sigma, data, times, n_out, traced)
        lower, upper, bounded = bounds_of(model, theta0, bounds, traced)
        integ = model.integrator if integrator is None else integrator
        return cls(model, data, sigma, times, theta0, lower, upper, bounded, integ)

    def fit(self, theta0, free=None, solver=None, max_steps=256) -> Estimate:
        """Estimate the `free` parameters (names or a mask; default all) from `theta0`,
        the others held there. Never raises for a failed solve: see `result`."""
        if solver is None:
            solver = LevenbergMarquardt()
        kinds = (optx.AbstractLeastSquaresSolver, optx.AbstractMinimiser, OptaxLD)
        if not isinstance(solver, kinds):
            raise TypeError(
                "solver must be ji.LevenbergMarquardt(), an optimistix least-squares solver "
                f"or minimiser, or ji.OptaxLD, got {type(solver).__name__}."
            )
        free = free_mask(self.model, free)
        args = (self.model, self.data, self.sigma, self.times, theta0, free, self.lower,
                self.upper, self.bounded, solver, max_steps, self.integrator)  # fmt: skip
        with callback_free(*args):  # its status is `result`: no check needs a callback
            theta, r, cost, J, steps, result, at_bound = _fit(*args)
        return Estimate(
            names=self.model.parameters.names,
            theta=theta,
            theta0=theta0,
            free=jnp.broadcast_to(free, theta.shape),
            residuals=r,
            cost=cost,
            jacobian=J,
            steps=steps,
            result=result,
            at_bound=at_bound,
        )


@clean_errors
def estimate(
    model: AbstractModel,
    data: ArrayLike | Sequence | Trajectory,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    free: Sequence[str] | ArrayLike | None = None,
    sigma: ArrayLike | Sequence | float | MeasurementError = 1.0,
    solver: optx.AbstractLeastSquaresSolver | optx.AbstractMinimiser | OptaxLD | None = None,
    bounds: bool | tuple = False,
    max_steps: int = 256,
    integrator: Integrator | None = None,
    throw: bool = True,
) -> Estimate:
    """Least-squares estimation of the model's parameters from measured outputs
    (`min sum_i ||(y(t_i, theta) - y_i) / sigma_i||^2`, Abdelfattah et al. 2024 eq. 24).

    **Arguments:**

    - `model`: the model whose `parameters` are estimated.
    - `data`: `(n_times, n_outputs)` measurements (or `(n_times,)` for one output), or a
      `Trajectory` from `ji.simulate` (its outputs).
    - `times`: their times (default `model.times`).
    - `theta0`: the starting point (default the nominal values).
    - `free`: the parameters to estimate, as names or a boolean mask (default all); the
      others are held at `theta0`. A mask is an array argument: every mask of a model
      shares one compilation.
    - `sigma`: measurement standard deviations: a scalar, one per output, one per
      observation (`(times, outputs)` or flattened), or a `ji.MeasurementError`
      (`sigma = a |y| + b` from the data).
    - `solver`: `ji.LevenbergMarquardt()` (default: residuals only at trial points,
      stops on relative cost decrease), any optimistix least-squares solver or
      minimiser, or `ji.OptaxLD(...)` to follow the generalized gradient of eq. (25)
      with an optax optimiser.
    - `bounds`: `False` (unconstrained, in coordinates scaled by `|theta0|`), `True` (the
      model's bounds) or `(lower, upper)`: enforced by a smooth change of variables, so
      estimates stay inside. Parameters with an infinite bound are left unconstrained.
    - `max_steps`: iteration cap of the solver.
    - `throw`: raise when the solve did not converge (default); else see `result`.

    **Returns:** an `Estimate` with its status, standard errors and confidence
    intervals. Jittable, and vmappable over `data`, `theta0`, `free` and `sigma` (a
    batch of data sets); under a trace a failure with `throw=True` is a run-time error,
    so use `throw=False` under `vmap`.

    **Example:**

    ```python
    est = ji.estimate(model, data, free=("theta1", "theta2", "theta4"))
    est.std_errors, est.confidence_intervals(0.95)
    ```
    """
    problem = LeastSquares.build(model, data, times, theta0, sigma, bounds, integrator)
    est = problem.fit(problem.theta0, free, solver, max_steps)
    if throw and is_traced(est):  # under a caller's jit or vmap: checked at run time
        return eqx.error_if(
            est,
            ~est.ok,
            "Estimation failed: the solver did not converge or the model could not be "
            "solved near the estimate (use throw=False and read .message).",
        )
    if throw and not bool(est.ok):
        raise RuntimeError(f"Estimation failed: {est.message}.\n{est!r}")
    return est
