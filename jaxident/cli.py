"""The `jaxident` command: `jaxident models`, `jaxident analyze MODEL | problem.yaml |
file.py:Class`, `jaxident fit problem.yaml --starts N`, `jaxident design problem.yaml
--budget N`."""

import argparse
import importlib.util
import math
import os
import sys
import tempfile
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
    print("\nPEtab problems shipped with jaxident (measured data; the petab extra), by name:")
    for short, full in _shipped().items():
        print(f"{short:14s} {full}")
    return 0


def _shipped() -> dict[str, str]:
    """The shipped PEtab problems by the names the commands take: `{"boehm":
    "Boehm_JProteomeRes2014", ...}` (`ji.data.petab_problem`'s short names)."""
    import jaxident as ji

    return {full.split("_")[0].lower(): full for full in ji.data.PETAB_PROBLEMS}


class _UsageError(Exception):
    """A bad command line, reported as one line with exit status 2."""


def _writable_file(path: str, flag: str) -> None:
    """Open the file for appending (and remove it again if it was not there): the only
    test of writability that root, read-only mounts and ACLs all answer truthfully."""
    if os.path.isdir(path):
        raise _UsageError(f"{flag} {path} is a directory; give a file name.")
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        raise _UsageError(f"{flag} {path} cannot be written: {e.strerror}.") from None
    if not existed:
        os.remove(path)


def _check_outputs(args, out_is_file: bool = False) -> None:
    """`--plot`, `--json` and `--out`: names (not empty, not `-`: the report's text is
    what goes to stdout), all different, a figure format matplotlib writes, each
    writable before any work (`--out` a file where `out_is_file`, else a folder)."""
    given = (("--plot", args.plot), ("--json", args.json), ("--out", getattr(args, "out", None)))
    for flag, v in given:
        if v is not None and v.strip() in ("", "-"):
            what = "file" if flag != "--out" or out_is_file else "folder"
            raise _UsageError(
                f"{flag} needs a {what} name, got {v!r} (the report's text goes to stdout)."
            )
    paths = [(f, v) for f, v in given if v]
    for i, (f1, v1) in enumerate(paths):
        for f2, v2 in paths[i + 1 :]:
            if os.path.realpath(v1) == os.path.realpath(v2):
                raise _UsageError(f"{f1} and {f2} name one file ({v1}); give two paths.")
    if out_is_file and getattr(args, "out", None):
        _writable_file(args.out, "--out")
    if args.plot:
        _writable_file(args.plot, "--plot")
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        formats = FigureCanvasAgg(Figure()).get_supported_filetypes()
        ext = os.path.splitext(args.plot)[1].lstrip(".").lower()
        if ext not in formats:
            raise _UsageError(
                f"--plot {args.plot}: unknown figure format {ext!r}; use one of "
                f"{', '.join(sorted(formats))}."
            )
    if args.json:
        _writable_file(args.json, "--json")


def _require(checks) -> None:
    """The first message whose condition fails, as a usage error."""
    for ok, msg in checks:
        if not ok:
            raise _UsageError(msg)


def _common_checks(args) -> list:
    """The checks of the arguments every command that solves shares."""
    return [
        (0 <= args.seed < 2**63, f"--seed must lie in [0, 2**63), got {args.seed}."),
        (
            math.isfinite(args.solver_rtol) and 0 < args.solver_rtol < 1,
            f"--solver-rtol must lie in (0, 1), got {args.solver_rtol}.",
        ),
    ]


