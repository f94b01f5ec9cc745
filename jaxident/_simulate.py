"""Integration of models with diffrax."""

from collections.abc import Sequence
from typing import Any, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PyTree

from ._context import resolve_throw
from ._dae import consistent_initial_values, dae_outputs, dae_vector_field
from ._model import AbstractModel, AlgebraicModel, DAEModel, Integrator


class Trajectory(eqx.Module):
    """A simulated trajectory.

    **Fields:**

    - `ts`: the observation times, shape `(n,)`.
    - `xs`: the states at `ts` (a PyTree with leading axis `n`).
    - `ys`: the outputs at `ts`, shape `(n, n_outputs)`.
    - `ok`: whether the solve succeeded with finite outputs (always `True` unless
      `throw=False`; failed solves then have NaN `xs` and `ys`).
    - `num_steps`: accepted solver steps.
    """

    ts: Float[Array, " n"]
    xs: PyTree[Array]
    ys: Float[Array, "n m"]
    ok: Bool[Array, ""]
    num_steps: Array

    def to_dict(self) -> dict:
        return {
            "ts": np.asarray(self.ts).tolist(),
            "xs": jax.tree.map(lambda x: np.asarray(x).tolist(), self.xs),
            "ys": np.asarray(self.ys).tolist(),
            "ok": np.asarray(self.ok).tolist(),
            "num_steps": np.asarray(self.num_steps).tolist(),
        }

    def __repr__(self) -> str:
        return (
            f"Trajectory(times={self.ts.shape[-1]}, outputs={self.ys.shape[-1]}, "
            f"ok={np.asarray(self.ok).tolist()}, steps={np.asarray(self.num_steps).tolist()})"
        )


def check_model(model) -> None:
    if not isinstance(model, AbstractModel):
        raise TypeError(
            "Expected a jaxident model (a subclass of ji.ODEModel or ji.DAEModel), got "
            f"{type(model).__name__}."
        )


def check_theta(model: AbstractModel, theta) -> Array:
    p = model.parameters.p
    if theta is None:
        return model.parameters.nominal
    if isinstance(theta, dict):
        unknown = [k for k in theta if k not in model.parameters.names]
        if unknown:
            model.parameters.index(unknown[0])  # raises with a suggestion
        missing = [n for n in model.parameters.names if n not in theta]
        if missing:
            raise ValueError(f"Parameter values missing for {missing}.")
        theta = jnp.stack([jnp.asarray(theta[n], float) for n in model.parameters.names])
    theta = jnp.asarray(theta)
    if theta.shape != (p,):
        raise ValueError(
            f"theta has shape {theta.shape}; {type(model).__name__} has {p} parameters "
            f"{list(model.parameters.names)}, so expected shape ({p},). For many parameter "
            "vectors use jax.vmap or ji.sweep."
        )
    if not jnp.issubdtype(theta.dtype, jnp.floating):
        theta = theta.astype(float)
    if not isinstance(theta, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(theta))):
        bad = [model.parameters.names[i] for i in np.flatnonzero(~np.isfinite(np.asarray(theta)))]
        raise ValueError(f"Non-finite parameter values for {bad}.")
    return theta


def check_times(model: AbstractModel, times) -> Array:
    times = model.times if times is None else jnp.asarray(times, dtype=float)
    if times.ndim != 1 or times.shape[0] == 0:
        raise ValueError(f"times must be a non-empty 1-D array, got shape {times.shape}.")
    if isinstance(model, AlgebraicModel) and not isinstance(times, jax.core.Tracer):
        t, n = np.asarray(times), model.conditions.shape[0]
        if np.any(t != np.round(t)) or np.any(t < 0) or np.any(t >= n):
            raise ValueError(
                f"{type(model).__name__} is an AlgebraicModel: `times` are experiment indices, "
                f"integers in [0, {n}); got {t.tolist()[:8]}{'...' if t.size > 8 else ''}."
            )
    if not isinstance(times, jax.core.Tracer) and not isinstance(model.t0, jax.core.Tracer):
        t = np.asarray(times)
        if not np.all(np.isfinite(t)):
            raise ValueError("times contains NaN or inf.")
        if np.any(np.diff(t) <= 0):
            raise ValueError("times must be strictly increasing.")
        if t[0] < float(model.t0):
            raise ValueError(
                f"The first time {t[0]:g} lies before the model's t0 = {float(model.t0):g}."
            )
        if t[-1] <= float(model.t0):
            raise ValueError(f"Need at least one time after t0 = {float(model.t0):g}.")
    return times


