"""Small building blocks shared by the linear-algebra core.

Everything here works on one matrix at a time; batching is done by the caller with
`jax.vmap`. Shapes are static and the block partition index `k` is traced, so that one
compiled function serves every numerical rank in a batch.
"""

import jax
import jax.lax as lax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int


HIGHEST = lax.Precision.HIGHEST


def eps(x: Array) -> Float[Array, ""]:
    """Unit roundoff of the (floating) dtype of `x`."""
    return jnp.asarray(jnp.finfo(x.dtype).eps, dtype=x.dtype)


def after(x, *deps):
    """`x`, but only once `deps` have been computed.

    On the CPU every LAPACK routine is an XLA custom call, and a batched one (under
    `vmap`) splits its batch over XLA's intra-op thread pool and waits for the parts. Two
    such calls that do not depend on each other may run at the same time; with as many of
    them as the pool has threads (2 on a 2-core machine) each waits for work that no free
    thread can pick up, and the program hangs (jaxlib 0.10, `jax::ParallelBatchMap`).
    Every pair of independent LAPACK calls in jaxident is therefore ordered through a
    data dependency. (`lax.optimization_barrier` does not do it: the CPU compiler drops
    it without adding a control dependency.) The dependency is `x + 0 * sum(d)` over
    every (finite) entry of each dependency, so that it reaches every producer of `d`;
    the compiler cannot fold it away.
    """
    zero = None
    for d in jax.tree.leaves(deps):
        d = jnp.asarray(d).astype(float)
        t = jnp.sum(jnp.where(jnp.isfinite(d), d, 0.0)) * 0.0
        zero = t if zero is None else zero + t
    if zero is None:
        return x
    return jax.tree.map(lambda a: a + zero.astype(a.dtype) if eqx_is_inexact(a) else a, x)


def eqx_is_inexact(a) -> bool:
    return hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.inexact)


def matmul(a: Array, b: Array) -> Array:
    """Matrix product at full precision: a GPU must not drop to TF32 inside a rank
    decision."""
    return jnp.matmul(a, b, precision=HIGHEST)


def column_norms(x: Float[Array, "m n"]) -> Float[Array, " n"]:
    """Two-norms of the columns of `x`, scaled so that entries between 1e-200 and 1e200
    neither underflow nor overflow when squared."""
    scale = jnp.max(jnp.abs(x), axis=0)
    safe = jnp.where(scale > 0, scale, jnp.ones_like(scale))
    return jnp.where(scale > 0, safe * jnp.sqrt(jnp.sum((x / safe) ** 2, axis=0)), 0.0)


def vector_norm(x: Float[Array, " n"]) -> Float[Array, ""]:
    return column_norms(x[:, None])[0]


def givens(a: Float[Array, ""], b: Float[Array, ""]):
    """Rotation `(c, s, r)` with `c*a + s*b = r` and `-s*a + c*b = 0`."""
    r = jnp.hypot(a, b)
    nonzero = r > 0
    safe_r = jnp.where(nonzero, r, jnp.ones_like(r))
    c = jnp.where(nonzero, a / safe_r, jnp.ones_like(a))
    s = jnp.where(nonzero, b / safe_r, jnp.zeros_like(b))
    return c, s, r


def reduce_to_square(S: Float[Array, "n p"]) -> Float[Array, "p p"]:
    """The triangular factor `R` (p x p) of `S = Q R` (paper, Remark 3.1).

    Every column-subset selection and every singular value of `S` can be computed from
    `R`, which is the size of the Fisher matrix but as accurate as `S`. A matrix with
    fewer rows than columns is padded with zero rows first.
    """
    n, p = S.shape
    if n < p:
        S = jnp.concatenate([S, jnp.zeros((p - n, p), S.dtype)], axis=0)
    return jnp.linalg.qr(S, mode="r")[:p, :]


def as_square(S: Float[Array, "m p"]) -> Float[Array, "p p"]:
    """`S` itself if square, else the triangular factor of `S = Q R` (`m >= p`)."""
    m, p = S.shape
    return S if m == p else reduce_to_square(S)


def qr_r(A: Float[Array, "p p"]) -> Float[Array, "p p"]:
    return jnp.linalg.qr(A, mode="r")


