import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl
from helpers import unordered_lapack_pairs
from models_for_tests import two_rate_problem

import jaxident as ji
import jaxident.linalg as L


def rref_ref(A, tol=1e-10):
    """Textbook Gauss-Jordan with partial pivoting, for comparison."""
    A = np.array(A, float)
    m, n = A.shape
    r, pivots = 0, []
    for c in range(n):
        if r == m:
            break
        i = r + int(np.argmax(np.abs(A[r:, c])))
        if abs(A[i, c]) <= tol * max(np.abs(A).max(), 1e-300):
            continue
        A[[r, i]] = A[[i, r]]
        A[r] /= A[r, c]
        for k in range(m):
            if k != r:
                A[k] -= A[k, c] * A[r]
        pivots.append(c)
        r += 1
    return A, pivots


def test_rref_against_reference_and_paper_patterns():
    rng = np.random.default_rng(0)
    for shape, rank in [((3, 5), 3), ((4, 4), 2), ((2, 6), 1)]:
        A = rng.standard_normal((shape[0], rank)) @ rng.standard_normal((rank, shape[1]))
        ech = L.rref(jnp.asarray(A))
        R, piv = rref_ref(A)
        assert np.flatnonzero(np.asarray(ech.pivots)).tolist() == piv
        np.testing.assert_allclose(np.asarray(ech.R), R, atol=1e-10)
    # eq. (22): rows [0 1 0 0], [0 0 1 2] -> theta2 isolated, theta3 with theta4
    Vt = np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 2.0]]) @ np.eye(4)
    Q = np.linalg.qr(np.random.default_rng(1).standard_normal((2, 2)))[0]
    ech = L.rref(jnp.asarray(Q @ Vt))  # any basis of the same row space
    np.testing.assert_array_equal(np.asarray(ech.pivots), [False, True, True, False])
    np.testing.assert_array_equal(np.asarray(ech.partners)[2], [False, False, False, True])
    assert not np.asarray(ech.partners)[1].any()


def test_null_space_against_scipy():
    rng = np.random.default_rng(2)
    S = rng.standard_normal((10, 3)) @ rng.standard_normal((3, 6))
    ns = L.null_space(jnp.asarray(S), L.RelativeTolerance(1e-10))
    assert int(ns.rank) == 3
    # the basis is of the column-equilibrated matrix; raw_basis is of S itself
    c = np.linalg.norm(S, axis=0)
    np.testing.assert_allclose(ns.scale, c, rtol=1e-12)
    N = np.asarray(ns.basis)[:, np.asarray(ns.mask)]
    ref = sl.null_space(S / c)
    np.testing.assert_allclose(N @ N.T, ref @ ref.T, atol=1e-10)
    np.testing.assert_allclose(
        ns.singular_values, np.linalg.svd(S / c, compute_uv=False), rtol=1e-10, atol=1e-13
    )
    raw = np.asarray(ns.raw_basis())[:, np.asarray(ns.mask)]
    np.testing.assert_allclose(S @ raw, 0, atol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(raw, axis=0), 1, rtol=1e-12)
    # the papers' convention: the SVD of S as given (no scale), under jit and vmap; a
    # new direction in a column of tiny units falls below the threshold only as given
    S2 = np.concatenate([S, 1e-9 * rng.standard_normal((10, 1))], axis=1)
    as_given = jax.jit(jax.vmap(lambda s: L.null_space(s, L.RelativeTolerance(1e-8), False)))
    ns = jax.tree.map(lambda x: x[0], as_given(jnp.asarray(S2)[None]))
    np.testing.assert_array_equal(ns.scale, np.ones(7))
    s = np.linalg.svd(S2, compute_uv=False)
    np.testing.assert_allclose(ns.singular_values, s, rtol=1e-10, atol=1e-12 * s[0])
    assert int(ns.rank) == int(np.sum(s > 1e-8 * s[0])) == 3
    assert int(L.null_space(jnp.asarray(S2), L.RelativeTolerance(1e-8)).rank) == 4


