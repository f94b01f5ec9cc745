"""Least-squares (re-)estimation of model parameters: the one re-estimation engine that
`ji.profile`, `ji.set_by_set` and `ji.one_by_one` run."""

import os
from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from .. import plot
from .._linalg._covariance import marginal
from .._linalg._dependence import dependence
from .._linalg._rank import RelativeTolerance
from .._model._base import AbstractModel, Integrator
from .._model._checks import check_model, check_theta, check_times, n_outputs
from .._problem._base import from_scale, Problem
from .._problem._measurements import bounds_of, check_data, free_mask, MeasurementError, sigma_of
from .._problem._predict import predict
from .._runtime._config import fit_device
from .._runtime._host import call_kept, callback_free, is_traced
from .._runtime._results import promoted, RESULTS
from .._solve._simulate import Trajectory
from ._engine import fit_kernel, lm_advance, lm_begin, lm_finish
from ._multistart import estimate_problem, MultiStart, objective
from ._optimizers import AbstractOptimizer, checked_optimizer
from ._solvers import LevenbergMarquardt, OptaxLD


class Optimum(NamedTuple):
    """One distinct optimum of a multi-start (`Estimate.optima`): `theta` (the best fit of
    its group, estimation scale), `nll` (its -log L), and `fits` (how many fits reached
    it)."""

    theta: np.ndarray
    nll: float
    fits: int


