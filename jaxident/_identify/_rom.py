"""Reduced-order models by proper orthogonal decomposition (POD) and Galerkin projection
(Serban, Homescu & Petzold, section 6.1), and how well one reproduces the perturbation
analysis of its full model (section 5)."""

from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._linalg._misc import matmul
from .._linalg._sce import sce_estimate, similarity_index, wallis
from .._model._base import Integrator, ODEModel
from .._model._checks import check_model
from .._model._transforms_state import PODModel
from .._solve._simulate import simulate
from ._perturb import PerturbationAnalysis


class POD(eqx.Module):
    """A POD basis of snapshots: `basis` (`(n, k)`, orthonormal columns), `mean` (the
    snapshot mean `y_bar`), `singular_values` (of the centred snapshot matrix, all of
    them) and `energy` (the fraction `sum_{i<=k} s_i^2 / sum_i s_i^2` retained).

    `singular_value_fraction` is `sum_{i<=k} s_i / sum_i s_i`, the "energy" Serban et al.
    report for the Brusselator (99.52% with 12 modes; 99.54% here, while the squared
    fraction is 99.999%)."""

    basis: Float[Array, "n k"]
    mean: Float[Array, " n"]
    singular_values: Float[Array, " m"]
    energy: float

    @property
    def k(self) -> int:
        return self.basis.shape[1]

    @property
    def singular_value_fraction(self) -> float:
        s = np.asarray(self.singular_values)
        return float(s[: self.k].sum() / s.sum())

    def __repr__(self) -> str:
        n, k = self.basis.shape
        return (
            f"POD({k} of {n} dimensions; retains {100 * self.energy:.4f}% of the energy "
            f"(sum of s_i^2), {100 * self.singular_value_fraction:.2f}% of sum of s_i)"
        )


def pod_basis(snapshots: ArrayLike, k: int | None = None, *, energy: float | None = None) -> POD:
    """POD of `snapshots` (`(m, n)`: `m` states of dimension `n`): the `k` leading left
    singular vectors of the centred snapshot matrix `[y_1 - y_bar, ..., y_m - y_bar]`,
    which minimise the total squared projection error. Give `k`, or `energy` (the
    smallest `k` retaining at least that fraction, e.g. `0.995`)."""
    Y = np.asarray(snapshots, dtype=float)
    if Y.ndim != 2:
        raise ValueError(f"snapshots must be (m, n), got shape {Y.shape}.")
    if not np.all(np.isfinite(Y)):
        raise ValueError("snapshots contain NaN or inf.")
    if (k is None) == (energy is None):
        raise ValueError("Give exactly one of k and energy.")
    mean = Y.mean(axis=0)
    U, s, _ = np.linalg.svd((Y - mean).T, full_matrices=False)
    cum = np.cumsum(s**2) / max(np.sum(s**2), np.finfo(float).tiny)
    if k is None:
        if not 0 < energy <= 1:
            raise ValueError(f"energy must lie in (0, 1], got {energy}.")
        k = int(np.searchsorted(cum, energy - 1e-15) + 1)
    if not 1 <= k <= min(Y.shape):
        raise ValueError(f"k must lie in [1, {min(Y.shape)}], got {k}.")
    return POD(jnp.asarray(U[:, :k]), jnp.asarray(mean), jnp.asarray(s), float(cum[k - 1]))


def pod_reduce(
    model: ODEModel,
    k: int | None = None,
    *,
    energy: float | None = None,
    snapshot_times: ArrayLike | Sequence | None = None,
    n_snapshots: int = 100,
    theta: ArrayLike | dict | Sequence | None = None,
    integrator: Integrator | None = None,
) -> tuple[PODModel, POD]:
    """A POD reduced-order model of `model` from snapshots of its trajectory at `theta`
    (default nominal).

    **Arguments:**

    - `model`: an `ODEModel` with a 1-D state.
    - `k` or `energy`: the number of modes, or the energy fraction to retain.
    - `snapshot_times`: where to take snapshots; default `n_snapshots` equally spaced
      times from `t0` to the last of `model.times`.
    - `theta`: the parameters of the snapshots (default nominal); `integrator`: the
      solver (default the model's).

    **Returns:** `(rom, pod)`: the `PODModel` and its `POD` (basis, mean, energy).

    **Example:**

    ```python
    model = ji.models.load("brusselator_2d")
    rom, pod = ji.pod_reduce(model, k=12)
    pod.energy   # 0.995...
    ```
    """
    check_model(model)
    if not isinstance(model, ODEModel):
        raise TypeError(f"pod_reduce needs an ODEModel, got {type(model).__name__}.")
    if snapshot_times is None:
        t_end = float(np.asarray(model.times)[-1])
        snapshot_times = jnp.linspace(float(model.t0), t_end, n_snapshots)
    traj = simulate(model, theta, snapshot_times, integrator=integrator)
    xs = traj.xs
    if not isinstance(xs, jnp.ndarray) or xs.ndim != 2:
        raise ValueError("pod_reduce needs a model whose state is a 1-D array.")
    pod = pod_basis(xs, k, energy=energy)
    return PODModel(base=model, basis=pod.basis, mean=pod.mean), pod


