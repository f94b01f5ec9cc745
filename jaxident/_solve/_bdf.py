"""A variable-order backward differentiation method for large stiff models: the Newton
matrix `I - c J` is factorized and kept across steps, and the Jacobian `J` is evaluated
again only when Newton's iteration fails to converge with the one it has.

The formulas are the numerical differentiation formulas (NDF) of orders 1-5 of Shampine
and Reichelt (1997), "The MATLAB ODE Suite", SIAM J. Sci. Comput. 18(1), section 2.3, in
their quasi-constant step-size form: the solution's history is a table of backward
differences at a constant step `h`, rewritten when `h` changes (their equation for
`R U`). The corrector is a simplified Newton iteration as in CVODES (Hindmarsh et al.
2005, ACM TOMS 31(3)): the matrix is refactorized only when `c = h / alpha_k` has moved by
more than 30% since the last factorization, and an update made with an older `c` is
scaled by `2 / (1 + c / c_lu)`.

With error-controlled sensitivities the state is `(z, Z)`, corrected staggered as in
CVODES: the state first by its own Newton iteration, then the tangent columns (linear in
`Z`) at the corrected state with the same factorization of the state's `I - c J`, so that
neither the Jacobian nor the factorization grows with the number of parameters; the
tangents are in the convergence test and the error test.
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy as jsp
import numpy as np
import optimistix as optx
from jax.flatten_util import ravel_pytree

from .._linalg._sparse_lu import sparse_lu_factor, sparse_lu_solve, SparseLUPlan
from .._model._base import StateScaled
from ._rosenbrock import _product, Rodas4


_MAX_ORDER = 5
# NDF's kappa (Shampine and Reichelt 1997, Table 1); 0 for order 5, where the NDF is
# the BDF
_KAPPA = np.array([0.0, -0.1850, -1.0 / 9.0, -0.0823, -0.0415, 0.0])
_GAMMA = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, _MAX_ORDER + 1))])
_ALPHA = (1.0 - _KAPPA) * _GAMMA
_ERROR_CONST = _KAPPA * _GAMMA + 1.0 / np.arange(1, _MAX_ORDER + 2)
_NEWTON_MAX = 4  # corrector iterations per attempt
_REFACTOR = 0.3  # refactorize once c has moved by more than this, relatively
_SAFETY = 0.9
_MIN_FACTOR = 0.2
_MAX_FACTOR = 10.0


class SpanSolution(NamedTuple):
    """What a span solver returns in place of a `diffrax.Solution`: `ts` (the save times,
    the last one where the solve ended), `ys` (the state at the save times and at the
    end), `result` (a `diffrax.RESULTS`) and `stats` (`num_accepted_steps`, ...)."""

    ts: Any
    ys: Any
    result: Any
    stats: dict


class BDF(diffrax.AbstractAdaptiveSolver):
    """A variable-order (1 to 5) backward differentiation method for large stiff models,
    which keeps its Jacobian and factorization across steps (the NDFs of Shampine and
    Reichelt 1997, with CVODES's simplified Newton iteration).

    A step costs one right-hand-side evaluation per Newton iteration (one or two,
    usually) and a solve with the kept matrix each (a product with its inverse up to
    500 states, two triangular solves above); the Jacobian (`jax.jacfwd`, or by groups of
    columns that share no row where the model declares its `jacobian_sparsity()`, as a
    model read from SBML does) is evaluated only when the iteration fails to converge
    with the one it has, and the
    matrix `I - c J` is refactorized only when the step size or order has moved `c` by
    more than 30%. Rodas4 pays a Jacobian, a factorization and six evaluations at every
    step: for a network of tens to hundreds of states, where the Jacobian and the
    factorization dominate, this is the cheaper method; for small models `ji.Rodas4()`
    takes fewer, cheaper steps.

    With error-controlled sensitivities (`ji.SensitivityEquations()`, the default) the
    tangents are in the Newton iteration and in the error test, and share the state's
    factorization; their equations, linear in the tangents, are linearized once per
    attempted step (the rates and their partial derivatives evaluated once), not
    evaluated anew at each iteration.

    Within jaxident only (it integrates a whole span itself, with its own step-size and
    order selection and a dense output between its steps): not a solver to hand to
    `diffrax.diffeqsolve`. The right-hand side must be differentiable in the state (no
    `nabs`/`nmax`/...); it is differentiated in forward mode only; models with
    state-triggered events and pre-equilibrations are integrated by `ji.Rodas4()` where
    those are solved.

    **Arguments:**

    - `max_order`: the highest order used (1 to 5).
    - `augmented`, `state_field`, `coloring`, `sparse_lu`: set by jaxident where it
      integrates (the state with its tangents, the state's own right-hand side, the
      Jacobian's column colouring from the model's sparsity, a sparse LU of `I - c J`
      with a fixed pattern); leave them out.
    """

    max_order: int = eqx.field(static=True, default=_MAX_ORDER)
    # (z, Z): a state and tangent columns whose right-hand side is linear in Z
    augmented: bool = eqx.field(static=True, default=False)
    # for an augmented state, the right-hand side of the state alone, `(t, z, args)`
    state_field: Callable | None = eqx.field(static=True, default=None, repr=False)
    # the Jacobian's nonzero entries grouped by columns that share no row (`_Coloring`),
    # set from the model's `jacobian_sparsity()` for one solve
    coloring: "_Coloring | None" = eqx.field(static=True, default=None, repr=False)
    # a sparse LU of `I - c J` (`_linalg/_sparse_lu.py`), used where given: not chosen
    # by size, as its solves pay XLA's CPU loop per level, so that Chen's 118 levels
    # solve one column slower than LAPACK's dense LU at 500 states
    # (benchmarks/bench_sparse_lu.py; benchmarks/README)
    sparse_lu: SparseLUPlan | None = eqx.field(static=True, default=None, repr=False)

    term_structure: ClassVar = diffrax.ODETerm
    interpolation_cls: ClassVar = diffrax.LocalLinearInterpolation
    # its spans interpolate between steps by the method's own polynomial; the controller
    # made for it steps onto the observation times for `for_events()`'s Rodas4, whose
    # dense output is linear
    steps_onto_outputs: ClassVar[bool] = True
    # the global error of its solutions and sensitivities, in units of rtol (what
    # `Sensitivity.accuracy` reports): measured 3-25 rtol on SVIR, COVID and
    # alpha-pinene at rtol 1e-6 to 1e-10 (Rodas4, which steps onto the observation
    # times: 0.1-0.2 rtol)
    global_error: ClassVar[float] = 100.0

    def __check_init__(self):
        integral = isinstance(self.max_order, (int, np.integer)) and not isinstance(
            self.max_order, bool
        )
        if not (integral and 1 <= self.max_order <= _MAX_ORDER):
            raise ValueError(
                f"max_order must be an integer in 1..{_MAX_ORDER}, got {self.max_order!r}."
            )

    def order(self, terms):
        return self.max_order

    def init(self, terms, t0, t1, y0, args):
        return None

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        raise TypeError(
            "ji.BDF integrates whole spans within jaxident (its own steps and orders); it "
            "is not a diffrax solver for diffrax.diffeqsolve. Use it as "
            "ji.Integrator(ji.BDF(), ...) of a jaxident model."
        )

    def for_events(self) -> Rodas4:
        """The solver of what this one does not solve: spans with state-triggered events
        (located by diffrax's root finding on its dense output), solves to a steady
        state."""
        return Rodas4(augmented=self.augmented, state_field=self.state_field)

    def solve_span(self, field, t0, t1, y0, ts, args, controller, max_steps, dt0):
        """Integrate `y' = field(t, y, args)` from `t0` to `t1`: the state at `ts` and at
        `t1`, as a `SpanSolution`. `controller` gives the tolerances, the error norm
        and the times the steps must not cross (`jump_ts`: each restarts the method)."""
        rtol, atol, norm, jump_ts, scale = _tolerances(controller)
        if scale is not None:  # an absolute tolerance per state, flat as `u`
            per = jax.tree.map(lambda s, y: atol * jnp.broadcast_to(s, y.shape), scale, y0)
            atol = ravel_pytree(per)[0]
        return _bdf_span(self, field, t0, t1, y0, ts, args, rtol, atol, norm, jump_ts,
                         max_steps, dt0)  # fmt: skip


class _Coloring(NamedTuple):
    """A sparse Jacobian's evaluation by groups of columns that share no row (Curtis,
    Powell and Reid 1974): one `jvp` per group along the sum of its unit vectors gives
    every entry of its columns. `colors[j]` is column `j`'s group, `rows`/`cols` the
    nonzero entries."""

    n: int
    colors: tuple[int, ...]
    n_colors: int
    rows: tuple[int, ...]
    cols: tuple[int, ...]


@functools.lru_cache(maxsize=32)
def _coloring(pattern_bytes: bytes, n: int) -> _Coloring:
    """A greedy colouring of the columns, largest first (each column takes the smallest
    group none of the columns sharing a row with it has)."""
    pattern = np.frombuffer(pattern_bytes, dtype=bool).reshape(n, n) | np.eye(n, dtype=bool)
    colors = np.full(n, -1)
    row_colors = [set() for _ in range(n)]
    for j in np.argsort(-pattern.sum(axis=0), kind="stable"):
        rows = np.flatnonzero(pattern[:, j])
        taken = set().union(*(row_colors[r] for r in rows))
        c = next(c for c in range(n + 1) if c not in taken)
        colors[j] = c
        for r in rows:
            row_colors[r].add(c)
    rows, cols = np.nonzero(pattern)
    return _Coloring(n, tuple(int(c) for c in colors), int(colors.max()) + 1,
                     tuple(int(r) for r in rows), tuple(int(c) for c in cols))  # fmt: skip


def with_sparsity(solver: diffrax.AbstractSolver, pattern) -> diffrax.AbstractSolver:
    """`solver` told the Jacobian's sparsity `pattern` (`(n, n)` booleans, or `None`):
    a `ji.BDF` then evaluates its Jacobian by groups of columns where there are at most
    half as many groups as columns; any other solver is returned as it is."""
    if not isinstance(solver, BDF) or pattern is None:
        return solver
    pattern = np.asarray(pattern, dtype=bool)
    n = pattern.shape[0]
    if pattern.shape != (n, n):
        raise ValueError(f"jacobian_sparsity() must be an (n, n) array, got {pattern.shape}.")
    coloring = _coloring(pattern.tobytes(), n)
    if 2 * coloring.n_colors > n:
        return solver
    return dataclasses.replace(solver, coloring=coloring)


def _jacobian(fun, x, coloring: "_Coloring | None"):
    """`fun`'s Jacobian at `x`: by `jacfwd`, or compressed by `coloring` (where it fits
    `x`)."""
    if coloring is None or coloring.n != x.size:
        return jax.jacfwd(fun)(x)
    colors = np.asarray(coloring.colors)
    seeds = jnp.asarray(np.eye(coloring.n_colors)[colors].T, x.dtype)  # (groups, n)
    compressed = jax.vmap(lambda v: jax.jvp(fun, (x,), (v,))[1])(seeds)  # (groups, n)
    rows, cols = np.asarray(coloring.rows), np.asarray(coloring.cols)
    values = compressed[colors[cols], rows]
    return jnp.zeros((coloring.n, coloring.n), x.dtype).at[rows, cols].set(values)


def _tolerances(controller):
    """`(rtol, atol, norm, jump_ts, scale)` of a (wrapped) PID controller: `scale` the
    per-state sizes of a `StateScaled` in its chain (else `None`)."""
    inner, scale = controller, None
    while hasattr(inner, "inner"):
        if isinstance(inner, StateScaled):
            scale = inner.scale
        inner = inner.inner
    jump_ts = getattr(inner, "jump_ts", None)
    return controller.rtol, controller.atol, controller.norm, jump_ts, scale


def _rescaled(D, k, factor):
    """The difference table of the same polynomial at step `factor h` (Shampine and
    Reichelt's `R U`), for a traced order `k`."""
    m = _MAX_ORDER
    i = jnp.arange(1, m + 1, dtype=D.dtype)

    def R(f):
        M = (i[:, None] - 1 - f * i[None, :]) / i[:, None]
        M = jnp.concatenate([jnp.ones((1, m), D.dtype), M])
        R = jnp.cumprod(M, axis=0)  # (m + 1, m)
        R = jnp.concatenate([jnp.zeros((m + 1, 1), D.dtype).at[0, 0].set(1.0), R], axis=1)
        inside = (jnp.arange(m + 1)[:, None] <= k) & (jnp.arange(m + 1)[None, :] <= k)
        return jnp.where(inside, R, jnp.eye(m + 1, dtype=D.dtype))

    RU = R(factor) @ R(jnp.asarray(1.0, D.dtype))
    top = jnp.matmul(RU.T, D[: m + 1], precision=jax.lax.Precision.HIGHEST)
    return D.at[: m + 1].set(top)


def _interpolate(D, k, t, h, s):
    """The interpolating polynomial of the last `k + 1` solution values at `s`
    (Newton's backward form on the difference table)."""
    j = jnp.arange(_MAX_ORDER)
    x = (s - (t - h * j)) / (h * (1 + j))
    p = jnp.where(j < k, jnp.cumprod(x), 0.0)
    return D[0] + p @ D[1 : _MAX_ORDER + 1]


def _next_stop(t, t1, jump_ts):
    if jump_ts is None:
        return t1
    later = jnp.where(jump_ts > t, jump_ts, jnp.inf)
    return jnp.minimum(jnp.min(later), t1)


class _System(NamedTuple):
    """What the steps need of a span's equations, on the flat state `u` (`N` values):
    `F(t, u)`, the Jacobian of the state block, its factorization as `I - c J`
    (`factor(J, c)`), the corrector (`corrector(t, u_pred, psi, c, shrink, lu, crate) ->
    (u, d, converged, evaluations, crate)`) and the error norm of a flat scaled
    vector."""

    n: int  # the size of the state block (of `J`)
    F: Callable
    jacobian: Callable
    factor: Callable
    empty: Callable  # a factorization's zeros, of its structure
    corrector: Callable
    norm: Callable


def _iterate(residual, solve, norm, scale, u_pred, psi, c, shrink, tol, crate):
    """The simplified Newton iteration of one block, `u = u_pred + d` with
    `c F(u) - psi - d = 0`: `(u, d, converged, evaluations, crate)`. Converged once the
    update, times the convergence rate (`crate`: estimated from earlier steps, and
    from this one's iterations; CVODES's test), is below `tol`, so that a step whose
    first update is small enough needs no second evaluation; failed where the rate
    predicts no convergence within `_NEWTON_MAX` iterations (Shampine's test)."""
    zero = jnp.asarray(0, jnp.int32)

    def body(carry):
        it, u, d, prev, rate_est, _, _ = carry
        dy = shrink * solve(c * residual(u) - psi - d)
        u, d = u + dy, d + dy
        size = norm(dy / scale)
        rate = size / prev
        later = it > 0
        rate_est = jnp.where(later, jnp.maximum(0.3 * rate_est, rate), rate_est)
        slow = (rate >= 1) | (rate ** (_NEWTON_MAX - it) / (1 - rate) * size > tol)
        bad = ~jnp.isfinite(size) | (later & slow)
        done = size * jnp.minimum(1.0, rate_est) < tol
        return it + 1, u, d, size, rate_est, done & ~bad, bad

    def cond(carry):
        it, _, _, _, _, conv, bad = carry
        return (it < _NEWTON_MAX) & ~conv & ~bad

    inf = jnp.asarray(jnp.inf, u_pred.dtype)
    init = (zero, u_pred, jnp.zeros_like(u_pred), inf, crate, jnp.asarray(False),
            jnp.asarray(False))  # fmt: skip
    it, u, d, _, crate, conv, _ = jax.lax.while_loop(cond, body, init)
    return u, d, conv, it, crate


def _system(solver: BDF, field, args, y0, rtol, atol, norm) -> tuple[_System, Callable]:
    """The `_System` of `y' = field(t, y, args)` from `y0`, and the unravelling of `u`.
    An augmented state `(z, Z)` is corrected staggered, as CVODES does: the state by
    its own field (one evaluation per iteration, not `1 + p`), then the tangent
    columns, linear in `Z`, at the corrected state, with the same factorization."""
    u0, unravel = ravel_pytree(y0)
    dtype = u0.dtype
    tol = jnp.maximum(10 * jnp.finfo(dtype).eps / rtol, jnp.minimum(0.03, rtol**0.5))

    def F(t, u):
        return ravel_pytree(field(t, unravel(u), args))[0].astype(dtype)

    def flat_norm(e):
        return norm(unravel(e))

    if not solver.augmented:

        def corrector(t, u_pred, psi, c, shrink, lu, crate):
            scale = atol + rtol * jnp.abs(u_pred)
            solve = functools.partial(_lu_solve, solver.sparse_lu, lu)
            residual = lambda u: F(t, u)  # noqa: E731
            return _iterate(residual, solve, flat_norm, scale, u_pred, psi, c, shrink, tol,
                            crate)  # fmt: skip

        def jacobian(t, u):
            return _jacobian(lambda uu: F(t, uu), u, solver.coloring)

        n = u0.size
    else:
        z0, Z0 = y0
        n, p = z0.size, Z0.shape[1]
        corrector = functools.partial(_staggered_corrector, field, solver.state_field, args,
                                      n, p, rtol, atol, tol, solver.sparse_lu)  # fmt: skip

        def jacobian(t, u):
            return _jacobian(lambda z: solver.state_field(t, z, args), u[:n], solver.coloring)

    if solver.sparse_lu is not None and solver.sparse_lu.n != n:
        raise ValueError(
            f"BDF(sparse_lu=...) was planned for {solver.sparse_lu.n} states; this model "
            f"integrates {n}."
        )
    factor = functools.partial(_lu_factor, solver.sparse_lu)

    def empty():
        shapes = jax.eval_shape(factor, jnp.zeros((n, n), dtype), jnp.zeros((), dtype))
        return jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)

    return _System(n, F, jacobian, factor, empty, corrector, flat_norm), unravel


