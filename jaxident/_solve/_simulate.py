"""Integration of models with diffrax."""

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, PyTree

from .._model._base import (
    AbstractModel,
    AlgebraicModel,
    DAEModel,
    Integrator,
    ODEModel,
    state_scale,
)
from .._model._checks import check_model, check_theta, check_times
from .._model._dae import consistent_initial_values, dae_outputs, dae_vector_field
from .._model._transforms import time_warped
from .._runtime._host import diagnosed, run_kernel
from .._runtime._results import (
    checked,
    first_failure,
    items as result_items,
    names as result_names,
    promoted,
    RESULTS,
    status_codes,
    succeeded,
)
from ._bdf import BDF, diffrax_solver, with_sparsity
from ._rosenbrock import traced_once


class Trajectory(eqx.Module):
    """A simulated trajectory.

    **Fields:**

    - `ts`: the observation times, shape `(n,)`.
    - `xs`: the states at `ts` (a PyTree with leading axis `n`).
    - `ys`: the outputs at `ts`, shape `(n, n_outputs)`.
    - `result`: the status (`ji.RESULTS`; always `successful` unless `throw=False`:
      failed solves then have NaN `xs` and `ys`); `ok` is `result == successful`.
    - `num_steps`: accepted solver steps.
    """

    ts: Float[Array, " n"]
    xs: PyTree[Array]
    ys: Float[Array, "n m"]
    result: RESULTS
    num_steps: Array

    @property
    def ok(self) -> Bool[ArrayLike, "*batch"]:
        """Whether the solve succeeded with finite outputs."""
        return succeeded(self.result)

    def to_dict(self) -> dict:
        return {
            "ts": np.asarray(self.ts).tolist(),
            "xs": jax.tree.map(lambda x: np.asarray(x).tolist(), self.xs),
            "ys": np.asarray(self.ys).tolist(),
            "ok": np.asarray(self.ok).tolist(),
            "result": result_names(self.result),
            "num_steps": np.asarray(self.num_steps).tolist(),
        }

    def __repr__(self) -> str:
        return (
            f"Trajectory(times={self.ts.shape[-1]}, outputs={self.ys.shape[-1]}, "
            f"ok={np.asarray(self.ok).tolist()}, steps={np.asarray(self.num_steps).tolist()})"
        )


def _advice(solver) -> str:
    """What to try after a solver failure: a stiff solver only where this one is not;
    in single precision, tolerances it can meet."""
    stiff = isinstance(solver, diffrax.AbstractImplicitSolver) or getattr(
        solver, "steps_onto_outputs", False
    )  # (ji.Rodas4 and ji.BDF: linearly implicit, stiff)
    if not jax.config.jax_enable_x64:
        return (
            "In single precision (float32, eps 1.2e-7) an rtol below about 1e-5 cannot be "
            "met on a stiff problem: enable float64 (jax.config.update('jax_enable_x64', "
            "True), as jaxident does on import unless told not to) or loosen rtol to 1e-5."
        )
    if stiff:
        return (
            "Check the parameter values (a sweep reports such samples as failures instead), "
            "loosen rtol/atol, or raise Integrator(max_steps=...)."
        )
    return (
        "Check the parameter values (a sweep reports such samples as failures instead), "
        "loosen rtol/atol, raise Integrator(max_steps=...), or use a stiff solver such as "
        "ji.Rodas4() or diffrax.Kvaerno5()."
    )


