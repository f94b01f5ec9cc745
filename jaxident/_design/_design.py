"""`ji.design`: the next experiment. Candidate measurements are chosen one at a time
(greedy, each choice re-evaluated exactly after the previous ones), first by the rank
they add to the weighted sensitivity matrix (structural: a measurement that resolves a
null direction beats any that only sharpens), then by a practical criterion on the
resolved subspace; the times of candidates free in a window are then refined together
by gradient. Every score is summarised over parameter samples for a robust design.

The rank is decided as `ji.analyze` decides it: on the columns equilibrated to unit
norm, by the rule at the sensitivities' accuracy, so that no choice of units changes a
choice of measurement. Adding one row to a matrix whose triangular factor is `R` gives
the singular values of `[R; g]`: each candidate is scored on a `(q + 1, q)` matrix,
all candidates of a step and all samples in one batched computation.
"""

import copy
from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .._identify._sweep import sweep
from .._linalg._rank import AbstractRankRule, RelativeTolerance, with_accuracy
from .._model._base import AbstractModel, Integrator
from .._model._sampling import latin_hypercube
from .._problem._base import Problem
from .._problem._predict import estimation_units, predict_kernel, problem_sensitivity
from .._problem._scale import Scale
from .._runtime._equinox import checks_as_nan, on_error_mode
from .._runtime._host import device_array
from .._solve._forward import accuracy
from ._candidates import (
    Block,
    Candidate,
    candidate_problem,
    experiment_index,
    observable,
    Observed,
    observed_model,
)
from ._criteria import AbstractCriterion, AbstractSummary, bound


class Pool(NamedTuple):
    """Every candidate measurement: its block (experiment of the candidate problem)
    and time, and its rows at each sample."""

    model: Observed
    blocks: tuple[Block, ...]
    candidates: tuple[Candidate, ...]
    owner: np.ndarray  # (blocks,): the candidate of each block
    block: np.ndarray  # (N,): each measurement's block
    time: np.ndarray  # (N,): its time
    rows: np.ndarray  # (S, N, q): its weighted sensitivity rows at each sample
    valid: np.ndarray  # (N,): finite rows at every sample (a log of a positive value)


def _blocks(problem: Problem, candidates: Sequence[Candidate]):
    """The observables (one per distinct one) and a block per candidate and
    condition."""
    base = problem.n_observables
    found, keys, blocks, owner = [], [], [], []
    finite = [e for e in range(problem.n_experiments) if not problem.steady[e]]
    if not finite:
        raise ValueError("ji.design needs an experiment at finite times to measure under.")
    for c, cand in enumerate(candidates):
        key = (cand.observable, cand.transform)  # (a transform is its output's)
        if key not in keys:
            keys.append(key)
            found.append(observable(problem.model, cand.observable, base))
        k = keys.index(key)
        where = finite if cand.experiment is None else [experiment_index(problem, cand.experiment)]
        for e in where:
            if problem.steady[e]:
                raise ValueError(
                    f"{cand.name}: experiment {problem.experiment_names[e]!r} measures at "
                    "steady state; give one at finite times."
                )
            t0 = float(problem.model.t0)
            if cand.times[0] < t0:
                raise ValueError(f"{cand.name}: times before the model's start t0 = {t0:g}.")
            label = cand.name + ("" if len(where) == 1 and not cand.condition
                                 else f" in {problem.experiment_names[e]}")  # fmt: skip
            if cand.condition:
                label += " with " + ", ".join(f"{a}={b}" for a, b in cand.condition)
            blk = Block(k, e, cand.condition, cand.times, cand.sigma, cand.transform, label)
            blocks.append(blk)
            owner.append(c)
    return found, blocks, np.asarray(owner)


def _at(problem: Problem, theta, integrator, error_mode):
    """The candidate problem's weighted Jacobian `(e, n, outputs, q)` at `theta`, its
    outputs and `ok` flags."""
    out = predict_kernel(problem, theta, integrator, True, error_mode=error_mode)
    return out.jacobian, out.outputs, out.ok


@eqx.filter_jit
def _rows_kernel(problem: Problem, thetas, integrator, error_mode):
    """`_at` each sample, one sample after another."""
    return jax.lax.map(lambda th: _at(problem, th, integrator, error_mode), thetas)


