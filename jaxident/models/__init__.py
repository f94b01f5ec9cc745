"""Built-in models. Each records its source, nominal values, bounds and time grid.

`load(name)` builds one by name (the names `available()` lists); the classes can also be
used directly, e.g. `ji.models.SVIR()`.
"""

from ._brusselator import Brusselator2D as Brusselator2D
from ._chaotic import (
    Colpitts as Colpitts,
    HindmarshRose as HindmarshRose,
    Rossler as Rossler,
)
from ._ecoli import EcoliChassagnole as EcoliChassagnole
from ._ecoli_data import ECOLI_TABLE_2 as ECOLI_TABLE_2
from ._epidemic import COVID as COVID, SEIR as SEIR, SEVIR as SEVIR, SIR as SIR, SVIR as SVIR
from ._kinetics import (
    ALPHA_PINENE_DATA as ALPHA_PINENE_DATA,
    ALPHA_PINENE_TIMES as ALPHA_PINENE_TIMES,
    AlphaPinene as AlphaPinene,
)
from ._linear import (
    aliasing_shift as aliasing_shift,
    cross_terms as cross_terms,
    LINEAR_TABLE_1 as LINEAR_TABLE_1,
    LinearSuperparameterized as LinearSuperparameterized,
    orthogonal_design as orthogonal_design,
)
from ._lserc import (
    IVGTT as IVGTT,
    NonsmoothDAEExample as NonsmoothDAEExample,
    WindTurbine as WindTurbine,
)
from ._registry import available as available, load as load