def n_outputs(model: AbstractModel, theta: Array) -> int:
    """The number of outputs of `model`, from its output function alone (tracing a
    whole solve to learn it costs seconds for a stiff model)."""
    th = model.parameters.view(theta)
    t0 = jnp.asarray(model.t0, dtype=float)

    def out(th):
        if isinstance(model, AlgebraicModel):
            y = model.response(model.conditions[0], th)
        elif isinstance(model, DAEModel):
            x0 = model.initial_state(th)
            w0 = jnp.atleast_1d(jnp.asarray(model.initial_algebraic_guess(th), dtype=float))
            y = model.output(t0, x0, w0, th)
        else:
            y = model.output(t0, model.initial_state(th), th)
        return jnp.atleast_1d(y)

    shape = jax.eval_shape(out, th).shape
    if len(shape) != 1:
        raise ValueError(
            f"{type(model).__name__}'s output must be a scalar or a 1-D vector, got shape {shape}."
        )
    return shape[0]


def _solver_failure_messages(name: str, dae: bool = False) -> list[str]:
    msgs = getattr(diffrax.RESULTS, "_index_to_message", None)
    if msgs is None:  # pragma: no cover - diffrax internals changed
        msgs = ["", "the solver failed"]
    out = []
    for m in msgs:
        m = m or "the solver failed"
        out.append(
            f"Integrating {name} failed: {m} Check the parameter values (a sweep reports such "
            "samples as failures instead), loosen rtol/atol, raise Integrator(max_steps=...), "
            "or use a stiff solver such as diffrax.Kvaerno5()."
            + (
                " For a DAE, the Newton solve of the algebraic equations may have failed "
                "along the way: g_w singular (loss of index 1) or no solution nearby."
                if dae
                else ""
            )
        )
    return out


def _switching_times(model, th):
    fn = getattr(model, "switching_times", None)
    ts = None if fn is None else fn(th)
    return None if ts is None else jnp.sort(jnp.atleast_1d(jnp.asarray(ts, dtype=float)))


class Solved(NamedTuple):
    xs: Any
    ys: Array
    ok: Array
    success: Array
    init_ok: Array
    result_index: Array
    num_steps: Array


def solve(
    model: AbstractModel,
    theta: Array,
    times: Array,
    integrator: Integrator,
    adjoint: diffrax.AbstractAdjoint,
) -> Solved:
    """Integrate and observe, with NaN in `xs`/`ys` where the solve failed. No checks are
    raised here (see `raise_if_failed`). For a `DAEModel`, `xs` is `(x, w)`."""
    th = model.parameters.view(theta)
    if isinstance(model, AlgebraicModel):
        return _solve_algebraic(model, th, times)
    if isinstance(model, DAEModel):
        x0, w0, init_ok = consistent_initial_values(model, th, integrator)
        term = diffrax.ODETerm(dae_vector_field(model, integrator))
        y0 = (x0, w0)
    else:
        term = diffrax.ODETerm(lambda t, x, args: model.vector_field(t, x, args))
        y0 = model.initial_state(th)
        init_ok = jnp.asarray(True)
    sol = diffrax.diffeqsolve(
        term,
        integrator.solver,
        t0=model.t0,
        t1=times[-1],
        dt0=integrator.dt0,
        y0=y0,
        args=th,
        saveat=diffrax.SaveAt(ts=times),
        stepsize_controller=integrator.controller(_switching_times(model, th)),
        adjoint=adjoint,
        max_steps=integrator.max_steps,
        throw=False,
    )
    if isinstance(model, DAEModel):
        xs, w_guess = sol.ys
        ys, ws, alg_ok = dae_outputs(model, sol.ts, xs, w_guess, th, integrator)
        states = (xs, ws)
        alg_ok = jnp.all(alg_ok)
    else:
        ys = jax.vmap(lambda t, x: jnp.atleast_1d(model.output(t, x, th)))(sol.ts, sol.ys)
        states = sol.ys
        alg_ok = jnp.asarray(True)
    success = (sol.result == diffrax.RESULTS.successful) & init_ok
    finite = jnp.all(jnp.isfinite(ys)) & alg_ok
    ok = success & finite
    nan = jnp.asarray(jnp.nan, ys.dtype)
    ys = jnp.where(ok, ys, nan)
    states = jax.tree.map(lambda x: jnp.where(ok, x, jnp.asarray(jnp.nan, x.dtype)), states)
    return Solved(
        states, ys, ok, success, init_ok, sol.result._value, sol.stats["num_accepted_steps"]
    )


