"""The sparse LU with a fixed pattern (`_linalg/_sparse_lu.py`) against NumPy's dense
solve in float64, under jit and vmap; its fill against SuperLU's; the refusal of a pivot
too small without pivoting, and the dense LU that takes over in ji.BDF's solve."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from helpers import tol

from jaxident._linalg._sparse_lu import sparse_lu_factor, sparse_lu_plan, sparse_lu_solve
from jaxident._solve._bdf import _lu_factor, _lu_solve


def _network_pattern(rng, n, per_row=2):
    """A random reaction-network-like pattern: a few couplings per species, one hub
    species coupled to every tenth, no structure an ordering gets for free."""
    P = np.zeros((n, n), bool)
    for i in range(n):
        P[i, rng.choice(n, per_row, replace=False)] = True
    P[0, ::10] = P[::10, 0] = True
    return P


def _matrix(rng, P, diag=3.0):
    n = P.shape[0]
    return np.where(P, rng.uniform(-1, 1, P.shape), 0.0) * 0.5 + diag * np.eye(n)


def test_solves_against_numpy_under_jit_and_vmap():
    rng = np.random.default_rng(0)
    n = 120
    P = _network_pattern(rng, n)
    plan = sparse_lu_plan(P)
    assert plan is not None
    As = np.stack([_matrix(rng, P) for _ in range(3)])
    B = rng.standard_normal((3, n, 7))
    factor = jax.jit(jax.vmap(lambda A: sparse_lu_factor(plan, A)))
    solve = jax.jit(jax.vmap(lambda v, b: sparse_lu_solve(plan, v, b)))
    values, ok = factor(jnp.asarray(As))
    assert bool(jnp.all(ok))
    X = np.asarray(solve(values, jnp.asarray(B)))
    ref = np.linalg.solve(As, B)
    np.testing.assert_allclose(X, ref, rtol=0, atol=tol(np.float64) * np.abs(ref).max())
    # one right-hand side, unbatched: the same as a column of the batch
    x = np.asarray(jax.jit(lambda v, b: sparse_lu_solve(plan, v, b))(values[1], B[1, :, 2]))
    np.testing.assert_allclose(x, X[1, :, 2], rtol=1e-13, atol=1e-15)
    # a matrix that is not diagonally dominant but factorizes without pivoting
    A = _matrix(rng, P, diag=0.8)
    v, ok = sparse_lu_factor(plan, jnp.asarray(A))
    np.testing.assert_allclose(np.asarray(sparse_lu_solve(plan, v, jnp.asarray(B[0]))),
                               np.linalg.solve(A, B[0]), rtol=1e-9, atol=1e-9)  # fmt: skip


def test_fill_as_small_as_superlus_and_dense_patterns_refused():
    """The factors hold no more entries than SuperLU's with the same ordering and
    pivoting on the diagonal, far fewer than in the natural order; a pattern whose
    factors fill more than an eighth of a dense matrix gets no plan."""
    rng = np.random.default_rng(1)
    n = 200
    P = _network_pattern(rng, n)
    plan = sparse_lu_plan(P)
    A = sp.csc_matrix(_matrix(rng, P))
    ref = spla.splu(A, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                    options={"SymmetricMode": True})  # fmt: skip
    assert plan.nnz <= ref.L.nnz + ref.U.nnz - n
    natural = spla.splu(A, permc_spec="NATURAL", diag_pivot_thresh=0.0)
    assert plan.nnz < 0.5 * (natural.L.nnz + natural.U.nnz - n)
    assert sparse_lu_plan(rng.random((60, 60)) < 0.5) is None
    assert sparse_lu_plan(P) is plan  # one plan per pattern


def test_a_pivot_too_small_is_refused_and_the_dense_lu_takes_over():
    """A permutation matrix has no LU without pivoting: the sparse factorization says
    so, and ji.BDF's solve with it is LAPACK's, exact."""
    n = 6
    A = np.eye(n)[::-1] * 2.0
    plan = sparse_lu_plan(A != 0, max_fill=1.0)
    _, ok = sparse_lu_factor(plan, jnp.asarray(A))
    assert not bool(ok)
    J = np.eye(n) - A  # I - 1 * J = A
    b = np.arange(1.0, n + 1)
    for p in (plan, None):
        lu = jax.jit(functools.partial(_lu_factor, p))(jnp.asarray(J), 1.0)
        x = np.asarray(_lu_solve(p, lu, jnp.asarray(b)))
        np.testing.assert_allclose(A @ x, b, rtol=1e-14)
    # and a well-posed one takes the sparse path, to the same answer
    rng = np.random.default_rng(2)
    P = _network_pattern(rng, 40)
    M = _matrix(rng, P)
    plan = sparse_lu_plan(P, max_fill=1.0)
    lu = _lu_factor(plan, jnp.asarray(np.eye(40) - M), 1.0)
    assert bool(lu[1])
    np.testing.assert_allclose(np.asarray(_lu_solve(plan, lu, jnp.ones(40))),
                               np.linalg.solve(M, np.ones(40)), rtol=1e-12)  # fmt: skip
