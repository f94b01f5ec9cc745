"""The re-estimation engine's solvers: the one Levenberg-Marquardt (an optimistix solver)
that fits a model's least squares and a problem's likelihood, and the generalized-gradient
method for nonsmooth models."""

import abc
from collections.abc import Callable
from typing import Any, NamedTuple, TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int, PyTree

from .._model._nonsmooth import directions_matrix, ld_jvp


if TYPE_CHECKING:
    import optax


def _flat(out) -> Array:
    return ravel_pytree(out)[0]


def _sum_squares(r: Array) -> Array:
    return jnp.where(jnp.all(jnp.isfinite(r)), jnp.sum(r**2), jnp.inf)


def floored(curvature):
    """Curvatures for scaling: one that is zero up to rounding (a parameter the data
    cannot see) counts as 1e16 times smaller than the largest, not as its own ~1e-32
    (1 where it is not positive)."""
    return jnp.where(curvature > 0, jnp.maximum(curvature, 1e-16 * jnp.max(curvature)), 1.0)


# Moré's running maximum of a curvature, at most this many times the curvature now: on
# Schwen's 30 parameters (a start at -log L = 1e5), the curvatures of the start held
# 25 of them at 1e3-1e10 times their own, so that 200 steps moved five parameters and
# ended at 36,870 where pyPESTO's fides reaches 943.8 (benchmarks/README.md)
_SCALE_CAP = 1e4


def more_damping(scale2, curvature, mu):
    """Moré's scaling and Nielsen's initial damping (Moré 1978; Nielsen 1999): the
    running maximum of each parameter's curvature `scale2` (at most `_SCALE_CAP` times
    the curvature now), the damping's diagonal `D2` and the damping `mu` (`1e-3` of the
    largest curvature at the first step, where `mu` is still negative). `D2` is
    `floored`: a curvature zero up to rounding, scaled by its own ~1e-32, would leave
    its direction undamped and the step along it huge."""
    scale2 = jnp.maximum(scale2, curvature)
    scale2 = jnp.minimum(scale2, _SCALE_CAP * floored(curvature))
    D2 = floored(scale2)
    tiny = jnp.finfo(scale2.dtype).tiny
    mu = jnp.where(mu < 0, 1e-3 * jnp.maximum(jnp.max(scale2), tiny), mu)
    return scale2, D2, mu


def nielsen(mu, rho):
    """Nielsen's damping after an accepted step whose gain ratio is `rho`."""
    return mu * jnp.maximum(1 / 3, 1 - (2 * rho - 1) ** 3)


class _State(eqx.Module):
    f: Float[Array, ""]  # the cost: -log L, or half the sum of squared residuals
    g: Float[Array, " q"]  # its gradient and its Gauss-Newton (Fisher) Hessian at y
    H: Float[Array, "q q"]
    metric: Float[Array, " q"]  # each unknown's curvature for the damping's scaling
    floor: Float[Array, ""]  # the cost below which only absolute changes count
    scale2: Float[Array, " q"]
    mu: Float[Array, ""]
    nu: Float[Array, ""]
    slow: Bool[Array, ""]  # the last accepted step lowered the cost by < rtol of it
    done: Bool[Array, ""]
    stalled: Bool[Array, ""]
    rescued: Bool[Array, ""]
    failed: Bool[Array, ""]
    secant: Float[Array, "q q"]  # the rest of the Hessian, for the second phase
    second: Bool[Array, ""]
    residual: Any  # residuals at y (residual form), else None
    jacobian: Any  # the Jacobian behind g and H (residual form), else None
    age: Int[Array, ""]  # Broyden updates since the Jacobian was last computed
    refresh: Bool[Array, ""]  # compute the Jacobian at y at the top of the next step
    aux: Any
    # nothing evaluated yet (`deferred_init`): the next step evaluates the start
    pending: Bool[Array, ""] = eqx.field(default_factory=lambda: jnp.asarray(False))


class _Objective(NamedTuple):
    """What the solver evaluates: `value(y) -> (f, r, aux)` (`inf` where the model cannot
    be solved; `r` the residuals, or None), `derivatives(y, r) -> (g, H, J, good,
    metric)`: `metric` the curvatures that scale the damping (`diag(H)`, unless the
    cost's derivatives give their own)."""

    value: Callable
    derivatives: Callable
    residuals: bool


