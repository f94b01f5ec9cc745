"""Whether run-time failures raise (the default) or are returned as flags and NaN.

`ji.sweep` traces its function inside `no_throw()`, so that one failing sample does not
stop a batch: the public entry points read this when `throw=None`, at trace time and
outside their own `jit`, so the choice is part of what is compiled.
"""

import contextlib
import contextvars


_THROW = contextvars.ContextVar("jaxident_throw", default=True)


def resolve_throw(throw: bool | None) -> bool:
    return _THROW.get() if throw is None else bool(throw)


@contextlib.contextmanager
def no_throw():
    token = _THROW.set(False)
    try:
        yield
    finally:
        _THROW.reset(token)
