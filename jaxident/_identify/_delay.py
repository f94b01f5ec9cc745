"""Estimability of states and parameters from delay coordinates (Schumann-Bischoff,
Luther & Parlitz 2016, Phys. Rev. E 94, 032221).

The delay-coordinate map `G(x(t), p) = [y(t), y(t + tau), ..., y(t + (K-1) tau)]`
is differentiated by forward mode through diffrax with respect to the current state and
the parameters, `w = (x, p)`. Its null space says which quantities the output cannot
determine (section II A), and its pseudo-inverse how uncertain and correlated the others
are (section II B). Statistics over many states on an attractor and many delays give the
paper's histograms.
"""

import itertools
import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from .._checks import check_model, check_theta
from .._context import clean_errors
from .._forward import accuracy
from .._linalg._misc import matmul
from .._linalg._rank import AbstractRankRule, RelativeTolerance, warn_if_near_threshold
from .._linalg._scaling import equilibrate
from .._model import Delegating, Integrator, ODEModel
from .._parameters import Parameters
from .._sensitivity import Sensitivity, sensitivity
from .._simulate import simulate
from .._sweep import sweep


# --------------------------------------------------------------------------------------
# The model with its initial state as parameters


class InitialStateModel(Delegating, ODEModel):
    """An `ODEModel` whose initial state is estimated along with its parameters: the
    parameter vector is `w = (x(t0), p)`, states first. Made by `ji.free_initial_state`;
    every analysis (`ji.sensitivity`, `ji.estimate`, `ji.profile`) applies unchanged."""

    base: ODEModel
    parameters: Parameters
    t0: float | Array
    n_states: int = eqx.field(static=True)

    @property
    def state_names(self):
        return self.base.state_names

    @property
    def description(self):
        return f"{type(self.base).__name__} with its initial state as parameters"

    def _theta(self, theta):
        return self.base.parameters.view(theta.values[self.n_states :])

    def vector_field(self, t, x, theta):
        return self.base.vector_field(t, x, self._theta(theta))

    def initial_state(self, theta):
        return self.base.restrict(theta.values[: self.n_states])

    def lift(self, x):
        return self.base.lift(x)

    def restrict(self, y):
        return self.base.restrict(y)

    def output(self, t, x, theta):
        return self.base.output(t, x, self._theta(theta))


def _state_names(model: ODEModel, d: int) -> tuple[str, ...]:
    names = model.state_names
    if names is None or len(names) != d:
        names = tuple(f"x{i + 1}" for i in range(d))
    clash = set(names) & set(model.parameters.names)
    if clash:
        raise ValueError(
            f"State names {sorted(clash)} are also parameter names; rename them "
            "(state_names class attribute) so that w = (x, p) has unique labels."
        )
    return tuple(names)


