"""The compiled kernels of the re-estimation engine: the fit in one kernel (`ji.estimate`,
jittable and vmappable), and the same Levenberg-Marquardt fit as three kernels that a
host loop runs a few steps at a time (progress and Ctrl-C between them). Jacobians come
from the sensitivity engine (`forward_sensitivities`), as `ji.sensitivity`'s do."""

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array

from .._model._base import Integrator
from .._problem._measurements import box_transform, near_bound
from .._solve._forward import forward_sensitivities, sensitivity_method
from .._solve._simulate import solve
from ._solvers import LevenbergMarquardt, OptaxLD, outcome, run_steps


_FAILED_RESIDUAL = 1e8


class _Model(NamedTuple):
    """The model seen by a fit: outputs at `theta`, the parameters at the unknowns `z`
    (held ones at `theta0`), and the outputs with their derivatives along the columns
    of `M`, by the integrator's sensitivity method (the sensitivity equations inside
    the error test, by default: the estimate's Jacobian has a controlled error; under
    `ji.Rodas4` a 121-column E. coli Jacobian costs half of `jacfwd` through the solve,
    under `diffrax.Kvaerno3` about the same). `step_sensitivities` are those of the
    Jacobians that only steer the steps: the sensitivity equations on the state's own
    steps (`SensitivityEquations(error_control=False)`), a third of the cost on E. coli."""

    outputs: Callable
    params: Callable
    sensitivities: Callable
    step_sensitivities: Callable
    z0: Array
    dtheta_dz: Callable


def _steering(integ: Integrator) -> Integrator:
    return dataclasses.replace(integ, sensitivity=sensitivity_method(integ).steering())


def _fit_model(model, times, theta0, free, lower, upper, bounded, integ) -> _Model:
    to_theta, z0 = box_transform(theta0, lower, upper, bounded)

    def outputs(theta):
        return solve(model, theta, times, integ, diffrax.ForwardMode()).ys.reshape(-1)

    def params(z):
        return jnp.where(free, to_theta(z), theta0)

    def sensitivities(theta, M, integ=integ):
        y, Y, _ = forward_sensitivities(model, theta, times, integ, M)
        return y, Y

    def dtheta_dz(z):  # the change of variables is elementwise
        return jnp.where(free, jax.jvp(to_theta, (z,), (jnp.ones_like(z),))[1], 0.0)

    steer = functools.partial(sensitivities, integ=_steering(integ))
    return _Model(outputs, params, sensitivities, steer, z0, dtheta_dz)


def _residual_fn(fm: _Model, data, sigma, lm):
    def residual(z, _):
        r = (fm.outputs(fm.params(z)) - data) / sigma
        # ji.LevenbergMarquardt rejects a trial point where the model cannot be
        # solved; to other solvers such a point must look very bad, not NaN (NaN
        # would reach their linear solves).
        return r if lm else jnp.where(jnp.all(jnp.isfinite(r)), r, _FAILED_RESIDUAL)

    return residual


def _jacobian_fn(fm: _Model, sigma):
    """The weighted residuals' Jacobian in the unknowns `z` (zero columns for held
    parameters), from the sensitivities along `diag(dtheta/dz)`."""

    def jacobian(z, _):
        _, Y = fm.step_sensitivities(fm.params(z), jnp.diag(fm.dtheta_dz(z)))
        return Y / sigma[:, None]

    return jacobian


def _finish(fm: _Model, theta, data, sigma, free, lower, upper, bounded, steps, result):
    """The estimate's weighted residuals, cost, Jacobian (every column) and status."""
    y, Y = fm.sensitivities(theta, jnp.eye(theta.shape[0], dtype=theta.dtype))
    r = (y - data) / sigma  # one solve gives both
    J = Y / sigma[:, None]
    finite = jnp.all(jnp.isfinite(r)) & jnp.all(jnp.isfinite(J))
    cost = jnp.sum(r**2)
    r = jnp.where(jnp.isfinite(sigma), r, jnp.nan)  # NaN where a datum is missing
    result = optx.RESULTS.where(
        (result == optx.RESULTS.successful) & ~finite, optx.RESULTS.nonlinear_divergence, result
    )
    at_bound = free & near_bound(theta, lower, upper, bounded)
    return theta, r, cost, J, jnp.asarray(steps), result, at_bound


@eqx.filter_jit
def fit_kernel(
    model, data, sigma, times, theta0, free, lower, upper, bounded, solver, max_steps, integ
):
    """The estimation kernel: every array an argument, so one compilation serves every
    start, data set, error model and free-parameter mask of a model."""
    fm = _fit_model(model, times, theta0, free, lower, upper, bounded, integ)
    if isinstance(solver, OptaxLD):
        z, steps, result = solver.minimise(fm.outputs, fm.params, fm.z0, data, sigma, free)
    elif isinstance(solver, LevenbergMarquardt):  # the steps of `fit_in_chunks`, in one loop
        fn, options = _lm_residuals(fm, data, sigma, free)
        state = solver.deferred_init(fn, fm.z0, options)
        z, state, steps = run_steps(solver, fn, options, fm.z0, state, 0, max_steps)
        result = outcome(solver, fn, options, z, state, steps, max_steps)
    else:
        residual = _residual_fn(fm, data, sigma, False)
        sol = optx.least_squares(residual, solver, fm.z0, max_steps=max_steps, throw=False)
        z, steps, result = sol.value, sol.stats["num_steps"], sol.result
    return _finish(fm, fm.params(z), data, sigma, free, lower, upper, bounded, steps, result)


# --- the same Levenberg-Marquardt fit in chunks of steps, for a host loop that reports
# progress (and can be interrupted) between them: three callback-free kernels ---


def _lm_residuals(fm: _Model, data, sigma, free):
    """The weighted residuals `fn(z, args) -> (r, None)` and the options (the mask, the
    sensitivity Jacobian) of `ji.LevenbergMarquardt`'s fit of `fm`."""
    residual = _residual_fn(fm, data, sigma, True)
    options = {"free": free, "jacobian": _jacobian_fn(fm, sigma)}
    return lambda z, args: (residual(z, args), None), options


def _lm_fn(ls, theta0, free):
    fm = _fit_model(ls.model, ls.times, theta0, free, ls.lower, ls.upper, ls.bounded, ls.integrator)
    return fm, *_lm_residuals(fm, ls.data, ls.sigma, free)


@eqx.filter_jit
def lm_begin(ls, theta0, free, solver):
    fm, fn, options = _lm_fn(ls, theta0, free)
    return fm.z0, solver.deferred_init(fn, fm.z0, options)


@eqx.filter_jit
def lm_advance(ls, theta0, free, solver, z, state, steps, until):
    """Levenberg-Marquardt steps from `(z, state)` until it stops or `steps == until`."""
    _, fn, options = _lm_fn(ls, theta0, free)
    return run_steps(solver, fn, options, z, state, steps, until)


@eqx.filter_jit
def lm_finish(ls, theta0, free, solver, z, state, steps, max_steps):
    fm, fn, options = _lm_fn(ls, theta0, free)
    result = outcome(solver, fn, options, z, state, steps, max_steps)
    return _finish(fm, fm.params(z), ls.data, ls.sigma, free, ls.lower, ls.upper,
                   ls.bounded, steps, result)  # fmt: skip