def rows(cp: Problem, where, model: Observed, blocks, thetas, integrator,
         batched: bool | None = False):  # fmt: skip
    """Per block (at `where`: its experiment and rows of `cp`): its rows `(S, n, q)`,
    their time derivatives and the predicted values `(S, n)` at every sample. A sample
    whose solve fails is an error naming it. The samples run one after another in one
    kernel compiled once; with `batched`, side by side through `ji.sweep` (in chunks,
    over the devices); `None`: so on a GPU only, as on a CPU the kernel is the faster
    (vmapped lanes of an adaptive solve wait for the slowest; `bench_design.py`)."""
    if batched is None:
        batched = jax.default_backend() != "cpu"
    if not batched or thetas.shape[0] == 1:
        with checks_as_nan():
            J, y, ok = _rows_kernel(cp, thetas, integrator, on_error_mode())
    else:  # many samples: batched, in chunks, over the devices
        found = sweep(lambda th: _at(cp, th, integrator, "nan"), thetas, progress=False,
                      ok=lambda out: jnp.all(out[2]),
                      batch_size=min(256, int(thetas.shape[0])))  # fmt: skip
        J, y, ok = found.values
    J, y, ok = np.asarray(J), np.asarray(y), np.asarray(ok)
    with np.errstate(divide="ignore", invalid="ignore"):  # (a log of 0: not valid)
        return _rows_of(cp, where, model, blocks, thetas, J, y, ok)


def _rows_of(cp, where, model, blocks, thetas, J, y, ok):
    if not ok.all():
        s, e = np.argwhere(~ok)[0]
        raise RuntimeError(
            f"The solve of the candidates {cp.experiment_names[e]!r} failed at sample {s} "
            f"(theta = {np.asarray(thetas[s]).tolist()}): check the model there, or the "
            "box the samples are drawn from."
        )
    m, k = model.m, len(model.observables)
    G, dG, values = [], [], []
    for (e, r), blk in zip(where, blocks):
        g = J[:, e, r, m + blk.k, :]
        Y_rate = J[:, e, r, m + k + blk.k, :]
        val, rate = y[:, e, r, m + blk.k], y[:, e, r, m + k + blk.k]
        h = Scale(blk.transform)
        # g = h'(y) Y / sigma; its time derivative (h'' = -h'/y for log scales)
        scale = np.asarray(h.derivative(val)) / blk.sigma
        if h is Scale.lin:
            dg = Y_rate * scale[..., None]
        else:
            Y = g / scale[..., None]
            dg = (Y_rate - (rate / val)[..., None] * Y) * scale[..., None]
        G.append(g)
        dG.append(dg)
        values.append(val)
    return G, dG, values


def _measurable(values, block) -> np.ndarray:
    """`(N,)`: whether each value is positive and above `1e-10` of its block's largest
    at every sample: a log-scale measurement of a value at the rounding level of its
    observable (an amount decayed to 1e-300) is no measurement."""
    ok = np.ones(values.shape[1], bool)
    for b in np.unique(block):
        at = block == b
        top = np.max(np.abs(values[:, at]), axis=1, keepdims=True)
        ok[at] = np.all(values[:, at] > _SMALLEST * top, axis=0)
    return ok


_SMALLEST = 1e-10


def _pool(problem, candidates, thetas, integrator) -> Pool:
    observables, blocks, owner = _blocks(problem, candidates)
    model = observed_model(problem, observables)
    cp, where = candidate_problem(problem, model, blocks)
    G, _, y = rows(cp, where, model, blocks, thetas, integrator, batched=None)
    block = np.concatenate([np.full(b.times.size, i) for i, b in enumerate(blocks)])
    time = np.concatenate([b.times for b in blocks])
    stacked, values = np.concatenate(G, axis=1), np.concatenate(y, axis=1)
    logs = np.concatenate([np.full(b.times.size, b.transform != Scale.lin) for b in blocks])
    valid = np.all(np.isfinite(stacked), axis=(0, 2)) & ~(logs & ~_measurable(values, block))
    if not valid.any():
        raise ValueError(
            "No candidate measurement has finite sensitivities at every sample (a log "
            "transform of a value that is not positive?): check the candidates."
        )
    stacked = np.where(valid[None, :, None], stacked, 0.0)
    return Pool(model, tuple(blocks), tuple(candidates), owner, block, time, stacked, valid)


class Scorer(eqx.Module):
    """Scores candidate rows against the current matrix at every sample: the rank
    (equilibrated columns, the rule) and the criterion in the report's units."""

    rule: AbstractRankRule
    criterion: AbstractCriterion
    units: Array  # (S, q)
    n_rows: int = eqx.field(static=True)

    def one(self, R, g, units):
        """`(rank, criterion)` of `[R; g]` (one sample, `g` `(j, q)`)."""
        A = jnp.concatenate([R, g])
        q = A.shape[1]
        c = jnp.sqrt(jnp.sum(A * A, axis=0))
        norms = c * units
        tau = self.rule.threshold(jnp.sort(norms)[::-1], (self.n_rows, q))
        no_effect = norms <= tau
        E = jnp.where(no_effect[None, :], 0.0, A / jnp.where(no_effect | (c == 0), 1.0, c))
        r = self.rule(jnp.linalg.svd(E, compute_uv=False), (self.n_rows, q))
        _, s, Vt = jnp.linalg.svd(A * units, full_matrices=False)
        return r, self.criterion(s, Vt.T, r, units)