def free_initial_state(
    model: ODEModel,
    x0: ArrayLike | None = None,
    *,
    lower: ArrayLike | None = None,
    upper: ArrayLike | None = None,
    t0: float | None = None,
) -> InitialStateModel:
    """The model with its initial state turned into parameters, `w = (x(t0), p)`.

    **Arguments:**

    - `model`: an `ODEModel` whose state is a 1-D array.
    - `x0`: the nominal initial state (default: the model's, at its nominal parameters).
      For a reduced-order model this is the full-space state (`model.lift`), mapped to
      the reduced one by `model.restrict`, so perturbations live in the full space.
    - `lower`, `upper`: bounds of the states (default unbounded).
    - `t0`: the initial time (default the model's).

    **Returns:** an `InitialStateModel` with parameter names `state_names + parameter
    names`, ready for `ji.estimate` (joint state and parameter estimation from an output
    time series) and `ji.sensitivity` (the delay-coordinate Jacobian).

    **Example:**

    ```python
    aug = ji.free_initial_state(ji.models.load("colpitts"))
    aug.parameters.names   # ('x1', 'x2', 'x3', 'p1', 'p2', 'p3', 'p4')
    ```
    """
    check_model(model)
    if not isinstance(model, ODEModel):
        raise TypeError(f"free_initial_state needs an ODEModel, got {type(model).__name__}.")
    p = model.parameters
    if x0 is None:
        x0 = model.lift(model.initial_state(p.view(p.nominal)))
    x0 = jnp.asarray(x0, dtype=float)
    if x0.ndim != 1:
        raise ValueError(f"The state must be a 1-D array, got shape {x0.shape}.")
    d = x0.shape[0]
    names = _state_names(model, d)
    lo = jnp.full(d, -jnp.inf) if lower is None else jnp.broadcast_to(jnp.asarray(lower), (d,))
    up = jnp.full(d, jnp.inf) if upper is None else jnp.broadcast_to(jnp.asarray(upper), (d,))
    params = Parameters(
        names + p.names,
        jnp.concatenate([x0, p.nominal]),
        jnp.concatenate([lo, p.lower]),
        jnp.concatenate([up, p.upper]),
    )
    return InitialStateModel(
        base=model, parameters=params, t0=model.t0 if t0 is None else t0, n_states=d
    )


# --------------------------------------------------------------------------------------
# The delay-coordinate Jacobian


def _check_delay(tau, K):
    if not isinstance(K, (int, np.integer)) or K < 2:
        raise ValueError(f"K (the number of delay coordinates) must be an integer >= 2, got {K!r}.")
    if not isinstance(tau, jax.core.Tracer):
        t = np.asarray(tau, dtype=float)
        if not np.all(np.isfinite(t)) or np.any(t <= 0):
            raise ValueError(f"The delay tau must be positive and finite, got {tau!r}.")


@clean_errors
def delay_jacobian(
    model: ODEModel,
    x: ArrayLike | Sequence,
    theta: ArrayLike | dict | Sequence | None = None,
    *,
    tau: float | ArrayLike,
    K: int,
    t: float | None = None,
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> Float[Array, "rows w"]:
    """The Jacobian `DG` of the delay-coordinate map
    `G(x, p) = [y(t), y(t + tau), ..., y(t + (K-1) tau)]` with respect to the current
    state `x = x(t)` and the parameters `p` (Schumann-Bischoff et al. 2016, eqs. 4-6).

    **Arguments:**

    - `model`: an `ODEModel` with a 1-D state; multivariate outputs give `K * n_outputs`
      rows (time-major).
    - `x`: the state at time `t`, shape `(D,)`.
    - `theta`: the parameters (default nominal).
    - `tau`: the delay; `K`: the number of delay coordinates (the paper recommends
      `K >= 2 (D + N_p) + 1`).
    - `t`: the time of `x` (default the model's `t0`; irrelevant for autonomous models).
    - `integrator`, `throw`: as for `ji.sensitivity_matrix`.

    **Returns:** `(K * n_outputs, D + N_p)`, columns `(x1..xD, p1..pNp)`, float64.
    Jittable and vmappable over `x`, `theta` and `tau`.
    """
    _check_delay(tau, K)
    aug = free_initial_state(model, t0=t)
    x = jnp.asarray(x, dtype=float)
    d = aug.n_states
    if x.shape != (d,):
        raise ValueError(f"x must have shape ({d},), got {x.shape}.")
    theta = check_theta(model, theta)
    w = jnp.concatenate([x, theta])
    times = aug.t0 + jnp.asarray(tau, dtype=float) * jnp.arange(K, dtype=float)
    return sensitivity(aug, w, times, integrator=integrator, throw=throw).matrix


def attractor_states(
    model: ODEModel,
    theta: ArrayLike | dict | Sequence | None = None,
    *,
    n: int,
    spacing: float,
    transient: float = 0.0,
    x0: ArrayLike | None = None,
    integrator: Integrator | None = None,
) -> Float[Array, "n D"]:
    """`n` states along one trajectory, `spacing` apart, after a `transient` (the paper
    integrates 1e6 steps of 0.1 and keeps every 100th state: `spacing=10`).

    **Raises:** the solver's error when the integration fails.
    """
    check_model(model)
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}.")
    if not (spacing > 0 and transient >= 0):
        raise ValueError("Need spacing > 0 and transient >= 0.")
    if x0 is not None:
        theta = jnp.concatenate([jnp.asarray(x0, dtype=float), check_theta(model, theta)])
        model = free_initial_state(model, x0)
    times = float(model.t0) + transient + spacing * jnp.arange(n, dtype=float)
    traj = simulate(model, theta, times, integrator=integrator, throw=True)
    return traj.xs


