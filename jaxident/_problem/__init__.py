"""Problems: measurements and error models of a model with data (`_measurements`),
PEtab-style problems of several experiments with noise models and estimation scales
(`_base`: `Problem`, `Experiment`, `Problem.from_model`), their predictions,
likelihoods and noise-weighted sensitivities from one kernel (`_predict`), and
`ji.sensitivity`, the one entry point for a model's or a problem's sensitivity matrix
(`_sensitivity`).

Imports `_runtime`, `_linalg`, `_model` and `_solve`.
"""
