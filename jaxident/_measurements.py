"""The checked inputs of a least-squares problem: measured data, their standard
deviations (a `MeasurementError` or given values), bounds with the change of variables
that enforces them, and the mask of free parameters."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._simulate import Trajectory


class MeasurementError(eqx.Module):
    """Measurement standard deviations `sigma_i = relative * |y_i| + absolute`, with
    `y_i` the measured value (Alberton et al. 2013, eq. 26: `sigma = a y + b`).

    **Arguments:** `relative` (`a`, default 0) and `absolute` (`b`, default 1). The
    paper's E. coli study used `a = 1e-2`, `b = 1e-6`.
    """

    relative: float = 0.0
    absolute: float = 1.0

    def __check_init__(self):
        if not (self.relative >= 0 and self.absolute >= 0 and self.relative + self.absolute > 0):
            raise ValueError(
                "MeasurementError needs relative >= 0 and absolute >= 0, not both zero; got "
                f"relative={self.relative}, absolute={self.absolute}."
            )

    def sigma(self, data: Float[Array, " n"]) -> Float[Array, " n"]:
        return self.relative * jnp.abs(data) + self.absolute


def check_data(data, n_times, n_out):
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
    if not isinstance(data, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(data))):
        raise ValueError("data contains NaN or inf; drop those observations (or times).")
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
    a `MeasurementError` (computed from the data)."""
    n_times = times.shape[0]
    if isinstance(sigma, MeasurementError):
        error, sigma = sigma, sigma.sigma(data)
        zero = np.flatnonzero(np.asarray(sigma) <= 0) if not traced else ()
        if len(zero):
            i, j = divmod(int(zero[0]), n_out)
            raise ValueError(
                f"{error} gives sigma = 0 for {len(zero)} datum(s) equal to 0 (the first at "
                f"t = {float(times[i]):g}, output {j}): a zero standard deviation makes "
                "the weighted residual infinite. Give an absolute part, e.g. "
                f"MeasurementError({error.relative}, 1e-6)."
            )
        return sigma
    sigma = jnp.asarray(sigma, dtype=float)
    if sigma.shape in ((), (n_out,), (n_times, n_out)):
        sigma = jnp.broadcast_to(sigma, (n_times, n_out)).reshape(-1)
    elif sigma.shape != data.shape:
        raise ValueError(
            f"sigma has shape {sigma.shape}; give a scalar, one per output ({n_out},), one "
            f"per observation ({n_times}, {n_out}) (times x outputs) or "
            f"({n_times * n_out},), or a ji.MeasurementError."
        )
    if not traced and not bool(jnp.all(jnp.isfinite(sigma) & (sigma > 0))):
        raise ValueError("sigma must be positive and finite.")
    return sigma


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
