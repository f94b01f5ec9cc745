"""A Rosenbrock method for stiff models: no Newton iteration, one LU factorization of
`I / (h gamma) - J` per step, and, for the sensitivity system, the same factorization
for the state and every tangent column."""

import contextlib
import dataclasses
import weakref
from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree


# RODAS4 (Hairer & Wanner 1996, section IV.7): 6 stages, order 4 with an embedded order 3
# solution, L-stable and stiffly accurate. Written for the form
#   (I / (h gamma) - J) K_i = f(t0 + alpha_i h, y0 + sum_j A_ij K_j)
#                             + sum_j (C_ij / h) K_j + h gamma_i f_t(t0, y0),
#   y1 = y0 + sum_j M_j K_j,  error = K_6.
_GAMMA = 0.25
_ALPHA = np.array([0.0, 0.386, 0.210, 0.630, 1.0, 1.0])
_GAMMA_I = np.array([0.25, -0.1043, 0.1035, -0.0362, 0.0, 0.0])
_M = np.array(
    [1.221224509226641, 6.019134481288629, 12.53708332932087, -0.687886036105895, 1.0, 1.0]
)
_A = np.zeros((6, 6))
_A[1, 0] = 1.544
_A[2, :2] = [0.9466785280815826, 0.2557011698983284]
_A[3, :3] = [3.314825187068521, 2.896124015972201, 0.9986419139977817]
_A[4, :4] = _M[:4]
_A[5, :5] = _M[:5]
_C = np.zeros((6, 6))
_C[1, 0] = -5.6688
_C[2, :2] = [-2.430093356833875, -0.2063599157091915]
_C[3, :3] = [-0.1073529058151375, -9.594562251023355, -20.47028614809616]
_C[4, :4] = [7.496443313967647, -10.24680431464352, -33.99990352819905, 11.7089089320616]
_C[5, :5] = [
    8.083246795921522,
    -7.981132988064893,
    -31.52159432874371,
    16.31930543123136,
    -6.058818238834054,
]


# operations in the right-hand side (with the tangents) up to which the stages are unrolled
# (see `Rodas4._step`)
_UNROLL_EQUATIONS = 500
# a product `A @ x` is written out where `A` has at most this many rows and the product at
# most this many terms (`_product`)
_FUSED_ROWS = 12
_FUSED_PRODUCTS = 4096


@jax.custom_batching.custom_vmap
def _fused_product(A, x, one):
    # `x` is first divided by `one` (a runtime 1): a division is an expensive operation to
    # XLA, so `x` is computed once instead of again in each row's sum
    x = x / one
    return jnp.sum(A.reshape(A.shape + (1,) * (x.ndim - 1)) * x[None], axis=1)


@_fused_product.def_vmap
def _batched_product(axis_size, in_batched, A, x, one):
    # over a batch, XLA's reduction of the sum is slower than a batched `dot` (measured
    # in benchmarks/README.md, "Inside the fit engine and the solvers")
    A, x = (v if b else jnp.broadcast_to(v, (axis_size, *v.shape)) for v, b in
            zip((A, x), in_batched[:2]))  # fmt: skip
    return jnp.einsum("bij,bj...->bi...", A, x), True


@jax.custom_jvp
def _product(A, x, one):
    """`A @ x` for a vector or matrix `x`. Where `A` is small and the call is not batched,
    a sum of products that XLA fuses with its neighbours: on a CPU a small `dot` is a
    library call of its own (about 0.35 us for 8 x 8 times 8 x 6, more than its
    arithmetic), and a Rosenbrock step makes two of them per stage. Batched (`vmap`) it
    is a batched `dot`; its derivatives are `dot`s (transposable, for reverse mode)."""
    n = A.shape[0]
    if n > _FUSED_ROWS or n * x.size > _FUSED_PRODUCTS:
        return A @ x
    return _fused_product(A, x, one)


@_product.defjvp
def _product_jvp(primals, tangents):
    (A, x, one), (dA, dx, _) = primals, tangents
    return _product(A, x, one), dA @ x + A @ dx


def _combine(base, coeffs, ks, scale=1.0):
    """`base + scale * sum_j coeffs[j] ks[j]` over the nonzero (static) coefficients."""
    out = base
    for c, k in zip(coeffs, ks):
        if c != 0.0:
            out = jax.tree.map(lambda o, kk, c=float(c): o + (c * scale) * kk, out, k)
    return out


def _unrolled(f, t0, h, y0, ft, solve):
    """The six stages written out, with the tableau's zeros skipped: `(y1, error)`."""
    ks = []
    for i in range(6):
        yi = _combine(y0, _A[i, :i], ks)
        r = _combine(f(t0 + float(_ALPHA[i]) * h, yi), _C[i, :i], ks, 1.0 / h)
        if _GAMMA_I[i] != 0.0:
            r = jax.tree.map(lambda a, b, g=float(_GAMMA_I[i]): a + (h * g) * b, r, ft)
        ks.append(solve(r))
    return _combine(y0, _M, ks), ks[5]


