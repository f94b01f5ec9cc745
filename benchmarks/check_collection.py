"""Every claim of `ji.analyze` at the nominal parameters, checked against central finite
differences (FD) of the outputs, on every problem of the public PEtab benchmark
collection (Hass et al. 2019, https://github.com/Benchmarking-Initiative/Benchmark-Models-PEtab;
fetched, not shipped: BSD-3).

    git clone --depth 1 https://github.com/Benchmarking-Initiative/Benchmark-Models-PEtab /tmp/bm
    python benchmarks/check_collection.py /tmp/bm/Benchmark-Models            # every problem
    python benchmarks/check_collection.py /tmp/bm/Benchmark-Models Brannmark_JBC2010 Rahman_MBS2016

Each problem runs in a fresh process (its own time limit, `--timeout`, and its peak
memory). The FD reference is the rows of the expected Fisher information's square
root, as the report's matrix: the (transformed) outputs over the noise at the nominal
values (and the noise rows `sqrt(2) log sigma` where sigma depends on the parameters;
FD of the weighted residuals themselves would add `-r d log sigma`, which is not part
of the Fisher information) at `rtol = 1e-11` (1e-10 or 1e-9 where that solve fails), central
differences in each parameter's estimation units (a step `h` of 1e-4 decades on a log
scale, 1e-4 of the box width on a linear one), and again at `h / 4` (and `h / 16` where
those two disagree beyond 1e-6); of two neighbouring steps that agree best, the
Richardson extrapolation is the reference and the correction it made is the FD's own
error. Every column of `S` is normalised by
its comparable size (the largest column norm in the problem's units:
`Sensitivity.units`) before comparing.

The claims, and how each is checked (`tau`: the report's relative threshold, `e`: the
FD error relative to the largest column):

- *no effect* on `p`: its FD column is at most `10 tau` of the largest (unresolved
  where it is above that but within `10 e`).
- each *null direction* `v` (one per no-effect parameter and per pivot of a dependent
  set): `|S_FD v|` at most `10 tau` of the largest column (unresolved likewise).
- *non-identifiable* `p` (in a null direction): its FD distance to the span of the
  others is at most `10 tau` (unresolved where it is within `10 e_p`, the FD error
  relative to its column: `e` times the largest column over its own).
- *identifiable* `p`: its FD distance is at least a tenth of the report's, unless both
  lie under the FD's resolution (then unresolved, not contradicted).
- *marginal std* of an identifiable parameter: within 10% of the FD's (the same
  rank, pseudo-inverse on the resolved subspace), where FD resolves it: unresolved
  where the FD matrix's k-th singular value is within 10x of its noise (its (k+1)-th,
  or the difference between two steps' matrices: the solver's error over the step,
  e.g. Elowitz's sigma_14 = 8.7e-7 against 3.9e-7 at h = 1e-4 and 1.6e-6 at h / 4).

A claim is *confirmed*, *contradicted*, or *unresolved* (FD cannot tell); the table
counts them. Results go to `benchmarks/results/check_collection.json`; the table in
benchmarks/README.md is copied from the printout.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time


HERE = pathlib.Path(__file__).resolve().parent

ONE = r"""
import json, sys, time, resource, math
import numpy as np
import scipy.linalg as sl
import jax
import jax.numpy as jnp
import equinox as eqx
import jaxident as ji
from jaxident._problem._predict import estimation_units
from jaxident._problem._base import from_scale

path, out = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
problem = ji.petab.load(path)
t_load = time.perf_counter() - t0
t0 = time.perf_counter()
rep = ji.analyze(problem, progress=False)
t_analyze = time.perf_counter() - t0
print(f"analyzed in {t_analyze:.1f} s", file=sys.stderr, flush=True)
rss_analyze = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
names = list(problem.parameters.names)
p = len(names)
th = np.asarray(problem.parameters.nominal, dtype=float)
units = estimation_units(problem, th)
base = problem.model.integrator
observed = np.asarray(problem.observed)
noisy = observed & np.asarray(problem.noise_outputs)[None, None, :]

