"""The stepwise selection loop a modeller can live with (issue 17): the Fisher test again
after every re-estimation, a re-estimation that does not converge is a failure, missing
data are masked, an error model per output, progress inside a fit, and an interrupted
selection resumes to the same result as an uninterrupted one."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models_for_tests import two_rate_problem, TwoRates

import jaxident as ji
from jaxident._fit._estimate import LeastSquares
from jaxident._identify import _stepwise


class Quadratic(ji.AlgebraicModel):
    """`y = a u + b u^2`, linear in its parameters: least squares has a closed form."""

    parameters: ji.Parameters = ji.Parameters(["a", "b"], [1.0, 1.0], [-10.0, -10.0], [10.0, 10.0])
    conditions: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.1, 1.0, 8)[:, None])

    def response(self, u, theta):
        return theta.a * u[0] + theta.b * u[0] ** 2


class TwoOutputs(ji.AlgebraicModel):
    """`y1 = a + b u`, `y2 = c u + a u^2`: two measured species, linear in (a, b, c)."""

    parameters: ji.Parameters = ji.Parameters(["a", "b", "c"], [1.0, 2.0, 3.0])
    conditions: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.0, 2.0, 9)[:, None])

    def response(self, u, theta):
        return jnp.stack([theta.a + theta.b * u[0], theta.c * u[0] + theta.a * u[0] ** 2])


def _design_two_outputs(u):
    """d y / d (a, b, c) of `TwoOutputs`, rows (experiment, output), experiment-major."""
    rows = []
    for x in u:
        rows += [[1.0, x, 0.0], [x**2, 0.0, x]]
    return np.array(rows)


def test_fisher_test_is_made_again_at_the_re_estimate():
    """Noise-free data of `y = 2 u`: at the start (a, b) = (1, 1) both columns count, but
    the joint re-estimate puts b at 0, where its log-scaled column `b u^2` vanishes: the
    set {a, b} fails at the re-estimate, and only one parameter is selected."""
    m = Quadratic()
    u = np.asarray(m.conditions[:, 0])
    data = 2.0 * u
    method = ji.Stepwise(reestimate=True, solver=ji.LevenbergMarquardt(rtol=1e-12))
    res = ji.set_by_set(m, data, error=ji.MeasurementError(0.0, 0.01), bounds=False,
                        method=method, progress=False)  # fmt: skip
    assert len(res.selected) == 1
    last = res.history[-1]
    assert not last.accepted and last.size == 2
    assert last.reason.startswith("Fisher matrix singular at the re-estimate (rank 1 < 2)")
    assert last.rcond < 1e-6
    # the re-estimate the test rejected is the closed-form least squares: b = 0
    both = ji.estimate(m, data, sigma=0.01, solver=ji.LevenbergMarquardt(rtol=1e-12))
    np.testing.assert_allclose(both.theta, [2.0, 0.0], atol=1e-9)


def test_a_re_estimation_that_does_not_converge_is_a_failure():
    m = Quadratic()
    u = np.asarray(m.conditions[:, 0])
    data = 2.0 * u + 3.0 * u**2
    err = ji.MeasurementError(0.0, 0.01)
    kw = dict(error=err, bounds=False, progress=False)
    one_step = ji.Stepwise(reestimate=True, max_steps=1)
    res = ji.set_by_set(m, data, method=one_step, **kw)
    assert res.selected == () and res.stop_reason == "no parameter is identifiable"
    assert all(not e.accepted for e in res.history)
    assert all(e.reason == "re-estimation did not converge in max_steps=1" for e in res.history)
    assert all(e.cost < res.cost0 for e in res.history)  # they did lower the cost
    # accepted only when asked, and then said so
    lenient = ji.Stepwise(reestimate=True, max_steps=1, accept_unconverged=True)
    res = ji.set_by_set(m, data, method=lenient, **kw)
    assert len(res.selected) >= 1 and res.history[0].accepted
    assert res.history[0].reason == "(accepted: re-estimation did not converge in max_steps=1)"
    # converged: both selected at the closed-form estimate
    res = ji.set_by_set(m, data, method=ji.Stepwise(reestimate=True), **kw)
    assert sorted(res.selected) == ["a", "b"]
    np.testing.assert_allclose(res.theta, [2.0, 3.0], rtol=1e-6)


def test_estimate_says_when_it_stopped_at_max_steps():
    m = Quadratic()
    u = np.asarray(m.conditions[:, 0])
    est = ji.estimate(m, 2.0 * u + 3.0 * u**2, max_steps=1, throw=False)
    assert bool(est.stopped_at_max_steps) and not bool(est.ok)
    assert est.message.startswith("the solver did not converge within max_steps")
    with pytest.raises(RuntimeError, match="did not converge within max_steps"):
        ji.estimate(m, 2.0 * u + 3.0 * u**2, max_steps=1)


def test_missing_data_are_masked_and_each_output_has_its_error_model():
    """Against weighted least squares in NumPy on the observed rows only, with one
    standard deviation per output."""
    m = TwoOutputs()
    u = np.asarray(m.conditions[:, 0])
    truth = np.array([0.5, -1.0, 2.0])
    rng = np.random.default_rng(0)
    X = _design_two_outputs(u)
    sd = np.tile([0.05, 0.4], u.size)
    y = X @ truth + sd * rng.standard_normal(X.shape[0])
    data = y.reshape(u.size, 2).copy()
    data[[1, 4, 7], 1] = np.nan  # species 2 not measured at three times
    data[2, 0] = np.nan
    err = ji.MeasurementError(0.0, [0.05, 0.4])
    method = ji.Stepwise(reestimate=True, solver=ji.LevenbergMarquardt(rtol=1e-12))
    res = ji.set_by_set(m, data, error=err, method=method, bounds=False, progress=False)
    assert sorted(res.selected) == ["a", "b", "c"]
    keep = np.isfinite(data.reshape(-1))
    A = X[keep] / sd[keep, None]
    ref = np.linalg.lstsq(A, data.reshape(-1)[keep] / sd[keep], rcond=None)[0]
    np.testing.assert_allclose(res.theta, ref, rtol=1e-8)
    np.testing.assert_allclose(res.cost, np.sum((A @ ref - data.reshape(-1)[keep] / sd[keep]) ** 2),
                               rtol=1e-8)  # fmt: skip
    order = [m.parameters.names.index(n) for n in res.selected]
    W = A * np.abs(ref)[None, :]  # log-parameter Fisher matrix, eq. 1
    rel = np.sqrt(np.diag(np.linalg.inv(W.T @ W)))
    np.testing.assert_allclose(res.relative_std, rel[order], rtol=1e-8)
    # the same model and data as a problem: the same selection, bit for bit
    problem = ji.Problem.from_model(m, data, sigma=err)
    same = ji.set_by_set(problem, method=method, bounds=False, progress=False)
    assert same.selected == res.selected and same.cost == res.cost
    np.testing.assert_array_equal(same.theta, res.theta)
    np.testing.assert_array_equal(same.relative_std, res.relative_std)
    assert same.fingerprint == res.fingerprint  # the same sigma per datum
    with pytest.raises(TypeError, match="holds its noise"):
        ji.set_by_set(problem, error=err, progress=False)
    with pytest.raises(TypeError, match="holds its data"):
        ji.one_by_one(problem, data, progress=False)
    with pytest.raises(ValueError, match="needs data"):
        ji.set_by_set(ji.Problem.from_model(m), progress=False)
    # ji.estimate masks the same entries: NaN residuals there, the same estimate
    est = ji.estimate(m, data, sigma=err, solver=ji.LevenbergMarquardt(rtol=1e-12))
    np.testing.assert_allclose(est.theta, ref, rtol=1e-8)
    assert np.isnan(np.asarray(est.residuals)).sum() == 4 and est.dof == keep.sum() - 3
    # without species 2, c is not identifiable: never selected
    blind = data.copy()
    blind[:, 1] = np.nan
    res = ji.set_by_set(m, blind, error=err, method=method, bounds=False, progress=False)
    assert "c" not in res.selected and sorted(res.selected) == ["a", "b"]


def test_fit_in_chunks_takes_the_steps_of_one_kernel():
    """The host loop that reports progress between chunks of steps ends where the one
    compiled fit ends (same steps, same estimate) and reports every chunk."""
    m = ji.models.load("alpha_pinene")
    start = np.asarray(m.parameters.nominal) * np.array([1.3, 0.7, 1.2, 0.8, 1.25])
    ls = LeastSquares.build(m, ji.models.ALPHA_PINENE_DATA, None, start, 1.0, True, None)
    solver = ji.LevenbergMarquardt(rtol=1e-6, updates=10)
    free = jnp.array([True, True, False, True, True])
    one = ls.fit(ls.theta0, free, solver, 100)
    seen = []
    chunked = ls.fit_in_chunks(ls.theta0, free, solver, 100, lambda k, c: seen.append((k, c)), 3)
    assert int(chunked.steps) == int(one.steps) and bool(chunked.ok) and bool(one.ok)
    # on Broyden-updated Jacobians the fit stops at the first computed one that allows
    # it: 15 steps (6 without updates); an engine that judged staleness by the Jacobian
    # after the step, not the one the step was made on, refused every stop and took 29
    assert int(one.steps) <= 20
    # (two programs, each rounding its own way: the same steps, the estimates to 1e-9)
    np.testing.assert_allclose(chunked.theta, one.theta, rtol=1e-9)
    np.testing.assert_allclose(chunked.cost, one.cost, rtol=1e-12)
    steps = [k for k, _ in seen]
    assert steps == sorted(steps) and steps[-1] == int(one.steps) and len(seen) > 1
    assert [c for _, c in seen][-1] <= seen[0][1]  # the cost reported falls
    capped = ls.fit_in_chunks(ls.theta0, free, solver, 2)
    assert bool(capped.stopped_at_max_steps) and int(capped.steps) == 2


def _interrupting(monkeypatch, at):
    calls = []
    evaluate = _stepwise.ModelStepwise.evaluate

    def interrupting(self, *args):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return evaluate(self, *args)

    monkeypatch.setattr(_stepwise.ModelStepwise, "evaluate", interrupting)


def _same_history(a, b):
    assert [(e.added, e.accepted, e.reason, e.rank, e.size) for e in a] == [
        (e.added, e.accepted, e.reason, e.rank, e.size) for e in b
    ]
    for x, y in zip(a, b):
        np.testing.assert_allclose([x.rcond, x.cost], [y.rcond, y.cost], rtol=1e-10)


def test_an_interrupted_selection_resumes_to_the_same_result(monkeypatch, tmp_path):
    """E. coli-style loop on a small ODE problem with re-estimation: interrupt in the
    middle, resume from the returned selection and from the checkpoint file; both end
    where the uninterrupted run ends, with the same evaluations."""
    m = ji.models.load("alpha_pinene")
    data = ji.models.ALPHA_PINENE_DATA
    start = np.asarray(m.parameters.nominal) * np.array([1.3, 0.7, 1.2, 0.8, 1.25])
    method = ji.Stepwise(reestimate=True)
    kw = dict(theta0=start, method=method, progress=False)
    full = ji.set_by_set(m, data, **kw)
    assert len(full.history) >= 3 and full.stop_reason == "every candidate is selected"
    path = tmp_path / "run.json"
    with monkeypatch.context() as mp:
        _interrupting(mp, 3)
        with pytest.warns(UserWarning, match="interrupted after 2 evaluations"):
            part = ji.set_by_set(m, data, checkpoint=path, **kw)
    assert part.stop_reason.startswith("interrupted") and len(part.selected) < len(full.selected)
    saved = json.loads(path.read_text())
    assert saved["selected"] == list(part.selected) and len(saved["history"]) == 2
    for resume in (part, path, str(path)):
        done = ji.set_by_set(m, data, resume=resume, **kw)
        assert done.selected == full.selected and done.stop_reason == full.stop_reason
        _same_history(done.history, full.history)
        np.testing.assert_allclose(done.theta, full.theta, rtol=1e-12)
        np.testing.assert_allclose(done.relative_std, full.relative_std, rtol=1e-10)
        assert done.cost0 == full.cost0
    # a checkpoint of another problem is refused, naming what differs
    with pytest.raises(ValueError, match="different problem.*fingerprint"):
        ji.set_by_set(m, data * 1.01, resume=path, **kw)
    with pytest.raises(ValueError, match="different problem.*method"):
        ji.set_by_set(m, data, theta0=start, method=ji.Stepwise(), resume=part, progress=False)
    with pytest.raises(ValueError, match="not a jaxident stepwise checkpoint"):
        (tmp_path / "other.json").write_text("{}")
        ji.set_by_set(m, data, resume=tmp_path / "other.json", **kw)


def test_resume_makes_the_unfinished_round_again(monkeypatch):
    """The sensitivity-norm ranking of the linear example proposes cross terms that the
    Fisher test rejects: interrupted just after such a failure, the resumed run drops
    the unfinished round's evaluations and makes them again."""
    m = ji.models.load("linear_superparameterized")
    data = m.synthetic_data(jax.random.key(2013))
    kw = dict(theta0=m.initial_estimates("increasing"), error=ji.MeasurementError(0.0, 0.5),
              method=ji.Stepwise(criterion=ji.SensitivityNorm()), progress=False)  # fmt: skip
    full = ji.set_by_set(m, data, **kw)
    fails = [i for i, e in enumerate(full.history) if not e.accepted]
    cut = next(i for i in fails if i > 0 and full.history[i - 1].accepted) + 1
    with monkeypatch.context() as mp:
        _interrupting(mp, cut + 1)
        with pytest.warns(UserWarning, match=f"interrupted after {cut} evaluations"):
            part = ji.set_by_set(m, data, **kw)
    assert not part.history[-1].accepted  # it stopped inside a round
    done = ji.set_by_set(m, data, resume=part, **kw)
    assert done.selected == full.selected
    _same_history(done.history, full.history)