def _fits_in_memory(n: int, flag: str, what: str) -> tuple:
    """A check that `n` rows of `what` (a few dozen numbers each) fit in this machine's
    memory, as a `_require` pair."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): no bound
        return True, ""
    most = memory // (8 * 64)
    return (
        n <= most,
        f"{flag} {n}: {n:.3g} {what} do not fit in this machine's memory (at most {most:.3g}).",
    )


def _check_fit(args, starts: int, flag: str) -> None:
    """The arguments of a multi-start fit, before the problem is loaded."""
    _require(
        [
            (starts >= 1, f"{flag} must be positive, got {starts}."),
            _fits_in_memory(starts, flag, "starts"),
            (
                args.max_steps is None or args.max_steps >= 1,
                f"--max-steps must be >= 1, got {args.max_steps}.",
            ),
            (
                args.optimizer != "fides" or importlib.util.find_spec("fides") is not None,
                "--optimizer fides needs the fides package: pip install 'jaxident[fides]'.",
            ),
            *_common_checks(args),
        ]
    )


def _validate(args, p: int) -> None:
    """Every argument checked before any computation, so that a bad value costs nothing."""
    if args.k is not None and not 0 <= args.k <= p:
        raise _UsageError(f"--k must lie in [0, {p}] for {args.model}, got {args.k}.")
    checks = [
        (args.samples >= 0, f"--samples must be >= 0, got {args.samples}."),
        _fits_in_memory(args.samples, "--samples", "samples"),
        (
            args.max_steps is None or bool(args.fit),
            "--max-steps sets the steps of the fits of --fit; give --fit N too.",
        ),
        (
            args.optimizer is None or bool(args.fit),
            "--optimizer sets how the fits of --fit step; give --fit N too.",
        ),
        (
            not args.hierarchical or bool(args.fit),
            "--hierarchical sets how the fits of --fit step; give --fit N too.",
        ),
        (
            args.free_initial_states is None or bool(args.free_initial_states.strip()),
            "--free-initial-states needs state names (comma separated) or all.",
        ),
        (args.batch_size >= 1, f"--batch-size must be >= 1, got {args.batch_size}."),
        (args.f >= 1, f"--f must be >= 1 (strong RRQR bound), got {args.f}."),
        *_common_checks(args),
        (
            math.isfinite(args.threshold) and args.threshold > 0,
            f"--threshold must be a positive number of decades, got {args.threshold}.",
        ),
    ]
    _require(checks)
    given = [f for f, v in (("--rtol", args.rtol), ("--atol", args.atol)) if v is not None]
    given += ["--gap"] if args.gap else []
    if len(given) > 1:
        raise _UsageError(f"{' and '.join(given)}: give one rank rule, not {len(given)}.")
    for flag, make in (("--rtol/--atol", _rank), ("--f", _method)):
        try:
            make(args)
        except ValueError as e:
            raise _UsageError(f"{flag}: {e}") from None
    if args.fit:
        _check_fit(args, args.fit, "--fit")
    _check_outputs(args)
    if args.out:
        if not args.samples:
            raise _UsageError("--out keeps the results of --samples; give --samples too.")
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise _UsageError(f"--out {args.out} is a file; give a folder for the samples.")
        try:
            os.makedirs(args.out, exist_ok=True)
            tempfile.TemporaryFile(dir=args.out).close()
        except OSError as e:
            raise _UsageError(f"--out {args.out} cannot be written: {e.strerror}.") from None


def _load_model_file(spec: str):
    """`path/to/file.py:ClassName`: the user's own model class, instantiated with its
    defaults (the file is the user's code and runs as such)."""

    path, _, cls = spec.rpartition(":")
    if not os.path.isfile(path):
        raise _UsageError(f"{path}: no such file.")
    spec_ = importlib.util.spec_from_file_location(f"_jaxident_user_{os.getpid()}", path)
    module = importlib.util.module_from_spec(spec_)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec_.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    found = [n for n, v in vars(module).items() if isinstance(v, type) and n[0] != "_"]
    if not hasattr(module, cls):
        raise _UsageError(f"{path} has no {cls!r}; it defines {found}.")
    if not isinstance(getattr(module, cls), type):
        raise _UsageError(
            f"{path}:{cls} is a {type(getattr(module, cls)).__name__}, not a model class; "
            f"its classes are {found}."
        )
    try:
        return getattr(module, cls)()
    except TypeError as e:
        raise _UsageError(f"{cls}() needs arguments ({e}); give every field a default.") from None


def load_target(name: str, estimate_noise: bool = False):
    """A built-in model name, a PEtab problem (`.yaml`; with `estimate_noise`, its
    noise-only parameters estimated too, as for a fit) or `file.py:Class`."""
    import jaxident as ji

    folder = f"{name} is a directory; give the PEtab problem's YAML file in it."
    if name != name.strip() and not os.path.exists(name):
        raise _UsageError(
            f"{name!r} starts or ends with a space: did you mean {name.strip()!r}? (quote "
            "a path that has spaces in it)"
        )
    if name.lower().endswith((".yaml", ".yml")):
        if os.path.isdir(name):
            raise _UsageError(folder)
        if not os.path.isfile(name):
            raise _UsageError(f"{name}: no such file.")
        try:
            return ji.petab.load(name, estimate_noise=estimate_noise)
        except (ValueError, ImportError) as e:
            raise _UsageError(str(e)) from None
    if ":" in name and name.rpartition(":")[0].endswith(".py"):
        return _load_model_file(name)
    if name not in ji.models.available():
        try:  # a shipped PEtab problem by name (boehm, fujita, ...)
            path = ji.data.petab_problem(name)
        except ValueError:
            pass
        else:
            return load_target(path, estimate_noise)
    try:
        return ji.models.load(name)
    except ValueError as e:
        if os.path.isdir(name):
            raise _UsageError(folder) from None
        shipped = ", ".join(_shipped())
        raise _UsageError(
            f"{e} Give a built-in name, a shipped PEtab problem ({shipped}), a PEtab "
            "problem (problem.yaml) or a model class in a file (my_model.py:MyModel)."
        ) from None


def _integrator(model, rtol: float):
    """The model's own solver (a stiff one where it declares it), at `rtol`."""
    import jaxident as ji

    return ji.Integrator(model.integrator.solver, rtol=rtol)  # (atol: per state, rtol/100)


def _optimizer(args):
    """`--optimizer` as the optimizer object (the CLI's strings stop here)."""
    import jaxident as ji

    hier = bool(getattr(args, "hierarchical", False))
    return (
        ji.Fides(hierarchical=hier) if args.optimizer == "fides" else ji.FisherLM(hierarchical=hier)
    )


def _fit(args, problem, starts: int):
    import jax

    import jaxident as ji

    optimizer = _optimizer(args)
    try:
        optimizer.inner(problem)
    except ValueError as e:  # --hierarchical on a problem without scalings
        raise _UsageError(str(e).replace("hierarchical=True", "--hierarchical")) from None
    try:
        return ji.estimate(
            problem,
            starts=starts,
            key=jax.random.key(args.seed),
            max_steps=args.max_steps,
            integrator=_integrator(problem.model, args.solver_rtol),
            optimizer=optimizer,
            progress=not args.quiet,
            out=getattr(args, "out", None),
        )
    except ValueError as e:  # a kept file of another multi-start, or a damaged one
        if "out=" not in str(e):
            raise
        raise _UsageError(str(e).replace("give another out=", "give another --out")) from None
    except RuntimeError as e:  # every fit failed: the reason, in one line
        raise _UsageError(
            " ".join(str(e).replace(" (use throw=False to get the fits)", "").split())
        ) from None


def _intervals(args, problem, theta, rep):
    """The report with the 95% profile-likelihood intervals at the best fit of the
    parameters `--profile` names (every one; the flagged ones: not identifiable, weak,
    undecided or practically non-identifiable by their standard deviation; none)."""
    import numpy as np

    import jaxident as ji

    if args.profile == "none":
        return rep
    names = list(problem.parameters.names)
    if args.profile == "flagged":
        flagged = set(rep.non_identifiable) | set(rep.undecided) | set(rep.weakly_identifiable)
        flagged |= set(rep.practically_non_identifiable)
        names = [n for n in names if n in flagged]
    if not names:
        return rep
    found = ji.likelihood_intervals(
        problem,
        theta,
        names,
        integrator=_integrator(problem.model, args.solver_rtol),
        optimizer=_optimizer(args),
        progress=not args.quiet,
    )
    at = next(iter(found.values())).at
    if not np.allclose(at, np.asarray(theta, float), rtol=0, atol=1e-12):
        # the profiles found a better optimum and refitted (ji.likelihood_intervals
        # warned): the report is taken again there, so that it and its intervals agree
        print("\nThe profiles found a better fit: the report below is taken there.")
        rep = _report(args, problem, at)
    return rep.with_intervals(found)


def _report(args, problem, theta):
    """`ji.analyze` of a problem at `theta` with the command line's choices."""
    import jaxident as ji

    return ji.analyze(  # (its solves compiled for an answer computed once: ji.analyze's own)
        problem,
        theta,
        method=_method(args),
        rank=_rank(args),
        threshold=args.threshold,
        integrator=_integrator(problem.model, args.solver_rtol),
        generic=args.generic,
    )


def _analyze_problem(args, problem) -> int:

    if args.samples:
        raise _UsageError(
            "--samples is for models; a PEtab problem is analysed at one point (its "
            "nominal values, or the best fit with --fit)."
        )
    if args.scale != "none":
        raise _UsageError(
            "--scale is for models; a PEtab problem's sensitivities are per unit of each "
            "parameter on its estimation scale (log10 in the parameter table: relative)."
        )
    _validate(args, problem.parameters.p)
    t0 = time.perf_counter()
    theta, report = None, {}
    if args.fit:
        fit = _fit(args, problem, args.fit)
        theta, report["fit"] = fit.theta, fit.to_dict()
        if fit.interrupted:  # Ctrl-C: the fits so far, said to be what they are
            print(fit.summary(errors=False))
            report["at"] = None
            _write(args, report, lambda: fit.plot())
            return _interrupted(args, fit)
        print(fit.summary(errors=False))
        print(
            f"\nAnalysed at the best fit (log-likelihood {fit.log_likelihood:.6g}, reached "
            f"within {fit.fits.tol:g} by {fit.n_at_best} of {args.fit} starts); its "
            "standard errors are the report's, below.\n"
        )
    else:
        print("Analysed at the nominal values (use --fit N to analyse at the best of N fits).\n")
    rep = _report(args, problem, theta)
    if args.fit:
        rep = _intervals(args, problem, theta, rep).with_fit(fit)  # (JSON: "intervals")
    print(rep)
    print(f"({time.perf_counter() - t0:.1f}s)")
    report["at"] = "best fit" if args.fit else "nominal"
    _write(args, {**report, **rep.to_dict()}, lambda: rep.plot())
    return 0


def cmd_fit(args) -> int:
    import jaxident as ji

    _check_fit(args, args.starts, "--starts")
    _check_outputs(args, out_is_file=True)
    problem = load_target(args.model, estimate_noise=True)
    if not isinstance(problem, ji.Problem):
        raise _UsageError(
            "fit needs data: give a PEtab problem (problem.yaml); in Python, "
            "ji.estimate(ji.Problem.from_model(model, data, times, sigma), starts=N)."
        )
    t0 = time.perf_counter()
    fit = _fit(args, problem, args.starts)
    print(fit)
    print(f"({time.perf_counter() - t0:.1f}s)")
    _write(args, fit.to_dict(), lambda: fit.plot())
    return _interrupted(args, fit) if fit.interrupted else 0


def _interrupted(args, fit) -> int:
    """Ctrl-C during the fits: say so (the files written say so too: "interrupted":
    true, the planned starts), where the fits are kept, and exit as an interrupted
    command does (130)."""
    n, planned = len(fit.fits.nll), fit.fits.planned
    kept = getattr(args, "out", None)
    where = f"; {kept} keeps them: run the same command again to go on" if kept else ""
    print(
        f"jaxident: interrupted after {n} of {planned} starts: the results above and in "
        f"the files written are of those {n}{where}.",
        file=sys.stderr,
    )
    return 130


def _design_candidates(args, problem):
    """`--observe`, `--times`, `--sigma` and `--transform` as `ji.Candidate`s (the
    CLI's strings stop here)."""
    import numpy as np

    import jaxident as ji

    model = problem.model
    if args.observe == "states":
        names = list(model.state_names or ())
        if not names:
            raise _UsageError(
                f"{type(model).__name__} has no state_names: name what to observe with "
                "--observe (outputs, or names and expressions, comma separated)."
            )
    elif args.observe == "outputs":
        names = list(problem.output_names)
    else:
        names = [n.strip() for n in args.observe.split(",") if n.strip()]
    finite = np.asarray(problem.times)[np.isfinite(np.asarray(problem.times))]
    start, end, n = float(model.t0), float(finite.max()) if finite.size else 1.0, 21
    if args.times:
        try:
            a, b, c = args.times.split(":")
            start, end, n = float(a), float(b), int(c)
        except ValueError:
            raise _UsageError(f"--times START:END:N, got {args.times!r}.") from None
    _require([(math.isfinite(start) and math.isfinite(end) and start < end and n >= 1,
               f"--times needs START < END and N >= 1, got {args.times!r}."),
              (math.isfinite(args.sigma) and args.sigma > 0,
               f"--sigma must be positive, got {args.sigma}.")])  # fmt: skip
    window = (start, end) if args.refine else None
    try:
        return [ji.Candidate(o, np.linspace(start, end, n), window=window, sigma=args.sigma,
                             transform=args.transform) for o in names]  # fmt: skip
    except ValueError as e:
        raise _UsageError(str(e)) from None


def cmd_design(args) -> int:
    import jax

    import jaxident as ji

    _require([(args.budget >= 1, f"--budget must be at least 1, got {args.budget}."),
              (args.samples >= 0, f"--samples must be >= 0, got {args.samples}."),
              *_common_checks(args)])  # fmt: skip
    _check_outputs(args)
    problem = load_target(args.model)
    if not isinstance(problem, ji.Problem):
        problem = ji.Problem.from_model(problem)
    cands = _design_candidates(args, problem)
    criterion = {"d": ji.DOptimal(), "e": ji.EOptimal()}.get(args.criterion)
    if criterion is None:
        names = [n.strip() for n in (args.names or "").split(",") if n.strip()] or None
        criterion = ji.AOptimal(names)
    t0 = time.perf_counter()
    try:
        d = ji.design(
            problem, cands, args.budget, criterion=criterion,
            samples=args.samples or None, key=jax.random.key(args.seed),
            summary=ji.WorstCase() if args.worst_case else ji.Average(),
            replicates=args.replicates, integrator=_integrator(problem.model, args.solver_rtol),
            progress=not args.quiet,
        )  # fmt: skip
    except ValueError as e:
        raise _UsageError(str(e)) from None
    print(d)
    print(f"({time.perf_counter() - t0:.1f}s)")
    _write(args, d.to_dict(), lambda: d.plot())
    if args.petab:
        paths = d.to_petab(args.petab)
        print(f"PEtab tables of the proposed experiment written to {', '.join(paths.values())}")
    return 0


def _free_initial_states(model, spec: str):
    """The model with the initial values of the states named in `spec` (comma
    separated, or `all`) as parameters."""
    import jaxident as ji

    if not isinstance(model, ji.ODEModel):
        raise _UsageError(
            f"--free-initial-states needs an ODE model; {type(model).__name__} is not one."
        )
    if spec.strip().lower() == "all":
        return ji.free_initial_state(model)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    known = model.state_names
    if not known:
        raise _UsageError(
            f"{type(model).__name__} has no state_names (a class attribute, one name per "
            "state); give --free-initial-states all, or name the states in the model."
        )
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise _UsageError(
            f"--free-initial-states: unknown state(s) {unknown or spec!r}; "
            f"{type(model).__name__}'s states are {', '.join(known)} (or give all)."
        )
    return ji.free_initial_state(model, states=names)


def _write(args, report: dict, figure) -> None:
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        figure().savefig(args.plot, dpi=130)
        print(f"\nfigure written to {args.plot}")
    if args.json:
        from jaxident._runtime._files import strict_json

        with open(args.json, "w") as fh:
            fh.write(strict_json(report, indent=2))
        print(f"report written to {args.json}")


def cmd_analyze(args) -> int:
    import numpy as np

    import jaxident as ji
    from jaxident._model._checks import n_outputs

    # a fit estimates every parameter the PEtab file estimates, noise ones included
    model = load_target(args.model, estimate_noise=bool(args.fit))
    if isinstance(model, ji.Problem):
        if args.free_initial_states:
            raise _UsageError(
                "--free-initial-states is for models; in a PEtab problem, estimate the "
                "initial values as parameters (the condition or parameter table)."
            )
        return _analyze_problem(args, model)
    title = type(model).__name__
    if args.free_initial_states:
        model = _free_initial_states(model, args.free_initial_states)
        title += f" (initial {args.free_initial_states} unknown)"
    p = model.parameters.p
    _validate(args, p)
    method, rank = _method(args), _rank(args)
    if args.fit:
        raise _UsageError(
            "--fit needs data: give a PEtab problem (problem.yaml); a model is analysed at "
            "its nominal values."
        )
    integrator = _integrator(model, args.solver_rtol)

    def one(theta):
        s = ji.sensitivity(model, theta, scale=args.scale, integrator=integrator)
        return ji.select_parameters(s, method=method, rank=rank, k=args.k)

    # the selection at the nominal values is the report's own (one compiled kernel for
    # both) unless the flags ask for another matrix or a sweep
    own = bool(args.samples) or args.k is not None or args.scale != "none"
    sel, swept = _nominal_and_samples(args, model, one) if own else (None, None)
    about = ji.models.available().get(args.model.lower(), model.description or args.model)
    print(f"{title}: {about}")
    n_rows = len(np.asarray(model.times)) * n_outputs(model)
    rep = ji.analyze(
        model,
        method=method,
        rank=rank,
        threshold=args.threshold,
        integrator=integrator,
        name=title,
        generic=args.generic,
    )
    sel = rep.selection if sel is None else sel
    print(f"S: {n_rows} rows (times x outputs), {p} parameters, scale={args.scale}")
    print(sel)
    print()
    print(rep)
    report = {"model": args.model, "nominal": sel.to_dict(), "report": rep.to_dict()}

    freq = None
    if swept is not None:
        freq, report["samples"] = _sample_summary(args, model, *swept)

    from . import plot

    title = f"{args.model}: {type(method).__name__}"
    _write(args, report, lambda: plot.analysis(sel, freq, n=args.samples, title=title))
    return 0


def _nominal_and_samples(args, model, one) -> tuple:
    """The selection `one(theta)` at the nominal values and, with `--samples`, at every
    Latin-hypercube sample, by one compiled program (the nominal point is the sweep's
    first row). Returns the nominal selection and `(sweep, values, wall time)` of the
    samples, or `None` without samples."""
    import jax
    import numpy as np

    import jaxident as ji
    from jaxident._runtime._config import answering_once

    nominal = np.asarray(model.parameters.nominal, dtype=float)[None]
    if not args.samples:
        with answering_once():  # this process ends with the answer: compile for it
            return one(nominal[0]), None
    samples = ji.latin_hypercube(jax.random.key(args.seed), model.parameters, args.samples)
    t0 = time.perf_counter()
    res = ji.sweep(
        one,
        np.concatenate([nominal, np.asarray(samples)]),
        batch_size=args.batch_size,
        progress=not args.quiet,
        out_dir=args.out,
        desc=f"{args.model}: nominal and {args.samples} LHS samples",
    )
    wall = time.perf_counter() - t0
    if not res.ok[0]:
        with answering_once():  # raises the solve's own error at the nominal values
            one(nominal[0])
    values = jax.tree.map(lambda x: x[1:], res.values)
    return jax.tree.map(lambda x: x[0], res.values), (res, values, wall)


def _sample_summary(args, model, res, values, wall) -> tuple:
    """Prints the selection frequencies over the samples (rows 1: of the sweep `res`,
    whose `values` they are); returns them and their part of the JSON report."""
    import numpy as np

    import jaxident as ji

    ok = np.asarray(res.ok[1:])
    freq = ji.identifiability_frequency(values)
    ks = np.asarray(values.k)[ok]
    print()
    print(
        f"Over {args.samples} Latin-hypercube samples of the parameter box "
        f"({int((~ok).sum())} failed; compile {res.compile_seconds:.1f}s, total {wall:.1f}s "
        f"on {len(res.devices)} device(s)):"
    )
    names = model.parameters.names
    lo, up = np.asarray(model.parameters.lower), np.asarray(model.parameters.upper)
    box = [f"[{a:.4g}, {b:.4g}]" for a, b in zip(lo, up)]
    w, wb = max(map(len, names)), max(map(len, box))
    for name, b in zip(names, box):
        bar = "#" * int(round(30 * freq[name]))
        extra = ""
        if freq.non_identifiable and freq.non_identifiable[name] > 0:
            extra = f"  (in a non-identifiable group in {100 * freq.non_identifiable[name]:.0f}%)"
        print(f"  {name:<{w}} {b:<{wb}}  selected in {100 * freq[name]:6.2f}% {bar}{extra}")
    for group, kept, f in freq.groups:
        print(
            f"  {{{', '.join(group)}}}: non-identifiable together in {100 * f:.0f}% of the "
            f"samples; the selection keeps {kept} of them there, which ones is arbitrary"
        )
    vals, counts = np.unique(ks, return_counts=True)
    if ks.size:
        what = "k chosen by hand" if args.k is not None else "numerical rank over samples"
        print(f"  {what}: {', '.join(f'k={v}: {c}' for v, c in zip(vals, counts))}")
    return freq, {
        "n": args.samples,
        "failed": int((~ok).sum()),
        "frequency": dict(freq),
        "groups": [
            {"parameters": list(g), "selected": kept, "fraction": f} for g, kept, f in freq.groups
        ],
        "rank_counts": {int(v): int(c) for v, c in zip(vals, counts)},
    }


def _fit_and_profile_flags(parser) -> None:
    """`--fit` and `--profile`: a fit first, and which parameters it profiles."""
    parser.add_argument(
        "--fit",
        type=int,
        default=0,
        metavar="N",
        help="a PEtab problem: estimate it from N Latin-hypercube starts first (every "
        "parameter the file estimates, noise ones included) and analyse at the best fit, "
        "with the profile-likelihood intervals of the parameters --profile names (default: "
        "at the nominal values, noise parameters held)",
    )
    parser.add_argument(
        "--profile",
        choices=("all", "flagged", "none"),
        default="all",
        help="with --fit: the parameters whose 95%% profile-likelihood intervals are "
        "computed at the best fit and flag practical identifiability: all (default), those "
        "the standard deviations flag, or none",
    )


def _fit_flags(parser, when: str) -> None:
    """`--max-steps` and `--optimizer`, the flags of a multi-start fit (`when`: where
    they apply)."""
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help=f"steps per fit ({when}default 256, with --optimizer fides 1,000)",
    )
    parser.add_argument(
        "--optimizer",
        choices=("lm", "fides"),
        default=None,
        help="how each fit steps: lm (default: the compiled Levenberg-Marquardt, fast per "
        "start) or fides (fides' trust region: slower per start, leaves plateaus where lm "
        "stops; pip install 'jaxident[fides]')",
    )
    parser.add_argument(
        "--hierarchical",
        action="store_true",
        help="solve the observable scalings, offsets and noise scales (parameters that "
        "multiply whole observables or noise levels, or are added to whole linear observables, "
        "and enter nothing else) in closed form at every step; the optimizer steps in the "
        "other parameters",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxident", description="Parameter identifiability analysis of dynamical models."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="list the built-in models").set_defaults(func=cmd_models)
    _analyze_parser(sub)
    _fit_parser(sub)
    _design_parser(sub)
    return parser


def _analyze_parser(sub) -> None:
    a = sub.add_parser(
        "analyze",
        help="which parameters of a model or a PEtab problem are identifiable",
        description="The identifiability report at the nominal parameters (rank, every "
        "non-identifiable parameter in dependent sets, identifiable combinations, column "
        "subset selection after Pearce et al. 2022, practical identifiability from the "
        "noise model), and for a model optionally the selection frequency over "
        "Latin-hypercube samples of the parameter box.",
    )
    a.add_argument(
        "model",
        help="a built-in model (see `jaxident models`), a PEtab problem (problem.yaml) or "
        "a model class in a Python file (my_model.py:MyModel)",
    )
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
        "--rtol",
        type=float,
        default=None,
        help="relative rank tolerance (default: max(n, p) eps, never below the accuracy of "
        "the sensitivities)",
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
    a.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="keep the --samples results in DIR as they come; an interrupted run, "
        "started again with the same arguments, resumes where it stopped",
    )
    a.add_argument(
        "--threshold",
        type=float,
        default=1.0,
        help="practical identifiability: flag a parameter whose standard deviation exceeds "
        "this many decades (default 1)",
    )
    a.add_argument(
        "--generic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="structural or weak: check every null direction over a Latin-hypercube sample "
        "of the box and at rtol/100 (--generic), none (--no-generic); default: the close "
        "calls only (exact symmetries are structural without a check)",
    )
    _fit_and_profile_flags(a)
    _fit_flags(a, "with --fit; ")
    a.add_argument(
        "--free-initial-states",
        default=None,
        metavar="S,I|all",
        help="a model: treat the initial values of these states (by the model's "
        "state_names, comma separated, or all) as unknown parameters",
    )
    a.add_argument("--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=cmd_analyze)


def _fit_parser(sub) -> None:
    f = sub.add_parser(
        "fit",
        help="maximum-likelihood estimation of a PEtab problem from many starts",
        description="Multi-start estimation: Latin-hypercube starts in the parameters' "
        "bounds on their estimation scales, each fitted by a bounded Levenberg-Marquardt "
        "on the negative log-likelihood (Fisher scoring); prints the best fit and how many "
        "starts reached it; --plot writes the waterfall plot.",
    )
    f.add_argument("model", help="a PEtab problem (problem.yaml)")
    f.add_argument("--starts", type=int, default=20, help="number of starts (default 20)")
    f.add_argument("--seed", type=int, default=0, help="seed of the starts")
    _fit_flags(f, "")
    f.add_argument("--solver-rtol", type=float, default=1e-8, help="ODE solver rtol")
    f.add_argument("--plot", default=None, help="write the waterfall plot (PNG, PDF, ...)")
    f.add_argument("--json", default=None, help="write every fit as JSON")
    f.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="keep every finished fit in FILE (JSON), written after each: the same command "
        "again resumes an interrupted run",
    )
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=cmd_fit)


