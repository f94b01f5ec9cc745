"""Bad or edge inputs get a clear error or a correct result (issue 16)."""

import json
import os
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxident as ji


@pytest.fixture(scope="module")
def S():
    return np.random.default_rng(0).standard_normal((20, 4))


def test_rank_rule_arguments_are_validated():
    for bad in (-1.0, float("nan"), 1.5):
        with pytest.raises(ValueError, match="RelativeTolerance"):
            ji.RelativeTolerance(bad)


def test_a_sensitivity_method_is_an_object_with_its_behaviour():
    # a string does not select a method: the method object says how it solves
    with pytest.raises(TypeError, match="SensitivityEquations|AbstractSensitivityMethod"):
        ji.Integrator(sensitivity="forward")
    assert ji.Integrator().sensitivity is None  # the sensitivity equations
    assert ji.SensitivityEquations().steering() == ji.SensitivityEquations(error_control=False)
    assert ji.DifferentiateSolver().steering() == ji.DifferentiateSolver()


def test_a_sensitivity_method_carries_its_solve():
    """The integrator calls its method's `forward`, whatever the method: a method of
    one's own (here: the solve differentiated, its columns counted) is used as given,
    and the two built-in ones agree to their accuracy."""
    calls = []

    class Counted(ji.AbstractSensitivityMethod):
        def forward(self, model, theta, times, integrator, M, observed=None):
            calls.append(M.shape[1])
            return ji.DifferentiateSolver().forward(model, theta, times, integrator, M, observed)

    model = ji.models.load("sir")
    S = {}
    for name, method in [("eq", None), ("diff", ji.DifferentiateSolver()), ("own", Counted())]:
        S[name] = np.asarray(
            ji.sensitivity_matrix(model, integrator=ji.Integrator(sensitivity=method))
        )
    assert calls and calls[0] == model.parameters.p
    np.testing.assert_array_equal(S["own"], S["diff"])
    np.testing.assert_allclose(S["eq"], S["diff"], rtol=1e-5, atol=1e-6 * np.abs(S["eq"]).max())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rtol": float("inf")}, r"rtol must lie in \(0, 1\)"),
        ({"rtol": 2.0}, r"rtol must lie in \(0, 1\)"),
        ({"rtol": 0.0}, r"rtol must lie in \(0, 1\)"),
        ({"atol": float("inf")}, "atol must be finite"),
        ({"atol": float("nan")}, "atol must be finite"),
        ({"dt0": -0.1}, "dt0 .* must be positive"),
        ({"dt0": 0.0}, "dt0 .* must be positive"),
    ],
)
def test_integrator_settings_are_checked_where_they_are_made(kwargs, message):
    # before, rtol=inf, 2.0 and atol=inf were accepted; dt0=-0.1 was blamed on the
    # model's equations at the first solve, dt0=0 on max_steps
    with pytest.raises(ValueError, match=message):
        ji.Integrator(**kwargs)


def test_select_parameters_edge_inputs(S):
    with pytest.raises(ValueError, match="no rows"):
        ji.select_parameters(np.zeros((0, 3)))
    with pytest.raises(ValueError, match=r"k must lie in \[0, p\]"):
        ji.select_parameters(S, k=jnp.asarray(7))
    # a traced k is clipped, as documented
    k = jax.jit(lambda kk: ji.select_parameters(S, k=kk).k)(jnp.asarray(7))
    assert int(k) == 4


@pytest.mark.parametrize("factor", [1e-310, 1e300])
def test_select_parameters_extreme_scales(S, factor):
    """Subnormal and huge inputs: the same k and metrics as at scale 1, singular values
    scaled exactly (the compiled kernels would flush subnormals to zero or overflow)."""
    ref = ji.select_parameters(S)
    sel = ji.select_parameters(S * factor)
    assert int(sel.k) == int(ref.k) == 4
    assert float(sel.tau) == pytest.approx(float(ref.tau), rel=1e-10)
    np.testing.assert_allclose(
        np.asarray(sel.singular_values) / factor, ref.singular_values, rtol=1e-10
    )


def test_parameters_default_box_at_zero_and_rel():
    with pytest.raises(ValueError, match="Nominal value 0 for \\['a'\\].*Give lower and upper"):
        ji.Parameters(["a", "b"], [0.0, 1.0])
    with pytest.raises(ValueError, match="rel must be a positive number"):
        ji.Parameters(["a"], [1.0], rel=-0.5)
    p = ji.Parameters(["a", "b"], [0.0, 1.0], [-1.0, 0.5], [1.0, 1.5])
    with pytest.raises(ValueError, match="outside their bounds"):
        p.replace(nominal=[5.0, 1.0])
    # infinite bounds mean unbounded; a Latin hypercube refuses them
    q = ji.Parameters(["a"], [1.0], [-np.inf], [np.inf])
    with pytest.raises(ValueError, match="finite"):
        ji.latin_hypercube(jax.random.key(0), q, 4)


