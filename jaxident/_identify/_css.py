"""Identifiability by column subset selection on the sensitivity matrix (Pearce, Ipsen,
Haider, Saibaba & Smith 2022)."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .._context import clean_errors, resolve_throw, run_kernel
from .._linalg._css._base import AbstractColumnSelectionMethod
from .._linalg._css._srrqr import StrongRRQR
from .._linalg._metrics import css_metrics
from .._linalg._misc import after, reduce_to_square, svdvals
from .._linalg._rank import (
    AbstractRankRule,
    RelativeTolerance,
    warn_if_near_threshold,
    with_accuracy,
)
from .._linalg._results import RESULTS
from .._linalg._scaling import equilibrate, output_row_scale
from .._linalg._subset import check_k, check_matrix, raise_if_nonfinite
from .._sensitivity import Sensitivity


class Selection(eqx.Module):
    """Which parameters a sensitivity matrix can identify.

    **Fields:**

    - `names`: parameter names, in the column order of `S`.
    - `perm`: the column permutation; `perm[:k]` are identifiable, most independent first.
    - `k`: the number of identifiable parameters.
    - `singular_values`: of `S`, descending.
    - `scale`: the column norms by which `S` was equilibrated for the rank decision, and
      `decision_singular_values` the singular values `k` was read off: those of the
      equilibrated matrix (rows of a `Sensitivity` first divided by each output's RMS
      value), so that no change of units of a parameter or an output changes `k`.
    - `gamma1`, `gamma2`, `tau`: the accuracy measures of the paper, eqs. (5.1)-(5.3)
      (see `ji.linalg.css_metrics`); `gamma2` is NaN where `sigma_{k+1}` is at rounding
      level or `k = p`.
    - `rho`: the strong-RRQR quantity `max rho_ij` (`<= f` for `StrongRRQR(f)`).
    - `R`: the triangular factor of `S[:, perm]`.
    - `swaps`: exchanges or pivot steps made.
    - `result`: status (`RESULTS`); `ok`: whether it is `successful`.
    - `method`, `rank_rule`: what was used, recorded.

    `identifiable` and `non_identifiable` give names (for a single selection);
    `mask` is the boolean `(p,)` identifiable mask (also for a vmapped batch).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    perm: Int[Array, " p"]
    k: Int[Array, ""]
    singular_values: Float[Array, " p"]
    decision_singular_values: Float[Array, " p"]
    scale: Float[Array, " p"]
    gamma1: Float[Array, ""]
    gamma2: Float[Array, ""]
    tau: Float[Array, ""]
    rho: Float[Array, ""]
    R: Float[Array, "p p"]
    swaps: Int[Array, ""]
    result: RESULTS
    ok: Bool[Array, ""]
    method: AbstractColumnSelectionMethod = eqx.field(static=True)
    rank_rule: AbstractRankRule | None = eqx.field(static=True)
    shape: tuple[int, int] = eqx.field(static=True)

    @property
    def mask(self) -> Bool[Array, "*batch p"]:
        ranks = jnp.argsort(self.perm, axis=-1).astype(jnp.int32)
        return ranks < jnp.expand_dims(self.k, -1)

    def _single(self):
        if self.perm.ndim != 1:
            raise ValueError(
                "This is a batch of selections (from vmap or ji.sweep); index one, e.g. "
                "sel[0] via jax.tree.map(lambda x: x[0], sel), or use "
                "ji.identifiability_frequency(sel)."
            )

    @property
    def identifiable(self) -> tuple[str, ...]:
        """Names of the identifiable parameters, most independent first."""
        self._single()
        return tuple(self.names[i] for i in np.asarray(self.perm)[: int(self.k)])

    @property
    def non_identifiable(self) -> tuple[str, ...]:
        self._single()
        return tuple(self.names[i] for i in np.asarray(self.perm)[int(self.k) :])

    @property
    def rank_description(self) -> str:
        if self.rank_rule is None:
            return "k given by the caller"
        return self.rank_rule.describe(shape=self.shape)

    def to_dict(self) -> dict:
        """Plain Python values (for JSON and reports)."""
        self._single()

        def num(x):
            v = float(x)
            return None if np.isnan(v) else v

        return {
            "method": self.method.name,
            "rank_rule": self.rank_description,
            "k": int(self.k),
            "identifiable": list(self.identifiable),
            "non_identifiable": list(self.non_identifiable),
            "singular_values": [float(s) for s in np.asarray(self.singular_values)],
            "decision_singular_values": [
                float(s) for s in np.asarray(self.decision_singular_values)
            ],
            "scale": [float(s) for s in np.asarray(self.scale)],
            "gamma1": num(self.gamma1),
            "gamma2": num(self.gamma2),
            "tau": num(self.tau),
            "rho": num(self.rho),
            "swaps": int(self.swaps),
            "status": "successful" if bool(self.ok) else RESULTS[self.result],
        }

    def __repr__(self) -> str:
        if self.perm.ndim != 1:
            return f"Selection(batch of {self.perm.shape[0]}, p={self.perm.shape[-1]})"
        d = self.to_dict()
        s = np.asarray(self.singular_values)
        lines = [
            f"Selection by {type(self.method).__name__} ({d['method']}), S of shape {self.shape}",
            f"  rank rule : {d['rank_rule']}",
            f"  k         : {d['k']} of {len(self.names)} identifiable",
            f"  identifiable     : {', '.join(d['identifiable']) or '(none)'}",
            f"  non-identifiable : {', '.join(d['non_identifiable']) or '(none)'}",
            "  singular values  : " + ", ".join(f"{v:.3g}" for v in s),
        ]

        def fmt(v):
            return "n/a" if v is None else f"{v:.4g}"

        g2 = fmt(d["gamma2"])
        if d["gamma2"] is None:
            g2 += " (k = p)" if d["k"] == len(self.names) else " (sigma_(k+1) at rounding level)"
        lines.append(
            f"  gamma1 = {fmt(d['gamma1'])} (<= 1)   gamma2 = {g2} (>= 1)   "
            f"tau = cond(S1)/cond(S) = {fmt(d['tau'])}"
        )
        if d["method"] == "srrqr":
            lines.append(f"  max rho_ij = {fmt(d['rho'])} after {d['swaps']} swaps")
        if d["status"] != "successful":
            lines.append(f"  STATUS: {d['status']}")
        return "\n".join(lines)


