import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxident as ji


def ld(f, x, M):
    return np.asarray(ji.ld_jvp(f, (jnp.asarray(x),), (jnp.asarray(M),))[1])


def test_fsign():
    assert float(ji.fsign(0.0, 0.0, -2.0, 3.0)) == -1.0
    assert float(ji.fsign(0.5, -1.0)) == 1.0
    assert float(ji.fsign(0.0, 0.0)) == 0.0
    np.testing.assert_array_equal(
        np.asarray(ji.fsign(jnp.array([0.0, 0.0, -1.0]), jnp.array([0.0, 2.0, 5.0]))),
        [0.0, 1.0, -1.0],
    )


def test_abs_lexicographic_at_kink_with_ties():
    # fsign(0, 0, 0, -1, 1) = -1: the first two columns are zero (a tie), the third decides
    M = np.array([0.0, 0.0, -1.0, 1.0])
    np.testing.assert_allclose(ld(ji.nabs, 0.0, M), [0.0, 0.0, 1.0, -1.0])
    np.testing.assert_allclose(ld(ji.nabs, 0.0, np.array([0.0, 2.0, -3.0])), [0.0, 2.0, -3.0])
    np.testing.assert_allclose(ld(ji.nabs, 0.0, np.zeros(3)), [0.0, 0.0, 0.0])
    np.testing.assert_allclose(ld(ji.nabs, -2.0, np.array([1.0, -1.0])), [-1.0, 1.0])
    # outside ld_jvp the rule is the ordinary (linear) one: sign(0) = 0 at the kink
    plain = jax.vmap(lambda m: jax.jvp(ji.nabs, (0.0,), (m,))[1])(jnp.array([0.0, 0.0, -1.0, 1.0]))
    np.testing.assert_allclose(np.asarray(plain), [0.0, 0.0, 0.0, 0.0])


def test_max_min_mid_hand_computed():
    f = lambda v: ji.nmax(v[0], v[1])
    # x = y: fsign(0, 1 - 1, 2 - 3) = -1 -> the rows of y
    M = np.array([[1.0, 2.0, 5.0], [1.0, 3.0, 0.0]])
    np.testing.assert_allclose(ld(f, [1.0, 1.0], M), [1.0, 3.0, 0.0])
    g = lambda v: ji.nmin(v[0], v[1])
    np.testing.assert_allclose(ld(g, [1.0, 1.0], M), [1.0, 2.0, 5.0])
    # mid(0, t, 5) at t = 0 (a tie with the lower clamp): directions of t decide
    h = lambda v: ji.nmid(0.0, v[0], 5.0)
    np.testing.assert_allclose(ld(h, [0.0], np.array([[0.0, -1.0, 2.0]])), [0.0, 0.0, 0.0])
    np.testing.assert_allclose(ld(h, [0.0], np.array([[0.0, 1.0, -2.0]])), [0.0, 1.0, -2.0])
    np.testing.assert_allclose(ld(h, [5.0], np.array([[1.0, 1.0]])), [0.0, 0.0])
    np.testing.assert_allclose(ld(h, [2.5], np.array([[1.0, -3.0]])), [1.0, -3.0])


def test_composite_sum_of_abs():
    f = lambda x: ji.nabs(x[0]) + 2 * ji.nabs(x[1])
    M = np.array([[0.0, 1.0, -1.0], [-1.0, 5.0, 2.0]])
    # fsign(0, 0, 1, -1) = 1 and fsign(0, -1, 5, 2) = -1
    np.testing.assert_allclose(ld(f, [0.0, 0.0], M), [2.0, -9.0, -5.0])


def test_equals_jacfwd_away_from_kinks():
    def f(x):
        return jnp.stack(
            [
                ji.nabs(x[0] - x[1]) * x[2],
                ji.nmid(x[0], x[1], x[2]) ** 2,
                ji.nmax(jnp.sin(x[0]), x[1] * x[2]),
            ]
        )

    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.standard_normal(3)
        M = rng.standard_normal((3, 4))
        np.testing.assert_allclose(ld(f, x, M), np.asarray(jax.jacfwd(f)(x)) @ M, rtol=1e-12)


def test_jit_vmap_and_nesting():
    f = lambda x: ji.nabs(x[0]) + ji.nmax(x[1], 0.0)
    M = jnp.array([[0.0, 1.0], [-1.0, 1.0]])
    g = jax.jit(jax.vmap(lambda x: ji.ld_jvp(f, (x,), (M,))[1]))
    out = np.asarray(g(jnp.array([[0.0, 0.0], [1.0, -1.0]])))
    # first point: |.|: fsign(0,0,1)=1 -> [0, 1]; max(x1, 0): fsign(0, -1) < 0 -> 0
    np.testing.assert_allclose(out[0], [0.0, 1.0])
    np.testing.assert_allclose(out[1], [0.0, 1.0])
    # values and ordinary gradients still work
    assert float(ji.nabs(-3.0)) == 3.0 and float(ji.nmid(1.0, 5.0, 3.0)) == 3.0
    assert float(jax.grad(lambda x: ji.nabs(x))(-2.0)) == -1.0


def test_errors():
    with pytest.raises(ValueError, match="same trailing"):
        ji.ld_jvp(lambda a, b: a + b, (1.0, 1.0), (jnp.ones(2), jnp.ones(3)))
