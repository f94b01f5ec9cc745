"""ji.BDF against SciPy's Radau at tight tolerance and the stiff test set's published
solution, against ji.Rodas4's sensitivities under jit and vmap and against finite
differences; its sparse Jacobians against jacfwd; its failures."""

import functools

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import jaxident as ji
from jaxident._linalg._sparse_lu import sparse_lu_plan
from jaxident._model._nonsmooth import ld_jvp
from jaxident._solve import _bdf
from jaxident._solve._bdf import _coloring, _jacobian, integrates_by_span, with_sparsity


class Hires(ji.ODEModel):
    """HIRES (Schafer 1975; Hairer and Wanner's stiff test set): 8 states, the rate
    constants as parameters."""

    parameters: ji.Parameters = ji.Parameters(
        ["k1", "k2", "k3", "k4", "k5"], [1.71, 0.43, 8.32, 0.0007, 280.0]
    )
    times: jax.Array = eqx.field(default_factory=lambda: jnp.array([1.0, 10.0, 100.0, 321.8122]))
    t0: float = 0.0

    def vector_field(self, t, y, th):
        k1, k2, k3, k4, k5 = th.values
        r = k5 * y[5] * y[7]
        return jnp.stack(
            [
                -k1 * y[0] + k2 * y[1] + k3 * y[2] + k4,
                k1 * y[0] - 8.75 * y[1],
                -10.03 * y[2] + k2 * y[3] + 0.035 * y[4],
                k3 * y[1] + k1 * y[2] - 1.12 * y[3],
                -1.745 * y[4] + k2 * y[5] + k2 * y[6],
                -r + 0.69 * y[3] + k1 * y[4] - k2 * y[5] + 0.69 * y[6],
                r - 1.81 * y[6],
                -r + 1.81 * y[6],
            ]
        )

    def initial_state(self, th):
        return jnp.array([1.0, 0, 0, 0, 0, 0, 0, 0.0057])

    def output(self, t, y, th):
        return y


class Robertson(ji.ODEModel):
    parameters: ji.Parameters = ji.Parameters(["k1", "k2", "k3"], [0.04, 3e7, 1e4])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.logspace(-4, 4, 9))
    t0: float = 0.0

    def vector_field(self, t, y, th):
        a, b, c = y
        return jnp.stack(
            [
                -th.k1 * a + th.k3 * b * c,
                th.k1 * a - th.k3 * b * c - th.k2 * b**2,
                th.k2 * b**2,
            ]
        )

    def initial_state(self, th):
        return jnp.array([1.0, 0.0, 0.0])

    def output(self, t, y, th):
        return y


_POLL_K = [0.35, 26.6, 1.23e4, 8.6e-4, 8.2e-4, 1.5e4, 1.3e-4, 2.4e4, 1.65e4, 9.0e3, 0.022,
           1.2e4, 1.88, 1.63e4, 4.8e6, 3.5e-4, 0.0175, 1e8, 4.44e11, 1240.0, 2.1, 5.78,
           0.0474, 1780.0, 3.12]  # fmt: skip


