"""Perturbation-induced errors by adjoints and small-sample condition estimation, worst
directions, and the validity of reduced-order models (Serban, Homescu & Petzold, "The
effect of problem perturbations on nonlinear dynamical systems and their reduced order
models", sections 2-5)."""

import warnings
from collections.abc import Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ._checks import check_model, check_theta
from ._context import clean_errors
from ._linalg._misc import matmul
from ._linalg._sce import sce_estimate, similarity_index, wallis, worst_direction, WorstDirection
from ._model import AbstractModel, DAEModel, Integrator, ODEModel
from ._simulate import raise_if_failed, solve
from ._transforms import free_initial_state


def _response_fn(model, t, response, integrator, forward=False):
    times = jnp.reshape(jnp.asarray(t, dtype=float), (1,))
    adjoint = diffrax.ForwardMode() if forward else diffrax.RecursiveCheckpointAdjoint()

    def F(w):
        solved = solve(model, w, times, integrator, adjoint)
        if response == "output":
            out = solved.ys[0]
        elif isinstance(model, DAEModel):
            xs, ws = solved.xs
            out = jnp.concatenate([xs[0], ws[0]])
        else:
            out = model.lift(solved.xs[0])
        return raise_if_failed(model, out, solved)

    return F


@eqx.filter_jit
def _forward_error(model, t, response, integrator, w, dp):
    F = _response_fn(model, t, response, integrator, forward=True)
    return jnp.linalg.norm(jax.jvp(F, (w,), (dp,))[1])


@eqx.filter_jit
def _response_at(model, t, response, integrator, w):
    return _response_fn(model, t, response, integrator)(w)


@eqx.filter_jit
def _nonlinear_error(model, t, response, integrator, w, value, dp):
    return jnp.linalg.norm(_response_at(model, t, response, integrator, w + dp) - value)


@eqx.filter_jit
def _analyse(model, t, response, integrator, w, key, q, P):
    F = _response_fn(model, t, response, integrator)
    value, vjp = jax.vjp(F, w)
    return value, worst_direction(lambda z: vjp(z)[0], value.shape[0], key, q, P)


