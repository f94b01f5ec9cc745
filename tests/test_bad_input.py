"""Bad or edge inputs get a clear error or a correct result (issue 16, first part)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxident as ji


@pytest.fixture(scope="module")
def S():
    return np.random.default_rng(0).standard_normal((20, 4))


def test_rank_rule_arguments_are_validated():
    for bad in (-1.0, float("nan"), 1.5):
        with pytest.raises(ValueError, match="RelativeTolerance"):
            ji.RelativeTolerance(bad)


def test_select_parameters_edge_inputs(S):
    with pytest.raises(ValueError, match="no rows"):
        ji.select_parameters(np.zeros((0, 3)))
    with pytest.raises(ValueError, match=r"k must lie in \[0, p\]"):
        ji.select_parameters(S, k=jnp.asarray(7))
    # a traced k is clipped, as documented
    k = jax.jit(lambda kk: ji.select_parameters(S, k=kk).k)(jnp.asarray(7))
    assert int(k) == 4


@pytest.mark.parametrize("factor", [1e-310, 1e300])
def test_select_parameters_extreme_scales(S, factor):
    """Subnormal and huge inputs: the same k and metrics as at scale 1, singular values
    scaled exactly (the compiled kernels would flush subnormals to zero or overflow)."""
    ref = ji.select_parameters(S)
    sel = ji.select_parameters(S * factor)
    assert int(sel.k) == int(ref.k) == 4
    assert float(sel.tau) == pytest.approx(float(ref.tau), rel=1e-10)
    np.testing.assert_allclose(
        np.asarray(sel.singular_values) / factor, ref.singular_values, rtol=1e-10
    )


def test_parameters_default_box_at_zero_and_rel():
    with pytest.raises(ValueError, match="Nominal value 0 for \\['a'\\].*Give lower and upper"):
        ji.Parameters(["a", "b"], [0.0, 1.0])
    with pytest.raises(ValueError, match="rel must be a positive number"):
        ji.Parameters(["a"], [1.0], rel=-0.5)
    p = ji.Parameters(["a", "b"], [0.0, 1.0], [-1.0, 0.5], [1.0, 1.5])
    with pytest.raises(ValueError, match="outside their bounds"):
        p.replace(nominal=[5.0, 1.0])
    # infinite bounds mean unbounded; a Latin hypercube refuses them
    q = ji.Parameters(["a"], [1.0], [-np.inf], [np.inf])
    with pytest.raises(ValueError, match="finite"):
        ji.latin_hypercube(jax.random.key(0), q, 4)


def test_relative_scale_at_a_zero_parameter():
    model = ji.models.load("svir")
    theta = model.parameters.nominal.at[1].set(0.0)
    with pytest.raises(ValueError, match=r"scale='relative'.*\['alpha'\] are 0"):
        ji.sensitivity(model, theta, scale="relative")


def test_estimate_and_fix_parameters_respect_bounds():
    model = ji.models.load("svir")
    data = ji.simulate(model).ys
    low = model.parameters.lower
    with pytest.raises(ValueError, match=r"theta0 lies outside the bounds for \['beta'\]"):
        ji.estimate(model, data, theta0=model.parameters.nominal.at[0].set(low[0] / 2), bounds=True)
    with pytest.raises(ValueError, match="outside its bounds"):
        ji.fix_parameters(model, {"nu": 1.0})