def test_relative_scale_at_a_zero_parameter():
    model = ji.models.load("svir")
    theta = model.parameters.nominal.at[1].set(0.0)
    with pytest.raises(ValueError, match=r"scale='relative'.*\['alpha'\] are 0"):
        ji.sensitivity(model, theta, scale="relative")


def test_estimate_and_fix_parameters_respect_bounds():
    model = ji.models.load("svir")
    data = ji.simulate(model).ys
    low = model.parameters.lower
    with pytest.raises(ValueError, match=r"theta0 lies outside the bounds for \['beta'\]"):
        ji.estimate(model, data, theta0=model.parameters.nominal.at[0].set(low[0] / 2), bounds=True)
    with pytest.raises(ValueError, match="outside its bounds"):
        ji.fix_parameters(model, {"nu": 1.0})


# -- sweep result files ---------------------------------------------------------------


def _double(x):
    return {"y": x * 2.0, "z": jnp.stack([x, -x], axis=-1)}


def _sweep(xs, out, fn=_double, **kw):
    return ji.sweep(fn, xs, batch_size=4, progress=False, out_dir=out, **kw)


def test_sweep_refuses_another_sweeps_directory(tmp_path):
    xs = jnp.linspace(0.0, 1.0, 10)
    _sweep(xs, tmp_path)
    with pytest.raises(ValueError, match="different sweep.*samples_sha256"):
        _sweep(xs + 1.0, tmp_path)
    with pytest.raises(ValueError, match="different sweep.*program_sha256"):
        _sweep(xs, tmp_path, fn=lambda x: {"y": x * 3.0, "z": jnp.stack([x, x], axis=-1)})
    # closed-over constants are part of the program
    c = jnp.asarray(2.5)
    with pytest.raises(ValueError, match="different sweep.*program_sha256"):
        _sweep(xs, tmp_path, fn=lambda x: {"y": x * c, "z": jnp.stack([x, -x], axis=-1)})
    # the same sweep resumes (nothing left to do) and returns the right values
    res = _sweep(xs, tmp_path)
    np.testing.assert_allclose(res.values["y"], 2 * np.asarray(xs))


@pytest.mark.parametrize("damage", ["truncate", "shape", "dtype", "flip"])
def test_sweep_recomputes_damaged_result_files(tmp_path, damage):
    xs = jnp.linspace(0.0, 1.0, 10)
    _sweep(xs, tmp_path)
    files = sorted(tmp_path.glob("leaf*.npy"))
    assert len(files) == 2
    target = files[0]
    if damage == "truncate":
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2])
    elif damage == "shape":
        np.save(target, np.zeros((7,)))
    elif damage == "dtype":
        np.save(target, np.zeros((10,), np.float32))
    else:
        a = np.load(target, mmap_mode="r+")
        a[5] = 0.0
        a.flush()
    match = "checksum" if damage == "flip" else "Damaged result file"
    with pytest.warns(UserWarning, match=match):
        res = _sweep(xs, tmp_path)
    np.testing.assert_array_equal(res.values["y"], 2 * np.asarray(xs))
    np.testing.assert_array_equal(res.values["z"][:, 1], -np.asarray(xs))
    assert res.ok.all()


@pytest.mark.parametrize("how", ["free space", "allocation"])
def test_a_sweep_on_a_full_disk_is_an_error_naming_the_folder(tmp_path, monkeypatch, how):
    """A sweep whose out_dir is on a full file system died of SIGBUS with nothing on
    stderr while filling its memory-mapped files, and left a sparse file behind."""
    import errno
    import shutil

    from jaxident._identify import _sweep_files

    if how == "free space":
        usage = shutil.disk_usage(tmp_path)
        monkeypatch.setattr(_sweep_files.shutil, "disk_usage",
                            lambda p: usage._replace(free=100))  # fmt: skip
    else:  # the free space reported, the blocks not there (a quota, a race)
        if not hasattr(os, "posix_fallocate"):
            pytest.skip("no posix_fallocate on this system")

        def full(fd, offset, length):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(_sweep_files.os, "posix_fallocate", full)
    out = tmp_path / "run"
    with pytest.raises(OSError, match=r"Not enough space in .*run for the sweep's results"):
        _sweep(jnp.linspace(0.0, 1.0, 10), out)
    assert not out.exists()  # nothing left behind


