import gc
import os
import subprocess
import sys


def _one_core_per_worker() -> None:
    """Give each pytest-xdist worker its own CPU cores.

    jaxlib runs a vmapped LAPACK call (QR, SVD, triangular solve) by splitting the batch
    over a thread pool sized to the CPUs the process may use, and its threads wait for
    one another by spinning. Two workers on two shared cores then starve each other's
    waits: a 2 s selection takes 40 s or more. Pinning each worker (and the notebook
    kernels it starts, which inherit the mask) to its own cores sizes the pools to match.
    It must run before JAX creates its CPU client.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < count:
        return
    share = len(cpus) // count
    i = int(worker[2:]) % count
    os.sched_setaffinity(0, cpus[i * share : (i + 1) * share])


_one_core_per_worker()

# No persistent compilation cache in the test suite (tests/runtime/test_compile.py tests
# it in folders of its own): with one shared by the two workers and the notebook
# kernels, a worker aborted deserialising an entry (2026-11-24). XLA's CPU backend also
# crashed compiling (a segfault; "Failed to materialize symbols") in a worker that had
# compiled the many large programs of the PEtab tests, with and without the cache: each
# module releases its compiled programs when it ends (below).
# A cache of each worker's own does not pay either: most programs the suite compiles are
# distinct (few are served from it), keeping them all makes the run slower, and a worker
# that had compiled thousands of programs segfaulted in XLA's `executable.serialize()`
# writing an entry (the numbers: issue 79's note).
os.environ.setdefault("JAXIDENT_CACHE", "0")

# Compile without XLA's CPU fusion emitters, as the entry points' kept kernels are
# compiled for a user (jaxident/_runtime/_exported.py): the suite is mostly compilation, and this
# makes it about 30% faster (test_lserc, test_estimate and test_ecoli: 43 s against
# 63 s). Results differ at rounding level only. The notebook kernels and pytest-xdist's
# workers inherit it; a flag already given in XLA_FLAGS is kept. An XLA that does not
# know the flag aborts at start (jaxlib 0.11 does not), so a fresh process tries it first.
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_cpu_use_fusion_emitters" not in _flags:
    _with = f"{_flags} --xla_cpu_use_fusion_emitters=false".strip()
    _probe = [sys.executable, "-c", "import jax; jax.devices()"]
    _env = {**os.environ, "XLA_FLAGS": _with, "JAX_PLATFORMS": "cpu"}
    if subprocess.run(_probe, env=_env, capture_output=True).returncode == 0:
        os.environ["XLA_FLAGS"] = _with

import jax  # noqa: E402
import jaxtyping  # noqa: E402
import pytest  # noqa: E402


os.environ.setdefault("MPLBACKEND", "Agg")
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
