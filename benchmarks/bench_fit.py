"""Multi-start estimation of PEtab problems, jaxident against pyPESTO (fides, a
trust-region Newton method with the Fisher information, on AMICI's forward
sensitivities): the same Latin-hypercube starts in the same bounds on the estimation
scales, every estimated parameter fitted (noise parameters included), both on one core.
Reported: the best negative log-likelihood (PEtab's; pyPESTO's values are shifted by
their constant difference at the nominal values), the starts that converged (within 0.1
of the best either tool found), the wall time of the fits (compilation and the AMICI build
apart) and converged starts per minute.

pyPESTO and AMICI are not dependencies: give the Python of an environment where
`pip install amici swig petab pypesto fides` worked (`--pypesto-python`; AMICI builds
C++ per model, about a minute per model here, apart from the timed fits). Without it the
pyPESTO rows are left out and say why.

    python benchmarks/bench_fit.py --starts 100 --pypesto-python /tmp/amici-venv/bin/python

`--max-steps` sets jaxident's step cap per start (default 200, `ji.estimate`'s; fides
stops at 1,000 iterations). pyPESTO's costs are reported in the starts' order.

Both tools fit one start at a time and time each fit alone; every finished start is kept
in a JSON file under `--keep` (default benchmarks/results/fit_runs/), so a run that is
stopped (Fujita's 100 starts take hours on one core) goes on where it stopped when
started again with the same arguments. The wall time reported is the sum of the starts'
times.
"""

import argparse
import hashlib
import importlib.util
import json
import os
import pathlib
import platform
import time

from bench_petab import run_peer


PYPESTO_SCRIPT = r"""
import json, logging, os, sys, time
import numpy as np
import petab.v1 as petab
import pypesto, pypesto.engine, pypesto.optimize as optimize, pypesto.petab

yaml_path, starts_file, names_file, folder, keep_file = sys.argv[1:6]
logging.disable(logging.WARNING)
problem = petab.Problem.from_yaml(yaml_path)
# jaxident fits the likelihood alone (it ignores PEtab's priors): so does pyPESTO here
# (Schwen's six parameterScaleNormal priors)
problem.parameter_df = problem.parameter_df.drop(
    columns=["objectivePriorType", "objectivePriorParameters"], errors="ignore")
t0 = time.perf_counter()
importer = pypesto.petab.PetabImporter(problem, output_folder=folder, model_name="bench_fit")
pp = importer.create_problem()
build = time.perf_counter() - t0
solver = pp.objective.amici_solver
solver.set_relative_tolerance(1e-8)
solver.set_absolute_tolerance(1e-10)
names = json.load(open(names_file))
starts = np.load(starts_file)
nominal = np.asarray(problem.get_x_nominal(scaled=True))
full = np.tile(nominal, (starts.shape[0], 1))
for j, n in enumerate(names):
    full[:, pp.x_names.index(n)] = starts[:, j]
optimizer = optimize.FidesOptimizer(verbose=logging.ERROR)
try:
    kept = json.load(open(keep_file))
except FileNotFoundError:
    kept = {}
for i in range(starts.shape[0]):  # one start a call, each timed and kept
    if str(i) in kept:
        continue
    pp.set_x_guesses(full[i : i + 1])
    t0 = time.perf_counter()
    res = optimize.minimize(pp, optimizer, n_starts=1, progress_bar=False,
                            engine=pypesto.engine.SingleCoreEngine(), filename=None)
    fval = res.optimize_result.list[0].fval
    kept[str(i)] = {"nll": float("nan") if fval is None else float(fval),
                    "seconds": time.perf_counter() - t0,
                    "evaluations": int(res.optimize_result.list[0].n_fval or 0)}
    json.dump(kept, open(keep_file + ".tmp", "w"))
    os.replace(keep_file + ".tmp", keep_file)
fvals = [kept[str(i)]["nll"] for i in range(starts.shape[0])]
wall = sum(kept[str(i)]["seconds"] for i in range(starts.shape[0]))
# the objective at the nominal values: tools may differ by a constant (AMICI leaves out
# the log-transformation's Jacobian term of the PEtab likelihood)
at_nominal = float(pp.objective(nominal[pp.x_free_indices]))
print(json.dumps({"build_s": build, "fits_s": wall, "nll": fvals, "nll_nominal": at_nominal}))
"""


