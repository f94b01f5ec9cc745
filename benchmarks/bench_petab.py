"""PEtab benchmark problems, jaxident against AMICI (CVODES, the field's reference), in
one run on the same CPU core: forward sensitivities of every condition at Latin-hypercube
samples within 0.2 decades of the nominal values (rtol 1e-8, atol 1e-10), as one call
and over a sweep of `--n` samples, with the steps per condition, the first call (its
compilation) against AMICI's model build, and the first and second `jaxident analyze`
of the problem in fresh processes.

AMICI builds C++ for each model and is not a dependency: give the Python of an
environment where `pip install amici swig petab` worked (`--amici-python`; the build
needs gcc); without it the AMICI rows are left out and say why.

Timed fairly: AMICI by its plain fast path (the parameters filled into prefilled
`ExpData`, then `run_simulations`; not `simulate_petab`, whose per-call bookkeeping is
not simulation), with the same sensitivity columns as jaxident (`ExpData.plist`: the
model parameters that jaxident's parameters set, so no noise parameter on either side);
a problem with pre-equilibration also with AMICI's `newtonOnly` steady state (its
default integrates to the steady state where Newton fails; jaxident solves by Newton
with a fallback integration); single calls repeated 20 times and sweeps 3 times on both
sides, reported as min, median and max, and ratios of the minima.

    python benchmarks/bench_petab.py --n 1000 --amici-python /tmp/amici-venv/bin/python

Both are pinned to one core (`--cpu`, default 0): the benchmark sets its own affinity
before JAX starts, and AMICI's process inherits it. `--lanes 1,32,256` also times the
sweep with that many samples vmapped side by side (the CPU rule of `ji.sweep`).
`--ecoli N_JAX N_SCIPY` measures the E. coli model (18 states, 121 parameters) against
SciPy's BDF with central differences.
"""

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time


AMICI_SCRIPT = r"""
import json, sys, time
import numpy as np
import petab.v1 as petab
from amici.importers.petab.v1 import import_petab_problem
from amici.sim.sundials.petab.v1 import create_edatas, fill_in_parameters
from amici.sim.sundials.petab.v1._parameter_mapping import create_parameter_mapping
import amici.sim.sundials as sim

yaml_path, samples_file, names_file, folder = sys.argv[1:5]
reps, single_only = int(sys.argv[5]), sys.argv[6] == "1"
problem = petab.Problem.from_yaml(yaml_path)
t0 = time.perf_counter()
model = import_petab_problem(problem, output_dir=folder, model_name="bench", compile_=True)
out = {"build_s": time.perf_counter() - t0}
solver = model.create_solver()
solver.set_relative_tolerance(1e-8)
solver.set_absolute_tolerance(1e-10)
solver.set_max_steps(100000)
solver.set_sensitivity_method(sim.SensitivityMethod_forward)
solver.set_sensitivity_order(sim.SensitivityOrder_first)
conditions = problem.get_simulation_conditions_from_measurement_df()
mapping = create_parameter_mapping(petab_problem=problem, simulation_conditions=conditions,
                                   scaled_parameters=True, amici_model=model)
edatas = create_edatas(amici_model=model, petab_problem=problem, simulation_conditions=conditions)
ids = list(problem.x_free_ids)
nominal = dict(zip(problem.x_ids, problem.get_x_nominal(scaled=True)))
names = json.load(open(names_file))
# the samples' values by name; the others (noise parameters jaxident holds) at nominal
thetas = [[dict(zip(names, th)).get(i, nominal[i]) for i in ids] for th in np.load(samples_file)]
# the same columns as jaxident: the model parameters that jaxident's parameters set
model_ids = list(model.get_free_parameter_ids())
wanted = set(names)
plists = [[k for k, pid in enumerate(model_ids)
           if isinstance(m.map_sim_var.get(pid), str) and m.map_sim_var[pid] in wanted]
          for m in mapping]
preeq = problem.measurement_df.get("preequilibrationConditionId")
preequilibrated = preeq is not None and bool(preeq.notna().any() and (preeq != "").any())

def run(theta):
    # AMICI's plain fast path: parameters into the prefilled ExpData, then its loop
    fill_in_parameters(edatas, dict(zip(ids, theta)), True, mapping, model, warn_unused=False)
    for e, plist in zip(edatas, plists):
        e.plist = plist
    rdatas = sim.run_simulations(model, solver, edatas)
    return rdatas, all(rd.status == 0 for rd in rdatas)

def spread(xs):
    return {"min": float(np.min(xs)), "median": float(np.median(xs)), "max": float(np.max(xs))}

modes = {"default": None}
if preequilibrated:  # AMICI's default integrates to the steady state if Newton fails
    modes["newton_only"] = (sim.SteadyStateComputationMode_newtonOnly,
                            sim.SteadyStateSensitivityMode_newtonOnly)
for mode, settings in modes.items():
    if settings is not None:
        model.set_steady_state_computation_mode(settings[0])
        model.set_steady_state_sensitivity_mode(settings[1])
    rdatas, _ = run(thetas[0])
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        run(thetas[0])
        times.append(time.perf_counter() - t)
    row = {"single_s": spread(times)}
    row["steps"] = [int(np.asarray(rd.numsteps).max()) for rd in rdatas]
    row["columns_per_condition"] = [len(e.plist) for e in edatas]
    passes, failed = [], 0
    for _ in range(0 if single_only else 3):
        t = time.perf_counter()
        failed = sum(not run(th)[1] for th in thetas)
        passes.append((time.perf_counter() - t) / len(thetas))
    if passes:
        row["per_sample_s"] = spread(passes)
        row["failed"] = failed
    out[mode] = row
# the peak resident memory of this process image (VmHWM: a forked child's ru_maxrss
# starts at its parent's)
hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")]
out["peak_memory_gb"] = int(hwm[0].split()[1]) / 1e6 if hwm else None
print(json.dumps(out))
"""


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