class Similarity(eqx.Module):
    """How well a reduced model preserves the perturbation behaviour of the full model
    (Serban et al., section 4; from `ji.rom_similarity`).

    **Fields:** `S1` (eq. 4.1, overlap of the leading `q` singular directions), `S2`
    (eq. 4.2, ratio of the errors along the full model's worst direction, by forward
    sensitivity solves), `full_error` and `reduced_error` (those two errors),
    `angle_degrees`: the paper's angle between the reduced model's worst direction
    `u~_1` and the projection `rho^T u_1` of the full one onto the POD subspace (section
    6.1: 150.87 deg for the Brusselator; 0 or 180 deg is agreement, the sign of a
    singular vector being arbitrary), `in_subspace` and `off_subspace`: `||rho^T u_1||`
    and `||(I - rho rho^T) u_1||` (paper 0.304 and 0.953), `q`. Without a POD basis
    the angle is taken to `u_1` itself and the subspace norms are NaN.
    """

    S1: float
    S2: float
    full_error: float
    reduced_error: float
    angle_degrees: float
    in_subspace: float
    off_subspace: float
    q: int

    def __repr__(self) -> str:
        return (
            f"Similarity(S1 = {self.S1:.4g}, S2 = {self.S2:.4g}; errors along the full worst "
            f"direction: full {self.full_error:.4g}, reduced {self.reduced_error:.4g}; "
            f"angle(u~_1, rho^T u_1) = {self.angle_degrees:.1f} deg; ||rho^T u_1|| = "
            f"{self.in_subspace:.3g}, ||(I - rho rho^T) u_1|| = {self.off_subspace:.3g})"
        )


def rom_similarity(
    full: PerturbationAnalysis, reduced: PerturbationAnalysis, q: int = 4
) -> Similarity:
    """Similarity indices `S1` and `S2` of a reduced model's perturbation analysis
    (`reduced`) against the full model's (`full`); both must perturb the same
    quantities and have responses of the same dimension (a `ji.pod_reduce` model
    analysed like its full model does). `q`: `S1` compares the first `q` singular
    vectors of each (at most each analysis' own)."""
    if full.names != reduced.names or full.n_out != reduced.n_out:
        raise ValueError(
            "The analyses must share the perturbable quantities and the response dimension "
            "(analyse the reduced model with the same wrt and response)."
        )
    k = min(q, full.q, reduced.q)
    Uf = full.worst.singular_vectors(k)
    Ur = reduced.worst.singular_vectors(k)
    S1 = float(similarity_index(Uf, Ur, k))
    u1 = full.direction
    ef = float(full.forward_error(u1))
    er = float(reduced.forward_error(u1))
    S2 = min(er / ef, ef / er) if ef > 0 and er > 0 else 0.0
    u1 = np.asarray(Uf[:, 0])
    ur = np.asarray(Ur[:, 0])
    basis = _pod_basis(reduced.model)
    inside = outside = float("nan")
    if basis is not None and basis.shape[0] <= u1.shape[0]:
        n = basis.shape[0]  # the states come first among the perturbable quantities
        B = np.asarray(basis)
        proj = u1.copy()
        proj[:n] = B @ (B.T @ u1[:n])
        inside = float(np.linalg.norm(B.T @ u1[:n]))
        outside = float(np.linalg.norm(u1[:n] - proj[:n]))
        u1 = proj
    cos = float(np.dot(u1, ur) / (np.linalg.norm(u1) * np.linalg.norm(ur)))
    angle = float(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))
    return Similarity(
        S1=S1,
        S2=S2,
        full_error=ef,
        reduced_error=er,
        angle_degrees=angle,
        in_subspace=inside,
        off_subspace=outside,
        q=k,
    )


def _pod_basis(model):
    """The POD basis of a (possibly wrapped) reduced model, or `None`."""
    while model is not None:
        basis = getattr(model, "basis", None)
        if basis is not None:
            return basis
        model = getattr(model, "base", None)
    return None


def rom_perturbation_error(
    full: PerturbationAnalysis,
    reduced: PerturbationAnalysis,
    dp: ArrayLike,
    reduction_error: ArrayLike | float | None = None,
) -> dict:
    """The error `||Theta(t)||` of the perturbed reduced model against the perturbed full
    model, combining model reduction and the perturbation `dp` (Serban et al., section 5),
    from the stored adjoint products of both analyses, `full` and `reduced` (which must
    use the same key and `q`, so the same random directions).

    - `reduction_error` a vector `theta(t) = R(y) - R~(y~)` (case 1): returns
      `{"estimate": ...}`, the SCE estimate of `||theta + (alpha - alpha~)^T dp||`.
    - a number `||theta(t)||` (case 2): returns `{"lower": ..., "upper": ...,
      "perturbation_part": ...}`, the bounds `| ||theta|| - ||Delta|| |` and
      `||theta|| + ||Delta||` with `Delta` estimated by SCE.
    - `None`: the reduction error is taken from the analyses' nominal responses
      (`full.value - reduced.value`), case 1.
    """
    if full.worst.Z.shape != reduced.worst.Z.shape or not bool(
        jnp.allclose(full.worst.Z, reduced.worst.Z)
    ):
        raise ValueError(
            "Both analyses must use the same random directions: pass the same key and q."
        )
    dp = full._check_dp(dp)
    q, n = full.q, full.n_out
    delta = matmul(full.worst.alphas - reduced.worst.alphas, dp)  # (q,)
    if reduction_error is None:
        reduction_error = full.value - reduced.value
    theta = jnp.asarray(reduction_error, dtype=float)
    if theta.ndim == 0:
        part = float(sce_estimate(delta, n))
        th = float(theta)
        return {"lower": abs(th - part), "upper": th + part, "perturbation_part": part}
    if theta.shape != (n,):
        raise ValueError(f"reduction_error must be a scalar or have shape ({n},).")
    proj = matmul(full.worst.Z.T, theta) + delta
    return {"estimate": float(wallis(q) / wallis(n) * jnp.linalg.norm(proj))}