def failure_messages(name: str, dae: bool = False, integrator=None) -> list[str]:
    """The message for each `RESULTS` code of a failed solve of the model called `name`:
    the status's own text with what to try (`_advice`) and, for a DAE, where the
    algebraic solve may have failed; index 0 (`successful`) is unused."""
    solver = None if integrator is None else integrator.solver
    special = [
        (RESULTS.nonfinite, (
            "the right-hand side returned NaN or inf, and ever smaller steps did not help. "
            "Check the model equations for divisions by zero, square roots or logarithms "
            "of negative numbers, or overflow, at these parameter values (a sweep reports "
            "such samples as failures instead)."
        )),
        (CASCADE, (
            "events trigger each other without end at one time: each event's assignments "
            "make another event's trigger true (more than twice as many events as there "
            "are triggers fired at one time; SBML simulators refuse such a cascade too). "
            "Check the events' triggers and assignments."
        )),
        (RESULTS.dt_min_reached, (
            "the step size collapsed: the solution has a singularity (it blows up in "
            "finite time, or the right-hand side is not defined beyond some time). Check "
            "the model equations and the parameter values (a sweep reports such samples as "
            "failures instead)."
        )),
    ]  # fmt: skip
    special = {int(status_codes(promoted(k))): v for k, v in special}
    out = [""] * len(RESULTS)
    solvers = result_items(diffrax.RESULTS)
    for key, item in result_items().items():
        i = int(status_codes(item))
        m = RESULTS[item] or "the solver failed"
        if key not in solvers:  # ours: what the message says
            out[i] = m
            continue
        text = special.get(i) or f"{m} {_advice(solver)}"
        out[i] = f"Integrating {name} failed: {text}" + (
            " For a DAE, the Newton solve of the algebraic equations may have failed "
            "along the way: g_w singular (loss of index 1) or no solution nearby."
            if dae
            else ""
        )
    out[int(status_codes(RESULTS.inconsistent_initial_values))] = (
        f"{name}: no consistent initial values for the algebraic variables: the Newton "
        "solve of g(t0, x0, w, theta) = 0 from initial_algebraic_guess did not converge, or "
        "g_w is singular there (the DAE is not index 1 at t0). Check the guess and the "
        "parameter values."
    )
    out[int(status_codes(RESULTS.nonfinite_output))] = (
        f"{name} produced NaN or inf outputs (the solver itself succeeded): check the "
        "model equations and the parameter values for divisions by zero, logarithms or "
        "square roots of negative numbers"
        + (", or the algebraic solve at an output time." if dae else ".")
    )
    return out


@eqx.filter_jit
def _stopped_at(model, theta, t1, integrator):
    th = model.parameters.view(theta)
    with traced_once(diffrax_solver(integrator.solver)) as solver:
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, x, args: model.vector_field(t, x, args)),
            solver,
            t0=model.t0,
            t1=t1,
            dt0=integrator.dt0,
            y0=model.initial_state(th),
            args=th,
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=integrator.controller(_switching_times(model, th)),
            max_steps=integrator.max_steps,
            throw=False,
        )
    t = sol.ts[-1]
    x = jax.tree.map(lambda a: a[-1], sol.ys)
    return t, x, model.vector_field(t, x, th), sol.result == diffrax.RESULTS.successful


def solve_failure_point(model, theta=None, times=None, *args, integrator=None, **kwargs) -> str:
    """Where a failed solve of an ODE model stopped, and which state derivatives are
    NaN or inf there: a sentence for the error message (computed on the host, after the
    compiled check failed)."""
    if isinstance(model, (DAEModel, AlgebraicModel)) or not isinstance(model, AbstractModel):
        return ""
    theta = check_theta(model, theta)
    times = check_times(model, times)
    integrator = model.integrator if integrator is None else integrator
    t, x, f, success = _stopped_at(model, theta, times[-1], integrator)
    if bool(success):
        return ""
    f = np.ravel(np.asarray(jax.flatten_util.ravel_pytree(f)[0]))
    names = model.state_names or tuple(f"x[{i}]" for i in range(f.size))
    bad = [names[i] if i < len(names) else f"x[{i}]" for i in np.flatnonzero(~np.isfinite(f))]
    text = f"The solve stopped at t = {float(t):.10g} (of {float(times[-1]):g})"
    if bad:
        return f"{text}, where the right-hand side is NaN or inf for {bad}."
    return f"{text}."


def _switching_times(model, th):
    fn = getattr(model, "switching_times", None)
    ts = None if fn is None else fn(th)
    if ts is None:
        return None
    # where the steps end is not differentiated: a moving switch is `TimeWarped`'s
    return jax.lax.stop_gradient(jnp.sort(jnp.atleast_1d(jnp.asarray(ts, dtype=float))))


class Segments(NamedTuple):
    """What `in_segments` returns: the states at the observation times, the worst
    result of the segments' solves and their accepted steps."""

    ys: Any
    result: Any
    num_steps: Array


