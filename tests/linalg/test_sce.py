"""Small-sample condition estimation, adjoint perturbation errors, worst directions and
reduced-order-model validity (Serban, Homescu & Petzold)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sp
from helpers import tol, unordered_lapack_pairs

import jaxident as ji
import jaxident.linalg as L


def wallis_closed_form(n):
    """The paper's products, term by term in Python floats."""
    if n == 1:
        return 1.0
    if n % 2:
        return math.prod(range(1, n - 1, 2)) / math.prod(range(2, n, 2))
    return 2 * math.prod(range(2, n - 1, 2)) / (math.pi * math.prod(range(1, n, 2)))


def test_wallis_factor_exact_stable_and_traced():
    for n in [1, 2, 3, 4, 5, 12, 51, 200]:
        assert float(L.wallis(n)) == pytest.approx(wallis_closed_form(n), rel=1e-14)
    # Large n: log-gamma, against SciPy and the paper's asymptotic form.
    for n in [201, 512, 10**6]:
        ref = math.exp(sp.gammaln(n / 2) - sp.gammaln((n + 1) / 2)) / math.sqrt(math.pi)
        assert float(L.wallis(n)) == pytest.approx(ref, rel=1e-12)
        assert float(L.wallis(n)) == pytest.approx(math.sqrt(2 / (math.pi * (n - 0.5))), rel=1e-4)
    traced = jax.jit(jax.vmap(L.wallis))(jnp.arange(1, 60))
    np.testing.assert_allclose(traced, [wallis_closed_form(n) for n in range(1, 60)], rtol=1e-12)
    with pytest.raises(ValueError, match="n >= 1"):
        L.wallis(0)


def test_random_orthonormal_is_orthonormal_deterministic_and_uniform():
    Z = L.random_orthonormal(jax.random.key(0), 50, 4)
    np.testing.assert_allclose(Z.T @ Z, np.eye(4), atol=tol(np.float64))
    np.testing.assert_array_equal(Z, L.random_orthonormal(jax.random.key(0), 50, 4))
    # Uniform on the sphere: E|z_1| = W_n (the defining property of the Wallis factor).
    keys = jax.random.split(jax.random.key(1), 20_000)
    first = jax.vmap(lambda k: L.random_orthonormal(k, 20, 1)[0, 0])(keys)
    assert float(jnp.mean(jnp.abs(first))) == pytest.approx(float(L.wallis(20)), rel=0.02)
    with pytest.raises(ValueError, match="q <= n"):
        L.random_orthonormal(jax.random.key(0), 3, 4)


@pytest.mark.parametrize(
    "q, prob",
    [
        (2, lambda g: 1 - math.pi / (4 * g**2)),
        (3, lambda g: 1 - 32 / (3 * math.pi**2 * g**3)),
        (4, lambda g: 1 - 81 * math.pi**2 / (512 * g**4)),
    ],
)
def test_sce_accuracy_matches_quoted_probabilities(q, prob):
    """Over 400 random vectors, nu(q) lies within a factor gamma of ||v|| at least as often
    as section 2.1 predicts (less three binomial standard errors), and is unbiased. The
    quoted probabilities are the leading terms in 1/gamma, so gamma starts at 2 (at 1.5
    the q = 2 formula overstates the probability: 0.65 against 0.56 measured)."""
    n, trials = 100, 400
    kv, kz = jax.random.split(jax.random.key(q))
    V = jax.random.normal(kv, (trials, n)) * jnp.logspace(0, 2, trials)[:, None]
    est = jax.jit(jax.vmap(lambda k, v: L.sce_norm(k, v, q)))(jax.random.split(kz, trials), V)
    ratio = np.asarray(est) / np.linalg.norm(np.asarray(V), axis=1)
    for gamma in [2.0, 3.0, 5.0]:
        p = prob(gamma)
        hit = np.mean((ratio >= 1 / gamma) & (ratio <= gamma))
        assert hit >= p - 3 * math.sqrt(p * (1 - p) / trials), (gamma, hit, p)
    # Unbiased: E nu(q) = ||v|| (checked on many draws for one vector).
    v = V[0]
    many = jax.vmap(lambda k: L.sce_norm(k, v, q))(jax.random.split(jax.random.key(9), 20_000))
    assert float(jnp.mean(many)) == pytest.approx(float(jnp.linalg.norm(v)), rel=0.01)


