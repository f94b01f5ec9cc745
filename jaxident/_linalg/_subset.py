from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .._runtime._host import device_array, run_kernel
from .._runtime._results import message, RESULTS
from ._css._base import AbstractColumnSelectionMethod
from ._css._srrqr import StrongRRQR
from ._dependence import dependence
from ._metrics import css_metrics
from ._misc import after, reduce_to_square, svdvals
from ._rank import (
    AbstractRankRule,
    RelativeTolerance,
    warn_if_low_precision,
    warn_if_near_threshold,
)
from ._scaling import equilibrate
from ._selection import Selection


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
    S = device_array(S)
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


def _selection_message(sel) -> str | None:
    return message(sel.result)


@eqx.filter_jit
def _select(S, k, method, rank, names, row_scale, metrics, equilibrated, units, decide, throw):
    n, p = S.shape
    finite = jnp.all(jnp.isfinite(S))
    safe = jnp.where(finite, S, 0.0)
    S_eq, c = equilibrate(safe, row_scale)
    rule = rank if k is None else None
    dep = None
    if decide:
        # which parameters have no effect and which lie in a non-identifiable direction,
        # by the rank rule (ji.linalg.dependence): recorded, and k where not given
        dep = dependence(safe, rank, units, row_scale)
        dep = jax.tree.map(lambda x: jnp.where(finite, x, jnp.zeros_like(x)), dep)
        safe = after(safe, dep)
    if k is None and decide and equilibrated:
        sigma_eq = dep.singular_values
        k = dep.rank
    elif k is None:
        # the rank decision, on the equilibrated matrix (unit-free), or on S as given
        sigma_eq = svdvals(reduce_to_square(S_eq if equilibrated else safe))
        k = rank(sigma_eq, (n, p))
        safe = after(safe, sigma_eq)
    else:  # k given: no decision to make, and none recorded
        sigma_eq = jnp.full((p,), jnp.nan, S.dtype)
    R0 = reduce_to_square(safe)
    nan = jnp.asarray(jnp.nan, S.dtype)
    # the singular values of S, for the accuracy metrics; skipped on request (they cost
    # about as much as the selection itself)
    sigma = svdvals(R0) if metrics else jnp.full((p,), nan)
    sel = method(after(R0, sigma) if metrics else R0, k)
    if metrics:
        gamma1, gamma2, tau = css_metrics(sigma, after(sel.R, sel.rho), sel.k, n)
    else:
        gamma1 = gamma2 = tau = nan
    result = RESULTS.where(finite, sel.result, RESULTS.nonfinite_matrix)
    out = Selection(
        names=names,
        perm=sel.perm,
        k=sel.k,
        singular_values=jnp.where(finite, sigma, nan),
        decision_singular_values=jnp.where(finite, sigma_eq, nan),
        scale=c,
        gamma1=jnp.where(finite, gamma1, nan),
        gamma2=jnp.where(finite, gamma2, nan),
        tau=jnp.where(finite, tau, nan),
        rho=jnp.where(finite, sel.rho, nan),
        R=jnp.where(finite, sel.R, nan),
        swaps=sel.swaps,
        result=result,
        method=method,
        rank_rule=rule,
        shape=(n, p),
        dependence=dep,
    )
    if throw:  # (False, or the error mode: `run_kernel`)
        out = result.error_if(out, result != RESULTS.successful)
    return out


def _power_of_two_scaling(S):
    """`(S 2^-e, e)` with `max|S 2^-e|` in `[0.5, 1)`, exact, for a concrete `S`: the
    compiled kernels then see neither subnormal numbers (flushed to zero on the CPU) nor
    squares that overflow. Every decision and metric is invariant to it."""
    if isinstance(S, jax.core.Tracer):
        return S, 0
    m = float(np.max(np.abs(np.asarray(S)), initial=0.0))
    if not np.isfinite(m) or m == 0.0:
        return S, 0
    e = int(np.frexp(m)[1])
    if -4 <= e <= 4:
        return S, 0
    return device_array(np.ldexp(np.asarray(S, dtype=float), -e)), e


