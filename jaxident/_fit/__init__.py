"""Fitting: the one fit engine (`_solvers`: `ji.LevenbergMarquardt`, an optimistix solver
that fits a model's weighted least squares and a problem's negative log-likelihood, and
`ji.OptaxLD` for nonsmooth models), the kernels that run it on a model with data
(`_engine`, `_estimate`: `ji.estimate`, `LeastSquares`) and on a problem
(`_multistart`: multi-start maximum likelihood), and profiles (`_profile`).

Imports `_runtime`, `_linalg`, `_model`, `_solve` and `_problem`.
"""
