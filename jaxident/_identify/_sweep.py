"""Chunked, vmapped sweeps of a function over parameter samples, over devices and hosts.

How many samples run side by side (one `vmap`) is chosen per backend: every lane of a
vmapped adaptive solve steps until the slowest lane ends, which costs nothing extra
where lanes run in parallel (a GPU: the whole chunk) but on a CPU makes the batch wait
for its slowest sample. On a CPU the chunk is therefore mapped in groups of
`CPU_LANES` (`jax.lax.map(..., batch_size=CPU_LANES)`): on a CPU, 32 lanes came
within 1.08x of the best lane count on four PEtab problems, where 256 lanes let the
samples whose step counts vary most wait for each other (the measurements: the
docs/performance.md, "Sweeps over devices and hosts" and `benchmarks/bench_petab.py`).
"""

import collections
import hashlib
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array
from tqdm.auto import tqdm

from .._runtime._batches import batched
from .._runtime._config import compiler_options, version
from .._runtime._equinox import checks_as_nan
from .._runtime._files import arrays_hash
from .._runtime._results import RESULTS, status_array, succeeded
from .._solve._bdf import integrates_by_span
from ._sweep_files import LazyFingerprint, read_parts, ResultFiles, unset


class SweepResult(eqx.Module):
    """The outputs of `ji.sweep`, on the host.

    **Fields:**

    - `values`: the function's outputs, each leaf a NumPy array with a leading axis of
      length `n` (memory-mapped `.npy` files when `out_dir` was given). Failed samples
      hold NaN (or the function's own failure values).
    - `result`: the samples' status (`ji.RESULTS`, `(n,)`): `sample_failed` for failed
      samples; `ok` is the boolean `(n,)`, `False` for them.
    - `samples`: the inputs.
    - `compile_seconds`, `run_seconds`: the one-off compilation (0 when a previous sweep
      of the same function and input shapes was reused) and the evaluation time.
    - `devices`: the devices that held the chunks' outputs, read from the outputs'
      sharding.
    - `computed`: boolean `(n,)`, `True` for the samples this process evaluated (or found
      finished in `out_dir`). All `True` except in a multi-process sweep, where each
      process takes its share of the chunks; `ji.load_sweep(out_dir)` joins the shares.
    """

    values: Any
    result: RESULTS
    samples: Any
    compile_seconds: float
    run_seconds: float
    devices: tuple[str, ...] = ()
    computed: np.ndarray | None = None

    @property
    def ok(self) -> np.ndarray:
        """Boolean `(n,)`: `False` for the failed samples."""
        return succeeded(self.result)

    @property
    def _mine(self) -> np.ndarray:
        return np.ones_like(self.ok) if self.computed is None else self.computed

    @property
    def n_failed(self) -> int:
        return int((~self.ok & self._mine).sum())

    @property
    def failed(self) -> np.ndarray:
        """Indices of the failed samples (of those this process computed)."""
        return np.flatnonzero(~self.ok & self._mine)

    def to_dict(self) -> dict:
        return {
            "n": int(self.ok.shape[0]),
            "failed": self.failed.tolist(),
            "computed": int(self._mine.sum()),
            "compile_seconds": self.compile_seconds,
            "run_seconds": self.run_seconds,
            "devices": list(self.devices),
        }

    def __repr__(self) -> str:
        n = self.ok.shape[0]
        part = "" if self._mine.all() else f", computed={int(self._mine.sum())}"
        return (
            f"SweepResult(n={n}{part}, failed={self.n_failed}, "
            f"compile={self.compile_seconds:.2f}s, run={self.run_seconds:.2f}s, "
            f"devices={len(self.devices)})"
        )


def _default_ok(out) -> Array:
    """A sample succeeded if its output says so (an `ok` field, as on `Sensitivity`,
    `Selection` and `Trajectory`), else if all its floating values are finite. A check
    that failed inside the sweep (an `error_if`, traced as NaN there) fills every
    floating value with NaN and every boolean with True, its `ok` too: an output whose
    floating values are all NaN failed, whatever its `ok` says."""
    leaves = [x for x in jax.tree.leaves(out) if eqx.is_inexact_array(x)]
    checked = jnp.asarray(bool(leaves))
    for x in leaves:
        checked = checked & jnp.all(jnp.isnan(x))
    flag = getattr(out, "ok", None)
    if flag is not None and not callable(flag):
        return jnp.asarray(flag, bool) & ~checked
    ok = jnp.asarray(True)
    for x in leaves:
        ok = ok & jnp.all(jnp.isfinite(x))
    return ok