def in_segments(model, th, y0, times, run, jump, trigger=None, field=None, fired=None) -> Segments:
    """Integrate from `model.t0` to `times[-1]` with the model's events between: `run(t0,
    t1, y0, ts, event)` solves one segment (a `diffrax.Solution` saved at `ts` and at
    `t1`, stopped by the `diffrax.Event` `event` when one is given), and `jump(i, t, y)`
    applies event `i` at its time `t`. The timed events fire in the order of their
    times (ties in the model's order); an observation at an event's time sees the state
    after it. Timed event times are not differentiated here: their tangents come from
    `TimeWarped`, whose knots they are, so the jump of the sensitivities at an event is
    the derivative of `jump` there (Proof: in the warped time `X = S + f w_theta`, and
    `S+ = g_x S- + g_theta + (g_x f- - f+) tau_theta` becomes `X+ = g_x X- + g_theta`).

    `trigger(t, y)` gives the model's event triggers (`ODEModel.event_triggers`) for a
    model that has them, `field(t, y)` the right-hand side; each timed segment is then
    solved by `_triggered`, and `fired(j, t, y_before, y_after)` completes the state
    after trigger `j` fired (the sensitivity equations add the event time's term there;
    `None`: nothing to add)."""
    events = model.event_times(th) if isinstance(model, ODEModel) else None
    n = 0 if events is None else int(jnp.size(events))
    t0 = jnp.asarray(model.t0, dtype=times.dtype)
    h0 = None if trigger is None else trigger(t0, y0)
    m = 0 if h0 is None else int(jnp.size(h0))
    if m == 0:
        span = functools.partial(_plain_span, run, times)
    else:
        span = _triggered(model, times, run, jump, trigger, field, fired, n, m)
    if events is None:
        ys, _, result, steps, _ = span(t0, times[-1], y0, None)
        return Segments(ys, result, steps)
    tau = jax.lax.stop_gradient(jnp.atleast_1d(jnp.asarray(events, dtype=times.dtype)))
    order = jnp.argsort(tau, stable=True)
    end_all = jnp.maximum(times[-1], t0)
    fires_at_t0 = jnp.asarray(model.fires_at_t0[:n], dtype=bool)
    start, y, ys, armed = t0, y0, None, None
    result, steps = diffrax.RESULTS.successful, jnp.asarray(0)
    for j in range(n + 1):
        end = jnp.clip(tau[order[j]], start, end_all) if j < n else end_all
        # a segment stops one ulp before its event, so that no stage of its last step
        # sees the right-hand side (or `TimeWarped`'s slope) after the event
        stop = jnp.maximum(jnp.nextafter(end, start), start) if j < n else end
        seg, y, res, nsteps, armed = span(start, stop, y, armed)
        inside = (times >= start) & (times < end) if j < n else times >= start
        ys = seg if ys is None else _select(inside, seg, ys)
        result = diffrax.RESULTS.where(result == diffrax.RESULTS.successful, res, result)
        steps = steps + nsteps
        if j < n:
            i = order[j]
            fire = jnp.where(tau[i] > t0, tau[i] <= end_all, fires_at_t0[i])
            branches = [functools.partial(jump, k, end) for k in range(n)]
            y = _select(fire, jax.lax.switch(i, branches, y), y)
        start = end
    return Segments(ys, result, steps)


def _triggers(fn, t, y, th):
    """A model's event triggers as a float vector, or `None`."""
    h = fn(t, y, th)
    return None if h is None else jnp.atleast_1d(jnp.asarray(h, dtype=float))


def _plain_span(run, times, start, stop, y, armed):
    """`(ys at every time, y at stop, result, steps, None)` of one solve from `start` to
    `stop` (rows of `ys` outside the span are the clipped times')."""
    sol = run(start, stop, y, jnp.clip(times, start, stop), None)
    ys = jax.tree.map(lambda a: a[:-1], sol.ys)
    y_end = jax.tree.map(lambda a: a[-1], sol.ys)
    return ys, y_end, sol.result, sol.stats["num_accepted_steps"], None


# per timed segment, at most this many trigger events (firings and re-armings) before
# the solve is reported as failed (`max_steps_reached`); each takes up to 10 solves of
# the state machine in `_triggered`
MAX_TRIGGER_EVENTS = 8
# events that fire at one time, each made true by the one before (a cascade), beyond the
# triggers' number twice over: an endless cascade, reported as `CASCADE`
_CASCADE_SLACK = 8
# diffrax gives this code of lineax's iterative solvers for no solve of ours: here it
# says that events triggered each other without end at one time
CASCADE = diffrax.RESULTS.stagnation
_POLISH = 8  # Newton steps on an event time at most
_ROOT = optx.Newton(rtol=1e-10, atol=1e-10)