def test_selection_on_several_experiments():
    """`k1` and `k2` enter the first experiment only as their sum: alone it selects one
    of them; with the second experiment (`k2` held at 0 there) both, re-estimated to the
    values that made the noise-free data, with the relative standard deviations of the
    closed form's Fisher matrix there. On log10 scales the selection, its statistics and
    its estimate are the same (the Fisher matrix in log-parameters does not depend on
    the scale the fit uses)."""
    method = ji.Stepwise(reestimate=True, solver=ji.LevenbergMarquardt(rtol=1e-12))
    cand = ("k1", "k2")
    alone = ji.set_by_set(two_rate_problem(both=False), candidates=cand, method=method,
                          progress=False)  # fmt: skip
    assert len(alone.selected) == 1
    problem = two_rate_problem()
    assert not problem.is_one_model
    res = ji.set_by_set(problem, candidates=cand, method=method, progress=False)
    assert sorted(res.selected) == ["k1", "k2"]
    np.testing.assert_allclose(res.theta, [0.3, 0.2, 1.0], rtol=1e-6)
    assert res.cost < 1e-8 and res.cost0 > 1e3
    t = np.linspace(0.5, 6.0, 12)
    y1, y2 = np.exp(-0.5 * t), np.exp(-0.3 * t)
    W = np.concatenate([np.stack([-t * y1 * 0.3, -t * y1 * 0.2], 1),  # d y / d log k
                        np.stack([-t * y2 * 0.3, 0 * t], 1)]) / 0.01  # fmt: skip
    rel = np.sqrt(np.diag(np.linalg.inv(W.T @ W)))
    order = [cand.index(n) for n in res.selected]
    np.testing.assert_allclose(res.relative_std, rel[order], rtol=1e-5)
    logs = ji.set_by_set(two_rate_problem({"k1": "log10", "k2": "log10", "V": "log10"}),
                         candidates=cand, method=method, progress=False)  # fmt: skip
    assert logs.selected == res.selected
    np.testing.assert_allclose(logs.theta, res.theta, rtol=1e-6)
    np.testing.assert_allclose(logs.relative_std, res.relative_std, rtol=1e-5)
    one = ji.one_by_one(problem, candidates=cand, method=method, progress=False)
    assert sorted(one.selected) == ["k1", "k2"]
    with pytest.raises(TypeError, match="in its parameters' bounds"):
        ji.set_by_set(problem, bounds=False, progress=False)