def rows_of(out):
    # the report's matrix is the square root of the expected Fisher information: the
    # outputs' derivatives over the noise at `th` (a residual's own derivative adds
    # -r dlog(sigma), whose mean is zero), and sqrt(2) dlog(sigma) for a noise that moves
    r = (np.asarray(out.residuals) * np.asarray(out.sigma))[observed] / sigma0
    if noisy.any():
        r = np.concatenate([r, math.sqrt(2) * np.log(np.asarray(out.sigma)[noisy])])
    return r

def fd(h):
    # the 2p displaced points as one vmapped solve, in chunks
    steps = np.diag(h * units)
    points = np.concatenate([th + steps, th - steps])
    outs = []
    for i in range(0, len(points), 16):
        chunk = points[i : i + 16]
        padded = np.concatenate([chunk, np.repeat(chunk[-1:], 16 - len(chunk), 0)])
        out = batched(jnp.asarray(padded))  # one shape: compiled once
        if not bool(np.all(np.asarray(out.ok))):
            raise RuntimeError("a finite-difference solve failed")
        outs.extend(rows_of(jax.tree.map(lambda x, j=j: x[j], out)) for j in range(len(chunk)))
    plus, minus = np.stack(outs[:p], 1), np.stack(outs[p:], 1)
    return (plus - minus) / (2 * h * units)

t0 = time.perf_counter()
# steps h, h/4, h/16: Richardson on the pair that agrees best (the central difference's
# h^2 term removed), and the correction it made as the FD's error
for rtol in (1e-11, 1e-10, 1e-9):
    # the finest tolerance at which every solve succeeds (some problems' solves fail at
    # 1e-11)
    fine = eqx.tree_at(lambda i: (i.rtol, i.atol), base, (rtol, base.atol * rtol / base.rtol))
    nominal = ji.predict(problem, jnp.asarray(th), integrator=fine, throw=False)
    if not bool(np.all(np.asarray(nominal.ok))):
        continue
    sigma0 = np.asarray(nominal.sigma)[observed]
    batched = jax.jit(jax.vmap(lambda t: ji.predict(problem, t, integrator=fine, throw=False)))
    try:
        Js = [fd(1e-4), fd(2.5e-5)]
        rough = np.abs(Js[1] - Js[0]).max() / max(np.abs(Js[1]).max(), 1e-300)
        if rough > 1e-6:  # a third step only where the first two disagree
            Js.append(fd(6.25e-6))
        break
    except RuntimeError:
        continue
else:
    raise RuntimeError("a finite-difference solve failed at rtol 1e-11, 1e-10 and 1e-9")
