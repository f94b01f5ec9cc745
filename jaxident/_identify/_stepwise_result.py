"""The results of stepwise selection and the compiled Fisher-matrix pieces its loop
calls: the ranking on the scaled sensitivities, the invertibility test and the relative
standard deviations (Alberton et al. 2013, eqs. 1-5)."""

import json
import math
import os
from typing import Any, NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._linalg._misc import svdvals
from .._problem._measurements import MeasurementError, near_bound
from .._runtime._files import write_atomic


def worst_case_evaluations(n: int) -> dict[str, int]:
    """The largest number of evaluations (identifiability tests or re-estimations) that
    selecting among `n` parameters can need (Alberton et al. 2013, eqs. 4 and 5), as
    the paper evaluates them (961 parameters: 8,588 and 461,281):

    - set-by-set: `1 + sum_{m=2}^{n} ceil(log2 m)`, one parameter included per round
      after halving the candidate set down to one;
    - one-by-one: `1 + sum_{m=2}^{n} (m - 1)`, one parameter included per round after
      every other remaining parameter failed.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}.")
    n = int(n)
    bs = 1 + sum(math.ceil(math.log2(m)) for m in range(2, n + 1))
    cp = 1 + n * (n - 1) // 2
    return {"set_by_set": bs, "one_by_one": cp}


class Evaluation(NamedTuple):
    """One evaluation of a stepwise selection: a candidate set was tested (and, with
    re-estimation, re-estimated).

    - `added`: the parameters tried on top of the selection so far.
    - `accepted`: whether they were all accepted (a decision: a rejected set is an
      answer, not a failure).
    - `reason`: why not (empty where accepted).
    - `rank`, `size`: numerical rank of the weighted sensitivity columns of the set, and
      the size of the set.
    - `rcond`: `sigma_min / sigma_max` of those columns (the square root of the inverse
      condition number of the Fisher matrix of the set).
    - `cost`: weighted least-squares cost after the evaluation (NaN without
      re-estimation).
    - `seconds`: wall time of the evaluation.
    - `steps`: iterations of its re-estimation (0 without one); each solves the model
      once, and a computed Jacobian a few times more.
    """

    added: tuple[str, ...]
    accepted: bool
    reason: str
    rank: int
    size: int
    rcond: float
    cost: float
    seconds: float
    steps: int = 0


class StepwiseSelection(eqx.Module):
    """The result of `ji.set_by_set` or `ji.one_by_one`.

    **Fields:**

    - `procedure`: `set-by-set` or `one-by-one` (a `Procedure`, equal to its name);
      `criterion`: the name of the ranking used (read from `method`).
    - `names`: every parameter of the model; `candidates`: those that could be chosen.
    - `selected`: the identifiable parameters, in the order they were selected.
    - `theta`: the final parameter vector (re-estimated where `reestimate=True`; the
      non-selected parameters stay at their starting values); `theta0`: the start.
    - `relative_std`: `sigma_theta / |theta|` of each selected parameter, from the
      inverse Fisher matrix of the selected set at `theta` (eq. 1).
    - `cost`: the weighted least-squares cost at `theta`; `cost0` at `theta0`.
    - `history`: every `Evaluation`, in order; `n_evaluations`: their number, counted
      here; `worst_case`: `ji.worst_case_evaluations` for the candidates.
    - `reestimated` (read from `method`), `stop_reason`, `seconds`: whether each success
      was re-estimated, why the procedure stopped (an interrupted run, Ctrl-C, returns
      the selection so far and says so), and its wall time.
    - `at_bound`: selected parameters whose estimate ended within `1e-3` of the width of
      their box from a bound (on a log scale where both bounds are positive): their
      `relative_std` is not that of a free parameter.
    - `method` (the `ji.Stepwise` settings), `error` (the `ji.MeasurementError`, or a
      problem's sigma per datum),
      `bounds`: every setting of the run, recorded; `fingerprint`: a digest of the
      problem (data, errors, times, start, bounds, candidates), which `resume` checks.
    """

    procedure: str = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    candidates: tuple[str, ...] = eqx.field(static=True)
    selected: tuple[str, ...] = eqx.field(static=True)
    theta: np.ndarray
    theta0: np.ndarray
    relative_std: np.ndarray
    cost: float
    cost0: float
    history: tuple[Evaluation, ...] = eqx.field(static=True)
    worst_case: dict = eqx.field(static=True)
    at_bound: tuple[str, ...] = eqx.field(static=True)
    method: Any
    error: Any
    bounds: str = eqx.field(static=True)
    stop_reason: str = eqx.field(static=True)
    seconds: float
    fingerprint: str = eqx.field(static=True, default="")

    @property
    def criterion(self) -> str:
        """The name of the ranking used (from `method`)."""
        return self.method.criterion.name

    @property
    def reestimated(self) -> bool:
        """Whether each success was re-estimated (from `method`)."""
        return self.method.reestimate

    @property
    def n_evaluations(self) -> int:
        return len(self.history)

    @property
    def not_selected(self) -> tuple[str, ...]:
        chosen = set(self.selected)
        return tuple(n for n in self.names if n not in chosen)

    @property
    def estimates(self) -> dict[str, float]:
        """`{name: value}` of the selected parameters at the end."""
        th = np.asarray(self.theta)
        return {n: float(th[self.names.index(n)]) for n in self.selected}

    def to_dict(self) -> dict:
        def num(x):
            x = float(x)
            return x if np.isfinite(x) else None

        return {
            "procedure": self.procedure,
            "criterion": self.criterion,
            "reestimated": self.reestimated,
            "selected": list(self.selected),
            "n_selected": len(self.selected),
            "n_candidates": len(self.candidates),
            "n_evaluations": self.n_evaluations,
            "worst_case": dict(self.worst_case),
            "estimates": self.estimates,
            "relative_std": {n: num(v) for n, v in zip(self.selected, self.relative_std)},
            "cost0": num(self.cost0),
            "cost": num(self.cost),
            "at_bound": list(self.at_bound),
            "method": repr(self.method),
            "error": error_text(self.error),
            "bounds": self.bounds,
            "stop_reason": self.stop_reason,
            "seconds": self.seconds,
            "fingerprint": self.fingerprint,
            "history": [e._asdict() for e in self.history],
        }

    def __repr__(self) -> str:
        wc = self.worst_case[self.procedure.replace("-", "_")]
        lines = [
            f"{self.procedure} selection ({self.criterion}"
            + (", with re-estimation)" if self.reestimated else ")"),
            f"  selected {len(self.selected)} of {len(self.candidates)} candidates in "
            f"{self.n_evaluations} evaluations (worst case {wc:,}), {self.seconds:.1f} s",
            f"  stopped: {self.stop_reason}",
        ]
        if self.reestimated:
            lines.append(f"  cost {self.cost0:.6g} -> {self.cost:.6g}")
        shown = self.selected[:12]
        th = np.asarray(self.theta)
        w = max([len(n) for n in shown], default=4)
        for n, rs in zip(shown, self.relative_std):
            v = th[self.names.index(n)]
            flag = "  (at a bound)" if n in self.at_bound else ""
            lines.append(f"    {n:<{w}} = {v:<12.6g} sigma/|theta| = {rs:.3g}{flag}")
        if len(self.selected) > len(shown):
            lines.append(f"    ... and {len(self.selected) - len(shown)} more")
        return "\n".join(lines)


def at_bound(problem, point, order, rel: float = 1e-3) -> tuple[str, ...]:
    """Names of the selected parameters within `rel` of their box's width from a bound,
    in the coordinates of the re-estimation's change of variables (logarithmic where
    both bounds are positive)."""
    if not (problem.bounded and problem.method.reestimate) or not order:
        return ()
    th, lo, up = (jnp.asarray(x, float) for x in (point.theta, problem.lower, problem.upper))
    near = np.asarray(near_bound(th, lo, up, True, rel))
    return tuple(problem.names[j] for j in order if near[j])


# --- checkpoints: the state a resumed run starts from ---

_CHECKPOINT_KEY = "jaxident stepwise checkpoint"


class Saved(NamedTuple):
    """A run's state after its last accepted step."""

    selected: tuple[str, ...]
    theta: np.ndarray
    cost0: float
    history: tuple[Evaluation, ...]


