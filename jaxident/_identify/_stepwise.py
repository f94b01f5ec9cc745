"""Stepwise parameter selection with simultaneous re-estimation: the set-by-set (binary
search) procedure of Alberton, Alberton, Di Maggio, Diaz & Secchi (2013) and the
classical one-by-one procedure it accelerates."""

import math
import time
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .._context import clean_errors
from .._estimate import LeastSquares
from .._measurements import MeasurementError
from .._model import AbstractModel, Integrator
from .._sensitivity import sensitivity
from .._simulate import Trajectory
from ._stepwise_method import Stepwise
from ._stepwise_result import (
    at_bound,
    Evaluation,
    fisher_test,
    rank_and_scale,
    relative_std,
    StepwiseSelection,
    worst_case_evaluations,
)


# --- the procedures ---


class _Point(NamedTuple):
    """The model at one parameter vector: weighted residuals and sensitivities."""

    theta: Array
    residual: np.ndarray
    S: Array
    ok: bool

    @property
    def cost(self) -> float:
        return float(self.residual @ self.residual) if self.ok else np.inf


class _Problem:
    """Everything a stepwise procedure needs, checked once; the loop itself is plain
    Python (its control flow depends on the outcomes) around two compiled kernels: the
    sensitivity matrix at the start, and `ji.estimate`'s kernel for every
    re-estimation (one compilation for every candidate set: the set is a mask)."""

    def __init__(self, model, data, times, theta0, error, candidates, bounds, method, integrator):
        if not isinstance(method, Stepwise):
            raise TypeError(f"method must be a ji.Stepwise(...) configuration, got {method!r}.")
        if not isinstance(error, MeasurementError):
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
        n_out = self.data.size // self.ls.times.shape[0]
        per_output = jnp.mean(jnp.abs(self.data.reshape(-1, n_out)), axis=0)
        per_output = jnp.where(per_output > 0, per_output, 1.0)
        self.row_mean = jnp.tile(per_output, self.ls.times.shape[0])
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

    def start(self) -> _Point:
        ls = self.ls
        sens = sensitivity(ls.model, ls.theta0, ls.times, integrator=ls.integrator, throw=False)
        r = (np.asarray(sens.outputs) - np.asarray(self.data)) / np.asarray(self.sigma)
        point = _Point(self.theta0, r, sens.matrix, bool(sens.ok))
        if not point.ok:
            raise RuntimeError(
                f"The sensitivity matrix of {type(ls.model).__name__} could not be computed "
                "at theta0 (the model solve failed or gave NaN). Check theta0 and the "
                "integrator's tolerances and max_steps."
            )
        return point

    def assess(self, point: _Point, selected):
        """The ranked eligible candidates at `point`, and the weighted columns `W`.
        Parameters outside the candidate set get zero columns: never ranked, never
        part of a tested set, and not projected out (they are held, not selected)."""
        S = jnp.where(jnp.asarray(self.candidate_mask)[None, :], point.S, 0.0)
        order, _, eligible, W = rank_and_scale(
            S, point.theta, self.row_mean, self.sigma, jnp.asarray(selected), self.method.criterion
        )
        elig = np.asarray(eligible) & ~np.asarray(selected) & self.candidate_mask
        return [int(j) for j in np.asarray(order) if elig[j]], W

    def reestimate(self, point: _Point, mask) -> tuple[_Point, bool]:
        """Least squares over the parameters in `mask` (`ji.estimate`'s kernel), the
        others held at `point.theta`; returns the new point and whether it converged."""
        est = self.ls.fit(point.theta, jnp.asarray(mask), self.method.solver, self.method.max_steps)
        finite = bool(jnp.all(jnp.isfinite(est.jacobian))) and bool(jnp.isfinite(est.cost))
        S = est.jacobian * self.sigma[:, None]
        new = _Point(est.theta, np.asarray(est.residuals), S, finite)
        return new, bool(est.ok)

    def evaluate(self, point: _Point, W, selected, added):
        """Test `selected + added`; with re-estimation, also re-estimate it. Returns
        (success, reason, new point, rank, size, rcond, cost)."""
        mask = np.array(selected, bool)
        mask[list(added)] = True
        ok, k, rcond = fisher_test(W, jnp.asarray(mask), self.method.rank)
        ok, k, rcond = bool(ok), int(k), float(rcond)
        size = int(mask.sum())
        if not ok:
            reason = f"Fisher matrix singular (rank {k} < {size})"
            return False, reason, point, k, size, rcond, np.nan
        if not self.method.reestimate:
            return True, "", point, k, size, rcond, np.nan
        new, converged = self.reestimate(point, mask)
        if not new.ok:
            return False, "re-estimation failed (model solve)", point, k, size, rcond, np.nan
        if new.cost > point.cost * (1 + 1e-10):
            reason = "re-estimation did not reduce the cost"
            return False, reason, point, k, size, rcond, point.cost
        reason = "" if converged else "(re-estimation stopped at max_steps)"
        return True, reason, new, k, size, rcond, new.cost


