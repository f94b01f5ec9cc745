"""Sweep result files on disk: a fingerprint of what was swept, one checksum per
finished chunk, and an atomically written state, so that an interrupted sweep resumes
and a damaged or foreign directory is never read as results."""

import contextlib
import errno
import hashlib
import json
import os
import pathlib
import shutil
import warnings

import filelock
import numpy as np

from .._runtime._files import write_atomic


class LazyFingerprint:
    """The SHA-256 of the lowered program (StableHLO text, constants included), computed
    on first use: two functions with the same fingerprint compute the same thing."""

    def __init__(self, lowered):
        self._lowered, self._value = lowered, None

    def __call__(self) -> str:
        if self._value is None:
            text = self._lowered.as_text()
            self._value, self._lowered = hashlib.sha256(text.encode()).hexdigest(), None
        return self._value


def _file_name(i: int, count: int) -> str:
    """The file of leaf `i` of `count` (the last is the ok flags)."""
    return "ok.npy" if i == count - 1 else f"leaf{i}.npy"


def unset(shape, dtype) -> np.ndarray:
    """Rows not computed: NaN where the dtype has it, else zeros."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.inexact):
        return np.full(shape, np.nan, dtype)
    return np.zeros(shape, dtype)


def _read_state_file(path: pathlib.Path) -> tuple[dict, dict[int, tuple[int, str]]]:
    """`(fingerprint, {start: (stop, checksum)})` from a sweep's state file."""
    try:
        state = json.loads(path.read_text())
        fingerprint = state["fingerprint"]
        chunks = {int(k): (int(v[0]), str(v[1])) for k, v in state["chunks"].items()}
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(
            f"{path} is not a jaxident sweep state file, or it is damaged "
            f"({type(e).__name__}: {e}). Delete it (or use another out_dir) to start over."
        ) from None
    return fingerprint, chunks


def _chunk_checksum(arrays, start: int, stop: int) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a[start:stop]).tobytes())
    return h.hexdigest()


