"""ji.Rodas4 against closed forms and SciPy: its order, its stiff stability, and the
accuracy of its solutions at the tolerance asked for."""

import contextlib
import functools

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import jaxident as ji


LAM = -50.0


def _prothero_robinson(t, y, args):
    """y' = lam (y - cos t) - sin t: y = cos t + (y0 - 1) e^(lam t). Non-autonomous, so
    the time-derivative term of the method is exercised."""
    lam = args
    return lam * (y - jnp.cos(t)) - jnp.sin(t)


def _exact(t, y0, lam):
    return np.cos(t) + (y0 - 1.0) * np.exp(lam * t)


@jax.jit
def _fixed_steps(n):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_prothero_robinson),
        ji.Rodas4(),
        0.0,
        1.0,
        1.0 / n,
        jnp.array([2.0]),
        args=-1.0,
        max_steps=1000,
    )
    return sol.ys[-1, 0]


def test_order_four_on_a_closed_form():
    errs = np.array([abs(float(_fixed_steps(n)) - _exact(1.0, 2.0, -1.0)) for n in (4, 8, 16, 32)])
    orders = np.log2(errs[:-1] / errs[1:])
    assert np.all(orders > 3.7) and np.all(orders < 4.5), orders


def test_stiff_decay_in_one_step():
    """L-stability: one step of h = 1 with lam h = -1e6 damps the unit transient to the
    slow solution (an A- but not L-stable method would keep it at magnitude ~1)."""
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_prothero_robinson),
        ji.Rodas4(),
        0.0,
        1.0,
        1.0,
        jnp.array([2.0]),
        args=-1e6,
        max_steps=2,
    )
    assert abs(float(sol.ys[-1, 0]) - np.cos(1.0)) < 1e-4


def _robertson(t, y, k):
    return jnp.stack(
        [
            -k[0] * y[0] + k[2] * y[1] * y[2],
            k[0] * y[0] - k[1] * y[1] ** 2 - k[2] * y[1] * y[2],
            k[1] * y[1] ** 2,
        ]
    )


@functools.cache
def _robertson_reference(ts: tuple) -> np.ndarray:
    k1, k2, k3 = 0.04, 3e7, 1e4

    def rhs(t, y):
        return [
            -k1 * y[0] + k3 * y[1] * y[2],
            k1 * y[0] - k2 * y[1] ** 2 - k3 * y[1] * y[2],
            k2 * y[1] ** 2,
        ]

    def jac(t, y):
        return [
            [-k1, k3 * y[2], k3 * y[1]],
            [k1, -2 * k2 * y[1] - k3 * y[2], -k3 * y[1]],
            [0.0, 2 * k2 * y[1], 0.0],
        ]

    sol = solve_ivp(
        rhs,
        (0, ts[-1]),
        [1.0, 0.0, 0.0],
        method="Radau",
        jac=jac,
        rtol=1e-13,
        atol=1e-20,
        t_eval=ts,
    )
    assert sol.success
    return sol.y.T


@pytest.mark.parametrize("rtol", [1e-6, 1e-9])
def test_adaptive_solution_at_tolerance_vs_radau(rtol):
    k = jnp.array([0.04, 3e7, 1e4])
    ts = jnp.array([1e-3, 0.1, 1.0, 10.0, 100.0, 1000.0])
    ref = _robertson_reference(tuple(np.asarray(ts).tolist()))

    @jax.jit
    @jax.vmap
    def run(scale):
        controller = diffrax.PIDController(rtol=rtol, atol=rtol * 1e-6, step_ts=ts)
        return diffrax.diffeqsolve(
            diffrax.ODETerm(_robertson),
            ji.Rodas4(),
            0.0,
            1000.0,
            None,
            jnp.array([1.0, 0.0, 0.0]),
            args=k * scale,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=controller,
            max_steps=100_000,
        ).ys

    ys = np.asarray(run(jnp.array([1.0, 1.0])))
    np.testing.assert_array_equal(ys[0], ys[1])
    err = np.max(np.abs(ys[0] - ref) / np.abs(ref))
    assert err < 10 * rtol, err


def test_observation_times_are_step_ends():
    """Within jaxident, Rodas4's controller steps onto the observation times, so the
    outputs are the steps' own values, not its cubic dense output."""
    integ = ji.Integrator(ji.Rodas4())
    c = integ.controller(times=jnp.array([0.5, 1.0]))
    assert np.asarray(c.inner.step_ts).tolist() == [0.5, 1.0]
    c = ji.Integrator(diffrax.Kvaerno5()).controller(times=jnp.array([0.5, 1.0]))
    assert getattr(c.inner, "step_ts", None) is None


def _robertson_to_10(solver, k, vf=_robertson):
    """Robertson's problem with rate constants `k` on [0, 10], saved at t = 10."""
    return diffrax.diffeqsolve(
        diffrax.ODETerm(vf),
        solver,
        0.0,
        10.0,
        None,
        jnp.array([1.0, 0.0, 0.0]),
        args=k,
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-14),
        max_steps=10_000,
    )


def test_looped_stages_equal_unrolled(monkeypatch):
    """Large systems loop over the stages (compiled once) instead of unrolling them:
    the same method, to rounding."""
    import jaxident._solve._rosenbrock as rosenbrock

    k = jnp.array([0.04, 3e7, 1e4])
    unrolled = _robertson_to_10(ji.Rodas4(), k)
    monkeypatch.setattr(rosenbrock, "_UNROLL_EQUATIONS", 0)
    looped = _robertson_to_10(ji.Rodas4(), k)
    assert int(looped.stats["num_steps"]) == int(unrolled.stats["num_steps"])
    np.testing.assert_allclose(np.asarray(looped.ys), np.asarray(unrolled.ys), rtol=1e-12)


