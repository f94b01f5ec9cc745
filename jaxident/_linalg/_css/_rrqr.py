from typing import ClassVar

import jax.lax as lax
import jax.numpy as jnp

from .._misc import as_square, qr_r, vector_norm
from .._results import RESULTS
from ._base import AbstractColumnSelectionMethod, make_selection


def _smallest_right_singular_vector(R, lead, c):
    # The smallest singular vector of the leading block R11, from the SVD of
    # diag(R11, c I) with c above every singular value of R11, so that shapes stay
    # static while the block size is traced.
    M = jnp.where(lead[:, None] & lead[None, :], R, c * jnp.eye(R.shape[0], dtype=R.dtype))
    _, _, vt = jnp.linalg.svd(M, full_matrices=False)
    return vt[-1]


class RRQR(AbstractColumnSelectionMethod):
    """Algorithm 4.1 of Pearce et al. (2022): RRQR(r) of Chan (1987), the column-subset
    form of Jolliffe's PCA method B1.

    Works backwards from the full matrix: the smallest right singular vector of the
    current leading block `R11` points at its most dependent column, which is moved to
    the back; repeat on the smaller block until `p - k` columns are rejected. Optimises
    the residual criterion (paper eq. 3.5); Theorem 4.1 bounds `||R22||`.
    """

    name: ClassVar[str] = "b1"

    def __call__(self, R, k):
        R = as_square(R)
        p = R.shape[0]
        idx = jnp.arange(p, dtype=jnp.int32)
        c = 2.0 * vector_norm(R.reshape(-1)) + jnp.finfo(R.dtype).tiny

        def body(step, carry):
            R, perm = carry
            size = p - step
            lead = idx < size
            v = _smallest_right_singular_vector(R, lead, c)
            m = jnp.argmax(jnp.where(lead, jnp.abs(v), -1.0)).astype(jnp.int32)
            src = idx.at[m].set(size - 1).at[size - 1].set(m)
            return qr_r(R[:, src]), perm[src]

        perm0 = jnp.arange(p, dtype=jnp.int32)
        R, perm = lax.fori_loop(0, p - k, body, (R, perm0))
        return make_selection(perm, R, k, p - k, RESULTS.successful)
