"""`ji.linalg.dependence` and `dependent_sets`: 'no effect' and membership in a
non-identifiable direction, decided by rank under one rule, against NumPy/SciPy, under
`jit` and `vmap`, and unchanged by units and by the basis an SVD returns."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl

import jaxident as ji
import jaxident.linalg as L


def _planted(rng, n=40):
    """Seven columns: c0..c3 independent, c4 = c0 - 1e-3 c1 (a dependency whose
    equilibrated components spread over three decades), c5 at 1e-13 of the others,
    c6 independent but 1e-5 of the others (tiny, real)."""
    B = np.linalg.qr(rng.standard_normal((n, 5)))[0] * [3.0, 1.0, 0.5, 2.0, 1.0]
    c4 = B[:, 0] - 1e-3 * B[:, 1]
    S = np.column_stack([B[:, 0], B[:, 1], B[:, 2], B[:, 3], c4, 1e-13 * B[:, 2], 1e-5 * B[:, 4]])
    return S


def _residual(A, j, rcond=1e-10):
    """The distance of column j to the span of the others, by SciPy (orthonormal basis
    of the others, rank-revealing at `rcond`)."""
    others = np.delete(A, j, axis=1)
    Q = sl.orth(others, rcond=rcond)
    return np.linalg.norm(A[:, j] - Q @ (Q.T @ A[:, j]))


def test_no_effect_membership_and_distances_against_scipy():
    S = _planted(np.random.default_rng(0))
    rule = ji.RelativeTolerance(1e-9)
    dep = jax.jit(L.dependence)(jnp.asarray(S), rule, jnp.ones(7))
    np.testing.assert_array_equal(np.asarray(dep.no_effect), [0, 0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(np.asarray(dep.dependent), [1, 1, 0, 0, 1, 0, 0])
    assert int(dep.rank) == 5 and int(dep.nullity) == 2
    keep = [0, 1, 2, 3, 4, 6]
    A = S[:, keep] / np.linalg.norm(S[:, keep], axis=0)
    d = np.asarray(dep.distance)[keep]
    for j in range(6):
        ref = _residual(A, j)
        if j in (0, 1, 4):
            assert d[j] < 1e-10  # an exact dependency, at rounding level
        else:
            np.testing.assert_allclose(d[j], ref, rtol=1e-8)
    # the tiny column is independent: far above the threshold, not 'no effect'
    assert d[5] > 1e3 * float(dep.threshold)
    # without units, a column at 1e-13 is not 'no effect' (it could be a unit's doing)
    dep2 = L.dependence(jnp.asarray(S), rule)
    assert not bool(dep2.no_effect[5]) and bool(dep2.no_effect.any()) is False


def test_distances_at_full_rank_are_the_inverse_gram_diagonal_under_vmap():
    rng = np.random.default_rng(1)
    batch = rng.standard_normal((5, 30, 6)) * 10.0 ** rng.uniform(-3, 3, (5, 1, 6))
    deps = jax.vmap(lambda S: L.dependence(S, ji.RelativeTolerance()))(jnp.asarray(batch))
    for S, d in zip(batch, np.asarray(deps.distance)):
        A = S / np.linalg.norm(S, axis=0)
        np.testing.assert_allclose(d, 1 / np.sqrt(np.diag(np.linalg.inv(A.T @ A))), rtol=1e-9)
    assert not np.asarray(deps.dependent).any()


def test_decisions_do_not_move_with_units_or_rotations():
    """Columns rescaled by 10^U(-6, 6) with the units alongside, rows rotated (another
    basis of the same column space, and so another SVD basis of the null space): every
    decision is the same."""
    rng = np.random.default_rng(2)
    S = _planted(rng)
    rule = ji.RelativeTolerance(1e-9)
    ref = L.dependence(jnp.asarray(S), rule, jnp.ones(7))
    for _ in range(5):
        c = 10.0 ** rng.uniform(-6, 6, 7)
        Q = np.linalg.qr(rng.standard_normal((40, 40)))[0]
        dep = L.dependence(jnp.asarray(Q @ S * c), rule, jnp.asarray(1 / c))
        for field in ("no_effect", "dependent"):
            np.testing.assert_array_equal(getattr(dep, field), getattr(ref, field))
        assert int(dep.rank) == int(ref.rank)
        sets, _ = L.dependent_sets(dep)
        ref_sets, _ = L.dependent_sets(ref)
        assert sorted(c.involved for c in sets) == sorted(c.involved for c in ref_sets)


def test_dependent_sets_are_the_fundamental_circuits():
    """c4 = c0 - 1e-3 c1 and c7 = c2 + c3: two minimal dependent sets, each of three
    columns; their directions verify (|A v| at rounding level), the pivots are members,
    and the column with no effect is a set of its own."""
    rng = np.random.default_rng(3)
    S = _planted(rng)
    S = np.column_stack([S, S[:, 2] + S[:, 3]])
    dep = L.dependence(jnp.asarray(S), ji.RelativeTolerance(1e-9), jnp.ones(8))
    sets, undecided = L.dependent_sets(dep)
    assert not undecided.any()
    by_support = sorted(c.involved for c in sets)
    assert by_support == [(0, 1, 4), (2, 3, 7), (5,)]
    A = np.asarray(dep.R)
    for c in sets:
        if c.members:
            assert np.linalg.norm(A @ c.direction) < 1e-12
            assert c.pivot in c.involved
    groups = L.components([c.involved for c in sets if c.members], 8)
    assert groups == [(0, 1, 4), (2, 3, 7)]


def test_near_the_threshold_and_given_rank():
    """A dependency exact to 3 times the threshold is `near`; `GivenRank` decides at
    the middle of the gap below its `k`."""
    rng = np.random.default_rng(4)
    B = np.linalg.qr(rng.standard_normal((30, 4)))[0]
    S = np.column_stack(
        [
            B,
            B[:, 0]
            + B[:, 1]
            + 3e-8 * B[:, 2]
            + 3e-7 * np.linalg.qr(rng.standard_normal((30, 5)))[0][:, 4],
        ]
    )
    dep = L.dependence(jnp.asarray(S), ji.RelativeTolerance(1e-7))
    assert bool(np.asarray(dep.near).any())
    far = L.dependence(jnp.asarray(S), ji.RelativeTolerance(1e-4))
    assert not bool(np.asarray(far.near).any()) and bool(np.asarray(far.dependent).any())
    given = L.dependence(jnp.asarray(S), L.GivenRank(4))
    s = np.asarray(given.singular_values)
    np.testing.assert_allclose(float(given.threshold), np.sqrt(s[3] * s[4]), rtol=1e-12)
    assert int(given.rank) == 4 and "given" in L.GivenRank(4).describe()
    with pytest.raises(ValueError, match="non-negative integer"):
        L.GivenRank(-1)


def test_float32_follows_its_own_rounding():
    """In float32 a dependency exact to float32 rounding is found with a tolerance set by
    its own eps, and the distances of the others are float32-accurate."""
    rng = np.random.default_rng(5)
    B = np.linalg.qr(rng.standard_normal((30, 3)))[0].astype(np.float32)
    S = np.column_stack([B, B[:, 0] - 0.5 * B[:, 1]]).astype(np.float32)
    with pytest.warns(UserWarning, match="float32"):
        ji.linalg.numerical_rank(jnp.asarray(S))
    rule = ji.RelativeTolerance(float(1e3 * np.finfo(np.float32).eps))
    dep = L.dependence(jnp.asarray(S), rule)
    assert dep.distance.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(dep.dependent), [1, 1, 0, 1])
    A = S.astype(float) / np.linalg.norm(S.astype(float), axis=0)
    np.testing.assert_allclose(float(dep.distance[2]), _residual(A, 2, 1e-4), rtol=1e-4)


def test_selection_groups_and_frequency_are_group_aware():
    """`a` and `b` enter only as `a*b`: a selection keeps one and fixes the other, and
    says so ('one of {a, b}'); over a batch, the frequency knows the pair is a group."""
    rng = np.random.default_rng(6)
    base = rng.standard_normal((20, 2))
    S = np.column_stack([base[:, 0], base[:, 1], base[:, 1]])  # k, a, b (log units)
    sel = ji.select_parameters(S, names=["k", "a", "b"])
    (g,) = sel.groups
    assert set(g.names) == {"a", "b"} and len(g.kept) == 1
    assert "one of {a, b}" in repr(sel)
    batch = np.stack([S * [1.0, 1.0 + 0.1 * i, 1.0] for i in range(4)])
    sels = jax.vmap(lambda m: ji.select_parameters(m, names=["k", "a", "b"]))(jnp.asarray(batch))
    freq = ji.identifiability_frequency(sels)
    assert freq["k"] == 1.0 and freq["a"] + freq["b"] == pytest.approx(1.0)
    assert freq.non_identifiable == {"k": 0.0, "a": 1.0, "b": 1.0}
    assert freq.groups == ((("a", "b"), 1, 1.0),)
    assert "{a, b}: non-identifiable together in 100%" in str(freq)


def test_dependence_is_an_equinox_module_with_batch_fields():
    S = jnp.asarray(_planted(np.random.default_rng(7)))
    dep = eqx.filter_jit(L.dependence)(S, ji.RelativeTolerance(1e-9))
    assert isinstance(dep, eqx.Module) and dep.R.shape == (7, 7)


def test_output_row_scale_on_the_host_equals_the_compiled_one():
    """The rows' scales of a time-major sensitivity matrix (each output's RMS value over
    the times, repeated), computed with NumPy for concrete outputs and with JAX under
    `jit` and `vmap`: against a loop in NumPy, with 1 where an output is zero, NaN or
    infinite."""
    rng = np.random.default_rng(5)
    Y = rng.standard_normal((6, 3)) * [1e-3, 1.0, 1e4]  # 6 times, 3 outputs, time-major
    Y[:, 1] = 0.0
    flat = Y.reshape(-1)
    ref = np.array([np.sqrt(np.mean(Y[:, 0] ** 2)), 1.0, np.sqrt(np.mean(Y[:, 2] ** 2))])
    host = L.output_row_scale(jnp.asarray(flat), 3)
    assert isinstance(host, jax.Array)
    np.testing.assert_allclose(host, np.tile(ref, 6), rtol=1e-15)
    np.testing.assert_allclose(jax.jit(L.output_row_scale, static_argnums=1)(flat, 3), host,
                               rtol=1e-15)  # fmt: skip
    batch = jax.vmap(L.output_row_scale, in_axes=(0, None))(jnp.stack([flat, 2 * flat]), 3)
    twice = np.tile(ref * [2.0, 1.0, 2.0], 6)  # the zero output keeps its 1
    np.testing.assert_allclose(batch, np.stack([host, twice]), rtol=1e-15)
    for bad in (np.nan, np.inf):
        Z = Y.copy()
        Z[2, 0] = bad
        Z = jnp.asarray(Z.reshape(-1))
        for scale in (L.output_row_scale(Z, 3),
                      jax.jit(L.output_row_scale, static_argnums=1)(Z, 3)):  # fmt: skip
            np.testing.assert_allclose(scale, np.tile([1.0, 1.0, ref[2]], 6), rtol=1e-15)
