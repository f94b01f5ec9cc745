"""Equilibration: decisions that do not depend on units.

A change of units of a parameter scales a column of a sensitivity matrix, and a change of
units of an output scales its rows. Every rank, nullity and zero-entry decision in
jaxident is taken on the equilibrated matrix `W^{-1} S C^{-1}`: rows divided by a scale
of their output (`W`, e.g. the output's RMS value or its noise level) and then columns by
their 2-norms (`C`). Both scalings are undone exactly by any change of units, so every
decision is unit-free; the column scales are recorded in the results.
"""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._runtime._host import array_module
from ._misc import column_norms


def equilibrate(
    S: Float[Array, "n p"], row_scale: Float[Array, " n"] | None = None
) -> tuple[Float[Array, "n p"], Float[Array, " p"]]:
    """`(S_eq, c)` with `S_eq = diag(1/row_scale) S diag(1/c)` and `c` the 2-norms of the
    row-scaled columns (1 for a zero column, which stays zero whatever its units).

    **Arguments:**

    - `S`: an `(n, p)` matrix.
    - `row_scale`: positive scales of the rows (default: none).

    **Returns:** the equilibrated matrix, whose nonzero columns have unit norm, and `c`.
    Jittable and vmappable.
    """
    if row_scale is not None:
        S = S / row_scale[:, None]
    c = column_norms(S)
    c = jnp.where(c > 0, c, jnp.ones_like(c))
    return S / c[None, :], c


def output_row_scale(outputs: Float[Array, " n"], n_outputs: int) -> Float[Array, " n"]:
    """Row scales for a time-major sensitivity matrix from its `outputs` (one per row,
    `n_outputs` of them at each time): the RMS value of each output over
    the times (the block's own size where an output is identically zero, or not
    finite), repeated over the rows of that output. Changing the units of an output then
    changes no decision. Computed with NumPy for concrete outputs (no compilation on a
    first call), with JAX under a trace."""
    xp = array_module(outputs)
    Y = xp.reshape(xp.asarray(outputs), (-1, n_outputs))
    rms = xp.sqrt(xp.mean(Y**2, axis=0))
    tiny = np.finfo(Y.dtype).tiny
    rms = xp.where(xp.isfinite(rms) & (rms > tiny), rms, 1.0)
    return jnp.asarray(xp.tile(rms, Y.shape[0]))
