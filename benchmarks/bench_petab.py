"""The Boehm PEtab problem (8 states, 6 estimated parameters on log10 scale): simulation
and forward sensitivities, one call and a batch of samples, jaxident against AMICI
(CVODES, the field's reference) and libroadrunner (CVODE; sensitivities by central
differences), all in one run on the same machine, compilation reported apart.

AMICI builds C++ for each model and is not a dependency: give the Python of an
environment where `pip install amici swig` worked (`--amici-python`); without it the
AMICI rows are left out and say why.

    python benchmarks/bench_petab.py --n 1000 --amici-python /tmp/amici-venv/bin/python

The E. coli model (18 states, 121 parameters) is measured too, against SciPy BDF with
central differences (`--ecoli N_JAX N_SCIPY` samples; `--ecoli 0 0` leaves it out).
"""

import argparse
import json
import os
import pathlib
import platform
import subprocess
import tempfile
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

import jaxident as ji
from jaxident._predict import _directions


RTOL, ATOL = 1e-8, 1e-10

AMICI_SCRIPT = r"""
import json, sys, tempfile, time
import numpy as np
import amici
import amici.sim.sundials as sim

sbml, names_file, samples_file = sys.argv[1], sys.argv[2], sys.argv[3]
estimated, times = sys.argv[4].split(","), json.loads(sys.argv[5])
names = json.load(open(names_file))
thetas = np.load(samples_file)  # (n, p_model): linear values of the model parameters
out = {}
t0 = time.perf_counter()
folder = tempfile.mkdtemp()
amici.SbmlImporter(sbml).sbml2amici("boehm", folder, verbose=False)
module = amici.import_model_module("boehm", folder)
out["compile_s"] = time.perf_counter() - t0
model = module.get_model()
model.set_timepoints(times)
ids = list(model.get_free_parameter_ids())
idx = [ids.index(n) for n in names if n in ids]
pos = [i for i, n in enumerate(names) if n in ids]
model.set_parameter_list([ids.index(n) for n in estimated])
scales = [2 if n in estimated else 0 for n in ids]  # 2: log10
model.set_parameter_scale(sim.parameter_scaling_from_int_vector(scales))
solver = model.create_solver()
solver.set_relative_tolerance(1e-8)
solver.set_absolute_tolerance(1e-10)
solver.set_max_steps(100000)
solver.set_sensitivity_method(sim.SensitivityMethod_forward)


def run(theta, sens):
    p = np.array(model.get_free_parameters())
    lin = np.asarray(theta)[pos]
    p[idx] = [np.log10(v) if ids[i] in estimated else v for i, v in zip(idx, lin)]
    model.set_free_parameters(p)
    order = sim.SensitivityOrder_first if sens else sim.SensitivityOrder_none
    solver.set_sensitivity_order(order)
    rdata = sim.run_simulation(model, solver)
    assert rdata.status == 0, rdata.status
    return rdata


for sens in (False, True):
    run(thetas[0], sens)
    reps = []
    for _ in range(20):
        t = time.perf_counter()
        run(thetas[0], sens)
        reps.append(time.perf_counter() - t)
    out["single_sens" if sens else "single_sim"] = float(np.median(reps))
t = time.perf_counter()
for th in thetas:
    run(th, True)
out["batch_sens"] = time.perf_counter() - t
r = run(thetas[0], True)
out["steps"] = int(np.asarray(r.numsteps).max())
print(json.dumps(out))
"""