def error_text(error) -> str:
    """The error model as recorded; a problem's sigma, given per datum, as words (its
    values are in the fingerprint)."""
    return repr(error) if isinstance(error, MeasurementError) else "the problem's sigma"


def _settings(procedure, fingerprint, method, error, bounds) -> dict:
    """What a resumed run must share with the run it continues."""
    return {
        "procedure": procedure,
        "fingerprint": fingerprint,
        "method": repr(method),
        "error": error_text(error),
        "bounds": bounds,
    }


def _settings_of(problem, procedure) -> dict:
    return _settings(procedure, problem.fingerprint, problem.method, problem.error,
                     problem.bounds_text)  # fmt: skip


def save_checkpoint(path, problem, procedure, order, theta, cost0, history):
    """Write the run's state to `path` (JSON, replaced atomically: a crash while writing
    leaves the previous checkpoint)."""
    state = {
        _CHECKPOINT_KEY: 1,
        **_settings_of(problem, procedure),
        "selected": [problem.names[j] for j in order],
        "theta": np.asarray(theta, float).tolist(),  # repr floats: read back exactly
        "cost0": float(cost0),
        "history": [e._asdict() for e in history],
    }
    write_atomic(path, json.dumps(state))


def resume_state(resume, problem, procedure) -> Saved:
    """The state to go on from: a `StepwiseSelection` or a checkpoint file, checked
    against this problem and its settings; the history is cut after its last success
    (a round ends with a success, so the unfinished round is made again)."""
    want = _settings_of(problem, procedure)
    if isinstance(resume, StepwiseSelection):
        r = resume
        have = _settings(r.procedure, r.fingerprint, r.method, r.error, r.bounds)
        saved = Saved(resume.selected, np.asarray(resume.theta), resume.cost0, resume.history)
    elif isinstance(resume, (str, os.PathLike)):
        try:
            with open(resume) as f:
                state = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"Cannot read the checkpoint {os.fspath(resume)!r}: {e}") from e
        if not isinstance(state, dict) or state.get(_CHECKPOINT_KEY) != 1:
            raise ValueError(f"{os.fspath(resume)!r} is not a jaxident stepwise checkpoint.")
        have = {k: state.get(k) for k in want}
        history = tuple(Evaluation(**{**e, "added": tuple(e["added"])}) for e in state["history"])
        saved = Saved(tuple(state["selected"]), np.asarray(state["theta"], float),
                      float(state["cost0"]), history)  # fmt: skip
    else:
        raise TypeError(
            "resume must be a StepwiseSelection from an interrupted run or the path of a "
            f"checkpoint file, got {type(resume).__name__}."
        )
    differ = [k for k in want if have[k] != want[k]]
    if differ:
        detail = "; ".join(f"{k}: {have[k]!r} here {want[k]!r}" for k in differ)
        raise ValueError(
            "resume comes from a different problem or different settings, so it cannot be "
            f"continued ({detail}). Run with the same data, error model, start, bounds, "
            "candidates and method."
        )
    last = max((i for i, e in enumerate(saved.history) if e.accepted), default=-1)
    return saved._replace(history=saved.history[: last + 1])


