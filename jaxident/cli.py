"""The `jaxident` command: `jaxident models`, `jaxident analyze MODEL`."""

import argparse
import json
import sys
import time


METHODS = {"srrqr": "StrongRRQR", "b1": "RRQR", "b3": "GKS", "b4": "LRRQR", "qrcp": "QRCP"}


def _method(args):
    import jaxident as ji

    if args.method == "srrqr":
        return ji.StrongRRQR(f=args.f)
    return getattr(ji, METHODS[args.method])()


def _rank(args):
    import jaxident as ji

    if args.gap:
        return ji.LargestGap()
    if args.atol is not None:
        return ji.AbsoluteTolerance(args.atol)
    return ji.RelativeTolerance(args.rtol)


def cmd_models(args) -> int:
    import jaxident as ji

    for name, desc in ji.models.available().items():
        m = ji.models.load(name)
        print(f"{name:14s} p={m.parameters.p:<3d} {desc}")
    return 0


def cmd_analyze(args) -> int:
    import jax
    import numpy as np

    import jaxident as ji

    try:
        model = ji.models.load(args.model)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    method, rank = _method(args), _rank(args)
    p = model.parameters.p
    if args.k is not None and not 0 <= args.k <= p:
        print(f"error: --k must lie in [0, {p}] for {args.model}", file=sys.stderr)
        return 2
    integrator = ji.Integrator(rtol=args.solver_rtol, atol=args.solver_rtol * 1e-2)

    sens = ji.sensitivity(model, scale=args.scale, integrator=integrator)
    sel = ji.select_parameters(sens, method=method, rank=rank, k=args.k)
    print(f"{type(model).__name__}: {ji.models.available()[args.model.lower()]}")
    print(f"S: {sens.matrix.shape[0]} rows (times x outputs), {p} parameters, scale={args.scale}")
    print(sel)
    report = {"model": args.model, "nominal": sel.to_dict()}

    freq = None
    if args.samples:
        samples = ji.latin_hypercube(jax.random.key(args.seed), model.parameters, args.samples)

        def one(theta):
            s = ji.sensitivity(model, theta, scale=args.scale, integrator=integrator)
            return ji.select_parameters(s, method=method, rank=rank, k=args.k)

        t0 = time.perf_counter()
        res = ji.sweep(
            one,
            samples,
            batch_size=args.batch_size,
            progress=not args.quiet,
            desc=f"{args.model}: {args.samples} LHS samples",
        )
        wall = time.perf_counter() - t0
        freq = ji.identifiability_frequency(res.values)
        ks = np.asarray(res.values.k)[res.ok]
        print()
        print(
            f"Over {args.samples} Latin-hypercube samples of the parameter box "
            f"({res.n_failed} failed; compile {res.compile_seconds:.1f}s, total {wall:.1f}s):"
        )
        w = max(len(n) for n in model.parameters.names)
        lo, up = np.asarray(model.parameters.lower), np.asarray(model.parameters.upper)
        box = [f"[{a:.4g}, {b:.4g}]" for a, b in zip(lo, up)]
        wb = max(len(b) for b in box)
        for i, name in enumerate(model.parameters.names):
            bar = "#" * int(round(30 * freq[name]))
            print(f"  {name:<{w}} {box[i]:<{wb}}  identifiable in {100 * freq[name]:6.2f}% {bar}")
        if ks.size:
            vals, counts = np.unique(ks, return_counts=True)
            dist = ", ".join(f"k={v}: {c}" for v, c in zip(vals, counts))
            print(f"  numerical rank over samples: {dist}")
        report["samples"] = {
            "n": args.samples,
            "failed": res.n_failed,
            "frequency": freq,
            "rank_counts": {int(v): int(c) for v, c in zip(*np.unique(ks, return_counts=True))},
        }

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        from . import plot

        fig = plot.analysis(
            sel, freq, n=args.samples, title=f"{args.model}: {type(method).__name__}"
        )
        fig.savefig(args.plot, dpi=130)
        print(f"\nfigure written to {args.plot}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
        print(f"report written to {args.json}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxident", description="Parameter identifiability analysis of dynamical models."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="list the built-in models").set_defaults(func=cmd_models)

    a = sub.add_parser(
        "analyze",
        help="which parameters of a built-in model are identifiable",
        description="Sensitivity matrix at the nominal parameters, column subset selection "
        "(Pearce et al. 2022), and optionally the selection frequency over Latin-hypercube "
        "samples of the parameter box.",
    )
    a.add_argument("model", help="a built-in model (see `jaxident models`)")
    a.add_argument(
        "--method",
        choices=list(METHODS),
        default="srrqr",
        help="srrqr = strong RRQR (Alg. 4.4), b1 = RRQR (4.1), b4 = L-RRQR (4.2), "
        "b3 = GKS (4.3), qrcp = QR with column pivoting",
    )
    a.add_argument(
        "--k",
        type=int,
        default=None,
        help="number of identifiable parameters (default: the numerical rank)",
    )
    a.add_argument(
        "--rtol", type=float, default=None, help="relative rank tolerance (default max(n,p)*eps)"
    )
    a.add_argument("--atol", type=float, default=None, help="absolute rank tolerance")
    a.add_argument("--gap", action="store_true", help="rank at the largest singular-value gap")
    a.add_argument("--f", type=float, default=1.01, help="strong RRQR parameter f >= 1")
    a.add_argument("--scale", choices=["none", "relative"], default="none")
    a.add_argument("--solver-rtol", type=float, default=1e-8, help="ODE solver rtol")
    a.add_argument(
        "--samples", type=int, default=0, help="Latin-hypercube samples of the parameter box"
    )
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--batch-size", type=int, default=512)
    a.add_argument("--plot", default=None, help="write a summary figure (PNG, PDF, ...)")
    a.add_argument("--json", default=None, help="write the report as JSON")
    a.add_argument("--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=cmd_analyze)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
