"""Small-sample statistical condition estimation (SCE; Kenney & Laub 1994, as used by
Serban, Homescu & Petzold, "The effect of problem perturbations on nonlinear dynamical
systems and their reduced order models", section 2.1 and 3).

For `u` uniform on the unit sphere of R^n, `E|u^T v| = W_n ||v||` with the Wallis factor
`W_n`; with `q` orthonormal random directions,
`nu(q) = (W_q / W_n) (sum_j |u_j^T v|^2)^(1/2)` is an unbiased estimate of `||v||` whose
relative error exceeds a factor `gamma` with probability of order `gamma^-q`.
"""

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ._misc import matmul


def wallis(n: int | ArrayLike) -> Float[Array, "..."]:
    """The Wallis factor `W_n = E|u^T e_1|` for `u` uniform on the unit sphere of `R^n`:
    `W_1 = 1`, `W_n = 1*3*...*(n-2) / (2*4*...*(n-1))` for odd `n`, and
    `2*2*4*...*(n-2) / (pi*1*3*...*(n-1))` for even `n`
    (`= Gamma(n/2) / (sqrt(pi) Gamma((n+1)/2))`, about `sqrt(2 / (pi (n - 1/2)))`).

    A Python integer `n <= 200` uses the exact products; otherwise (large or traced `n`)
    the log-gamma form, which is stable for any `n`. Jittable and vmappable over `n`.
    """
    if isinstance(n, (int, np.integer)):
        n = int(n)
        if n < 1:
            raise ValueError(f"The Wallis factor needs n >= 1, got {n}.")
        if n <= 200:
            if n == 1:
                return jnp.asarray(1.0)
            if n % 2:  # odd
                num = math.prod(range(1, n - 1, 2))
                den = math.prod(range(2, n, 2))
                return jnp.asarray(num / den)
            num = 2 * math.prod(range(2, n - 1, 2))
            den = math.pi * math.prod(range(1, n, 2))
            return jnp.asarray(num / den)
    n = jnp.asarray(n, dtype=float)
    return jnp.exp(jax.lax.lgamma(n / 2) - jax.lax.lgamma((n + 1) / 2)) / jnp.sqrt(jnp.pi)


def random_orthonormal(key: PRNGKeyArray, n: int, q: int) -> Float[Array, "n q"]:
    """`q` orthonormal vectors drawn uniformly (Haar) from the unit sphere of `R^n`
    (dimension `n`), as the columns of an `(n, q)` matrix: QR of a Gaussian matrix with
    the signs of `R`'s diagonal moved into `Q`. Deterministic given `key`; jittable and
    vmappable over keys."""
    if not (isinstance(n, (int, np.integer)) and isinstance(q, (int, np.integer))):
        raise TypeError("n and q must be Python integers (static sizes).")
    if not 1 <= q <= n:
        raise ValueError(f"Need 1 <= q <= n, got q={q}, n={n}.")
    G = jax.random.normal(key, (n, q))
    Q, R = jnp.linalg.qr(G)
    d = jnp.sign(jnp.diagonal(R))
    return Q * jnp.where(d == 0, 1.0, d)[None, :]


def sce_estimate(projections: ArrayLike, n: int | ArrayLike) -> Float[Array, "..."]:
    """`nu(q) = (W_q / W_n) (sum_j |u_j^T v|^2)^(1/2)` from the `q` `projections`
    `u_j^T v` (last axis) of a vector of dimension `n` onto orthonormal random directions.
    """
    p = jnp.asarray(projections)
    q = p.shape[-1]
    return wallis(q) / wallis(n) * jnp.sqrt(jnp.sum(p**2, axis=-1))


def sce_norm(key: PRNGKeyArray, v: ArrayLike, q: int = 3) -> Float[Array, ""]:
    """SCE estimate of the norm of a vector `v` from `q` random projections (directions
    from `key`) (a test of the estimator; in
    use the projections come from adjoint solves, see `ji.perturbation_analysis`)."""
    v = jnp.asarray(v)
    if v.ndim != 1:
        raise ValueError(f"v must be a vector, got shape {v.shape}.")
    Z = random_orthonormal(key, v.shape[0], q)
    return sce_estimate(matmul(Z.T, v), v.shape[0])