def test_worst_direction_against_numpy_svd():
    """With q = n_out the SCE is exact up to the Wallis ratio: Psi = J^T J, so u_1 is the
    leading right singular vector; restricting P restricts the search."""
    rng = np.random.default_rng(0)
    J = rng.standard_normal((30, 8)) @ np.diag(np.logspace(0, -3, 8))
    f = jax.jit(lambda k: L.worst_direction(lambda z: jnp.asarray(J).T @ z, 30, k, q=30))
    wd = f(jax.random.key(0))
    _, s, Vt = np.linalg.svd(J)
    np.testing.assert_allclose(wd.sigma[:8], s**2, rtol=1e-10)
    assert abs(float(jnp.dot(wd.direction, Vt[0]))) == pytest.approx(1.0, abs=1e-10)
    np.testing.assert_allclose(wd.estimate, float(L.wallis(30) / L.wallis(30)) * s[0], rtol=1e-10)
    # Restricted to the last four inputs: the leading singular vector of J[:, 4:].
    P = np.eye(8)[:, 4:]
    wr = L.worst_direction(lambda z: jnp.asarray(J).T @ z, 30, jax.random.key(0), q=30, P=P)
    _, _, Vt4 = np.linalg.svd(J[:, 4:])
    assert abs(float(jnp.dot(wr.direction[4:], Vt4[0]))) == pytest.approx(1.0, abs=1e-10)
    assert np.all(np.asarray(wr.direction[:4]) == 0)
    # vmap over keys, and ordered LAPACK calls.
    batch = jax.vmap(f)(jax.random.split(jax.random.key(1), 3))
    assert batch.estimate.shape == (3,)
    g = jax.vmap(lambda k: L.worst_direction(lambda z: jnp.asarray(J).T @ z, 30, k, q=4).sigma)
    text = jax.jit(g).lower(jax.random.split(jax.random.key(1), 3)).compile().as_text()
    assert unordered_lapack_pairs(text) == []


def test_adjoint_products_equal_forward_sensitivities_ode():
    """alpha_j = J^T z_j from the vjp through diffrax equals S^T z_j from the forward
    sensitivity matrix, and the SCE error norm uses them without further solves."""
    model = ji.models.load("seir")
    pa = ji.perturbation_analysis(model, key=jax.random.key(0), q=3, wrt=ji.Perturbed.all)
    assert pa.response is ji.Response.state and pa.response == "state" and pa.n_out == 4
    assert pa.selected == pa.names  # every initial state and parameter
    with pytest.raises(ValueError, match="response must be one of 'state', 'output', got"):
        ji.perturbation_analysis(model, key=jax.random.key(0), response="outputs")
    # The forward sensitivity of the full state x(t) (forward mode, ji.sensitivity_matrix
    # of the same model observed through its whole state).
    aug = ji.free_initial_state(model)

    class WholeState(ji.ODEModel):
        parameters: ji.Parameters
        times: jax.Array
        t0: float

        def vector_field(self, t, x, theta):
            return aug.vector_field(t, x, theta)

        def initial_state(self, theta):
            return aug.initial_state(theta)

        def output(self, t, x, theta):
            return x

    Jx = np.asarray(
        ji.sensitivity_matrix(WholeState(aug.parameters, aug.times, aug.t0), None, [pa.t])
    )
    np.testing.assert_allclose(pa.worst.alphas, (Jx.T @ np.asarray(pa.worst.Z)).T, rtol=1e-7)
    dp = np.random.default_rng(0).standard_normal(len(pa.names))
    assert float(pa.forward_error(dp)) == pytest.approx(np.linalg.norm(Jx @ dp), rel=1e-8)