def _solve_algebraic(model: AlgebraicModel, th, times: Array) -> Solved:
    u = model.conditions[times.astype(jnp.int32)]
    ys = jax.vmap(lambda ui: jnp.atleast_1d(model.response(ui, th)))(u)
    ok = jnp.all(jnp.isfinite(ys))
    ys = jnp.where(ok, ys, jnp.asarray(jnp.nan, ys.dtype))
    true, zero = jnp.asarray(True), jnp.asarray(0, jnp.int32)
    return Solved(ys, ys, ok, true, true, zero, zero)


def raise_if_failed(model, x, solved: Solved):
    """Raise a clear message when the solve failed: the DAE initialisation, the ODE
    solver's own reason, or non-finite outputs."""
    name = type(model).__name__
    if isinstance(model, DAEModel):
        x = eqx.error_if(
            x,
            ~solved.init_ok,
            f"{name}: no consistent initial values for the algebraic variables: the Newton "
            "solve of g(t0, x0, w, theta) = 0 from initial_algebraic_guess did not converge, "
            "or g_w is singular there (the DAE is not index 1 at t0). Check the guess and "
            "the parameter values.",
        )
    x = eqx.branched_error_if(
        x,
        solved.init_ok & ~solved.success,
        solved.result_index,
        _solver_failure_messages(name, isinstance(model, DAEModel)),
    )
    x = eqx.error_if(
        x,
        solved.success & ~solved.ok,
        f"{name} produced NaN or inf outputs (the solver itself succeeded): check the model "
        "equations and the parameter values for divisions by zero, logarithms or square "
        "roots of negative numbers"
        + (", or the algebraic solve at an output time." if isinstance(model, DAEModel) else "."),
    )
    return x


@eqx.filter_jit
def _simulate(model, theta, times, integrator, throw):
    solved = solve(model, theta, times, integrator, diffrax.RecursiveCheckpointAdjoint())
    ys = solved.ys
    if throw:
        ys = raise_if_failed(model, ys, solved)
    return Trajectory(ts=times, xs=solved.xs, ys=ys, ok=solved.ok, num_steps=solved.num_steps)


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
    - `throw`: raise when the solve fails (default `True`; inside `ji.sweep`, `False`, so
      a failure becomes a per-sample flag).

    **Returns:** a `Trajectory`. Jittable, vmappable over `theta`, differentiable.

    **Raises:** `ValueError` for wrong shapes, unknown names and non-finite values;
    an `EquinoxRuntimeError` naming the solver failure (step cap reached, step size
    collapsed, NaN or inf) when `throw` is true.
    """
    check_model(model)
    theta = check_theta(model, theta)
    times = check_times(model, times)
    integrator = model.integrator if integrator is None else integrator
    return _simulate(model, theta, times, integrator, resolve_throw(throw))
