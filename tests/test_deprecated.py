"""Names folded into one (issue 48) keep working for one release, with a
`DeprecationWarning` that names the replacement, and give the replacement's result."""

import numpy as np
import pytest
from models_for_tests import two_rate_problem

import jaxident as ji
from jaxident._fit._profile import profile_problem


def test_problem_sensitivity_is_sensitivity_of_the_problem():
    problem = two_rate_problem()
    with pytest.warns(DeprecationWarning, match=r"use ji\.sensitivity\(problem, theta\)"):
        old = ji.problem_sensitivity(problem)
    new = ji.sensitivity(problem)
    np.testing.assert_array_equal(np.asarray(old.matrix), np.asarray(new.matrix))
    assert old.names == new.names and new.scale == ji.SensitivityScale.noise


def test_profile_problem_is_profile_of_the_problem():
    assert ji.profile_problem.__wrapped__ is profile_problem
    with pytest.warns(DeprecationWarning, match=r"use ji\.profile\(problem, name, values\)"):
        with pytest.raises(ValueError, match="nope"):
            ji.profile_problem(two_rate_problem(), "nope")
