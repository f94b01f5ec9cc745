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


def _face_reference(J, r, damping, y, step, lower, upper):
    """The damped model `|J d + r|^2 / 2 + d D d / 2` minimised on the face a step
    reaches, by NumPy's `lstsq` of the stacked system: the coordinates the step carries
    out of the box go to the bound they cross, the others are solved for with those
    fixed."""
    out = (y + step < lower) | (y + step > upper)
    d = np.where(out, np.clip(y + step, lower, upper) - y, 0.0)
    f = ~out
    A = np.vstack([J[:, f], np.diag(np.sqrt(damping[f]))])
    b = np.concatenate([-(r + J @ d), np.zeros(f.sum())])
    d[f] = np.linalg.lstsq(A, b, rcond=None)[0]
    return d


def test_a_face_step_is_the_damped_models_minimiser_on_its_face():
    """`_face_step` against NumPy on 20 random damped models (the Gauss-Newton matrix
    `J^T J`, and the residual form's QR), each with a step that leaves the box in 1-3
    coordinates: the re-solved step equals the minimiser on that face; the clipped step
    does not."""
    from jaxident._fit._solvers import _face_step

    rng = np.random.default_rng(3)
    face = jax.jit(_face_step)
    for k in range(20):
        q, m = 6, 15
        J = rng.standard_normal((m, q)) * np.logspace(0, 2, q)
        r = rng.standard_normal(m)
        g, M = J.T @ r, J.T @ J
        damping = 1e-2 * np.diag(M) * rng.uniform(0.5, 2, q)
        step = np.linalg.solve(M + np.diag(damping), -g)
        y = np.zeros(q)
        lower, upper = -np.abs(step) * 2, np.abs(step) * 2  # the step stays inside...
        for i in rng.choice(q, 1 + k % 3, replace=False):  # ...but for these
            lower[i], upper[i] = (
                (-0.5 * abs(step[i]), 2 * abs(step[i]))
                if step[i] < 0
                else (-2 * abs(step[i]), 0.5 * abs(step[i]))
            )
        held = np.zeros(q, bool)
        residual = k % 2 == 1
        J_r = (jnp.asarray(J), jnp.asarray(r)) if residual else (None, None)
        got = np.asarray(face(jnp.asarray(g), *J_r, y, step, held, lower, upper, M, damping))
        ref = _face_reference(J, r, damping, y, step, lower, upper)
        np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-12 * np.abs(step).max())
        clipped = np.clip(y + step, lower, upper) - y
        assert np.max(np.abs(clipped - ref)) > 1e-3 * np.abs(step).max()


def test_face_steps_reach_scipys_bounded_optimum():
    """`box=ji.Face()` on the four-parameter decay with bounds that two parameters end at,
    in both forms (residuals, and a cost with its gradient and Gauss-Newton matrix):
    SciPy's bounded least squares (`trf`), under `jit` and `vmap` over starts."""
    lower, upper = jnp.array([0.0, 1.5, 0.0, 0.0]), jnp.array([5.0, 5.0, 0.4, 1.0])
    ref = so.least_squares(lambda y: np.asarray(_residual(jnp.asarray(y), DATA)),
                           np.array([1.0, 2.0, 0.1, 0.2]), bounds=(lower, upper),
                           method="trf", xtol=1e-15, ftol=1e-15, gtol=1e-15).x  # fmt: skip
    np.testing.assert_allclose(ref[1:3], [1.5, 0.4], rtol=1e-12)  # two bounds active
    jac = jax.jacfwd(_residual)

    def cost(y, data):
        return 0.5 * jnp.sum(_residual(y, data) ** 2), None

    def derivatives(y, data):
        r, J = _residual(y, data), jac(y, data)
        return 0.5 * jnp.sum(r**2), J.T @ r, J.T @ J, jnp.asarray(True)

    solver = ji.LevenbergMarquardt(rtol=1e-12, atol=1e-14, box=ji.Face())
    starts = jnp.array([[1.0, 2.0, 0.1, 0.2], [4.0, 4.5, 0.0, 0.9], [0.5, 3.0, 0.35, 0.0]])
    for fn, extra in ((_residual, {}), (cost, {"derivatives": derivatives})):
        options = {"bounds": (lower, upper), **extra}

        def fit(y0, fn=fn, options=options):
            return optx.least_squares(fn, solver, y0, args=DATA, options=options,
                                      has_aux=fn is cost, max_steps=200).value  # fmt: skip

        for y in jax.jit(jax.vmap(fit))(starts):
            assert _cost(y, DATA) <= _cost(ref, DATA) * (1 + 1e-10)
            np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-8)


