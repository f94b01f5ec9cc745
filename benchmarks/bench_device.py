"""PEtab sweeps and multi-start fits on whatever backend JAX finds (a GPU, or the CPU with
`JAX_PLATFORMS=cpu`): run it twice on one machine, once per backend, and compare.

Reported per problem: the sensitivity sweep (`bench_petab.jaxident_rows`: a single call,
the sweep's time per sample and their ratio) and, for the multi-start problems, the fits
of Latin-hypercube starts one after another (`batch=1`, the default) and side by side
(`batch=N`, one vmap): the kernel's compilation (a call with `max_steps=1`), three steps,
and the whole run where three steps say it fits in the time left.

A device machine without `petab` and `libsbml` reads the problems pickled on a machine
with them (`--pickle-to DIR` there, `--problems-from DIR` here):

    python benchmarks/bench_device.py --pickle-to .gpu
    JAX_PLATFORMS=cpu taskset -c 8-15 python benchmarks/bench_device.py --problems-from .gpu
    taskset -c 0-7 python benchmarks/bench_device.py --problems-from .gpu

The fits here run on the backend JAX finds, GPU included (`JAXIDENT_FIT_DEVICE=default`,
set below unless the environment sets it): jaxident itself fits on the host's CPU on a
GPU machine, because of what this script measured.
"""

import argparse
import json
import os
import pathlib
import pickle
import time

from bench_petab import jaxident_rows, samples_for


os.environ.setdefault("JAXIDENT_FIT_DEVICE", "default")  # read at each fit


SWEEPS = {"boehm": 1000, "zheng": 1000, "fujita": 256, "schwen": 256}
FITS = ("boehm",)  # noise parameters estimated, as in bench_fit.py


def _problem(name: str, folder, noise: bool):
    import jaxident as ji

    if folder:
        with open(os.path.join(folder, f"{name}{'_noise' if noise else ''}.pkl"), "rb") as fh:
            return pickle.load(fh)
    return ji.petab.load(ji.data.petab_problem(name), estimate_noise=noise)


def fit_rows(problem, n: int, batches, cpu: bool, left) -> dict:
    import jax
    import numpy as np

    import jaxident as ji

    starts = np.asarray(ji.latin_hypercube(jax.random.key(0), problem.parameters, n))
    rows = {}
    for b in batches:
        if left() < 60:
            rows[f"batch_{b}"] = "skipped: out of time"
            continue
        m = n if b > 1 or cpu else min(n, 8)  # one at a time on a GPU: the first 8
        pts, size = starts[:m], min(b, m)
        t = time.perf_counter()  # compiles (max_steps is an argument: one kernel)
        ji.estimate(problem, starts=pts[:size], batch=size, max_steps=1, progress=False)
        row = {"starts": m, "batch": size, "compile_plus_one_step_s": time.perf_counter() - t}
        t = time.perf_counter()
        ji.estimate(problem, starts=pts[:size], batch=size, max_steps=3, progress=False)
        row["three_steps_s"] = three = time.perf_counter() - t
        if three / 3 * 256 * (m / size) < left() / 3:
            t = time.perf_counter()
            fits = ji.estimate(problem, starts=pts, batch=size, progress=False).fits
            row["fits_s"] = time.perf_counter() - t
            row["per_start_s"] = row["fits_s"] / m
            back = np.argsort(np.asarray(fits.order))
            row["nll"] = np.asarray(fits.nll)[back].tolist()
            row["steps"] = np.asarray(fits.steps)[back].tolist()
        else:
            row["fits"] = "not run: 256 steps at three steps' pace would not fit the time left"
        rows[f"batch_{b}"] = row
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for the whole run")
    ap.add_argument("--starts", type=int, default=40)
    ap.add_argument("--problems-from", default=None, help="a folder of --pickle-to's files")
    ap.add_argument("--pickle-to", default=None)
    args = ap.parse_args()
    if args.pickle_to:
        os.makedirs(args.pickle_to, exist_ok=True)
        for name in SWEEPS:
            for noise in (False, True) if name in FITS else (False,):
                path = os.path.join(args.pickle_to, f"{name}{'_noise' if noise else ''}.pkl")
                with open(path, "wb") as fh:
                    pickle.dump(_problem(name, None, noise), fh)
        return
    deadline = time.time() + args.budget

    def left():
        return deadline - time.time()

    import importlib.metadata as md

    import jax

    backend = jax.default_backend()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    versions = {k: md.version(k) for k in ("jax", "jaxlib", "diffrax", "equinox")}
    res = {"backend": backend, "devices": str(jax.devices()), "cores": cores,
           "versions": versions}  # fmt: skip
    out = pathlib.Path(__file__).parent / "results" / f"device_{backend}.json"
    out.parent.mkdir(exist_ok=True)

    def save():
        out.write_text(json.dumps(res, indent=1))

    for name, n in SWEEPS.items():
        if left() < 60:
            res[f"{name}_sweep"] = "skipped: out of time"
            continue
        problem = _problem(name, args.problems_from, False)
        row = jaxident_rows(problem, samples_for(problem, n), [])
        row["sweep per sample / single call"] = row["sweep_per_sample_s"] / row["single_s"]
        res[f"{name}_sweep"] = row
        print(name, "sweep", json.dumps(row), flush=True)
        save()
        if name in FITS:
            problem = _problem(name, args.problems_from, True)
            batches = (1, 8) if backend == "cpu" else (args.starts, 1)
            res[f"{name}_fits"] = fit_rows(problem, args.starts, batches, backend == "cpu", left)
            print(name, "fits", json.dumps(res[f"{name}_fits"]), flush=True)
            save()


if __name__ == "__main__":
    main()
