"""Error-controlled sensitivities (the sensitivity system in the step-size controller's
error test) against SciPy references of the sensitivity ODE, solved piecewise between
kinks at rtol 1e-12."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from jaxtyping import Array, Float
from models_for_tests import AmountDecay
from scipy.integrate import solve_ivp

import jaxident as ji


class Kink(ji.ODEModel):
    """x' = th1 + th2 |x| + th3 max(0, x), x(0) = th4: the state crosses the kink x = 0."""

    parameters: ji.Parameters = ji.Parameters(["th1", "th2", "th3", "th4"], [1.0, -0.5, 0.3, -1.0])
    times: Float[Array, " n"] = eqx.field(default_factory=lambda: jnp.linspace(0.25, 6.0, 24))
    t0: float = 0.0

    def vector_field(self, t, x, theta):
        return theta.th1 + theta.th2 * ji.nabs(x) + theta.th3 * ji.nmax(0.0, x)

    def initial_state(self, theta):
        return jnp.array([theta.th4])

    def output(self, t, x, theta):
        return x[0]


def _kink_reference(theta, times):
    th1, th2, th3, th4 = theta

    def rhs(t, z):
        x, s = z[0], z[1:]
        if x < 0:  # x' = th1 - th2 x
            fx, fth = -th2, np.array([1.0, -x, 0.0, 0.0])
            dx = th1 - th2 * x
        else:  # x' = th1 + (th2 + th3) x
            fx, fth = th2 + th3, np.array([1.0, x, x, 0.0])
            dx = th1 + (th2 + th3) * x
        return np.concatenate([[dx], fx * s + fth])

    def cross(t, z):
        return z[0]

    cross.terminal = True
    z0 = np.array([th4, 0.0, 0.0, 0.0, 1.0])
    kw = dict(method="DOP853", rtol=1e-12, atol=1e-14, dense_output=True)
    first = solve_ivp(rhs, (0.0, times[-1]), z0, events=cross, **kw)
    tc = first.t_events[0][0]
    # x continuous and f continuous at the crossing: no jump in the sensitivities.
    z = first.sol(tc)
    z[0] = 0.0
    second = solve_ivp(
        lambda t, z: rhs(t, np.where(np.arange(5) == 0, abs(z[0]), z)), (tc, times[-1]), z, **kw
    )
    out = np.stack([first.sol(t) if t <= tc else second.sol(t) for t in times])
    return out[:, 1:]


def _ivgtt_reference(model, theta, times):
    """dI/dtheta for the IVGTT insulin equation, I' = u(t) - p7 (I - p10), with the pump
    u = mid(0, gamma (t - p6)/(p5 - p6), gamma) switching at the known times p5 and p6."""
    names = list(model.parameters.names)
    th = dict(zip(names, theta))
    p5, p6, p7, p8, p10, g = (th[k] for k in ("p5", "p6", "p7", "p8", "p10", "gamma"))
    idx = {k: names.index(k) for k in names}

    def u_and_grad(t):
        du = np.zeros(len(names))
        r = (t - p6) / (p5 - p6)
        if r >= 1.0:  # t <= p5
            du[idx["gamma"]] = 1.0
            return g, du
        if r <= 0.0:
            return 0.0, du
        du[idx["gamma"]] = r
        du[idx["p5"]] = -g * (t - p6) / (p5 - p6) ** 2
        du[idx["p6"]] = g * (t - p5) / (p5 - p6) ** 2
        return g * r, du

    def rhs(t, z):
        I, s = z[0], z[1:]
        u, du = u_and_grad(t)
        dth = du.copy()
        dth[idx["p7"]] -= I - p10
        dth[idx["p10"]] += p7
        return np.concatenate([[u - p7 * (I - p10)], -p7 * s + dth])

    s0 = np.zeros(len(names))
    s0[idx["p8"]] = s0[idx["p10"]] = 1.0
    z = np.concatenate([[p8 + p10], s0])
    out = []
    kw = dict(method="DOP853", rtol=1e-12, atol=1e-12)
    for a, b in [(0.0, p5), (p5, p6), (p6, times[-1])]:
        ts = times[(times > a) & (times < b)]
        sol = solve_ivp(rhs, (a, b), z, t_eval=np.concatenate([ts, [b]]), **kw)
        keep = sol.y if np.any(times == b) else sol.y[:, :-1]
        out += list(keep.T)
        z = sol.y[:, -1]
    first = np.concatenate([[p8 + p10], s0])
    out = [first] * int(np.sum(times <= 0.0)) + out
    return np.stack(out)[:, 1:]


