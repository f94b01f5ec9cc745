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
  pep, pyr, fdp, gap, rib5p, ribu5p, 2pg, g6p, f6p and 6pg, over 300 s (the horizon of
  the experiment of Hoque et al. 2005). Their initial values are known (from the data);
  the other five (xyl5p, g1p, pgp, 3pg, sed7p) are unknown and are parameters
  `x0_...`, with the curated model's values as nominal values. The experimental data of
  Hoque et al. are not available to us: `synthetic_data` generates measurements from
  the model with the paper's error model sigma = a y + b (eq. 26).
"""

from typing import ClassVar, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._model import Integrator, ODEModel
from .._parameters import Parameters


# (name, nominal value) in the order of the curated model, grouped by enzyme. Names
# follow Chassagnole et al.: rmax_E is the maximal rate of enzyme E (mM/s), K_E_x a
# half-saturation, inhibition or activation constant for metabolite x (mM), Keq_E an
# equilibrium constant, n_E_x a Hill coefficient, L_E an allosteric constant.
KINETIC_PARAMETERS: tuple[tuple[str, float], ...] = (
    ("rmax_PTS", 7829.78), ("K_PTS_a1", 3082.3), ("K_PTS_a2", 0.01), ("K_PTS_a3", 245.3),
    ("n_PTS_g6p", 3.66), ("K_PTS_g6p", 2.15),
    ("rmax_PGI", 650.988), ("Keq_PGI", 0.1725), ("K_PGI_g6p", 2.9), ("K_PGI_f6p", 0.266),
    ("K_PGI_f6p_6pginh", 0.2), ("K_PGI_g6p_6pginh", 0.2),
    ("rmax_PGM", 0.839824), ("Keq_PGM", 0.196), ("K_PGM_g6p", 1.038), ("K_PGM_g1p", 0.0136),
    ("rmax_G6PDH", 1.3802), ("K_G6PDH_g6p", 14.4), ("K_G6PDH_nadph_g6pinh", 6.43),
    ("K_G6PDH_nadp", 0.0246), ("K_G6PDH_nadph_nadpinh", 0.01),
    ("rmax_PFK", 1840.58), ("K_PFK_atp_s", 0.123), ("K_PFK_adp_c", 4.14),
    ("K_PFK_f6p_s", 0.325), ("K_PFK_pep", 3.26), ("K_PFK_adp_b", 3.89), ("K_PFK_amp_b", 3.2),
    ("K_PFK_adp_a", 128.0), ("K_PFK_amp_a", 19.1), ("L_PFK", 5.62907e6), ("n_PFK", 11.1),
    ("rmax_TA", 10.8716), ("Keq_TA", 1.05),
    ("rmax_TKa", 9.47338), ("Keq_TKa", 1.2),
    ("rmax_TKb", 86.5586), ("Keq_TKb", 10.0),
    ("rmax_MurSynth", 0.00043711),
    ("rmax_ALDO", 17.4146), ("Keq_ALDO", 0.144), ("K_ALDO_fdp", 1.75), ("K_ALDO_gap", 0.088),
    ("V_ALDO_blf", 2.0), ("K_ALDO_dhap", 0.088), ("K_ALDO_gap_inh", 0.6),
    ("rmax_GAPDH", 921.594), ("Keq_GAPDH", 0.63), ("K_GAPDH_gap", 0.683),
    ("K_GAPDH_pgp", 1.04e-5), ("K_GAPDH_nad", 0.252), ("K_GAPDH_nadh", 1.09),
    ("rmax_TIS", 68.6747), ("Keq_TIS", 1.39), ("K_TIS_dhap", 2.8), ("K_TIS_gap", 0.3),
    ("rmax_TrpSynth", 0.001037),
    ("rmax_G3PDH", 0.0116204), ("K_G3PDH_dhap", 1.0),
    ("rmax_PGK", 3021.77), ("Keq_PGK", 1934.4), ("K_PGK_adp", 0.185), ("K_PGK_atp", 0.653),
    ("K_PGK_pgp", 0.0468), ("K_PGK_3pg", 0.473),
    ("rmax_SerSynth", 0.0257121), ("K_SerSynth_3pg", 1.0),
    ("rmax_PGluMu", 89.0497), ("Keq_PGluMu", 0.188), ("K_PGluMu_3pg", 0.2),
    ("K_PGluMu_2pg", 0.369),
    ("rmax_ENO", 330.448), ("Keq_ENO", 6.73), ("K_ENO_2pg", 0.1), ("K_ENO_pep", 0.135),
    ("rmax_PK", 0.0611315), ("K_PK_pep", 0.31), ("n_PK", 4.0), ("L_PK", 1000.0),
    ("K_PK_atp", 22.5), ("K_PK_fdp", 0.19), ("K_PK_amp", 0.2), ("K_PK_adp", 0.26),
    ("rmax_PEPCxylase", 0.107021), ("K_PEPCxylase_fdp", 0.7), ("n_PEPCxylase_fdp", 4.21),
    ("K_PEPCxylase_pep", 4.07),
    ("rmax_Synth1", 0.019539), ("K_Synth1_pep", 1.0),
    ("rmax_Synth2", 0.0736186), ("K_Synth2_pyr", 1.0),
    ("rmax_DAHPS", 0.107953), ("n_DAHPS_e4p", 2.6), ("n_DAHPS_pep", 2.2),
    ("K_DAHPS_e4p", 0.035), ("K_DAHPS_pep", 0.0053),
    ("rmax_PDH", 6.05953), ("n_PDH", 3.68), ("K_PDH_pyr", 1159.0),
    ("rmax_MetSynth", 0.0022627),
    ("rmax_PGDH", 16.2324), ("K_PGDH_6pg", 37.5), ("K_PGDH_nadp", 0.0506),
    ("K_PGDH_nadph_inh", 0.0138), ("K_PGDH_atp_inh", 208.0),
    ("rmax_R5PI", 4.83841), ("Keq_R5PI", 4.0),
    ("rmax_Ru5P", 6.73903), ("Keq_Ru5P", 1.4),
    ("rmax_RPPK", 0.0129005), ("K_RPPK_rib5p", 0.1),
    ("rmax_G1PAT", 0.00752546), ("K_G1PAT_fdp", 0.119), ("n_G1PAT_fdp", 1.2),
    ("K_G1PAT_atp", 4.42), ("K_G1PAT_g1p", 3.2),
)  # fmt: skip

# States in the order of Alberton et al., eqs. 8-25, with the curated initial values
# (mM): the pre-pulse steady state, and 2 mM extracellular glucose after the pulse.
STATES: tuple[tuple[str, float], ...] = (
    ("glc_ex", 2.0), ("g6p", 3.48), ("f6p", 0.6), ("fdp", 0.272), ("gap", 0.218),
    ("dhap", 0.167), ("pgp", 0.008), ("pg3", 2.13), ("pg2", 0.399), ("pep", 2.67),
    ("pyr", 2.67), ("pg6", 0.808), ("ribu5p", 0.111), ("xyl5p", 0.138), ("sed7p", 0.276),
    ("rib5p", 0.398), ("e4p", 0.098), ("g1p", 0.653),
)  # fmt: skip
MEASURED = (
    "glc_ex", "dhap", "e4p", "pep", "pyr", "fdp", "gap", "rib5p", "ribu5p", "pg2",
    "g6p", "f6p", "pg6",
)  # fmt: skip
UNKNOWN_INITIAL = ("xyl5p", "g1p", "pgp", "pg3", "sed7p")
STEADY_STATE_GLUCOSE = 0.0556  # extracellular glucose before the pulse (mM)

_STATE_NAMES = tuple(s for s, _ in STATES)
_X0 = np.array([v for _, v in STATES])
_UNKNOWN_IDX = np.array([_STATE_NAMES.index(s) for s in UNKNOWN_INITIAL])
_MEASURED_IDX = np.array([_STATE_NAMES.index(s) for s in MEASURED])
_NAMES = tuple(n for n, _ in KINETIC_PARAMETERS) + tuple(f"x0_{s}" for s in UNKNOWN_INITIAL)
_NOMINAL = np.array([v for _, v in KINETIC_PARAMETERS] + [_X0[i] for i in _UNKNOWN_IDX])


# The free parameters of `EcoliChassagnole.example_problem`: kinetic constants of the
# upper glycolysis and the pyruvate branch, and the five unknown initial conditions.
EXAMPLE_FREE = (
    "rmax_PGI", "Keq_PGI", "rmax_PFK", "rmax_ALDO", "rmax_GAPDH", "rmax_PK", "rmax_PDH",
) + tuple(f"x0_{s}" for s in UNKNOWN_INITIAL)  # fmt: skip


class EcoliProblem(NamedTuple):
    """`EcoliChassagnole.example_problem`: the reduced `model`, the `data`
    `(n_times, 13)` at `times`, the `truth` they were simulated at, and the
    `integrator` to use."""

    model: object
    data: Array
    times: Array
    truth: Array
    integrator: Integrator


def cometabolites(t):
    """The co-metabolite forcing functions (mM) of Chassagnole et al. (2002), Alberton
    et al. Table A2, as a dict: atp, adp, amp, nadph, nadp, nadh, nad."""
    return {
        "atp": 4.27 - 4.163 * t / (0.657 + 1.43 * t + 0.0364 * t**2),
        "adp": 0.582 + 1.73 * 2.731 ** (-0.15 * t) * (0.12 * t + 0.000214 * t**3),
        "amp": 0.123 + 7.25 * t / (7.25 + 1.47 * t + 0.17 * t**2) + 1.073 / (1.29 + 8.05 * t),
        "nadph": 0.062
        + 0.332
        * 2.718 ** (-0.464 * t)
        * (
            0.0166 * t**1.58
            + 0.000166 * t**4.73
            + 0.1312e-9 * t**7.89
            + 0.1362e-12 * t**11
            + 0.1233e-15 * t**14.2
        ),
        "nadp": 0.159 - 0.00554 * t / (2.8 - 0.271 * t + 0.01 * t**2) + 0.182 / (4.82 + 0.526 * t),
        "nadh": 0.0934 + 0.00111 * 2.371 ** (-0.123 * t) * (0.844 * t + 0.104 * t**3),
        "nad": 1.314
        + 1.314 * 2.73 ** (-0.0435 * t - 0.342)
        - (t + 7.871) * 2.73 ** (-0.0218 * t - 0.171) / (8.481 + t),
    }


def _power(x, n):
    return x**n


# Concentrations are positive along every solution, but the Newton iterations of an
# implicit solver probe trial states too; there a negative concentration would make a
# denominator vanish or a power NaN, and a NaN inside a rejected step still breaks
# forward-mode sensitivities. Rates are therefore evaluated at max(c, floor).
_FLOOR = 1e-12


def reaction_rates(t, x, theta) -> dict:
    """The 30 reaction rates (mM/s) of the model at time `t`, state `x` (in the order of
    `STATES`) and parameters `theta` (a `ParameterValues`)."""
    c = dict(zip(_STATE_NAMES, jnp.maximum(x, _FLOOR)))
    q = cometabolites(t)
    p = theta
    atp, adp, amp = q["atp"], q["adp"], q["amp"]
    nadph, nadp, nadh, nad = q["nadph"], q["nadp"], q["nadh"], q["nad"]
    glc, g6p, f6p, fdp, gap = c["glc_ex"], c["g6p"], c["f6p"], c["fdp"], c["gap"]
    dhap, pgp, pg3, pg2, pep = c["dhap"], c["pgp"], c["pg3"], c["pg2"], c["pep"]
    pyr, pg6, ribu5p, xyl5p = c["pyr"], c["pg6"], c["ribu5p"], c["xyl5p"]
    sed7p, rib5p, e4p, g1p = c["sed7p"], c["rib5p"], c["e4p"], c["g1p"]

    ratio = pep / pyr
    r = {}
    r["PTS"] = (
        p["rmax_PTS"]
        * glc
        * ratio
        / (
            (p["K_PTS_a1"] + p["K_PTS_a2"] * ratio + p["K_PTS_a3"] * glc + glc * ratio)
            * (1 + _power(g6p, p["n_PTS_g6p"]) / p["K_PTS_g6p"])
        )
    )
    r["PGI"] = (
        p["rmax_PGI"]
        * (g6p - f6p / p["Keq_PGI"])
        / (
            p["K_PGI_g6p"]
            * (
                1
                + f6p / (p["K_PGI_f6p"] * (1 + pg6 / p["K_PGI_f6p_6pginh"]))
                + pg6 / p["K_PGI_g6p_6pginh"]
            )
            + g6p
        )
    )
    r["PGM"] = (
        p["rmax_PGM"]
        * (g6p - g1p / p["Keq_PGM"])
        / (p["K_PGM_g6p"] * (1 + g1p / p["K_PGM_g1p"]) + g6p)
    )
    r["G6PDH"] = (
        p["rmax_G6PDH"]
        * g6p
        * nadp
        / (
            (g6p + p["K_G6PDH_g6p"])
            * (1 + nadph / p["K_G6PDH_nadph_g6pinh"])
            * (p["K_G6PDH_nadp"] * (1 + nadph / p["K_G6PDH_nadph_nadpinh"]) + nadp)
        )
    )
    act = 1 + adp / p["K_PFK_adp_a"] + amp / p["K_PFK_amp_a"]
    inh = 1 + pep / p["K_PFK_pep"] + adp / p["K_PFK_adp_b"] + amp / p["K_PFK_amp_b"]
    r["PFK"] = (
        p["rmax_PFK"]
        * atp
        * f6p
        / (
            (atp + p["K_PFK_atp_s"] * (1 + adp / p["K_PFK_adp_c"]))
            * (f6p + p["K_PFK_f6p_s"] * inh / act)
            * (1 + p["L_PFK"] / _power(1 + f6p * act / (p["K_PFK_f6p_s"] * inh), p["n_PFK"]))
        )
    )
    r["TA"] = p["rmax_TA"] * (gap * sed7p - e4p * f6p / p["Keq_TA"])
    r["TKa"] = p["rmax_TKa"] * (rib5p * xyl5p - sed7p * gap / p["Keq_TKa"])
    r["TKb"] = p["rmax_TKb"] * (xyl5p * e4p - f6p * gap / p["Keq_TKb"])
    r["MurSynth"] = p["rmax_MurSynth"] * jnp.ones_like(glc)
    blf = p["Keq_ALDO"] * p["V_ALDO_blf"]
    r["ALDO"] = (
        p["rmax_ALDO"]
        * (fdp - gap * dhap / p["Keq_ALDO"])
        / (
            p["K_ALDO_fdp"]
            + fdp
            + p["K_ALDO_gap"] * dhap / blf
            + p["K_ALDO_dhap"] * gap / blf
            + fdp * gap / p["K_ALDO_gap_inh"]
            + gap * dhap / blf
        )
    )
    r["GAPDH"] = (
        p["rmax_GAPDH"]
        * (gap * nad - pgp * nadh / p["Keq_GAPDH"])
        / (
            (p["K_GAPDH_gap"] * (1 + pgp / p["K_GAPDH_pgp"]) + gap)
            * (p["K_GAPDH_nad"] * (1 + nadh / p["K_GAPDH_nadh"]) + nad)
        )
    )
    r["TIS"] = (
        p["rmax_TIS"]
        * (dhap - gap / p["Keq_TIS"])
        / (p["K_TIS_dhap"] * (1 + gap / p["K_TIS_gap"]) + dhap)
    )
    r["TrpSynth"] = p["rmax_TrpSynth"] * jnp.ones_like(glc)
    r["G3PDH"] = p["rmax_G3PDH"] * dhap / (p["K_G3PDH_dhap"] + dhap)
    r["PGK"] = (
        p["rmax_PGK"]
        * (adp * pgp - atp * pg3 / p["Keq_PGK"])
        / (
            (p["K_PGK_adp"] * (1 + atp / p["K_PGK_atp"]) + adp)
            * (p["K_PGK_pgp"] * (1 + pg3 / p["K_PGK_3pg"]) + pgp)
        )
    )
    r["SerSynth"] = p["rmax_SerSynth"] * pg3 / (p["K_SerSynth_3pg"] + pg3)
    r["PGluMu"] = (
        p["rmax_PGluMu"]
        * (pg3 - pg2 / p["Keq_PGluMu"])
        / (p["K_PGluMu_3pg"] * (1 + pg2 / p["K_PGluMu_2pg"]) + pg3)
    )
    r["ENO"] = (
        p["rmax_ENO"]
        * (pg2 - pep / p["Keq_ENO"])
        / (p["K_ENO_2pg"] * (1 + pep / p["K_ENO_pep"]) + pg2)
    )
    r["PK"] = (
        p["rmax_PK"]
        * pep
        * _power(pep / p["K_PK_pep"] + 1, p["n_PK"] - 1)
        * adp
        / (
            p["K_PK_pep"]
            * (
                p["L_PK"]
                * _power(
                    (1 + atp / p["K_PK_atp"]) / (fdp / p["K_PK_fdp"] + amp / p["K_PK_amp"] + 1),
                    p["n_PK"],
                )
                + _power(pep / p["K_PK_pep"] + 1, p["n_PK"])
            )
            * (adp + p["K_PK_adp"])
        )
    )
    r["PEPCxylase"] = (
        p["rmax_PEPCxylase"]
        * pep
        * (1 + _power(fdp / p["K_PEPCxylase_fdp"], p["n_PEPCxylase_fdp"]))
        / (p["K_PEPCxylase_pep"] + pep)
    )
    r["Synth1"] = p["rmax_Synth1"] * pep / (p["K_Synth1_pep"] + pep)
    r["Synth2"] = p["rmax_Synth2"] * pyr / (p["K_Synth2_pyr"] + pyr)
    e4p_n = _power(e4p, p["n_DAHPS_e4p"])
    pep_n = _power(pep, p["n_DAHPS_pep"])
    r["DAHPS"] = (
        p["rmax_DAHPS"] * e4p_n * pep_n / ((p["K_DAHPS_e4p"] + e4p_n) * (p["K_DAHPS_pep"] + pep_n))
    )
    pyr_n = _power(pyr, p["n_PDH"])
    r["PDH"] = p["rmax_PDH"] * pyr_n / (p["K_PDH_pyr"] + pyr_n)
    r["MetSynth"] = p["rmax_MetSynth"] * jnp.ones_like(glc)
    r["PGDH"] = (
        p["rmax_PGDH"]
        * pg6
        * nadp
        / (
            (pg6 + p["K_PGDH_6pg"])
            * (
                nadp
                + p["K_PGDH_nadp"]
                * (1 + nadph / p["K_PGDH_nadph_inh"])
                * (1 + atp / p["K_PGDH_atp_inh"])
            )
        )
    )
    r["R5PI"] = p["rmax_R5PI"] * (ribu5p - rib5p / p["Keq_R5PI"])
    r["Ru5P"] = p["rmax_Ru5P"] * (ribu5p - xyl5p / p["Keq_Ru5P"])
    r["RPPK"] = p["rmax_RPPK"] * rib5p / (p["K_RPPK_rib5p"] + rib5p)
    r["G1PAT"] = (
        p["rmax_G1PAT"]
        * g1p
        * atp
        * (1 + _power(fdp / p["K_G1PAT_fdp"], p["n_G1PAT_fdp"]))
        / ((p["K_G1PAT_atp"] + atp) * (p["K_G1PAT_g1p"] + g1p))
    )
    return r


class EcoliChassagnole(ODEModel):
    """Central carbon metabolism of *E. coli* after a glucose pulse: 18 mass balances
    (glycolysis, pentose-phosphate pathway, phosphotransferase system), 30 rate laws,
    7 co-metabolite forcing functions (Chassagnole et al. 2002; Alberton et al. 2013,
    eqs. 8-25 and Tables A2-A3).

    Parameters: the 116 kinetic constants of the curated model (BIOMD0000000051) and
    the initial concentrations of the five unmeasured metabolites (`x0_xyl5p`,
    `x0_g1p`, `x0_pgp`, `x0_pg3`, `x0_sed7p`): 121 candidates for identification.
    Outputs: the 13 measured species (`MEASURED`), over 300 s. Bounds: a factor of 10
    either way of each nominal value. Stiff: integrated by `diffrax.Kvaerno3` (rtol 1e-7).

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
        default_factory=lambda: jnp.array(
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
    # Kvaerno3 at rtol 1e-7: about 1,500 steps over 300 s at the nominal values, and
    # outputs within about 1e-6 (relative) of a rtol 1e-10 solve; far from them the model
    # can become very stiff, and a solve that needs more steps counts as failed.
    integrator: ClassVar = Integrator(diffrax.Kvaerno3(), rtol=1e-7, atol=1e-10, max_steps=20_000)

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
        (rtol 1e-6, about 3x faster than the default and ample for 1% data).

        The data come from `ji.sensitivity(...).outputs` with that integrator: the
        function a selection compiles anyway, so the problem costs no extra
        compilation.
        """
        from .._sensitivity import sensitivity
        from .._transforms import fix_parameters

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
        integrator = Integrator(diffrax.Kvaerno3(), rtol=1e-6, atol=1e-9, max_steps=20_000)
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
        from .._simulate import simulate

        y = simulate(self, theta, self.times).ys
        return self.add_noise(key, y, relative=relative, absolute=absolute)
