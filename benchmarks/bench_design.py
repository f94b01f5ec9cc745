"""What scoring candidate measurements costs: the sensitivity rows of every candidate
(each state of a model at each time of a grid) at `S` parameter samples, as `ji.design`
computes them (one candidate problem: every candidate an experiment of one compiled
solve, the samples one after another in one kernel, or batched through `ji.sweep`),
against the plain loop a user would write: one `jax.jacfwd` of a diffrax solve per
candidate and sample, compiled once.

Both give the same rows (checked to 1e-6 of the largest); the throughput is candidate
measurements x samples per second after compilation, the median of `--repeats` runs
with the spread; the ratio is against the loop's median in the same run.

    python benchmarks/bench_design.py --samples 1 8 64 --out /tmp/design.jsonl

Each `(model, samples)` row is appended to `--out` as it finishes; a row already
there is skipped (run it again to resume).
"""

import argparse
import json
import pathlib
import statistics
import time


def _loop(model, thetas, grid, integrator):
    """One `jacfwd` of a diffrax solve of `model` per state and sample: `(S, states,
    n, q)`."""
    import diffrax
    import jax
    import jax.numpy as jnp

    def state(theta, i):
        view = model.parameters.view(theta)

        def f(t, x, args):
            return model.vector_field(t, x, view)

        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(f), diffrax.Tsit5(), float(model.t0), float(grid[-1]), 0.01,
            model.initial_state(view), saveat=diffrax.SaveAt(ts=jnp.asarray(grid)),
            stepsize_controller=diffrax.PIDController(rtol=integrator.rtol, atol=1e-12),
            max_steps=100_000, adjoint=diffrax.ForwardMode(),
        )  # fmt: skip
        return sol.ys[:, i]

    jac = jax.jit(jax.jacfwd(state), static_argnums=1)
    n_states = len(model.state_names)
    return lambda: [[jac(th, i) for i in range(n_states)] for th in thetas]


def _jaxident(problem, candidates, thetas, integrator, batched):
    import jax.numpy as jnp

    from jaxident._design import _design

    observables, blocks, _ = _design._blocks(problem, candidates)
    model = _design.observed_model(problem, observables)
    cp, where = _design.candidate_problem(problem, model, blocks)
    th = jnp.asarray(thetas)
    return lambda: _design.rows(cp, where, model, blocks, th, integrator, batched=batched)


def _timed(fn, repeats):
    import jax

    out = jax.block_until_ready(fn())  # compile
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return out, times


def run(name: str, S: int, repeats: int) -> dict:
    import jax
    import numpy as np

    import jaxident as ji

    model = ji.models.load(name)
    grid = np.linspace(float(model.times[0]), float(model.times[-1]), 21)
    problem = ji.Problem(model, ji.Experiment(grid))
    integrator = ji.Integrator(rtol=1e-8)
    lo, up = (np.asarray(a) for a in (model.parameters.lower, model.parameters.upper))
    thetas = np.asarray(ji.latin_hypercube(jax.random.key(0), (lo, up), S))
    candidates = [ji.Candidate(s, grid) for s in model.state_names]
    n = len(candidates) * grid.size * S
    row = {"model": name, "samples": S, "candidates": len(candidates) * grid.size,
           "q": model.parameters.p, "device": jax.devices()[0].platform}  # fmt: skip
    ref, loop = _timed(_loop(model, thetas, grid, integrator), repeats)
    ref = np.stack([np.stack(r) for r in ref])  # (S, states, n, q)
    for key, batched in (("kernel", False), ("sweep", True)):
        (G, _, _), times = _timed(_jaxident(problem, candidates, thetas, integrator, batched),
                                  repeats)  # fmt: skip
        got = np.stack(G, axis=1)
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err < 1e-6, (key, err)
        row[key] = times
    row["loop"] = loop
    base = statistics.median(loop)
    for key in ("loop", "kernel", "sweep"):
        med = statistics.median(row[key])
        row[f"{key}_per_s"] = n / med
        row[f"{key}_spread"] = [min(row[key]), max(row[key])]
        row[f"{key}_speedup"] = base / med
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=["seir", "covid"])
    parser.add_argument("--samples", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="design.jsonl")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["model"], r["samples"]))
    for name in args.models:
        for S in args.samples:
            if (name, S) in done:
                continue
            row = run(name, S, args.repeats)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{name:8s} S={S:<4d} {row['candidates']} candidates x {S} samples: loop "
                  f"{row['loop_per_s']:9.0f}/s, kernel {row['kernel_per_s']:9.0f}/s "
                  f"({row['kernel_speedup']:.1f}x), sweep {row['sweep_per_s']:9.0f}/s "
                  f"({row['sweep_speedup']:.1f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
