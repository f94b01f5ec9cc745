"""SBML and PEtab formulas as JAX operations: values against SymPy's own evaluation at
30 digits, under `jit` and `vmap`, and the operations they cost (a rate law's
coefficient of 1 is dropped, a compartment's reciprocal is computed once, a reaction's
flux once for all the rates it enters)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

from jaxident._io._sbml import _of_state
from jaxident._io._symbolic import evaluate, stack


a, b, c, k1, k2, V, t = sp.symbols("a b c k1 k2 V time")
_EXPRESSIONS = [
    -1.0 * a * k1 / V + 1.0 * b * k2 / V,  # a reversible reaction, as SBML writes it
    1.0 * a * k1 / V - 1.0 * b * k2 / V - 1.0 * c * k1 / V,
    -a / V**2 + 3 * b * c**-3 - 2.5,
    -1.0 * a,
    -(a + b) / (V * c),
    k1 * a**2 / (k2**2 + a**2) - sp.exp(-t / V),
    sp.Piecewise((a * k1 / V, t < 2.0), (-1.0 * b / V, True)),
    sp.Integer(3) / 4 - a,
]
_VALUES = {"a": 0.7, "b": 1.3, "c": 2.1, "k1": 0.37, "k2": 4.2, "V": 1.9, "time": 1.5}


def _exact(expr, values) -> float:
    subs = {sp.Symbol(k): sp.Float(v, 30) for k, v in values.items()}
    return float(expr.xreplace(subs).evalf(30))


@pytest.mark.parametrize("i", range(len(_EXPRESSIONS)))
def test_evaluate_against_sympy(i):
    expr = _EXPRESSIONS[i]
    names = sorted(_VALUES)

    def f(v):
        return jnp.asarray(evaluate(expr, dict(zip(names, jnp.unstack(v)))), float)

    v = jnp.asarray([_VALUES[n] for n in names])
    ref = _exact(expr, _VALUES)
    eps = float(jnp.finfo(v.dtype).eps)
    np.testing.assert_allclose(float(jax.jit(f)(v)), ref, rtol=20 * eps, atol=20 * eps)
    rng = np.random.default_rng(i)
    vs = v * rng.uniform(0.5, 2.0, (5, v.size))
    refs = [_exact(expr, dict(zip(names, row.tolist()))) for row in np.asarray(vs)]
    np.testing.assert_allclose(np.asarray(jax.vmap(f)(vs)), refs, rtol=20 * eps, atol=20 * eps)


def _count(fn, *args) -> int:
    return len(jax.make_jaxpr(fn)(*args).eqns)


def test_rate_law_operations():
    """`-1.0*a*k1/V + 1.0*b*k2/V`: one reciprocal, five products and a sum (written as
    SymPy holds it, the coefficient 1 and each `V**-1` cost five more)."""
    expr = _EXPRESSIONS[0]
    env = lambda v: dict(zip(["a", "b", "k1", "k2", "V"], jnp.unstack(v)))
    v = jnp.asarray([0.7, 1.3, 0.37, 4.2, 1.9])
    assert _count(lambda v: evaluate(expr, env(v)), v) == 8  # (and the arguments' unstack)


def test_rates_share_their_fluxes():
    """Three rates of one reaction network, sharing fluxes (`a k1 / V` enters the rates
    of `a`, `b` and `c`): `_of_state` computes each flux once and gives SymPy's values."""
    names, states = ("k1", "k2", "V"), ("a", "b", "c")
    flux1, flux2 = a * k1 / V, b * c * k2 / V
    rates = (-1.0 * flux1 + 1.0 * flux2, 1.0 * flux1 - 1.0 * flux2, 1.0 * flux1 - 2.0 * flux2)
    fn = _of_state(names, states, (), rates)
    p, x = jnp.asarray([0.37, 4.2, 1.9]), jnp.asarray([0.7, 1.3, 2.1])
    values = dict(zip(names + states, [*p.tolist(), *x.tolist()]))
    ref = [_exact(r, values) for r in rates]
    eps = float(jnp.finfo(p.dtype).eps)
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(0.0, x, p)), ref, rtol=20 * eps)
    xs = x * jnp.asarray([[1.0], [0.5], [3.0]])
    got = jax.vmap(lambda xx: fn(0.0, xx, p))(xs)
    for row, xx in zip(np.asarray(got), np.asarray(xs)):
        vals = {**values, **dict(zip(states, xx.tolist()))}
        np.testing.assert_allclose(row, [_exact(r, vals) for r in rates], rtol=20 * eps)
    # each rate on its own: 3 + 4 + 5 products and sums, plus reciprocals; shared: the
    # two fluxes (five products and a reciprocal) and one combination per rate
    args = jnp.concatenate([p, x])

    def alone(r):
        return _count(lambda v: evaluate(r, dict(zip(names + states, jnp.unstack(v)))), args)

    separate = sum(alone(r) for r in rates)
    shared = _count(lambda x: fn(0.0, x, p), x)
    assert shared < separate - 4, (shared, separate)


@pytest.mark.parametrize("n", [1, 8, 9, 15, 17, 65])
def test_grouped_stack_against_numpy(n):
    """The grouped stack (groups of at most 8, which XLA's CPU fusion takes as one
    computation) equals `np.stack` for scalars and vectors, under `jit` and `vmap`, and
    its derivatives are the plain stack's in forward and reverse mode."""
    rng = np.random.default_rng(n)

    def f(x):
        return stack([jnp.sin(v) for v in x])

    for shape in ((), (3,)):
        x = rng.normal(size=(n, *shape))
        np.testing.assert_array_equal(jax.jit(f)(x), np.sin(x))
        np.testing.assert_array_equal(jax.vmap(f)(np.stack([x, 2 * x])), np.sin([x, 2 * x]))
        np.testing.assert_array_equal(stack(list(x), grouped=False), x)
        dx = rng.normal(size=x.shape)
        np.testing.assert_allclose(jax.jvp(f, (x,), (dx,))[1], np.cos(x) * dx, rtol=1e-15)
        g = jax.grad(lambda x, dx=dx: jnp.sum(f(x) * dx))(x)
        np.testing.assert_allclose(g, np.cos(x) * dx, rtol=1e-15)