class Estimate(eqx.Module):
    """The result of `ji.estimate`: the estimate with its uncertainties, and for a
    problem (or starts) every start's fit.

    **Fields:** `names`, `theta` (the estimate, on the estimation scales for a problem;
    held parameters keep their starting values), `theta0` (its start), `free` (which
    parameters were estimated), `cost` (the sum of squared weighted residuals of a
    model's least squares, or the negative log-likelihood of a problem), `steps`,
    `result` (a `ji.RESULTS`: `successful`, `nonlinear_max_steps_reached`,
    `stagnation`, `nonlinear_divergence`), `at_bound` (which free parameters ended
    within 1e-3 of their box's width from a bound: for a model's least squares measured
    as its change of variables measures it, logarithmically where both bounds are
    positive; the rule of `StepwiseSelection.at_bound`). A model's least squares also
    has `residuals` (weighted, at the estimate; NaN where a datum is missing) and
    `jacobian` (of the weighted residuals with respect to every parameter, held ones
    included: the weighted sensitivity matrix at the estimate). A problem's has
    `fisher` (the Fisher information of every parameter at the estimate) and `fits`
    (a `ji.MultiStart`: every start's fit, sorted, the best first; this estimate is its
    best), `scales` (each parameter's estimation scale) and `kinks` (whether a noise
    model has kinks, Laplace's: the message of a stagnated fit says so).

    **Properties:** `ok` (`result == successful`), `stopped_at_max_steps`, `message`
    (why it failed, or ""), `covariance` over the free parameters (zero rows and columns
    for held ones): for a model's least squares `s^2 (J_f^T J_f)^+` with
    `s^2 = cost / (n - p_free)`, from the SVD of `J_f`; for a problem the pseudo-inverse
    of the free parameters' Fisher information (the Wald covariance: the likelihood's
    own noise, nothing rescaled). The pseudo-inverse is taken on the directions the
    matrix resolves (decided on unit-norm columns), so that each standard error is the
    marginal one `ji.analyze` reports, every identifiable combination free; it is
    infinite only for a parameter with no effect or a component in an unresolved
    (null) direction, which `null_parameters` names. Both are joint over the free
    parameters and conditional on the held ones (`held`). `std_errors`,
    `relative_std` (`sigma_theta / |theta|`), `confidence_intervals(level)` (Student t
    for least squares, normal for a likelihood; `ji.likelihood_intervals` gives the
    profile-likelihood ones), `log_likelihood` (a problem's), `n_at_best` (fits within
    `fits.tol` of the best). **Methods:** `plot()` (a problem's waterfall plot of every
    fit), `to_dict()`.

    One result type for every fit: `theta`, `steps`, `result`, `at_bound` and `ok` are
    the best fit's; a problem's `fits` (a `ji.MultiStart`) holds every fit's
    (`fits.theta`, `fits.nll`, `fits.starts`, `fits.order`, `fits.tol`).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    theta: Float[Array, " p"]
    theta0: Float[Array, " p"]
    free: Bool[Array, " p"]
    residuals: Float[Array, " n"] | None
    cost: Float[Array, ""]
    jacobian: Float[Array, "n p"] | None
    steps: Int[Array, ""]
    result: RESULTS = eqx.field(converter=promoted)
    at_bound: Bool[Array, " p"]
    fisher: Float[Array, "p p"] | None = None
    fits: MultiStart | None = None
    scales: tuple[str, ...] | None = eqx.field(static=True, default=None)
    kinks: bool = eqx.field(static=True, default=False)  # a Laplace noise model

    @property
    def ok(self) -> Bool[Array, "..."]:
        return self.result == RESULTS.successful

    @property
    def stopped_at_max_steps(self) -> Bool[Array, "..."]:
        """The solver used every step allowed without meeting its convergence test."""
        return self.result == RESULTS.nonlinear_max_steps_reached

    @property
    def message(self) -> str:
        """Why the estimation failed ("" when it did not); under `vmap`, the first
        failure's reason."""
        ok = np.asarray(self.ok)
        if bool(np.all(ok)):
            return ""
        first = int(np.flatnonzero(~ok.reshape(-1))[0])
        if bool(np.asarray(self.stopped_at_max_steps).reshape(-1)[first]):
            return (
                "the solver did not converge within max_steps; raise max_steps, start "
                "closer, or check identifiability"
            )
        if bool(np.asarray(self.result == RESULTS.stagnation).reshape(-1)[first]):
            if self.kinks:
                return (
                    "the solver stagnated where the gradient does not vanish: the Laplace "
                    "noise model's likelihood has kinks (|residual|) at each datum, where "
                    "a smooth model of the cost fails; compare the fits by their -log L, "
                    "start elsewhere, or use normal noise"
                )
            return (
                "the solver stagnated: no step lowered the cost, although the gradient "
                "does not vanish; start elsewhere or check identifiability"
            )
        return (
            "the model could not be solved at or near the estimate (NaN or inf "
            "residuals or sensitivities); start closer or check the integrator"
        )

    @property
    def held(self) -> tuple[str, ...]:
        """The parameters held at their starting values."""
        return tuple(n for n, f in zip(self.names, np.asarray(self.free)) if not f)

    @property
    def dof(self) -> int:
        """Degrees of freedom of a model's least squares: finite residuals less the free
        parameters."""
        if self.residuals is None:
            raise AttributeError("dof: a model's least squares has it; a likelihood has not.")
        n_free = int(np.asarray(self.free).sum())
        return int(np.isfinite(np.asarray(self.residuals)).sum()) - n_free

    @property
    def covariance(self) -> np.ndarray:
        free = np.asarray(self.free)
        p = free.size
        cov = np.zeros((p, p))
        if not free.any():
            return cov
        if self.fisher is not None:
            F = np.asarray(self.fisher, float)[np.ix_(free, free)]
            cov[np.ix_(free, free)] = _inverse_information(F)
            return cov
        J = np.asarray(self.jacobian)[:, free]
        if self.dof <= 0 or not np.all(np.isfinite(J)):
            cov[np.ix_(free, free)] = np.inf
            return cov
        s2 = float(self.cost) / self.dof
        cov[np.ix_(free, free)] = s2 * _marginal(J, RelativeTolerance())
        return cov

    @property
    def std_errors(self) -> np.ndarray:
        return np.sqrt(np.diag(self.covariance))

    @property
    def null_parameters(self) -> tuple[str, ...]:
        """The free parameters with an infinite standard error: no effect, or a
        component in a direction the data do not resolve at the estimate."""
        free = np.asarray(self.free)
        return tuple(n for n, f, e in zip(self.names, free, self.std_errors) if f and np.isinf(e))

    @property
    def relative_std(self) -> np.ndarray:
        return self.std_errors / np.abs(np.asarray(self.theta))

    def confidence_intervals(self, level: float = 0.95) -> np.ndarray:
        """`(p, 2)` Wald intervals at `level`: Student t for a model's least squares
        (`s^2` estimated), normal for a problem's likelihood."""
        if not 0 < level < 1:
            raise ValueError(f"level must lie in (0, 1), got {level}.")
        from scipy.special import ndtri, stdtrit  # (kept out of `import jaxident`)

        if self.fisher is not None:
            q = ndtri(0.5 + level / 2)
        else:
            q = stdtrit(max(self.dof, 1), 0.5 + level / 2)  # Student's t quantile
        th = np.asarray(self.theta)
        se = self.std_errors
        return np.stack([th - q * se, th + q * se], axis=1)

    @property
    def linear(self) -> np.ndarray:
        """The estimate on the linear scale (a problem's parameters are estimated on
        their `scales`; a model's least squares on the linear one)."""
        th = np.asarray(self.theta, float)
        return th if self.scales is None else from_scale(th, self.scales)

    @property
    def rse(self) -> np.ndarray:
        """Relative standard errors of the linear values, in percent (a log10-scale
        parameter's `100 ln(10) std`, a log-scale one's `100 std`, to first order; a
        linear one's `100 std / |theta|`): the pharmacometrician's measure, flagged
        above 30-50%."""
        se = self.std_errors
        scales = self.scales or ("lin",) * se.size
        th = np.abs(np.asarray(self.theta, float))
        with np.errstate(divide="ignore", invalid="ignore"):
            lin = np.where(th > 0, se / th, np.inf)
        factor = {"log10": np.log(10.0), "log": 1.0}
        return 100 * np.array([se[i] * factor[sc] if sc in factor else lin[i]
                               for i, sc in enumerate(scales)])  # fmt: skip

    def optima(self, level: float = 0.95) -> tuple[Optimum, ...]:
        """Every distinct optimum the fits reached whose -log L lies within half the
        chi-square quantile of `level` (1 degree of freedom: 1.92 at 95%) of the best,
        best first: the converged fits grouped on the estimation scale, two fits in one
        group where they differ by at most the best fit's standard error in every
        parameter with a finite one (parameters along a null direction move freely
        within one optimum). More than one means a parameter that differs between them
        is identifiable only locally from these data: the Wald interval of the best
        excludes an equally good fit (`locally_identifiable`)."""
        fits = self._multi("optima")
        from scipy.special import chdtri  # (kept out of `import jaxident`)

        within = 0.5 * float(chdtri(1, 1.0 - level))
        nll = np.asarray(fits.nll, float)
        theta = np.asarray(fits.theta, float)
        keep = np.isfinite(nll) & (nll <= nll[0] + within) & np.asarray(fits.ok)
        keep[0] = np.isfinite(nll[0])
        se = self.std_errors
        tol = np.where(np.isfinite(se), np.maximum(se, 1e-8 * (1 + np.abs(theta[0]))), np.inf)
        groups: list[list[int]] = []
        for i in np.flatnonzero(keep):
            for g in groups:
                if np.all(np.abs(theta[i] - theta[g[0]]) <= tol):
                    g.append(i)
                    break
            else:
                groups.append([i])
        return tuple(Optimum(theta[g[0]], float(nll[g[0]]), len(g)) for g in groups)

    @property
    def locally_identifiable(self) -> tuple[str, ...]:
        """The parameters that differ (by more than the best fit's standard error)
        between optima within the 95% threshold of the best: identifiable only locally
        from these data; empty with one optimum."""
        return self._differ(self.optima())

    def _differ(self, found: tuple[Optimum, ...]) -> tuple[str, ...]:
        """`locally_identifiable` of the optima `found`."""
        if len(found) < 2:
            return ()
        se = self.std_errors
        spread = np.ptp(np.stack([o.theta for o in found]), axis=0)
        return tuple(n for n, d, e in zip(self.names, spread, se) if np.isfinite(e) and d > e)

    def _multi(self, what: str) -> MultiStart:
        if self.fits is None:
            raise AttributeError(
                f"{what}: a model's least squares without starts has one fit; give starts= "
                "(or fit a problem) for a multi-start."
            )
        return self.fits

    @property
    def log_likelihood(self) -> float:
        """The log-likelihood at the estimate (a problem's fit)."""
        return self._multi("log_likelihood").log_likelihood

    @property
    def n_at_best(self) -> int:
        """The fits within `fits.tol` of the best negative log-likelihood."""
        return self._multi("n_at_best").n_at_best

    @property
    def interrupted(self) -> bool:
        """Whether the multi-start stopped (Ctrl-C) before every planned start was
        fitted (`fits.planned`): the best of the fits finished, not of the run asked for."""
        return self.fits is not None and self.fits.interrupted

    def plot(self):
        """The waterfall plot of every fit beside the parameters across starts, each
        coloured by the distinct optimum it reached (`ji.plot.multistart`). Returns the
        figure."""
        self._multi("plot")
        return plot.multistart(self)

    def to_dict(self) -> dict:
        se = self.std_errors
        out = {
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
            "null_parameters": list(self.null_parameters),
            "rse_percent": [None if not np.isfinite(v) else float(v) for v in self.rse],
        }
        if self.scales is not None:
            out["scales"] = list(self.scales)
            out["linear"] = self.linear.tolist()
        if self.fits is not None:
            out["interrupted"] = self.interrupted
            out["log_likelihood"] = self.log_likelihood
            out["fits"] = self.fits.to_dict()
            found = self.optima()
            out["optima"] = [{"theta": o.theta.tolist(), "nll": o.nll, "fits": o.fits}
                             for o in found]  # fmt: skip
            out["locally_identifiable"] = list(self._differ(found))
        return out

    def __repr__(self) -> str:
        return self.summary()

    def summary(self, errors: bool = True) -> str:
        """The printout: the fits, the distinct optima, and the best fit with its
        scales, linear values and (with `errors`) standard errors and RSE."""
        th = np.asarray(self.theta)
        se = self.std_errors
        free = np.asarray(self.free)
        w = max(len(n) for n in self.names)
        status = "converged" if bool(self.ok) else "NOT converged: " + self.message
        if self.fits is None:
            head = f"{int(self.steps)} steps, cost {float(self.cost):.6g}, {self.dof} dof"
            lines = [f"Estimate ({status}; {head})"]
        else:
            head = (", +- marginal Wald standard errors on the estimation scale (RSE: "
                    "relative standard error of the linear value):" if errors else ":")  # fmt: skip
            lines = [repr(self.fits).splitlines()[0], *self._optima_lines(),
                     f"The best fit ({status}; {int(self.steps)} steps){head}"]  # fmt: skip
        scales = self.scales or ("lin",) * th.size
        lin, rse = self.linear, self.rse
        for i, n in enumerate(self.names):
            value = f"{th[i]:.10g}"
            if scales[i] != "lin":
                value = f"{th[i]:.6g} ({scales[i]}; {lin[i]:.6g})"
            if not free[i]:
                lines.append(f"  {n:<{w}} = {value}  (held)")
                continue
            extra = "  (at a bound)" if bool(self.at_bound[i]) else ""
            if not errors:
                lines.append(f"  {n:<{w}} = {value}{extra}")
                continue
            if not np.isfinite(se[i]):
                err = "+- inf (no effect, or along a null direction: not identifiable)"
            else:
                err = f"+- {se[i]:.3g}" + (f" (RSE {rse[i]:.3g}%)" if np.isfinite(rse[i]) else "")
            lines.append(f"  {n:<{w}} = {value}  {err}{extra}")
        return "\n".join(lines)

    def _optima_lines(self) -> list[str]:
        """The distinct optima within the 95% threshold, where there are several."""
        found = self.optima()
        if len(found) < 2:
            return []
        local = self._differ(found)
        lines = [f"{len(found)} distinct optima within 1.92 of the best -log L (95%), which "
                 f"the Wald errors below do not show:"]  # fmt: skip
        for k, o in enumerate(found):
            values = ", ".join(f"{n} {v:.4g}" for n, v in zip(self.names, o.theta) if n in local)
            lines.append(f"  {k + 1}: -log L {o.nll:.6g} (+{o.nll - found[0].nll:.3g}), "
                         f"{o.fits} fit(s): {values}")  # fmt: skip
        if local:
            lines.append(f"  {', '.join(local)}: identifiable only locally from these data")
        return lines


