from typing import ClassVar

import jax.lax as lax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from ..._runtime._results import RESULTS
from .._misc import as_square, column_norms, eps, givens, matmul, qr_r, qrcp
from ._base import AbstractColumnSelectionMethod, make_selection


# The factorization is held in blocks
#
#     R = [[A, B],      A = R11 (K x K, upper triangular),  B = R12 (K x M),
#          [0, C]]      C = R22 (M x M, dense: only its column norms matter),
#
# together with Ait = (A^{-1})^T and AB = A^{-1} B. With a static split k, K = k and
# M = p - k exactly. With a traced k (one compiled function for every rank in a vmapped
# batch), K = M = p: block-1 slots from `kk` on hold identity columns and block-2 slots
# from `p - kk` on hold zero columns, and both are masked out of every choice.


class _State:
    __slots__ = ("A", "B", "C", "Ait", "AB", "p1", "p2")

    def __init__(self, A, B, C, Ait, AB, p1, p2):
        self.A, self.B, self.C, self.Ait, self.AB, self.p1, self.p2 = A, B, C, Ait, AB, p1, p2

    def tree(self):
        return (self.A, self.B, self.C, self.Ait, self.AB, self.p1, self.p2)


def _refresh(A, B):
    """Recompute A^{-1} (transposed) and A^{-1} B from the factors; returns also whether A
    had an exactly zero diagonal entry (replaced by a tiny one, so no inf appears)."""
    K = A.shape[0]
    d = jnp.diagonal(A)
    singular = jnp.any(d == 0)
    floor = eps(A) * jnp.max(jnp.abs(A)) + jnp.finfo(A.dtype).tiny
    A = A + jnp.diag(jnp.where(d == 0, floor, 0.0))
    Ai = solve_triangular(A, jnp.eye(K, dtype=A.dtype), lower=False)
    return Ai.T, matmul(Ai, B), singular


def _rho2(st, row_real, col_real, scaled=False):
    """rho_ij^2 = (A^{-1}B)_ij^2 + (gamma_j / omega_i)^2 on the real slots, -1 elsewhere.

    Between refreshes the norms are plain sums of squares (one fused pass over C; entries
    up to 1e150 are safe); the certifying evaluation after a refresh uses scaled norms.
    """
    if scaled:
        gamma2 = column_norms(st.C) ** 2
        inv_omega2 = column_norms(st.Ait) ** 2
    else:
        gamma2 = jnp.sum(st.C**2, axis=0)
        inv_omega2 = jnp.sum(st.Ait**2, axis=0)
    rho2 = st.AB**2 + inv_omega2[:, None] * gamma2[None, :]
    return jnp.where(row_real[:, None] & col_real[None, :], rho2, -1.0)


def _swap(st, i, j, kk):
    """Exchange block-1 slot `i < kk` with block-2 slot `j`, in O(K (K + M) + M^2) work
    (Gu & Eisenstat 1996, section 4).

    1. Move slot i cyclically to slot kk-1 and restore the triangle of A with kk-1-i
       Givens rotations of the rows of [A B] (and the columns of A^{-1}); A^{-1} B only
       has its rows permuted.
    2. Reflect C so that its column j is gamma_j e_1.
    3. Exchange slot kk-1 with block-2 slot j; one rotation of row kk-1 of [A B] with
       row 0 of [0 C] restores the triangle, and A^{-1}, A^{-1} B follow by rank-one
       updates.
    """
    A, B, C, Ait, AB, p1, p2 = st.tree()
    km1 = kk - 1
    A, B, Ait, AB, p1 = _cycle_to_last(A, B, Ait, AB, p1, i, km1)
    C = _reflect_column(C, j)
    return _exchange(A, B, C, Ait, AB, p1, p2, j, km1)


