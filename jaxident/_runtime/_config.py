"""Settings applied when jaxident is imported.

- float64 (`jax_enable_x64`): identifiability is decided in ill-conditioned matrices.
  Set `JAXIDENT_X64=0` before the import to opt out.
- A persistent compilation cache, so that a second Python process loads the compiled
  kernels instead of compiling them again: in `$XDG_CACHE_HOME/jaxident/compiled`
  (default `~/.cache/jaxident/compiled`), unless JAX's own `jax_compilation_cache_dir` (or the
  environment variable `JAX_COMPILATION_CACHE_DIR`) is set. `JAXIDENT_CACHE=DIR` chooses
  another folder, `JAXIDENT_CACHE=0` turns it off. Every compiled program is kept, not
  only those that took over a second (`JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS` set in
  the environment wins). JAX stores only programs without host callbacks: the sweeps,
  and the entry points whose checks are made on the host (`_host.run_kernel`). The
  cache is bounded at 1 GiB (least recently used entries go first), which also makes JAX
  lock it, so that processes sharing it never read an entry another one is writing
  (`JAX_COMPILATION_CACHE_MAX_SIZE` set in the environment wins). The entry points'
  kernels are also kept lowered, in its subfolder `jaxident-exported` (`_exported.py`),
  so that a second process does not trace them either.
- On a CPU, jaxident's own compiled programs (the entry points' kernels and the sweeps)
  are compiled without XLA's fusion emitters (`compiler_options`), where this XLA knows
  the option: less compilation, and without YNNPACK's fusions of reductions (its
  products stay): a large SBML model's sums of fluxes run faster. Nothing process-wide
  is changed for that. `JAXIDENT_FUSION_EMITTERS=1` keeps XLA's fusion emitters (for a
  long CPU sweep of a large model, whose run time they can shorten). The column
  selections are compiled without LLVM's optimization passes besides (less compilation,
  the same run time); `JAXIDENT_OPTIMIZE=1` optimizes them too. The measurements behind
  each choice: docs/performance.md, "Compiler options".
- Fits run on the host's CPU where JAX's default backend is another (a GPU): a fit is a
  chain of small solves, each a few hundred solver steps long: latency-bound, many
  times slower on a GPU than on the host's CPU (docs/performance.md, "Sweeps over
  devices and hosts").
  `JAXIDENT_FIT_DEVICE=default` fits on JAX's default device instead (`fit_device`).
  Sweeps and sensitivities stay on the default device: they gain from a GPU.
"""

import contextlib
import functools
import importlib.metadata
import os

import jax


if os.environ.get("JAXIDENT_X64", "1") != "0":
    jax.config.update("jax_enable_x64", True)


def _default_cache_dir() -> str | None:
    setting = os.environ.get("JAXIDENT_CACHE", "")
    if setting == "0":
        return None
    if setting:
        return setting
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    # (not the unbounded cache of earlier versions, `jaxident/jax`: its entries lack the
    # access times that a bounded cache keeps for each entry)
    return os.path.join(base, "jaxident", "compiled")


def _enable_cache() -> None:
    if not jax.config.jax_compilation_cache_dir:  # else the user's (or environment's) choice
        folder = _default_cache_dir()
        if folder is None:
            return
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:  # a read-only home: no cache, no error
            return
        jax.config.update("jax_compilation_cache_dir", folder)
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            # Keep the small programs too (JAX's default keeps only the slow ones): a
            # second process then compiles nothing at all.
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    unset = jax.config.jax_compilation_cache_max_size == -1
    if unset and "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ:
        # JAX writes a cache entry in place; without a size bound it takes no lock, and
        # a second process (a pytest worker, another notebook) that compiles the same
        # program at that moment reads half a file and crashes (it did, twice: in a
        # folder of ours and in one the test suite chose). A bounded cache locks every
        # read and write (and evicts the least recently used entries past 1 GiB), in
        # any folder.
        jax.config.update("jax_compilation_cache_max_size", 2**30)


_enable_cache()


