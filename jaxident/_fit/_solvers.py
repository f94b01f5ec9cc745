"""The re-estimation engine's solvers: Levenberg-Marquardt that evaluates only residuals at
trial points and stops on relative cost decrease, and the generalized-gradient method."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import optimistix as optx
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int, PyTree

from .._model._nonsmooth import directions_matrix, ld_jvp


class _LMState(eqx.Module):
    residual: Float[Array, " n"]
    jacobian: Float[Array, "n p"]
    cost: Float[Array, ""]
    mu: Float[Array, ""]
    nu: Float[Array, ""]
    scale2: Float[Array, " p"]
    exact: Bool[Array, ""]  # compute the Jacobian at the top of the next step
    age: Int[Array, ""]  # secant updates since the last computed Jacobian
    slow: Bool[Array, ""]  # the last accepted step lowered the cost by < rtol of it
    done: Bool[Array, ""]
    failed: Bool[Array, ""]
    aux: Any


def _flat(out) -> Array:
    return ravel_pytree(out)[0]


def _sum_squares(r: Array) -> Array:
    return jnp.where(jnp.all(jnp.isfinite(r)), jnp.sum(r**2), jnp.inf)


def more_damping(scale2, curvature, mu):
    """Moré's scaling and Nielsen's initial damping (Moré 1978; Nielsen 1999): the
    running maximum of each parameter's curvature `scale2`, the damping's diagonal `D2`
    and the damping `mu` (`1e-3` of the largest curvature at the first step, where `mu`
    is still negative). A curvature that is zero up to rounding (a parameter the data
    cannot see) is scaled as one 1e16 times smaller than the largest, not by its own
    ~1e-32: that would leave its direction undamped, and the step along it huge."""
    scale2 = jnp.maximum(scale2, curvature)
    floor = 1e-16 * jnp.max(scale2)
    D2 = jnp.where(scale2 > 0, jnp.maximum(scale2, floor), 1.0)
    tiny = jnp.finfo(scale2.dtype).tiny
    mu = jnp.where(mu < 0, 1e-3 * jnp.maximum(jnp.max(scale2), tiny), mu)
    return scale2, D2, mu


def nielsen(mu, rho):
    """Nielsen's damping after an accepted step whose gain ratio is `rho`."""
    return mu * jnp.maximum(1 / 3, 1 - (2 * rho - 1) ** 3)