class Pollution(ji.ODEModel):
    """The air pollution model of the Dutch National Institute of Public Health (Verwer
    1994; POLL in Mazzia and Magherini's test set for IVP solvers): 20 species, 25
    reactions, rate constants from 3.5e-4 to 4.4e11, the rate constants as parameters."""

    parameters: ji.Parameters = ji.Parameters([f"k{i}" for i in range(1, 26)], _POLL_K)
    times: jax.Array = eqx.field(default_factory=lambda: jnp.array([0.5, 5.0, 20.0, 60.0]))
    t0: float = 0.0

    def vector_field(self, t, y, th):
        k = th.values
        y = jnp.concatenate([jnp.zeros(1), y])  # 1-based, as the test set writes it
        r = [
            k[0] * y[1], k[1] * y[2] * y[4], k[2] * y[5] * y[2], k[3] * y[7], k[4] * y[7],
            k[5] * y[7] * y[6], k[6] * y[9], k[7] * y[9] * y[6], k[8] * y[11] * y[2],
            k[9] * y[11] * y[1], k[10] * y[13], k[11] * y[10] * y[2], k[12] * y[14],
            k[13] * y[1] * y[6], k[14] * y[3], k[15] * y[4], k[16] * y[4], k[17] * y[16],
            k[18] * y[16], k[19] * y[17] * y[6], k[20] * y[19], k[21] * y[19],
            k[22] * y[1] * y[4], k[23] * y[19] * y[1], k[24] * y[20],
        ]  # fmt: skip
        r = [None] + r
        return jnp.stack(
            [
                -r[1] - r[10] - r[14] - r[23] - r[24] + r[2] + r[3] + r[9] + r[11] + r[12]
                + r[22] + r[25],
                -r[2] - r[3] - r[9] - r[12] + r[1] + r[21],
                -r[15] + r[1] + r[17] + r[19] + r[22],
                -r[2] - r[16] - r[17] - r[23] + r[15],
                -r[3] + 2 * r[4] + r[6] + r[7] + r[13] + r[20],
                -r[6] - r[8] - r[14] - r[20] + r[3] + 2 * r[18],
                -r[4] - r[5] - r[6] + r[13],
                r[4] + r[5] + r[6] + r[7],
                -r[7] - r[8],
                -r[12] + r[7] + r[9],
                -r[9] - r[10] + r[8] + r[11],
                r[9],
                -r[11] + r[10],
                -r[13] + r[12],
                r[14],
                -r[18] - r[19] + r[16],
                -r[20],
                r[20],
                -r[21] - r[22] - r[24] + r[23] + r[25],
                -r[25] + r[24],
            ]
        )  # fmt: skip

    def initial_state(self, th):
        y0 = jnp.zeros(20)
        return y0.at[jnp.array([1, 3, 6, 7, 8, 16])].set(
            jnp.array([0.2, 0.04, 0.1, 0.3, 0.01, 0.007]))  # fmt: skip

    def output(self, t, y, th):
        return y


