"""Stepwise parameter selection with simultaneous re-estimation: the set-by-set (binary
search) procedure of Alberton, Alberton, Di Maggio, Diaz & Secchi (2013) and the
classical one-by-one procedure it accelerates."""

import os
import time
import warnings
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike
from tqdm.auto import tqdm

from .._model._base import AbstractModel, Integrator
from .._problem._base import Problem
from .._problem._measurements import MeasurementError
from .._solve._simulate import Trajectory
from ._stepwise_method import Procedure, Stepwise
from ._stepwise_problem import ModelStepwise, ProblemStepwise
from ._stepwise_result import (
    at_bound,
    Evaluation,
    relative_std,
    resume_state,
    save_checkpoint,
    StepwiseSelection,
    worst_case_evaluations,
)


def _run(problem: ModelStepwise, procedure: Procedure, progress: bool, checkpoint, resume):
    p = len(problem.names)
    t_start = time.perf_counter()
    selected = np.zeros(p, bool)
    order: list[int] = []
    history: list[Evaluation] = []
    if resume is None:
        point = problem.start()
        cost0 = point.cost
    else:  # from the last accepted point; the interrupted round is made again
        saved = resume_state(resume, problem, procedure)
        order = [problem.names.index(n) for n in saved.selected]
        selected[order] = True
        history = list(saved.history)
        point = problem.at(saved.theta)
        cost0 = saved.cost0
    bar = tqdm(desc=procedure, unit="eval", disable=not progress, initial=len(history))
    ranked, W = problem.assess(point, selected)
    stop = ""

    def report(steps, cost):  # inside a re-estimation
        bar.set_postfix_str(f"selected {int(selected.sum())}, fit step {steps}, cost {cost:.6g}")

    def evaluate(added):
        t0 = time.perf_counter()
        out = problem.evaluate(point, W, selected, added, report)
        names = tuple(problem.names[j] for j in added)
        seconds = time.perf_counter() - t0
        history.append(Evaluation(names, out.accepted, out.reason, out.rank, out.size,
                                  out.rcond, out.cost, seconds, out.steps))  # fmt: skip
        bar.update(1)
        bar.set_postfix_str(f"selected {int(selected.sum()) + (len(added) if out.accepted else 0)}")
        if checkpoint is not None:
            chosen = order + list(added) if out.accepted else order
            save_checkpoint(checkpoint, problem, procedure, chosen, out.point.theta, cost0, history)
        return out

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
            for trial in procedure.trials(ranked):
                out = evaluate(trial)
                if out.accepted:
                    accepted = (trial, out.point)
                    break
            if accepted is None:
                stop = (
                    "no parameter is identifiable"
                    if not selected.any()
                    else "no further parameter can be added"
                )
                break
            added, point = accepted
            selected[added] = True
            order.extend(added)
            ranked, W = problem.assess(point, selected)
    except KeyboardInterrupt:
        # Ctrl-C: the selection so far, every evaluation made, at the last accepted point
        stop = "interrupted (KeyboardInterrupt): the selection so far"
        warnings.warn(
            f"{procedure} interrupted after {len(history)} evaluations; returning the "
            f"{len(order)} parameters selected so far (pass it as resume= to go on).",
            stacklevel=3,
        )
    finally:
        bar.close()

    return _selection(problem, procedure, point, W, selected, order, cost0, history, stop,
                      time.perf_counter() - t_start)  # fmt: skip


def _selection(problem, procedure, point, W, selected, order, cost0, history, stop, seconds):
    """The `StepwiseSelection` of a run that ended at `point` with `order` selected."""
    rel = np.asarray(relative_std(W, jnp.asarray(selected)))
    return StepwiseSelection(
        procedure=procedure,
        names=problem.names,
        candidates=problem.candidates,
        selected=tuple(problem.names[j] for j in order),
        theta=np.asarray(point.theta),
        theta0=np.asarray(problem.theta0),
        relative_std=rel[order] if order else np.zeros(0),
        cost=point.cost,
        cost0=cost0,
        history=tuple(history),
        worst_case=worst_case_evaluations(len(problem.candidates)),
        at_bound=at_bound(problem, point, order),
        method=problem.method,
        error=problem.error,
        bounds=problem.bounds_text,
        stop_reason=stop,
        seconds=seconds,
        fingerprint=problem.fingerprint,
    )


