"""Multi-start maximum-likelihood estimation of a problem (`ji.estimate(problem,
starts=...)`): its gradient and Fisher information against finite differences and the
sensitivity matrix, fits against SciPy on a closed form, the model and problem front
ends against each other, the kernel under vmap, the waterfall plot and the CLI."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize as so
from helpers import write_petab
from matplotlib.figure import Figure
from models_for_tests import Decay, decay_data

import jaxident as ji
from jaxident import cli
from jaxident._fit._multistart import _fit_problem, gradient_and_fisher, structured_secant
from jaxident._runtime._host import on_error_mode


def _closed_form_fit(t, y, sigma):
    """The least-squares optimum of the closed form by SciPy, and its negative
    log-likelihood."""
    res = so.least_squares(
        lambda p: (np.exp(-p[0] * t) / p[1] - y) / sigma, [0.5, 1.0], xtol=1e-14, ftol=1e-14
    )
    nll = 0.5 * np.sum(res.fun**2) + 0.5 * t.size * np.log(2 * np.pi * sigma**2)
    return res.x, nll


def test_multistart_reaches_the_closed_form_optimum():
    """Eight Latin-hypercube starts in the bounds: the best fit is SciPy's optimum of the
    closed form, its negative log-likelihood the closed form's; the model front end
    (`ji.estimate(model, data, starts=...)`) is the problem front end exactly, and a
    single start agrees with the least-squares estimate of the model."""
    t, y = decay_data()
    model = Decay()
    theta, nll = _closed_form_fit(t, y, 0.01)
    problem = ji.Problem.from_model(model, y[:, None], t, 0.01)
    est = ji.estimate(problem, starts=8, key=jax.random.key(2), progress=False)
    fits = est.fits  # one result type: the best fit, and every fit in `fits`
    assert isinstance(est, ji.Estimate) and isinstance(fits, ji.MultiStart)
    assert fits.theta.shape == (8, 2) and est.theta.shape == (2,)
    np.testing.assert_allclose(est.theta, theta, rtol=1e-6)
    np.testing.assert_allclose(-est.log_likelihood, nll, rtol=1e-7)  # solves at rtol 1e-8
    np.testing.assert_allclose(fits.best, est.theta, rtol=0)
    assert est.n_at_best == 8 and fits.ok.all() and bool(est.ok)
    np.testing.assert_array_equal(est.theta0, fits.starts[int(fits.order[0])])
    assert np.all(np.diff(np.asarray(fits.nll)) >= 0)  # sorted, best first
    # each fit's cost is the plain solve's at its estimate (the fit compares trial points
    # by plain solves; a solve with sensitivities differs by its discretization, here
    # 1.7e-7, which near the end is more than a step gains)
    for th, f in zip(np.asarray(fits.theta)[:2], np.asarray(fits.nll)[:2]):
        np.testing.assert_allclose(f, -float(ji.predict(problem, th).log_likelihood), rtol=1e-13)
    # the starts are Latin-hypercube samples of the bounds, in the order drawn
    starts = np.asarray(fits.starts)
    assert np.all(starts >= [0.05, 0.2]) and np.all(starts <= [2.0, 5.0])
    assert sorted(np.floor((starts[:, 0] - 0.05) / (1.95 / 8)).astype(int)) == list(range(8))
    same = ji.estimate(model, y, t, sigma=0.01, starts=8, key=jax.random.key(2), progress=False)
    np.testing.assert_array_equal(np.asarray(same.fits.theta), np.asarray(fits.theta))
    one = ji.estimate(problem, theta0=[0.4, 1.5], progress=False)
    ls = ji.estimate(model, y, t, sigma=0.01, theta0=[0.4, 1.5])
    np.testing.assert_allclose(one.theta, ls.theta, rtol=1e-6)
    assert "reached (within 0.1) by 1" in repr(one)


def test_a_problems_estimate_has_the_wald_covariance():
    """The estimate of a problem with known noise: its covariance is the inverse of the
    Fisher information `J^T J` of the closed form's weighted Jacobian (analytic), not
    rescaled by the residuals as a model's least squares is (`s^2 (J^T J)^{-1}`, the
    same matrix times `s^2`); normal Wald intervals; a held parameter has none. The
    names of the multi-start result it replaced read its `fits`, with a warning."""
    t, y = decay_data()
    problem = ji.Problem.from_model(Decay(), y[:, None], t, 0.01)
    est = ji.estimate(problem, starts=2, key=jax.random.key(2), progress=False)
    k, V = np.asarray(est.theta)
    J = np.stack([-t * np.exp(-k * t) / V, -np.exp(-k * t) / V**2], axis=1) / 0.01
    cov = np.linalg.inv(J.T @ J)
    np.testing.assert_allclose(est.covariance, cov, rtol=1e-6)
    ls = ji.estimate(Decay(), y, t, sigma=0.01, theta0=est.theta)
    np.testing.assert_allclose(ls.covariance, float(ls.cost) / ls.dof * cov, rtol=1e-5)
    ci = est.confidence_intervals(0.95)
    np.testing.assert_allclose(ci[:, 1] - est.theta, 1.959963984540054 * np.sqrt(np.diag(cov)),
                               rtol=1e-6)  # fmt: skip
    assert "+- marginal Wald standard errors" in repr(est) and est.to_dict()["fits"]["starts"] == 2
    held = ji.estimate(problem, starts=2, free=["k"], theta0=[0.5, 2.0], progress=False)
    assert held.held == ("V",) and held.std_errors[1] == 0.0 and np.isfinite(held.std_errors[0])
    # one name per thing: the table of fits is `fits`, not a second set of names
    for old in ("best", "best_nll", "nll", "tol", "order", "starts"):
        assert not hasattr(est, old) and hasattr(est.fits, old)
    with pytest.raises(AttributeError, match="has one fit; give starts="):
        _ = ls.n_at_best


def test_starts_far_off_scale_reach_the_optimum():
    """Starts whose output scale is 1e3 to 1e13 times too large (V on a log10 scale near
    its lower bound): the curvatures there span 1e30, and Nielsen's initial damping
    (relative to the largest) froze such fits after a step or two (stagnation), or,
    measured against that curvature's running maximum, called a gradient flat far from
    the optimum (-log L 4,078 reported as converged). Each reaches the closed form's
    optimum now, as a start near it does."""
    t, y = decay_data()
    theta, nll = _closed_form_fit(t, y, 0.01)
    model = Decay(parameters=ji.Parameters(["k", "V"], [0.5, 1.0], [0.05, 1e-14], [2.0, 10.0]))
    problem = ji.Problem(
        model, ji.Experiment(t, y[:, None], 0.01), scales={"k": "log10", "V": "log10"}
    )
    starts = np.array([[np.log10(0.5), v] for v in (-13.0, -8.0, -5.0, -4.0, np.log10(1.5))])
    fits = ji.estimate(problem, starts=starts, progress=False).fits
    assert fits.ok.all() and fits.n_at_best == 5
    np.testing.assert_allclose(np.asarray(fits.nll), nll, rtol=1e-7)
    np.testing.assert_allclose(10.0 ** np.asarray(fits.theta), np.tile(theta, (5, 1)), rtol=1e-5)


def test_starts_side_by_side_are_the_fits_one_by_one():
    """`batch=3` on five starts (two vmapped chunks, the last padded) against the fits one
    after another (a CPU's default): lanes that need from a few to many steps step in
    lockstep, yet each ends where its own fit ends, with its status and about its
    steps."""
    t, y = decay_data()
    model = Decay(parameters=ji.Parameters(["k", "V"], [0.5, 1.0], [0.05, 1e-14], [2.0, 10.0]))
    problem = ji.Problem(
        model, ji.Experiment(t, y[:, None], 0.01), scales={"k": "log10", "V": "log10"}
    )
    starts = np.array([[np.log10(0.5), v] for v in (-13.0, -8.0, -5.0, -4.0, np.log10(1.5))])
    one = ji.estimate(problem, starts=starts, progress=False).fits
    side = ji.estimate(problem, starts=starts, progress=False, batch=3).fits

    def drawn(fits):  # each fit in the starts' order (equal costs may sort either way)
        back = np.argsort(np.asarray(fits.order))
        pick = (fits.theta, fits.nll, fits.steps, fits.result._value)
        return [np.asarray(a)[back] for a in pick]

    (th1, nll1, steps1, res1), (th3, nll3, steps3, res3) = drawn(one), drawn(side)
    assert len(set(steps1.tolist())) > 1  # lanes of unequal length
    # the fits' last steps creep at the cost's rounding level (the second phase), where
    # the last bits of a vmapped linear solve can decide one more step or one fewer
    assert np.all(np.abs(steps3 - steps1) <= 5), (steps3, steps1)
    np.testing.assert_array_equal(res3, res1)
    np.testing.assert_allclose(nll3, nll1, rtol=1e-12)
    np.testing.assert_allclose(th3, th1, rtol=1e-8)
    for bad in (0, -2, True):
        with pytest.raises(ValueError, match="batch must be a positive number"):
            ji.estimate(problem, starts=starts, progress=False, batch=bad)
    with pytest.raises(TypeError, match="batch, optimizer and out: for a problem's fits"):
        ji.estimate(model, y, t, batch=4)


def test_structured_secant_satisfies_the_secant_equation():
    """The Dennis-Gay-Welsch update: symmetric, `(H + S_new) d = y` (the secant
    equation), under `jit` and `vmap` over steps; a zero update where `y . d` vanishes."""
    rng = np.random.default_rng(4)
    q = 5
    A = rng.standard_normal((q, q))
    H = A @ A.T
    S = rng.standard_normal((q, q))
    S = S + S.T
    d = rng.standard_normal((3, q))
    y = rng.standard_normal((3, q))
    new = jax.jit(jax.vmap(structured_secant, (None, 0, 0, None)))(S, d, y, H)
    for k in range(3):
        np.testing.assert_allclose(new[k], new[k].T, atol=1e-12)
        np.testing.assert_allclose((H + new[k]) @ d[k], y[k], rtol=1e-10, atol=1e-10)
    y0 = np.array([d[0, 1], -d[0, 0], 0.0, 0.0, 0.0])  # y . d = 0
    np.testing.assert_array_equal(structured_secant(S, d[0], y0, H), S)


def test_gradient_and_fisher_against_finite_differences(tmp_path):
    """Estimated scales in the observable and the noise (`s0`, `s1`), a log-transformed
    observable, normal and Laplace noise: the gradient of the negative log-likelihood
    against central differences (solves at rtol 1e-12), and the Fisher information
    against the Gram matrix of the problem's sensitivity matrix (its rows: the data's,
    then `sqrt(c) dsigma / sigma`)."""
    pars = (
        "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\n"
        "k\tlog10\t0.01\t10\t0.7\t1\na\tlog10\t0.01\t10\t2.0\t1\nt_on\tlin\t0\t2e9\t1e9\t0\n"
        "s0\tlog10\t0.1\t10\t1.5\t1\ns1\tlog10\t0.1\t10\t0.8\t1\n"
    )
    meas = (
        "observableId\tsimulationConditionId\tmeasurement\ttime\tobservableParameters\t"
        "noiseParameters\n"
    )
    rows = [(t, g, v) for t in (1.0, 2.0, 3.0) for g, v in (("s0", 2.1), ("s1", 1.2))]
    meas += "".join(f"obs_X\tc0\t{v}\t{t}\t{g}\t{g};0.1\n" for t, g, v in rows)
    integ = ji.Integrator(ji.Rodas4(), rtol=1e-12, atol=1e-14)
    for dist, transform in (("normal", "lin"), ("laplace", "log")):
        obs = (
            "observableId\tobservableFormula\tnoiseFormula\tobservableTransformation\t"
            "noiseDistribution\n"
            "obs_X\tobservableParameter1_obs_X * X\tnoiseParameter1_obs_X * "
            f"noiseParameter2_obs_X\t{transform}\t{dist}\n"
        )
        path = write_petab(tmp_path / dist, parameters=pars, observables=obs, measurements=meas)
        problem = ji.petab.load(path)
        assert str(problem.distributions[0]) == dist and problem.transforms == (transform,)
        theta = np.asarray(problem.parameters.nominal) + np.array([0.1, -0.05, 0.02, 0.03])
        out = ji.predict(problem, theta, jacobian=True, integrator=integ)
        g, H = eqx.filter_jit(gradient_and_fisher)(problem, out)

        def nll(th, problem=problem):
            return -float(ji.predict(problem, th, integrator=integ).log_likelihood)

        h = 1e-5
        fd = [(nll(theta + h * e) - nll(theta - h * e)) / (2 * h) for e in np.eye(4)]
        np.testing.assert_allclose(np.asarray(g), fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())
        S = np.asarray(ji.sensitivity(problem, theta, integrator=integ).matrix)
        np.testing.assert_allclose(np.asarray(H), S.T @ S, rtol=1e-10, atol=1e-12)
        # the matrix `FisherLM(noise_curvature=ji.SmallerCurvature())` steps on, its gradient `g`:
        # each column's noise part scaled by the smaller of 1 and its observed over
        # expected curvature (sum w dS^2 / sum dS^2 over the noise rows, w = r^2 or |r|),
        # the data part and the damping's diagonal F's; with residuals a tenth of these
        # (the noise level ten times too large: the scaling is seen)
        small = eqx.tree_at(lambda o: o.residuals, out, out.residuals * 0.1)
        g2, M, metric = eqx.filter_jit(gradient_and_fisher)(problem, small, ji.SmallerCurvature())
        rows, noise = S[:6], S[6:]  # (six data: their rows, then their noise rows)
        r = 0.1 * np.asarray(out.residuals)[np.asarray(problem.observed)]
        w = r**2 if dist == "normal" else np.abs(r)
        expected = np.sum(noise**2, axis=0)
        ratio = np.where(expected > 0, np.minimum(1.0, (w @ noise**2) / expected), 1.0)
        assert np.all(ratio[2:] < 0.5)
        scaled = noise * np.sqrt(ratio)
        np.testing.assert_allclose(np.asarray(M), rows.T @ rows + scaled.T @ scaled,
                                   rtol=1e-10, atol=1e-12)  # fmt: skip
        np.testing.assert_allclose(np.asarray(metric), np.diag(S.T @ S), rtol=1e-10)
        np.testing.assert_allclose(g2, eqx.filter_jit(gradient_and_fisher)(problem, small)[0])


def test_fit_kernel_under_vmap():
    """The fit kernel of one start, vmapped over three starts (a GPU batch), gives what
    it gives one start at a time."""
    t, y = decay_data()
    problem = ji.Problem.from_model(Decay(), y[:, None], t, 0.01)
    starts = jnp.asarray([[0.2, 1.0], [1.0, 3.0], [0.1, 4.0]])
    integ = problem.model.integrator
    mode = on_error_mode()

    def fit(x):
        free = jnp.ones(2, bool)
        return _fit_problem(problem, x, free, integ, jnp.asarray(100), jnp.asarray(1e-8), mode)

    batched = jax.vmap(fit)(starts)
    for i in range(3):
        theta, nll, steps, *_ = fit(starts[i])
        np.testing.assert_allclose(batched[0][i], theta, rtol=1e-12)
        np.testing.assert_allclose(batched[1][i], nll, rtol=1e-12)
        assert int(batched[2][i]) == int(steps)


def test_held_parameters_are_a_mask_of_the_same_fit():
    """`ji.estimate(problem, starts=N, free=[...])`: the others held at theta0 in every
    start; the best fit is SciPy's optimum with V held (closed form) and the fit of
    `problem.fix`, and the kernel is not compiled again (a mask, not a new problem)."""
    t, y = decay_data()
    problem = ji.Problem.from_model(Decay(), y[:, None], t, 0.01)
    ji.estimate(problem, starts=2, progress=False)  # compiles the fit
    compiled = _fit_problem._cached._cache_size()
    fits = ji.estimate(problem, starts=4, free=["k"], theta0=[0.5, 1.2], progress=False).fits
    assert _fit_problem._cached._cache_size() == compiled
    assert fits.held == ("V",) and np.all(np.asarray(fits.theta)[:, 1] == 1.2)
    assert "(held)" in repr(fits) and fits.to_dict()["held"] == ["V"]
    res = so.least_squares(lambda k: (np.exp(-k[0] * t) / 1.2 - y) / 0.01, [0.5],
                           xtol=1e-14, ftol=1e-14)  # fmt: skip
    np.testing.assert_allclose(float(fits.best[0]), res.x[0], rtol=1e-7)
    fixed = ji.estimate(problem.fix({"V": 1.2}), starts=4, progress=False).fits
    np.testing.assert_allclose(float(fixed.best[0]), float(fits.best[0]), rtol=1e-9)
    np.testing.assert_allclose(fixed.best_nll, fits.best_nll, rtol=1e-12)


def test_multistart_errors_and_plot(tmp_path):
    t, y = decay_data()
    model = Decay()
    problem = ji.Problem.from_model(model, y[:, None], t, 0.01)
    with pytest.raises(ValueError, match="positive number of starts"):
        ji.estimate(problem, starts=0)
    with pytest.raises(ValueError, match=r"\(N, 2\) array"):
        ji.estimate(problem, starts=np.ones((3, 3)))
    with pytest.raises(ValueError, match="must be finite"):
        ji.estimate(problem, starts=[[np.nan, 1.0]])
    with pytest.raises(TypeError, match="holds its data"):
        ji.estimate(problem, y)
    with pytest.raises(TypeError, match="Give the data"):
        ji.estimate(model)
    with pytest.raises(TypeError, match="solver: for a model's least squares"):
        ji.estimate(problem, solver=ji.LevenbergMarquardt())
    with pytest.raises(ValueError, match="nothing to estimate"):
        ji.estimate(problem, free=[False, False])
    # (issue 49's hostile-user cases in this code)
    for bad in (2.0, "5", True):
        with pytest.raises(TypeError, match=f"got {type(bad).__name__}"):
            ji.estimate(problem, starts=bad)
    with pytest.raises(ValueError, match=r"empty \(0, 2\) array"):
        ji.estimate(problem, starts=np.ones((0, 2)))
    lo = np.asarray(problem.parameters.lower)
    with pytest.raises(ValueError, match=r"start 1 lies outside the bounds .* \['k'\]"):
        ji.estimate(problem, starts=[[0.5, 1.0], [lo[0] - 1.0, 1.0]])
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        ji.estimate(problem, starts=2, max_steps=True)
    blind = ji.Problem.from_model(model, np.full((t.size, 1), np.nan), t, 0.01)
    with pytest.raises(ValueError, match="no data to fit"):
        ji.estimate(blind, starts=2)
    first = ji.estimate(problem, starts=3, theta0=[0.5, 1.2], progress=False).fits
    np.testing.assert_array_equal(np.asarray(first.starts)[0], [0.5, 1.2])  # theta0 first
    unbounded = ji.Problem(
        model,
        ji.Experiment(t, y[:, None], 0.01),
        ji.Parameters(["k", "V"], [0.5, 1.0], [0.0, 0.0], [np.inf, 5.0]),
    )
    with pytest.raises(ValueError, match=r"\['k'\] have an infinite bound"):
        ji.estimate(unbounded, starts=3)
    fits = ji.estimate(problem, starts=[[0.2, 1.0], [1.9, 4.9]], progress=False).fits
    d = fits.to_dict()
    assert d["starts"] == 2 and d["at_best"] == 2 and set(d["best"]) == {"k", "V"}
    fig = fits.plot()  # the waterfall beside the parameters across starts
    ax = fig.axes[0]
    fig.savefig(tmp_path / "w.png")
    assert (tmp_path / "w.png").stat().st_size > 10_000
    # both fits agree: the log axis still spans a decade, not one repeated "10^0" tick
    low, high = ax.get_ylim()
    assert low < 1.0 and high >= 10.0


def test_cli_fit_and_analyze_at_the_fit(tmp_path, capsys):
    """`jaxident fit problem.yaml --starts 3` and `jaxident analyze problem.yaml --fit 3`:
    the same best fit, and the report says where it was computed."""
    path = str(write_petab(tmp_path / "p"))
    js = tmp_path / "fit.json"
    assert cli.main(["fit", path, "--starts", "3", "--json", str(js), "--quiet"]) == 0
    assert "Multi-start estimation: 3 starts" in capsys.readouterr().out
    fit = json.loads(js.read_text())
    assert fit["fits"]["starts"] == 3 and fit["fits"]["at_best"] >= 1
    assert len(fit["std_errors"]) == len(fit["theta"]) and "log_likelihood" in fit
    js2 = tmp_path / "analyze.json"
    argv = ["analyze", path, "--fit", "3", "--json", str(js2), "--quiet"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "Analysed at the best fit" in out
    report = json.loads(js2.read_text())
    assert report["at"] == "best fit" and report["fit"]["theta"] == fit["theta"]
    assert cli.main(["analyze", path]) == 0
    assert "Analysed at the nominal values" in capsys.readouterr().out
    assert cli.main(["fit", "svir"]) == 2
    assert "fit needs data" in capsys.readouterr().err
    assert cli.main(["analyze", "svir", "--fit", "3"]) == 2
    assert cli.main(["fit", path, "--starts", "0"]) == 2
    assert "--starts must be positive" in capsys.readouterr().err
    assert cli.main(["fit", path, "--plot", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    # the same checks of the outputs as analyze's, and of the fit's arguments
    assert cli.main(["fit", path, "--plot", str(tmp_path / "w.xyz")]) == 2
    assert "unknown figure format 'xyz'" in capsys.readouterr().err
    assert cli.main(["fit", path, "--max-steps", "0"]) == 2
    assert "--max-steps must be >= 1" in capsys.readouterr().err
    assert cli.main(["analyze", path, "--fit", "-1"]) == 2
    assert "--fit must be positive" in capsys.readouterr().err


def test_noise_parameters_estimated_with_the_others():
    """`ji.petab.load(..., estimate_noise=True)`: Boehm's three noise parameters are
    parameters of the problem (none held), their noise formulas outputs of the model,
    and the nominal log-likelihood is the one with them held."""
    held = ji.petab.load(ji.data.petab_problem("boehm"))
    problem = ji.petab.load(ji.data.petab_problem("boehm"), estimate_noise=True)
    assert problem.noise_parameters == () and problem.parameters.p == 9
    assert problem.parameters.names[6:] == held.noise_parameters
    assert all(problem.noise_outputs)
    np.testing.assert_allclose(
        float(ji.predict(problem).log_likelihood), float(ji.predict(held).log_likelihood),
        rtol=1e-10,
    )  # fmt: skip


@pytest.mark.slow
def test_boehm_multistart_reaches_the_published_optimum():
    """Boehm_JProteomeRes2014, all nine parameters (noise ones too), from 50
    Latin-hypercube starts: the best fit reaches the log-likelihood of the benchmark
    collection's nominal values (-138.222, its reported optimum) or better."""
    problem = ji.petab.load(ji.data.petab_problem("boehm"), estimate_noise=True)
    nominal = float(ji.predict(problem).log_likelihood)
    assert nominal == pytest.approx(-138.222, abs=1e-3)
    fits = ji.estimate(problem, starts=50, key=jax.random.key(1), progress=False).fits
    assert fits.log_likelihood >= nominal - 1e-3 and fits.n_at_best >= 3


