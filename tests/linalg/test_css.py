import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    gks_ref,
    lrrqr_ref,
    metrics_ref,
    qrcp_ref,
    random_matrix,
    rrqr_ref,
    srrqr_ref,
    srrqr_rho_ref,
    tol,
)

import jaxident as ji
import jaxident.linalg as L


METHODS = [
    (L.QRCP(), qrcp_ref),
    (L.RRQR(), rrqr_ref),
    (L.LRRQR(), lrrqr_ref),
    (L.GKS(), gks_ref),
    (L.StrongRRQR(f=1.01), lambda S, k: srrqr_ref(S, k, 1.01)),
]
IDS = [m.name for m, _ in METHODS]


def _selected(perm, k):
    return set(np.asarray(perm)[:k].tolist())


@pytest.mark.parametrize("method,ref", METHODS, ids=IDS)
@pytest.mark.parametrize("shape,k", [((30, 12), 5), ((12, 12), 7), ((8, 12), 3), ((40, 6), 1)])
def test_agrees_with_reference(method, ref, shape, k):
    rng = np.random.default_rng(hash((shape, k)) % 2**32)
    S = random_matrix(rng, *shape, cond=1e8) if shape[0] >= shape[1] else rng.standard_normal(shape)
    sel = L.column_subset(S, k=k, method=method)
    assert int(sel.k) == k
    assert sel.result == L.RESULTS.successful
    assert _selected(sel.perm, k) == _selected(ref(S, k), k)
    assert sorted(np.asarray(sel.perm).tolist()) == list(range(shape[1]))
    # R is the triangular factor of S[:, perm]
    R = np.asarray(sel.R)
    Sp = S[:, np.asarray(sel.perm)]
    assert np.allclose(np.tril(R, -1), 0.0)
    np.testing.assert_allclose(R.T @ R, Sp.T @ Sp, atol=tol(np.float64, 1e3) * np.sum(S**2))


@pytest.mark.parametrize("method,ref", METHODS, ids=IDS)
def test_wide_matrices_select_the_same_columns_in_any_order(method, ref):
    """Fewer rows than columns: the leading blocks have null spaces of several vectors,
    of which an SVD returns any basis (LAPACK's and a GPU's differ). The columns chosen
    must not depend on that basis, so they follow a reordering of the columns."""
    rng = np.random.default_rng(7)
    for _ in range(3):
        S = rng.standard_normal((6, 11))
        order = rng.permutation(11)
        first = _selected(L.column_subset(S, k=3, method=method).perm, 3)
        again = _selected(L.column_subset(S[:, order], k=3, method=method).perm, 3)
        assert {int(order[j]) for j in again} == first


@pytest.mark.parametrize("method,ref", METHODS, ids=IDS)
def test_jit_vmap_and_traced_k(method, ref):
    rng = np.random.default_rng(0)
    batch = np.stack([random_matrix(rng, 20, 9, cond=1e6) for _ in range(4)])
    ks = np.array([2, 4, 5, 8], dtype=np.int32)
    f = jax.jit(jax.vmap(lambda S, k: L.column_subset(S, k=k, method=method)))
    sel = f(jnp.asarray(batch), jnp.asarray(ks))
    for b in range(4):
        assert _selected(sel.perm[b], ks[b]) == _selected(ref(batch[b], ks[b]), ks[b])
        assert int(sel.k[b]) == ks[b]


def test_static_and_traced_k_agree():
    rng = np.random.default_rng(1)
    S = random_matrix(rng, 50, 30, cond=1e10)
    method = L.StrongRRQR(f=1.01, pivot_first=False)
    static = L.column_subset(S, k=11, method=method)
    traced = jax.jit(lambda S, k: L.column_subset(S, k=k, method=method))(S, jnp.int32(11))
    assert int(static.swaps) > 0
    np.testing.assert_array_equal(np.asarray(static.perm), np.asarray(traced.perm))
    np.testing.assert_allclose(np.abs(static.R), np.abs(traced.R), atol=1e-12)


@pytest.mark.parametrize("f", [1.01, 1.5, 2.0])
@pytest.mark.parametrize("pivot_first", [True, False])
def test_srrqr_bound_random(f, pivot_first):
    rng = np.random.default_rng(2)
    method = L.StrongRRQR(f=f, pivot_first=pivot_first)
    select = jax.jit(lambda S, k: L.column_subset(S, k=k, method=method))
    for k in [1, 6, 13, 19]:
        S = random_matrix(rng, 40, 20, cond=1e12)
        sel = select(S, jnp.int32(k))
        assert sel.result == L.RESULTS.successful
        rho = srrqr_rho_ref(S, np.asarray(sel.perm), k)
        assert rho <= f * (1 + 1e-6)
        assert float(sel.rho) <= f
        np.testing.assert_allclose(float(sel.rho), rho, rtol=1e-6)


