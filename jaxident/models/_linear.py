"""The super-parameterised linear model of Alberton, Alberton, Di Maggio, Diaz & Secchi
(2013), section 5.1: a test of parameter selection with a known answer."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._model._base import AlgebraicModel
from .._model._parameters import Parameters
from .._runtime._host import device_array
from .._solve._simulate import simulate


def orthogonal_design(log2_runs: int = 5, taguchi: bool = False) -> np.ndarray:
    """The saturated two-level orthogonal design with `2**m` runs and `2**m - 1` factors
    (Taguchi's L32 for `m = 5`), coded -1/+1, built as a Sylvester-Hadamard matrix:
    factor `a` (a nonzero m-bit vector) takes the level `(-1)^(a . u)` in run `u`.
    `taguchi=True` orders the factors as Taguchi's tables do (factors 1, 2, 4, 8, 16
    are the basic columns, the first the slowest; the factor index bit-reversed).

    Every column is balanced and the columns are mutually orthogonal. The product of
    two columns is again a column (`x_a x_b = x_{a xor b}`), so in this design every
    two-factor interaction is confounded with a main effect.
    """
    runs = np.arange(2**log2_runs)
    factors = np.arange(1, 2**log2_runs)
    if taguchi:
        factors = np.array([int(f"{a:0{log2_runs}b}"[::-1], 2) for a in factors])
    bits = np.bitwise_and(runs[:, None], factors[None, :])
    parity = np.array([bin(int(b)).count("1") % 2 for b in bits.ravel()]).reshape(bits.shape)
    return 1.0 - 2.0 * parity


# Alberton et al. (2013), Table 1, case b.2: the re-estimated main effects theta_1 ...
# theta_31 (case b.1 lists the same values in its selection order).
LINEAR_TABLE_1 = np.array([
    14.1113, 13.8686, 17.6081, 23.0792, 26.5707, 31.0258, 39.2003, 45.6158, 46.3685,
    57.3666, 63.0269, 64.8253, 72.3390, 68.5984, 76.4169, 86.7994, 85.0125, 88.3366,
    103.921, 104.095, 108.222, 115.398, 123.449, 120.687, 129.384, 134.280, 138.824,
    145.181, 144.396, 152.752, 159.265,
])  # fmt: skip


def cross_terms(n_factors: int = 31, literal: bool = False) -> tuple[tuple[int, int], ...]:
    """The cross terms `(i, j)` (0-based) of eq. 7: the ordered pairs `i != j` (our
    reading, `n (n - 1)` terms, the paper's count of 930), or with `literal=True` the
    range the equation writes, `i = 1..n-1`, `j = 1..n` (squares `x_i^2` included)."""
    if literal:
        return tuple((i, j) for i in range(n_factors - 1) for j in range(n_factors))
    return tuple((i, j) for i in range(n_factors) for j in range(n_factors) if i != j)


def aliasing_shift(design: np.ndarray, pairs, held: float = 1.0) -> np.ndarray:
    """How far each main-effect estimate moves when the cross terms `pairs` are held at
    `held` instead of their true 0 (least squares on the main effects, noise-free): the
    bias the paper attributes its Table 1 to."""
    X = np.asarray(design, float)
    held_part = held * sum(X[:, i] * X[:, j] for i, j in pairs)
    return np.linalg.lstsq(X, -held_part, rcond=None)[0]


N_FACTORS = 31
_PAIRS = cross_terms(N_FACTORS)
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
        default_factory=lambda: device_array(orthogonal_design(5))
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

        y = simulate(self, theta).ys[:, 0]
        return y + jnp.sqrt(self.noise_variance) * jax.random.normal(key, y.shape, y.dtype)