def ecoli(n_jax: int, n_scipy: int) -> dict:
    """The E. coli model (18 states, 121 parameters, `ji.models.load("ecoli_chassagnole")`):
    jaxident's sensitivity matrices (`ji.Rodas4`, the model's own, and `diffrax.Kvaerno3`)
    against SciPy's BDF with central finite differences (242 solves per matrix; the
    right-hand side and its Jacobian jitted, as a SciPy user of a JAX model would), all
    at rtol 1e-7, atol 1e-10, at samples within 0.1 decades of the nominal values."""
    from scipy.integrate import solve_ivp

    model = ji.models.load("ecoli_chassagnole")
    rtol, atol = 1e-7, 1e-10
    nominal = np.asarray(model.parameters.nominal)
    rng = np.random.default_rng(1)
    samples = nominal * 10 ** rng.uniform(-0.1, 0.1, size=(max(n_jax, n_scipy), nominal.size))
    ts = np.asarray(model.times)
    out = {"ecoli_n_jax": n_jax, "ecoli_n_scipy": n_scipy}
    for name, solver in (("rodas4", ji.Rodas4()), ("kvaerno3", diffrax.Kvaerno3())):
        integ = ji.Integrator(solver, rtol=rtol, atol=atol, max_steps=20_000)

        def sens(th, integ=integ):
            return ji.sensitivity(model, th, integrator=integ).matrix

        t = time.perf_counter()
        first = ji.sweep(sens, samples[:n_jax], batch_size=n_jax, progress=False)
        out[f"ecoli_jaxident_{name}_first_s"] = time.perf_counter() - t
        again = ji.sweep(sens, samples[:n_jax], batch_size=n_jax, progress=False)
        out[f"ecoli_jaxident_{name}_per_sample_s"] = again.run_seconds / n_jax
        out[f"ecoli_jaxident_{name}_failed"] = int(again.n_failed)
        if name == "rodas4":
            S_jax = np.asarray(first.values)

    view = model.parameters.view
    rhs = jax.jit(lambda t, x, th: model.vector_field(t, x, view(th)))
    jac = jax.jit(jax.jacfwd(lambda t, x, th: model.vector_field(t, x, view(th)), argnums=1))
    out_fn = jax.jit(jax.vmap(lambda t, x, th: model.output(t, x, view(th)), (0, 0, None)))
    x0_fn = jax.jit(lambda th: model.initial_state(view(th)))

    def outputs(th):
        sol = solve_ivp(
            lambda t, x: np.asarray(rhs(t, x, th)),
            (float(model.t0), ts[-1]),
            np.asarray(x0_fn(th)),
            method="BDF",
            jac=lambda t, x: np.asarray(jac(t, x, th)),
            t_eval=ts,
            rtol=rtol,
            atol=atol,
        )
        assert sol.success, sol.message
        return np.asarray(out_fn(jnp.asarray(ts), jnp.asarray(sol.y.T), th)).reshape(-1)

    def fd(th):
        cols = []
        for j in range(th.size):
            h = 1e-4 * abs(th[j])
            up, down = th.copy(), th.copy()
            up[j] += h
            down[j] -= h
            cols.append((outputs(up) - outputs(down)) / (2 * h))
        return np.stack(cols, axis=1)

    if n_scipy == 0:  # `--ecoli N 0`: jaxident's rows only
        return out
    outputs(samples[0])  # compile the jitted pieces
    t = time.perf_counter()
    S_fd = [fd(th) for th in samples[:n_scipy]]
    out["ecoli_scipy_bdf_fd_per_sample_s"] = (time.perf_counter() - t) / n_scipy
    # how far the finite differences are from the error-controlled sensitivities
    # (columns scaled by their largest entry)
    diffs = [
        np.max(np.abs(a - b) / np.maximum(np.abs(a).max(axis=0), 1e-300))
        for a, b in zip(S_jax[:n_scipy], S_fd)
    ]
    out["ecoli_fd_vs_jaxident_max_scaled_diff"] = float(np.max(diffs))
    return out


