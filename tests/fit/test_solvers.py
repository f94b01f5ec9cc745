"""`ji.LevenbergMarquardt` against SciPy's MINPACK Levenberg-Marquardt, under jit and
vmap, with a free-parameter mask and NaN trial points; `ji.estimate(free=...)` against
the same fit of a model with the other parameters fixed."""

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest
import scipy.optimize as so

import jaxident as ji


T = np.linspace(0.0, 4.0, 25)
TRUE = np.array([2.0, 1.3, 0.5, 0.1])
DATA = TRUE[0] * np.exp(-TRUE[1] * T) + TRUE[2] * np.sin(3 * T) + TRUE[3]
DATA = DATA + 0.01 * np.random.default_rng(0).standard_normal(T.size)


def _residual(y, data):
    return y[0] * jnp.exp(-y[1] * T) + y[2] * jnp.sin(3 * T) + y[3] - data


def _solve(y0, data, solver=ji.LevenbergMarquardt(rtol=1e-12, atol=1e-14), free=None):
    options = None if free is None else {"free": free}
    return optx.least_squares(_residual, solver, y0, args=data, options=options, max_steps=200)


def _scipy(y0, data, free=None):
    y0 = np.asarray(y0, float)
    free = np.ones(4, bool) if free is None else np.asarray(free)

    def f(z):
        y = y0.copy()
        y[free] = z
        return np.asarray(_residual(jnp.asarray(y), data))

    z = so.least_squares(f, y0[free], method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15).x
    y = y0.copy()
    y[free] = z
    return y


def _cost(y, data):
    return float(jnp.sum(_residual(jnp.asarray(y), data) ** 2))


def _close(y, ref, data):
    """The same minimum: the cost to 1e-12 relative (what the cost-based stop controls)
    and the parameters to 1e-6 (the square root of that, for a well-posed fit)."""
    assert _cost(y, data) <= _cost(ref, data) * (1 + 1e-11)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-8)


def test_levenberg_marquardt_against_scipy():
    y0 = jnp.array([1.0, 1.0, 0.0, 0.0])
    sol = _solve(y0, DATA)
    assert sol.result == optx.RESULTS.successful
    _close(sol.value, _scipy(y0, DATA), DATA)


def test_levenberg_marquardt_with_a_given_jacobian():
    # options["jacobian"] replaces jacfwd of the residuals (the fit kernels pass the
    # sensitivity equations): the closed-form Jacobian gives SciPy's fit, and it is the
    # one used (one blind to the third parameter never moves it)
    def jac(y, data):
        return jnp.stack([jnp.exp(-y[1] * T), -y[0] * T * jnp.exp(-y[1] * T),
                          jnp.sin(3 * T), jnp.ones_like(T)], axis=1)  # fmt: skip

    y0 = jnp.array([1.0, 1.0, 0.0, 0.0])
    solver = ji.LevenbergMarquardt(rtol=1e-12, atol=1e-14)
    sol = optx.least_squares(_residual, solver, y0, args=DATA, options={"jacobian": jac},
                             max_steps=200)  # fmt: skip
    assert sol.result == optx.RESULTS.successful
    _close(sol.value, _scipy(y0, DATA), DATA)
    blind = {"jacobian": lambda y, d: jac(y, d).at[:, 2].set(0.0)}
    wrong = optx.least_squares(_residual, solver, y0, args=DATA, options=blind, max_steps=200,
                               throw=False)  # fmt: skip
    assert float(wrong.value[2]) == 0.0 and abs(float(sol.value[2]) - TRUE[2]) < 0.05


def test_levenberg_marquardt_mask_holds_parameters():
    y0 = jnp.array([1.0, 1.0, 0.3, 0.1])
    free = jnp.array([True, True, False, True])
    sol = _solve(y0, DATA, free=free)
    assert float(sol.value[2]) == 0.3  # held exactly
    _close(sol.value, _scipy(y0, DATA, free), DATA)


def test_levenberg_marquardt_jit_and_vmap():
    y0 = jnp.array([1.0, 1.0, 0.0, 0.0])
    ref = _solve(y0, DATA).value
    jitted = jax.jit(lambda y, d: _solve(y, d).value)(y0, DATA)
    np.testing.assert_allclose(jitted, ref, rtol=1e-12)
    batch = jnp.stack([DATA, DATA * 1.1, DATA - 0.2])
    vm = jax.vmap(lambda d: _solve(y0, d).value)(batch)
    for d, v in zip(batch, vm):
        _close(v, _scipy(y0, d), d)


def test_levenberg_marquardt_rejects_nan_trial_points():
    """A residual that is NaN for y[1] < 0.5 (a model that cannot be solved there): the
    solver backs off instead of stopping or returning NaN."""

    def fn(y, data):
        r = _residual(y, data)
        return jnp.where(y[1] < 0.5, jnp.nan, r)

    y0 = jnp.array([5.0, 3.0, 0.0, 0.0])
    sol = optx.least_squares(fn, ji.LevenbergMarquardt(rtol=1e-12), y0, args=DATA, max_steps=500)
    assert sol.result == optx.RESULTS.successful
    _close(sol.value, _scipy(np.asarray(y0), DATA), DATA)
    # a NaN at the start is reported, not iterated on
    bad = optx.least_squares(
        fn, ji.LevenbergMarquardt(), y0.at[1].set(0.1), args=DATA, throw=False, max_steps=50
    )
    assert bad.result == optx.RESULTS.nonlinear_divergence


