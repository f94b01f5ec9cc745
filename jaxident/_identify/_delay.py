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

from .._linalg._rank import AbstractRankRule, RelativeTolerance, warn_if_near_threshold
from .._model._base import Integrator, ODEModel
from .._model._checks import check_model, check_theta
from .._model._transforms_state import free_initial_state
from .._problem._sensitivity import sensitivity
from .._runtime._results import status_array, status_codes
from .._solve._forward import accuracy
from ._delay_jacobian import _check_delay
from ._delay_result import DelayEstimability
from ._estimability import (
    _candidate_indices,
    _defaults,
    _resolve_pivots,
    _svd_of,
    _transformed_basis,
    _uncertainty,
    best_pivots,
)
from ._sweep import sweep


# --------------------------------------------------------------------------------------
# Statistics over states on an attractor and over delays (the paper's histograms)


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
    devices: Sequence[jax.Device] | None = None,
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
    - `batch_size`, `progress`, `devices`: as for `ji.sweep` (one compiled vmap over
      `(tau, state)` pairs, chunked).
    - `integrator`: the solver of the delay Jacobians (default the model's).

    **Returns:** a `DelayEstimability`.
    """
    check_model(model)
    integrator = model.integrator if integrator is None else integrator
    if rank is None:  # no more digits than the delay Jacobians have: 10 rtol
        rank = RelativeTolerance(accuracy=accuracy(model, integrator, jnp.float64))
    rank, zero_tol = _defaults(jnp.float64, rank, zero_tol)
    aug = free_initial_state(model)
    states, taus, keep = _checked(aug, states, taus, K, fraction, exclude)
    names = tuple(aug.parameters.names[i] for i in keep)
    theta = check_theta(model, theta)
    one = _DelaySample(aug, theta, K, tuple(int(i) for i in keep), integrator)
    n_tau, n_states, n_w = taus.shape[0], states.shape[0], len(names)
    samples = (np.repeat(taus, n_states), np.tile(states, (n_tau, 1)))
    res = sweep(one, samples, batch_size=batch_size, progress=progress,
                desc="delay Jacobians", devices=devices)  # fmt: skip
    grid = (n_tau, n_states)
    s = np.asarray(res.values.s).reshape(*grid, n_w)
    V = np.asarray(res.values.V).reshape(*grid, n_w, n_w)
    c = np.asarray(res.values.c).reshape(*grid, n_w)
    ok = np.asarray(res.ok).reshape(grid)
    nullities, nullity, rule = _nullity(rank, s, ok, K, nullity)
    VB = V[..., n_w - nullity :]
    piv = _resolve_pivots(names, pivots, nullity)
    if piv is None:
        cand = (
            range(n_w) if pivot_candidates is None else _candidate_indices(names, pivot_candidates)
        )
        good = ok & (nullities == nullity)
        piv = best_pivots(VB[good] if good.any() else VB[ok], nullity, cand)
    VB, Vt, Vt_eq = _pivoted_bases(VB, c, ok, piv, nullity)
    if nullity and ok.size:
        warn_if_near_threshold(rank, np.median(s[ok], axis=0), (K, n_w), "delay_estimability")
    v, rho = _uncertainties(s, V, c, ok)
    return DelayEstimability(
        names=names,
        taus=taus,
        states=states,
        K=int(K),
        singular_ratios=s / s[..., :1],
        nullities=nullities,
        nullity=int(nullity),
        rank_rule=rule,
        pivots=tuple(names[i] for i in piv),
        basis=Vt,
        orthonormal_basis=VB,
        scaled_basis=Vt_eq,
        uncertainty=v,
        correlation=rho,
        result=status_array(status_codes(res.result).reshape(grid)),
        zero_tol=float(zero_tol),
        fraction=float(fraction),
    )


def _checked(aug, states, taus, K, fraction, exclude):
    """The states `(n, d)` and delays as arrays, checked, and the indices of the
    augmented parameters kept (all but `exclude`)."""
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
    names = aug.parameters.names
    keep = np.asarray([i for i, n in enumerate(names) if n not in exclude], dtype=int)
    return states, taus, keep


def _nullity(rank, s, ok, K, nullity):
    """Each sample's nullity by the rank rule (-1 where the solve failed), the nullity
    analysed (the most common one, unless given) and the rule's description."""
    n_w = s.shape[-1]
    flat = jnp.asarray(np.where(ok[..., None], s, 1.0).reshape(-1, n_w))
    ranks = np.asarray(jax.vmap(lambda sv: rank(sv, (K, n_w)))(flat)).reshape(ok.shape)
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
    return nullities, nullity, rule


def _pivoted_bases(VB, c, ok, piv, nullity):
    """The null bases `V_B` signed by their first pivot's row, and the transformed bases
    `V~_B` (eq. 22) in the units of `w` and equilibrated (NaN where a solve failed)."""
    if not nullity:
        return VB, VB, VB
    n_w = VB.shape[-2]
    safe = np.where(ok[..., None, None], VB, 0.0)
    sign = np.sign(safe[..., piv[0], :])[..., None, :]
    VB = np.where(sign == 0, 1.0, sign) * VB
    Vt = np.asarray(
        jax.vmap(lambda vb: _transformed_basis(vb, jnp.asarray(piv)))(
            jnp.asarray(safe.reshape(-1, n_w, nullity))
        )
    ).reshape(safe.shape)
    Vt_eq = np.where(ok[..., None, None], Vt, np.nan)
    Vt = Vt * c[..., None, piv] / c[..., :, None]  # eq. 22 in the units of w
    return VB, np.where(ok[..., None, None], Vt, np.nan), Vt_eq


def _uncertainties(s, V, c, ok):
    """Each sample's uncertainties `v` and correlations `rho` (NaN where a solve
    failed)."""
    n_w = s.shape[-1]
    v, rho = jax.vmap(_uncertainty)(
        jnp.asarray(np.where(ok[..., None], s, 1.0).reshape(-1, n_w)),
        jnp.asarray(np.where(ok[..., None, None], V, 0.0).reshape(-1, n_w, n_w)),
        jnp.asarray(np.where(ok[..., None], c, 1.0).reshape(-1, n_w)),
    )
    v = np.where(ok[..., None], np.asarray(v).reshape(ok.shape + (n_w,)), np.nan)
    rho = np.where(ok[..., None, None], np.asarray(rho).reshape(ok.shape + (n_w, n_w)), np.nan)
    return v, rho