# --------------------------------------------------------------------------------------
# Dependency analysis of one Jacobian (section II A) and correlations (section II B)


def _pivot_scores(VB: Array, combos: Array) -> Array:
    """`sigma_min(V_B[combo])` for each candidate set of pivot rows. `V_B` is orthonormal,
    so this lies in `[0, 1]` and bounds the entries of `V~_B` by its inverse. (The paper
    ranks by `sigma_min / sigma_max`, which is blind to scale: with `D_N = 1` every row,
    even a vanishing one, scores 1.)"""
    sub = VB[combos]  # (C, D_N, D_N)
    return jnp.linalg.svd(sub, compute_uv=False)[:, -1]


def _transformed_basis(VB: Array, pivots: Array) -> Array:
    """`V~_B = V_B V_B1^{-1}` (eq. 22, rows back in the original order): the basis of the
    null space that is the identity on the pivot rows."""
    VB1 = VB[pivots]
    Vt = jnp.linalg.solve(VB1.T, VB.T).T
    return Vt.at[pivots].set(jnp.eye(pivots.shape[0], dtype=VB.dtype))


def _uncertainty(s: Array, V: Array, c: Array) -> tuple[Array, Array]:
    """Measure of uncertainty `v_k` (eq. 33) and the correlation matrix (eq. 34) from the
    SVD of the equilibrated Jacobian `DG C^{-1} = U S V^T`: `Sigma_w = C^{-1} V S^-2 V^T
    C^{-1}`, so `v_k` is in the units of the unknowns and `rho` is unit-free. A singular
    value that is exactly zero is replaced by `eps^2 * sigma_1`, so a null direction
    shows as a huge, finite `v_k`."""
    floor = jnp.finfo(s.dtype).eps ** 2 * s[0]
    A = V / jnp.maximum(s, floor)[None, :]
    cov = matmul(A, A.T)
    v = jnp.sqrt(jnp.diag(cov))
    rho = cov / (v[:, None] * v[None, :])
    return v / c, jnp.clip(rho, -1.0, 1.0)


class _SVD(eqx.Module):
    """The SVD of the column-equilibrated Jacobian `DG C^{-1}` (so that nullity, null
    basis and zero entries do not depend on the units of the unknowns), with `c`."""

    s: Float[Array, " w"]
    V: Float[Array, "w w"]
    c: Float[Array, " w"]
    ok: Bool[Array, ""]


def _svd_of(DG: Array) -> _SVD:
    ok = jnp.all(jnp.isfinite(DG))
    safe, c = equilibrate(jnp.where(ok, DG, 0.0))
    rows, cols = DG.shape
    # fewer rows (K x outputs) than unknowns: all n right singular vectors, and zeros for
    # the singular values beyond the rows (those directions are in the null space)
    _, s, Vt = jnp.linalg.svd(safe, full_matrices=rows < cols)
    s = jnp.concatenate([s, jnp.zeros(cols - s.shape[0], s.dtype)])
    nan = jnp.asarray(jnp.nan, DG.dtype)
    return _SVD(jnp.where(ok, s, nan), jnp.where(ok, Vt.T, nan), c, ok)


