"""The optimizers of a problem's fit (`ji.FisherLM`, `ji.Fides`): fides driven by the
compiled objective against SciPy on a closed form, held parameters, bounds, failures,
and the arguments either refuses."""

import json
import sys

import jax
import numpy as np
import pytest
import scipy.optimize as so
from helpers import write_petab
from models_for_tests import Decay, decay_data

import jaxident as ji
from jaxident import cli
from jaxident._fit import _optimizers


pytest.importorskip("fides")  # (an extra of the test install: jaxident[fides])


def _decay_problem(upper_k=2.0):
    t, y = decay_data()
    nominal = [min(0.5, upper_k / 2), 1.0]
    model = Decay(parameters=ji.Parameters(["k", "V"], nominal, [0.05, 0.2], [upper_k, 5.0]))
    return t, y, ji.Problem.from_model(model, y[:, None], t, 0.01)


def _least_squares(t, y, x0, V=None):
    if V is None:
        fun = lambda p: (np.exp(-p[0] * t) / p[1] - y) / 0.01
    else:
        fun = lambda p: (np.exp(-p[0] * t) / V - y) / 0.01
    return so.least_squares(fun, x0, xtol=1e-14, ftol=1e-14).x


@pytest.mark.parametrize("hybrid", [True, False])
def test_fides_reaches_the_closed_form_optimum(hybrid):
    """fides (the Fisher information then BFGS, or the Fisher information throughout)
    from four Latin-hypercube starts: every fit at SciPy's optimum of the closed form,
    each fit's cost the plain solve's at its estimate (as the compiled fit reports), and
    the same best as `ji.FisherLM` from the same starts."""
    t, y, problem = _decay_problem()
    theta = _least_squares(t, y, [0.5, 1.0])
    fits = ji.estimate(problem, starts=4, key=jax.random.key(2), progress=False,
                       optimizer=ji.Fides(hybrid=hybrid)).fits  # fmt: skip
    assert fits.ok.all() and fits.n_at_best == 4
    np.testing.assert_allclose(np.asarray(fits.theta), np.tile(theta, (4, 1)), rtol=1e-6)
    for th, f in zip(np.asarray(fits.theta), np.asarray(fits.nll)):
        np.testing.assert_allclose(f, -float(ji.predict(problem, th).log_likelihood), rtol=1e-13)
    assert np.all(np.asarray(fits.steps) >= 2)
    lm = ji.estimate(problem, starts=4, key=jax.random.key(2), progress=False).fits
    np.testing.assert_allclose(fits.best_nll, lm.best_nll, rtol=1e-9)


def test_fides_holds_parameters_and_stops_at_bounds():
    """`free=["k"]`: V held at theta0 in every start, k at SciPy's optimum with V held.
    With k's upper bound below its optimum (0.3 < 0.5), the fit ends at the bound and
    says so, as the compiled fit does."""
    t, y, problem = _decay_problem()
    fits = ji.estimate(problem, starts=3, free=["k"], theta0=[0.5, 1.2], progress=False,
                       optimizer=ji.Fides()).fits  # fmt: skip
    assert fits.held == ("V",) and np.all(np.asarray(fits.theta)[:, 1] == 1.2)
    # (fides stops once a step gains less than its fatol, 1e-8 of -log L: here 3e-6 of k)
    np.testing.assert_allclose(float(fits.best[0]), _least_squares(t, y, [0.5], V=1.2)[0],
                               rtol=1e-5)  # fmt: skip
    t, y, boxed = _decay_problem(upper_k=0.3)
    fides = ji.estimate(boxed, starts=3, progress=False, optimizer=ji.Fides()).fits
    lm = ji.estimate(boxed, starts=3, progress=False).fits
    # the compiled fit with its steps re-solved on the face they reach: the same end
    face = ji.estimate(boxed, starts=3, progress=False, optimizer=ji.FisherLM(box=ji.Face())).fits
    for f in (fides, lm, face):
        assert np.asarray(f.at_bound)[0].tolist() == [True, False]
    np.testing.assert_allclose(float(fides.best[0]), 0.3, rtol=1e-8)
    np.testing.assert_allclose(float(face.best[0]), 0.3, rtol=1e-12)
    np.testing.assert_allclose(fides.best_nll, lm.best_nll, rtol=1e-7)
    np.testing.assert_allclose(face.best_nll, lm.best_nll, rtol=1e-9)