# --- the jitted pieces: one compilation per model, data shape and configuration ---


def scaled_columns(S, theta, row_scale):
    col = jnp.where(theta != 0, jnp.abs(theta), 1.0)
    return S * col[None, :] / row_scale[:, None]


@eqx.filter_jit
def rank_and_scale(S, theta, row_mean, sigma, selected, criterion):
    """The ranking on `B_N` (eq. 2) and the weighted columns `W` of the Fisher matrix
    in log-parameters (eq. 1): `W^T W = diag(theta) FIM diag(theta)`."""
    B = scaled_columns(S, theta, row_mean)
    W = scaled_columns(S, theta, sigma)
    order, scores = criterion(B, selected)
    return order, scores, criterion.eligible(scores), W


@eqx.filter_jit
def fisher_test(W, mask, rank):
    """Is the Fisher matrix of the columns in `mask` invertible? Decided from the
    singular values of the weighted columns, never from W^T W."""
    n, p = W.shape
    s = svdvals(jnp.where(mask[None, :], W, 0.0))
    s = jnp.concatenate([s, jnp.zeros(max(p - s.shape[0], 0), s.dtype)])
    k = rank(s, (n, p))
    size = jnp.sum(mask).astype(jnp.int32)
    smin = s[jnp.clip(size - 1, 0, p - 1)]
    rcond = jnp.where(s[0] > 0, smin / jnp.where(s[0] > 0, s[0], 1.0), 0.0)
    finite = jnp.all(jnp.isfinite(W))
    return (k >= size) & finite, k, rcond


@eqx.filter_jit
def relative_std(W, mask):
    """`sqrt(diag((W_s^T W_s)^-1))` for the selected columns: `sigma_theta / |theta|`
    (W is in log-parameters), from the SVD of `W_s`."""
    Ws = jnp.where(mask[None, :], W, 0.0)
    _, s, vt = jnp.linalg.svd(Ws, full_matrices=False)
    size = jnp.sum(mask)
    idx = jnp.arange(s.shape[0])
    good = idx < size
    inv = jnp.where(good & (s > 0), 1.0 / jnp.where(s > 0, s, 1.0) ** 2, 0.0)
    var = jnp.sum(vt**2 * inv[:, None], axis=0)
    singular = jnp.any(good & (s <= 0))
    return jnp.where(singular, jnp.inf, jnp.sqrt(var))


def scaled_sensitivity(
    S: Float[Array, "n p"], theta: Float[Array, " p"], row_scale: Float[Array, " n"]
) -> Float[Array, "n p"]:
    """`diag(row_scale)^-1 S diag(|theta|)` of a sensitivity matrix `S` `(n, p)` at
    parameters `theta`: Alberton et al. eq. (2) with `row_scale` the
    mean measurement of each row's output, or the square root of the Fisher matrix in
    log-parameters with `row_scale = sigma` (a zero `theta_j` scales by 1)."""
    return scaled_columns(jnp.asarray(S), jnp.asarray(theta), jnp.asarray(row_scale))
