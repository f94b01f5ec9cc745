"""Reference data shipped with jaxident.

`pearce2022()` returns the real sensitivity matrices of the CSS paper (MIT licence,
copyright (c) 2022 Katherine J. Pearce; see LICENSE-pearce2022.txt beside this file).
`petab_problem(name)` returns the path of one of seven problems of the PEtab benchmark
collection (BSD-3 licence, copyright (c) 2020 Benchmarking-Initiative; see
petab/LICENSE-benchmark-models-petab.txt).
"""

import importlib.resources

import numpy as np


PEARCE2022_INFO = {
    "SVIR": "SVIR model, I(t) at t = 0..30 days, parameters [beta, alpha, nu, gamma]",
    "SEVIR": "SEVIR model, I(t), parameters [beta, alpha, nu, eta, gamma]",
    "COVID": "COVID model, (A+I+H)(t), parameters "
    "[beta, alpha, nu, eta, gamma, sigma, delta, omega]",
    "HGO": "arterial wall (HGO) model, 8 parameters; the paper's k = 5",
    "Wound": "fibrin polymerization model, 11 parameters; the paper's k = 6",
    "Neuro": "neurovascular coupling model, 175 parameters",
}


def pearce2022() -> dict[str, np.ndarray]:
    """The six real sensitivity matrices of Pearce et al. (2022), by name: `SVIR` (31x4),
    `SEVIR` (31x5), `COVID` (31x8), `HGO` (14x8), `Wound` (46x11), `Neuro` (200x175).

    The epidemic ones were computed by the authors by complex step through ode45 at
    AbsTol 1e-4, so they agree with an accurate sensitivity only to about 1e-3.
    """
    ref = importlib.resources.files(__package__) / "pearce2022_sensitivity_matrices.npz"
    with importlib.resources.as_file(ref) as path, np.load(path) as f:
        return {k: np.array(f[k]) for k in f.files}


PETAB_PROBLEMS = (
    "Boehm_JProteomeRes2014",
    "Crauste_CellSystems2017",
    "Elowitz_Nature2000",
    "Fujita_SciSignal2010",
    "Perelson_Science1996",
    "Schwen_PONE2014",
    "Zheng_PNAS2012",
)


def petab_problem(name: str) -> str:
    """The path of the YAML file of a shipped PEtab benchmark problem (one of
    `PETAB_PROBLEMS`; the first word, case-insensitive, is enough: `"boehm"`), for
    `ji.petab.load` or `jaxident analyze`."""
    match = [p for p in PETAB_PROBLEMS if p.lower().split("_")[0] == name.lower() or p == name]
    if len(match) != 1:
        raise ValueError(f"Unknown PEtab problem {name!r}; shipped: {list(PETAB_PROBLEMS)}.")
    ref = importlib.resources.files(__package__) / "petab" / match[0] / f"{match[0]}.yaml"
    return str(ref)