def _run(problem: _Problem, procedure: str, progress: bool) -> StepwiseSelection:
    from tqdm.auto import tqdm

    p = len(problem.names)
    t_start = time.perf_counter()
    point = problem.start()
    cost0 = point.cost
    selected = np.zeros(p, bool)
    order: list[int] = []
    history: list[Evaluation] = []
    bar = tqdm(desc=procedure, unit="eval", disable=not progress)
    ranked, W = problem.assess(point, selected)
    stop = ""

    def record(added, ok, reason, k, size, rcond, cost, t0):
        history.append(
            Evaluation(
                tuple(problem.names[j] for j in added), ok, reason, k, size, rcond, cost,
                time.perf_counter() - t0,
            )
        )  # fmt: skip
        bar.update(1)
        bar.set_postfix(selected=int(selected.sum()) + (len(added) if ok else 0))

    try:
        while True:
            if not ranked:
                stop = (
                    "every candidate is selected"
                    if selected[problem.candidate_mask].all()
                    else "no remaining candidate passes the ranking criterion's cutoff"
                )
                break
            accepted = None
            if procedure == "set-by-set":
                a = math.ceil(len(ranked) / 2)
                while True:
                    t0 = time.perf_counter()
                    added = ranked[:a]
                    ok, reason, new, k, size, rcond, cost = problem.evaluate(
                        point, W, selected, added
                    )
                    record(added, ok, reason, k, size, rcond, cost, t0)
                    if ok:
                        accepted = (added, new)
                        break
                    if a == 1:
                        break
                    a = math.ceil(a / 2)
            else:
                for j in ranked:
                    t0 = time.perf_counter()
                    ok, reason, new, k, size, rcond, cost = problem.evaluate(
                        point, W, selected, [j]
                    )
                    record([j], ok, reason, k, size, rcond, cost, t0)
                    if ok:
                        accepted = ([j], new)
                        break
            if accepted is None:
                stop = (
                    "no parameter is identifiable"
                    if not selected.any()
                    else "no further parameter can be added"
                )
                break
            added, new = accepted
            selected[added] = True
            order.extend(added)
            point = new
            ranked, W = problem.assess(point, selected)
    except KeyboardInterrupt:
        # Ctrl-C: the selection so far, every evaluation made, at the last accepted point
        stop = "interrupted (KeyboardInterrupt): the selection so far"
        warnings.warn(
            f"{procedure} interrupted after {len(history)} evaluations; returning the "
            f"{len(order)} parameters selected so far.",
            stacklevel=3,
        )
    finally:
        bar.close()

    rel = np.asarray(relative_std(W, jnp.asarray(selected)))
    rel = rel[order] if order else np.zeros(0)
    return StepwiseSelection(
        procedure=procedure,
        names=problem.names,
        candidates=problem.candidates,
        selected=tuple(problem.names[j] for j in order),
        theta=np.asarray(point.theta),
        theta0=np.asarray(problem.theta0),
        relative_std=rel,
        cost=point.cost,
        cost0=cost0,
        history=tuple(history),
        worst_case=worst_case_evaluations(len(problem.candidates)),
        at_bound=at_bound(problem, point, order),
        method=problem.method,
        error=problem.error,
        bounds=problem.bounds_text,
        stop_reason=stop,
        seconds=time.perf_counter() - t_start,
    )


