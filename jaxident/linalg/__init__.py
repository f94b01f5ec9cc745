"""The jitted, vmappable linear-algebra core: column subset selection, numerical rank,
selection metrics. Pure `jax.numpy`/`lax`; no ODE solver."""

from .._linalg._css._base import (
    AbstractColumnSelectionMethod as AbstractColumnSelectionMethod,
    ColumnSelection as ColumnSelection,
)
from .._linalg._css._gks import GKS as GKS
from .._linalg._css._lrrqr import LRRQR as LRRQR
from .._linalg._css._qrcp import QRCP as QRCP
from .._linalg._css._rrqr import RRQR as RRQR
from .._linalg._css._srrqr import StrongRRQR as StrongRRQR
from .._linalg._dependence import (
    Circuit as Circuit,
    components as components,
    Dependence as Dependence,
    dependence as dependence,
    dependent_sets as dependent_sets,
)
from .._linalg._metrics import css_metrics as css_metrics, srrqr_rho as srrqr_rho
from .._linalg._misc import qrcp as qrcp, reduce_to_square as reduce_to_square
from .._linalg._nullspace import (
    Echelon as Echelon,
    null_space as null_space,
    NullSpace as NullSpace,
    rref as rref,
)
from .._linalg._rank import (
    AbsoluteTolerance as AbsoluteTolerance,
    AbstractRankRule as AbstractRankRule,
    GivenRank as GivenRank,
    LargestGap as LargestGap,
    numerical_rank as numerical_rank,
    RelativeTolerance as RelativeTolerance,
)
from .._linalg._ranking import (
    AbstractRankingCriterion as AbstractRankingCriterion,
    CollinearityIndex as CollinearityIndex,
    NSRGA as NSRGA,
    Orthogonalization as Orthogonalization,
    SensitivityNorm as SensitivityNorm,
)
from .._linalg._scaling import (
    equilibrate as equilibrate,
    output_row_scale as output_row_scale,
)
from .._linalg._sce import (
    random_orthonormal as random_orthonormal,
    sce_estimate as sce_estimate,
    sce_norm as sce_norm,
    similarity_index as similarity_index,
    wallis as wallis,
    worst_direction as worst_direction,
    WorstDirection as WorstDirection,
)
from .._linalg._selection import Selection as Selection
from .._linalg._subset import column_subset as column_subset, srrqr as srrqr
from .._runtime import _config as _config
from .._runtime._results import RESULTS as RESULTS
from . import testmatrices as testmatrices