@eqx.filter_jit
def _score_all(scorer: Scorer, R, G):
    """`(S, N)` ranks and criteria of every candidate row `G` `(S, N, q)` added to the
    current factors `R` `(S, q, q)`."""

    def at_sample(R_s, G_s, u_s):
        return jax.vmap(lambda g: scorer.one(R_s, g[None], u_s))(G_s)

    return jax.vmap(at_sample)(R, G, scorer.units)


def _scores(scorer: Scorer, R, G):
    """`_score_all` in chunks of candidates (the last one padded: one compilation),
    each with at most `_CHUNK` numbers in its `(S, chunk, q + 1, q)` matrices, so that
    memory does not grow with the number of candidates."""
    S, N, q = G.shape
    size = max(1, min(N, _CHUNK // (S * (q + 1) * q)))
    pad = -N % size
    Gp = jnp.asarray(np.concatenate([G, np.zeros((S, pad, q))], axis=1) if pad else G)
    parts = [_score_all(scorer, R, Gp[:, a : a + size]) for a in range(0, N + pad, size)]
    r, v = (jnp.concatenate(p, axis=1)[:, :N] for p in zip(*parts))
    return r, v


_CHUNK = 2**24


def _factor(matrices):
    """`(S, q, q)` triangular factors of each sample's matrix `(rows, q)` (zero rows
    added where it has fewer than `q`): a matrix with more rows has the singular values
    of its factor, and a row added to it those of the factor with the row."""
    out = []
    for A in matrices:
        q = A.shape[1]
        if A.shape[0] < q:
            A = np.concatenate([A, np.zeros((q - A.shape[0], q))])
        out.append(np.linalg.qr(A, mode="r")[:q])
    return np.stack(out)


def _better(a, b) -> bool:
    """Whether score `a = (rank, value)` beats `b`: the rank first."""
    return bool(a[0] > b[0] + 1e-9 or (abs(a[0] - b[0]) <= 1e-9 and a[1] > b[1]))


def greedy(G, base, scorer: Scorer, summary: AbstractSummary, budget: int, replicates: bool,
           progress=None, valid=None):  # fmt: skip
    """`budget` picks from the candidate rows `G` `(S, N, q)` (at the scored samples,
    whose own matrices are `base`), each the best after the previous ones: indices
    into the pool, with the score `(rank, criterion)` after each."""
    picks, scores = [], []
    R = _factor(base)
    allowed = np.ones(G.shape[1], bool) if valid is None else valid.copy()
    for _ in range(budget):
        if not allowed.any():
            break
        r, v = _scores(scorer, jnp.asarray(R), G)
        r, v = np.asarray(summary(jnp.asarray(r, float))), np.asarray(summary(v))
        v = np.where(np.isfinite(v), v, -np.inf)
        best = None
        for i in np.flatnonzero(allowed):
            if best is None or _better((r[i], v[i]), (r[best], v[best])):
                best = i
        picks.append(int(best))
        scores.append((float(r[best]), float(v[best])))
        R = _factor([np.concatenate([R_s, g[None]]) for R_s, g in zip(R, G[:, best])])
        if not replicates:
            allowed[best] = False
        if progress is not None:
            progress(len(picks))
    return picks, scores


def score_of(base, chosen, scorer: Scorer, summary: AbstractSummary):
    """The summarised `(rank, criterion)` of the base matrices with the rows `chosen`
    `(S, j, q)` (`j` may be 0)."""
    R = jnp.asarray(_factor(base))
    r, v = jax.vmap(scorer.one)(R, jnp.asarray(chosen), scorer.units)
    return float(summary(jnp.asarray(r, float))), float(summary(v))


def samples_of(problem: Problem, samples, key) -> np.ndarray:
    """The parameter vectors a robust design is scored at: an `(S, q)` array, or
    `samples` Latin-hypercube points of the box on the estimation scale."""
    if isinstance(samples, (int, np.integer)) and not isinstance(samples, bool):
        lo, up = (np.asarray(a) for a in (problem.parameters.lower, problem.parameters.upper))
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(up))):
            raise ValueError(
                "samples=N draws from the parameters' box, which is unbounded here: give "
                "bounds, or an (N, q) array of samples."
            )
        key = jax.random.key(0) if key is None else key
        return np.asarray(latin_hypercube(key, (lo, up), int(samples)))
    S = np.asarray(samples, dtype=float)
    q = problem.parameters.p
    if S.ndim != 2 or S.shape[1] != q or not np.all(np.isfinite(S)):
        raise ValueError(
            f"samples must be a number or a finite (N, {q}) array, got shape {S.shape}."
        )
    return S