def _median_time(fn, reps: int = 5) -> float:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--amici-python", default=None)
    ap.add_argument("--ecoli", type=int, nargs=2, default=[16, 1], metavar=("N_JAX", "N_SCIPY"))
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "petab.json"))
    args = ap.parse_args()

    problem = ji.petab.load(ji.data.petab_problem("boehm"))
    integrator = ji.Integrator(problem.model.integrator.solver, rtol=RTOL, atol=ATOL)
    nominal = np.asarray(problem.parameters.nominal)
    rng = np.random.default_rng(0)
    # samples within 0.2 decades of the nominal values (the box [1e-5, 1e5] holds
    # parameter values for which the model is not solvable at all)
    samples = nominal + rng.uniform(-0.2, 0.2, size=(args.n, nominal.size))
    res = {"machine": platform.processor() or platform.machine(), "n": args.n}

    def simulate(th):
        return ji.predict(problem, th, integrator=integrator).outputs

    def sensitivities(th):
        return ji.predict(problem, th, jacobian=True, integrator=integrator).jacobian

    th0 = jnp.asarray(nominal)
    for name, fn in (("sim", jax.jit(simulate)), ("sens", jax.jit(sensitivities))):
        t = time.perf_counter()
        jax.block_until_ready(fn(th0))
        res[f"jaxident_compile_{name}_s"] = time.perf_counter() - t
        res[f"jaxident_single_{name}_s"] = _median_time(lambda f=fn: f(th0), 20)
    # one vmapped kernel over all samples: the first call compiles it
    for key in ("jaxident_batch_sens_first_s", "jaxident_batch_sens_s"):
        t = time.perf_counter()
        sweep = ji.sweep(sensitivities, jnp.asarray(samples), batch_size=args.n, progress=False)
        res[key] = time.perf_counter() - t
    res["jaxident_batch_failed"] = int(sweep.n_failed)

    # the model parameters (linear) of every sample, for the simulators
    th_model = np.stack([np.asarray(_directions(problem, jnp.asarray(s))[0][0]) for s in samples])
    names = problem.model.parameters.names
    times = np.unique(np.asarray(problem.times[0])).tolist()

    # libroadrunner: CVODE simulations; sensitivities by central differences (2p + 0 runs)
    import roadrunner

    rr = roadrunner.RoadRunner(problem.model_file)
    rr.integrator.relative_tolerance = RTOL
    rr.integrator.absolute_tolerance = ATOL
    ids = set(rr.model.getGlobalParameterIds()) | set(rr.model.getCompartmentIds())

    def rr_sim(th):
        for n, v in zip(names, th):
            if n in ids:
                rr[n] = float(v)
        rr.reset()
        return rr.simulate(times=[0.0, *times[1:]] if times[0] == 0 else [0.0, *times])

    est = [names.index(n) for n in problem.parameters.names]

    def rr_sens(th):
        cols = []
        for j in est:
            up, down = th.copy(), th.copy()
            up[j] *= 10**1e-4
            down[j] /= 10**1e-4
            cols.append((np.asarray(rr_sim(up)) - np.asarray(rr_sim(down))) / 2e-4)
        return cols

    res["roadrunner_single_sim_s"] = _median_time(lambda: rr_sim(th_model[0]), 20)
    res["roadrunner_single_fd_sens_s"] = _median_time(lambda: rr_sens(th_model[0]), 5)
    t = time.perf_counter()
    for th in th_model:
        rr_sens(th)
    res["roadrunner_batch_fd_sens_s"] = time.perf_counter() - t

    if args.amici_python:
        with tempfile.TemporaryDirectory() as tmp:
            np.save(f"{tmp}/s.npy", th_model)
            json.dump(list(names), open(f"{tmp}/names.json", "w"))
            script = pathlib.Path(tmp) / "amici_run.py"
            script.write_text(AMICI_SCRIPT)
            proc = subprocess.run(
                [
                    args.amici_python,
                    str(script),
                    problem.model_file,
                    f"{tmp}/names.json",
                    f"{tmp}/s.npy",
                    ",".join(problem.parameters.names),
                    json.dumps(times),
                ],
                capture_output=True,
                text=True,
                # AMICI's build calls swig, installed beside that Python (pip install swig)
                env={
                    **os.environ,
                    "PATH": f"{os.path.dirname(args.amici_python)}:{os.environ['PATH']}",
                },
            )
            if proc.returncode:
                res["amici"] = f"failed: {proc.stderr[-500:]}"
            else:
                a = json.loads(proc.stdout.strip().splitlines()[-1])
                res["amici_compile_s"] = a["compile_s"]
                res["amici_single_sim_s"] = a["single_sim"]
                res["amici_single_sens_s"] = a["single_sens"]
                res["amici_batch_sens_s"] = a["batch_sens"]
                res["amici_steps"] = a["steps"]
    else:
        res["amici"] = "not run: give --amici-python (AMICI is not a dependency)"

    if args.ecoli[0] > 0:
        res.update(ecoli(*args.ecoli))

    def ratio(a, b):
        return res[b] / res[a] if a in res and b in res else None

    res["ratios (baseline time / jaxident time)"] = {
        "single sim vs AMICI": ratio("jaxident_single_sim_s", "amici_single_sim_s"),
        "single sens vs AMICI": ratio("jaxident_single_sens_s", "amici_single_sens_s"),
        f"{args.n} sens vs AMICI": ratio("jaxident_batch_sens_s", "amici_batch_sens_s"),
        "single sim vs roadrunner": ratio("jaxident_single_sim_s", "roadrunner_single_sim_s"),
        f"{args.n} sens vs roadrunner FD": ratio(
            "jaxident_batch_sens_s", "roadrunner_batch_fd_sens_s"
        ),
        "E. coli sens per sample, Rodas4 vs SciPy BDF + FD": ratio(
            "ecoli_jaxident_rodas4_per_sample_s", "ecoli_scipy_bdf_fd_per_sample_s"
        ),
        "E. coli sens per sample, Kvaerno3 vs SciPy BDF + FD": ratio(
            "ecoli_jaxident_kvaerno3_per_sample_s", "ecoli_scipy_bdf_fd_per_sample_s"
        ),
    }
    print(json.dumps(res, indent=2))
    pathlib.Path(args.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