def _objective(fn, args, options, free) -> _Objective:
    given = options.get("derivatives")
    if given is not None:  # a cost and, from options, its gradient and Fisher information

        def value(y):
            f, aux = fn(y, args)
            f = jnp.asarray(f)
            return jnp.where(jnp.isfinite(f), f, jnp.inf), None, aux

        def derivatives(y, r):
            out = given(y, args)
            _, g, H, good = out[:4]
            return g, H, None, good, out[4] if len(out) > 4 else jnp.diag(H)

        return _Objective(value, derivatives, False)
    jac = options.get("jacobian")

    def value(y):
        out, aux = fn(y, args)
        r = _flat(out)
        return 0.5 * _sum_squares(r), r, aux

    def derivatives(y, r):
        J = jac(y, args) if jac is not None else jax.jacfwd(lambda z: _flat(fn(z, args)[0]))(y)
        J = jnp.where(free[None, :], J, 0.0)
        good = jnp.all(jnp.isfinite(J))
        J = jnp.where(good, J, 0.0)
        H = J.T @ J
        return J.T @ r, H, J, good, jnp.diag(H)

    return _Objective(value, derivatives, True)


def _mask_and_box(options, y):
    free = options.get("free")
    free = jnp.ones(y.shape, bool) if free is None else jnp.asarray(free, bool)
    lower, upper = options.get("bounds", (-jnp.inf, jnp.inf))
    lower = jnp.broadcast_to(jnp.asarray(lower, y.dtype), y.shape)
    upper = jnp.broadcast_to(jnp.asarray(upper, y.dtype), y.shape)
    return free, lower, upper


def structured_secant(S, d, y, H):
    """The Dennis-Gay-Welsch update (as NL2SOL's) of `S`, the part of the Hessian that
    the Fisher information `H` (at the new point) leaves out, for a step `d` along which
    the gradient changed by `y`: sized down by Oren-Luenberger's factor, then the least
    change (in a weighted norm) that is symmetric and satisfies the secant equation
    `(H + S) d = y`. Unchanged where `y . d` is too small to divide by."""
    rest = y - H @ d
    dSd = d @ S @ d
    size = jnp.abs(d @ rest) / jnp.where(dSd != 0, jnp.abs(dSd), 1.0)
    sized = jnp.where(dSd != 0, jnp.minimum(1.0, size), 1.0) * S
    r = rest - sized @ d
    yd = y @ d
    ok = jnp.abs(yd) > 1e-12 * jnp.linalg.norm(y) * jnp.linalg.norm(d)
    yd = jnp.where(ok, yd, 1.0)
    update = (jnp.outer(r, y) + jnp.outer(y, r)) / yd - (r @ d) * jnp.outer(y, y) / yd**2
    return jnp.where(ok & jnp.all(jnp.isfinite(update)), sized + update, S)


_MARQUARDT = 1e-3  # a damping relative to each curvature (Marquardt's), for a restart


class AbstractBox(eqx.Module):
    """What a Levenberg-Marquardt step that leaves the box becomes, before it is
    clipped to the box."""

    @abc.abstractmethod
    def step(self, g, jacobian, residual, y, step, held, lower, upper, model, damping):
        """The step from `y` (`held`: the parameters held at their bounds)."""


class Clip(AbstractBox):
    """Each parameter that a step carries out of the box is clipped to its bound (the
    default)."""

    def step(self, g, jacobian, residual, y, step, held, lower, upper, model, damping):
        return step


class Face(AbstractBox):
    """The parameters a step carries out of the box go to the bound they cross and stay
    there, and the others' step is solved again with those fixed (one more `q x q`
    solve a step): the trial is the model's minimiser on that face. For fits with many
    parameters at bounds (Zheng's 46: half as many fits reach the step cap;
    benchmarks/README.md)."""

    def step(self, g, jacobian, residual, y, step, held, lower, upper, model, damping):
        return _face_step(g, jacobian, residual, y, step, held, lower, upper, model, damping)


class AbstractCurvatureScaling(eqx.Module):
    """How the curvatures that scale the damping (Moré 1978) carry over from step to
    step."""

    @abc.abstractmethod
    def accepted(self, scale2):
        """The scaling curvatures after an accepted step (before the new point's
        curvatures are taken into their maximum)."""