# The Fisher information's rank is decided at this many times what its rounding leaves
# of `J`'s singular values (`_inverse_information`).
_ROUNDING = 10


def _inverse_information(F: np.ndarray) -> np.ndarray:
    """The marginal covariance from a Fisher information `F` (`J^T J` of the weighted
    residuals and noise rows): `_marginal` of its square root (whose columns have
    `J`'s lengths and angles, so every decision is `J`'s), decided at ten times what
    `F`'s rounding leaves of `J`'s singular values (`sqrt(q eps)` of the largest: a
    null direction's comes out at about that, its columns' distances a few times it).
    `ji.analyze` decides on the sensitivities themselves, at their accuracy, and so
    resolves directions down to that accuracy where this resolves them to about
    `1e-7` of the largest: a direction between the two is infinite here and very
    uncertain there; its printouts at a fit are its own (`jaxident analyze --fit`)."""
    q = F.shape[0]
    if not np.all(np.isfinite(F)):
        return np.full((q, q), np.inf)
    lam, V = np.linalg.eigh(0.5 * (F + F.T))
    root = np.sqrt(np.maximum(lam, 0.0))[:, None] * V.T
    rtol = float(_ROUNDING * np.sqrt(q * np.finfo(float).eps))
    return _marginal(root, RelativeTolerance(rtol=rtol))


