"""The compiled kernels of the re-estimation engine: the fit in one kernel (`ji.estimate`,
jittable and vmappable), and the same Levenberg-Marquardt fit as three kernels that a
host loop runs a few steps at a time (progress and Ctrl-C between them)."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from ._measurements import box_transform
from ._simulate import solve
from ._solvers import LevenbergMarquardt, OptaxLD


_FAILED_RESIDUAL = 1e8


def _outputs_and_params(model, times, theta0, free, lower, upper, bounded, integ):
    to_theta, z0 = box_transform(theta0, lower, upper, bounded)

    def outputs(theta):
        return solve(model, theta, times, integ, diffrax.ForwardMode()).ys.reshape(-1)

    def params(z):
        return jnp.where(free, to_theta(z), theta0)

    return outputs, params, z0


def _residual_fn(outputs, params, data, sigma, lm):
    def residual(z, _):
        r = (outputs(params(z)) - data) / sigma
        # ji.LevenbergMarquardt rejects a trial point where the model cannot be
        # solved; to other solvers such a point must look very bad, not NaN (NaN
        # would reach their linear solves).
        return r if lm else jnp.where(jnp.all(jnp.isfinite(r)), r, _FAILED_RESIDUAL)

    return residual


def _finish(outputs, theta, data, sigma, free, lower, upper, bounded, steps, result):
    """The estimate's weighted residuals, cost, Jacobian (every column) and status."""

    def weighted(th):
        r = (outputs(th) - data) / sigma
        return r, r

    J, r = jax.jacfwd(weighted, has_aux=True)(theta)  # one solve gives both
    finite = jnp.all(jnp.isfinite(r)) & jnp.all(jnp.isfinite(J))
    cost = jnp.sum(r**2)
    r = jnp.where(jnp.isfinite(sigma), r, jnp.nan)  # NaN where a datum is missing
    result = optx.RESULTS.where(
        (result == optx.RESULTS.successful) & ~finite, optx.RESULTS.nonlinear_divergence, result
    )
    width = upper - lower
    at_bound = (
        free
        & bounded
        & jnp.isfinite(width)
        & ((jnp.abs(theta - lower) <= 1e-6 * width) | (jnp.abs(upper - theta) <= 1e-6 * width))
    )
    return theta, r, cost, J, jnp.asarray(steps), result, at_bound


@eqx.filter_jit
def fit_kernel(
    model, data, sigma, times, theta0, free, lower, upper, bounded, solver, max_steps, integ
):
    """The estimation kernel: every array an argument, so one compilation serves every
    start, data set, error model and free-parameter mask of a model."""
    outputs, params, z0 = _outputs_and_params(
        model, times, theta0, free, lower, upper, bounded, integ
    )
    if isinstance(solver, OptaxLD):
        z, steps, result = solver.minimise(outputs, params, z0, data, sigma, free)
    else:
        lm = isinstance(solver, LevenbergMarquardt)
        residual = _residual_fn(outputs, params, data, sigma, lm)
        options = {"free": free} if lm else None
        sol = optx.least_squares(
            residual, solver, z0, options=options, max_steps=max_steps, throw=False
        )
        z, steps, result = sol.value, sol.stats["num_steps"], sol.result
    return _finish(outputs, params(z), data, sigma, free, lower, upper, bounded, steps, result)


# --- the same Levenberg-Marquardt fit in chunks of steps, for a host loop that reports
# progress (and can be interrupted) between them: three callback-free kernels ---


def _lm_fn(ls, theta0, free):
    outputs, params, z0 = _outputs_and_params(
        ls.model, ls.times, theta0, free, ls.lower, ls.upper, ls.bounded, ls.integrator
    )
    residual = _residual_fn(outputs, params, ls.data, ls.sigma, True)
    return outputs, params, z0, lambda z, args: (residual(z, args), None)


_NO_TAGS = frozenset()


@eqx.filter_jit
def lm_begin(ls, theta0, free, solver):
    _, _, z0, fn = _lm_fn(ls, theta0, free)
    return z0, solver.init(fn, z0, None, {"free": free}, None, None, _NO_TAGS)


@eqx.filter_jit
def lm_advance(ls, theta0, free, solver, z, state, steps, until):
    """Levenberg-Marquardt steps from `(z, state)` until it stops or `steps == until`."""
    _, _, _, fn = _lm_fn(ls, theta0, free)
    options = {"free": free}

    def cond(c):
        z, state, k = c
        done, _ = solver.terminate(fn, z, None, options, state, _NO_TAGS)
        return ~done & (k < until)

    def body(c):
        z, state, k = c
        z, state, _ = solver.step(fn, z, None, options, state, _NO_TAGS)
        return z, state, k + 1

    return jax.lax.while_loop(cond, body, (z, state, steps))


@eqx.filter_jit
def lm_finish(ls, theta0, free, solver, z, state, steps, max_steps):
    outputs, params, _, fn = _lm_fn(ls, theta0, free)
    done, result = solver.terminate(fn, z, None, {"free": free}, state, _NO_TAGS)
    result = optx.RESULTS.where(
        ~done & (steps >= max_steps), optx.RESULTS.nonlinear_max_steps_reached, result
    )
    return _finish(outputs, params(z), ls.data, ls.sigma, free, ls.lower, ls.upper,
                   ls.bounded, steps, result)  # fmt: skip
