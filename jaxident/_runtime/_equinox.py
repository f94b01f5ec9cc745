"""The one place that reaches into equinox's private error machinery: its error mode
(`EQX_ON_ERROR`), read while tracing, and switched to NaN for the kernels whose checks
the host makes (`_host.run_kernel`). Equinox has no public way to choose, per trace,
whether a library's `error_if` becomes a host callback or a NaN; this module is what to
change when it does."""

import contextlib

import equinox._errors as eqx_errors


def on_error_mode() -> str | None:
    """Equinox's current error mode (`EQX_ON_ERROR`): how its checks are traced now. An
    inner jitted function that is traced inside kernels should take it as a static
    argument, so that its cached trace matches the mode."""
    return getattr(eqx_errors, "EQX_ON_ERROR", None)


@contextlib.contextmanager
def checks_as_nan():
    """Trace equinox's run-time checks (`error_if`) as NaN instead of host callbacks
    (equinox's `EQX_ON_ERROR=nan`); a user's `EQX_ON_ERROR=breakpoint` is kept.

    Equinox reads `EQX_ON_ERROR` while tracing a check, inside a jitted function of its
    own whose traces JAX keeps by its arguments: a check traced once as a host callback
    (the order of a diffrax solve's save times, say) would be reused as one here. So
    here the mode is passed to that function as its argument, which gives it traces of
    its own."""
    mode = on_error_mode()
    if mode != "raise":
        yield
        return
    impl = eqx_errors.branched_error_if_impl_jit

    def as_nan(x, pred, index, msgs, *, on_error):
        return impl(x, pred, index, msgs, on_error="nan" if on_error == "default" else on_error)

    eqx_errors.EQX_ON_ERROR = "nan"
    eqx_errors.branched_error_if_impl_jit = as_nan
    try:
        yield
    finally:
        eqx_errors.EQX_ON_ERROR = mode
        eqx_errors.branched_error_if_impl_jit = impl


def enumeration_item(codes, enumeration):
    """An item of `enumeration` holding `codes` (an array of its codes for a batch):
    equinox makes items only from its own `where` and `promote`, one scalar at a time."""
    return type(enumeration.successful)(codes, enumeration)


def enumeration_codes(item):
    """The codes an enumeration item holds (its value)."""
    return item._value


def enumeration_items(enumeration) -> dict:
    """`{name: item}` of an enumeration, its parents' items included."""
    return dict(enumeration._name_to_item)
