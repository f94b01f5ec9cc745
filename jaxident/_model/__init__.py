"""What a model is: named parameters (`_parameters`), the model kinds and the integrator
settings (`_base`: `AbstractModel`, `ODEModel`, `DAEModel`, `AlgebraicModel`,
`Integrator`), nonsmooth primitives and LD-derivatives (`_nonsmooth`), consistent DAE
initial values (`_dae`), the checks of a user's model (`_checks`), every model
transform on one forwarding base (`_transforms`: fixed parameters, unit changes, time
warps; `_transforms_state`: free initial states, POD), and Latin-hypercube sampling in
parameter bounds (`_sampling`).

Imports `_runtime` and `_linalg`.
"""