def test_profile_of_a_problem_against_the_closed_form(tmp_path):
    """`ji.profile(problem, "k", values)` at a fit: with k held, the best V has a closed
    form (1/V is linear in the outputs), and so has the negative log-likelihood; every
    name without a name, and the figure."""
    t, y = decay_data()
    problem = ji.Problem.from_model(Decay(), y[:, None], t, 0.01)
    fits = ji.estimate(problem, starts=2, progress=False).fits
    values = np.linspace(0.2, 0.45, 6)
    prof = ji.profile(problem, "k", values, theta0=fits.best, progress=False)
    assert prof.ok.all() and prof.names == ("V",)
    for i, k in enumerate(values):
        e = np.exp(-k * t)
        u = (e @ y) / (e @ e)  # 1 / V
        nll = 0.5 * np.sum(((e * u - y) / 0.01) ** 2) + 0.5 * t.size * np.log(2 * np.pi * 1e-4)
        np.testing.assert_allclose(prof.estimates[i, 0], 1 / u, rtol=1e-6)
        np.testing.assert_allclose(prof.cost[i], nll, rtol=1e-7)
    both = ji.profile(problem, theta0=fits.best, progress=False)
    assert set(both) == {"k", "V"} and both["V"].values.size == 15
    prof.plot().savefig(tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 10_000
    with pytest.raises(TypeError, match="positional"):  # a problem holds its data
        ji.profile(problem, y, "k", values)
    with pytest.raises(TypeError, match="Problem"):  # a model with data becomes one first
        ji.profile(Decay(), "k", values)


class _Broken(Decay):
    """An output that is NaN everywhere: no start can be solved."""

    def output(self, t, x, th):
        return x[0] / (th.V - th.V)


def test_every_start_failed():
    t, y = decay_data()
    problem = ji.Problem.from_model(_Broken(), y[:, None], t, 0.01)
    # the cause at the first start, not "could not be solved" whatever it is
    with pytest.raises(RuntimeError, match="failed at all 2 starts; at the first: .* NaN or inf"):
        ji.estimate(problem, starts=2, progress=False)
    fits = ji.estimate(problem, starts=2, progress=False, throw=False).fits
    assert np.all(np.isinf(np.asarray(fits.nll))) and not fits.ok.any()
    assert fits.to_dict()["failed"] == 2


def test_a_fit_never_ends_at_a_negative_sigma(tmp_path):
    """A noise parameter estimated on a lin scale in [-1, 1]: the normal density's
    log(sigma^2) does not see the sign, and 3 of 6 fits ended at sigma < 0 with status
    successful, one ranked best (issue 49). The log-likelihood there is -inf: such a
    start fails, and no fit steps across 0."""
    path = write_petab(tmp_path, noise="sd", extra_parameters="sd\tlin\t-1\t1\t0.1\t1\n")
    problem = ji.petab.load(path, estimate_noise=True)
    fits = ji.estimate(problem, starts=6, key=jax.random.key(1), progress=False).fits
    sd = np.asarray(fits.theta)[:, problem.parameters.names.index("sd")]
    nll = np.asarray(fits.nll)
    assert np.all(sd[np.isfinite(nll)] > 0) and np.any(sd < 0) and np.isfinite(nll[0])
    assert not np.any(np.asarray(fits.ok)[sd <= 0])
    negative = np.asarray(problem.parameters.nominal).copy()
    negative[-1] = -0.1
    with pytest.raises(ValueError, match="a standard deviation must be positive"):
        ji.predict(problem, negative)


def test_when_every_fit_fails_the_reason_is_named(tmp_path, capsys):
    """Every start with sigma < 0: the error names the cause at the first start (it said
    "the model could not be solved" whatever the cause, issue 49), and the CLI prints it
    in one line instead of a traceback."""
    path = write_petab(tmp_path, noise="sd", extra_parameters="sd\tlin\t-1\t-0.5\t-0.7\t1\n")
    problem = ji.petab.load(path, estimate_noise=True)
    with pytest.raises(RuntimeError, match="at the first: .* a standard deviation must be"):
        ji.estimate(problem, starts=2, progress=False)
    assert cli.main(["fit", str(path), "--starts", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a standard deviation must be positive" in err, err


def test_ctrl_c_returns_the_fits_finished_so_far(monkeypatch, tmp_path, capsys):
    """Ctrl-C during `ji.estimate(problem, starts=N)` returned nothing, and `jaxident
    fit` dropped every finished fit (issue 49): the fits so far come back, with a
    warning, as a stepwise selection's do."""
    from jaxident._fit import _optimizers

    real, calls = _optimizers.fit_once, []

    def interrupted_at_the_third(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(_optimizers, "fit_once", interrupted_at_the_third)
    t, y = decay_data()
    problem = ji.Problem.from_model(Decay(), y[:, None], t, 0.01)
    with pytest.warns(UserWarning, match="interrupted after 2 of 5 starts"):
        fits = ji.estimate(problem, starts=5, progress=False).fits
    assert fits.nll.shape == (2,) and np.asarray(fits.starts).shape == (2, 2)
    assert np.all(np.isfinite(np.asarray(fits.nll)))
    calls.clear()
    path = str(write_petab(tmp_path / "p"))
    with pytest.warns(UserWarning, match="interrupted after 2 of 4 starts"):
        assert cli.main(["fit", path, "--starts", "4", "--quiet"]) == 130  # (issue 81)
    assert "Multi-start estimation: INTERRUPTED after 2 of 4 starts" in capsys.readouterr().out


class _OralOneCompartment(ji.ODEModel):
    """Oral dosing into one compartment: y = D ka / (V (ka - k)) (e^-kt - e^-ka t). The
    flip-flop: (ka, k, V) and (k, ka, V k / ka) give the same curve."""

    parameters: ji.Parameters = ji.Parameters(
        ["ka", "k", "V"], [1.0, 0.2, 10.0], [0.01, 0.01, 0.1], [10.0, 10.0, 1000.0]
    )
    times: jax.Array = eqx.field(
        default_factory=lambda: jnp.asarray([0.5, 1, 2, 3, 4, 6, 8, 12, 24.0])
    )
    t0: float = 0.0

    def vector_field(self, t, x, th):
        return jnp.stack([-th.ka * x[0], th.ka * x[0] - th.k * x[1]])

    def initial_state(self, th):
        return jnp.asarray([100.0, 0.0])

    def output(self, t, x, th):
        return x[1] / th.V


def test_two_optima_of_equal_likelihood_are_both_reported():
    """The flip-flop of oral absorption: both optima (SciPy's on the closed form, and
    its swap in closed form) are reported, with the same -log L, and every parameter
    named as identifiable only locally; the printout says so. (16 fits of 20 reached
    "the best", 5 of them the other optimum, and nothing said so.)"""
    t = np.asarray(_OralOneCompartment().times)

    def curve(ka, k, V):
        return 100 * ka / (V * (ka - k)) * (np.exp(-k * t) - np.exp(-ka * t))

    y = curve(1.0, 0.2, 10.0) * np.exp(0.05 * np.random.default_rng(2).standard_normal(t.size))
    problem = ji.Problem(_OralOneCompartment(), ji.Experiment(t, y[:, None], 0.05),
                         scales=dict.fromkeys(["ka", "k", "V"], "log10"),
                         transforms=["log"])  # fmt: skip
    ref = so.least_squares(lambda p: np.log(curve(*10.0**p)) - np.log(y), [0.0, -0.7, 1.0],
                           xtol=1e-14, ftol=1e-14).x  # fmt: skip
    swap = np.array([ref[1], ref[0], ref[2] + ref[1] - ref[0]])  # V k / ka, in log10
    est = ji.estimate(problem, starts=20, progress=False)
    found = est.optima()
    assert len(found) == 2
    assert abs(found[0].nll - found[1].nll) < 1e-6
    got = sorted((o.theta for o in found), key=lambda th: -th[0])  # the larger ka first
    np.testing.assert_allclose(got, sorted([ref, swap], key=lambda th: -th[0]), atol=1e-4)
    assert est.locally_identifiable == ("ka", "k", "V")
    text = repr(est)
    assert "2 distinct optima" in text and "identifiable only locally" in text
    d = est.to_dict()
    assert len(d["optima"]) == 2 and d["locally_identifiable"] == ["ka", "k", "V"]
    rep = ji.analyze(problem, est.theta).with_fit(est)  # the report says so too
    assert "2 distinct optima" in str(rep) and rep.locally_identifiable == ("ka", "k", "V")
    assert len(rep.to_dict()["optima"]) == 2
    np.testing.assert_allclose(d["linear"], 10.0 ** np.asarray(est.theta), rtol=1e-12)
    # the waterfall beside the parameters across starts, one colour per optimum
    fig = est.plot()
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert [lb.split(":")[0] for lb in labels] == ["optimum 1", "optimum 2"]
    colours = {ln.get_color() for ln in fig.axes[1].lines if ln.get_marker() == "o"}
    assert len(colours) == 2
    for draw in (ji.plot.waterfall, ji.plot.parameters):
        assert isinstance(draw(est), Figure)
    # one optimum: nothing of the kind
    one = ji.estimate(problem, starts=[ref], progress=False)
    assert len(one.optima()) == 1 and one.locally_identifiable == ()
    assert "distinct optima" not in repr(one)
