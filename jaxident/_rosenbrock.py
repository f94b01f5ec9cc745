"""A Rosenbrock method for stiff models: no Newton iteration, one LU factorization of
`I / (h gamma) - J` per step, and, for the sensitivity system, the same factorization
for the state and every tangent column."""

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

    Within jaxident the steps end on the observation times (the cubic Hermite dense
    output, from the step's end values and derivatives, is less accurate than the steps;
    with `diffrax.diffeqsolve` directly, pass `step_ts=` to the controller likewise).

    The right-hand side must be differentiable in the state: use an ESDIRK method for
    nonsmooth models (`nabs`, `nmax`, ...).
    """

    term_structure: ClassVar = diffrax.ODETerm
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation
    # the cubic Hermite dense output is a lower order than the steps: jaxident's
    # controllers step onto the observation times instead of interpolating
    steps_onto_outputs: ClassVar[bool] = True
    # (z, Z): a state and tangent columns whose right-hand side is linear in Z
    augmented: bool = eqx.field(static=True, default=False)

    def order(self, terms):
        return 4

    def error_order(self, terms):
        return 4

    def init(self, terms, t0, t1, y0, args):
        return terms.vf(t0, y0, args)

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        f = lambda t, y: terms.vf(t, y, args)
        f0 = jax.lax.cond(made_jump, lambda: f(t0, y0), lambda: solver_state)
        h = t1 - t0
        zero = h == 0
        h = jnp.where(zero, jnp.ones_like(h), h)
        u0, unravel = ravel_pytree(y0)
        dtype = u0.dtype

        if self.augmented:
            z0, Z0 = y0
            J = jax.jacfwd(lambda z: f(t0, (z, Z0))[0])(z0)
            # the coupling block C of the augmented Jacobian, applied to a state vector
            _, coupling = jax.linearize(lambda z: f(t0, (z, Z0))[1], z0)
        else:
            J = jax.jacfwd(lambda u: ravel_pytree(f(t0, unravel(u)))[0])(u0)
        n = J.shape[0]
        W = jnp.eye(n, dtype=dtype) / (h * _GAMMA) - J
        # The inverse (LAPACK's LU and solves), then a product per stage: for the small
        # systems this is written for, six batched products cost less than six pairs of
        # triangular solves (measured on Boehm's 8 states: 1.4x faster over 1000 samples).
        W_inv = jnp.linalg.inv(W)
        # time derivative of the right-hand side (zero, and free, for autonomous models)
        _, ft = jax.jvp(lambda t: f(t, y0), (t0,), (jnp.ones_like(t0),))

        def solve(r):
            if self.augmented:
                kz = W_inv @ r[0]
                return (kz, W_inv @ (r[1] + coupling(kz)))
            return unravel(W_inv @ ravel_pytree(r)[0])

        def combine(base, coeffs, ks, scale=1.0):
            out = base
            for c, k in zip(coeffs, ks):
                if c != 0.0:
                    out = jax.tree.map(lambda o, kk, c=float(c): o + (c * scale) * kk, out, k)
            return out

        ks = []
        for i in range(6):
            if i == 0:
                fi = f0
            else:
                yi = combine(y0, _A[i, :i], ks)
                fi = f(t0 + float(_ALPHA[i]) * h, yi)
            r = combine(fi, _C[i, :i], ks, 1.0 / h)
            if _GAMMA_I[i] != 0.0:
                r = jax.tree.map(lambda a, b, g=float(_GAMMA_I[i]): a + (h * g) * b, r, ft)
            ks.append(solve(r))
        y1 = combine(y0, _M, ks)
        y_error = ks[5]
        y1 = jax.tree.map(lambda a, b: jnp.where(zero, a, b), y0, y1)
        y_error = jax.tree.map(lambda e: jnp.where(zero, jnp.zeros_like(e), e), y_error)
        f1 = f(t1, y1)
        dt = t1 - t0
        k0 = jax.tree.map(lambda v: dt * v, f0)
        k1 = jax.tree.map(lambda v: dt * v, f1)
        dense_info = dict(y0=y0, y1=y1, k0=k0, k1=k1)
        return y1, y_error, dense_info, f1, diffrax.RESULTS.successful