class RunningMaximum(AbstractCurvatureScaling):
    """Moré's running maximum of each parameter's curvature (capped at 1e4 times its
    curvature now): the largest curvature seen scales the damping for the rest of the
    fit."""

    def accepted(self, scale2):
        return scale2


class FadingMaximum(AbstractCurvatureScaling):
    """Moré's running maximum, multiplied by `factor` (default 1/2) at each accepted
    step, so that the curvatures of points left behind fade within a few steps. From
    far-off starts the curvatures fall by orders of magnitude on the way, and a running
    maximum holds most of the parameters still (on Schwen's 30, nearly every fit ran to
    the step cap); this converges more starts per minute on Boehm, Perelson and Schwen
    (benchmarks/README.md). `ji.FisherLM`'s default."""

    factor: float = eqx.field(default=0.5, static=True)

    def __check_init__(self):
        if not (isinstance(self.factor, (int, float)) and 0 < self.factor <= 1):
            raise ValueError(f"factor must be in (0, 1], got {self.factor!r}.")

    def accepted(self, scale2):
        return self.factor * scale2


class LevenbergMarquardt(optx.AbstractLeastSquaresSolver):
    """The re-estimation engine: a bounded Levenberg-Marquardt with Moré's scaling and
    Nielsen's damping (Moré 1978; Nielsen 1999) on a Gauss-Newton model of the cost,
    written for costs that come from ODE solves. It serves `ji.estimate` of a model
    (weighted least squares, through `optimistix.least_squares`), every fit of a
    problem (`ji.FisherLM`: the negative log-likelihood with the Fisher information as
    its Hessian), the profiles and the stepwise procedures' re-estimations.

    - A trial point costs one plain solve; the derivatives are computed only where a
      step is accepted (most trial points of a sloppy problem are rejected). A trial
      point where the model cannot be solved (NaN or inf) is rejected and the damping
      raised.
    - It stops when two successive accepted steps each lower the cost by less than
      `rtol` of it and the Gauss-Newton step promises less than the cost's noise, or
      where the projected gradient vanishes in units of the curvature (`gtol`). Where
      the damping, not the cost, stops it, it restarts its damping at Marquardt's
      dimensionless 1e-3 on the curvatures there (not their running maximum), again
      after a restart that brought progress, and stops as stagnated where one does not
      free it. A rejected trial that promised less than the cost's noise, where
      Gauss-Newton promises no more, ends it.
    - Where the Gauss-Newton model alone would stop, it goes on with a Dennis-Gay-Welsch
      secant of the rest of the Hessian added (`structured_secant`, as NL2SOL) until it
      stops again, as fides turns from the Fisher information to BFGS (`secant`:
      default for a likelihood, not for residuals, whose Gauss-Newton model leaves out
      only the residuals' curvature).
    - On residuals each step solves `min ||J d + r||^2 + mu ||D d||^2` by QR of the
      stacked system, never through `J^T J` (whose condition is the square of `J`'s).

    **Options** (`optimistix.least_squares(..., options=...)`): `"free"`, a mask that
    holds the other unknowns at their starting values; `"bounds"`, `(lower, upper)`
    (a parameter at a bound whose gradient points out is held); `"jacobian"`,
    `jac(y, args)` for the residuals' Jacobian (the sensitivity equations, say) instead
    of `jacfwd`; `"derivatives"`, `fn(y, args) -> (f, gradient, Fisher information,
    good)`, with which `fn` returns the cost itself (a negative log-likelihood), not
    residuals.

    **Arguments:** `rtol` (relative cost decrease, default `1e-8`), `atol` (a step below
    `atol` of the iterate, scaled, has vanished; default `1e-12`), `noise` (the cost's
    relative noise; default `100 rtol` for a likelihood; for residuals, none: their fit
    stops on `rtol` and `atol`, where Gauss-Newton promises less than `rtol` of the
    cost), `ftol` (an absolute decrease of the cost that no
    conclusion notices: `ji.FisherLM` uses 1e-3 of a log-likelihood), `gtol`,
    `updates` (residual form only; default 0: the Jacobian at every accepted point;
    `m > 0`: between computed Jacobians, up to `m` Broyden rank-one updates from the
    residuals already evaluated, so a step costs about one model solve; the stopping
    tests are made on a computed Jacobian only), `box` (what a step that leaves the
    box becomes: `ji.Clip()`, default, or `ji.Face()`), `norm` (for optimistix's
    interface), `scaling` (how the curvatures that scale the damping carry over:
    `ji.RunningMaximum()`, Moré's, default, or `ji.FadingMaximum(factor)`).
    The cost is `-log L`, or half the sum of squared residuals; below `floor` (1 for a
    likelihood, `eps` of the starting cost for residuals) only absolute changes count.
    """

    rtol: float | Array = 1e-8
    atol: float | Array = 1e-12
    noise: float | Array | None = None
    ftol: float | Array = 0.0
    gtol: float | Array = 1e-6
    norm: Callable[[PyTree], Array] = optx.max_norm
    updates: int = eqx.field(default=0, static=True)
    secant: bool | None = eqx.field(default=None, static=True)
    box: AbstractBox = eqx.field(default=Clip(), static=True)
    scaling: AbstractCurvatureScaling = eqx.field(default=RunningMaximum(), static=True)

    def __check_init__(self):
        for name in ("rtol", "atol", "ftol", "gtol"):
            value = getattr(self, name)
            if isinstance(value, (int, float)) and not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}.")
        if not (isinstance(self.updates, int) and self.updates >= 0):
            raise ValueError(f"updates must be an integer >= 0, got {self.updates!r}.")
        if not isinstance(self.box, AbstractBox):
            raise TypeError(f"box must be ji.Clip() or ji.Face(), got {self.box!r}.")
        if not isinstance(self.scaling, AbstractCurvatureScaling):
            raise TypeError(
                f"scaling must be ji.RunningMaximum() or ji.FadingMaximum(), got {self.scaling!r}."
            )

    def _noise(self, residuals: bool):
        """The cost's relative noise, or None: no test against it (residuals)."""
        if self.noise is not None:
            return self.noise
        return None if residuals else 100.0 * self.rtol

    def _phases(self, residuals: bool) -> bool:
        """Whether the second phase (the structured secant) follows the first."""
        return (not residuals) if self.secant is None else self.secant

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        if not (isinstance(y, jax.Array) and y.ndim == 1):
            raise TypeError("ji.LevenbergMarquardt needs a 1-D array of unknowns.")
        options = {} if options is None else options
        free, _, _ = _mask_and_box(options, y)
        obj = _objective(fn, args, options, free)
        if self.updates and not obj.residuals:
            raise ValueError("updates= needs residuals, not a cost with its derivatives.")
        f, r, aux = obj.value(y)
        if obj.residuals:  # (a start where the model cannot be solved fails below)
            r = jnp.where(jnp.isfinite(f), r, 0.0)
        return self._start(obj, y, f, r, aux, *obj.derivatives(y, r))

    def deferred_init(self, fn, y, options) -> "_State":
        """`init` for `run_steps`: a state that evaluates nothing yet (its first pass
        through `run_steps` evaluates the start, with the same solves as every step,
        and is not counted as one), so that a compiled fit contains the model's solves
        once. The shapes of the residuals and the auxiliary output come from tracing
        `fn` once, without compiling it."""
        free, _, _ = _mask_and_box(options, y)
        obj = _objective(fn, None, options, free)
        q, dtype = y.shape[0], y.dtype

        def start(y):  # the state's structure: derivatives as placeholders
            f, r, aux = obj.value(y)
            J = None if r is None else jnp.zeros((r.shape[0], q), dtype)
            zeros = jnp.zeros(q, dtype)
            return self._start(obj, y, f, r, aux, zeros, jnp.zeros((q, q), dtype), J,
                               jnp.asarray(True), zeros)  # fmt: skip

        shapes = jax.eval_shape(start, y)
        state = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
        return eqx.tree_at(lambda s: s.pending, state, jnp.asarray(True))

    def _start(self, obj, y, f, r, aux, g, H, J, good, metric) -> "_State":
        """The state at the start `y`, from its evaluations."""
        good = good & jnp.isfinite(f)
        q, dtype = y.shape[0], y.dtype
        floor = jnp.finfo(dtype).eps * f if obj.residuals else jnp.asarray(1.0, dtype)
        return _State(
            f=jnp.where(good, f, jnp.inf), g=jnp.where(good, g, 0.0), H=jnp.where(good, H, 0.0),
            metric=jnp.where(good, metric, 0.0), floor=jnp.where(good, floor, 1.0),
            scale2=jnp.zeros(q, dtype),
            mu=jnp.asarray(-1.0, dtype), nu=jnp.asarray(2.0, dtype), slow=jnp.asarray(False),
            done=jnp.asarray(False), stalled=jnp.asarray(False), rescued=jnp.asarray(False),
            failed=~good, secant=jnp.zeros((q, q), dtype),
            second=jnp.asarray(not self._phases(obj.residuals)),
            residual=r, jacobian=J, age=jnp.asarray(0), refresh=jnp.asarray(False), aux=aux,
        )  # fmt: skip

    def step(self, fn, y, args, options, state, tags):
        options = {} if options is None else options
        free, lower, upper = _mask_and_box(options, y)
        obj = _objective(fn, args, options, free)
        s = state
        if self.updates:  # a stale Jacobian that stopped the last step: compute it here
            s = jax.lax.cond(s.refresh, lambda s: _recomputed(obj, y, s), lambda s: s, s)
        phases = self._phases(obj.residuals)
        trial, model, held, scale2, D2, mu = _damped_step(
            s, y, lower, upper, free, phases, self.box
        )
        # a deferred start (`deferred_init`) is evaluated here, at the same call sites
        # as every trial point, so that a compiled fit holds one copy of the model's
        # solves, not two
        trial = jnp.where(s.pending, y, trial)
        d = trial - y
        predicted = -(s.g @ d + 0.5 * d @ model @ d)
        f_new, r_new, aux_new = obj.value(trial)
        if obj.residuals:  # (as `init`: a start where the model cannot be solved fails)
            r_new = jnp.where(jnp.isfinite(f_new), r_new, 0.0)
        rho = jnp.where(predicted > 0, (s.f - f_new) / predicted, -1.0)
        accept = (rho > 1e-4) & jnp.isfinite(f_new)
        kept = (s.g, s.H, s.jacobian, jnp.asarray(True), s.metric)
        if self.updates:
            exact, updated = _broyden(s, d, r_new, accept, self.updates)
            exact = exact | s.pending
            g2, H2, J2, good, m2 = jax.lax.cond(
                exact, lambda: obj.derivatives(trial, r_new), lambda: updated
            )
            age = jnp.where(exact, 0, jnp.where(accept, s.age + 1, s.age))
        else:
            g2, H2, J2, good, m2 = jax.lax.cond(
                accept | s.pending, lambda: obj.derivatives(trial, r_new), lambda: kept
            )
            age = s.age
        # the cost compared from step to step is the plain solve's: a solve with
        # sensitivities takes other steps, and its cost differs by the discretization
        # (1.3e-3 at Fujita's -log L of 3,224), more than a step near the end gains
        f = jnp.where(accept, f_new, s.f)
        slow = s.f - f <= self.rtol * jnp.maximum(jnp.abs(s.f), s.floor)
        converged, stalled, rescue = self._stopping(
            s, obj.residuals, y, trial, g2, m2, accept, predicted, slow, held, free, lower,
            upper, scale2, D2, mu)  # fmt: skip
        if self.updates:  # stop only on a computed Jacobian: compute it first
            stale = s.age > 0  # (the Jacobian this step was made on)
            refresh = (converged | stalled | rescue | ~accept) & stale
            converged, stalled, rescue = (x & ~stale for x in (converged, stalled, rescue))
            # a rejection on an updated Jacobian is not the damping's fault: keep mu
            reject_mu = jnp.where(s.age > 0, mu, mu * s.nu)
        else:
            refresh, reject_mu = jnp.asarray(False), mu * s.nu
        mu = jnp.where(accept, nielsen(mu, rho), reject_mu)
        stop = converged | stalled
        turn = stop & ~s.second  # the Gauss-Newton model's fit ends: the second begins
        new = _State(
            f=f, g=g2, H=H2, metric=m2, floor=s.floor,
            # a restart scales the damping by the curvatures here, not their running
            # maximum: curvatures from a start whose noise level was far too small (the
            # dynamics' scale with 1/sigma^2; 6e18 against 9 on a Perelson start) would
            # hold those parameters still for the rest of the fit
            scale2=jnp.where(rescue, m2, jnp.where(accept, self.scaling.accepted(scale2), scale2)),
            mu=jnp.where(rescue, _MARQUARDT, mu),
            nu=jnp.where(accept | rescue | refresh, 2.0, 2.0 * s.nu),
            slow=jnp.where(rescue | turn, False, jnp.where(accept, slow, s.slow)),
            done=stop & s.second,
            stalled=stalled & ~converged & s.second,
            # (a restart that freed the fit, which then made progress, may be made again)
            rescued=jnp.where(turn | (accept & ~slow & ~rescue), False, s.rescued | rescue),
            failed=s.failed | ~good,
            secant=jnp.where(accept & good, structured_secant(s.secant, d, g2 - s.g, H2),
                             s.secant) if phases else s.secant,
            second=s.second | stop,
            residual=None if r_new is None else jnp.where(accept, r_new, s.residual),
            jacobian=J2, age=age, refresh=refresh,
            aux=jax.tree.map(lambda a, b: jnp.where(accept, a, b), aux_new, s.aux),
        )  # fmt: skip
        start = self._start(obj, y, f_new, r_new, aux_new, g2, H2, J2, good, m2)
        new = jax.tree.map(lambda a, b: jnp.where(s.pending, a, b), start, new)
        return jnp.where(accept & ~s.pending, trial, y), new, new.aux

    def _stopping(self, s, residuals, y, trial, g2, m2, accept, predicted, slow, held, free,
                  lower, upper, scale2, D2, mu):  # fmt: skip
        """Whether the step from `y` to `trial` (accepted or not; the gradient `g2` and
        curvatures `m2` at the point the fit is now at, the trial's `predicted`
        decrease) ends the phase: `(converged, stalled, rescue)`, `rescue` where the
        damping, not the cost, stops it and restarts it (again only after progress)."""
        g, H = s.g, s.H
        d = trial - y
        relative = self._noise(residuals)
        noise = None if relative is None else relative * jnp.maximum(jnp.abs(s.f), s.floor)
        both = held[:, None] | held[None, :]
        # the projected gradient in units of the curvature (the decrease a Newton step
        # would bring is half its square): nothing left to gain
        moving = free & ~(((trial <= lower) & (g2 > 0)) | ((trial >= upper) & (g2 < 0)))
        # (against the curvature there, not its running maximum `D2`, which a start far
        # out leaves 1e30 times too large: a gradient small against that is not flat)
        newton = jnp.max(jnp.where(moving, jnp.abs(g2) / jnp.sqrt(floored(m2)), 0.0))
        flat = newton <= self.gtol * jnp.sqrt(jnp.minimum(s.floor, 1.0))
        # stuck where the Gauss-Newton step promises less than the noise of the cost
        # (the solves' rtol): that is the optimum, as far as the cost can tell; with no
        # noise to compare with (residuals), where it promises less than `rtol` of the
        # cost (two slow steps that the damping made slow are not the optimum: a decay
        # started at 1e8 times its amplitude stopped there as converged)
        # (regularized by the curvatures here: by their running maximum `D2`, which a
        # start whose noise level was far too small leaves 1e18 times too large, the
        # promise vanished where the fit had 122 units of -log L left to gain)
        gn = -jax.scipy.linalg.solve(
            jnp.where(both, 0.0, H) + jnp.diag(jnp.where(held, 1.0, 1e-12 * floored(s.metric))),
            jnp.where(held, 0.0, g),
            assume_a="pos",
        )
        promise = -(g @ gn + 0.5 * gn @ H @ gn)
        if noise is None:
            near = ~(promise > self.rtol * jnp.maximum(jnp.abs(s.f), s.floor))
        else:
            near = promise <= jnp.maximum(noise, self.ftol)
        # steps that vanish (or two slow ones) where Gauss-Newton promises much: the
        # damping, not the cost, stops the fit (Nielsen's initial `mu`, relative to the
        # largest curvature, damps a start whose curvatures span 1e30 by 1e10 and more:
        # Fujita's at a cost of 1e15, a decay whose scale starts 1e4 off). Such a fit
        # restarts its damping once at Marquardt's dimensionless 1e-3, and stops as
        # stagnated (not converged) if that does not free it.
        size = jnp.sqrt(jnp.sum(D2 * y**2)) + self.atol
        tiny = jnp.sqrt(jnp.sum(D2 * d**2)) <= self.atol * size
        crawling = ((~accept & tiny) | (accept & slow & s.slow)) & ~near
        rescue = crawling & ~s.rescued
        # no step lowers the cost: the damping ran away, or the step vanished
        stuck = ~accept & ((mu * s.nu > 1e16 * jnp.max(scale2)) | tiny) & ~rescue
        if noise is None:
            settled = stuck
        else:  # (or a rejected trial that promised less than the cost can show, where
            # Gauss-Newton promises no more: more damping only promises less; on
            # Perelson the fits' last eight trials were such)
            small = ~accept & near & (predicted <= jnp.maximum(noise, self.ftol))
            settled = (stuck & (promise <= noise)) | small
        stalled = stuck | (crawling & ~rescue)
        converged = (accept & slow & s.slow & near) | (accept & flat) | settled
        return converged, stalled, rescue

    def terminate(self, fn, y, args, options, state, tags):
        result = optx.RESULTS.where(
            state.failed,
            optx.RESULTS.nonlinear_divergence,
            optx.RESULTS.where(state.stalled, optx.RESULTS.stagnation, optx.RESULTS.successful),
        )
        return state.done | state.failed, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {"cost": state.f}


