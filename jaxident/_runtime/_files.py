"""Files written so that a reader never sees a part of one: a hash of arrays (to
fingerprint what was computed), an atomic write (write, fsync, rename), and strict JSON
(no bare NaN or Infinity, which strict parsers refuse)."""

import contextlib
import hashlib
import json
import math
import os
import pathlib
import tempfile

import numpy as np


def arrays_hash(leaves) -> str:
    h = hashlib.sha256()
    for x in leaves:
        x = np.ascontiguousarray(x)
        h.update(f"{x.dtype.str}{x.shape}".encode())
        h.update(x.tobytes())
    return h.hexdigest()


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write, fsync, rename: a reader sees the old file or the new one, never a part
    (the temporary file is unique to this writer, and removed if the write fails)."""
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - directories cannot be opened on some systems
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def strict_json(obj, **kwargs) -> str:
    """`obj` as strict JSON (RFC 8259, which a strict parser reads): NaN as null and
    infinities as the strings "inf" / "-inf", as every number of the reports is
    written; NumPy scalars and arrays as plain numbers and lists. Raises on anything
    else that JSON cannot hold."""
    return json.dumps(plain(obj), allow_nan=False, **kwargs)


def plain(x):
    """`x` with what strict JSON cannot hold replaced as `strict_json` writes it."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return plain(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return None
        return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")
    return x
