import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_matrix, SENS_FILE

import jaxident.linalg as L


def test_relative_default_matches_numpy_matrix_rank():
    rng = np.random.default_rng(0)
    for n, p, r in [(20, 8, 8), (20, 8, 5), (6, 9, 4), (30, 12, 1)]:
        S = random_matrix(rng, n, p, cond=1e3, rank=r) if n >= p else rng.standard_normal((n, p))
        expected = np.linalg.matrix_rank(S)
        assert int(L.numerical_rank(S)) == expected


def test_relative_and_absolute():
    s = np.logspace(0, -12, 13)
    S = np.diag(s)
    assert int(L.numerical_rank(S, L.RelativeTolerance(1.1e-8))) == 8
    assert int(L.numerical_rank(S, L.RelativeTolerance(0.9e-8))) == 9
    assert int(L.numerical_rank(S, L.RelativeTolerance(0.9e-9))) == 10
    assert int(L.numerical_rank(S, L.AbsoluteTolerance(0.5e-3))) == 4
    assert int(L.numerical_rank(np.zeros((4, 3)))) == 0


def _gap_ref(S, min_gap=1.0):
    s = np.linalg.svd(S, compute_uv=False)
    ratio = s[:-1] / s[1:]
    return int(np.argmax(ratio)) + 1 if ratio.max() > min_gap else S.shape[1]


@pytest.mark.skipif(not SENS_FILE.exists(), reason="shared data not present")
def test_largest_gap_on_paper_matrices():
    data = np.load(SENS_FILE)
    for key in ["SVIR", "SEVIR", "COVID", "HGO", "Wound"]:
        S = data[key]
        # the paper's plain rule: the largest ratio, however small
        assert int(L.numerical_rank(S, L.LargestGap(min_gap=1.0))) == _gap_ref(S)
        # the default asks for a drop of 1e3 in one step
        assert int(L.numerical_rank(S, L.LargestGap())) == _gap_ref(S, 1e3)
    # equilibrated (units removed), no paper matrix has such a drop: full rank
    for key in ["SVIR", "SEVIR", "COVID", "HGO", "Wound"]:
        S = data[key] / np.linalg.norm(data[key], axis=0)
        assert int(L.numerical_rank(S, L.LargestGap())) == S.shape[1]
    assert int(L.numerical_rank(data["HGO"], L.LargestGap(min_gap=1.0))) == 2
    # with a minimum gap that no ratio reaches, full rank
    assert int(L.numerical_rank(data["SVIR"], L.LargestGap(min_gap=1e4))) == 4


def test_gap_with_exact_zeros():
    S = np.diag([3.0, 2.0, 1.0, 0.0, 0.0])
    assert int(L.numerical_rank(S, L.LargestGap())) == 3


def test_rank_jit_vmap():
    rng = np.random.default_rng(1)
    batch = np.stack([random_matrix(rng, 10, 6, rank=r) for r in [1, 3, 6]])
    ks = jax.jit(jax.vmap(lambda S: L.numerical_rank(S)))(jnp.asarray(batch))
    np.testing.assert_array_equal(np.asarray(ks), [1, 3, 6])


def test_float32_warns():
    with pytest.warns(UserWarning, match="float32"):
        L.numerical_rank(jnp.ones((4, 3), jnp.float32))


def test_describe_records_rule():
    assert "1e-08" in L.RelativeTolerance(1e-8).describe()
    assert "eps" in L.RelativeTolerance().describe(shape=(31, 4))
    with pytest.raises(ValueError, match="atol"):
        L.AbsoluteTolerance(-1.0)
