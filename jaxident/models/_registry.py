import difflib

from .._model._base import AbstractModel
from ._brusselator import Brusselator2D
from ._chaotic import Colpitts, HindmarshRose, Rossler
from ._ecoli import EcoliChassagnole
from ._epidemic import COVID, SEIR, SEVIR, SIR, SVIR
from ._kinetics import AlphaPinene
from ._linear import LinearSuperparameterized
from ._lserc import IVGTT, NonsmoothDAEExample, WindTurbine


_MODELS: dict[str, type[AbstractModel]] = {
    "sir": SIR,
    "seir": SEIR,
    "svir": SVIR,
    "sevir": SEVIR,
    "covid": COVID,
    "alpha_pinene": AlphaPinene,
    "nonsmooth_dae_example": NonsmoothDAEExample,
    "wind_turbine": WindTurbine,
    "ivgtt": IVGTT,
    "colpitts": Colpitts,
    "rossler": Rossler,
    "hindmarsh_rose": HindmarshRose,
    "brusselator_2d": Brusselator2D,
    "ecoli_chassagnole": EcoliChassagnole,
    "linear_superparameterized": LinearSuperparameterized,
}


def available() -> dict[str, str]:
    """`{name: one-line description}` of the built-in models."""
    return {
        name: cls.description or (cls.__doc__ or "").strip().splitlines()[0]
        for name, cls in _MODELS.items()
    }


def load(name: str) -> AbstractModel:
    """The built-in model `name` (case-insensitive), with its nominal parameters, bounds
    and time grid.

    **Raises:** `ValueError` for an unknown name, listing the known ones.

    **Example:**

    ```python
    model = ji.models.load("svir")
    ```
    """
    key = str(name).lower().replace("-", "_")
    if key not in _MODELS:
        close = difflib.get_close_matches(key, list(_MODELS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"Unknown model {name!r}; available: {sorted(_MODELS)}.{hint}")
    return _MODELS[key]()