def test_problem_selection_is_the_model_selection():
    """A one-experiment problem on log10 scales (selected as a problem) against the same
    problem on linear scales (selected as its model): the same ranking, the same Fisher
    tests and relative standard deviations at the start."""
    t = np.linspace(0.5, 6.0, 12)
    rng = np.random.default_rng(0)
    data = np.exp(-0.5 * t)[:, None] / 2.0 + 0.01 * rng.standard_normal((12, 1))
    experiment = ji.Experiment(t, data, 0.01)
    lin = ji.Problem(TwoRates(), experiment)
    log = ji.Problem(TwoRates(), experiment, scales={n: "log10" for n in ("k1", "k2", "V")})
    assert lin.is_one_model and not log.is_one_model
    a = ji.set_by_set(lin, progress=False)
    b = ji.set_by_set(log, progress=False)
    assert a.selected == b.selected and len(a.selected) == 2
    assert [h.accepted for h in a.history] == [h.accepted for h in b.history]
    np.testing.assert_allclose(b.relative_std, a.relative_std, rtol=1e-6)
    np.testing.assert_allclose(b.cost0, a.cost0, rtol=1e-9)
    np.testing.assert_allclose(b.theta, a.theta, rtol=1e-12)


def test_selection_with_laplace_noise_counts_absolute_residuals():
    """Laplace noise: the cost is `2 sum |r|`, which is -2 log L without its constant
    `2 sum log(2 sigma)` (PEtab's likelihood, from `ji.predict`)."""
    t = np.linspace(0.5, 6.0, 12)
    rng = np.random.default_rng(1)
    data = np.exp(-0.5 * t)[:, None] + 0.01 * rng.laplace(size=(12, 1))
    problem = ji.Problem(TwoRates(), ji.Experiment(t, data, 0.01), distributions=["laplace"])
    assert not problem.is_one_model
    res = ji.set_by_set(problem, candidates=("k1", "V"), progress=False)
    log_l = float(ji.predict(problem).log_likelihood)
    # (the selection's residuals come from the solve with sensitivities, the
    # log-likelihood from the plain solve: two discretizations at rtol 1e-8)
    np.testing.assert_allclose(res.cost0, -2 * log_l - 2 * 12 * np.log(2 * 0.01), rtol=1e-8)
    assert sorted(res.selected) == ["V", "k1"]
