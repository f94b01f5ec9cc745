"""The tests' own settings and fixtures. The process settings (one core per worker,
XLA's flags, the compilation cache off, the optimisation level) are the root
conftest.py's, shared with the notebooks."""

import gc

import jax
import jaxtyping
import pytest


# Check every jaxtyping shape annotation at run time (the house style, rule 7). The hook
# must be installed before jaxident is first imported.
jaxtyping.install_import_hook("jaxident", "typecheck.typechecker")

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import jaxident  # noqa: E402, F401


# Python's cyclic garbage collector, at its default thresholds (700, 10, 10), runs tens
# of thousands of times in a worker: tracing makes and drops millions of small
# containers. Collected a hundred times less often, the tests spend little time in it
# and run measurably faster (issue 79's note). Each module still ends with a full
# collection (below).
gc.set_threshold(50_000, 20, 100)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After each module, drop its compiled programs (JAX's caches), so that a worker
    does not carry them through the rest of the suite: XLA's CPU backend crashed
    (a segfault; "Failed to materialize symbols") in a worker that had compiled the many
    large programs of the PEtab tests (2026-11-24); a worker that had run most of the
    suite crashed again in CI (in test_stepwise_loop, 2026-11-27, when only the PEtab
    and report modules released theirs; a rerun peaked at 6 GB per worker, so not for
    memory)."""
    yield
    jax.clear_caches()
    gc.collect()