def _cycle_to_last(A, B, Ait, AB, p1, i, km1):
    """Step 1 of `_swap`: block-1 slot `i` moved cyclically to slot `km1`, the triangle
    of `A` restored by Givens rotations of the rows of `[A B]` (and of the columns of
    `A^{-1}`, kept transposed in `Ait`); `A^{-1} B` only has its rows permuted."""
    K, M = B.shape
    iK = jnp.arange(K, dtype=jnp.int32)
    # rotations on rows c, c+1 for c = i .. kk-2
    src = jnp.where((iK >= i) & (iK < km1), iK + 1, iK)
    src = jnp.where(iK == km1, i, src)
    A, p1, AB, Ait = A[:, src], p1[src], AB[src, :], Ait[:, src]
    rows_ab = jnp.concatenate([A, B], axis=1)

    def rotate(carry, c):
        t, v = carry
        active = (c >= i) & (c < km1)
        row, nxt = rows_ab[c], rows_ab[c + 1]
        col, ncol = Ait[c], Ait[c + 1]
        t = jnp.where(c == i, row, t)
        v = jnp.where(c == i, col, v)
        cs, sn, _ = givens(t[c], nxt[c])
        out_row = jnp.where(active, cs * t + sn * nxt, row)
        out_col = jnp.where(active, cs * v + sn * ncol, col)
        t_next = jnp.where(
            active, jnp.where(jnp.arange(K + M, dtype=jnp.int32) == c, 0.0, -sn * t + cs * nxt), t
        )
        v_next = jnp.where(active, -sn * v + cs * ncol, v)
        return (t_next, v_next), (out_row, out_col)

    if K > 1:
        init = (rows_ab[0], Ait[0])
        (t, v), (rows, cols) = lax.scan(rotate, init, jnp.arange(K - 1, dtype=jnp.int32))
        rows = jnp.concatenate([rows, rows_ab[-1:]], axis=0)
        cols = jnp.concatenate([cols, Ait[-1:]], axis=0)
        last = (iK == km1) & (i < km1)
        rows = jnp.where(last[:, None], t[None, :], rows)
        cols = jnp.where(last[:, None], v[None, :], cols)
        A, B, Ait = rows[:, :K], rows[:, K:], cols

    return A, B, Ait, AB, p1


def _reflect_column(C, j):
    """Step 2 of `_swap`: `C` reflected so that its column `j` becomes `gamma_j e_1`
    (in place: the exchange then uses block-2 slot `j` directly, no columns move)."""
    M = C.shape[1]
    iM = jnp.arange(M, dtype=jnp.int32)
    x = C[:, j]
    normx = column_norms(x[:, None])[0]
    alpha = -jnp.where(x[0] >= 0, 1.0, -1.0) * normx
    hv = jnp.where(iM == 0, x - alpha, x)
    vv = jnp.sum(hv * hv)
    beta = jnp.where(vv > 0, 2.0 / jnp.where(vv > 0, vv, 1.0), 0.0)
    w = matmul(hv, C)
    colj = (iM == j)[None, :]
    C = jnp.where(colj, jnp.where((iM == 0)[:, None], alpha, 0.0), C - beta * jnp.outer(hv, w))
    return C


def _exchange(A, B, C, Ait, AB, p1, p2, j, km1):
    """Step 3 of `_swap`: block-1 slot `km1` exchanged with block-2 slot `j`; one
    rotation of row `km1` of `[A B]` with row 0 of `[0 C]` restores the triangle, and
    `A^{-1}`, `A^{-1} B` follow by rank-one updates."""
    K, M = B.shape
    iK = jnp.arange(K, dtype=jnp.int32)
    iM = jnp.arange(M, dtype=jnp.int32)
    colj = (iM == j)[None, :]
    # slot kk-1 (column a, mu) against block-2 slot j (column b, nu; gamma)
    lead = iK < km1
    a = jnp.where(lead, A[:, km1], 0.0)
    bj = B[:, j]
    b = jnp.where(lead, bj, 0.0)
    mu, nu, gam = A[km1, km1], bj[km1], C[0, j]
    top = jnp.concatenate([A[km1], jnp.where(iM == j, mu, B[km1])]).at[km1].set(nu)
    bot = jnp.concatenate([jnp.zeros(K, C.dtype), jnp.where(iM == j, 0.0, C[0])]).at[km1].set(gam)
    cs, sn, r = givens(nu, gam)
    top, bot = cs * top + sn * bot, -sn * top + cs * bot
    A = A.at[:, km1].set(jnp.where(lead, b, A[:, km1]))
    B = jnp.where(lead[:, None] & colj, a[:, None], B)
    A = A.at[km1].set(top[:K])
    B = B.at[km1].set(top[K:])
    C = C.at[0].set(bot[K:])
    p1, p2 = p1.at[km1].set(p2[j]), jnp.where(iM == j, p1[km1], p2)

    Ai = Ait.T
    u = matmul(Ai, a)  # A'^{-1} a, with A' the leading (kk-1) x (kk-1) block
    w = matmul(Ai, b)  # A'^{-1} b
    newcol = jnp.where(lead, -w / r, jnp.where(iK == km1, 1.0 / r, 0.0))
    Ai = jnp.where(lead[:, None] & (iK == km1)[None, :], 0.0, Ai)
    Ai = Ai.at[:, km1].set(jnp.where(iK <= km1, newcol, Ai[:, km1]))
    Ai = Ai.at[km1].set(jnp.where(iK == km1, 1.0 / r, jnp.where(iK < km1, 0.0, Ai[km1])))
    # For the old block-2 columns A'^{-1} B'_l = AB[:kk-1, l] + u AB[kk-1, l]; the column
    # that leaves block 1 (now in slot j) has A'^{-1} a = u.
    X = jnp.where(lead[:, None], AB + jnp.outer(u, AB[km1]), 0.0)
    X = jnp.where(colj, jnp.where(lead, u, 0.0)[:, None], X)
    newrow = top[K:]
    AB = jnp.where(lead[:, None], X - jnp.outer(w / r, newrow), AB)
    AB = AB.at[km1].set(newrow / r)
    return _State(A, B, C, Ai.T, AB, p1, p2)


