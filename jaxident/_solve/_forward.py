"""Forward sensitivities: the sensitivity system integrated with the state, inside the
solver's error test (the default), or the derivative of the discretised solve.

For `x' = f(t, x, theta)`, `y = h(t, x, theta)` and directions `M` (`p x k`), the
tangents `X = dx/dtheta M` solve `X' = f'(t, x, theta; (X, M))`, `X(t0) = x0'(theta; M)`,
and `Y = h'(t, x, theta; (X, M))`. The derivatives are LD-derivatives (Abdelfattah,
Stechlinski & Eisa 2024, Proposition 1): for a smooth model they are `J M`, and every
`nabs`/`nmax`/`nmin`/`nmid` takes one branch for all k columns. `(x, X)` is one state for
diffrax, so the step-size controller bounds the local error of the tangents as well as
of the state (as CVODES does with sensitivities in its error test).

The tangent columns are integrated in the units of the state: column `j` is scaled by
`1 / max_i |M_ij| / pbar_i` with `pbar = |theta|` (1 where `theta_i = 0`), as CVODES
scales by `pbar`, so that `atol` means the same for the tangents as for the state
whatever the parameters' units. LD-derivatives are positively homogeneous in each
column, so the scaling is undone exactly.

Implicit solvers solve each stage by a chord iteration whose matrix is the state's own
`I - h gamma f_x`, factorized once per step and applied to all `1 + k` columns (the
simultaneous corrector of CVODES with a block-diagonal Newton matrix): the cost of the
factorization does not grow with the number of parameters. `ji.BDF` corrects staggered
instead (the state first, then the tangents at the corrected state, with the same
factorization; `_solve/_bdf.py`).
"""

import dataclasses
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy as jsp
import optimistix as optx
from jax.flatten_util import ravel_pytree
from jaxtyping import Array

from .._model._base import (
    AbstractControllerWrapper,
    AbstractModel,
    AbstractSensitivityMethod,
    AlgebraicModel,
    DAEModel,
    Integrator,
    state_scale,
)
from .._model._dae import algebraic_solve
from .._model._nonsmooth import ld_jvp, record_switches
from .._model._transforms import time_warped
from ._bdf import BDF, with_sparsity
from ._rosenbrock import Rodas4
from ._simulate import (
    _switching_times as switching_times,
    first_state,
    in_segments,
    integrate,
    solve,
    solved,
    unobserved,
)


class _ChordState(eqx.Module):
    lu: tuple[Array, Array]
    diffsize: Array
    diffsize_prev: Array
    step: Array


class _StaggeredChord(optx.AbstractRootFinder):
    """The chord iteration for the stage equations of the augmented system `(z, Z)`.

    The Jacobian of a stage residual is block lower triangular, `[[A, 0], [C, I (x) A]]`
    with `A = I - h gamma f_z`, and the tangent block is linear in `Z`. Only `A` is formed
    (`n` products with the state block of the residual; the compiler drops the tangent
    block) and factorized, once per step. Each iteration updates the state,
    `z <- z - A^{-1} r_z(z, Z)`, then the tangents at the new state,
    `Z <- Z - A^{-1} r_Z(z, Z)` for all columns at once: the staggered corrector of
    CVODES, so that the cost of the factorization does not grow with the number of
    parameters. Convergence is judged on both blocks (Hairer & Wanner's rate test), with
    the step-size controller's tolerances.
    """

    rtol: float
    atol: float
    norm: object = optx.max_norm
    kappa: float = 1e-2

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        if "init_state" in options:
            return options["init_state"]
        z, Z = y
        A = jax.jacfwd(lambda zz: fn((zz, Z), args)[0][0])(z)
        lu = jax.lax.stop_gradient(jsp.linalg.lu_factor(A))
        inf = jnp.asarray(jnp.inf, z.dtype)
        return _ChordState(lu, inf, jnp.asarray(1.0, z.dtype), jnp.asarray(0))

    def step(self, fn, y, args, options, state, tags):
        z, Z = y
        dz = jsp.linalg.lu_solve(state.lu, fn((z, Z), args)[0][0])
        z = z - dz
        (_, R), aux = fn((z, Z), args)
        dZ = jsp.linalg.lu_solve(state.lu, R)
        Z = Z - dZ
        scale_z = self.atol + self.rtol * jnp.abs(z)
        scale_Z = self.atol + self.rtol * jnp.abs(Z)
        diffsize = jnp.maximum(self.norm(dz / scale_z), self.norm(dZ / scale_Z))
        new = _ChordState(state.lu, diffsize, state.diffsize, state.step + 1)
        return (z, Z), new, aux

    def terminate(self, fn, y, args, options, state, tags):
        rate = state.diffsize / state.diffsize_prev
        factor = state.diffsize * rate / (1 - rate)
        small = state.diffsize < 10 ** (2 - jnp.finfo(state.diffsize.dtype).precision)
        diverged = ~jnp.isfinite(rate) | (rate > 2)
        converged = (factor > 0) & (factor < self.kappa)
        two = state.step >= 2
        done = two & (small | diverged | converged)
        failed = two & ~small & (diverged | ~converged)
        return done, optx.RESULTS.where(
            failed, optx.RESULTS.nonlinear_divergence, optx.RESULTS.successful
        )

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}


