"""Peak memory of `ji.analyze`, each case in a fresh process (its peak resident set,
`ru_maxrss`), against the same process's memory before the report (JAX and the problem
loaded, the sensitivities compiled): a report must not hold anything that grows with
the data squared (a full SVD of an `n x p` matrix asks for `n x n`).

    python benchmarks/bench_report_memory.py                  # 1e4, 1e5 data points
    python benchmarks/bench_report_memory.py --beer /tmp/bm/Benchmark-Models

`--n` sets the data sizes (a three-parameter decay with a product of two parameters,
observed at `n` times); `--beer` adds Beer_MolBioSystems2014 from a checkout of the
PEtab benchmark collection (see check_collection.py), whose report peaked at 12 GB
when the practical analysis took a full SVD.
"""

import argparse
import json
import pathlib
import subprocess
import sys


HERE = pathlib.Path(__file__).resolve().parent

DECAY = r"""
import resource, sys, time, json
import jax, jax.numpy as jnp, numpy as np, equinox as eqx
import jaxident as ji

class Decay(ji.ODEModel):
    parameters: ji.Parameters = ji.Parameters(["k", "a", "b"], [0.5, 2.0, 3.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.01, 20.0, 10))
    t0: float = 0.0
    def vector_field(self, t, x, th): return -th.k * x
    def initial_state(self, th): return jnp.array([1.0])
    def output(self, t, x, th): return th.a * th.b * x[0]

n = int(sys.argv[1])
model = Decay(times=jnp.linspace(0.01, 20.0, n))
problem = ji.Problem(model, ji.Experiment(np.asarray(model.times), sigma=0.01))
ji.sensitivity(problem)  # compiled and run once: the baseline holds S
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
rep = ji.analyze(problem, progress=False)
json.dump({"case": f"decay, {n} data", "before_mb": before, "seconds": time.perf_counter() - t,
           "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "non_identifiable": list(rep.non_identifiable)}, sys.stdout)
"""

BEER = r"""
import resource, sys, time, json
import jaxident as ji
problem = ji.petab.load(sys.argv[1])
ji.sensitivity(problem)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
rep = ji.analyze(problem, progress=False)
json.dump({"case": "Beer_MolBioSystems2014", "before_mb": before,
           "seconds": time.perf_counter() - t,
           "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "n_data": rep.n_data, "p": len(rep.names)}, sys.stdout)
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--beer", help="the Benchmark-Models folder of the PEtab collection")
    args = ap.parse_args(argv)
    runs = [[sys.executable, "-c", DECAY, str(n)] for n in args.n]
    if args.beer:
        yaml = pathlib.Path(args.beer) / "Beer_MolBioSystems2014" / "Beer_MolBioSystems2014.yaml"
        runs.append([sys.executable, "-c", BEER, str(yaml)])
    rows = []
    for cmd in runs:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-2000:])
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(
            f"{r['case']}: peak {r['peak_mb']:.0f} MB (before the report {r['before_mb']:.0f} "
            f"MB), {r['seconds']:.1f} s",
            flush=True,
        )
    out = HERE / "results" / "bench_report_memory.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
