"""The test session's process settings, for the notebooks and the tests alike (a
conftest.py at the root applies to both folders: `pytest notebooks` alone runs as in
the whole suite). The tests' own fixtures and checks live in tests/conftest.py."""

import os
import subprocess
import sys


def _one_core_per_worker() -> None:
    """Give each pytest-xdist worker its own CPU cores.

    jaxlib runs a vmapped LAPACK call (QR, SVD, triangular solve) by splitting the batch
    over a thread pool sized to the CPUs the process may use, and its threads wait for
    one another by spinning. Two workers on two shared cores then starve each other's
    waits, by an order of magnitude and more. Pinning each worker (and the notebook
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
# kernels, a worker aborted deserialising an entry. XLA's CPU backend also
# crashed compiling (a segfault; "Failed to materialize symbols") in a worker that had
# compiled the many large programs of the PEtab tests, with and without the cache: each
# module releases its compiled programs when it ends (tests/conftest.py).
# A cache of each worker's own does not pay either: most programs the suite compiles are
# distinct (few are served from it), keeping them all makes the run slower, and a worker
# that had compiled thousands of programs segfaulted in XLA's `executable.serialize()`
# writing an entry (the numbers: issue 79's note).
os.environ.setdefault("JAXIDENT_CACHE", "0")

# Compile without XLA's CPU fusion emitters, as the entry points' kept kernels are
# compiled for a user (jaxident/_runtime/_exported.py): the suite is mostly compilation,
# and this makes it about 30% faster (issue 79's note). Results differ at rounding level
# only. The notebook kernels and pytest-xdist's workers inherit it; a flag already given
# in XLA_FLAGS is kept. An XLA that does not know the flag aborts at start (jaxlib 0.11
# does not), so a fresh process tries it first.
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_cpu_use_fusion_emitters" not in _flags:
    _with = f"{_flags} --xla_cpu_use_fusion_emitters=false".strip()
    _probe = [sys.executable, "-c", "import jax; jax.devices()"]
    _env = {**os.environ, "XLA_FLAGS": _with, "JAX_PLATFORMS": "cpu"}
    if subprocess.run(_probe, env=_env, capture_output=True).returncode == 0:
        os.environ["XLA_FLAGS"] = _with

# Compile with little optimisation (jax's `jax_disable_most_optimizations`: XLA's backend
# at level 0, LLVM's expensive passes off): the suite is mostly compilation, and most of
# its programs run for milliseconds, so the compile time saved is far more than the run
# time lost (the numbers: issue 79's note). The results are the same to rounding: no
# test compares two separately compiled programs bit for bit. The few tests whose time
# goes into running long integrations are marked `optimized` and compile as a user's
# programs are (below); the notebook kernels inherit the setting through the
# environment.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# Notebooks that mostly run long integrations (at tolerances near 1e-12): they compile
# with full optimisation, which they repay (the delay notebook runs three times longer
# without).
OPTIMIZED_NOTEBOOKS = ("delay_coordinates.ipynb", "sce_rom.ipynb")

import jax  # noqa: E402


os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in OPTIMIZED_NOTEBOOKS:
            item.add_marker("optimized")


_saved = []


def pytest_runtest_setup(item):
    """An `optimized` test compiles as a user's programs are compiled (jax's
    `jax_disable_most_optimizations` is read at each compilation), and a notebook
    kernel it starts does too (the kernel inherits this process's environment)."""
    if item.get_closest_marker("optimized") is None:
        return
    _saved.append((jax.config.read("jax_disable_most_optimizations"),
                   os.environ.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)))  # fmt: skip
    jax.config.update("jax_disable_most_optimizations", False)


def pytest_runtest_teardown(item):
    if item.get_closest_marker("optimized") is None or not _saved:
        return
    flag, env = _saved.pop()
    jax.config.update("jax_disable_most_optimizations", flag)
    if env is not None:
        os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = env