def test_the_stages_are_looped_or_unrolled_as_asked():
    """`ji.Rodas4(unroll=False)` (a loop of the stages: the shortest compilation, as
    `jaxident analyze` asks for its report) is the same method as `unroll=True`, to
    rounding, under `jit` and `vmap`; the default writes out Robertson's small
    right-hand side."""
    k = jnp.array([0.04, 3e7, 1e4])
    unrolled = _robertson_to_10(ji.Rodas4(unroll=True), k)
    looped = _robertson_to_10(ji.Rodas4(unroll=False), k)
    default = _robertson_to_10(ji.Rodas4(), k)
    assert int(looped.stats["num_steps"]) == int(unrolled.stats["num_steps"])
    np.testing.assert_allclose(np.asarray(looped.ys), np.asarray(unrolled.ys), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(default.ys), np.asarray(unrolled.ys))
    ks = jnp.stack([k, k * jnp.array([1.0, 2.0, 0.5])])
    batched = jax.jit(jax.vmap(lambda kk: _robertson_to_10(ji.Rodas4(unroll=False), kk).ys))(ks)
    np.testing.assert_allclose(np.asarray(batched[0]), np.asarray(looped.ys), rtol=1e-12)
    other = _robertson_to_10(ji.Rodas4(unroll=True), ks[1])
    np.testing.assert_allclose(np.asarray(batched[1]), np.asarray(other.ys), rtol=1e-12)


def test_step_traced_once_same_solution_and_gradient(monkeypatch):
    """Inside `traced_once` diffrax's three traces of a step reuse one; the solution and
    its gradient (the backward pass traced after the context) are the plain solver's,
    and the jitted step does not outlive the context."""
    import gc
    import weakref

    import jaxident._solve._rosenbrock as rosenbrock

    traces = []
    step = rosenbrock.Rodas4._step
    monkeypatch.setattr(rosenbrock.Rodas4, "_step", lambda *a: traces.append(1) or step(*a))
    k = jnp.array([0.04, 3e7, 1e4])
    alive = []

    def run(scale, once):
        plain = ji.Rodas4()
        with rosenbrock.traced_once(plain) if once else contextlib.nullcontext(plain) as s:
            if once:
                alive.append(weakref.ref(s.step_once._ref()))
            # a new right-hand side: diffrax's own jit must trace, not reuse a trace
            vf = lambda t, y, a: _robertson(t, y, a)
            return _robertson_to_10(s, k * scale, vf).ys[0, 0]

    out = {}
    for once in (False, True):
        traces.clear()
        value = jax.jit(functools.partial(run, once=once))(1.0)
        out[once] = (value, len(traces))
        traces.clear()
        grad = jax.jit(jax.grad(functools.partial(run, once=once)))(1.0)
        out[once] += (grad,)
    assert out[True][1] == 1 < out[False][1]  # diffrax traces a step two or three times
    np.testing.assert_array_equal(out[True][0], out[False][0])
    # (to rounding: XLA fuses the stages' small products with their neighbours
    # differently in the two programs; Robertson's stiff gradient amplifies it)
    np.testing.assert_allclose(out[True][2], out[False][2], rtol=1e-10)
    gc.collect()
    assert alive and not any(r() is not None for r in alive)


@pytest.mark.parametrize("n, k", [(8, None), (8, 6), (11, 16), (20, 3)])
def test_stage_products_against_numpy(n, k):
    """The stages' products `W^{-1} r` (a fused sum where small and not batched, a
    batched `dot` under `vmap`, a `dot` where large) equal NumPy's, under `jit` and
    `vmap`, and so do their forward and reverse derivatives (the `dot`s of the custom
    derivative rule)."""
    from helpers import tol

    from jaxident._solve._rosenbrock import _product

    rng = np.random.default_rng(n)
    shape = (n,) if k is None else (n, k)
    A, x = rng.normal(size=(n, n)), rng.normal(size=shape)
    one = jnp.asarray(1.0)
    rtol = tol(jnp.float64)
    np.testing.assert_allclose(jax.jit(_product)(A, x, one), A @ x, rtol=rtol, atol=rtol)
    As, xs = rng.normal(size=(3, n, n)), rng.normal(size=(3, *shape))
    batched = jax.jit(jax.vmap(_product, (0, 0, None)))(As, xs, one)
    np.testing.assert_allclose(batched, np.einsum("bij,bj...->bi...", As, xs), rtol=rtol,
                               atol=rtol)  # fmt: skip
    shared = jax.vmap(_product, (None, 0, None))(A, xs, one)
    np.testing.assert_allclose(shared, np.einsum("ij,bj...->bi...", A, xs), rtol=rtol,
                               atol=rtol)  # fmt: skip
    dA, dx = rng.normal(size=A.shape), rng.normal(size=shape)
    _, tangent = jax.jvp(lambda a, v: _product(a, v, one), (A, x), (dA, dx))
    np.testing.assert_allclose(tangent, dA @ x + A @ dx, rtol=rtol, atol=rtol)
    gA, gx = jax.jit(jax.grad(lambda a, v: jnp.sum(jnp.sin(_product(a, v, one))), (0, 1)))(A, x)
    c = np.cos(A @ x)
    np.testing.assert_allclose(gx, A.T @ c, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gA, np.outer(c, x) if k is None else c @ x.T, rtol=rtol,
                               atol=rtol)  # fmt: skip
