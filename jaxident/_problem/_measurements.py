"""The checked inputs of a least-squares problem: measured data, their standard
deviations (a `MeasurementError` or given values), bounds with the change of variables
that enforces them, and the mask of free parameters."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._solve._simulate import Trajectory


def _as_float(x) -> np.ndarray:
    return np.asarray(x, dtype=float)


class MeasurementError(eqx.Module):
    """Measurement standard deviations `sigma_i = relative * |y_i| + absolute`, with
    `y_i` the measured value (Alberton et al. 2013, eq. 26: `sigma = a y + b`).

    **Arguments:** `relative` (`a`, default 0) and `absolute` (`b`, default 1): scalars
    (one error model for every output) or one value per output, `(n_outputs,)` (an
    error model per measured species). The paper's E. coli study used `a = 1e-2`,
    `b = 1e-6` for every species.
    """

    relative: Float[np.ndarray, "*outputs"] = eqx.field(default=0.0, converter=_as_float)
    absolute: Float[np.ndarray, "*outputs"] = eqx.field(default=1.0, converter=_as_float)

    def __check_init__(self):
        a, b = self.relative, self.absolute
        if a.ndim > 1 or b.ndim > 1:
            raise ValueError(
                "MeasurementError takes scalars or one value per output (1-D); got shapes "
                f"{a.shape} and {b.shape}."
            )
        ok = np.all(np.isfinite(a)) and np.all(np.isfinite(b))
        if not (ok and np.all(a >= 0) and np.all(b >= 0) and np.all(a + b > 0)):
            raise ValueError(
                "MeasurementError needs finite relative >= 0 and absolute >= 0, not both "
                f"zero for any output; got relative={a.tolist()}, absolute={b.tolist()}."
            )

    def sigma(
        self, data: Float[Array | np.ndarray, "times outputs"]
    ) -> Float[Array, "times outputs"]:
        """The standard deviations of `(n_times, n_outputs)` data."""
        n_out = data.shape[-1]
        for name, v in (("relative", self.relative), ("absolute", self.absolute)):
            if v.ndim == 1 and v.shape[0] != n_out:
                raise ValueError(
                    f"MeasurementError.{name} has {v.shape[0]} values but the model has "
                    f"{n_out} outputs: give a scalar or one value per output."
                )
        return jnp.asarray(self.relative) * jnp.abs(data) + jnp.asarray(self.absolute)

    def __repr__(self) -> str:
        def show(v):
            return f"{float(v):g}" if v.ndim == 0 else "[" + ", ".join(f"{x:g}" for x in v) + "]"

        return f"MeasurementError(relative={show(self.relative)}, absolute={show(self.absolute)})"


def check_data(data, n_times, n_out):
    """Flat, time-major data; NaN marks a missing observation (left out of every fit
    and Fisher matrix), inf is an error."""
    if isinstance(data, Trajectory):
        data = data.ys
    data = jnp.asarray(data, dtype=float)
    rows = n_times * n_out
    if data.shape == (n_times, n_out) or data.shape == (rows,):
        data = data.reshape(-1)
    elif n_out == 1 and data.shape == (n_times,):
        pass
    else:
        raise ValueError(
            f"data has shape {data.shape}; expected ({n_times}, {n_out}) (times x outputs) or "
            f"({rows},) in time-major order."
        )
    if not isinstance(data, jax.core.Tracer):
        if bool(jnp.any(jnp.isinf(data))):
            i, j = divmod(int(np.flatnonzero(np.isinf(np.asarray(data)))[0]), n_out)
            raise ValueError(
                f"data contains inf (the first at time index {i}, output {j}); mark a "
                "missing observation with NaN, or drop it."
            )
        if not bool(jnp.any(jnp.isfinite(data))):
            raise ValueError("data has no finite value: every observation is NaN (missing).")
    return data


def box_fraction(theta, lower, upper, bounded):
    """Where `theta` lies in its box, in the coordinates of `box_transform`: `(frac,
    box, logbox, lo, width)`, with `frac` in `[0, 1]` from the lower to the upper bound
    (of `log theta` where both bounds are positive) for the parameters with two finite
    bounds (`box`) when `bounded`."""
    box = bounded & jnp.isfinite(lower) & jnp.isfinite(upper)
    logbox = box & (lower > 0)

    def warp(x):
        return jnp.where(logbox, jnp.log(jnp.where(logbox, x, 1.0)), x)

    lo = jnp.where(box, warp(lower), 0.0)
    width = jnp.where(box, warp(upper) - lo, 1.0)
    return (warp(theta) - lo) / width, box, logbox, lo, width


def near_bound(theta, lower, upper, bounded, rel: float = 1e-3):
    """Which parameters lie within `rel` of their box's width from a bound, in the
    coordinates of `box_transform` (logarithmic where both bounds are positive): there
    the change of variables has flattened the parameter's effect by a factor `rel`, so a
    fit has all but stopped moving it. Parameters without two finite bounds never are.
    One rule for `Estimate.at_bound` and `StepwiseSelection.at_bound`."""
    frac, box, _, _, _ = box_fraction(theta, lower, upper, bounded)
    return box & ((frac <= rel) | (frac >= 1.0 - rel))


def box_transform(theta0, lower, upper, bounded):
    """z -> theta: scaled (theta = s z), or, for parameters with two finite bounds when
    `bounded`, a sigmoid onto the box: in log-space when both bounds are positive (rate
    constants spanning decades), `exp(log lo + log(up/lo) sigmoid(z))`, else
    `lo + (up - lo) sigmoid(z)`."""
    scale = jnp.where(jnp.abs(theta0) > 0, jnp.abs(theta0), 1.0)
    frac, box, logbox, lo, width = box_fraction(theta0, lower, upper, bounded)
    frac = jnp.clip(frac, 1e-6, 1 - 1e-6)
    z0 = jnp.where(box, jnp.log(frac) - jnp.log1p(-frac), theta0 / scale)

    def to_theta(z):
        inside = lo + width * jax.nn.sigmoid(z)
        inside = jnp.where(logbox, jnp.exp(jnp.where(logbox, inside, 0.0)), inside)
        return jnp.where(box, inside, scale * z)

    return to_theta, z0


def bounds_of(model, theta0, bounds, traced):
    """`(lower, upper, bounded)` from `True` (the model's), `False`/`None` or a pair."""
    if bounds is True:
        lower, upper = model.parameters.lower, model.parameters.upper
    elif bounds is False or bounds is None:
        lower, upper = jnp.full_like(theta0, -jnp.inf), jnp.full_like(theta0, jnp.inf)
    else:
        lower, upper = (jnp.asarray(b, dtype=float) for b in bounds)
        if lower.shape != theta0.shape or upper.shape != theta0.shape:
            raise ValueError(f"bounds need shape {theta0.shape} each.")
    bounded = bounds is not False and bounds is not None
    if bounded and not traced:
        if not bool(jnp.all(lower < upper)):
            raise ValueError("Need lower < upper for every parameter.")
        out = np.flatnonzero(np.asarray((theta0 < lower) | (theta0 > upper)))
        if out.size:
            names = [model.parameters.names[i] for i in out]
            raise ValueError(
                f"theta0 lies outside the bounds for {names}: start inside the box, or "
                "widen the bounds (they are not clipped silently)."
            )
    return lower, upper, bounded


def sigma_of(sigma, data, times, n_out, traced):
    """Flat standard deviations from a scalar, one per output, one per observation, or
    a `MeasurementError` (computed from the data); `inf` where a datum is missing (NaN),
    so its weighted residual and sensitivity row are zero."""
    n_times = times.shape[0]
    missing = jnp.isnan(data)
    if isinstance(sigma, MeasurementError):
        error = sigma
        sigma = error.sigma(jnp.where(missing, 0.0, data).reshape(n_times, n_out)).reshape(-1)
        zero = np.flatnonzero(np.asarray((sigma <= 0) & ~missing)) if not traced else ()
        if len(zero):
            i, j = divmod(int(zero[0]), n_out)
            raise ValueError(
                f"{error} gives sigma = 0 for {len(zero)} datum(s) equal to 0 (the first at "
                f"t = {float(times[i]):g}, output {j}): a zero standard deviation makes "
                "the weighted residual infinite. Give an absolute part, e.g. "
                "MeasurementError(relative, 1e-6)."
            )
        return jnp.where(missing, jnp.inf, sigma)
    sigma = jnp.asarray(sigma, dtype=float)
    if sigma.shape in ((), (n_out,), (n_times, n_out)):
        sigma = jnp.broadcast_to(sigma, (n_times, n_out)).reshape(-1)
    elif sigma.shape != data.shape:
        raise ValueError(
            f"sigma has shape {sigma.shape}; give a scalar, one per output ({n_out},), one "
            f"per observation ({n_times}, {n_out}) (times x outputs) or "
            f"({n_times * n_out},), or a ji.MeasurementError."
        )
    bad = ~missing & ~(jnp.isfinite(sigma) & (sigma > 0))
    if not traced and bool(jnp.any(bad)):
        raise ValueError("sigma must be positive and finite (where a datum is given).")
    return jnp.where(missing, jnp.inf, sigma)


def free_mask(model, free):
    """A boolean mask over the parameters from `None` (all), names or a mask."""
    p = model.parameters.p
    if free is None:
        return jnp.ones(p, bool)
    if isinstance(free, str):
        free = (free,)
    if isinstance(free, (tuple, list)) and all(isinstance(f, str) for f in free):
        mask = np.zeros(p, bool)
        mask[list(model.parameters.indices(tuple(free)))] = True
        return jnp.asarray(mask)
    mask = jnp.asarray(free)
    if mask.dtype != bool or mask.shape != (p,):
        raise ValueError(
            f"free must be parameter names or a boolean mask of shape ({p},), got "
            f"{mask.dtype} of shape {mask.shape}."
        )
    return mask