# systems up to this many states keep `(I - c J)^{-1}` instead of its LU factors: on a
# CPU a solve is then one product (fused with its neighbours up to `_FUSED_ROWS` rows)
# instead of LAPACK's two triangular solves and a permutation, several times cheaper
# for 8-75 states and 1-20 columns; the inverse costs a few more solves at each (rare)
# refactorization. Measured up to Chen's 500 states, where it still gains
# (benchmarks/README.md).
_INVERSE_ROWS = 500


class _Inverse(NamedTuple):
    """`(I - c J)^{-1}`, and a runtime 1 for `_product`."""

    inverse: Any
    one: Any


def _lu_factor(plan: SparseLUPlan | None, J, c):
    """The factorization of `I - c J`: LAPACK's dense LU with partial pivoting, or the
    sparse one of `plan`, with the dense one made instead where the sparse one is
    refused (a pivot too small without pivoting). A system of at most `_INVERSE_ROWS`
    states without a sparse plan keeps the inverse instead (as Rodas4's stages). The
    corrector's residual is evaluated exactly at every iteration, so the inverse's
    rounding moves only the rate of convergence, not the solution."""
    A = jnp.eye(J.shape[0], dtype=J.dtype) - c * J
    if plan is None and A.shape[0] <= _INVERSE_ROWS:
        return _Inverse(jnp.linalg.inv(A), c / c)
    if plan is None:
        return jsp.linalg.lu_factor(A)
    values, ok = sparse_lu_factor(plan, A)
    dense = jax.lax.cond(
        ok,
        lambda: (jnp.zeros_like(A), jnp.zeros(A.shape[0], jnp.int32)),
        lambda: jsp.linalg.lu_factor(A),
    )
    return values, ok, dense


