"""Models and problems from files: SBML read by libsbml into SymPy trees (`_sbml`),
those trees evaluated as JAX operations (`_symbolic`), and PEtab problems as
`Problem`s (`_petab`, whose public name is `jaxident.petab`).

Imports `_model`, `_solve` (the default stiff integrator) and `_problem`; libsbml,
petab and pandas only where a file is read.
"""