def kept_file(keep: pathlib.Path, tool: str, name: str, starts, steps: int) -> str:
    """The file that keeps one tool's fits of one problem from these starts."""
    digest = hashlib.sha256(starts.tobytes()).hexdigest()[:12]
    tag = tool.replace(" ", "_").replace(".", "").replace("+", "_")
    keep.mkdir(parents=True, exist_ok=True)
    return str(keep / f"{name}-{tag}-{len(starts)}starts-{digest}-{steps}steps.json")


def read_kept(path: str) -> dict:
    try:
        return json.loads(pathlib.Path(path).read_text())
    except FileNotFoundError:
        return {}


def jaxident_rows(yaml_path: str, n: int, seed: int, max_steps: int, optimizer,
                  keep: pathlib.Path, tool: str):  # fmt: skip
    import jax
    import numpy as np

    import jaxident as ji
    from jaxident._runtime._files import write_atomic

    problem = ji.petab.load(yaml_path, estimate_noise=True)
    starts = np.asarray(
        ji.latin_hypercube(jax.random.key(seed), problem.parameters, n), dtype=float
    )
    t0 = time.perf_counter()  # compiles the fit's kernels (one step is enough)
    ji.estimate(problem, starts=starts[:1], progress=False, max_steps=1, optimizer=optimizer)
    compile_s = time.perf_counter() - t0
    path = kept_file(keep, tool, problem.name, starts, max_steps)
    kept = read_kept(path)
    for i in range(n):  # one start a call, each timed and kept
        if str(i) in kept:
            continue
        t0 = time.perf_counter()
        # (throw=False: a start where no fit is found counts as not converged, as in a
        # multi-start of all of them, instead of stopping the run)
        fit = ji.estimate(problem, starts=starts[i : i + 1], progress=False, throw=False,
                          max_steps=max_steps, optimizer=optimizer).fits  # fmt: skip
        kept[str(i)] = {"nll": float(fit.nll[0]), "steps": int(fit.steps[0]),
                        "seconds": time.perf_counter() - t0}  # fmt: skip
        write_atomic(path, json.dumps(kept))
    rows = [kept[str(i)] for i in range(n)]
    out = {
        "nll_nominal": -float(ji.predict(problem).log_likelihood),
        "parameters": problem.parameters.p,
        "compile_s": compile_s,
        "fits_s": sum(r["seconds"] for r in rows),
        "nll": [r["nll"] for r in rows],
        "steps": sum(r["steps"] for r in rows),
        "kept": path,
    }
    return problem, starts, out


def pypesto_rows(yaml_path, problem, starts, python, keep: pathlib.Path) -> dict:
    if not python:
        return {"skipped": "give --pypesto-python (pip install amici swig petab pypesto fides)"}
    path = kept_file(keep, "pypesto", problem.name, starts, 1000)
    out = run_peer(python, PYPESTO_SCRIPT, yaml_path, starts, problem, extra=(path,))
    return {"skipped": out} if isinstance(out, str) else {**out, "kept": path}


