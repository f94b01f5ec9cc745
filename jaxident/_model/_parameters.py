"""Named parameter vectors with nominal values and bounds."""

import difflib
from collections.abc import Iterator, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._runtime._host import array_module, device_array


VectorLike = ArrayLike | Sequence


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _vector(x) -> Array:
    """`x` as a float array, without compiling where it is concrete (`device_array`)."""
    return device_array(x if isinstance(x, (jax.Array, jax.core.Tracer)) else np.asarray(x), float)


def _unknown(name: str, names: Sequence[str]) -> ValueError:
    close = difflib.get_close_matches(str(name), list(names), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"Unknown parameter {name!r}; the parameters are {list(names)}.{hint}")


def box_units(lower, upper, theta) -> Array:
    """The size of a unit move of each parameter on a linear scale, so that columns of a
    sensitivity matrix compare: the box width `upper - lower`, or `|theta|` where the
    box is unbounded or empty, or 1 where that is 0 too. Jittable; computed by NumPy for
    concrete values."""
    xp = array_module(lower, upper, theta)
    lower, upper, theta = (xp.asarray(a, dtype=float) for a in (lower, upper, theta))
    width = upper - lower
    size = xp.where(theta != 0, xp.abs(theta), 1.0)
    return device_array(xp.where(xp.isfinite(width) & (width > 0), width, size))


class Parameters(eqx.Module):
    """The named parameters of a model: names, nominal values and bounds.

    **Arguments:**

    - `names`: unique parameter names, in the order of the parameter vector and of the
      columns of every sensitivity matrix.
    - `nominal`: nominal values.
    - `lower`, `upper`: bounds; `-inf`/`inf` mean unbounded (fine for estimation, refused
      by `ji.latin_hypercube`). When both are omitted they default to
      `nominal * (1 -/+ rel)` (the CSS paper's sampling box `[0.5 q*, 1.5 q*]` for
      `rel = 0.5`), ordered so that `lower <= upper` for negative values too.
    - `rel`: the relative half-width of the default box, a positive number.

    **Raises:** `ValueError` for duplicate or empty names, mismatched lengths, non-finite
    nominal values, NaN bounds, `lower > upper`, a nominal value outside its bounds, a
    `rel` that is not positive, or a default box that would be empty (nominal value 0:
    give `lower` and `upper`).

    **Example:**

    ```python
    params = ji.Parameters(["beta", "gamma"], [0.8, 0.14])
    params.index("gamma")   # 1
    params.bounds           # (2, 2) array of [lower, upper] rows
    ```
    """

    names: tuple[str, ...] = eqx.field(static=True)
    nominal: Float[Array, " p"]
    lower: Float[Array, " p"]
    upper: Float[Array, " p"]

    def __init__(
        self,
        names: Sequence[str],
        nominal: VectorLike,
        lower: VectorLike | None = None,
        upper: VectorLike | None = None,
        *,
        rel: float = 0.5,
    ):
        if isinstance(names, str):
            raise TypeError("names must be a sequence of strings, not a single string.")
        names = tuple(names)
        if not names:
            raise ValueError("A model needs at least one parameter.")
        for n in names:
            if not isinstance(n, str) or not n:
                raise ValueError(f"Parameter names must be non-empty strings, got {n!r}.")
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"Duplicate parameter names: {dups}.")
        p = len(names)
        nominal = _vector(nominal)
        if (lower is None) != (upper is None):
            raise ValueError("Give both lower and upper bounds, or neither.")
        if lower is None:
            if not (isinstance(rel, (int, float)) and np.isfinite(rel) and rel > 0):
                raise ValueError(f"rel must be a positive number, got {rel!r}.")
            if _is_concrete(nominal) and nominal.shape == (p,):
                zero = [names[i] for i in np.flatnonzero(np.asarray(nominal) == 0)]
                if zero:
                    raise ValueError(
                        f"Nominal value 0 for {zero}: the default box nominal * (1 -/+ rel) "
                        "is empty there. Give lower and upper bounds."
                    )
            # in NumPy where the values are concrete (a model defined at import: no
            # small programs to compile)
            xp = np if _is_concrete(nominal) else jnp
            nom = np.asarray(nominal) if xp is np else nominal
            a, b = nom * (1 - rel), nom * (1 + rel)
            lower, upper = xp.minimum(a, b), xp.maximum(a, b)
        lower = _vector(lower)
        upper = _vector(upper)
        for what, arr in [("nominal", nominal), ("lower", lower), ("upper", upper)]:
            if arr.shape != (p,):
                raise ValueError(
                    f"{what} has shape {arr.shape}, but there are {p} parameter names."
                )
        if all(_is_concrete(a) for a in (nominal, lower, upper)):
            nom, lo, up = (np.asarray(a) for a in (nominal, lower, upper))
            bad = [names[i] for i in np.flatnonzero(~np.isfinite(nom))]
            if bad:
                raise ValueError(f"Non-finite nominal values for {bad}.")
            bad = [names[i] for i in np.flatnonzero(np.isnan(lo) | np.isnan(up))]
            if bad:
                raise ValueError(f"NaN bounds for {bad}.")
            bad = [f"{names[i]} ({lo[i]:g} > {up[i]:g})" for i in np.flatnonzero(lo > up)]
            if bad:
                raise ValueError(f"Lower bound above upper bound for {', '.join(bad)}.")
            bad = [names[i] for i in np.flatnonzero((nom < lo) | (nom > up))]
            if bad:
                raise ValueError(f"Nominal values outside their bounds for {bad}.")
        self.names = names
        self.nominal = nominal
        self.lower = lower
        self.upper = upper

    def __len__(self) -> int:
        return len(self.names)

    @property
    def p(self) -> int:
        return len(self.names)

    @property
    def bounds(self) -> Float[Array, "p 2"]:
        """`(p, 2)` array of `[lower, upper]` rows."""
        return jnp.stack([self.lower, self.upper], axis=-1)

    def index(self, name: str) -> int:
        """Position of parameter `name`; a clear error with a suggestion if unknown."""
        try:
            return self.names.index(name)
        except ValueError:
            raise _unknown(name, self.names) from None

    def indices(self, names: Sequence[str] | str) -> tuple[int, ...]:
        if isinstance(names, str):
            names = (names,)
        return tuple(self.index(n) for n in names)

    def view(self, theta: VectorLike) -> "ParameterValues":
        """Named access to a parameter vector: `params.view(theta)["beta"]`."""
        return ParameterValues(self.names, theta)

    def replace(
        self,
        nominal: VectorLike | None = None,
        lower: VectorLike | None = None,
        upper: VectorLike | None = None,
    ) -> "Parameters":
        """A copy with some of nominal values / bounds replaced."""
        return Parameters(
            self.names,
            self.nominal if nominal is None else nominal,
            self.lower if lower is None else lower,
            self.upper if upper is None else upper,
        )

    def __repr__(self) -> str:
        w = max(len(n) for n in self.names)
        lines = [f"Parameters (p={self.p}):", f"  {'name':<{w}}  {'nominal':>11}  bounds"]
        for n, v, lo, up in zip(self.names, self.nominal, self.lower, self.upper):
            lines.append(f"  {n:<{w}}  {float(v):>11.5g}  [{float(lo):.5g}, {float(up):.5g}]")
        return "\n".join(lines)


