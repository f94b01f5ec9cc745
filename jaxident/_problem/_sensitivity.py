"""Forward-mode sensitivity matrices through diffrax."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from .._linalg._misc import after, matmul
from .._model._base import AbstractModel, Integrator
from .._model._checks import check_model, check_theta, check_times
from .._model._nonsmooth import directions_matrix as directions_matrix
from .._model._parameters import box_units
from .._runtime._config import solve_optimized
from .._runtime._host import diagnosed, run_kernel
from .._runtime._results import checked, names as result_names, RESULTS, succeeded
from .._solve._forward import accuracy, forward_sensitivities
from .._solve._sensitivity_result import (
    Sensitivity as Sensitivity,
    SensitivityScale as SensitivityScale,
)
from .._solve._simulate import failure_message, raise_if_failed, solve_failure_point, status
from ._base import Problem
from ._predict import problem_sensitivity


@eqx.filter_jit
def _sensitivity(model, theta, times, integrator, scale, throw):
    p = theta.shape[0]
    y, S, solved = forward_sensitivities(
        model, theta, times, integrator, jnp.eye(p, dtype=theta.dtype)
    )
    result = checked(solved.result, jnp.all(jnp.isfinite(S)), RESULTS.nonfinite_sensitivity)
    if scale is SensitivityScale.relative:
        result = checked(result, jnp.all(theta != 0), RESULTS.zero_parameter)
        result = checked(result, jnp.all(y != 0), RESULTS.zero_output)
        S = S * theta[None, :] / jnp.where(y != 0, y, 1.0)[:, None]
    solved = solved._replace(result=result)
    if throw:  # (False, or the error mode: `run_kernel`)
        S = raise_if_failed(model, S, solved, integrator)
    S = jnp.where(solved.ok, S, jnp.asarray(jnp.nan, S.dtype))
    return S, y, result, status(solved)


@diagnosed(solve_failure_point)
def sensitivity(
    model: eqx.Module,  # a model or a ji.Problem
    theta: ArrayLike | dict | Sequence | None = None,
    times: ArrayLike | Sequence | None = None,
    *,
    scale: SensitivityScale | str = SensitivityScale.none,
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> Sensitivity:
    """The sensitivity matrix of the model outputs with respect to the parameters, with
    labels. See `sensitivity_matrix` for the arguments; this returns a `Sensitivity`
    carrying the names, the outputs and the times along with the matrix. For a
    `ji.Problem`: the noise-weighted matrix, one row per observed datum (experiments
    stacked), `d((h(y) - h(data)) / sigma) / d theta` with `h` the observable
    transformation and `theta` on the estimation scale, and the noise rows where sigma
    depends on the parameters; its Gram matrix is the Fisher information. Every selection
    and rank analysis takes it (`scale=ji.SensitivityScale.noise` marks it).

    **Arguments:** `model` (a model, or a `ji.Problem`), `theta` (default nominal),
    `times` (a model's output times, default `model.times`; a problem has its own),
    `scale` (`"none"` or `"relative"`: d log y / d log theta), `integrator` (default the
    model's), `throw` (the convention of every entry point: `None` raises on a concrete
    call and returns `ok = False` under a trace, `True` always raises, `False` never)."""
    if isinstance(model, Problem):
        if SensitivityScale.of(scale, "scale") is not SensitivityScale.none or times is not None:
            raise ValueError(
                "For a ji.Problem the rows are its data, weighted by their noise: give "
                "neither times nor scale (the estimation scales are the problem's)."
            )
        return problem_sensitivity(model, theta, integrator=integrator, throw=throw)
    check_model(model)
    theta = check_theta(model, theta)
    times = check_times(model, times)
    scale = SensitivityScale.of(scale, "scale")
    if scale is SensitivityScale.noise:
        raise ValueError("scale='noise' is a problem's: give a ji.Problem, which holds the noise.")
    if scale is SensitivityScale.relative and not isinstance(theta, jax.core.Tracer):
        zero = [model.parameters.names[i] for i in np.flatnonzero(np.asarray(theta) == 0)]
        if zero:
            raise ValueError(
                f"scale='relative' multiplies each column by its parameter value, and "
                f"{zero} are 0: those columns would be zero and the parameters called "
                "non-identifiable for no reason. Use scale='none', or move the parameter "
                "off zero."
            )
    integrator = model.integrator if integrator is None else integrator
    S, y, result, _ = run_kernel(
        _sensitivity,
        model,
        theta,
        times,
        integrator,
        scale,
        throw=throw,
        message=lambda out: failure_message(model, out[-1], integrator),
        optimize=solve_optimized(),
    )
    return Sensitivity(
        matrix=S,
        outputs=y,
        times=times,
        names=model.parameters.names,
        output_names=model.output_names,
        scale=scale,
        result=result,
        accuracy=accuracy(model, integrator, S.dtype),
        units=_model_units(model.parameters, theta, scale),
    )


def _model_units(parameters, theta, scale) -> Array:
    """A model's columns are per unit of each parameter (`scale="none"`): its box width
    (`|theta|` where the box is unbounded or empty, 1 at 0); per log unit for
    `"relative"`: 1."""
    if scale == SensitivityScale.relative:
        return jnp.ones_like(jnp.asarray(parameters.nominal))
    return box_units(parameters.lower, parameters.upper, theta)


@diagnosed(solve_failure_point)
def sensitivity_matrix(
    model: AbstractModel,
    theta: ArrayLike | dict | Sequence | None = None,
    times: ArrayLike | Sequence | None = None,
    *,
    scale: SensitivityScale | str = SensitivityScale.none,
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> Float[Array, "rows p"]:
    """The sensitivity matrix `S[i, j] = d y_i / d theta_j` of the model outputs.

    By default the sensitivity system is integrated with the state, so the step-size
    controller bounds its error (see `ji.SensitivityEquations`); pass
    `integrator=ji.Integrator(..., sensitivity=ji.DifferentiateSolver())` for the
    derivative of the discretised solve instead.

    **Arguments:**

    - `model`: an `ODEModel`.
    - `theta`: parameters in the model's order, a `{name: value}` dict, or `None` for the
      nominal values.
    - `times`: observation times (default `model.times`).
    - `scale`: `ji.SensitivityScale.none` (or `"none"`) for `dy/dtheta`;
      `ji.SensitivityScale.relative` (or `"relative"`) for `(theta_j / y_i)
      dy_i/dtheta_j`, the scaled matrix `B_N` of Alberton et al. (2013), eq. (2).
    - `integrator`: solver and tolerances (default: the model's).
    - `throw`: raise on a failed solve (default, on a concrete call); under `jit`, `vmap`
      or `ji.sweep` failures become NaN matrices with a per-sample flag instead, unless
      `throw=True`; `False`: never raise.

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


class LSensitivity(eqx.Module):
    """Lexicographic (L-) sensitivities of the outputs (Abdelfattah, Stechlinski & Eisa
    2024, eqs. 4-13).

    **Fields:**

    - `Y`: `(rows, k)`, the LD-derivative of the outputs in the directions `M`
      (eq. 7), rows in time-major order as for `sensitivity_matrix`.
    - `L`: `(rows, p)`, the L-sensitivity `S^L = Y M^{-1}` (a right inverse; for
      `M = [d I]`, `Y[:, 1:]`, eq. 13): the L-SERC matrix of eq. (12). For a smooth model
      it equals the classical sensitivity matrix.
    - `directions`: the `(p, k)` directions matrix `M`.
    - `outputs`, `times`, `names`, `output_names`, `result`, `accuracy`: as for
      `Sensitivity`.
    """

    Y: Float[Array, "rows k"]
    L: Float[Array, "rows p"]
    directions: Float[Array, "p k"]
    outputs: Float[Array, " rows"]
    times: Float[Array, " n"]
    names: tuple[str, ...] = eqx.field(static=True)
    output_names: tuple[str, ...] | None = eqx.field(static=True)
    result: RESULTS
    accuracy: float | None = eqx.field(static=True, default=None)

    @property
    def ok(self) -> Bool[ArrayLike, "*batch"]:
        """Whether the solve succeeded with finite L-sensitivities."""
        return succeeded(self.result)

    def to_dict(self) -> dict:
        return {
            "Y": np.asarray(self.Y).tolist(),
            "L": np.asarray(self.L).tolist(),
            "directions": np.asarray(self.directions).tolist(),
            "names": list(self.names),
            "ok": bool(self.ok),
            "result": result_names(self.result),
        }

    def __repr__(self) -> str:
        return (
            f"LSensitivity(L {'x'.join(map(str, self.L.shape))}, "
            f"k={self.directions.shape[-1]} directions, parameters={list(self.names)}, "
            f"ok={np.asarray(self.ok).tolist()})"
        )


@eqx.filter_jit
def _ld_sensitivity(model, theta, times, M, first_is_direction, integrator, throw):
    y, Y, solved = forward_sensitivities(model, theta, times, integrator, M)
    result = checked(solved.result, jnp.all(jnp.isfinite(Y)), RESULTS.nonfinite_sensitivity)
    ok = result == RESULTS.successful
    if first_is_direction:
        L = Y[:, 1:]
    else:
        L = matmul(Y, jnp.linalg.pinv(after(M, Y)))
    solved = solved._replace(result=result)
    if throw:  # (False, or the error mode: `run_kernel`)
        L = raise_if_failed(model, L, solved)
    nan = jnp.asarray(jnp.nan, L.dtype)
    return jnp.where(ok, Y, nan), jnp.where(ok, L, nan), y, result, status(solved)


@diagnosed(solve_failure_point)
def ld_sensitivity(
    model: AbstractModel,
    theta: ArrayLike | dict | Sequence | None = None,
    times: ArrayLike | Sequence | None = None,
    M: ArrayLike | Sequence | Sequence | None = None,
    *,
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> LSensitivity:
    """Lexicographic sensitivities of a (possibly nonsmooth) ODE or DAE model
    (Abdelfattah, Stechlinski & Eisa 2024, Proposition 1 and eq. 13).

    All k direction columns are propagated together through the solver, and every
    `nabs`/`nmax`/`nmin`/`nmid` in the model takes one branch for all of them,
    lexicographically: the result is the LD-derivative of the discretised solution, not
    k independent directional derivatives.

    **Arguments:**

    - `model`, `theta`, `times`, `integrator`, `throw`: as for `sensitivity_matrix`.
    - `M`: a probing direction `d` of shape `(p,)`, giving `M = [d I]` (default
      `d = e_1`), or a full `(p, k)` directions matrix of full row rank.

    **Returns:** an `LSensitivity`; its `L` is the L-SERC matrix.

    **Example:**

    ```python
    model = ji.models.load("nonsmooth_dae_example")
    ls = ji.ld_sensitivity(model, model.THETA_STAR, model.times, jnp.array([1.0, 0, 0, 0]))
    ls.L  # (17, 4)
    ```
    """
    check_model(model)
    theta = check_theta(model, theta)
    times = check_times(model, times)
    p = model.parameters.p
    if M is None:
        M = jnp.zeros(p).at[0].set(1.0)
    M = jnp.asarray(M, dtype=float)
    if M.shape == (p,):
        first_is_direction = True
        M = directions_matrix(M)
    elif M.ndim == 2 and M.shape[0] == p and M.shape[1] >= p:
        first_is_direction = False
    else:
        raise ValueError(
            f"M must be a direction of shape ({p},) or a ({p}, k) matrix with k >= {p} "
            f"(full row rank); got shape {M.shape}."
        )
    integrator = model.integrator if integrator is None else integrator
    Y, L, y, result, _ = run_kernel(
        _ld_sensitivity,
        model,
        theta,
        times,
        M,
        first_is_direction,
        integrator,
        throw=throw,
        message=lambda out: failure_message(model, out[-1]),
    )
    return LSensitivity(
        Y=Y,
        L=L,
        directions=M,
        outputs=y,
        times=times,
        names=model.parameters.names,
        output_names=model.output_names,
        result=result,
        accuracy=accuracy(model, integrator, L.dtype),
    )