@pytest.mark.parametrize("content", ["", "{not json", '{"fingerprint": 1}', "[]"])
def test_sweep_refuses_a_damaged_state_file(tmp_path, content):
    xs = jnp.linspace(0.0, 1.0, 10)
    _sweep(xs, tmp_path)
    (tmp_path / "sweep_state.json").write_text(content)
    with pytest.raises(ValueError, match="damaged.*Delete it"):
        _sweep(xs, tmp_path)


def test_sweep_input_errors():
    with pytest.raises(ValueError, match="leading sample axis.*got a scalar"):
        ji.sweep(jnp.sin, 3.0, progress=False)
    with pytest.raises(ValueError, match="one boolean per sample"):
        ji.sweep(jnp.sin, jnp.ones((5, 3)), ok=lambda y: jnp.isfinite(y), progress=False)


# -- the command line -----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--rtol", "-1"], r"--rtol/--atol: RelativeTolerance"),
        (["--atol", "-1"], r"--rtol/--atol: AbsoluteTolerance needs atol >= 0"),
        (["--samples", "-5"], r"--samples must be >= 0"),
        (["--batch-size", "0"], r"--batch-size must be >= 1"),
        (["--f", "0.5"], r"--f must be >= 1"),
        (["--solver-rtol", "0"], r"--solver-rtol must lie in \(0, 1\)"),
        (["--k", "9"], r"--k must lie in \[0, 4\]"),
        (["--plot", "/nonexistent-dir/x.png"], r"--plot .* cannot be written"),
        (["--plot", "{tmp}/x.xyz"], r"unknown figure format 'xyz'"),
        (["--json", "{tmp}"], r"--json .* is a directory"),
        (["--json", "/nonexistent-dir/r.json"], r"--json .* cannot be written"),
        (["--out", "{tmp}/o"], r"--out keeps the results of --samples"),
        (["--gap", "--atol", "1e-3"], r"--atol and --gap: give one rank rule"),
        (["--rtol", "1e-3", "--atol", "1e-3"], r"--rtol and --atol: give one rank rule"),
        (["--json", "{tmp}/r.png", "--plot", "{tmp}/r.png"], r"name one file"),
        (["--samples", "4", "--out", "/proc/o"], r"--out /proc/o cannot be written"),
        # flags that used to be ignored or crash (issue 51)
        (["--json", "-"], r"--json needs a file name, got '-'"),
        (["--json", ""], r"--json needs a file name, got ''"),
        (["--plot", ""], r"--plot needs a file name"),
        (["--free-initial-states", ""], r"--free-initial-states needs state names"),
        (["--max-steps", "50"], r"--max-steps sets the steps of the fits of --fit"),
        (["--max-steps", "0"], r"--max-steps sets the steps of the fits of --fit"),
        (["--fit", "2", "--max-steps", "0"], r"--max-steps must be >= 1"),
        (["--hierarchical"], r"--hierarchical sets how the fits of --fit step"),
        (["--seed", str(2**70)], r"--seed must lie in \[0, 2\*\*63\)"),
        (["--samples", str(10**14)], r"--samples 100000000000000: .* memory"),
        (["--fit", str(10**14)], r"--fit 100000000000000: .* memory"),
        # outputs that claimed more than they kept (issue 81)
        (["--samples", "4", "--out", ""], r"--out needs a folder name, got ''"),
        (["--samples", "4", "--out", "{tmp}/r.json", "--json", "{tmp}/r.json"], r"name one file"),
        (["--samples", "4", "--out", "{tmp}/f.txt"], r"--out .*f.txt is a file; give a folder"),
    ],
)
def test_cli_validates_every_argument_before_computing(argv, match, tmp_path, capsys, monkeypatch):
    from jaxident import cli

    def computed(*args, **kwargs):
        raise AssertionError("computed before validating")

    monkeypatch.setattr(ji, "sensitivity", computed)
    argv = [a.format(tmp=tmp_path) for a in argv]
    (tmp_path / "f.txt").write_text("a file")
    assert cli.main(["analyze", "svir", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("jaxident: error: ") and re.search(match, err), err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--out", "{tmp}/k.json", "--json", "{tmp}/k.json"], r"--json and --out name one file"),
        (["--out", ""], r"--out needs a file name"),
        (["--out", "{tmp}/ro/k.json"], r"--out .*k.json cannot be written"),
    ],
)
def test_cli_fit_checks_its_outputs_before_any_fit(argv, match, tmp_path, capsys, monkeypatch):
    """`fit --out same.json --json same.json` was accepted (the report overwrote the kept
    fits); `--out` in a read-only folder was a traceback after the first fit."""
    from jaxident import cli

    def computed(*args, **kwargs):
        raise AssertionError("fitted before checking the outputs")

    monkeypatch.setattr(ji, "estimate", computed)
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    argv = [a.format(tmp=tmp_path) for a in argv]
    try:
        if os.access(tmp_path / "ro", os.W_OK) and "ro/" in " ".join(argv):
            pytest.skip("running as root: a read-only folder is writable")
        assert cli.main(["fit", "boehm", "--starts", "2", *argv]) == 2
    finally:
        (tmp_path / "ro").chmod(0o700)
    err = capsys.readouterr().err
    assert err.startswith("jaxident: error: ") and re.search(match, err), err


