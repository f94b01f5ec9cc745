"""What telling structural from weak costs: `ji.analyze` of each shipped PEtab problem
with the checks off (`generic=False`: every null direction structural at this point,
the baseline), by default (close calls only: a re-solve at rtol/100 and an 8-point
Latin-hypercube check of the box) and for every null direction (`generic=True`).

Two measures, each against the baseline in the same run:

- *warm*: in one process, after a first report has compiled everything, the three
  settings in turn, `--repeats` times; the median and the spread of each, and its ratio
  to the baseline's median (the checks' solves reuse the report's compiled solve: their
  tolerances are traced arrays);
- *cold*: a whole first report in a fresh process (compilation included, no cache
  folder), the default against the baseline: what a user waits for.

    python benchmarks/bench_structural.py --cores 1 --out /tmp/structural.jsonl

Each problem's row is appended to `--out` as it finishes; a problem already there is
skipped (run it again to resume).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys


WARM = r"""
import json, statistics, sys, time, warnings
warnings.simplefilter("ignore")
import jaxident as ji

problem = ji.petab.load(ji.data.petab_problem(sys.argv[1]))
repeats = int(sys.argv[2])
ji.analyze(problem, progress=False, generic=True)  # compile every solve
times = {"off": [], "default": [], "every": []}
for _ in range(repeats):
    for key, generic in (("off", False), ("default", None), ("every", True)):
        t = time.perf_counter()
        rep = ji.analyze(problem, progress=False, generic=generic)
        times[key].append(time.perf_counter() - t)
        if key == "default":
            checked = rep.checked
            kinds = (len(rep.non_identifiable), len(rep.weakly_identifiable))
print(json.dumps({"times": times, "checked": checked, "structural_weak": kinds}))
"""

COLD = r"""
import sys, time, warnings
warnings.simplefilter("ignore")
t = time.perf_counter()
import jaxident as ji
problem = ji.petab.load(ji.data.petab_problem(sys.argv[1]))
ji.analyze(problem, progress=False, generic={"off": False, "default": None}[sys.argv[2]])
print(time.perf_counter() - t)
"""


def _run(script: str, args: list[str], cores: int) -> str:
    env = dict(os.environ, JAXIDENT_CACHE="0")
    cmd = [sys.executable, "-c", script, *args]
    if cores:
        cmd = ["taskset", "-c", ",".join(map(str, range(cores)))] + cmd
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def main() -> None:
    import statistics

    import jaxident as ji

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="*", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, default=1, help="pin to this many cores (0: all)")
    parser.add_argument("--out", default="structural.jsonl")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    done = set()
    if out.exists():
        done = {json.loads(line)["problem"] for line in out.read_text().splitlines() if line}
    names = args.problems or [p.split("_")[0].lower() for p in ji.data.PETAB_PROBLEMS]
    print(f"{'problem':10s} {'warm off':>9s} {'default':>13s} {'every':>13s} "
          f"{'cold off':>9s} {'default':>13s}  checked (struct, weak)")  # fmt: skip
    for name in names:
        if name in done:
            continue
        warm = json.loads(_run(WARM, [name, str(args.repeats)], args.cores))
        cold = {k: float(_run(COLD, [name, k], args.cores)) for k in ("off", "default")}
        row = {"problem": name, "warm": warm, "cold": cold}
        with out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        med = {k: statistics.median(v) for k, v in warm["times"].items()}
        spread = {k: max(v) - min(v) for k, v in warm["times"].items()}

        def cell(k, med=med):
            return f"{med[k]:5.2f}s {med[k] / med['off']:5.2f}x"

        print(
            f"{name:10s} {med['off']:5.2f}s+-{spread['off']:.2f} {cell('default'):>13s} "
            f"{cell('every'):>13s} {cold['off']:8.1f}s {cold['default']:6.1f}s "
            f"{cold['default'] / cold['off']:5.2f}x  {warm['checked']} "
            f"{tuple(warm['structural_weak'])}"
        )


if __name__ == "__main__":
    main()
