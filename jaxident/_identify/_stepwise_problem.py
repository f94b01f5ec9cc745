"""The problem a stepwise selection works on: checked inputs, the point (estimates,
residuals and sensitivities) it stands at, and one evaluation: the Fisher test of a
candidate set, its re-estimation, and the Fisher test again at the re-estimate
(Alberton et al. 2013, Fig. 4)."""

import hashlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array

from .._fit._estimate import LeastSquares
from .._fit._optimizers import FisherLM
from .._fit._solvers import LevenbergMarquardt
from .._model._checks import check_theta
from .._problem._base import from_scale, to_scale, unscale
from .._problem._measurements import MeasurementError
from .._problem._noise import per_output
from .._problem._predict import predict
from .._problem._scale import Scale
from .._problem._sensitivity import sensitivity
from .._runtime._results import first_failure, promoted, RESULTS, status_array, succeeded
from ._stepwise_result import fisher_test, rank_and_scale, scaled_columns


class Point(NamedTuple):
    """The model at one parameter vector (linear scale): weighted residuals and
    sensitivities (zero rows where a datum is missing), and the cost where it is not
    the residuals' sum of squares (Laplace noise: `2 sum |r|`)."""

    theta: Array
    residual: np.ndarray
    S: Array
    result: RESULTS
    value: float | None = None

    @property
    def ok(self) -> bool:
        return bool(succeeded(self.result))

    @property
    def cost(self) -> float:
        if not self.ok:
            return np.inf
        return float(self.residual @ self.residual) if self.value is None else self.value


class Outcome(NamedTuple):
    """What one evaluation found (see `Evaluation`), and the point to go on from."""

    accepted: bool
    reason: str
    point: Point
    rank: int
    size: int
    rcond: float
    cost: float
    steps: int = 0


def _output_scale(data, observed):
    """Each output's mean |datum| over its observed entries (the last axis is the
    output), the row scale of the ranking (Alberton et al. eq. 2); 1 for an output
    whose data are all zero or missing."""
    m = observed.shape[-1]
    count = observed.reshape(-1, m).sum(axis=0)
    total = np.where(observed, np.abs(data), 0.0).reshape(-1, m).sum(axis=0)
    per_output = total / np.maximum(count, 1)
    return np.where(per_output > 0, per_output, 1.0)


