"""Models with planted answers: exact scaling symmetries (acting on states and
parameters together, several sharing parameters), parameters without effect, and tiny
but real effects, each drawn at random (nominal values, estimation scales, the order of
the parameters, noise levels). The answer of each is known in closed form: the null
space of the exponent matrix of the identifiable monomials."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import jaxident as ji


class SharedScalings(ji.ODEModel):
    """Four decaying modes and two outputs:

        x1' = -k1 x1           x1(0) = x10
        x2' = -k2 k3 x2        x2(0) = x20
        x3' = -k4 x3           x3(0) = 1
        x4' = -z1 x4           x4(0) = 1
        y1 = V1 (x1 + x2) + eps x3 + 1e-14 x4,   y2 = V2 x1 x2

    Identifiable: k1, k2 k3, V1 x10, V1 x20, V2 x10 x20, k4 (through a term `eps` of the
    output: a tiny but real effect). Two scaling symmetries: `(x1, x2) -> a (x1, x2)`
    with `x10, x20 -> a`, `V1 -> V1 / a`, `V2 -> V2 / a^2`; and `k2 -> b k2`,
    `k3 -> k3 / b`. `z1` moves the outputs by 1e-14 of their size and `z2` not at all:
    no effect."""

    parameters: ji.Parameters
    times: jax.Array
    eps: float = eqx.field(static=True, default=1e-4)
    t0: float = 0.0
    state_names = ("x1", "x2", "x3", "x4")
    output_names = ("y1", "y2")

    def vector_field(self, t, x, th):
        rates = jnp.stack([th.k1, th.k2 * th.k3, th.k4, th.z1])
        return -rates * x

    def initial_state(self, th):
        one = jnp.ones_like(th.x10)
        return jnp.stack([th.x10, th.x20, one, one])

    def output(self, t, x, th):
        y1 = th.V1 * (x[0] + x[1]) + self.eps * x[2] + 1e-14 * x[3]
        y2 = th.V2 * x[0] * x[1]
        return jnp.stack([y1, y2 + 0.0 * th.z2])


SHARED = {
    "no_effect": {"z1", "z2"},
    "groups": [{"x10", "x20", "V1", "V2"}, {"k2", "k3"}],
    # the symmetries on the log scale of each parameter
    "directions": [{"x10": 1, "x20": 1, "V1": -1, "V2": -2}, {"k2": 1, "k3": -1}],
    "identifiable": {"k1", "k4"},
}


class TwoDimensionalScaling(ji.ODEModel):
    """Three unobserved states and two observed ones, a two-dimensional scaling symmetry
    acting on the three unobserved states, five parameters and the three initial
    states:

        u1' = -p1 u1                 w1' = p5 u3 + p7 u1 - m1 w1
        u2' = p2 u1 - p3 u2          w2' = p6 u2 + p8 u3 - m2 w2
        u3' = u2 - k u3              w1(0) = w2(0) = 0

    observed `w1, w2`. `u1 -> a u1` and `(u2, u3) -> b (u2, u3)` leave the outputs
    unchanged with `p2 -> (b / a) p2`, `p7 -> p7 / a`, `p5, p6, p8 -> (1 / b) *`,
    `u10 -> a u10`, `u20, u30 -> b *`: eight non-identifiable parameters in one group
    (the two symmetries share `p2`), two null directions; `p1, p3, k, m1, m2` are
    identifiable."""

    parameters: ji.Parameters
    times: jax.Array
    t0: float = 0.0
    state_names = ("u1", "u2", "u3", "w1", "w2")
    output_names = ("w1", "w2")

    def vector_field(self, t, x, th):
        u1, u2, u3, w1, w2 = x
        return jnp.stack(
            [
                -th.p1 * u1,
                th.p2 * u1 - th.p3 * u2,
                u2 - th.k * u3,
                th.p5 * u3 + th.p7 * u1 - th.m1 * w1,
                th.p6 * u2 + th.p8 * u3 - th.m2 * w2,
            ]
        )

    def initial_state(self, th):
        zero = jnp.zeros_like(th.u10)
        return jnp.stack([th.u10, th.u20, th.u30, zero, zero])

    def output(self, t, x, th):
        return x[3:]


TWO_DIMENSIONAL = {
    "no_effect": set(),
    "groups": [{"p2", "p5", "p6", "p7", "p8", "u10", "u20", "u30"}],
    "directions": [
        {"p2": -1, "p7": -1, "u10": 1},
        {"p2": 1, "p5": -1, "p6": -1, "p8": -1, "u20": 1, "u30": 1},
    ],
    "identifiable": {"p1", "p3", "k", "m1", "m2"},
}


def shared_scalings(seed: int):
    """A random `SharedScalings` problem and its answer."""
    rng = np.random.default_rng(seed)
    names = ["k1", "k2", "k3", "k4", "x10", "x20", "V1", "V2", "z1", "z2"]
    # rates far apart, so that the modes are told apart: k1, k2 k3 and k4
    k1, k23, k4 = rng.permutation([0.15, 0.6, 2.0]) * 10 ** rng.uniform(-0.1, 0.1, 3)
    k2 = 10 ** rng.uniform(-1, 1)
    values = {
        "k1": k1,
        "k2": k2,
        "k3": k23 / k2,
        "k4": k4,
        "x10": 10 ** rng.uniform(-1, 1),
        "x20": 10 ** rng.uniform(-1, 1),
        "V1": 10 ** rng.uniform(-1, 1),
        "V2": 10 ** rng.uniform(-1, 1),
        "z1": 10 ** rng.uniform(-1, 0),
        "z2": 10 ** rng.uniform(-1, 1),
    }
    model = SharedScalings(
        ji.Parameters(names, [values[n] for n in names]),
        jnp.linspace(0.25, 12.0, 30),
        eps=float(10 ** rng.uniform(-4.5, -3.5)),
    )
    # y2's noise makes its rows small: V2's column, and its component in the first
    # symmetry, are 1e-3 of the others after equilibration
    y = np.asarray(ji.simulate(model).ys)
    sigma = np.stack(
        [0.01 * np.abs(y[:, 0]).max() * np.ones(30), 30 * np.abs(y[:, 1]).max() * np.ones(30)], 1
    )
    return _problem(model, sigma, rng), SHARED


def two_dimensional_scaling(seed: int):
    """A random `TwoDimensionalScaling` problem and its answer."""
    rng = np.random.default_rng(seed)
    names = ["p1", "p2", "p3", "k", "p5", "p6", "p7", "p8", "m1", "m2", "u10", "u20", "u30"]
    rates = rng.permutation([0.2, 0.5, 1.3, 3.0, 7.0]) * 10 ** rng.uniform(-0.05, 0.05, 5)
    values = dict(zip(["p1", "p3", "k", "m1", "m2"], rates))
    for n in ["p2", "p5", "p6", "p7", "p8", "u10", "u20", "u30"]:
        values[n] = 10 ** rng.uniform(-1, 1)
    model = TwoDimensionalScaling(
        ji.Parameters(names, [values[n] for n in names]), jnp.linspace(0.2, 10.0, 25)
    )
    y = np.asarray(ji.simulate(model).ys)
    # w2 measured 300-3000 times less precisely than w1: the columns of p6, p8 and m2
    # (which act on w2 alone) are small, so are p6's and p8's components in the second
    # symmetry, and m2 is identified weakly (a small singular value)
    sigma = 0.01 * np.abs(y).max(axis=0) * np.array([1.0, 10 ** rng.uniform(2.5, 3.5)])
    return _problem(model, np.broadcast_to(sigma, y.shape), rng), TWO_DIMENSIONAL


def _problem(model, sigma, rng):
    """The model as a problem with its noise, each parameter on a random estimation
    scale (lin or log10) and in a random order."""
    names = list(model.parameters.names)
    order = [names[i] for i in rng.permutation(len(names))]
    nominal = dict(zip(names, np.asarray(model.parameters.nominal)))
    params = ji.Parameters(order, [nominal[n] for n in order], rel=0.5)
    scales = {n: str(rng.choice(["lin", "log10"])) for n in order}
    experiment = ji.Experiment(np.asarray(model.times), sigma=np.asarray(sigma))
    return ji.Problem(model, experiment, params, scales=scales)


def log_directions(answer, names) -> np.ndarray:
    """The planted null directions as columns on the log scale of each parameter."""
    out = np.zeros((len(names), len(answer["directions"])))
    for j, d in enumerate(answer["directions"]):
        for n, a in d.items():
            out[names.index(n), j] = a
    return out / np.linalg.norm(out, axis=0)


def same_span(A: np.ndarray, B: np.ndarray) -> float:
    """The largest principal angle's sine between the column spans of `A` and `B`."""
    Qa, Qb = np.linalg.qr(A)[0], np.linalg.qr(B)[0]
    if Qa.shape[1] != Qb.shape[1]:
        return math.inf
    return float(np.linalg.norm(Qb - Qa @ (Qa.T @ Qb), 2))


