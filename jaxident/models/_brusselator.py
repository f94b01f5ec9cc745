"""The 2-D Brusselator of Serban, Homescu & Petzold ("The effect of problem perturbations
on nonlinear dynamical systems and their reduced order models", section 6.1)."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._model._base import Integrator, ODEModel
from .._model._parameters import Parameters
from .._runtime._host import device_array


N_GRID = 16


def _grid(n: int = N_GRID):
    """Cell-centred interior points `(i - 1/2) / n` of the unit interval."""
    return (jnp.arange(n, dtype=float) + 0.5) / n


def _laplacian(u: Array, h: float) -> Array:
    """Five-point Laplacian with homogeneous Neumann conditions: the ghost points mirror
    their interior neighbours (`u_0 = u_1`), second order on the cell-centred grid."""
    p = jnp.pad(u, 1, mode="edge")
    return (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u) / h**2


class Brusselator2D(ODEModel):
    """2-D Brusselator reaction-diffusion system by the method of lines (Serban et al.,
    section 6.1):

    `u_t = eps1 Lap u + A + u^2 v - (B + 1) u`, `v_t = eps2 Lap v + B u - u^2 v` on
    `[0, 1]^2`, `t in [0, 1]`, `eps1 = eps2 = 2e-3`, `A = 1`, `B = 3.4`, homogeneous
    Neumann boundaries, `u(x, y, 0) = 1 - 0.5 cos(pi y)`, `v(x, y, 0) = 3.5 - 2.5 cos(pi x)`
    (eq. 6.1), central differences on 16 x 16 interior points: `n = 512` states, `u`
    then `v`, each row-major over `(y, x)`.

    The paper does not say where the 16 points sit or how the ghost points are set; we
    use cell centres `(i - 1/2)/16` with mirrored ghosts (a second-order Neumann
    condition). Its output is the whole state; `output` returns the mean of `u` for
    analyses that want a scalar.
    """

    parameters: Parameters = eqx.field(
        default_factory=lambda: Parameters(("eps1", "eps2", "A", "B"), (2e-3, 2e-3, 1.0, 3.4))
    )
    times: Float[Array, " n"] = eqx.field(
        default_factory=lambda: device_array(np.linspace(0.0, 1.0, 101))
    )
    t0: float = 0.0

    description: ClassVar[str] = "2-D Brusselator, 16x16 grid, n = 512 (Serban et al.)"
    output_names: ClassVar = ("mean_u",)
    integrator: ClassVar[Integrator] = Integrator(rtol=1e-9, atol=1e-11)

    def vector_field(self, t, x, theta):
        eps1, eps2, A, B = theta
        n = N_GRID
        u = x[: n * n].reshape(n, n)
        v = x[n * n :].reshape(n, n)
        h = 1.0 / n
        u2v = u * u * v
        du = eps1 * _laplacian(u, h) + A + u2v - (B + 1.0) * u
        dv = eps2 * _laplacian(v, h) + B * u - u2v
        return jnp.concatenate([du.reshape(-1), dv.reshape(-1)])

    def initial_state(self, theta):
        g = _grid()
        X, Y = jnp.meshgrid(g, g)  # rows: y, columns: x
        u = 1.0 - 0.5 * jnp.cos(jnp.pi * Y)
        v = 3.5 - 2.5 * jnp.cos(jnp.pi * X)
        return jnp.concatenate([u.reshape(-1), v.reshape(-1)])

    def output(self, t, x, theta):
        return jnp.mean(x[: N_GRID * N_GRID])
