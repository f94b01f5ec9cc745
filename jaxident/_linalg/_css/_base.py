import abc
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..._runtime._results import RESULTS
from .._metrics import srrqr_rho


class ColumnSelection(eqx.Module):
    """What a column-selection method returns to the driver (`ji.linalg.column_subset`
    and `ji.select_parameters` wrap it in a `Selection`, the public result).

    `S[:, perm] = Q R` with `R` upper triangular; the first `k` columns of `S[:, perm]`
    are the selected (identifiable) columns `S1`, the others `S2`.

    **Fields:**

    - `perm`: the column permutation, selected columns first.
    - `R`: the `(p, p)` upper-triangular factor of `S[:, perm]`.
    - `k`: the number of selected columns.
    - `swaps`: column exchanges (strong RRQR) or pivot steps (the other methods).
    - `rho`: `max_ij sqrt((R11^-1 R12)_ij^2 + (gamma_j(R22)/omega_i(R11))^2)`, the factor
      by which the best single exchange could grow `|det R11|` (Gu & Eisenstat 1996).
      Strong RRQR guarantees `rho <= f`.
    - `result`: a `RESULTS` status.
    """

    perm: Int[Array, " p"]
    R: Float[Array, "p p"]
    k: Int[Array, ""]
    swaps: Int[Array, ""]
    rho: Float[Array, ""]
    result: RESULTS


class AbstractColumnSelectionMethod(eqx.Module):
    """A column subset selection algorithm.

    Subclasses implement `__call__(R, k)`, acting on the square triangular factor `R` of
    the matrix (paper, Remark 3.1), and return a `ColumnSelection` whose `R` satisfies
    `R_in[:, perm] = Q R` with `R` upper triangular. `k` is a Python `int` (one
    compiled version per split) or a traced integer scalar (one version for all).
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def __call__(self, R: Float[Array, "p p"], k: int | Int[Array, ""]) -> ColumnSelection:
        """Select `k` columns of the triangular `R`."""


def make_selection(perm, R, k, swaps, result, rho=None) -> ColumnSelection:
    k = jnp.asarray(k, jnp.int32)
    if rho is None:
        rho = srrqr_rho(R, k)
    return ColumnSelection(
        perm=perm.astype(jnp.int32),
        R=R,
        k=k,
        swaps=jnp.asarray(swaps, jnp.int32),
        rho=rho,
        result=result,
    )