class FastBinding(ji.ODEModel):
    """A reversible binding far faster than the rest of the network (Michaelis and
    Menten's quasi-equilibrium):

        A + B <-> C (kf, kr),   C -> D (k3),   x(0) = (a0, 2 a0, 0, 0)

    observed `A` and `D`. At `kr >> k3` only `kf / kr` moves the outputs to first order;
    moving `kf` and `kr` together changes them by a real `k3 / kr`-sized amount (about
    4e-8 of the largest effect at the nominal values): structurally identifiable (every
    rate enters the outputs' differential-algebraic relations), weak at this point.
    `a0` is the unit of concentration (`kf` in its inverse)."""

    parameters: ji.Parameters
    times: jax.Array
    a0: float = eqx.field(static=True, default=1.0)
    t0: float = 0.0
    integrator = ji.Integrator(ji.Rodas4())

    def vector_field(self, t, x, th):
        a, b, c, _ = x
        v = th.kf * a * b - th.kr * c
        return jnp.stack([-v, -v, v - th.k3 * c, th.k3 * c])

    def initial_state(self, th):
        zero = jnp.zeros_like(th.k3)
        return jnp.stack([self.a0 + zero, 2 * self.a0 + zero, zero, zero])

    def output(self, t, x, th):
        return jnp.stack([x[0], x[3]])


