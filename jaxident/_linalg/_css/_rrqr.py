from typing import ClassVar

import jax.lax as lax
import jax.numpy as jnp

from ..._runtime._results import RESULTS
from .._misc import as_square, qr_r, vector_norm
from ._base import AbstractColumnSelectionMethod, make_selection


def _most_dependent_column(R, lead, c):
    # The column of the leading block R11 its smallest right singular vector points at
    # (its largest entry), from the SVD of diag(R11, c I) with c above every singular
    # value of R11, so that shapes stay static while the block size is traced. Where
    # R11 is singular to working precision (a matrix with fewer rows than columns, an
    # exact dependency) the smallest singular vector is any vector of a null space of
    # dimension two or more, and which one an SVD returns differs between LAPACK and a
    # GPU's solver: the column is then the one with the largest projection on that
    # whole null space (the row norm of its basis), which is the same for any basis and
    # is |v| itself where the null space is one vector.
    p = R.shape[0]
    M = jnp.where(lead[:, None] & lead[None, :], R, c * jnp.eye(p, dtype=R.dtype))
    _, s, vt = jnp.linalg.svd(M, full_matrices=False)
    null = s <= jnp.maximum(s[-1], p * jnp.finfo(R.dtype).eps * c)
    score = jnp.sqrt(jnp.sum(jnp.where(null[:, None], vt, 0.0) ** 2, axis=0))
    return jnp.argmax(jnp.where(lead, score, -1.0)).astype(jnp.int32)


class RRQR(AbstractColumnSelectionMethod):
    """Algorithm 4.1 of Pearce et al. (2022): RRQR(r) of Chan (1987), the column-subset
    form of Jolliffe's PCA method B1.

    Works backwards from the full matrix: the smallest right singular vector of the
    current leading block `R11` points at its most dependent column, which is moved to
    the back; repeat on the smaller block until `p - k` columns are rejected. Optimises
    the residual criterion (paper eq. 3.5); Theorem 4.1 bounds `||R22||`. Where `R11`
    is singular to working precision (fewer rows than columns, an exact dependency), its
    smallest singular vector is not unique, and the column rejected is the one with the
    largest projection on its null space: the same on every backend.
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
            m = _most_dependent_column(R, lead, c)
            src = idx.at[m].set(size - 1).at[size - 1].set(m)
            return qr_r(R[:, src]), perm[src]

        perm0 = jnp.arange(p, dtype=jnp.int32)
        R, perm = lax.fori_loop(0, p - k, body, (R, perm0))
        return make_selection(perm, R, k, p - k, RESULTS.successful)