class _Machine(NamedTuple):
    s: Any  # the time reached
    y: Any  # the state there
    back: Any  # (time, state) where mode 1 started: a polish step back solves from there
    ys: Any  # the observations so far
    armed: Any  # per trigger: watching its rise (else its fall, to re-arm)
    mode: Any  # 0 watch, 1 solve to the located time, 2 polish it
    tau: Any  # the located time
    which: Any  # the trigger at tau
    polish: Any  # Newton steps taken
    cascade: Any  # events fired at once at this time, each made true by a jump
    tau_dir: Any  # the tangent of the time of the last triggered event (`fired`'s)
    done: Any
    result: Any
    steps: Any


class _Events(NamedTuple):
    """A model's `m` state-triggered events as the turns of `_triggered` see them: the
    span solver `run`, the jumps (`jump`, and `fired` with the event time's tangent),
    the triggers `trigger(t, y)` (fire on a rise through 0) and the vector field."""

    times: Any
    run: Any
    jump: Any
    trigger: Any
    field: Any
    fired: Any
    n_timed: int
    m: int

    @property
    def endless(self) -> int:
        return 2 * self.m + _CASCADE_SLACK

    def fire(self, j, t, y, tau_dir):
        """Trigger `j`'s jump at `t`, and the tangent of `t` (`fired`'s, from the
        trigger's root where `tau_dir` is None; a cascade's is the event's before)."""
        after = self.jump(self.n_timed + j, t, y)
        return (after, tau_dir) if self.fired is None else self.fired(j, t, y, after, tau_dir)

    def fire_which(self, which, t, y, tau_dir):
        """`fire` for the trigger `which` (traced)."""
        own = [functools.partial(self.fire, j, tau_dir=tau_dir) for j in range(self.m)]
        return jax.lax.switch(which, own, t, y)

    def rearmed(self, armed, fired, t, before, after):
        """The arming after trigger `fired` fired at `t` (`before` to `after`): every
        trigger the jump turned false is armed again (the fired one included: `x = x - D`
        on `x > c`); the fired one is otherwise disarmed until it turns false."""
        h_b, h_a = self.trigger(t, before), self.trigger(t, after)
        turned_false = (h_a < 0) & (h_a - h_b < -1e-12 * (1 + jnp.abs(h_b) + jnp.abs(h_a)))
        return (armed | turned_false).at[fired].set(turned_false[fired])


class _Plan(NamedTuple):
    """What a turn of `_triggered` does: watch the triggers up to `stop`, fire a
    cascade, or solve to `t1` from `(start, y_start)` (to a located time, or a Newton
    step `dt` on it while `polishing`); `f` is the vector field at the machine's state."""

    watch: Any
    cascade: Any
    runaway: Any
    pending: Any
    f: Any
    dt: Any
    polishing: Any
    t1: Any
    start: Any
    y_start: Any


def _plan(ev: _Events, c: _Machine, stop) -> _Plan:
    idle = (c.mode == 0) & ~c.done
    # an armed trigger that a jump made true fires at once, at the same time, the first
    # in the model's order (the SBML import orders them by priority)
    pending = c.armed & (ev.trigger(c.s, c.y) > 0)
    cascade = idle & jnp.any(pending)
    runaway = cascade & (c.cascade >= ev.endless)
    cascade = cascade & ~runaway
    watch = idle & ~cascade & ~runaway
    # mode 2: the Newton step on the trigger at tau
    f = ev.field(c.s, c.y)
    rate = (jnp.ones_like(c.s), f)
    h, dh = jax.jvp(lambda tt, yy: ev.trigger(tt, yy)[c.which], (c.s, c.y), rate)
    dt = jnp.where((c.mode == 2) & ~c.done, -h / jnp.where(dh != 0, dh, 1.0), 0.0)
    converged = jnp.abs(dt) <= 1e-12 * (1 + jnp.abs(c.s))
    polishing = (c.mode == 2) & ~c.done & ~converged & (c.polish < _POLISH)
    t1 = jnp.where(watch, stop, c.s)
    t1 = jnp.where((c.mode == 1) & ~c.done, c.tau, t1)
    t1 = jnp.where(polishing, c.s + jax.lax.stop_gradient(dt), t1)
    # a step back: again from where mode 1 started
    back = polishing & (dt < 0)
    start = jnp.where(back, c.back[0], c.s)
    y_start = _select(back, c.back[1], c.y)
    return _Plan(watch, cascade, runaway, pending, f, dt, polishing, t1, start, y_start)