def _combos(n_w: int, nullity: int, candidates: Sequence[int]) -> np.ndarray:
    if math.comb(len(candidates), nullity) > 20_000:
        raise ValueError(
            f"Too many pivot sets to search ({len(candidates)} choose {nullity}); pass "
            "pivots=... explicitly."
        )
    return np.asarray(list(itertools.combinations(candidates, nullity)), dtype=int).reshape(
        -1, nullity
    )


def _candidate_indices(names, candidates) -> list[int]:
    if isinstance(candidates, str):
        candidates = (candidates,)
    unknown = [c for c in candidates if c not in names]
    if unknown:
        raise ValueError(f"Unknown pivot_candidates {unknown}; the quantities are {list(names)}.")
    return [names.index(c) for c in candidates]


def _resolve_pivots(names, pivots, nullity):
    if pivots is None:
        return None
    if isinstance(pivots, str):
        pivots = (pivots,)
    idx = []
    for p in pivots:
        if p not in names:
            raise ValueError(f"Unknown pivot {p!r}; the quantities are {list(names)}.")
        idx.append(names.index(p))
    if len(set(idx)) != len(idx):
        raise ValueError(f"Repeated pivots {list(pivots)}.")
    if len(idx) != nullity:
        raise ValueError(
            f"The null space has dimension {nullity}, so exactly {nullity} pivots are needed; "
            f"got {list(pivots)}."
        )
    return np.asarray(idx, dtype=int)


def _fmt_sets(names, mask) -> list[tuple[str, ...]]:
    return [tuple(n for n, m in zip(names, col) if m) for col in np.asarray(mask).T]


def _defaults(dtype, rank, zero_tol):
    eps = float(jnp.finfo(dtype).eps)
    if rank is None:
        rank = RelativeTolerance(max(1e-10, 1e3 * eps))
    if zero_tol is None:
        zero_tol = max(1e-6, 1e3 * eps)
    return rank, zero_tol