class Chain(ji.ODEModel):
    """A reaction-diffusion chain of cells, `u_i' = d (u_{i-1} - 2 u_i + u_{i+1}) -
    k u_i^2`: a tridiagonal Jacobian, declared."""

    parameters: ji.Parameters = ji.Parameters(["d", "k"], [400.0, 1.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.1, 2.0, 5))
    t0: float = 0.0
    cells: int = eqx.field(static=True, default=40)

    def vector_field(self, t, u, th):
        padded = jnp.concatenate([u[:1], u, u[-1:]])
        return th.d * (padded[:-2] - 2 * u + padded[2:]) - th.k * u**2

    def initial_state(self, th):
        return jnp.linspace(1.0, 0.0, self.cells) ** 2

    def output(self, t, u, th):
        return u[:: self.cells // 5]

    def jacobian_sparsity(self):
        i = np.arange(self.cells)
        return np.abs(i[:, None] - i[None, :]) <= 1


def _radau(model, th, rtol=1e-12, atol=1e-14):
    f = jax.jit(lambda t, y: model.vector_field(t, y, model.parameters.view(th)))
    y0 = np.asarray(model.initial_state(model.parameters.view(th)))
    ts = np.asarray(model.times)
    sol = solve_ivp(lambda t, y: np.asarray(f(t, y)), (0.0, ts[-1]), y0, method="Radau",
                    rtol=rtol, atol=atol, t_eval=ts,
                    jac=lambda t, y: np.asarray(jax.jacfwd(lambda z: f(t, z))(y)))  # fmt: skip
    return sol.y.T


@functools.cache
def _reference(name):
    model = {"hires": Hires, "robertson": Robertson}[name]()
    return _radau(model, np.asarray(model.parameters.nominal))


@pytest.mark.parametrize("name", ["hires", "robertson"])
def test_solutions_at_their_tolerance_against_radau(name):
    """At rtol 1e-8 (atol 1e-12) every state is within its global-error bound of SciPy's
    Radau at rtol 1e-12: `global_error` (rtol |y| + atol)."""
    model = {"hires": Hires, "robertson": Robertson}[name]()
    ref = _reference(name)
    integ = ji.Integrator(ji.BDF(), rtol=1e-8, atol=1e-12)
    y = np.asarray(ji.simulate(model, model.parameters.nominal, integrator=integ).ys)
    bound = ji.BDF.global_error * (1e-8 * np.abs(ref) + 1e-12)
    assert np.all(np.abs(y - ref) <= bound), np.max(np.abs(y - ref) / bound)
    # and not by luck: at rtol 1e-5 the error is larger
    loose = ji.Integrator(ji.BDF(), rtol=1e-5, atol=1e-9)
    y5 = np.asarray(ji.simulate(model, model.parameters.nominal, integrator=loose).ys)
    assert np.max(np.abs(y5 - ref)) > 10 * np.max(np.abs(y - ref))


def test_sensitivities_against_rodas4_under_jit_and_vmap():
    """HIRES's output sensitivities at rtol 1e-9 against Rodas4's at 1e-12, within the
    accuracy the result reports; a vmapped batch of two parameter vectors equals the
    calls one by one."""
    model = Hires()
    th = jnp.asarray(model.parameters.nominal)
    ref = np.asarray(ji.sensitivity_matrix(
        model, th, integrator=ji.Integrator(ji.Rodas4(), rtol=1e-12, atol=1e-16)))  # fmt: skip
    integ = ji.Integrator(ji.BDF(), rtol=1e-9, atol=1e-13)
    batch = jnp.stack([th, th * 1.1])
    S = jax.jit(jax.vmap(lambda p: ji.sensitivity_matrix(model, p, integrator=integ)))(batch)
    err = np.abs(np.asarray(S[0]) - ref).max(axis=0) / np.abs(ref).max(axis=0)
    assert np.all(err <= ji.BDF.global_error * 1e-9), err
    one = ji.sensitivity_matrix(model, batch[1], integrator=integ)
    np.testing.assert_allclose(np.asarray(S[1]), np.asarray(one), rtol=1e-10, atol=1e-14)
    assert ji.sensitivity(model, th, integrator=integ).accuracy == ji.BDF.global_error * 1e-9


# POLL's solution at t = 60 as the test set reports it (Mazzia and Magherini, computed
# with RADAU5 at rtol = atol = 1.1e-18).
_POLL_AT_60 = [5.646255480022769e-02, 1.342484130422339e-01, 4.139734331099427e-09,
               5.523140207484359e-03, 2.018977262302196e-07, 1.464541863493966e-07,
               7.784249118997964e-02, 3.245075353396018e-01, 7.494013383880406e-03,
               1.622293157301561e-08, 1.135863833257075e-08, 2.230505975721359e-03,
               2.087162882798630e-04, 1.396921016840158e-05, 8.964884856898295e-03,
               4.352846369330103e-18, 6.899219696263405e-03, 1.007803037365946e-04,
               1.772146513969984e-06, 5.682943292316392e-05]  # fmt: skip


def test_pollution_against_the_test_sets_solution_and_finite_differences():
    """POLL, the stiff test set's 20-species problem: the states at t = 60 within their
    global-error bound of the published solution; the 25 sensitivity columns, along a
    random direction of relative changes, against central differences of solves at
    rtol 1e-12."""
    model = Pollution()
    th = np.asarray(model.parameters.nominal)
    integ = ji.Integrator(ji.BDF(), rtol=1e-8, atol=1e-12)
    sens = ji.sensitivity(model, th, integrator=integ)
    at_60 = np.asarray(sens.outputs).reshape(4, 20)[-1]
    ref = np.asarray(_POLL_AT_60)
    bound = ji.BDF.global_error * (1e-8 * ref + 1e-12)
    assert np.all(np.abs(at_60 - ref) <= bound), np.max(np.abs(at_60 - ref) / bound)
    v = th * np.random.default_rng(1).uniform(-1.0, 1.0, th.size)
    h = 1e-4
    tight = ji.Integrator(ji.BDF(), rtol=1e-12, atol=1e-20, max_steps=100_000)
    ys = [np.asarray(ji.simulate(model, th + s * h * v, integrator=tight).ys).ravel()
          for s in (1.0, -1.0)]  # fmt: skip
    fd = (ys[0] - ys[1]) / (2 * h)
    Sv = np.asarray(sens.matrix) @ v
    scale = np.abs(fd).reshape(4, 20).max(axis=0)  # per state, over the times
    err = np.abs(Sv - fd).reshape(4, 20) / scale
    assert np.all(err <= 1e-5), err.max()


def test_a_sweep_runs_its_samples_one_at_a_time_and_equal_to_single_calls():
    """A program that integrates with ji.BDF is recognised from its jaxpr even where its
    solve was traced before (a Rodas4 one is not); a sweep's default lanes then give
    way to one sample at a time, no vmap, with the single calls' results; a `vmap_size`
    still vmaps."""
    model = Hires()
    integ = ji.Integrator(ji.BDF(), rtol=1e-8, atol=1e-12)
    f = jax.jit(lambda p: ji.sensitivity_matrix(model, p, integrator=integ))
    th = jnp.asarray(model.parameters.nominal)
    samples = jnp.stack([th, th * 1.05, th * 0.95])
    singles = np.stack([np.asarray(f(p)) for p in samples])
    assert integrates_by_span(jax.make_jaxpr(f)(th))  # traced before: still found
    rodas = ji.Integrator(ji.Rodas4(), rtol=1e-8, atol=1e-12)
    assert not integrates_by_span(
        jax.make_jaxpr(lambda p: ji.sensitivity_matrix(model, p, integrator=rodas))(th)
    )
    shapes = []

    def probe(x):  # at run time, the shape of the samples one call of `f` sees
        def seen(v):
            shapes.append(v.shape)
            return v

        return jax.pure_callback(seen, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
                                 vmap_method="expand_dims")  # fmt: skip

    g = lambda p: f(probe(p))  # noqa: E731
    res = ji.sweep(g, samples, progress=False)
    assert res.n_failed == 0 and shapes == [th.shape] * 3
    np.testing.assert_allclose(np.asarray(res.values), singles, rtol=1e-12, atol=1e-15)
    shapes.clear()
    # a vmap where one is asked for (devices, lanes), also for the same function, whose
    # program of one sample at a time is kept from the call before
    ji.sweep(g, samples, progress=False, vmap_size=3)
    assert shapes == [(1, 3, th.size)]


def test_a_declared_sparsity_colours_the_jacobian():
    """The tridiagonal chain: 3 groups of columns for 40 states; the compressed Jacobian
    equals jacfwd exactly; solved with the sparse LU, the outputs and
    sensitivities equal Rodas4's; the colouring of a random
    pattern puts no two columns that share a row in one group."""
    model = Chain()
    coloring = _coloring(model.jacobian_sparsity().tobytes(), 40)
    assert coloring.n_colors == 3
    th = model.parameters.view(model.parameters.nominal)
    x = model.initial_state(th) + 0.3
    fun = lambda u: model.vector_field(0.0, u, th)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(_jacobian(fun, x, coloring)),
                                  np.asarray(jax.jacfwd(fun)(x)))  # fmt: skip
    solver = with_sparsity(ji.BDF(), model.jacobian_sparsity())
    assert solver.coloring == coloring and solver.sparse_lu is None  # dense LU at 40
    # `I - c J` factorized sparse where the solver is given the plan (tridiagonal: no fill)
    plan = sparse_lu_plan(model.jacobian_sparsity())
    assert plan.nnz == 3 * 40 - 2
    assert with_sparsity(ji.BDF(sparse_lu=plan), model.jacobian_sparsity()).sparse_lu is plan
    sparse = ji.Integrator(ji.BDF(sparse_lu=plan), rtol=1e-9, atol=1e-12)
    got = ji.sensitivity(model, model.parameters.nominal, integrator=sparse)
    dense = ji.Integrator(ji.Rodas4(), rtol=1e-11, atol=1e-14)
    ref = ji.sensitivity(model, model.parameters.nominal, integrator=dense)
    for a, b in [(got.outputs, ref.outputs), (got.matrix, ref.matrix)]:
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= ji.BDF.global_error * 1e-9 * np.abs(b).max()
    wrong = ji.Integrator(ji.BDF(sparse_lu=sparse_lu_plan(np.eye(30, dtype=bool))))
    with pytest.raises(ValueError, match="planned for 30 states; this model integrates 40"):
        ji.simulate(model, model.parameters.nominal, integrator=wrong)
    rng = np.random.default_rng(0)
    P = rng.random((30, 30)) < 0.1
    c = _coloring(P.tobytes(), 30)
    groups = np.asarray(c.colors)
    full = P | np.eye(30, dtype=bool)
    for g in range(c.n_colors):
        assert np.all(full[:, groups == g].sum(axis=1) <= 1)
    # a dense pattern (more than half as many groups as columns) is evaluated by jacfwd
    assert with_sparsity(ji.BDF(), np.ones((5, 5), bool)).coloring is None