@pytest.mark.parametrize("pivot_first", [True, False])
@pytest.mark.parametrize("family", ["kahan", "gu_eisenstat", "ships", "sorensen_embree"])
def test_srrqr_bound_adversarial(family, pivot_first):
    fam = L.testmatrices.FAMILIES[family]
    f = 1.01
    for seed in range(3):
        S = np.asarray(fam.generate(jax.random.key(seed)))
        sel = L.column_subset(S, k=fam.k, method=L.StrongRRQR(f=f, pivot_first=pivot_first))
        assert sel.result == L.RESULTS.successful
        assert np.all(np.isfinite(np.asarray(sel.R)))
        assert srrqr_rho_ref(S, np.asarray(sel.perm), fam.k) <= f * (1 + 1e-6)


def test_kahan_n100_needs_strong_rrqr():
    # Kahan's matrix defeats QR with column pivoting when the pivoting cannot break
    # ties (the diagonal scaled by (1 - 100 eps)^i, as in Gu & Eisenstat section 6):
    # QRCP then leaves the tiny singular value hidden, strong RRQR exposes it.
    S = np.asarray(L.testmatrices.kahan(jax.random.key(0), 100))
    S = S * (1 - 100 * np.finfo(float).eps) ** np.arange(100)
    s = np.linalg.svd(S, compute_uv=False)
    q = L.column_subset(S, k=99, method=L.QRCP())
    st = L.column_subset(S, k=99, method=L.StrongRRQR(f=1.01))
    r_q = abs(float(q.R[99, 99]))
    r_s = abs(float(st.R[99, 99]))
    assert r_q > 1e3 * s[-1]  # QRCP's trailing entry is far above sigma_min
    assert r_s < 1e3 * s[-1] + 1e-14  # strong RRQR's is near it
    assert srrqr_rho_ref(S, np.asarray(st.perm), 99) <= 1.01 * (1 + 1e-6)


def test_condition_1e34_no_nan():
    for zeta in [0.88, 0.9, 0.95]:
        S = np.asarray(L.testmatrices.gu_eisenstat(jax.random.key(0), 90, zeta=zeta))
        s = np.linalg.svd(S, compute_uv=False)
        assert s[0] / s[-1] > 1e20
        for method in [L.StrongRRQR(f=1.01), L.StrongRRQR(f=1.0, pivot_first=False), L.RRQR()]:
            sel = L.column_subset(S, k=88, method=method, throw=False)
            assert np.all(np.isfinite(np.asarray(sel.R)))
            assert np.isfinite(float(sel.rho))


def test_f_equal_one_is_capped_not_hanging():
    S = np.asarray(L.testmatrices.gu_eisenstat(jax.random.key(3), 90))
    sel = L.column_subset(S, k=88, method=L.StrongRRQR(f=1.0, max_swaps=50), throw=False)
    assert int(sel.swaps) <= 50


def test_max_swaps_reported():
    rng = np.random.default_rng(4)
    S = random_matrix(rng, 30, 20, cond=1e10)
    method = L.StrongRRQR(f=1.01, pivot_first=False, max_swaps=1)
    sel = L.column_subset(S, k=10, method=method, throw=False)
    assert sel.result == L.RESULTS.max_swaps_reached
    with pytest.raises(eqx.EquinoxRuntimeError, match="cap on swaps"):
        L.column_subset(S, k=10, method=method)


def test_swap_updates_match_recomputation():
    # The O(p^2) updates of R11^-1 and R11^-1 R12 against a fresh computation.
    from jaxident._linalg._css._srrqr import _refresh, _State, _swap

    rng = np.random.default_rng(5)
    p, k = 9, 5
    S = random_matrix(rng, 15, p, cond=1e4)
    R = np.linalg.qr(S, mode="r")
    Ait, AB, _ = _refresh(jnp.asarray(R[:k, :k]), jnp.asarray(R[:k, k:]))
    st = _State(
        jnp.asarray(R[:k, :k]),
        jnp.asarray(R[:k, k:]),
        jnp.asarray(R[k:, k:]),
        Ait,
        AB,
        jnp.arange(k, dtype=jnp.int32),
        jnp.arange(k, p, dtype=jnp.int32),
    )
    for i, j in [(4, 0), (0, 0), (1, 2), (2, 3), (0, 1), (3, 1)]:
        st = _swap(st, jnp.int32(i), jnp.int32(j), k)
        A, B, C = (np.asarray(x) for x in (st.A, st.B, st.C))
        perm = np.concatenate([np.asarray(st.p1), np.asarray(st.p2)])
        assert np.allclose(np.tril(A, -1), 0.0)
        full = np.block([[A, B], [np.zeros((p - k, k)), C]])
        np.testing.assert_allclose(full.T @ full, S[:, perm].T @ S[:, perm], atol=1e-12)
        np.testing.assert_allclose(np.asarray(st.Ait).T, np.linalg.inv(A), atol=1e-10)
        np.testing.assert_allclose(np.asarray(st.AB), np.linalg.solve(A, B), atol=1e-10)