def test_optimizer_arguments_refused():
    t, y, problem = _decay_problem()
    # (the tests' type checks see the annotation first; a user sees the message below)
    with pytest.raises(TypeError, match="optimizer"):
        ji.estimate(problem, starts=2, progress=False, optimizer="fides")
    with pytest.raises(TypeError, match="ji.FisherLM\\(\\) or ji.Fides\\(\\), got str"):
        _optimizers.checked_optimizer("fides")
    with pytest.raises(TypeError, match="one start at a time: leave out batch"):
        ji.estimate(problem, starts=4, batch=2, progress=False, optimizer=ji.Fides())
    with pytest.raises(TypeError, match="model's least squares takes solver"):
        ji.estimate(Decay(), y, t, optimizer=ji.Fides())
    with pytest.raises(ValueError, match="switch must be a positive number"):
        ji.Fides(switch=0)
    # strategies are objects: a string is refused by the type, a bad factor by its check
    with pytest.raises(TypeError, match="noise_curvature"):
        ji.FisherLM(noise_curvature="smaller")
    with pytest.raises(TypeError, match="box"):
        ji.FisherLM(box="face")
    with pytest.raises(ValueError, match="factor must be in"):
        ji.FadingMaximum(factor=2.0)
    with pytest.raises(TypeError, match="options"):
        ji.Fides(options=3)
    for stall in (3, 0, True):  # (other types: the annotation, as for `switch`)
        with pytest.raises(ValueError, match="stall must be a number of evaluations"):
            ji.Fides(stall=stall)
    # an option fides does not know is fides' own error, before any fit
    with pytest.raises(ValueError, match="bogus"):
        ji.estimate(problem, progress=False, optimizer=ji.Fides(options={"bogus": 1}))


def test_a_start_where_the_model_fails(monkeypatch):
    """An objective that is not finite at the start (fides raises there): the fit is
    reported failed (`inf`, divergence), and with `throw` the estimate says every fit
    failed."""
    t, y, problem = _decay_problem()
    monkeypatch.setattr(_optimizers, "objective", lambda *a, **k: (np.inf, np.zeros(2),
                                                                   np.zeros((2, 2))))  # fmt: skip
    fits = ji.estimate(problem, starts=2, progress=False, throw=False, optimizer=ji.Fides()).fits
    assert np.all(np.isinf(np.asarray(fits.nll)))
    assert np.all(fits.result == ji.RESULTS.nonlinear_divergence)
    with pytest.raises(RuntimeError, match="Estimation failed at all 2 starts"):
        ji.estimate(problem, starts=2, progress=False, optimizer=ji.Fides())


def test_a_trial_point_where_the_model_fails_does_not_end_the_fit(monkeypatch):
    """fides tests its convergence at every trial point, rejected or not. The objective
    gives `inf` and zeros where the model cannot be solved; that zero gradient stopped
    the fit there as converged (fides' GTOL: Crauste's starts ended 55-120 units of
    -log L above where pyPESTO's fides went on to). Here the first trial point fails:
    the fit goes on to SciPy's optimum."""
    t, y, problem = _decay_problem()
    real, calls = _optimizers.objective, []

    def failing_once(problem, theta, integrator, derivatives, inner=None):
        calls.append(derivatives)
        if derivatives and calls.count(True) == 2:  # the first trial point
            return np.inf, np.zeros(2), np.zeros((2, 2))
        return real(problem, theta, integrator, derivatives, inner=inner)

    monkeypatch.setattr(_optimizers, "objective", failing_once)
    fit = ji.estimate(problem, theta0=[1.5, 3.0], starts=None, progress=False,
                      optimizer=ji.Fides())  # fmt: skip
    assert calls.count(True) > 3
    np.testing.assert_allclose(np.asarray(fit.theta), _least_squares(t, y, [0.5, 1.0]),
                               rtol=1e-6)  # fmt: skip


