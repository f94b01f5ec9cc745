"""`ji.design`, the entry point: the greedy choice, the refinement of free times, and
the result with its predicted report."""

import warnings
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, PRNGKeyArray
from tqdm.auto import tqdm

from .._linalg._dependence import dependence
from .._linalg._rank import AbstractRankRule, NearThresholdWarning
from .._model._base import AbstractModel, Integrator
from .._problem._base import Problem
from .._problem._predict import estimation_units
from .._report._analyze import analyze
from ._candidates import Candidate, candidate_problem
from ._criteria import AbstractCriterion, AbstractSummary, Average, DOptimal
from ._design import _better, greedy, measured, score_of, Setup, setup
from ._refine import chosen_rows, pick_blocks, refine as refine_times
from ._result import Design, Measurement


def design(
    problem: Problem | AbstractModel,
    candidates: Candidate | Sequence[Candidate],
    budget: int,
    *,
    theta: ArrayLike | None = None,
    criterion: AbstractCriterion = DOptimal(),
    samples: int | ArrayLike | None = None,
    key: PRNGKeyArray | None = None,
    summary: AbstractSummary = Average(),
    replicates: bool = True,
    refine: bool = True,
    rank: AbstractRankRule | None = None,
    integrator: Integrator | None = None,
    report: bool = True,
    progress: bool = True,
) -> Design:
    """Design the next experiment: the `budget` measurements, among `candidates`, that
    resolve the parameters the data leave undetermined first, then shrink their
    uncertainty most.

    **Arguments:**

    - `problem`: a `ji.Problem` (its experiments' data are what is already known; a
      problem without data is a design from scratch), or a model (one experiment at its
      times, no data).
    - `candidates`: `ji.Candidate`s: observables (outputs, states, expressions or
      functions), their times (a grid, or free in a window), conditions and noise.
    - `budget`: the number of measurements to choose (a time of a candidate is one).
    - `theta`: where to design (estimation scale; default nominal, better the fit).
    - `criterion`: after the rank, `ji.DOptimal()` (default, `log det` of the Fisher
      information of the resolved subspace), `ji.AOptimal(names)` (the predicted
      variances of `names`) or `ji.EOptimal()`.
    - `samples`: robust design: a number of Latin-hypercube samples of the parameters'
      box (drawn with `key`), or an `(N, q)` array of parameter vectors; every score is
      then summarised over them by `summary` (`ji.Average()`, default, or
      `ji.WorstCase()`) instead of taken at `theta`.
    - `replicates`: whether a measurement may be chosen more than once.
    - `refine`: move the times of candidates with a window to a local optimum of the
      criterion by gradient after the greedy choice.
    - `rank`: the rank rule (default: `ji.analyze`'s, at the sensitivities' accuracy).
    - `report`: predict the `ji.analyze` report at `theta` before and after.
    - `integrator`: the solver and tolerances of every solve (default the model's;
      the closed-form checks use `rtol=1e-10`).
    - `progress`: a progress bar over the measurements chosen.

    **How it chooses.** One measurement at a time, each scored exactly with the ones
    already chosen (greedy): first by the rank of the weighted sensitivity matrix it
    gives (columns equilibrated, the report's rank rule: a measurement that resolves a
    null direction beats any that only sharpens), then by the criterion. With a window,
    the chosen times are then refined together by L-BFGS-B on the criterion's exact
    gradient with respect to the times (the time derivative of each sensitivity row
    from the model's vector field, the criterion differentiated by `jax.grad`).
    Greedy choice is optimal for the rank (a row adds at most one) and near-optimal
    for D-optimality (a submodular criterion; Nemhauser, Wolsey & Fisher 1978); the
    refinement finds the local optimum nearest the greedy times.

    **Returns:** a `ji.Design`.

    **Example:**

    ```python
    d = ji.design(problem, [ji.Candidate("x2", window=(0, 10), sigma=0.1)], budget=4)
    print(d); d.plot(); d.to_petab("next")
    ```
    """
    st = setup(problem, candidates, budget, theta, criterion, samples, key, summary, rank,
               integrator)  # fmt: skip
    sel = np.flatnonzero(st.scored)
    base = [st.base[i] for i in sel]
    with tqdm(total=int(budget), desc="designing", disable=not progress) as bar:
        picks, scores = greedy(st.pool.rows[sel], base, st.scorer, summary, int(budget),
                               replicates, lambda j: bar.update(1), st.pool.valid)  # fmt: skip
    grid = st.pool.time[np.asarray(picks)]
    times, found = refine_times(st, picks, summary) if refine else (grid, None)
    G, _, y = chosen_rows(st.problem, st.pool, picks, times, st.thetas, st.integrator)
    after = score_of(base, G[sel], st.scorer, summary)
    worse = not np.isfinite(after[1]) or not np.all(np.isfinite(G)) or _better(scores[-1], after)
    if found is not None and worse:  # (never worse than the grid's choice)
        times, found = grid, None
        G, _, y = chosen_rows(st.problem, st.pool, picks, times, st.thetas, st.integrator)
        after = score_of(base, G[sel], st.scorer, summary)
    before = score_of(base, G[sel][:, :0], st.scorer, summary)
    valid = st.pool.rows[sel][:, st.pool.valid]
    reachable = score_of(base, valid, st.scorer, summary)[0]
    return _result(st, picks, times, G, y, scores, (before, after, reachable), found,
                   criterion, summary, samples, report)  # fmt: skip