def _strong_rrqr(A, B, C, p1, p2, kk, m_real, f, max_swaps, refresh_every):
    K, M = B.shape
    row_real = jnp.arange(K, dtype=jnp.int32) < kk
    col_real = jnp.arange(M, dtype=jnp.int32) < m_real
    f2 = jnp.asarray(f, A.dtype) ** 2

    def pick(st, scaled=False):
        rho2 = _rho2(st, row_real, col_real, scaled)
        flat = jnp.argmax(rho2).astype(jnp.int32)
        return rho2.reshape(-1)[flat], flat // M, flat % M

    def inner_cond(c):
        _, nswap, count, rho2, _, _ = c
        return (rho2 > f2) & (count < refresh_every) & (nswap < max_swaps)

    def inner_body(c):
        tree, nswap, count, _, i, j = c
        st = _swap(_State(*tree), i, j, kk)
        rho2, i, j = pick(st)
        return st.tree(), nswap + 1, count + 1, rho2, i, j

    def outer_cond(c):
        _, nswap, done, _, _ = c
        return ~done & (nswap < max_swaps)

    def outer_body(c):
        (A, B, C, _, _, p1, p2), nswap, _, _, singular = c
        Ait, AB, sing = _refresh(A, B)
        st = _State(A, B, C, Ait, AB, p1, p2)
        rho2, i, j = pick(st, scaled=True)
        zero = jnp.asarray(0, jnp.int32)
        tree, nswap, count, rho2, _, _ = lax.while_loop(
            inner_cond, inner_body, (st.tree(), nswap, zero, rho2, i, j)
        )
        # Done only when a fresh recomputation needed no exchange.
        return tree, nswap, count == 0, rho2, singular | sing

    Ait, AB, singular = _refresh(A, B)
    tree = (A, B, C, Ait, AB, p1, p2)
    init = (
        tree,
        jnp.asarray(0, jnp.int32),
        jnp.asarray(False),
        jnp.asarray(-1.0, A.dtype),
        singular,
    )
    if max_swaps > 0:
        tree, nswap, done, rho2, singular = lax.while_loop(outer_cond, outer_body, init)
    else:
        st = _State(*tree)
        rho2 = pick(st, scaled=True)[0]
        nswap, done = init[1], rho2 <= f2
    A, B, C, _, _, p1, p2 = tree
    return A, B, C, p1, p2, nswap, done, jnp.sqrt(jnp.maximum(rho2, 0.0)), singular