@pytest.mark.slow
def test_example1_directions_paper():
    """Example 1 at theta*: the paper's ranks and sets for d = +e1 and d = -e1.
    The same assertions run in CI in notebooks/lserc_nonsmooth_dae.ipynb; this copy
    is for `pytest -m slow` runs without the notebooks."""
    m = ji.models.load("nonsmooth_dae_example")
    res = ji.lserc(
        m, m.THETA_STAR, method=ji.LSERC(directions=[[1.0, 0, 0, 0]], twin=0, singular=0)
    )
    assert int(res.reference.rank[0]) == 2
    assert res.identifiable == ("theta1", "theta4")
    assert res.non_identifiable == ("theta2", "theta3")
    assert res.isolated == ("theta2",) and res.pairwise == {"theta3": ("theta4",)}
    res = ji.lserc(
        m, m.THETA_STAR, method=ji.LSERC(directions=[[-1.0, 0, 0, 0]], twin=0, singular=0)
    )
    assert int(res.reference.rank[0]) == 1
    assert res.isolated == ("theta1", "theta2") and res.pairwise == {"theta3": ("theta4",)}
    # the paper's own convention (no equilibration) gives the same answer here
    res = ji.lserc(
        m,
        m.THETA_STAR,
        method=ji.LSERC(directions=[[1.0, 0, 0, 0]], twin=0, singular=0, equilibrate=False),
    )
    assert int(res.reference.rank[0]) == 2 and res.non_identifiable == ("theta2", "theta3")
    # the L-SERC matrix itself: columns [t, 0, -2, 1] for d = e1
    ls = ji.ld_sensitivity(m, m.THETA_STAR, M=jnp.array([1.0, 0, 0, 0]))
    t = np.asarray(m.times)
    np.testing.assert_allclose(
        np.asarray(ls.L), np.stack([t, 0 * t, -2 + 0 * t, 1 + 0 * t], axis=1), atol=1e-12
    )


@pytest.mark.slow
def test_example1_full_algorithm1_and_report():
    """Algorithm 1 with twin and singularity probing, and its report.
    The same assertions run in CI in notebooks/lserc_nonsmooth_dae.ipynb; this copy
    is for `pytest -m slow` runs without the notebooks."""
    m = ji.models.load("nonsmooth_dae_example")
    res = ji.lserc(m, m.THETA_STAR)
    assert len(res.kinds) == 16 and res.kinds.count("twin") == 8
    assert res.non_identifiable == ("theta1", "theta2", "theta3")
    assert "theta3 with theta4" in repr(res)
    d = res.to_dict()
    assert d["directions"][0]["rank"] == 2 and d["pairwise"] == {"theta3": ["theta4"]}


@pytest.mark.slow
def test_example2_reduction_and_reestimation():
    """Algorithm 2 over 25 LHS samples reduces theta3; re-estimation recovers 6 digits.
    The same assertions run in CI in notebooks/lserc_nonsmooth_dae.ipynb; this copy
    is for `pytest -m slow` runs without the notebooks."""
    m = ji.models.load("nonsmooth_dae_example")
    red = ji.reduce_parameters(m, key=jax.random.key(0), n=25, progress=False)
    assert red.non_identifiable == ("theta3",)
    assert red.identifiable == ("theta1", "theta2", "theta4")
    assert red.n_failed == 0 and red.counts.tolist() == [0, 0, 25, 0]
    lo, up = 1.0, 2.0
    assert lo < red.fixed["theta3"] < up
    assert red.reduced_model.parameters.names == ("theta1", "theta2", "theta4")
    # Example 3: data at (0.150, 45.0, 1.33, -3.00), estimate (theta1, theta2, theta4)
    tight = ji.Integrator(rtol=1e-12, atol=1e-12)
    true = np.array([0.150, 45.0, 1.33, -3.00])
    data = ji.simulate(m, true, integrator=tight).ys
    est = ji.estimate(
        ji.fix_parameters(m, {"theta3": 1.33}), data, theta0=[0.1, 30.0, -2.0], integrator=tight
    )
    np.testing.assert_allclose(np.asarray(est.theta), true[[0, 1, 3]], rtol=1e-6)
    # with theta3 fixed at the sample mean, the product theta3 theta4 is what is recovered
    est = ji.estimate(red.reduced_model, data, theta0=[0.1, 30.0, -2.0], integrator=tight)
    np.testing.assert_allclose(float(est.theta[2]) * red.fixed["theta3"], 1.33 * -3.0, rtol=1e-6)


