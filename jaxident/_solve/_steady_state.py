"""Steady states and pre-equilibration: the steady state a model reaches (its
derivatives by the implicit function theorem), and the transform that starts a model
there (`preequilibrated`), on the transform base of `_model/_transforms.py`."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from .._model._base import AbstractModel, Integrator, ODEModel
from .._model._parameters import Parameters, ParameterValues
from .._model._transforms import AbstractTransformedODE
from ._bdf import diffrax_solver
from ._rosenbrock import traced_once


class Preequilibrated(AbstractTransformedODE):
    """`base` started from the steady state of a pre-equilibration: the parameter vector
    is the experiment's followed by the pre-equilibration's (`preequilibration:<name>`),
    and the initial state is the steady state `base` reaches under the latter (its
    tangents the implicit function theorem's), with the states this experiment's
    condition sets (`reinitialize`) at their values. Everything else is `base`'s under
    the experiment's own parameters."""

    base: ODEModel
    parameters: Parameters
    steady_integrator: Integrator  # (its tolerances may be arrays: a re-solve reuses the kernel)

    def base_theta(self, theta: ParameterValues) -> ParameterValues:
        return self.base.parameters.view(theta.values[: self.base.parameters.p])

    def preequilibration_theta(self, theta: ParameterValues) -> ParameterValues:
        return self.base.parameters.view(theta.values[self.base.parameters.p :])

    @property
    def t0(self):
        return self.base.t0

    def initial_state(self, theta):
        pre = self.preequilibration_theta(theta)
        x = steady_state(self.base, pre, self.base.initial_state(pre), self.steady_integrator)
        return self.base.reinitialize(x, self.base_theta(theta))


def preequilibrated(model: ODEModel, integrator: Integrator) -> Preequilibrated:
    """`model` started from its steady state under a second copy of its parameters, the
    steady state solved with `integrator`."""
    names = model.parameters.names
    both = Parameters(
        [*names, *(f"preequilibration:{n}" for n in names)],
        jnp.concatenate([model.parameters.nominal] * 2),
        jnp.concatenate([model.parameters.lower] * 2),
        jnp.concatenate([model.parameters.upper] * 2),
    )
    return Preequilibrated(model, both, integrator)


def steady_state(model: AbstractModel, theta: ParameterValues, x0, integrator: Integrator):
    """The steady state the model reaches from `x0` (NaN where the solve fails): the
    solve runs until `f(x)` is small against the integrator's tolerances (diffrax's
    `steady_state_event`), and where `f_x` there is regular (`sigma_min > 1e-10
    sigma_max`) one Newton step polishes it. Where it is singular, its left null vectors
    must be conservation laws (below), else the solve has stopped on a drift that no
    steady state ends (`x' = k`, once `k` is small against `rtol |x|`): NaN.

    Its derivatives are the implicit function theorem's, never those of the solve:
    `f_x dx = -f_theta dtheta`, and where `f_x` is singular because the model conserves
    quantities (moieties: `c^T f = 0` for the left null vectors `c` of `f_x`, so `c^T x`
    keeps its initial value), `c^T dx = c^T dx0` as well (the steady state then depends
    on `x0`). A singular `f_x` that is not explained so (a parameter moving a conserved
    quantity, or a null space the conservation does not fix) gives NaN tangents."""
    return _steady_state(model, integrator, theta, x0)


def _solve_to_steady_state(model, integrator, theta, x0):
    """`(x, t, f_x, why)`: the end of the solve, polished by a Newton step where `f_x`
    is regular, the time it ended, `f_x` there, and why `x` is NaN (a key of `_WHY`;
    0 where it is a steady state)."""
    with traced_once(diffrax_solver(integrator.solver)) as solver:
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, x, a: model.vector_field(t, x, a)),
            solver,
            t0=model.t0,
            t1=jnp.inf,
            dt0=1e-3,
            y0=x0,
            args=theta,
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=diffrax.PIDController(
                rtol=integrator.rtol, atol=integrator.absolute
            ),
            event=diffrax.Event(
                diffrax.steady_state_event(rtol=integrator.rtol, atol=integrator.absolute)
            ),
            max_steps=integrator.max_steps,
            throw=False,
        )
    x = jnp.where(diffrax.is_okay(sol.result), sol.ys[-1], jnp.nan)
    t = sol.ts[-1]
    J = jax.jacfwd(lambda xx: jnp.ravel(model.vector_field(t, xx, theta)))(x)
    J = J.reshape(x.size, x.size)
    finite = jnp.all(jnp.isfinite(J))
    U, sv, _ = jnp.linalg.svd(jnp.where(finite, J, 0.0))
    regular = finite & (sv[-1] > 1e-10 * sv[0])
    f = jnp.ravel(model.vector_field(t, x, theta))
    step = jnp.linalg.solve(jnp.where(regular, J, jnp.eye(x.size, dtype=J.dtype)), f)
    # Where f_x is singular, each left null vector c must be a conservation law (c^T f = 0
    # from the start), else the solve stopped on a slow drift (x' = k: f is small only
    # relative to a huge x), not at a steady state.
    conserved = jnp.where((sv <= 1e-10 * sv[0])[:, None], U.T, 0.0)
    f0 = jnp.ravel(model.vector_field(jnp.asarray(model.t0, x.dtype), x0, theta))
    drift = jnp.linalg.norm(conserved @ f0) > 1e-8 * jnp.linalg.norm(f0)
    x = jnp.where(regular, x - step.reshape(x.shape), x)
    # The solve stops once f is small against rtol |x| + atol, which a fixed point that
    # repels does at t0 when it repels slowly (x' = k x with k < rtol): the Newton step
    # then lands on it. Only an attractor is a steady state the model reaches.
    J_end = jax.jacfwd(lambda xx: jnp.ravel(model.vector_field(t, xx, theta)))(x)
    unstable = ~attracts(J_end.reshape(x.size, x.size))
    why = jnp.select(
        [~diffrax.is_okay(sol.result), ~regular & drift, unstable], [1, 2, 3], default=0
    )
    return jnp.where(why > 0, jnp.nan, x), t, J, why


