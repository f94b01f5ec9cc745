"""Reference data shipped with jaxident.

`pearce2022()` returns the real sensitivity matrices of the CSS paper (MIT licence,
copyright (c) 2022 Katherine J. Pearce; see LICENSE-pearce2022.txt beside this file).
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
