import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tol

import jaxident.linalg as L


tm = L.testmatrices


def test_kahan_structure():
    zeta = 0.95
    S = np.asarray(tm.kahan(jax.random.key(0), 12, zeta=zeta))
    phi = np.sqrt(1 - zeta**2)
    expected = np.diag(zeta ** np.arange(12)) @ (np.eye(12) - phi * np.triu(np.ones((12, 12)), 1))
    np.testing.assert_allclose(S, expected, rtol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(S, axis=0), 1.0, rtol=1e-12)  # equal columns
    s = np.linalg.svd(np.asarray(tm.kahan(jax.random.key(1), 100, zeta=0.9)), compute_uv=False)
    assert s[-1] < 1e-15 * s[-2]  # numerical rank n - 1


def test_gu_eisenstat_structure():
    n, zeta = 12, 0.9
    S = np.asarray(tm.gu_eisenstat(jax.random.key(0), n, zeta=zeta))
    k = n - 2
    X = np.asarray(tm.kahan(jax.random.key(0), k - 1, zeta=zeta))
    np.testing.assert_allclose(S[: k - 1, : k - 1], X, rtol=1e-14)
    omega = 1 / np.linalg.norm(np.linalg.inv(X), axis=1)
    mu = omega.min() / np.sqrt(k)
    np.testing.assert_allclose(np.diag(S)[k - 1 :], mu, rtol=1e-12)
    phi = np.sqrt(1 - zeta**2)
    np.testing.assert_allclose(S[: k - 1, n - 1], -phi * zeta ** np.arange(k - 1), rtol=1e-14)
    mask = np.ones_like(S, bool)
    mask[: k - 1, : k - 1] = False
    mask[: k - 1, n - 1] = False
    mask[np.arange(k - 1, n), np.arange(k - 1, n)] = False
    assert np.all(S[mask] == 0)


@pytest.mark.parametrize("name", ["sorensen_embree", "ships", "jolliffe"])
def test_svd_families(name):
    fam = tm.FAMILIES[name]
    S = np.asarray(fam.generate(jax.random.key(3)))
    assert S.shape == (200, 100)
    s = np.linalg.svd(S, compute_uv=False)
    assert np.all(np.diff(s) <= 1e-9 * s[0])
    if name == "ships":
        expected = np.concatenate([np.logspace(3, 2, 20), np.logspace(1.9, -10, 80)])
        np.testing.assert_allclose(s[:40], expected[:40], rtol=1e-10)
        # V11 block of the right singular vectors as constructed
        V = np.linalg.svd(S)[2].T
        V11 = np.eye(20) - np.triu(np.ones((20, 20)), 1)
        V11 /= 2 * np.linalg.norm(V11, 2)
        np.testing.assert_allclose(np.abs(V[:20, :20]), np.abs(V11), atol=1e-8)
    else:
        assert 1e1 < s[0] < 1e3 + 1 and s[-1] < 10**1.9


def test_jolliffe_is_block_diagonal_in_v():
    S = np.asarray(tm.jolliffe(jax.random.key(0), 20, 4, 5))
    Vt = np.linalg.svd(S)[2]
    # S^T S is block diagonal with 5 x 5 blocks
    G = S.T @ S
    blocks = np.kron(np.eye(4), np.ones((5, 5))).astype(bool)
    assert np.abs(G[~blocks]).max() < 1e-9 * np.abs(G).max()
    assert Vt.shape == (20, 20)


def test_vmap_over_keys_and_determinism():
    keys = jax.random.split(jax.random.key(0), 3)
    batch = jax.vmap(tm.ships)(keys)
    assert batch.shape == (3, 200, 100)
    # the same numbers from the same key, batched or not (to rounding: a GPU's batched
    # products round differently), and exactly the same on a second call
    one = np.asarray(tm.ships(keys[1]))
    atol = tol(np.float64, 1e3) * np.abs(one).max()
    np.testing.assert_allclose(np.asarray(batch[1]), one, rtol=0, atol=atol)
    np.testing.assert_array_equal(np.asarray(tm.ships(keys[1])), one)
    assert not jnp.allclose(batch[0], batch[1])
    with pytest.raises(ValueError, match="zeta"):
        tm.kahan(keys[0], 5, zeta=1.5)
