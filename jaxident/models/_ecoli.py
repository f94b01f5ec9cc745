"""The central carbon metabolism of *Escherichia coli* K-12 W3110 (Chassagnole,
Noisommit-Rizzi, Schmid, Mauch & Reuss 2002, Biotechnol. Bioeng. 79:53-73), the
131-parameter example of Alberton, Alberton, Di Maggio, Diaz & Secchi (2013).

Sources of every number, and where this model differs from the set-by-set paper:

- Mass balances (Alberton et al. 2013, eqs. 8-25; Chassagnole et al. 2002), rate laws,
  kinetic constants, initial concentrations, the co-metabolite forcing functions
  (Alberton et al., Table A2) and the dilution and growth rate are those of the curated
  BioModels entry of Chassagnole et al. (BIOMD0000000051). The seed's OCR of the rate
  laws (Table A3) and of the forcing functions is garbled; where it is legible it
  agrees with the curated model up to typesetting (e.g. `0.0364 t^2` in A1).
- Alberton et al. used the version of Di Maggio, Diaz Ricci & Diaz (2010), which
  replaces the PFK rate law by that of Diaz Ricci (1996) and the G6PDH rate law by that
  of Ratushny et al. (2006), for 131 kinetic parameters. Those two rate laws are not
  legible in the seed and their constants are not available to us, so this model keeps
  Chassagnole's original PFK and G6PDH kinetics: 116 kinetic parameters. With the five
  unknown initial conditions, 121 parameters are candidates (the paper: 136).
- The co-metabolite concentrations (ATP, ADP, AMP, NAD(P)(H)) are the forcing functions
  fitted by Chassagnole et al. to their glucose-pulse experiment, with time in seconds.
  At t = 0 the intracellular concentrations are the pre-pulse steady state (with
  extracellular glucose 0.0556 mM); the model starts right after the pulse, with 2 mM.
- Intracellular rates of the phosphotransferase system enter the extracellular
  glucose balance scaled by C_x / rho_x = 1/65 (biomass concentration over specific
  weight), as in the curated model.
- Measured species (Alberton et al., section 5.2): extracellular glucose, dhap, e4p,
  pep, pyr, fdp, gap, rib5p, ribu5p, 2pg, g6p, f6p and 6pg, for t in [0, 300] (seconds:
  the horizon of the experiment of Hoque et al. 2005). Their initial values are known
  (from the data); the other five (xyl5p, g1p, pgp, 3pg, sed7p) are unknown and are parameters
  `x0_...`, with the curated model's values as nominal values. The experimental data of
  Hoque et al. are not available to us: `synthetic_data` generates measurements from
  the model with the paper's error model sigma = a y + b (eq. 26).
"""

from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._model._base import Integrator, ODEModel
from .._model._parameters import Parameters
from .._model._transforms import fix_parameters
from .._problem._sensitivity import sensitivity
from .._runtime._host import device_array
from .._solve._rosenbrock import Rodas4
from .._solve._simulate import simulate
from ._ecoli_data import (
    _MEASURED_IDX,
    _NAMES,
    _NOMINAL,
    _STATE_NAMES,
    _UNKNOWN_IDX,
    _X0,
    EXAMPLE_FREE,
    MEASURED,
    STEADY_STATE_GLUCOSE,
    UNKNOWN_INITIAL,
)
from ._ecoli_rates import reaction_rates


class EcoliProblem(NamedTuple):
    """`EcoliChassagnole.example_problem`: the reduced `model`, the `data`
    `(n_times, 13)` at `times`, the `truth` they were simulated at, and the
    `integrator` to use."""

    model: object
    data: Array
    times: Array
    truth: Array
    integrator: Integrator


