"""Worst perturbation direction of the 2-D Brusselator (n = 512 initial-condition
parameters, response: the full state at t = 1): the SCE estimate from q adjoint solves
(`jax.vjp` through diffrax) against the full forward sensitivity matrix (`jax.jacfwd`, 512
tangents) followed by its SVD."""

import argparse
import json
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxident as ji
from jaxident._identify._perturb import _response_fn


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
    ap.add_argument("--q", type=int, default=12)
    args = ap.parse_args()
    model = ji.models.load("brusselator_2d")
    aug = ji.free_initial_state(model)
    w = aug.parameters.nominal
    n = aug.n_states
    P = jnp.eye(w.shape[0])[:, :n]

    @jax.jit
    def adjoint(key):
        F = _response_fn(aug, 1.0, ji.Response.state, model.integrator, throw=False)
        _, vjp = jax.vjp(lambda v: F(v)[0], w)
        wd = ji.linalg.worst_direction(lambda z: vjp(z)[0], n, key, args.q, P)
        return wd.estimate, wd.direction

    @jax.jit
    def forward(w):
        F = _response_fn(aug, 1.0, ji.Response.state, model.integrator, forward=True,
                         throw=False)  # fmt: skip
        J = jax.jacfwd(lambda v: F(v)[0])(w)[:, :n]
        _, s, Vt = jnp.linalg.svd(J)
        return s[0], Vt[0]

    (est, u1), c_adj, t_adj = timed(adjoint, jax.random.key(0))
    (s1, v1), c_fwd, t_fwd = timed(forward, w)
    cos = float(jnp.abs(jnp.dot(u1[:n], v1)))
    res = {
        "machine": platform.processor() or platform.machine(),
        "devices": [str(d) for d in jax.devices()],
        "q": args.q,
        "adjoint_seconds": t_adj,
        "adjoint_compile_and_first_run": c_adj,
        "forward_seconds": t_fwd,
        "forward_compile_and_first_run": c_fwd,
        "speedup": t_fwd / t_adj,
        "E_estimate": float(est),
        "sigma_max_exact": float(s1),
        "cos_angle_estimated_vs_exact_direction": cos,
    }
    print(f"q = {args.q} adjoint solves: {t_adj:.3f} s (first call {c_adj:.1f} s)")
    print(f"jacfwd (512 tangents) + SVD: {t_fwd:.3f} s (first call {c_fwd:.1f} s)")
    print(
        f"ratio: {t_fwd / t_adj:.1f}x;  E = {float(est):.4g} vs sigma_max = {float(s1):.4g}; "
        f"|cos(u1, v1)| = {cos:.4f}"
    )
    out = pathlib.Path(__file__).parent / "results" / "worst_direction.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
