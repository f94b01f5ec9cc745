"""The result of `ji.delay_estimability`: estimability statistics over states on an
attractor and over delays (Schumann-Bischoff, Luther & Parlitz 2016, the histograms)."""

import equinox as eqx
import numpy as np

from .._runtime._choice import Choice
from .._runtime._results import RESULTS, succeeded
from ._estimability import _fmt_sets, dependency_lines


class DelayQuantity(Choice):
    """What `DelayEstimability.histogram` counts per delay (the paper's colour-coded
    figures), each with its values, the items it has, and its label: `singular`
    (`log10 sigma_i/sigma_1`, items the indices `i` from 1), `basis` (a component of
    `v~^(column)`, items the unknowns), `uncertainty` (`log10 v_k`), `correlation`
    (`rho`, items pairs of unknowns)."""

    singular = "singular"
    basis = "basis"
    uncertainty = "uncertainty"
    correlation = "correlation"

    def values(self, result: "DelayEstimability", item, column: int) -> np.ndarray:
        """The quantity of `item` at every sample, `(n_tau, n_states)`, NaN where a
        solve failed (and, for a basis, where the sample's nullity is not the one
        analysed)."""
        index = result._index
        with np.errstate(divide="ignore", invalid="ignore"):
            if self is DelayQuantity.singular:
                tiny = np.finfo(float).tiny
                out = np.log10(np.maximum(result.singular_ratios[..., int(item) - 1], tiny))
            elif self is DelayQuantity.basis:
                if not 0 <= column < result.nullity:
                    raise ValueError(f"column must lie in [0, {result.nullity}), got {column}.")
                out = result.basis[..., index(item), column].copy()
                out = np.where(result.nullities == result.nullity, out, np.nan)
            elif self is DelayQuantity.uncertainty:
                out = np.log10(result.uncertainty[..., index(item)])
            else:
                a, b = item
                out = result.correlation[..., index(a), index(b)].copy()
        return np.where(result.ok, out, np.nan)

    def items(self, names: tuple[str, ...], pairs=None) -> list:
        """Every item of the quantity (the plot's panels): `pairs` for a correlation,
        default every pair."""
        if self is DelayQuantity.singular:
            return list(range(1, len(names) + 1))
        if self is DelayQuantity.correlation:
            every = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
            return every if pairs is None else list(pairs)
        return list(names)

    def label(self, item, column: int) -> str:
        """The item's label (LaTeX), as in the paper's figures."""
        if self is DelayQuantity.singular:
            return rf"$\log_{{10}}\,\sigma_{{{item}}}/\sigma_1$"
        if self is DelayQuantity.basis:
            return rf"$\tilde v_B^{{({column + 1})}}({item})$"
        if self is DelayQuantity.uncertainty:
            return rf"$\log_{{10}}\, v({item})$"
        a, b = item
        return rf"$\rho({a}, {b})$"