NO_TAGS = frozenset()


def run_steps(solver, fn, options, y, state, steps, until):
    """`ji.LevenbergMarquardt`'s steps from `(y, state)` until it stops or
    `steps == until` (a fit in one loop, or a chunk of one that a host loop runs):
    `(y, state, steps)`; a deferred start is evaluated first, uncounted."""

    def cond(c):
        y, state, k = c
        done, _ = solver.terminate(fn, y, None, options, state, NO_TAGS)
        return (~done & (k < until)) | state.pending

    def body(c):
        y, state, k = c
        # (evaluating a deferred start is not a step; the count keeps the type it came
        # with, so that a chunk's output steps call the next chunk's compiled kernel)
        k = jnp.where(state.pending, k, k + 1)
        y, state, _ = solver.step(fn, y, None, options, state, NO_TAGS)
        return y, state, k

    return jax.lax.while_loop(cond, body, (y, state, steps))


def outcome(solver, fn, options, y, state, steps, max_steps):
    """The `optimistix.RESULTS` of `run_steps`: the solver's, or the step cap reached."""
    done, result = solver.terminate(fn, y, None, options, state, NO_TAGS)
    return optx.RESULTS.where(
        ~done & (steps >= max_steps), optx.RESULTS.nonlinear_max_steps_reached, result
    )