def select_columns(
    S,
    names,
    k,
    method,
    rank,
    row_scale,
    throw,
    caller: str,
    metrics: bool = True,
    equilibrate: bool = True,
    units=None,
    decide: bool | None = None,
) -> Selection:
    """The one column-selection driver: checks on the host, then the `_select` kernel.

    `S` is a matrix (already through `check_matrix`), `names` a sequence or `None`,
    `row_scale` the per-row scale of the rank decision (positive and finite, as
    `output_row_scale` gives) or `None`, `caller` the public name for warnings, `units`
    those of the columns for the "no effect" decision, `decide` whether to record
    `ji.linalg.dependence` (default: where `k` is not given)."""
    if throw is not False:
        raise_if_nonfinite(S)
    p = S.shape[1]
    if names is None:
        names = tuple(f"theta{i}" for i in range(p))
    names = tuple(names)
    if len(names) != p:
        raise ValueError(f"{len(names)} names for a matrix with {p} columns: {list(names)}.")
    if len(set(names)) != p:
        raise ValueError(f"Parameter names must be unique, got {list(names)}.")
    if not isinstance(method, AbstractColumnSelectionMethod):
        raise TypeError(
            f"method must be a column-selection method such as StrongRRQR(), got {method!r}."
        )
    if not isinstance(rank, AbstractRankRule):
        raise TypeError(f"rank must be a rank rule such as RelativeTolerance(), got {rank!r}.")
    given = k is not None
    k = check_k(k, p)
    if decide is None:
        decide = not given
    if units is not None:
        units = jnp.asarray(
            units, dtype=S.dtype if jnp.issubdtype(S.dtype, jnp.floating) else float
        )
        if units.shape != (p,):
            raise ValueError(f"units must have shape ({p},), one per column, got {units.shape}.")
        if not isinstance(units, jax.core.Tracer) and not bool(
            np.all(np.isfinite(np.asarray(units)) & (np.asarray(units) > 0))
        ):
            raise ValueError(f"units must be positive and finite, got {np.asarray(units)}.")
    S, power = _power_of_two_scaling(S)
    sel = run_kernel(
        _select,
        S,
        k,
        method,
        rank,
        names,
        row_scale,
        bool(metrics),
        bool(equilibrate),
        units,
        bool(decide),
        throw=throw,
        message=_selection_message,
        optimize=False,  # compiled for compile time: the same run time (see _config)
    )
    if power:
        sel = eqx.tree_at(
            lambda s: (s.singular_values, s.R, s.scale),
            sel,
            tuple(
                device_array(np.ldexp(np.asarray(x), power))
                for x in (sel.singular_values, sel.R, sel.scale)
            ),
        )
        if sel.dependence is not None:
            sel = eqx.tree_at(
                lambda s: (s.dependence.norms, s.dependence.effect_threshold),
                sel,
                tuple(
                    device_array(np.ldexp(np.asarray(x), power))
                    for x in (sel.dependence.norms, sel.dependence.effect_threshold)
                ),
            )
    if not given:
        warn_if_near_threshold(rank, sel.decision_singular_values, S.shape, caller)
    return sel


def column_subset(
    S: ArrayLike,
    k: int | ArrayLike | None = None,
    *,
    names: Sequence[str] | None = None,
    method: AbstractColumnSelectionMethod = StrongRRQR(),
    rank: AbstractRankRule = RelativeTolerance(),
    metrics: bool = True,
    throw: bool | None = None,
    equilibrate: bool = True,
) -> Selection:
    """Column subset selection `S[:, perm] = Q R`, selected columns first.

    The same driver as `ji.select_parameters`, on a plain matrix.

    **Arguments:**

    - `S`: an `(n, p)` matrix (a sensitivity matrix: rows are observations, columns are
      parameters). `n < p` is allowed.
    - `k`: the number of columns to select. `None` (default) uses `rank`, applied to the
      singular values of `S` with unit column norms (so that no column scaling changes
      it); the selection itself is made on `S` as given.
    - `names`: column names (default `theta0, theta1, ...`).
    - `method`: `StrongRRQR(f)` (default, Algorithm 4.4), `RRQR()` (4.1, PCA B1),
      `LRRQR()` (4.2, PCA B4), `GKS()` (4.3, PCA B3) or `QRCP()`.
    - `rank`: the rank rule used when `k` is `None`.
    - `metrics`: compute the singular values of `S` and the accuracy metrics `gamma1`,
      `gamma2`, `tau` (default). `False` leaves them NaN and about halves the cost of a
      batched selection with `k` given.
    - `throw`: raise on a failed selection (non-finite input, singular `R11`, the swap cap
      reached): by default on a concrete call; under `jit`, `vmap` or `ji.sweep` the
      status is in the result instead, so that one bad matrix does not stop a batch
      (`True`: raise there too; `False`: never).
    - `equilibrate`: `False` applies `rank` to the singular values of `S` as given (the
      CSS paper's convention; see `ji.select_parameters`).

    **Returns:** a `Selection` (`perm`, `R`, `k`, `rho`, `swaps`, the accuracy metrics
    and a `RESULTS` status).

    **Raises:** `ValueError` for a matrix that is not 2-D or a `k` outside `[0, p]`;
    an `EquinoxRuntimeError` when the selection fails (see `throw`).

    **Example:**

    ```python
    sel = ji.linalg.column_subset(S, k=3, method=ji.linalg.StrongRRQR(f=1.5))
    sel.selected  # the selected columns
    ```
    """
    S = check_matrix(S)
    return select_columns(
        S, names, k, method, rank, None, throw, "column_subset", metrics, equilibrate
    )


def srrqr(S: ArrayLike, k: int | ArrayLike | None = None, f: float = 1.01, **kwargs):
    """Strong rank-revealing QR of `S` with parameter `f`, selecting `k` columns (default
    by the rank rule): shorthand for
    `column_subset(S, k, method=StrongRRQR(f=f))`."""
    return column_subset(S, k, method=StrongRRQR(f=f), **kwargs)
