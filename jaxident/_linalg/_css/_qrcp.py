from typing import ClassVar

from ..._runtime._results import RESULTS
from .._misc import qrcp
from ._base import AbstractColumnSelectionMethod, make_selection


class QRCP(AbstractColumnSelectionMethod):
    """Householder QR with column pivoting (Businger & Golub 1965): at each step the
    column with the largest residual norm. The usual starting point of the other
    methods; cheap, but with no guarantee beyond `2^k`-type bounds (Kahan matrices
    defeat it)."""

    name: ClassVar[str] = "qrcp"

    def __call__(self, R, k):
        Rn, perm = qrcp(R)
        return make_selection(perm, Rn, k, 0, RESULTS.successful)
