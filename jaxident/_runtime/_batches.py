"""Whether the kernels being traced or called solve many samples side by side (a `vmap`
over samples: `ji.sweep`'s lanes, a multi-start fit) or one at a time: a model that
compiles differently for the two (an SBML model's stacking, `_io/_symbolic.stack`) is
passed to kernels in the form that suits (`for_batches`, called by `_host.run_kernel`
and `call_kept`). A performance choice only: both forms compute the same values."""

import contextlib
import contextvars

import jax


_BATCHED = contextvars.ContextVar("jaxident_batched", default=False)


@contextlib.contextmanager
def batched(on: bool = True):
    """Inside: the kernels traced or called solve many samples side by side (a `vmap`
    over samples: `ji.sweep`'s lanes, a multi-start fit), and a model that compiles
    differently for batches is passed to them as such (`for_batches`)."""
    token = _BATCHED.set(on)
    try:
        yield
    finally:
        _BATCHED.reset(token)


def _batchable(x) -> bool:
    return callable(getattr(type(x), "for_batches", None))


def for_batches(args):
    """`args`, inside `batched()`, with every model in them that has a `for_batches`
    method (`SBMLModel`: its right-hand side's stacking) replaced by its batched form;
    outside, as they are (a model is made for one solve at a time). The form is a
    static field of the model, so a kernel's traces for the two are kept apart."""
    if not _BATCHED.get():
        return args
    return jax.tree.map(lambda x: x.for_batches() if _batchable(x) else x, args,
                        is_leaf=_batchable)  # fmt: skip