def test_a_fit_far_off_is_not_stopped_by_its_damping():
    """A decay plus an offset, a sine and a trend, from starts at 1e6-1e8 times its
    amplitude: the rate's curvature there is 1e12-1e16 times its final one, and
    Nielsen's first damping (relative to the largest curvature) makes the first steps
    vanishingly small in every other direction. Two slow steps that the damping made
    slow ended the fits at 1e8 there, as converged; now the residual form too asks
    Gauss-Newton's promise first, restarts its damping, and every fit reaches SciPy's
    least squares."""
    t = jnp.linspace(0.0, 4.0, 40)

    def f(y):
        return y[0] * jnp.exp(-y[1] * t) + y[2] + y[3] * jnp.sin(3 * t) + y[4] * t

    data = f(np.array([2.0, 1.3, 0.5, 0.3, 0.1]))
    data = data + 0.01 * jnp.asarray(np.random.default_rng(0).standard_normal(40))
    res = lambda y, d: f(y) - d  # noqa: E731
    lower = jnp.asarray([0.0, 0.01, -10.0, -10.0, -10.0])
    upper = jnp.asarray([1e8, 10.0, 10.0, 10.0, 10.0])
    ref = so.least_squares(lambda y: np.asarray(res(jnp.asarray(y), data)),
                           np.array([1.0, 1.0, 0.0, 0.0, 0.0]), bounds=(lower, upper),
                           xtol=1e-15, ftol=1e-15, gtol=1e-15).x  # fmt: skip
    solver = ji.LevenbergMarquardt(rtol=1e-12, atol=1e-14)
    starts = jnp.array([[1e6, 0.2, 0.0, 0.0, 0.0], [1e7, 3.0, 0.0, 0.0, 0.0],
                        [0.99e8, 0.5, -1.0, 1.0, 1.0], [1e8, 0.3, 1.0, -1.0, 0.0]])  # fmt: skip

    def fit(y0):
        sol = optx.least_squares(res, solver, y0, args=data, options={"bounds": (lower, upper)},
                                 max_steps=200, throw=False)  # fmt: skip
        return sol.value, sol.result == optx.RESULTS.successful

    values, ok = jax.jit(jax.vmap(fit))(starts)
    assert np.all(np.asarray(ok))
    cost = lambda y: float(jnp.sum(res(jnp.asarray(y), data) ** 2))  # noqa: E731
    for y in values:  # (the cost to 1e-9: the stop is on rtol of eps times the first cost)
        assert cost(y) <= cost(ref) * (1 + 1e-9)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-8)


def test_more_scaling_is_capped_by_the_curvature_now():
    """Moré's running maximum of each curvature, at most 1e4 times the curvature now (a
    parameter whose curvature fell 1e6-fold since the start is not held still by it),
    and Nielsen's first damping, 1e-3 of the largest."""
    from jaxident._fit._solvers import more_damping

    scale2, D2, mu = more_damping(jnp.array([1e10, 5.0, 0.0]), jnp.array([1e4, 1.0, 2.0]),
                                  jnp.asarray(-1.0))  # fmt: skip
    np.testing.assert_allclose(scale2, [1e8, 5.0, 2.0], rtol=1e-15)
    np.testing.assert_allclose(D2, scale2, rtol=1e-15)
    np.testing.assert_allclose(mu, 1e-3 * 1e8, rtol=1e-15)