def _staggered(solver: diffrax.AbstractSolver, state_field: Callable) -> diffrax.AbstractSolver:
    """`solver` with its stage equations solved by the staggered chord iteration, or a
    Rosenbrock method told that the state is `(z, Z)` with `state_field(t, z, args)` the
    right-hand side of `z`."""
    if isinstance(solver, (Rodas4, BDF)):
        return dataclasses.replace(solver, augmented=True, state_field=state_field)
    if getattr(solver, "root_finder", None) is None:
        return solver
    finder = diffrax.with_stepsize_controller_tols(_StaggeredChord)()
    return eqx.tree_at(lambda s: s.root_finder, solver, finder)


class _SwitchLocating(AbstractControllerWrapper):
    """Wraps a step-size controller so that no step straddles a switching surface of the
    model: where an argument of `nabs`/`nmax`/`nmin`/`nmid` changes sign within a step
    that the error test accepted, the step is rejected and retried to end just past the
    crossing (located by the secant of the switching values). The embedded error
    estimate is valid only where the right-hand side is smooth within the step; at a
    kink the tangents' right-hand side jumps, and a straddling step would lose an order
    unseen."""

    inner: diffrax.AbstractAdaptiveStepSizeController
    switching: object  # (t, y, args) -> 1-D array of switching values

    def wrap(self, direction):
        return _SwitchLocating(self.inner.wrap(direction), self.switching)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        return self.inner.init(terms, t0, t1, y0, dt0, args, func, error_order)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, state):
        keep, next_t0, next_t1, made_jump, state, result = self.inner.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state
        )
        g0 = self.switching(t0, y0, args)
        g1 = self.switching(t1, y1_candidate, args)
        crossed = (jnp.sign(g0) != jnp.sign(g1)) & (g0 != 0) & jnp.isfinite(g1)
        frac = jnp.where(crossed, g0 / jnp.where(crossed, g0 - g1, 1.0), 1.0)
        frac = jnp.clip(jnp.min(frac, initial=1.0), 0.0, 1.0)
        dt = t1 - t0
        eps = jnp.finfo(jnp.result_type(dt)).eps
        slack = jnp.maximum(1e-7 * jnp.abs(dt), 1e3 * eps * (jnp.abs(t0) + 1.0))
        straddles = keep & jnp.any(crossed) & ((1.0 - frac) * dt > slack)
        keep = keep & ~straddles
        next_t0 = jnp.where(straddles, t0, next_t0)
        next_t1 = jnp.where(straddles, t0 + frac * dt + 0.5 * slack, next_t1)
        made_jump = jnp.where(straddles, False, made_jump)
        # A step that ends exactly on a kink (an observation time, say): resume just
        # after it, so that no stage is evaluated on the kink itself, where the
        # LD-derivative would pick the branch by the parameter directions.
        on_kink = keep & jnp.any((g1 == 0) & (g0 != 0))
        after = jnp.nextafter(t1, t1 + jnp.sign(dt))
        next_t1 = jnp.where(on_kink, jnp.maximum(next_t1, after + slack), next_t1)
        next_t0 = jnp.where(on_kink, after, next_t0)
        made_jump = made_jump | on_kink
        return keep, next_t0, next_t1, made_jump, state, result


def _state_norm(error) -> Array:
    """The error norm of the state alone, for `(z, Z)` (sensitivities outside the test)."""
    return optx.rms_norm(error[0])


def _rms_norm(active: Array):
    """The RMS norm over the state and the tangent columns that are `active` (their
    direction is not zero), of `(z, Z)` or of the tangents `Z` alone (the chord
    iteration measures each block apart): a column of zeros (one a `ji.Problem` pads
    with, or a parameter the model does not depend on) neither dilutes nor changes the
    error test, so the steps do not depend on how many such columns ride along."""

    def norm(error):
        z, Z = error if isinstance(error, tuple) else (None, error)
        if Z.ndim != 2:  # the state alone
            return optx.rms_norm(Z)
        state = 0 if z is None else z.size
        count = state + Z.shape[0] * jnp.sum(active)
        Z = jnp.where(active, Z, jnp.zeros_like(Z))
        rms = optx.rms_norm(Z if z is None else (z, Z))
        return rms * jnp.sqrt((state + Z.size) / jnp.maximum(count, 1))

    return norm


