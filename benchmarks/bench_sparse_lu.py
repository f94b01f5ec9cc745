"""The sparse LU (`jaxident/_linalg/_sparse_lu.py`) against LAPACK's dense LU, as `ji.BDF`
uses them: inside a compiled loop, one factorization and solve, or one solve with 1 or
with k right-hand sides (the state's Newton step, or the tangents' of k parameters).

Each case runs `--reps` times inside one `lax.fori_loop` (its right-hand side or matrix
changed at every pass, so that XLA cannot hoist the work out of the loop); the time per
pass is the minimum over five calls, the median beside it. Pin the process to one core
(`taskset -c 0`) on an otherwise idle machine: next to another process, LAPACK's timings
vary up to 20x.

    taskset -c 0 python benchmarks/bench_sparse_lu.py                   # synthetic network
    taskset -c 0 python benchmarks/bench_sparse_lu.py --problem Chen_MSB2009/Chen_MSB2009.yaml

The synthetic pattern (default, `--n` states) is modules of 10 species coupled through 5
shared ones. With `--problem` the pattern is the model's Jacobian sparsity
(`model.jacobian_sparsity()`). Both sides of a "factorize and solve" case also scale the
dense matrix at every pass (the same work on each side).
"""

import argparse
import time

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np


jax.config.update("jax_enable_x64", True)


def _pattern(args) -> np.ndarray:
    if args.problem:
        import jaxident as ji

        return np.asarray(ji.petab.load(args.problem).model.jacobian_sparsity())
    # modules of 10 species, dense inside, each coupled to 5 shared species (as a
    # network's enzymes or cofactors); a random pattern of the same density fills in
    # (500 states: 87,800 entries in L + U, 306 levels) and is no network's
    n = args.n
    block = np.arange(n) // 10
    P = block[:, None] == block[None, :]
    P[:, :5] = P[:5, :] = True
    return P


def _timed(fn, *args, reps: int) -> tuple[float, float]:
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t)
    return 1e6 * min(times) / reps, 1e6 * float(np.median(times)) / reps


def main() -> None:
    from jaxident._linalg._sparse_lu import sparse_lu_factor, sparse_lu_plan, sparse_lu_solve

    parser = argparse.ArgumentParser()
    parser.add_argument("--problem", default=None, help="a PEtab problem's YAML file")
    parser.add_argument("--n", type=int, default=500, help="states of the synthetic pattern")
    parser.add_argument("--k", type=int, nargs="*", default=[1, 155])
    parser.add_argument("--reps", type=int, default=300)
    args = parser.parse_args()
    P = _pattern(args)
    n = P.shape[0]
    plan = sparse_lu_plan(P, max_fill=1.0)
    levels = plan.factor_levels[0].shape[0], plan.lower[0].shape[0], plan.upper[0].shape[0]
    print(f"{n} states, {int(P.sum())} nonzeros; L + U {plan.nnz} entries; "
          f"levels: factorization {levels[0]}, solves {levels[1]} and {levels[2]}")  # fmt: skip
    rng = np.random.default_rng(1)
    A = jnp.asarray(np.where(P, rng.uniform(-1, 1, (n, n)), 0.0) * 0.3 + 3.0 * np.eye(n))
    lu = jsl.lu_factor(A)
    values, ok = sparse_lu_factor(plan, A)
    assert bool(ok)
    R = args.reps

    def looped(step):
        def f(A, b):
            def body(i, acc):
                scale = 1.0 + 1e-9 * i
                return acc + step(A * scale, b * scale)

            return jax.lax.fori_loop(0, R, body, jnp.zeros_like(b))

        return f

    cases = {
        "factorize and solve": (
            lambda A, b: jsl.lu_solve(jsl.lu_factor(A), b),
            lambda A, b: sparse_lu_solve(plan, sparse_lu_factor(plan, A)[0], b),
        ),
        "solve": (
            lambda A, b: jsl.lu_solve(lu, b),
            lambda A, b: sparse_lu_solve(plan, values, b),
        ),
    }
    print(f"{'case':22s} {'k':>4s} {'dense (us)':>18s} {'sparse (us)':>18s} {'dense/sparse':>13s}")
    for k in args.k:
        b = jnp.asarray(rng.standard_normal((n, k)))
        reference = np.linalg.solve(np.asarray(A), np.asarray(b))
        for name, (dense, sparse) in cases.items():
            err = np.abs(np.asarray(sparse(A, b)) - reference).max()
            assert err < 1e-10 * max(1.0, np.abs(reference).max()), err
            d, d_med = _timed(looped(dense), A, b, reps=R)
            s, s_med = _timed(looped(sparse), A, b, reps=R)
            print(f"{name:22s} {k:4d} {d:8.1f} ({d_med:7.1f}) {s:8.1f} ({s_med:7.1f}) "
                  f"{d / s:13.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
