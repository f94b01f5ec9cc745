"""`ji.analyze` on hand-written models whose answers are known in closed form, problems
with several experiments against the closed-form sensitivities, unknown initial
conditions, and the `jaxident analyze` command on a PEtab problem and a model file."""

import json
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxident as ji
from jaxident import cli
from jaxident._linalg._covariance import marginal, principal_directions
from jaxident._report._analyze import _for_one_answer


class Product(ji.ODEModel):
    """x' = -k x, x(0) = 1, y = a b x: only the product a*b is identifiable."""

    parameters: ji.Parameters = ji.Parameters(["k", "a", "b"], [0.5, 2.0, 3.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 5.0, 10))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        return -th.k * x

    def initial_state(self, th):
        return jnp.array([1.0])

    def output(self, t, x, th):
        return th.a * th.b * x[0]


class SIRReporting(ji.ODEModel):
    """SIR with unknown population N and initial infected I0, observed y = rho I: the
    scaling (N, I0, rho) -> (c N, c I0, rho / c) leaves y unchanged."""

    parameters: ji.Parameters = ji.Parameters(
        ["beta", "gamma", "rho", "N", "I0"], [0.5, 0.2, 0.3, 1000.0, 5.0]
    )
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(1.0, 40.0, 40))
    t0: float = 0.0
    state_names = ("S", "I")

    def vector_field(self, t, x, th):
        S, I = x
        infection = th.beta * S * I / th.N
        return jnp.stack([-infection, infection - th.gamma * I])

    def initial_state(self, th):
        return jnp.stack([th.N - th.I0, th.I0])

    def output(self, t, x, th):
        return th.rho * x[1]


class TwoCompartment(ji.ODEModel):
    """Dose into compartment 1, elimination from both, y = x1 / V: four rate constants,
    three identifiable combinations of them (the transfer function's coefficients)."""

    parameters: ji.Parameters = ji.Parameters(
        ["k01", "k02", "k12", "k21", "V"], [0.1, 0.05, 0.3, 0.2, 2.0]
    )
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.25, 20.0, 40))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        x1, x2 = x
        return jnp.stack(
            [
                -(th.k01 + th.k21) * x1 + th.k12 * x2,
                th.k21 * x1 - (th.k02 + th.k12) * x2,
            ]
        )

    def initial_state(self, th):
        return jnp.array([10.0, 0.0])

    def output(self, t, x, th):
        return x[0] / th.V


def test_product_of_parameters():
    rep = ji.analyze(Product(), sigma=0.01)
    assert rep.rank == 2 and rep.non_identifiable == ("a", "b")
    assert rep.identifiable == ("k",)
    (g,) = rep.groups
    assert g.monomial and g.combinations == ("a*b",)
    np.testing.assert_array_equal(g.exponents, [[1, 1]])
    # the null direction on the log scale: a up, b down by as much
    v = g.directions[:, 0] / g.directions[0, 0]
    np.testing.assert_allclose(v, [1.0, -1.0], atol=1e-8)
    assert "a*b" in str(rep) and np.isinf(rep.std[1:]).all()


def test_sir_with_reporting_rate():
    rep = ji.analyze(SIRReporting(), sigma=0.01)
    assert rep.rank == 4
    assert set(rep.non_identifiable) == {"rho", "N", "I0"}
    assert set(rep.identifiable) == {"beta", "gamma"}
    (g,) = rep.groups
    assert g.monomial and set(g.combinations) == {"rho*N", "rho*I0"}
    # every monomial is invariant under the known symmetry (rho, N, I0) ~ (-1, 1, 1)
    sym = np.array([{"rho": -1, "N": 1, "I0": 1}[n] for n in g.names])
    assert np.all(g.exponents @ sym == 0)
    assert np.linalg.matrix_rank(g.exponents) == 2


