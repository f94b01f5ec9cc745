"""Checks of user input at trace time: models, parameter vectors, time grids.

A model's sizes are declared by what its methods return at the nominal parameters: the
state by `initial_state` (and `initial_algebraic_guess`), the observables by `output`.
Every other method must agree with them; JAX itself would broadcast a wrong shape or
clamp an index out of range without a word."""

import contextlib
import re
import weakref

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jaxtyping import Array

from .._runtime._host import device_array, is_traced
from ._base import AbstractModel, AlgebraicModel, DAEModel


_CONTROL_FLOW_HINT = (
    "uses Python control flow (`if`, `while`, `and`/`or`, `bool()`, `float()`, `int()`) "
    "on a value that depends on the state, the time or the parameters. Models are traced "
    "by JAX, so write `jnp.where(cond, a, b)` for a choice, `ji.nmax`/`ji.nmin`/`ji.nabs`/"
    "`ji.nmid` for kinks (their LD-derivatives are exact), or `jax.lax.cond`."
)


def _describe(tree) -> str:
    leaves, treedef = jax.tree.flatten(tree)
    if len(leaves) == 1 and treedef.num_nodes == 1:
        x = leaves[0]
        return f"an array of shape {tuple(np.shape(x))} ({jnp.result_type(x)})"
    return f"{type(tree).__name__} {jax.tree.map(lambda x: tuple(np.shape(x)), tree)}"


def _raw_state(model, name: str, x):
    """Checks on what an ODE model's `initial_state` returned, before it is
    turned into arrays: a list of numbers or a scalar gives a clear message, not a
    broadcasting error deep inside diffrax."""
    where = f"{type(model).__name__}.{name}"
    if isinstance(x, (list, tuple)) and x and all(np.ndim(v) == 0 for v in x):
        raise TypeError(
            f"{where} returned a {type(x).__name__} of {len(x)} numbers; return a 1-D array: "
            "`jnp.array([...])`, or `jnp.stack([...])` when the values depend on theta."
        )
    leaves = jax.tree.leaves(x)
    if not leaves:
        raise TypeError(f"{where} returned {x!r}; return a 1-D array of initial values.")
    for v in leaves:
        if np.ndim(v) == 0:
            raise ValueError(
                f"{where} returned a scalar; return a 1-D array, e.g. `jnp.array([x0])` or "
                "`jnp.atleast_1d(x0)`, and index it as `x[0]` in the other methods."
            )
        if not jnp.issubdtype(jnp.result_type(v), jnp.floating):
            raise TypeError(
                f"{where} returned {jnp.result_type(v)} values; the state must be floating "
                "point (write `jnp.array([1.0, 0.0])`, not `jnp.array([1, 0])`)."
            )
    return x


def _same_shapes(model, name: str, got, want, what: str) -> None:
    same_tree = jax.tree.structure(got) == jax.tree.structure(want)
    if not same_tree or any(
        np.shape(a) != np.shape(b) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want))
    ):
        raise ValueError(
            f"{type(model).__name__}.{name} returned {_describe(got)}, but {what} is "
            f"{_describe(want)}: it must return one value per {what.split()[-1]}, "
            "in the same shape."
        )


def _output_shape(model, y) -> None:
    if np.ndim(y) > 1:
        raise ValueError(
            f"{type(model).__name__}'s output must be a scalar or a 1-D vector (one entry per "
            f"observed quantity), got shape {tuple(np.shape(y))}. Stack the observables with "
            "`jnp.stack([...])`."
        )


def _calls(model):
    """The model's methods evaluated once at the nominal parameters (to trace), each
    with the checks of what it returns."""
    th0 = model.parameters.nominal

    if isinstance(model, AlgebraicModel):

        def run(theta):
            th = model.parameters.view(theta)
            y = model.response(model.conditions[0], th)
            _output_shape(model, y)
            return (y,)

        return run

    def run(theta):
        th = model.parameters.view(theta)
        t0 = jnp.asarray(model.t0, dtype=th0.dtype)
        if isinstance(model, DAEModel):  # converted as the DAE solver does (_dae.py)
            x0 = jnp.asarray(model.initial_state(th), dtype=float)
            w0 = jnp.atleast_1d(jnp.asarray(model.initial_algebraic_guess(th), dtype=float))
            dx = model.differential(t0, x0, w0, th)
            _same_shapes(model, "differential", dx, x0, "the differential state")
            g = model.algebraic(t0, x0, w0, th)
            _same_shapes(model, "algebraic", g, w0, "the algebraic state")
            y = model.output(t0, x0, w0, th)
        else:
            x0 = _raw_state(model, "initial_state", model.initial_state(th))
            x0 = jax.tree.map(jnp.asarray, x0)
            dx = model.vector_field(t0, x0, th)
            _same_shapes(model, "vector_field", dx, x0, "the initial state")
            y = model.output(t0, x0, th)
        _output_shape(model, y)
        return dx, y

    return run


# Models already checked, with their number of outputs: by structure, array shapes and
# Python scalars (instances of one class with arrays of the same shapes index alike), or
# by identity when the structure is not hashable.
_CHECKED: dict = {}
_CHECKED_IDS: dict = {}  # id -> (weak reference, number of outputs)


def _key(model):
    leaves, treedef = jax.tree.flatten(model)
    try:
        key = (
            type(model),
            treedef,
            tuple(
                x if isinstance(x, (bool, int, float, str)) else (np.shape(x), jnp.result_type(x))
                for x in leaves
            ),
        )
        hash(key)
        return key
    except TypeError:
        return None


