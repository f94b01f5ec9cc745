"""The E. coli central-carbon model (Chassagnole et al. 2002, as used by Alberton et al.
2013): its transcription, against published steady-state concentrations and against an
independent NumPy transcription integrated by SciPy; and the set-by-set selection on
it (the reduced problem runs in CI in notebooks/set_by_set.ipynb; here with `-m slow`,
as does the full one)."""

import ecoli_reference as ref
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import jaxident as ji


# our state order -> the reference's (the curated model's) state names
_REF_NAME = {"glc_ex": "glcex", "pg6": "pg"}


@pytest.fixture(scope="module")
def model():
    return ji.models.load("ecoli_chassagnole")


def _perm(model):
    return [ref.names.index(_REF_NAME.get(s, s)) for s in model.state_names]


def test_parameters_and_outputs(model):
    assert model.parameters.p == 121 == 116 + 5
    assert model.parameters.names[-5:] == ("x0_xyl5p", "x0_g1p", "x0_pgp", "x0_pg3", "x0_sed7p")
    assert len(model.output_names) == 13 and "pg2" in model.output_names
    # the curated values, by the reference's own names
    th = model.parameters.view(model.parameters.nominal)
    assert float(th["rmax_PTS"]) == ref.P["rmaxPTS"] and float(th["L_PFK"]) == ref.P["LPFK"]
    assert float(th["K_PDH_pyr"]) == ref.P["KPDHpyr"] and float(th["x0_pg3"]) == 2.13


def test_vector_field_equals_the_reference_transcription(model):
    rng = np.random.default_rng(0)
    perm = _perm(model)
    theta = model.parameters.view(model.parameters.nominal)
    for t in [0.0, 0.5, 7.0, 40.0, 250.0]:
        x_ref = ref.x0 * rng.uniform(0.5, 1.5, ref.x0.shape)
        ours = np.asarray(model.vector_field(jnp.asarray(t), jnp.asarray(x_ref[perm]), theta))
        np.testing.assert_allclose(ours, ref.rhs(t, x_ref)[perm], rtol=1e-10, atol=1e-14)


def test_pre_pulse_steady_state(model):
    """Chassagnole et al. fitted the maximal rates to the measured steady state before
    the pulse (extracellular glucose 0.0556 mM): the published concentrations must
    balance to within rounding of the published values. The phosphoglycerate pool
    (pgp, 3pg, 2pg) is near equilibrium through the very fast PGK (r_max = 3022 mM/s),
    so its members are checked as a pool."""
    theta = model.parameters.view(model.parameters.nominal)
    x = model.initial_state(theta).at[0].set(model.STEADY_STATE_GLUCOSE)
    dx = dict(zip(model.state_names, np.asarray(model.vector_field(jnp.asarray(0.0), x, theta))))
    flux = float(model.rates(jnp.asarray(0.0), x, theta)["PTS"]) * model.biomass_ratio
    assert 0.15 < flux < 0.25  # glucose uptake, mM/s
    pool = dx.pop("pgp") + dx.pop("pg3") + dx.pop("pg2")
    worst = max(abs(v) for v in dx.values())
    assert worst < 0.01 * flux and abs(pool) < 0.01 * flux


def test_simulation_against_scipy(model):
    perm = _perm(model)
    sol = solve_ivp(
        ref.rhs, (0.0, 300.0), ref.x0, method="LSODA", rtol=1e-11, atol=1e-13,
        t_eval=np.asarray(model.times),
    )  # fmt: skip
    tr = ji.simulate(model)
    xs = np.asarray(tr.xs)
    np.testing.assert_allclose(xs, sol.y.T[:, perm], rtol=2e-5, atol=1e-8)
    # the outputs are the 13 measured species
    idx = [model.state_names.index(s) for s in model.output_names]
    np.testing.assert_array_equal(np.asarray(tr.ys), xs[:, idx])
    # the glucose pulse is taken up within the 300 s
    assert xs[0, 0] < 2.0 and xs[-1, 0] < 0.1


def test_synthetic_data(model):
    y = np.asarray(ji.simulate(model).ys)
    data = np.asarray(model.synthetic_data(jax.random.key(1)))
    assert data.shape == (15, 13)
    z = (data - y) / (1e-2 * np.abs(y) + 1e-6)
    assert abs(z.mean()) < 0.3 and 0.8 < z.std() < 1.2


@pytest.mark.slow
def test_reduced_selection_with_and_without_reestimation(model):
    """The model's example problem (12 candidates, the first minute of data): set by set
    and one by one agree without re-estimation; with it, the fit reaches the noise.
    notebooks/set_by_set.ipynb runs the same problem with the same assertions in CI;
    this copy is for `pytest -m slow` runs without the notebooks."""
    prob = model.example_problem()
    assert prob.model.parameters.p == 12 and prob.data.shape == (10, 13)
    err = ji.MeasurementError(1e-2, 1e-6)
    kw = dict(error=err, integrator=prob.integrator, progress=False)
    plain = ji.set_by_set(prob.model, prob.data, prob.times, **kw)
    one = ji.one_by_one(prob.model, prob.data, prob.times, **kw)
    assert set(plain.selected) == set(one.selected) and len(plain.selected) >= 6
    assert plain.n_evaluations < one.n_evaluations
    re = ji.set_by_set(prob.model, prob.data, prob.times, method=ji.Stepwise(reestimate=True), **kw)
    assert re.reestimated and re.cost < 0.01 * re.cost0
    assert len(re.selected) >= len(plain.selected)
    assert np.all(np.isfinite(re.relative_std))
    # at the re-estimate the residuals are of the size of the measurement errors
    assert re.cost < 3 * prob.data.size
    # well-determined parameters (sigma/theta < 5%) are recovered within 4 sigma
    names = prob.model.parameters.names
    for n, rs in zip(re.selected, re.relative_std):
        if rs < 0.05:
            i = names.index(n)
            assert abs(np.log(re.theta[i] / float(prob.truth[i]))) < 4 * rs + 1e-3, n
    with pytest.raises(ValueError, match="Unknown parameter"):
        model.example_problem(free=("rmax_XYZ",))


@pytest.mark.slow
def test_full_selection_set_by_set_against_one_by_one(model):
    """All 121 candidates, without re-estimation: the same selection by both
    procedures, in far fewer evaluations set by set (see benchmarks/ for timings)."""
    k1, k2 = jax.random.split(jax.random.key(1))
    truth = model.parameters.nominal * jnp.exp(0.2 * jax.random.normal(k1, (121,)))
    data = model.synthetic_data(k2, truth)
    err = ji.MeasurementError(1e-2, 1e-6)
    sbs = ji.set_by_set(model, data, error=err, progress=False)
    obo = ji.one_by_one(model, data, error=err, progress=False)
    assert set(sbs.selected) == set(obo.selected)
    assert sbs.n_evaluations * 5 < obo.n_evaluations