# Compiled chunk functions, by the structure of the function and of the inputs: a plain
# function counts by identity; an `eqx.Module` by its static parts and the shapes of its
# arrays, which the compiled chunk takes as arguments. So a second sweep of the same
# analysis (a module built afresh by an entry point, say) does not recompile. Bounded, as
# the entries hold the functions and their closures.
_COMPILED: "collections.OrderedDict" = collections.OrderedDict()
_MAX_COMPILED = 32
CPU_LANES = 32


def _lanes(vmap_size, platform: str, per_device: int) -> int:
    """Samples vmapped side by side on each device: `vmap_size`, or the backend's rule
    (module docstring), at most the device's share of a chunk. The rule takes the
    largest divisor of the share up to `CPU_LANES` where there is one above half of
    it: a remainder would be a second vmap, compiled apart."""
    if vmap_size is not None:
        return max(1, min(int(vmap_size), per_device))
    if platform != "cpu" or per_device <= CPU_LANES:
        return per_device
    divisor = max(d for d in range(1, CPU_LANES + 1) if per_device % d == 0)
    return divisor if 2 * divisor > CPU_LANES else CPU_LANES


def _signature(x) -> tuple:
    return (
        jax.tree.structure(x),
        tuple((tuple(np.shape(v)), str(jnp.result_type(v))) for v in jax.tree.leaves(x)),
    )


def _compiled_for(fn, okfn, first, mesh, vmap_size=None):
    """`((compiled, output shapes, program fingerprint), compile seconds, arrays)`: the
    compiled chunk function is called as `compiled(arrays, chunk)`, with the chunk's
    sample axis split over `mesh`, each device's share mapped `_lanes` samples at a
    time, and the function's arrays replicated."""
    arrays, static = eqx.partition((fn, okfn), eqx.is_array)
    platform = mesh.devices.flat[0].platform
    n_dev = mesh.size
    per_device = jax.tree.leaves(first)[0].shape[0] // n_dev
    lanes = _lanes(vmap_size, platform, per_device)
    # (a program asked to vmap is keyed apart from the rule's, which may map one sample
    # at a time: below)
    key = (static, _signature(arrays), _signature(first), mesh, lanes, vmap_size is None)
    try:
        hash(key)
    except TypeError:  # a static part that cannot be hashed: compile every time
        key = None
    if key is not None and key in _COMPILED:
        _COMPILED.move_to_end(key)
        return _COMPILED[key], 0.0, arrays

    def chunk_of(lanes):
        def chunk(arrays, batch):
            f, ok = eqx.combine(arrays, static)

            def one(sample):
                out = f(sample)
                return out, ok(out)

            def share(samples):  # one device's samples, `lanes` at a time
                # (one lane: a loop without a vmap, whose branches each sample takes alone)
                return jax.lax.map(one, samples, batch_size=None if lanes == 1 else lanes)

            if n_dev == 1 and lanes == 1:
                return share(batch)
            # (devices, per device, ...): the sharded leading axis stays the devices'
            by_device = jax.tree.map(lambda x: x.reshape(n_dev, per_device, *x.shape[1:]), batch)
            out = jax.vmap(share)(by_device)
            return jax.tree.map(lambda x: x.reshape(n_dev * per_device, *x.shape[2:]), out)

        return chunk

    split, replicated = _shardings(mesh)
    t0 = time.perf_counter()
    with checks_as_nan():
        with batched(lanes > 1):  # (models compiled for the lanes: `_batches`)
            traced = jax.jit(chunk_of(lanes), in_shardings=(replicated, split),
                             out_shardings=split).trace(arrays, first)  # fmt: skip
        if platform == "cpu" and vmap_size is None and lanes > 1:
            if integrates_by_span(traced.jaxpr):
                # ji.BDF keeps its Jacobian across steps by branching, and in a vmap a
                # branch is taken for every lane at every step: one sample at a time
                traced = jax.jit(chunk_of(1), in_shardings=(replicated, split),
                                 out_shardings=split).trace(arrays, first)  # fmt: skip
        lowered = traced.lower()
        compiled = lowered.compile(compiler_options(platform))
    entry = (compiled, lowered.out_info, LazyFingerprint(lowered))
    if key is not None:
        _COMPILED[key] = entry
        while len(_COMPILED) > _MAX_COMPILED:
            _COMPILED.popitem(last=False)
    return entry, time.perf_counter() - t0, arrays