class PerturbationAnalysis(eqx.Module):
    """Adjoint/SCE analysis of the error a perturbation `delta p` induces in a response at
    time `t` (from `ji.perturbation_analysis`).

    **Fields:**

    - `names`: the perturbable quantities `p` (initial states first, then parameters).
    - `selected`: those in the admissible space (`delta p = P u`).
    - `t`, `response` (`"state"` or `"output"`), `n_out` (its dimension), `q`.
    - `nominal`: `p` at which the model was linearised; `value`: the response there.
    - `worst`: a `WorstDirection`: `estimate` (`E`, eq. 3.2), `direction` (`delta p*`),
      `alphas` (`J^T z_j` from the `q` adjoint solves), `sigma`, `U`, `Z`.

    **Methods:** `error_norm(dp)` (SCE estimate of `||eps(t)||` for any `dp`, no new
    solve), `forward_error(dp)` (the exact linearised error by one forward-sensitivity
    solve, for checks), `errors_along(k)`.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    selected: tuple[str, ...] = eqx.field(static=True)
    t: float = eqx.field(static=True)
    response: str = eqx.field(static=True)
    n_out: int = eqx.field(static=True)
    q: int = eqx.field(static=True)
    nominal: Float[Array, " p"]
    value: Float[Array, " n_out"]
    worst: WorstDirection
    model: AbstractModel
    integrator: Integrator

    @property
    def estimate(self) -> Float[Array, ""]:
        """`E`, the SCE estimate of the largest error per unit perturbation (eq. 3.2)."""
        return self.worst.estimate

    @property
    def direction(self) -> Float[Array, " p"]:
        """`delta p* = P u_1`, the estimated direction of largest error growth."""
        return self.worst.direction

    def error_norm(self, dp: ArrayLike) -> Float[Array, "..."]:
        """SCE estimate of `||eps(t)||` for perturbation(s) `dp`, from the stored adjoint
        products (no new solve)."""
        return self.worst.error_norm(self._check_dp(dp))

    def _check_dp(self, dp):
        dp = jnp.asarray(dp, dtype=float)
        if dp.shape[-1] != len(self.names):
            raise ValueError(
                f"A perturbation needs {len(self.names)} entries (the order of .names), "
                f"got shape {dp.shape}."
            )
        return dp

    def forward_error(self, dp: ArrayLike) -> Float[Array, ""]:
        """`||J dp||`: the linearised error along `dp` by one forward-sensitivity solve
        (`jax.jvp`), for comparison with the estimates."""
        return _forward_error(
            self.model, self.t, self.response, self.integrator, self.nominal, self._check_dp(dp)
        )

    def nonlinear_error(self, dp: ArrayLike) -> Float[Array, ""]:
        """`||R(p + dp) - R(p)||`: the actual error of the perturbed (nonlinear) model."""
        return _nonlinear_error(
            self.model,
            self.t,
            self.response,
            self.integrator,
            self.nominal,
            self.value,
            self._check_dp(dp),
        )

    def response_at(self, dp: ArrayLike) -> Float[Array, " n_out"]:
        """The response of the perturbed (nonlinear) model, `R(p + dp)`."""
        return _response_at(
            self.model, self.t, self.response, self.integrator, self.nominal + self._check_dp(dp)
        )

    def to_dict(self) -> dict:
        return {
            "t": self.t,
            "response": self.response,
            "n_out": self.n_out,
            "q": self.q,
            "estimate": float(self.estimate),
            "sigma": np.asarray(self.worst.sigma).tolist(),
            "direction": dict(zip(self.names, np.asarray(self.direction).tolist())),
        }

    def __repr__(self) -> str:
        d = np.asarray(self.direction)
        top = np.argsort(-np.abs(d))[:5]
        lead = ", ".join(f"{self.names[i]} {d[i]:+.3f}" for i in top)
        return (
            f"PerturbationAnalysis at t = {self.t:g} ({self.response}, dimension {self.n_out}), "
            f"q = {self.q} adjoint solves, {len(self.selected)} perturbable quantities\n"
            f"  largest error per unit perturbation E = {float(self.estimate):.6g}\n"
            f"  worst direction (largest components): {lead}"
        )


@clean_errors
def perturbation_analysis(
    model: AbstractModel,
    theta: ArrayLike | dict | Sequence | None = None,
    t: float | None = None,
    *,
    key: PRNGKeyArray,
    q: int = 4,
    wrt: str | Sequence[str] = "parameters",
    response: str = "state",
    integrator: Integrator | None = None,
) -> PerturbationAnalysis:
    """Estimate the error that perturbations of the initial state or parameters induce at
    time `t`, and the direction of largest error, from `q` adjoint solves that do not
    depend on the perturbation (Serban, Homescu & Petzold, sections 2 and 3).

    Each adjoint solve is a `jax.vjp` through the diffrax solve (the discrete adjoint of
    the discretised model): `alpha_j = J^T z_j` for `q` random orthonormal `z_j`. Then
    `||J dp|| ~ (W_q / W_n) (sum_j (alpha_j^T dp)^2)^(1/2)` for every `dp`, and the
    largest singular direction of `Psi = P^T (sum_j alpha_j alpha_j^T) P` estimates the
    worst perturbation, with `E = (W_q / W_n) sqrt(sigma_1)`.

    **Arguments:**

    - `model`: an `ODEModel` (including reduced models from `ji.pod_reduce`: their
      perturbations and responses are in the full space) or a `DAEModel` (perturbations
      of parameters; the algebraic initial values are re-solved, so every perturbation
      is consistent, the paper's case 2 of section 3).
    - `theta`: the parameters (default nominal); `t`: the time (default the last of
      `model.times`).
    - `key`, `q`: the random directions and their number.
    - `wrt`: `"parameters"`, `"initial_state"` (ODE models), `"all"`, or a list of names
      (states `x1..` / the model's state names, and parameter names): the admissible
      perturbations `P`, columns of the identity.
    - `response`: `"state"` (the full state; `e(t)`) or `"output"` (`h`; `eps(t)`).

    **Returns:** a `PerturbationAnalysis`.

    **Example:**

    ```python
    model = ji.models.load("brusselator_2d")
    pa = ji.perturbation_analysis(model, t=1.0, key=jax.random.key(0), q=12, wrt="initial_state")
    pa.estimate, pa.direction        # E and delta p* (unit norm, 512 + 4 entries)
    ```
    """
    check_model(model)
    if response not in ("state", "output"):
        raise ValueError(f"response must be 'state' or 'output', got {response!r}.")
    integrator = model.integrator if integrator is None else integrator
    theta = check_theta(model, theta)
    t = float(np.asarray(model.times)[-1]) if t is None else float(t)
    if not t > float(model.t0):
        raise ValueError(f"t must lie after t0 = {float(model.t0):g}, got {t:g}.")
    if not isinstance(q, (int, np.integer)) or q < 1:
        raise ValueError(f"q must be a positive integer, got {q!r}.")
    if isinstance(model, ODEModel):
        aug = free_initial_state(model)
        n_states = aug.n_states
        names = aug.parameters.names
        w = jnp.concatenate([aug.parameters.nominal[:n_states], theta])
        target = aug
    else:
        n_states = 0
        names = model.parameters.names
        w = theta
        target = model
    if isinstance(wrt, str):
        if wrt == "parameters":
            sel = list(range(n_states, len(names)))
        elif wrt == "initial_state":
            if n_states == 0:
                raise ValueError("wrt='initial_state' needs an ODEModel.")
            sel = list(range(n_states))
        elif wrt == "all":
            sel = list(range(len(names)))
        else:
            sel = [_index(names, wrt)]
    else:
        sel = [_index(names, n) for n in wrt]
    if not sel:
        raise ValueError("No perturbable quantities selected.")
    P = jnp.eye(len(names))[:, jnp.asarray(sel)]
    n_out = jax.eval_shape(_response_fn(target, t, response, integrator), w).shape[0]
    if q > n_out:
        raise ValueError(f"q = {q} exceeds the response dimension {n_out}.")
    value, worst = _analyse(target, t, response, integrator, w, key, int(q), P)
    _warn_if_small_gap(worst.sigma)
    return PerturbationAnalysis(
        names=names,
        selected=tuple(names[i] for i in sel),
        t=t,
        response=response,
        n_out=n_out,
        q=int(q),
        nominal=w,
        value=value,
        worst=worst,
        model=target,
        integrator=integrator,
    )


def _index(names, n):
    if n not in names:
        raise ValueError(f"Unknown quantity {n!r}; perturbable: {list(names)[:12]}...")
    return names.index(n)


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


class SmallGapWarning(UserWarning):
    """The SCE worst direction is not well determined (a small spectral gap)."""


def _warn_if_small_gap(sigma, factor: float = 1.5) -> None:
    """Warn when the two leading singular values of the estimated operator lie within
    `factor` of each other: `E` is still an estimate of the norm, but the worst
    direction `u_1` is then not determined by the `q` samples (any mix of `u_1` and
    `u_2` grows alike)."""
    if isinstance(sigma, jax.core.Tracer):
        return
    s = np.sqrt(np.maximum(np.asarray(sigma, dtype=float), 0.0))
    if s.ndim == 1 and s.size >= 2 and s[1] > 0 and s[0] / s[1] < factor:
        warnings.warn(
            f"The worst direction is unreliable: the two leading singular values of the "
            f"estimate, {s[0]:.4g} and {s[1]:.4g}, differ by less than a factor {factor}. "
            "Increase q, or read only the error estimate E.",
            SmallGapWarning,
            stacklevel=3,
        )


@clean_errors
def rom_similarity(
    full: PerturbationAnalysis, reduced: PerturbationAnalysis, q: int = 4
) -> Similarity:
    """Similarity indices `S1` and `S2` of a reduced model's perturbation analysis against
    the full model's; both must perturb the same quantities and have responses of the same
    dimension (a `ji.pod_reduce` model analysed like its full model does)."""
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


@clean_errors
def rom_perturbation_error(
    full: PerturbationAnalysis,
    reduced: PerturbationAnalysis,
    dp: ArrayLike,
    reduction_error: ArrayLike | float | None = None,
) -> dict:
    """The error `||Theta(t)||` of the perturbed reduced model against the perturbed full
    model, combining model reduction and the perturbation `dp` (Serban et al., section 5),
    from the stored adjoint products of both analyses (which must use the same key and
    `q`, so the same random directions).

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
