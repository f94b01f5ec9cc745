"""Small user-style models used by several tests."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

import jaxident as ji


class ProductDecay(ji.ODEModel):
    """x' = -(a b) x + c, x(0) = 2: the output depends on a and b only through a*b."""

    parameters: ji.Parameters = ji.Parameters(["a", "b", "c"], [0.7, 1.3, 0.4])
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: jnp.linspace(0.1, 3.0, 12))
    t0: float = 0.0

    def vector_field(self, t, x, theta):
        return -(theta.a * theta.b) * x + theta.c

    def initial_state(self, theta):
        return jnp.array([2.0])

    def output(self, t, x, theta):
        return x[0]


class BlowUp(ji.ODEModel):
    """x' = k x^2, x(0) = 1 blows up at t = 1/k: the solve fails when k > 1/t_end."""

    parameters: ji.Parameters = ji.Parameters(["k"], [0.2], [0.0], [10.0])
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: jnp.linspace(0.5, 2.0, 4))
    t0: float = 0.0

    def vector_field(self, t, x, theta):
        return theta.k * x**2

    def initial_state(self, theta):
        return jnp.array([1.0])

    def output(self, t, x, theta):
        return x[0]


class SqrtNegative(ji.ODEModel):
    """An output that is NaN for negative c (square root of a negative number)."""

    parameters: ji.Parameters = ji.Parameters(["c"], [1.0], [-1.0], [2.0])
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: jnp.linspace(0.5, 1.0, 3))
    t0: float = 0.0

    def vector_field(self, t, x, theta):
        return -x

    def initial_state(self, theta):
        return jnp.array([1.0])

    def output(self, t, x, theta):
        return jnp.sqrt(theta.c) * x[0]


class Robertson(ji.ODEModel):
    """Robertson's stiff chemical kinetics (1966); outputs y1 and y3."""

    parameters: ji.Parameters = ji.Parameters(["k1", "k2", "k3"], [0.04, 3e7, 1e4])
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: jnp.array([0.4, 4.0, 40.0]))
    t0: float = 0.0

    def vector_field(self, t, y, theta):
        k1, k2, k3 = theta
        y1, y2, y3 = y
        return jnp.stack([-k1 * y1 + k3 * y2 * y3, k1 * y1 - k2 * y2**2 - k3 * y2 * y3, k2 * y2**2])

    def initial_state(self, theta):
        return jnp.array([1.0, 0.0, 0.0])

    def output(self, t, y, theta):
        return jnp.stack([y[0], y[2]])


class TwoRates(ji.ODEModel):
    """`x' = -(k1 + k2) x`, `x(0) = 1`, `y = x / V`: one experiment determines `k1 + k2`
    alone; one where `k2` is held at 0 determines `k1`."""

    parameters: ji.Parameters = ji.Parameters(
        ["k1", "k2", "V"], [0.4, 0.3, 1.0], [0.01, 0.01, 0.1], [2.0, 2.0, 10.0]
    )
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 6.0, 12))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        return -(th.k1 + th.k2) * x

    def initial_state(self, th):
        return jnp.ones(1)

    def output(self, t, x, th):
        return x[0] / th.V


def two_rate_problem(scales=None, both=True):
    """`TwoRates` measured in two experiments (noise-free data of `k1 + k2 = 0.5`, and
    of `k1 = 0.3` with `k2` blocked), or in the first alone."""
    t = np.linspace(0.5, 6.0, 12)
    first = ji.Experiment(t, np.exp(-0.5 * t)[:, None], 0.01, name="both rates")
    second = ji.Experiment(t, np.exp(-0.3 * t)[:, None], 0.01, condition={"k2": 0.0},
                           name="k2 blocked")  # fmt: skip
    return ji.Problem(TwoRates(), [first, second] if both else [first], scales=scales)


class Decay(ji.ODEModel):
    """y = exp(-k t) / V (closed form)."""

    parameters: ji.Parameters = ji.Parameters(["k", "V"], [0.5, 1.0], [0.05, 0.2], [2.0, 5.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 6.0, 12))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        return -th.k * x

    def initial_state(self, th):
        return jnp.ones(1)

    def output(self, t, x, th):
        return x[0] / th.V


class AmountDecay(ji.ODEModel):
    """`x' = -k x`, `x(0) = A`: `y = x = A exp(-k t)` (closed form), in the units of
    `A`."""

    parameters: ji.Parameters = ji.Parameters(["k", "A"], [0.5, 2.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 6.0, 12))
    t0: float = 0.0
    state_names = ("x",)

    def vector_field(self, t, x, th):
        return -th.k * x

    def initial_state(self, th):
        return jnp.ones(1) * th.A

    def output(self, t, x, th):
        return x


def decay_data():
    """Twelve noisy samples of `Decay` at k = 0.3, V = 2 (sigma 0.01)."""
    t = np.linspace(0.5, 6.0, 12)
    rng = np.random.default_rng(3)
    return t, np.exp(-0.3 * t) / 2.0 + 0.01 * rng.standard_normal(t.size)