_WHY = {
    1: "the solve to it failed or did not settle within max_steps = {max_steps}; raise "
    "max_steps if it settles slowly",
    2: "the states drift without end (f_x is singular along a direction no conservation "
    "law explains)",
    3: "where the solve stopped, a Newton step finds a fixed point that repels: f_x there "
    "has an eigenvalue with positive real part, so the model does not settle there",
}


def why_no_steady_state(model: AbstractModel, theta: ParameterValues, x0, integrator) -> str:
    """Why `steady_state` gave NaN (host side, on the error path), or '' where it did
    not."""
    why = int(eqx.filter_jit(_solve_to_steady_state)(model, integrator, theta, x0)[3])
    return _WHY.get(why, "").format(max_steps=integrator.max_steps)


def attracts(J: Float[ArrayLike, "n n"]) -> Bool[Array, ""]:
    """Whether a fixed point with Jacobian `J` attracts: no eigenvalue has a real part
    above `1e-8 ||J||_2` (the zero eigenvalues of conservation laws pass). Decided on
    values only (no derivative flows through it); NaN entries do not attract."""
    J = jax.lax.stop_gradient(J)
    finite = jnp.all(jnp.isfinite(J))
    J = jnp.where(finite, J, 0.0)
    top = jnp.linalg.norm(J, 2)
    growth = jnp.max(jnp.linalg.eigvals(J).real)
    return finite & (growth <= 1e-8 * top)


@eqx.filter_custom_jvp
def _steady_state(model, integrator, theta, x0):
    return _solve_to_steady_state(model, integrator, theta, x0)[0]


@_steady_state.def_jvp
def _steady_state_jvp(primals, tangents):
    model, integrator, theta, x0 = primals
    _, _, d_theta, dx0 = tangents
    x, t, J, _ = _solve_to_steady_state(model, integrator, theta, x0)
    n = x.size
    dx0 = jnp.zeros(n, x.dtype) if dx0 is None else jnp.ravel(dx0)
    dv = None if d_theta is None else d_theta.values
    if dv is None:
        f_theta = jnp.zeros(n, x.dtype)
    else:
        with_values = lambda v: eqx.tree_at(lambda th: th.values, theta, v)
        f_theta = jax.jvp(
            lambda v: jnp.ravel(model.vector_field(t, x, with_values(v))), (theta.values,), (dv,)
        )[1]
    finite = jnp.all(jnp.isfinite(J))
    J = jnp.where(finite, J, 0.0)
    U, sv, _ = jnp.linalg.svd(J)
    conserved = jnp.where((sv <= 1e-10 * sv[0])[:, None], U.T, 0.0)  # rows c^T, else 0
    A = jnp.concatenate([J, conserved])
    dx = jnp.linalg.pinv(A) @ jnp.concatenate([-f_theta, conserved @ dx0])
    # the singular directions are conserved quantities: c^T f = 0 from the start (not
    # only at the steady state), and with them f_x fixes the tangents (full column rank)
    f0 = jnp.ravel(model.vector_field(jnp.asarray(model.t0, x.dtype), jnp.ravel(x0), theta))
    sa = jnp.linalg.svd(A, compute_uv=False)
    explained = (sa[-1] > 1e-10 * sa[0]) & (
        jnp.linalg.norm(conserved @ f0) <= 1e-8 * jnp.linalg.norm(f0)
    )
    dx = jnp.where(explained & finite, dx, jnp.nan)
    return x, dx.reshape(x.shape).astype(x.dtype)