def _spread(xs) -> dict:
    import numpy as np

    return {"min": float(np.min(xs)), "median": float(np.median(xs)), "max": float(np.max(xs))}


def _times(fn, reps: int) -> dict:
    import jax

    out = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        out.append(time.perf_counter() - t)
    return _spread(out)


def samples_for(problem, n: int, seed: int = 0):
    """`n` Latin-hypercube samples within 0.2 decades of the nominal values, on the
    estimation scale (a parameter on a linear scale moves by the same factor); the
    first is the nominal point itself (where the single calls are timed)."""
    import jax
    import numpy as np

    import jaxident as ji
    from jaxident._problem._base import from_scale, to_scale

    box = (np.full(problem.parameters.p, -0.2), np.full(problem.parameters.p, 0.2))
    u = np.array(ji.latin_hypercube(jax.random.key(seed), box, n))
    lin = from_scale(problem.parameters.nominal, problem.scales)
    u[0] = 0.0
    return np.stack([to_scale(lin * 10.0**row, problem.scales) for row in u])


def _peak_memory_gb() -> float | None:
    """This process's peak resident memory so far (VmHWM), in GB."""
    try:
        hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")]
    except OSError:
        return None
    return int(hwm[0].split()[1]) / 1e6 if hwm else None


# one direct sensitivity call at the nominal values in a process of its own, as a user
# makes it (the kept kernel compiled from an empty cache folder); its peak memory is what
# AMICI's one-call process is compared with (this process's `peak_memory_gb` also holds
# the jitted program, the direct one and the sweeps)
ONE_CALL_SCRIPT = """
import json, sys
import jax.numpy as jnp
import jaxident as ji
from bench_petab import _peak_memory_gb, integrator_for
problem = ji.petab.load(sys.argv[1])
pred = ji.predict(problem, jnp.asarray(problem.parameters.nominal), jacobian=True,
                  integrator=integrator_for(problem, sys.argv[2]))
assert bool(pred.ok.all())
print(json.dumps({"one_call_peak_memory_gb": _peak_memory_gb()}))
"""


def integrator_for(problem, solver: str):
    """The problem's own integrator (`None`) for `solver == "model"`, else its
    tolerances and step cap with `ji.Rodas4()` or `ji.BDF()`."""
    import jaxident as ji

    if solver == "model":
        return None
    base = problem.model.integrator
    return ji.Integrator(ji.Rodas4() if solver == "rodas4" else ji.BDF(), rtol=base.rtol,
                         atol=base.atol, max_steps=base.max_steps)  # fmt: skip


