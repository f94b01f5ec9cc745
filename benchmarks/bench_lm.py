"""The re-estimation engine against optimistix's Levenberg-Marquardt, the one built from
its parts (`DampedNewtonDescent` in a `ClassicalTrustRegion` search): why
`ji.LevenbergMarquardt` is written as a solver of its own rather than assembled from a
descent and a search.

The work: weighted least squares of a model with data (`ji.estimate(model, data,
solver=...)`, the residual form every stepwise re-estimation runs), from the same
Latin-hypercube starts (on the log scale, a factor `--spread` either side of the nominal
values), compiled once per solver and way before timing: the starts one at a time, and
all of them in one `vmap` (in lockstep with the slowest). Cases: the alpha-pinene
isomerisation with its published data (Box et al. 1973; the COPS benchmark's optimum
has a residual sum of squares of 19.872), and the SEIR model on data simulated with
5 % noise. Reported per solver and way: the wall time of all starts (median of
`--repeats`, with the spread), the starts that reached the best cost found by any
solver (within 1e-6 of it, relative), and the median of the steps taken (a trial point
of ours is a plain solve, its derivatives computed only where the step is accepted;
optimistix linearises the residuals at every trial point: one forward-sensitivity
solve each).

    python benchmarks/bench_lm.py --starts 20 --repeats 3
"""

import argparse
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

import jaxident as ji


def case(name: str, key):
    """`(model, data, times)`: the published alpha-pinene data, or SEIR's simulated."""
    if name == "alpha_pinene":
        from jaxident.models._kinetics import ALPHA_PINENE_DATA

        model = ji.models.load(name)
        return model, np.asarray(ALPHA_PINENE_DATA), np.asarray(model.times)
    model = ji.models.load(name)
    clean = np.asarray(ji.simulate(model).ys)
    noise = 1 + 0.05 * np.asarray(jax.random.normal(key, clean.shape))
    return model, clean * noise, np.asarray(model.times)


def starts(model, n: int, spread: float, key) -> np.ndarray:
    """`n` Latin-hypercube points, log-uniform within a factor `spread` of nominal."""
    nominal = np.abs(np.asarray(model.parameters.nominal, float))
    box = np.stack([-np.ones_like(nominal), np.ones_like(nominal)], axis=1)
    u = np.asarray(ji.latin_hypercube(key, box, n))
    return nominal * spread**u


def run(model, data, times, points, solver, max_steps: int, batch: bool) -> list[tuple]:
    """`(cost, steps)` of the fit from each point: one at a time, or with `batch` all
    of them in one `vmap` (in lockstep with the slowest)."""

    def fit(theta0):
        est = ji.estimate(model, data, times, theta0=theta0, solver=solver,
                          max_steps=max_steps, throw=False)  # fmt: skip
        r = jnp.where(jnp.isnan(est.residuals), 0.0, est.residuals)
        return jnp.sum(r**2, axis=-1), est.steps

    if batch:
        cost, steps = jax.jit(jax.vmap(fit))(jnp.asarray(points))
        return list(zip(np.asarray(cost).tolist(), np.asarray(steps).tolist()))
    return [tuple(float(a) for a in fit(theta0)) for theta0 in points]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--spread", type=float, default=3.0)
    parser.add_argument("--max-steps", type=int, default=256)
    parser.add_argument("--cases", default="alpha_pinene,seir")
    args = parser.parse_args()
    solvers = {
        "ji.LevenbergMarquardt()": ji.LevenbergMarquardt(),
        "optx.LevenbergMarquardt(1e-8, 1e-8)": optx.LevenbergMarquardt(rtol=1e-8, atol=1e-8),
    }
    print(f"{platform.processor() or platform.machine()}, jax {jax.__version__}, "
          f"{args.starts} starts, median of {args.repeats} repeats")  # fmt: skip
    print("| case | solver | how | time (s) [min, max] | at best | median steps | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        key = jax.random.key(0)
        model, data, times = case(name, key)
        points = starts(model, args.starts, args.spread, jax.random.fold_in(key, 1))
        found, times_s = {}, {}
        for label, solver in solvers.items():
            for how in ("one at a time", "vmap"):
                batch = how == "vmap"
                run(model, data, times, points[: args.starts if batch else 1], solver,
                    args.max_steps, batch)  # compile  # fmt: skip
                walls = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    found[label, how] = run(model, data, times, points, solver,
                                            args.max_steps, batch)  # fmt: skip
                    walls.append(time.perf_counter() - t0)
                times_s[label, how] = walls
        best = min(c for rows in found.values() for c, _ in rows if np.isfinite(c))
        base = float(np.median(times_s["ji.LevenbergMarquardt()", "one at a time"]))
        for (label, how), rows in found.items():
            walls = times_s[label, how]
            at = sum(abs(c - best) <= 1e-6 * abs(best) for c, _ in rows)
            steps = int(np.median([s for _, s in rows]))
            med = float(np.median(walls))
            print(f"| {name} (best {best:.6g}) | {label} | {how} | {med:.2f} [{min(walls):.2f}, "
                  f"{max(walls):.2f}] | {at} of {len(rows)} | {steps} | "
                  f"{med / base:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
