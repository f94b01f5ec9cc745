import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest
import scipy.optimize as so

import jaxident as ji


def test_alpha_pinene_against_scipy_least_squares():
    m = ji.models.load("alpha_pinene")
    data = ji.models.ALPHA_PINENE_DATA
    tight = ji.Integrator(rtol=1e-11, atol=1e-11)
    start = np.asarray(m.parameters.nominal) * np.array([1.2, 0.8, 1.1, 0.9, 1.15])
    est = ji.estimate(m, data, theta0=start, integrator=tight)
    # Box et al. / COPS optimum, and SciPy's own fit from a SciPy ODE solve
    from scipy.integrate import solve_ivp

    def model(p):
        def f(t, y):
            return [
                -(p[0] + p[1]) * y[0],
                p[0] * y[0],
                p[1] * y[0] - (p[2] + p[3]) * y[2] + p[4] * y[4],
                p[2] * y[2],
                p[3] * y[2] - p[4] * y[4],
            ]

        return solve_ivp(
            f,
            (0, 36420),
            [100, 0, 0, 0, 0],
            t_eval=np.asarray(m.times),
            rtol=1e-12,
            atol=1e-12,
            method="LSODA",
        ).y.T

    ref = so.least_squares(
        lambda lp: (model(np.exp(lp)) - data).ravel(),
        np.log(start),
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    np.testing.assert_allclose(np.asarray(est.theta), np.exp(ref.x), rtol=1e-4)
    np.testing.assert_allclose(float(est.cost), 19.872, atol=2e-3)
    # covariance from the weighted Jacobian, against a NumPy computation
    J = np.asarray(est.jacobian)
    s2 = float(est.cost) / (40 - 5)
    np.testing.assert_allclose(est.covariance, s2 * np.linalg.inv(J.T @ J), rtol=1e-6)
    ci = est.confidence_intervals(0.95)
    assert np.all(ci[:, 0] < np.asarray(est.theta)) and np.all(np.asarray(est.theta) < ci[:, 1])
    from scipy.stats import t as student  # reference: Student's t quantile, 35 dof

    half = student.ppf(0.975, 35) * np.sqrt(np.diag(est.covariance))
    np.testing.assert_allclose(ci[:, 1] - np.asarray(est.theta), half, rtol=1e-12)
    assert "p1" in repr(est) and est.to_dict()["ok"]


def test_bounds_are_respected():
    m = ji.models.load("svir")
    data = ji.simulate(m).ys
    # the truth (beta = 0.8) lies outside the box [0.3, 0.6]: the estimate stops at the bound
    lower = np.array([0.3, 0.05, 0.002, 0.07])
    upper = np.array([0.6, 0.15, 0.006, 0.21])
    est = ji.estimate(m, data, theta0=[0.5, 0.1, 0.004, 0.14], bounds=(lower, upper), throw=False)
    th = np.asarray(est.theta)
    assert np.all(th >= lower) and np.all(th <= upper)
    assert th[0] > 0.599
    # at_bound: beta within 1e-3 of its (log) box's width from the upper bound, as the
    # stepwise selection measures it; the others inside
    frac = (np.log(th) - np.log(lower)) / (np.log(upper) - np.log(lower))
    assert frac[0] > 1 - 1e-3
    np.testing.assert_array_equal(np.asarray(est.at_bound), (frac < 1e-3) | (frac > 1 - 1e-3))
    assert "(at a bound)" in repr(est).splitlines()[1]


def test_optax_generalized_gradient_reduces_cost():
    m = ji.models.load("nonsmooth_dae_example")
    true = jnp.array([0.15, 45.0, 1.33, -3.0])
    data = ji.simulate(m, true).ys
    red = ji.fix_parameters(m, {"theta3": 1.33})
    start = [0.14, 43.0, -2.9]
    c0 = float(jnp.sum((ji.simulate(red, jnp.array(start)).ys - data) ** 2))
    est = ji.estimate(red, data, theta0=start, solver=ji.OptaxLD(max_steps=1500), throw=False)
    assert float(est.cost) < 1e-3 * c0
    np.testing.assert_allclose(np.asarray(est.theta), [0.15, 45.0, -3.0], rtol=2e-2)


def test_estimate_errors():
    m = ji.models.load("svir")
    with pytest.raises(ValueError, match="data has shape"):
        ji.estimate(m, np.ones((5, 2)))
    with pytest.raises(ValueError, match="every observation is NaN"):
        ji.estimate(m, np.full(31, np.nan))
    with pytest.raises(ValueError, match="data contains inf"):
        ji.estimate(m, np.full(31, np.inf))
    with pytest.raises(ValueError, match="sigma"):
        ji.estimate(m, np.ones(31), sigma=-1.0)
    with pytest.raises(TypeError, match="solver"):
        ji.estimate(m, np.ones(31), solver="lm")


def test_estimate_under_jit_and_vmap():
    """`ji.estimate` composes with jit (the same result, to rounding) and vmap (a batch
    of data sets, each as estimated alone, to the solver's tolerance)."""
    model = ji.models.load("svir")
    data = ji.simulate(model).ys
    theta0 = model.parameters.nominal * 1.1
    ref = ji.estimate(model, data, theta0=theta0)
    jitted = jax.jit(lambda d, t0: ji.estimate(model, d, theta0=t0))(data, theta0)
    np.testing.assert_allclose(jitted.theta, ref.theta, rtol=1e-10)
    assert bool(jitted.ok) and jitted.message == ""
    noise = 1.0 + 0.01 * jax.random.normal(jax.random.key(0), (2, *data.shape))
    batch = data[None] * noise
    vm = jax.vmap(lambda d: ji.estimate(model, d, theta0=theta0, throw=False))(batch)
    loop = np.stack([np.asarray(ji.estimate(model, d, theta0=theta0).theta) for d in batch])
    np.testing.assert_allclose(vm.theta, loop, rtol=1e-6)
    assert np.all(np.asarray(vm.ok))
    assert not np.allclose(loop[0], loop[1])  # the data sets differ


def test_the_covariance_does_not_depend_on_the_parameters_units():
    """A parameter in units 1e-15 of the others': its sensitivity column (or Fisher
    information row) is that much smaller, which on the raw matrix reads as rank
    deficient (`inf`). On unit-norm columns it is not: the covariance is the
    well-conditioned one scaled back (closed form `D^-1 A^-1 D^-1`), for a model's least
    squares and for a problem's Fisher information, and a column of zeros still is."""
    Estimate = ji.Estimate
    rng = np.random.default_rng(0)
    A = rng.standard_normal((12, 2))
    D = np.array([1.0, 1e-15])
    base = dict(names=("a", "b"), theta=jnp.ones(2), theta0=jnp.ones(2), free=jnp.ones(2, bool),
                steps=jnp.asarray(3), result=optx.RESULTS.successful,
                at_bound=jnp.zeros(2, bool))  # fmt: skip
    r = rng.standard_normal(12)
    ls = Estimate(residuals=jnp.asarray(r), cost=jnp.asarray(r @ r), jacobian=jnp.asarray(A * D),
                  **base)  # fmt: skip
    s2 = (r @ r) / 10
    expected = s2 * np.linalg.inv(A.T @ A) / np.outer(D, D)
    np.testing.assert_allclose(ls.covariance, expected, rtol=1e-10)
    F = (A * D).T @ (A * D)
    lik = Estimate(residuals=None, cost=jnp.asarray(1.0), jacobian=None, fisher=jnp.asarray(F),
                   **base)  # fmt: skip
    np.testing.assert_allclose(lik.covariance, expected / s2, rtol=1e-10)
    # a column of zeros: that parameter's error is infinite, the other's its own
    # (the marginal one, the report's), not infinite with it
    ls0 = Estimate(residuals=jnp.asarray(r), cost=jnp.asarray(r @ r),
                   jacobian=jnp.asarray(A * [1.0, 0.0]), **base)  # fmt: skip
    lik0 = Estimate(residuals=None, cost=jnp.asarray(1.0), jacobian=None,
                    fisher=jnp.asarray(F * [[1.0, 0.0], [0.0, 0.0]]), **base)  # fmt: skip
    for zero, s2_ in ((ls0, s2), (lik0, 1.0)):
        assert np.isinf(zero.std_errors[1]) and zero.null_parameters == ("b",)
        np.testing.assert_allclose(zero.std_errors[0], np.sqrt(s2_ / (A[:, 0] @ A[:, 0])),
                                   rtol=1e-10)  # fmt: skip


def test_a_null_direction_makes_only_its_parameters_infinite():
    """Columns a, b, a + b and d: the null direction (1, 1, -1, 0) leaves a, b and c
    unresolved (infinite errors, named), while d's error is its marginal one,
    `sqrt(pinv(J^T J)_dd)` (NumPy), for a model's least squares and for a problem's
    Fisher information alike (every error was infinite as soon as the matrix was
    singular, where the report printed d's finite one)."""
    rng = np.random.default_rng(1)
    a, b, d = rng.standard_normal((3, 20))
    J = np.stack([a, b, a + b, 1e-3 * d], axis=1)
    base = dict(names=("a", "b", "c", "d"), theta=jnp.ones(4), theta0=jnp.ones(4),
                free=jnp.ones(4, bool), steps=jnp.asarray(3),
                result=optx.RESULTS.successful, at_bound=jnp.zeros(4, bool))  # fmt: skip
    F = J.T @ J
    lik = ji.Estimate(residuals=None, cost=jnp.asarray(1.0), jacobian=None,
                      fisher=jnp.asarray(F), **base)  # fmt: skip
    r = rng.standard_normal(20)
    ls = ji.Estimate(residuals=jnp.asarray(r), cost=jnp.asarray(r @ r),
                     jacobian=jnp.asarray(J), **base)  # fmt: skip
    for est, s2 in ((lik, 1.0), (ls, (r @ r) / 16)):
        se = est.std_errors
        assert np.all(np.isinf(se[:3])) and est.null_parameters == ("a", "b", "c")
        np.testing.assert_allclose(se[3], np.sqrt(s2 * np.linalg.pinv(F)[3, 3]), rtol=1e-8)