def _colwise_error(S, ref):
    scale = np.maximum(np.abs(ref).max(axis=0), 1e-300)
    err = np.abs(np.asarray(S) - ref).max(axis=0) / scale
    return np.where(np.abs(ref).max(axis=0) > 0, err, np.abs(np.asarray(S)).max(axis=0))


@pytest.mark.parametrize("rtol", [1e-6, 1e-8, 1e-10])
def test_kink_sensitivities_within_10_rtol(rtol):
    """A state crossing the kink of |x| and max(0, x): the controller steps onto the
    crossing, and the sensitivities are within 10 rtol of the reference."""
    model = Kink()
    integ = ji.Integrator(rtol=rtol, atol=rtol * 1e-2)
    S = ji.sensitivity(model, integrator=integ)
    ref = _kink_reference(np.asarray(model.parameters.nominal), np.asarray(model.times))
    err = _colwise_error(S.matrix, ref)
    assert np.all(err <= 10 * rtol), err
    assert S.accuracy == pytest.approx(10 * rtol)


def test_kink_differentiating_the_solver_is_not_controlled():
    """The error the issue reported: the derivative of the discretised solve does not
    improve with rtol at a kink (it is the reason the default changed)."""
    model = Kink()
    ref = _kink_reference(np.asarray(model.parameters.nominal), np.asarray(model.times))
    integ = ji.Integrator(rtol=1e-10, atol=1e-12, sensitivity=ji.DifferentiateSolver())
    err = _colwise_error(ji.sensitivity_matrix(model, integrator=integ), ref)
    assert np.max(err) > 100 * 1e-10


@pytest.mark.parametrize("rtol", [1e-6, 1e-8, 1e-10])
def test_ivgtt_pump_sensitivities_within_10_rtol(rtol):
    model = ji.models.load("ivgtt")
    integ = ji.Integrator(rtol=rtol, atol=rtol * 1e-2, max_steps=200_000)
    times = jnp.linspace(0.0, 180.0, 61)
    S = ji.sensitivity(model, times=times, integrator=integ)
    theta = np.asarray(model.parameters.nominal)
    ref = _ivgtt_reference(model, theta, np.asarray(times))
    err = _colwise_error(S.matrix, ref)
    names = model.parameters.names
    assert np.all(err <= 10 * rtol), dict(zip(names, err))


def test_kink_located_without_declared_times():
    """IVGTT's pump kinks at t = p5, p6 are found from the switching functions even
    when the model does not declare them."""

    class Undeclared(type(ji.models.load("ivgtt"))):
        def switching_times(self, theta):
            return None

    model = Undeclared()
    times = jnp.linspace(0.0, 180.0, 61)
    S = ji.sensitivity(model, times=times, integrator=ji.Integrator(rtol=1e-8, atol=1e-10))
    ref = _ivgtt_reference(model, np.asarray(model.parameters.nominal), np.asarray(times))
    assert np.all(_colwise_error(S.matrix, ref) <= 10 * 1e-8)


def test_implicit_solver_shares_the_newton_matrix():
    """A stiff solver integrates the sensitivity system with the staggered chord
    iteration: same answer as the explicit solver, and no more steps than a full Newton
    iteration would need."""
    model = ji.models.load("svir")
    explicit = ji.sensitivity_matrix(model, integrator=ji.Integrator(rtol=1e-10, atol=1e-12))
    stiff = ji.sensitivity_matrix(
        model, integrator=ji.Integrator(diffrax.Kvaerno5(), rtol=1e-10, atol=1e-12)
    )
    np.testing.assert_allclose(stiff, explicit, rtol=1e-7, atol=1e-7 * np.abs(explicit).max())


