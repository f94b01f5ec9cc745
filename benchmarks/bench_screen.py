"""Start screening against plain multi-start (issue 49): `ji.estimate` from every
Latin-hypercube start with the full step cap, against a few steps from every start
followed by the full fit of the best fraction (ranked by their negative log-likelihood
after the few steps, continued from where they stopped). Same starts (bench_fit's:
seed-0 Latin hypercube, `estimate_noise=True`), one core, compilation of each step cap
before the clock. Reported: starts within 0.1 of the best known value, their number per
minute, and the best value reached.

    python benchmarks/bench_screen.py --starts 100
"""

import argparse
import json
import os
import pathlib
import time


BEST_KNOWN = {"Boehm_JProteomeRes2014": 138.222, "Fujita_SciSignal2010": -66.58}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", default="Boehm_JProteomeRes2014", choices=sorted(BEST_KNOWN))
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--screen-steps", type=int, nargs="+", default=[5, 10])
    ap.add_argument("--keep", type=float, nargs="+", default=[0.2, 0.4],
                    help="the fractions of the starts continued after screening")  # fmt: skip
    ap.add_argument("--cpu", type=int, default=0)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    import jax
    import numpy as np

    import jaxident as ji

    problem = ji.petab.load(ji.data.petab_problem(args.problem), estimate_noise=True)
    n = args.starts
    starts = np.asarray(ji.latin_hypercube(jax.random.key(0), problem.parameters, n), float)
    best_known = BEST_KNOWN[args.problem]

    def run(points, steps):
        t = time.perf_counter()
        fits = ji.estimate(problem, starts=points, max_steps=steps, progress=False).fits
        return fits, time.perf_counter() - t

    for steps in {1, args.max_steps, *args.screen_steps}:  # each step cap compiled once
        run(starts[:1], steps)
    rows = {}

    def row(key, nll, seconds, **extra):
        nll = np.asarray(nll)
        converged = int(np.sum(nll <= best_known + 0.1))
        rows[key] = dict(seconds=seconds, converged=converged, best=float(np.nanmin(nll)),
                         per_minute=60 * converged / seconds, **extra)  # fmt: skip
        r = rows[key]
        print(f"{key:<22s} {converged:3d} converged in {seconds:6.1f} s: "
              f"{r['per_minute']:5.2f} per minute, best {r['best']:.3f}", flush=True)  # fmt: skip

    fits, seconds = run(starts, args.max_steps)
    row("plain", fits.nll, seconds)
    for k in args.screen_steps:
        screened, first = run(starts, k)
        ranked = np.asarray(screened.theta)  # (sorted by the cost after k steps)
        for frac in args.keep:
            fits, then = run(ranked[: max(1, int(frac * n))], args.max_steps)
            row(f"{k} steps, best {frac:.0%}", fits.nll, first + then, screen_s=first)
    out = pathlib.Path(__file__).parent / "results" / "screen.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"problem": args.problem, "starts": n, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
