import os


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

# No persistent compilation cache in the test suite (tests/test_compile.py tests it in
# folders of its own). With one shared by the two workers and the notebook kernels, XLA's
# CPU backend crashed three times in four full runs (2026-11-24): an abort deserialising
# an entry, a segfault compiling, "Failed to materialize symbols" executing, each in a
# worker that had loaded and compiled many large programs.
os.environ.setdefault("JAXIDENT_CACHE", "0")

import jax  # noqa: E402
import jaxtyping  # noqa: E402


os.environ.setdefault("MPLBACKEND", "Agg")
# Check every jaxtyping shape annotation at run time (the house style, rule 7). The hook
# must be installed before jaxident is first imported.
jaxtyping.install_import_hook("jaxident", "typecheck.typechecker")

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import jaxident  # noqa: E402, F401
