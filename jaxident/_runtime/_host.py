"""Whether run-time failures raise, one convention for every entry point: `throw=None`
(the default) raises on a call with concrete arguments, checked on the host after a
kernel without host callbacks (`run_kernel`), and returns the failure as flags and NaN
under a trace (a caller's `jit` or `vmap`, and `ji.sweep`, so that one failing sample
does not stop a batch); `throw=True` raises under a trace too (an `error_if` in the
kernel); `throw=False` never raises.
"""

import contextlib
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _exported
from ._batches import for_batches
from ._equinox import checks_as_nan, on_error_mode as on_error_mode


def is_traced(*trees) -> bool:
    """Whether any leaf of `trees` is a tracer (we are inside a caller's jit or vmap)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(trees))


def array_module(*trees):
    """NumPy for concrete `trees`, `jax.numpy` under a trace: a host-side computation on
    concrete values then compiles no small XLA programs (each new operation and shape
    costs JAX a compilation: together a third of a first `ji.analyze` of Boehm's
    problem)."""
    return jnp if is_traced(trees) else np


def device_array(x, dtype=None):
    """`jnp.asarray(x, dtype)` without compiling: a concrete value goes to the default
    device by `jax.device_put` of its NumPy array (same dtype, not weakly typed, not
    committed), where `jnp.asarray` compiles a small program for every new shape (ten of
    them on a first `jaxident analyze`). A JAX array, a tracer
    or a Python number (weakly typed by `jnp.asarray`) is given to `jnp.asarray`."""
    if isinstance(x, (jax.Array, jax.core.Tracer)) or type(x) in (int, float, complex):
        return jnp.asarray(x, dtype)
    return jax.device_put(np.asarray(x, dtype))


def run_kernel(kernel, *args, throw: bool | None, message, optimize: bool = True):
    """`kernel(*args, check)`, a compiled entry point, with the `throw` convention above.

    With concrete arguments the kernel is called with `check=False`: it emits no check
    of its own, and the checks of the libraries inside it are compiled as NaN (which the
    kernel's status flags then report), so the program has no host callback. JAX's
    persistent cache can store it, and a second process loads it instead of compiling;
    `_exported.call` keeps it lowered as well, so that a second process does not trace
    it either. Unless `throw is False`, `message(result)` then gives the error message
    of a failed call (or `None`), raised here as an `EquinoxRuntimeError`. Under a
    caller's trace the kernel runs as it is, with a check only for `throw=True` (`check`
    is then truthy: the error mode, `_check`).
    `optimize=False` for a kernel that LLVM's passes do not speed up
    (`_config.compiler_options`).

    **Returns:** the kernel's result.
    """
    args = for_batches(args)
    if is_traced(args):
        return kernel(*args, _check(throw))
    with checks_as_nan():
        out = call_kept(kernel, *args, False, optimize=optimize)
    text = None if throw is False else message(out)
    if text:
        raise SolveFailed(text)
    return out


class SolveFailed(eqx.EquinoxRuntimeError):
    """A computation whose status is not `successful`, raised on the host with its
    message (`run_kernel`); an `EquinoxRuntimeError`, as the same check raises under a
    caller's `jit` with `throw=True`."""

    diagnosed: bool = False


def _check(throw: bool | None):
    """A kernel's `check` under a caller's trace: the error mode (`"raise"`, truthy) for
    `throw=True`, else `False`. Inside `ji.sweep` (equinox's mode `"nan"`) also `False`:
    a check traced there would fill a whole vmapped batch with NaN for one failing
    sample, where the kernel's status flags report each sample's own failure. The mode
    is the argument, not `True`, because JAX keeps an inner kernel's trace by its
    arguments: a kernel traced with raising checks is not reused where they must not
    raise, nor the other way round."""
    mode = on_error_mode() or "raise"
    return mode if throw is True and mode != "nan" else False


def callback_free(*args):
    """A context in which a kernel called with concrete `args` is compiled with the
    library checks inside it as NaN (see `run_kernel`), or a no-op under a trace."""
    if is_traced(args):
        return contextlib.nullcontext()
    return checks_as_nan()


def call_kept(kernel, *args, optimize: bool = True, device: jax.Device | None = None):
    """`kernel(*args)` for a kernel that reports failures in its result (no check of its
    own), inside `callback_free`: with concrete arguments through its kept copy
    (`_exported.call`: compiled with the CPU options, fully optimized unless
    `optimize=False`; lowered once for every process), under a caller's trace as it
    is. With a `device`, concrete arguments are moved there and the kernel runs there
    (a fit on the host's CPU: `_config.fit_device`); its outputs are moved back to
    where the arguments were, so that no later call sees arrays on two devices."""
    args = for_batches(args)
    if is_traced(args):
        return kernel(*args)
    if device is None:
        return _exported.call(kernel, *args, optimize=optimize)
    found = _exported.array_devices(args)
    home = found[0] if found else None
    arrays, rest = eqx.partition(args, eqx.is_array)
    with jax.default_device(device):
        out = _exported.call(
            kernel, *eqx.combine(jax.device_put(arrays, device), rest), optimize=optimize
        )
    if home is None or home == device:
        return out
    arrays, rest = eqx.partition(out, eqx.is_array)
    return eqx.combine(jax.device_put(arrays, home), rest)


def diagnosed(diagnose):
    """Decorator for the entry points whose failures the host can explain further:
    a `SolveFailed` raised below (by `run_kernel`, the one place that turns a status
    into an exception) gets `diagnose(*args, **kwargs)` appended, a sentence computed on
    the host (such as the time at which a solve stopped), once."""

    def wrap(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except SolveFailed as e:
                if e.diagnosed:
                    raise
                try:
                    extra = diagnose(*args, **kwargs)
                except Exception:  # the diagnosis must never hide the error itself
                    extra = ""
                error = SolveFailed(f"{e} {extra}" if extra else str(e))
                error.diagnosed = True
                raise error from None

        return wrapper

    return wrap
