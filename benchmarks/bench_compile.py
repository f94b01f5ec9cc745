"""Compilation: for every built-in model and its main analysis, the first call in a fresh
process (compilation included), a second call in the same process (a fresh model
instance: nothing may recompile), and the first call in a second process that finds the
first one's kernels in the persistent compilation cache.

Each model runs in its own two processes, with a cache folder of its own (empty at the
start), so that nothing is shared between models or with earlier runs.

    python benchmarks/bench_compile.py                 # all models
    python benchmarks/bench_compile.py --models svir ivgtt

A run over some models replaces their rows in `results/bench_compile.json` and keeps the
others.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time


def _analysis(name: str):
    """The model's main analysis, as a function of a freshly loaded model."""
    import jax

    import jaxident as ji

    def selection(m):
        return ji.select_parameters(ji.sensitivity(m))

    def lserc(m):
        return ji.lserc(m)

    def delay(m):
        X = _states[name]
        return ji.delay_estimability(m, X, taus=[0.5], K=20, progress=False)

    def worst_direction(m):
        return ji.perturbation_analysis(m, t=1.0, key=jax.random.key(0), q=4, wrt="initial_state")

    _states = {}
    if name in ("colpitts", "rossler", "hindmarsh_rose"):
        _states[name] = ji.attractor_states(ji.models.load(name), n=4, spacing=5.0, transient=20.0)
    kind = {
        "nonsmooth_dae_example": (lserc, "lserc"),
        "wind_turbine": (lserc, "lserc"),
        "ivgtt": (lserc, "lserc"),
        "colpitts": (delay, "delay_estimability"),
        "rossler": (delay, "delay_estimability"),
        "hindmarsh_rose": (delay, "delay_estimability"),
        "brusselator_2d": (worst_direction, "perturbation_analysis"),
    }
    return kind.get(name, (selection, "select_parameters(sensitivity)"))


def _worker(name: str, calls: int) -> dict:
    import warnings

    import jaxident as ji

    warnings.simplefilter("ignore")
    fn, label = _analysis(name)
    times = []
    for _ in range(calls):
        model = ji.models.load(name)
        t0 = time.perf_counter()
        out = fn(model)
        jax_block(out)
        times.append(time.perf_counter() - t0)
    return {"analysis": label, "times": times}


def jax_block(out):
    import jax

    jax.tree.map(lambda x: x.block_until_ready() if hasattr(x, "block_until_ready") else x, out)


def _run(name: str, calls: int, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["JAXIDENT_CACHE"] = cache
    out = subprocess.run(
        [sys.executable, __file__, "--worker", name, "--calls", str(calls)],
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--worker", default=None)
    parser.add_argument("--calls", type=int, default=2)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.worker, args.calls)))
        return

    import jaxident as ji

    names = args.models or list(ji.models.available())
    rows = []
    print(f"{'model':26s} {'analysis':32s} {'first':>8s} {'second':>8s} {'2nd process':>12s}")
    for name in names:
        with tempfile.TemporaryDirectory() as cache:
            one = _run(name, 2, cache)
            two = _run(name, 1, cache)
        first, second = one["times"]
        other = two["times"][0]
        rows.append(
            {
                "model": name,
                "analysis": one["analysis"],
                "first_s": first,
                "second_s": second,
                "second_process_s": other,
            }
        )
        print(
            f"{name:26s} {one['analysis']:32s} {first:8.2f} {second:8.3f} {other:12.2f}",
            flush=True,
        )
    out = pathlib.Path(__file__).parent / "results" / "bench_compile.json"
    out.parent.mkdir(exist_ok=True)
    # A run over some models replaces their rows and keeps the others (from earlier runs).
    earlier = json.loads(out.read_text())["rows"] if out.exists() else []
    done = {r["model"] for r in rows}
    rows = [r for r in earlier if r["model"] not in done] + rows
    out.write_text(json.dumps({"rows": rows}, indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