def _looped(f, t0, h, y0, ft, solve):
    """The six stages in a loop (the right-hand side, the bulk of the program, traced and
    compiled once): each stage's combination of the earlier stages is a branch of a
    `lax.switch` written out with the tableau's zeros skipped, so that a stage reads
    only the stages it needs, as in `_unrolled`: `(y1, error)`."""
    dtype = jax.tree.leaves(y0)[0].dtype
    alpha, gamma_i = jnp.asarray(_ALPHA, dtype), jnp.asarray(_GAMMA_I, dtype)

    def combination(i):
        def branch(ks):
            prior = [jax.tree.map(lambda k, j=j: k[j], ks) for j in range(i)]
            zero = jax.tree.map(jnp.zeros_like, y0)
            return _combine(y0, _A[i, :i], prior), _combine(zero, _C[i, :i], prior, 1.0 / h)

        return branch

    def stage(i, ks):
        yi, ci = jax.lax.switch(i, [combination(i) for i in range(6)], ks)
        r = jax.tree.map(
            lambda a, b, d: a + b + (h * gamma_i[i]) * d, f(t0 + alpha[i] * h, yi), ci, ft
        )
        return jax.tree.map(lambda ka, kk: ka.at[i].set(kk), ks, solve(r))

    ks = jax.tree.map(lambda x: jnp.zeros((6, *x.shape), x.dtype), y0)
    ks = jax.lax.fori_loop(0, 6, stage, ks)
    stages = [jax.tree.map(lambda k, j=j: k[j], ks) for j in range(6)]
    return _combine(y0, _M, stages), stages[5]


def _reads_first(jaxpr) -> bool:
    """Whether the first input of `jaxpr` reaches an equation (a sub-program counts as
    reading it where it takes it, used or not)."""
    first = jaxpr.invars[0]
    return any(first in e.invars for e in jaxpr.eqns) or first in jaxpr.outvars