class LevenbergMarquardt(optx.AbstractLeastSquaresSolver):
    """Levenberg-Marquardt with Nielsen's damping update and Moré's column scaling
    (Moré 1978; Nielsen 1999), written for residuals that come from an ODE solve:

    - a trial point costs one model solve (residuals only); the Jacobian is computed
      only where a step is accepted, once, at the top of the next step. On the E. coli
      model a 121-column Jacobian costs about five plain solves, and most trial points
      of a sloppy problem are rejected;
    - it stops when two successive accepted steps each lower the cost by less than
      `rtol` of itself (on a sloppy model the last digits of the cost take many more
      steps than the rest and move the estimates far less than their standard
      deviations; one slow step can be a heavily damped first one), or when the scaled
      step is below `atol` of the scaled iterate. Optimistix's own
      `optx.LevenbergMarquardt` waits instead for every parameter, sloppy ones
      included, to stop moving.

    A trial point where the model cannot be solved (NaN or inf residuals) is rejected
    and the damping raised. `options={"free": mask}` holds the parameters where `mask`
    is False at their starting values; `options={"jacobian": jac}` computes the
    Jacobian as `jac(y, args)` (the sensitivity equations, say) instead of by `jacfwd`
    of the residuals.

    **Arguments:** `rtol` (relative cost decrease, default `1e-8`), `atol` (relative
    step size, default `1e-10`), `updates` (default 0: a Jacobian at every accepted
    point; `m > 0`: between computed Jacobians, up to `m` Broyden rank-one updates from
    the residuals already evaluated, so a step costs about one model solve; the stopping
    tests are made on a computed Jacobian only), `norm` (unused by the stopping test;
    kept for the optimistix interface).
    """

    rtol: float = 1e-8
    atol: float = 1e-10
    norm: Callable[[PyTree], Array] = optx.max_norm
    updates: int = eqx.field(default=0, static=True)

    def __check_init__(self):
        if not (self.rtol >= 0 and self.atol >= 0):
            raise ValueError(f"rtol and atol must be >= 0, got {self.rtol}, {self.atol}.")
        if not (isinstance(self.updates, int) and self.updates >= 0):
            raise ValueError(f"updates must be an integer >= 0, got {self.updates!r}.")

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        if not (isinstance(y, jax.Array) and y.ndim == 1):
            raise TypeError("ji.LevenbergMarquardt needs a 1-D array of unknowns.")
        out, aux = fn(y, args)
        r = _flat(out)
        cost = _sum_squares(r)
        return _LMState(
            residual=r,
            jacobian=jnp.zeros((r.size, y.size), r.dtype),
            cost=cost,
            mu=jnp.asarray(-1.0, r.dtype),
            nu=jnp.asarray(2.0, r.dtype),
            scale2=jnp.zeros(y.size, r.dtype),
            exact=jnp.asarray(True),
            age=jnp.asarray(0),
            slow=jnp.asarray(False),
            done=jnp.asarray(False),
            failed=~jnp.isfinite(cost),
            aux=aux,
        )

    def step(self, fn, y, args, options, state, tags):
        free = options.get("free")
        free = jnp.ones(y.shape, bool) if free is None else jnp.asarray(free, bool)

        jac = options.get("jacobian")

        def jacobian():
            if jac is not None:
                return jac(y, args)
            return jax.jacfwd(lambda z: _flat(fn(z, args)[0]))(y)

        J = jax.lax.cond(state.exact, jacobian, lambda: state.jacobian)
        age = jnp.where(state.exact, 0, state.age)
        J = jnp.where(free[None, :], J, 0.0)
        J_ok = jnp.all(jnp.isfinite(J))
        J = jnp.where(J_ok, J, 0.0)
        r = state.residual
        scale2, D2, mu = more_damping(state.scale2, jnp.sum(J**2, axis=0), state.mu)
        D = jnp.sqrt(D2)
        # min ||J s + r||^2 + mu ||D s||^2 by QR of the stacked system (full column rank
        # for mu > 0), never through J^T J.
        A = jnp.concatenate([J, jnp.sqrt(mu) * jnp.diag(D)], axis=0)
        b = jnp.concatenate([-r, jnp.zeros(y.size, r.dtype)])
        q, R = jnp.linalg.qr(A)
        s = jax.scipy.linalg.solve_triangular(R, q.T @ b)
        s = jnp.where(free, s, 0.0)
        small = jnp.linalg.norm(D * s) <= self.atol * (jnp.linalg.norm(D * y) + self.atol)
        out_new, aux_new = fn(y + s, args)
        r_new = _flat(out_new)
        cost_new = _sum_squares(r_new)
        predicted = state.cost - jnp.sum((r + J @ s) ** 2)
        rho = jnp.where(predicted > 0, (state.cost - cost_new) / predicted, -1.0)
        accept = (rho > 1e-4) & ~small
        slow = state.cost - cost_new <= self.rtol * state.cost
        # Stop only on a computed Jacobian; with an updated one, a short step or a
        # small decrease asks for the Jacobian first. A rejected step on an updated
        # Jacobian also recomputes it (at the same point) before trusting the damping.
        stale = age > 0
        # two successive slow steps: a heavily damped first step is slow too
        converging = accept & slow & state.slow
        stop = (small | converging) & ~stale
        if self.updates > 0:
            # Broyden's rank-one secant update on the free columns (Madsen, Nielsen &
            # Tingleff 2004, section 3.4): J s = r_new - r after the step.
            ss = jnp.sum(s**2)
            secant = J + jnp.outer(r_new - r - J @ s, s) / jnp.where(ss > 0, ss, 1.0)
            secant_ok = accept & jnp.all(jnp.isfinite(secant)) & (ss > 0)
            J_next = jnp.where(secant_ok, secant, J)
            exact = (
                (accept & ((age + 1 >= self.updates) | ~secant_ok))
                | (~accept & stale)
                | ((small | converging) & stale)
            )
            age_next = jnp.where(accept, age + 1, age)
            # a rejection on an updated Jacobian is not the damping's fault: keep mu
            reject_mu = jnp.where(stale, mu, mu * state.nu)
        else:
            J_next, exact, age_next, reject_mu = J, accept, age, mu * state.nu
        new_state = _LMState(
            residual=jnp.where(accept, r_new, r),
            jacobian=J_next,
            cost=jnp.where(accept, cost_new, state.cost),
            mu=jnp.where(accept, nielsen(mu, rho), reject_mu),
            nu=jnp.where(accept | stale, 2.0, 2.0 * state.nu),
            scale2=scale2,
            exact=exact,
            age=age_next,
            slow=jnp.where(accept, slow, state.slow),
            done=stop,
            failed=state.failed | ~J_ok,
            aux=jax.tree.map(lambda a, b: jnp.where(accept, a, b), aux_new, state.aux),
        )
        return jnp.where(accept, y + s, y), new_state, new_state.aux

    def terminate(self, fn, y, args, options, state, tags):
        result = optx.RESULTS.where(
            state.failed, optx.RESULTS.nonlinear_divergence, optx.RESULTS.successful
        )
        return state.done | state.failed, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {"cost": state.cost}


