"""A multi-start's finished fits kept on disk (`ji.estimate(problem, starts=N,
out=path)`), so that an interrupted multi-start resumes where it stopped, and a file of
another multi-start, or a damaged one, is refused, never read as fits.

The file is JSON Lines: a header (the kind, a fingerprint of what is fitted, the number
of starts), then one record per finished fit, each with a checksum of its own fields
(SHA-256 of its canonical JSON): a record edited by hand fails it and the file is
refused. Records are appended (flushed and synced after each chunk of fits), so the
writes grow with the fits, not with their square; a last line cut short by an
interruption is dropped (its fit is made again) and the file truncated there.
"""

import hashlib
import json
import os
import pathlib
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._runtime._files import arrays_hash, plain, strict_json, write_atomic


_KIND = "jaxident multi-start"
_FORMAT = 2  # JSON Lines with a checksum per record (1: one JSON object, rewritten)


def fingerprint(problem, starts, free, max_steps: int, optimizer, integrator) -> str:
    """What a multi-start computes: the problem's arrays and names, the starts, the
    held parameters, the step cap, the optimizer and the integrator (their fields;
    memory addresses left out)."""
    arrays = [np.asarray(x) for x in jax.tree.leaves(eqx.filter(problem, eqx.is_array))]
    text = repr((problem.name, problem.parameters.names, type(problem.model).__name__,
                 int(max_steps), optimizer, integrator))  # fmt: skip
    text = re.sub(r" at 0x[0-9a-f]+", "", text)
    digest = hashlib.sha256(text.encode())
    digest.update(arrays_hash([*arrays, np.asarray(starts, float), np.asarray(free)]).encode())
    return digest.hexdigest()


def _checksum(record: dict) -> str:
    fields = {k: v for k, v in record.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class KeptFits:
    """The fits of a multi-start in the JSON Lines file `path` (module docstring):
    `rows` maps a start's index to its fit, `(theta, nll, steps, result code,
    at_bound)`; `append` adds fits."""

    def __init__(self, path, key: str, n: int):
        self.path, self.key, self.n = pathlib.Path(path), key, n
        self.rows: dict[int, tuple] = {}
        if self.path.is_dir():
            raise ValueError(f"out={str(self.path)!r} is a directory: give a file name.")
        if self.path.exists():
            self.rows = self._read()

    def _damaged(self, why: str) -> ValueError:
        return ValueError(
            f"{self.path} is not a jaxident multi-start file, or it is damaged ({why}): "
            "delete it, or give another out=."
        )

    def _read(self) -> dict[int, tuple]:
        data = self.path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]  # a last line cut short: not written
        lines = complete.decode(errors="replace").splitlines()
        try:  # (the header is written with the first records, in one atomic write)
            header = json.loads(data.split(b"\n", 1)[0] or b"null")
            if not isinstance(header, dict) or header.get("kind") != _KIND:
                raise ValueError("no multi-start header")
            if header.get("format") != _FORMAT:
                raise ValueError(
                    f"format {header.get('format', 1)}, written by another jaxident version"
                )
            key = header["fingerprint"]
            rows = {}
            for k, line in enumerate(lines[1:], start=2):  # (lines: the complete ones)
                f = json.loads(line)
                if not isinstance(f, dict) or f.get("sha256") != _checksum(f):
                    raise ValueError(f"the checksum of line {k} fails: it was edited")
                # (null: NaN, "inf": a failed fit's -log L, as `strict_json` writes them)
                nll = float(np.asarray(f["nll"], float))
                rows[int(f["i"])] = (np.asarray(f["theta"], float), nll,
                                     int(f["steps"]), int(f["result"]),
                                     np.asarray(f["at_bound"], bool))  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise self._damaged(f"{type(e).__name__}: {e}") from None
        if key != self.key:
            raise ValueError(
                f"{self.path} keeps the fits of another multi-start (another problem, "
                "starts, held parameters, step cap, optimizer or integrator): delete it, "
                "or give another out=."
            )
        if any(not 0 <= i < self.n for i in rows):
            raise self._damaged("a fit of a start that does not exist")
        if len(complete) < len(data):  # drop the torn line before appending after it
            with open(self.path, "r+b") as fh:
                fh.truncate(len(complete))
        return rows

    def append(self, rows: dict[int, tuple]) -> None:
        """Add the fits `rows` (the file, with its header, is made by the first)."""
        lines = []
        for i, r in sorted(rows.items()):
            record = plain({"i": i, "theta": r[0], "nll": r[1], "steps": r[2],
                            "result": r[3], "at_bound": r[4]})  # fmt: skip
            record["sha256"] = _checksum(record)
            lines.append(strict_json(record))
        text = "\n".join(lines) + "\n"
        if not self.path.exists():
            header = {"kind": _KIND, "format": _FORMAT, "fingerprint": self.key, "starts": self.n}
            write_atomic(self.path, json.dumps(header) + "\n" + text)
            return
        with open(self.path, "a") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def row(out, r: int) -> tuple:
    """Fit `r` of a fit's outputs (each with a leading axis of starts) as a row."""
    theta, nll, steps, result, at_bound = out
    return (
        np.asarray(theta[r], float),
        float(nll[r]),
        int(steps[r]),
        int(np.asarray(result._value)[r]),
        np.asarray(at_bound[r], bool),
    )


def stacked(rows: list[tuple]):
    """`(theta, nll, steps, result, at_bound)` of `rows`, stacked (the results as an
    `optimistix.RESULTS`)."""
    theta, nll, steps, codes, at_bound = (np.asarray(a) for a in zip(*rows))
    results = jax.tree.unflatten(
        jax.tree.structure(optx.RESULTS.successful), [jnp.asarray(codes, jnp.int32)]
    )
    return theta, nll.astype(float), steps, results, at_bound