def one_call_memory(yaml_path: str, solver: str) -> dict:
    """`ONE_CALL_SCRIPT`'s peak memory, or why it failed."""
    with tempfile.TemporaryDirectory() as cache:
        # the script imports this module's helpers from its folder
        path = [str(pathlib.Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "JAXIDENT_CACHE": cache,
               "PYTHONPATH": os.pathsep.join(p for p in path if p)}  # fmt: skip
        proc = subprocess.run([sys.executable, "-c", ONE_CALL_SCRIPT, yaml_path, solver],
                              capture_output=True, text=True, env=env)  # fmt: skip
    if proc.returncode:
        return {"one_call_peak_memory_gb": f"failed: {proc.stderr[-800:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def jaxident_rows(problem, samples, lanes, integrator=None, reps=20, single_only=False) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxident as ji
    from jaxident._runtime._config import compiler_options

    def sensitivities(th):
        return ji.predict(problem, th, jacobian=True, integrator=integrator).jacobian

    out = {}
    th0 = jnp.asarray(samples[0])
    # compiled as jaxident compiles the kernel of a direct `ji.predict` call (its XLA
    # options), without that call's host-side checks and bookkeeping
    fn = jax.jit(sensitivities, compiler_options=compiler_options(jax.default_backend()))
    t = time.perf_counter()
    jax.block_until_ready(fn(th0))
    out["first_call_s"] = time.perf_counter() - t
    out["single_s"] = _times(lambda: fn(th0), reps)
    # ... and as a user calls it: the kept kernel, with its checks on the host
    jax.block_until_ready(sensitivities(th0))
    out["single_direct_s"] = _times(lambda: sensitivities(th0), reps)
    pred = ji.predict(problem, th0, jacobian=True, integrator=integrator)
    out["steps"] = np.asarray(pred.steps).tolist()
    out["columns_per_condition"] = [len(c) for c in problem.columns]
    out["peak_memory_gb"] = _peak_memory_gb()
    if single_only:
        return out
    n = samples.shape[0]
    chunk = min(256, n)
    for b in [None, *lanes]:
        # the first chunk compiles the sweep's kernel; the timed sweep reuses it
        warm = ji.sweep(
            sensitivities, samples[:chunk], batch_size=chunk, progress=False, vmap_size=b
        )
        key = "sweep" if b is None else f"sweep_lanes_{b}"
        out[f"{key}_compile_s"] = warm.compile_seconds
        passes = []
        for _ in range(3):
            res = ji.sweep(sensitivities, samples, batch_size=chunk, progress=False, vmap_size=b)
            passes.append(res.run_seconds / n)
        out[f"{key}_per_sample_s"] = _spread(passes)
        out[f"{key}_failed"] = int(res.n_failed)
    return out


def amici_rows(problem, samples, amici_python, yaml_path, reps=20, single_only=False) -> dict:
    if not amici_python:
        return {"amici": "not run: give --amici-python (pip install amici swig petab)"}
    out = run_peer(amici_python, AMICI_SCRIPT, yaml_path, samples, problem,
                   [str(reps), "1" if single_only else "0"])  # fmt: skip
    if isinstance(out, str):
        return {"amici": out}
    return {f"amici_{k}": v for k, v in out.items()}


def run_peer(python, script_text, yaml_path, samples, problem, extra=()) -> dict | str:
    """`script_text` run by the Python of a peer's environment with the arguments
    `yaml_path samples.npy names.json model_folder` (the samples' parameter names are
    the problem's): the JSON object its last line prints, or why it failed."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/samples.npy", samples)
        json.dump(list(problem.parameters.names), open(f"{tmp}/names.json", "w"))
        script = pathlib.Path(tmp) / "peer_run.py"
        script.write_text(script_text)
        args = [python, str(script), yaml_path, f"{tmp}/samples.npy", f"{tmp}/names.json",
                f"{tmp}/model", *extra]  # fmt: skip
        # AMICI's build calls swig, installed beside that Python (pip install swig)
        env = {**os.environ, "PATH": f"{os.path.dirname(python)}:{os.environ['PATH']}"}
        proc = subprocess.run(args, capture_output=True, text=True, env=env)
    if proc.returncode:
        return f"failed: {proc.stderr[-800:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def problem_yaml(name: str) -> str:
    """A shipped problem's YAML by its short name, or a path to a problem's YAML (the
    large networks of the public collection are fetched, not shipped: see the README)."""
    import jaxident as ji

    return name if name.endswith((".yaml", ".yml")) else ji.data.petab_problem(name)


def analyze_rows(yaml_path: str) -> dict:
    """`jaxident analyze` of the problem in a fresh process, with an empty cache folder,
    then again in a second process with the cache that the first one filled."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JAXIDENT_CACHE": cache}
        for which in ("first", "second"):
            t = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "jaxident.cli", "analyze", yaml_path],
                capture_output=True,
                text=True,
                env=env,
            )
            out[f"analyze_{which}_process_s"] = time.perf_counter() - t
            if proc.returncode:
                out[f"analyze_{which}_process_s"] = f"failed: {proc.stderr[-500:]}"
    return out