def test_failures_are_reported():
    """A solution that blows up ends with a clear error, a step cap with its own; BDF is
    no solver for diffrax.diffeqsolve."""
    from models_for_tests import BlowUp

    blow = BlowUp()
    integ = ji.Integrator(ji.BDF(), rtol=1e-8, atol=1e-10)
    with pytest.raises(Exception, match="step size collapsed|NaN or inf"):
        ji.simulate(blow, jnp.array([1.0]), integrator=integ)
    capped = ji.Integrator(ji.BDF(), rtol=1e-8, atol=1e-10, max_steps=5)
    with pytest.raises(Exception, match="max_steps|maximum number of solver steps"):
        ji.simulate(Robertson(), Robertson().parameters.nominal, integrator=capped)
    ok = ji.simulate(blow, jnp.array([1.0]), integrator=integ, throw=False)
    assert not bool(ok.ok) and np.all(np.isnan(np.asarray(ok.ys)))
    with pytest.raises(TypeError, match="not a diffrax solver"):
        diffrax.diffeqsolve(diffrax.ODETerm(lambda t, y, a: -y), ji.BDF(), 0.0, 1.0, 0.1,
                            jnp.array([1.0]))  # fmt: skip
    with pytest.raises(ValueError, match="max_order"):
        ji.BDF(max_order=6)
    # a nonsmooth right-hand side (IVGTT's pump): refused, with the solver to take
    ivgtt = ji.models.load("ivgtt")
    with pytest.raises(ValueError, match="differentiable in the state.*Kvaerno5"):
        ji.sensitivity(ivgtt, integrator=ji.Integrator(ji.BDF()))


