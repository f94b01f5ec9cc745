"""Solving a model: the Rosenbrock solver (`_rosenbrock`), trajectories with switching
times and events (`_simulate`), forward sensitivities with error control
(`_forward`), steady states and the pre-equilibration transform (`_steady_state`), and
the sensitivity result type (`_sensitivity_result`).

Imports `_runtime`, `_linalg` and `_model`.
"""
