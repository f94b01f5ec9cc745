"""Files written so that a reader never sees a part of one: a hash of arrays (to
fingerprint what was computed) and an atomic write (write, fsync, rename)."""

import hashlib
import os
import pathlib

import numpy as np


def arrays_hash(leaves) -> str:
    h = hashlib.sha256()
    for x in leaves:
        x = np.ascontiguousarray(x)
        h.update(f"{x.dtype.str}{x.shape}".encode())
        h.update(x.tobytes())
    return h.hexdigest()


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Write, fsync, rename: a reader sees the old file or the new one, never a part."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # one per process
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
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
