"""Fitting: the solvers (`_solvers`: Levenberg-Marquardt, the damping rule shared with
the problem fit), the least-squares engine of a model with data (`_engine`,
`_estimate`: `ji.estimate`, `LeastSquares`), multi-start maximum likelihood of a
problem (`_multistart`), and profiles (`_profile`).

Imports `_runtime`, `_linalg`, `_model`, `_solve` and `_problem`.
"""
