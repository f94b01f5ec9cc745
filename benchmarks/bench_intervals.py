"""What profile-likelihood intervals cost: `ji.likelihood_intervals` of every
parameter of a shipped PEtab problem at one fit (every estimated parameter, noise ones
included; one start from the nominal values, the collection's optimum for Boehm), each
interval's time and fits, and how each end ended. The walk follows the valley (steps
adapted to the rise, jumps solved again with shorter steps and from more starts, a
partner's bound checked at each crossing), so it runs more fits than a walk from
neighbour to neighbour; this is the cost of the answer being right.

    python benchmarks/bench_intervals.py boehm --cores 1

`--baseline PATH`: the same problem timed again with the jaxident found at PATH (a
checkout of an earlier commit, `git worktree add /tmp/old <commit>`), in a process of
its own, one after the other: the ratio of the two times is the claim, not either time.
"""

import argparse
import json
import os
import subprocess
import sys
import time


SCRIPT = r"""
import json, sys, time
import numpy as np
import jaxident as ji

problem = ji.petab.load(ji.data.petab_problem(sys.argv[1]), estimate_noise=True)
theta = np.asarray(ji.estimate(problem, progress=False).theta)
ji.likelihood_intervals(problem, theta, problem.parameters.names[:1], progress=False)  # compile
rows, t0 = [], time.perf_counter()
for name in problem.parameters.names:
    t = time.perf_counter()
    iv = ji.likelihood_intervals(problem, theta, name, progress=False)[name]
    rows.append({"name": name, "seconds": time.perf_counter() - t, "fits": iv.fits,
                 "interval": repr(iv)})
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": rows}))
"""


def run(problem: str, path: str | None, cores: int) -> dict:
    env = dict(os.environ, JAXIDENT_CACHE="0")
    if path is not None:
        env["PYTHONPATH"] = path
    cmd = [sys.executable, "-c", SCRIPT, problem]
    if cores:
        cmd = ["taskset", "-c", ",".join(map(str, range(cores)))] + cmd
    # (from the checkout's folder: `python -c` puts the working folder first on the path)
    cwd = path if path is not None else None
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problem", nargs="?", default="boehm")
    parser.add_argument("--baseline", default=None, help="a checkout of an earlier commit")
    parser.add_argument("--cores", type=int, default=1, help="pin to this many cores (0: all)")
    args = parser.parse_args()
    found = {"this": run(args.problem, None, args.cores)}
    if args.baseline:
        found["baseline"] = run(args.problem, args.baseline, args.cores)
    for label, res in found.items():
        fits = sum(r["fits"] for r in res["rows"])
        print(f"{label}: {res['seconds']:.1f} s, {fits} fits")
        for r in res["rows"]:
            print(f"  {r['seconds']:6.1f} s {r['fits']:4d} fits  {r['interval']}")
    if args.baseline:
        ratio = found["this"]["seconds"] / found["baseline"]["seconds"]
        print(f"time against the baseline: {ratio:.2f}x")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t:.0f} s in all)")
