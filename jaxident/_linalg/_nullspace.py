"""Null spaces, reduced row echelon forms and the parameter dependencies they reveal
(Abdelfattah, Stechlinski & Eisa 2024, section III-B). Fixed shapes throughout, so that
everything is jittable and vmappable over matrices of different ranks."""

import equinox as eqx
import jax.lax as lax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ._misc import reduce_to_square
from ._rank import AbstractRankRule
from ._scaling import equilibrate as _equilibrate


class NullSpace(eqx.Module):
    """A numerical null space of an `(n, p)` matrix.

    **Fields:**

    - `singular_values`: of the column-equilibrated matrix `S C^{-1}`, descending.
    - `rank`: the numerical rank under the rule used, on those singular values.
    - `basis`: `(p, p)`, the right singular vectors of `S C^{-1}` as columns; the last
      `p - rank` span its null space. Zero patterns (rref pivots) read off this basis do
      not depend on the units of the parameters.
    - `scale`: `(p,)`, the column norms `C`.
    - `mask`: `(p,)`, which columns of `basis` are null vectors.
    """

    singular_values: Float[Array, " p"]
    rank: Int[Array, ""]
    basis: Float[Array, "p p"]
    scale: Float[Array, " p"]
    mask: Bool[Array, " p"]

    @property
    def nullity(self) -> Int[Array, ""]:
        return self.basis.shape[-1] - self.rank

    def raw_basis(self) -> Array:
        """The basis in the original units, `C^{-1} V`, each column of unit norm: the
        null vectors of `S` itself."""
        V = self.basis / self.scale[..., :, None]
        return V / jnp.linalg.norm(V, axis=-2, keepdims=True)


def null_space(
    S: Float[Array, "n p"], rank: AbstractRankRule, equilibrate: bool = True
) -> NullSpace:
    """The right null space of `S` from the SVD of its column-equilibrated form
    `S C^{-1}` (unit column norms), the rank decided by `rank` (paper eqs. 14-15) on
    those singular values, so that no change of units of a parameter changes it; with
    `equilibrate=False`, of `S` as given (`C = I`: the papers' convention). Jittable and
    vmappable."""
    n, p = S.shape
    S_eq, c = _equilibrate(S) if equilibrate else (S, jnp.ones((p,), S.dtype))
    R = reduce_to_square(S_eq)
    _, sigma, vt = jnp.linalg.svd(R, full_matrices=True)
    k = rank(sigma, (n, p))
    mask = jnp.arange(p, dtype=jnp.int32) >= k
    return NullSpace(singular_values=sigma, rank=k, basis=vt.T, scale=c, mask=mask)


class Echelon(eqx.Module):
    """The reduced row echelon form of a matrix and what it says about its columns.

    **Fields:**

    - `R`: the reduced row echelon form (zero rows last).
    - `pivots`: `(n,)`, which columns are pivot columns.
    - `pivot_row`: `(n,)`, the row of each pivot column's pivot (-1 if none).
    - `partners`: `(n, n)`, `partners[i, j]` when pivot column `i`'s row has a nonzero in
      column `j != i`.
    """

    R: Float[Array, "m n"]
    pivots: Bool[Array, " n"]
    pivot_row: Int[Array, " n"]
    partners: Bool[Array, "n n"]


def rref(A: Float[Array, "m n"], tol: float = 1e-8) -> Echelon:
    """Reduced row echelon form of `A` by Gauss-Jordan elimination with partial
    pivoting; an entry counts as nonzero above `tol` times `max|A|`. Jittable and vmappable.

    Applied to `V_r^T`, the transposed null basis of an L-SERC matrix, its pivot columns
    are the locally non-identifiable parameters; a pivot whose row has no other nonzero
    marks an isolated one, otherwise the nonzeros name its partners (paper eqs. 22-23).
    """
    m, n = A.shape
    scale = jnp.max(jnp.abs(A))
    atol = tol * jnp.where(scale > 0, scale, 1.0)
    rows = jnp.arange(m, dtype=jnp.int32)

    def body(c, carry):
        R, r, piv, prow = carry
        cand = jnp.where(rows >= r, jnp.abs(R[:, c]), -1.0)
        i = jnp.argmax(cand).astype(jnp.int32)
        big = (cand[i] > atol) & (r < m)
        rr = jnp.minimum(r, m - 1)
        swapped = R.at[rr].set(R[i]).at[i].set(R[rr])
        R = jnp.where(big, swapped, R)
        pivot = jnp.where(big, R[rr, c], 1.0)
        R = jnp.where(big, R.at[rr].set(R[rr] / pivot), R)
        factors = jnp.where(big & (rows != rr), R[:, c], 0.0)
        R = R - factors[:, None] * R[rr][None, :]
        piv = piv.at[c].set(big)
        prow = prow.at[c].set(jnp.where(big, rr, -1))
        return R, r + big.astype(jnp.int32), piv, prow

    init = (
        A,
        jnp.asarray(0, jnp.int32),
        jnp.zeros(n, bool),
        -jnp.ones(n, jnp.int32),
    )
    R, _, piv, prow = lax.fori_loop(0, n, body, init)
    R = jnp.where(jnp.abs(R) > atol, R, 0.0)
    rowvals = R[jnp.clip(prow, 0, m - 1)]  # (n, n): the pivot row of each column
    partners = piv[:, None] & (rowvals != 0) & ~jnp.eye(n, dtype=bool)
    return Echelon(R=R, pivots=piv, pivot_row=prow, partners=partners)