def _marginal(S: np.ndarray, rule) -> np.ndarray:
    """The marginal covariance of the columns of `S` (a weighted sensitivity matrix, or a
    square root of the information), as `ji.analyze` takes its standard deviations:
    the pseudo-inverse of `S^T S` on the directions the rank `rule` resolves
    (equilibrated columns: not decided by the parameters' units), every resolved
    combination free, and `inf` in the rows and columns of the parameters with no
    effect or in a dependent set (`ji.linalg.dependence`'s decisions)."""
    q = S.shape[1]
    dep = dependence(jnp.asarray(S), rule)
    out = np.asarray(dep.no_effect) | np.asarray(dep.dependent)
    _, W = marginal(S, np.flatnonzero(~np.asarray(dep.no_effect)), int(dep.rank))
    cov = W @ W.T
    cov[out, :] = np.inf
    cov[:, out] = np.inf
    return cov if q else np.zeros((0, 0))


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
        data = jnp.where(jnp.isnan(data), 0.0, data)  # missing: sigma = inf, weight 0
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
            out = call_kept(fit_kernel, *args, device=fit_device())
        return self._estimate(theta0, free, out)

    def fit_in_chunks(self, theta0, free, solver: LevenbergMarquardt, max_steps: int,
                      report=None, chunk: int = 5) -> Estimate:  # fmt: skip
        """`fit` with `ji.LevenbergMarquardt`, run `chunk` steps at a time from the host:
        `report(steps, cost)` after each chunk (a progress bar), and a Ctrl-C lands
        between chunks. The steps are those of `fit`, in three kernels compiled once per
        model and shapes (`max_steps` is an argument here, not a compile-time constant)."""
        free = free_mask(self.model, free)
        theta0 = jnp.asarray(theta0, float)
        on = fit_device()
        with callback_free(self, theta0, free, solver):
            z, state = call_kept(lm_begin, self, theta0, free, solver, device=on)
            steps = jnp.asarray(0)
            while not bool(state.done | state.failed) and int(steps) < max_steps:
                until = jnp.asarray(min(int(steps) + chunk, max_steps))
                args = (self, theta0, free, solver, z, state, steps, until)
                z, state, steps = call_kept(lm_advance, *args, device=on)
                if report is not None:
                    report(int(steps), 2.0 * float(state.f))  # the sum of squares
            args = (self, theta0, free, solver, z, state, steps, jnp.asarray(max_steps))
            out = call_kept(lm_finish, *args, device=on)
        return self._estimate(theta0, free, out)

    def _estimate(self, theta0, free, kernel_out) -> Estimate:
        """The `Estimate` from what a fit kernel returns (`_fit._finish`)."""
        theta, r, cost, J, steps, result, at_bound = kernel_out
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