def check_model_shapes(model: AbstractModel) -> int:
    """Trace the model's methods at the nominal parameters and check what they return:
    arrays of floats, a vector field of the state's shape, an output of at most one
    dimension, no Python control flow on traced values, and (where the model is
    concrete) no index out of bounds, which JAX would clamp silently.

    **Returns:** the number of outputs.

    **Raises:** `TypeError`/`ValueError`/`IndexError` naming the method and saying what to
    change."""
    key = _key(model)
    if key is not None and key in _CHECKED:
        return _CHECKED[key]
    ref, n_out = _CHECKED_IDS.get(id(model), (None, None))
    if ref is not None and ref() is model:
        return n_out
    run = _calls(model)
    th0 = model.parameters.nominal
    try:
        shapes = jax.eval_shape(run, th0)
    except jax.errors.ConcretizationTypeError as e:
        raise TypeError(f"{type(model).__name__} {_CONTROL_FLOW_HINT}\n({e})") from None
    if not is_traced(model):
        # Inside a caller's trace (where a new array is a tracer) the check must be
        # evaluated now. Only there: in that mode every operation on constants inside
        # the check's own trace runs and compiles on its own (most of E. coli's check).
        traced = is_traced(jnp.zeros(()))
        with jax.ensure_compile_time_eval() if traced else contextlib.nullcontext():
            err, _ = jax.jit(checkify.checkify(run, errors=checkify.index_checks))(th0)
        msg = err.get()
        if msg is not None:
            msg = msg.strip().split("\n")[0]
            if "Tracer" in msg:  # a trace of the check made outside a caller's is reused
                msg = re.sub(r": index .*", ".", msg)
            raise IndexError(
                f"{type(model).__name__} indexes an array out of bounds: "
                f"{msg} JAX clamps such an index silently (x[5] "
                "of a 3-vector reads x[2]); check the indices against the state and "
                "parameter sizes."
            )
    n_out = int(np.prod(shapes[-1].shape, dtype=int)) if shapes[-1].shape else 1
    if key is not None:
        _CHECKED[key] = n_out
    else:
        try:
            _CHECKED_IDS[id(model)] = (weakref.ref(model), n_out)
        except TypeError:  # pragma: no cover - not weak-referenceable
            pass
    return n_out


def check_count(name: str, value) -> int:
    """A step or point cap: a positive integer (not a bool, not a float)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def check_model(model) -> None:
    """A jaxident model whose methods return what they must (see `check_model_shapes`)."""
    if not isinstance(model, AbstractModel):
        raise TypeError(
            "Expected a jaxident model (a subclass of ji.ODEModel or ji.DAEModel), got "
            f"{type(model).__name__}."
        )
    check_model_shapes(model)


def check_theta(model, theta) -> Array:
    """`theta` as a checked float vector for `model` (anything with `parameters`: a
    model or a `ji.Problem`); `None` means the nominal values."""
    p = model.parameters.p
    if theta is None:
        return model.parameters.nominal
    if isinstance(theta, dict):
        unknown = [k for k in theta if k not in model.parameters.names]
        if unknown:
            model.parameters.index(unknown[0])  # raises with a suggestion
        missing = [n for n in model.parameters.names if n not in theta]
        if missing:
            raise ValueError(f"Parameter values missing for {missing}.")
        theta = jnp.stack([jnp.asarray(theta[n], float) for n in model.parameters.names])
    theta = device_array(theta)
    if theta.shape != (p,):
        raise ValueError(
            f"theta has shape {theta.shape}; {type(model).__name__} has {p} parameters "
            f"{list(model.parameters.names)}, so expected shape ({p},). For many parameter "
            "vectors use jax.vmap or ji.sweep."
        )
    if jnp.issubdtype(theta.dtype, jnp.complexfloating):
        raise TypeError(
            f"theta is {theta.dtype}: parameters are real numbers (pass theta.real if the "
            "imaginary part is zero)."
        )
    if not jnp.issubdtype(theta.dtype, jnp.floating):
        theta = theta.astype(float)
    if not isinstance(theta, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(theta))):
        bad = [model.parameters.names[i] for i in np.flatnonzero(~np.isfinite(np.asarray(theta)))]
        raise ValueError(f"Non-finite parameter values for {bad}.")
    return theta


def check_times(model: AbstractModel, times) -> Array:
    times = model.times if times is None else jnp.asarray(times, dtype=float)
    if times.ndim != 1 or times.shape[0] == 0:
        raise ValueError(f"times must be a non-empty 1-D array, got shape {times.shape}.")
    if isinstance(model, AlgebraicModel) and not isinstance(times, jax.core.Tracer):
        t, n = np.asarray(times), model.conditions.shape[0]
        if np.any(t != np.round(t)) or np.any(t < 0) or np.any(t >= n):
            raise ValueError(
                f"{type(model).__name__} is an AlgebraicModel: `times` are experiment indices, "
                f"integers in [0, {n}); got {t.tolist()[:8]}{'...' if t.size > 8 else ''}."
            )
    if not isinstance(times, jax.core.Tracer) and not isinstance(model.t0, jax.core.Tracer):
        t = np.asarray(times)
        if not np.all(np.isfinite(t)):
            raise ValueError("times contains NaN or inf.")
        if np.any(np.diff(t) <= 0):
            raise ValueError("times must be strictly increasing.")
        if t[0] < float(model.t0):
            raise ValueError(
                f"The first time {t[0]:g} lies before the model's t0 = {float(model.t0):g}."
            )
        if t[-1] <= float(model.t0):
            raise ValueError(f"Need at least one time after t0 = {float(model.t0):g}.")
    return times


def n_outputs(model: AbstractModel, theta: Array | None = None) -> int:
    """The number of outputs of `model`, from its output function alone (tracing a
    whole solve to learn it costs seconds for a stiff model); checked and cached with
    the model's other shapes (`check_model_shapes`)."""
    return check_model_shapes(model)
