"""Stepwise parameter selection with simultaneous re-estimation: the set-by-set (binary
search) procedure of Alberton, Alberton, Di Maggio, Diaz & Secchi (2013) and the
classical one-by-one procedure it accelerates."""

import math
import time
from collections.abc import Sequence
from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from .._checks import check_model, check_theta, check_times, n_outputs
from .._context import clean_errors
from .._estimate import _check_data, _transform, finite_residual
from .._linalg._misc import svdvals
from .._linalg._rank import AbstractRankRule, RelativeTolerance
from .._linalg._ranking import AbstractRankingCriterion, Orthogonalization
from .._model import AbstractModel, Integrator
from .._sensitivity import sensitivity
from .._simulate import solve, Trajectory


class MeasurementError(eqx.Module):
    """Measurement standard deviations `sigma_i = relative * |y_i| + absolute`, with
    `y_i` the measured value (Alberton et al. 2013, eq. 26: `sigma = a y + b`).

    **Arguments:** `relative` (`a`, default 0) and `absolute` (`b`, default 1). The
    paper's E. coli study used `a = 1e-2`, `b = 1e-6`.
    """

    relative: float = 0.0
    absolute: float = 1.0

    def __check_init__(self):
        if not (self.relative >= 0 and self.absolute >= 0 and self.relative + self.absolute > 0):
            raise ValueError(
                "MeasurementError needs relative >= 0 and absolute >= 0, not both zero; got "
                f"relative={self.relative}, absolute={self.absolute}."
            )

    def sigma(self, data: Float[Array, " n"]) -> Float[Array, " n"]:
        return self.relative * jnp.abs(data) + self.absolute


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
    - `success`: whether they were all accepted.
    - `reason`: why not (empty on success).
    - `rank`, `size`: numerical rank of the weighted sensitivity columns of the set, and
      the size of the set.
    - `rcond`: `sigma_min / sigma_max` of those columns (the square root of the inverse
      condition number of the Fisher matrix of the set).
    - `cost`: weighted least-squares cost after the evaluation (NaN without
      re-estimation).
    - `seconds`: wall time of the evaluation.
    """

    added: tuple[str, ...]
    success: bool
    reason: str
    rank: int
    size: int
    rcond: float
    cost: float
    seconds: float


class StepwiseSelection(eqx.Module):
    """The result of `ji.set_by_set` or `ji.one_by_one`.

    **Fields:**

    - `procedure`: `"set-by-set"` or `"one-by-one"`; `criterion`: the ranking used.
    - `names`: every parameter of the model; `candidates`: those that could be chosen.
    - `selected`: the identifiable parameters, in the order they were selected.
    - `theta`: the final parameter vector (re-estimated where `reestimate=True`; the
      non-selected parameters stay at their starting values); `theta0`: the start.
    - `relative_std`: `sigma_theta / |theta|` of each selected parameter, from the
      inverse Fisher matrix of the selected set at `theta` (eq. 1).
    - `cost`: the weighted least-squares cost at `theta`; `cost0` at `theta0`.
    - `history`: every `Evaluation`, in order; `n_evaluations`: their number, counted
      here; `worst_case`: `ji.worst_case_evaluations` for the candidates.
    - `reestimated`, `stop_reason`, `seconds`: whether each success was re-estimated, why
      the procedure stopped, and its wall time.
    """

    procedure: str = eqx.field(static=True)
    criterion: str = eqx.field(static=True)
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
    reestimated: bool = eqx.field(static=True)
    stop_reason: str = eqx.field(static=True)
    seconds: float

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
            "stop_reason": self.stop_reason,
            "seconds": self.seconds,
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
            lines.append(f"    {n:<{w}} = {v:<12.6g} sigma/|theta| = {rs:.3g}")
        if len(self.selected) > len(shown):
            lines.append(f"    ... and {len(self.selected) - len(shown)} more")
        return "\n".join(lines)

    def plot(self, ax=None):
        """The evaluations: the size of each candidate set tried, accepted or not, and
        the growing selection."""
        from ..plot import stepwise

        return stepwise(self, ax)


# --- the jitted pieces: one compilation per model, data shape and configuration ---


def _scaled(S, theta, row_scale):
    col = jnp.where(theta != 0, jnp.abs(theta), 1.0)
    return S * col[None, :] / row_scale[:, None]


@eqx.filter_jit
def _rank_and_scale(S, theta, row_mean, sigma, selected, criterion):
    """The ranking on `B_N` (eq. 2) and the weighted columns `W` of the Fisher matrix
    in log-parameters (eq. 1): `W^T W = diag(theta) FIM diag(theta)`."""
    B = _scaled(S, theta, row_mean)
    W = _scaled(S, theta, sigma)
    order, scores = criterion(B, selected)
    return order, scores, criterion.eligible(scores), W


@eqx.filter_jit
def _test(W, mask, rank):
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
def _relative_std(W, mask):
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


@eqx.filter_jit
def _reestimate_optx(
    model, data, sigma, times, theta, free, lower, upper, solver, max_steps, integ
):
    """Least squares by an optimistix solver over the parameters in `free`, the others
    held at `theta`; all shapes fixed, so one compilation serves every candidate set."""
    to_theta, z0 = _transform(theta, lower, upper, jnp.asarray(True))

    def residual(z, _):
        th = jnp.where(free, to_theta(z), theta)
        ys = solve(model, th, times, integ, diffrax.ForwardMode()).ys.reshape(-1)
        return finite_residual((ys - data) / sigma)

    sol = optx.least_squares(residual, solver, z0, max_steps=max_steps, throw=False)
    new = jnp.where(free, to_theta(sol.value), theta)
    return new, sol.result == optx.RESULTS.successful, sol.stats["num_steps"]


@jax.jit
def _box(z, theta0, lower, upper):
    """theta(z) and d theta / d z (elementwise) of the bounded change of variables."""
    to_theta, _ = _transform(theta0, lower, upper, jnp.asarray(True))
    return jax.jvp(to_theta, (z,), (jnp.ones_like(z),))


@jax.jit
def _box_start(theta0, lower, upper):
    return _transform(theta0, lower, upper, jnp.asarray(True))[1]


# --- the procedures ---


class _Problem:
    """Everything a stepwise procedure needs, checked once; the loop itself is plain
    Python (its control flow depends on the outcomes) around jitted pieces."""

    def __init__(self, model, data, times, theta0, criterion, error, rank, candidates, bounds,
                 solver, max_steps, integrator, reestimate):  # fmt: skip
        check_model(model)
        if not isinstance(criterion, AbstractRankingCriterion):
            raise TypeError(
                "criterion must be a ranking criterion such as ji.Orthogonalization(), "
                f"got {criterion!r}."
            )
        if not isinstance(error, MeasurementError):
            raise TypeError(
                f"error must be a ji.MeasurementError(relative, absolute), got {error!r}."
            )
        if not isinstance(rank, AbstractRankRule):
            raise TypeError(f"rank must be a rank rule such as RelativeTolerance(), got {rank!r}.")
        self.model_, self.criterion, self.rank = model, criterion, rank
        self.reestimate_ = bool(reestimate)
        params = model.parameters
        self.names = params.names
        self.times = check_times(model, times)
        self.theta0 = check_theta(model, theta0)
        self.integ = model.integrator if integrator is None else integrator
        n_out = n_outputs(model, self.theta0)
        self.n_out = n_out
        self.data = _check_data(data, self.times.shape[0], n_out)
        self.sigma = error.sigma(self.data)
        self.data_np, self.sigma_np = np.asarray(self.data), np.asarray(self.sigma)
        zero = np.flatnonzero(self.sigma_np <= 0)
        if zero.size:
            i, j = divmod(int(zero[0]), n_out)
            raise ValueError(
                f"{error} gives sigma = 0 for {zero.size} datum(s) equal to 0 (the first at "
                f"t = {float(self.times[i]):g}, output {j}): a zero standard deviation makes "
                "the weighted residual infinite. Give an absolute part, e.g. "
                f"MeasurementError({error.relative}, 1e-6)."
            )
        per_output = jnp.mean(jnp.abs(self.data.reshape(-1, n_out)), axis=0)
        per_output = jnp.where(per_output > 0, per_output, 1.0)
        self.row_mean = jnp.tile(per_output, self.times.shape[0])
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
        if bounds is True:
            lower, upper = params.lower, params.upper
        elif bounds is False or bounds is None:
            lower = jnp.full(params.p, -jnp.inf)
            upper = jnp.full(params.p, jnp.inf)
        else:
            lower, upper = (jnp.asarray(b, dtype=float) for b in bounds)
            if lower.shape != (params.p,) or upper.shape != (params.p,):
                raise ValueError(f"bounds need shape ({params.p},) each.")
        if not bool(jnp.all(lower < upper)):
            raise ValueError("Need lower < upper for every parameter.")
        th = np.asarray(self.theta0)
        outside = [self.names[i] for i in np.flatnonzero((th < lower) | (th > upper))]
        if outside:
            raise ValueError(f"theta0 lies outside the bounds for {outside[:5]}.")
        self.lower, self.upper = lower, upper
        self.solver = solver
        if solver is not None and not isinstance(solver, optx.AbstractLeastSquaresSolver):
            raise TypeError(
                f"solver must be an optimistix least-squares solver, got {self.solver!r}."
            )
        self.max_steps = max_steps

    def model(self, theta):
        """`(ok, y, S)`: outputs (flat) and sensitivity matrix at `theta`, from one
        compiled function shared by the ranking, the tests and the host-driven
        re-estimation; the last few are cached."""
        key = np.asarray(theta).tobytes()
        cache = self.__dict__.setdefault("_cache", {})
        if key not in cache:
            sens = sensitivity(self.model_, theta, self.times, integrator=self.integ, throw=False)
            cache[key] = (bool(sens.ok), np.asarray(sens.outputs), sens.matrix)
            while len(cache) > 8:
                cache.pop(next(iter(cache)))
        return cache[key]

    def sensitivity(self, theta):
        ok, _, S = self.model(theta)
        if not ok:
            raise RuntimeError(
                f"The sensitivity matrix of {type(self.model_).__name__} could not be computed "
                "at the current parameters (the model solve failed or gave NaN). Check "
                "theta0 and the integrator's tolerances and max_steps."
            )
        return S

    def cost(self, theta):
        ok, y, _ = self.model(theta)
        r = (y - self.data_np) / self.sigma_np
        return float(r @ r) if ok else np.inf

    def assess(self, theta, selected):
        """The ranked eligible candidates at `theta`, and the weighted columns `W`.
        Parameters outside the candidate set get zero columns: never ranked, never
        part of a tested set, and not projected out (they are held, not selected)."""
        S = self.sensitivity(theta)
        cand = jnp.asarray(self.candidate_mask)
        S = jnp.where(cand[None, :], S, 0.0)
        order, _, eligible, W = _rank_and_scale(
            S, theta, self.row_mean, self.sigma, jnp.asarray(selected), self.criterion
        )
        elig = np.asarray(eligible) & ~np.asarray(selected) & self.candidate_mask
        return [int(j) for j in np.asarray(order) if elig[j]], W

    def reestimate(self, theta, mask):
        """`(theta, converged)`: least squares over the parameters in `mask`."""
        if self.solver is not None:
            new, converged, _ = _reestimate_optx(
                self.model_, self.data, self.sigma, self.times, theta, jnp.asarray(mask),
                self.lower, self.upper, self.solver, self.max_steps, self.integ,
            )  # fmt: skip
            return new, bool(converged)
        return self._levenberg_marquardt(theta, mask)

    def _levenberg_marquardt(self, theta, mask, ftol=1e-7, xtol=1e-10):
        """Levenberg-Marquardt (More 1978, with Nielsen's damping update) driven from the
        host on `self.model`: one compiled sensitivity function serves the Jacobian
        and the trial points (an accepted trial's Jacobian is the next one), so a
        stiff model is compiled once for the whole selection. Bounds by the change of
        variables of `ji.estimate`. Converged when an accepted step lowers the cost
        (a chi-square when the errors are right) by less than `ftol` of itself: on a
        sloppy model the last digits of a cost take many more steps than the rest and
        move the estimates far less than their standard deviations."""
        free = np.flatnonzero(mask)
        z = np.asarray(_box_start(theta, self.lower, self.upper))
        args = (theta, self.lower, self.upper)

        def at(z):
            th, dth = _box(jnp.asarray(z), *args)
            th = jnp.where(jnp.asarray(mask), th, theta)
            ok, y, S = self.model(th)
            if not ok:
                return th, None, None, np.inf
            r = (y - self.data_np) / self.sigma_np
            J = np.asarray(S)[:, free] * np.asarray(dth)[free] / self.sigma_np[:, None]
            return th, r, J, float(r @ r)

        th, r, J, cost = at(z)
        if r is None:
            return th, False
        d2 = np.sum(J**2, axis=0)
        mu, nu = 1e-3 * max(d2.max(), 1e-300), 2.0
        converged = False
        for _ in range(self.max_steps):
            D = np.sqrt(np.maximum(d2, 1e-300))
            A = np.vstack([J, np.sqrt(mu) * np.diag(D)])
            step = np.linalg.lstsq(A, np.concatenate([-r, np.zeros(free.size)]), rcond=None)[0]
            if np.linalg.norm(D * step) <= xtol * (np.linalg.norm(D * z[free]) + xtol):
                converged = True
                break
            z_new = z.copy()
            z_new[free] += step
            th_new, r_new, J_new, cost_new = at(z_new)
            predicted = cost - float(np.sum((r + J @ step) ** 2))
            rho = (cost - cost_new) / predicted if predicted > 0 else -1.0
            if rho > 1e-4:
                small = cost - cost_new <= ftol * cost
                z, th, r, J, cost = z_new, th_new, r_new, J_new, cost_new
                d2 = np.maximum(d2, np.sum(J**2, axis=0))
                mu *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
                nu = 2.0
                if small:
                    converged = True
                    break
            else:
                mu *= nu
                nu *= 2.0
        return th, converged

    def evaluate(self, theta, W, selected, added):
        """Test `selected + added`; with re-estimation, also re-estimate it. Returns
        (success, reason, new theta, rank, size, rcond, cost)."""
        mask = np.array(selected, bool)
        mask[list(added)] = True
        ok, k, rcond = _test(W, jnp.asarray(mask), self.rank)
        ok, k, rcond = bool(ok), int(k), float(rcond)
        size = int(mask.sum())
        if not ok:
            return (
                False,
                f"Fisher matrix singular (rank {k} < {size})",
                theta,
                k,
                size,
                rcond,
                np.nan,
            )
        if not self.reestimate_:
            return True, "", theta, k, size, rcond, np.nan
        new, converged = self.reestimate(theta, mask)
        cost0, cost = self.cost(theta), self.cost(new)
        if not np.isfinite(cost):
            return False, "re-estimation failed (model solve)", theta, k, size, rcond, np.nan
        if cost > cost0 * (1 + 1e-10):
            return False, "re-estimation did not reduce the cost", theta, k, size, rcond, cost0
        reason = "" if converged else "(re-estimation stopped at max_steps)"
        return True, reason, new, k, size, rcond, cost


def _run(problem: _Problem, procedure: str, progress: bool) -> StepwiseSelection:
    from tqdm.auto import tqdm

    p = len(problem.names)
    t_start = time.perf_counter()
    theta = problem.theta0
    cost0 = problem.cost(theta)
    selected = np.zeros(p, bool)
    order: list[int] = []
    history: list[Evaluation] = []
    bar = tqdm(desc=procedure, unit="eval", disable=not progress)
    ranked, W = problem.assess(theta, selected)
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
                        theta, W, selected, added
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
                        theta, W, selected, [j]
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
            if problem.reestimate_:
                theta = new
            ranked, W = problem.assess(theta, selected)
    finally:
        bar.close()

    rel = np.asarray(_relative_std(W, jnp.asarray(selected)))
    rel = rel[order] if order else np.zeros(0)
    return StepwiseSelection(
        procedure=procedure,
        criterion=problem.criterion.name,
        names=problem.names,
        candidates=problem.candidates,
        selected=tuple(problem.names[j] for j in order),
        theta=np.asarray(theta),
        theta0=np.asarray(problem.theta0),
        relative_std=rel,
        cost=problem.cost(theta),
        cost0=cost0,
        history=tuple(history),
        worst_case=worst_case_evaluations(len(problem.candidates)),
        reestimated=problem.reestimate_,
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
    - `criterion`: the ranking, `ji.Orthogonalization()` (Yao et al. 2003, the paper's
      choice, default), `ji.SensitivityNorm()`, `ji.NSRGA()` or `ji.CollinearityIndex()`,
      applied to the scaled matrix `B_N = diag(ybar)^-1 S diag(theta)` (eq. 2; `ybar`
      the mean absolute measurement of each output).
    - `error`: `ji.MeasurementError(relative, absolute)`, `sigma = a |y| + b` (eq. 26),
      which weights the Fisher matrix and the re-estimation.
    - `rank`: when the Fisher matrix of a set counts as invertible: its weighted
      sensitivity columns (in log-parameters) must have full numerical rank under this
      rule. Default `RelativeTolerance(1e-6)`: condition number of the Fisher matrix
      below 1e12.
    - `reestimate`: re-estimate the selected parameters after every successful step
      (Levenberg-Marquardt, the others held at their current values). A step whose
      re-estimation fails counts as a failure.
    - `candidates`: names of the parameters that may be selected (default all); the
      others are held.
    - `bounds`: `True` (the model's bounds, default), `False`, or `(lower, upper)`,
      respected by the re-estimation.
    - `solver`: how to re-estimate. `None` (default): Levenberg-Marquardt (More 1978)
      driven from the host on the sensitivity matrices the ranking computes anyway, so
      the model is compiled once for the whole selection (for a stiff model that saves
      minutes of compilation; see the notes in the README). Or an optimistix
      least-squares solver such as `optx.LevenbergMarquardt(rtol, atol)`, run fully
      jitted (one more compilation of the model).
    - `max_steps`: the re-estimation's iteration cap (a capped re-estimation that still
      lowers the cost counts as a success, noted in the history).
    - `integrator`: solver and tolerances of the model (default the model's).
    - `progress`: a progress bar over evaluations.

    **Returns:** a `StepwiseSelection`, with the evaluations counted and timed.

    **Raises:** `ValueError` / `TypeError` for bad data shapes, unknown names, bounds
    that exclude `theta0` and wrong argument types; `RuntimeError` if the model cannot
    be solved at the current parameters.
"""


def _stepwise(procedure, model, data, times, theta0, criterion, error, rank, reestimate,
              candidates, bounds, solver, max_steps, integrator, progress):  # fmt: skip
    problem = _Problem(
        model, data, times, theta0, criterion, error, rank, candidates, bounds, solver,
        max_steps, integrator, reestimate,
    )  # fmt: skip
    return _run(problem, procedure, progress)


@clean_errors
def set_by_set(
    model: AbstractModel,
    data: ArrayLike | Sequence | Trajectory,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    criterion: AbstractRankingCriterion = Orthogonalization(),
    error: MeasurementError = MeasurementError(),
    rank: AbstractRankRule = RelativeTolerance(1e-6),
    reestimate: bool = False,
    candidates: Sequence[str] | None = None,
    bounds: bool | tuple = True,
    solver: optx.AbstractLeastSquaresSolver | None = None,
    max_steps: int = 100,
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
    args = (theta0, criterion, error, rank, reestimate, candidates, bounds, solver, max_steps)
    return _stepwise("set-by-set", model, data, times, *args, integrator, progress)


@clean_errors
def one_by_one(
    model: AbstractModel,
    data: ArrayLike | Sequence | Trajectory,
    times: ArrayLike | Sequence | None = None,
    *,
    theta0: ArrayLike | dict | Sequence | None = None,
    criterion: AbstractRankingCriterion = Orthogonalization(),
    error: MeasurementError = MeasurementError(),
    rank: AbstractRankRule = RelativeTolerance(1e-6),
    reestimate: bool = False,
    candidates: Sequence[str] | None = None,
    bounds: bool | tuple = True,
    solver: optx.AbstractLeastSquaresSolver | None = None,
    max_steps: int = 100,
    integrator: Integrator | None = None,
    progress: bool = True,
) -> StepwiseSelection:
    """The classical one-by-one selection (Alberton et al. 2013, Fig. 1 and eq. 5), the
    baseline of `ji.set_by_set`: rank the parameters not yet selected and try adding
    them one at a time in that order; the first that keeps the Fisher matrix invertible
    (and, with re-estimation, re-estimates) is kept for good, and the rest are
    re-ranked. Stop when no remaining parameter can be added.
    """
    args = (theta0, criterion, error, rank, reestimate, candidates, bounds, solver, max_steps)
    return _stepwise("one-by-one", model, data, times, *args, integrator, progress)


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


def scaled_sensitivity(
    S: Float[Array, "n p"], theta: Float[Array, " p"], row_scale: Float[Array, " n"]
) -> Float[Array, "n p"]:
    """`diag(row_scale)^-1 S diag(|theta|)`: Alberton et al. eq. (2) with `row_scale` the
    mean measurement of each row's output, or the square root of the Fisher matrix in
    log-parameters with `row_scale = sigma` (a zero `theta_j` scales by 1)."""
    return _scaled(jnp.asarray(S), jnp.asarray(theta), jnp.asarray(row_scale))
