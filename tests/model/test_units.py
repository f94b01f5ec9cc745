"""Decisions do not depend on units: random rescalings of the columns (parameters) by
10^U(-6, 6), and of the rows of each output, leave every rank, nullity, pivot and
zero-entry decision unchanged."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import jaxident as ji
import jaxident.linalg as L


def _cases(rng):
    A = rng.standard_normal((60, 7))
    deficient = np.concatenate([A, (2 * A[:, 0] - 3 * A[:, 1])[:, None]], axis=1)  # 60x8
    full = rng.standard_normal((60, 8))
    return {"deficient": deficient, "full": full}


def _rescalings(rng, n=12, p=8, rows=60):
    for _ in range(n):
        cols = 10.0 ** rng.uniform(-6, 6, p)
        outs = 10.0 ** rng.uniform(-6, 6, 2)  # two outputs, rows alternate (time-major)
        yield cols, np.tile(outs, rows // 2)


@pytest.mark.parametrize("case", ["deficient", "full"])
def test_estimability_is_unit_free(case):
    rng = np.random.default_rng(0)
    S = _cases(rng)[case]
    ref = ji.estimability(S)
    assert ref.nullity == (1 if case == "deficient" else 0)
    if case == "deficient":
        assert set(ref.estimable) == {f"w{i}" for i in range(3, 8)}
        assert ref.dependent_sets == [("w1", "w2", "w8")]
    for cols, rows in _rescalings(rng):
        est = ji.estimability(rows[:, None] * S * cols)
        assert est.nullity == ref.nullity
        assert est.estimable == ref.estimable
        assert est.pivots == ref.pivots
        assert est.dependent_sets == ref.dependent_sets
        assert est.dependence("w1", "w8") == ref.dependence("w1", "w8")
        # v_k carries the units of each unknown: v_k(scaled) = v_k / c_k
        if case == "full":
            cols_only = ji.estimability(S * cols)
            np.testing.assert_allclose(cols_only.uncertainty * cols, ref.uncertainty, rtol=1e-6)


@pytest.mark.parametrize("case", ["deficient", "full"])
def test_rank_and_null_space_are_unit_free(case):
    rng = np.random.default_rng(1)
    S = _cases(rng)[case]
    ns = L.null_space(jnp.asarray(S), ji.RelativeTolerance(1e-9))
    ech = L.rref(jnp.where(ns.mask[:, None], ns.basis.T, 0.0), 1e-8)
    k = int(ji.select_parameters(S).k)
    assert k == int(ns.rank) == (7 if case == "deficient" else 8)
    for cols, _ in _rescalings(rng):
        Ss = jnp.asarray(S * cols)
        ns2 = L.null_space(Ss, ji.RelativeTolerance(1e-9))
        assert int(ns2.rank) == int(ns.rank)
        ech2 = L.rref(jnp.where(ns2.mask[:, None], ns2.basis.T, 0.0), 1e-8)
        np.testing.assert_array_equal(ech2.pivots, ech.pivots)
        np.testing.assert_array_equal(ech2.partners, ech.partners)
        assert int(ji.select_parameters(Ss).k) == k


def test_sensitivity_rows_are_weighted_per_output():
    """The rows of a Sensitivity are divided by each output's RMS value before the rank
    decision: multiplying an output (and its sensitivities) by 1e6 changes nothing."""
    model = ji.models.load("svir")
    sens = ji.sensitivity(model)
    k = int(ji.select_parameters(sens).k)
    scaled = type(sens)(
        matrix=sens.matrix * 1e6,
        outputs=sens.outputs * 1e6,
        times=sens.times,
        names=sens.names,
        output_names=sens.output_names,
        scale=sens.scale,
        result=sens.result,
        accuracy=sens.accuracy,
    )
    sel = ji.select_parameters(scaled)
    assert int(sel.k) == k
    np.testing.assert_allclose(
        sel.decision_singular_values,
        ji.select_parameters(sens).decision_singular_values,
        rtol=1e-10,
    )


def test_wind_turbine_in_other_units_keeps_full_rank():
    """K_Vi expressed in units 1000x smaller: L-SERC still gives rank 5 everywhere and
    nothing non-identifiable (the issue's case: rank 4 and 'KQi non-identifiable')."""
    model = ji.models.load("wind_turbine")
    theta = np.asarray(model.parameters.nominal)
    i = model.parameters.names.index("KVi")
    S = np.asarray(ji.sensitivity_matrix(model, theta))
    Sunits = S.copy()
    Sunits[:, i] /= 1000.0  # d y / d(KVi in new units) with KVi_new = 1000 KVi
    for M in (S, Sunits):
        ns = L.null_space(jnp.asarray(M), ji.RelativeTolerance(1e-9))
        assert int(ns.rank) == 5


def test_relative_tolerance_validates():
    with pytest.raises(ValueError, match="RelativeTolerance"):
        ji.RelativeTolerance(-1.0)
    with pytest.raises(ValueError, match="RelativeTolerance"):
        ji.RelativeTolerance(float("nan"))


def test_near_threshold_warns():
    V = 0.5 * np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1.0]])
    S = np.diag([1.0, 1e-2, 3e-8, 1e-12]) @ V.T
    with pytest.warns(ji.NearThresholdWarning, match="close to the threshold"):
        ji.select_parameters(S, rank=ji.RelativeTolerance(1e-8))


