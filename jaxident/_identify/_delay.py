"""Estimability of states and parameters from delay coordinates, over many states on an
attractor and many delays: the statistics behind the histograms of Schumann-Bischoff,
Luther & Parlitz (2016, Phys. Rev. E 94, 032221).
"""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .._checks import check_model, check_theta
from .._context import clean_errors
from .._delay_jacobian import _check_delay
from .._forward import accuracy
from .._linalg._rank import AbstractRankRule, RelativeTolerance, warn_if_near_threshold
from .._model import Integrator, ODEModel
from .._sensitivity import sensitivity
from .._sweep import sweep
from .._transforms import free_initial_state
from ._estimability import (
    _candidate_indices,
    _combos,
    _defaults,
    _fmt_sets,
    _pivot_scores,
    _resolve_pivots,
    _svd_of,
    _transformed_basis,
    _uncertainty,
)


# --------------------------------------------------------------------------------------
# Statistics over states on an attractor and over delays (the paper's histograms)


_KINDS = ("singular", "basis", "uncertainty", "correlation")


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
    - `ok`: `False` where the solve failed (excluded from every summary).
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
    ok: np.ndarray
    zero_tol: float = eqx.field(static=True)
    fraction: float = eqx.field(static=True)

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
        self, kind: str, name: str | tuple[str, str] | int, *, bins: int = 50, column: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Counts of one quantity per delay, as in the paper's colour-coded figures.

        **Arguments:**

        - `kind`: `"singular"` (`log10 sigma_i/sigma_1`, `name` an index `i` from 1),
          `"basis"` (component of `v~^(column)` for quantity `name`), `"uncertainty"`
          (`log10 v_k`), `"correlation"` (`rho`, `name` a pair).

        **Returns:** `(counts (n_tau, bins), taus, bin_edges)`.
        """
        vals = self._values(kind, name, column)
        finite = vals[np.isfinite(vals)]
        if finite.size == 0:
            raise ValueError(f"No finite values of {kind} {name!r} to histogram.")
        lo, hi = (-1.0, 1.0) if kind == "correlation" else (finite.min(), finite.max())
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1)
        counts = np.stack([np.histogram(v[np.isfinite(v)], bins=edges)[0] for v in vals], axis=0)
        return counts, np.asarray(self.taus), edges

    def _values(self, kind, name, column) -> np.ndarray:
        tiny = np.finfo(float).tiny
        with np.errstate(divide="ignore", invalid="ignore"):
            if kind == "singular":
                i = int(name) - 1
                out = np.log10(np.maximum(self.singular_ratios[..., i], tiny))
            elif kind == "basis":
                if not 0 <= column < self.nullity:
                    raise ValueError(f"column must lie in [0, {self.nullity}), got {column}.")
                out = self.basis[..., self._index(name), column].copy()
            elif kind == "uncertainty":
                out = np.log10(self.uncertainty[..., self._index(name)])
            elif kind == "correlation":
                a, b = name
                out = self.correlation[..., self._index(a), self._index(b)].copy()
            else:
                raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}.")
        out = np.where(self.ok, out, np.nan)
        if kind == "basis":
            out = np.where(self.nullities == self.nullity, out, np.nan)
        return out

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
            f"  locally estimable: {', '.join(self.estimable) or '(none)'}",
        ]
        if self.nullity:
            lines.append(
                f"  fix these {self.nullity} to make the rest estimable: {', '.join(self.pivots)}"
            )
            for k, st in enumerate(self.dependent_sets):
                lines.append(f"  dependent set {k + 1} (v~{k + 1}): {', '.join(st)}")
        return "\n".join(lines)


class _DelaySample(eqx.Module):
    """The SVD of the delay Jacobian at one (delay, state) sample, as `delay_estimability`
    sweeps it: a module rather than a closure, so that a second call with the same model
    structure and shapes reuses the compiled sweep."""

    model: ODEModel
    theta: Array
    K: int
    keep: tuple[int, ...]
    integrator: Integrator

    def __call__(self, sample):
        tau, x = sample
        w = jnp.concatenate([x, self.theta])
        times = self.model.t0 + tau * jnp.arange(self.K, dtype=float)
        DG = sensitivity(self.model, w, times, integrator=self.integrator, throw=False).matrix
        return _svd_of(DG[:, list(self.keep)])


@clean_errors
def delay_estimability(
    model: ODEModel,
    states: ArrayLike | Sequence,
    theta: ArrayLike | dict | Sequence | None = None,
    *,
    taus: ArrayLike | Sequence | float,
    K: int,
    exclude: Sequence[str] = (),
    nullity: int | None = None,
    rank: AbstractRankRule | None = None,
    pivots: Sequence[str] | None = None,
    pivot_candidates: Sequence[str] | None = None,
    zero_tol: float | None = None,
    fraction: float = 0.95,
    integrator: Integrator | None = None,
    batch_size: int = 256,
    progress: bool = True,
) -> DelayEstimability:
    """Dependency, uncertainty and correlation analysis of the delay-coordinate Jacobian
    at every state in `states` and every delay in `taus` (Schumann-Bischoff et al. 2016).

    **Arguments:**

    - `model`: an `ODEModel` with a 1-D state (`ji.models.load("colpitts")`, ...).
    - `states`: `(n_states, D)` states, e.g. from `ji.attractor_states`.
    - `theta`: the parameters (default nominal).
    - `taus`, `K`: the delays and the number of delay coordinates.
    - `exclude`: quantities held fixed (their columns removed), e.g. `("p4",)` after the
      dependency analysis has told you to fix `p4`.
    - `nullity`: `D_N` for the bases; default the most frequent nullity under `rank`.
    - `pivots`: the `D_N` quantities of `V_B1`; default the choice with the best median
      `sigma_min(V_B1)` over the samples among `pivot_candidates` (default all).
    - `zero_tol`, `fraction`: see `DelayEstimability`.
    - `batch_size`, `progress`: as for `ji.sweep` (one compiled vmap over
      `(tau, state)` pairs, chunked).

    **Returns:** a `DelayEstimability`.
    """
    check_model(model)
    integrator = model.integrator if integrator is None else integrator
    if rank is None:  # no more digits than the delay Jacobians have: 10 rtol
        rank = RelativeTolerance(accuracy=accuracy(model, integrator, jnp.float64))
    rank, zero_tol = _defaults(jnp.float64, rank, zero_tol)
    aug = free_initial_state(model)
    all_names = aug.parameters.names
    d = aug.n_states
    states = np.asarray(states, dtype=float)
    if states.ndim != 2 or states.shape[1] != d:
        raise ValueError(f"states must have shape (n_states, {d}), got {states.shape}.")
    if not np.all(np.isfinite(states)):
        raise ValueError("states contains NaN or inf.")
    taus = np.atleast_1d(np.asarray(taus, dtype=float))
    if taus.ndim != 1:
        raise ValueError(f"taus must be a scalar or 1-D, got shape {taus.shape}.")
    _check_delay(taus, K)
    if not 0.5 < fraction <= 1.0:
        raise ValueError(f"fraction must lie in (0.5, 1], got {fraction}.")
    exclude = (exclude,) if isinstance(exclude, str) else tuple(exclude)
    for n in exclude:
        aug.parameters.index(n)
    keep = np.asarray([i for i, n in enumerate(all_names) if n not in exclude], dtype=int)
    names = tuple(all_names[i] for i in keep)
    theta = check_theta(model, theta)

    one = _DelaySample(aug, theta, K, tuple(int(i) for i in keep), integrator)
    n_tau, n_states = taus.shape[0], states.shape[0]
    tt = np.repeat(taus, n_states)
    xx = np.tile(states, (n_tau, 1))
    res = sweep(one, (tt, xx), batch_size=batch_size, progress=progress, desc="delay Jacobians")
    s = np.asarray(res.values.s).reshape(n_tau, n_states, -1)
    V = np.asarray(res.values.V).reshape(n_tau, n_states, len(names), len(names))
    ok = np.asarray(res.ok).reshape(n_tau, n_states)
    n_w = len(names)
    ratios = s / s[..., :1]
    ranks = np.asarray(
        jax.vmap(lambda sv: rank(sv, (K, n_w)))(
            jnp.asarray(np.where(ok[..., None], s, 1.0).reshape(-1, n_w))
        )
    ).reshape(n_tau, n_states)
    nullities = np.where(ok, n_w - ranks, -1)
    rule = rank.describe()
    if nullity is None:
        if not ok.any():
            raise ValueError("Every delay-Jacobian solve failed; check the states and parameters.")
        vals, counts = np.unique(nullities[ok], return_counts=True)
        nullity = int(vals[np.argmax(counts)])
    else:
        rule = f"nullity {nullity} given; per-sample nullities by {rule}"
    if not 0 <= nullity <= n_w:
        raise ValueError(f"nullity must lie in [0, {n_w}], got {nullity}.")
    good = ok & (nullities == nullity)
    VB = V[..., n_w - nullity :]
    piv = _resolve_pivots(names, pivots, nullity)
    if piv is None:
        if nullity == 0:
            piv = np.zeros(0, dtype=int)
        else:
            cand = (
                range(n_w)
                if pivot_candidates is None
                else _candidate_indices(names, pivot_candidates)
            )
            combos = jnp.asarray(_combos(n_w, nullity, list(cand)))
            flat = VB[good] if good.any() else VB[ok]
            scores = np.asarray(jax.vmap(lambda vb: _pivot_scores(vb, combos))(jnp.asarray(flat)))
            piv = np.asarray(combos)[int(np.argmax(np.median(scores, axis=0)))]
    if nullity:
        safe = np.where(ok[..., None, None], VB, 0.0)
        sign = np.sign(safe[..., piv[0], :])[..., None, :]
        VB = np.where(sign == 0, 1.0, sign) * VB
        Vt = np.asarray(
            jax.vmap(lambda vb: _transformed_basis(vb, jnp.asarray(piv)))(
                jnp.asarray(safe.reshape(-1, n_w, nullity))
            )
        ).reshape(n_tau, n_states, n_w, nullity)
        Vt_eq = np.where(ok[..., None, None], Vt, np.nan)
        cs = np.asarray(res.values.c).reshape(n_tau, n_states, n_w)
        Vt = Vt * cs[..., None, piv] / cs[..., :, None]  # eq. 22 in the units of w
        Vt = np.where(ok[..., None, None], Vt, np.nan)
    else:
        Vt = Vt_eq = VB
    c = np.asarray(res.values.c).reshape(n_tau * n_states, n_w)
    if nullity and n_tau * n_states:
        warn_if_near_threshold(rank, np.median(s[ok], axis=0), (K, n_w), "delay_estimability")
    v, rho = jax.vmap(_uncertainty)(
        jnp.asarray(np.where(ok[..., None], s, 1.0).reshape(-1, n_w)),
        jnp.asarray(np.where(ok[..., None, None], V, 0.0).reshape(-1, n_w, n_w)),
        jnp.asarray(np.where(ok.reshape(-1)[:, None], c, 1.0)),
    )
    v = np.where(ok[..., None], np.asarray(v).reshape(n_tau, n_states, n_w), np.nan)
    rho = np.where(ok[..., None, None], np.asarray(rho).reshape(n_tau, n_states, n_w, n_w), np.nan)
    return DelayEstimability(
        names=names,
        taus=taus,
        states=states,
        K=int(K),
        singular_ratios=ratios,
        nullities=nullities,
        nullity=int(nullity),
        rank_rule=rule,
        pivots=tuple(names[i] for i in piv),
        basis=Vt,
        orthonormal_basis=VB,
        scaled_basis=Vt_eq,
        uncertainty=v,
        correlation=rho,
        ok=ok,
        zero_tol=float(zero_tol),
        fraction=float(fraction),
    )
