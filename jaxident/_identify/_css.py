"""Identifiability by column subset selection on the sensitivity matrix (Pearce, Ipsen,
Haider, Saibaba & Smith 2022)."""

from collections.abc import Sequence

import jax
import numpy as np
from jaxtyping import ArrayLike

from .._linalg._css._base import AbstractColumnSelectionMethod
from .._linalg._css._srrqr import StrongRRQR
from .._linalg._rank import AbstractRankRule, RelativeTolerance, with_accuracy
from .._linalg._scaling import output_row_scale
from .._linalg._selection import Selection
from .._linalg._subset import check_matrix, select_columns
from .._solve._sensitivity_result import Sensitivity, SensitivityScale


def select_parameters(
    S: ArrayLike | Sensitivity,
    names: Sequence[str] | None = None,
    *,
    method: AbstractColumnSelectionMethod = StrongRRQR(),
    rank: AbstractRankRule = RelativeTolerance(),
    k: int | ArrayLike | None = None,
    throw: bool | None = None,
    equilibrate: bool = True,
    units: ArrayLike | None = None,
    decide: bool | None = None,
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
    - `throw`: raise on failure (non-finite `S`, singular `R11`): by default on a
      concrete call, a status under `jit`, `vmap` or `ji.sweep` (`True`: raise there
      too; `False`: never).
    - `equilibrate`: `True` (default): the rank rule sees the equilibrated matrix, as
      above; `False`: the singular values of `S` as given, the convention of Pearce et
      al. (2022) and their code. The two differ where the columns' norms differ by
      orders of magnitude: on the paper's COVID matrix, `RelativeTolerance(1e-4)` gives
      the paper's k = 5 with `equilibrate=False` and 6 by default.
    - `units`: `(p,)`, the size of a unit move of each parameter on the scale of its
      column (a `Sensitivity` brings them), so that a column with no effect on the
      outputs is told apart before equilibration; without them only a zero column has
      no effect.

    - `decide`: record which parameters have no effect and which are non-identifiable
    together, by the rank rule (`ji.linalg.dependence`, the result's `dependence`;
    its `groups` then list the sets, with the members the selection kept). Default:
    where the rank is decided (`k` not given); `True` with a `k` of your own too. It
    costs `p` SVDs of `p x p` matrices, little next to a sensitivity solve but not
    next to a selection alone on large matrices.

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
        if units is None:
            units = S.units
        rank = with_accuracy(rank, S.accuracy)
        if S.scale != SensitivityScale.noise:  # rows already divided by their noise level
            row_scale = output_row_scale(S.outputs, S.n_outputs)
        S = S.matrix
    S = check_matrix(S)
    return select_columns(
        S,
        names,
        k,
        method,
        rank,
        row_scale,
        throw,
        "select_parameters",
        equilibrate=equilibrate,
        units=units,
        decide=decide,
    )


def identifiability_frequency(selections: Selection) -> "SelectionFrequency":
    """For a batch of `selections` (a `Selection` from `vmap` or `ji.sweep`), the
    fraction of samples in which each parameter was selected as identifiable, over the
    successful samples:
    the summary of the CSS paper's 10,000-realisation experiment.

    The result is a dict `{name: fraction selected}` that also knows the groups: the
    members of a set of parameters that are non-identifiable together are selected in
    turn, one sample this one and the next sample that one (or always the same, by the
    order of the columns), which says nothing about either. `groups` gives each such
    set with the fraction of samples in which it is one, and `non_identifiable` and
    `no_effect` the fraction per parameter, decided by the rank rule
    (`ji.linalg.dependence`); `str()` reads them together.
    """
    mask = np.asarray(selections.mask)
    if mask.ndim != 2:
        raise ValueError("identifiability_frequency needs a batch of selections.")
    ok = np.asarray(selections.ok, bool)
    names = selections.names
    if not ok.any():
        nan = {n: float("nan") for n in names}
        return SelectionFrequency(nan, n=0, groups=(), non_identifiable=nan, no_effect=nan)
    freq = mask[ok].mean(axis=0)
    dep = selections.dependence
    if dep is None:
        return SelectionFrequency(
            {n: float(f) for n, f in zip(names, freq)}, n=int(ok.sum()), groups=()
        )
    non_id = np.asarray(dep.non_identifiable)[ok].mean(axis=0)
    zero = np.asarray(dep.no_effect)[ok].mean(axis=0)
    counts: dict[tuple, int] = {}
    host = jax.tree.map(np.asarray, selections)
    for i in np.flatnonzero(ok & np.asarray(dep.dependent).any(axis=-1)):
        one = jax.tree.map(lambda x, i=i: x[i], host)
        for g in one.groups:
            key = (g.names, len(g.kept))
            counts[key] = counts.get(key, 0) + 1
    groups = tuple(
        (g, kept, c / ok.sum()) for (g, kept), c in sorted(counts.items(), key=lambda t: -t[1])
    )
    return SelectionFrequency(
        {n: float(f) for n, f in zip(names, freq)},
        n=int(ok.sum()),
        groups=groups,
        non_identifiable={n: float(f) for n, f in zip(names, non_id)},
        no_effect={n: float(f) for n, f in zip(names, zero)},
    )


class SelectionFrequency(dict):
    """`{name: fraction of samples in which it was selected}` (a dict), with `n` the
    successful samples, `groups` (`(names, kept, fraction)`: a set of parameters that
    are non-identifiable together, how many of them a selection keeps, and the fraction
    of samples in which they are such a set), and `non_identifiable` and `no_effect`,
    `{name: fraction}` by the rank rule. `str()` reads the members of a group as a
    group."""

    def __init__(self, selected, *, n, groups, non_identifiable=None, no_effect=None):
        super().__init__(selected)
        self.n = n
        self.groups = groups
        self.non_identifiable = non_identifiable
        self.no_effect = no_effect

    def __str__(self) -> str:
        lines = [f"Selection frequency over {self.n} samples"]
        w = max(len(n) for n in self)
        for name, f in self.items():
            extra = ""
            if self.no_effect and self.no_effect[name] > 0:
                extra = f"  no effect in {100 * self.no_effect[name]:.0f}%"
            elif self.non_identifiable and self.non_identifiable[name] > 0:
                extra = f"  in a non-identifiable group in {100 * self.non_identifiable[name]:.0f}%"
            lines.append(f"  {name:<{w}}  selected in {100 * f:6.2f}%{extra}")
        for g, kept, f in self.groups:
            lines.append(
                f"  {{{', '.join(g)}}}: non-identifiable together in {100 * f:.0f}% of the "
                f"samples; {kept} of them selected there, which ones is arbitrary"
            )
        return "\n".join(lines)