def _every_fit_failed(problem: Problem, fits: MultiStart, integrator) -> str:
    """Why every fit failed, as far as the first start tells: `ji.predict`'s own error
    there (a solve that fails, a sigma at or below 0, ...), else that the fits left the
    region where the model can be solved."""
    n = fits.nll.shape[0]
    first = np.asarray(fits.starts)[0]
    try:
        predict(problem, first, integrator=integrator)
    except (RuntimeError, ValueError, eqx.EquinoxRuntimeError) as e:
        return f"Estimation failed at all {n} starts; at the first: {e}"
    return (
        f"Estimation failed at all {n} starts: the model is solved at the first start, "
        "but no fit found a finite negative log-likelihood near it (the solves fail or "
        "the outputs are not finite on the way); check the bounds and the integrator's "
        "max_steps (use throw=False to get the fits)."
    )


def _best_of(problem: Problem, fits: MultiStart, fisher, integrator) -> Estimate:
    """The `Estimate` of a multi-start: its best fit, the Fisher information of every
    parameter there (the joint Wald covariance, a hierarchical fit's scalings included:
    the optimizer's where it has it, else one solve with sensitivities), and every fit."""
    q = len(fits.names)
    theta = np.asarray(fits.theta[0])
    integrator = problem.model.integrator if integrator is None else integrator
    if not np.isfinite(float(fits.nll[0])):
        fisher = np.full((q, q), np.nan)
    elif fisher is None or not np.all(np.isfinite(fisher)):
        fisher = objective(problem, theta, integrator, derivatives=True)[2]
    return Estimate(
        names=fits.names,
        theta=jnp.asarray(theta),
        theta0=fits.starts[int(fits.order[0])],
        free=jnp.asarray([n not in fits.held for n in fits.names]),
        residuals=None,
        cost=fits.nll[0],
        jacobian=None,
        steps=fits.steps[0],
        result=jax.tree.map(lambda a: a[0], fits.result),
        at_bound=fits.at_bound[0],
        fisher=jnp.asarray(fisher),
        fits=fits,
        scales=tuple(problem.scales),
        kinks=any(d.kinks for d in problem.distributions),
    )