def _lu_solve(plan: SparseLUPlan | None, lu, r):
    """`(I - c J)^{-1} r` with `_lu_factor`'s factorization; `r` is `(n,)` or `(n, k)`."""
    if isinstance(lu, _Inverse):
        return _product(lu.inverse, r, lu.one)
    if plan is None:
        return jsp.linalg.lu_solve(lu, r)
    values, ok, dense = lu
    return jax.lax.cond(ok, lambda: sparse_lu_solve(plan, values, r),
                        lambda: jsp.linalg.lu_solve(dense, r))  # fmt: skip


def _staggered_corrector(field, state_field, args, n, p, rtol, atol, tol, plan, t, u_pred,
                         psi, c, shrink, lu, crate):  # fmt: skip
    """The state block corrected first, then the tangents at the corrected state, by
    iterating on their field linearized at the prediction: it is affine in the tangents
    (BDF refuses nonsmooth models, whose LD-derivatives are not), so the linearization
    is exact; an iteration then costs the linear map alone, and differences of nearly
    equal full evaluations, whose rounding could stall the iteration on a stiff model,
    are not formed."""
    dtype = u_pred.dtype
    z_pred, Z_pred = u_pred[:n], u_pred[n:]
    atol = jnp.broadcast_to(atol, u_pred.shape)  # (per state, or one for all)
    scale_z = atol[:n] + rtol * jnp.abs(z_pred)
    solve_z = functools.partial(_lu_solve, plan, lu)
    residual_z = lambda z: state_field(t, z, args).astype(dtype)  # noqa: E731
    z, dz, conv_z, it_z, crate = _iterate(residual_z, solve_z, optx.rms_norm, scale_z,
                                          z_pred, psi[:n], c, shrink, tol, crate)  # fmt: skip

    def tangents(_):
        scale_Z = (atol[n:] + rtol * jnp.abs(Z_pred)).reshape(n, p)

        def full_Z(Z):
            return field(t, (z, Z.reshape(n, p)), args)[1].reshape(-1).astype(dtype)

        r0, r_lin = jax.linearize(full_Z, Z_pred)

        def residual_Z(Z):
            return r0 + r_lin(Z - Z_pred)

        def solve_Z(r):
            return _lu_solve(plan, lu, r.reshape(n, p)).reshape(-1)

        # the RMS over the columns that move (a zero column, one a problem pads with,
        # neither dilutes nor tightens the test)
        active = jnp.any(Z_pred.reshape(n, p) != 0, axis=0)
        count = n * jnp.maximum(jnp.sum(active), 1)

        def rms(e):
            return jnp.sqrt(jnp.sum(jnp.where(active, e.reshape(n, p), 0.0) ** 2) / count)

        return _iterate(residual_Z, solve_Z, rms, scale_Z.reshape(-1), Z_pred, psi[n:], c,
                        shrink, tol, crate)[:4]  # fmt: skip

    def skipped(_):
        zero = jnp.asarray(0, jnp.int32)
        return Z_pred, jnp.zeros_like(Z_pred), jnp.asarray(False), zero

    Z, dZ, conv_Z, it_Z = jax.lax.cond(conv_z, tangents, skipped, None)
    u = jnp.concatenate([z, Z])
    d = jnp.concatenate([dz, dZ])
    return u, d, conv_z & conv_Z, it_z + it_Z, crate


