"""The three examples of Schumann-Bischoff, Luther & Parlitz (2016), "Estimability and
dependency analysis of model parameters based on delay coordinates", Phys. Rev. E 94,
032221: the Colpitts oscillator, the Rossler system and the Hindmarsh-Rose neuron.

Equations, parameter values and measured outputs are the paper's (eqs. 37-38, 41-42,
51-52). The paper gives no initial states (it samples states on the attractor after
integrating for a long time); the `initial_state` values here are our choice, points
from which each system settles on its attractor, and the analyses discard a transient
(`ji.attractor_states`). Bounds are +-50% of each value (ordered for negative values).

The analyses need tight tolerances (1e-12 to 1e-13) over long horizons, where an
eighth-order Runge-Kutta pair (`diffrax.Dopri8`) takes far fewer steps than a fifth-order
one (`Tsit5`), for the same results where the trajectory is not chaotic (Hindmarsh-Rose).
On the chaotic Colpitts and Rossler attractors any two solvers sample different (equally
valid) states after a long transient.
"""

from typing import ClassVar

import diffrax
import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._model._base import Integrator, ODEModel
from .._model._parameters import Parameters
from .._runtime._host import device_array


def _params(names, values):
    v = jnp.asarray(values, dtype=float)
    a, b = 0.5 * v, 1.5 * v
    return Parameters(names, v, jnp.minimum(a, b), jnp.maximum(a, b))


class Colpitts(ODEModel):
    """Chaotic Colpitts oscillator (Kennedy 1994; Schumann-Bischoff et al. 2016 eq. 37),
    output x1.

    `x1' = p1 x2`, `x2' = -p2 (x1 + x3) - p3 x2`, `x3' = p4 (x2 + 1 - exp(-x1))`,
    `p = (5, 0.08, 0.7, 6.3)` (the paper's values, from Creveling, Gill & Abarbanel 2008).

    With x1 measured, the output obeys `y''' + p3 y'' + p2 (p1 + p4) y' +
    p1 p2 p4 (1 - exp(-y)) = 0`: only p3, `p2 (p1 + p4)` and `p1 p2 p4` reach the output,
    so the delay-coordinate Jacobian has a one-dimensional null space in which x2, x3,
    p1, p2 and p4 move together, and only x1 and p3 are estimable (the paper's Fig. 4).
    """

    parameters: Parameters = eqx.field(
        default_factory=lambda: _params(("p1", "p2", "p3", "p4"), (5.0, 0.08, 0.7, 6.3))
    )
    times: Float[Array, " n"] = eqx.field(
        default_factory=lambda: device_array(np.linspace(0.0, 20.0, 401))
    )
    t0: float = 0.0
    x0: Float[Array, " 3"] = eqx.field(default_factory=lambda: device_array([0.1, 0.1, 0.1]))

    description: ClassVar[str] = "Colpitts oscillator, output x1 (Schumann-Bischoff 2016)"
    state_names: ClassVar = ("x1", "x2", "x3")
    output_names: ClassVar = ("x1",)
    integrator: ClassVar[Integrator] = Integrator(
        diffrax.Dopri8(), rtol=1e-12, atol=1e-14, max_steps=2_000_000
    )

    def vector_field(self, t, x, theta):
        p1, p2, p3, p4 = theta
        x1, x2, x3 = x
        return jnp.stack([p1 * x2, -p2 * (x1 + x3) - p3 * x2, p4 * (x2 + 1.0 - jnp.exp(-x1))])

    def initial_state(self, theta):
        return self.x0

    def output(self, t, x, theta):
        return x[0]


class Rossler(ODEModel):
    """Rossler system in the parametrisation of Lainscsek (2011) (Schumann-Bischoff et al.
    2016 eq. 41), output x2.

    `x1' = p1 x2 + p2 x3`, `x2' = p3 x1 + p4 x2`, `x3' = p5 + p6 x3 + p7 x1 x3`,
    `p = (-1, -1, 1, 0.1, 0.1, -14, 1)`.

    The rescaled system (the paper's eq. 49) with `x1 -> x1/b`, `x3 -> a x3`,
    `p1 -> p1/b`, `p2 -> p2/(a b)`, `p3 -> b p3`, `p5 -> a p5`, `p7 -> b p7` has the same
    x2 for every `a, b`: a two-dimensional null space, and only x2, p4 and p6 are
    estimable.
    """

    parameters: Parameters = eqx.field(
        default_factory=lambda: _params(
            ("p1", "p2", "p3", "p4", "p5", "p6", "p7"), (-1.0, -1.0, 1.0, 0.1, 0.1, -14.0, 1.0)
        )
    )
    times: Float[Array, " n"] = eqx.field(
        default_factory=lambda: device_array(np.linspace(0.0, 20.0, 401))
    )
    t0: float = 0.0
    x0: Float[Array, " 3"] = eqx.field(default_factory=lambda: device_array([1.0, 1.0, 0.1]))

    description: ClassVar[str] = "Rossler system, output x2 (Schumann-Bischoff 2016)"
    state_names: ClassVar = ("x1", "x2", "x3")
    output_names: ClassVar = ("x2",)
    integrator: ClassVar[Integrator] = Integrator(
        diffrax.Dopri8(), rtol=1e-12, atol=1e-14, max_steps=2_000_000
    )

    def vector_field(self, t, x, theta):
        p1, p2, p3, p4, p5, p6, p7 = theta
        x1, x2, x3 = x
        return jnp.stack([p1 * x2 + p2 * x3, p3 * x1 + p4 * x2, p5 + p6 * x3 + p7 * x1 * x3])

    def initial_state(self, theta):
        return self.x0

    def output(self, t, x, theta):
        return x[1]


class HindmarshRose(ODEModel):
    """Hindmarsh-Rose neuron (1984; Schumann-Bischoff et al. 2016 eq. 51), output the
    membrane potential x1.

    `x1' = -x1^3 + p1 x1^2 + x2 - x3`, `x2' = 1 - p2 x1^2 - x2`,
    `x3' = p3 (x1 + p5 (p4 - x3))`, `p = (3, 5, 0.004, 3.19, 0.25)`.

    Every state and parameter is locally estimable (null space of dimension 0), but p4
    and p5 are strongly anti-correlated (the paper's Fig. 16).
    """

    parameters: Parameters = eqx.field(
        default_factory=lambda: _params(
            ("p1", "p2", "p3", "p4", "p5"), (3.0, 5.0, 0.004, 3.19, 0.25)
        )
    )
    times: Float[Array, " n"] = eqx.field(
        default_factory=lambda: device_array(np.linspace(0.0, 200.0, 401))
    )
    t0: float = 0.0
    x0: Float[Array, " 3"] = eqx.field(default_factory=lambda: device_array([-1.0, -5.0, 3.0]))

    description: ClassVar[str] = "Hindmarsh-Rose neuron, output x1 (Schumann-Bischoff 2016)"
    state_names: ClassVar = ("x1", "x2", "x3")
    output_names: ClassVar = ("x1",)
    integrator: ClassVar[Integrator] = Integrator(
        diffrax.Dopri8(), rtol=1e-13, atol=1e-15, max_steps=2_000_000
    )

    def vector_field(self, t, x, theta):
        p1, p2, p3, p4, p5 = theta
        x1, x2, x3 = x
        return jnp.stack(
            [
                -(x1**3) + p1 * x1**2 + x2 - x3,
                1.0 - p2 * x1**2 - x2,
                p3 * (x1 + p5 * (p4 - x3)),
            ]
        )

    def initial_state(self, theta):
        return self.x0

    def output(self, t, x, theta):
        return x[0]
