"""`ji.analyze` against planted answers: random models whose non-identifiable sets,
null directions and parameters without effect are known in closed form (tests/planted.py).
The components of the planted null directions spread over 1e-3..1 after equilibration,
and one parameter has a tiny but real effect, which made a threshold on null-vector
components (the `support_threshold` of 2026-11) drop members; a column at 1e-14 of the
others, equilibrated to unit norm, was called identifiable."""

import jax.numpy as jnp
import numpy as np
import pytest
from planted import log_directions, same_span, shared_scalings, two_dimensional_scaling

import jaxident as ji
from jaxident._problem._base import from_scale


def _check(problem, answer):
    rep = ji.analyze(problem, progress=False)
    names = problem.parameters.names
    members = set().union(*answer["groups"])
    assert set(rep.no_effect) == answer["no_effect"]
    assert set(rep.non_identifiable) == members | answer["no_effect"]
    assert set(rep.identifiable) == answer["identifiable"]
    assert rep.undecided == ()
    # one null direction per no-effect parameter and per planted symmetry
    nullity = len(answer["no_effect"]) + len(answer["directions"])
    assert rep.rank == len(names) - nullity
    assert len(rep.null_directions) == nullity
    assert sorted(map(set, (g.names for g in rep.groups)), key=sorted) == sorted(
        answer["groups"], key=sorted
    )
    # the groups' null directions span the planted ones (log scale of each parameter)
    planted = log_directions(answer, list(names))
    found = np.zeros((len(names), 0))
    for g in rep.groups:
        W = np.zeros((len(names), g.directions.shape[1]))
        W[[names.index(n) for n in g.names]] = g.directions
        found = np.hstack([found, W])
    assert same_span(found, planted) < 1e-6
    # each listed null direction is one: |S v| at rounding level against the columns
    S = np.asarray(ji.sensitivity(problem).matrix)
    lin = from_scale(np.asarray(problem.parameters.nominal), problem.scales)
    per_log = np.array([1 / np.log(10) if s == "log10" else v for s, v in zip(problem.scales, lin)])
    S_log = S * per_log
    for v in rep.null_directions:
        assert np.linalg.norm(S_log @ v) <= 1e-7 * np.linalg.norm(S_log, axis=0).max()
    # marginal standard deviations: finite where identifiable, inf in the null directions
    std = dict(zip(names, rep.std))
    assert all(np.isfinite(std[n]) for n in answer["identifiable"])
    assert all(np.isinf(std[n]) for n in members | answer["no_effect"])
    return rep, S_log


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shared_scalings_named_exactly(seed):
    problem, answer = shared_scalings(seed)
    rep, S_log = _check(problem, answer)
    # the test means something: the planted components spread over three decades after
    # equilibration, and k4's effect is tiny but far above the threshold
    names = list(problem.parameters.names)
    c = np.linalg.norm(S_log, axis=0)
    v = log_directions(answer, names)[:, 0] * c
    v = np.abs(v[v != 0]) / np.abs(v).max()
    assert v.min() < 3e-3
    k4 = c[names.index("k4")] / c.max()
    assert 1e-6 < k4 < 1e-3
    assert rep.groups and all(g.monomial for g in rep.groups)


@pytest.mark.parametrize("seed", [0, 1])
def test_two_dimensional_scaling_names_all_eight(seed):
    """The model with a published-style symbolic answer: a two-dimensional scaling
    symmetry on three states and five parameters, outputs two other states. All 8
    non-identifiable parameters (5 parameters, 3 initial states) in one group with two
    null directions; the identifiable combinations are monomials orthogonal to both."""
    problem, answer = two_dimensional_scaling(seed)
    rep, _ = _check(problem, answer)
    (g,) = rep.groups
    assert g.monomial and g.directions.shape[1] == 2
    planted = log_directions(answer, list(g.names))
    assert np.all(np.abs(g.exponents @ planted) < 1e-9)
    assert np.linalg.matrix_rank(g.exponents) == len(g.names) - 2


def test_decisions_do_not_move_with_scales_or_order():
    """The same model on other estimation scales and in another parameter order: the
    same sets (the decisions are unit- and basis-free)."""
    problem, answer = shared_scalings(0)
    rep = ji.analyze(problem, progress=False)
    params = problem.parameters
    all_log = ji.Problem(
        problem.model,
        ji.Experiment(np.asarray(problem.times[0]), sigma=np.asarray(problem.sigma[0])),
        ji.Parameters(
            params.names[::-1],
            np.asarray(from_scale(params.nominal, problem.scales))[::-1],
            rel=0.5,
        ),
        scales={n: "log10" for n in params.names},
    )
    rep2 = ji.analyze(all_log, progress=False)
    assert set(rep2.no_effect) == set(rep.no_effect)
    assert set(rep2.non_identifiable) == set(rep.non_identifiable)
    assert {frozenset(g.names) for g in rep2.groups} == {frozenset(g.names) for g in rep.groups}


def test_dependence_against_numpy_on_planted_columns():
    """`ji.linalg.dependence` on the planted matrix against NumPy: at full rank (the
    problem with the symmetries' parameters fixed) each distance is
    `1 / sqrt((A^T A)^{-1}_ii)`; with the symmetries, the members' distances are at
    rounding level and the others' equal the least-squares residual against the
    other columns (SciPy, on the columns orthogonal to the null directions)."""
    import scipy.linalg as sl

    problem, answer = shared_scalings(1)
    names = list(problem.parameters.names)
    S = np.asarray(ji.sensitivity(problem).matrix)
    units = np.asarray(ji.sensitivity(problem).units)
    rule = ji.RelativeTolerance(1e-7)
    dep = ji.linalg.dependence(jnp.asarray(S), rule, jnp.asarray(units))
    zero = [names.index(n) for n in answer["no_effect"]]
    assert sorted(np.flatnonzero(np.asarray(dep.no_effect))) == sorted(zero)
    keep = [i for i in range(len(names)) if i not in zero]
    A = S[:, keep] / np.linalg.norm(S[:, keep], axis=0)
    d = np.asarray(dep.distance)[keep]
    for j, i in enumerate(keep):
        others = np.delete(A, j, axis=1)
        Q = sl.orth(others, rcond=1e-10)
        ref = np.linalg.norm(A[:, j] - Q @ (Q.T @ A[:, j]))
        if names[i] in set().union(*answer["groups"]):
            assert d[j] < 1e-10
        else:
            np.testing.assert_allclose(d[j], ref, rtol=1e-6)
    fixed = [i for i in keep if names[i] not in {"x20", "k3"}]
    B = S[:, fixed] / np.linalg.norm(S[:, fixed], axis=0)
    dep2 = ji.linalg.dependence(jnp.asarray(S[:, fixed]), rule)
    ref = 1 / np.sqrt(np.diag(np.linalg.inv(B.T @ B)))
    np.testing.assert_allclose(np.asarray(dep2.distance), ref, rtol=1e-6)