class _State(NamedTuple):
    t: Any  # the time reached
    h: Any  # the step size of the difference table
    k: Any  # the order
    D: Any  # backward differences, (MAX_ORDER + 3, N)
    n_equal: Any  # steps taken at this h and k
    J: Any  # the Jacobian of the state block
    lu: Any  # the factorization of I - c_lu J
    c_lu: Any
    fresh: Any  # J was evaluated since the last accepted step
    need_jac: Any  # evaluate J at the next attempt
    crate: Any  # the Newton iteration's estimated convergence rate (CVODES's)
    stop: Any  # the next time the steps must end on (a jump time or t1)
    i_save: Any  # the next save time
    ys: Any  # (len(ts) + 1, N)
    steps: Any  # attempts
    accepted: Any
    n_jac: Any
    n_lu: Any
    n_f: Any
    result: Any


def _first_step(sys: _System, t0, u0, f0, span, rtol, atol, dt0):
    """The first step size: `dt0`, or Hairer, Norsett and Wanner's estimate for order 1
    (section II.4), at most the span."""
    if dt0 is not None:
        h = jnp.asarray(dt0, u0.dtype)
    else:
        scale = atol + rtol * jnp.abs(u0)
        d0, d1 = sys.norm(u0 / scale), sys.norm(f0 / scale)
        h0 = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / jnp.where(d1 > 0, d1, 1))
        h0 = jnp.minimum(h0, span)
        f1 = sys.F(t0 + h0, u0 + h0 * f0)
        d2 = sys.norm((f1 - f0) / scale) / jnp.where(h0 > 0, h0, 1)
        big = jnp.maximum(d1, d2)
        h1 = jnp.where(big <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3), (0.01 / big) ** 0.5)
        h = jnp.minimum(100 * h0, h1)
    h = jnp.minimum(h, span)
    return jnp.where(h > 0, h, jnp.maximum(span, jnp.finfo(u0.dtype).eps))