class ResultFiles:
    """The result files of a sweep with `out_dir`: one `.npy` per output leaf and `ok.npy`,
    and `sweep_state.json` with the sweep's fingerprint (samples hash, program hash,
    output shapes and dtypes, library versions) and a SHA-256 per finished chunk.

    A directory of another sweep raises; a damaged result file or a chunk whose checksum
    does not match is recomputed (with a warning), never returned."""

    STATE = "sweep_state.json"

    def __init__(self, out_dir, n, fingerprint, v_leaves):
        self.dir = pathlib.Path(out_dir)
        if self.dir.exists() and not self.dir.is_dir():
            raise ValueError(f"out_dir {self.dir} is a file; give a folder for the results.")
        created = not self.dir.exists()
        self.dir.mkdir(parents=True, exist_ok=True)
        # one writer at a time: a second process on the same directory waits for the
        # first to finish, then resumes from its state (nothing is computed twice)
        self.lock = filelock.FileLock(str(self.dir / ".sweep.lock"))
        try:
            self.lock.acquire(timeout=0)
        except filelock.Timeout:
            warnings.warn(
                f"Another process is writing a sweep to {self.dir}; waiting for it to "
                "finish (its finished chunks are then reused).",
                stacklevel=4,
            )
            self.lock.acquire()
        try:
            self._open(n, fingerprint, v_leaves)
        except BaseException:
            self.lock.release()
            if created:  # nothing left behind in a folder this sweep made
                with contextlib.suppress(OSError):
                    (self.dir / ".sweep.lock").unlink()
                    self.dir.rmdir()
            raise

    def close(self) -> None:
        """Release the directory for another process."""
        self.lock.release()

    def _open(self, n, fingerprint, v_leaves):
        self.state_file = self.dir / self.STATE
        self.fingerprint = fingerprint
        self.specs = [((n, *s.shape[1:]), np.dtype(s.dtype)) for s in v_leaves]
        self.specs.append(((n,), np.dtype(bool)))
        self.done = self._read_state()
        self._create()
        bad = [
            start
            for start, (stop, digest) in sorted(self.done.items())
            if _chunk_checksum(self._maps("r"), start, stop) != digest
        ]
        if bad:
            warnings.warn(
                f"{len(bad)} finished chunk(s) in {self.dir} do not match their checksums "
                f"(rows {', '.join(f'{b}:{self.done[b][0]}' for b in bad[:5])}"
                f"{', ...' if len(bad) > 5 else ''}); recomputing them.",
                stacklevel=4,
            )
            for b in bad:
                del self.done[b]

    def _read_state(self) -> dict[int, tuple[int, str]]:
        if not self.state_file.exists():
            return {}
        fingerprint, chunks = _read_state_file(self.state_file)
        if fingerprint != self.fingerprint:
            differ = sorted(
                k
                for k in set(fingerprint) | set(self.fingerprint)
                if fingerprint.get(k) != self.fingerprint.get(k)
            )
            raise ValueError(
                f"{self.dir} holds the results of a different sweep ({', '.join(differ)} "
                "differ). Use another out_dir, or delete this one to start over."
            )
        return chunks

    def _path(self, i):
        return self.dir / _file_name(i, len(self.specs))

    def _maps(self, mode: str) -> list[np.ndarray]:
        return [np.lib.format.open_memmap(self._path(i), mode=mode) for i in range(len(self.specs))]

    def _create(self) -> None:
        """Check the files of a resumed sweep, or create them. No file stays mapped while
        the sweep runs (each chunk maps, writes and unmaps), so the process's resident
        memory does not grow with the number of samples."""
        if self.done:
            try:
                for i, (shape, dtype) in enumerate(self.specs):
                    a = np.lib.format.open_memmap(self._path(i), mode="r")
                    if a.shape != shape or a.dtype != dtype:
                        raise ValueError(f"{self._path(i).name} has {a.dtype}{a.shape}")
                return
            except (OSError, ValueError) as e:
                warnings.warn(
                    f"Damaged result file in {self.dir} ({e}); recomputing the whole sweep.",
                    stacklevel=5,
                )
                self.done = {}
        self._reserve()
        for i, (shape, dtype) in enumerate(self.specs):
            a = np.lib.format.open_memmap(self._path(i), mode="r+")
            if np.issubdtype(dtype, np.inexact):
                # rows not (yet) computed read as NaN, never as zeros; in blocks, each
                # unmapped once written
                block = max(1, (1 << 24) // max(1, a[:1].nbytes))
                del a
                for start in range(0, shape[0], block):
                    a = np.lib.format.open_memmap(self._path(i), mode="r+")
                    a[start : start + block] = np.nan
                    a.flush()
                    del a
            else:
                del a

    def _reserve(self) -> None:
        """Create the result files with their blocks reserved on disk (a memory-mapped
        file that the disk cannot hold kills the process with SIGBUS when it is written,
        with nothing on stderr): the free space checked first, each file's blocks
        allocated (`posix_fallocate`) after; where either fails, the files are removed
        and the error names the folder."""
        sizes = [int(np.prod(shape)) * dtype.itemsize for shape, dtype in self.specs]
        need = sum(sizes) + 4096 * len(sizes)  # (the .npy headers)
        free = shutil.disk_usage(self.dir).free
        if need > free:
            raise _no_space(self.dir, need, free)
        made = []
        try:
            for i, (shape, dtype) in enumerate(self.specs):
                a = np.lib.format.open_memmap(self._path(i), mode="w+", dtype=dtype, shape=shape)
                made.append(self._path(i))
                del a
                if hasattr(os, "posix_fallocate"):
                    fd = os.open(self._path(i), os.O_RDWR)
                    try:
                        os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
                    finally:
                        os.close(fd)
        except OSError as e:
            for path in made:
                with contextlib.suppress(OSError):
                    path.unlink()
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _no_space(self.dir, need, shutil.disk_usage(self.dir).free) from None
            raise

    def write_chunk(self, start: int, stop: int, leaves: list[np.ndarray]) -> None:
        """Write rows `start:stop` of every leaf (the ok flags last), then record the
        chunk as finished, with its checksum, in the state file."""
        maps = self._maps("r+")
        for a, v in zip(maps, leaves):
            a[start:stop] = v
            a.flush()
        self.done[start] = (stop, _chunk_checksum(maps, start, stop))
        del maps
        state = {
            "fingerprint": self.fingerprint,
            "chunks": {str(k): list(v) for k, v in sorted(self.done.items())},
        }
        write_atomic(self.state_file, json.dumps(state))

    def results(self) -> list[np.ndarray]:
        """The result files, mapped read-only."""
        return self._maps("r")


def read_parts(out_dir) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The finished rows of a sweep directory, or of the `part-i-of-m` directories of a
    multi-process sweep: `(leaves, ok, computed)`. Parts of different sweeps, or a chunk
    whose checksum does not match, raise."""
    root = pathlib.Path(out_dir)
    parts = sorted(root.glob("part-*-of-*")) or [root]
    states = []
    for part in parts:
        path = part / ResultFiles.STATE
        if not path.exists():
            raise ValueError(f"{part} holds no sweep results ({ResultFiles.STATE} is missing).")
        states.append((part, *_read_state_file(path)))
    first = states[0][1]
    for part, fingerprint, _ in states[1:]:
        if fingerprint != first:
            raise ValueError(f"{part} holds the results of a different sweep than {parts[0]}.")
    n = int(first["n"])
    specs = [((n, *shape), np.dtype(dtype)) for shape, dtype in first["outputs"]]
    specs.append(((n,), np.dtype(bool)))
    out = [unset(shape, dtype) for shape, dtype in specs]
    computed = np.zeros((n,), bool)
    for part, _, chunks in states:
        if not chunks:
            continue
        arrays = [
            np.load(part / _file_name(i, len(specs)), mmap_mode="r") for i in range(len(specs))
        ]
        for start, (stop, digest) in chunks.items():
            if _chunk_checksum(arrays, start, stop) != digest:
                raise ValueError(f"Rows {start}:{stop} in {part} do not match their checksum.")
            for o, a in zip(out, arrays):
                o[start:stop] = a[start:stop]
            computed[start:stop] = True
    *leaves, ok = out
    return leaves, ok, computed


def _no_space(folder, need: int, free: int) -> OSError:
    return OSError(
        errno.ENOSPC,
        f"Not enough space in {folder} for the sweep's results: {need / 1e6:.1f} MB "
        f"needed, {free / 1e6:.1f} MB free. Free some space or give another out_dir "
        "(nothing was written there).",
    )
