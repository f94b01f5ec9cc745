"""Semi-explicit index-1 DAEs: the algebraic variables are eliminated by Newton's method
inside the vector field (optimistix, differentiated by the implicit-function theorem)."""

import jax
import jax.numpy as jnp
import lineax as lx
import optimistix as optx
from jaxtyping import Array, Bool

from ._linalg._scaling import equilibrate
from ._model import DAEModel, Integrator
from ._parameters import ParameterValues


def _small_solve(A: Array, b: Array) -> Array:
    """Gaussian elimination with partial pivoting for a small dense system, in plain
    `jax.numpy` (no LAPACK call: see `jaxident._linalg._misc.after`)."""
    n = b.shape[0]
    if n == 1:
        return b / A[0, 0]
    M = jnp.concatenate([A, b[:, None]], axis=1)
    rows = jnp.arange(n)
    for c in range(n):
        piv = jnp.argmax(jnp.where(rows >= c, jnp.abs(M[:, c]), -1.0))
        M = M.at[jnp.array([c, piv])].set(M[jnp.stack([piv, jnp.asarray(c, piv.dtype)])])
        factors = jnp.where(rows > c, M[:, c] / M[c, c], 0.0)
        M = M - factors[:, None] * M[c][None, :]
    x = jnp.zeros(n, M.dtype)
    for c in reversed(range(n)):
        x = x.at[c].set((M[c, n] - jnp.dot(M[c, :n], x)) / M[c, c])
    return x


def _residual(model: DAEModel):
    def fn(w, args):
        t, x, theta = args
        return jnp.reshape(model.algebraic(t, x, w, theta), w.shape)

    return fn


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
    # Unit-free: rows (equations) and columns (algebraic variables) equilibrated first.
    # Nonsingular when elimination then leaves no pivot below 10 n eps.
    nonzero = jnp.max(jnp.abs(G)) > 0
    G = equilibrate(equilibrate(G)[0].T)[0].T
    n = G.shape[0]
    eps = jnp.finfo(G.dtype).eps
    U = _upper_pivots(G)
    regular = jnp.all(jnp.abs(U) > 10 * n * eps * jnp.max(jnp.abs(G))) & nonzero
    return x0, w0, ok & regular


def _upper_pivots(A: Array) -> Array:
    """The pivots of Gaussian elimination with partial pivoting (their product is
    `det A` up to sign)."""
    n = A.shape[0]
    rows = jnp.arange(n)
    M = A
    pivots = []
    for c in range(n):
        piv = jnp.argmax(jnp.where(rows >= c, jnp.abs(M[:, c]), -1.0))
        M = M.at[jnp.array([c, piv])].set(M[jnp.stack([piv, jnp.asarray(c, piv.dtype)])])
        pivots.append(M[c, c])
        safe = jnp.where(M[c, c] != 0, M[c, c], 1.0)
        factors = jnp.where(rows > c, M[:, c] / safe, 0.0)
        M = M - factors[:, None] * M[c][None, :]
    return jnp.stack(pivots)


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