class ModelStepwise:
    """The stepwise selection of one model with data (least squares of its weighted
    residuals; `ProblemStepwise` for a `ji.Problem`). Everything a stepwise procedure
    needs, checked once; the loop itself is plain
    Python (its control flow depends on the outcomes) around compiled kernels: the
    sensitivity matrix at the start, and the re-estimation kernels for every
    re-estimation (one compilation for every candidate set: the set is a mask)."""

    def __init__(self, model, data, times, theta0, error, candidates, bounds, method, integrator):
        if not isinstance(error, (MeasurementError, np.ndarray)):  # (ndarray: a problem's)
            raise TypeError(
                f"error must be a ji.MeasurementError(relative, absolute), got {error!r}."
            )
        self.method, self.error = method, error
        self.bounds_text = (
            "the model's bounds" if bounds is True
            else "none" if bounds is False or bounds is None
            else "given (lower, upper)"
        )  # fmt: skip
        self.ls = LeastSquares.build(model, data, times, theta0, error, bounds, integrator)
        params = model.parameters
        self.names = params.names
        self.theta0, self.data, self.sigma = self.ls.theta0, self.ls.data, self.ls.sigma
        # a missing datum (NaN) has sigma = inf: no weight in the fit and the Fisher test
        self.observed = np.isfinite(np.asarray(self.sigma))
        n_times = self.ls.times.shape[0]
        given = self.observed.reshape(n_times, -1)
        per_output = _output_scale(np.asarray(self.data).reshape(given.shape), given)
        self.row_mean = jnp.asarray(np.where(self.observed, np.tile(per_output, n_times), np.inf))
        self.lower, self.upper, self.bounded = self.ls.lower, self.ls.upper, self.ls.bounded
        self._candidates(candidates, params)
        self._fingerprint(model, (self.data, self.sigma, self.ls.times, self.theta0,
                                  self.ls.lower, self.ls.upper))  # fmt: skip

    def _candidates(self, candidates, params):
        if candidates is None:
            cand = tuple(range(params.p))
        else:
            if isinstance(candidates, str):
                candidates = (candidates,)
            cand = tuple(sorted(set(params.indices(tuple(candidates)))))
            if not cand:
                raise ValueError("candidates is empty.")
        self.candidate_mask = np.zeros(params.p, bool)
        self.candidate_mask[list(cand)] = True
        self.candidates = tuple(self.names[i] for i in cand)

    def _fingerprint(self, model, arrays):
        digest = hashlib.sha256()
        for a in (*arrays, self.candidate_mask):
            digest.update(np.ascontiguousarray(np.asarray(a)).tobytes())
        digest.update(repr((type(model).__name__, self.names)).encode())
        self.fingerprint = digest.hexdigest()[:16]

    def start(self) -> Point:
        ls = self.ls
        sens = sensitivity(ls.model, ls.theta0, ls.times, integrator=ls.integrator, throw=False)
        r = (np.asarray(sens.outputs) - np.asarray(self.data)) / np.asarray(self.sigma)
        S = jnp.where(jnp.asarray(self.observed)[:, None], sens.matrix, 0.0)
        point = Point(self.theta0, np.where(self.observed, r, 0.0), S, sens.result)
        if not point.ok:
            raise RuntimeError(
                f"The sensitivity matrix of {type(ls.model).__name__} could not be computed "
                "at theta0 (the model solve failed or gave NaN). Check theta0 and the "
                "integrator's tolerances and max_steps."
            )
        return point

    def at(self, theta) -> Point:
        """The point at `theta` as a re-estimation leaves it (a resumed run): the
        re-estimation's kernels with no free parameter."""
        theta = jnp.asarray(theta, float)
        if not self.method.reestimate or bool(jnp.all(theta == self.theta0)):
            return self.start()
        point, _ = self.reestimate(theta, np.zeros(theta.size, bool))
        if not point.ok:
            raise RuntimeError("The model could not be solved at the resumed run's estimate.")
        return point

    def assess(self, point: Point, selected):
        """The ranked eligible candidates at `point`, and the weighted columns `W`.
        Parameters outside the candidate set get zero columns: never ranked, never
        part of a tested set, and not projected out (they are held, not selected)."""
        S = jnp.where(jnp.asarray(self.candidate_mask)[None, :], point.S, 0.0)
        order, _, eligible, W = rank_and_scale(
            S, point.theta, self.row_mean, self.sigma, jnp.asarray(selected), self.method.criterion
        )
        elig = np.asarray(eligible) & ~np.asarray(selected) & self.candidate_mask
        return [int(j) for j in np.asarray(order) if elig[j]], W

    def reestimate(self, theta, mask, report=None):
        """Least squares over the parameters in `mask` (the re-estimation engine), the
        others held at `theta`; returns the new point and the `Estimate`."""
        method, mask = self.method, jnp.asarray(mask)
        if isinstance(method.solver, LevenbergMarquardt):
            est = self.ls.fit_in_chunks(theta, mask, method.solver, method.max_steps, report)
        else:
            est = self.ls.fit(theta, mask, method.solver, method.max_steps)
        finite = bool(jnp.all(jnp.isfinite(est.jacobian))) and bool(jnp.isfinite(est.cost))
        observed = jnp.asarray(self.observed)[:, None]
        S = jnp.where(observed, est.jacobian * jnp.where(observed, self.sigma[:, None], 0.0), 0.0)
        r = np.where(self.observed, np.asarray(est.residuals), 0.0)
        result = status_array(np.asarray(finite), RESULTS.nonfinite_sensitivity)
        return Point(est.theta, r, S, result), est

    def _fisher_test(self, W, mask) -> tuple[bool, int, float]:
        ok, k, rcond = fisher_test(W, jnp.asarray(mask), self.method.rank)
        return bool(ok), int(k), float(rcond)

    def evaluate(self, point: Point, W, selected, added, report=None) -> Outcome:
        """Test `selected + added`; with re-estimation, re-estimate it and test the
        Fisher matrix again at the re-estimate."""
        mask = np.array(selected, bool)
        mask[list(added)] = True
        ok, k, rcond = self._fisher_test(W, mask)
        size = int(mask.sum())
        if not ok:
            reason = f"Fisher matrix singular (rank {k} < {size})"
            return Outcome(False, reason, point, k, size, rcond, np.nan)
        if not self.method.reestimate:
            return Outcome(True, "", point, k, size, rcond, np.nan)
        new, est = self.reestimate(point.theta, mask, report)
        steps = int(est.steps)
        if not new.ok or not (bool(est.ok) or bool(est.stopped_at_max_steps)):
            why = est.message if new.ok else "the model could not be solved near the estimate"
            reason = f"re-estimation failed: {why}"
            return Outcome(False, reason, point, k, size, rcond, np.nan, steps)
        if new.cost > point.cost * (1 + COST_SLACK):
            reason = f"re-estimation did not reduce the cost ({point.cost:.6g} -> {new.cost:.6g})"
            return Outcome(False, reason, point, k, size, rcond, new.cost, steps)
        note = ""
        if bool(est.stopped_at_max_steps):
            note = f"re-estimation did not converge in max_steps={steps}"
            if not self.method.accept_unconverged:
                return Outcome(False, note, point, k, size, rcond, new.cost, steps)
            note = f"(accepted: {note})"
        # the paper's test once more, at the re-estimated values (eq. 1 at the new theta)
        ok, k, rcond = self._fisher_test(scaled_columns(new.S, new.theta, self.sigma), mask)
        if not ok:
            reason = f"Fisher matrix singular at the re-estimate (rank {k} < {size})"
            return Outcome(False, reason, point, k, size, rcond, new.cost, steps)
        return Outcome(True, note, new, k, size, rcond, new.cost, steps)


