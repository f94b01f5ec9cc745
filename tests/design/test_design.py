"""`ji.design` against closed forms, a published design, brute-force enumeration and
simulated experiments: one decay measurement at `1/k`; `A exp(-k t)` at `{0, 1/k}`;
Box and Lucas' (1959) two-exponential model at their D-optimal times; a planted
symmetry that only one state resolves; a robust design over two decades of a rate
against the closed form of the averaged criterion; and the predicted standard
deviations against the spread of fits to simulated designed data."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from models_for_tests import AmountDecay

import jaxident as ji


_TIGHT = ji.Integrator(rtol=1e-10)


class _BoxLucas(ji.ODEModel):
    """`a -> b -> `: `b(t) = t1 / (t1 - t2) (exp(-t2 t) - exp(-t1 t))` (Box & Lucas
    1959, with t1 = 0.7, t2 = 0.2)."""

    parameters: ji.Parameters = ji.Parameters(["t1", "t2"], [0.7, 0.2])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(1.0, 10.0, 10))
    t0: float = 0.0
    state_names = ("a", "b")

    def vector_field(self, t, x, th):
        return jnp.stack([-th.t1 * x[0], th.t1 * x[0] - th.t2 * x[1]])

    def initial_state(self, th):
        return jnp.array([1.0, 0.0])

    def output(self, t, x, th):
        return x[1:]


class _Branches(ji.ODEModel):
    """`x1' = -(k1 + k2) x1`, `x2' = (k1 + k2) x1`, `x3' = k1 x1 - k3 x3`, observed
    `x1`: only `k1 + k2` is determined, and `k3` has no effect. `x1` and `x2` (and any
    expression in them) carry `k1 + k2` alone: only `x3` can resolve `k1`, `k2` and
    `k3`."""

    parameters: ji.Parameters = ji.Parameters(["k1", "k2", "k3"], [0.3, 0.7, 0.4])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 5.0, 10))
    t0: float = 0.0
    state_names = ("x1", "x2", "x3")

    def vector_field(self, t, x, th):
        out = (th.k1 + th.k2) * x[0]
        return jnp.stack([-out, out, th.k1 * x[0] - th.k3 * x[2]])

    def initial_state(self, th):
        return jnp.array([1.0, 0.0, 0.0])

    def output(self, t, x, th):
        return x[:1]


def _scratch(model, **kw):
    """A problem without data (a design from scratch) of `model`."""
    return ji.Problem(model, ji.Experiment([1.0]), **kw)


@pytest.mark.parametrize("k", [0.5, 3.0])
def test_one_decay_measurement_at_one_over_k(k):
    """`y = exp(-k t)`, `k` unknown: the Fisher information `(t exp(-k t))^2` is largest
    at `t = 1/k`; the greedy grid choice refined by gradient finds it to 1e-6."""
    model = AmountDecay(parameters=ji.Parameters(["k", "A"], [k, 1.0]))
    problem = _scratch(model).fix({"A": 1.0})
    cand = ji.Candidate("x", window=(0.0, 10.0 / k), sigma=0.1)
    d = ji.design(problem, cand, 1, integrator=_TIGHT, progress=False)
    assert abs(d.times[0] - 1.0 / k) <= 1e-6 / k
    assert d.rank_before == 0 and d.rank_after == 1
    assert d.measurements[0].resolves == ("k",)


def test_two_decay_measurements_at_zero_and_one_over_k():
    """`y = A exp(-k t)`, both unknown, two measurements: `det` of the Fisher
    information is `A^2 (t2 - t1)^2 exp(-2k (t1 + t2))`, largest at `{0, 1/k}`."""
    d = ji.design(_scratch(AmountDecay()), ji.Candidate("x", window=(0.0, 8.0), sigma=0.1), 2,
                  integrator=_TIGHT, progress=False)  # fmt: skip
    np.testing.assert_allclose(np.sort(d.times), [0.0, 2.0], atol=1e-6)
    assert d.rank_after == 2 and d.unresolved == ()
    np.testing.assert_array_equal(np.isinf(d.before.std) if d.before else [True, True], True)
    assert np.all(np.isfinite(d.after.std))


def _box_lucas_optimum():
    """The D-optimal pair of Box and Lucas from the closed form: `log det` maximised by
    SciPy on the exact derivatives."""
    a, b = 0.7, 0.2

    def g(t):
        E = np.exp(-b * t) - np.exp(-a * t)
        return np.array([-b / (a - b) ** 2 * E + a / (a - b) * t * np.exp(-a * t),
                         a / (a - b) ** 2 * E - a / (a - b) * t * np.exp(-b * t)])  # fmt: skip

    def f(ts):
        return -np.log(abs(np.linalg.det(np.stack([g(ts[0]), g(ts[1])]))))

    return np.sort(scipy.optimize.minimize(f, [1.2, 6.9], method="BFGS",
                                           options=dict(gtol=1e-13)).x)  # fmt: skip


def test_box_lucas_published_d_optimal_times():
    """Box and Lucas (1959): the D-optimal two-point design of the two-exponential
    model at t1 = 0.7, t2 = 0.2 takes `t = 1.23` and `6.86` (their table); the closed
    form's optimum to 1e-6."""
    d = ji.design(_scratch(_BoxLucas()), ji.Candidate("b", window=(0.0, 20.0), sigma=0.1), 2,
                  replicates=False, integrator=_TIGHT, progress=False)  # fmt: skip
    times = np.sort(d.times)
    np.testing.assert_allclose(times, [1.23, 6.86], atol=5e-3)
    np.testing.assert_allclose(times, _box_lucas_optimum(), atol=1e-6)


