"""L-SERC on the IVGTT model (Abdelfattah et al. 2024, Example 4): the whole test (52
directions, then stage S3's singularity probes at the 104 points of every rank-deficient
direction) with probing steps relative to each parameter (`ji.LSERC()`, the default)
against the paper's absolute steps (`ji.LSERC(relative=False)`), in one run.

Each setting is called twice; the second call is the run time (compilation apart).

    python benchmarks/bench_lserc.py
"""

import json
import pathlib
import platform
import time

import numpy as np

import jaxident as ji


def run(label, method):
    m = ji.models.load("ivgtt")
    out = {}
    for call in ("first", "second"):
        t0 = time.perf_counter()
        res = ji.lserc(m, method=method)
        out[f"{call}_seconds"] = time.perf_counter() - t0
    level = res.probes[0]
    active = np.asarray(res.probes_active[0], bool)
    pts = np.asarray(level.theta)[active]
    theta = np.asarray(m.parameters.nominal)
    out.update(
        non_identifiable=list(res.non_identifiable),
        confirmed=list(res.confirmed),
        probes=int(active.sum()),
        probes_failed=res.n_failed_probes,
        failed_solves=int((~np.asarray(level.ok))[active].sum()),
        largest_relative_move=float(np.max(np.abs(pts - theta) / np.abs(theta))),
    )
    print(f"{label:<28s} first {out['first_seconds']:7.1f} s, "
          f"second {out['second_seconds']:7.1f} s; "
          f"non-identifiable {', '.join(res.non_identifiable)}; "
          f"confirmed {', '.join(res.confirmed) or '(none)'}; "
          f"{out['probes']} probes, {out['probes_failed']} with a failed solve "
          f"({out['failed_solves']} of {out['probes'] * level.ok.shape[1]} solves); "
          f"largest move {out['largest_relative_move']:.3g} of a parameter's value")  # fmt: skip
    return out


def main():
    res = {
        "machine": platform.processor() or platform.machine(),
        "relative": run("relative steps (default)", ji.LSERC()),
        "absolute": run("absolute steps (the paper's)", ji.LSERC(relative=False)),
    }
    res["speedup"] = res["absolute"]["second_seconds"] / res["relative"]["second_seconds"]
    print(f"absolute / relative (second calls): {res['speedup']:.1f}x")
    out = pathlib.Path(__file__).parent / "results" / "lserc.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
