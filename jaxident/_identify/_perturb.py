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

from .._linalg._sce import worst_direction, WorstDirection
from .._model._base import AbstractModel, DAEModel, Integrator, ODEModel
from .._model._checks import check_model, check_theta, n_outputs
from .._model._transforms_state import free_initial_state
from .._runtime._choice import Choice
from .._runtime._host import run_kernel
from .._solve._simulate import failure_message, raise_if_failed, solve, status


class Response(Choice):
    """What `ji.perturbation_analysis` measures the error in: `state`, the full state
    (`e(t)`; of a reduced model, lifted to the full space), or `output`, the model's
    outputs (`eps(t)`)."""

    state = "state"
    output = "output"


class Perturbed(Choice):
    """Which quantities `ji.perturbation_analysis` perturbs (columns of the identity):
    `parameters`, `initial_state` (ODE models) or `all` of them; or give names."""

    parameters = "parameters"
    initial_state = "initial_state"
    all = "all"


def _response_fn(model, t, response, integrator, forward=False, throw=True):
    """`F(w) = (R(w), status)`: the response at `t` and the status of its solve, with the
    failure check compiled in when `throw is True` (see `jaxident._runtime._host.run_kernel`)."""
    times = jnp.reshape(jnp.asarray(t, dtype=float), (1,))
    adjoint = diffrax.ForwardMode() if forward else diffrax.RecursiveCheckpointAdjoint()

    def F(w):
        solved = solve(model, w, times, integrator, adjoint)
        if response == Response.output:
            out = solved.ys[0]
        elif isinstance(model, DAEModel):
            xs, ws = solved.xs
            out = jnp.concatenate([xs[0], ws[0]])
        else:
            out = model.lift(solved.xs[0])
        if throw:  # (False, or the error mode: `run_kernel`)
            out = raise_if_failed(model, out, solved)
        return out, status(solved)

    return F


def _response_size(model, response, w) -> int:
    """The dimension of the response, from the model's shapes (no trace of a solve)."""
    if response == Response.output:
        return n_outputs(model)
    theta = model.parameters.view(w)
    x0 = jnp.atleast_1d(jnp.asarray(model.initial_state(theta), dtype=float))
    if isinstance(model, DAEModel):
        return x0.shape[0] + jnp.atleast_1d(model.initial_algebraic_guess(theta)).shape[0]
    return model.lift(x0).shape[0]


@eqx.filter_jit
def _forward_error(model, t, response, integrator, w, dp):
    F = _response_fn(model, t, response, integrator, forward=True)
    return jnp.linalg.norm(jax.jvp(lambda z: F(z)[0], (w,), (dp,))[1])


@eqx.filter_jit
def _response_at(model, t, response, integrator, w):
    return _response_fn(model, t, response, integrator)(w)[0]


@eqx.filter_jit
def _nonlinear_error(model, t, response, integrator, w, value, dp):
    return jnp.linalg.norm(_response_at(model, t, response, integrator, w + dp) - value)


@eqx.filter_jit
def _analyse(model, t, response, integrator, w, key, q, P, throw):
    F = _response_fn(model, t, response, integrator, throw=throw)
    value, vjp, st = jax.vjp(F, w, has_aux=True)
    return value, worst_direction(lambda z: vjp(z)[0], value.shape[0], key, q, P), st


class PerturbationAnalysis(eqx.Module):
    """Adjoint/SCE analysis of the error a perturbation `delta p` induces in a response at
    time `t` (from `ji.perturbation_analysis`).

    **Fields:**

    - `names`: the perturbable quantities `p` (initial states first, then parameters).
    - `selected`: those in the admissible space (`delta p = P u`).
    - `t`, `response` (a `ji.Response`), `n_out` (its dimension), `q`.
    - `nominal`: `p` at which the model was linearised; `value`: the response there.
    - `model`, `integrator`: what was analysed and how it was solved (for
      `forward_error`).
    - `worst`: a `WorstDirection`: `estimate` (`E`, eq. 3.2), `direction` (`delta p*`),
      `alphas` (`J^T z_j` from the `q` adjoint solves), `sigma`, `U`, `Z`.

    **Methods:** `error_norm(dp)` (SCE estimate of `||eps(t)||` for any `dp`, no new
    solve), `forward_error(dp)` (the exact linearised error by one forward-sensitivity
    solve, for checks), `errors_along(k)`.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    selected: tuple[str, ...] = eqx.field(static=True)
    t: float = eqx.field(static=True)
    response: Response = eqx.field(static=True)
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


def perturbation_analysis(
    model: AbstractModel,
    theta: ArrayLike | dict | Sequence | None = None,
    t: float | None = None,
    *,
    key: PRNGKeyArray,
    q: int = 4,
    wrt: Perturbed | str | Sequence[str] = Perturbed.parameters,
    response: Response | str = Response.state,
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
    - `wrt`: `ji.Perturbed.parameters` (the default), `ji.Perturbed.initial_state` (ODE
      models), `ji.Perturbed.all`, or a name or list of names (states `x1..` / the
      model's state names, and parameter names): the admissible perturbations `P`,
      columns of the identity. The options' names (`"initial_state"`, ...) work too.
    - `response`: `ji.Response.state` (the full state; `e(t)`; the default) or
      `ji.Response.output` (`h`; `eps(t)`), or their names.
    - `integrator`: the solver of the forward and adjoint solves (default the model's).

    **Returns:** a `PerturbationAnalysis`.

    **Example:**

    ```python
    model = ji.models.load("brusselator_2d")
    pa = ji.perturbation_analysis(model, t=1.0, key=jax.random.key(0), q=12, wrt="initial_state")
    pa.estimate, pa.direction        # E and delta p* (unit norm, 512 + 4 entries)
    ```
    """
    check_model(model)
    response = Response.of(response, "response")
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
    if isinstance(wrt, str) and wrt in {m.value for m in Perturbed}:
        wrt = Perturbed(wrt)
        if wrt == Perturbed.parameters:
            sel = list(range(n_states, len(names)))
        elif wrt == Perturbed.initial_state:
            if n_states == 0:
                raise ValueError("wrt='initial_state' needs an ODEModel.")
            sel = list(range(n_states))
        else:
            sel = list(range(len(names)))
    elif isinstance(wrt, str):
        sel = [_index(names, wrt)]
    else:
        sel = [_index(names, n) for n in wrt]
    if not sel:
        raise ValueError("No perturbable quantities selected.")
    P = jnp.eye(len(names))[:, jnp.asarray(sel)]
    n_out = _response_size(target, response, w)
    if q > n_out:
        raise ValueError(f"q = {q} exceeds the response dimension {n_out}.")
    value, worst, _ = run_kernel(
        _analyse,
        target,
        t,
        response,
        integrator,
        w,
        key,
        int(q),
        P,
        throw=None,
        message=lambda out: failure_message(target, out[-1]),
    )
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