@pytest.mark.slow
def test_wind_turbine_all_identifiable_and_estimation():
    """All five parameters identifiable at theta*; (R, X) re-estimated to 4 digits.
    The same assertions run in CI in notebooks/lserc_nonsmooth_dae.ipynb; this copy
    is for `pytest -m slow` runs without the notebooks."""
    m = ji.models.load("wind_turbine")
    res = ji.lserc(m, method=ji.LSERC(twin=0, singular=0))
    assert res.identifiable == ("KQi", "KVi", "R", "X", "E") and res.identifiable_at_theta
    tight = ji.Integrator(rtol=1e-12, atol=1e-12)
    data = ji.simulate(m, integrator=tight).ys
    reduced = ji.fix_parameters(m, {"KQi": 0.1, "KVi": 40.0, "E": 1.0164})
    est = ji.estimate(reduced, data, theta0=[0.02 * 1.01, 0.02987 * 1.01], integrator=tight)
    np.testing.assert_allclose(np.asarray(est.theta), [0.02, 0.02987], rtol=1e-4)
    # the step matters: at a steady state the control gains leave no trace in V
    still = eqx_replace(m, Q_cmd0=m.Q_cmd)
    res = ji.lserc(still, method=ji.LSERC(directions=[np.eye(5)[2]], twin=0, singular=0))
    assert {"KQi", "KVi"} & set(res.non_identifiable)


def eqx_replace(model, **kw):
    import equinox as eqx

    return eqx.tree_at(lambda m: [getattr(m, k) for k in kw], model, list(kw.values()))


@pytest.mark.slow
def test_ivgtt_reduction_over_25_samples():
    """IVGTT with output I over 25 LHS samples: the paper's two sets.
    The same assertions run in CI in notebooks/lserc_nonsmooth_dae.ipynb; this copy
    is for `pytest -m slow` runs without the notebooks."""
    m = ji.models.load("ivgtt")
    red = ji.reduce_parameters(m, key=jax.random.key(1), n=25, progress=False)
    assert set(red.non_identifiable) == {"p1", "p2", "p3", "p4", "p9", "p11", "p12"}
    assert set(red.identifiable) == {"p5", "p6", "p7", "p8", "p10", "gamma"}


def test_lserc_graph_orders_lapack_calls():
    from jaxident._identify._lserc import _lserc_jit, ModelOutputs, probe_directions

    m = ji.models.load("nonsmooth_dae_example")
    D, _ = probe_directions(4, ji.LSERC())

    def f(th):
        return _lserc_jit(
            ModelOutputs(m, m.times),
            th,
            jnp.asarray(D),
            m.integrator,
            ji.LSERC(rank=ji.RelativeTolerance(1e-9)),
            False,
        )

    text = jax.jit(jax.vmap(f)).lower(jnp.ones((2, 4)) * m.parameters.nominal).compile().as_text()
    assert unordered_lapack_pairs(text) == []


def test_bad_arguments():
    m = ji.models.load("nonsmooth_dae_example")
    with pytest.raises(ValueError, match="entries"):
        ji.lserc(m, method=ji.LSERC(directions=[[1.0, 0.0]]))
    with pytest.raises(ValueError, match="q must"):
        ji.lserc(m, method=ji.LSERC(q=7))
    with pytest.raises(ValueError, match="key"):
        ji.reduce_parameters(m)
    with pytest.raises(ValueError, match="fix_at .*must be one of 'mean', 'nominal', got 'median'"):
        ji.reduce_parameters(m, key=jax.random.key(0), fix_at="median")  # before any sweep
    with pytest.raises(ValueError, match="twin_partners must be one of 'next', 'all', got 'al'"):
        ji.LSERC(twin_partners="al")
    # the options and their names are the same settings: twins of the largest entry with
    # the next coordinate (one per primary direction) or with every other one
    from jaxident._identify._lserc import probe_directions

    for option, per_primary in ((ji.TwinPartners.next, 1), (ji.TwinPartners.all, 3)):
        D, kinds = probe_directions(4, ji.LSERC(twin_partners=option))
        D_name, _ = probe_directions(4, ji.LSERC(twin_partners=option.value))
        np.testing.assert_array_equal(D, D_name)
        assert len(D) == 8 + 8 * per_primary
    with pytest.raises(ValueError, match="Did you mean"):
        ji.fix_parameters(m, {"theta5": 1.0})
    with pytest.raises(ValueError, match="nothing"):
        ji.fix_parameters(m, dict.fromkeys(m.parameters.names, 1.0))