def test_sensitivity_equations_jit_and_vmap():
    model = Kink()
    thetas = jnp.stack([model.parameters.nominal, model.parameters.nominal * 1.1])
    f = lambda th: ji.sensitivity_matrix(model, th)
    batched = jax.jit(jax.vmap(f))(thetas)
    for i in range(2):
        np.testing.assert_allclose(batched[i], f(thetas[i]), rtol=1e-7, atol=1e-9)
        ref = _kink_reference(np.asarray(thetas[i]), np.asarray(model.times))
        assert np.all(_colwise_error(batched[i], ref) <= 10 * 1e-8)


def test_fixed_parameters_keep_the_declared_switching_times():
    """A model with fixed parameters still declares its kinks in time (from the full
    parameter vector), so its sensitivities stay error-controlled."""
    model = ji.models.load("ivgtt")
    fixed = ji.fix_parameters(model, {"p1": float(model.parameters.nominal[0])})
    free = fixed.parameters.view(fixed.parameters.nominal)
    full = model.parameters.view(model.parameters.nominal)
    np.testing.assert_array_equal(fixed.switching_times(free), model.switching_times(full))


@pytest.mark.parametrize(
    "solver", [diffrax.Tsit5(), ji.Rodas4(), ji.BDF()], ids=["Tsit5", "Rodas4", "BDF"]
)
def test_sensitivities_outside_the_error_test(solver):
    """`SensitivityEquations(error_control=False)` (the steering Jacobians of a fit):
    the tangents ride on exactly the steps of a plain solve, a quarter fewer than with
    them in the test, and stay within 10 times the controlled accuracy of a reference
    at rtol 1e-12 (measured: 0.4-5 rtol, against 0.1-2.6 rtol controlled; ji.BDF 56
    against 13 rtol)."""
    from jaxident._solve._forward import forward_sensitivities
    from jaxident._solve._simulate import solve

    model = ji.models.load("svir")
    theta, times = model.parameters.nominal, model.times
    M = jnp.eye(theta.size)

    def run(solver, control, rtol):
        method = ji.SensitivityEquations(control)
        integ = ji.Integrator(solver, rtol=rtol, atol=rtol * 1e-2, sensitivity=method)
        fn = jax.jit(lambda th: forward_sensitivities(model, th, times, integ, M))
        _, Y, solved = fn(theta)
        plain = solve(model, theta, times, integ, diffrax.ForwardMode())
        return np.asarray(Y), int(solved.num_steps), int(plain.num_steps)

    ref, _, _ = run(diffrax.Tsit5(), True, 1e-12)
    Y_c, steps_c, plain = run(solver, True, 1e-8)
    Y_u, steps_u, _ = run(solver, False, 1e-8)
    if isinstance(solver, ji.BDF):
        # a tangent whose corrector fails refreshes the shared Jacobian, which moves
        # the state's Newton iterations too: the same steps within a few percent
        assert abs(steps_u - plain) <= 0.05 * plain and steps_u < 0.8 * steps_c
    else:
        assert steps_u == plain < 0.8 * steps_c
    scale = np.abs(ref).max(axis=0)
    err_c = np.max(np.abs(Y_c - ref).max(axis=0) / scale)
    err_u = np.max(np.abs(Y_u - ref).max(axis=0) / scale)
    # within the accuracy the result reports (`global_error` rtol: 10 but for ji.BDF)
    factor = getattr(solver, "global_error", 10.0)
    assert err_c <= factor * 1e-8 and err_u <= 10 * factor * 1e-8, (err_c, err_u)


# the three ways to the sensitivities: equations (explicit, Rosenbrock), and the
# derivative of the solve
_METHODS = [
    ji.Integrator(rtol=1e-10, atol=1e-12),
    ji.Integrator(ji.Rodas4(), rtol=1e-10, atol=1e-12),
    ji.Integrator(rtol=1e-10, atol=1e-12, sensitivity=ji.DifferentiateSolver()),
    ji.Integrator(ji.BDF(), rtol=1e-10, atol=1e-12),
]
# where ji.BDF hands every span to Rodas4 (state-triggered events), its case repeats
# Rodas4's: left out of CI
_HANDED_OVER = [*_METHODS[:3], pytest.param(_METHODS[3], marks=pytest.mark.slow)]


def _central(fn, th, h=1e-6):
    """Central differences of `fn` at `th`, one column per parameter."""
    return np.stack([(fn(th + h * e) - fn(th - h * e)) / (2 * h) for e in np.eye(th.size)], 1)