class WorstDirection(eqx.Module):
    """The SCE estimate of the largest growth of a linear map `J` (Serban et al., section
    3), from `q` products `alpha_j = J^T z_j`.

    **Fields:**

    - `alphas`: `(q, n_in)`, the vector-Jacobian products.
    - `Z`: `(n_out, q)`, the random orthonormal output directions used.
    - `P`: `(n_in, n_u)`, the admissible perturbations `delta p = P u`.
    - `sigma`: the singular values of `Psi = P^T (sum alpha_j alpha_j^T) P`, descending.
    - `U`: `(n_u, r)`, `r = min(q, n_u)`, its leading singular vectors (`u_1 = U[:, 0]`).
    - `estimate`: `E = (W_q / W_{n_out}) sqrt(sigma_1)`, eq. (3.2).
    - `direction`: `delta p* = P u_1`, unit norm when `P` has orthonormal columns.
    - `n_out`: the output dimension.
    """

    alphas: Float[Array, "q n_in"]
    Z: Float[Array, "n_out q"]
    P: Float[Array, "n_in n_u"]
    sigma: Float[Array, " r"]
    U: Float[Array, "n_u r"]
    estimate: Float[Array, ""]
    direction: Float[Array, " n_in"]
    n_out: int = eqx.field(static=True)

    def error_norm(self, dp: ArrayLike) -> Float[Array, "..."]:
        """SCE estimate of `||J dp||` for any perturbation(s) `dp` (last axis `n_in`),
        from the stored `alpha_j`: no further solves."""
        proj = matmul(jnp.asarray(dp), self.alphas.T)
        return sce_estimate(proj, self.n_out)

    def singular_vectors(self, k: int | None = None) -> Float[Array, "n_in k"]:
        """The leading `k` estimated directions `P u_j` as columns."""
        U = self.U if k is None else self.U[:, :k]
        return matmul(self.P, U)


def worst_direction(
    vjp_fn: Callable[[Array], Array],
    n_out: int,
    key: PRNGKeyArray,
    q: int = 4,
    P: ArrayLike | None = None,
) -> WorstDirection:
    """The direction of largest growth of a linear map given only its transpose product
    (`vjp_fn(z) = J^T z`), and the SCE estimate of that growth, from `q` products
    (Serban, Homescu & Petzold, section 3).

    **Arguments:**

    - `vjp_fn`: `z (n_out,) -> J^T z (n_in,)`, e.g. the second output of `jax.vjp`.
    - `n_out`: the output dimension.
    - `key`: PRNG key for the random orthonormal directions `z_j`.
    - `q`: their number (the paper uses 4 to 12).
    - `P`: `(n_in, n_u)`: restrict the perturbations to `delta p = P u` (a parameter
      subset: columns of the identity; consistent DAE perturbations: a null-space basis).

    **Returns:** a `WorstDirection`. Jittable (with `vjp_fn` closed over) and vmappable.
    """
    Z = random_orthonormal(key, n_out, q)
    alphas = jax.vmap(vjp_fn, in_axes=1)(Z)  # (q, n_in)
    n_in = alphas.shape[1]
    P = jnp.eye(n_in, dtype=alphas.dtype) if P is None else jnp.asarray(P, dtype=alphas.dtype)
    if P.ndim != 2 or P.shape[0] != n_in:
        raise ValueError(f"P must have shape ({n_in}, n_u), got {P.shape}.")
    AP = matmul(alphas, P)  # (q, n_u): Psi = AP^T AP
    _, s, Vt = jnp.linalg.svd(AP, full_matrices=False)
    sigma = s**2
    U = Vt.T
    # A deterministic sign: the largest component of u_1 positive.
    i = jnp.argmax(jnp.abs(U[:, 0]))
    U = U * jnp.where(U[i, 0] < 0, -1.0, 1.0)
    est = wallis(q) / wallis(n_out) * jnp.sqrt(sigma[0])
    return WorstDirection(
        alphas=alphas,
        Z=Z,
        P=P,
        sigma=sigma,
        U=U,
        estimate=est,
        direction=matmul(P, U[:, 0]),
        n_out=int(n_out),
    )


def similarity_index(
    full_directions: ArrayLike, reduced_directions: ArrayLike, q: int | None = None
) -> Float[Array, ""]:
    """`S_1 = (1/q) sum_{i,j<=q} <u_i, u~_j>^2` (Serban et al. eq. 4.1): how much of the
    span of the full model's leading `q` singular directions the reduced model's span.
    `full_directions` and `reduced_directions` are `(n, k)` matrices of unit columns;
    `q` defaults to the smaller `k`."""
    U = jnp.asarray(full_directions)
    V = jnp.asarray(reduced_directions)
    q = min(U.shape[1], V.shape[1]) if q is None else q
    M = matmul(U[:, :q].T, V[:, :q]) ** 2
    return jnp.sum(M) / q