@pytest.mark.parametrize("method,ref", METHODS, ids=IDS)
def test_edge_k(method, ref):
    rng = np.random.default_rng(6)
    S = random_matrix(rng, 10, 5)
    for k in [0, 5]:
        sel = L.column_subset(S, k=k, method=method)
        assert int(sel.k) == k
        assert sel.result == L.RESULTS.successful
        assert sorted(np.asarray(sel.perm).tolist()) == list(range(5))


def test_metrics_against_reference():
    rng = np.random.default_rng(7)
    S = random_matrix(rng, 40, 15, cond=1e9)
    for method, _ in METHODS:
        sel = L.column_subset(S, k=6, method=method)
        sigma = np.linalg.svd(S, compute_uv=False)
        g1, g2, tau = L.css_metrics(jnp.asarray(sigma), sel.R, sel.k, S.shape[0])
        r1, r2, rt = metrics_ref(S, np.asarray(sel.perm), 6)
        np.testing.assert_allclose([float(g1), float(g2), float(tau)], [r1, r2, rt], rtol=1e-7)
        assert float(g1) <= 1 + 1e-12 and float(g2) >= 1 - 1e-12


def test_gamma2_not_reported_at_rounding_level():
    S = np.asarray(L.testmatrices.kahan(jax.random.key(0), 100))
    sel = L.column_subset(S, k=99)
    sigma = jnp.linalg.svd(jnp.asarray(S), compute_uv=False)
    _, g2, _ = L.css_metrics(sigma, sel.R, sel.k, 100)
    assert np.isnan(float(g2))


def test_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        L.column_subset(np.ones(5), k=1)
    with pytest.raises(ValueError, match=r"k must lie in \[0, p\]"):
        L.column_subset(np.ones((5, 3)), k=4)
    with pytest.raises(TypeError, match="method"):
        L.column_subset(np.ones((5, 3)), k=1, method="srrqr")
    with pytest.raises(ValueError, match="f >= 1"):
        L.StrongRRQR(f=0.5)
    S = np.ones((5, 3))
    S[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"NaN or inf at \(2, 1\)"):
        L.column_subset(S, k=1)
    # under a trace: a status by default, a run-time error with throw=True
    traced = eqx.filter_jit(lambda S: L.column_subset(S, k=1).result)(S)
    assert traced == L.RESULTS.nonfinite_matrix
    with pytest.raises(eqx.EquinoxRuntimeError, match="NaN or inf"):
        eqx.filter_jit(lambda S: L.column_subset(S, k=1, throw=True).perm)(S)
    sel = L.column_subset(S, k=1, throw=False)
    assert sel.result == L.RESULTS.nonfinite_matrix


def test_singular_leading_block_reported():
    S = np.zeros((6, 4))
    S[:, 0] = 1.0
    with pytest.raises(eqx.EquinoxRuntimeError, match="exactly singular"):
        L.column_subset(S, k=2)


def test_no_retrace():
    rng = np.random.default_rng(8)
    f = eqx.debug.assert_max_traces(lambda S: L.column_subset(S, k=3).perm, max_traces=1)
    g = jax.jit(f)
    for _ in range(3):
        g(jnp.asarray(random_matrix(rng, 10, 6)))


def test_one_driver_rank_is_unit_free_and_matches_select_parameters():
    """`column_subset` and `select_parameters` are one driver: on a full-rank matrix with
    one column in units 1e-12 (and one in 1e12), both find k = 4, the rank of the
    matrix with unit column norms, and the same permutation; NumPy's matrix_rank of the
    raw matrix (tolerance relative to sigma_1) finds 3."""
    rng = np.random.default_rng(5)
    S = rng.standard_normal((30, 4)) * np.array([1e12, 1e-12, 1.0, 1.0])
    scaled = S / np.linalg.norm(S, axis=0)
    assert np.linalg.matrix_rank(scaled) == 4 and np.linalg.matrix_rank(S) == 3
    sel = L.column_subset(S)
    same = ji.select_parameters(S)
    assert int(sel.k) == int(same.k) == 4
    np.testing.assert_array_equal(np.asarray(sel.perm), np.asarray(same.perm))
    np.testing.assert_allclose(np.asarray(sel.scale), np.linalg.norm(S, axis=0), rtol=1e-12)


def test_metrics_off_selects_the_same_columns():
    rng = np.random.default_rng(6)
    batch = jnp.asarray(np.stack([random_matrix(rng, 30, 12, cond=1e6) for _ in range(3)]))
    on = jax.vmap(lambda S: L.column_subset(S, k=5))(batch)
    off = jax.jit(jax.vmap(lambda S: L.column_subset(S, k=5, metrics=False)))(batch)
    np.testing.assert_array_equal(np.asarray(on.perm), np.asarray(off.perm))
    np.testing.assert_allclose(np.asarray(on.R), np.asarray(off.R), rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(np.asarray(on.gamma1))) and np.all(np.isnan(np.asarray(off.gamma1)))
    assert np.all(np.isnan(np.asarray(off.singular_values)))