class Estimability(eqx.Module):
    """Dependency and correlation analysis of one delay-coordinate Jacobian (or any
    Jacobian of outputs with respect to unknowns), from `ji.estimability`.

    **Fields:**

    - `names`: the unknowns `w` (states, then parameters).
    - `singular_values`, `nullity` (`D_N`), `rank_rule` (how `D_N` was decided).
    - `basis`: the orthonormal null basis `V_B` (`(N_w, D_N)`, the last right singular
      vectors) of the column-equilibrated Jacobian `DG C^{-1}`: every decision (nullity,
      pivots, vanishing components) is taken there, so none depends on the units of the
      unknowns. A null vector in the original units is `C^{-1} v`.
    - `scale`: the column norms `C` of `DG` (the equilibration).
    - `pivots`: the `D_N` quantities whose rows of `V_B` form the best-conditioned
      `V_B1` (or the ones you passed); fixing them makes every other quantity locally
      estimable.
    - `transformed`: `V~_B = V_B V_B1^{-1}` (eq. 22) of `DG` in the units of the
      unknowns, the identity on the pivot rows (its zero entries are decided in
      equilibrated units).
    - `estimable`: names whose row of `V_B` vanishes (below `zero_tol`).
    - `dependent_sets`: per column of `V~_B`, the quantities that move together.
    - `uncertainty`: `v_k` (eq. 33); `correlation`: Pearson's `rho` (eq. 34).
    - `zero_tol`: the threshold for "vanishing" basis components.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    singular_values: Float[Array, " w"]
    nullity: int = eqx.field(static=True)
    rank_rule: str = eqx.field(static=True)
    basis: Float[Array, "w n"]
    scale: Float[Array, " w"]
    pivots: tuple[str, ...] = eqx.field(static=True)
    transformed: Float[Array, "w n"]
    uncertainty: Float[Array, " w"]
    correlation: Float[Array, "w w"]
    zero_tol: float = eqx.field(static=True)

    @property
    def estimable(self) -> tuple[str, ...]:
        vb = np.abs(np.asarray(self.basis))
        return tuple(n for n, r in zip(self.names, vb) if np.all(r <= self.zero_tol))

    def _scaled_transformed(self) -> np.ndarray:
        """`V~_B` in equilibrated units (`C V~_B C_pivots^{-1}`), where zero entries are
        decided."""
        c = np.asarray(self.scale)
        piv = [self.names.index(n) for n in self.pivots]
        return np.asarray(self.transformed) * c[:, None] / c[piv][None, :]

    @property
    def dependent_sets(self) -> list[tuple[str, ...]]:
        vt = np.abs(self._scaled_transformed())
        scale = np.maximum(vt.max(axis=0, keepdims=True), 1.0)
        return _fmt_sets(self.names, vt > self.zero_tol * scale)

    def dependence(self, a: str, b: str) -> list[int]:
        """Per basis vector `v~^(i)`: `+1` if `Delta a > 0` goes with `Delta b > 0` in the
        null space (eq. 26), `-1` if with `Delta b < 0`, `0` if either does not move."""
        i, j = self.names.index(a), self.names.index(b)
        vt = self._scaled_transformed()
        scale = np.maximum(np.abs(vt).max(axis=0), 1.0)
        nz = np.abs(vt) > self.zero_tol * scale
        return [
            int(np.sign(vt[i, c] * vt[j, c]) * (nz[i, c] & nz[j, c])) for c in range(vt.shape[1])
        ]

    def to_dict(self) -> dict:
        return {
            "names": list(self.names),
            "singular_values": np.asarray(self.singular_values).tolist(),
            "nullity": self.nullity,
            "rank_rule": self.rank_rule,
            "pivots": list(self.pivots),
            "estimable": list(self.estimable),
            "dependent_sets": [list(s) for s in self.dependent_sets],
            "transformed_basis": np.asarray(self.transformed).tolist(),
            "uncertainty": np.asarray(self.uncertainty).tolist(),
            "correlation": np.asarray(self.correlation).tolist(),
        }

    def __repr__(self) -> str:
        s = np.asarray(self.singular_values)
        lines = [
            f"Estimability of {len(self.names)} unknowns: nullity {self.nullity} "
            f"({self.rank_rule}), sigma_min/sigma_1 = {s[-1] / s[0]:.2e}",
            f"  locally estimable: {', '.join(self.estimable) or '(none)'}",
        ]
        if self.nullity:
            lines.append(
                f"  fix these {self.nullity} to make the rest estimable: {', '.join(self.pivots)}"
            )
            for k, st in enumerate(self.dependent_sets):
                lines.append(f"  dependent set {k + 1}: {', '.join(st)}")
        return "\n".join(lines)


@clean_errors
def estimability(
    DG: ArrayLike | Sensitivity,
    names: Sequence[str] | None = None,
    *,
    nullity: int | None = None,
    rank: AbstractRankRule | None = None,
    pivots: Sequence[str] | None = None,
    pivot_candidates: Sequence[str] | None = None,
    zero_tol: float | None = None,
) -> Estimability:
    """Null-space dependency analysis and correlation analysis of a Jacobian `DG` of
    outputs with respect to unknowns (Schumann-Bischoff et al. 2016, section II).

    **Arguments:**

    - `DG`: `(rows, N_w)`, e.g. from `ji.delay_jacobian`, or a `ji.Sensitivity` (which
      brings its names and its accuracy for the default rank rule).
    - `names`: labels of the columns (default `w1..wN`).
    - `nullity`: the null-space dimension `D_N`; default: decided by `rank` (the paper
      calls `sigma_i` zero when `sigma_i / sigma_1 ~ 1e-15`; the default rule,
      `RelativeTolerance(max(1e-10, 1000 eps))`, is `1e-10` in float64, the accuracy of a
      Jacobian from an ODE solve at `rtol = 1e-10`, and `1.2e-4` in float32).
    - `pivots`: the `D_N` quantities defining `V_B1` (eq. 22); default: the set whose
      `V_B1` has the largest `sigma_min / sigma_max` among `pivot_candidates` (default
      all unknowns).
    - `zero_tol`: basis components below this (absolute, for the orthonormal `V_B`;
      relative to the largest entry of each column for `V~_B`) count as zero (default
      `max(1e-6, 1000 eps)`).

    **Returns:** an `Estimability`. With `nullity` given (an int) it is jittable and
    vmappable; otherwise `D_N` is read on the host.
    """
    if isinstance(DG, Sensitivity):
        names = DG.names if names is None else names
        if rank is None:
            rank = RelativeTolerance(accuracy=DG.accuracy)
        DG = DG.matrix
    DG = jnp.asarray(DG)
    if not jnp.issubdtype(DG.dtype, jnp.floating):
        DG = DG.astype(float)
    rank, zero_tol = _defaults(DG.dtype, rank, zero_tol)
    if DG.ndim != 2:
        raise ValueError(f"DG must be a matrix, got shape {DG.shape}.")
    n_w = DG.shape[1]
    names = tuple(f"w{i + 1}" for i in range(n_w)) if names is None else tuple(names)
    if len(names) != n_w:
        raise ValueError(f"{len(names)} names for {n_w} columns.")
    if not isinstance(DG, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(DG))):
        raise ValueError("DG contains NaN or inf (a failed solve?).")
    svd = _svd_of(DG)
    if nullity is None:
        if isinstance(DG, jax.core.Tracer):
            raise ValueError("Under jit or vmap, pass nullity=... (an int).")
        nullity = n_w - int(rank(svd.s, DG.shape))
        rule = rank.describe(svd.s, DG.shape)
        warn_if_near_threshold(rank, svd.s, DG.shape, "estimability")
    else:
        rule = f"nullity {nullity} given"
    if not 0 <= nullity <= n_w:
        raise ValueError(f"nullity must lie in [0, {n_w}], got {nullity}.")
    VB = svd.V[:, n_w - nullity :]
    piv = _resolve_pivots(names, pivots, nullity)
    if piv is None:
        cand = (
            range(n_w) if pivot_candidates is None else _candidate_indices(names, pivot_candidates)
        )
        if nullity == 0:
            piv = np.zeros(0, dtype=int)
        else:
            combos = _combos(n_w, nullity, list(cand))
            scores = _pivot_scores(VB, jnp.asarray(combos))
            if isinstance(scores, jax.core.Tracer):
                raise ValueError("Under jit or vmap, pass pivots=... as well as nullity.")
            piv = combos[int(np.argmax(np.asarray(scores)))]
    # eq. 22 in the units of the unknowns: V~ does not depend on the basis of the null
    # space, so C^{-1} V~_eq C_piv is the paper's V_B V_B1^{-1} of DG itself.
    Vt = (
        _transformed_basis(VB, jnp.asarray(piv)) * svd.c[jnp.asarray(piv)][None, :] / svd.c[:, None]
        if nullity
        else VB
    )
    v, rho = _uncertainty(svd.s, svd.V, svd.c)
    return Estimability(
        names=names,
        singular_values=svd.s,
        nullity=int(nullity),
        rank_rule=rule,
        basis=VB,
        scale=svd.c,
        pivots=tuple(names[i] for i in piv),
        transformed=Vt,
        uncertainty=v,
        correlation=rho,
        zero_tol=float(zero_tol),
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

    def plot(self, kind: str = "singular", *, column: int = 0, pairs=None, bins: int = 50):
        """Colour-coded histograms over the delays, one panel per quantity (the paper's
        Figs. 3-5 and 10-16). Returns the matplotlib figure."""
        from ..plot import delay_histograms

        return delay_histograms(self, kind, column=column, pairs=pairs, bins=bins)

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