def _qrcp_lapack(A: Float[Array, "m p"]):
    _, R, perm = lax.linalg.qr(A, pivoting=True, full_matrices=False)
    return R, perm.astype(jnp.int32)


def _qrcp_householder(A: Float[Array, "m p"]):
    """Householder QR with column pivoting (Businger & Golub 1965), in `lax` only.

    Used where LAPACK's geqp3 is not available (GPU without MAGMA). Residual column
    norms are recomputed at each step rather than downdated, which costs O(mp) per step
    and keeps them accurate on matrices with condition numbers near 1e34.
    """
    m, p = A.shape
    rows = jnp.arange(m, dtype=jnp.int32)
    cols = jnp.arange(p, dtype=jnp.int32)

    def body(j, carry):
        A, perm = carry
        below = rows >= j
        norms = column_norms(jnp.where(below[:, None], A, 0.0))
        piv = jnp.argmax(jnp.where(cols >= j, norms, -1.0)).astype(jnp.int32)
        src = cols.at[j].set(piv).at[piv].set(j)
        A = A[:, src]
        perm = perm[src]
        x = jnp.where(below, A[:, j], 0.0)
        normx = vector_norm(x)
        xj = A[j, j]
        alpha = -jnp.where(xj >= 0, 1.0, -1.0) * normx
        v = jnp.where(rows == j, x - alpha, x)
        vv = jnp.sum(v * v)
        beta = jnp.where(vv > 0, 2.0 / jnp.where(vv > 0, vv, 1.0), 0.0)
        A = A - beta * jnp.outer(v, matmul(v, A))
        A = A.at[:, j].set(jnp.where(rows < j, A[:, j], jnp.where(rows == j, alpha, 0.0)))
        return A, perm

    A, perm = lax.fori_loop(0, min(m, p), body, (A, jnp.arange(p, dtype=jnp.int32)))
    return jnp.triu(A[:p, :]), perm


def qrcp(A: Float[Array, "m p"]) -> tuple[Float[Array, "r p"], Int[Array, " p"]]:
    """QR with column pivoting of `A` `(m, p)`: `A[:, perm] = Q R`,
    `|R[0,0]| >= |R[1,1]| >= ...`, with `R` of shape `(min(m, p), p)`.

    LAPACK's geqp3 on the CPU, a `lax` Householder implementation elsewhere.
    """
    return lax.platform_dependent(A, cpu=_qrcp_lapack, default=_qrcp_householder)


def block_masks(p: int, k: Int[Array, ""]):
    """Boolean masks of the (1,1), (1,2) and (2,2) blocks for a traced split `k`."""
    idx = jnp.arange(p, dtype=jnp.int32)
    first = idx < k
    b11 = first[:, None] & first[None, :]
    b12 = first[:, None] & ~first[None, :]
    b22 = ~first[:, None] & ~first[None, :]
    return idx, first, b11, b12, b22


def svdvals(A: Array) -> Array:
    return jnp.linalg.svd(A, compute_uv=False)


def leading_block_inverse(R: Float[Array, "p p"], k: Int[Array, ""]):
    """`R11^{-1}` embedded in a p x p zero matrix, and `R11^{-1} R12` likewise.

    Also returns whether `R11` is exactly singular (a zero on its diagonal); the zero is
    then replaced by a tiny multiple of `max|R|` so that no inf or NaN appears, and the
    caller reports the singularity.
    """
    p = R.shape[0]
    idx, _, b11, b12, _ = block_masks(p, k)
    eye = jnp.eye(p, dtype=R.dtype)
    T = jnp.where(b11, R, eye)
    d = jnp.diagonal(T)
    singular = jnp.any(d == 0)
    floor = eps(R) * jnp.max(jnp.abs(R)) + jnp.finfo(R.dtype).tiny
    T = T + jnp.diag(jnp.where(d == 0, floor, 0.0))
    Tinv = jax.scipy.linalg.solve_triangular(T, eye, lower=False)
    Rinv = jnp.where(b11, Tinv, 0.0)
    AB = jnp.where(b12, matmul(Tinv, R), 0.0)
    return Rinv, AB, singular