@pytest.mark.parametrize("n", [6, 40, _bdf._INVERSE_ROWS + 1])
def test_newton_matrix_solves_against_numpy(n):
    """`(I - c J)^{-1} r` from the kept factorization, for a vector and for tangent
    columns: up to `_INVERSE_ROWS` states by a kept inverse (one product a solve), above
    by LAPACK's LU; both against NumPy's solve, under `jit` and `vmap` over `r`."""
    rng = np.random.default_rng(n)
    J = rng.normal(size=(n, n)) - 3.0 * np.eye(n)
    c = 0.7
    A = np.eye(n) - c * J
    lu = jax.jit(functools.partial(_bdf._lu_factor, None))(J, c)
    assert isinstance(lu, _bdf._Inverse) == (n <= _bdf._INVERSE_ROWS)
    solve = jax.jit(functools.partial(_bdf._lu_solve, None))
    for r in (rng.normal(size=n), rng.normal(size=(n, 5))):
        np.testing.assert_allclose(solve(lu, r), np.linalg.solve(A, r), rtol=1e-10, atol=1e-12)
    R = rng.normal(size=(3, n))
    batched = jax.vmap(solve, in_axes=(None, 0))(lu, R)
    np.testing.assert_allclose(batched, np.linalg.solve(A, R.T).T, rtol=1e-10, atol=1e-12)


def _loops_with(jaxpr, primitive: str) -> list[bool]:
    """For each `while` loop of `jaxpr` (nested ones included, in order), whether its
    body evaluates `primitive`."""

    def subjaxprs(eqn):
        for v in eqn.params.values():
            for j in v if isinstance(v, (list, tuple)) else [v]:
                if isinstance(j, jax.extend.core.ClosedJaxpr):
                    yield j.jaxpr
                elif isinstance(j, jax.extend.core.Jaxpr):
                    yield j

    def has(j) -> bool:
        return any(e.primitive.name == primitive or any(has(s) for s in subjaxprs(e))
                   for e in j.eqns)  # fmt: skip

    out = []

    def walk(j):
        for e in j.eqns:
            if e.primitive.name == "while":
                out.append(has(e.params["body_jaxpr"].jaxpr))
            for s in subjaxprs(e):
                walk(s)

    walk(jaxpr)
    return out


