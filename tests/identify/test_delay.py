"""Estimability from delay coordinates (Schumann-Bischoff, Luther & Parlitz 2016)."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate as si
import scipy.linalg as sl
from helpers import tol, unordered_lapack_pairs

import jaxident as ji


def colpitts_rhs(x, p):
    p1, p2, p3, p4 = p
    return np.array([p1 * x[1], -p2 * (x[0] + x[2]) - p3 * x[1], p4 * (x[1] + 1 - np.exp(-x[0]))])


def delay_map_scipy(w, tau, K):
    """G(x, p) by SciPy at tight tolerance: the independent reference."""
    x, p = w[:3], w[3:]
    ts = tau * np.arange(K)
    sol = si.solve_ivp(
        lambda t, x: colpitts_rhs(x, p),
        (0, ts[-1]),
        x,
        t_eval=ts,
        rtol=1e-12,
        atol=1e-13,
        method="DOP853",
    )
    return sol.y[0]


@pytest.fixture(scope="module")
def colpitts():
    m = ji.models.load("colpitts")
    return m, np.asarray(ji.attractor_states(m, n=24, spacing=10.0, transient=200.0))


def colpitts_null_direction(w):
    """Closed form: with x1 measured, y''' + p3 y'' + p2 (p1 + p4) y' + p1 p2 p4
    (1 - exp(-y)) = 0, so y depends on w only through x1, p3, p1 x2, p1 p2 (x1 + x3),
    p2 (p1 + p4) and p1 p2 p4; the null direction is the kernel of their Jacobian."""
    x1, x2, x3, p1, p2, p3, p4 = w
    J = np.array(
        [
            [1, 0, 0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 1, 0],
            [0, p1, 0, x2, 0, 0, 0],
            [p1 * p2, 0, p1 * p2, p2 * (x1 + x3), p1 * (x1 + x3), 0, 0],
            [0, 0, 0, p2, p1 + p4, 0, p2],
            [0, 0, 0, p2 * p4, p1 * p4, 0, p1 * p2],
        ],
        float,
    )
    v = sl.null_space(J)
    assert v.shape[1] == 1
    return v[:, 0]


def test_delay_jacobian_matches_finite_differences_of_scipy(colpitts):
    model, X = colpitts
    x = X[0]
    p = np.asarray(model.parameters.nominal)
    w = np.concatenate([x, p])
    tau, K = 0.4, 12
    DG = np.asarray(ji.delay_jacobian(model, x, tau=tau, K=K))
    assert DG.shape == (K, 7) and DG.dtype == np.float64
    ref = np.empty_like(DG)
    for j in range(7):
        h = 1e-5 * max(1.0, abs(w[j]))
        e = np.zeros(7)
        e[j] = h
        ref[:, j] = (delay_map_scipy(w + e, tau, K) - delay_map_scipy(w - e, tau, K)) / (2 * h)
    assert np.linalg.norm(DG - ref) / np.linalg.norm(ref) < 1e-5
    # Under jit and vmap over states and delays.
    f = jax.jit(jax.vmap(lambda x, t: ji.delay_jacobian(model, x, tau=t, K=K)))
    batch = np.asarray(f(jnp.asarray(X[:3]), jnp.array([0.4, 0.4, 0.3])))
    np.testing.assert_allclose(batch[0], DG, rtol=1e-9, atol=1e-9)
    single = np.asarray(ji.delay_jacobian(model, X[2], tau=0.3, K=K))
    np.testing.assert_allclose(batch[2], single, rtol=1e-9, atol=1e-9)


def test_multivariate_linear_model_against_matrix_exponential():
    A = np.array([[-0.3, 1.0, 0.0], [-1.0, -0.2, 0.5], [0.0, -0.4, -0.1]])
    C = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])

    class Linear(ji.ODEModel):
        parameters: ji.Parameters = ji.Parameters(["a"], [1.0])
        times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.0, 1.0, 3))
        t0: float = 0.0

        def vector_field(self, t, x, theta):
            return theta.a * (jnp.asarray(A) @ x)

        def initial_state(self, theta):
            return jnp.ones(3)

        def output(self, t, x, theta):
            return jnp.asarray(C) @ x

    model = Linear()
    x = np.array([0.3, -1.0, 2.0])
    tau, K = 0.25, 6
    DG = np.asarray(ji.delay_jacobian(model, x, tau=tau, K=K))
    assert DG.shape == (2 * K, 4)
    # d y(k tau) / d x = C expm(a A k tau); d / d a = C A k tau expm(a A k tau) x at a = 1.
    for k in range(K):
        E = sl.expm(A * k * tau)
        np.testing.assert_allclose(DG[2 * k : 2 * k + 2, :3], C @ E, atol=1e-8)
        np.testing.assert_allclose(DG[2 * k : 2 * k + 2, 3], C @ A @ E @ x * k * tau, atol=1e-8)


def test_colpitts_null_space_matches_closed_form(colpitts):
    model, X = colpitts
    p = np.asarray(model.parameters.nominal)
    names = ji.free_initial_state(model).parameters.names
    for x in X[:4]:
        DG = ji.delay_jacobian(model, x, tau=0.5, K=20)
        est = ji.estimability(DG, names, pivots=("p4",))
        assert est.nullity == 1
        assert set(est.estimable) == {"x1", "p3"}
        v = np.asarray(est.transformed)[:, 0]
        ref = colpitts_null_direction(np.concatenate([x, p]))
        ref = ref / ref[6]
        np.testing.assert_allclose(v, ref, rtol=1e-6, atol=1e-8)
        assert est.dependence("p4", "p1") == [-1] and est.dependence("p4", "p2") == [-1]
        assert est.dependence("p4", "p3") == [0]


def test_colpitts_statistics_over_the_attractor(colpitts):
    model, X = colpitts
    res = ji.delay_estimability(model, X, taus=[0.1, 0.5, 1.0], K=20, progress=False)
    assert res.singular_ratios.shape == (3, 24, 7)
    assert res.nullity == 1 and res.nullity_fraction >= 0.95
    assert set(res.estimable) == {"x1", "p3"}
    assert res.dependent_sets == [("x2", "x3", "p1", "p2", "p4")]
    # The paper normalises by the sign of v_B(p4): with p4 as pivot, Delta p4 > 0 gives
    # Delta p1, Delta p2 < 0 at every state and delay.
    piv = ji.delay_estimability(model, X, taus=[0.1, 0.5], K=20, pivots=("p4",), progress=False)
    assert piv.dependence("p4", "p1") == [-1] and piv.dependence("p4", "p2") == [-1]
    assert np.all(piv.basis[..., 3, 0] < 0) and np.all(piv.basis[..., 4, 0] < 0)
    # Uncertainty: huge for the dependent quantities, moderate for x1 and p3 (Fig. 5).
    v = piv.median_uncertainty()
    assert v["x1"] < 1e3 and v["p3"] < 1e3
    assert min(v[n] for n in ("x2", "x3", "p1", "p2", "p4")) > 1e8
    # With p4 fixed the null space is trivial and every correlation is below 1 (Fig. 7).
    fixed = ji.delay_estimability(model, X, taus=[0.5], K=20, exclude=("p4",), progress=False)
    assert fixed.nullity == 0 and fixed.names == ("x1", "x2", "x3", "p1", "p2", "p3")
    off = fixed.correlation[..., ~np.eye(6, dtype=bool)]
    assert np.all(np.abs(off) < 1 - 1e-8)


@pytest.fixture(scope="module")
def rossler():
    m = ji.models.load("rossler")
    X = np.asarray(ji.attractor_states(m, n=12, spacing=10.0, transient=200.0))
    return m, X


def test_rossler_transformed_basis_is_the_scaling_symmetry(rossler):
    """x2 is unchanged under x1 -> x1/b, x3 -> a x3, p1 -> p1/b, p2 -> p2/(ab),
    p3 -> b p3, p5 -> a p5, p7 -> b p7 (the paper's eq. 49); with pivots (p5, p7) the
    transformed basis is d/da and d/db at a = b = 1, scaled to 1 on the pivots."""
    model, X = rossler
    res = ji.delay_estimability(
        model, X, taus=[0.1, 0.3], K=50, pivots=("p5", "p7"), progress=False
    )
    assert res.nullity == 2 and res.nullity_fraction == 1.0
    assert set(res.estimable) == {"x2", "p4", "p6"}
    p1, p2, p3, p4, p5, p6, p7 = np.asarray(model.parameters.nominal)
    for k, x in enumerate(X):
        da = np.array([0, 0, x[2], 0, -p2, 0, 0, p5, 0, 0]) / p5
        db = np.array([-x[0], 0, 0, -p1, -p2, p3, 0, 0, 0, p7]) / p7
        for t in range(2):
            np.testing.assert_allclose(res.basis[t, k, :, 0], da, atol=1e-6 * np.abs(da).max())
            np.testing.assert_allclose(res.basis[t, k, :, 1], db, atol=1e-6 * np.abs(db).max())
    # The zero pattern (the paper's eq. 48 and Figs. 12-13).
    pattern = res.zero_pattern.T
    assert "".join(pattern[0]) == "00*0*00*00"
    assert "".join(pattern[1]) == "*00***000*"
    assert res.dependent_sets == [("x3", "p2", "p5"), ("x1", "p1", "p2", "p3", "p7")]
    # Increasing p5 (scaling a > 1) increases p2 (p2 < 0), as the paper reads off.
    assert res.dependence("p5", "p2") == [1, 0]


@pytest.mark.optimized
def test_hindmarsh_rose_full_rank_with_strong_p4_p5_anticorrelation():
    model = ji.models.load("hindmarsh_rose")
    X = ji.attractor_states(model, n=16, spacing=50.0, transient=1000.0)
    res = ji.delay_estimability(model, X, taus=[5.0, 10.0], K=20, progress=False)
    assert res.nullity == 0 and res.nullity_fraction >= 0.95
    assert res.estimable == res.names and res.dependent_sets == []
    assert res.median_correlation("p4", "p5") < -0.9
    assert res.basis.shape == (2, 16, 8, 0)


def _numpy_reference(DG, nullity, pivots):
    U, s, Vt = np.linalg.svd(DG)
    V = Vt.T
    VB = V[:, DG.shape[1] - nullity :]
    Vt_ = VB @ np.linalg.inv(VB[list(pivots)])
    P = np.linalg.pinv(DG, rcond=0)
    cov = P @ P.T
    v = np.sqrt(np.diag(cov))
    return s, Vt_, v, cov / np.outer(v, v)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_estimability_against_numpy_under_jit_and_vmap(dtype):
    rng = np.random.default_rng(3)
    n_w, nullity = 6, 2
    mats = []
    for _ in range(4):
        B = rng.standard_normal((15, n_w - nullity))
        C = rng.standard_normal((n_w - nullity, n_w))
        mats.append(B @ C)
    mats = np.stack(mats).astype(dtype)
    # The automatic pivots: the pair of rows whose V_B1 has the largest sigma_min.
    est = ji.estimability(mats[0])
    # decisions (nullity, pivots) on the column-equilibrated matrix
    D0 = mats[0].astype(float)
    VB = np.linalg.svd(D0 / np.linalg.norm(D0, axis=0))[2].T[:, n_w - nullity :]
    best = max(
        itertools.combinations(range(n_w), 2),
        key=lambda c: np.linalg.svd(VB[list(c)], compute_uv=False)[-1],
    )
    assert est.nullity == nullity
    assert est.pivots == tuple(f"w{i + 1}" for i in best)
    names = tuple(f"w{i + 1}" for i in range(n_w))
    piv = ("w2", "w5")
    f = jax.jit(jax.vmap(lambda D: ji.estimability(D, names, nullity=nullity, pivots=piv)))
    batch = f(jnp.asarray(mats))
    rtol = 1e4 * tol(dtype)
    for i, D in enumerate(mats):
        s, Vt_, _, _ = _numpy_reference(D.astype(float), nullity, (1, 4))
        Dd = D.astype(float)
        s = np.linalg.svd(Dd / np.linalg.norm(Dd, axis=0), compute_uv=False)
        np.testing.assert_allclose(batch.singular_values[i], s, rtol=rtol, atol=rtol * s[0])
        np.testing.assert_allclose(batch.transformed[i], Vt_, atol=rtol * np.abs(Vt_).max())
        np.testing.assert_allclose(
            np.asarray(D) @ np.asarray(batch.transformed[i]),
            0,
            atol=rtol * 10 * np.abs(np.asarray(D)).sum(),
        )
    # Full rank: v_k and rho from the pseudo-inverse.
    F = rng.standard_normal((12, 5)).astype(dtype)
    e = jax.jit(lambda D: ji.estimability(D, nullity=0))(jnp.asarray(F))
    _, _, v, rho = _numpy_reference(F.astype(float), 0, ())
    np.testing.assert_allclose(e.uncertainty, v, rtol=rtol)
    np.testing.assert_allclose(e.correlation, rho, atol=rtol)


def test_estimability_graph_orders_lapack_calls():
    names = tuple(f"w{i}" for i in range(5))
    f = jax.vmap(lambda D: ji.estimability(D, names, nullity=1, pivots=("w0",)))
    text = jax.jit(f).lower(jnp.ones((3, 9, 5))).compile().as_text()
    assert unordered_lapack_pairs(text) == []


def test_profile_and_estimation_reproduce_fig_9(colpitts):
    model, X = colpitts
    aug = ji.free_initial_state(model, X[0])
    true = np.asarray(aug.parameters.nominal)
    times = jnp.linspace(0.0, 20.0, 201)
    data = ji.simulate(aug, None, times)
    # States and p1..p3 with p4 held at its true value: recovered from a 2% error.
    fit = ji.estimate(ji.fix_parameters(aug, {"p4": 6.3}), data, times, theta0=true[:6] * 1.02)
    np.testing.assert_allclose(fit.theta, true[:6], rtol=1e-6)
    # With bounds: the parameters' box is enforced, the unbounded states are left free.
    fixed = ji.fix_parameters(aug, {"p4": 6.3})
    boxed = ji.estimate(fixed, data, times, theta0=true[:6] * 1.02, bounds=True)
    np.testing.assert_allclose(boxed.theta, true[:6], rtol=1e-6)
    assert not np.any(boxed.at_bound)
    problem = ji.Problem.from_model(aug, data.ys, times)
    prof = ji.profile(problem, "p4", np.linspace(5.5, 7.0, 5), theta0=true, progress=False)
    assert prof.ok.all() and np.ptp(prof.cost) < 1e-10  # a flat valley: p4 is redundant
    slope = prof.slope(6.3)
    assert slope["p1"] < 0 and slope["p2"] < 0  # Delta p4 > 0 => Delta p1, Delta p2 < 0
    assert abs(slope["p3"]) < 1e-6 and abs(slope["x1"]) < 1e-6  # estimable: do not move
    # Matches the null direction of the delay Jacobian (closed form) at the data's start.
    ref = colpitts_null_direction(true)
    ref = ref / ref[6]
    assert np.sign(slope["p1"]) == np.sign(ref[3]) and np.sign(slope["p2"]) == np.sign(ref[4])


def test_histograms_and_plots(colpitts):
    import matplotlib

    matplotlib.use("Agg")
    model, X = colpitts
    res = ji.delay_estimability(model, X[:6], taus=[0.2, 0.4, 0.6], K=20, progress=False)
    counts, taus, edges = res.histogram("singular", 7, bins=20)
    assert counts.shape == (3, 20) and counts.sum() == 18 and edges.size == 21
    assert np.all(edges[-1] < -10)  # sigma_7 / sigma_1 is numerically zero
    counts, _, _ = res.histogram("correlation", ("p1", "p2"), bins=10)
    assert counts.sum() == 18
    same, _, _ = res.histogram(ji.DelayQuantity.correlation, ("p1", "p2"), bins=10)
    np.testing.assert_array_equal(same, counts)  # the option or its name
    with pytest.raises(ValueError, match="kind must be one of 'singular', 'basis'"):
        res.histogram("singulr", 1)
    labels = [label for _, label in res.histogram_panels("correlation", pairs=[("p1", "p2")])]
    assert labels == [r"$\rho(p1, p2)$"]
    for kind in ["singular", "basis", "uncertainty", "correlation"]:
        fig = ji.plot.delay_histograms(res, kind, pairs=[("p1", "p2"), ("p3", "p4")])
        n = {"singular": 7, "basis": 7, "uncertainty": 7, "correlation": 2}[kind]
        assert sum(ax.get_visible() for ax in fig.axes) == n
    d = res.to_dict()
    assert d["nullity"] == 1 and d["estimable"] == ["x1", "p3"]
    assert "nullity 1" in repr(res)


def test_clear_errors(colpitts):
    model, X = colpitts
    with pytest.raises(ValueError, match="K"):
        ji.delay_jacobian(model, X[0], tau=0.5, K=1)
    with pytest.raises(ValueError, match="tau"):
        ji.delay_jacobian(model, X[0], tau=-0.5, K=10)
    with pytest.raises(ValueError, match="shape"):
        ji.delay_jacobian(model, X[0][:2], tau=0.5, K=10)
    with pytest.raises(ValueError, match="states must have shape"):
        ji.delay_estimability(model, X[:, :2], taus=0.5, K=10, progress=False)
    with pytest.raises(ValueError, match="p9"):
        ji.delay_estimability(model, X, taus=0.5, K=10, exclude=("p9",), progress=False)
    with pytest.raises(ValueError, match="exactly 1 pivots"):
        ji.delay_estimability(model, X[:3], taus=0.5, K=20, pivots=("p1", "p2"), progress=False)
    with pytest.raises(ValueError, match="NaN"):
        ji.estimability(np.full((4, 3), np.nan))
    with pytest.raises(ValueError, match="nullity"):
        jax.jit(lambda D: ji.estimability(D))(jnp.ones((4, 3)))
    with pytest.raises(ValueError, match="Unknown quantity"):
        ji.delay_estimability(model, X[:3], taus=0.5, K=20, progress=False).median_correlation(
            "p1", "q"
        )