class Rodas4(diffrax.AbstractAdaptiveSolver):
    """RODAS4 (Hairer & Wanner 1996, section IV.7): a 6-stage, order-4 L-stable
    Rosenbrock method with an embedded order-3 error estimate, for stiff models.

    A step costs one Jacobian (`jax.jacfwd` of the right-hand side, dense), one
    inverse of `I / (h gamma) - J` and six right-hand-side evaluations; there is
    no Newton iteration, so no convergence test and no step rejected for a Newton
    failure. This suits the small stiff systems of systems biology at tight tolerances,
    where the per-step overhead of an ESDIRK method's iterations (`diffrax.Kvaerno5`)
    dominates.

    With error-controlled sensitivities (`ji.SensitivityEquations`, the default) the
    state and its tangents are one system whose Jacobian is block lower triangular,
    `[[J, 0], [C, I (x) J]]`: each stage solves for the state with the inverse of
    `I / (h gamma) - J`, then for all tangent columns at once with the same inverse
    (the coupling `C` applied by one Jacobian-vector product), as CVODES's staggered
    corrector shares one Newton matrix; the cost of the factorization does not grow
    with the number of parameters. The method is exact-Jacobian,
    so it keeps its order for the tangents too, and they are in the error test.

    Its dense output is linear between step ends: within jaxident the steps end on the
    observation times, so outputs are the steps' own values (with `diffrax.diffeqsolve`
    directly, pass the save times as `step_ts=` to the controller likewise).

    The right-hand side must be differentiable in the state: use an ESDIRK method for
    nonsmooth models (`nabs`, `nmax`, ...).

    `unroll`: the six stages written out (`True`: each compiled on its own, the fastest
    single solves) or as a loop (`False`: the right-hand side compiled once, the shortest
    compilation; `ji.analyze` asks for it for its few solves); by default written out
    where the right-hand side with its tangents is a small program. `augmented`,
    `state_field`, `step_once`: set by jaxident where it integrates (the state with its
    tangents, the state's own right-hand side, a step traced once); leave them out.
    """

    term_structure: ClassVar = diffrax.ODETerm
    interpolation_cls: ClassVar = diffrax.LocalLinearInterpolation
    # the dense output is linear: jaxident's controllers step onto the observation
    # times instead of interpolating
    steps_onto_outputs: ClassVar[bool] = True
    # (z, Z): a state and tangent columns whose right-hand side is linear in Z
    augmented: bool = eqx.field(static=True, default=False)
    # for an augmented state, the right-hand side of the state alone, `(t, z, args)`:
    # its Jacobian is traced without the tangents
    state_field: Callable | None = eqx.field(static=True, default=None, repr=False)
    # the step as one jitted function, set by `traced_once` for one solve
    step_once: Callable | None = eqx.field(static=True, default=None, repr=False)
    # the six stages written out (`True`: each stage compiled on its own, the fastest
    # single solves) or a loop of them (`False`: the right-hand side compiled once, the
    # shortest compilation, for an answer computed once); `None`: written out where the
    # right-hand side with its tangents is a small program (`_UNROLL_EQUATIONS`)
    unroll: bool | None = eqx.field(static=True, default=None)

    def order(self, terms):
        return 4

    def error_order(self, terms):
        return 4

    def init(self, terms, t0, t1, y0, args):
        return None

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        if self.step_once is not None:
            return self.step_once(terms, t0, t1, y0, args)
        return self._step(terms, t0, t1, y0, args)

    def _step(self, terms, t0, t1, y0, args):
        f = lambda t, y: terms.vf(t, y, args)
        h = t1 - t0
        zero = h == 0
        h = jnp.where(zero, jnp.ones_like(h), h)
        u0, unravel = ravel_pytree(y0)
        dtype = u0.dtype

        if self.augmented:
            z0, Z0 = y0
            if self.state_field is None:
                J = jax.jacfwd(lambda z: f(t0, (z, Z0))[0])(z0)
            else:
                J = jax.jacfwd(lambda z: self.state_field(t0, z, args))(z0)
            # the coupling block C of the augmented Jacobian, applied to a state vector
            _, coupling = jax.linearize(lambda z: f(t0, (z, Z0))[1], z0)
        else:
            J = jax.jacfwd(lambda u: ravel_pytree(f(t0, unravel(u)))[0])(u0)
        n = J.shape[0]
        W = jnp.eye(n, dtype=dtype) / (h * _GAMMA) - J
        # The inverse (LAPACK's LU and solves), then a product per stage: for the small
        # systems this is written for, six batched products cost less than six pairs of
        # triangular solves (measured on Boehm's 8 states over a sweep).
        W_inv = jnp.linalg.inv(W)
        one = h / h
        # time derivative of the right-hand side (zero, and not traced, for autonomous
        # models)
        rhs = jax.make_jaxpr(f)(t0, y0)
        if _reads_first(rhs.jaxpr):
            _, ft = jax.jvp(lambda t: f(t, y0), (t0,), (jnp.ones_like(t0),))
        else:
            ft = jax.tree.map(jnp.zeros_like, y0)

        def solve(r):
            if self.augmented:
                kz = _product(W_inv, r[0], one)
                return (kz, _product(W_inv, r[1] + coupling(kz), one))
            return unravel(_product(W_inv, ravel_pytree(r)[0], one))

        # The stages, unrolled where the right-hand side (with its tangents) is a small
        # program; else in a loop (the right-hand side compiled once, each stage's
        # combination of the earlier ones a branch of a switch). Measured against
        # unrolling (1 core, sensitivities; a 32-sample vmap, a single call, compiling):
        # Boehm (421 operations) 1.0x, 1.5x, 0.7x the time; Schwen (606) 1.05x, 1.24x,
        # 0.6x; Fujita (712) 1.0x, 0.9x, 0.48x; Zheng (2,252) 1.07x, 1.0x, 0.42x. The
        # count does not grow with the number of directions (they are a vmap).
        size = len(rhs.eqns)
        unroll = size <= _UNROLL_EQUATIONS if self.unroll is None else self.unroll
        stages = _unrolled if unroll else _looped
        y1, y_error = stages(f, t0, h, y0, ft, solve)
        y1 = jax.tree.map(lambda a, b: jnp.where(zero, a, b), y0, y1)
        y_error = jax.tree.map(lambda e: jnp.where(zero, jnp.zeros_like(e), e), y_error)
        return y1, y_error, dict(y0=y0, y1=y1), None, diffrax.RESULTS.successful


class _WeakStep:
    """The jitted step of one solve, held weakly: diffrax keeps its solver (with this)
    in the static key of its own jitted `diffeqsolve` long after the solve has been
    traced, and the step's trace should not live as long. A step traced after the
    context (the backward pass of a checkpointed solve, say), or of terms that cannot
    be a static argument, is traced as usual."""

    def __init__(self, jitted, solver):
        self._ref = weakref.ref(jitted)
        self._solver = solver

    def __call__(self, terms, t0, t1, y0, args):
        jitted = self._ref()
        dynamic, static = eqx.partition(terms, eqx.is_array)
        try:
            hash(static)
        except TypeError:
            jitted = None
        if jitted is None:
            return self._solver._step(terms, t0, t1, y0, args)
        return jitted(dynamic, static, t0, t1, y0, args)


@contextlib.contextmanager
def traced_once(solver: diffrax.AbstractSolver):
    """`solver` for the `diffeqsolve` inside this context, with a Rosenbrock step that
    is traced once. diffrax traces a step three times (twice to learn which of its
    outputs are static); as one jitted function, the later two reuse the first trace.
    On E. coli's sensitivities (the right-hand side under `jacfwd`, `linearize` and a
    121-column `vmap` of `jvp` in every step) that halves the tracing. The jitted step
    (with its trace) lives as long as the context. Other solvers are given as they
    are."""
    if not isinstance(solver, Rodas4) or solver.step_once is not None:
        yield solver
        return

    def step(dynamic, static, t0, t1, y0, args):
        return solver._step(eqx.combine(dynamic, static), t0, t1, y0, args)

    jitted = jax.jit(step, static_argnums=1)  # alive for the context, held by this frame
    yield dataclasses.replace(solver, step_once=_WeakStep(jitted, solver))