def _solve_watching(ev: _Events, c: _Machine, plan: _Plan):
    """The turn's solve, watching each armed trigger's rise (and each fired one's fall)
    where it watches: the solution, and `(t_end, y_end)` where it ended."""

    def cond(j):
        def fn(t, y, args, **kwargs):  # (diffrax passes them by name)
            hj = ev.trigger(t, y)[j]
            return jnp.where(plan.watch, jnp.where(c.armed[j], hj, -hj), -1.0)

        return fn

    event = diffrax.Event([cond(j) for j in range(ev.m)], direction=True, root_finder=_ROOT)
    times = jnp.clip(ev.times, plan.start, plan.t1)
    sol = ev.run(plan.start, plan.t1, plan.y_start, times, event)
    # the end (t1, or the event's time): the last entry saved (after an event, the times
    # not reached are inf)
    last = jnp.sum(jnp.isfinite(sol.ts)) - 1
    return sol, sol.ts[last], jax.tree.map(lambda a: a[last], sol.ys)


def _turn(ev: _Events, c: _Machine, stop) -> _Machine:
    """One turn of `_triggered`'s state machine."""
    plan = _plan(ev, c, stop)
    watch, cascade, live = plan.watch, plan.cascade, ~c.done
    sol, t_end, y_end = _solve_watching(ev, c, plan)
    mask = jnp.stack([jnp.asarray(e) for e in jax.tree.leaves(sol.event_mask)]) & watch
    hit = jnp.any(mask)
    failed = ~diffrax.is_okay(sol.result) & live  # (an event is okay)
    # observations: the rest of the span after a watched solve without an event; those
    # before tau from mode 1
    seg = jax.tree.map(lambda a: a[:-1], sol.ys)
    rest = watch & ~hit
    ys = _select((ev.times >= c.s) & rest, seg, c.ys)
    ys = _select((ev.times >= c.s) & (ev.times < c.tau) & (c.mode == 1) & live, seg, ys)
    which = jnp.where(hit, jnp.argmax(mask), c.which)
    which = jnp.where(cascade, jnp.argmax(plan.pending), which)
    rearm = (c.mode == 1) & live & ~c.armed[which]
    finish = (c.mode == 2) & live & ~plan.polishing
    # the fired state, at the polished time with its derivative kept
    move = plan.dt - jax.lax.stop_gradient(plan.dt)
    s_fin = c.s + move
    y_fin = jax.tree.map(lambda a, v: a + v * move, c.y, plan.f)
    y_fired, tau_fired = ev.fire_which(which, s_fin, y_fin, None)
    # a cascade's time is the event's that started it, and so is its tangent
    y_cascade, _ = ev.fire_which(which, c.s, c.y, c.tau_dir)
    # where the machine goes
    s_next = jnp.where(watch | c.done, c.s, t_end)
    s_next = jnp.where(finish, s_fin, s_next)
    s_next = jnp.where(rest, t_end, s_next)
    y_next = _select(watch | c.done, c.y, y_end)
    y_next = _select(rest, y_end, y_next)
    y_next = _select(finish, y_fired, y_next)
    y_next = _select(cascade, y_cascade, y_next)
    mode = jnp.where(hit, 1, c.mode)
    mode = jnp.where((c.mode == 1) & live, jnp.where(rearm, 0, 2), mode)
    mode = jnp.where(finish, 0, mode)
    armed = jnp.where(rearm, c.armed.at[which].set(True), c.armed)
    armed = jnp.where(finish, ev.rearmed(c.armed, which, s_fin, y_fin, y_fired), armed)
    armed = jnp.where(cascade, ev.rearmed(c.armed, which, c.s, c.y, y_cascade), armed)
    return _Machine(
        s=s_next,
        y=y_next,
        back=jax.tree.map(lambda a, b: jnp.where(hit, a, b), (c.s, c.y), c.back),
        ys=ys,
        armed=armed,
        mode=mode,
        tau=jnp.where(hit, jax.lax.stop_gradient(t_end), c.tau),
        which=which,
        polish=jnp.where(plan.polishing, c.polish + 1, 0),
        cascade=jnp.where(cascade, c.cascade + 1, jnp.where(watch, 0, c.cascade)),
        tau_dir=jax.tree.map(lambda a, b: jnp.where(finish, a, b), tau_fired, c.tau_dir),
        done=c.done | rest | failed | plan.runaway,
        result=diffrax.RESULTS.where(
            plan.runaway, CASCADE, diffrax.RESULTS.where(failed, sol.result, c.result)
        ),
        steps=c.steps + jnp.where(c.done, 0, sol.stats["num_accepted_steps"]),
    )


