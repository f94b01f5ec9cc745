"""How a `ji.Problem` is solved: its experiments one after another (none waits for a
slower one), each with only the sensitivity columns of the parameters it depends on,
which changes no number: against each experiment solved alone, the closed form, and the
same problem with every column integrated."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import write_petab

import jaxident as ji
import jaxident._problem._predict as predict_module


class Spiral(ji.ODEModel):
    """`x' = [[-c, w], [-w, -c]] x`, `x(0) = (a, 0)`, `y = s x_1 + o`: a damped rotation
    whose frequency `w` a condition sets; `x_1 = a exp(-c t) cos(w t)`. A fast rotation
    takes many more steps than a slow one. The parameters are declared per formula."""

    parameters: ji.Parameters = ji.Parameters(
        ["w", "c", "a", "s", "o"], [1.0, 0.3, 2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, -1.0], [99.0] * 5
    )
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 6.0, 12))
    t0: float = 0.0
    # loose, so that a different step sequence would show far above 1e-10
    integrator = ji.Integrator(rtol=1e-6, atol=1e-9)

    def vector_field(self, t, x, th):
        return jnp.stack([-th.c * x[0] + th.w * x[1], -th.w * x[0] - th.c * x[1]])

    def initial_state(self, th):
        return jnp.stack([th.a, jnp.zeros_like(th.a)])

    def output(self, t, x, th):
        return th.s * x[0] + th.o

    def parameter_dependence(self):
        return ji.ParameterDependence(frozenset({"w", "c", "a"}), (frozenset({"s", "o"}),))


def _experiments():
    t = np.linspace(0.5, 6.0, 12)
    return [
        # slow, its own scale, no offset (fixed): 3 columns (c, a, s_slow)
        ji.Experiment(t, sigma=0.1, condition={"w": 0.05, "s": "s_slow", "o": 0.0}, name="slow"),
        # a hundred times faster, another scale and an offset: 4 columns
        ji.Experiment(t[:7], sigma=0.2, condition={"w": 100.0, "s": "s_fast"}, name="fast"),
    ]


def _problem(experiments):
    params = ji.Parameters(["c", "a", "s_slow", "s_fast", "o"], [0.3, 2.0, 1.5, 0.5, 0.1])
    return ji.Problem(Spiral(), experiments, params, scales={"c": "log10", "a": "log"})


def test_experiments_of_different_cost_as_if_solved_one_by_one():
    experiments = _experiments()
    problem = _problem(experiments)
    assert problem.columns == ((0, 1, 2), (0, 1, 3, 4))
    steps = [
        int(
            ji.simulate(
                Spiral(), {"w": w, "c": 0.3, "a": 2.0, "s": 1.0, "o": 0.0}, e.times
            ).num_steps
        )
        for w, e in zip((0.05, 100.0), experiments)
    ]
    assert steps[1] > 100 * steps[0], steps

    theta = jnp.asarray(problem.parameters.nominal)
    both = ji.predict(problem, theta, jacobian=True)
    for e, exp in enumerate(experiments):
        alone = ji.predict(_problem([exp]), theta, jacobian=True)
        n = exp.times.size
        np.testing.assert_allclose(
            np.asarray(both.outputs)[e, :n], np.asarray(alone.outputs)[0], rtol=1e-10, atol=0
        )
        np.testing.assert_allclose(
            np.asarray(both.jacobian)[e, :n], np.asarray(alone.jacobian)[0], rtol=1e-10, atol=1e-14
        )
    # the closed form: y = s a exp(-c t) cos(w t) + o, theta = (log10 c, log a, s, s, o)
    c, a = 0.3, 2.0
    for e, (w, s, o, sigma, which) in enumerate(
        ((0.05, 1.5, 0.0, 0.1, 2), (100.0, 0.5, 0.1, 0.2, 3))
    ):
        t = experiments[e].times
        x1 = a * np.exp(-c * t) * np.cos(w * t)
        ref = np.zeros((t.size, 5))
        ref[:, 0] = -s * t * x1 * c * math.log(10)
        ref[:, 1] = s * x1
        ref[:, which] = x1
        if e == 1:
            ref[:, 4] = 1.0
        np.testing.assert_allclose(
            np.asarray(both.outputs)[e, : t.size, 0], s * x1 + o, rtol=1e-4, atol=1e-5
        )
        np.testing.assert_allclose(
            np.asarray(both.jacobian)[e, : t.size, 0], ref / sigma, rtol=1e-4, atol=1e-4
        )
    # under jit and vmap: the same numbers
    thetas = jnp.stack([theta, theta + 0.05])
    batched = jax.jit(jax.vmap(lambda th: ji.predict(problem, th, jacobian=True).jacobian))(thetas)
    for i in range(2):
        one = ji.predict(problem, thetas[i], jacobian=True).jacobian
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(one), rtol=1e-10, atol=1e-14)


def test_only_the_columns_an_experiment_depends_on(tmp_path, monkeypatch):
    """Two conditions of a PEtab problem, each with its own observable scale: each
    experiment integrates the columns of `k`, `a` and its own scale (not the other
    scale), and the matrix is the one with every column integrated, to the
    integrator's accuracy; a model without a declared dependence integrates every
    column."""
    pars = (
        "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\n"
        "k\tlog10\t0.01\t10\t0.7\t1\na\tlog10\t0.01\t10\t2.0\t1\nt_on\tlin\t0.1\t3.5\t1.3\t0\n"
        "s0\tlog10\t0.1\t10\t1.5\t1\ns1\tlog10\t0.1\t10\t0.8\t1\n"
    )
    obs = (
        "observableId\tobservableFormula\tnoiseFormula\n"
        "obs_X\tobservableParameter1_obs_X * X\tnoiseParameter1_obs_X\n"
    )
    meas = (
        "observableId\tsimulationConditionId\tmeasurement\ttime\tobservableParameters\t"
        "noiseParameters\n"
    )
    for c, s in (("c0", "s0"), ("c1", "s1")):
        meas += "".join(f"obs_X\t{c}\t1.0\t{t}\t{s}\t0.1\n" for t in (0.5, 1.0, 2.0, 3.0))
    conds = "conditionId\tconditionName\nc0\tc0\nc1\tc1\n"
    path = write_petab(tmp_path, parameters=pars, observables=obs, measurements=meas,
                       conditions=conds)  # fmt: skip
    problem = ji.petab.load(path)
    names = problem.parameters.names
    assert [[names[j] for j in c] for c in problem.columns] == [["k", "a", "s0"], ["k", "a", "s1"]]
    J = np.asarray(ji.predict(problem, jacobian=True).jacobian)
    assert np.all(J[0, ..., names.index("s1")] == 0) and np.all(J[1, ..., names.index("s0")] == 0)
    monkeypatch.setattr(predict_module, "_padded_columns", lambda problem: None)
    J_all = np.asarray(ji.predict(problem, jacobian=True).jacobian)
    np.testing.assert_allclose(J, J_all, rtol=1e-6, atol=1e-9 * np.abs(J_all).max())
    assert problem.model.parameter_dependence() is not None
    assert ji.AbstractModel.parameter_dependence(problem.model) is None


class WrongDependence(ji.ODEModel):
    """Declares no output set for its one output."""

    parameters: ji.Parameters = ji.Parameters(["k"], [0.5])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 2.0, 4))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        return -th.k * x

    def initial_state(self, th):
        return jnp.array([1.0])

    def output(self, t, x, th):
        return x[0]

    def parameter_dependence(self):
        return ji.ParameterDependence(frozenset({"k"}), ())


def test_a_wrong_dependence_declaration_is_refused():
    with pytest.raises(ValueError, match="gives 0 output sets for 1 outputs"):
        ji.Problem(WrongDependence(), ji.Experiment([1.0, 2.0]))


class Inflow(ji.ODEModel):
    """`x' = k_in - k_out x`, `x(0) = x0`, `y = s x`: from `x_a` the state reaches
    `x_a e^{-k_out t} + (k_in / k_out)(1 - e^{-k_out t})`, and its steady state is
    `k_in / k_out`."""

    parameters: ji.Parameters = ji.Parameters(
        ["k_in", "k_out", "x0", "s"], [1.0, 0.5, 0.2, 1.0], [0.0] * 4, [99.0] * 4
    )
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 4.0, 8))
    t0: float = 0.0
    integrator = ji.Integrator(ji.Rodas4(), rtol=1e-10, atol=1e-12)

    def vector_field(self, t, x, th):
        return jnp.stack([th.k_in - th.k_out * x[0]])

    def initial_state(self, th):
        return jnp.stack([th.x0])

    def output(self, t, x, th):
        return th.s * x[0]


def _reached(x_a, k_in, k_out, t):
    """`Inflow`'s state at `t` from `x_a`."""
    return x_a * jnp.exp(-k_out * t) + k_in / k_out * (1 - jnp.exp(-k_out * t))