class ParameterValues(eqx.Module):
    """A parameter vector with names, as handed to a model's methods.

    `theta["beta"]`, `theta.beta`, `theta[0]` and `beta, gamma = theta` all work, inside
    `jit` and `vmap` too; `theta.values` is the plain array. Made from `names` (a tuple
    of strings) and `values` (an array with the parameters on its last axis).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    values: Float[Array, " p"]

    def __init__(self, names: Sequence[str], values: VectorLike):
        self.names = tuple(names)
        values = jnp.asarray(values)
        if values.shape != (len(self.names),):
            raise ValueError(
                f"A parameter vector of shape {values.shape} for {len(self.names)} parameters "
                f"{list(self.names)}; expected shape ({len(self.names)},)."
            )
        self.values = values

    def __getitem__(self, key):
        if isinstance(key, str):
            if key not in self.names:
                raise _unknown(key, self.names)
            return self.values[self.names.index(key)]
        return self.values[key]

    def __getattr__(self, name: str):
        try:
            names = object.__getattribute__(self, "names")
            values = object.__getattribute__(self, "values")
        except AttributeError:
            raise AttributeError(name) from None
        if name in names:
            return values[names.index(name)]
        raise AttributeError(f"No parameter or attribute {name!r}; parameters: {list(names)}.")

    def __iter__(self) -> Iterator[Array]:
        return iter(self.values[i] for i in range(len(self.names)))

    def __len__(self) -> int:
        return len(self.names)