def test_adjoint_products_for_a_dae_and_the_output_response():
    model = ji.models.load("wind_turbine")
    pa = ji.perturbation_analysis(model, key=jax.random.key(2), q=1, response="output")
    S = np.asarray(ji.sensitivity_matrix(model, None, [pa.t]))  # (1, 5): output V at t
    np.testing.assert_allclose(pa.worst.alphas, np.asarray(pa.worst.Z).T @ S, rtol=1e-6)
    # One output: the worst direction is the normalised gradient, E = ||gradient||.
    g = S[0] / np.linalg.norm(S[0])
    assert abs(float(jnp.dot(pa.direction, g))) == pytest.approx(1.0, abs=1e-8)
    assert float(pa.estimate) == pytest.approx(np.linalg.norm(S[0]), rel=1e-6)
    # State response of a DAE: the differential states (V_ref, E_q) and the algebraic V;
    # perturbations restricted to (R, X).
    st = ji.perturbation_analysis(model, key=jax.random.key(2), q=2, wrt=["R", "X"])
    assert st.n_out == 3 and st.selected == ("R", "X")
    assert np.all(np.asarray(st.direction)[[0, 1, 4]] == 0)


@pytest.fixture(scope="module")
def brusselator():
    model = ji.models.load("brusselator_2d")
    rom, pod = ji.pod_reduce(model, k=12, n_snapshots=100)
    full = ji.perturbation_analysis(model, t=1.0, key=jax.random.key(0), q=12, wrt="initial_state")
    red = ji.perturbation_analysis(rom, t=1.0, key=jax.random.key(1), q=4, wrt="initial_state")
    return model, rom, pod, full, red


def test_pod_basis_against_numpy(brusselator):
    rng = np.random.default_rng(1)
    Y = rng.standard_normal((40, 9)) @ rng.standard_normal((9, 30))
    pod = ji.pod_basis(Y, 3)
    U, s, _ = np.linalg.svd((Y - Y.mean(0)).T, full_matrices=False)
    np.testing.assert_allclose(np.abs(pod.basis.T @ U[:, :3]), np.eye(3), atol=1e-10)
    assert pod.energy == pytest.approx((s[:3] ** 2).sum() / (s**2).sum(), rel=1e-12)
    assert ji.pod_basis(Y, energy=pod.energy).k == 3
    with pytest.raises(ValueError, match="exactly one"):
        ji.pod_basis(Y)
    # The Brusselator ROM (paper: 12 modes, 100 snapshots, 99.52% "energy", 0.3661%
    # relative final-time error).
    model, rom, pod, full, red = brusselator
    assert pod.singular_value_fraction == pytest.approx(0.9952, abs=1e-3)
    err = float(jnp.linalg.norm(full.value - red.value) / jnp.linalg.norm(full.value))
    assert 0.002 < err < 0.005
    x = jnp.ones(12)
    np.testing.assert_allclose(rom.restrict(rom.lift(x)), x, atol=1e-12)
    # a ROM with fixed parameters still lifts to the full state
    fixed = ji.fix_parameters(rom, {rom.parameters.names[0]: float(rom.parameters.nominal[0])})
    assert fixed.lift(x).shape == (512,)
    np.testing.assert_allclose(fixed.lift(x), rom.lift(x), rtol=0, atol=0)
    np.testing.assert_allclose(fixed.restrict(fixed.lift(x)), x, atol=1e-12)


def test_brusselator_worst_direction_table_6_1(brusselator):
    """E ~ ||e(t, u1)|| >> errors along random directions (Table 6.1)."""
    model, rom, pod, full, red = brusselator
    assert full.n_out == 512 and len(full.selected) == 512
    u1 = full.direction
    e1 = float(full.forward_error(u1))
    assert 0.5 < float(full.estimate) / e1 < 2.0
    rand = []
    for i in range(5):
        r = np.zeros(516)
        r[:512] = np.random.default_rng(i).standard_normal(512)
        rand.append(float(full.forward_error(r / np.linalg.norm(r))))
    assert e1 > 5 * max(rand)
    # The SCE error norm for any perturbation, from the same q = 12 adjoint solves, is
    # within a factor 3 of the forward-sensitivity error.
    r = np.zeros(516)
    r[:512] = np.random.default_rng(7).standard_normal(512)
    assert 1 / 3 < float(full.error_norm(r)) / float(full.forward_error(r)) < 3