class _Step(ji.ODEModel):
    """`x' = -k x + a [t < tau]`: the input switches off at the parameter `tau`."""

    parameters: ji.Parameters = ji.Parameters(["k", "a", "tau"], [0.7, 2.0, 1.3])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.25, 4.0, 16))
    t0: float = 0.0

    def vector_field(self, t, x, theta):
        return -theta.k * x + jnp.where(t < theta.tau, theta.a, 0.0)

    def initial_state(self, theta):
        return jnp.array([0.5])

    def output(self, t, x, theta):
        return x[0]

    def switching_times(self, theta):
        return jnp.stack([theta.tau])


def _step_exact(th, t):
    k, a, tau = th
    before = lambda s: a / k + (0.5 - a / k) * np.exp(-k * s)
    return np.where(t < tau, before(t), before(tau) * np.exp(-k * (t - tau)))


@pytest.mark.parametrize("integ", _METHODS, ids=["equations", "Rodas4", "differentiate", "BDF"])
def test_sensitivity_to_a_switching_time_against_the_closed_form(integ):
    """A jump of the right-hand side at `tau(theta)`: the sensitivities jump by
    `(f(tau-) - f(tau+)) dtau/dtheta` (`TimeWarped`), against central differences of the
    closed-form solution, under jit and vmap; the outputs are the plain solve's."""
    model = _Step()
    th = np.array([0.7, 2.0, 1.3])
    t = np.asarray(model.times)
    ref = _central(lambda p: _step_exact(p, t), th)
    batch = jnp.stack([jnp.asarray(th), jnp.asarray(th) * 1.05])
    S = jax.jit(jax.vmap(lambda p: ji.sensitivity_matrix(model, p, integrator=integ)))(batch)
    assert np.abs(np.asarray(S[0]) - ref).max() <= 1e-8 * np.abs(ref).max()
    assert np.abs(ref[:, 2]).max() > 1.0
    y = np.asarray(ji.simulate(model, jnp.asarray(th), integrator=integ).ys).ravel()
    np.testing.assert_allclose(y, _step_exact(th, t), rtol=1e-8)


class _Decaying(ji.ODEModel):
    """`x' = -k x`, `x(0) = x0`, `y = x`: the base of the event models below."""

    def vector_field(self, t, x, theta):
        return -theta.k * x

    def initial_state(self, theta):
        return jnp.stack([theta.x0])

    def output(self, t, x, theta):
        return x[0]


class _Dose(_Decaying):
    """A dose `x = x + D` at the event time `tau`."""

    parameters: ji.Parameters = ji.Parameters(["k", "D", "tau", "x0"], [0.6, 3.0, 1.7, 1.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.array([0.5, 1.0, 1.7, 2.0, 3.0, 4.5]))
    t0: float = 0.0

    def switching_times(self, theta):
        return jnp.stack([theta.tau])

    def event_times(self, theta):
        return jnp.stack([theta.tau])

    def apply_event(self, i, t, x, theta):
        return x + theta.D


@pytest.mark.parametrize("integ", _METHODS, ids=["equations", "Rodas4", "differentiate", "BDF"])
def test_event_sensitivities_against_the_closed_form(integ):
    """A dose at `tau(theta)`: the solve stops at the event, the state jumps, and the
    sensitivities (to the dose, its time, the rate, the initial value) agree with
    central differences of the closed form under jit and vmap; an observation at the
    event time sees the state after it."""
    model = _Dose()
    th = np.array([0.6, 3.0, 1.7, 1.0])
    t = np.asarray(model.times)

    def exact(p):
        k, D, tau, x0 = p
        return x0 * np.exp(-k * t) + np.where(t >= tau, D * np.exp(-k * (t - tau)), 0.0)

    ref = _central(exact, th)
    batch = jnp.stack([jnp.asarray(th), jnp.asarray(th) * 1.02])
    S = jax.jit(jax.vmap(lambda p: ji.sensitivity_matrix(model, p, integrator=integ)))(batch)
    S = np.asarray(S[0])
    smooth = t != 1.7  # central differences straddle the jump there
    assert np.abs(S - ref)[smooth].max() <= 1e-8 * np.abs(ref).max()
    y = np.asarray(ji.simulate(model, jnp.asarray(th), integrator=integ).ys).ravel()
    np.testing.assert_allclose(y, exact(th), rtol=1e-8)
    assert y[2] > 3.0  # at the event time: after the dose


class _DoseEventOnly(_Dose):
    """The dose declared as an event alone (no `switching_times`)."""

    def switching_times(self, theta):
        return None


def test_event_times_alone_get_their_sensitivity():
    """An event time need not be declared a switching time as well: the warped time
    takes its knots from both, so `d/dtau` still carries the jump."""
    model = _DoseEventOnly()
    th = np.array([0.6, 3.0, 1.7, 1.0])
    t = np.asarray(model.times)

    def exact(p):
        k, D, tau, x0 = p
        return x0 * np.exp(-k * t) + np.where(t >= tau, D * np.exp(-k * (t - tau)), 0.0)

    ref = _central(exact, th)
    S = np.asarray(ji.sensitivity_matrix(model, jnp.asarray(th), integrator=_METHODS[0]))
    assert np.abs(S - ref)[t != 1.7].max() <= 1e-8 * np.abs(ref).max()


class _Refill(_Decaying):
    """Whenever `x` falls below `c`, a refill `x = x + D` (the trigger `x < c`, root
    function `c - x`)."""

    parameters: ji.Parameters = ji.Parameters(["k", "x0", "c", "D"], [0.5, 4.0, 1.0, 1.5])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 6.5, 13))
    t0: float = 0.0

    def event_triggers(self, t, x, theta):
        return jnp.stack([theta.c - x[0]])

    def apply_event(self, i, t, x, theta):
        return x + theta.D


