"""The problem a stepwise selection works on: checked inputs, the point (estimates,
residuals and sensitivities) it stands at, and one evaluation: the Fisher test of a
candidate set, its re-estimation, and the Fisher test again at the re-estimate
(Alberton et al. 2013, Fig. 4)."""

import hashlib
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .._fit._estimate import LeastSquares
from .._fit._solvers import LevenbergMarquardt
from .._problem._measurements import MeasurementError
from .._problem._sensitivity import sensitivity
from ._stepwise_method import Stepwise
from ._stepwise_result import fisher_test, rank_and_scale, scaled_columns


class Point(NamedTuple):
    """The model at one parameter vector: weighted residuals and sensitivities (zero
    rows where a datum is missing)."""

    theta: Array
    residual: np.ndarray
    S: Array
    ok: bool

    @property
    def cost(self) -> float:
        return float(self.residual @ self.residual) if self.ok else np.inf


class Outcome(NamedTuple):
    """What one evaluation found (see `Evaluation`), and the point to go on from."""

    success: bool
    reason: str
    point: Point
    rank: int
    size: int
    rcond: float
    cost: float
    steps: int = 0


class StepwiseProblem:
    """Everything a stepwise procedure needs, checked once; the loop itself is plain
    Python (its control flow depends on the outcomes) around compiled kernels: the
    sensitivity matrix at the start, and the re-estimation kernels for every
    re-estimation (one compilation for every candidate set: the set is a mask)."""

    def __init__(self, model, data, times, theta0, error, candidates, bounds, method, integrator):
        if not isinstance(method, Stepwise):
            raise TypeError(f"method must be a ji.Stepwise(...) configuration, got {method!r}.")
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
        n_out = self.data.size // n_times
        given = self.observed.reshape(n_times, n_out)
        absolute = np.abs(np.asarray(self.data)).reshape(n_times, n_out)
        count = given.sum(axis=0)
        per_output = np.where(given, absolute, 0.0).sum(axis=0) / np.maximum(count, 1)
        per_output = np.where(per_output > 0, per_output, 1.0)
        self.row_mean = jnp.asarray(np.where(self.observed, np.tile(per_output, n_times), np.inf))
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
        digest = hashlib.sha256()
        for a in (self.data, self.sigma, self.ls.times, self.theta0, self.ls.lower,
                  self.ls.upper, self.candidate_mask):  # fmt: skip
            digest.update(np.ascontiguousarray(np.asarray(a)).tobytes())
        digest.update(repr((type(model).__name__, self.names)).encode())
        self.fingerprint = digest.hexdigest()[:16]

    def start(self) -> Point:
        ls = self.ls
        sens = sensitivity(ls.model, ls.theta0, ls.times, integrator=ls.integrator, throw=False)
        r = (np.asarray(sens.outputs) - np.asarray(self.data)) / np.asarray(self.sigma)
        S = jnp.where(jnp.asarray(self.observed)[:, None], sens.matrix, 0.0)
        point = Point(self.theta0, np.where(self.observed, r, 0.0), S, bool(sens.ok))
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
        return Point(est.theta, r, S, finite), est

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
            reason = "re-estimation failed: the model could not be solved near the estimate"
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


# A re-estimation "reduces" the cost unless it ends above the start by more than this
# fraction (rounding in a sum of squares of a few thousand terms is far below it).
COST_SLACK = 1e-10