def _rows_exact(t, a=0.7, b=0.2):
    """Box and Lucas' sensitivity rows in closed form, `(len(t), 2)`."""
    E = np.exp(-b * t) - np.exp(-a * t)
    return np.stack([-b / (a - b) ** 2 * E + a / (a - b) * t * np.exp(-a * t),
                     a / (a - b) ** 2 * E - a / (a - b) * t * np.exp(-b * t)], axis=1)  # fmt: skip


@pytest.mark.parametrize("budget", [1, 2, 3])
def test_greedy_equals_brute_force_step_by_step(budget):
    """On a grid of 13 times, without refinement: each greedy pick is the best of all
    candidates given the earlier ones (enumerated with NumPy's `slogdet` on the closed
    form's rows), and for two picks the pair equals the best of all 78 pairs."""
    grid = np.linspace(0.5, 12.5, 13)
    sigma = 0.1
    d = ji.design(_scratch(_BoxLucas()), ji.Candidate("b", grid, sigma=sigma), budget,
                  replicates=False, refine=False, progress=False, report=False)  # fmt: skip
    rows = _rows_exact(grid) / sigma
    chosen = []
    for m in d.measurements:
        best, value = None, -np.inf
        for i in range(grid.size):
            if i in chosen:
                continue
            A = rows[chosen + [i]]
            s = np.linalg.svd(A, compute_uv=False)
            r = int(np.sum(s > 1e-7 * s[0]))
            v = (r, np.sum(2 * np.log(s[:r])))
            if best is None or v > value:
                best, value = i, v
        chosen.append(best)
        assert m.time == pytest.approx(grid[best])
    if budget == 2:
        pairs = [(np.linalg.slogdet(rows[[i, j]].T @ rows[[i, j]])[1], (i, j))
                 for i in range(13) for j in range(i + 1, 13)]  # fmt: skip
        i, j = max(pairs)[1]
        assert sorted(d.times) == pytest.approx(sorted(grid[[i, j]]))


def test_gradient_refinement_equals_a_fine_brute_force():
    """From a coarse grid the refined pair equals the best pair of a fine grid
    (step 0.01) to its spacing, and improves on the grid's criterion."""
    coarse = ji.Candidate("b", window=(0.0, 12.0), times=np.linspace(0.0, 12.0, 7), sigma=0.1)
    d = ji.design(_scratch(_BoxLucas()), coarse, 2, replicates=False, integrator=_TIGHT,
                  progress=False, report=False)  # fmt: skip
    fine = np.arange(0.0, 12.0, 0.01)
    rows = _rows_exact(fine)
    det = np.abs(np.outer(rows[:, 0], rows[:, 1]) - np.outer(rows[:, 1], rows[:, 0]))
    i, j = np.unravel_index(np.argmax(det), det.shape)
    np.testing.assert_allclose(np.sort(d.times), np.sort(fine[[i, j]]), atol=0.01)