def test_pre_equilibrated_and_plain_experiments_mix():
    """One problem with a pre-equilibrated experiment (its own inflow `k_pre` first), a
    plain one (inflow `2 k_in`, from `x0`) and a steady-state measurement of the plain
    model: outputs and Jacobian against the closed form (on log scales), and against
    each experiment solved alone; under jit and vmap the same numbers."""
    t = np.linspace(0.5, 4.0, 8)
    experiments = [
        ji.Experiment(t, sigma=0.1, preequilibration={"k_in": "k_pre"}, name="pre"),
        ji.Experiment(t[:5], sigma=0.2, condition={"k_in": 2.0 * 1.3}, name="plain"),
        ji.Experiment([np.inf], sigma=0.1, name="steady"),
    ]
    params = ji.Parameters(["k_in", "k_out", "x0", "s", "k_pre"], [1.3, 0.4, 0.2, 1.5, 0.6])
    scales = {n: "log" for n in params.names}
    problem = ji.Problem(Inflow(), experiments, params, scales=scales)
    assert problem.preequilibrated == (True, False, False)
    names = problem.parameters.names
    # (no declared dependence: every parameter mapped in, the plain experiment's fixed
    # k_in and the pre-equilibration's k_pre not)
    assert [[names[j] for j in c] for c in problem.columns] == [
        ["k_in", "k_out", "x0", "s", "k_pre"],
        ["k_out", "x0", "s"],
        ["k_in", "k_out", "x0", "s"],
    ]
    theta = jnp.asarray(problem.parameters.nominal)
    pred = ji.predict(problem, theta, jacobian=True)

    def closed(th_log):
        k_in, k_out, x0, s, k_pre = jnp.exp(th_log)
        pre = s * _reached(k_pre / k_out, k_in, k_out, jnp.asarray(t))
        plain = s * _reached(x0, 2.0 * 1.3, k_out, jnp.asarray(t[:5]))
        return pre, plain, s * k_in / k_out

    ref = closed(theta)
    jac = jax.jacfwd(closed)(theta)
    out, J = np.asarray(pred.outputs)[..., 0], np.asarray(pred.jacobian)[..., 0, :]
    for e, (n, sigma) in enumerate(((8, 0.1), (5, 0.2), (1, 0.1))):
        np.testing.assert_allclose(out[e, :n], np.atleast_1d(ref[e]), rtol=1e-8)
        np.testing.assert_allclose(J[e, :n], np.atleast_2d(jac[e]) / sigma, rtol=1e-7, atol=1e-9)
    for e, exp in enumerate(experiments):
        alone = ji.predict(ji.Problem(Inflow(), [exp], params, scales=scales), theta, jacobian=True)
        n = exp.times.size
        np.testing.assert_allclose(
            np.asarray(pred.jacobian)[e, :n], np.asarray(alone.jacobian)[0], rtol=1e-10, atol=1e-14
        )
    thetas = jnp.stack([theta, theta + 0.05])
    batched = jax.jit(jax.vmap(lambda th: ji.predict(problem, th, jacobian=True).jacobian))(thetas)
    for i in range(2):
        one = ji.predict(problem, thetas[i], jacobian=True).jacobian
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(one), rtol=1e-10, atol=1e-14)


