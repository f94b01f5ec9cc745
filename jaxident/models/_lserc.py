"""The models of Abdelfattah, Stechlinski & Eisa (2024), "Parameter identifiability and
reduction for smooth and nonsmooth differential-algebraic equation systems", IEEE
Control Systems Letters 9: Example 1 (eq. 19), the wind turbine (eq. 26, from Tsourakis,
Nomikos & Vournas 2009) and the IVGTT glucose-insulin model (eq. 27, from Ackley &
Stechlinski 2021). Details the letter leaves open were taken from the authors' published
MATLAB code (MDCL-UC, DAE L-SERC); each is noted where it is used."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._model._base import DAEModel, ODEModel
from .._model._nonsmooth import nabs, nmax, nmid
from .._model._parameters import Parameters
from .._runtime._host import device_array


class NonsmoothDAEExample(DAEModel):
    """Example 1 of Abdelfattah et al. (2024), eq. (19), a nonsmooth index-1 DAE:

    x' = max(0, theta1) w,  0 = |x| + |w| - theta2,  y = x,  x(0) = theta3 theta4,

    on [0, 1] with 17 equally spaced observations. The consistent initial `w` is the
    positive root `theta2 - |theta3 theta4|` (the guess picks that branch). The letter's
    reference point theta* = (0, 3, 1, -2) is `THETA_STAR`; the parameters' bounds are its
    sampling box Omega = [0.1, 0.2] x [30, 60] x [1, 2] x [-4, -2] (Example 2), and the
    nominal values the midpoint of Omega.
    """

    THETA_STAR: ClassVar = np.array([0.0, 3.0, 1.0, -2.0])
    description: ClassVar = "nonsmooth DAE, Example 1 of Abdelfattah et al. (2024)"
    parameters: Parameters = Parameters(
        ["theta1", "theta2", "theta3", "theta4"],
        [0.15, 45.0, 1.5, -3.0],
        [0.1, 30.0, 1.0, -4.0],
        [0.2, 60.0, 2.0, -2.0],
    )
    times: Float[Array, " n"] = eqx.field(
        default_factory=lambda: device_array(np.linspace(0.0, 1.0, 17))
    )
    t0: float = 0.0
    state_names: ClassVar = ("x", "w")
    output_names: ClassVar = ("x",)

    def differential(self, t, x, w, theta):
        return nmax(0.0, theta.theta1) * w

    def algebraic(self, t, x, w, theta):
        return nabs(x) + nabs(w) - theta.theta2

    def initial_state(self, theta):
        return jnp.stack([theta.theta3 * theta.theta4])

    def initial_algebraic_guess(self, theta):
        return jnp.stack([theta.theta2 - jnp.abs(theta.theta3 * theta.theta4)])

    def output(self, t, x, w, theta):
        return x[0]


def _wind_equilibrium(R, X, E, P, Q):
    """Terminal voltage V (high-voltage root) of the infinite-bus equation
    V^4 - [2(PR + QX) + E^2] V^2 + (R^2 + X^2)(P^2 + Q^2) = 0 at fixed P, Q."""
    a = 2.0 * (P * R + Q * X) + E**2
    c = (R**2 + X**2) * (P**2 + Q**2)
    return jnp.sqrt((a + jnp.sqrt(a**2 - 4.0 * c)) / 2.0)


class WindTurbine(DAEModel):
    """Reactive-power control of a wind turbine on an infinite bus, eq. (26) of
    Abdelfattah et al. (2024), after Tsourakis, Nomikos & Vournas (2009):

    V_ref' = K_Qi (Q_cmd - Q),  E_q'' ' = K_Vi (V_ref - V),
    0 = V^4 - [2(P R + Q X) + E^2] V^2 + (R^2 + X^2)(P^2 + Q^2),  Q = V (E_q'' - V) / X_eq,

    with differential variables (V_ref, E_q''), algebraic variable and output the terminal
    voltage V, and parameters theta = (K_Qi, K_Vi, R, X, E) = (0.1, 40, 0.02, 0.02987,
    1.0164); P = 1, Q_cmd = 0.6484, X_eq = 0.8; t in [0, 1] with 21 observations (the
    authors' grid).

    Initialisation: the letter does not say what excites the system, and at a steady
    state of the same settings nothing moves, so the control gains could not be
    identified. The authors' code starts from an equilibrium computed for other settings
    than those of the dynamics. We start from the consistent steady state at the
    pre-step reactive power `Q_cmd0 = 0` (unity power factor: V_ref = V = E_q'') and apply
    the command Q_cmd = 0.6484 from t = 0, a reactive-power step. Bounds are +-20 % (ours).
    """

    description: ClassVar = "wind turbine reactive-power control, index-1 DAE (eq. 26)"
    parameters: Parameters = Parameters(
        ["KQi", "KVi", "R", "X", "E"], [0.1, 40.0, 0.02, 0.02987, 1.0164], rel=0.2
    )
    times: Float[Array, " n"] = eqx.field(
        default_factory=lambda: device_array(np.linspace(0.0, 1.0, 21))
    )
    t0: float = 0.0
    P: float = 1.0
    Q_cmd: float = 0.6484
    Q_cmd0: float = 0.0
    X_eq: float = 0.8
    state_names: ClassVar = ("V_ref", "E_q", "V")
    output_names: ClassVar = ("V",)

    def _Q(self, x, V):
        return V * (x[1] - V) / self.X_eq

    def differential(self, t, x, w, theta):
        V = w[0]
        Q = self._Q(x, V)
        return jnp.stack([theta.KQi * (self.Q_cmd - Q), theta.KVi * (x[0] - V)])

    def algebraic(self, t, x, w, theta):
        V = w[0]
        Q = self._Q(x, V)
        R, X, E = theta.R, theta.X, theta.E
        g = V**4 - (2.0 * (self.P * R + Q * X) + E**2) * V**2 + (R**2 + X**2) * (self.P**2 + Q**2)
        return jnp.stack([g])

    def initial_state(self, theta):
        V = _wind_equilibrium(theta.R, theta.X, theta.E, self.P, self.Q_cmd0)
        return jnp.stack([V, V + self.Q_cmd0 * self.X_eq / V])

    def initial_algebraic_guess(self, theta):
        return jnp.stack([_wind_equilibrium(theta.R, theta.X, theta.E, self.P, self.Q_cmd0)])

    def output(self, t, x, w, theta):
        return w[0]


class IVGTT(ODEModel):
    """The intravenous glucose tolerance test with an insulin pump, eq. (27) of
    Abdelfattah et al. (2024) (Ackley & Stechlinski 2021, after Bergman's minimal model):

    G' = -p2 (G - p9) - G X + p11 exp(-p12 t),  G(0) = p1,
    X' = -p3 X + p4 (I - p10),  X(0) = 0,
    I' = u - p7 (I - p10),  I(0) = p8 + p10,
    u = mid(0, gamma (t - p6) / (p5 - p6), gamma),

    output the insulin concentration I on t in [0, 180] minutes. Parameters
    (p1, ..., p12, gamma) = (291.2, 0.0317, 0.0123, 4.92e-6, 20, 60, 0.2659, 357.8, 60, 7,
    0.5, 0.05, 5.9). The minus signs of the G and X equations are as in the authors' code
    (the letter's typesetting lost them); I does not depend on G or X, so they do not
    affect what the insulin output can identify. Observations every minute (ours; the
    authors used 26 a minute). Bounds are +-50 % (ours).
    """

    description: ClassVar = "IVGTT glucose-insulin kinetics with a nonsmooth pump (eq. 27)"
    parameters: Parameters = Parameters(
        ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11", "p12", "gamma"],
        [291.2, 0.0317, 0.0123, 4.92e-6, 20.0, 60.0, 0.2659, 357.8, 60.0, 7.0, 0.5, 0.05, 5.9],
    )
    times: Float[Array, " n"] = eqx.field(
        default_factory=lambda: device_array(np.linspace(0.0, 180.0, 181))
    )
    t0: float = 0.0
    state_names: ClassVar = ("G", "X", "I")
    output_names: ClassVar = ("I",)

    def vector_field(self, t, y, theta):
        G, X, I = y
        p = theta
        u = nmid(0.0, p.gamma * (t - p.p6) / (p.p5 - p.p6), p.gamma)
        return jnp.stack(
            [
                -p.p2 * (G - p.p9) - G * X + p.p11 * jnp.exp(-p.p12 * t),
                -p.p3 * X + p.p4 * (I - p.p10),
                u - p.p7 * (I - p.p10),
            ]
        )

    def switching_times(self, theta):
        return jnp.stack([theta.p5, theta.p6])  # the pump's kinks in t

    def initial_state(self, theta):
        return jnp.stack([theta.p1, jnp.zeros_like(theta.p1), theta.p8 + theta.p10])

    def output(self, t, y, theta):
        return y[2]