def _triggered(model, times, run, jump, trigger, field, fired, n_timed, m):
    """The span solver of `in_segments` for a model with `m` event triggers: a state
    machine (one `lax.scan`, one compiled solve per turn, `_turn`) that, from `start`,

    0. solves towards `stop` watching the triggers (a `diffrax.Event` on each armed
       trigger's rise, and on each fired trigger's fall, which re-arms it); without an
       event the span is done;
    1. at an event, solves again from the same start to its located time `tau` without
       watching, stepping onto it: `tau` comes from the solver's dense output (linear
       for `Rodas4`), the state there from its steps; a re-arming ends here;
    2. polishes `tau` by Newton steps `dt = -h / (h_t + h_x f)` on the trigger, each a
       short solve (forward: a step back solves again from where step 1 started),
       until `|dt| <= 1e-12 (1 + |tau|)`; then applies the event (`jump`,
       then `fired`) and disarms the trigger. The last Newton step's derivative is kept
       (`tau + dt - stop_gradient(dt)`, the state moved by `f` times it), so that a
       solve differentiated by JAX gets the event time's tangent.

    Observations before `tau` are read from step 1, those after it from later solves.
    Returns `(ys, y at stop, result, steps)`."""
    ev = _Events(times, run, jump, trigger, field, fired, n_timed, m)
    fires_at_t0 = jnp.asarray(model.fires_at_t0[n_timed:], dtype=bool)
    turns = (2 + _POLISH) * MAX_TRIGGER_EVENTS + ev.endless + 2
    t_model0 = jnp.asarray(model.t0, times.dtype)

    def span(start, stop, y0, armed_before):
        y = y0
        if armed_before is None:  # the first span, from t0
            armed = trigger(start, y0) < 0
            # a trigger true at t0 whose initialValue is false fires there, before any
            # solve (at a fixed time: no event time's term)
            now = (start == t_model0) & ~armed & fires_at_t0
            for j in range(m):
                y_j = jump(n_timed + j, start, y)
                armed = jnp.where(now[j], ev.rearmed(armed, j, start, y, y_j), armed)
                y = _select(now[j], y_j, y)
        else:  # after a timed event: the triggers it turned false are armed again
            armed = armed_before | (trigger(start, y0) < 0)
        # a cascade after t0 or a timed event takes no time term (a fixed, or warped, time)
        shape = jax.eval_shape(lambda: ev.fire(0, start, y, None)[1])
        tau_none = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shape)
        ys = jax.tree.map(lambda a: jnp.zeros((times.shape[0], *a.shape), a.dtype), y)
        c = _Machine(
            s=start, y=y, back=(start, y), ys=ys, armed=armed, mode=jnp.asarray(0), tau=start,
            which=jnp.asarray(0), polish=jnp.asarray(0), cascade=jnp.asarray(0),
            tau_dir=tau_none, done=jnp.asarray(False),
            result=diffrax.RESULTS.successful, steps=jnp.asarray(0),
        )  # fmt: skip
        c, _ = jax.lax.scan(lambda c, _: (_turn(ev, c, stop), None), c, None, turns)
        result = diffrax.RESULTS.where(c.done, c.result, diffrax.RESULTS.max_steps_reached)
        return c.ys, c.y, result, c.steps, c.armed

    return span


def _select(where, new, old):
    """`new` where `where` (a scalar, or one flag per leading row), else `old`."""
    return jax.tree.map(
        lambda a, b: jnp.where(
            jnp.reshape(where, where.shape + (1,) * (a.ndim - where.ndim)), a, b
        ),
        new,
        old,
    )


