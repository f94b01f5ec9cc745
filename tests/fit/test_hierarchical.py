"""Hierarchical fits (observable scalings solved in closed form) against SciPy on a
closed form: `y = s exp(-k t)`, with data on a linear or a log10 scale, two experiments
sharing the scaling. The profile's value and gradient, its Fisher information (the
Schur complement), a scaling clipped at its bound, the fits with both optimizers, the
detection in SBML formulas, and the refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize as so
from helpers import write_petab
from models_for_tests import Decay

import jaxident as ji
from jaxident._fit import _hierarchical as hierarchical
from jaxident._fit._multistart import filled, objective


SIGMA = 0.02
T = np.linspace(0.5, 6.0, 12)


class ScaledDecay(Decay):
    """`y = s exp(-k t)`; `s` multiplies the output and enters nothing else."""

    parameters: ji.Parameters = ji.Parameters(["k", "s"], [0.5, 1.0], [0.05, 0.01], [2.0, 100.0])

    def output(self, t, x, th):
        return th.s * x[0]

    def output_scalings(self):
        return ("s",)


def _data(transform):
    rng = np.random.default_rng(5)
    y = 3.0 * np.exp(-0.4 * T)
    if transform == "log10":
        return [y * 10 ** (SIGMA * rng.standard_normal(T.size)) for _ in range(2)]
    return [y + SIGMA * rng.standard_normal(T.size) for _ in range(2)]


def _problem(transform="lin", s_bounds=(0.01, 100.0)):
    params = ji.Parameters(["k", "s"], [0.5, 1.0], [0.05, s_bounds[0]], [2.0, s_bounds[1]])
    experiments = [ji.Experiment(T, d[:, None], SIGMA, name=f"e{i}")
                   for i, d in enumerate(_data(transform))]  # fmt: skip
    return ji.Problem(ScaledDecay(parameters=params), experiments, transforms=[transform])


def _nll(k, s, transform):
    """The full negative log-likelihood in NumPy (PEtab's, constants included)."""
    h = np.exp(-k * T)
    out = 0.0
    for d in _data(transform):
        if transform == "log10":
            r = (np.log10(s * h) - np.log10(d)) / SIGMA
            out += np.sum(np.log(d * np.log(10)))  # the log-transformation's Jacobian
        else:
            r = (s * h - d) / SIGMA
        out += 0.5 * r @ r + T.size * np.log(np.sqrt(2 * np.pi) * SIGMA)
    return out


def _profile(k, transform, bounds=(0.01, 100.0)):
    fit = so.minimize_scalar(lambda s: _nll(k, s, transform), bounds=bounds, method="bounded",
                             options={"xatol": 1e-13})  # fmt: skip
    return fit.fun, fit.x


@pytest.mark.parametrize("transform", ["lin", "log10"])
def test_the_profile_over_the_scaling_against_scipy(transform):
    """The hierarchical cost at `k` is the full cost minimised over `s` (SciPy's bounded
    scalar minimisation of the NumPy likelihood), the filled-in `s` its minimiser, and
    the gradient in `k` the profile's central difference."""
    problem = _problem(transform)
    inner = hierarchical.scalings(problem)
    assert inner.index == (1,) and inner.transform == (transform,)
    integ = ji.Integrator(rtol=1e-11, atol=1e-13)
    for k in (0.2, 0.4, 1.1):
        theta = np.array([k, 1.0])
        want, s = _profile(k, transform)
        f = objective(problem, theta, integ, False, inner)
        np.testing.assert_allclose(f, want, rtol=1e-9)
        np.testing.assert_allclose(filled(problem, theta, integ, inner)[1], s, rtol=1e-6)
        _, g, _ = objective(problem, theta, integ, True, inner)
        h = 1e-5
        fd = (_profile(k + h, transform)[0] - _profile(k - h, transform)[0]) / (2 * h)
        np.testing.assert_allclose(g[0], fd, rtol=1e-5)
        assert g[1] == 0.0


def test_the_fisher_information_is_the_schur_complement():
    """`F_kk - F_ks^2 / F_ss` from the closed-form derivatives (`dy/dk = -s t e^{-kt}`,
    `dy/ds = e^{-kt}`, over sigma, both experiments); with `s` clipped at a bound the
    scaling is held: `F_kk`."""
    integ = ji.Integrator(rtol=1e-11, atol=1e-13)
    k = 0.6
    for bounds in ((0.01, 100.0), (0.01, 1.0)):
        problem = _problem("lin", bounds)
        inner = hierarchical.scalings(problem)
        _, s = _profile(k, "lin", bounds)
        e = np.exp(-k * T)
        Jk = np.tile(-s * T * e / SIGMA, 2)
        Js = np.tile(e / SIGMA, 2)
        inside = s < bounds[1] - 1e-4  # (the bounded search ends within its xatol)
        want = Jk @ Jk - ((Jk @ Js) ** 2 / (Js @ Js) if inside else 0.0)
        _, _, H = objective(problem, np.array([k, 1.0]), integ, True, inner)
        np.testing.assert_allclose(H[0, 0], want, rtol=1e-7)
        np.testing.assert_array_equal(H[1], 0.0)
    assert not inside and s == pytest.approx(1.0)  # the second box clips it


def test_the_prediction_under_vmap_as_one_by_one():
    problem = _problem("lin")
    inner = hierarchical.scalings(problem)
    integ = ji.Integrator(rtol=1e-10)
    thetas = jnp.asarray([[0.2, 1.0], [0.5, 7.0], [1.3, 0.1]])

    def one(th):
        out, full, _ = hierarchical.prediction(problem, inner, th, integ, True)
        return out.log_likelihood, out.jacobian, full

    batched = jax.jit(jax.vmap(one))(thetas)
    for i, th in enumerate(thetas):
        single = jax.jit(one)(th)
        for a, b in zip(batched, single):
            np.testing.assert_allclose(np.asarray(a[i]), np.asarray(b), rtol=1e-12, atol=1e-12)


HIERARCHICAL = [
    ji.FisherLM(hierarchical=True),
    pytest.param(ji.Fides(hierarchical=True), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("optimizer", HIERARCHICAL, ids=["lm", "fides"])
def test_hierarchical_fits_reach_the_least_squares_optimum(optimizer):
    """Both optimizers, stepping in `k` alone, end at SciPy's least-squares optimum over
    `(k, s)`, and report `s` too."""
    problem = _problem("lin")
    ref = so.least_squares(
        lambda p: np.concatenate([(p[1] * np.exp(-p[0] * T) - d) / SIGMA for d in _data("lin")]),
        [0.5, 1.0], xtol=1e-15, ftol=1e-15,
    ).x  # fmt: skip
    fits = ji.estimate(problem, starts=np.array([[0.1, 1.0], [1.8, 50.0], [0.9, 0.02]]),
                       optimizer=optimizer, progress=False).fits  # fmt: skip
    assert fits.n_at_best == 3
    np.testing.assert_allclose(np.asarray(fits.best), ref, rtol=1e-6)
    np.testing.assert_allclose(fits.best_nll, _nll(*ref, "lin"), rtol=1e-7)  # (rtol 1e-8)


def test_hierarchical_without_scalings_is_refused():
    problem = ji.Problem.from_model(Decay(), np.ones((12, 1)), np.linspace(0.5, 6.0, 12), 0.1)
    with pytest.raises(ValueError, match="has no scalings to solve for"):
        ji.estimate(problem, starts=2, optimizer=ji.FisherLM(hierarchical=True), progress=False)


def test_scalings_found_in_sbml_formulas(tmp_path):
    """Fujita's three `observableParameter1_*` multiply whole observables; Schwen's
    scalings multiply an observable with an offset inside (`s (IR1 + IR1in + o)`), on a
    log10 scale; Boehm has none, and with its noise parameters estimated, their three
    noise scales. A placeholder that the noise formula uses as well is no scaling."""
    found = {}
    for name, noise in (("fujita", False), ("schwen", False), ("boehm", False), ("boehm", True)):
        problem = ji.petab.load(ji.data.petab_problem(name), estimate_noise=noise)
        inner = hierarchical.scalings(problem)
        names = problem.parameters.names
        found[name, noise] = None if inner is None else [names[j] for j in inner.index]
    assert found["fujita", False] == ["scaling_pAkt_tot", "scaling_pEGFR_tot", "scaling_pS6_tot"]
    assert found["boehm", False] is None and len(found["schwen", False]) >= 1
    # a noise formula that is its parameter alone is a noise scale (not an offset of 0)
    assert found["boehm", True] == ["sd_pSTAT5A_rel", "sd_pSTAT5B_rel", "sd_rSTAT5A_rel"]
    head = "observableId\tobservableFormula\tnoiseFormula\n"
    scaled = "obs_X\tobservableParameter1_obs_X * X\tnoiseParameter1_obs_X"
    pars = "s\tlog10\t0.1\t10\t1\t1\n"
    meas = "observableId\tsimulationConditionId\tmeasurement\ttime\t"
    meas += "observableParameters\tnoiseParameters\n"
    meas += "".join(f"obs_X\tc0\t{v}\t{t}\ts\t0.1\n" for t, v in ((1.0, 0.9), (2.0, 0.5)))
    found = []
    for folder, noise in (("a", "\n"), ("b", " * observableParameter1_obs_X\n")):
        path = write_petab(tmp_path / folder, observables=head + scaled + noise,
                           measurements=meas, extra_parameters=pars)  # fmt: skip
        found.append(hierarchical.scalings(ji.petab.load(path)))
    assert found[0] is not None and found[1] is None


def test_a_scaling_solved_at_its_bound_is_reported_so():
    """The data want `s` near 3.8; in a box up to 1 the solved scaling ends on the bound
    and the fit says so, as for a stepped parameter."""
    fits = ji.estimate(_problem("lin", (0.01, 1.0)), starts=np.array([[0.3, 0.5]]),
                       optimizer=ji.FisherLM(hierarchical=True), progress=False).fits  # fmt: skip
    assert np.asarray(fits.best)[1] == pytest.approx(1.0)
    assert np.asarray(fits.at_bound)[0].tolist() == [False, True]


def test_cli_fit_hierarchical(tmp_path, capsys):
    """`jaxident fit problem.yaml --hierarchical`: the same best fit as the plain one,
    every parameter reported; on a problem without a scaling, one line says so (exit
    status 2)."""
    import json

    from jaxident import cli

    obs = "observableId\tobservableFormula\tnoiseFormula\n"
    obs += "obs_X\tobservableParameter1_obs_X * X\t0.1\n"
    y = [0.9, 1.2, 1.5, 1.3, 0.9, 0.65, 0.45, 0.3]
    meas = "observableId\tsimulationConditionId\tmeasurement\ttime\tobservableParameters\n"
    meas += "".join(f"obs_X\tc0\t{2 * v}\t{t}\ts\n" for t, v in zip(np.linspace(0.5, 4, 8), y))
    path = str(write_petab(tmp_path / "p", observables=obs, measurements=meas,
                           extra_parameters="s\tlog10\t0.1\t10\t1\t1\n"))  # fmt: skip
    best = []
    for flags in (["--hierarchical"], []):
        js = tmp_path / "fit.json"
        argv = ["fit", path, "--starts", "4", *flags, "--json", str(js), "--quiet"]
        assert cli.main(argv) == 0, capsys.readouterr().err
        best.append(json.loads(js.read_text())["fits"]["best"])
    assert set(best[0]) == set(best[1]) and "s" in best[0]
    for name in best[0]:
        assert best[0][name] == pytest.approx(best[1][name], abs=1e-3), name
    plain = str(write_petab(tmp_path / "q"))
    assert cli.main(["fit", plain, "--starts", "2", "--hierarchical", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no scalings to solve for" in err


class NoisyDecay(ScaledDecay):
    """`y = s exp(-k t)` with noise level `p`: a second output, `p` itself."""

    parameters: ji.Parameters = ji.Parameters(
        ["k", "s", "p"], [0.5, 1.0, 1.0], [0.05, 0.01, 1e-4], [2.0, 100.0, 10.0]
    )

    def output(self, t, x, th):
        return jnp.stack([th.s * x[0], th.p])

    def output_scalings(self):
        return ("s", "p")


@pytest.mark.parametrize("noise", ["normal", "laplace"])
def test_a_noise_scale_solved_with_the_scaling(noise):
    """With the noise level `p` estimated too: the hierarchical cost at `k` is the full
    cost minimised over `p` (and `s` for normal noise; with Laplace noise `s` is
    stepped, not solved), against SciPy; the gradient in `k` the profile's central
    difference."""
    experiments = [ji.Experiment(T, d[:, None], name=f"e{i}") for i, d in enumerate(_data("lin"))]
    problem = ji.Problem(NoisyDecay(), experiments, distributions=[noise], noise_outputs=True)
    inner = hierarchical.scalings(problem)
    solved = (1, 2) if noise == "normal" else (2,)
    assert inner.index == solved
    integ = ji.Integrator(rtol=1e-11, atol=1e-13)
    d = np.concatenate(_data("lin"))

    def full(k, s, p):
        r = (s * np.tile(np.exp(-k * T), 2) - d) / p
        if noise == "normal":
            return 0.5 * r @ r + d.size * np.log(np.sqrt(2 * np.pi) * p)
        return np.abs(r).sum() + d.size * np.log(2 * p)

    def profile(k, s=1.7):
        start = [s, 0.05] if noise == "normal" else [0.05]
        both = noise == "normal"
        fun = (lambda x: full(k, x[0], x[1])) if both else (lambda x: full(k, s, x[0]))
        tight = {"xatol": 1e-12, "fatol": 1e-13, "maxiter": 20000}
        return so.minimize(fun, start, method="Nelder-Mead", options=tight).fun

    for k in (0.3, 0.45):
        theta = np.array([k, 1.7, 1.0])
        np.testing.assert_allclose(objective(problem, theta, integ, False, inner), profile(k),
                                   rtol=1e-8)  # fmt: skip
        _, g, _ = objective(problem, theta, integ, True, inner)
        h = 1e-5
        np.testing.assert_allclose(g[0], (profile(k + h) - profile(k - h)) / (2 * h), rtol=1e-4)


@pytest.mark.slow  # two profiles, each a compiled fit per value (about 25 s)
def test_profiles_with_a_hierarchical_optimizer():
    """A profile holds its own parameter: profiling the scaling `s` holds it (it is not
    solved for), profiling `k` solves `s` at each value; both equal the plain
    optimizer's profiles, and `s`'s is not flat."""
    problem = _problem("lin")
    for name, values in (("s", np.linspace(2.5, 5.0, 4)), ("k", np.linspace(0.3, 0.5, 4))):
        hier = ji.profile(problem, name, values, optimizer=ji.FisherLM(hierarchical=True),
                          progress=False)  # fmt: skip
        plain = ji.profile(problem, name, values, progress=False)
        np.testing.assert_allclose(np.asarray(hier.cost), np.asarray(plain.cost), rtol=1e-7)
        assert np.ptp(np.asarray(hier.cost)) > 1.0


class ShiftedDecay(Decay):
    """`y = s exp(-k t) + b`: a scaling and an offset of one linear output."""

    parameters: ji.Parameters = ji.Parameters(
        ["k", "s", "b"], [0.5, 1.0, 0.0], [0.05, 0.01, -1.0], [2.0, 100.0, 1.0]
    )

    def output(self, t, x, th):
        return th.s * x[0] + th.b

    def output_scalings(self):
        return ("s",)

    def output_offsets(self):
        return ("b",)


def _shifted_data():
    rng = np.random.default_rng(7)
    y = 3.0 * np.exp(-0.4 * T) + 0.3
    return [y + SIGMA * rng.standard_normal(T.size) for _ in range(2)]


def _shifted(box_s=(0.01, 100.0), box_b=(-1.0, 1.0)):
    nominal = [0.5, np.mean(box_s), np.mean(box_b)]
    params = ji.Parameters(["k", "s", "b"], nominal, [0.05, box_s[0], box_b[0]],
                           [2.0, box_s[1], box_b[1]])  # fmt: skip
    experiments = [ji.Experiment(T, d[:, None], SIGMA, name=f"e{i}")
                   for i, d in enumerate(_shifted_data())]  # fmt: skip
    return ji.Problem(ShiftedDecay(parameters=params), experiments)


def _shifted_profile(k, box_s, box_b, with_scaling=True):
    """The cost at `k` minimised over `(s, b)` (or `b` alone, `s` = 1): SciPy's bounded
    linear least squares of the NumPy residuals, and its minimiser."""
    d = np.concatenate(_shifted_data())
    h = np.tile(np.exp(-k * T), 2)
    if with_scaling:
        A, rhs = np.stack([h, np.ones_like(h)], axis=1), d
        bounds = ([box_s[0], box_b[0]], [box_s[1], box_b[1]])
    else:
        A, rhs, bounds = np.ones((h.size, 1)), d - h, ([box_b[0]], [box_b[1]])
    fit = so.lsq_linear(A / SIGMA, rhs / SIGMA, bounds=bounds, tol=1e-15, method="bvls")
    r = (A @ fit.x - rhs) / SIGMA
    return 0.5 * r @ r + d.size * np.log(np.sqrt(2 * np.pi) * SIGMA), fit.x


@pytest.mark.parametrize(
    "box_s, box_b",
    [((0.01, 100.0), (-1.0, 1.0)), ((0.01, 2.0), (-1.0, 1.0)), ((0.01, 100.0), (0.5, 1.0)),
     ((4.0, 100.0), (0.6, 1.0))],
    ids=["inside", "s-at-bound", "b-at-bound", "corner"],
)  # fmt: skip
def test_a_scaling_and_its_offset_solved_together_against_scipy(box_s, box_b):
    """`y = s h + b`: the hierarchical cost at `k` is the full cost minimised over the
    box of `(s, b)` (SciPy's bounded linear least squares), inside it and with either
    or both at a bound; the filled-in `(s, b)` its minimiser; the gradient in `k` the
    profile's central difference."""
    problem = _shifted(box_s, box_b)
    inner = hierarchical.scalings(problem)
    assert inner.index == (1, 2) and inner.transform == ("lin", hierarchical.Solved.offset)
    assert inner.partner == (1, 0)
    integ = ji.Integrator(rtol=1e-11, atol=1e-13)
    for k in (0.25, 0.4, 0.9):
        theta = np.array([k, 1.0, 0.0])
        want, x = _shifted_profile(k, box_s, box_b)
        np.testing.assert_allclose(objective(problem, theta, integ, False, inner), want,
                                   rtol=1e-10)  # fmt: skip
        np.testing.assert_allclose(filled(problem, theta, integ, inner)[1:], x, rtol=1e-7,
                                   atol=1e-9)  # fmt: skip
        _, g, _ = objective(problem, theta, integ, True, inner)
        h = 1e-5
        fd = _shifted_profile(k + h, box_s, box_b)[0] - _shifted_profile(k - h, box_s, box_b)[0]
        np.testing.assert_allclose(g[0], fd / (2 * h), rtol=1e-5)
        np.testing.assert_array_equal(g[1:], 0.0)


def test_an_offset_alone_when_its_scaling_is_held():
    """Holding `s` leaves `b` solved alone (`b* = mean(d - s h)`, clipped); holding `b`
    drops `s` too (no longer a factor of its output less a solved offset)."""
    problem = _shifted()
    inner = hierarchical.scalings(problem)
    alone = hierarchical.only(inner, np.array([True, False, True]))
    assert alone.index == (2,) and alone.partner == (-1,)
    assert hierarchical.only(inner, np.array([True, True, False])) is None
    integ = ji.Integrator(rtol=1e-11, atol=1e-13)
    for k, box in ((0.4, (-1.0, 1.0)), (0.2, (-1.0, 1.0))):
        theta = np.array([k, 1.0, 0.0])  # s held at 1
        want, x = _shifted_profile(k, None, box, with_scaling=False)
        np.testing.assert_allclose(objective(problem, theta, integ, False, alone), want,
                                   rtol=1e-10)  # fmt: skip
        np.testing.assert_allclose(filled(problem, theta, integ, alone)[2], x[0], rtol=1e-8)


def test_the_box_quadratic_against_bounded_least_squares():
    """`_box_quadratic` (two unknowns on a box) against SciPy's bounded least squares
    of random problems, regular and singular, under `jit` and `vmap`."""
    rng = np.random.default_rng(0)
    As, rs, lows, ups = [], [], [], []
    for i in range(40):
        A = rng.standard_normal((6, 2))
        if i % 5 == 0:
            A[:, 1] = 2.0 * A[:, 0]  # singular
        lo = rng.uniform(-2.0, 0.5, 2)
        As.append(A), rs.append(rng.standard_normal(6) * 3), lows.append(lo)
        ups.append(lo + rng.uniform(0.1, 3.0, 2))
    run = jax.jit(jax.vmap(lambda A, r, lo, up: hierarchical._box_quadratic(A.T @ A, A.T @ r,
                                                                            lo, up)))  # fmt: skip
    got = np.asarray(run(*(jnp.asarray(np.stack(a)) for a in (As, rs, lows, ups))))
    for A, r, lo, up, z in zip(As, rs, lows, ups, got):
        ref = so.lsq_linear(A, r, bounds=(lo, up), tol=1e-15, method="bvls")
        got_cost, want_cost = (0.5 * np.sum((A @ x - r) ** 2) for x in (z, ref.x))
        assert np.all(z >= lo) and np.all(z <= up)
        np.testing.assert_allclose(got_cost, want_cost, rtol=1e-10, atol=1e-12)


def test_a_fit_with_an_offset_reaches_the_least_squares_optimum():
    """Stepping in `k` alone, the LM ends at SciPy's least-squares optimum over
    `(k, s, b)` and reports `s` and `b` too."""
    problem = _shifted()
    d = np.concatenate(_shifted_data())
    ref = so.least_squares(lambda p: (p[1] * np.tile(np.exp(-p[0] * T), 2) + p[2] - d) / SIGMA,
                           [0.5, 1.0, 0.0], xtol=1e-15, ftol=1e-15).x  # fmt: skip
    fits = ji.estimate(problem, starts=np.array([[0.1, 1.0, 0.0], [1.8, 50.0, 0.9]]),
                       optimizer=ji.FisherLM(hierarchical=True), progress=False).fits  # fmt: skip
    assert fits.n_at_best == 2
    np.testing.assert_allclose(np.asarray(fits.best), ref, rtol=1e-6)


def test_offsets_found_in_sbml_formulas(tmp_path):
    """PEtab observables `s X + b` on a linear scale: `s` and `b` solved together;
    on a log10 scale neither (`b` does not enter linearly there, and `s` is no factor
    of the output less a solved offset); `s (X + b)`: `s` alone (`b` is part of what it
    scales)."""
    head = "observableId\tobservableFormula\tobservableTransformation\tnoiseFormula\n"
    pars = "s\tlog10\t0.1\t10\t1\t1\nb\tlin\t-1\t1\t0\t1\n"
    meas = "observableId\tsimulationConditionId\tmeasurement\ttime\t"
    meas += "observableParameters\n"
    meas += "".join(f"obs_X\tc0\t{v}\t{t}\ts;b\n" for t, v in ((1.0, 0.9), (2.0, 0.5)))
    formulas = {
        "lin": ("observableParameter1_obs_X * X + observableParameter2_obs_X", "lin", "0.1"),
        "log": ("observableParameter1_obs_X * X + observableParameter2_obs_X", "log10", "0.1"),
        "inside": ("observableParameter1_obs_X * (X + observableParameter2_obs_X)", "lin", "0.1"),
    }
    found = {}
    for key, (formula, transform, noise) in formulas.items():
        obs = head + f"obs_X\t{formula}\t{transform}\t{noise}\n"
        path = write_petab(tmp_path / key, observables=obs, measurements=meas,
                           extra_parameters=pars)  # fmt: skip
        problem = ji.petab.load(path)
        inner = hierarchical.scalings(problem)
        names = problem.parameters.names
        found[key] = None if inner is None else dict(zip((names[j] for j in inner.index),
                                                         inner.transform))  # fmt: skip
    assert found["lin"] == {"s": "lin", "b": hierarchical.Solved.offset}
    assert found["log"] is None and found["inside"] == {"s": "lin"}


def test_declared_scalings_and_offsets_are_checked():
    """A hand-written model's `output_offsets()` (or `output_scalings()`) that names no
    parameter of the model, or gives the wrong number of entries, is refused by name."""

    class WrongName(ShiftedDecay):
        def output_offsets(self):
            return ("c",)

    class WrongLength(ShiftedDecay):
        def output_scalings(self):
            return ("s", None)

    experiments = [ji.Experiment(T, d[:, None], SIGMA) for d in _shifted_data()]
    cases = ((WrongName(), r"output_offsets\(\) names 'c', not a parameter"),
             (WrongLength(), r"output_scalings\(\) gives 2 entries for 1 outputs"))  # fmt: skip
    for model, match in cases:
        with pytest.raises(ValueError, match=match):
            hierarchical.scalings(ji.Problem(model, experiments))
