import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxident as ji


def test_parameters_defaults_and_access():
    p = ji.Parameters(["beta", "gamma", "shift"], [0.8, 0.14, -2.0])
    np.testing.assert_allclose(np.asarray(p.lower), [0.4, 0.07, -3.0])
    np.testing.assert_allclose(np.asarray(p.upper), [1.2, 0.21, -1.0])
    assert p.bounds.shape == (3, 2)
    assert p.index("gamma") == 1 and p.indices(["shift", "beta"]) == (2, 0)
    v = p.view(jnp.array([1.0, 2.0, 3.0]))
    assert float(v["gamma"]) == 2.0 and float(v.shift) == 3.0 and float(v[0]) == 1.0
    b, g, s = v
    assert float(s) == 3.0
    assert "beta" in repr(p)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(names=["a", "a"], nominal=[1.0, 2.0]), "Duplicate"),
        (dict(names=["a", "b"], nominal=[1.0]), "shape"),
        (dict(names=["a"], nominal=[np.nan]), "Non-finite"),
        (dict(names=["a"], nominal=[1.0], lower=[2.0], upper=[0.5]), "Lower bound above"),
        (dict(names=["a"], nominal=[3.0], lower=[0.0], upper=[1.0]), "outside their bounds"),
        (dict(names=["a"], nominal=[1.0], lower=[0.0]), "both"),
        (dict(names=[], nominal=[]), "at least one"),
    ],
)
def test_parameters_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ji.Parameters(**kwargs)


def test_unknown_name_suggests():
    p = ji.Parameters(["beta", "gamma"], [0.8, 0.14])
    with pytest.raises(ValueError, match="Did you mean 'gamma'"):
        p.index("gama")
    with pytest.raises(ValueError, match="Unknown parameter"):
        p.view(jnp.ones(2))["delta"]
    with pytest.raises(ValueError, match="shape"):
        p.view(jnp.ones(3))


def test_latin_hypercube_stratification():
    lo, up = np.array([0.0, -2.0, 10.0]), np.array([1.0, 2.0, 10.5])
    n = 50
    X = np.asarray(ji.latin_hypercube(jax.random.key(0), (lo, up), n))
    assert X.shape == (n, 3)
    assert np.all(X >= lo) and np.all(X <= up)
    # exactly one sample in each of the n strata of every coordinate
    for j in range(3):
        strata = np.floor((X[:, j] - lo[j]) / (up[j] - lo[j]) * n).astype(int)
        assert sorted(strata.tolist()) == list(range(n))
    # the (p, 2) form and a Parameters give the same samples
    B = np.stack([lo, up], axis=1)
    np.testing.assert_array_equal(X, np.asarray(ji.latin_hypercube(jax.random.key(0), B, n)))
    params = ji.Parameters(["a", "b", "c"], (lo + up) / 2, lo, up)
    np.testing.assert_array_equal(X, np.asarray(ji.latin_hypercube(jax.random.key(0), params, n)))
    # different keys, different designs; jittable with static n
    Y = jax.jit(lambda k: ji.latin_hypercube(k, B, n))(jax.random.key(1))
    assert not np.allclose(X, np.asarray(Y))


def test_latin_hypercube_errors():
    with pytest.raises(ValueError, match="Lower bound above"):
        ji.latin_hypercube(jax.random.key(0), np.array([[1.0, 0.0]]), 3)
    with pytest.raises(ValueError, match="finite"):
        ji.latin_hypercube(jax.random.key(0), np.array([[0.0, np.inf]]), 3)
    with pytest.raises(ValueError, match=r"\(p, 2\)"):
        ji.latin_hypercube(jax.random.key(0), np.zeros((2, 3)), 3)
    with pytest.raises(ValueError, match="positive integer"):
        ji.latin_hypercube(jax.random.key(0), np.array([[0.0, 1.0]]), 0)