def _start(sys: _System, t0, t1, u0, ts, jump_ts, rtol, atol, dt0) -> _State:
    """The state before the first step: order 1, the first step size, the Jacobian and
    its factorization at `t0`, the save times at `t0` filled."""
    dtype = u0.dtype
    f0 = sys.F(t0, u0)
    stop = _next_stop(t0, t1, jump_ts)
    h = _first_step(sys, t0, u0, f0, jnp.maximum(stop - t0, 0.0), rtol, atol, dt0)
    D = jnp.zeros((_MAX_ORDER + 3, u0.size), dtype).at[0].set(u0).at[1].set(h * f0)
    # the Jacobian and its factorization are made at the first attempt (one copy of the
    # Jacobian's program, inside the loop)
    n = sys.n
    J = jnp.zeros((n, n), dtype)
    lu = sys.empty()
    n_save = ts.shape[0]
    at_start = ts <= t0
    ys = (
        jnp.zeros((n_save + 1, u0.size), dtype)
        .at[:n_save]
        .set(jnp.where(at_start[:, None], u0, 0.0))
    )
    zero, one = jnp.asarray(0, jnp.int32), jnp.asarray(1, jnp.int32)
    return _State(t=t0, h=h, k=one, D=D, n_equal=zero, J=J, lu=lu,
                  c_lu=jnp.asarray(jnp.inf, dtype), fresh=jnp.asarray(True),
                  need_jac=jnp.asarray(True), crate=jnp.asarray(1.0, dtype), stop=stop,
                  i_save=jnp.sum(at_start).astype(jnp.int32),
                  ys=ys, steps=zero, accepted=zero, n_jac=zero, n_lu=zero,
                  n_f=jnp.asarray(2, jnp.int32), result=diffrax.RESULTS.successful)  # fmt: skip