class StrongRRQR(AbstractColumnSelectionMethod):
    """Algorithm 4.4 of Pearce et al. (2022): the strong rank-revealing QR factorization
    of Gu & Eisenstat (1996, Algorithm 4), with their O(p^2)-per-exchange updates.

    Starting from QR with column pivoting, exchange a selected column `i` with a
    rejected column `j` while
    `rho_ij = sqrt((R11^{-1} R12)_ij^2 + (gamma_j(R22) / omega_i(R11))^2) > f`,
    always taking the largest `rho_ij`; each exchange multiplies `|det R11|` by
    `rho_ij > f`, so the loop terminates. On exit every `rho_ij <= f`, which gives
    (paper Theorem 4.4)
    `sigma_i(R11) >= sigma_i(S) / sqrt(1 + f^2 k (p-k))` and
    `sigma_j(R22) <= sigma_{k+j}(S) sqrt(1 + f^2 k (p-k))`.

    The updated quantities drift by rounding, so they are recomputed from the factors
    every `refresh_every` exchanges and always before the bound is certified on exit.
    A Python-integer `k` compiles a version specialised to that split (cheaper: the
    recomputation costs O(k^2 p) instead of O(p^3)); a traced `k` works under `vmap`
    over matrices of different ranks.

    **Arguments:**

    - `f`: the tolerance `f >= 1`. Use `f > 1` (1.01 to 2 is usual): with `f = 1` two
      equal columns can be exchanged back and forth forever.
    - `max_swaps`: cap on exchanges (default `10 p`); reaching it is reported in the
      result's status.
    - `refresh_every`: exchanges between recomputations of `R11^{-1}` and
      `R11^{-1} R12`.
    - `pivot_first`: start from QR with column pivoting (default). `False` starts from
      the columns in their given order, which needs more exchanges.
    """

    f: float = 1.01
    max_swaps: int | None = None
    refresh_every: int = 16
    pivot_first: bool = True
    name: ClassVar[str] = "srrqr"

    def __check_init__(self):
        if not self.f >= 1:
            raise ValueError(f"StrongRRQR needs f >= 1 (f > 1 recommended), got f={self.f!r}.")
        if self.max_swaps is not None and self.max_swaps < 0:
            raise ValueError(f"max_swaps must be >= 0, got {self.max_swaps}.")
        if self.refresh_every < 1:
            raise ValueError(f"refresh_every must be >= 1, got {self.refresh_every}.")

    def __call__(self, R, k):
        p = R.shape[1]
        max_swaps = 10 * p if self.max_swaps is None else self.max_swaps
        if self.pivot_first:
            R, perm = qrcp(R)
        else:
            R = as_square(R)
            perm = jnp.arange(p, dtype=jnp.int32)
        if isinstance(k, int) and (k == 0 or k == p):
            zero = jnp.asarray(0.0, R.dtype)
            return make_selection(perm, R, k, 0, RESULTS.successful, zero)
        if isinstance(k, int):
            A, B, C = R[:k, :k], R[:k, k:], R[k:, k:]
            p1, p2 = perm[:k], perm[k:]
            kk, m_real = k, p - k
        else:
            k = jnp.asarray(k, jnp.int32)
            zero = jnp.asarray(0, jnp.int32)
            idx = jnp.arange(p, dtype=jnp.int32)
            first = idx < k
            A = jnp.where(first[:, None] & first[None, :], R, jnp.eye(p, dtype=R.dtype))
            Rpad = jnp.pad(R, ((0, p), (0, p)))
            B = jnp.where(first[:, None], lax.dynamic_slice(Rpad, (zero, k), (p, p)), 0.0)
            C = lax.dynamic_slice(Rpad, (k, k), (p, p))
            p1 = jnp.where(first, perm, -1)
            p2 = lax.dynamic_slice(jnp.pad(perm, (0, p), constant_values=-1), (k,), (p,))
            kk, m_real = k, p - k
        A, B, C, p1, p2, nswap, done, rho, singular = _strong_rrqr(
            A, B, C, p1, p2, kk, m_real, self.f, max_swaps, self.refresh_every
        )
        C = qr_r(C)
        if isinstance(k, int):
            top = jnp.concatenate([A, B], axis=1)
            bottom = jnp.concatenate([jnp.zeros((p - k, k), R.dtype), C], axis=1)
            Rn = jnp.concatenate([top, bottom], axis=0)
            perm = jnp.concatenate([p1, p2])
        else:
            Rn = jnp.zeros((2 * p, 2 * p), R.dtype)
            Rn = Rn.at[:p, :p].set(jnp.where(first[:, None] & first[None, :], A, 0.0))
            Rn = lax.dynamic_update_slice(Rn, B, (zero, k))
            Rn = lax.dynamic_update_slice(Rn, C, (k, k))[:p, :p]
            perm = jnp.where(first, p1, p2[jnp.clip(idx - k, 0, p - 1)])
        result = RESULTS.where(done, RESULTS.successful, RESULTS.max_swaps_reached)
        result = RESULTS.where(singular, RESULTS.singular_leading_block, result)
        return make_selection(perm, Rn, k, nswap, result, rho)
