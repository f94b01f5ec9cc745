"""A multi-start's finished fits kept on disk (`ji.estimate(problem, starts=N,
out=path)`): written atomically after every fit with a fingerprint of what is fitted,
so that an interrupted multi-start resumes where it stopped, and a file of another
multi-start (or a damaged one) is refused, never read as fits."""

import hashlib
import json
import pathlib
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._runtime._files import arrays_hash, write_atomic


_KIND = "jaxident multi-start"


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


class KeptFits:
    """The fits of a multi-start in the JSON file `path`: `rows` maps a start's index to
    its fit, `(theta, nll, steps, result code, at_bound)`."""

    def __init__(self, path, key: str, n: int):
        self.path, self.key, self.n = pathlib.Path(path), key, n
        self.rows: dict[int, tuple] = {}
        if self.path.is_dir():
            raise ValueError(f"out={str(self.path)!r} is a directory: give a file name.")
        if self.path.exists():
            self.rows = self._read()

    def _read(self) -> dict[int, tuple]:
        try:
            state = json.loads(self.path.read_text())
            if state["kind"] != _KIND:
                raise ValueError("not a multi-start")
            key, fits = state["fingerprint"], state["fits"]
            rows = {
                int(i): (np.asarray(f["theta"], float), float(f["nll"]), int(f["steps"]),
                         int(f["result"]), np.asarray(f["at_bound"], bool))
                for i, f in fits.items()
            }  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"{self.path} is not a jaxident multi-start file, or it is damaged "
                f"({type(e).__name__}: {e}): delete it, or give another out=."
            ) from None
        if key != self.key:
            raise ValueError(
                f"{self.path} keeps the fits of another multi-start (another problem, "
                "starts, held parameters, step cap, optimizer or integrator): delete it, "
                "or give another out=."
            )
        if any(not 0 <= i < self.n for i in rows):
            raise ValueError(f"{self.path} is damaged: a fit of a start that does not exist.")
        return rows

    def write(self, rows: dict[int, tuple]) -> None:
        fits = {
            str(i): {"theta": r[0].tolist(), "nll": r[1], "steps": r[2], "result": r[3],
                     "at_bound": r[4].tolist()}
            for i, r in sorted(rows.items())
        }  # fmt: skip
        state = {"kind": _KIND, "fingerprint": self.key, "starts": self.n, "fits": fits}
        write_atomic(self.path, json.dumps(state))


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
