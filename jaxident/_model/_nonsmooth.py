"""Nonsmooth primitives with lexicographic directional derivatives (LD-derivatives).

The LD-derivative of a lexicographically smooth function `f` at `x` in the directions
`M = [m1 ... mk]` (Nesterov 2005; Khan & Barton 2015) is computed column by column, but
every kink takes *one* branch for all columns, chosen by the first nonzero entry of
(value, column 1, column 2, ...). For example
`abs'(x; M) = fsign(x, m1, ..., mk) M`, with `fsign` the sign of the first nonzero
argument (zero if all are zero).

A plain `jax.vmap(jax.jvp)` over the columns is *not* this: each column would choose its
own branch. jaxident evaluates the columns under a `vmap` with the reserved axis name
`LD_AXIS`, and the derivative rule of every primitive here gathers the tangents of all
columns over that axis (`lax.all_gather`) to decide the branch lexicographically. Other
vmaps (over samples, or inside a user's model) are untouched, because the collective
names its axis. Outside `ld_jvp` the derivative rules are the ordinary ones (linear in
the tangent, so reverse mode works), with `sign(0) = 0` at a kink as for `jnp.abs`.
"""

import contextlib
import contextvars
from collections.abc import Callable

import jax
import jax.lax as lax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike


LD_AXIS = "_jaxident_ld_directions"
_SWITCHES = contextvars.ContextVar("jaxident_switches", default=None)


@contextlib.contextmanager
def record_switches():
    """Collect the switching functions (the argument of `nabs`, `x - y` of `nmax` and
    `nmin`) evaluated while tracing the body: the step-size controller uses them to step
    onto kinks (`jaxident._solve._forward`)."""
    found = []
    token = _SWITCHES.set(found)
    try:
        yield found
    finally:
        _SWITCHES.reset(token)


def _note(d):
    found = _SWITCHES.get()
    if found is not None:
        found.append(jnp.ravel(d))


def fsign(x: ArrayLike, *directions: ArrayLike) -> Array:
    """The sign of the first nonzero among `x` and the `directions` `m1, m2, ...`
    (elementwise), 0 if all are zero."""
    s = jnp.sign(jnp.asarray(x))
    for m in directions:
        s = jnp.where(s == 0, jnp.sign(m), s)
    return s


def _lex_sign(d: Array, td: Array) -> Array:
    """`fsign(d, td_1, ..., td_k)` where `td_j` are the tangents of all the LD directions
    (under the `LD_AXIS` vmap of `ld_jvp`). Elsewhere `sign(d)`: the ordinary derivative
    rule, linear in the tangent, so that `grad` and `jacrev` work (at a kink it is the
    convention of `jnp.abs`)."""
    try:
        T = lax.all_gather(td, LD_AXIS)
    except NameError:  # not inside ld_jvp
        return jnp.sign(d)
    nonzero = T != 0
    first = jnp.take_along_axis(T, jnp.argmax(nonzero, axis=0)[None], axis=0)[0]
    lex = jnp.where(jnp.any(nonzero, axis=0), jnp.sign(first), jnp.zeros_like(first))
    return jnp.where(d != 0, jnp.sign(d), lex)


@jax.custom_jvp
def _abs(x):
    return jnp.abs(x)


@_abs.defjvp
def _abs_jvp(primals, tangents):
    (x,), (tx,) = primals, tangents
    return jnp.abs(x), _lex_sign(x, tx) * tx


@jax.custom_jvp
def _max(x, y):
    return jnp.maximum(x, y)


@_max.defjvp
def _max_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    s = _lex_sign(x - y, tx - ty)
    return jnp.maximum(x, y), jnp.where(s >= 0, tx, ty)


@jax.custom_jvp
def _min(x, y):
    return jnp.minimum(x, y)


@_min.defjvp
def _min_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    s = _lex_sign(x - y, tx - ty)
    return jnp.minimum(x, y), jnp.where(s <= 0, tx, ty)