def _damped_step(s: _State, y, lower, upper, free, phases: bool, box: AbstractBox = Clip()):
    """The trial point of one step from `y`: a Levenberg-Marquardt step in the box, on
    the Gauss-Newton model (or, in the second phase, with the structured secant where
    that is a descent), and the model, holds and damping it used."""
    g, H = s.g, s.H
    # Moré's scaling (the running maximum of each curvature) with Nielsen's damping
    # (the initial `mu` relative to the largest curvature); a dimensionless `mu`
    # (Marquardt's) and a cap on each step at 0.1 or 1 of a parameter's box were
    # tried: on 40 Boehm starts 1 and 0 reached the optimum against 9
    scale2, D2, mu = more_damping(s.scale2, s.metric, s.mu)
    # a parameter at a bound whose gradient points out of the box is held
    held = ((y <= lower) & (g > 0)) | ((y >= upper) & (g < 0)) | ~free
    gf = jnp.where(held, 0.0, g)
    if s.jacobian is None:
        step = _held_solve(H, g, held, mu * D2, pos=True)
    else:
        step = _held_lstsq(s.jacobian, s.residual, held, mu * D2)
    model = H
    if phases:  # the second phase's model, unless it is not a descent there (H + S
        # indefinite)
        HS = H + s.secant
        step2 = _held_solve(HS, g, held, mu * D2)
        use = s.second & jnp.all(jnp.isfinite(step2)) & (gf @ step2 < 0)
        step = jnp.where(use, step2, step)
        model = jnp.where(use, HS, H)
    step = jnp.where(held, 0.0, step)
    step = box.step(s.g, s.jacobian, s.residual, y, step, held, lower, upper, model, mu * D2)
    trial = jnp.clip(y + step, lower, upper)
    return trial, model, held, scale2, D2, mu


