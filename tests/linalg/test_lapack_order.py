"""jaxlib's batched CPU LAPACK kernels deadlock when two of them run at once on a thread
pool with as many threads (2 on a 2-core CI machine). jaxident orders every pair of
independent LAPACK calls; these tests check the compiled graphs, deterministically."""

import jax
import jax.numpy as jnp
import pytest
from helpers import unordered_lapack_pairs

import jaxident as ji
import jaxident.linalg as L


pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="LAPACK's thread pool is the CPU's"
)


def _check(f, *args):
    text = jax.jit(f).lower(*args).compile().as_text()
    assert "lapack" in text
    assert unordered_lapack_pairs(text) == []


def test_checker_detects_independent_calls():
    def f(R):
        return jnp.linalg.svd(R, compute_uv=False), jnp.linalg.qr(R)[1]

    text = jax.jit(jax.vmap(f)).lower(jnp.ones((3, 4, 4))).compile().as_text()
    assert unordered_lapack_pairs(text) != []


@pytest.mark.parametrize(
    "method", [ji.StrongRRQR(), ji.RRQR(), ji.LRRQR(), ji.GKS(), ji.QRCP()], ids=lambda m: m.name
)
@pytest.mark.parametrize("k", [None, 3, "traced"])
def test_selection_graphs_are_ordered(method, k):
    S = jnp.ones((4, 12, 6))
    if k == "traced":
        _check(
            jax.vmap(lambda S: ji.select_parameters(S, k=jnp.int32(3), method=method, throw=False)),
            S,
        )
    else:
        _check(jax.vmap(lambda S: ji.select_parameters(S, k=k, method=method, throw=False)), S)
        _check(jax.vmap(lambda S: L.column_subset(S, k=k, method=method, throw=False)), S)


def test_test_matrix_generators_are_ordered():
    keys = jax.random.split(jax.random.key(0), 3)
    for name in ["jolliffe", "sorensen_embree", "ships", "gu_eisenstat"]:
        _check(jax.vmap(L.testmatrices.FAMILIES[name].generate), keys)


def test_rank_and_metrics_are_ordered():
    S = jnp.ones((4, 12, 6))
    _check(jax.vmap(lambda S: L.numerical_rank(S, L.LargestGap())), S)
    _check(jax.vmap(lambda R: L.css_metrics(jnp.ones(6), R, jnp.int32(3), 12)), jnp.ones((4, 6, 6)))
