"""Batched strong RRQR on SHIPS matrices (200 x 100, k = 20) against a SciPy pivoted-QR
loop and against the textbook strong RRQR (a full QR after every swap)."""

import argparse
import json
import pathlib
import platform
import time

import jax
import numpy as np
import scipy.linalg as sl

import jaxident as ji
import jaxident.linalg as L


def textbook_srrqr(S, k, f):
    perm = sl.qr(S, pivoting=True, mode="r")[1]
    swaps = 0
    while True:
        R = sl.qr(S[:, perm], mode="r")[0]
        R11, R12, R22 = R[:k, :k], R[:k, k:], R[k:, k:]
        AB = sl.solve_triangular(R11, R12)
        inv_omega = np.linalg.norm(sl.solve_triangular(R11, np.eye(k)), axis=1)
        gamma = np.linalg.norm(R22, axis=0)
        rho = np.sqrt(AB**2 + (inv_omega[:, None] * gamma[None, :]) ** 2)
        i, j = np.unravel_index(np.argmax(rho), rho.shape)
        if rho[i, j] <= f:
            return perm, swaps
        perm = perm.copy()
        perm[[i, k + j]] = perm[[k + j, i]]
        swaps += 1


def timed(f, *a, reps=3):
    t0 = time.perf_counter()
    out = jax.block_until_ready(f(*a))
    first = time.perf_counter() - t0
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        out = jax.block_until_ready(f(*a))
        best = min(best, time.perf_counter() - t0)
    return out, first, best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--f", type=float, default=1.01)
    ap.add_argument("--textbook", type=int, default=100, help="matrices for the textbook loop")
    args = ap.parse_args()
    k = 20
    keys = jax.random.split(jax.random.key(0), args.n)
    A = jax.jit(jax.vmap(L.testmatrices.ships))(keys).block_until_ready()
    An = np.asarray(A)

    t_qrcp = np.inf
    for _ in range(3):  # best of three, as for the compiled runs
        t0 = time.perf_counter()
        for a in An:
            sl.qr(a, pivoting=True, mode="r")
        t_qrcp = min(t_qrcp, time.perf_counter() - t0)

    method = ji.StrongRRQR(f=args.f)
    static = jax.jit(
        jax.vmap(lambda s: L.column_subset(s, k=k, method=method, metrics=False, throw=False))
    )
    sel, c_static, t_static = timed(static, A)
    traced = jax.jit(
        jax.vmap(
            lambda s: L.column_subset(
                s, k=jax.numpy.int32(k), method=method, metrics=False, throw=False
            )
        )
    )
    sel2, c_traced, t_traced = timed(traced, A)
    assert bool(
        (np.sort(np.asarray(sel.perm)[:, :k], 1) == np.sort(np.asarray(sel2.perm)[:, :k], 1)).all()
    )

    m = min(args.textbook, args.n)
    t0 = time.perf_counter()
    tb = [textbook_srrqr(An[i], k, args.f) for i in range(m)]
    t_text = (time.perf_counter() - t0) * args.n / m
    agree = np.mean(
        [set(tb[i][0][:k]) == set(np.asarray(sel.perm[i, :k]).tolist()) for i in range(m)]
    )

    swaps = np.asarray(sel.swaps)
    row = {
        "machine": f"{platform.processor() or platform.machine()}, {jax.devices()[0].platform}",
        "n": args.n,
        "f": args.f,
        "scipy_qrcp_loop_s": t_qrcp,
        "jax_static_k_compile_s": c_static - t_static,
        "jax_static_k_run_s": t_static,
        "jax_traced_k_compile_s": c_traced - t_traced,
        "jax_traced_k_run_s": t_traced,
        "ratio_static_to_qrcp": t_static / t_qrcp,
        "ratio_traced_to_qrcp": t_traced / t_qrcp,
        "textbook_srrqr_loop_s_extrapolated": t_text,
        "textbook_agreement": float(agree),
        "swaps_mean": float(swaps.mean()),
        "swaps_max": int(swaps.max()),
        "rho_max": float(np.asarray(sel.rho).max()),
        "all_successful": bool((np.asarray(sel.result._value) == 0).all()),
    }
    print(f"strong RRQR, {args.n} SHIPS matrices 200x100, k={k}, f={args.f}")
    print(f"  SciPy qr(pivoting=True) loop          {t_qrcp:7.3f} s  (best of 3)")
    print(
        f"  jaxident jit(vmap), static k          {t_static:7.3f} s  "
        f"(compile {c_static - t_static:5.1f} s, best of 3)  "
        f"ratio {t_static / t_qrcp:4.2f}x the QRCP loop"
    )
    print(
        f"  jaxident jit(vmap), traced k          {t_traced:7.3f} s  "
        f"(compile {c_traced - t_traced:5.1f} s)  ratio {t_traced / t_qrcp:4.2f}x"
    )
    print(
        f"  textbook strong RRQR loop (SciPy)     {t_text:7.3f} s  (extrapolated from {m}; "
        f"same selection in {100 * agree:.0f}%)"
    )
    print(
        f"  swaps: mean {swaps.mean():.2f}, max {swaps.max()};  max rho {row['rho_max']:.4f} <= f"
    )
    out = pathlib.Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "srrqr.json").write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