def _held_solve(M, g, hold, damping, pos=False):
    """The damped model's step `-(M + diag(damping))^-1 g` in the unknowns not held (0
    in those); `pos`: `M` is positive semi-definite (Cholesky)."""
    both = hold[:, None] | hold[None, :]
    A = jnp.where(both, 0.0, M) + jnp.diag(jnp.where(hold, 1.0, damping))
    gf = jnp.where(hold, 0.0, g)
    if pos:
        return -jax.scipy.linalg.solve(A, gf, assume_a="pos")
    return -jnp.linalg.solve(A, gf)


def _held_lstsq(J, r, hold, damping):
    """The residuals' step, `min ||J d + r||^2 + ||diag(damping)^(1/2) d||^2` in the
    unknowns not held (0 in those), by QR of the stacked system, never through `J^T J`
    (whose condition is the square of `J`'s)."""
    Jf = jnp.where(hold[None, :], 0.0, J)
    A = jnp.concatenate([Jf, jnp.sqrt(jnp.diag(jnp.where(hold, 1.0, damping)))], axis=0)
    b = jnp.concatenate([-r, jnp.zeros(J.shape[1], J.dtype)])
    q, R = jnp.linalg.qr(A)
    return jax.scipy.linalg.solve_triangular(R, q.T @ b)