def _predict(s: _State, dtype):
    """The step onto the next stop where it would pass it: `(h, D, t_new, u_pred, psi,
    c)`, the prediction and the corrector's constants at order `s.k`."""
    eps = jnp.finfo(dtype).eps
    crosses = s.t + s.h * (1 + 4 * eps) >= s.stop
    h = jnp.where(crosses, s.stop - s.t, s.h)
    D = jnp.where(crosses & (h != s.h), _rescaled(s.D, s.k, h / s.h), s.D)
    t_new = jnp.where(crosses, s.stop, s.t + h)
    j = jnp.arange(_MAX_ORDER + 3)
    below = j <= s.k
    u_pred = jnp.sum(jnp.where(below[:, None], D, 0.0), axis=0)
    gamma = jnp.asarray(np.concatenate([_GAMMA, [0.0, 0.0]]), dtype)
    alpha_k = jnp.asarray(_ALPHA, dtype)[s.k]
    psi = (jnp.where((j >= 1) & below, gamma, 0.0) @ D) / alpha_k
    return h, D, t_new, u_pred, psi, h / alpha_k


def _saved(s: _State, D, k, t_new, h, ts):
    """The observations in `(s.t, t_new]`, from the step's interpolating polynomial."""
    n_save = ts.shape[0]

    def more(c):
        i, _ = c
        return (i < n_save) & (ts[jnp.minimum(i, n_save - 1)] <= t_new)

    def save(c):
        i, ys = c
        return i + 1, ys.at[i].set(_interpolate(D, k, t_new, h, ts[i]))

    return jax.lax.while_loop(more, save, (s.i_save, s.ys))