def test_a_planted_symmetry_is_resolved_by_the_one_state_that_can():
    """`_Branches` observed in `x1`: rank 1 of 3. Among `x1`, `x2` and `x1 + x2`, each
    100 times more precise, and `x3`, the one state that can resolve the rest, `x3`,
    is chosen first and again, the picks name what they resolve, and the predicted
    rank is 3; the predicted report agrees."""
    model = _Branches()
    data = np.asarray(ji.simulate(model).ys)
    problem = ji.Problem(model, ji.Experiment(np.asarray(model.times), data, sigma=0.01))
    grid = np.linspace(0.5, 5.0, 10)
    cands = [ji.Candidate(s, grid, sigma=1e-4) for s in ("x1", "x2", "x1 + x2")]
    d = ji.design(problem, [*cands, ji.Candidate("x3", grid, sigma=0.01)], 2, progress=False)
    assert d.rank_before == 1 and d.rank_after == 3
    assert [m.name for m in d.measurements] == ["x3", "x3"]
    assert d.after.rank == 3 and d.after.non_identifiable == ()
    assert set(d.before.non_identifiable) == {"k1", "k2", "k3"}
    resolved = [n for m in d.measurements for n in m.resolves]
    assert sorted(resolved) == ["k1", "k2", "k3"]
    assert "resolves {" in d.text()
    # without x3 nothing resolves them, and the design says so
    d = ji.design(problem, cands, 2, progress=False, report=False)
    assert d.rank_after == 1 and set(d.unresolved) == {"k1", "k2", "k3"}
    assert "no candidate resolves them" in d.text()


def test_robust_design_over_two_decades_of_a_rate():
    """`k` on a log10 scale in [0.1, 10], one measurement: at the nominal `k = 1` the
    design takes `t = 1`; averaged over 64 samples, the criterion
    `mean_s log (k_s t exp(-k_s t))^2` is largest at `t = 1 / mean(k_s)` (closed form),
    and the robust design takes it (and the best point of a brute-force grid); the
    worst case over the samples takes the grid's maximin time."""
    model = AmountDecay(parameters=ji.Parameters(["k", "A"], [1.0, 1.0], [0.1, 0.0], [10.0, 2.0]))
    problem = _scratch(model, scales={"k": "log10"}).fix({"A": 1.0})
    cand = ji.Candidate("x", window=(0.01, 10.0), sigma=0.1)
    kw = dict(integrator=_TIGHT, progress=False, report=False)
    local = ji.design(problem, cand, 1, **kw)
    assert local.times[0] == pytest.approx(1.0, abs=1e-6)
    samples = np.asarray(ji.latin_hypercube(jax.random.key(3), ([-1.0], [1.0]), 64))
    robust = ji.design(problem, cand, 1, samples=samples, **kw)
    ks = 10.0 ** samples[:, 0]
    assert robust.times[0] == pytest.approx(1.0 / ks.mean(), abs=1e-6)
    grid = np.linspace(0.01, 10.0, 20001)
    value = np.mean(2 * np.log(ks[None] * grid[:, None]) - 2 * ks[None] * grid[:, None], axis=1)
    assert abs(robust.times[0] - grid[np.argmax(value)]) <= 1e-3
    assert abs(robust.times[0] - local.times[0]) > 0.3  # it differs where it should
    worst = ji.design(problem, cand, 1, samples=samples, summary=ji.WorstCase(), **kw)
    minimum = np.min(2 * np.log(ks[None] * grid[:, None]) - 2 * ks[None] * grid[:, None], axis=1)
    assert abs(worst.times[0] - grid[np.argmax(minimum)]) <= 1e-3


def test_the_predicted_spread_holds_in_simulated_fits():
    """Simulate the designed measurements of `A exp(-k t)` with their noise 300 times,
    fit each (`ji.estimate`, vmapped): the spread of the estimates equals the predicted
    marginal standard deviations within 20%."""
    model = AmountDecay()
    grid = ji.Candidate("x", np.linspace(0.0, 8.0, 17), sigma=0.05)
    d = ji.design(_scratch(model), grid, 6, replicates=False, progress=False)
    times = np.sort(d.times)
    truth = np.asarray(model.parameters.nominal)
    exact = truth[1] * np.exp(-truth[0] * times)
    noise = 0.05 * np.random.default_rng(0).standard_normal((300, times.size))
    data = jnp.asarray((exact + noise)[..., None])

    def fit(y):
        return ji.estimate(model, y, times, sigma=0.05, theta0=truth, throw=False).theta

    est = np.asarray(jax.vmap(fit)(data))
    spread = est.std(axis=0, ddof=1)
    np.testing.assert_allclose(spread, d.after.std, rtol=0.2)


