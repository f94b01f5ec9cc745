"""Compilation: for every built-in model and its main analysis, the first call in a fresh
process (compilation included), a second call in the same process (a fresh model
instance: nothing may recompile), and the first call in a second process that finds the
first one's kernels in the persistent compilation cache.

Each model runs in its own two processes, with a cache folder of its own (empty at the
start), so that nothing is shared between models or with earlier runs.

    python benchmarks/bench_compile.py                 # all models
    python benchmarks/bench_compile.py --models svir ivgtt
    python benchmarks/bench_compile.py --first-answers --repeats 3 --cpu 1

A run over some models replaces their rows in `results/bench_compile.json` and keeps the
others.

`--first-answers` times whole processes instead, as a newcomer meets them (issue 48's
goal: at most 5 s of CPU with an empty cache): the README's first command (read from
the README, after its install), `jaxident analyze` of small built-in models with and
without `--plot`, and `ji.analyze` of one in Python, each from an empty cache folder,
`--repeats` times; CPU is the process's user + system time (`getrusage` of the child),
so that it does not depend on how many cores there are. `--cpu N` pins the processes to
core N (Linux). Written to `results/bench_compile_first_answers.json`.
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


_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _readme_command() -> list[str]:
    """The README's first command after its install: the `jaxident ...` that ends the
    one-line install-and-run of "Install and run"."""
    text = (_ROOT / "README.md").read_text()
    for line in text.splitlines():
        if "pip install" in line and "&& jaxident " in line:
            return line.rsplit("&& ", 1)[1].split()
    raise RuntimeError("README.md has no `... && jaxident ...` install-and-run line.")


_IN_PYTHON = "import jaxident as ji; ji.analyze(ji.models.load('{}'))"
_IN_PYTHON_PETAB = (
    "import jaxident as ji; ji.analyze(ji.petab.load(ji.data.petab_problem('boehm')))"
)


def _first_answers(small: list[str]) -> list[tuple[str, list[str]]]:
    readme = _readme_command()
    jaxident = [str(pathlib.Path(sys.executable).with_name("jaxident"))]
    cases = [("README: " + " ".join(readme), jaxident + readme[1:])]
    for name in small:
        cases.append((f"jaxident analyze {name} --plot", jaxident + ["analyze", name, "--plot"]))
        cases.append((f"jaxident analyze {name}", jaxident + ["analyze", name]))
    cases.append(
        (f"python: ji.analyze({small[0]})", [sys.executable, "-c", _IN_PYTHON.format(small[0])])
    )
    cases.append(("python: ji.analyze(boehm)", [sys.executable, "-c", _IN_PYTHON_PETAB]))
    return cases


def _timed_process(cmd: list[str], cpu: int | None) -> tuple[float, float]:
    """`(cpu seconds, wall seconds)` of `cmd` run from an empty cache folder (a plot it
    writes goes to a temporary folder too)."""
    import resource

    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
        env["JAXIDENT_CACHE"] = os.path.join(tmp, "cache")
        if "--plot" in cmd and cmd.index("--plot") == len(cmd) - 1:
            cmd = cmd + [os.path.join(tmp, "figure.png")]
        if cpu is not None:
            cmd = ["taskset", "-c", str(cpu)] + cmd
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr[-2000:]}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu_s, wall


def first_answers(small: list[str], repeats: int, cpu: int | None) -> None:
    rows = []
    print(f"{'first answer, empty cache':52s} {'CPU s (min, max)':>18s} {'wall s (min)':>13s}")
    for label, cmd in _first_answers(small):
        runs = [_timed_process(cmd, cpu) for _ in range(repeats)]
        cpus, walls = [r[0] for r in runs], [r[1] for r in runs]
        rows.append({"command": label, "cpu_s": cpus, "wall_s": walls})
        print(f"{label:52s} {min(cpus):8.2f} {max(cpus):8.2f} {min(walls):13.2f}", flush=True)
    out = pathlib.Path(__file__).parent / "results" / "bench_compile_first_answers.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"cpu": cpu, "repeats": repeats, "rows": rows}, indent=2))
    print(f"written to {out}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--worker", default=None)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--first-answers", action="store_true")
    parser.add_argument("--small", nargs="*", default=["svir", "sir", "covid"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=None)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.worker, args.calls)))
        return
    if args.first_answers:
        first_answers(args.small, args.repeats, args.cpu)
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