def test_brusselator_rom_validity(brusselator):
    """The accurate 12-mode ROM fails under perturbations: small S1 and S2, and a
    perturbation of size ||y0||/100 along u1 gives a ROM error of order 16%."""
    model, rom, pod, full, red = brusselator
    sim = ji.rom_similarity(full, red, q=4)
    assert sim.S1 < 0.15 and sim.S2 < 0.25
    dp = full.direction * float(jnp.linalg.norm(full.nominal[:512])) / 100
    Y, Yr = full.response_at(dp), red.response_at(dp)
    err = float(jnp.linalg.norm(Y - Yr) / jnp.linalg.norm(Y))
    assert 0.10 < err < 0.25
    # The worst direction is nearly orthogonal to the POD subspace (paper: 0.95).
    u = np.asarray(full.direction[:512])
    assert np.linalg.norm(u - pod.basis @ (pod.basis.T @ u)) > 0.8
    # The paper's angle between u~_1 and the projection rho^T u_1 (150.87 deg; ours
    # 152.6 deg) and the split of u_1 (paper 0.304 inside, 0.953 outside the subspace).
    assert 140.0 < sim.angle_degrees < 165.0
    assert sim.off_subspace > 0.85 and sim.in_subspace < 0.5
    assert sim.in_subspace**2 + sim.off_subspace**2 == pytest.approx(1.0, rel=1e-6)


def test_rom_perturbation_error_estimates(brusselator):
    """Section 5: ||Theta|| by SCE from both models' adjoints (same key and q), against
    the nonlinear error, in both cases."""
    model, rom, pod, full, red = brusselator
    f = ji.perturbation_analysis(model, t=1.0, key=jax.random.key(5), q=4, wrt="initial_state")
    r = ji.perturbation_analysis(rom, t=1.0, key=jax.random.key(5), q=4, wrt="initial_state")
    dp = np.zeros(516)
    dp[:512] = 1e-3 * np.random.default_rng(3).standard_normal(512)
    true = float(jnp.linalg.norm(f.response_at(dp) - r.response_at(dp)))
    case1 = ji.rom_perturbation_error(f, r, dp)
    assert 1 / 4 < case1["estimate"] / true < 4
    th = float(jnp.linalg.norm(f.value - r.value))
    case2 = ji.rom_perturbation_error(f, r, dp, th)
    assert case2["lower"] <= case2["upper"]
    assert case2["lower"] / 4 <= true <= 4 * case2["upper"]
    with pytest.raises(ValueError, match="same random directions"):
        ji.rom_perturbation_error(full, red, dp)


def test_clear_errors():
    model = ji.models.load("seir")
    with pytest.raises(ValueError, match="response"):
        ji.perturbation_analysis(model, key=jax.random.key(0), response="x")
    with pytest.raises(ValueError, match="Unknown quantity"):
        ji.perturbation_analysis(model, key=jax.random.key(0), wrt=["nope"])
    with pytest.raises(ValueError, match="exceeds"):
        ji.perturbation_analysis(model, key=jax.random.key(0), q=9)
    with pytest.raises(ValueError, match="after t0"):
        ji.perturbation_analysis(model, None, 0.0, key=jax.random.key(0))
    pa = ji.perturbation_analysis(model, key=jax.random.key(0), q=2)
    with pytest.raises(ValueError, match="entries"):
        pa.error_norm(np.ones(3))
    with pytest.raises(ValueError, match="initial_state"):
        ji.perturbation_analysis(
            ji.models.load("wind_turbine"), key=jax.random.key(0), wrt="initial_state"
        )