def test_singularity_probing_is_unit_free_with_relative_steps():
    """Example 1 at theta* with theta2 and theta4 in units 1e4 and 1e-4 times the
    original: relative steps (the default) move no parameter by more than eps of its
    value per null vector, no probe fails, and theta3 alone is confirmed in every unit,
    as the paper's absolute steps confirm it in the paper's units; the absolute steps in
    the new units move theta2 by more than the relative steps' bound of its value.

    (The size of that move is the null vectors' theta2 component, which depends on the
    basis LAPACK returns for a null space of dimension 2: on one machine it is 2x theta2
    and a probe's solve fails, on another 0.22x and none does. At least
    `||P e2|| / sqrt(nullity)` of it is basis-free, so the test asks only for more than
    the relative steps' bound.)"""
    m = ji.models.load("nonsmooth_dae_example")
    for f in (1e-4, 1.0, 1e4):
        other = ji.change_units(m, {"theta2": f, "theta4": 1 / f})
        theta = np.asarray(m.THETA_STAR) / np.array([1.0, f, 1.0, 1 / f])
        res = ji.lserc(other, theta, method=ji.LSERC(twin=0.0))
        assert res.confirmed == ("theta3",) and res.n_failed_probes == 0
        (level,) = res.probes
        pts = np.asarray(level.theta)[np.asarray(res.probes_active[0])]
        step = np.abs(pts - theta)[:, 1:] / np.abs(theta[1:])  # theta1 = 0: absolute step
        assert 0 < step.max() <= 0.01 * 4  # at most eps per null vector, nullity <= 4
    paper = ji.lserc(other, theta, method=ji.LSERC(twin=0.0, relative=False))
    pts = np.asarray(paper.probes[0].theta)[np.asarray(paper.probes_active[0])]
    assert np.max(np.abs(pts[:, 1] - theta[1])) > 0.01 * 4 * abs(theta[1])
    if paper.n_failed_probes:
        assert "failed, left out" in repr(paper)


@pytest.mark.optimized
def test_ivgtt_singularity_probing_in_seconds():
    """IVGTT with output I (Example 4): the seven non-identifiable parameters at the
    nominal point, each confirmed at all 104 singularity probes when the probing steps
    are relative (absolute steps move p4 = 4.92e-6 2,000-fold; those solves took minutes
    and confirmed nothing)."""
    m = ji.models.load("ivgtt")
    res = ji.lserc(m)
    expected = ("p1", "p2", "p3", "p4", "p9", "p11", "p12")
    assert res.non_identifiable == expected and res.confirmed == expected
    assert int(np.sum(np.asarray(res.probes_active[0]))) == 104
    (level,) = res.probes
    assert np.all(np.asarray(level.ok))


def test_reduction_counts_the_confirmed_set_per_sample():
    """`reduce_parameters(confirmed=True)` counts at a sample what `lserc` confirms
    there (the same rule, compiled inside the sweep): Example 1 at theta* confirms
    theta3 alone; without `confirmed` the whole non-identifiable set counts."""
    m = ji.models.load("nonsmooth_dae_example")
    method = ji.LSERC(twin=0.0)
    assert ji.lserc(m, m.THETA_STAR, method=method).confirmed == ("theta3",)
    samples = np.asarray(m.THETA_STAR)[None]
    kw = dict(method=method, fix_at="nominal", progress=False)
    red = ji.reduce_parameters(m, samples, confirmed=True, **kw)
    assert red.counts.tolist() == [0, 0, 1, 0]
    red = ji.reduce_parameters(m, samples, **kw)
    assert red.counts.tolist() == [1, 1, 1, 0]


def test_a_problem_of_one_experiment_is_analysed_as_its_model():
    """`lserc` and `reduce_parameters` take a `ji.Problem` of one experiment: the model
    alone as a problem gives the model's answer exactly; a condition that fixes a
    parameter gives `ji.fix_parameters`'s; what a single-model analysis cannot take
    (several experiments, log scales) is refused by name."""
    m = ji.models.load("nonsmooth_dae_example")
    method = ji.LSERC(twin=0.0)
    ref = ji.lserc(m, m.THETA_STAR, method=method)
    problem = ji.Problem.from_model(m)
    assert problem.as_model("x").model is m  # nothing to transform
    res = ji.lserc(problem, m.THETA_STAR, method=method)
    assert (res.non_identifiable, res.confirmed) == (ref.non_identifiable, ref.confirmed)
    np.testing.assert_array_equal(np.asarray(res.reference.rank), np.asarray(ref.reference.rank))
    samples = np.asarray(m.THETA_STAR)[None]
    kw = dict(method=method, fix_at="nominal", progress=False)
    red = ji.reduce_parameters(problem, samples, confirmed=True, **kw)
    assert red.counts.tolist() == [0, 0, 1, 0]
    # theta3 fixed by the experiment's condition: the problem has three parameters
    theta = np.asarray(m.THETA_STAR)
    held = ji.Problem(m, ji.Experiment(m.times, condition={"theta3": float(theta[2])}))
    fixed = ji.fix_parameters(m, {"theta3": float(theta[2])})
    view = held.as_model("x")
    assert view.model.parameters.names == ("theta1", "theta2", "theta4")
    assert view.model.fixed == {"theta3": float(theta[2])}
    a = ji.lserc(held, theta[[0, 1, 3]], method=ji.LSERC(twin=0.0, singular=0.0))
    b = ji.lserc(fixed, theta[[0, 1, 3]], method=ji.LSERC(twin=0.0, singular=0.0))
    assert a.non_identifiable == b.non_identifiable
    np.testing.assert_array_equal(np.asarray(a.reference.rank), np.asarray(b.reference.rank))
    with pytest.raises(TypeError, match="holds its times"):
        ji.lserc(problem, times=m.times)