_DOC_ARGS = """
    **Arguments:**

    - `model`: any jaxident model (ODE, DAE or `AlgebraicModel`).
    - `data`: the measurements, `(n_times, n_outputs)` (or `(n_times,)`, or a
      `Trajectory`).
    - `times`: their times (default `model.times`).
    - `theta0`: the initial estimates (default: the nominal values). The selection
      depends on them (the paper's cases a.1 and a.2); with re-estimation, less.
    - `error`: `ji.MeasurementError(relative, absolute)`, `sigma = a |y| + b` (eq. 26),
      which weights the Fisher matrix and the re-estimation.
    - `candidates`: names of the parameters that may be selected (default all); the
      others are held.
    - `bounds`: `True` (the model's bounds, default), `False`, or `(lower, upper)`,
      respected by the re-estimation.
    - `method`: a `ji.Stepwise(criterion, rank, reestimate, solver, max_steps)`: how
      candidates are ranked, when a set counts as estimable, and whether and how it is
      re-estimated (default `ji.Stepwise()`: orthogonalization ranking, no
      re-estimation).
    - `integrator`: solver and tolerances of the model (default the model's).
    - `progress`: a progress bar over evaluations.

    **Returns:** a `StepwiseSelection`, with the evaluations counted and timed.

    **Raises:** `ValueError` / `TypeError` for bad data shapes, unknown names, bounds
    that exclude `theta0` and wrong argument types; `RuntimeError` if the model cannot
    be solved at the current parameters.
"""


def _stepwise(procedure, model, data, times, theta0, error, candidates, bounds, method,
              integrator, progress):  # fmt: skip
    problem = _Problem(
        model, data, times, theta0, error, candidates, bounds, method, integrator
    )  # fmt: skip
    return _run(problem, procedure, progress)


@clean_errors
def set_by_set(
    model: AbstractModel,
    data: ArrayLike | Sequence | Trajectory,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    error: MeasurementError = MeasurementError(),
    candidates: Sequence[str] | None = None,
    bounds: bool | tuple = True,
    method: Stepwise = Stepwise(),
    integrator: Integrator | None = None,
    progress: bool = True,
) -> StepwiseSelection:
    """Set-by-set parameter selection by binary search (Alberton et al. 2013, Fig. 4).

    Rank the parameters not yet selected; try adding the first half of them; while the
    Fisher matrix of the enlarged set is singular (or, with re-estimation, the
    re-estimation fails), halve the number added; on success keep them for good,
    re-estimate and re-rank the rest. Stop when every candidate is selected, when no
    remaining candidate passes the ranking's cutoff, or when adding even the single
    best-ranked one fails. Against the classical one-by-one procedure (`ji.one_by_one`)
    this needs far fewer evaluations (eqs. 4-5, `ji.worst_case_evaluations`).
    """
    args = (theta0, error, candidates, bounds, method, integrator, progress)
    return _stepwise("set-by-set", model, data, times, *args)


@clean_errors
def one_by_one(
    model: AbstractModel,
    data: ArrayLike | Sequence | Trajectory,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    error: MeasurementError = MeasurementError(),
    candidates: Sequence[str] | None = None,
    bounds: bool | tuple = True,
    method: Stepwise = Stepwise(),
    integrator: Integrator | None = None,
    progress: bool = True,
) -> StepwiseSelection:
    """The classical one-by-one selection (Alberton et al. 2013, Fig. 1 and eq. 5), the
    baseline of `ji.set_by_set`: rank the parameters not yet selected and try adding
    them one at a time in that order; the first that keeps the Fisher matrix invertible
    (and, with re-estimation, re-estimates) is kept for good, and the rest are
    re-ranked. Stop when no remaining parameter can be added.
    """
    args = (theta0, error, candidates, bounds, method, integrator, progress)
    return _stepwise("one-by-one", model, data, times, *args)


# The two procedures share their arguments; their docstrings share the description.
set_by_set.__doc__ += (
    _DOC_ARGS
    + """
    **Example:**

    ```python
    model = ji.models.load("linear_superparameterized")
    data = model.synthetic_data(jax.random.key(0))
    res = ji.set_by_set(model, data, theta0=model.initial_estimates("increasing"))
    res.selected          # ('theta31', 'theta30', ..., 'theta1')
    res.n_evaluations     # 5
    ```
"""
)
one_by_one.__doc__ += _DOC_ARGS