def _refill_exact(p, t):
    """The closed form: the first refill at `tau1 = ln(x0/c)/k`, the next at
    `tau2 = tau1 + ln((c + D)/c)/k`, and so on (three within the times)."""
    k, x0, c, D = p
    tau1 = jnp.log(x0 / c) / k
    period = jnp.log((c + D) / c) / k
    n = jnp.floor((t - tau1) / period) + 1  # refills so far
    last = tau1 + (n - 1) * period
    return jnp.where(t < tau1, x0 * jnp.exp(-k * t), (c + D) * jnp.exp(-k * (t - last)))


@pytest.mark.parametrize("integ", _HANDED_OVER, ids=["equations", "Rodas4", "differentiate", "BDF"])
def test_state_triggered_events_against_the_closed_form(integ):
    """An event the state triggers, firing three times (each fall below `c`, re-armed
    in between): outputs and sensitivities (to the rate, the initial value, the
    threshold and the dose: the event times move with all of them) against the closed
    form's derivatives under jit and vmap."""
    model = _Refill()
    th = jnp.asarray([0.5, 4.0, 1.0, 1.5])
    t = jnp.asarray(model.times)
    assert int(jnp.max(jnp.floor((t - jnp.log(4.0) / 0.5) / (jnp.log(2.5) / 0.5)) + 1)) == 3
    ref = np.asarray(jax.jacfwd(_refill_exact)(th, t))
    batch = jnp.stack([th, th * 1.02])
    S = jax.jit(jax.vmap(lambda p: ji.sensitivity_matrix(model, p, integrator=integ)))(batch)
    assert np.abs(np.asarray(S[0]) - ref).max() <= 1e-8 * np.abs(ref).max()
    ref2 = np.asarray(jax.jacfwd(_refill_exact)(th * 1.02, t))
    assert np.abs(np.asarray(S[1]) - ref2).max() <= 1e-8 * np.abs(ref2).max()
    y = np.asarray(ji.simulate(model, th, integrator=integ).ys).ravel()
    np.testing.assert_allclose(y, np.asarray(_refill_exact(th, t)), rtol=1e-7)


class _TwoSwitches(ji.ODEModel):
    """An input on until `t_1`, another from `t_2` on; `t_2` lies after the last
    observation (Oliveira_NatCommun2021's `t_2 = 100` with data to day 59)."""

    parameters: ji.Parameters = ji.Parameters(
        ["k", "a", "t_1", "t_2"], [0.7, 2.0, 1.3, 9.0], [0.1, 0.1, 0.5, 5.0], [2.0, 5.0, 3.0, 20.0]
    )
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 6.0, 12))
    t0: float = 0.0

    def vector_field(self, t, x, theta):
        on = jnp.where(t < theta.t_1, theta.a, 0.0) + jnp.where(t >= theta.t_2, 1.0, 0.0)
        return -theta.k * x + on

    def initial_state(self, theta):
        return jnp.array([0.5])

    def output(self, t, x, theta):
        return x[0]

    def switching_times(self, theta):
        return jnp.stack([theta.t_1, theta.t_2])