def _next_order(sys: _System, D, k, e_norm, scale, max_order):
    """`(k_new, factor)`: the order among `k - 1, k, k + 1` that allows the longest next
    step, and that step's factor (Shampine and Reichelt's rule)."""
    dtype = D.dtype
    err_const = jnp.asarray(_ERROR_CONST, dtype)
    e_m = jnp.where(k > 1, sys.norm(err_const[k - 1] * D[k] / scale), jnp.inf)
    e_p = jnp.where(k < max_order, sys.norm(err_const[k + 1] * D[k + 2] / scale), jnp.inf)
    norms = jnp.stack([e_m, e_norm, e_p])
    orders = jnp.stack([k - 1, k, k + 1]).astype(dtype)
    factors = jnp.where(jnp.isfinite(norms), jnp.maximum(norms, 1e-300) ** (-1 / (orders + 1)), 0.0)
    best = jnp.argmax(factors)
    return (k + best - 1).astype(jnp.int32), jnp.minimum(_MAX_FACTOR, _SAFETY * factors[best])


def _accept(sys, s: _State, D, h, k, t_new, d, e_norm, scale, ts, t1, jump_ts, max_order):
    """The state after an accepted step: the difference table updated, the observations
    saved, the order and step size chosen, and the method restarted at a jump time."""
    D = D.at[k + 2].set(d - D[k + 1]).at[k + 1].set(d)

    def add(i, D_):
        j = _MAX_ORDER - i  # from the top down
        return jnp.where(j <= k, D_.at[j].add(D_[j + 1]), D_)

    D = jax.lax.fori_loop(0, _MAX_ORDER + 1, add, D)
    i_save, ys = _saved(s, D, k, t_new, h, ts)
    n_equal = s.n_equal + 1
    change = n_equal >= k + 1  # k + 1 steps at this order: another may be better
    k_new, grow = _next_order(sys, D, k, e_norm, scale, max_order)
    k_new = jnp.where(change, k_new, k)
    h_next = jnp.where(change, h * grow, h)
    D = jnp.where(change, _rescaled(D, k_new, grow), D)
    # at a jump time the method starts again at order 1, from the field after the jump
    at_stop = t_new >= s.stop
    restart = at_stop & (t_new < t1)
    if jump_ts is not None:  # (else no program for it)
        f_new = jax.lax.cond(restart, lambda: sys.F(t_new, D[0]), lambda: jnp.zeros_like(D[0]))
        D = jnp.where(restart, jnp.zeros_like(D).at[0].set(D[0]).at[1].set(h_next * f_new), D)
    return s._replace(
        t=t_new, h=h_next, k=jnp.where(restart, 1, k_new).astype(jnp.int32), D=D,
        n_equal=jnp.where(change | restart, 0, n_equal).astype(jnp.int32),
        fresh=jnp.asarray(False), stop=jnp.where(at_stop, _next_stop(t_new, t1, jump_ts), s.stop),
        i_save=i_save, ys=ys, accepted=s.accepted + 1, n_f=s.n_f + restart.astype(jnp.int32),
    )  # fmt: skip


def _reject(sys, s: _State, D, h, k, u, conv, e_norm):
    """The state after a rejected attempt: a Newton failure with an old Jacobian gets a
    new one at the same step; else the step shrinks (halved after a Newton failure, by
    the error estimate otherwise). A step at the resolution of `t` ends the solve."""
    eps = jnp.finfo(D.dtype).eps
    new_jac = ~conv & ~s.fresh
    by_error = jnp.maximum(_MIN_FACTOR, _SAFETY * jnp.maximum(e_norm, 1e-300) ** (-1.0 / (k + 1)))
    shrink = jnp.where(new_jac, 1.0, jnp.where(conv, by_error, 0.5))
    shrink = jnp.where(jnp.isfinite(shrink), shrink, 0.5)
    h_new = h * shrink
    tiny = h_new <= 10 * eps * jnp.maximum(jnp.abs(s.t), 1.0)
    why = diffrax.RESULTS.where(
        jnp.all(jnp.isfinite(u)), diffrax.RESULTS.dt_min_reached, diffrax.RESULTS.nonfinite
    )
    return s._replace(
        h=h_new, D=jnp.where(shrink != 1.0, _rescaled(D, k, shrink), D),
        n_equal=jnp.asarray(0, jnp.int32), need_jac=new_jac,
        result=diffrax.RESULTS.where(tiny, why, s.result),
    )  # fmt: skip