def test_cli_refuses_a_models_flag_for_a_petab_problem(capsys):
    """`--scale relative` was ignored for a PEtab problem (issue 51)."""
    from jaxident import cli

    path = str(ji.data.petab_problem("boehm"))
    assert cli.main(["analyze", path, "--scale", "relative"]) == 2
    assert "--scale is for models" in capsys.readouterr().err


class _InterruptingBar:
    """A progress bar interrupted (Ctrl-C) at its second update: after two chunks of a
    sweep, two fits of a multi-start."""

    def __init__(self, *args, **kwargs):
        self.updates = 0

    def update(self, m):
        self.updates += 1
        if self.updates == 2:
            raise KeyboardInterrupt

    def set_postfix(self, **kwargs):
        pass

    def close(self):
        pass


def test_cli_ctrl_c_keeps_finished_samples_and_resumes(tmp_path, capsys, monkeypatch):
    from jaxident import cli
    from jaxident._identify import _sweep

    monkeypatch.setattr(_sweep, "_progress_bar", _InterruptingBar)
    out, js = tmp_path / "run", tmp_path / "report.json"
    argv = ["analyze", "svir", "--k", "3", "--samples", "24", "--batch-size", "8"]
    argv += ["--out", str(out), "--json", str(js)]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "run the same command again" in err
    state = json.loads((out / "sweep_state.json").read_text())
    assert sorted(state["chunks"]) == ["0", "8"]
    assert not js.exists()

    monkeypatch.setattr(_sweep, "_progress_bar", lambda *a, **k: None)
    assert cli.main(argv) == 0
    report = json.loads(js.read_text())
    assert report["samples"]["rank_counts"] == {"3": 24}
    assert report["samples"]["frequency"]["alpha"] == 0.0
    # without --out, Ctrl-C still exits with one line and status 130
    monkeypatch.setattr(_sweep, "_progress_bar", _InterruptingBar)
    assert cli.main(argv[:8]) == 130
    assert capsys.readouterr().err.strip() == "jaxident: interrupted."


# -- user models ----------------------------------------------------------------------


class _Decay(ji.ODEModel):
    """Three decaying states; subclasses below break one method each."""

    parameters: ji.Parameters = ji.Parameters(["k", "x0"], [0.5, 2.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 4.0, 8))
    t0: float = 0.0

    def vector_field(self, t, x, theta):
        return -theta.k * x

    def initial_state(self, theta):
        return jnp.stack([theta.x0, 1.0, 0.5])

    def output(self, t, x, theta):
        return x[0] + x[1]


class _ListState(_Decay):
    def initial_state(self, theta):
        return [theta.x0, 1.0, 0.5]


class _ScalarState(_Decay):
    def initial_state(self, theta):
        return theta.x0


class _IntState(_Decay):
    def initial_state(self, theta):
        return jnp.array([2, 1, 0])


class _WrongField(_Decay):
    def vector_field(self, t, x, theta):
        return -theta.k * x[:2]


class _MatrixOutput(_Decay):
    def output(self, t, x, theta):
        return jnp.outer(x[:2], x[:2])


class _OutOfRange(_Decay):
    def output(self, t, x, theta):
        return x[5]


class _PythonIf(_Decay):
    def vector_field(self, t, x, theta):
        if x[0] > 1.0:
            return -theta.k * x
        return theta.k * x


class _NaNField(_Decay):
    def vector_field(self, t, x, theta):
        return -theta.k * x * jnp.log(1.5 - t)  # log of a negative number after t = 1.5