class _ScaledDAE(ji.DAEModel):
    """x' = -x + w1, 0 = A w - (x, 1): g_w = A = diag(s, 1), index 1 for every s > 0."""

    s: float = 1.0
    parameters: ji.Parameters = ji.Parameters(["k"], [1.0])
    times: jnp.ndarray = eqx.field(default_factory=lambda: jnp.linspace(0.1, 1.0, 4))
    t0: float = 0.0

    def differential(self, t, x, w, theta):
        return -theta.k * x + w[:1]

    def algebraic(self, t, x, w, theta):
        return jnp.stack([self.s * w[0] - x[0], w[1] - 1.0])

    def initial_state(self, theta):
        return jnp.array([1.0])

    def initial_algebraic_guess(self, theta):
        return jnp.array([1.0 / self.s, 1.0])

    def output(self, t, x, w, theta):
        return x[0]


@pytest.mark.parametrize("s", [1.0, 1e-17, 1e17])
def test_dae_index_check_is_unit_free(s):
    """An algebraic variable in units 1e17 apart is still index 1: the check of g_w is
    made on the equilibrated matrix (an absolute pivot test would call diag(1e-17, 1)
    singular)."""
    from jaxident._model._dae import consistent_initial_values

    model = _ScaledDAE(s=s)
    th = model.parameters.view(model.parameters.nominal)
    _, w0, ok = consistent_initial_values(model, th, model.integrator)
    assert bool(ok)
    np.testing.assert_allclose(w0, [1.0 / s, 1.0], rtol=1e-12)


def test_fisher_test_is_unit_free():
    """The set-by-set Fisher test uses the noise-weighted columns in log-parameters,
    W = S diag(theta) / sigma: a parameter in other units (theta -> c theta,
    S -> S / c) or an output in other units (S, sigma -> d S, d sigma) give the same W."""
    from jaxident._identify._stepwise_result import scaled_columns

    rng = np.random.default_rng(5)
    S = rng.standard_normal((12, 4))
    theta = rng.uniform(0.5, 2.0, 4)
    sigma = rng.uniform(0.1, 1.0, 12)
    W = np.asarray(scaled_columns(jnp.asarray(S), jnp.asarray(theta), jnp.asarray(sigma)))
    c = 10.0 ** rng.uniform(-6, 6, 4)
    d = 10.0 ** rng.uniform(-6, 6)
    W2 = scaled_columns(jnp.asarray(d * S / c), jnp.asarray(theta * c), jnp.asarray(d * sigma))
    np.testing.assert_allclose(W2, W, rtol=1e-12)


