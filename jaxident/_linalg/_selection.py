"""The result of a column subset selection, shared by `ji.select_parameters` and
`ji.linalg.column_subset`."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .._runtime._results import RESULTS, succeeded
from ._css._base import AbstractColumnSelectionMethod
from ._dependence import components, Dependence, dependent_sets
from ._rank import AbstractRankRule


class Selection(eqx.Module):
    """A column subset selection of a (sensitivity) matrix: which columns (parameters) it
    can identify. The one result of `ji.select_parameters` and `ji.linalg.column_subset`.

    **Fields:**

    - `names`: parameter names, in the column order of `S`.
    - `perm`: the column permutation; `perm[:k]` are identifiable, most independent first.
    - `k`: the number of identifiable parameters.
    - `singular_values`: of `S`, descending.
    - `scale`: the column norms by which `S` was equilibrated for the rank decision, and
      `decision_singular_values` the singular values `k` was read off: those of the
      equilibrated matrix (rows of a `Sensitivity` first divided by each output's RMS
      value), so that no change of units of a parameter or an output changes `k`; NaN
      where the caller gave `k`.
    - `gamma1`, `gamma2`, `tau`: the accuracy measures of the paper, eqs. (5.1)-(5.3)
      (see `ji.linalg.css_metrics`); `gamma2` is NaN where `sigma_{k+1}` is at rounding
      level or `k = p`.
    - `rho`: the strong-RRQR quantity `max rho_ij` (`<= f` for `StrongRRQR(f)`).
    - `R`: the triangular factor of `S[:, perm]`.
    - `swaps`: exchanges or pivot steps made.
    - `result`: status (`RESULTS`); `ok`: whether it is `successful`.
    - `shape`: `(n, p)` of the matrix the selection was made on (for the rank rule's
      description).
    - `method`, `rank_rule`: what was used, recorded.
    - `dependence`: which parameters have no effect and which lie in a non-identifiable
      direction, decided by the rank rule (`ji.linalg.dependence`), or `None` where
      not asked for (`ji.linalg.column_subset` with `k` given).

    `identifiable` and `non_identifiable` give names (for a single selection): the
    selected columns and the others, as the CSS paper reads them. `groups` says what
    the selection cannot say by itself: parameters that are non-identifiable together
    (a minimal dependent set), of which the selection keeps some and fixes the rest,
    e.g. `a` and `b` where only `a*b` is identifiable: one of `{a, b}`. `mask` is the
    boolean `(p,)` identifiable mask (also for a vmapped batch).
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
    method: AbstractColumnSelectionMethod = eqx.field(static=True)
    rank_rule: AbstractRankRule | None = eqx.field(static=True)
    shape: tuple[int, int] = eqx.field(static=True)
    dependence: Dependence | None = None

    @property
    def ok(self) -> Bool[ArrayLike, "*batch"]:
        """Whether the selection succeeded: `result == RESULTS.successful`."""
        return succeeded(self.result)

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
    def selected(self) -> Int[Array, " k"]:
        """Indices of the selected columns, most independent first."""
        self._single()
        return self.perm[: int(self.k)]

    @property
    def rejected(self) -> Int[Array, " p_minus_k"]:
        self._single()
        return self.perm[int(self.k) :]

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
    def no_effect(self) -> tuple[str, ...]:
        """Parameters whose columns are below the rank rule's threshold in comparable
        units (single selection; empty without `dependence`)."""
        self._single()
        if self.dependence is None:
            return ()
        return tuple(n for n, z in zip(self.names, np.asarray(self.dependence.no_effect)) if z)

    @property
    def groups(self) -> tuple["SelectedGroup", ...]:
        """The parameters that are non-identifiable together, one `SelectedGroup` per
        connected set of minimal dependent sets: how many of them the data determine
        (`kept`, the selected ones) and which (single selection; empty without
        `dependence`)."""
        self._single()
        if self.dependence is None:
            return ()
        rejected = [int(i) for i in np.asarray(self.perm)[int(self.k) :]]
        circuits, _ = dependent_sets(self.dependence, pivots=rejected)
        sets = [c.involved for c in circuits if c.members]
        selected = set(int(i) for i in np.asarray(self.perm)[: int(self.k)])
        out = []
        for g in components(sets, len(self.names)):
            kept = tuple(self.names[i] for i in g if i in selected)
            out.append(SelectedGroup(tuple(self.names[i] for i in g), kept))
        return tuple(out)

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
            "decision_singular_values": [num(s) for s in np.asarray(self.decision_singular_values)],
            "scale": [float(s) for s in np.asarray(self.scale)],
            "gamma1": num(self.gamma1),
            "gamma2": num(self.gamma2),
            "tau": num(self.tau),
            "rho": num(self.rho),
            "swaps": int(self.swaps),
            "status": "successful" if bool(self.ok) else RESULTS[self.result],
            "no_effect": list(self.no_effect),
            "groups": [
                {"parameters": list(g.names), "selected": list(g.kept)} for g in self.groups
            ],
        }

    def __repr__(self) -> str:
        if self.perm.ndim != 1:
            return f"Selection(batch of {self.perm.shape[0]}, p={self.perm.shape[-1]})"
        d = self.to_dict()
        s = np.asarray(self.singular_values)
        # a k chosen by hand is a subset size, not a rank: it decides no identifiability
        hand = self.rank_rule is None
        kept, left = ("selected", "not selected") if hand else ("identifiable", "non-identifiable")
        lines = [
            f"Selection by {type(self.method).__name__} ({d['method']}), S of shape {self.shape}",
            f"  rank rule : {d['rank_rule']}",
            f"  k         : {d['k']} of {len(self.names)} "
            + ("selected (k chosen by hand: not a numerical rank)" if hand else "identifiable"),
            f"  {kept:<16} : {', '.join(d['identifiable']) or '(none)'}",
            f"  {left:<16} : {', '.join(d['non_identifiable']) or '(none)'}",
            *[f"    {g}" for g in self.groups],
            *(
                [f"    no effect on the outputs: {', '.join(self.no_effect)}"]
                if self.no_effect
                else []
            ),
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


class SelectedGroup(eqx.Module):
    """Parameters that are non-identifiable together (`names`, a connected set of
    minimal dependent sets) and the ones a selection kept (`kept`): the data determine
    `len(kept)` combinations of them, and which members are kept is the selection's
    choice, not a property of the data."""

    names: tuple[str, ...]
    kept: tuple[str, ...]

    def __str__(self) -> str:
        k = len(self.kept)
        which = f"selected: {', '.join(self.kept)}" if self.kept else "none selected"
        return (
            f"{_count(k)} of {{{', '.join(self.names)}}} together ({which}; "
            "the choice among them is arbitrary)"
        )


def _count(k: int) -> str:
    return {1: "one", 2: "two", 3: "three"}.get(k, str(k))