print(f"finite differences in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
t_fd = time.perf_counter() - t0
best = None
for J1, J2 in zip(Js[:-1], Js[1:]):
    J = (16 * J2 - J1) / 15
    U = J * units  # columns comparable (estimation scale; box width on a linear one)
    top = np.linalg.norm(U, axis=0).max()
    err = np.linalg.norm((J2 - J1) * units, axis=0) / (15 * top)  # relative to the top
    e_all = float(max(np.max(err), 1e-12))
    if best is None or e_all < best[0]:
        best = (e_all, J, U, top, err, J1, J2)
e_all, J, U, top, err, J1, J2 = best
sens = ji.sensitivity(problem)
acc = float(sens.accuracy)
tau = acc if rep.accuracy is None else float(rep.accuracy)
tau = max(tau, max(U.shape) * np.finfo(float).eps)
claims = []

def claim(kind, what, status, value, bound):
    claims.append(
        {"kind": kind, "what": what, "status": status, "value": float(value), "bound": float(bound)}
    )

def verdict(value, bound, resolution):
    # confirmed within the bound, unresolved where only the FD's error hides it
    if value <= bound:
        return "confirmed"
    return "unresolved" if value <= resolution else "contradicted"

norms = np.linalg.norm(U, axis=0) / top
for n in rep.no_effect:
    i = names.index(n)
    claim("no effect", n, verdict(norms[i], 10 * tau, 10 * e_all), norms[i], 10 * tau)
# the report's null directions are on the log scale of each parameter: back to the
# estimation scale
lin = from_scale(th, problem.scales)
plu = np.array([
    (1 / math.log(10) if s == "log10" else 1.0 if s == "log" else (v if v != 0 else 1.0))
    for s, v in zip(problem.scales, lin)
])
for v in rep.null_directions:
    w = v * plu
    w = w / np.linalg.norm(w / units)  # unit move in comparable units
    r = np.linalg.norm(J @ w) / top
    what = " ".join(f"{x:+.2f} {n}" for n, x in zip(names, v) if abs(x) > 0.05)
    claim("null direction", what, verdict(r, 10 * tau, 10 * e_all), r, 10 * tau)
# distances on the FD Jacobian, equilibrated over the columns with an effect
zero = np.array([n in rep.no_effect for n in names])
A = U[:, ~zero]
c = np.linalg.norm(A, axis=0)
A = A / np.where(c > 0, c, 1.0)
s = np.linalg.svd(A, compute_uv=False)
d_fd = np.full(p, np.nan)
for j, i in enumerate(np.flatnonzero(~zero)):
    # SciPy's least squares against the other columns, truncated at the threshold
    others = np.delete(A, j, axis=1)
    x = sl.lstsq(others, A[:, j], cond=tau)[0]
    d_fd[i] = np.linalg.norm(A[:, j] - others @ x)
# the FD's error relative to each column (the distance of a column is computed from all
# of them, so the largest error counts)
e_col = np.full(p, np.nan)
e_col[~zero] = e_all * top / np.where(c > 0, c, 1.0)
d_rep = np.asarray(rep.distance) * tau * s[0] if rep.distance is not None else np.full(p, np.nan)
tau_abs = tau * s[0]
for i, n in enumerate(names):
    if zero[i] or n in rep.undecided:
        continue
    resolution = 10 * max(e_col[i], 1e-12)
    if n in rep.non_identifiable:
        status = verdict(d_fd[i], 10 * tau_abs, resolution)
        claim("non-identifiable", n, status, d_fd[i], 10 * tau_abs)
    elif d_rep[i] <= resolution:
        claim("identifiable", n, "unresolved", d_fd[i], d_rep[i] / 10)
    else:
        status = "confirmed" if d_fd[i] >= d_rep[i] / 10 else "contradicted"
        claim("identifiable", n, status, d_fd[i], d_rep[i] / 10)
# marginal std from the FD Jacobian (same rank, pseudo-inverse on the resolved subspace)
k = rep.rank
keep = np.flatnonzero(~zero)
JA = J[:, keep]
cj = np.linalg.norm(JA, axis=0)
cj = np.where(cj > 0, cj, 1.0)
_, sj, Vj = np.linalg.svd(JA / cj, full_matrices=False)
W = Vj[:k].T / sj[:k] / cj[:, None]
std_fd = np.full(p, np.inf)
std_fd[keep] = np.sqrt(np.sum(W**2, axis=1))
# the pseudo-inverse at rank k is resolved by the FD only where its k-th singular value
# stands clear of the FD's noise: the next singular value (its floor when the rank is
# right) and the difference between the two steps' matrices, equilibrated alike (the
# solver's error over the step, which the Richardson estimate does not see)
noise = np.linalg.norm((J2 - J1)[:, keep] / cj, 2) / np.linalg.norm(JA / cj, 2)
floor = sj[k] / sj[0] if k < sj.size else 0.0
separated = k == 0 or sj[k - 1] / sj[0] > 10 * max(noise, floor)
for i, n in enumerate(names):
    if n in rep.identifiable and np.isfinite(rep.std[i]) and d_fd[i] > 100 * max(e_col[i], 1e-12):
        rel = abs(rep.std[i] - std_fd[i]) / std_fd[i]
        status = "confirmed" if rel <= 0.1 else "contradicted" if separated else "unresolved"
        claim("marginal std", n, status, rel, 0.1)
json.dump({
    "p": p, "n": int(sens.matrix.shape[0]), "rank": rep.rank,
    "no_effect": list(rep.no_effect), "non_identifiable": list(rep.non_identifiable),
    "undecided": list(rep.undecided), "groups": [list(g.names) for g in rep.groups],
    "n_null_directions": len(rep.null_directions), "resolved_rtol": rep.resolved_rtol,
    "load_s": t_load, "analyze_s": t_analyze, "fd_s": t_fd, "fd_error": e_all,
    "fd_rtol": float(fine.rtol), "tau": tau,
    "peak_mb_analyze": rss_analyze,
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "claims": claims,
}, open(out, "w"), indent=1)
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="the Benchmark-Models folder of a checkout of the collection")
    ap.add_argument("problems", nargs="*", help="problem names (default: every folder)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per problem")
    ap.add_argument("--out", default=str(HERE / "results" / "check_collection.json"))
    ap.add_argument("--again", action="store_true", help="check problems already in --out again")
    args = ap.parse_args(argv)
    root = pathlib.Path(args.root)
    if not root.is_dir():
        sys.exit(
            f"{root} is not a folder. Clone the collection first:\n"
            "  git clone --depth 1 https://github.com/Benchmarking-Initiative/"
            "Benchmark-Models-PEtab /tmp/bm\nand give /tmp/bm/Benchmark-Models."
        )
    names = args.problems or sorted(d.name for d in root.iterdir() if d.is_dir())
    out_path = pathlib.Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    for name in names:
        if name in results and not args.again:
            print(_row(name, results[name]), "(from an earlier run)", flush=True)
            continue
        yaml = root / name / f"{name}.yaml"
        if not yaml.exists():
            results[name] = {"error": f"no {yaml.name}"}
            continue
        tmp = out_path.with_name(f".{name}.json")
        t0 = time.perf_counter()
        try:
            with open(str(tmp) + ".log", "w") as err:
                proc = subprocess.run(
                    [sys.executable, "-c", ONE, str(yaml), str(tmp)],
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    text=True,
                    timeout=args.timeout,
                )
            if proc.returncode == 0:
                results[name] = json.loads(tmp.read_text())
            else:
                text = pathlib.Path(str(tmp) + ".log").read_text()
                last = [ln for ln in text.strip().splitlines() if ln.strip()]
                results[name] = {"error": last[-1][:300] if last else f"exit {proc.returncode}"}
        except subprocess.TimeoutExpired:
            results[name] = {"error": f"over {args.timeout:.0f} s"}
            stage = pathlib.Path(str(tmp) + ".log")
            if stage.exists() and stage.read_text().strip():
                results[name]["error"] += f" ({stage.read_text().strip().splitlines()[-1]})"
        results[name]["wall_s"] = time.perf_counter() - t0
        tmp.unlink(missing_ok=True)
        pathlib.Path(str(tmp) + ".log").unlink(missing_ok=True)
        out_path.write_text(json.dumps(results, indent=1))
        print(_row(name, results[name]), flush=True)
    print()
    print(table(results))


def _row(name, r) -> str:
    if "error" in r:
        return f"{name}: not checked ({r['error']})"
    counts = {}
    for c in r["claims"]:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    return f"{name}: {counts}"


def table(results) -> str:
    head = (
        "| problem | p | rank | no effect | non-identifiable (groups) | undecided | "
        "claims confirmed / contradicted / unresolved | analyze s | peak MB |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for name, r in sorted(results.items()):
        if "error" in r:
            lines.append(f"| {name} | | | | | | not checked: {r['error'][:80]} | | |")
            continue
        count = {k: 0 for k in ("confirmed", "contradicted", "unresolved")}
        for c in r["claims"]:
            count[c["status"]] += 1
        groups = len(r["groups"])
        dep = len(r["non_identifiable"]) - len(r["no_effect"])
        lines.append(
            f"| {name} | {r['p']} | {r['rank']} | {len(r['no_effect'])} | {dep} ({groups}) | "
            f"{len(r['undecided'])} | {count['confirmed']} / {count['contradicted']} / "
            f"{count['unresolved']} | {r['analyze_s']:.1f} | {r['peak_mb']:.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