def test_colpitts_in_other_units_keeps_its_estimable_set():
    """Colpitts' p2 expressed in units 1e4x larger (its column of DG / 1e4) stayed
    'estimable' under the absolute zero_tol before; the decisions now do not move."""
    model = ji.models.load("colpitts")
    names = ji.free_initial_state(model).parameters.names
    x = ji.attractor_states(model, n=1, spacing=10.0, transient=200.0)[0]
    DG = np.asarray(ji.delay_jacobian(model, x, tau=0.5, K=20))
    ref = ji.estimability(DG, names, pivots=("p4",))
    assert ref.nullity == 1 and set(ref.estimable) == {"x1", "p3"}
    i = names.index("p2")
    for factor in (1e-4, 1e4):
        D = DG.copy()
        D[:, i] *= factor
        est = ji.estimability(D, names, pivots=("p4",))
        assert est.nullity == 1 and est.estimable == ref.estimable
        assert est.dependent_sets == ref.dependent_sets
        assert est.dependence("p4", "p2") == [-1]


def test_lserc_wind_turbine_in_other_units():
    """The wind turbine with K_Vi in units 1000x smaller (nominal 40,000): L-SERC
    still finds rank 5 in every direction and nothing non-identifiable (the issue's
    case gave rank 4 and 'KQi non-identifiable')."""
    base = ji.models.load("wind_turbine")

    milli = ji.change_units(base, {"KVi": 1e-3})  # a DAE through the transform base
    assert float(milli.parameters.nominal[1]) == pytest.approx(40_000.0)
    for model in (base, milli):
        res = ji.lserc(model, method=ji.LSERC(twin=0.0, singular=0.0))
        assert np.all(np.asarray(res.reference.rank) == 5)
        assert res.non_identifiable == ()


def test_change_units_against_column_scaling():
    """`ji.change_units`: nominal values and bounds divided by the unit, sensitivities
    multiplied by it (chain rule, against the original model's matrix), the same
    selection, and an estimate that is the original's divided by the unit."""
    model = ji.models.load("svir")
    u = np.array([1e-3, 1.0, 1e4, 1.0])
    names = model.parameters.names
    other = ji.change_units(model, dict(zip(names, u)))
    np.testing.assert_allclose(other.parameters.nominal, model.parameters.nominal / u)
    np.testing.assert_allclose(other.parameters.upper, model.parameters.upper / u)
    S = np.asarray(ji.sensitivity_matrix(model))
    S2 = np.asarray(ji.sensitivity_matrix(other))
    np.testing.assert_allclose(S2, S * u, rtol=1e-9, atol=1e-12 * np.abs(S).max())
    assert (
        # the same split; the order of selection follows the column norms, which change
        set(ji.select_parameters(S2, names).identifiable)
        == set(ji.select_parameters(S, names).identifiable)
    )
    data = ji.simulate(model).ys
    start = model.parameters.nominal * 1.1
    est = ji.estimate(model, data, theta0=start)
    est2 = ji.estimate(other, data, theta0=start / u)
    np.testing.assert_allclose(est2.theta * u, est.theta, rtol=1e-6)
    with pytest.raises(ValueError, match="positive"):
        ji.change_units(model, {"beta": -1.0})
    with pytest.raises(ValueError, match="Unknown parameter"):
        ji.change_units(model, {"betta": 2.0})


def test_transform_bases_forward_every_model_method():
    """Every public method of a model kind is forwarded by that kind's transform base,
    so no wrapper (fixed parameters, units, initial state, POD) drops one silently."""
    import inspect

    from jaxident._model._transforms import (
        AbstractTransformedAlgebraic,
        AbstractTransformedDAE,
        AbstractTransformedModel,
        AbstractTransformedODE,
    )

    pairs = (
        (AbstractTransformedODE, ji.ODEModel),
        (AbstractTransformedDAE, ji.DAEModel),
        (AbstractTransformedAlgebraic, ji.AlgebraicModel),
    )
    for base, kind in pairs:
        methods = {
            n
            for k in kind.__mro__
            if k.__module__.startswith("jaxident")
            for n, v in vars(k).items()
            if inspect.isfunction(v) and not n.startswith("_")
        }
        assert methods, kind
        forwarded = {*vars(base), *vars(AbstractTransformedModel)}
        assert sorted(n for n in methods if n not in forwarded) == [], base
