"""Names folded into one (issue 48) keep working for one release, with a
`DeprecationWarning` that names the replacement, and give the replacement's result."""

import numpy as np
import pytest
from models_for_tests import two_rate_problem

import jaxident as ji


def test_problem_sensitivity_is_sensitivity_of_the_problem():
    problem = two_rate_problem()
    with pytest.warns(DeprecationWarning, match=r"use ji\.sensitivity\(problem, theta\)"):
        old = ji.problem_sensitivity(problem)
    new = ji.sensitivity(problem)
    np.testing.assert_array_equal(np.asarray(old.matrix), np.asarray(new.matrix))
    assert old.names == new.names and new.scale == ji.SensitivityScale.noise


def test_profile_problem_is_profile_of_the_problem():
    assert ji.profile_problem.__wrapped__ is ji.profile
    with pytest.warns(DeprecationWarning, match=r"use ji\.profile\(problem, name, values\)"):
        with pytest.raises(ValueError, match="nope"):
            ji.profile_problem(two_rate_problem(), "nope")


def test_profile_of_a_model_with_data_is_the_profile_of_its_problem():
    """`ji.profile(model, data, name, values, times)` (a model with data, before it
    became a problem): the profile of `Problem.from_model(model, data, times)`."""
    model = ji.models.load("sir")
    times = np.asarray(model.times)[::4]
    data = np.asarray(ji.simulate(model, None, times).ys)
    name = model.parameters.names[0]
    values = float(model.parameters.nominal[0]) * np.array([0.9, 1.0, 1.1])
    with pytest.warns(DeprecationWarning, match=r"ji\.Problem\.from_model\(model, data, times"):
        old = ji.profile(model, data, name, values, times, progress=False)
    new = ji.profile(ji.Problem.from_model(model, data, times), name, values, progress=False)
    np.testing.assert_allclose(old.cost, new.cost, rtol=1e-12)
    np.testing.assert_allclose(old.estimates, new.estimates, rtol=1e-12)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="solver"):
        ji.profile(model, data, name, values, times, solver=ji.LevenbergMarquardt())