def _bdf_span(solver: BDF, field, t0, t1, y0, ts, args, rtol, atol, norm, jump_ts,
              max_steps, dt0) -> SpanSolution:  # fmt: skip
    t0 = _ji_bdf_span(t0)
    sys, unravel = _system(solver, field, args, y0, rtol, atol, norm)
    u0 = ravel_pytree(y0)[0]
    dtype = u0.dtype
    t0, t1, ts = (jnp.asarray(a, dtype) for a in (t0, t1, ts))
    err_const = jnp.asarray(_ERROR_CONST, dtype)

    def attempt(s: _State) -> _State:
        h, D, t_new, u_pred, psi, c = _predict(s, dtype)
        # a Jacobian where asked for (at the start; after Newton failed with an old one),
        # at the predicted point; refactorized then or where c has moved by more than
        # _REFACTOR since the last factorization
        J = jax.lax.cond(s.need_jac, lambda: sys.jacobian(t_new, u_pred), lambda: s.J)
        stale = s.need_jac | (jnp.abs(c / s.c_lu - 1.0) > _REFACTOR)
        lu, c_lu = jax.lax.cond(stale, lambda: (sys.factor(J, c), c), lambda: (s.lu, s.c_lu))
        s = s._replace(J=J, fresh=s.fresh | s.need_jac, need_jac=jnp.asarray(False),
                       n_jac=s.n_jac + s.need_jac.astype(jnp.int32))  # fmt: skip
        u, d, conv, it, crate = sys.corrector(t_new, u_pred, psi, c, 2.0 / (1.0 + c / c_lu),
                                              lu, s.crate)  # fmt: skip
        scale = atol + rtol * jnp.abs(u)
        e_norm = sys.norm(err_const[s.k] * d / scale)
        s = s._replace(lu=lu, c_lu=c_lu, n_f=s.n_f + it, n_lu=s.n_lu + stale.astype(jnp.int32),
                       crate=jnp.where(conv, crate, 1.0))  # fmt: skip
        new = jax.lax.cond(
            conv & (e_norm <= 1.0),
            lambda: _accept(
                sys, s, D, h, s.k, t_new, d, e_norm, scale, ts, t1, jump_ts, solver.max_order
            ),  # fmt: skip
            lambda: _reject(sys, s, D, h, s.k, u, conv, e_norm),
        )
        steps = s.steps + 1
        capped = (steps >= max_steps) & (new.t < t1) & (new.result == diffrax.RESULTS.successful)
        result = diffrax.RESULTS.where(capped, diffrax.RESULTS.max_steps_reached, new.result)
        return new._replace(steps=steps, result=result)

    def going(s: _State):
        return (s.t < t1) & (s.result == diffrax.RESULTS.successful)

    with jax.numpy_dtype_promotion("standard"):
        start = _start(sys, t0, t1, u0, ts, jump_ts, rtol, atol, dt0)
        end = jax.lax.while_loop(going, attempt, start)
    ys = end.ys.at[ts.shape[0]].set(end.D[0])
    ys = jnp.where(end.result == diffrax.RESULTS.successful, ys, jnp.nan)
    stats = {
        "num_accepted_steps": end.accepted,
        "num_steps": end.steps,
        "num_jacobians": end.n_jac,
        "num_factorizations": end.n_lu,
        "num_rhs": end.n_f,
    }
    return SpanSolution(
        jnp.concatenate([ts, end.t[None]]), jax.vmap(unravel)(ys), end.result, stats
    )


@jax.jit
def _ji_bdf_span(t0):
    """The identity, as a named call that marks a program integrating with `ji.BDF`
    (`integrates_by_span`): the name stays in a jaxpr whose inner calls were traced
    before (and so not traced again)."""
    return t0


def integrates_by_span(jaxpr) -> bool:
    """Whether a traced program (a `ClosedJaxpr`) integrates with `ji.BDF` anywhere: a
    sweep asks, as BDF keeps its Jacobian by branching and under `vmap` every branch
    runs for every sample at every step."""
    seen: set[int] = set()

    def walk(j) -> bool:
        j = getattr(j, "jaxpr", j)
        if id(j) in seen:
            return False
        seen.add(id(j))
        for eqn in j.eqns:
            if eqn.params.get("name") == _ji_bdf_span.__name__:
                return True
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                        if walk(sub):
                            return True
        return False

    return walk(jaxpr)


def diffrax_solver(solver: diffrax.AbstractSolver) -> diffrax.AbstractSolver:
    """The solver `diffrax.diffeqsolve` runs where a model's solver is one of jaxident's
    span solvers (`ji.BDF`): its `for_events()`."""
    return solver.for_events() if isinstance(solver, BDF) else solver