def measured(problem: Problem) -> Problem | None:
    """`problem` with only its data's rows (an entry without a datum is no
    measurement here, also in a problem built without data); `None` without any."""
    seen = np.asarray(problem.observed) & np.isfinite(np.asarray(problem.data))
    if not seen.any():
        return None
    out = copy.copy(problem)
    object.__setattr__(out, "observed", device_array(seen))
    return out


def base_matrices(problem: Problem, thetas, integrator):
    """The weighted sensitivity matrix of the problem's data at each sample (no rows
    for a problem without data), and the sensitivities' accuracy."""
    known = measured(problem)
    if known is None:
        q = problem.parameters.p
        acc = accuracy(problem.model, integrator, np.dtype(float))
        return [np.zeros((0, q)) for _ in thetas], acc
    out, acc = [], None
    for th in thetas:
        sens = problem_sensitivity(known, th, integrator=integrator)
        out.append(np.asarray(sens.matrix))
        acc = sens.accuracy if acc is None else max(acc, sens.accuracy or 0.0)
    return out, acc


def make_scorer(problem, thetas, base, pool_rows, rank, criterion, accuracy) -> Scorer:
    rule = with_accuracy(RelativeTolerance() if rank is None else rank, accuracy)
    units = np.stack([estimation_units(problem, th) for th in thetas])
    n = base[0].shape[0] + pool_rows.shape[1]
    return Scorer(rule, bound(criterion, problem.parameters.names), jnp.asarray(units), n)


def _as_candidates(candidates) -> tuple[Candidate, ...]:
    if isinstance(candidates, Candidate):
        candidates = [candidates]
    candidates = tuple(candidates)
    if not candidates or not all(isinstance(c, Candidate) for c in candidates):
        raise TypeError("candidates must be one or more ji.Candidate.")
    return candidates


def _checked(problem, budget, integrator, criterion, summary):
    if isinstance(problem, AbstractModel):
        problem = Problem.from_model(problem)
    if not isinstance(problem, Problem):
        raise TypeError(f"ji.design takes a ji.Problem or a model, got {type(problem).__name__}.")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ValueError(f"budget must be a positive number of measurements, got {budget!r}.")
    if not isinstance(summary, AbstractSummary):
        raise TypeError("summary must be ji.Average() or ji.WorstCase().")
    if not isinstance(criterion, AbstractCriterion):
        raise TypeError("criterion must be ji.DOptimal(), ji.AOptimal(names) or ji.EOptimal().")
    integrator = problem.model.integrator if integrator is None else integrator
    if not isinstance(integrator, Integrator):
        raise TypeError("integrator must be a ji.Integrator.")
    return problem, integrator


class Setup(NamedTuple):
    """What the greedy choice and the refinement share."""

    problem: Problem
    theta: np.ndarray
    thetas: np.ndarray  # (S, q): theta first, then the samples (if any)
    scored: np.ndarray  # (S,): the samples the criterion is summarised over
    base: list  # the problem's own weighted matrix at each of `thetas`
    pool: Pool
    scorer: Scorer  # over the scored samples
    integrator: Integrator


def setup(problem, candidates, budget, theta, criterion, samples, key, summary, rank,
          integrator) -> Setup:  # fmt: skip
    """The checked arguments, the candidates' rows at theta and at the samples, and the
    scorer."""
    problem, integrator = _checked(problem, budget, integrator, criterion, summary)
    candidates = _as_candidates(candidates)
    theta = np.asarray(problem.parameters.nominal if theta is None else theta, dtype=float)
    if theta.shape != (problem.parameters.p,) or not np.all(np.isfinite(theta)):
        raise ValueError(f"theta must be a finite vector of {problem.parameters.p} values.")
    if samples is None:
        thetas, scored = theta[None], np.ones(1, bool)
    else:
        drawn = samples_of(problem, samples, key)
        thetas = np.concatenate([theta[None], drawn])
        scored = np.arange(thetas.shape[0]) > 0
    base, acc = base_matrices(problem, thetas, integrator)
    pool = _pool(problem, candidates, jnp.asarray(thetas), integrator)
    sel = np.flatnonzero(scored)
    scorer = make_scorer(problem, thetas[sel], [base[i] for i in sel], pool.rows, rank,
                         criterion, acc)  # fmt: skip
    return Setup(problem, theta, thetas, scored, base, pool, scorer, integrator)