def test_tangents_iterate_on_the_linearized_field():
    """The staggered corrector: the state's Newton iteration evaluates the rates (`exp`)
    at every iteration, the tangents' (affine in the columns) only their linearization at
    the prediction, outside the loop; the corrected tangents solve
    `(I - c J) Z = Z_pred - psi + c f_theta` as NumPy does."""

    def f(t, z, th):
        return -th[0] * jnp.exp(z) + th[1] * jnp.roll(z, 1)

    def field(t, state, args):
        z, Z = state
        th, Ms = args
        return ld_jvp(lambda zz, pp: f(t, zz, pp), (z, th), (Z, Ms))

    n, p = 3, 2
    th, Ms = jnp.array([0.5, 2.0]), jnp.eye(2)
    z_pred = jnp.array([0.1, 0.2, 0.3])
    Z_pred = jnp.linspace(-0.3, 0.4, n * p)
    psi = jnp.linspace(0.01, 0.02, n + n * p)
    c, rtol, atol = 0.05, 1e-6, 1e-9
    J = jax.jacfwd(lambda z: f(0.0, z, th))(z_pred)
    lu = _bdf._lu_factor(None, J, c)

    def corrector(u_pred):
        with jax.numpy_dtype_promotion("standard"):  # as the solver runs it
            return _bdf._staggered_corrector(
                field, lambda t, z, a: f(t, z, a[0]), (th, Ms), n, p, rtol, atol, 1e-4,
                None, 0.0, u_pred, psi, c, 1.0, lu, 1.0)  # fmt: skip

    u_pred = jnp.concatenate([z_pred, Z_pred])
    jaxpr = jax.make_jaxpr(corrector)(u_pred).jaxpr
    assert _loops_with(jaxpr, "exp") == [True, False]
    u, d, conv, _, _ = jax.jit(corrector)(u_pred)
    assert bool(conv)
    z = np.asarray(u[:n])
    Jz = np.asarray(jax.jacfwd(lambda zz: f(0.0, zz, th))(jnp.asarray(z)))
    f_th = np.asarray(jax.jacfwd(lambda pp: f(0.0, jnp.asarray(z), pp))(th))
    rhs = np.asarray(Z_pred).reshape(n, p) - np.asarray(psi[n:]).reshape(n, p) + c * f_th
    ref = np.linalg.solve(np.eye(n) - c * Jz, rhs)
    np.testing.assert_allclose(np.asarray(u[n:]).reshape(n, p), ref, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("order", [1, 2, 5])
def test_the_claimed_accuracy_holds_at_low_order(order):
    """`ji.BDF(max_order=1)` claimed sensitivities accurate to 100 rtol (1e-6 at rtol
    1e-8) where backward Euler's global error is of order sqrt(rtol): against the closed
    form of a decay, outputs and sensitivities within the claim, whatever the order."""
    from models_for_tests import Decay

    model = Decay()  # y = exp(-k t) / V
    integ = ji.Integrator(ji.BDF(max_order=order), rtol=1e-8, atol=1e-10)
    sens = ji.sensitivity(model, integrator=integ)
    k, V = (float(v) for v in model.parameters.nominal)
    t = np.asarray(model.times)
    y = np.asarray(ji.simulate(model, integrator=integ).ys)[:, 0]
    exact = np.exp(-k * t) / V
    S = np.asarray(sens.matrix)
    dk, dV = -t * exact, -exact / V
    err = max(np.abs(y - exact).max() / np.abs(exact).max(),
              np.abs(S[:, 0] - dk).max() / np.abs(dk).max(),
              np.abs(S[:, 1] - dV).max() / np.abs(dV).max())  # fmt: skip
    assert err <= sens.accuracy
    if order == 5:
        assert sens.accuracy == pytest.approx(100 * 1e-8)  # unchanged at the default order
    if order == 1:
        assert err > 100 * 1e-8  # the claim before was wrong