class EcoliChassagnole(ODEModel):
    """Central carbon metabolism of *E. coli* after a glucose pulse: 18 mass balances
    (glycolysis, pentose-phosphate pathway, phosphotransferase system), 30 rate laws,
    7 co-metabolite forcing functions (Chassagnole et al. 2002; Alberton et al. 2013,
    eqs. 8-25 and Tables A2-A3).

    Parameters: the 116 kinetic constants of the curated model (BIOMD0000000051) and
    the initial concentrations of the five unmeasured metabolites (`x0_xyl5p`,
    `x0_g1p`, `x0_pgp`, `x0_pg3`, `x0_sed7p`): 121 candidates for identification.
    Outputs: the 13 measured species (`MEASURED`), for t in [0, 300]. Bounds: a factor
    of 10 either way of each nominal value. Stiff: integrated by `ji.Rodas4` (rtol 1e-7;
    several times faster than `diffrax.Kvaerno3` at the same tolerance).

    See the module docstring for the sources and for how this differs from the 131
    kinetic parameters of Alberton et al. (who used Di Maggio et al.'s modified PFK and
    G6PDH kinetics, which are not available to us).

    **Example:**

    ```python
    model = ji.models.load("ecoli_chassagnole")
    data = model.synthetic_data(jax.random.key(0))   # (n_times, 13), sigma = 0.01 y + 1e-6
    ```
    """

    description: ClassVar = "E. coli central carbon metabolism, 18 ODEs, 121 parameters"

    parameters: Parameters = Parameters(_NAMES, _NOMINAL, _NOMINAL / 10.0, _NOMINAL * 10.0)
    times: Float[Array, " n"] = eqx.field(
        default_factory=lambda: device_array(
            [
                1.0,
                2.0,
                4.0,
                6.0,
                10.0,
                15.0,
                20.0,
                30.0,
                45.0,
                60.0,
                90.0,
                120.0,
                180.0,
                240.0,
                300.0,
            ]
        )
    )
    t0: float = 0.0
    dilution: float = 2.78e-5  # D (1/s), chemostat dilution rate = growth rate mu
    feed_glucose: float = 110.96  # glucose in the feed (mM)
    biomass_ratio: float = 65.0  # rho_x / C_x, specific weight over biomass concentration
    state_names: ClassVar = _STATE_NAMES
    output_names: ClassVar = MEASURED
    # Rodas4 at rtol 1e-7: outputs within 2e-5 (relative) of LSODA at rtol 1e-11 (the
    # test), in a fifth of Kvaerno3's time (about 1,500 steps); far from the
    # nominal values the model can become very stiff, and a solve that needs more steps
    # counts as failed.
    integrator: ClassVar = Integrator(Rodas4(), rtol=1e-7, atol=1e-10, max_steps=20_000)

    MEASURED: ClassVar = MEASURED
    UNKNOWN_INITIAL: ClassVar = UNKNOWN_INITIAL
    STEADY_STATE_GLUCOSE: ClassVar = STEADY_STATE_GLUCOSE

    def rates(self, t, x, theta) -> dict:
        """The 30 reaction rates (mM/s), by enzyme name."""
        return reaction_rates(t, x, theta)

    def vector_field(self, t, x, theta):
        r = reaction_rates(t, x, theta)
        mu = self.dilution
        pts = self.biomass_ratio * r["PTS"]
        c = dict(zip(_STATE_NAMES, x))
        d = {
            "glc_ex": -r["PTS"] + self.dilution * (self.feed_glucose - c["glc_ex"]),
            "g6p": pts - r["PGI"] - r["PGM"] - r["G6PDH"],
            "f6p": r["PGI"] - r["PFK"] + r["TKb"] + r["TA"] - 2 * r["MurSynth"],
            "fdp": r["PFK"] - r["ALDO"],
            "gap": r["ALDO"]
            + r["TIS"]
            - r["GAPDH"]
            + r["TKa"]
            + r["TKb"]
            - r["TA"]
            + r["TrpSynth"],
            "dhap": r["ALDO"] - r["TIS"] - r["G3PDH"],
            "pgp": r["GAPDH"] - r["PGK"],
            "pg3": r["PGK"] - r["PGluMu"] - r["SerSynth"],
            "pg2": r["PGluMu"] - r["ENO"],
            "pep": r["ENO"] - r["PK"] - pts - r["PEPCxylase"] - r["DAHPS"] - r["Synth1"],
            "pyr": r["PK"] + pts - r["PDH"] - r["Synth2"] + r["MetSynth"] + r["TrpSynth"],
            "pg6": r["G6PDH"] - r["PGDH"],
            "ribu5p": r["PGDH"] - r["Ru5P"] - r["R5PI"],
            "xyl5p": r["Ru5P"] - r["TKa"] - r["TKb"],
            "sed7p": r["TKa"] - r["TA"],
            "rib5p": r["R5PI"] - r["TKa"] - r["RPPK"],
            "e4p": r["TA"] - r["TKb"] - r["DAHPS"],
            "g1p": r["PGM"] - r["G1PAT"],
        }
        # Growth dilutes every intracellular metabolite (the glucose balance has D).
        return jnp.stack([d[s] if s == "glc_ex" else d[s] - mu * c[s] for s in _STATE_NAMES])

    def initial_state(self, theta):
        x0 = jnp.asarray(_X0, dtype=theta.values.dtype)
        unknown = jnp.stack([theta[f"x0_{s}"] for s in UNKNOWN_INITIAL])
        return x0.at[_UNKNOWN_IDX].set(unknown)

    def output(self, t, x, theta):
        return x[_MEASURED_IDX]

    def example_problem(
        self,
        key: PRNGKeyArray | None = None,
        *,
        free: tuple[str, ...] = EXAMPLE_FREE,
        n_times: int = 10,
        perturbation: float = 0.3,
    ) -> "EcoliProblem":
        """A small identification problem on this model, quick enough for a notebook
        or a test: the parameters `free` (default seven kinetic constants and the five
        unknown initial conditions) free and the others fixed at their nominal values
        (`ji.fix_parameters`), measurements over the first `n_times` sampling times
        (the first minute) simulated at a truth `nominal * exp(perturbation * N(0, 1))`
        with the paper's errors (sigma = 0.01 y + 1e-6), and a looser integrator
        (rtol 1e-6, ample for 1% data).

        The data come from `ji.sensitivity(...).outputs` with that integrator: the
        function a selection compiles anyway, so the problem costs no extra
        compilation.
        """

        key = jax.random.key(2013) if key is None else key
        names = self.parameters.names
        unknown = [n for n in free if n not in names]
        if unknown:
            raise ValueError(f"Unknown parameter names in free: {unknown}.")
        nominal = np.asarray(self.parameters.nominal)
        reduced = fix_parameters(
            self, {n: nominal[i] for i, n in enumerate(names) if n not in free}
        )
        k1, k2 = jax.random.split(key)
        p = reduced.parameters.p
        truth = reduced.parameters.nominal * jnp.exp(perturbation * jax.random.normal(k1, (p,)))
        times = self.times[:n_times]
        integrator = Integrator(Rodas4(), rtol=1e-6, atol=1e-9, max_steps=20_000)
        sens = sensitivity(reduced, truth, times, integrator=integrator, throw=False)
        if not bool(sens.ok):
            raise RuntimeError("The model could not be solved at the perturbed truth.")
        data = self.add_noise(k2, sens.outputs.reshape(times.shape[0], -1))
        return EcoliProblem(reduced, data, times, truth, integrator)

    @staticmethod
    def add_noise(
        key: PRNGKeyArray, y: Array, *, relative: float = 1e-2, absolute: float = 1e-6
    ) -> Array:
        """`y` plus independent Gaussian errors of standard deviation
        `relative * |y| + absolute` (Alberton et al. eq. 26, a = 1e-2, b = 1e-6)."""
        noise = jax.random.normal(key, y.shape, dtype=y.dtype)
        return y + (relative * jnp.abs(y) + absolute) * noise

    def synthetic_data(
        self,
        key: PRNGKeyArray,
        theta=None,
        *,
        relative: float = 1e-2,
        absolute: float = 1e-6,
    ) -> Float[Array, "n 13"]:
        """Measurements of the 13 species at `self.times`, simulated at `theta`
        (default nominal), with the errors of `add_noise`."""

        y = simulate(self, theta, self.times).ys
        return self.add_noise(key, y, relative=relative, absolute=absolute)