def test_fides_missing_names_the_install(monkeypatch):
    t, y, problem = _decay_problem()
    monkeypatch.setitem(sys.modules, "fides", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxident\[fides\]'"):
        ji.estimate(problem, progress=False, optimizer=ji.Fides())


@pytest.mark.slow
def test_fides_reaches_fujitas_optimum_where_the_compiled_fit_stops():
    """Fujita_SciSignal2010, every parameter (noise ones too), start 9 of seed 0's 100
    Latin-hypercube starts (`benchmarks/bench_fit.py`'s): fides reaches the benchmark's
    best known optimum, -log L -66.58 (pyPESTO with fides and AMICI reaches it from the
    same start), where the compiled fit ends on the zero-output plateau near 10,011.
    About two minutes."""
    problem = ji.petab.load(ji.data.petab_problem("fujita"), estimate_noise=True)
    starts = np.asarray(ji.latin_hypercube(jax.random.key(0), problem.parameters, 100))
    fits = ji.estimate(problem, starts=starts[9:10], progress=False, max_steps=1000,
                       optimizer=ji.Fides()).fits  # fmt: skip
    assert fits.best_nll == pytest.approx(-66.58, abs=0.01)
    lm = ji.estimate(problem, starts=starts[9:10], progress=False).fits
    assert lm.best_nll > 10_000


def test_cli_fit_with_fides(tmp_path, capsys):
    """`jaxident fit problem.yaml --optimizer fides`: the best fit of the default
    optimizer; `--optimizer` without `--fit` is refused in one line, as `--max-steps`."""
    path = str(write_petab(tmp_path / "p"))
    fits = {}
    for name in ("lm", "fides"):
        js = tmp_path / f"{name}.json"
        argv = ["fit", path, "--starts", "3", "--optimizer", name, "--json", str(js), "--quiet"]
        assert cli.main(argv) == 0
        fits[name] = json.loads(js.read_text())
    assert fits["fides"]["fits"]["at_best"] >= 1
    np.testing.assert_allclose(fits["fides"]["log_likelihood"], fits["lm"]["log_likelihood"],
                               rtol=1e-7)  # fmt: skip
    capsys.readouterr()
    assert cli.main(["analyze", path, "--optimizer", "fides"]) == 2
    assert "--optimizer sets how the fits of --fit step" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's own one line
        cli.main(["fit", path, "--optimizer", "bfgs"])
    assert "invalid choice: 'bfgs' (choose from 'lm', 'fides')" in capsys.readouterr().err


def test_fides_stall_test_against_planted_cost_sequences():
    """`_stalled(tried, window)`: a quarter or more of the last `window` evaluations
    failed (inf) and the best cost fell by less than 0.1 over them."""
    inf = np.inf
    moving = [10.0] + [9.0, inf, 8.0, inf, 7.0, inf, 6.0, inf]  # failures, but progress
    assert not _optimizers._stalled(moving, 8)
    still = [10.0] + [10.0, inf, 9.95, inf, 9.96, inf, 9.97, 9.99]  # failures, no progress
    assert _optimizers._stalled(still, 8)
    few = [10.0] + [10.0, inf, 9.95, 9.96, 9.97, 9.98, 9.99, 9.99]  # no progress, 1 failure
    assert not _optimizers._stalled(few, 8)
    assert not _optimizers._stalled(still[1:], 8)  # no evaluation before the window


def test_a_fides_fit_is_converged_only_where_its_first_order_test_holds():
    """fides' function-tolerance stop reported every fit of a Laplace-noise problem
    converged, 1e-3 to 2 units of -log L above the optimum (SciPy's Nelder-Mead from
    each fit's end), the gradient far from zero. A fit is converged now only where a
    Gauss-Newton step promises at most `PROMISE` of -log L; the message names the
    likelihood's kinks. With normal noise the fits stay converged."""
    from jaxident._fit._optimizers import objective, PROMISE, promised

    t, y = decay_data()
    rng = np.random.default_rng(1)
    noisy = (y + 0.05 * np.abs(y).max() * rng.laplace(size=y.shape))[:, None]
    sigma = 0.05 * np.abs(y).max()
    laplace = ji.Problem(Decay(), ji.Experiment(t, noisy, sigma), distributions=["laplace"])
    est = ji.estimate(laplace, starts=8, optimizer=ji.Fides(), progress=False, throw=False)

    def cost(th):
        return -float(ji.predict(laplace, th, throw=False).log_likelihood)

    ends = np.asarray(est.fits.theta)
    best = min(so.minimize(cost, x0, method="Nelder-Mead",
                                       options={"xatol": 1e-10, "fatol": 1e-12}).fun
               for x0 in ends)  # fmt: skip
    nll = np.asarray(est.fits.nll)
    assert np.all(nll >= best - 1e-6)
    assert np.all(nll[np.asarray(est.fits.ok)] <= best + PROMISE)  # converged: at the optimum
    assert not np.asarray(est.fits.ok).all() and "kinks" in est.message
    normal = ji.Problem(Decay(), ji.Experiment(t, noisy, sigma))
    fit = ji.estimate(normal, starts=4, optimizer=ji.Fides(), progress=False)
    assert np.asarray(fit.fits.ok).all()
    integ = normal.model.integrator
    lower, upper = (
        np.asarray(b, float) for b in (normal.parameters.lower, normal.parameters.upper)
    )
    for th in np.asarray(fit.fits.theta):
        _, g, H = objective(normal, th, integ, derivatives=True)
        assert promised(g, H, th, lower, upper, np.ones(2, bool)) <= PROMISE
