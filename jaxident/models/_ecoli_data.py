"""The numbers of the E. coli model (`_ecoli.py`): kinetic constants, states and their
initial values, measured species (curated BioModels entry BIOMD0000000051 of Chassagnole
et al. 2002; Alberton et al. 2013, section 5.2)."""

import numpy as np


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


# Alberton et al. (2013), Table 2: nominal values of the 25 parameters their set-by-set
# selection kept without re-estimation (on Di Maggio et al.'s 131-parameter variant),
# where the extracted table can be read and its symbol names one parameter of the
# curated model (our reading of the symbol in the comment). Left out: K_PTS1 (no value),
# "r_max" = 0.569, "r_Synthesis2" = 0.567 and "r_PK" = 8.21073e4 (no unique counterpart
# here), and K_G6PDH,nad,inh = 9e-3 (the curated G6PDH law has no NAD inhibition).
ECOLI_TABLE_2: dict[str, float] = {
    "x0_xyl5p": 5.5406e-1,
    "x0_pg3": 1.2851,  # C_3gp
    "x0_g1p": 6.7016e-2,
    "x0_sed7p": 4.0874e-2,
    "x0_pgp": 3.7e-5,
    "K_PGI_g6p": 4.0e-1,
    "rmax_PGI": 1.0519e3,
    "rmax_G6PDH": 1.2873e1,
    "K_PGI_g6p_6pginh": 2.0e-1,  # K_PGI,g6p2
    "Keq_TIS": 1.39e-1,  # K_TIS,eq: a tenth of the curated 1.39
    "K_PEPCxylase_fdp": 7.0e-1,
    "n_PEPCxylase_fdp": 4.0,
    "Keq_Ru5P": 1.4,  # K_R5P,eq
    "rmax_GAPDH": 50.0,
    "K_GAPDH_gap": 1.2,
    "K_GAPDH_pgp": 5.0e-5,
    "K_PTS_a1": 3.0823e3,  # "r_PTS", the curated K_PTS_a1's value
    "K_Synth2_pyr": 1.0,  # K_Synthesis2,pyr
    "rmax_PGDH": 5.22076,
    "K_PGDH_nadp": 5.06e-2,
    "K_PGDH_nadph_inh": 1.3769e-2,
}
