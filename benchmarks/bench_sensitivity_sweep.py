"""Sensitivity sweep of the SVIR model: jaxident (jit + vmap + forward mode through
diffrax) against SciPy solve_ivp + central finite differences, one sample at a time."""

import argparse
import json
import pathlib
import platform
import time

import jax
import numpy as np
from scipy.integrate import solve_ivp

import jaxident as ji


N_POP = 332.6


def rhs(t, x, p):
    S, V, I, R = x
    b, a, nu, g = p
    return [
        -b * S * I / N_POP - nu * S,
        -a * b * I * V / N_POP + nu * S,
        b * S * I / N_POP + a * b * I * V / N_POP - g * I,
        g * I,
    ]


def scipy_fd(theta, ts, method, rtol, atol, rel_h):
    def out(th):
        sol = solve_ivp(
            rhs,
            (0.0, ts[-1]),
            [295.1, 0.0, 1.0, 0.0],
            args=(th,),
            t_eval=ts,
            rtol=rtol,
            atol=atol,
            method=method,
        )
        return sol.y[2]

    cols = []
    for j in range(theta.size):
        h = rel_h * abs(theta[j])
        tp, tm = theta.copy(), theta.copy()
        tp[j] += h
        tm[j] -= h
        cols.append((out(tp) - out(tm)) / (2 * h))
    return np.stack(cols, axis=1)


def complex_step(theta, ts):
    cols = []
    for j in range(theta.size):
        th = theta.astype(complex)
        th[j] += 1e-30j
        sol = solve_ivp(
            rhs,
            (0.0, ts[-1]),
            np.array([295.1, 0, 1, 0], complex),
            args=(th,),
            t_eval=ts,
            rtol=1e-13,
            atol=1e-13,
            method="DOP853",
        )
        cols.append(sol.y[2].imag / 1e-30)
    return np.stack(cols, axis=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--atol", type=float, default=1e-10)
    args = ap.parse_args()

    model = ji.models.load("svir")
    ts = np.asarray(model.times)
    samples = ji.latin_hypercube(jax.random.key(0), model.parameters, args.n)
    integ = ji.Integrator(rtol=args.rtol, atol=args.atol)

    def fn(th):
        return ji.sensitivity_matrix(model, th, integrator=integ)

    t0 = time.perf_counter()
    res = ji.sweep(fn, samples, batch_size=args.batch_size, progress=False)
    t_first = time.perf_counter() - t0
    compile_s = res.compile_seconds
    t_jax = np.inf
    for _ in range(3):  # the compiled sweep, best of three (the cache skips compilation)
        res = ji.sweep(fn, samples, batch_size=args.batch_size, progress=False)
        assert res.compile_seconds == 0.0
        t_jax = min(t_jax, res.run_seconds)

    thetas = np.asarray(samples)
    timings, errors = {}, {}
    refs = [complex_step(thetas[i], ts) for i in range(5)]
    for method in ["RK45", "DOP853"]:
        t0 = time.perf_counter()
        out = [scipy_fd(th, ts, method, args.rtol, args.atol, 1e-6) for th in thetas]
        timings[method] = time.perf_counter() - t0
        errors[method] = max(
            np.abs(out[i] - refs[i]).max() / np.abs(refs[i]).max() for i in range(5)
        )
    err_jax = max(np.abs(res.values[i] - refs[i]).max() / np.abs(refs[i]).max() for i in range(5))

    row = {
        "machine": f"{platform.processor() or platform.machine()}, {jax.devices()[0].platform}",
        "n": args.n,
        "jax_compile_s": compile_s,
        "jax_first_call_s": t_first,
        "jax_run_s": t_jax,
        "scipy_rk45_fd_s": timings["RK45"],
        "scipy_dop853_fd_s": timings["DOP853"],
        "speedup_vs_rk45": timings["RK45"] / t_jax,
        "speedup_vs_dop853": timings["DOP853"] / t_jax,
        "max_rel_error_jax": err_jax,
        "max_rel_error_rk45_fd": errors["RK45"],
        "max_rel_error_dop853_fd": errors["DOP853"],
        "failed": res.n_failed,
    }
    print(f"SVIR sensitivity sweep, {args.n} LHS samples, rtol={args.rtol}, atol={args.atol}")
    print(
        f"  jaxident   compile {compile_s:7.2f} s   run {t_jax:7.3f} s   "
        f"max rel error {err_jax:.1e}   (first call incl. compile {t_first:.2f} s)"
    )
    for m in ["RK45", "DOP853"]:
        print(
            f"  SciPy {m:6s} + central FD      run {timings[m]:7.3f} s   "
            f"max rel error {errors[m]:.1e}   ratio {timings[m] / t_jax:6.1f}x "
            f"({timings[m] / t_first:.1f}x counting compilation)"
        )
    out = pathlib.Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "sensitivity_sweep.json").write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
