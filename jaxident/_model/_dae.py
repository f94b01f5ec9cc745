"""Semi-explicit index-1 DAEs: the algebraic variables are eliminated by Newton's method
inside the vector field (optimistix, differentiated by the implicit-function theorem)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import optimistix as optx
from jaxtyping import Array, Bool

from .._linalg._misc import after
from .._linalg._nullspace import rref
from .._linalg._rank import RelativeTolerance
from .._linalg._scaling import equilibrate
from ._base import DAEModel, Integrator
from ._parameters import ParameterValues


def _small_solve(A: Array, b: Array) -> Array:
    """`A^{-1} b` for a small dense system by the library's one elimination routine
    (Gauss-Jordan with partial pivoting, `ji.linalg.rref` of `[A | b]`), in plain `lax`:
    no LAPACK call (see `jaxident._linalg._misc.after`)."""
    n = b.shape[0]
    if n == 1:
        return b / A[0, 0]
    return rref(jnp.concatenate([A, b[:, None]], axis=1), tol=0.0).R[:, n]


class _Residual(eqx.Module):
    """`g(w; t, x, theta)` of a model, as a module rather than a closure: optimistix's
    root find is a jitted function that keeps its trace by the structure of its
    arguments, so every Newton solve of one model (at the initial time, in each of the
    ODE solver's traces of a step, at the saved times) reuses one trace instead of
    tracing Newton's loop again (nonsmooth DAE example: 6 traces of the loop in one
    L-SERC probe)."""

    model: DAEModel

    def __call__(self, w, args):
        t, x, theta = args
        return jnp.reshape(self.model.algebraic(t, x, w, theta), w.shape)


def _residual(model: DAEModel) -> _Residual:
    return _Residual(model)


def algebraic_solve(
    model: DAEModel, t, x, w_guess: Array, theta: ParameterValues, integrator: Integrator
) -> tuple[Array, Bool[Array, ""]]:
    """`w` with `g(t, x, w, theta) = 0`, by Newton's method from `w_guess`, and whether
    the solve converged to a finite point."""
    tags = frozenset({lx.diagonal_tag}) if w_guess.shape == (1,) else frozenset()
    sol = optx.root_find(
        _residual(model),
        optx.Newton(rtol=integrator.algebraic_rtol, atol=integrator.algebraic_atol),
        w_guess,
        args=(t, x, theta),
        max_steps=integrator.algebraic_max_steps,
        throw=False,
        tags=tags,
    )
    ok = (sol.result == optx.RESULTS.successful) & jnp.all(jnp.isfinite(sol.value))
    return sol.value, ok


def _wdot(model: DAEModel, t, x, w, theta, xdot) -> Array:
    """`dw/dt = -g_w^{-1} (g_t + g_x x')` along the solution (used only to carry the
    Newton starting guess; it does not enter the derivatives)."""
    t, x, w, theta, xdot = jax.lax.stop_gradient((t, x, w, theta, xdot))
    g = _residual(model)
    _, rhs = jax.jvp(lambda tt, xx: g(w, (tt, xx, theta)), (t, x), (jnp.ones_like(t), xdot))
    G = jax.jacfwd(lambda ww: g(ww, (t, x, theta)))(w)
    return -_small_solve(G, rhs)


def consistent_initial_values(model: DAEModel, theta: ParameterValues, integrator: Integrator):
    """`(x0, w0, ok)`: the initial state and algebraic variables solving `g = 0` at `t0`,
    with `ok` false when Newton failed or `g_w` is singular there (not index 1)."""
    t0 = jnp.asarray(model.t0, dtype=float)
    x0 = jnp.asarray(model.initial_state(theta), dtype=float)
    guess = jnp.atleast_1d(jnp.asarray(model.initial_algebraic_guess(theta), dtype=float))
    w0, ok = algebraic_solve(model, t0, x0, guess, theta, integrator)
    G = jax.jacfwd(lambda ww: _residual(model)(ww, (t0, x0, theta)))(jax.lax.stop_gradient(w0))
    # Unit-free: rows (equations) and columns (algebraic variables) equilibrated first,
    # then full rank under the default rank rule. `after` orders this SVD before the
    # caller's solve (see `jaxident._linalg._misc.after`).
    nonzero = jnp.max(jnp.abs(G)) > 0
    G = equilibrate(equilibrate(G)[0].T)[0].T
    sigma = jnp.linalg.svd(jax.lax.stop_gradient(G), compute_uv=False)
    regular = (RelativeTolerance()(sigma, G.shape) == G.shape[0]) & nonzero
    x0, w0 = after((x0, w0), sigma)
    return x0, w0, ok & regular


def dae_vector_field(model: DAEModel, integrator: Integrator):
    """The ODE for `(x, w_guess)`: `x' = f(t, x, w*(t, x), theta)` with `w*` from Newton
    started at the carried guess, and `w_guess' = w*'`. A failed Newton solve makes the
    derivative NaN, so the step is rejected and a persistent failure is reported by the
    ODE solver."""

    def vf(t, z, theta):
        x, w_guess = z
        w, ok = algebraic_solve(model, t, x, w_guess, theta, integrator)
        xdot = jnp.asarray(model.differential(t, x, w, theta), dtype=float).reshape(x.shape)
        wdot = _wdot(model, t, x, w, theta, xdot)
        nan = jnp.asarray(jnp.nan, xdot.dtype)
        return jnp.where(ok, xdot, nan), jnp.where(ok, wdot, nan)

    return vf


def dae_outputs(model: DAEModel, ts, xs, ws_guess, theta, integrator):
    """Outputs and algebraic variables at the saved times (a Newton solve at each)."""

    def one(t, x, wg):
        w, ok = algebraic_solve(model, t, x, wg, theta, integrator)
        y = jnp.atleast_1d(jnp.asarray(model.output(t, x, w, theta), dtype=float))
        return y, w, ok

    return jax.vmap(one)(ts, xs, ws_guess)
