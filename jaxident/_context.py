"""Whether run-time failures raise (the default) or are returned as flags and NaN.

`ji.sweep` traces its function inside `no_throw()`, so that one failing sample does not
stop a batch: the public entry points read this when `throw=None`, at trace time and
outside their own `jit`, so the choice is part of what is compiled.
"""

import contextlib
import contextvars
import functools
import re

import equinox as eqx


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


_MESSAGE = re.compile(r"EquinoxRuntimeError: (.*?)\n\n-{5,}", re.DOTALL)


def clean_errors(fn=None, *, diagnose=None):
    """Decorator for public entry points: a run-time error of one of our compiled checks
    is raised again with our message alone, without equinox's page of generic debugging
    advice and stack listing (our messages say what to change). `diagnose(*args,
    **kwargs)`, if given, appends a sentence computed on the host (such as the time at
    which a solve stopped). Inside a caller's `jit` nothing is raised here, and the
    error surfaces unchanged."""
    if fn is None:
        return functools.partial(clean_errors, diagnose=diagnose)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except eqx.EquinoxRuntimeError as e:
            found = _MESSAGE.search(str(e))
            if found is None:
                raise
            message = found.group(1).strip()
            if diagnose is not None:
                try:
                    extra = diagnose(*args, **kwargs)
                except Exception:  # the diagnosis must never hide the error itself
                    extra = ""
                if extra:
                    message = f"{message} {extra}"
        raise eqx.EquinoxRuntimeError(message) from None

    return wrapper