def _shardings(mesh: Mesh) -> tuple[NamedSharding, NamedSharding]:
    """The sample axis split over every axis of `mesh`, and full replication."""
    return NamedSharding(mesh, P(mesh.axis_names)), NamedSharding(mesh, P())


def _sweep_mesh(devices, mesh) -> Mesh:
    if mesh is not None:
        if devices is not None:
            raise ValueError("Give devices= or mesh=, not both.")
        if not isinstance(mesh, Mesh):
            raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}.")
        devices = list(mesh.devices.flat)
    else:
        devices = list(jax.local_devices() if devices is None else devices)
        if not devices or not all(isinstance(d, jax.Device) for d in devices):
            raise ValueError(f"devices must be a non-empty list of jax devices, got {devices!r}.")
        if len(set(devices)) != len(devices):
            raise ValueError("devices lists a device twice.")
        mesh = Mesh(np.array(devices), ("samples",))
    if not set(devices) <= set(jax.local_devices()):
        raise ValueError(
            "A sweep's devices are this process's own (jax.local_devices()); under "
            "jax.distributed the processes share out the chunks, not the devices."
        )
    return mesh


def _progress_bar(total: int, enabled: bool, desc: str):
    if not enabled:
        return None
    return tqdm(total=total, desc=desc, unit="sample", smoothing=0.1)


