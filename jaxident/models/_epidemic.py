"""The nested epidemic models of Pearce, Ipsen, Haider, Saibaba & Smith (2022), section
2.2 and Appendix B.1: SIR, SEIR, SVIR, SEVIR and COVID.

Sources of every number:

- SVIR, SEVIR and COVID: equations, initial states, nominal values and the population
  N = 332.6 (millions) as in the authors' published MATLAB code (the SVIR example of
  `CSS-Algs-for-Sens-Identifiability`, MIT licence), which produced the paper's real
  sensitivity matrices; N is held fixed, not the sum of the states.
- SIR and SEIR are the sub-models of the same family (paper, Figure B.1) with the same
  rates beta = 0.8, eta = 0.33, gamma = 0.14. The authors' code for these two is not
  available to us; their initial states are our choice, made consistent with the others:
  one infectious individual, for SEIR also ten exposed, and the rest susceptible
  (S0 = N - I0 for SIR, S0 = N - E0 - I0 for SEIR).
- Observation: the quantity of interest I(t) (for COVID A + I + H) at t = 0, 1, ..., 30
  days.
- Bounds: [0.5 q*, 1.5 q*], the box of the paper's 10,000-sample experiment.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._model._base import ODEModel
from .._model._parameters import Parameters
from .._runtime._host import device_array


N_POP = 332.6

BETA, ALPHA, NU, ETA, GAMMA, SIGMA, DELTA, OMEGA = 0.8, 0.1, 0.004, 0.33, 0.14, 0.35, 0.05, 0.82


class SIR(ODEModel):
    """SIR: S' = -beta S I / N, I' = beta S I / N - gamma I, R' = gamma I; output I.

    Nominal beta = 0.8, gamma = 0.14 (Pearce et al. 2022, Table B.1); S0 = N - 1, I0 = 1.
    """

    description: ClassVar = "SIR epidemic, output I (Pearce et al. 2022 family)"

    parameters: Parameters = Parameters(["beta", "gamma"], [BETA, GAMMA])
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: device_array(np.arange(31.0)))
    t0: float = 0.0
    state_names: ClassVar = ("S", "I", "R")
    output_names: ClassVar = ("I",)

    def vector_field(self, t, x, theta):
        S, I, _ = x
        inf = theta.beta * S * I / N_POP
        return jnp.stack([-inf, inf - theta.gamma * I, theta.gamma * I])

    def initial_state(self, theta):
        return jnp.array([N_POP - 1.0, 1.0, 0.0])

    def output(self, t, x, theta):
        return x[1]


class SEIR(ODEModel):
    """SEIR: an exposed class E between S and I, left at rate eta; output I.

    Nominal beta = 0.8, eta = 0.33, gamma = 0.14; S0 = N - 11, E0 = 10, I0 = 1.
    """

    description: ClassVar = "SEIR epidemic, output I (Pearce et al. 2022 family)"

    parameters: Parameters = Parameters(["beta", "eta", "gamma"], [BETA, ETA, GAMMA])
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: device_array(np.arange(31.0)))
    t0: float = 0.0
    state_names: ClassVar = ("S", "E", "I", "R")
    output_names: ClassVar = ("I",)

    def vector_field(self, t, x, theta):
        S, E, I, _ = x
        inf = theta.beta * S * I / N_POP
        return jnp.stack(
            [-inf, inf - theta.eta * E, theta.eta * E - theta.gamma * I, theta.gamma * I]
        )

    def initial_state(self, theta):
        return jnp.array([N_POP - 11.0, 10.0, 1.0, 0.0])

    def output(self, t, x, theta):
        return x[2]


class SVIR(ODEModel):
    """SVIR (Pearce et al. 2022, section 2.2.1), with N = 332.6:

    S' = -beta S I / N - nu S,  V' = -alpha beta I V / N + nu S,
    I' = beta S I / N + alpha beta I V / N - gamma I,  R' = gamma I.

    Parameters [beta, alpha, nu, gamma] = [0.8, 0.1, 0.004, 0.14] (alpha is the fraction
    of transmission left after vaccination); [S, V, I, R](0) = [295.1, 0, 1, 0]; output
    I(t) at t = 0..30 days (31 rows), in the column order of the paper's shipped matrix.
    """

    description: ClassVar = "SVIR epidemic with vaccination, output I (Pearce et al. 2022)"

    parameters: Parameters = Parameters(["beta", "alpha", "nu", "gamma"], [BETA, ALPHA, NU, GAMMA])
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: device_array(np.arange(31.0)))
    t0: float = 0.0
    state_names: ClassVar = ("S", "V", "I", "R")
    output_names: ClassVar = ("I",)

    def vector_field(self, t, x, theta):
        S, V, I, _ = x
        beta, alpha, nu, gamma = theta
        inf_s = beta * S * I / N_POP
        inf_v = alpha * beta * I * V / N_POP
        return jnp.stack([-inf_s - nu * S, -inf_v + nu * S, inf_s + inf_v - gamma * I, gamma * I])

    def initial_state(self, theta):
        return jnp.array([295.1, 0.0, 1.0, 0.0])

    def output(self, t, x, theta):
        return x[2]


class SEVIR(ODEModel):
    """SEVIR: SVIR with an exposed class E (rate eta), N = 332.6:

    S' = -beta I S / N - nu S,  E' = beta I S / N + alpha beta I V / N - eta E,
    V' = -alpha beta I V / N + nu S,  I' = eta E - gamma I,  R' = gamma I.

    Parameters [beta, alpha, nu, eta, gamma] = [0.8, 0.1, 0.004, 0.33, 0.14];
    [S, E, V, I, R](0) = [285.1, 10, 0, 1, 0]; output I.
    """

    description: ClassVar = (
        "SEVIR epidemic with vaccination and latency, output I (Pearce et al. 2022)"
    )

    parameters: Parameters = Parameters(
        ["beta", "alpha", "nu", "eta", "gamma"], [BETA, ALPHA, NU, ETA, GAMMA]
    )
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: device_array(np.arange(31.0)))
    t0: float = 0.0
    state_names: ClassVar = ("S", "E", "V", "I", "R")
    output_names: ClassVar = ("I",)

    def vector_field(self, t, x, theta):
        S, E, V, I, _ = x
        beta, alpha, nu, eta, gamma = theta
        inf_s = beta * I * S / N_POP
        inf_v = alpha * beta * I * V / N_POP
        return jnp.stack(
            [
                -inf_s - nu * S,
                inf_s + inf_v - eta * E,
                -inf_v + nu * S,
                eta * E - gamma * I,
                gamma * I,
            ]
        )

    def initial_state(self, theta):
        return jnp.array([285.1, 10.0, 0.0, 1.0, 0.0])

    def output(self, t, x, theta):
        return x[3]


class COVID(ODEModel):
    """The COVID model of Pearce et al. (2022): SEVIR with the infectious split into
    asymptomatic A, symptomatic I and hospitalised H, N = 332.6:

    S, V as in SEVIR;  E' = beta I S / N + alpha beta I V / N - eta E,
    A' = sigma eta E - gamma A,  I' = (1 - sigma) eta E - gamma I,
    H' = delta gamma I - omega H,  R' = gamma A + (1 - delta) gamma I + omega H.

    Parameters [beta, alpha, nu, eta, gamma, sigma, delta, omega] =
    [0.8, 0.1, 0.004, 0.33, 0.14, 0.35, 0.05, 0.82];
    [S, E, V, A, I, H, R](0) = [285.1, 10, 0, 0.3, 1, 0.05, 0]; output A + I + H.
    """

    description: ClassVar = "COVID-19 model, 7 states, output A+I+H (Pearce et al. 2022)"

    parameters: Parameters = Parameters(
        ["beta", "alpha", "nu", "eta", "gamma", "sigma", "delta", "omega"],
        [BETA, ALPHA, NU, ETA, GAMMA, SIGMA, DELTA, OMEGA],
    )
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: device_array(np.arange(31.0)))
    t0: float = 0.0
    state_names: ClassVar = ("S", "E", "V", "A", "I", "H", "R")
    output_names: ClassVar = ("A+I+H",)

    def vector_field(self, t, x, theta):
        S, E, V, A, I, H, _ = x
        beta, alpha, nu, eta, gamma, sigma, delta, omega = theta
        inf_s = beta * I * S / N_POP
        inf_v = alpha * beta * I * V / N_POP
        return jnp.stack(
            [
                -inf_s - nu * S,
                inf_s + inf_v - eta * E,
                -inf_v + nu * S,
                sigma * eta * E - gamma * A,
                (1 - sigma) * eta * E - gamma * I,
                delta * gamma * I - omega * H,
                gamma * A + (1 - delta) * gamma * I + omega * H,
            ]
        )

    def initial_state(self, theta):
        return jnp.array([285.1, 10.0, 0.0, 0.3, 1.0, 0.05, 0.0])

    def output(self, t, x, theta):
        return x[3] + x[4] + x[5]