class Solved(NamedTuple):
    """A solve's states and outputs (NaN where it failed), its status (`RESULTS`: the
    solver's own, `inconsistent_initial_values` for a DAE, `nonfinite_output`) and its
    accepted steps."""

    xs: Any
    ys: Array
    result: RESULTS
    num_steps: Array

    @property
    def ok(self):
        return succeeded(self.result)


def first_state(model: AbstractModel, th, integrator: Integrator):
    """`(y0, vector_field, init_ok)` of a model's solve: for a `DAEModel` the consistent
    initial values `(x0, w0)` and the index-1 system's field; for an ODE its initial
    state and field."""
    if isinstance(model, DAEModel):
        x0, w0, init_ok = consistent_initial_values(model, th, integrator)
        return (x0, w0), dae_vector_field(model, integrator), init_ok
    field = lambda t, x, args: model.vector_field(t, x, args)  # noqa: E731
    return model.initial_state(th), field, jnp.asarray(True)


def integrate(integrator: Integrator, term, solver, t0, t1, y_start, ts, args, controller,
              adjoint, event):  # fmt: skip
    """One segment's `diffrax.diffeqsolve`, saved at `ts` and at `t1`, failures returned
    (`throw=False`): the call every solve path makes. A span solver (`ji.BDF`) integrates
    a segment without state-triggered events itself."""
    if isinstance(solver, BDF) and event is None:
        return solver.solve_span(term.vf, t0, t1, y_start, ts, args, controller,
                                 integrator.max_steps, integrator.dt0)  # fmt: skip
    with traced_once(diffrax_solver(solver)) as solver:
        return diffrax.diffeqsolve(
            term,
            solver,
            t0=t0,
            t1=t1,
            dt0=integrator.dt0,
            y0=y_start,
            args=args,
            saveat=diffrax.SaveAt(ts=ts, t1=True),
            stepsize_controller=controller,
            adjoint=adjoint,
            event=event,
            max_steps=integrator.max_steps,
            throw=False,
        )


def solved(states, ys, seg: Segments, init_ok, finite) -> Solved:
    """The record of a solve: successful where the integration succeeded, the initial
    values were consistent and what must be finite is (`finite`), the states and
    outputs NaN elsewhere."""
    result = RESULTS.where(init_ok, promoted(seg.result), RESULTS.inconsistent_initial_values)
    result = checked(result, finite, RESULTS.nonfinite_output)
    ok = result == RESULTS.successful
    ys = jnp.where(ok, ys, jnp.asarray(jnp.nan, ys.dtype))
    states = jax.tree.map(lambda x: jnp.where(ok, x, jnp.asarray(jnp.nan, x.dtype)), states)
    return Solved(states, ys, result, seg.num_steps)


def solve(
    model: AbstractModel,
    theta: Array,
    times: Array,
    integrator: Integrator,
    adjoint: diffrax.AbstractAdjoint,
    observed: Array | None = None,
) -> Solved:
    """Integrate and observe, with NaN in `xs`/`ys` where the solve failed. No checks are
    raised here (see `raise_if_failed`). For a `DAEModel`, `xs` is `(x, w)`. `observed`
    (`(n, outputs)`): the outputs that must be finite (default all; an output nobody
    measured may be NaN, e.g. a ratio 0/0 at t0, without failing the solve)."""
    th = model.parameters.view(theta)
    if isinstance(model, AlgebraicModel):
        return _solve_algebraic(model, th, times)
    model = time_warped(model, th, jnp.max(times))
    y0, field, init_ok = first_state(model, th, integrator)
    term = diffrax.ODETerm(field)
    jumps = _switching_times(model, th)

    solver = with_sparsity(integrator.solver, model.jacobian_sparsity())

    scale = jax.tree.map(state_scale, y0)

    def run(t0, t1, y_start, ts, event):
        controller = integrator.controller(jumps, times=ts, scale=scale)
        return integrate(integrator, term, solver, t0, t1, y_start, ts, th, controller,
                         adjoint, event)  # fmt: skip

    def jump(i, t, y):
        return model.apply_event(i, t, y, th)

    triggers = model.event_triggers if isinstance(model, ODEModel) else None
    seg = in_segments(
        model,
        th,
        y0,
        times,
        run,
        jump,
        trigger=None if triggers is None else (lambda t, y: _triggers(triggers, t, y, th)),
        field=lambda t, y: term.vf(t, y, th),
    )
    if isinstance(model, DAEModel):
        xs, w_guess = seg.ys
        ys, ws, alg_ok = dae_outputs(model, times, xs, w_guess, th, integrator)
        states = (xs, ws)
        alg_ok = jnp.all(alg_ok)
    else:
        ys = jax.vmap(lambda t, x: jnp.atleast_1d(model.output(t, x, th)))(times, seg.ys)
        states = seg.ys
        alg_ok = jnp.asarray(True)
    finite = jnp.all(jnp.isfinite(ys) | unobserved(observed, ys)) & alg_ok
    return solved(states, ys, seg, init_ok, finite)