def ecoli(n_jax: int, n_scipy: int) -> dict:
    """The E. coli model (18 states, 121 parameters, `ji.models.load("ecoli_chassagnole")`):
    jaxident's sensitivity matrices (`ji.Rodas4`, the model's own, and `diffrax.Kvaerno3`)
    against SciPy's BDF with central finite differences (242 solves per matrix; the
    right-hand side and its Jacobian jitted, as a SciPy user of a JAX model would), all
    at rtol 1e-7, atol 1e-10, at samples within 0.1 decades of the nominal values."""
    import diffrax
    import jax
    import jax.numpy as jnp
    import numpy as np
    from scipy.integrate import solve_ivp

    import jaxident as ji

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--problems", nargs="*", default=["boehm", "fujita", "schwen", "zheng"])
    ap.add_argument("--amici-python", default=None)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--lanes", default="", help="e.g. 1,32,256: sweeps with these vmap sizes")
    ap.add_argument("--no-analyze", action="store_true", help="leave out the CLI timings")
    ap.add_argument("--ecoli", type=int, nargs=2, default=[0, 0], metavar=("N_JAX", "N_SCIPY"))
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "petab.json"))
    ap.add_argument(
        "--solver",
        choices=["model", "rodas4", "bdf"],
        default="model",
        help="jaxident's stiff solver (default: the problem's own)",
    )
    ap.add_argument("--reps", type=int, default=20, help="repeats of a single call")
    ap.add_argument("--single-only", action="store_true", help="single calls only, no sweep")
    args = ap.parse_args()
    _pin(args.cpu)  # before JAX starts: its thread pools are sized to the allowed cores

    import jaxident as ji

    lanes = [int(b) for b in args.lanes.split(",") if b]
    res = {"machine": platform.processor() or platform.machine(), "n": args.n, "cpu": args.cpu}
    for name in args.problems:
        yaml_path = problem_yaml(name)
        problem = ji.petab.load(yaml_path)
        integrator = integrator_for(problem, args.solver)
        samples = samples_for(problem, args.n)
        row = {"conditions": problem.n_experiments, "parameters": problem.parameters.p,
               "solver": args.solver}  # fmt: skip
        row.update(jaxident_rows(problem, samples, lanes, integrator, args.reps, args.single_only))
        row.update(one_call_memory(yaml_path, args.solver))
        row.update(amici_rows(problem, samples, args.amici_python, yaml_path, args.reps,
                              args.single_only))  # fmt: skip
        if not args.no_analyze:
            row.update(analyze_rows(yaml_path))
        # ratios of the fastest of the repeats on each side (min over min)
        ours_single = row["single_s"]["min"]
        ours_sweep = row["sweep_per_sample_s"]["min"] if not args.single_only else None
        for mode in ("default", "newton_only"):
            peer = row.get(f"amici_{mode}")
            if isinstance(peer, dict) and peer.get("failed") == args.n:
                row[f"AMICI ({mode})"] = "every sample failed: no ratio"
            elif isinstance(peer, dict):
                if ours_sweep is not None:
                    row[f"sweep per sample: AMICI ({mode}) / jaxident"] = (
                        peer["per_sample_s"]["min"] / ours_sweep
                    )
                single = peer["single_s"]["min"] / ours_single
                row[f"single call: AMICI ({mode}) / jaxident"] = single
                row[f"single direct call: AMICI ({mode}) / jaxident"] = (
                    peer["single_s"]["min"] / row["single_direct_s"]["min"]
                )
        ours_memory, peer_memory = row["one_call_peak_memory_gb"], row.get("amici_peak_memory_gb")
        if isinstance(ours_memory, float) and isinstance(peer_memory, float):
            row["peak memory of a one-call process: jaxident / AMICI"] = ours_memory / peer_memory
        if ours_sweep is not None:
            row["sweep per sample / single call"] = ours_sweep / ours_single
        res[name] = row
        print(name, json.dumps(row, indent=1), flush=True)
    if args.ecoli[0] > 0:
        res.update(ecoli(*args.ecoli))
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
