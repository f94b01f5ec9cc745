"""Small published reaction-kinetics models."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._model._base import ODEModel
from .._model._parameters import Parameters
from .._runtime._host import device_array


# Fuguitt & Hawkins (1947), as tabulated by Box, Hunter, MacGregor & Erjavec (1973):
# time in minutes, and per cent of y1..y5 at each time.
ALPHA_PINENE_TIMES = np.array([1230.0, 3060.0, 4920.0, 7800.0, 10680.0, 15030.0, 22620.0, 36420.0])
ALPHA_PINENE_DATA = np.array(
    [
        [88.35, 7.3, 2.3, 0.4, 1.75],
        [76.4, 15.6, 4.5, 0.7, 2.8],
        [65.1, 23.1, 5.3, 1.1, 5.8],
        [50.4, 32.9, 6.0, 1.5, 9.3],
        [37.5, 42.7, 6.0, 1.9, 12.0],
        [25.9, 49.1, 5.9, 2.2, 17.0],
        [14.0, 57.4, 5.1, 2.6, 21.0],
        [4.5, 63.1, 3.8, 2.9, 25.7],
    ]
)


class AlphaPinene(ODEModel):
    """Thermal isomerisation of alpha-pinene (Box, Hunter, MacGregor & Erjavec 1973,
    Technometrics 15:33-51; data of Fuguitt & Hawkins 1947, JACS 69:319), a classic
    multiresponse identifiability problem:

    y1' = -(p1 + p2) y1,  y2' = p1 y1,  y3' = p2 y1 - (p3 + p4) y3 + p5 y5,
    y4' = p3 y3,  y5' = p4 y3 - p5 y5,  y(0) = (100, 0, 0, 0, 0),

    with y1 alpha-pinene, y2 dipentene, y3 allo-ocimene, y4 pyronene, y5 a dimer
    (per cent), all five observed at the eight times of the data (minutes).

    Nominal values are the least-squares estimates p = (5.9256e-5, 2.9632e-5, 2.0450e-5,
    2.7473e-4, 4.0073e-5) 1/min reported for this data set in the COPS benchmark (Dolan,
    More & Munson 2004); at them the residual sum of squares is 19.872. The data are in
    `ALPHA_PINENE_DATA` (rows = times, columns = y1..y5). Bounds are +-50 %.
    """

    description: ClassVar = "alpha-pinene isomerisation, 5 responses (Box et al. 1973)"

    parameters: Parameters = Parameters(
        ["p1", "p2", "p3", "p4", "p5"], [5.9256e-5, 2.9632e-5, 2.0450e-5, 2.7473e-4, 4.0073e-5]
    )
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: device_array(ALPHA_PINENE_TIMES))
    t0: float = 0.0
    state_names: ClassVar = ("y1", "y2", "y3", "y4", "y5")
    output_names: ClassVar = ("y1", "y2", "y3", "y4", "y5")

    def vector_field(self, t, x, theta):
        y1, _, y3, _, y5 = x
        p1, p2, p3, p4, p5 = theta
        return jnp.stack(
            [
                -(p1 + p2) * y1,
                p1 * y1,
                p2 * y1 - (p3 + p4) * y3 + p5 * y5,
                p3 * y3,
                p4 * y3 - p5 * y5,
            ]
        )

    def initial_state(self, theta):
        return jnp.array([100.0, 0.0, 0.0, 0.0, 0.0])

    def output(self, t, x, theta):
        return x