def _face_step(g, jacobian, residual, y, step, held, lower, upper, model, damping):
    """The step re-solved on the face of the box it reaches: the parameters that `step`
    carries out of the box go to the bound they cross and stay there, and the others
    solve the same damped model again with those fixed (one more `q x q` solve, or QR
    of the stacked system on residuals). Where clipping alone would leave the other
    parameters where the unclipped step put them, off the model's minimiser on that
    face (a fit with many parameters at bounds: Zheng, Schwen). `jacobian` and
    `residual` are None for a cost with its derivatives (then `model` is the matrix)."""
    out = ~held & ((y + step < lower) | (y + step > upper))
    d_out = jnp.where(out, jnp.clip(y + step, lower, upper) - y, 0.0)
    hold = held | out
    if jacobian is None:
        d_in = _held_solve(model, g + model @ d_out, hold, damping)
    else:  # min ||J_in d + (r + J_out d_out)||^2 + mu ||D d||^2, as the step itself
        d_in = _held_lstsq(jacobian, residual + jacobian @ d_out, hold, damping)
    d = jnp.where(out, d_out, jnp.where(hold, 0.0, d_in))
    use = jnp.any(out) & jnp.all(jnp.isfinite(d))
    return jnp.where(use, d, step)


def _broyden(s: _State, d, r_new, accept, updates: int):
    """Whether to compute the Jacobian at the accepted trial point (`exact`), and the
    derivatives from Broyden's rank-one secant update of the last one (Madsen, Nielsen
    and Tingleff 2004, section 3.4: `J d = r_new - r` after the step) otherwise."""
    J, r = s.jacobian, s.residual
    dd = jnp.sum(d**2)
    secant = J + jnp.outer(r_new - r - J @ d, d) / jnp.where(dd > 0, dd, 1.0)
    ok = accept & jnp.all(jnp.isfinite(secant)) & (dd > 0)
    exact = accept & ((s.age + 1 >= updates) | ~ok)
    J2 = jnp.where(ok, secant, J)
    r2 = jnp.where(accept, r_new, r)
    H2 = J2.T @ J2
    return exact, (J2.T @ r2, H2, J2, jnp.asarray(True), jnp.diag(H2))


def _recomputed(obj: _Objective, y, s: _State) -> _State:
    g, H, J, good, metric = obj.derivatives(y, s.residual)
    return eqx.tree_at(lambda s: (s.g, s.H, s.metric, s.jacobian, s.age, s.refresh, s.failed),
                       s, (g, H, metric, J, jnp.asarray(0), jnp.asarray(False),
                           s.failed | ~good))  # fmt: skip


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

    optimizer: "optax.GradientTransformation | None" = eqx.field(static=True, default=None)
    max_steps: int = 5000
    gtol: float = 1e-10
    direction: tuple[float, ...] | None = None

    def minimise(self, outputs, to_theta, z0, data, sigma, free):
        """Run the optimiser; returns `(z, steps, result)`. `outputs(theta)` are the
        model outputs (flat), `to_theta(z)` the change of variables."""
        import optax  # (kept out of `import jaxident`; only this method needs it)

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