def estimate(
    model: AbstractModel | Problem,
    data: ArrayLike | Sequence | Trajectory | None = None,
    times: ArrayLike | Sequence | None = None,
    *,
    starts: int | ArrayLike | Sequence | None = None,
    key: PRNGKeyArray | None = None,
    progress: bool = True,
    theta0: ArrayLike | dict | Sequence | None = None,
    free: Sequence[str] | Sequence[bool] | ArrayLike | None = None,
    sigma: ArrayLike | Sequence | float | MeasurementError = 1.0,
    solver: optx.AbstractLeastSquaresSolver | optx.AbstractMinimiser | OptaxLD | None = None,
    bounds: bool | tuple = False,
    max_steps: int | None = None,
    integrator: Integrator | None = None,
    throw: bool | None = None,
    batch: int | None = None,
    optimizer: AbstractOptimizer | None = None,
    out: str | os.PathLike | None = None,
) -> Estimate:
    """Least-squares estimation of the model's parameters from measured outputs
    (`min sum_i ||(y(t_i, theta) - y_i) / sigma_i||^2`, Abdelfattah et al. 2024 eq. 24);
    or maximum-likelihood estimation of a problem's, from one or many starts.

    **A problem** (`ji.estimate(problem, starts=100, key=...)`; a model with data becomes
    one by `ji.Problem.from_model`): the negative log-likelihood (PEtab's, noise
    parameters, Laplace noise and observable transformations included) is minimised over
    the parameters on their estimation scales, inside their bounds, by a bounded
    Levenberg-Marquardt with the Fisher information as its Hessian (Fisher scoring; the
    gradient exact from the sensitivities), which, where it would stop, goes on with a
    secant of the rest of the Hessian added (Dennis-Gay-Welsch, as NL2SOL) until it
    stops again. `starts`: `None` (one start at `theta0`, default nominal), a number
    of Latin-hypercube starts in the bounds on the estimation scale (drawn with `key`,
    default `jax.random.key(0)`; the first is `theta0` where it is given), or an
    `(N, q)` array of starts inside the bounds. The fits run one after another,
    compiled once, with a progress bar; `batch=B` runs `B` of them side by side (one
    `vmap`, in lockstep with the slowest). A fit is a chain of small solves,
    latency-bound on a GPU (many times slower there than on the host's CPU;
    docs/performance.md), so on a GPU machine every fit runs on the host's CPU, its estimate
    returned to the GPU (`JAXIDENT_FIT_DEVICE=default` fits on the GPU). Returns
    an `Estimate` of the best fit (its Wald standard errors from the Fisher
    information there) whose `fits` (a `ji.MultiStart`) holds every fit sorted by
    negative log-likelihood, the best first, each with its status; `n_at_best` (fits
    within 0.1 of the best) and a waterfall plot (`.plot()`); `throw` raises only when
    every fit failed. Of the
    arguments below `theta0`, `free` (the others held at `theta0` in every start: the
    same compiled fit, where `problem.fix` builds a new problem and compiles again),
    `max_steps` and `integrator` apply. `optimizer`: `ji.FisherLM()` (the compiled fit
    above, default) or `ji.Fides()` (fides' trust region on the same compiled
    objective: slower per start, and it leaves the plateaus where the default stops;
    an optional dependency). `out`: a JSON file that keeps every finished fit, written
    after each: the same call again (same problem, starts, `free`, `max_steps`,
    optimizer and integrator) goes on where an interrupted one stopped; a file of
    another multi-start is refused. `progress`: a progress bar over the starts.

    **A model** (the arguments below):

    - `model`: the model whose `parameters` are estimated.
    - `data`: `(n_times, n_outputs)` measurements (or `(n_times,)` for one output), or a
      `Trajectory` from `ji.simulate` (its outputs). NaN marks a missing observation
      (a species not measured at some time): it is left out of the fit.
    - `times`: their times (default `model.times`).
    - `theta0`: the starting point (default the nominal values).
    - `free`: the parameters to estimate, as names or a boolean mask (default all); the
      others are held at `theta0`. A mask is an array argument: every mask of a model
      shares one compilation.
    - `sigma`: measurement standard deviations: a scalar, one per output, one per
      observation (`(times, outputs)` or flattened), or a `ji.MeasurementError`
      (`sigma = a |y| + b` from the data).
    - `solver`: `ji.LevenbergMarquardt()` (default: the engine every fit of a problem
      runs, here on the weighted residuals; plain solves only at trial points; stops on
      relative cost decrease), any optimistix least-squares solver or
      minimiser, or `ji.OptaxLD(...)` to follow the generalized gradient of eq. (25)
      with an optax optimiser.
    - `bounds`: `False` (unconstrained, in coordinates scaled by `|theta0|`), `True` (the
      model's bounds) or `(lower, upper)`: enforced by a smooth change of variables, so
      estimates stay inside. Parameters with an infinite bound are left unconstrained.
    - `max_steps`: iteration cap of the solver (default 256; a problem's: the
      optimizer's `max_steps`, 256 and fides' 1,000).
    - `throw`: raise when the solve did not converge (default, on a concrete call);
      under `jit` or `vmap` the status is in `result` unless `throw=True`.

    **Returns:** an `Estimate` with its status, standard errors and confidence
    intervals (the one result type of every call: with `starts`, its `fits` holds
    every start's fit). Jittable, and vmappable over `data`, `theta0`, `free` and `sigma` (a
    batch of data sets); under a trace a failure is a status (`ok`, `result`), or
    with `throw=True` a run-time error.

    **Example:**

    ```python
    est = ji.estimate(model, data, free=("theta1", "theta2", "theta4"))
    est.std_errors, est.confidence_intervals(0.95)
    ```
    """
    if isinstance(model, Problem) or starts is not None:
        optimizer = checked_optimizer(optimizer)
        ignored = [k for k, v in (("solver", solver), ("bounds", bounds))
                   if v is not None and v is not False]  # fmt: skip
        if ignored:
            raise TypeError(
                f"{', '.join(ignored)}: for a model's least squares without starts; a "
                "problem is fitted in its parameters' bounds by its own engine (hold "
                "parameters with free=..., no new compilation)."
            )
        if isinstance(model, Problem):
            if data is not None or times is not None:
                raise TypeError("A problem holds its data and times: give neither.")
            problem = model
        else:
            if data is None:
                raise TypeError("Give the data to estimate from.")
            data = data.ys if isinstance(data, Trajectory) else data
            problem = Problem.from_model(model, data, times, sigma)
        fits, fisher = estimate_problem(problem, starts=starts, key=key, theta0=theta0,
                                max_steps=optimizer.max_steps if max_steps is None else max_steps,
                                integrator=integrator,
                                progress=progress, batch=batch, free=free,
                                optimizer=optimizer, out=out)  # fmt: skip
        if throw is not False and not np.isfinite(fits.best_nll):
            raise RuntimeError(_every_fit_failed(problem, fits, integrator))
        return _best_of(problem, fits, fisher, integrator)
    if batch is not None or optimizer is not None or out is not None:
        raise TypeError(
            "batch, optimizer and out: for a problem's fits (give starts=...); a model's "
            "least squares takes solver=."
        )
    if data is None:
        raise TypeError("Give the data to estimate from.")
    problem = LeastSquares.build(model, data, times, theta0, sigma, bounds, integrator)
    est = problem.fit(problem.theta0, free, solver, 256 if max_steps is None else max_steps)
    if throw is True and is_traced(est):  # asked to check under a caller's trace
        return eqx.error_if(
            est,
            ~est.ok,
            "Estimation failed: the solver did not converge or the model could not be "
            "solved near the estimate (use throw=False and read .message).",
        )
    if is_traced(est) or throw is False:
        return est
    if not bool(est.ok):
        raise RuntimeError(f"Estimation failed: {est.message}.\n{est!r}")
    return est
