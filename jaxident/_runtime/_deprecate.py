"""Public names kept for one release after their feature folded into another: each
call warns once per place (Python's default for a `DeprecationWarning` raised in user
code) and forwards to the name that replaces it."""

import functools
import warnings


def deprecated(fn, old: str, new: str):
    """`fn` under its old public name `old`, warning that `new` replaces it."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        warnings.warn(
            f"{old} is deprecated and will be removed in the next release: use {new}.",
            DeprecationWarning,
            stacklevel=2,
        )
        return fn(*args, **kwargs)

    wrapper.__doc__ = f"Deprecated: use {new}.\n\n" + (fn.__doc__ or "")
    return wrapper
