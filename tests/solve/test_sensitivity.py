import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import complex_step_sensitivity, EPIDEMIC_REFS, SENS_FILE
from models_for_tests import BlowUp, ProductDecay, SqrtNegative
from scipy.integrate import solve_ivp

import jaxident as ji


TIGHT = ji.Integrator(rtol=1e-12, atol=1e-12)


def _ref(name, theta):
    rhs, x0, out = EPIDEMIC_REFS[name]
    return complex_step_sensitivity(rhs, x0, theta, np.arange(31.0), out)


@pytest.mark.parametrize("name", ["svir", "sevir", "covid"])
def test_epidemic_against_complex_step(name):
    model = ji.models.load(name)
    theta = np.asarray(model.parameters.nominal)
    ref = _ref(name, theta)
    scale = np.max(np.abs(ref))
    S = np.asarray(ji.sensitivity_matrix(model, theta, model.times))
    assert S.shape == (31, model.parameters.p) and S.dtype == np.float64
    assert np.max(np.abs(S - ref)) <= 1e-5 * scale  # default tolerances
    S = np.asarray(ji.sensitivity_matrix(model, theta, integrator=TIGHT))
    assert np.max(np.abs(S - ref)) <= 1e-9 * scale


def test_jit_and_vmap_over_parameters():
    model = ji.models.load("svir")
    thetas = np.asarray(ji.latin_hypercube(jax.random.key(1), model.parameters, 3))
    f = jax.jit(jax.vmap(lambda th: ji.sensitivity_matrix(model, th, integrator=TIGHT)))
    batch = np.asarray(f(jnp.asarray(thetas)))
    for b in range(3):
        ref = _ref("svir", thetas[b])
        assert np.max(np.abs(batch[b] - ref)) <= 1e-9 * np.max(np.abs(ref))


@pytest.mark.skipif(not SENS_FILE.exists(), reason="shared data not present")
@pytest.mark.parametrize("name,err", [("svir", 3e-3), ("sevir", 4e-4), ("covid", 1.5e-4)])
def test_against_paper_matrices(name, err):
    # The paper's matrices came from ode45 at AbsTol 1e-4 by complex step; an accurate
    # solve agrees to about 2e-3 / 2e-4 / 7e-5 (relative Frobenius).
    ref = np.load(SENS_FILE)[name.upper()]
    S = np.asarray(ji.sensitivity_matrix(ji.models.load(name)))
    rel = np.linalg.norm(S - ref) / np.linalg.norm(ref)
    assert rel < err
    assert rel > err / 20  # the gap is real: the references are only that accurate


def test_multi_output_time_major_against_finite_differences():
    model = ji.models.load("alpha_pinene")
    theta = np.asarray(model.parameters.nominal)
    ts = np.asarray(model.times)

    def rhs(t, y, p):
        y1, _, y3, _, y5 = y
        p1, p2, p3, p4, p5 = p
        return [
            -(p1 + p2) * y1,
            p1 * y1,
            p2 * y1 - (p3 + p4) * y3 + p5 * y5,
            p3 * y3,
            p4 * y3 - p5 * y5,
        ]

    ref = complex_step_sensitivity(rhs, lambda th: [100.0, 0, 0, 0, 0], theta, ts, lambda x: x)
    sens = ji.sensitivity(model, integrator=TIGHT)
    S = np.asarray(sens.matrix)
    assert S.shape == (8 * 5, 5)
    np.testing.assert_allclose(S, ref, rtol=1e-7, atol=1e-9 * np.abs(ref).max())
    assert sens.row_labels[:2] == ["y1(t=1230)", "y2(t=1230)"]
    # central differences agree too (an independent second check, looser)
    h = 1e-4 * theta
    fd = []
    for j in range(5):
        tp, tm = theta.copy(), theta.copy()
        tp[j] += h[j]
        tm[j] -= h[j]
        yp = solve_ivp(
            rhs,
            (0, ts[-1]),
            [100.0, 0, 0, 0, 0],
            args=(tp,),
            t_eval=ts,
            rtol=1e-12,
            atol=1e-12,
            method="LSODA",
        ).y.T.reshape(-1)
        ym = solve_ivp(
            rhs,
            (0, ts[-1]),
            [100.0, 0, 0, 0, 0],
            args=(tm,),
            t_eval=ts,
            rtol=1e-12,
            atol=1e-12,
            method="LSODA",
        ).y.T.reshape(-1)
        fd.append((yp - ym) / (2 * h[j]))
    fd = np.stack(fd, axis=1)
    assert np.max(np.abs(S - fd)) <= 1e-5 * np.abs(fd).max()


def test_alpha_pinene_data_fit_at_nominal():
    model = ji.models.load("alpha_pinene")
    ys = np.asarray(ji.simulate(model, integrator=TIGHT).ys)
    sse = np.sum((ys - ji.models.ALPHA_PINENE_DATA) ** 2)
    np.testing.assert_allclose(sse, 19.872, atol=2e-3)  # the published optimum