def _controller(model, integrator, th, f, z0, theta, times, active, control=True):
    """The integrator's controller, stepping onto the model's declared switching times
    and, for an ODE model whose right-hand side uses `nabs`/`nmax`/`nmin`/`nmid`, onto
    its kinks in the state or in time. Such a model also steps onto the observation
    times, so that no output is interpolated across a kink. The error test covers the
    tangents of the `active` columns unless not `control`
    (`SensitivityEquations(error_control=False)`)."""
    jumps = switching_times(model, th)
    norm = _rms_norm(active) if control else _state_norm
    s = state_scale(z0)
    scale = (s, s[:, None])  # (the state, its tangents: in the state's units)
    if isinstance(model, DAEModel):
        # kinks in the Newton solve: not located
        return integrator.controller(jumps, times=times, norm=norm, scale=scale)
    with record_switches() as found:
        f(jnp.asarray(model.t0, z0.dtype), z0, theta)
    if not found:
        return integrator.controller(jumps, times=times, norm=norm, scale=scale)
    if isinstance(integrator.solver, BDF):
        raise ValueError(
            "ji.BDF needs a right-hand side that is differentiable in the state; this model "
            "uses nabs/nmax/nmin/nmid, whose kinks an ESDIRK method with switch location "
            "steps onto: use ji.Integrator(diffrax.Kvaerno5(), ...)."
        )
    inner = integrator.controller(jumps, times, norm=norm, scale=scale)
    if not isinstance(inner, diffrax.AbstractAdaptiveStepSizeController):
        return inner

    def switching(t, y, args):
        with record_switches() as g:
            f(t, y[0], args[0])
        return jnp.concatenate(g)

    return _SwitchLocating(inner, switching)


def _column_scale(theta: Array, M: Array) -> Array:
    pbar = jnp.where(theta != 0, jnp.abs(theta), 1.0)
    big = jnp.max(jnp.abs(M) / pbar[:, None], axis=0)
    return jnp.where(big > 0, 1.0 / jnp.where(big > 0, big, 1.0), 1.0)


def _event_time_term(f, g, trigger, theta, Ms, n_timed, j, t, before, after, tau_theta):
    """The event time's term of the jump of trigger j at t: `Z+ += (g_x f- - f+)
    tau_theta`, `tau_theta = -(h_x Z- + h_theta M) / (h_t + h_x f-)` (given: the time's
    tangent of the event whose jump made trigger j true, in a cascade), and `tau_theta`.
    `f`, `g` and `trigger` are `_solve_equations`' flat field, jumps and triggers."""
    (z, Z), (z_new, Z_new) = before, after
    i = n_timed + j
    f_before = f(t, z, theta)
    if tau_theta is None:
        h_j = lambda tt, zz, pp: trigger(tt, zz, pp)[j]  # noqa: E731
        ones = jnp.ones_like(t)
        _, rate = jax.jvp(lambda tt, zz: h_j(tt, zz, theta), (t, z), (ones, f_before))
        _, h_dirs = ld_jvp(lambda zz, pp: h_j(t, zz, pp), (z, theta), (Z, Ms))
        tau_theta = -h_dirs / jnp.where(rate != 0, rate, 1.0)
    _, g_f = jax.jvp(lambda zz: g(i, t, zz, theta), (z,), (f_before,))
    jump_rate = g_f - f(t, z_new, theta)
    return (z_new, Z_new + jump_rate[:, None] * tau_theta[None, :]), tau_theta


def _observe(model, integrator, unravel, dae: bool, theta, Ms, t, z, Z):
    """The outputs at `t` from the flat state `z`, their LD-derivatives along `(Z, Ms)`
    and the state (for a DAE, the algebraic part solved at `t` from its guess)."""
    view = model.parameters.view

    def h(zz, pp):
        pv = view(pp)
        s = unravel(zz)
        if dae:
            x, w_guess = s
            w, ok = algebraic_solve(model, t, x, w_guess, pv, integrator)
            y = model.output(t, x, w, pv)
            y = jnp.where(ok, jnp.atleast_1d(jnp.asarray(y, dtype=float)), jnp.nan)
            return y, w
        return jnp.atleast_1d(jnp.asarray(model.output(t, s, pv), dtype=float)), s

    return ld_jvp(h, (z, theta), (Z, Ms), has_aux=True)


