"""The rate laws of the E. coli model (`_ecoli.py`) and its co-metabolite forcing
functions, as in the curated BioModels entry BIOMD0000000051 (Chassagnole et al. 2002)."""

import jax.numpy as jnp

from ._ecoli_data import _STATE_NAMES


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
