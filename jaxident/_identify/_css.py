"""Identifiability by column subset selection on the sensitivity matrix (Pearce, Ipsen,
Haider, Saibaba & Smith 2022)."""

from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike

from .._linalg._css._base import AbstractColumnSelectionMethod
from .._linalg._css._srrqr import StrongRRQR
from .._linalg._rank import AbstractRankRule, RelativeTolerance, with_accuracy
from .._linalg._scaling import output_row_scale
from .._linalg._selection import Selection
from .._linalg._subset import check_matrix, select_columns
from .._runtime._context import clean_errors
from .._solve._sensitivity_result import Sensitivity, SensitivityScale


@clean_errors
def select_parameters(
    S: ArrayLike | Sensitivity,
    names: Sequence[str] | None = None,
    *,
    method: AbstractColumnSelectionMethod = StrongRRQR(),
    rank: AbstractRankRule = RelativeTolerance(),
    k: int | ArrayLike | None = None,
    throw: bool | None = None,
    equilibrate: bool = True,
) -> Selection:
    """Split the parameters into identifiable and non-identifiable ones by column subset
    selection on the sensitivity matrix (Pearce et al. 2022, section 4).

    The `k` most linearly independent columns of `S` (its numerical rank by default) are
    the identifiable parameters; the rest are non-identifiable and are candidates to fix
    at nominal values before re-estimation.

    **Arguments:**

    - `S`: an `(n, p)` sensitivity matrix, or a `Sensitivity` (which brings its names).
    - `names`: the `p` parameter names (default `theta0, theta1, ...`).
    - `method`: `StrongRRQR(f)` (default, Algorithm 4.4, the paper's recommendation),
      `RRQR()` (PCA B1), `LRRQR()` (PCA B4), `GKS()` (PCA B3) or `QRCP()`.
    - `rank`: how `k` is chosen when not given: `RelativeTolerance(rtol)` (default
      `rtol = max(n, p) eps`, or the accuracy a `Sensitivity` records if larger),
      `AbsoluteTolerance(atol)` or `LargestGap()`. The rule is applied to the singular
      values of the equilibrated matrix (columns scaled to unit norm, and the rows of a
      `Sensitivity` by each output's RMS value), so `k` does not depend on units; the
      selection itself is made on `S` as given. A decision within a factor 10 of the
      threshold gives a `NearThresholdWarning`.
    - `k`: the number of identifiable parameters, overriding `rank` (an integer in
      `[0, p]`; a traced `k` under `jit` is clipped to that range).
    - `throw`: raise on failure (non-finite `S`, singular `R11`); default `True`,
      `False` inside `ji.sweep`.
    - `equilibrate`: `True` (default): the rank rule sees the equilibrated matrix, as
      above; `False`: the singular values of `S` as given, the convention of Pearce et
      al. (2022) and their code. The two differ where the columns' norms differ by
      orders of magnitude: on the paper's COVID matrix, `RelativeTolerance(1e-4)` gives
      the paper's k = 5 with `equilibrate=False` and 6 by default.

    **Returns:** a `Selection`. Jittable and vmappable over `S`.

    **Raises:** `ValueError` for a matrix that is not 2-D, names of the wrong length or
    repeated names, or `k` outside `[0, p]`.

    **Example:**

    ```python
    model = ji.models.load("svir")
    S = ji.sensitivity_matrix(model)
    sel = ji.select_parameters(S, names=model.parameters.names, k=3)
    sel.non_identifiable   # ('nu',)
    ```
    """
    row_scale = None
    if isinstance(S, Sensitivity):
        if names is None:
            names = S.names
        rank = with_accuracy(rank, S.accuracy)
        if S.scale != SensitivityScale.noise:  # rows already divided by their noise level
            row_scale = output_row_scale(S.outputs, S.n_outputs)
        S = S.matrix
    S = check_matrix(S)
    return select_columns(
        S, names, k, method, rank, row_scale, throw, "select_parameters", equilibrate=equilibrate
    )


def identifiability_frequency(selections: Selection) -> dict[str, float]:
    """For a batch of selections (from `vmap` or `ji.sweep`), the fraction of samples in
    which each parameter was selected as identifiable, over the successful samples.

    This is the summary of the CSS paper's 10,000-realisation experiment.
    """
    mask = np.asarray(selections.mask)
    if mask.ndim != 2:
        raise ValueError("identifiability_frequency needs a batch of selections.")
    ok = np.asarray(selections.ok, bool)
    if not ok.any():
        return {n: float("nan") for n in selections.names}
    freq = mask[ok].mean(axis=0)
    return {n: float(f) for n, f in zip(selections.names, freq)}
