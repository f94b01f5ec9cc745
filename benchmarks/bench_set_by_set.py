"""Set-by-set against one-by-one parameter selection (Alberton et al. 2013) on the
E. coli central-carbon model: evaluations and wall time, with and without
re-estimation, for the full model (121 candidates) and for the reduced problem of the
notebook and tests (12 candidates).

The model's sensitivity function and the re-estimation kernel are compiled once
(reported separately); every selection after that reuses them, so the times compare
the procedures, not compilation.
One-by-one with re-estimation on the full model re-estimates after every one of its
~80 successes; it takes hours on a CPU and runs only with `--full-one-by-one-reestimate`.
Each re-estimation step solves the model once (a Jacobian, every few accepted steps, costs
a few solves more): `fit_steps` counts them.
"""

import argparse
import json
import pathlib
import platform
import time

import jax
import jax.numpy as jnp

import jaxident as ji


ERROR = ji.MeasurementError(relative=1e-2, absolute=1e-6)


def full_problem(model):
    k1, k2 = jax.random.split(jax.random.key(1))
    truth = model.parameters.nominal * jnp.exp(0.2 * jax.random.normal(k1, (model.parameters.p,)))
    # data from the sensitivity function the selections use (compiled here, once)
    y = ji.sensitivity(model, truth, throw=False).outputs.reshape(model.times.shape[0], -1)
    data = model.add_noise(k2, y)
    return model, data, model.times, model.integrator


def reduced_problem(model):
    """The model's example problem (as in notebooks/set_by_set.ipynb): five unknown
    initial conditions and seven kinetic constants free, the first minute of data."""
    prob = model.example_problem()
    return prob.model, prob.data, prob.times, prob.integrator


def run(name, problem, jobs):
    t0 = time.perf_counter()
    model, data, times, integrator = problem(ji.models.load("ecoli_chassagnole"))
    compile_s = time.perf_counter() - t0  # the data are simulated by the compiled function
    print(f"\n{name}: {model.parameters.p} candidates, {data.size} data; "
          f"problem set-up (compiles the sensitivities) {compile_s:.1f} s")  # fmt: skip
    out = {"candidates": model.parameters.p, "compile_and_first_run_seconds": compile_s}
    # Compile the re-estimation kernels once (a selection of one candidate with one
    # re-estimation step: the step count is an argument of the kernels, not a constant),
    # so the times below compare the procedures, not compilation.
    t0 = time.perf_counter()
    warm = ji.Stepwise(reestimate=True, max_steps=1, accept_unconverged=True)
    ji.set_by_set(model, data, times, candidates=model.parameters.names[:1], error=ERROR,
                  method=warm, integrator=integrator, progress=False)  # fmt: skip
    out["reestimation_compile_seconds"] = time.perf_counter() - t0
    print(f"  re-estimation kernels compiled in {out['reestimation_compile_seconds']:.1f} s")
    for label, fn, method in jobs:
        res = fn(model, data, times, error=ERROR, method=method, integrator=integrator,
                 progress=False)  # fmt: skip
        fits = [e for e in res.history if e.steps > 0]
        out[label] = {
            "selected": len(res.selected),
            "evaluations": res.n_evaluations,
            "fits": len(fits),
            "fit_steps": sum(e.steps for e in res.history),
            "unconverged_fits": sum("did not converge" in e.reason for e in res.history),
            "seconds": res.seconds,
            "cost0": res.cost0,
            "cost": res.cost,
            "stop_reason": res.stop_reason,
        }
        n, k = len(res.selected), res.n_evaluations
        cost = f"cost {res.cost0:.4g} -> {res.cost:.4g}"
        steps = f"{len(fits)} fits, {out[label]['fit_steps']} fit steps"
        print(f"  {label:<34s} {n:3d} selected, {k:4d} evaluations, {steps}, "
              f"{res.seconds:8.1f} s, {cost}")  # fmt: skip
    for r in ("", "_reestimate"):
        a, b = out.get("set_by_set" + r), out.get("one_by_one" + r)
        if a and b:
            out["ratio" + r] = {
                "evaluations": b["evaluations"] / a["evaluations"],
                "seconds": b["seconds"] / a["seconds"],
            }
            print(f"  one-by-one / set-by-set{r.replace('_', ' ')}: "
                  f"{b['evaluations'] / a['evaluations']:.1f}x evaluations, "
                  f"{b['seconds'] / a['seconds']:.1f}x time")  # fmt: skip
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-full", action="store_true")
    ap.add_argument("--full-one-by-one-reestimate", action="store_true")
    args = ap.parse_args()
    sbs, obo = ji.set_by_set, ji.one_by_one
    plain, reest = ji.Stepwise(), ji.Stepwise(reestimate=True)
    lenient = ji.Stepwise(reestimate=True, accept_unconverged=True)
    jobs = [("set_by_set", sbs, plain), ("one_by_one", obo, plain),
            ("set_by_set_reestimate", sbs, reest),
            ("set_by_set_reestimate_accept_unconverged", sbs, lenient),
            ("one_by_one_reestimate", obo, reest)]  # fmt: skip
    res = {
        "machine": platform.processor() or platform.machine(),
        "devices": [str(d) for d in jax.devices()],
        "reduced": run("reduced E. coli", reduced_problem, jobs),
    }
    if not args.skip_full:
        full_jobs = jobs if args.full_one_by_one_reestimate else jobs[:4]
        res["full"] = run("full E. coli", full_problem, full_jobs)
    out = pathlib.Path(__file__).parent / "results" / "set_by_set.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
