"""Latin-hypercube sampling of a parameter box."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ._parameters import Parameters


def _as_bounds(bounds) -> tuple[Array, Array]:
    if isinstance(bounds, Parameters):
        lo, up = bounds.lower, bounds.upper
    elif isinstance(bounds, tuple) and len(bounds) == 2:
        lo, up = jnp.asarray(bounds[0], float), jnp.asarray(bounds[1], float)
    else:
        b = jnp.asarray(bounds, float)
        if b.ndim != 2 or b.shape[1] != 2:
            raise ValueError(
                f"bounds must be a (p, 2) array of [lower, upper] rows, a (lower, upper) pair, "
                f"or a ji.Parameters; got an array of shape {b.shape}."
            )
        lo, up = b[:, 0], b[:, 1]
    if lo.ndim != 1 or lo.shape != up.shape:
        raise ValueError(f"lower and upper bounds have shapes {lo.shape} and {up.shape}.")
    if not isinstance(lo, jax.core.Tracer) and not isinstance(up, jax.core.Tracer):
        lo_np, up_np = np.asarray(lo), np.asarray(up)
        if not (np.all(np.isfinite(lo_np)) and np.all(np.isfinite(up_np))):
            raise ValueError("Latin-hypercube bounds must be finite.")
        bad = np.flatnonzero(lo_np > up_np)
        if bad.size:
            raise ValueError(f"Lower bound above upper bound in dimensions {bad.tolist()}.")
    return lo, up


def check_key(key) -> None:
    """A `jax.random` key: a typed key (`jax.random.key(0)`) or a raw `uint32[2]` one."""
    typed = hasattr(key, "dtype") and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    raw = hasattr(key, "dtype") and key.dtype == jnp.uint32 and np.shape(key)[-1:] == (2,)
    if not (typed or raw):
        raise TypeError(
            f"key must be a jax.random key, e.g. jax.random.key(0); got {key!r}"
            + (" (an integer seed: wrap it as jax.random.key(seed))." if np.ndim(key) == 0 else ".")
        )


def latin_hypercube(key: PRNGKeyArray, bounds: Any, n: int) -> Float[Array, "n p"]:
    """`n` Latin-hypercube samples of a box (McKay, Beckman & Conover 1979).

    Each coordinate's range is cut into `n` equal strata; every stratum holds exactly one
    sample, at a uniform position inside it, and the strata are matched across
    coordinates by independent random permutations.

    **Arguments:**

    - `key`: a `jax.random` key.
    - `bounds`: a `ji.Parameters`, a `(p, 2)` array of `[lower, upper]` rows, or a pair
      `(lower, upper)`.
    - `n`: the number of samples.

    **Returns:** an `(n, p)` array.

    **Example:**

    ```python
    samples = ji.latin_hypercube(jax.random.key(0), model.parameters.bounds, 10_000)
    ```
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}.")
    check_key(key)
    lo, up = _as_bounds(bounds)
    p = lo.shape[0]
    kperm, kjit = jax.random.split(key)
    perms = jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(kperm, p))
    u = (perms.T.astype(lo.dtype) + jax.random.uniform(kjit, (n, p), dtype=lo.dtype)) / n
    return lo + u * (up - lo)
