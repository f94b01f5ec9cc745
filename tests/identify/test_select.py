import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import metrics_ref, SENS_FILE

import jaxident as ji


@pytest.mark.skipif(not SENS_FILE.exists(), reason="shared data not present")
@pytest.mark.parametrize(
    "key,k", [("SVIR", 3), ("SEVIR", 4), ("COVID", 7), ("HGO", 5), ("Wound", 6)]
)
def test_paper_matrices_all_methods_metrics(key, k):
    S = np.load(SENS_FILE)[key]
    for method in [ji.StrongRRQR(), ji.RRQR(), ji.LRRQR(), ji.GKS()]:
        sel = ji.select_parameters(S, k=k, method=method)
        g1, g2, tau = metrics_ref(S, np.asarray(sel.perm), k)
        np.testing.assert_allclose(float(sel.gamma1), g1, rtol=1e-6)
        if not np.isnan(float(sel.gamma2)):
            np.testing.assert_allclose(float(sel.gamma2), g2, rtol=1e-6)
        np.testing.assert_allclose(float(sel.tau), tau, rtol=1e-5)
        assert len(sel.identifiable) == k


@pytest.mark.skipif(not SENS_FILE.exists(), reason="shared data not present")
def test_the_css_papers_rank_convention_on_covid():
    """The paper's code applies rtol = 1e-4 to the singular values of COVID's matrix as
    given: k = 5 with `equilibrate=False` (the same count from NumPy), while the default
    (equilibrated, unit-free) gives 6 and does not move when a column's units change;
    estimability likewise; under jit and vmap the same k."""
    S = np.load(SENS_FILE)["COVID"]
    rule = ji.RelativeTolerance(1e-4)
    s = np.linalg.svd(S, compute_uv=False)
    assert int(np.sum(s > 1e-4 * s[0])) == 5
    assert int(ji.select_parameters(S, rank=rule, equilibrate=False).k) == 5
    assert int(ji.linalg.column_subset(S, rank=rule, equilibrate=False).k) == 5
    assert int(ji.select_parameters(S, rank=rule).k) == 6
    units = np.array([1e3, 1.0, 1e-3, 1.0, 10.0, 1.0, 1.0, 1e-2])
    assert int(ji.select_parameters(S * units, rank=rule).k) == 6
    s_u = np.linalg.svd(S * units, compute_uv=False)
    k_u = int(ji.select_parameters(S * units, rank=rule, equilibrate=False).k)
    assert k_u == int(np.sum(s_u > 1e-4 * s_u[0])) != 5
    assert ji.estimability(S, rank=rule, equilibrate=False).nullity == 3
    assert ji.estimability(S, rank=rule).nullity == 2
    batched = jax.jit(
        jax.vmap(lambda m: ji.select_parameters(m, rank=rule, equilibrate=False, throw=False).k)
    )(jnp.stack([jnp.asarray(S)] * 2))
    np.testing.assert_array_equal(batched, [5, 5])


def test_selection_api_and_report():
    model = ji.models.load("svir")
    sens = ji.sensitivity(model)
    sel = ji.select_parameters(sens, k=3)
    assert sel.non_identifiable == ("alpha",)
    assert set(sel.identifiable) == {"beta", "nu", "gamma"}
    np.testing.assert_array_equal(np.asarray(sel.mask), [True, False, True, True])
    d = sel.to_dict()
    assert d["k"] == 3 and d["non_identifiable"] == ["alpha"] and d["status"] == "successful"
    assert d["rank_rule"] == "k given by the caller"
    text = repr(sel)
    assert "not selected     : alpha" in text and "gamma1" in text
    assert "non-identifiable" not in text and "not a numerical rank" in text
    full = ji.select_parameters(sens)
    assert int(full.k) == 4 and "eps" in full.to_dict()["rank_rule"]
    assert "k = p" in repr(full)


def test_names_and_errors():
    S = np.random.default_rng(0).standard_normal((10, 3))
    sel = ji.select_parameters(S)
    assert sel.names == ("theta0", "theta1", "theta2")
    with pytest.raises(ValueError, match="2 names for a matrix with 3 columns"):
        ji.select_parameters(S, names=["a", "b"])
    with pytest.raises(ValueError, match="unique"):
        ji.select_parameters(S, names=["a", "a", "b"])
    with pytest.raises(ValueError, match="2-D"):
        ji.select_parameters(S[0])
    bad = S.copy()
    bad[0, 0] = np.inf
    with pytest.raises(Exception, match="NaN or inf"):
        ji.select_parameters(bad)
    assert not bool(ji.select_parameters(bad, throw=False).ok)


def test_vmap_batch_and_frequency():
    model = ji.models.load("svir")
    samples = ji.latin_hypercube(jax.random.key(0), model.parameters, 8)
    sens = jax.vmap(lambda th: ji.sensitivity_matrix(model, th))(samples)
    sels = jax.vmap(lambda S: ji.select_parameters(S, names=model.parameters.names, k=3))(sens)
    assert sels.mask.shape == (8, 4)
    freq = ji.identifiability_frequency(sels)
    assert freq == {"beta": 1.0, "alpha": 0.0, "nu": 1.0, "gamma": 1.0}
    with pytest.raises(ValueError, match="batch"):
        _ = sels.identifiable
    assert "batch of 8" in repr(sels)


def test_rank_rules_in_selection():
    # V with entries +-1/2: every column of S has the same norm, so equilibration is a
    # scalar and the rules see the singular values 1, 1e-3, 1e-9, 1e-10 (times 2).
    V = 0.5 * np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1.0]])
    S = np.diag([1.0, 1e-3, 1e-9, 1e-10]) @ V.T
    assert int(ji.select_parameters(S, rank=ji.RelativeTolerance(1e-8)).k) == 2
    assert int(ji.select_parameters(S, rank=ji.LargestGap()).k) == 2
    assert int(ji.select_parameters(S, rank=ji.AbsoluteTolerance(1e-4)).k) == 2
    assert int(ji.select_parameters(S).k) == 4
    assert int(ji.select_parameters(jnp.zeros((3, 2))).k) == 0
    # a diagonal S is full rank whatever the sizes of its columns: they are units
    assert int(ji.select_parameters(np.diag([1.0, 1e-3, 1e-9, 1e-10])).k) == 4


def test_results_have_repr_and_to_dict():
    import json

    model = ji.models.load("svir")
    results = [
        ji.simulate(model),
        ji.sensitivity(model),
        ji.select_parameters(ji.sensitivity(model), k=3),
        ji.linalg.column_subset(np.asarray(ji.sensitivity_matrix(model)), k=3),
        ji.sweep(lambda t: t * 2.0, jnp.ones(3), progress=False),
    ]
    for r in results:
        assert type(r).__name__ in repr(r)
        json.dumps(r.to_dict())
    # one driver, one result: the matrix route names the rejected column theta1 (alpha)
    assert "not selected     : theta1" in repr(results[3])
    assert results[2].non_identifiable == ("alpha",)
    np.testing.assert_array_equal(results[3].perm, results[2].perm)
