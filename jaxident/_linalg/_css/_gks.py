from typing import ClassVar

import jax.numpy as jnp

from ..._runtime._results import RESULTS
from .._misc import as_square, qr_r, qrcp
from ._base import AbstractColumnSelectionMethod, make_selection


class GKS(AbstractColumnSelectionMethod):
    """Algorithm 4.3 of Pearce et al. (2022): subset selection of Golub, Klema & Stewart
    (1976), the column-subset form of Jolliffe's PCA method B3.

    QR with column pivoting on `V1^T`, the `k` dominant right singular vectors, picks
    the columns whose leverage in the dominant subspace is largest; Theorem 4.3 bounds
    both `sigma_k(R11)` and `||R22||` by `||V11^{-1}||`.
    """

    name: ClassVar[str] = "b3"

    def __call__(self, R, k):
        R = as_square(R)
        p = R.shape[0]
        _, _, vt = jnp.linalg.svd(R, full_matrices=False)
        W = jnp.where(jnp.arange(p, dtype=jnp.int32)[:, None] < k, vt, 0.0)
        _, perm = qrcp(W)
        return make_selection(perm, qr_r(R[:, perm]), k, k, RESULTS.successful)