def unobserved(observed, ys):
    """Where an output need not be finite: nowhere by default."""
    if observed is None:
        return jnp.zeros(ys.shape, bool)
    return ~jnp.reshape(observed, ys.shape)


def _solve_algebraic(model: AlgebraicModel, th, times: Array) -> Solved:
    u = model.conditions[times.astype(jnp.int32)]
    ys = jax.vmap(lambda ui: jnp.atleast_1d(model.response(ui, th)))(u)
    ok = jnp.all(jnp.isfinite(ys))
    ys = jnp.where(ok, ys, jnp.asarray(jnp.nan, ys.dtype))
    result = RESULTS.where(ok, RESULTS.successful, RESULTS.nonfinite_output)
    return Solved(ys, ys, result, jnp.asarray(0, jnp.int32))


def _messages(model, integrator=None) -> list[str]:
    """`failure_messages` for `model` (`integrator`: the one that solved, for the
    advice; default the model's)."""
    integrator = getattr(model, "integrator", None) if integrator is None else integrator
    return failure_messages(type(model).__name__, isinstance(model, DAEModel), integrator)


def raise_if_failed(model, x, solved: Solved, integrator=None):
    """Raise a clear message when the solve failed (compiled in: `eqx.error_if`)."""
    code = status_codes(solved.result)
    return eqx.branched_error_if(x, ~solved.ok, code, _messages(model, integrator))


def failure_message(model, solved: Solved, integrator=None) -> str | None:
    """The same message on the host, from a concrete status (or `None`)."""
    first = first_failure(solved.result)
    if bool(succeeded(first)):
        return None
    return _messages(model, integrator)[int(status_codes(first))]


def status(solved: Solved) -> Solved:
    """The status fields of a solve (what `failure_message` reads), without the data."""
    return solved._replace(xs=None, ys=None)


@eqx.filter_jit
def _simulate(model, theta, times, integrator, throw):
    solved = solve(model, theta, times, integrator, diffrax.RecursiveCheckpointAdjoint())
    ys = solved.ys
    if throw:  # (False, or the error mode: `run_kernel`)
        ys = raise_if_failed(model, ys, solved, integrator)
    traj = Trajectory(times, solved.xs, ys, solved.result, solved.num_steps)
    return traj, status(solved)


@diagnosed(solve_failure_point)
def simulate(
    model: AbstractModel,
    theta: ArrayLike | dict | Sequence | None = None,
    times: ArrayLike | Sequence | None = None,
    *,
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> Trajectory:
    """Integrate `model` at parameters `theta` and observe it at `times`.

    **Arguments:**

    - `model`: an `ODEModel`.
    - `theta`: parameter vector in the model's order, a `{name: value}` dict, or `None`
      for the nominal values.
    - `times`: observation times (default `model.times`), strictly increasing and not
      before `model.t0`.
    - `integrator`: an `Integrator` (default: the model's `integrator` class attribute).
    - `throw`: raise when the solve fails: by default on a concrete call; under `jit`,
      `vmap` or `ji.sweep` a failure is a flag (`ok`, NaN) unless `throw=True`;
      `False`: never.

    **Returns:** a `Trajectory`. Jittable, vmappable over `theta`, differentiable.

    **Raises:** `ValueError` for wrong shapes, unknown names and non-finite values;
    an `EquinoxRuntimeError` naming the solver failure (step cap reached, step size
    collapsed, NaN or inf) as `throw` says.
    """
    check_model(model)
    theta = check_theta(model, theta)
    times = check_times(model, times)
    integrator = model.integrator if integrator is None else integrator
    traj, _ = run_kernel(
        _simulate,
        model,
        theta,
        times,
        integrator,
        throw=throw,
        message=lambda out: failure_message(model, out[1], integrator),
    )
    return traj
