"""The delay-coordinate map and its Jacobian (Schumann-Bischoff, Luther & Parlitz 2016,
Phys. Rev. E 94, 032221): `G(x(t), p) = [y(t), y(t + tau), ..., y(t + (K-1) tau)]`,
differentiated by forward mode through diffrax with respect to the current state and
the parameters, `w = (x, p)` (the sensitivity layer of the delay analysis), and states
on an attractor to evaluate it at.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._model._base import Integrator, ODEModel
from .._model._checks import check_model, check_theta
from .._model._transforms_state import free_initial_state
from .._problem._sensitivity import sensitivity
from .._solve._simulate import simulate


# --------------------------------------------------------------------------------------
# The delay-coordinate Jacobian


def _check_delay(tau, K):
    if not isinstance(K, (int, np.integer)) or K < 2:
        raise ValueError(f"K (the number of delay coordinates) must be an integer >= 2, got {K!r}.")
    if not isinstance(tau, jax.core.Tracer):
        t = np.asarray(tau, dtype=float)
        if not np.all(np.isfinite(t)) or np.any(t <= 0):
            raise ValueError(f"The delay tau must be positive and finite, got {tau!r}.")


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

    **Arguments:** `model` (an ODE model), `theta` (default nominal), `n`, `spacing`,
    `transient` (time integrated first and dropped), `x0` (the starting state, default
    the model's initial state), `integrator` (default the model's).

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