def test_criteria_under_jit_and_vmap_against_numpy():
    """D, A and E criteria of random matrices under `jit` and `vmap` equal NumPy's
    `slogdet`, trace of the inverse and smallest eigenvalue."""
    rng = np.random.default_rng(1)
    M = rng.standard_normal((5, 8, 3))
    units = jnp.ones(3)

    def values(A):
        _, s, Vt = jnp.linalg.svd(A, full_matrices=False)
        r = jnp.asarray(3)
        return jnp.stack([c(s, Vt.T, r, units) for c in
                          (ji.DOptimal(), ji.AOptimal(), ji.EOptimal())])  # fmt: skip

    got = np.asarray(jax.jit(jax.vmap(values))(jnp.asarray(M)))
    for A, (D, Aopt, E) in zip(M, got):
        F = A.T @ A
        assert D == pytest.approx(np.linalg.slogdet(F)[1], rel=1e-12)
        assert Aopt == pytest.approx(-np.trace(np.linalg.inv(F)), rel=1e-10)
        assert E == pytest.approx(np.log(np.linalg.eigvalsh(F)[0]), rel=1e-10)


def test_a_named_variance_criterion_targets_its_parameter():
    """`AOptimal(["A"])` for `A exp(-k t)`: the variance of `A` alone is smallest
    with both measurements at 0 (where `y = A`); D-optimality splits them."""
    kw = dict(integrator=_TIGHT, progress=False, report=False)
    cand = ji.Candidate("x", window=(0.0, 8.0), sigma=0.1)
    problem = ji.Problem(AmountDecay(), ji.Experiment([1.0, 3.0], np.array([1.2, 0.45]), sigma=0.1))
    d = ji.design(problem, cand, 2, criterion=ji.AOptimal(["A"]), **kw)
    np.testing.assert_allclose(d.times, 0.0, atol=1e-6)


def test_new_conditions_and_petab_rows(tmp_path):
    """A candidate under a new condition (another initial amount) is its own
    experiment; `to_petab` writes the measurement, condition and observable rows,
    with the predicted value as the measurement."""
    problem = ji.Problem(AmountDecay(), ji.Experiment([1.0, 3.0], np.array([1.2, 0.45]), sigma=0.1))
    problem = problem.fix({"A": 2.0})
    cands = [ji.Candidate("2 * x", [0.5, 1.0, 2.0], sigma=0.1, condition={"A": 5.0},
                          name="double")]  # fmt: skip
    d = ji.design(problem, cands, 1, progress=False)
    (m,) = d.measurements
    assert m.condition == (("A", 5.0),)
    assert m.value == pytest.approx(2 * 5.0 * np.exp(-0.5 * m.time), rel=1e-6)
    paths = d.to_petab(tmp_path)
    import pandas as pd

    meas = pd.read_csv(paths["measurements"], sep="\t")
    cond = pd.read_csv(paths["conditions"], sep="\t")
    obs = pd.read_csv(paths["observables"], sep="\t")
    assert meas.loc[0, "time"] == m.time and meas.loc[0, "noiseParameters"] == 0.1
    assert (
        cond.loc[0, "A"] == 5.0
        and meas.loc[0, "simulationConditionId"] == cond.loc[0, "conditionId"]
        and cond.loc[0, "conditionName"] == "experiment_0 with A=5.0"
    )
    assert obs.loc[0, "observableFormula"] == "2 * x"
    d.to_json(tmp_path / "d.json")
    assert "observe double" in repr(d)
    import matplotlib

    matplotlib.use("Agg")
    fig = d.plot()
    assert len(fig.axes) == 2


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda p: ji.design(p, ji.Candidate("nope", [1.0]), 1), ValueError, "not an output name"),
        (lambda p: ji.design(p, ji.Candidate("x", [1.0]), 0), ValueError, "budget"),
        (lambda p: ji.design(p, "x", 1), TypeError, "candidates"),
        (lambda p: ji.design(p, ji.Candidate("x", [1.0]), 1, criterion="D"), TypeError,
         "criterion"),
        (lambda p: ji.design(p, ji.Candidate("x", [1.0]), 1, criterion=ji.AOptimal(["z"])),
         ValueError, "not parameters"),
        (lambda p: ji.design(p, ji.Candidate("x", [1.0], experiment="e9"), 1), ValueError,
         "Unknown experiment"),
        (lambda p: ji.design(p, ji.Candidate("x", [-1.0]), 1), ValueError, "before the model"),
        (lambda p: ji.design(p, ji.Candidate("x", [1.0]), 1, samples=np.ones((3, 5))),
         ValueError, "samples"),
        (lambda p: ji.Candidate("x", window=(2.0, 1.0)), ValueError, "window"),
        (lambda p: ji.Candidate("x", [5.0], window=(0.0, 1.0)), ValueError, "in the window"),
        (lambda p: ji.Candidate("x", [1.0], sigma=0.0), ValueError, "sigma"),
        (lambda p: ji.Candidate("x"), ValueError, "times"),
    ],
)  # fmt: skip
def test_bad_input_is_named(call, error, match):
    problem = _scratch(AmountDecay())
    with pytest.raises(error, match=match):
        call(problem)