def test_two_compartment_model_is_not_a_scaling_symmetry():
    model = TwoCompartment()
    rep = ji.analyze(model, sigma=0.01)
    assert rep.rank == 4
    assert set(rep.non_identifiable) == {"k01", "k02", "k12", "k21"}
    assert rep.identifiable == ("V",)
    (g,) = rep.groups
    assert not g.monomial and g.exponents is None
    assert len(g.combinations) == 3 and all(c.endswith("near theta") for c in g.combinations)
    assert g.structural and g.evidence.startswith("generic: null at all 8 points")
    # the null direction (linear units) is orthogonal to the gradients of the
    # transfer function's coefficients a = k02 + k12, b = k01 + k21 + a,
    # c = (k01 + k21) a - k12 k21, which the data determine
    k01, k02, k12, k21 = np.asarray(model.parameters.nominal)[:4]
    v = g.directions[:, 0] * np.array([k01, k02, k12, k21])  # log -> linear units
    grads = np.array(
        [
            [0, 1, 1, 0],
            [1, 1, 1, 1],
            [k02 + k12, k01 + k21, k01 + k21 - k21, k02 + k12 - k12],
        ],
        dtype=float,
    )
    np.testing.assert_allclose(grads @ v / np.linalg.norm(v), 0.0, atol=1e-7)


