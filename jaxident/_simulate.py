"""Integration of models with diffrax."""

from collections.abc import Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PyTree

from ._context import resolve_throw
from ._model import AbstractModel, Integrator, ODEModel


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
            f"Expected a jaxident model (a subclass of ji.ODEModel), got {type(model).__name__}."
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


def _solver_failure_messages(name: str) -> list[str]:
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
        )
    return out


def solve(
    model: ODEModel,
    theta: Array,
    times: Array,
    integrator: Integrator,
    adjoint: diffrax.AbstractAdjoint,
):
    """Integrate and observe; returns `(xs, ys, ok, result_index, num_steps)` with NaN in
    `xs`/`ys` where the solve failed. No checks are raised here."""
    th = model.parameters.view(theta)
    term = diffrax.ODETerm(lambda t, x, args: model.vector_field(t, x, args))
    x0 = model.initial_state(th)
    sol = diffrax.diffeqsolve(
        term,
        integrator.solver,
        t0=model.t0,
        t1=times[-1],
        dt0=integrator.dt0,
        y0=x0,
        args=th,
        saveat=diffrax.SaveAt(ts=times),
        stepsize_controller=integrator.controller(),
        adjoint=adjoint,
        max_steps=integrator.max_steps,
        throw=False,
    )
    ys = jax.vmap(lambda t, x: jnp.atleast_1d(model.output(t, x, th)))(sol.ts, sol.ys)
    success = sol.result == diffrax.RESULTS.successful
    finite = jnp.all(jnp.isfinite(ys))
    ok = success & finite
    nan = jnp.asarray(jnp.nan, ys.dtype)
    ys = jnp.where(ok, ys, nan)
    xs = jax.tree.map(lambda x: jnp.where(ok, x, jnp.asarray(jnp.nan, x.dtype)), sol.ys)
    return xs, ys, ok, success, sol.result._value, sol.stats["num_accepted_steps"]


def raise_if_failed(model, x, ok, success, result_index):
    """Raise the solver's own message when the solve failed, else a non-finite message."""
    name = type(model).__name__
    x = eqx.branched_error_if(x, ~success, result_index, _solver_failure_messages(name))
    x = eqx.error_if(
        x,
        success & ~ok,
        f"{name} produced NaN or inf outputs (the solver itself succeeded): check the model "
        "equations and the parameter values for divisions by zero, logarithms or square "
        "roots of negative numbers.",
    )
    return x


@eqx.filter_jit
def _simulate(model, theta, times, integrator, throw):
    xs, ys, ok, success, index, steps = solve(
        model, theta, times, integrator, diffrax.RecursiveCheckpointAdjoint()
    )
    if throw:
        ys = raise_if_failed(model, ys, ok, success, index)
    return Trajectory(ts=times, xs=xs, ys=ys, ok=ok, num_steps=steps)


def simulate(
    model: ODEModel,
    theta: ArrayLike | dict | Sequence[float] | None = None,
    times: ArrayLike | Sequence[float] | None = None,
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