def test_builtin_models_load():
    # Every built-in model loads with consistent parameters. Each is simulated against a
    # reference in its own test module (test_sensitivity, test_estimate, test_dae,
    # test_delay, test_sce, test_stepwise, test_ecoli) or in the notebooks; here only
    # those that no other test solves, so that no model compiles twice for this check.
    solved_elsewhere = set(ji.models.available()) - {"sir"}
    for name in ji.models.available():
        m = ji.models.load(name)
        assert m.parameters.p == len(m.parameters.names)
        assert m.description and name in ji.models.available()
        if name not in solved_elsewhere:
            tr = ji.simulate(m)
            assert np.all(np.isfinite(np.asarray(tr.ys)))
    with pytest.raises(ValueError, match="Did you mean 'svir'"):
        ji.models.load("svri")


@pytest.mark.parametrize("scale", list(ji.Scale))
def test_scale_against_closed_forms_and_differences(scale):
    """`ji.Scale`: h, its inverse, h' (central differences), -ln h' and x h', on the host
    and inside `jit` alike; a `Scale` is its name."""
    x = np.array([0.3, 2.0, 17.0])
    h = {"lin": x, "log": np.log(x), "log10": np.log10(x)}[scale.value]
    np.testing.assert_allclose(scale.forward(x), h, rtol=1e-15)
    np.testing.assert_allclose(scale.inverse(scale.forward(x)), x, rtol=1e-14)
    step = 1e-6 * x
    fd = (scale.forward(x + step) - scale.forward(x - step)) / (2 * step)
    np.testing.assert_allclose(scale.derivative(x), fd, rtol=1e-8)
    np.testing.assert_allclose(scale.log_jacobian(x), -np.log(scale.derivative(x)), rtol=1e-14)
    per = np.array([scale.per_log_unit(v) for v in x])
    np.testing.assert_allclose(per, x * scale.derivative(x), rtol=1e-14)
    v = scale.forward(x)  # d h^-1/dv = 1 / h'(h^-1(v)), and against central differences
    np.testing.assert_allclose(scale.inverse_derivative(v), 1.0 / scale.derivative(x), rtol=1e-14)
    fd = (scale.inverse(v + 1e-6) - scale.inverse(v - 1e-6)) / 2e-6
    np.testing.assert_allclose(scale.inverse_derivative(v), fd, rtol=1e-8)
    on_device = jax.jit(
        lambda v: (
            scale.forward(v, jnp),
            scale.inverse(v, jnp),
            scale.derivative(v, jnp),
            scale.log_jacobian(v, jnp),
            scale.inverse_derivative(v, jnp),
        )
    )(jnp.asarray(x))
    host = (scale.forward(x), scale.inverse(x), scale.derivative(x), scale.log_jacobian(x),
            scale.inverse_derivative(x))  # fmt: skip
    for a, b in zip(on_device, host):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-14)
    assert scale == scale.value and ji.Scale(scale.value) is scale and f"{scale}" == scale.value


def test_problem_scales_are_scales_and_unknown_ones_are_named():
    model = ji.models.load("sir")
    times = np.asarray(model.times)
    data = np.asarray(ji.simulate(model).ys)
    problem = ji.Problem(model, ji.Experiment(times, data, 1.0), scales={"beta": "log10"})
    i = problem.parameters.names.index("beta")
    assert problem.scales[i] is ji.Scale.log10 and problem.transforms[0] is ji.Scale.lin
    beta = float(np.asarray(model.parameters.nominal)[model.parameters.names.index("beta")])
    assert float(problem.parameters.nominal[i]) == pytest.approx(np.log10(beta), rel=1e-15)
    with pytest.raises(
        ValueError, match=r"scale of 'beta' must be one of 'lin', 'log', 'log10', got 'ln'"
    ):
        ji.Problem(model, ji.Experiment(times, data, 1.0), scales={"beta": "ln"})
    with pytest.raises(ValueError, match="observable transformation must be one of .*got 'exp'"):
        ji.Problem(model, ji.Experiment(times, data, 1.0), transforms=["exp"] * data.shape[1])