@pytest.mark.parametrize("integ", _METHODS, ids=["equations", "Rodas4", "differentiate", "BDF"])
def test_a_switch_after_the_last_datum_has_a_zero_column(integ):
    """Nothing observed depends on a switching time after the last observation: its
    sensitivity column is exactly zero (it was the solver's error, 1e-10 of the others,
    where the time warp stretched the last observed segment), and the report says
    'no effect'; the switch before it keeps its closed-form column."""
    model = _TwoSwitches()
    th = np.asarray(model.parameters.nominal)
    S = np.asarray(ji.sensitivity_matrix(model, integrator=integ))
    assert np.all(S[:, 3] == 0.0)
    t = np.asarray(model.times)
    ref = _central(lambda p: _step_exact(p[:3], t), th)
    assert np.abs(S[:, :3] - ref[:, :3]).max() <= 1e-8 * np.abs(ref).max()
    rep = ji.analyze(ji.Problem(model, ji.Experiment(t, sigma=0.01)), integrator=integ)
    assert rep.no_effect == ("t_2",) and rep.rank == 3


@pytest.mark.parametrize("solver", [diffrax.Tsit5(), ji.Rodas4(), ji.BDF()])
@pytest.mark.parametrize("u", [1e-12, 2e-9, 1.0, 1e12])
def test_accuracy_in_any_units(u, solver):
    """The absolute tolerance follows each state's size (`state_scale`): a decay with
    `x(0) = 2e-9` (an amount in mol) was solved 1.1% off and its sensitivity 4% off
    while 1e-7 was claimed; outputs and sensitivities within the claimed accuracy of
    the closed form now, in units from 1e-12 to 1e12, the relative errors the same."""
    model = AmountDecay(parameters=ji.Parameters(["k", "A"], [0.5, u]))
    integ = ji.Integrator(solver)
    t = np.asarray(model.times)
    exact = u * np.exp(-0.5 * t)
    y = np.asarray(ji.simulate(model, integrator=integ).ys)[:, 0]
    sens = ji.sensitivity(model, integrator=integ)
    S = np.asarray(sens.matrix)
    dk, du = -t * exact, exact / u
    assert np.abs(y - exact).max() / exact.max() <= sens.accuracy
    assert np.abs(S[:, 0] - dk).max() / np.abs(dk).max() <= sens.accuracy
    assert np.abs(S[:, 1] - du).max() / np.abs(du).max() <= sens.accuracy


@pytest.mark.parametrize("u", [2e-9, 1.0, 1e9])
def test_a_fit_in_any_units_reaches_the_least_squares_optimum(u):
    """The decay's `k` and `u` fitted to noisy data in units `u`: the estimate equals
    SciPy's least squares on the closed form to 1e-4 of a standard error. With an
    absolute tolerance of 1e-10 whatever the units, the fit in mol (`u = 2e-9`) ended
    2.9 standard errors from it (the solve 1% off), without a word."""
    t = np.linspace(0.5, 6.0, 12)
    sigma = 0.02 * u
    y = u * np.exp(-0.5 * t) + sigma * np.random.default_rng(1).standard_normal(t.size)
    model = AmountDecay(parameters=ji.Parameters(["k", "A"], [0.3, 1.5 * u]))
    est = ji.estimate(model, y[:, None], t, sigma=sigma, progress=False)

    def residuals(p):
        return (p[1] * np.exp(-p[0] * t) - y) / sigma

    ref = scipy.optimize.least_squares(residuals, [0.3, 1.5 * u], x_scale=[1.0, u],
                                       xtol=1e-15, ftol=1e-15, gtol=1e-15)  # fmt: skip
    se = np.sqrt(np.diag(np.linalg.inv(ref.jac.T @ ref.jac)))
    assert np.all(np.abs(np.asarray(est.theta) - ref.x) <= 1e-4 * se)