def summary(rows: dict, best: float) -> None:
    import numpy as np

    for r in rows.values():
        if "nll" not in r:
            continue
        nll = np.asarray(r["nll"], float)
        r["best_nll"] = float(np.nanmin(nll))
        r["converged"] = int(np.sum(nll <= best + 0.1))
        r["converged_per_minute"] = r["converged"] / (r["fits_s"] / 60.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--problems", nargs="+", default=["Boehm_JProteomeRes2014",
                                                      "Fujita_SciSignal2010"])  # fmt: skip
    ap.add_argument("--pypesto-python", default=None)
    ap.add_argument("--max-steps", type=int, default=200,
                    help="jaxident's step cap per start (fides stops at 1,000)")  # fmt: skip
    ap.add_argument("--cpu", type=int, default=0, help="the core both tools are pinned to")
    ap.add_argument("--keep", type=pathlib.Path,
                    default=pathlib.Path(__file__).parent / "results" / "fit_runs",
                    help="a folder that keeps every finished start: the same command "
                         "again goes on where a stopped run stopped")  # fmt: skip
    ap.add_argument("--optimizers", nargs="+", default=["lm", "fides"],
                    choices=["lm", "fides", "lm-h", "fides-h", "lm-smaller", "lm-face",
                             "lm-running"],
                    help="jaxident's optimizers: lm (ji.FisherLM, default) and fides "
                         "(ji.Fides, 1,000 iterations, as pyPESTO); -h: hierarchical, the "
                         "observable scalings solved for in closed form; lm-smaller: "
                         "ji.FisherLM(noise_curvature=ji.SmallerCurvature()); lm-face: "
                         "ji.FisherLM(box=ji.Face()); lm-running: "
                         "ji.FisherLM(scaling=ji.RunningMaximum())")  # fmt: skip
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})  # before JAX starts; pyPESTO inherits it
    import numpy as np

    import jaxident as ji

    results = {"machine": platform.processor() or platform.machine(), "starts": args.starts,
               "max_steps": args.max_steps}  # fmt: skip
    for name in args.problems:
        yaml_path = ji.data.petab_problem(name)
        rows = {}
        for kind in args.optimizers:
            tool = {"lm": "jaxident", "fides": "jaxident+fides", "lm-h": "jaxident hier.",
                    "fides-h": "j.+fides hier.",
                    "lm-smaller": "jaxident smaller", "lm-face": "jaxident face",
                    "lm-running": "jaxident running"}[kind]  # fmt: skip
            fides = kind.startswith("fides")
            if fides and importlib.util.find_spec("fides") is None:
                rows[tool] = {"skipped": "pip install fides"}
                continue
            hier = kind.endswith("-h")
            if fides:
                optimizer = ji.Fides(hierarchical=hier)
            else:
                curvature = (
                    ji.SmallerCurvature() if kind == "lm-smaller" else ji.ExpectedCurvature()
                )
                box = ji.Face() if kind == "lm-face" else ji.Clip()
                scaling = ji.RunningMaximum() if kind == "lm-running" else ji.FadingMaximum()
                optimizer = ji.FisherLM(hierarchical=hier, noise_curvature=curvature, box=box,
                                        scaling=scaling)  # fmt: skip
            steps = 1000 if fides else args.max_steps
            problem, starts, rows[tool] = jaxident_rows(
                yaml_path, args.starts, args.seed, steps, optimizer, args.keep, tool
            )
        peer = rows["pypesto"] = pypesto_rows(
            yaml_path, problem, starts, args.pypesto_python, args.keep
        )
        nominal = next(r["nll_nominal"] for r in rows.values() if "nll_nominal" in r)
        if "nll" in peer:  # on jaxident's scale (PEtab's likelihood, constants included)
            shift = nominal - peer["nll_nominal"]
            peer["nll_shift"] = shift
            peer["nll"] = [v + shift for v in peer["nll"]]
        best = min(float(np.nanmin(r["nll"])) for r in rows.values() if "nll" in r)
        summary(rows, best)
        results[name] = rows
        print(f"\n{name}: {problem.parameters.p} parameters, {args.starts} starts, "
              f"best negative log-likelihood {best:.4f}")  # fmt: skip
        for tool, r in rows.items():
            if "nll" not in r:
                print(f"  {tool:<14s} {r['skipped']}")
                continue
            setup = r.get("compile_s", r.get("build_s"))
            print(f"  {tool:<14s} best {r['best_nll']:.4f}, {r['converged']:3d} converged, "
                  f"fits {r['fits_s']:7.1f} s (set-up {setup:.1f} s), "
                  f"{r['converged_per_minute']:6.1f} converged starts per minute")  # fmt: skip
        b = rows["pypesto"]
        for tool in ("jaxident", "jaxident+fides", "jaxident hier.", "j.+fides hier.",
                     "jaxident smaller", "jaxident face", "jaxident running"):  # fmt: skip
            a = rows.get(tool, {})
            if "converged_per_minute" in a and b.get("converged_per_minute", 0) > 0:
                ratio = a["converged_per_minute"] / b["converged_per_minute"]
                a["ratio_converged_per_minute"] = ratio
                print(f"  {tool} / pyPESTO, converged starts per minute: {ratio:.2f}x")
    out = pathlib.Path(__file__).parent / "results" / "fit.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
