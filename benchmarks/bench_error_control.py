"""The cost of error-controlled sensitivities (the sensitivity system in the step-size
controller's error test, `ji.SensitivityEquations()`, the default) against forward-mode
differentiation of the discretised solve (`ji.DifferentiateSolver()`), with their
accuracy against a tight reference: the SVIR sweep (explicit Tsit5) and the E. coli model
(stiff, its default `ji.Rodas4`, 121 parameters)."""

import argparse
import functools
import json
import pathlib
import platform
import time

import equinox as eqx
import jax
import numpy as np

import jaxident as ji


def timed(fn, *args):
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t


def _sens(model, integrator, theta):
    return ji.sensitivity_matrix(model, theta, integrator=integrator)


def _sweep_values(f, samples):
    return ji.sweep(f, samples, progress=False).values


def with_method(integrator, method):
    return eqx.tree_at(lambda i: i.sensitivity, integrator, method)


def run(name, n, rows):
    model = ji.models.load(name)
    integ = model.integrator
    tight = eqx.tree_at(
        lambda i: (i.rtol, i.atol, i.max_steps),
        integ,
        (integ.rtol * 1e-3, integ.atol * 1e-3, 10**6),
    )
    ref = np.asarray(ji.sensitivity_matrix(model, integrator=tight))
    scale = np.maximum(np.abs(ref).max(axis=0), 1e-300)
    samples = ji.latin_hypercube(jax.random.key(0), model.parameters, n) if n > 1 else None
    out = {}
    for method in (ji.SensitivityEquations(), ji.DifferentiateSolver()):
        it = with_method(integ, method)
        S, first = timed(_sens, model, it, None)
        _, second = timed(_sens, model, it, None)
        err = float(np.max(np.abs(np.asarray(S) - ref) / scale))
        rec = {"first_call_s": first, "single_s": second, "max_rel_error": err}
        if samples is not None:
            f = functools.partial(_sens, model, it)
            ji.sweep(f, samples[:8], progress=False)  # compile the chunk function
            _, t = timed(_sweep_values, f, samples)
            rec[f"sweep_{n}_s"] = t
        out[type(method).__name__] = rec
    eq, ds = out["SensitivityEquations"], out["DifferentiateSolver"]
    ratio = eq["single_s"] / ds["single_s"]
    line = (
        f"{name:18s} single call: {eq['single_s']:.4f} s vs {ds['single_s']:.4f} s ({ratio:.2f}x)"
    )
    if samples is not None:
        r2 = eq[f"sweep_{n}_s"] / ds[f"sweep_{n}_s"]
        line += (
            f"; {n} samples: {eq[f'sweep_{n}_s']:.2f} s vs {ds[f'sweep_{n}_s']:.2f} s ({r2:.2f}x)"
        )
    line += f"; max rel. error {eq['max_rel_error']:.1e} vs {ds['max_rel_error']:.1e}"
    rows.append(line)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1000, help="SVIR samples")
    ap.add_argument("--skip-ecoli", action="store_true")
    args = ap.parse_args()
    rows, results = [], {"machine": platform.platform(), "jax": jax.__version__}
    results["svir"] = run("svir", args.n, rows)
    results["ivgtt"] = run("ivgtt", 1, rows)
    if not args.skip_ecoli:
        results["ecoli_chassagnole"] = run("ecoli_chassagnole", 1, rows)
    print("error-controlled (SensitivityEquations) vs differentiate-the-solver, compiled runs")
    print("\n".join(rows))
    out = pathlib.Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_error_control.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