def test_fixing_parameters_of_a_problem():
    """`Problem.fix` holds parameters at values on their estimation scales: the fixed
    problem predicts the same outputs, and its Jacobian is the full one's remaining
    columns, through a pre-equilibration (`k_pre`) and a condition (`x0` enters the
    plain experiment only); each experiment's columns lose the fixed ones. The rest is
    estimated from the full problem's outputs back to the values that made them."""
    t = np.linspace(0.5, 4.0, 8)
    experiments = [
        ji.Experiment(t, sigma=0.1, preequilibration={"k_in": "k_pre"}, name="pre"),
        ji.Experiment(t[:5], sigma=0.2, condition={"k_in": 2.0 * 1.3}, name="plain"),
    ]
    params = ji.Parameters(["k_in", "k_out", "x0", "s", "k_pre"], [1.3, 0.4, 0.2, 1.5, 0.6],
                           [0.1] * 5, [10.0] * 5)  # fmt: skip
    problem = ji.Problem(Inflow(), experiments, params, scales={n: "log" for n in params.names})
    theta = jnp.asarray(problem.parameters.nominal) + jnp.asarray([0.1, -0.1, 0.2, 0.0, 0.3])
    fixed = problem.fix({"k_pre": float(theta[4]), "x0": float(theta[2])})
    assert fixed.parameters.names == ("k_in", "k_out", "s")
    assert fixed.scales == ("log",) * 3
    names = fixed.parameters.names
    columns = [[names[j] for j in c] for c in fixed.columns]
    assert columns == [["k_in", "k_out", "s"], ["k_out", "s"]]
    keep = np.asarray([0, 1, 3])
    full = ji.predict(problem, theta, jacobian=True)
    part = ji.predict(fixed, theta[keep], jacobian=True)
    np.testing.assert_allclose(np.asarray(part.outputs), np.asarray(full.outputs), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(part.jacobian), np.asarray(full.jacobian)[..., keep],
                               rtol=1e-10, atol=1e-14)  # fmt: skip
    data = [
        ji.Experiment(t, np.asarray(full.outputs)[0], 0.1, preequilibration={"k_in": "k_pre"}),
        ji.Experiment(t[:5], np.asarray(full.outputs)[1, :5], 0.2, condition={"k_in": 2.0 * 1.3}),
    ]
    noise_free = ji.Problem(Inflow(), data, params, scales={n: "log" for n in params.names})
    fit = ji.estimate(noise_free.fix({"k_pre": float(theta[4]), "x0": float(theta[2])}))
    np.testing.assert_allclose(fit.theta, theta[keep], rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="k_pree"):
        problem.fix({"k_pree": 0.0})
    with pytest.raises(ValueError, match="Every parameter"):
        problem.fix(dict(zip(problem.parameters.names, np.asarray(theta))))
    with pytest.raises(ValueError, match="finite"):
        problem.fix({"s": np.nan})