def test_levenberg_marquardt_with_an_invisible_parameter():
    """A fifth parameter the data see only at rounding level (column norm ~1e-16, a
    sloppy parameter at a profile's end) and outside of which the model cannot be solved:
    its direction is damped like the others, the fit converges to SciPy's minimum of the
    other four instead of stepping 1e11 along it and stopping at the start."""

    def fn(y, data):
        r = _residual(y[:4], data) + 1e-17 * y[4] * T
        return jnp.where(jnp.abs(y[4]) > 10.0, jnp.nan, r)

    y0 = jnp.array([1.0, 1.0, 0.0, 0.0, 0.0])
    sol = optx.least_squares(
        fn, ji.LevenbergMarquardt(rtol=1e-12), y0, args=DATA, max_steps=200, throw=False
    )
    assert sol.result == optx.RESULTS.successful
    assert abs(float(sol.value[4])) <= 10.0
    _close(sol.value[:4], _scipy(np.asarray(y0[:4]), DATA), DATA)


def test_levenberg_marquardt_validates():
    with pytest.raises(ValueError, match="rtol"):
        ji.LevenbergMarquardt(rtol=-1.0)


def test_estimate_free_mask_matches_fixed_model():
    """Estimating a subset by `free=` is the fit of the model with the others fixed."""
    model = ji.models.load("svir")
    data = ji.simulate(model).ys * 1.01
    start = model.parameters.nominal * 1.1
    names = model.parameters.names
    masked = ji.estimate(model, data, theta0=start, free=names[:2] + names[3:])
    fixed = ji.fix_parameters(model, {names[2]: float(start[2])})
    ref = ji.estimate(fixed, data, theta0=np.delete(np.asarray(start), 2))
    np.testing.assert_allclose(np.delete(np.asarray(masked.theta), 2), ref.theta, rtol=1e-7)
    assert float(masked.theta[2]) == float(start[2])
    assert masked.std_errors[2] == 0.0 and masked.dof == ref.dof
    np.testing.assert_allclose(np.delete(masked.std_errors, 2), ref.std_errors, rtol=1e-5)
    assert "(held)" in repr(masked)
    # MeasurementError as sigma: the weights a |y| + b of the data
    err = ji.MeasurementError(0.05, 1e-3)
    w = ji.estimate(model, data, theta0=start, sigma=err)
    w2 = ji.estimate(model, data, theta0=start, sigma=0.05 * np.abs(data) + 1e-3)
    np.testing.assert_allclose(w.theta, w2.theta, rtol=1e-12)
    with pytest.raises(ValueError, match="free must"):
        ji.estimate(model, data, free=np.ones(3, bool))
    with pytest.raises(ValueError, match="Unknown parameter"):
        ji.estimate(model, data, free=("betta",))


def test_a_likelihood_fit_ends_where_its_trials_promise_less_than_the_noise():
    """A decay with its noise level estimated (`u = ln sigma`, Fisher information `2N`),
    in the likelihood form (`options["derivatives"]`), from starts whose noise level is
    1e-5 to 1e-8 of the optimum's: every fit reaches SciPy's least squares and the
    closed-form `u = ln sqrt(SS / N)`, in at most 30 steps. A rejected trial that
    promised less than the cost's noise, where Gauss-Newton promises no more, ends the
    fit (more damping only promises less); the old rule raised the damping until it ran
    away: 36 to 39 steps from these starts. From the last start (the dynamics' curvature
    1e18 times its final value at first) the old test of Gauss-Newton's promise, damped
    by the running maximum of the curvatures, saw nothing to gain at -log L = 69.08 and
    stopped there as converged."""
    t = jnp.linspace(0.0, 3.0, 20)
    d = 2.0 * jnp.exp(-1.3 * t) + 0.05 * jnp.asarray(np.random.default_rng(0).standard_normal(20))

    def res(y):
        return (y[0] * jnp.exp(-y[1] * t) - d) * jnp.exp(-y[2])

    def cost(y, _):
        return t.size * y[2] + 0.5 * jnp.sum(res(y) ** 2), None

    def derivatives(y, _):
        g = jax.grad(lambda z: cost(z, None)[0])(y)
        J = jax.jacfwd(res)(y)[:, :2]
        H = jnp.zeros((3, 3)).at[:2, :2].set(J.T @ J).at[2, 2].set(2.0 * t.size)
        return cost(y, None)[0], g, H, jnp.asarray(True)

    ref = so.least_squares(lambda p: p[0] * np.exp(-p[1] * np.asarray(t)) - np.asarray(d),
                           [1.0, 1.0], xtol=1e-15, ftol=1e-15).x  # fmt: skip
    ss = np.sum((ref[0] * np.exp(-ref[1] * np.asarray(t)) - np.asarray(d)) ** 2)
    solver = ji.LevenbergMarquardt(rtol=1e-8, noise=1e-6, ftol=1e-3)
    box = (jnp.asarray([0.01, 0.01, -20.0]), jnp.asarray([100.0, 10.0, 5.0]))
    for y0 in ([0.1, 5.0, -18.0], [20.0, 4.0, -12.0], [0.05, 0.02, -15.0], [20.0, 0.01, -18.0]):
        sol = optx.least_squares(cost, solver, jnp.asarray(y0), has_aux=True, max_steps=256,
                                 options={"derivatives": derivatives, "bounds": box})  # fmt: skip
        assert sol.result == optx.RESULTS.successful
        np.testing.assert_allclose(sol.value[:2], ref, rtol=1e-4)
        np.testing.assert_allclose(sol.value[2], 0.5 * np.log(ss / t.size), atol=1e-4)
        assert int(sol.stats["num_steps"]) <= (30 if y0[1] > 0.01 else 256)