class OptaxLD(eqx.Module):
    """Estimation by an optax optimiser following the generalized gradient of the
    least-squares objective, `mu = 2 sum_i S^L(t_i)^T (y(t_i) - y_i)` (Abdelfattah et
    al. 2024, Proposition 2, eq. 25), with `S^L` the L-sensitivities for `M = [d I]`.
    For nonsmooth models, where the gradient may not exist, and for large problems.
    A first-order method: on small, ill-conditioned problems the default
    `ji.LevenbergMarquardt` needs far fewer steps.

    **Arguments:**

    - `optimizer`: an optax transformation (default Adam with learning rate `1e-2`
      halving every 300 steps, in coordinates where each parameter starts at magnitude
      1).
    - `max_steps`: iteration cap.
    - `gtol`: stop when the generalized gradient's infinity norm (scaled) falls below.
    - `direction`: the probing direction `d` (default `e_1`).
    """

    optimizer: optax.GradientTransformation = eqx.field(static=True, default=None)
    max_steps: int = 5000
    gtol: float = 1e-10
    direction: tuple[float, ...] | None = None

    def minimise(self, outputs, to_theta, z0, data, sigma, free):
        """Run the optimiser; returns `(z, steps, result)`. `outputs(theta)` are the
        model outputs (flat), `to_theta(z)` the change of variables."""

        d = jnp.zeros_like(z0).at[0].set(1.0) if self.direction is None else self.direction
        M = directions_matrix(jnp.asarray(d, dtype=z0.dtype))
        opt = self.optimizer
        if opt is None:
            opt = optax.adam(optax.exponential_decay(1e-2, 300, 0.5))

        def grad_z(z):
            theta, dtheta_dz = jax.jvp(to_theta, (z,), (jnp.ones_like(z),))
            y, Y = ld_jvp(outputs, (theta,), (M,))
            mu = 2.0 * (Y[:, 1:] / sigma[:, None]).T @ ((y - data) / sigma)  # eq. 25
            return jnp.where(free, mu * dtheta_dz, 0.0)

        def cond(c):
            _, _, step, gmax = c
            return (step < self.max_steps) & (gmax > self.gtol)

        def body(c):
            z, state, step, _ = c
            g = grad_z(z)
            # optax schedules mix integer step counts with floats: allow that even when
            # the caller runs with strict dtype promotion.
            with jax.numpy_dtype_promotion("standard"):
                updates, state = opt.update(g, state, z)
                z = optax.apply_updates(z, updates)
            return z, state, step + 1, jnp.max(jnp.abs(g))

        with jax.numpy_dtype_promotion("standard"):
            state0 = opt.init(z0)
        init = (z0, state0, jnp.asarray(0), jnp.asarray(jnp.inf))
        z, _, steps, gmax = jax.lax.while_loop(cond, body, init)
        result = optx.RESULTS.where(
            gmax <= self.gtol, optx.RESULTS.successful, optx.RESULTS.nonlinear_max_steps_reached
        )
        return z, steps, result