@pytest.mark.parametrize(
    "model, error, match",
    [
        (_ListState(), TypeError, r"initial_state returned a list of 3 numbers.*jnp.stack"),
        (_ScalarState(), ValueError, r"initial_state returned a scalar.*jnp.atleast_1d"),
        (_IntState(), TypeError, r"state must be floating point"),
        (
            _WrongField(),
            ValueError,
            r"vector_field returned an array of shape \(2,\).*initial state is an array of "
            r"shape \(3,\)",
        ),
        (_MatrixOutput(), ValueError, r"output must be a scalar or a 1-D vector.*\(2, 2\)"),
        (_OutOfRange(), IndexError, r"index 5 is out of bounds.*clamps"),
        (_PythonIf(), TypeError, r"Python control flow.*jnp.where.*ji.nmax"),
    ],
)
def test_user_model_mistakes_are_named(model, error, match):
    for call in (ji.simulate, ji.sensitivity):
        with pytest.raises(error, match=match):
            call(model)
    # checked under a caller's trace too; there, after the calls above, the check's trace
    # is JAX's cached one and the index's value is not known
    traced = jax.jit(lambda th: ji.sensitivity_matrix(model, th))
    if isinstance(model, _OutOfRange):
        match = r"indexes an array out of bounds: .* array of shape \(3,\)\. JAX clamps"
    with pytest.raises(error, match=match):
        traced(model.parameters.nominal)


def test_nan_in_the_vector_field_says_so_with_the_time():
    ok = ji.simulate(_Decay())
    assert bool(ok.ok)
    msg = r"right-hand side returned NaN or inf.*stopped at t = 1\.5 \(of 4\)"
    with pytest.raises(ji.SolveFailed, match=msg) as info:
        ji.simulate(_NaNField())
    assert "EQX_ON_ERROR" not in str(info.value)  # no page of generic advice
    # it stops early instead of running into the step cap
    traj = ji.simulate(_NaNField(), throw=False)
    assert not bool(traj.ok) and int(traj.num_steps) < 1000


class _BlowUp(_Decay):
    """`x' = k x^2` from `x0 = 2`: infinite at `t = 1 / (k x0) = 1`."""

    def vector_field(self, t, x, theta):
        return theta.k * x**2


class _Drift(_Decay):
    """`x' = k`: no steady state, though `f` becomes small against `rtol |x|`."""

    def vector_field(self, t, x, theta):
        return theta.k * jnp.ones_like(x)


def test_a_failed_solve_of_a_problem_says_why_and_where():
    """`predict` and `sensitivity` of a problem name the experiment, the solver's reason
    (a blow-up, a pre-equilibration that blows up or drifts without end) and where it
    stopped, instead
    of advising a stiff solver; times before t0 are refused up front."""
    t = np.linspace(0.5, 4.0, 8)
    problem = ji.Problem(
        _BlowUp(), [ji.Experiment(t[:2], name="early"), ji.Experiment(t, name="late")]
    )
    msg = r"experiment 'late' failed: .*blows up in finite time.*stopped at t = 1\.0"
    for fn in (ji.predict, ji.sensitivity):
        with pytest.raises(RuntimeError, match=msg):
            fn(problem)
    pre = ji.Problem(_BlowUp(), ji.Experiment(t, preequilibration={"k": 0.3}, name="pre"))
    with pytest.raises(RuntimeError, match="'pre' failed: its pre-equilibration reached no steady"):
        ji.predict(pre)
    drift = ji.Problem(_Drift(), ji.Experiment(t, preequilibration={"k": 0.3}, name="pre"))
    with pytest.raises(RuntimeError, match="'pre' failed: its pre-equilibration reached no steady"):
        ji.predict(drift)
    with pytest.raises(
        ValueError, match=r"'e' measures at t = -1, before the model starts \(t0 = 0\)"
    ):
        ji.Problem(_Decay(), ji.Experiment([-1.0, 1.0], name="e"))


class _Repel(_Decay):
    """`x' = k x` from `x0`: with `k > 0` its one fixed point, 0, repels."""

    def vector_field(self, t, x, theta):
        return theta.k * x