def _resolved(st: Setup, G) -> tuple[list, tuple[str, ...]]:
    """Per chosen measurement, the parameters non-identifiable at theta before it and
    not after (the report's rule, `ji.linalg.dependence`)."""
    names = st.problem.parameters.names
    units = jnp.asarray(estimation_units(st.problem, st.theta))
    rule = st.scorer.rule
    A = st.base[0]

    def flagged(A):
        if A.shape[0] == 0:  # (no data: nothing is determined)
            return np.ones(len(names), bool)
        return np.asarray(dependence(jnp.asarray(A), rule, units).non_identifiable)

    now = flagged(A)
    out = []
    for j in range(G.shape[1]):
        A = np.concatenate([A, G[0, j][None]])
        nxt = flagged(A)
        out.append(tuple(n for n, a, b in zip(names, now, nxt) if a and not b))
        now = nxt
    return out, tuple(n for n, a in zip(names, now) if a)


def _result(st: Setup, picks, times, G, y, scores, ranks, found, criterion, summary,
            samples, report) -> Design:  # fmt: skip
    before, after, reachable = ranks
    pool = st.pool
    resolves, unresolved = _resolved(st, G)
    out = []
    for j, (i, t) in enumerate(zip(picks, times)):
        b = pool.blocks[pool.block[i]]
        cand = pool.candidates[pool.owner[pool.block[i]]]
        text = cand.observable if isinstance(cand.observable, str) else None
        output = text in st.problem.output_names
        rank, value = scores[j] if j < len(picks) - 1 else after
        out.append(Measurement(
            b.name, text, st.problem.experiment_names[b.e], b.override, float(t),
            b.sigma, str(b.transform.value), float(y[0, j]), rank, value, resolves[j],
            output))  # fmt: skip
    blocks = [eqx.tree_at(lambda b: b.values, b, y[0, j : j + 1], is_leaf=lambda x: x is None)
              for j, b in enumerate(pick_blocks(pool, picks, times))]  # fmt: skip
    known = measured(st.problem)
    joined, where = candidate_problem(known or st.problem, pool.model, blocks,
                                      keep=known is not None, rates=False)  # fmt: skip
    designed = np.zeros(np.asarray(joined.observed).shape, bool)
    for (e, r), b in zip(where, blocks):
        designed[e, r, pool.model.m + b.k] = True
    reports = (None, None)
    if report:
        quiet = dict(generic=False, progress=False, integrator=st.integrator)
        with warnings.catch_warnings():  # (predictions: the closeness is in their text)
            warnings.simplefilter("ignore", NearThresholdWarning)
            prior = None if known is None else analyze(known, st.theta, **quiet)
            reports = (prior, analyze(joined, st.theta, **quiet))
    n = 0 if samples is None else int(st.thetas.shape[0] - 1)
    refined = None if found is None else str(found.message)
    return Design(
        st.problem.name or type(st.problem.model).__name__, st.problem.parameters.names,
        st.theta, tuple(out), criterion.describe(st.problem.parameters.names),
        type(summary).__name__.lower(), n, before[0], after[0], before[1], after[1],
        unresolved, reachable, refined, *reports, joined, designed,
    )  # fmt: skip