def _design_parser(sub) -> None:
    d = sub.add_parser(
        "design",
        help="the next experiment: which measurements resolve what the data leave open",
        description="Choose --budget measurements among the candidates (each state, or "
        "--observe, at --times, under each experiment's condition): first those that "
        "raise the rank of the weighted sensitivity matrix (resolve non-identifiable "
        "parameters), then by the criterion; the times refined by gradient inside "
        "--times' window. Prints the design and the predicted standard deviations.",
    )
    d.add_argument("model", help="a PEtab problem (problem.yaml), a built-in model or "
                   "my_model.py:MyModel")  # fmt: skip
    d.add_argument("--budget", type=int, default=4, help="number of measurements (default 4)")
    d.add_argument("--observe", default="states", help="states (default), outputs, or names "
                   "and expressions in the states, comma separated")  # fmt: skip
    d.add_argument(
        "--times",
        default=None,
        metavar="START:END:N",
        help="the candidate times (default: t0 to the last measured time, 21)",
    )
    d.add_argument(
        "--refine",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="refine the chosen times by gradient inside START:END (default on)",
    )
    d.add_argument(
        "--sigma",
        type=float,
        default=0.1,
        help="noise of one measurement "
        "(default 0.1: a 10%% error with the default --transform log)",
    )
    d.add_argument("--transform", choices=["lin", "log", "log10"], default="log")
    d.add_argument("--criterion", choices=["d", "a", "e"], default="d",
                   help="after the rank: D- (default), A- or E-optimal")  # fmt: skip
    d.add_argument("--names", default=None, help="with --criterion a: the parameters whose "
                   "variances to shrink (comma separated; default all)")  # fmt: skip
    d.add_argument("--samples", type=int, default=0, help="robust design over this many "
                   "Latin-hypercube samples of the parameters' box")  # fmt: skip
    d.add_argument("--worst-case", action="store_true", help="with --samples: the worst "
                   "sample's criterion instead of the mean")  # fmt: skip
    d.add_argument(
        "--replicates",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="may a measurement be chosen twice (default yes)",
    )
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--solver-rtol", type=float, default=1e-8, help="ODE solver rtol")
    d.add_argument("--plot", default=None, help="write the design's figure (PNG, PDF, ...)")
    d.add_argument("--json", default=None, help="write the design as JSON")
    d.add_argument(
        "--petab",
        default=None,
        metavar="DIR",
        help="write the proposed experiment's PEtab tables into DIR",
    )
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=cmd_design)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
        return code
    except BrokenPipeError:
        # the reader went away (`jaxident analyze svir | head`): stop quietly, as a
        # command-line tool does, with no traceback and no second error at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for such a command
    except _UsageError as e:
        print(f"jaxident: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        kept = getattr(args, "out", None)
        what = "fits" if args.func is cmd_fit else "samples"
        where = (
            f"; finished {what} are kept in {kept}: run the same command again to resume"
            if kept
            else ""
        )
        print(f"jaxident: interrupted{where}.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