_DOC_ARGS = """
    **Arguments:**

    - `model`: any jaxident model (ODE, DAE or `AlgebraicModel`); or a `ji.Problem`,
      which holds the data, times and noise: give neither `data`, `times` nor `error`
      then. A problem of one model with data (`Problem.is_one_model`) is that model's
      selection. Any other (several experiments, log scales, observable
      transformations, Laplace noise) is selected on all its experiments at once:
      `theta0` on its estimation scales, re-estimated by `ji.estimate`'s bounded fit of
      the problem in its bounds, with the noise held at its values; the result's
      `theta` is on the linear scale, its cost `sum r^2` (`2 sum |r|` for Laplace
      noise: -2 log L up to the noise's constant).
    - `data`: the measurements, `(n_times, n_outputs)` (or `(n_times,)`, or a
      `Trajectory`); NaN marks a missing observation (no weight in the fits and the
      Fisher matrices).
    - `times`: their times (default `model.times`).
    - `theta0`: the initial estimates (default: the nominal values). The selection
      depends on them (the paper's cases a.1 and a.2); with re-estimation, less.
    - `error`: `ji.MeasurementError(relative, absolute)`, `sigma = a |y| + b` (eq. 26),
      which weights the Fisher matrix and the re-estimation; `a` and `b` are scalars or
      one value per output (an error model per measured species).
    - `candidates`: names of the parameters that may be selected (default all); the
      others are held.
    - `bounds`: `True` (the model's bounds, default), `False`, or `(lower, upper)`,
      respected by the re-estimation.
    - `method`: a `ji.Stepwise(criterion, rank, reestimate, solver, max_steps)`: how
      candidates are ranked, when a set counts as estimable, and whether and how it is
      re-estimated (default `ji.Stepwise()`: orthogonalization ranking, no
      re-estimation).
    - `integrator`: solver and tolerances of the model (default the model's).
    - `progress`: a progress bar over evaluations, showing the step and cost of a
      re-estimation while it runs.
    - `checkpoint`: a JSON file written after every evaluation (the selection so far,
      the current estimates and the history), to `resume` from after a crash.
    - `resume`: a `StepwiseSelection` returned by an interrupted run (Ctrl-C returns the
      selection so far) or a `checkpoint` file: the run goes on from its last accepted
      step (the unfinished round is made again) and ends where an uninterrupted run
      would. It must come from the same problem and settings (checked).

    **Returns:** a `StepwiseSelection`, with the evaluations counted and timed.

    **Raises:** `ValueError` / `TypeError` for bad data shapes, unknown names, bounds
    that exclude `theta0` and wrong argument types; `RuntimeError` if the model cannot
    be solved at the current parameters.
"""


def _stepwise(procedure, model, data, times, theta0, error, candidates, bounds, method,
              integrator, progress, checkpoint, resume):  # fmt: skip
    if not isinstance(method, Stepwise):
        raise TypeError(f"method must be a ji.Stepwise(...) configuration, got {method!r}.")
    problem = None
    if isinstance(model, Problem):
        if data is not None or times is not None:
            raise TypeError("A problem holds its data and times: give neither.")
        if repr(error) != repr(MeasurementError()):
            raise TypeError("A problem holds its noise (sigma): give no error model.")
        if not bool(np.any(np.isfinite(np.asarray(model.data)) & np.asarray(model.observed))):
            raise ValueError(f"ji.{procedure.name} needs data: the problem has none.")
        if not model.is_one_model:  # several experiments, log scales, ...
            if bounds is not True:
                raise TypeError("A problem is re-estimated in its parameters' bounds: "
                                "give no bounds.")  # fmt: skip
            problem = ProblemStepwise(model, theta0, candidates, method, integrator)
        else:
            view = model.as_model(f"ji.{procedure.name}")
            model, data, times, error = view.model, view.data, view.times, view.sigma
    elif data is None:
        raise TypeError("Give the data (or a ji.Problem, which holds them).")
    if problem is None:
        problem = ModelStepwise(
            model, data, times, theta0, error, candidates, bounds, method, integrator
        )  # fmt: skip
    if checkpoint is not None:
        checkpoint = os.fspath(checkpoint)
    return _run(problem, procedure, progress, checkpoint, resume)


def set_by_set(
    model: AbstractModel | Problem,
    data: ArrayLike | Sequence | Trajectory | None = None,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    error: MeasurementError = MeasurementError(),
    candidates: Sequence[str] | None = None,
    bounds: bool | tuple = True,
    method: Stepwise = Stepwise(),
    integrator: Integrator | None = None,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
    resume: StepwiseSelection | str | os.PathLike | None = None,
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
    args = (theta0, error, candidates, bounds, method, integrator, progress, checkpoint, resume)
    return _stepwise(Procedure.set_by_set, model, data, times, *args)


def one_by_one(
    model: AbstractModel | Problem,
    data: ArrayLike | Sequence | Trajectory | None = None,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    error: MeasurementError = MeasurementError(),
    candidates: Sequence[str] | None = None,
    bounds: bool | tuple = True,
    method: Stepwise = Stepwise(),
    integrator: Integrator | None = None,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
    resume: StepwiseSelection | str | os.PathLike | None = None,
) -> StepwiseSelection:
    """The classical one-by-one selection (Alberton et al. 2013, Fig. 1 and eq. 5), the
    baseline of `ji.set_by_set`: rank the parameters not yet selected and try adding
    them one at a time in that order; the first that keeps the Fisher matrix invertible
    (and, with re-estimation, re-estimates) is kept for good, and the rest are
    re-ranked. Stop when no remaining parameter can be added.
    """
    args = (theta0, error, candidates, bounds, method, integrator, progress, checkpoint, resume)
    return _stepwise(Procedure.one_by_one, model, data, times, *args)


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
