"""The super-parameterised linear model of Alberton, Alberton, Di Maggio, Diaz & Secchi
(2013), section 5.1: a test of parameter selection with a known answer."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._model import AlgebraicModel
from .._parameters import Parameters


def orthogonal_design(log2_runs: int = 5) -> np.ndarray:
    """The saturated two-level orthogonal design with `2**m` runs and `2**m - 1` factors
    (Taguchi's L32 for `m = 5`), coded -1/+1, built as a Sylvester-Hadamard matrix:
    factor `a` (a nonzero m-bit vector) takes the level `(-1)^(a . u)` in run `u`.

    Every column is balanced and the columns are mutually orthogonal. The product of
    two columns is again a column (`x_a x_b = x_{a xor b}`), so in this design every
    two-factor interaction is confounded with a main effect.
    """
    runs = np.arange(2**log2_runs)
    factors = np.arange(1, 2**log2_runs)
    bits = np.bitwise_and(runs[:, None], factors[None, :])
    parity = np.array([bin(int(b)).count("1") % 2 for b in bits.ravel()]).reshape(bits.shape)
    return 1.0 - 2.0 * parity


N_FACTORS = 31
_PAIRS = tuple((i, j) for i in range(N_FACTORS) for j in range(N_FACTORS) if i != j)
_NAMES = tuple(f"theta{k + 1}" for k in range(N_FACTORS)) + tuple(
    f"theta{i + 1}_{j + 1}" for i, j in _PAIRS
)
_TRUE = np.concatenate([5.0 * np.arange(1, N_FACTORS + 1), np.zeros(len(_PAIRS))])
_PAIR_I = np.array([i for i, _ in _PAIRS])
_PAIR_J = np.array([j for _, j in _PAIRS])


class LinearSuperparameterized(AlgebraicModel):
    """`y = sum_k x_k theta_k + sum_{i != j} x_i x_j theta_ij` (Alberton et al. 2013,
    eq. 7) with 31 factors: 31 main effects with true values `theta_k = 5 k` (5 to 155)
    and 31 x 30 = 930 cross terms with true value 0, so 961 parameters.

    The 32 experiments are the rows of `orthogonal_design()` (a Taguchi L32 / Hadamard
    two-level orthogonal array, levels -1/+1), for which every cross term is confounded
    with a main effect: at most 31 parameters can be identified, and a selection should
    pick exactly the 31 main effects. `synthetic_data` adds N(0, 0.25) noise, as in the
    paper; `initial_estimates("increasing")` and `("decreasing")` are the paper's
    cases a.1/b.1 and a.2/b.2.

    The paper's sum runs over `i = 1..30, j = 1..31`, which would include squares
    `x_i^2`; with -1/+1 levels a square is the constant column, which no main effect
    absorbs, so a 32nd parameter would become identifiable and the known answer would
    be lost. We take the 930 cross terms as the ordered pairs `i != j` (`theta{i}_{j}`),
    which keeps the paper's count and its conclusion. The paper's design came from
    Statistica; ours is generated here.
    """

    description: ClassVar = "linear model, 31 main effects + 930 confounded cross terms"

    parameters: Parameters = Parameters(
        _NAMES,
        _TRUE,
        np.where(np.arange(_TRUE.size) < N_FACTORS, -1000.0, -100.0),
        np.where(np.arange(_TRUE.size) < N_FACTORS, 1000.0, 100.0),
    )
    conditions: Float[Array, "32 31"] = eqx.field(
        default_factory=lambda: jnp.asarray(orthogonal_design(5))
    )
    noise_variance: ClassVar[float] = 0.25

    def response(self, u, theta):
        v = theta.values
        main = jnp.dot(u, v[:N_FACTORS])
        cross = jnp.dot(u[_PAIR_I] * u[_PAIR_J], v[N_FACTORS:])
        return main + cross

    @staticmethod
    def initial_estimates(order: str = "increasing") -> np.ndarray:
        """The paper's initial estimates: main effects `1.2, 2, 3, ..., 31`
        (`"increasing"`, cases a.1/b.1) or `31, 30, ..., 2, 1.2` (`"decreasing"`, cases
        a.2/b.2), every cross term 1."""
        main = np.arange(1.0, N_FACTORS + 1)
        main[0] = 1.2
        if order == "decreasing":
            main = main[::-1].copy()
        elif order != "increasing":
            raise ValueError(f"order must be 'increasing' or 'decreasing', got {order!r}.")
        return np.concatenate([main, np.ones(len(_PAIRS))])

    def synthetic_data(self, key: PRNGKeyArray, theta=None) -> Float[Array, " 32"]:
        """`y` at the true parameters (or `theta`) for the 32 runs, plus N(0, 0.25) noise."""
        from .._simulate import simulate

        y = simulate(self, theta).ys[:, 0]
        return y + jnp.sqrt(self.noise_variance) * jax.random.normal(key, y.shape, y.dtype)
