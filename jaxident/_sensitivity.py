"""Forward-mode sensitivity matrices through diffrax."""

from collections.abc import Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from ._context import resolve_throw
from ._model import Integrator, ODEModel
from ._simulate import check_model, check_theta, check_times, raise_if_failed, solve


class Sensitivity(eqx.Module):
    """A sensitivity matrix with its labels.

    **Fields:**

    - `matrix`: `(n_times * n_outputs, p)`, rows in time-major order (all outputs at the
      first time, then the second time, ...), columns in the model's parameter order.
    - `outputs`: the model outputs at the same rows.
    - `times`: the observation times.
    - `names`: the parameter names (the columns).
    - `output_names`: the output names, or `None`.
    - `scale`: `"none"` (dy/dtheta) or `"relative"` (dlog y / dlog theta).
    - `ok`: `False` where the solve failed (only with `throw=False`; the matrix is NaN).
    """

    matrix: Float[Array, "rows p"]
    outputs: Float[Array, " rows"]
    times: Float[Array, " n"]
    names: tuple[str, ...] = eqx.field(static=True)
    output_names: tuple[str, ...] | None = eqx.field(static=True)
    scale: str = eqx.field(static=True)
    ok: Bool[Array, ""]

    def to_dict(self) -> dict:
        return {
            "matrix": np.asarray(self.matrix).tolist(),
            "outputs": np.asarray(self.outputs).tolist(),
            "times": np.asarray(self.times).tolist(),
            "names": list(self.names),
            "output_names": None if self.output_names is None else list(self.output_names),
            "scale": self.scale,
            "ok": bool(self.ok),
        }

    def __repr__(self) -> str:
        shape = "x".join(str(s) for s in self.matrix.shape)
        return (
            f"Sensitivity({shape}, parameters={list(self.names)}, "
            f"outputs={list(self.output_names or [])}, times={self.times.shape[-1]}, "
            f"scale={self.scale!r}, ok={np.asarray(self.ok).tolist()})"
        )

    @property
    def row_labels(self) -> list[str]:
        n_out = self.outputs.shape[-1] // self.times.shape[-1]
        outs = self.output_names or tuple(f"y{i}" for i in range(n_out))
        return [f"{o}(t={float(t):g})" for t in self.times for o in outs]


@eqx.filter_jit
def _sensitivity(model, theta, times, integrator, scale, throw):
    def f(th):
        _, ys, ok, success, index, _ = solve(model, th, times, integrator, diffrax.ForwardMode())
        return ys.reshape(-1), (ys.reshape(-1), ok, success, index)

    S, (y, ok, success, index) = jax.jacfwd(f, has_aux=True)(theta)
    ok = ok & jnp.all(jnp.isfinite(S))
    if scale == "relative":
        nonzero = jnp.all(y != 0)
        S = S * theta[None, :] / jnp.where(y != 0, y, 1.0)[:, None]
        if throw:
            S = eqx.error_if(
                S,
                ok & ~nonzero,
                "scale='relative' divides by the outputs, and an output is exactly zero at "
                "some observation time (often at t0). Drop that time from `times`, or use "
                "scale='none'.",
            )
        ok = ok & nonzero
    if throw:
        S = raise_if_failed(model, S, ok, success, index)
    S = jnp.where(ok, S, jnp.asarray(jnp.nan, S.dtype))
    return S, y, ok


def sensitivity(
    model: ODEModel,
    theta: ArrayLike | dict | Sequence[float] | None = None,
    times: ArrayLike | Sequence[float] | None = None,
    *,
    scale: str = "none",
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> Sensitivity:
    """The sensitivity matrix of the model outputs with respect to the parameters, with
    labels. See `sensitivity_matrix` for the arguments; this returns a `Sensitivity`
    carrying the names, the outputs and the times along with the matrix."""
    check_model(model)
    theta = check_theta(model, theta)
    times = check_times(model, times)
    if scale not in ("none", "relative"):
        raise ValueError(f"scale must be 'none' or 'relative', got {scale!r}.")
    integrator = model.integrator if integrator is None else integrator
    S, y, ok = _sensitivity(model, theta, times, integrator, scale, resolve_throw(throw))
    return Sensitivity(
        matrix=S,
        outputs=y,
        times=times,
        names=model.parameters.names,
        output_names=model.output_names,
        scale=scale,
        ok=ok,
    )


def sensitivity_matrix(
    model: ODEModel,
    theta: ArrayLike | dict | Sequence[float] | None = None,
    times: ArrayLike | Sequence[float] | None = None,
    *,
    scale: str = "none",
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> Float[Array, "rows p"]:
    """The sensitivity matrix `S[i, j] = d y_i / d theta_j` by forward-mode automatic
    differentiation through the ODE solve (`jax.jacfwd` with
    `adjoint=diffrax.ForwardMode()`): the exact derivative of the discretised solution.

    **Arguments:**

    - `model`: an `ODEModel`.
    - `theta`: parameters in the model's order, a `{name: value}` dict, or `None` for the
      nominal values.
    - `times`: observation times (default `model.times`).
    - `scale`: `"none"` for `dy/dtheta`; `"relative"` for `(theta_j / y_i) dy_i/dtheta_j`,
      the scaled matrix `B_N` of Alberton et al. (2013), eq. (2).
    - `integrator`: solver and tolerances (default: the model's).
    - `throw`: raise on a failed solve (default); inside `ji.sweep` failures become NaN
      matrices with a per-sample flag instead.

    **Returns:** an `(n_times * n_outputs, p)` float64 array, rows in time-major order and
    columns in the order of `model.parameters.names`. Jittable and vmappable over `theta`.

    **Raises:** `ValueError` for a wrong shape, unknown names, non-finite parameters or a
    bad time grid; an `EquinoxRuntimeError` naming the solver failure when `throw`.

    **Example:**

    ```python
    model = ji.models.load("svir")
    S = ji.sensitivity_matrix(model, model.parameters.nominal, model.times)
    S.shape  # (31, 4)
    ```
    """
    return sensitivity(model, theta, times, scale=scale, integrator=integrator, throw=throw).matrix