def test_report_json_round_trip_and_plot(tmp_path):
    rep = ji.analyze(Product(), sigma=0.01)
    path = tmp_path / "r.json"
    rep.to_json(path)
    d = json.loads(path.read_text())
    assert d["non_identifiable"] == ["a", "b"]
    assert d["groups"][0]["identifiable_combinations"] == ["a*b"]
    assert d["std"]["a"] == "inf" and d["rank"] == 2
    fig = rep.plot()
    fig.savefig(tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 10_000
    # every bar colour is explained by the legend in words, and nothing else is (an axis
    # label used to name "red" over orange bars, issue 51)
    from matplotlib.colors import to_hex
    from matplotlib.patches import Patch

    bars = fig.axes[1].patches
    legend = fig.axes[1].get_legend()
    pairs = zip(legend.legend_handles, legend.get_texts())
    keyed = {to_hex(h.get_facecolor()): t.get_text() for h, t in pairs if isinstance(h, Patch)}
    shown = {to_hex(b.get_facecolor()) for b in bars}
    assert set(keyed) == shown, (keyed, shown)
    assert keyed[to_hex("tab:red")] == "structurally non-identifiable"
    assert "red" not in fig.axes[1].get_xlabel()


class Decay(ji.ODEModel):
    """y = dose exp(-k t) / V."""

    parameters: ji.Parameters = ji.Parameters(["k", "V", "dose"], [0.3, 2.0, 1.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.0, 4.0, 5))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        return -th.k * x

    def initial_state(self, th):
        return jnp.array([th.dose])

    def output(self, t, x, th):
        return x[0] / th.V


def test_problem_with_experiments_against_closed_form():
    model = Decay()
    t1, t2 = np.array([0.5, 1.0, 2.0, 4.0]), np.array([1.0, 3.0])
    experiments = [
        ji.Experiment(t1, sigma=0.1, condition={"dose": 1.0}, name="low dose"),
        # another dose, another volume (a parameter of this experiment only)
        ji.Experiment(t2, sigma=0.2, condition={"dose": 5.0, "V": "V_b"}, name="high dose"),
    ]
    params = ji.Parameters(["k", "V", "V_b"], [0.3, 2.0, 4.0])
    problem = ji.Problem(model, experiments, params, scales={"k": "log10"})
    assert problem.parameters.names == ("k", "V", "V_b")
    np.testing.assert_allclose(problem.parameters.nominal, [math.log10(0.3), 2.0, 4.0])
    S = np.asarray(ji.sensitivity(problem).matrix)

    def rows(t, dose, V, sigma, which):
        y = dose * np.exp(-0.3 * t) / V
        dk = -t * y * 0.3 * math.log(10)  # d/dlog10 k
        dV = -y / V
        cols = [dk, dV if which == "V" else 0 * t, dV if which == "V_b" else 0 * t]
        return np.stack(cols, axis=1) / sigma

    ref = np.vstack([rows(t1, 1.0, 2.0, 0.1, "V"), rows(t2, 5.0, 4.0, 0.2, "V_b")])
    np.testing.assert_allclose(S, ref, rtol=1e-6, atol=1e-9)
    # ji.sensitivity of a problem is the same matrix, ready for every selection
    sens = ji.sensitivity(problem)
    np.testing.assert_array_equal(np.asarray(sens.matrix), S)
    assert sens.scale == "noise" and int(ji.select_parameters(sens).k) == 3
    # the model parameter fixed in every experiment is not a problem parameter
    assert "dose" not in ji.Problem(model, experiments[:1]).parameters.names
    with pytest.raises(ValueError, match="not a parameter of the problem"):
        ji.Problem(model, [ji.Experiment(t1, condition={"V": "nope"})], params)
    with pytest.raises(ValueError, match="Unknown parameter 'dos'"):
        ji.Problem(model, [ji.Experiment(t1, condition={"dos": 1.0})])
    # data, missing values and the log-likelihood against NumPy
    data = np.array([[0.45], [np.nan], [0.27], [0.15]])
    p2 = ji.Problem(model, [ji.Experiment(t1, data, sigma=0.1, condition={"dose": 1.0})])
    out = ji.predict(p2)
    y = np.exp(-0.3 * t1) / 2.0
    seen = ~np.isnan(data[:, 0])
    r = (y - data[:, 0])[seen] / 0.1
    llh = np.sum(-0.5 * np.log(2 * np.pi * 0.01) - 0.5 * r**2)
    np.testing.assert_allclose(float(out.log_likelihood), llh, rtol=1e-7)
    assert ji.sensitivity(p2).matrix.shape == (3, 2)


def test_unknown_initial_conditions():
    base = SIRReporting()
    model = ji.free_initial_state(base, states=["I"])
    assert model.parameters.names[:2] == ("I", "beta")
    th = model.parameters.nominal.at[0].set(7.0)
    x0 = model.initial_state(model.parameters.view(th))
    np.testing.assert_allclose(x0, [1000.0 - 5.0, 7.0])  # S(0) still N - I0
    # with I(0) free, I0 only sets S(0) = N - I0: dy/dI0 of the base model is
    # dy/dI(0) - dy/dS(0), and dy/dS(0) = -dy/dI0 of the new one
    S = np.asarray(ji.sensitivity_matrix(model))
    S_base = np.asarray(ji.sensitivity_matrix(base))
    np.testing.assert_allclose(S[:, 0], S_base[:, 4] - S[:, 5], rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="Unknown states"):
        ji.free_initial_state(base, states=["R"])


def test_cli_analyze_petab_and_model_file(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    assert cli.main(["analyze", ji.data.petab_problem("perelson"), "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "Identifiability of Perelson_Science1996" in text
    assert json.loads(out_json.read_text())["n_parameters"] == 2
    src = tmp_path / "my_model.py"
    src.write_text(
        "import jax, jax.numpy as jnp, equinox as eqx\nimport jaxident as ji\n\n"
        "class M(ji.ODEModel):\n"
        "    parameters: ji.Parameters = ji.Parameters(['k', 'a', 'b'], [0.5, 2.0, 3.0])\n"
        "    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 5, 10))\n"
        "    t0: float = 0.0\n"
        "    def vector_field(self, t, x, th): return -th.k * x\n"
        "    def initial_state(self, th): return jnp.array([1.0])\n"
        "    def output(self, t, x, th): return th.a * th.b * x[0]\n"
    )
    assert cli.main(["analyze", f"{src}:M", "--quiet"]) == 0
    assert "identifiable only a*b" in capsys.readouterr().out
    assert cli.main(["analyze", f"{src}:Nope"]) == 2
    assert "has no 'Nope'" in capsys.readouterr().err
    assert cli.main(["analyze", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_fewer_data_than_parameters():
    model = Product(times=jnp.array([1.0, 2.0]))
    rep = ji.analyze(model)
    assert rep.n_data == 2 and rep.rank == 2
    assert "only 2 data for 3 parameters" in str(rep)
    assert not rep.noise_model and "sigma = 1" in str(rep)


def test_standard_deviations_on_linear_scales_against_numpy():
    """SVIR's parameters are on linear scales: the report's std is
    `sqrt(diag((S^T S)^-1))` of the noise-weighted sensitivities, in the parameters'
    units (it was off by the square of the units-per-decade factor)."""
    model = ji.models.load("svir")
    rep = ji.analyze(model, sigma=0.1, progress=False)
    problem = ji.Problem(model, ji.Experiment(np.asarray(model.times), sigma=0.1))
    S = np.asarray(ji.sensitivity(problem).matrix)
    np.testing.assert_allclose(rep.std, np.sqrt(np.diag(np.linalg.inv(S.T @ S))), rtol=1e-8)
    theta = np.asarray(model.parameters.nominal)
    np.testing.assert_allclose(rep.decades, rep.std / (theta * math.log(10)), rtol=1e-12)


def test_a_resolved_near_null_direction_spreads_no_inf():
    """One direction 1e-9 below the others, above the rank threshold: `S^T S` rounds its
    eigenvalue to zero or below (every std was inf); from the SVD each std is finite and
    equals the row norm of `R^-1` (SciPy's QR, an independent route), and the
    parameters outside that direction keep their small std."""
    import scipy.linalg as sl

    rng = np.random.default_rng(3)
    U = np.linalg.qr(rng.standard_normal((40, 5)))[0]
    V = np.eye(5)
    V[3:, 3:] = np.array([[1.0, 1.0], [1.0, -1.0]]) / math.sqrt(2)  # direction on p4, p5
    V = np.linalg.qr(V)[0]
    S = (U * np.array([10.0, 7.0, 5.0, 3.0, 1e-8])) @ V.T
    F_eig = np.linalg.eigvalsh(S.T @ S)
    assert F_eig[0] < 1e-17 * F_eig[-1]  # lost to rounding in S^T S
    std, W = marginal(S, range(5), 5)
    R = sl.qr(S, mode="economic")[1]
    ref = np.linalg.norm(sl.solve_triangular(R, np.eye(5)), axis=1)
    np.testing.assert_allclose(std, ref, rtol=1e-5)
    assert np.all(std[:3] < 1) and np.all(std[3:] > 1e7)
    weak = principal_directions(W, np.ones(5), np.ones(5, bool), 1.0)
    assert len(weak) == 1 and weak[0][1] > 1e7
    np.testing.assert_allclose(np.abs(weak[0][2]), [0, 0, 0, 2**-0.5, 2**-0.5], atol=1e-6)
    # below the rank threshold the direction is unresolved: p4 and p5 lie in it (their
    # distances are under the threshold), and the others keep their marginal std
    dep = ji.linalg.dependence(jnp.asarray(S), rule_of(1e-6))
    assert int(dep.rank) == 4
    np.testing.assert_array_equal(np.asarray(dep.dependent), [0, 0, 0, 1, 1])
    std, _ = marginal(S, range(5), 4)
    np.testing.assert_allclose(std[:3], ref[:3], rtol=1e-6)


def test_weak_directions_have_one_sign():
    """An SVD returns each singular vector up to its sign, which depends on the matrix as
    LAPACK (or a GPU) reduces it: the same data rotated (`Q S`, the same Fisher matrix)
    must print the same directions, the largest component positive."""
    rng = np.random.default_rng(5)
    V = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    S = (np.linalg.qr(rng.standard_normal((30, 4)))[0] * [5.0, 2.0, 1e-3, 1e-5]) @ V.T
    seen = []
    for _ in range(6):
        Q = np.linalg.qr(rng.standard_normal((30, 30)))[0]
        _, W = marginal(Q @ S, range(4), 4)
        weak = principal_directions(W, np.ones(4), np.ones(4, bool), 1.0)
        assert len(weak) == 2
        for _, _, v in weak:
            assert v[np.argmax(np.abs(v))] > 0
        seen.append(np.stack([v for _, _, v in weak]))
    for other in seen[1:]:
        np.testing.assert_allclose(other, seen[0], atol=1e-6)


def rule_of(rtol):
    return ji.linalg.RelativeTolerance(rtol)


def test_noise_level_null_components_are_not_non_identifiable():
    """Columns 1 and 2 are equal (null vector (1, -1, 0, 0, 0)); the matrix is perturbed
    at a relative 1e-8 and decided at an accuracy of 1e-7. The computed null vector has
    components of about 1e-8 * cond on the other columns, which a fixed cut-off on
    null-vector components (the paper's `zero_tol=1e-6`) lists as non-estimable. By
    rank, p3..p5 lie far from the span of the others (distances against the
    threshold), whatever those components are: only p1 and p2 are listed."""
    rng = np.random.default_rng(0)
    A = np.linalg.qr(rng.standard_normal((30, 4)))[0] @ np.diag([1.0, 0.1, 0.01, 2e-3])
    A = A @ np.linalg.qr(rng.standard_normal((4, 4)))[0]
    S = np.column_stack([A[:, 0], A[:, 0], A[:, 1:]])
    S = S + 1e-8 * np.abs(S).max() * rng.standard_normal(S.shape)
    rule = ji.linalg.RelativeTolerance(accuracy=1e-7)
    est = ji.estimability(S, ["p1", "p2", "p3", "p4", "p5"], rank=rule)
    assert est.nullity == 1 and est.zero_tol is None
    assert est.estimable == ("p3", "p4", "p5")
    assert est.dependent_sets == [("p1", "p2")]
    noise = np.abs(np.asarray(est.basis)[2:]).max()
    assert noise > 1e-6  # the components a fixed cut-off would have counted
    d = np.asarray(est.decision.distance) / float(est.decision.threshold)
    assert np.all(d[:2] < 1) and np.all(d[2:] > 100)
    old = ji.estimability(S, ["p1", "p2", "p3", "p4", "p5"], rank=rule, zero_tol=1e-6)
    assert len(old.estimable) < 3


class _Overlapping(ji.ODEModel):
    """20 decays `x_i' = -(a_i + b_i + b_{i+1}) x_i` (indices mod 20), all observed: 40
    rate constants, 20 identifiable sums, a 20-dimensional null space whose support is
    one connected set of all 40 (40 choose 20 = 1.4e11 pivot sets)."""

    parameters: ji.Parameters = ji.Parameters(
        [f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)],
        np.concatenate([np.linspace(0.1, 0.5, 20), np.linspace(0.05, 0.3, 20)]),
    )
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 5.0, 6))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        a, b = th.values[:20], th.values[20:]
        return -(a + b + jnp.roll(b, -1)) * x

    def initial_state(self, th):
        return jnp.ones(20)

    def output(self, t, x, th):
        return x


def test_report_with_a_twenty_dimensional_connected_null_space():
    """Tens of non-identifiable parameters in one dependent set: the pivots are chosen
    greedily (no exhaustive search), and the report is complete: rank 20, all 40 listed
    in one group with 20 identifiable combinations, each orthogonal to the null
    directions (checked against the closed-form null space of the sums)."""
    import time

    model = _Overlapping()
    start = time.perf_counter()
    rep = ji.analyze(model, sigma=0.01, progress=False)
    assert time.perf_counter() - start < 120  # compile included; seconds once compiled
    assert rep.rank == 20 and len(rep.non_identifiable) == 40
    assert len(rep.groups) == 1 and len(rep.groups[0].combinations) == 20
    # on the log scale the outputs see L diag(theta) (L: which sums use which rate)
    L = np.zeros((20, 40))
    for i in range(20):
        L[i, i] = L[i, 20 + i] = L[i, 20 + (i + 1) % 20] = 1.0
    theta = np.asarray(model.parameters.nominal)
    N = sl_null(L * theta[None, :])
    g = rep.groups[0]
    idx = [model.parameters.names.index(n) for n in g.names]
    P = g.directions  # the group's null directions (log units)
    ref = N[idx] / np.linalg.norm(N[idx], axis=0)
    # same subspace: the projection of each onto the other is the identity
    Q1, Q2 = np.linalg.qr(P)[0], np.linalg.qr(ref)[0]
    np.testing.assert_allclose(np.linalg.svd(Q1.T @ Q2, compute_uv=False), 1.0, atol=1e-6)


def sl_null(A):
    import scipy.linalg as sl

    return sl.null_space(A)


class _SqrtRate(ji.ODEModel):
    """`x' = -sqrt(c) x` at `c = 0`: solvable, but the tangent of `c` is inf."""

    parameters: ji.Parameters = ji.Parameters(["c", "k"], [0.0, 0.5], [0.0, 0.1], [1.0, 1.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 2.0, 4))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        return -(jnp.sqrt(th.c) + th.k) * x

    def initial_state(self, th):
        return jnp.array([1.0])

    def output(self, t, x, th):
        return x[0]


def test_sensitivities_that_fail_where_the_simulation_works_say_so():
    problem = ji.Problem(_SqrtRate(), ji.Experiment(np.linspace(0.5, 2.0, 4), sigma=0.1))
    ji.predict(problem)  # the simulation is fine
    with pytest.raises(RuntimeError, match=r"simulation of .* succeeds, but its sensitiv"):
        ji.sensitivity(problem)


def test_monomials_read_as_products_where_they_can():
    """The symmetry (S, I, N, k) -> (c S, c I, c N, k / c): the identifiable monomials
    are written as products (`N*k, I*k, S*k`), not on the first parameter as base
    (`S/I, S/N, S*k`); each is orthogonal to the null direction (closed form)."""
    from jaxident._report._analyze import _combinations

    a = np.array([1.0, 1.0, 1.0, -1.0]) / 2.0
    texts, exps = _combinations(("S", "I", "N", "k"), a[:, None], True, True)
    assert set(texts) == {"N*k", "I*k", "S*k"}
    assert np.all(exps >= 0) and np.all(exps @ a == 0)
    # where a division is needed (a ~ (1, 1)), it stays one
    texts, exps = _combinations(("a", "b"), np.array([[1.0], [1.0]]) / 2**0.5, True, True)
    assert texts == ("a/b",) and exps.tolist() == [[1, -1]]


def test_rational_null_space_is_sympys():
    """The exact null space behind the monomials, against sympy's `nullspace` (the same
    basis, entry by entry) on integer matrices of every rank, wide and square."""
    import sympy as sp

    from jaxident._linalg._combinations import rational_null_space

    rng = np.random.default_rng(0)
    for m, n, rank in [(1, 4, 1), (2, 5, 2), (3, 6, 2), (4, 4, 3), (2, 3, 0), (3, 7, 3)]:
        M = rng.integers(-3, 4, (m, rank)) @ rng.integers(-3, 4, (rank, n))
        ours = rational_null_space(M)
        ref = sp.Matrix(M.tolist()).nullspace()
        assert len(ours) == len(ref) == n - np.linalg.matrix_rank(M)
        for v, r in zip(ours, ref):
            assert [sp.Rational(x.numerator, x.denominator) for x in v] == list(r)
            assert all(sum(int(a) * x for a, x in zip(row, v)) == 0 for row in M)


class _Shifted(Decay):
    """y = exp(-k t) / V + shift, shift at 0."""

    parameters: ji.Parameters = ji.Parameters(
        ["k", "V", "shift"], [0.3, 2.0, 0.0], [0.1, 1.0, -1.0], [1.0, 4.0, 1.0]
    )

    def initial_state(self, th):
        return jnp.ones(1)

    def output(self, t, x, th):
        return x[0] / th.V + th.shift


def test_report_without_noise_model_parameter_at_zero_and_one_warning():
    """A parameter at 0 on a linear scale has no decades (its std is printed as it is
    and not flagged); without a noise model the report says sigma = 1 was assumed; a
    close rank decision warns once, not once per inner analysis."""
    import warnings

    model = _Shifted()
    prob = ji.Problem(model, ji.Experiment(np.array([0.5, 1.0, 2.0, 4.0]), sigma=0.1))
    rep = ji.analyze(prob)
    assert np.isnan(rep.decades[2]) and "near 0: absolute, no decades" in str(rep)
    assert rep.to_dict()["std_decades"]["shift"] is None
    text = str(ji.analyze(model))
    assert "every datum with sigma = 1" in text and "gamma2 n/a (k = p)" in text
    # a rank decision within a factor 10 of the threshold: one warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = ji.analyze(model, rank=ji.RelativeTolerance(float(rep.singular_values[-1]) * 3))
    near = [w for w in caught if issubclass(w.category, ji.NearThresholdWarning)]
    assert len(near) == 1 and "analyze" in str(near[0].message)
    assert rep.near_threshold is not None and "CLOSE CALL" in str(rep)


class _Chain(ji.ODEModel):
    """A -> B -> C with rates k1 k2 and k3, C observed: k1 and k2 enter only as their
    product, and k3 is strongly correlated with it."""

    parameters: ji.Parameters = ji.Parameters(["k1", "k2", "k3"], [0.8, 0.5, 0.3])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 12.0, 12))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        a, b, _ = x
        return jnp.stack([-th.k1 * th.k2 * a, th.k1 * th.k2 * a - th.k3 * b, th.k3 * b])

    def initial_state(self, th):
        return jnp.array([1.0, 0.0, 0.0])

    def output(self, t, x, th):
        return x[2]


def test_standard_deviations_aremarginal():
    """k3's standard deviation with the identifiable product k1*k2 free to move, not
    held fixed: equal (within 5%) to the model with k2 fixed, which is full rank and
    whose std is checked against NumPy's inverse of the Fisher matrix from central
    finite differences. Holding both k1 and k2 fixed (the conditional std printed
    before) gives a far smaller value."""
    model = _Chain()
    times = np.asarray(model.times)
    problem = ji.Problem(model, ji.Experiment(times, sigma=0.02))
    rep = ji.analyze(problem, progress=False)
    assert set(rep.non_identifiable) == {"k1", "k2"} and rep.identifiable == ("k3",)
    fixed = problem.fix({"k2": 0.5})
    ref = ji.analyze(fixed, progress=False)
    k3 = rep.std[2]
    assert abs(k3 - ref.std[1]) <= 0.05 * ref.std[1]

    def outputs(th):
        return np.asarray(ji.predict(fixed, th).outputs).ravel() / 0.02

    th0, h = np.array([0.8, 0.3]), 1e-5
    J = np.stack(
        [(outputs(th0 + h * e) - outputs(th0 - h * e)) / (2 * h) for e in np.eye(2)], axis=1
    )
    np.testing.assert_allclose(ref.std, np.sqrt(np.diag(np.linalg.inv(J.T @ J))), rtol=1e-4)
    conditional = ji.analyze(problem.fix({"k1": 0.8, "k2": 0.5}), progress=False).std[0]
    assert conditional < 0.2 * k3
    assert "marginal" in str(rep)


def test_the_default_rule_given_by_hand_decides_at_the_accuracy():
    """`rank=ji.RelativeTolerance()` (what the command line passes) is the default rule:
    the report decides at the accuracy of the sensitivities, as the selection does."""
    rep = ji.analyze(Product(), sigma=0.01, rank=ji.RelativeTolerance())
    assert "accuracy of S" in rep.rank_rule
    assert "accuracy of S" in rep.selection.rank_description


def test_the_reports_solves_loop_the_rosenbrock_stages():
    """The report's few solves are compiled for an answer computed once: a Rosenbrock
    solver's stages as a loop where the choice was left to it (the shortest
    compilation); a solver's own choice is kept, other solvers are untouched, and the
    report is the one the written-out stages give."""
    left = ji.Integrator(ji.Rodas4(), rtol=1e-9, atol=1e-11)
    assert _for_one_answer(left).solver.unroll is False
    assert (_for_one_answer(left).rtol, _for_one_answer(left).atol) == (1e-9, 1e-11)
    mine = ji.Integrator(ji.Rodas4(unroll=True))
    assert _for_one_answer(mine) is mine
    tsit = ji.models.load("sir").integrator
    assert _for_one_answer(tsit) is tsit
    problem = ji.petab.load(ji.data.petab_problem("perelson"))
    base = problem.model.integrator
    assert isinstance(base.solver, ji.Rodas4) and base.solver.unroll is None
    looped = ji.analyze(problem)
    unrolled = ji.analyze(
        problem, integrator=ji.Integrator(ji.Rodas4(unroll=True), rtol=base.rtol, atol=base.atol)
    )
    assert (looped.rank, looped.non_identifiable) == (unrolled.rank, unrolled.non_identifiable)
    np.testing.assert_allclose(looped.std, unrolled.std, rtol=1e-6)
    np.testing.assert_allclose(looped.singular_values, unrolled.singular_values, rtol=1e-6)


def test_the_reports_solves_compile_without_llvm_passes(monkeypatch):
    """`ji.analyze` enters `answering_once` itself around its solves (the command line
    relies on it): each sensitivity it solves is compiled as an answer computed once,
    and the flag is off again afterwards."""
    from jaxident._report import _analyze
    from jaxident._runtime import _config

    seen = []

    def recorded(*args, **kwargs):
        seen.append(_config.solve_optimized())
        return solve(*args, **kwargs)

    solve = _analyze.problem_sensitivity
    monkeypatch.setattr(_analyze, "problem_sensitivity", recorded)
    ji.analyze(ji.models.load("sir"))
    assert seen and not any(seen)
    assert _config.solve_optimized()


def test_report_json_is_strict_where_a_profile_point_failed(tmp_path):
    """A failed profile point has NaN estimates and cost: the report's JSON writes them
    as null (a bare NaN, as before, is refused by strict parsers), infinite standard
    deviations as "inf"."""
    import dataclasses

    from jaxident._fit._profile import Profile
    from jaxident._runtime._results import status_array

    rep = ji.analyze(Product(), sigma=0.01)
    failed = Profile(
        "a",
        np.array([0.5, 1.0, 2.0]),
        ("b",),
        np.array([[2.0], [np.nan], [0.5]]),
        np.array([0.1, np.nan, 0.1]),
        status_array(np.array([True, False, True])),
        ("", "the fit failed", ""),
    )
    rep = dataclasses.replace(rep, profiles={"a": failed})

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    d = json.loads(rep.to_json(), parse_constant=refuse)
    assert d["profiles"]["a"]["cost"] == [0.1, None, 0.1]
    assert d["profiles"]["a"]["estimates"][1] == [None]
    assert d["std"]["a"] == "inf"
    path = tmp_path / "r.json"
    rep.to_json(path)
    assert json.loads(path.read_text(), parse_constant=refuse) == d
