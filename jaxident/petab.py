"""PEtab problems as `ji.Problem`s: `ji.petab.load("problem.yaml")`.

The tables are read by the `petab` package and every formula is parsed by its grammar
(`petab.v1.math.sympify_petab`), the SBML model by libsbml (`ji.sbml_model`): nothing
from a file is ever evaluated as Python, so a formula such as `__import__('os')` is a
parse error, not code that runs.

Every problem is first checked by `petab`'s own linter and refused with its findings
where the linter rejects it; PEtab v2 files are refused. What is supported: one SBML
model; observables with lin/log/log10 transformations and normal or Laplace noise;
observable and noise parameter overrides (numbers or parameter ids; where they change
between time points, the condition's rows become several experiments); conditions
that set parameters, compartment sizes or the initial values of species and rate-rule
states (numbers or parameter ids; NaN keeps the model's or the pre-equilibrated
value); pre-equilibration to a steady state (for some conditions or all); measurements
at time `inf`, at the steady state the condition reaches (an experiment of their
own); parameters on lin, log and log10 scales. Estimated parameters that only enter
the noise model (`sd_*`, `sigma`) are held at their nominal values and listed as
`problem.noise_parameters`; the others are the problem's parameters, on their PEtab
scale. Empty cells take PEtab's defaults (`lin`, `normal`). A `piecewise` in `time`
against parameters (`time < t_on`) is a switching time with its sensitivities (the
jump condition). NaN measurements are an error, or missing data with
`allow_missing=True`. SBML events that assign to states are supported, at a time from
parameters (`time >= t_dose`) or triggered by the state (`X < c`); triggers combining
comparisons, event delays and several models raise a `ValueError`; priors are ignored
(they do not change a local identifiability analysis; a problem loaded for fitting,
`estimate_noise=True`, warns where its table sets them: fits maximise the likelihood).
"""

import importlib


_PUBLIC = ("load", "simulation_table")


def __getattr__(name: str):
    # the importer pulls in SymPy trees of SBML formulas (and, where a file is read,
    # libsbml, petab and pandas): loaded on first use, so that `import jaxident` stays
    # fast and works without the `petab` extra
    if name in _PUBLIC:
        return getattr(importlib.import_module("jaxident._io._petab"), name)
    raise AttributeError(f"module 'jaxident.petab' has no attribute {name!r}")


def __dir__():
    return sorted(_PUBLIC)