def _solve_equations(model: AbstractModel, theta, times, integrator: Integrator, M, observed=None,
                     control: bool = True):  # fmt: skip
    """Integrate `(z, Z)`; return the flat outputs, their LD-derivatives `(rows, k)` and
    the `Solved` record of the state (`observed`: see `forward_sensitivities`; `control`:
    the tangents in the error test)."""
    model = time_warped(model, model.parameters.view(theta), jnp.max(times))
    view = model.parameters.view
    th = view(theta)
    c = _column_scale(theta, M)
    Ms = M * c[None, :]
    active = jnp.any(M != 0, axis=0)
    dae = isinstance(model, DAEModel)
    if dae:  # the consistent initial values (x0, w0), and the index-1 system's field
        first, base_vf, init_ok = first_state(model, th, integrator)
    else:  # (the initial state is traced once, below, with its tangents)
        base_vf, init_ok = (lambda t, x, a: model.vector_field(t, x, a)), jnp.asarray(True)

    def x0_of(tt):
        x = model.initial_state(view(tt))
        if dae:
            x = (jnp.asarray(x, dtype=float), jnp.zeros_like(first[1]))
        return jax.tree.map(lambda a: jnp.asarray(a, theta.dtype), x)

    # the initial state and its tangents from one trace (a pre-equilibration's steady
    # state is solved once, not again for the tangents); for a DAE, the algebraic part
    # is the consistent initialisation's, not the guess's
    y0, Y0 = ld_jvp(x0_of, (theta,), (Ms,))
    z0, unravel = ravel_pytree(first if dae else y0)
    z0 = z0.astype(theta.dtype)
    Z0 = jnp.concatenate([a.reshape(-1, Ms.shape[1]) for a in jax.tree.leaves(Y0)])

    def f(t, z, tt):
        return ravel_pytree(base_vf(t, unravel(z), view(tt)))[0].astype(z.dtype)

    def vf(t, state, args):
        z, Z = state
        tt, Ms_ = args
        return ld_jvp(lambda zz, pp: f(t, zz, pp), (z, tt), (Z, Ms_))

    sparse = with_sparsity(integrator.solver, None if dae else model.jacobian_sparsity())

    def run(t0, t1, y_start, ts, event):
        solver = _staggered(sparse, lambda t, z, args: f(t, z, args[0]))
        controller = _controller(model, integrator, th, f, z0, theta, ts, active, control)
        adjoint = diffrax.RecursiveCheckpointAdjoint()
        return integrate(integrator, diffrax.ODETerm(vf), solver, t0, t1, y_start, ts,
                         (theta, Ms), controller, adjoint, event)  # fmt: skip

    def g(i, t, zz, pp):
        return ravel_pytree(model.apply_event(i, t, unravel(zz), view(pp)))[0].astype(zz.dtype)

    def jump(i, t, state):
        return ld_jvp(lambda zz, pp: g(i, t, zz, pp), (state[0], theta), (state[1], Ms))

    def trigger(t, zz, pp):
        h = model.event_triggers(t, unravel(zz), view(pp))
        return None if h is None else jnp.atleast_1d(jnp.asarray(h, dtype=zz.dtype))

    def fired(j, t, before, after, tau_theta=None):
        return _event_time_term(f, g, trigger, theta, Ms, n_timed, j, t, before, after,
                                tau_theta)  # fmt: skip

    timed = None if dae else model.event_times(th)
    n_timed = 0 if timed is None else int(jnp.size(timed))
    has_triggers = not dae and trigger(jnp.asarray(model.t0, z0.dtype), z0, theta) is not None
    seg = in_segments(
        model,
        th,
        (z0, Z0),
        times,
        run,
        jump,
        trigger=(lambda t, state: trigger(t, state[0], theta)) if has_triggers else None,
        field=lambda t, state: vf(t, state, (theta, Ms)),
        fired=fired,
    )
    return _outputs(model, integrator, unravel, dae, theta, Ms, c, times, seg, observed, init_ok)


def _outputs(model, integrator, unravel, dae, theta, Ms, c, times, seg, observed, init_ok):
    """`_solve_equations`' result from the solved segments `seg`: the flat outputs at
    `times`, their LD-derivatives (the column scaling `c` undone) and the `Solved`
    record (finite where `observed`)."""
    zs, Zs = seg.ys

    def observe(t, z, Z):
        return _observe(model, integrator, unravel, dae, theta, Ms, t, z, Z)

    ys, Ys, states = jax.vmap(observe)(times, zs, Zs)
    Y = (Ys / c).reshape(-1, Ms.shape[1])
    if dae:
        states = (jax.vmap(lambda z: unravel(z)[0])(zs), states)
    else:
        states = jax.vmap(unravel)(zs)
    free = unobserved(observed, ys)
    finite_Y = jnp.isfinite(Y) | free.reshape(-1)[:, None]
    record = solved(states, ys, seg, init_ok, jnp.all(jnp.isfinite(ys) | free) & jnp.all(finite_Y))
    return record.ys.reshape(-1), Y, record


