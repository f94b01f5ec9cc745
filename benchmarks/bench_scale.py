"""How `ji.sweep` scales: the SVIR sensitivity sweep's time per 1,000 samples against the
number of devices each chunk is split over, and its peak memory at 10k and 100k samples
(results streamed to `out_dir`, so that only the chunk in flight is held).

On a CPU the devices are forced host devices (`XLA_FLAGS=--xla_force_host_platform_
device_count=4`), which share the machine's cores: the ratio says what splitting costs
and what the cores give, not what separate accelerators would. On a GPU machine the
same script reports its GPUs. Each measurement runs in a fresh process, so that peak
memory (the process's maximum resident set; on a GPU also the device's peak bytes) is
that measurement's own.

    python benchmarks/bench_scale.py                 # --n 8192 --memory 10000 100000
"""

import argparse
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import tempfile
import time


def _child_devices(n: int) -> dict:
    import jax

    import jaxident as ji

    model = ji.models.load("svir")
    samples = ji.latin_hypercube(jax.random.key(0), model.parameters, n)
    devices = jax.local_devices()
    counts = sorted({1, 2, len(devices)} & set(range(1, len(devices) + 1)))
    out = {"platform": devices[0].platform, "device": str(devices[0].device_kind), "n": n}
    for d in counts:
        kw = dict(batch_size=1024, progress=False, devices=devices[:d])
        first = ji.sweep(lambda th: ji.sensitivity_matrix(model, th), samples, **kw)
        res = ji.sweep(lambda th: ji.sensitivity_matrix(model, th), samples, **kw)
        out[f"{d}_devices"] = {
            "compile_s": first.compile_seconds,
            "run_s": res.run_seconds,
            "per_1000_s": 1000 * res.run_seconds / n,
            "placed_on": len(res.devices),
            "failed": res.n_failed,
        }
    return out


def _child_memory(n: int) -> dict:
    import jax

    import jaxident as ji

    model = ji.models.load("svir")
    samples = ji.latin_hypercube(jax.random.key(0), model.parameters, n)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        res = ji.sweep(
            lambda th: ji.sensitivity_matrix(model, th),
            samples,
            batch_size=1024,
            progress=False,
            out_dir=tmp,
        )
        wall = time.perf_counter() - t
    stats = jax.local_devices()[0].memory_stats() or {}
    return {
        "n": n,
        "wall_s": wall,
        "compile_s": res.compile_seconds,
        "failed": res.n_failed,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "device_peak_mb": stats.get("peak_bytes_in_use", 0) / 2**20 or None,
        "samples_mb": samples.nbytes / 2**20,
        "results_mb": sum(v.nbytes for v in jax.tree.leaves(res.values)) / 2**20,
    }


def _run_child(kind: str, n: int, env: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--n", str(n)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--memory", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--child", default=None)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "scale.json"))
    args = ap.parse_args()
    if args.child:
        fn = _child_devices if args.child == "devices" else _child_memory
        print(json.dumps(fn(args.n)))
        return

    cpu_flags = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    res = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    res["devices"] = _run_child("devices", args.n, cpu_flags)
    one = res["devices"]["1_devices"]["per_1000_s"]
    print(f"SVIR sensitivity sweep, {args.n} samples, on {res['devices']['device']}:")
    for key, row in res["devices"].items():
        if key.endswith("_devices"):
            print(
                f"  {key.split('_')[0]} device(s): {row['per_1000_s']:.3f} s per 1000 samples "
                f"({one / row['per_1000_s']:.2f}x one device; compile {row['compile_s']:.1f} s)"
            )
    res["memory"] = [_run_child("memory", n, {}) for n in args.memory]
    print("Peak memory, results streamed to out_dir (batch 1024):")
    for row in res["memory"]:
        print(
            f"  {row['n']:>7} samples: peak RSS {row['peak_rss_mb']:.0f} MB "
            f"(results on disk {row['results_mb']:.0f} MB), {row['wall_s']:.1f} s"
        )
    pathlib.Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