# XLA's CPU fusion emitters (its default) compile a large program's many small fusions
# one by one: without them a large model's kernels compile much faster, at run times
# from somewhat faster to somewhat slower. YNNPACK's products stay, its fusions of
# reductions do not: a large SBML model's rolled right-hand side sums its fluxes into
# the states (`jnp.sum(coeffs * flux[cols], axis=1)` in `_io/_sbml._rolled`), which XLA
# hands to YNNPACK as reduction fusions, slower there than its own loops (the large
# networks gain, the small PEtab problems do not move, E. coli's sweep loses a little).
# A choice per program (these fusions off only where a rolled right-hand side is
# traced) is not built: the options are chosen before the trace. The measurements:
# docs/performance.md, "Compiler options".
_CPU_OPTIONS = {
    "xla_cpu_use_fusion_emitters": False,
    "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT",
}


def _known(options: dict) -> bool:
    """Whether this XLA knows `options` (compiled once, on a trivial program)."""
    try:
        jax.jit(lambda x: x + 1, compiler_options=options).lower(1.0).compile()
    except Exception:  # an XLA without that option
        return False
    return True


@functools.cache
def _cpu_options() -> dict | None:
    """The options of `_CPU_OPTIONS` that this XLA knows (each tried alone where it
    does not know them all), the fusion emitters' left out where
    `JAXIDENT_FUSION_EMITTERS=1`."""
    options = dict(_CPU_OPTIONS)
    if os.environ.get("JAXIDENT_FUSION_EMITTERS", "") == "1":
        options.pop("xla_cpu_use_fusion_emitters")
    if not _known(options):
        options = {k: v for k, v in options.items() if _known({k: v})}
    return options or None


# The column selections (strong RRQR and the others: short loops of small linear
# algebra) are compiled without LLVM's optimization passes (XLA's backend optimization
# level 0): half the compilation at the same run time. Not the solves, which would run
# up to twice as slow (levels 1 and 2 compile no faster than 3). `JAXIDENT_OPTIMIZE=1`
# optimizes every program. Without those passes, XLA's split of the code generation
# over threads (there to run LLVM's passes in parallel) is overhead, so such a program
# is compiled in one piece; the optimized programs keep the split. The measurements:
# docs/performance.md, "Compiler options".
_QUICK_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_parallel_codegen_split_count": 1}


@functools.cache
def _quick_options() -> dict | None:
    """`_cpu_options()` with `_QUICK_OPTIONS` where this XLA knows them, unless
    `JAXIDENT_OPTIMIZE=1`."""
    base = _cpu_options() or {}
    options = {**base, **_QUICK_OPTIONS}
    if os.environ.get("JAXIDENT_OPTIMIZE", "") == "1" or not _known(options):
        return base or None
    return options


_ANSWERING_ONCE = [False]


@contextlib.contextmanager
def answering_once():
    """Within it, the solves that answer once (a sensitivity matrix, a prediction; not
    a fit's or a sweep's) compile without LLVM's passes as well: for a report's few
    solves (`ji.analyze`, which enters it itself) or a process that ends with its answer
    (`jaxident analyze`), where compiling them faster outweighs running them slower
    (docs/performance.md, "Compiler options")."""
    before = _ANSWERING_ONCE[0]
    _ANSWERING_ONCE[0] = True
    try:
        yield
    finally:
        _ANSWERING_ONCE[0] = before


def solve_optimized() -> bool:
    """Whether a solve that answers once is compiled with LLVM's passes (outside
    `answering_once`)."""
    return not _ANSWERING_ONCE[0]


def compiler_options(platform: str, optimize: bool = True) -> dict | None:
    """The XLA options jaxident compiles its programs with on `platform` (`"cpu"`, ...):
    `optimize=False` for a program whose run time LLVM's passes do not shorten (see
    `_QUICK_OPTIONS`)."""
    if platform != "cpu":
        return None
    return _cpu_options() if optimize else _quick_options()


def fit_device() -> jax.Device | None:
    """The device a fit's kernels run on: the host's first CPU where JAX's default
    backend is another, unless `JAXIDENT_FIT_DEVICE=default`; `None` (JAX's default
    device) otherwise. Read at each fit, so a notebook can change it between fits."""
    setting = os.environ.get("JAXIDENT_FIT_DEVICE", "cpu")
    if setting not in ("cpu", "default"):
        raise ValueError(f"JAXIDENT_FIT_DEVICE must be 'cpu' or 'default', got {setting!r}.")
    if setting == "default" or jax.default_backend() == "cpu":
        return None
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:  # a JAX without its CPU backend
        return None


def version() -> str:
    """jaxident's installed version; "unknown" for a source tree put on the path without
    installing it (as on a machine that cannot install it)."""
    try:
        return importlib.metadata.version("jaxident")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