# The deferred start's comparisons stop at rtol 1e-8: the step count is then the
# algorithm's (at 1e-12 the last steps are decided by rounding, and two compilations of
# the same fit may take 9 or 13).
_DEFERRED_LM = ji.LevenbergMarquardt(rtol=1e-8, atol=1e-10)


def _deferred_fit(y0, data, start_nan=False):
    """The fit as the compiled kernels run it: a deferred start, `run_steps`, `outcome`."""
    from jaxident._fit._solvers import outcome, run_steps

    solver = _DEFERRED_LM

    def fn(y, _):
        r = _residual(y, data)
        return (jnp.where(start_nan & (y[0] == y0[0]), jnp.nan, r) if start_nan else r), None

    options = {"free": jnp.ones(4, bool)}
    state = solver.deferred_init(fn, y0, options)
    y, state, steps = run_steps(solver, fn, options, y0, state, 0, 200)
    return y, steps, outcome(solver, fn, options, y, state, steps, 200)


def test_a_deferred_start_takes_the_steps_of_optimistix_and_holds_one_copy_of_the_model():
    """The compiled fits evaluate their start inside the step loop (`deferred_init`):
    the same iterates and step count as optimistix's loop from the eager `init`, and
    the residual function and its Jacobian traced into the program once, not twice
    (eager: `exp` in the start's value and Jacobian and again in the step's)."""
    y0 = jnp.array([1.0, 1.0, 0.0, 0.0])
    ref = _solve(y0, DATA, _DEFERRED_LM)
    y, steps, result = jax.jit(_deferred_fit)(y0, DATA)
    assert int(steps) == int(ref.stats["num_steps"]) and int(steps) > 3
    np.testing.assert_allclose(y, ref.value, rtol=1e-10, atol=1e-12)
    assert result == optx.RESULTS.successful
    # under vmap: the lanes as single fits
    starts = jnp.array([[1.0, 1.0, 0.0, 0.0], [3.0, 0.5, 1.0, 0.5]])
    ys, ks, _ = jax.vmap(lambda s: _deferred_fit(s, DATA))(starts)
    for s, yv, k in zip(starts, ys, ks):
        one = _solve(s, DATA, _DEFERRED_LM)
        np.testing.assert_allclose(yv, one.value, rtol=1e-10, atol=1e-12)
        assert int(k) == int(one.stats["num_steps"])
    # one copy of the residuals (exp) and of their Jacobian (exp's derivative) in the
    # program, where optimistix's init + loop hold two
    deferred = str(jax.make_jaxpr(_deferred_fit)(y0, DATA)).count(" exp ")
    eager = str(jax.make_jaxpr(lambda y: _solve(y, DATA, _DEFERRED_LM).value)(y0)).count(" exp ")
    assert deferred < eager, (deferred, eager)
    # a fit in chunks (`fit_in_chunks`) compiles its step kernel once: the state and
    # step count a chunk returns have the types it was called with
    from jaxident._fit._solvers import run_steps

    solver = _DEFERRED_LM
    fn, options = (lambda y, _: (_residual(y, DATA), None)), {"free": jnp.ones(4, bool)}
    chunk = jax.jit(lambda y, s, k, until: run_steps(solver, fn, options, y, s, k, until))
    y, s, k = y0, solver.deferred_init(fn, y0, options), jnp.asarray(0)
    while not bool(s.done | s.failed):
        y, s, k = chunk(y, s, k, k + 2)
    assert chunk._cache_size() == 1 and int(k) == int(ref.stats["num_steps"])
    np.testing.assert_allclose(y, ref.value, rtol=1e-10, atol=1e-12)
    # a start where the model cannot be solved fails, as from the eager init
    _, k, res = jax.jit(lambda y: _deferred_fit(y, DATA, start_nan=True))(y0)
    assert int(k) == 0 and res == optx.RESULTS.nonlinear_divergence