class DelayEstimability(eqx.Module):
    """Estimability statistics over many states and delays, from `ji.delay_estimability`.
    Arrays have leading axes `(n_tau, n_states)`.

    **Fields:**

    - `names`: the unknowns `w = (x, p)` analysed; `taus`, `states`, `K`.
    - `singular_ratios`: `sigma_i / sigma_1`, `(n_tau, n_states, N_w)`.
    - `nullities`: the null-space dimension of each sample under `rank_rule`.
    - `nullity`: the `D_N` used for the bases (the most frequent one, or the one given).
    - `pivots`: the `D_N` quantities of `V_B1` (eq. 22), shared by all samples so that
      their bases can be compared (best median conditioning, or the ones given).
    - `basis`: `V~_B` per sample, `(n_tau, n_states, N_w, D_N)`, the identity on the
      pivot rows, in the units of the unknowns; `scaled_basis`: the same in equilibrated
      units, where zero components are decided; `orthonormal_basis`: `V_B` of the
      column-equilibrated Jacobian (sign-normalised so the first pivot's
      component is positive).
    - `uncertainty`: `v_k` (eq. 33); `correlation`: `rho` (eq. 34).
    - `result`: per-sample status (`ji.RESULTS`); `ok` is `False` where a solve failed
      (excluded from every summary).
    - `zero_tol`, `fraction`: a component is "zero" below `zero_tol` and a statement
      holds when it holds for at least `fraction` of the samples.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    taus: np.ndarray
    states: np.ndarray
    K: int = eqx.field(static=True)
    singular_ratios: np.ndarray
    nullities: np.ndarray
    nullity: int = eqx.field(static=True)
    rank_rule: str = eqx.field(static=True)
    pivots: tuple[str, ...] = eqx.field(static=True)
    basis: np.ndarray
    orthonormal_basis: np.ndarray
    scaled_basis: np.ndarray
    uncertainty: np.ndarray
    correlation: np.ndarray
    result: RESULTS
    zero_tol: float = eqx.field(static=True)
    fraction: float = eqx.field(static=True)

    @property
    def ok(self) -> np.ndarray:
        """`(n_taus, n_states)`: which samples succeeded (`result == successful`)."""
        return succeeded(self.result)

    @property
    def n_samples(self) -> int:
        return int(self.ok.sum())

    def _good(self) -> np.ndarray:
        return self.ok & (self.nullities == self.nullity)

    @property
    def nullity_fraction(self) -> float:
        """Fraction of the (successful) samples whose own nullity is `nullity`."""
        return float(self._good().sum() / max(self.ok.sum(), 1))

    def _zero(self) -> np.ndarray:
        """`(samples, N_w, D_N)`: which components of `V~_B` vanish."""
        vt = np.abs(self.scaled_basis[self._good()])
        scale = np.maximum(vt.max(axis=1, keepdims=True), 1.0)
        return vt <= self.zero_tol * scale

    @property
    def estimable(self) -> tuple[str, ...]:
        """Quantities whose row of the null basis vanishes in at least `fraction` of the
        samples (all of them when the null space is trivial)."""
        if self.nullity == 0:
            return self.names
        z = np.all(np.abs(self.orthonormal_basis[self._good()]) <= self.zero_tol, axis=-1)
        return tuple(n for n, f in zip(self.names, z.mean(axis=0)) if f >= self.fraction)

    @property
    def dependent_sets(self) -> list[tuple[str, ...]]:
        """Per basis vector `v~^(i)`: the quantities that are nonzero in at least
        `fraction` of the samples (they move together, eq. 25)."""
        if self.nullity == 0:
            return []
        nz = (~self._zero()).mean(axis=0) >= self.fraction
        return _fmt_sets(self.names, nz)

    @property
    def zero_pattern(self) -> np.ndarray:
        """`(N_w, D_N)` strings: `"*"` for components nonzero in at least `fraction` of the
        samples, `"0"` for zero in at least `fraction`, `"?"` otherwise (the paper's
        eq. 48)."""
        z = self._zero().mean(axis=0)
        out = np.full(z.shape, "?", dtype="<U1")
        out[z >= self.fraction] = "0"
        out[1 - z >= self.fraction] = "*"
        return out

    def signs(self) -> np.ndarray:
        """`(N_w, D_N)`: the sign of each component of `V~_B` (pivot = +1) where it is
        nonzero and has that sign in at least `fraction` of the samples, else 0."""
        vt = self.basis[self._good()]
        nz = ~self._zero()
        pos = ((vt > 0) & nz).mean(axis=0)
        neg = ((vt < 0) & nz).mean(axis=0)
        return np.where(pos >= self.fraction, 1, np.where(neg >= self.fraction, -1, 0))

    def dependence(self, a: str, b: str) -> list[int]:
        """Per basis vector: `+1` when `Delta a > 0` goes with `Delta b > 0` inside the
        null space (eq. 26) for at least `fraction` of the samples, `-1` when with
        `Delta b < 0`, `0` when either does not move or the sign is not consistent."""
        s = self.signs()
        i, j = self._index(a), self._index(b)
        return [int(s[i, c] * s[j, c]) for c in range(self.nullity)]

    def _index(self, name: str) -> int:
        if name not in self.names:
            raise ValueError(
                f"Unknown quantity {name!r}; the analysed ones are {list(self.names)}."
            )
        return self.names.index(name)

    def median_correlation(self, a: str, b: str) -> float:
        return float(np.median(self.correlation[self.ok][:, self._index(a), self._index(b)]))

    def median_uncertainty(self) -> dict[str, float]:
        med = np.median(self.uncertainty[self.ok], axis=0)
        return dict(zip(self.names, med.tolist()))

    def histogram(
        self,
        kind: DelayQuantity | str,
        name: str | tuple[str, str] | int,
        *,
        bins: int = 50,
        column: int = 0,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Counts of one quantity per delay, as in the paper's colour-coded figures.

        **Arguments:**

        - `kind`: a `DelayQuantity` or its name: `"singular"` (`log10 sigma_i/sigma_1`,
          `name` an index `i` from 1), `"basis"` (component of `v~^(column)` for
          quantity `name`), `"uncertainty"` (`log10 v_k`), `"correlation"` (`rho`,
          `name` a pair).

        **Returns:** `(counts (n_tau, bins), taus, bin_edges)`.
        """
        kind = DelayQuantity.of(kind, "kind")
        vals = kind.values(self, name, column)
        finite = vals[np.isfinite(vals)]
        if finite.size == 0:
            raise ValueError(f"No finite values of {kind} {name!r} to histogram.")
        correlation = kind is DelayQuantity.correlation
        lo, hi = (-1.0, 1.0) if correlation else (finite.min(), finite.max())
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1)
        counts = np.stack([np.histogram(v[np.isfinite(v)], bins=edges)[0] for v in vals], axis=0)
        return counts, np.asarray(self.taus), edges

    def histogram_panels(
        self, kind: DelayQuantity | str, column: int = 0, pairs=None
    ) -> list[tuple[object, str]]:
        """`(item, label)` of every panel of `kind`'s histograms (`ji.plot.delay_histograms`)."""
        kind = DelayQuantity.of(kind, "kind")
        return [(item, kind.label(item, column)) for item in kind.items(self.names, pairs)]

    def to_dict(self) -> dict:
        return {
            "names": list(self.names),
            "taus": np.asarray(self.taus).tolist(),
            "K": self.K,
            "n_samples": self.n_samples,
            "nullity": self.nullity,
            "nullity_fraction": self.nullity_fraction,
            "rank_rule": self.rank_rule,
            "pivots": list(self.pivots),
            "estimable": list(self.estimable),
            "dependent_sets": [list(s) for s in self.dependent_sets],
            "zero_pattern": self.zero_pattern.tolist(),
            "median_uncertainty": self.median_uncertainty(),
        }

    def __repr__(self) -> str:
        n_tau, n_states = self.ok.shape
        lines = [
            f"DelayEstimability: {n_states} states x {n_tau} delays (K = {self.K}), "
            f"{int((~self.ok).sum())} failed",
            f"  nullity {self.nullity} in {100 * self.nullity_fraction:.1f}% of samples "
            f"({self.rank_rule})",
        ]
        return "\n".join(lines + dependency_lines(self, basis_label=True))