@pytest.mark.parametrize("k", [1e-9, pytest.param(0.3, marks=pytest.mark.slow)])
def test_a_repelling_fixed_point_is_no_steady_state(k):
    """`x' = k x`, `x(0) = 2`, `k > 0`: pre-equilibration and a measurement at t = inf
    returned x = 0 without a word where `k < rtol` (issue 51): the steady-state event
    fired at t0 since |f| < rtol |x|, and the Newton polish jumped to the repelling
    point. With a larger k the solve runs off towards inf and stops there (1e153), and
    the polish jumped too. Both are refused; with k < 0 the same problems give 0, the
    attractor."""
    t = np.linspace(0.5, 4.0, 8)
    pre = ji.Problem(_Repel(), ji.Experiment(t, preequilibration={"k": k}, name="pre"))
    at_inf = ji.Problem(_Repel(), ji.Experiment([np.inf], name="inf"))
    why = "a fixed point that repels: f_x there has an eigenvalue with positive real part"
    with pytest.raises(RuntimeError, match=f"'pre' failed: its pre-equilibration .*{why}"):
        ji.predict(pre)
    with pytest.raises(RuntimeError, match=f"'inf' failed: the model reaches no steady .*{why}"):
        ji.predict(at_inf, np.array([k, 2.0]))
    decays = ji.predict(at_inf, np.array([-k, 2.0]))  # x0 + 1 + 0.5 decays to 0
    np.testing.assert_allclose(np.asarray(decays.outputs).ravel(), 0.0, atol=1e-8)
    # at the attractor the output's derivatives are those of the implicit function theorem
    S = ji.sensitivity(at_inf, np.array([-k, 2.0])).matrix  # dx/dk = -x/k: rounding / k
    np.testing.assert_allclose(np.asarray(S), 0.0, atol=1e-6)


def test_attracts_against_numpy_eigenvalues():
    """The stability test against NumPy's eigenvalues in float64, under jit and vmap:
    conservation laws' zero eigenvalues attract, a positive real part of 1e-6 ||J||
    does not, nor does a NaN."""
    from jaxident._solve._steady_state import attracts

    rng = np.random.default_rng(3)
    mats = []
    for shift in (-1.0, -1e-3, 1e-6, 0.5):
        Q = np.linalg.qr(rng.standard_normal((5, 5)))[0]
        mats.append(Q @ np.diag([shift, -2.0, -3.0, -4.0, -5.0]) @ Q.T)
    rot = np.array([[-1e-3, 2.0], [-2.0, -1e-3]])  # a stable focus
    conserved = np.array([[-1.0, 1.0], [1.0, -1.0]])  # x1 + x2 conserved: eigenvalues 0, -2
    mats = np.stack(mats)
    want = [np.linalg.eigvals(M).real.max() <= 1e-8 * np.linalg.norm(M, 2) for M in mats]
    assert want == [True, True, False, False]
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(attracts))(mats)), want)
    assert bool(attracts(rot)) and bool(attracts(conserved)) and not bool(attracts(-rot))
    assert not bool(attracts(np.full((2, 2), np.nan)))


def test_nan_matrix_error_names_the_entries():
    S = np.random.default_rng(1).standard_normal((6, 3))
    S[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"NaN or inf at \(2, 1\)") as info:
        ji.select_parameters(S)
    assert "EQX_ON_ERROR" not in str(info.value)
    assert not bool(ji.select_parameters(S, throw=False).ok)


# -- other arguments ------------------------------------------------------------------


def test_latin_hypercube_arguments():
    bounds = ji.models.load("svir").parameters
    with pytest.raises(ValueError, match="n must be a positive integer, got True"):
        ji.latin_hypercube(jax.random.key(0), bounds, True)
    # under the test suite's runtime type checker, its message names `key` first
    with pytest.raises(TypeError, match=r"jax.random.key\(seed\)|parameter 'key'"):
        ji.latin_hypercube(0, bounds, 4)


def test_estimate_sigma_shapes():
    model = ji.models.load("svir")
    data = ji.simulate(model).ys
    n = data.shape[0]
    with pytest.raises(ValueError, match=r"sigma has shape \(3,\); give a scalar"):
        ji.estimate(model, data, sigma=jnp.ones(3))
    with pytest.raises(ValueError, match="positive and finite"):
        ji.estimate(model, data, sigma=jnp.zeros(n))
    # one per output, one per observation (2-D or flat) and a scalar agree
    a = ji.estimate(model, data, sigma=2.0).theta
    for s in (jnp.full((1,), 2.0), jnp.full((n, 1), 2.0), jnp.full((n,), 2.0)):
        np.testing.assert_allclose(ji.estimate(model, data, sigma=s).theta, a, rtol=1e-12)


def test_set_by_set_rejects_zero_sigma():
    model = ji.models.load("svir")
    data = np.asarray(ji.simulate(model).ys).copy()
    data[0] = 0.0
    with pytest.raises(ValueError, match=r"sigma = 0 for 1 datum.*t = 0.*absolute part"):
        ji.set_by_set(model, data, error=ji.MeasurementError(0.01, 0.0))


def test_fix_parameters_and_pivot_candidates_arguments():
    model = ji.models.load("svir")
    with pytest.raises(
        TypeError, match=r"values must be a dict \{name: value\}.*got a list|parameter 'values'"
    ):
        ji.fix_parameters(model, ["nu", 0.1])
    with pytest.raises(ValueError, match=r"Unknown pivot_candidates \['zz'\]"):
        ji.estimability(ji.sensitivity(model), nullity=1, pivot_candidates=["zz"])


