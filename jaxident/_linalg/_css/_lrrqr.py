from typing import ClassVar

import jax.lax as lax
import jax.numpy as jnp

from ..._runtime._results import RESULTS
from .._misc import as_square, qr_r
from ._base import AbstractColumnSelectionMethod, make_selection


class LRRQR(AbstractColumnSelectionMethod):
    """Algorithm 4.2 of Pearce et al. (2022): L-RRQR of Chan & Hansen (1994), the
    column-subset form of Jolliffe's PCA method B4.

    Works forwards: the dominant right singular vector of the trailing block `R22`
    points at the column that carries its largest singular value, which is moved to the
    front of the block; repeat `k` times. Optimises the independence criterion (paper
    eq. 3.4); Theorem 4.2 bounds `sigma_k(R11)` from below.
    """

    name: ClassVar[str] = "b4"

    def __call__(self, R, k):
        R = as_square(R)
        p = R.shape[0]
        idx = jnp.arange(p, dtype=jnp.int32)

        def body(step, carry):
            R, perm = carry
            trail = idx >= step
            M = jnp.where(trail[:, None] & trail[None, :], R, 0.0)
            _, _, vt = jnp.linalg.svd(M, full_matrices=False)
            m = jnp.argmax(jnp.where(trail, jnp.abs(vt[0]), -1.0)).astype(jnp.int32)
            src = idx.at[m].set(step).at[step].set(m)
            return qr_r(R[:, src]), perm[src]

        perm0 = jnp.arange(p, dtype=jnp.int32)
        R, perm = lax.fori_loop(0, k, body, (R, perm0))
        return make_selection(perm, R, k, k, RESULTS.successful)