def test_product_of_parameters_is_rank_deficient():
    model = ProductDecay()
    S = ji.sensitivity_matrix(model)
    sel = ji.select_parameters(S, names=model.parameters.names)
    assert int(sel.k) == 2
    assert len(sel.non_identifiable) == 1 and sel.non_identifiable[0] in ("a", "b")
    assert "c" in sel.identifiable


def test_relative_scale():
    model = ji.models.load("sevir")
    theta = model.parameters.nominal
    sens = ji.sensitivity(model, theta)
    rel = ji.sensitivity(model, theta, scale="relative")
    expected = (
        np.asarray(sens.matrix) * np.asarray(theta)[None, :] / np.asarray(sens.outputs)[:, None]
    )
    np.testing.assert_allclose(np.asarray(rel.matrix), expected, rtol=1e-12)
    assert rel.scale == "relative" and rel.scale is ji.SensitivityScale.relative
    # the option as an object: the same matrix; a misspelt one lists the options
    same = ji.sensitivity(model, theta, scale=ji.SensitivityScale.relative)
    np.testing.assert_array_equal(np.asarray(same.matrix), np.asarray(rel.matrix))
    with pytest.raises(ValueError, match="'none', 'relative', 'noise', got 'relativ'"):
        ji.sensitivity(model, theta, scale="relativ")
    with pytest.raises(ValueError, match="a problem's"):
        ji.sensitivity(model, theta, scale="noise")


def test_relative_scale_zero_output_is_an_error():
    class ZeroAtStart(ji.ODEModel):
        parameters: ji.Parameters = ji.Parameters(["k"], [1.0])
        times: jax.Array = eqx.field(default_factory=lambda: jnp.array([0.0, 1.0]))
        t0: float = 0.0

        def vector_field(self, t, x, theta):
            return jnp.ones_like(x) * theta.k

        def initial_state(self, theta):
            return jnp.array([0.0])

        def output(self, t, x, theta):
            return x[0]

    with pytest.raises(eqx.EquinoxRuntimeError, match="exactly zero"):
        ji.sensitivity_matrix(ZeroAtStart(), scale="relative")


def test_solver_failure_is_reported_not_nan():
    model = BlowUp()
    with pytest.raises(eqx.EquinoxRuntimeError, match="Integrating BlowUp failed"):
        ji.sensitivity_matrix(model, jnp.array([2.0]))
    with pytest.raises(eqx.EquinoxRuntimeError, match="Integrating BlowUp failed"):
        ji.simulate(model, jnp.array([2.0]))
    sens = ji.sensitivity(model, jnp.array([2.0]), throw=False)
    assert not bool(sens.ok) and np.all(np.isnan(np.asarray(sens.matrix)))
    ok = ji.sensitivity(model, jnp.array([0.2]))
    assert bool(ok.ok) and np.all(np.isfinite(np.asarray(ok.matrix)))


def test_one_throw_convention_on_the_host_under_jit_vmap_and_in_a_sweep():
    """`throw=None` (the default) raises on a concrete call and is a per-sample flag under
    a trace (here `vmap` over a failing and a good sample, and `ji.sweep`); `throw=True`
    raises under a trace too; `throw=False` never. No context variable decides it."""
    model = BlowUp()
    thetas = jnp.array([[2.0], [0.2]])
    # an explicit throw=True inside a sweep: its check is traced as NaN, which fills the
    # result's `ok` with True; the sample still reads as failed (first: the kernels
    # traced below with raising checks are then cached)
    loud = ji.sweep(lambda th: ji.sensitivity(model, th, throw=True), thetas, progress=False)
    np.testing.assert_array_equal(np.asarray(loud.ok), [False, True])
    # a selection whose check would fill the whole vmapped batch (the good sample's
    # `ok` too) with equinox's NaN: the sweep reads each sample's own status instead
    A = jnp.asarray(np.random.default_rng(0).standard_normal((2, 6, 3))).at[0, 0, 0].set(jnp.nan)
    picked = ji.sweep(lambda a: ji.select_parameters(a, k=2, throw=True), A, progress=False)
    np.testing.assert_array_equal(np.asarray(picked.ok), [False, True])
    for entry in (ji.simulate, ji.sensitivity):
        out = jax.vmap(lambda th, f=entry: f(model, th))(thetas)
        np.testing.assert_array_equal(np.asarray(out.ok), [False, True])
        with pytest.raises(eqx.EquinoxRuntimeError):
            eqx.filter_jit(lambda th, f=entry: f(model, th, throw=True))(thetas[0])
    swept = ji.sweep(lambda th: ji.sensitivity(model, th), thetas, progress=False)
    np.testing.assert_array_equal(np.asarray(swept.ok), [False, True])
    assert np.all(np.isnan(np.asarray(swept.values.matrix[0])))
    good = ji.sensitivity_matrix(model, thetas[1])
    np.testing.assert_allclose(np.asarray(swept.values.matrix[1]), np.asarray(good), rtol=1e-12)
    import jaxident._runtime._host as context

    assert not any("ContextVar" in type(v).__name__ for v in vars(context).values())


