import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import jaxident as ji


TIGHT = ji.Integrator(rtol=1e-12, atol=1e-12)


def example1_x(p, t):
    """Closed form of Example 1 (eq. 19) for theta1 > 0 and x(0) < 0. The letter's formula
    for the branch after x crosses zero has a typo; solving x' = theta1 (theta2 - x)
    from x(t*) = 0 gives theta2 (1 - exp(-theta1 (t - t*)))."""
    p1, p2, p3, p4 = p
    ts = np.log(p2 / (p2 + p3 * p4)) / p1
    return np.where(
        t <= ts, (p3 * p4 + p2) * np.exp(p1 * t) - p2, p2 * (1 - np.exp(-p1 * (t - ts)))
    )


def test_nonsmooth_dae_against_closed_form():
    m = ji.models.load("nonsmooth_dae_example")
    theta = np.array([0.15, 45.0, 1.5, -3.0])
    t = np.asarray(m.times)
    tr = ji.simulate(m, theta, integrator=TIGHT)
    np.testing.assert_allclose(np.asarray(tr.ys[:, 0]), example1_x(theta, t), atol=1e-9)
    x, w = (np.asarray(a) for a in tr.xs)
    np.testing.assert_allclose(np.abs(x[:, 0]) + np.abs(w[:, 0]), theta[1], atol=1e-9)  # g = 0
    S = np.asarray(ji.sensitivity_matrix(m, theta, integrator=TIGHT))
    h = 1e-6
    fd = np.stack(
        [
            (example1_x(theta + h * e, t) - example1_x(theta - h * e, t)) / (2 * h)
            for e in np.eye(4)
        ],
        axis=1,
    )
    np.testing.assert_allclose(S, fd, atol=1e-6 * np.abs(fd).max())


def _wind_reference(theta, ts, m):
    KQi, KVi, R, X, E = theta
    P, Qc, Xeq = m.P, m.Q_cmd, m.X_eq

    def V_of(Eq, V0):
        def g(V):
            Q = V * (Eq - V) / Xeq
            return V**4 - (2 * (P * R + Q * X) + E**2) * V**2 + (R**2 + X**2) * (P**2 + Q**2)

        return brentq(g, V0 * 0.9, V0 * 1.1, xtol=1e-15, rtol=1e-15)

    a = 2 * P * R + E**2
    V0 = np.sqrt((a + np.sqrt(a**2 - 4 * (R**2 + X**2) * P**2)) / 2)

    def rhs(t, y):
        Vref, Eq = y
        V = V_of(Eq, V0)
        Q = V * (Eq - V) / Xeq
        return [KQi * (Qc - Q), KVi * (Vref - V)]

    sol = solve_ivp(rhs, (0, ts[-1]), [V0, V0], t_eval=ts, rtol=1e-12, atol=1e-12, method="DOP853")
    return np.array([V_of(Eq, V0) for Eq in sol.y[1]])


def test_wind_turbine_against_scipy_with_own_algebraic_solve():
    m = ji.models.load("wind_turbine")
    theta = np.asarray(m.parameters.nominal)
    ts = np.asarray(m.times)
    ref = _wind_reference(theta, ts, m)
    ys = np.asarray(ji.simulate(m, integrator=TIGHT).ys[:, 0])
    np.testing.assert_allclose(ys, ref, atol=1e-10)
    assert ys[-1] - ys[0] > 1e-3  # the reactive-power step moves the voltage
    S = np.asarray(ji.sensitivity_matrix(m, integrator=TIGHT))
    fd = []
    for j in range(5):
        h = 1e-4 * theta[j]  # balances truncation (h^2) against solver noise (1e-12 / h)
        e = np.zeros(5)
        e[j] = h
        fd.append((_wind_reference(theta + e, ts, m) - _wind_reference(theta - e, ts, m)) / (2 * h))
    fd = np.stack(fd, axis=1)
    np.testing.assert_allclose(S, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


def test_dae_jit_vmap_and_ld_equals_classical_when_smooth():
    m = ji.models.load("wind_turbine")
    thetas = ji.latin_hypercube(jax.random.key(0), m.parameters, 3)
    batch = jax.jit(jax.vmap(lambda th: ji.sensitivity_matrix(m, th)))(thetas)
    for b in range(3):
        np.testing.assert_allclose(
            np.asarray(batch[b]), np.asarray(ji.sensitivity_matrix(m, thetas[b])), rtol=1e-9
        )
    ls = ji.ld_sensitivity(m, thetas[0], M=jnp.zeros(5).at[2].set(-1.0))
    np.testing.assert_allclose(
        np.asarray(ls.L),
        np.asarray(batch[0]),
        rtol=1e-6,
        atol=1e-9 * float(np.abs(np.asarray(ls.L)).max()),
    )


class NoRealRoot(ji.DAEModel):
    """0 = w^2 + x: no real solution for x > 0, so no consistent initialisation."""

    parameters: ji.Parameters = ji.Parameters(["a"], [1.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.0, 1.0, 3))
    t0: float = 0.0

    def differential(self, t, x, w, theta):
        return -x

    def algebraic(self, t, x, w, theta):
        return w**2 + x

    def initial_state(self, theta):
        return jnp.array([theta.a])

    def initial_algebraic_guess(self, theta):
        return jnp.array([1.0])

    def output(self, t, x, w, theta):
        return x[0]


class SingularAtStart(NoRealRoot):
    """0 = w^2 - x with x(0) = 0: the root w = 0 has g_w = 0 (not index 1)."""

    def algebraic(self, t, x, w, theta):
        return w**2 - x

    def initial_state(self, theta):
        return jnp.array([0.0]) * theta.a

    def initial_algebraic_guess(self, theta):
        return jnp.array([0.0])


def test_dae_initialisation_errors_are_clear():
    with pytest.raises(eqx.EquinoxRuntimeError, match="no consistent initial values"):
        ji.simulate(NoRealRoot())
    with pytest.raises(eqx.EquinoxRuntimeError, match="not index 1"):
        ji.sensitivity_matrix(SingularAtStart())
    tr = ji.simulate(NoRealRoot(), throw=False)
    assert not bool(tr.ok) and np.all(np.isnan(np.asarray(tr.ys)))
