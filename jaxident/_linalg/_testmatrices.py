"""Adversarial matrices for column subset selection (Pearce et al. 2022, section 5.2).

Each generator takes an explicit `jax.random` key and static sizes, and is jittable and
vmappable over keys. `FAMILIES` lists the paper's sizes and the rank `k` used with each.
By the paper's Appendix C each matrix is also the sensitivity matrix of a linear ODE.
"""

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ._misc import after as _after, matmul


_ZETA = (0.9, 0.99999)


def _kahan_parts(zeta, n):
    phi = jnp.sqrt(1.0 - zeta**2)
    d = zeta ** jnp.arange(n, dtype=zeta.dtype)
    K = jnp.eye(n, dtype=zeta.dtype) - phi * jnp.triu(jnp.ones((n, n), zeta.dtype), 1)
    return d[:, None] * K, d, phi


def _zeta(key, zeta):
    if zeta is not None:
        if not 0.0 < zeta < 1.0:
            raise ValueError(f"zeta must lie in (0, 1), got {zeta}.")
        return jnp.asarray(zeta, float)
    return jax.random.uniform(key, (), minval=_ZETA[0], maxval=_ZETA[1], dtype=float)


def kahan(key: PRNGKeyArray, n: int = 100, zeta: float | None = None) -> Float[Array, "n n"]:
    """Kahan's matrix `D_n K_n` (Kahan 1966): `D_n = diag(zeta^(i-1))`, `K_n` unit upper
    triangular with `-phi` above the diagonal, `zeta^2 + phi^2 = 1`,
    `zeta ~ U[0.9, 0.99999]`. Numerical rank `n - 1`; QR with column pivoting does not
    reveal it. The paper uses `n = 100`, `k = n - 1`. Pass `zeta` to fix it instead."""
    return _kahan_parts(_zeta(key, zeta), n)[0]


def gu_eisenstat(key: PRNGKeyArray, n: int = 90, zeta: float | None = None) -> Float[Array, "n n"]:
    """Gu & Eisenstat (1996), Example 2, with `k = n - 2`.

    `X` is the Kahan matrix of size `k - 1`, `mu = min_i omega_i(X) / sqrt(k)` with
    `omega_i` the reciprocal row norms of `X^{-1}`. `M[:k-1, :k-1] = X`,
    `M[:k-1, n-1] = -phi D 1`, the diagonal from index `k - 1` on is `mu`, and every
    other entry is zero. Condition numbers reach 1e34 (for `zeta` near 0.9).
    """
    k = n - 2
    X, d, phi = _kahan_parts(_zeta(key, zeta), k - 1)
    Xinv = jax.scipy.linalg.solve_triangular(X, jnp.eye(k - 1, dtype=X.dtype), lower=False)
    omega = 1.0 / jnp.linalg.norm(Xinv, axis=1)
    mu = jnp.min(omega) / jnp.sqrt(jnp.asarray(k, X.dtype))
    M = jnp.zeros((n, n), X.dtype)
    M = M.at[: k - 1, : k - 1].set(X)
    M = M.at[: k - 1, n - 1].set(-phi * d)
    diag = jnp.arange(k - 1, n)
    return M.at[diag, diag].set(mu)


def _haar_columns(key, m, n, after=None):
    G = jax.random.normal(key, (m, n), dtype=float)
    if after is not None:  # order the batched QRs (see `_misc.after`)
        G = _after(G, after)
    return jnp.linalg.qr(G)[0]


def _complete(Vk):
    """`[Vk, null(Vk^T)]` for `Vk` with orthonormal columns."""
    n, k = Vk.shape
    Q = jnp.linalg.qr(Vk, mode="complete")[0]
    return jnp.concatenate([Vk, Q[:, k:]], axis=1)


def _split_singular_values(key, n, k):
    # U[0,1] * 10^U[2,3] for the k dominant and U[0,1] * 10^U[-10,1.9] for the rest,
    # sorted in descending order (as in the authors' code).
    k1, k2, k3 = jax.random.split(key, 3)
    u = jax.random.uniform(k1, (n,), dtype=float)
    e1 = jax.random.uniform(k2, (k,), minval=2.0, maxval=3.0, dtype=float)
    e2 = jax.random.uniform(k3, (n - k,), minval=-10.0, maxval=1.9, dtype=float)
    s = u * 10.0 ** jnp.concatenate([e1, e2])
    return -jnp.sort(-s)


