"""Marginal uncertainties from a (noise-weighted) sensitivity matrix: the covariance
`W W^T` of the pseudo-inverse of the Fisher information on the subspace the rank
resolves, and its principal directions. Host-side NumPy: thin factorizations only, so
that memory grows with the data only as the matrix does."""

import numpy as np


def equilibrated(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(A / c, c)`: the columns of `A` at unit norm (a zero column stays zero), and
    their norms `c` (1 for a zero column)."""
    c = np.linalg.norm(A, axis=0)
    c = np.where(c > 0, c, 1.0)
    return A / c, c


def thin_svd(A: np.ndarray, compute_uv: bool = True):
    """The singular values (and with `compute_uv`, `(U, s, Vt)` of the small factor:
    `s` and `Vt` are `A`'s) through a thin QR first where `A` is tall, so that memory
    grows with `A`'s rows only as `A` does."""
    R = np.linalg.qr(A, mode="r") if A.shape[0] >= A.shape[1] else A
    return np.linalg.svd(R, full_matrices=False, compute_uv=compute_uv)


def marginal(S: np.ndarray, keep, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Marginal standard deviations (the units of `S`'s columns) from the
    pseudo-inverse of the Fisher information `S^T S` on the subspace the rank resolves
    (the `rank` largest singular directions of the equilibrated columns `keep`), and
    the factor `W` (`p x rank`, zero rows outside `keep`) with covariance `W W^T`.

    Every identifiable combination is free to move, so a parameter's standard deviation
    is its marginal one, not conditional on holding the non-identifiable ones fixed
    (which freezes combinations the data do determine). The SVD of the equilibrated
    columns is used, never `S^T S`, which squares the condition number; a thin QR
    first."""
    n, p = S.shape
    W = np.zeros((p, rank))
    keep = np.asarray(keep, dtype=int)
    if keep.size == 0 or rank == 0:
        return np.full(p, np.inf), W
    A, c = equilibrated(S[:, keep])
    _, s, Vt = thin_svd(A)
    r = min(rank, int(np.sum(s > 0)))
    W[keep, :r] = Vt[:r].T / s[:r] / c[:, None]
    return np.sqrt(np.sum(W**2, axis=1)), W


def principal_directions(W: np.ndarray, weights: np.ndarray, usable, threshold: float):
    """Eigen-directions of the covariance `W W^T` restricted to the `usable`
    parameters, each parameter's row scaled by `weights` (e.g. decades per estimation
    unit), whose standard deviation exceeds `threshold`: `(1 / std, std, direction)`,
    each direction's largest component positive (an SVD's sign is LAPACK's or a GPU's
    choice)."""
    p = W.shape[0]
    idx = np.flatnonzero(usable)
    if idx.size == 0 or W.shape[1] == 0:
        return []
    P, sd, _ = np.linalg.svd(W[idx] * np.asarray(weights)[idx, None], full_matrices=False)
    out = []
    for j in range(sd.size):
        if sd[j] > threshold:
            v = np.zeros(p)
            v[idx] = P[:, j]
            v = v if v[np.argmax(np.abs(v))] > 0 else -v
            out.append((1.0 / float(sd[j]), float(sd[j]), v))
    return out
