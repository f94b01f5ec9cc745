import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .._context import clean_errors
from ._css._base import AbstractColumnSelectionMethod, ColumnSelection
from ._css._srrqr import StrongRRQR
from ._misc import after, reduce_to_square, svdvals
from ._rank import AbstractRankRule, RelativeTolerance, warn_if_low_precision
from ._results import RESULTS


def check_matrix(S: ArrayLike, what: str = "S") -> Array:
    """Trace-time checks of a matrix argument."""
    if not hasattr(S, "shape"):
        S = np.asarray(S)
    if len(S.shape) != 2:
        raise ValueError(
            f"{what} must be a 2-D (n, p) matrix, got shape {tuple(S.shape)}. For a batch of "
            "matrices use jax.vmap or ji.sweep."
        )
    if S.shape[1] == 0:
        raise ValueError(f"{what} has no columns.")
    if S.shape[0] == 0:
        raise ValueError(f"{what} has no rows: a rank decision needs at least one observation.")
    S = jnp.asarray(S)
    if not jnp.issubdtype(S.dtype, jnp.floating):
        S = S.astype(float)
    warn_if_low_precision(S)
    return S


def raise_if_nonfinite(S: Array, what: str = "S") -> None:
    """For a concrete matrix, a `ValueError` naming where it holds NaN or inf (the
    compiled check would only say that it does, after a page of traceback)."""
    if isinstance(S, jax.core.Tracer):
        return
    bad = ~np.isfinite(np.asarray(S))
    if bad.any():
        rows, cols = np.nonzero(bad)
        where = ", ".join(f"({i}, {j})" for i, j in zip(rows[:5], cols[:5]))
        more = f" and {rows.size - 5} more" if rows.size > 5 else ""
        raise ValueError(
            f"{what} contains NaN or inf at {where}{more} (row, column). A sensitivity matrix "
            "with non-finite entries comes from a failed solve; check the model and the "
            "parameter values, or pass throw=False to get a failure status instead."
        )


def check_k(k, p: int):
    if k is None:
        return None
    if isinstance(k, (int, np.integer)):
        if not 0 <= int(k) <= p:
            raise ValueError(f"k must lie in [0, p] = [0, {p}], got k={int(k)}.")
        return int(k)
    k = jnp.asarray(k)
    if k.shape != () or not jnp.issubdtype(k.dtype, jnp.integer):
        raise TypeError(f"k must be an integer scalar, got {k!r}.")
    if not isinstance(k, jax.core.Tracer) and not 0 <= int(k) <= p:
        raise ValueError(f"k must lie in [0, p] = [0, {p}], got k={int(k)}.")
    return jnp.clip(k, 0, p).astype(jnp.int32)  # a traced k is clipped (no raise in jit)


@eqx.filter_jit
def _column_subset(S, k, method, rank, throw):
    n, p = S.shape
    finite = jnp.all(jnp.isfinite(S))
    S = jnp.where(finite, S, 0.0)
    if k is None:
        # The rank needs the singular values; reduce to the p x p factor once.
        S = reduce_to_square(S)
        sigma = svdvals(S)
        k = rank(sigma, (n, p))
        S = after(S, sigma)
    elif n < p:
        S = jnp.concatenate([S, jnp.zeros((p - n, p), S.dtype)], axis=0)
    sel = method(S, k)
    result = RESULTS.where(finite, sel.result, RESULTS.nonfinite_input)
    R = jnp.where(finite, sel.R, jnp.nan)
    sel = eqx.tree_at(lambda s: (s.R, s.result), sel, (R, result))
    if throw:
        sel = result.error_if(sel, result != RESULTS.successful)
    return sel


@clean_errors
def column_subset(
    S: ArrayLike,
    k: int | ArrayLike | None = None,
    *,
    method: AbstractColumnSelectionMethod = StrongRRQR(),
    rank: AbstractRankRule = RelativeTolerance(),
    throw: bool = True,
) -> ColumnSelection:
    """Column subset selection `S[:, perm] = Q R`, selected columns first.

    **Arguments:**

    - `S`: an `(n, p)` matrix (a sensitivity matrix: rows are observations, columns are
      parameters). `n < p` is allowed.
    - `k`: the number of columns to select. `None` (default) uses `rank`.
    - `method`: `StrongRRQR(f)` (default, Algorithm 4.4), `RRQR()` (4.1, PCA B1),
      `LRRQR()` (4.2, PCA B4), `GKS()` (4.3, PCA B3) or `QRCP()`.
    - `rank`: the rank rule used when `k` is `None`.
    - `throw`: raise on a failed selection (non-finite input, singular `R11`, the swap cap
      reached). With `throw=False` the status is in the result instead; use that under
      `vmap` so that one bad matrix does not stop a batch.

    **Returns:** a `ColumnSelection`.

    **Raises:** `ValueError` for a matrix that is not 2-D or a `k` outside `[0, p]`;
    an `EquinoxRuntimeError` at run time when `throw=True` and the selection fails.

    **Example:**

    ```python
    sel = ji.linalg.column_subset(S, k=3, method=ji.linalg.StrongRRQR(f=1.5))
    sel.perm[:3]  # the selected columns
    ```
    """
    S = check_matrix(S)
    k = check_k(k, S.shape[1])
    if throw:
        raise_if_nonfinite(S)
    if not isinstance(method, AbstractColumnSelectionMethod):
        raise TypeError(
            f"method must be a column-selection method such as StrongRRQR(), got {method!r}."
        )
    if not isinstance(rank, AbstractRankRule):
        raise TypeError(f"rank must be a rank rule such as RelativeTolerance(), got {rank!r}.")
    return _column_subset(S, k, method, rank, throw)


def srrqr(S: ArrayLike, k: int | ArrayLike | None = None, f: float = 1.01, **kwargs):
    """Strong rank-revealing QR of `S` with parameter `f`: shorthand for
    `column_subset(S, k, method=StrongRRQR(f=f))`."""
    return column_subset(S, k, method=StrongRRQR(f=f), **kwargs)