def test_a_function_observable_has_no_petab_formula(tmp_path):
    d = ji.design(_scratch(AmountDecay()), ji.Candidate(lambda t, x, th: x[0] ** 2, [1.0, 2.0],
                                                   name="square"), 1,
                  progress=False, report=False)  # fmt: skip
    assert d.measurements[0].observable is None
    with pytest.raises(ValueError, match="formula"):
        d.to_petab(tmp_path)


def test_the_command_line_designs_and_writes_its_files(tmp_path, capsys):
    """`jaxident design sir --budget 2`: the design printed, its JSON, figure and PEtab
    tables written; bad arguments are one line with exit status 2."""
    from jaxident import cli

    js, png, folder = tmp_path / "d.json", tmp_path / "d.png", tmp_path / "next"
    argv = ["design", "sir", "--budget", "2", "--times", "0:30:7", "--quiet", "--json",
            str(js), "--plot", str(png), "--petab", str(folder)]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "Design for" in out and "observe" in out
    import json

    d = json.loads(js.read_text())
    assert len(d["measurements"]) == 2 and d["rank_after"] == 2
    assert png.stat().st_size > 0 and (folder / "measurements_design.tsv").exists()
    bad_lines = ((["--budget", "0"], "--budget"), (["--times", "5:1:3"], "--times"),
                 (["--observe", "nope"], "nope"), (["--sigma", "-1"], "--sigma"))  # fmt: skip
    for bad, match in bad_lines:
        assert cli.main(["design", "sir", "--quiet", *bad]) == 2
        assert match in capsys.readouterr().err


def test_scores_in_chunks_equal_one_batch(monkeypatch):
    """The candidates scored in chunks (the last padded) give the scores of one batch."""
    from jaxident._design import _design

    rng = np.random.default_rng(0)
    G = rng.standard_normal((2, 11, 3))
    R = jnp.asarray(np.stack([np.triu(rng.standard_normal((3, 3))) for _ in range(2)]))
    scorer = _design.Scorer(ji.RelativeTolerance(), ji.DOptimal(), jnp.ones((2, 3)), 20)
    whole = _design._score_all(scorer, R, jnp.asarray(G))
    monkeypatch.setattr(_design, "_CHUNK", 2 * 4 * 3 * 4)  # chunks of 4 candidates
    parts = _design._scores(scorer, R, G)
    for a, b in zip(whole, parts):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)


def test_a_dae_model_is_refused_with_the_reason():
    model = ji.models.load("nonsmooth_dae_example")
    with pytest.raises(ValueError, match="ODE model"):
        ji.design(model, ji.Candidate("x", [0.5]), 1, progress=False)


def test_a_petab_problem_with_noise_parameters():
    """Boehm with its noise parameters estimated (its model has noise outputs: the
    candidate problem's outputs are laid out around them): a designed measurement can
    only add information (no predicted std grows), and the noise parameters', which
    the new data (their own fixed noise) do not inform, stay as they were."""
    problem = ji.petab.load(ji.data.petab_problem("Boehm"), estimate_noise=True)
    assert any(problem.noise_outputs)
    state = problem.model.state_names[0]
    d = ji.design(problem, ji.Candidate(state, np.linspace(10.0, 240.0, 5), sigma=0.1,
                                        transform="log"), 1, progress=False)  # fmt: skip
    before, after = np.asarray(d.before.std), np.asarray(d.after.std)
    assert d.rank_after == d.rank_before == len(d.names)
    assert np.all(after <= before * (1 + 1e-9))
    noise = [i for i, n in enumerate(d.names) if n.startswith("sd_")]
    np.testing.assert_allclose(after[noise], before[noise], rtol=1e-6)
    assert np.any(after < 0.99 * before)