class _WrongAlgebraic(ji.models.NonsmoothDAEExample):
    def algebraic(self, t, x, w, theta):
        return jnp.stack([x[0] - w[0], w[0]])


def test_dae_shape_mistakes_are_named():
    with pytest.raises(ValueError, match=r"algebraic returned an array of shape \(2,\)"):
        ji.sensitivity(_WrongAlgebraic())


def test_non_finite_times():
    model = ji.models.load("svir")
    with pytest.raises(ValueError, match="times contains NaN or inf"):
        ji.simulate(model, times=jnp.array([1.0, 2.0, jnp.inf]))


def test_sweep_state_file_is_replaced_atomically(tmp_path, monkeypatch):
    """A crash while the state file is rewritten leaves the previous state intact."""
    import os

    xs = jnp.linspace(0.0, 1.0, 10)
    _sweep(xs, tmp_path)
    state = tmp_path / "sweep_state.json"
    before = state.read_text()
    leaf = np.load(tmp_path / "leaf0.npy", mmap_mode="r+")
    leaf[5] = 0.0  # a damaged chunk, recomputed on the next run
    leaf.flush()

    def crash(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.warns(UserWarning, match="checksum"), pytest.raises(KeyboardInterrupt):
        _sweep(xs, tmp_path)
    monkeypatch.undo()
    assert state.read_text() == before
    res = _sweep(xs, tmp_path)
    np.testing.assert_array_equal(res.values["y"], 2 * np.asarray(xs))
    assert json.loads(state.read_text()) == json.loads(before)


_TWO_WRITERS = """
import sys, jax.numpy as jnp, numpy as np, jaxident as ji
xs = jnp.linspace(0.0, 1.0, 400)
fn = lambda x: {"y": jnp.sin(x) * 2.0, "z": jnp.stack([x, -x], axis=-1)}
res = ji.sweep(fn, xs, batch_size=8, progress=False, out_dir=sys.argv[1])
np.save(sys.argv[2], np.asarray(res.values["y"]))
"""


def test_two_processes_on_one_sweep_directory(tmp_path):
    """Two processes sweep into one `out_dir` at once: one writes while the other waits
    on the directory's lock (no shared temporary file), then reuses the finished
    chunks; both end with the same bits as one process alone."""
    import subprocess
    import sys

    def start(out, name):
        return subprocess.Popen(
            [sys.executable, "-c", _TWO_WRITERS, str(out), str(tmp_path / name)],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    procs = [start(tmp_path / "shared", f"{i}.npy") for i in range(2)]
    errs = [p.communicate()[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    alone = start(tmp_path / "alone", "alone.npy")
    assert alone.wait() == 0
    ref = np.load(tmp_path / "alone.npy")
    for i in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"{i}.npy"), ref)
    assert not list((tmp_path / "shared").glob("*.tmp"))


def test_complex_theta_and_boolean_threshold_are_refused():
    """A complex theta lost its imaginary part silently, and `threshold=True` was taken
    as one decade."""
    model = ji.models.load("svir")
    theta = model.parameters.nominal.astype(complex) * (1 + 1e-3j)
    with pytest.raises(TypeError, match="complex128: parameters are real"):
        ji.sensitivity(model, theta)
    with pytest.raises(ValueError, match="threshold must be a positive number"):
        ji.analyze(model, threshold=True, progress=False)


def test_a_sigma_whose_square_underflows_is_refused(tmp_path):
    """A fixed sigma of 1e-300 gave a NaN log-likelihood without a word (issue 51):
    refused where the experiment is built, by hand or from a PEtab measurement table."""
    from helpers import write_petab

    times = np.linspace(0.5, 4.0, 8)
    with pytest.raises(ValueError, match="underflows to 0"):
        ji.Experiment(times, np.ones(8), 1e-300)
    ji.Experiment(times, np.ones(8), 1e-150)  # the smallest that squares to a number
    with pytest.raises(ValueError, match="underflows to 0"):
        ji.petab.load(write_petab(tmp_path, noise="1e-300"))


@pytest.mark.parametrize("command", ["fit", "analyze"])
def test_cli_ctrl_c_during_fits_is_a_partial_run_on_screen_and_in_the_file(
    command, tmp_path, capsys, monkeypatch
):
    """Ctrl-C during the fits of `fit --starts N` exited 0 and wrote the report as a
    finished run of the starts done; `analyze --fit N` carried on with them and said
    "reached by k of N". Now: exit 130, the screen and the JSON say how many of how many,
    and the API's result carries the flag."""
    import warnings

    from jaxident import cli
    from jaxident._fit import _multistart

    monkeypatch.setattr(_multistart, "tqdm", _InterruptingBar)
    js = tmp_path / "r.json"
    flag = "--starts" if command == "fit" else "--fit"
    argv = [command, "perelson", flag, "6", "--json", str(js), "--quiet"]
    if command == "analyze":
        argv += ["--profile", "none"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(argv) == 130
    out, err = capsys.readouterr()
    assert "INTERRUPTED after 2 of 6 starts" in out
    assert "interrupted after 2 of 6 starts" in err
    report = json.loads(js.read_text())
    fits = report["fits"] if command == "fit" else report["fit"]["fits"]
    assert fits["interrupted"] is True and fits["planned"] == 6 and fits["starts"] == 2
    if command == "analyze":  # no report at a best fit of a run that did not finish
        assert report["at"] is None and "rank" not in report
    problem = ji.petab.load(ji.data.petab_problem("perelson"), estimate_noise=True)
    with pytest.warns(UserWarning, match="interrupted after 2 of 6"):
        est = ji.estimate(problem, starts=6, progress=False)
    assert est.interrupted and est.fits.planned == 6 and len(est.fits.nll) == 2


def test_unclear_inputs_get_clear_errors(tmp_path, capsys):
    """Three cases that got another layer's message: a sigma of the wrong shape got
    NumPy's broadcast error, a path ending in a space was an "Unknown model", an
    `out_dir` that is a file got "File exists"."""
    from jaxident import cli

    model = ji.models.load("svir")
    times = np.asarray(model.times)
    with pytest.raises(ValueError, match=r"sigma has shape \(3,\); give a scalar, one per output"):
        ji.Problem(model, ji.Experiment(times, sigma=np.ones(3)))
    path = str(ji.data.petab_problem("boehm"))
    assert cli.main(["analyze", path + " "]) == 2
    err = capsys.readouterr().err
    assert "ends with a space: did you mean" in err and "Unknown model" not in err
    (tmp_path / "f").write_text("a file")
    with pytest.raises(ValueError, match="out_dir .* is a file; give a folder"):
        ji.sweep(lambda x: 2 * x, jnp.ones(4), progress=False, out_dir=tmp_path / "f")


class _Line(ji.ODEModel):
    """`x' = -b`, `x(0) = a`: negative after `t = a / b`."""

    parameters: ji.Parameters = ji.Parameters(["a", "b"], [1.0, 0.5])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 3.0, 6))
    t0: float = 0.0

    def vector_field(self, t, x, th):
        return -th.b * jnp.ones_like(x)

    def initial_state(self, th):
        return jnp.ones(1) * th.a

    def output(self, t, x, th):
        return x


def test_a_log_of_a_negative_output_is_an_error_naming_it():
    """On a log10 observable, a model output at or below 0 gave a NaN log-likelihood
    without a word."""
    model = _Line()
    t = np.asarray(model.times)
    problem = ji.Problem(model, ji.Experiment(t, np.full((6, 1), 0.5), 0.1), transforms=["log10"])
    with pytest.raises(ValueError, match=r"'y0'|compared on a log10 scale.*t = 2.5"):
        ji.predict(problem)
    out = ji.predict(problem, throw=False)  # (a fit's probe: NaN, no error)
    assert not np.isfinite(float(out.log_likelihood))


def test_solver_failure_advice_fits_the_solver_and_the_precision():
    """The advice "use a stiff solver" was given to a stiff solver's failure, and to
    float32 Robertson under ji.BDF, whose rtol float32 cannot meet."""
    import diffrax

    from jaxident._solve._simulate import _advice

    assert "stiff solver" in _advice(diffrax.Tsit5())
    for stiff in (ji.Rodas4(), ji.BDF(), diffrax.Kvaerno5()):
        assert "stiff solver" not in _advice(stiff)
    try:
        jax.config.update("jax_enable_x64", False)
        text = _advice(ji.BDF())
    finally:
        jax.config.update("jax_enable_x64", True)
    assert "single precision" in text and "jax_enable_x64" in text
    # a failing non-stiff solve says it, end to end
    model = ji.models.load("svir")
    with pytest.raises(Exception, match="use a stiff solver"):
        ji.simulate(model, integrator=ji.Integrator(max_steps=2))
    with pytest.raises(Exception, match=r"raise Integrator\(max_steps=...\)\.") as info:
        ji.simulate(model, integrator=ji.Integrator(ji.Rodas4(), max_steps=2))
    assert "stiff solver" not in str(info.value)