def _float(*xs):
    xs = [jnp.asarray(x) for x in xs]
    dtype = jnp.result_type(*[x.dtype for x in xs], float)
    xs = [x.astype(dtype) for x in xs]
    return jnp.broadcast_arrays(*xs)


def nabs(x: ArrayLike) -> Array:
    """`|x|` for an array `x`, with the LD-derivative `fsign(x, m1, ..., mk) M` (paper
    eq. 2)."""
    (x,) = _float(x)
    _note(x)
    return _abs(x)


def nmax(x: ArrayLike, y: ArrayLike) -> Array:
    """`max(x, y)`, whose LD-derivative takes the directions of `x` when
    `fsign(x - y, Mx - My) >= 0` and those of `y` otherwise (the left-shifted
    lexicographic maximum `slmax`)."""
    x, y = _float(x, y)
    _note(x - y)
    return _max(x, y)


def nmin(x: ArrayLike, y: ArrayLike) -> Array:
    """`min(x, y)`, the lexicographic minimum: the directions of `x` when
    `fsign(x - y, Mx - My) <= 0`, else those of `y`."""
    x, y = _float(x, y)
    _note(x - y)
    return _min(x, y)


def nmid(x: ArrayLike, y: ArrayLike, z: ArrayLike) -> Array:
    """The median of `x`, `y` and `z`, as `max(min(x, y), min(max(x, y), z))`; its
    LD-derivative follows from those of `nmax` and `nmin`."""
    x, y, z = _float(x, y, z)
    return nmax(nmin(x, y), nmin(nmax(x, y), z))


def ld_jvp(f: Callable, primals: tuple, directions: tuple, *, has_aux: bool = False) -> tuple:
    """The LD-derivative of `f` at `primals` in k directions.

    **Arguments:**

    - `f`: a function of `len(primals)` arguments, built from smooth JAX operations and
      `nabs`, `nmax`, `nmin`, `nmid`.
    - `primals`: a tuple of arguments.
    - `directions`: a tuple like `primals` whose leaves carry an extra trailing axis of
      length k: column j is the j-th direction.

    - `has_aux`: `f` returns `(out, aux)`; `aux` is returned undifferentiated.

    **Returns:** `(f(*primals), f'(primals; M))` (and `aux`), the derivative with a
    trailing axis of length k. For smooth `f` it is `J M`. The primal computation is done
    once, not once per column.

    **Example:**

    ```python
    ji.ld_jvp(lambda x: ji.nabs(x), (0.0,), (jnp.array([0.0, -1.0, 1.0]),))
    # (0.0, [0., 1., -1.]): fsign(0, 0, -1, 1) = -1
    ```
    """
    primals = tuple(primals)
    directions = tuple(directions)
    leaves = jax.tree.leaves(directions)
    if not leaves:
        raise ValueError("ld_jvp needs at least one direction array.")
    k = leaves[0].shape[-1]
    if any(x.shape[-1] != k for x in leaves):
        raise ValueError("Every directions leaf needs the same trailing number of columns.")

    def column(*tangents):
        if has_aux:
            out, tan, aux = jax.jvp(f, primals, tangents, has_aux=True)
            return out, tan, aux
        out, tan = jax.jvp(f, primals, tangents)
        return out, tan, None

    in_axes = tuple(jax.tree.map(lambda x: x.ndim - 1, d) for d in directions)
    # The primal and aux do not depend on the directions: one copy, not k.
    out, tangent, aux = jax.vmap(
        column, in_axes=in_axes, out_axes=(None, -1, None), axis_name=LD_AXIS
    )(*directions)
    return (out, tangent, aux) if has_aux else (out, tangent)


def directions_matrix(d: Array) -> Array:
    """`M = [d I]` for a probing direction `d` (eq. 13)."""
    p = d.shape[0]
    return jnp.concatenate([d[:, None], jnp.eye(p, dtype=d.dtype)], axis=1)