class _Fit(NamedTuple):
    """What `evaluate` reads of a problem's re-estimation."""

    steps: int
    result: RESULTS
    stopped_at_max_steps: bool
    message: str

    @property
    def ok(self) -> bool:
        return bool(succeeded(self.result))


class ProblemStepwise(ModelStepwise):
    """The stepwise selection of a `ji.Problem` that is not one model with data: several
    experiments (conditions, pre-equilibration, steady-state measurements), parameters
    on log scales, observable transformations, Laplace noise. Its points come from
    `ji.predict` (every experiment's weighted residuals and their Jacobian), and a
    re-estimation is `ji.estimate`'s bounded fit of the problem with the parameters
    outside the set held. Rows are every (experiment, time, output) with a datum;
    `S = dr/dtheta * sigma(theta0)` on the linear scale, so that the Fisher matrix in
    log-parameters is `(S diag|theta| / sigma(theta0))^T (...)` at any point; the
    ranking's row scale is each output's mean |datum| over all experiments (1 for a
    log-transformed output, whose residuals are already relative)."""

    def __init__(self, problem, theta0, candidates, method, integrator):
        if any(problem.noise_outputs):
            raise ValueError(
                "A stepwise selection holds the noise at its values, and this problem "
                "estimates noise parameters: load it without them (ji.petab.load(..., "
                "estimate_noise=False)), after fitting them if need be."
            )
        self.problem, self.method, self.error = problem, method, MeasurementError()
        self.integrator = problem.model.integrator if integrator is None else integrator
        self.bounds_text = "the problem's bounds"
        params = problem.parameters
        self.names = params.names
        self.scales = problem.scales
        theta0 = np.asarray(check_theta(problem, theta0), float)
        outside = [n for n, v, a, b in zip(self.names, theta0, params.lower, params.upper)
                   if not a <= v <= b]  # fmt: skip
        if outside:
            raise ValueError(f"theta0 lies outside the problem's bounds for {outside}.")
        self.theta0 = jnp.asarray(from_scale(theta0, self.scales))
        self.lower = jnp.asarray(from_scale(params.lower, self.scales))
        self.upper = jnp.asarray(from_scale(params.upper, self.scales))
        self.bounded = True
        # (e, n, m), where there is a datum (an experiment without data is not fitted)
        observed = np.asarray(problem.observed) & np.isfinite(np.asarray(problem.data))
        self.observed = observed.reshape(-1)
        # one solve at theta0 gives the noise there and the first point
        out = predict(problem, theta0, jacobian=True, integrator=self.integrator, throw=False)
        self.sigma = jnp.asarray(np.where(self.observed, np.asarray(out.sigma).reshape(-1),
                                          np.inf))  # fmt: skip
        data = np.where(observed, np.asarray(problem.data), 0.0)
        logs = np.array([t != Scale.lin for t in problem.transforms])
        per_output = np.where(logs, 1.0, _output_scale(data, observed))
        row = np.broadcast_to(per_output, observed.shape).reshape(-1)
        self.row_mean = jnp.asarray(np.where(self.observed, row, np.inf))
        self.data = jnp.asarray(data.reshape(-1))
        self._candidates(candidates, params)
        self._fingerprint(problem.model, (self.data, self.sigma, problem.times, self.theta0,
                                          self.lower, self.upper))  # fmt: skip
        self.first = self._point(self.theta0, out)
        if not self.first.ok:
            raise RuntimeError(
                f"The sensitivities of {problem.name!r} could not be computed at theta0 (a "
                "solve failed or gave NaN). Check theta0 and the integrator's tolerances "
                "and max_steps."
            )

    def _point(self, theta_lin, out=None) -> Point:
        """The point at `theta_lin`: one solve of every experiment with sensitivities
        (`out`, where it is made already)."""
        theta = jnp.asarray(to_scale(np.asarray(theta_lin), self.scales))
        if out is None:
            out = predict(self.problem, theta, jacobian=True, integrator=self.integrator,
                          throw=False)  # fmt: skip
        q = theta.shape[0]
        r = np.where(self.observed, np.asarray(out.residuals).reshape(-1), 0.0)
        J = jnp.asarray(out.jacobian).reshape(-1, q)  # dr / d theta on the estimation scale
        dlin = jax.jvp(lambda t: unscale(t, self.scales), (theta,), (jnp.ones_like(theta),))[1]
        sigma0 = jnp.where(jnp.isfinite(self.sigma), self.sigma, 0.0)
        S = jnp.where(jnp.asarray(self.observed)[:, None], J / dlin * sigma0[:, None], 0.0)
        result = first_failure(out.result)
        if bool(succeeded(result)) and not bool(jnp.all(jnp.isfinite(S))):
            result = RESULTS.nonfinite_sensitivity
        shape = self.problem.observed.shape
        value = float(
            np.sum(per_output(self.problem.distributions, lambda d: d.cost, r.reshape(shape)))
        )
        return Point(jnp.asarray(theta_lin, float), r, S, result, value)

    def start(self) -> Point:
        return self.first

    def at(self, theta) -> Point:
        point = self._point(jnp.asarray(theta, float))
        if not point.ok:
            raise RuntimeError("The model could not be solved at the resumed run's estimate.")
        return point

    def reestimate(self, theta, mask, report=None):
        """`ji.estimate`'s fit of the problem over the parameters in `mask`, the others
        held at `theta`, with the stepwise method's `max_steps` (and the `rtol` of a
        `ji.LevenbergMarquardt` solver: the relative decrease of the cost that ends it)."""
        start = to_scale(np.asarray(theta), self.scales)
        optimizer = FisherLM(rtol=getattr(self.method.solver, "rtol", 1e-8))
        theta_new, _, steps, result, *_ = optimizer.fit(
            self.problem, start, np.asarray(mask, bool), self.integrator, self.method.max_steps
        )
        point = self._point(jnp.asarray(from_scale(theta_new, self.scales)))
        capped = bool(result == optx.RESULTS.nonlinear_max_steps_reached)
        message = (
            "no step lowers the cost, yet the gradient does not vanish (stagnation)"
            if bool(result == optx.RESULTS.stagnation)
            else "the model could not be solved near the estimate"
        )
        if report is not None:
            report(int(steps), point.cost)
        return point, _Fit(int(steps), promoted(result), capped, message)


# A re-estimation "reduces" the cost unless it ends above the start by more than this
# fraction (rounding in a sum of squares of a few thousand terms is far below it).
COST_SLACK = 1e-10