class SensitivityEquations(AbstractSensitivityMethod):
    """The sensitivity system integrated together with the state, so that the step-size
    controller bounds the error of the sensitivities too (the default). With
    LD-derivatives for nonsmooth models (Abdelfattah et al. 2024, Proposition 1); for
    implicit solvers the Newton matrix of the state is factorized once per step and
    shared by all parameter directions. The sensitivities are then accurate to a few
    times `rtol`, also at kinks of `nabs`/`nmax`/`nmin`/`nmid`.

    `error_control=False` leaves the sensitivities out of the error test (CVODES's
    default, `errconS = SUNFALSE`): they ride on the steps the state alone needs, so
    their error is not bounded by `rtol`. On the E. coli model that is 665 steps instead
    of 1,778 and a third of the time, with errors of 1e-7 of a column against 1e-9 at
    `rtol=1e-7`. A fit's Jacobians between its steps are computed so (they only steer
    the steps); its final Jacobian, and every `ji.sensitivity`, with the integrator's
    own setting."""

    error_control: bool = eqx.field(default=True, static=True)

    def forward(self, model, theta, times, integrator, M, observed=None):
        return _solve_equations(model, theta, times, integrator, M, observed, self.error_control)

    def steering(self) -> "SensitivityEquations":
        return SensitivityEquations(error_control=False)


class DifferentiateSolver(AbstractSensitivityMethod):
    """Forward-mode differentiation of the discretised solve (`jax.jvp` through
    `diffrax.diffeqsolve` with `adjoint=diffrax.ForwardMode()`): the exact derivative of
    the numerical solution, whose step sizes the sensitivities do not influence. Often
    a little faster; its error is not controlled (at a kink it can stay at 1e-5 whatever
    `rtol`)."""

    def forward(self, model, theta, times, integrator, M, observed=None):
        def f(th):
            solved = solve(model, th, times, integrator, diffrax.ForwardMode(), observed)
            return solved.ys.reshape(-1), solved

        return ld_jvp(f, (theta,), (M,), has_aux=True)


def sensitivity_method(integrator: Integrator) -> AbstractSensitivityMethod:
    """The integrator's sensitivity method (`None`: the sensitivity equations)."""
    method = integrator.sensitivity
    return SensitivityEquations() if method is None else method


def forward_sensitivities(
    model: AbstractModel, theta, times, integrator: Integrator, M, observed=None
):
    """The outputs `y` (flat, time-major), their LD-derivatives `Y = y'(theta; M)` of
    shape `(rows, k)`, and the `Solved` record, by the integrator's sensitivity method
    (a static model's outputs are differentiated: it has no solve to integrate with).
    `observed` (`(n, outputs)`): the outputs that must be finite (default all)."""
    method = sensitivity_method(integrator)
    if isinstance(model, AlgebraicModel):
        method = DifferentiateSolver()
    return method.forward(model, theta, times, integrator, M, observed)


def accuracy(model: AbstractModel, integrator: Integrator, dtype) -> float:
    """The relative accuracy a sensitivity matrix is taken to have: the solver's
    `global_error` times `rtol` (10 by default: local error control at `rtol` gives
    global errors of a few times `rtol`; `ji.BDF`'s are larger), never below `100 eps`;
    `100 eps` for a static model. A method of low order `q` (`ji.BDF(max_order=q)`)
    is not tolerance-proportional: steps of a local error `rtol` give a global one of
    order `rtol^(q / (q + 1))` (error per step, Hairer, Norsett and Wanner, I, II.4),
    taken where it is larger (`max_order=1` at rtol 1e-8: 1e-4 where 100 rtol claimed
    1e-6, below backward Euler's error; tests/solve/test_bdf.py)."""
    floor = 100.0 * float(jnp.finfo(dtype).eps)
    if isinstance(model, AlgebraicModel):
        return floor
    rtol = float(integrator.rtol)
    factor = float(getattr(integrator.solver, "global_error", 10.0))
    claim = factor * rtol
    order = getattr(integrator.solver, "max_order", None)
    if isinstance(order, int) and order >= 1:
        claim = max(claim, rtol ** (order / (order + 1)))
    return max(claim, floor)