def test_any_problem_is_analysed_through_its_outputs():
    """`x' = -(k1 + k2) x`, `y = x / V`: measured once, the outputs' Jacobian has the
    closed-form null vector `(1, -1, 0)`, so `k1` is non-identifiable with `k2` (rank
    2); with a second experiment where `k2` is blocked all three are identifiable. On
    log10 scales (a problem the single-model path refuses) the same decisions and
    singular values as on linear ones (analysed as the model). Reduction fixes `k1` on
    its log10 scale, and the reduced problem predicts what the full one does there."""
    lin = two_rate_problem(both=False)
    scales = {n: "log10" for n in ("k1", "k2", "V")}
    logs = two_rate_problem(scales, both=False)
    assert lin.is_one_model and not logs.is_one_model
    method = ji.LSERC(twin=0.0)
    a, b = ji.lserc(lin, method=method), ji.lserc(logs, method=method)
    assert a.non_identifiable == b.non_identifiable == ("k1",)
    assert a.pairwise == b.pairwise == {"k1": ("k2",)}
    assert a.confirmed == b.confirmed == ("k1",)
    assert np.asarray(b.reference.rank).tolist() == [2] * 6
    np.testing.assert_allclose(
        np.asarray(b.reference.singular_values), np.asarray(a.reference.singular_values),
        rtol=1e-10, atol=1e-12 * float(np.max(a.reference.singular_values)),
    )  # fmt: skip
    # the closed form's Jacobian in (k1, k2, V) at the nominal values
    t = np.linspace(0.5, 6.0, 12)
    y = np.exp(-0.7 * t)
    J = np.stack([-t * y, -t * y, -y], axis=1)
    v = np.linalg.svd(J)[2][-1]
    np.testing.assert_allclose(np.abs(v), [2**-0.5, 2**-0.5, 0.0], atol=1e-12)
    both = ji.lserc(two_rate_problem(scales), method=method)
    assert both.non_identifiable == () and both.identifiable_at_theta
    red = ji.reduce_parameters(logs, key=jax.random.key(0), n=6, method=method, progress=False)
    assert red.non_identifiable == ("k1",) and red.reduced_model is None
    assert red.counts.tolist() == [6, 0, 0]
    fixed = red.fixed["k1"]  # the samples' mean, on the log10 scale
    np.testing.assert_allclose(fixed, np.mean(red.samples[:, 0]), rtol=1e-12)
    assert -2.0 <= fixed <= np.log10(2.0)
    assert f"k1 = {fixed:.6g} (log10)" in repr(red)
    reduced = red.reduced_problem
    assert reduced.parameters.names == ("k2", "V")
    theta = jnp.asarray([np.log10(0.25), 0.1])
    full = ji.predict(logs, jnp.asarray([fixed, *theta]))
    np.testing.assert_allclose(ji.predict(reduced, theta).outputs, full.outputs, rtol=1e-12)
    with pytest.raises(TypeError, match="holds its times"):
        ji.lserc(logs, times=t)


def test_a_problem_that_estimates_noise_is_refused():
    """The noise parameters enter no output: L-SERC would call them non-identifiable."""
    noisy = ji.petab.load(ji.data.petab_problem("boehm"), estimate_noise=True)
    with pytest.raises(ValueError, match="estimates noise parameters"):
        ji.lserc(noisy)
    with pytest.raises(ValueError, match="estimates noise parameters"):
        ji.reduce_parameters(noisy, noisy.parameters.nominal[None])
