"""The jitted linear-algebra core: column subset selection (`_css/`: strong RRQR and
the others, one driver in `_subset`), numerical rank and its rules (`_rank`), null
spaces and dependencies (`_nullspace`), equilibration (`_scaling`), ranking criteria,
metrics, SCE primitives (`_sce`), test matrices, a sparse LU with a pattern fixed
before tracing (`_sparse_lu`, for ji.BDF's Newton matrices). Every routine works on
arrays under `jit` and `vmap`; nothing here knows a model.

Imports `_runtime` only.
"""