def fast_binding(a0: float = 1.0, order=("kf", "kr", "k3"), scales=None):
    """The `FastBinding` problem with concentrations in units of `a0` (the same
    dynamics: `kf` in the inverse unit), its own simulation as data with 1% noise of
    `a0`, the parameters in `order` on `scales` (default log10)."""
    values = {"kf": 1e5 / a0, "kr": 1e6, "k3": 0.5}
    lower = {"kf": 1e2 / a0, "kr": 1e3, "k3": 0.05}
    upper = {"kf": 1e7 / a0, "kr": 1e8, "k3": 5.0}
    params = ji.Parameters(
        list(order),
        [values[n] for n in order],
        [lower[n] for n in order],
        [upper[n] for n in order],
    )
    model = FastBinding(params, jnp.linspace(0.5, 10.0, 20), a0=a0)
    y = np.asarray(ji.simulate(model).ys)
    scales = dict.fromkeys(order, "log10") if scales is None else scales
    return ji.Problem(model, ji.Experiment(np.asarray(model.times), y, 0.01 * a0), scales=scales)


class Saturation(ji.ODEModel):
    """Michaelis-Menten elimination with its rate far below saturation, `k = V / K`:
    `x' = -k K x / (K + x)`, `x(0) = 1`, observed. Far below saturation (`K >> x`) `K`
    moves the output by a relative `x / K` only: at `K` = 1e13 its column is 1e-13 of
    `k`'s, at `K` of order 1 as large. Structurally both are identifiable (the output's
    equation `y' = -k K y / (K + y)` determines them). Solution in closed form:
    `x(t) = K W((x0 / K) exp((x0 - k K t) / K))` (Lambert's W)."""

    parameters: ji.Parameters
    times: jax.Array
    t0: float = 0.0

    def vector_field(self, t, x, th):
        return -th.k * th.K * x / (th.K + x)

    def initial_state(self, th):
        return jnp.ones(1) + 0 * th.k

    def output(self, t, x, th):
        return x


def saturation(K: float):
    """The `Saturation` problem at `k = 1` and `K`, its box `k` in [0.1, 10] and `K` in
    [0.1, 10 K], log10 scales, its own simulation as data (1% noise)."""
    params = ji.Parameters(["k", "K"], [1.0, K], [0.1, 0.1], [10.0, 10 * K])
    model = Saturation(params, jnp.linspace(0.5, 5.0, 10))
    y = np.asarray(ji.simulate(model).ys)
    experiment = ji.Experiment(np.asarray(model.times), y, 0.01)
    return ji.Problem(model, experiment, scales={"k": "log10", "K": "log10"})