def sweep(
    fn: Callable,
    samples: Any,
    *,
    batch_size: int = 256,
    progress: bool = True,
    ok: Callable | None = None,
    out_dir: str | pathlib.Path | None = None,
    desc: str = "sweep",
    devices: Sequence[jax.Device] | None = None,
    mesh: Mesh | None = None,
    vmap_size: int | None = None,
) -> SweepResult:
    """Evaluate `fn` on every sample, in chunks of `batch_size` under one compiled
    program, with a progress bar and per-sample failure flags. Each chunk is split
    over all local devices (a `jax.sharding.Mesh` with the sample axis sharded), and
    under `jax.distributed` every process takes its share of the chunks; on each device
    `vmap_size` samples run side by side (one `jax.vmap`) at a time.

    Run-time failures inside `fn` do not stop the sweep: under a trace jaxident's entry
    points return a failure as a status (their default `throw`), so a failed ODE solve
    or selection gives NaN values and `ok = False` for that sample only (so does an
    explicit `throw=True` inside `fn`: its check is traced as NaN).
    Peak device memory depends on `batch_size`, not on the number of samples; with
    `out_dir`, host memory does not either.

    **Arguments:**

    - `fn`: a function of one sample (e.g. a parameter vector) returning a PyTree of
      arrays or jaxident results.
    - `samples`: an array (or PyTree of arrays) with a leading sample axis.
    - `batch_size`: samples per chunk, rounded up to a multiple of the number of devices
      (the last chunk is padded, so there is a single compilation).
    - `progress`: show a progress bar (tqdm); `desc`: its label.
    - `ok`: `ok(output) -> bool` per sample; default: the output's `ok` field if it has
      one, else "all floating values finite".
    - `out_dir`: write the results to `.npy` files in this directory as they come and
      record finished chunks, so that a crashed sweep, re-run with the same arguments,
      resumes without recomputing them. The state file (written atomically) holds a
      fingerprint of the sweep (samples, compiled program, output shapes and dtypes,
      versions) and a checksum per chunk: a directory of a different sweep raises, and a
      damaged file or chunk is recomputed, never returned. A resumed sweep needs the same
      devices. Under `jax.distributed`, process `i` of `m` writes its chunks to
      `out_dir/part-i-of-m`; `ji.load_sweep(out_dir)` joins the parts.
    - `devices`: the devices to split each chunk over (default: `jax.local_devices()`).
    - `mesh`: or a `jax.sharding.Mesh` of local devices; the sample axis is split over
      all its axes.
    - `vmap_size`: samples vmapped side by side on a device; default: the backend's
      rule, 32 on a CPU (a vmapped lane waits for the slowest: see the module
      docstring for the measurements) and the device's whole share of a chunk on a GPU;
      1 (a loop, no vmap) on a CPU for a function that integrates with `ji.BDF`, whose
      kept Jacobian is a branch that a vmap would take for every lane at every step.

    Results do not depend on the devices, up to rounding: each sample is computed by the
    same program, whichever device holds it.

    **Multi-process:** run the same script on every host after
    `jax.distributed.initialize(...)`. Process `i` of `m` evaluates chunks `i, i + m,
    ...` on its own devices, with no communication; its result has `computed` set for
    those rows only (the other rows hold NaN and `ok=False`).

    **Returns:** a `SweepResult`.

    **Raises:** `ValueError` for samples without a common leading axis, a bad
    `batch_size`, an `ok` that does not return one bool per sample, or an `out_dir` that
    holds another sweep's results or a damaged state file.

    **Example:**

    ```python
    samples = ji.latin_hypercube(jax.random.key(0), model.parameters.bounds, 10_000)
    res = ji.sweep(lambda th: ji.sensitivity_matrix(model, th), samples)
    res.values.shape, res.n_failed   # (10000, 31, 4), 0
    ```
    """
    leaves, treedef, n = _sample_leaves(samples)
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    if vmap_size is not None and (not isinstance(vmap_size, (int, np.integer)) or vmap_size < 1):
        raise ValueError(f"vmap_size must be a positive integer or None, got {vmap_size!r}.")
    mesh = _sweep_mesh(devices, mesh)
    batch_size = -(-int(min(batch_size, n)) // mesh.size) * mesh.size

    def chunk(start):  # a chunk of the samples, the last one padded with its last row
        stop = min(start + batch_size, n)
        pad = batch_size - (stop - start)
        parts = [
            np.concatenate([x[start:stop], np.repeat(x[stop - 1 : stop], pad, axis=0)])
            if pad else x[start:stop]
            for x in leaves
        ]  # fmt: skip
        return jax.tree.unflatten(treedef, parts), stop - start

    okfn = _default_ok if ok is None else ok
    (compiled, (val_shapes, ok_shape), program), compile_seconds, arrays = _compiled_for(
        fn, okfn, chunk(0)[0], mesh, vmap_size
    )
    if ok_shape.shape != (batch_size,) or ok_shape.dtype != jnp.bool_:
        raise ValueError(
            "ok(output) must return one boolean per sample (a scalar bool); got "
            f"{ok_shape.dtype}{list(ok_shape.shape[1:])} per sample."
        )
    v_leaves, v_treedef = jax.tree.flatten(val_shapes)
    if out_dir is None:
        store = _MemoryResults(n, v_leaves)
    else:
        store = _files(out_dir, n, batch_size, leaves, program, arrays, v_leaves)
    # under jax.distributed, process i of m takes chunks i, i + m, ...
    starts = list(range(0, n, batch_size))[jax.process_index() :: jax.process_count()]
    bar = _progress_bar(sum(min(batch_size, n - s) for s in starts), progress, desc)
    t0 = time.perf_counter()
    try:
        computed, placed = _run_chunks(compiled, arrays, mesh, chunk, starts, n, batch_size,
                                       store, bar)  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
        store.close()
    run_seconds = time.perf_counter() - t0
    *host, ok_host = store.results()
    return SweepResult(
        values=jax.tree.unflatten(v_treedef, host),
        result=status_array(np.asarray(ok_host, bool)),
        samples=samples,
        compile_seconds=compile_seconds,
        run_seconds=run_seconds,
        devices=tuple(str(d) for d in sorted(placed, key=lambda d: d.id)),
        computed=computed,
    )


def _sample_leaves(samples) -> tuple[list[np.ndarray], Any, int]:
    """The samples' leaves as NumPy arrays, their structure and the number of samples,
    checked: one common leading axis, not empty."""
    leaves, treedef = jax.tree.flatten(samples)
    if not leaves:
        raise ValueError("samples is empty.")
    leaves = [np.asarray(x) for x in leaves]
    if any(x.ndim == 0 for x in leaves):
        raise ValueError(
            "samples needs a leading sample axis: an array of shape (n, ...), one row per "
            "sample (e.g. from ji.latin_hypercube); got a scalar."
        )
    n = leaves[0].shape[0]
    if any(x.shape[0] != n for x in leaves):
        raise ValueError(
            "Every leaf of samples needs the same leading (sample) axis; got lengths "
            f"{[x.shape[0] for x in leaves]}."
        )
    if n == 0:
        raise ValueError("samples has no samples.")
    return leaves, treedef, n


class _MemoryResults:
    """A sweep's results in host memory, with `ResultFiles`' interface: every output
    leaf and the `ok` flags, NaN (or the dtype's marker) until a chunk is written."""

    def __init__(self, n: int, v_leaves):
        self.done: dict = {}
        shapes = [((n, *s.shape[1:]), s.dtype) for s in v_leaves]
        self.arrays = [unset(shape, dtype) for shape, dtype in shapes] + [np.zeros(n, bool)]

    def write_chunk(self, start: int, stop: int, rows) -> None:
        for h, v in zip(self.arrays, rows):
            h[start:stop] = v

    def close(self) -> None:
        pass

    def results(self) -> list[np.ndarray]:
        return self.arrays


def _files(out_dir, n, batch_size, leaves, program, arrays, v_leaves) -> ResultFiles:
    """The files of a sweep written to `out_dir` (one part per process under
    `jax.distributed`), with the fingerprint that a resumed sweep must match."""
    fingerprint = {
        "format": 2,
        "n": n,
        "batch_size": batch_size,
        "samples_sha256": arrays_hash(leaves),
        "program_sha256": hashlib.sha256(
            (program() + arrays_hash(jax.tree.leaves(arrays))).encode()
        ).hexdigest(),
        "outputs": [[list(s.shape[1:]), np.dtype(s.dtype).str] for s in v_leaves],
        "jaxident": version(),
        "jax": jax.__version__,
    }
    n_proc = jax.process_count()
    if n_proc > 1:
        out_dir = pathlib.Path(out_dir) / f"part-{jax.process_index()}-of-{n_proc}"
    return ResultFiles(out_dir, n, fingerprint, v_leaves)


def _run_chunks(compiled, arrays, mesh, chunk, starts, n, batch_size, store, bar):
    """Every chunk at `starts` not already done, written to `store`; returns the rows
    this process computed and the devices that held the results."""
    split, _ = _shardings(mesh)
    computed = np.zeros((n,), dtype=bool)
    failed, placed = 0, set()
    for start in starts:
        m = min(batch_size, n - start)
        computed[start : start + m] = True
        if start in store.done:
            if bar is not None:
                bar.update(m)
            continue
        vals, oks = compiled(arrays, jax.device_put(chunk(start)[0], split))
        placed |= jax.tree.leaves(vals)[0].sharding.device_set
        oks = np.asarray(oks)[:m]
        failed += int((~oks).sum())
        rows = [np.asarray(v)[:m] for v in jax.tree.leaves(vals)]
        store.write_chunk(start, start + m, [*rows, oks])
        if bar is not None:
            bar.update(m)
            if failed:
                bar.set_postfix(failed=failed)
    return computed, placed


def load_sweep(out_dir: str | pathlib.Path, like: Any = None) -> SweepResult:
    """The results a sweep wrote to `out_dir`, joined over the `part-i-of-m` directories
    of a multi-process sweep (each process writes its own chunks there).

    **Arguments:**

    - `out_dir`: the directory given to `ji.sweep`.
    - `like`: an output of the same structure (e.g. one process's `SweepResult.values`),
      to rebuild the PyTree; default: the list of leaves.

    **Returns:** a `SweepResult` with `computed` marking the rows found (finished chunks
    of any part; others hold NaN and `ok=False`), `samples=None` and zero timings.

    **Raises:** `ValueError` for a directory without results, parts of different sweeps,
    or a chunk that does not match its checksum.
    """
    leaves, ok, computed = read_parts(out_dir)
    values = leaves if like is None else jax.tree.unflatten(jax.tree.structure(like), leaves)
    return SweepResult(
        values=values,
        result=status_array(np.asarray(ok, bool)),
        samples=None,
        compile_seconds=0.0,
        run_seconds=0.0,
        computed=computed,
    )
