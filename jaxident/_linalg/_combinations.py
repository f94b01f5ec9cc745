"""What a non-identifiable group still determines: from its null directions `N`
(`g x d`, one column per direction, in log units where the parameters are positive),
the monomials `prod theta_i^a_i` with small integer exponents orthogonal to every
direction (exact rational arithmetic on the integer matrix the directions round to),
else the linear combinations orthogonal to them, in reduced row echelon form (each
with its own leading parameter). Host-side NumPy on a few small matrices."""

import math
from fractions import Fraction

import numpy as np


def integer_vector(v: np.ndarray, max_den: int = 24) -> np.ndarray | None:
    """`v` up to scale as a vector of small integers, or `None` when it is not one."""
    v = v / np.abs(v).max()
    fr = [Fraction(float(x)).limit_denominator(max_den) for x in v]
    lcm = 1
    for f in fr:
        lcm = lcm * f.denominator // math.gcd(lcm, f.denominator)
    ints = np.array([int(f * lcm) for f in fr])
    if np.abs(ints / np.abs(ints).max() - v).max() > 1e-6:
        return None
    return ints // np.gcd.reduce(np.abs(ints[ints != 0]))


def complement(N: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the complement of the columns of `N` (`g x d`)."""
    U = np.linalg.svd(N, full_matrices=True)[0]
    return U[:, N.shape[1] :]


def echelon(A: np.ndarray) -> np.ndarray:
    """The reduced row echelon form of a full-row-rank `A` (partial pivoting)."""
    A = A.copy()
    r = 0
    for c in range(A.shape[1]):
        if r == A.shape[0]:
            break
        i = r + int(np.argmax(np.abs(A[r:, c])))
        if abs(A[i, c]) < 1e-8 * np.abs(A).max():
            continue
        A[[r, i]] = A[[i, r]]
        A[r] /= A[r, c]
        for j in range(A.shape[0]):
            if j != r:
                A[j] -= A[j, c] * A[r]
        r += 1
    return A


def rational_null_space(M) -> list[list[Fraction]]:
    """A basis of the null space of the integer matrix `M` in exact rationals: from its
    reduced row echelon form (unique), one vector per free column, 1 there and minus the
    pivot rows' entries at the pivot columns (the basis sympy's `Matrix.nullspace`
    gives)."""
    A = [[Fraction(int(x)) for x in row] for row in np.asarray(M)]
    n = np.shape(M)[1]
    pivots: list[int] = []
    for c in range(n):
        r = len(pivots)
        p = next((i for i in range(r, len(A)) if A[i][c] != 0), None)
        if p is None:
            continue
        A[r], A[p] = A[p], A[r]
        A[r] = [x / A[r][c] for x in A[r]]
        for i in range(len(A)):
            if i != r and A[i][c] != 0:
                f = A[i][c]
                A[i] = [a - f * b for a, b in zip(A[i], A[r])]
        pivots.append(c)
    basis = []
    for free in (c for c in range(n) if c not in pivots):
        v = [Fraction(0)] * n
        v[free] = Fraction(1)
        for row, c in enumerate(pivots):
            v[c] = -A[row][free]
        basis.append(v)
    return basis


def _monomial_basis(M, N, order):
    """Integer exponent vectors spanning the null space of the integer matrix `M` (the
    monomials orthogonal to the null directions `N`), computed with the columns in
    `order`; `None` if one is not orthogonal to `N` (rounding in `M`)."""
    out = []
    for b in rational_null_space(M[:, order]):
        den = math.lcm(*(x.denominator for x in b))
        a = np.zeros(len(order), dtype=int)
        a[order] = [int(x * den) for x in b]
        a = a // np.gcd.reduce(np.abs(a[a != 0]))
        if a[np.flatnonzero(a)[0]] < 0:
            a = -a
        if np.abs(N.T @ a).max() > 1e-6 * np.linalg.norm(a):
            return None
        out.append(a)
    return np.array(out, dtype=int)


def monomial_exponents(N: np.ndarray) -> np.ndarray | None:
    """Integer exponents (one row per monomial) of the monomials orthogonal to the null
    directions `N` (`g x d`, log units, `d < g`), or `None` where the directions are not
    rational with small denominators."""
    g = N.shape[0]
    rows = [integer_vector(r) for r in echelon(N.T)]
    if any(r is None for r in rows):
        return None
    M = np.array([[int(x) for x in r] for r in rows])
    # two bases of the same lattice, from the parameters in their order and in reverse
    # (the echelon form frees the last variables): the one with fewer divisions reads
    # best (`N*k, I*k, S*k` rather than `S/I, S/N, S*k`)
    bases = [_monomial_basis(M, N, order) for order in (np.arange(g), np.arange(g)[::-1])]
    bases = [b for b in bases if b is not None]
    return min(bases, key=lambda b: int(np.sum(b < 0))) if bases else None


def linear_combinations(N: np.ndarray) -> np.ndarray:
    """The combinations orthogonal to the null directions `N` (`g x d`), one per row,
    in reduced row echelon form: the same space as the orthogonal complement, but each
    row with its own leading parameter, so that it reads."""
    return echelon(complement(N).T)