def _usv(U, s, V):
    return matmul(U * s[None, :], V.T)


def sorensen_embree(
    key: PRNGKeyArray, m: int = 200, n: int = 100, k: int = 20
) -> Float[Array, "m n"]:
    """Sorensen & Embree (2016): `U diag(s) V^T` with Haar `U`, `V_k` the orthonormal
    factor of `L` (unit lower triangle with -1 below the diagonal in its first `k`
    rows, -1 everywhere below), and a singular-value gap after the `k`-th."""
    ku, ks = jax.random.split(key)
    L = jnp.tril(-jnp.ones((k, k)), -1) + jnp.eye(k)
    L = jnp.concatenate([L, -jnp.ones((n - k, k))], axis=0)
    V = _complete(jnp.linalg.qr(L)[0])
    return _usv(_haar_columns(ku, m, n, after=V), _split_singular_values(ks, n, k), V)


def jolliffe(
    key: PRNGKeyArray, m: int = 200, blocks: int = 20, block_size: int = 5
) -> Float[Array, "m n"]:
    """Jolliffe (1972), Appendix A1: `V` the orthonormal factor of a block-diagonal
    matrix with blocks `(1 - rho_i) I + rho_i 1 1^T`, `rho_i ~ U[0.9, 0.99999]`;
    `n = blocks * block_size`, `k = blocks`.

    As the authors coded it, `V` is block diagonal, so every algorithm scores
    `gamma1 = gamma2 = 1`: a sanity check rather than an adversary."""
    kr, ku, ks = jax.random.split(key, 3)
    n = blocks * block_size
    rho = jax.random.uniform(kr, (blocks,), minval=_ZETA[0], maxval=_ZETA[1], dtype=float)
    ones = jnp.ones((block_size, block_size))
    eye = jnp.eye(block_size)
    blk = jax.vmap(lambda r: (1.0 - r) * eye + r * ones)(rho)
    Lam = jax.scipy.linalg.block_diag(*[blk[i] for i in range(blocks)])
    V = jnp.linalg.qr(Lam)[0]
    return _usv(_haar_columns(ku, m, n, after=V), _split_singular_values(ks, n, blocks), V)


def ships(key: PRNGKeyArray, m: int = 200, n: int = 100, k: int = 20) -> Float[Array, "m n"]:
    """The SHIPS matrix of Pearce et al. (2022), built to separate the CSS algorithms.

    `V11 = (I - strict upper ones) / (2 ||.||_2)`, `R = chol(I - V11^T V11)`,
    `V21 = Q R` with `Q` the orthonormal factor of a Gaussian `(n-k) x k` matrix,
    `V_k = [V11; V21]`, `V = [V_k, null(V_k^T)]`, and singular values
    `logspace(3, 2, k)` followed by `logspace(1.9, -10, n - k)`.
    """
    ku, kq = jax.random.split(key)
    V11 = jnp.eye(k) - jnp.triu(jnp.ones((k, k)), 1)
    V11 = V11 / (2.0 * jnp.linalg.norm(V11, 2))
    Rc = jnp.linalg.cholesky(jnp.eye(k) - matmul(V11.T, V11)).T
    Q = jnp.linalg.qr(_after(jax.random.normal(kq, (n - k, k), dtype=float), Rc))[0]
    V = _complete(jnp.concatenate([V11, matmul(Q, Rc)], axis=0))
    s = jnp.concatenate([jnp.logspace(3.0, 2.0, k), jnp.logspace(1.9, -10.0, n - k)])
    return _usv(_haar_columns(ku, m, n, after=V), s, V)


@dataclasses.dataclass(frozen=True)
class Family:
    """A family of test matrices at the paper's sizes and the rank `k` it is used with."""

    name: str
    generate: Callable[[PRNGKeyArray], Array]
    k: int


FAMILIES: dict[str, Family] = {
    "kahan": Family("Kahan", lambda key: kahan(key, 100), 99),
    "gu_eisenstat": Family("Gu-Eisenstat", lambda key: gu_eisenstat(key, 90), 88),
    "jolliffe": Family("Jolliffe", lambda key: jolliffe(key, 200, 20, 5), 20),
    "sorensen_embree": Family("Sorensen-Embree", lambda key: sorensen_embree(key), 20),
    "ships": Family("SHIPS", lambda key: ships(key), 20),
}
