"""The noise distributions as objects (`ji.Normal()`, `ji.Laplace()`): each carries
its log-density,
cost and scores, checked against SciPy's densities and central differences, under
`jit` and `vmap`; a name that is not a distribution is refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st
from models_for_tests import TwoRates

import jaxident as ji
from jaxident._problem._noise import as_noises, per_output


R = np.array([-2.5, -0.3, 0.0, 0.7, 3.1])
SIGMA = np.array([0.2, 1.0, 3.0, 0.5, 2.0])


NOISES = [ji.Normal(), ji.Laplace()]


@pytest.mark.parametrize("noise", NOISES)
def test_log_density_is_scipys(noise):
    ref = {"normal": st.norm, "laplace": st.laplace}[noise.name].logpdf(R * SIGMA, scale=SIGMA)
    np.testing.assert_allclose(noise.log_density(R, SIGMA), ref, rtol=1e-13)
    jitted = jax.jit(jax.vmap(lambda r, s: noise.log_density(r, s, jnp)))
    np.testing.assert_allclose(jitted(R, SIGMA), ref, rtol=1e-13)


@pytest.mark.parametrize("noise", NOISES)
def test_scores_are_the_derivatives_of_the_log_density(noise):
    """`score` = d(-ln p)/dr at fixed sigma; `scale_score` = d(-ln p)/d ln sigma at
    fixed output (r = e / sigma moves with sigma); `cost` is -2 ln p up to terms
    without the output; `scale_information` is the mean of scale_score squared."""
    e, h = R * SIGMA, 1e-6
    nll = lambda e, s: -noise.log_density(e / s, s)  # noqa: E731
    d_r = (nll(e + h * SIGMA, SIGMA) - nll(e - h * SIGMA, SIGMA)) / (2 * h)
    np.testing.assert_allclose(noise.score(R[R != 0]), d_r[R != 0], rtol=1e-7)
    d_ls = (nll(e, SIGMA * np.exp(h)) - nll(e, SIGMA * np.exp(-h))) / (2 * h)
    np.testing.assert_allclose(noise.scale_score(R), d_ls, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(
        noise.cost(R) - noise.cost(R[::-1]),
        -2 * (noise.log_density(R, SIGMA) - noise.log_density(R[::-1], SIGMA)),
        rtol=1e-13,
    )
    dist = {"normal": st.norm, "laplace": st.laplace}[noise.name]
    z = dist.rvs(size=400_000, random_state=np.random.default_rng(0))
    assert abs(np.mean(noise.scale_score(z) ** 2) - noise.scale_information) < 0.02


def test_per_output_and_names():
    noises = (ji.Normal(), ji.Laplace())
    r = np.stack([R, R], axis=-1)
    out = per_output(noises, lambda d: d.cost, r)
    np.testing.assert_allclose(out, np.stack([R**2, 2 * np.abs(R)], axis=-1))
    assert ji.Laplace() == ji.Laplace() and hash(ji.Normal()) == hash(ji.Normal())
    assert str(ji.Laplace()) == "laplace" and ji.Normal() != ji.Laplace()
    with pytest.raises(ValueError, match=r"ji.Normal\(\), ji.Laplace\(\) or one of 'normal'"):
        as_noises(["cauchy"], "noise distribution")


def test_a_problem_takes_names_or_members_and_refuses_others():
    t = np.linspace(0.5, 6.0, 12)
    e = ji.Experiment(t, np.exp(-0.5 * t)[:, None], 0.01)
    for given in ("laplace", ji.Laplace()):
        problem = ji.Problem(TwoRates(), e, distributions=[given])
        assert problem.distributions == (ji.Laplace(),)
        assert isinstance(problem.distributions[0], ji.Laplace)
    with pytest.raises(ValueError, match="noise distribution must be"):
        ji.Problem(TwoRates(), e, distributions=["cauchy"])
