"""Files written so that a reader never sees a part of one: a hash of arrays (to
fingerprint what was computed) and an atomic write (write, fsync, rename)."""

import contextlib
import hashlib
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