def _selection_message(sel) -> str | None:
    if bool(sel.result == RESULTS.successful):
        return None
    return RESULTS._index_to_message[int(sel.result._value)]


@eqx.filter_jit
def _select(S, k, method, rank, names, row_scale, throw):
    n, p = S.shape
    finite = jnp.all(jnp.isfinite(S))
    safe = jnp.where(finite, S, 0.0)
    S_eq, c = equilibrate(safe, row_scale)
    sigma_eq = svdvals(reduce_to_square(S_eq))
    R0 = reduce_to_square(after(safe, sigma_eq))
    sigma = svdvals(R0)
    rule = rank if k is None else None
    if k is None:
        k = rank(sigma_eq, (n, p))
    sel = method(after(R0, sigma), k)
    gamma1, gamma2, tau = css_metrics(sigma, after(sel.R, sel.rho), sel.k, n)
    result = RESULTS.where(finite, sel.result, RESULTS.nonfinite_input)
    nan = jnp.asarray(jnp.nan, S.dtype)
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
        ok=result == RESULTS.successful,
        method=method,
        rank_rule=rule,
        shape=(n, p),
    )
    if throw is True:
        out = result.error_if(out, result != RESULTS.successful)
    return out


@clean_errors
def select_parameters(
    S: ArrayLike | Sensitivity,
    names: Sequence[str] | None = None,
    *,
    method: AbstractColumnSelectionMethod = StrongRRQR(),
    rank: AbstractRankRule = RelativeTolerance(),
    k: int | ArrayLike | None = None,
    throw: bool | None = None,
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
        row_scale = output_row_scale(S.outputs, S.n_outputs)
        S = S.matrix
    S = check_matrix(S)
    throw = resolve_throw(throw)
    if throw:
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
    if row_scale is not None:
        row_scale = jnp.where(jnp.isfinite(row_scale), row_scale, 1.0)
    S, power = _power_of_two_scaling(S)
    sel = run_kernel(
        _select,
        S,
        k,
        method,
        rank,
        names,
        row_scale,
        throw=throw,
        message=_selection_message,
    )
    if power:
        sel = eqx.tree_at(
            lambda s: (s.singular_values, s.R),
            sel,
            (
                jnp.asarray(np.ldexp(np.asarray(sel.singular_values), power)),
                jnp.asarray(np.ldexp(np.asarray(sel.R), power)),
            ),
        )
    if not given:
        warn_if_near_threshold(rank, sel.decision_singular_values, S.shape, "select_parameters")
    return sel


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
    return jnp.asarray(np.ldexp(np.asarray(S, dtype=float), -e)), e


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
