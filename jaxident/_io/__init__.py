"""Models from files: SBML read by libsbml into SymPy trees (`_sbml`), and those trees
evaluated as JAX operations (`_symbolic`). The PEtab importer itself is the public
module `jaxident.petab`.

Imports `_model` and `_solve` (the default stiff integrator); libsbml only where a
file is read.
"""