def test_max_steps_message():
    model = ji.models.load("svir")
    with pytest.raises(eqx.EquinoxRuntimeError, match="maximum number of solver steps"):
        ji.simulate(model, integrator=ji.Integrator(max_steps=3))


def test_nonfinite_output_is_reported():
    with pytest.raises(eqx.EquinoxRuntimeError, match="NaN or inf outputs"):
        ji.sensitivity_matrix(SqrtNegative(), jnp.array([-0.5]))


def test_bad_input_messages():
    model = ji.models.load("svir")
    with pytest.raises(ValueError, match=r"expected shape \(4,\)"):
        ji.sensitivity_matrix(model, jnp.ones(3))
    with pytest.raises(ValueError, match="Did you mean 'beta'"):
        ji.sensitivity_matrix(model, {"bta": 0.8, "alpha": 0.1, "nu": 0.004, "gamma": 0.14})
    with pytest.raises(ValueError, match="missing"):
        ji.sensitivity_matrix(model, {"beta": 0.8})
    with pytest.raises(ValueError, match="Non-finite"):
        ji.sensitivity_matrix(model, jnp.array([0.8, jnp.nan, 0.004, 0.14]))
    with pytest.raises(ValueError, match="strictly increasing"):
        ji.sensitivity_matrix(model, times=jnp.array([1.0, 0.5]))
    with pytest.raises(ValueError, match="before the model's t0"):
        ji.sensitivity_matrix(model, times=jnp.array([-1.0, 0.5]))
    with pytest.raises(ValueError, match="scale"):
        ji.sensitivity_matrix(model, scale="log")
    with pytest.raises(TypeError, match="model"):
        ji.sensitivity_matrix("svir")


def test_dict_theta_and_names():
    model = ji.models.load("svir")
    d = dict(zip(model.parameters.names, [0.8, 0.1, 0.004, 0.14]))
    np.testing.assert_allclose(
        np.asarray(ji.sensitivity_matrix(model, d)), np.asarray(ji.sensitivity_matrix(model))
    )
    sens = ji.sensitivity(model)
    assert sens.names == ("beta", "alpha", "nu", "gamma")
    assert sens.output_names == ("I",)


TRACES = []


class Counting(ji.ODEModel):
    parameters: ji.Parameters = ji.Parameters(["k"], [0.5])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 2.0, 4))
    t0: float = 0.0

    def vector_field(self, t, x, theta):
        TRACES.append(1)  # runs only while tracing
        return -theta.k * x

    def initial_state(self, theta):
        return jnp.array([1.0])

    def output(self, t, x, theta):
        return x[0]


def test_no_retrace_on_new_parameters():
    model = Counting()
    ji.sensitivity_matrix(model, jnp.array([0.5]))
    n = len(TRACES)
    assert n > 0
    ji.sensitivity_matrix(model, jnp.array([0.7]))
    ji.sensitivity_matrix(model, jnp.array([0.9]))
    assert len(TRACES) == n
    f = jax.jit(
        eqx.debug.assert_max_traces(lambda th: ji.sensitivity_matrix(model, th), max_traces=1)
    )
    f(jnp.array([0.5]))
    f(jnp.array([0.6]))


@pytest.mark.parametrize("solver", ["kvaerno5", "rodas4"])
def test_stiff_solver_against_complex_step_radau(solver):
    import diffrax
    from models_for_tests import Robertson
    from scipy.integrate import solve_ivp

    model = Robertson()
    theta = np.asarray(model.parameters.nominal)
    ts = np.asarray(model.times)

    def rhs(t, y, k):
        return [
            -k[0] * y[0] + k[2] * y[1] * y[2],
            k[0] * y[0] - k[1] * y[1] ** 2 - k[2] * y[1] * y[2],
            k[1] * y[1] ** 2,
        ]

    cols = []
    for j in range(3):
        th = theta.astype(complex)
        th[j] += 1e-30j * theta[j]
        sol = solve_ivp(
            rhs,
            (0, ts[-1]),
            np.array([1, 0, 0], complex),
            args=(th,),
            t_eval=ts,
            rtol=1e-11,
            atol=1e-14,
            method="BDF",
        )
        cols.append(np.stack([sol.y[0], sol.y[2]], axis=1).imag.reshape(-1) / (1e-30 * theta[j]))
    ref = np.stack(cols, axis=1)
    stepper = diffrax.Kvaerno5() if solver == "kvaerno5" else ji.Rodas4()
    integ = ji.Integrator(stepper, rtol=1e-10, atol=1e-14)
    S = np.asarray(ji.sensitivity_matrix(model, integrator=integ))
    np.testing.assert_allclose(S, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    # the same under vmap (and jit): the nominal row of a batch
    batch = jnp.stack([jnp.asarray(theta), 1.1 * jnp.asarray(theta)])
    Sb = jax.jit(jax.vmap(lambda th: ji.sensitivity_matrix(model, th, integrator=integ)))(batch)
    np.testing.assert_allclose(np.asarray(Sb[0]), S, rtol=1e-9, atol=1e-12 * np.abs(S).max())
