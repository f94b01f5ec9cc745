"""The package's import graph: no cycles among its modules' top-level imports, no
import inside a function except the listed ones (optional dependencies and imports kept
lazy for the start-up time), and each layer subpackage importing only the layers below
it (as its `__init__` docstring says)."""

import ast
import io
import pathlib
import re
import subprocess
import sys
import tokenize

import jaxident


ROOT = pathlib.Path(jaxident.__file__).parent

# (importing module, imported module): each with its reason
ALLOWED_INSIDE = {
    # optional dependencies (the `petab` and `fides` extras) and matplotlib, imported where
    # needed so that `import jaxident` stays headless and fast
    ("jaxident._io._sbml", "libsbml"),
    ("jaxident._io._petab", "petab.v1"),
    ("jaxident._io._petab", "petab.v1.math"),
    ("jaxident._io._petab", "pandas"),
    ("jaxident._io._petab", "yaml"),
    ("jaxident._io._symbolic", "libsbml"),
    ("jaxident._fit._optimizers", "fides"),
    ("jaxident", "jaxident._io._sbml"),  # ji.sbml_model: needs libsbml, loaded on first use
    ("jaxident.plot", "matplotlib.pyplot"),
    ("jaxident.plot", "matplotlib.patches"),
    ("jaxident.plot", "matplotlib.lines"),
    ("jaxident._io._petab", "libsbml"),
    # kept out of `import jaxident` for its start-up time (0.25 s of its 1.5 s, one core),
    # each needed by one rarely used function: a sparse LU's ordering, optax's optimizer,
    # a pivoted QR for tens of non-identifiable parameters, two quantiles
    ("jaxident._linalg._sparse_lu", "scipy.sparse"),
    ("jaxident._linalg._sparse_lu", "scipy.sparse.linalg"),
    ("jaxident._fit._solvers", "optax"),
    ("jaxident._identify._estimability", "scipy.linalg"),
    ("jaxident._fit._estimate", "scipy.special"),
    ("jaxident._fit._intervals", "scipy.special"),
    ("jaxident.plot", "scipy.special"),
    ("jaxident._design._refine", "scipy.optimize"),
}
# the layers, bottom first: a module of a layer imports modules of its own layer and
# the ones before it (the public modules above them all: `jaxident`, `petab`, `cli`,
# `plot`, `models`, `linalg`, `data`)
LAYERS = [
    "_runtime",
    "_linalg",
    "_model",
    "_solve",
    ("_io", "_problem"),
    "_fit",
    "_identify",
    "_report",
    "_design",
]
# the command line imports everything lazily (`jaxident --help` without JAX); the public
# `jaxident.petab` loads its importer (`_io._petab`) on first use, by name
LAZY_MODULES = {"jaxident.cli"}


def _modules():
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _from(mod, node, modules) -> str:
    """The absolute name of the module a `from ... import` statement imports from."""
    if not node.level:
        return node.module
    base = mod if modules[mod].name == "__init__.py" else mod.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return base + ("." + node.module if node.module else "")


def _imported(mod, node, modules):
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = _from(mod, node, modules)
    # `from . import plot` imports a module; `from ._x import f` a name of one
    names = [f"{base}.{a.name}" for a in node.names]
    return [n if n in modules else base for n in names]


def _graph():
    modules = _modules()
    top, inner = {}, set()
    for mod, f in modules.items():
        tree = ast.parse(f.read_text())
        body = set(map(id, tree.body))
        top[mod] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for n in _imported(mod, node, modules):
                    if id(node) in body:
                        if n in modules and n != mod:
                            top[mod].add(n)
                    else:
                        inner.add((mod, n))
    return top, inner


def _cycles(top):
    state, cycles = {}, []

    def visit(m, path):
        state[m] = "open"
        for n in sorted(top.get(m, ())):
            if state.get(n) == "open":
                cycles.append(path[path.index(n) :] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(top):
        if m not in state:
            visit(m, [m])
    return cycles


def test_no_import_cycles():
    top, _ = _graph()
    assert (
        "jaxident._problem._predict" in top["jaxident._problem._sensitivity"]
    )  # the graph is read
    top = {m: {n for n in deps if n != "jaxident"} for m, deps in top.items()}
    assert _cycles(top) == []
    # the search finds a cycle where there is one
    top["jaxident._problem._predict"].add("jaxident._problem._sensitivity")
    (cycle,) = _cycles(top)
    assert (
        set(cycle) == {"jaxident._problem._predict", "jaxident._problem._sensitivity"}
        and len(cycle) == 3
    )


def test_no_imports_inside_functions_but_the_listed_ones():
    _, inner = _graph()
    found = {(m, n) for m, n in inner if m not in LAZY_MODULES}
    assert found - ALLOWED_INSIDE == set()
    # the list holds no stale entries: a mended one leaves it
    assert ALLOWED_INSIDE - found == set()


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None
    for i, layer in enumerate(LAYERS):
        if parts[1] in (layer if isinstance(layer, tuple) else (layer,)):
            return i
    return None


def _back_arrows(top):
    """Imports of a layer's module from a later layer, or from a public module that
    imports the package itself (a leaf such as `jaxident.plot`, which imports nothing
    of it, serves every layer's `plot()`)."""

    def above(n, layer):
        if _layer(n) is None:
            return bool(top.get(n))
        return _layer(n) > layer

    return sorted(
        (m, n)
        for m, deps in top.items()
        for n in deps
        if _layer(m) is not None and above(n, _layer(m))
    )


def test_layers_import_only_the_layers_below():
    top, _ = _graph()
    # every private module of the package root now lives in a layer subpackage
    loose = [m for m in top if m.count(".") == 1 and m.split(".")[1].startswith("_")]
    assert loose == [m for m in loose if _layer(m) is not None]
    assert _back_arrows(top) == []
    # the check finds one where there is one
    top["jaxident._model._base"].add("jaxident._problem._base")
    assert _back_arrows(top) == [("jaxident._model._base", "jaxident._problem._base")]


def _private_names_across(extra: dict | None = None):
    """`(module, imported module, name)` for every private name (a leading underscore,
    not a module) one subpackage imports from another: a name private to its module is
    that module's business; what another layer uses has a public name."""
    modules = _modules()
    out = []
    for mod, f in modules.items():
        here = mod.split(".")[1] if mod.count(".") >= 1 else None
        text = f.read_text() + (extra or {}).get(mod, "")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _from(mod, node, modules)
            there = base.split(".")[1] if base.count(".") >= 1 else None
            if there is None or there == here:
                continue
            for a in node.names:
                private = a.name.startswith("_") and not a.name.startswith("__")
                if private and f"{base}.{a.name}" not in modules:
                    out.append((mod, base, a.name))
    return sorted(out)


def test_no_private_name_imported_across_subpackages():
    assert _private_names_across() == []
    # the check finds one where there is one (a module is no private name)
    probe = "\nfrom .._problem._predict import _x, predict\nfrom .._problem import _predict\n"
    assert _private_names_across({"jaxident._fit._multistart": probe}) == [
        ("jaxident._fit._multistart", "jaxident._problem._predict", "_x")
    ]


# Where the library asks whether it was given a `Problem` (issue 48: a model becomes a
# problem at the API edge, and every analysis has one code path). Each entry is a
# function with its reason; the list only shrinks.
PROBLEM_FORKS = {
    # the API edge: a model or a problem in, one object out
    ("jaxident._report._analyze", "_as_problem"): "a model alone becomes a problem",
    ("jaxident._design._design", "_checked"): "a model alone becomes a problem",
    ("jaxident._identify._lserc", "outputs_of"): "ModelOutputs or ProblemOutputs",
    ("jaxident.cli", "cmd_fit"): "a model name has no data to fit",
    ("jaxident.cli", "cmd_analyze"): "a model name or a PEtab file",
    ("jaxident.cli", "cmd_design"): "a model name or a PEtab file",
    ("jaxident._problem._base", "check_problem"): "the refusal of problem-only entries",
    # a model's output sensitivities (times, scales) are another quantity than a
    # problem's noise-weighted residual sensitivities
    ("jaxident._problem._sensitivity", "sensitivity"): "two quantities",
    # one fit engine (`ji.LevenbergMarquardt`) in two forms: a model's least squares
    # (residuals, jittable and vmappable over data) and a problem's likelihood (bounded,
    # noise parameters, many starts); both return a `ji.Estimate`
    ("jaxident._fit._estimate", "estimate"): "residual or likelihood form",
    ("jaxident._identify._stepwise", "_stepwise"): "residual or likelihood form",
}


def _nodes(kinds: tuple, extra: str = ""):
    """Every node of the package of one of `kinds` as `(module, node)`, with `extra`
    source appended to `jaxident._fit._multistart` (a planted case)."""
    for mod, f in _modules().items():
        tree = ast.parse(f.read_text() + (extra if mod == "jaxident._fit._multistart" else ""))
        for node in ast.walk(tree):
            if isinstance(node, kinds):
                yield mod, node


def _functions(extra: str = ""):
    """Every function of the package as `(module, node)` (`extra`: see `_nodes`)."""
    return _nodes((ast.FunctionDef, ast.AsyncFunctionDef), extra)


def _problem_forks(extra: str = "") -> set:
    out = set()
    for mod, fn in _functions(extra):
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "isinstance"
                and len(node.args) == 2
                and "Problem" in ast.unparse(node.args[1])
            ):
                out.add((mod, fn.name))
    # (a function nested in another counts for both: the outer one holds the fork)
    return out


def _ratchet(find, listed, planted: str) -> None:
    """`find()` finds exactly the `listed` functions (a mended one leaves the list), and
    a function `_probe` planted by the source `planted`."""
    found = find()
    assert found - set(listed) == set()
    assert set(listed) - found == set()
    assert ("jaxident._fit._multistart", "_probe") in find(planted) - found


def test_problem_forks_only_at_the_edge():
    planted = "\ndef _probe(x):\n    return isinstance(x, (Problem, int))\n"
    _ratchet(_problem_forks, PROBLEM_FORKS, planted)


# functions whose body (docstring left out) may exceed LONGEST lines, with the reason
LONG_FUNCTIONS = {
    ("jaxident.models._ecoli_rates", "reaction_rates"): "the E. coli model's table of rate laws",
}
LONGEST = 80


def _long_functions(extra: str = "") -> set:
    out = set()
    for mod, fn in _functions(extra):
        body = fn.body
        doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        first = body[1] if doc and len(body) > 1 else body[0]
        if fn.end_lineno - first.lineno + 1 > LONGEST:
            out.add((mod, fn.name))
    return out


def test_functions_are_short():
    """Every function's body fits in LONGEST lines, but the listed tables."""
    planted = "\ndef _probe(x):\n" + "    x = x + 1\n" * (LONGEST + 1) + "    return x\n"
    _ratchet(_long_functions, LONG_FUNCTIONS, planted)


def test_import_leaves_the_lazy_dependencies_unloaded():
    """`import jaxident` loads neither optax nor SciPy (0.25 s of a 1.5 s import, one
    core): the functions that need them import them (`ALLOWED_INSIDE`)."""
    code = "import sys, jaxident; print([m for m in ('optax', 'scipy') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# a date, a named accelerator, a measured duration or a speed-up: history, which lives
# in git and in docs/performance.md and benchmarks/README.md, not in the code
_HISTORY = re.compile(
    r"\b20\d\d-\d\d-\d\d\b|\bH[12]00\b|\b\d+(?:\.\d+)?\s?(?:ms|s|seconds?|minutes?|min)\b(?![\w-])"
    r"|\d(?:\.\d+)?x (?:faster|slower)"
)


def _history(extra: dict | None = None) -> list[str]:
    """`module:line: text` for every date or timing in a docstring or a comment of the
    package (`extra`: `{module: source}` appended, for the planted case)."""
    found = []
    for mod, f in _modules().items():
        text = f.read_text() + (extra or {}).get(mod, "")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False) or ""
                found += [f"{mod}: {m.group()}" for m in _HISTORY.finditer(doc)]
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                found += [
                    f"{mod}:{tok.start[0]}: {m.group()}" for m in _HISTORY.finditer(tok.string)
                ]
    return found


def test_no_date_or_timing_in_docstrings_and_comments():
    """Docstrings and comments say what and why; measured numbers and dates live in
    docs/performance.md, benchmarks/README.md and git (issue 83)."""
    assert _history() == []
    planted = '\ndef _probe():\n    """On an H100 (2026-11-26) 0.79 s a step."""\n# 1.5x faster\n'
    found = _history({"jaxident._fit._multistart": planted})
    assert len(found) == 4 and {f.split(": ")[1] for f in found} == {
        "H100",
        "2026-11-26",
        "0.79 s",
        "1.5x faster",
    }


def test_equinox_internals_only_in_one_documented_module():
    """No patch of another library's internals but the one DESIGN.md documents:
    `_runtime/_equinox.py` (equinox's error mode, read and switched per trace)."""
    found = []
    for mod, f in _modules().items():
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            found += [(mod, n) for n in names if n.startswith("equinox._")]
    assert found == [("jaxident._runtime._equinox", "equinox._errors")]


def _string_compared(extra: str = "") -> set:
    """`(module, function)` of every function that compares a value with a string
    constant (the command line apart: strings belong there)."""

    def text(o):
        if isinstance(o, (ast.Tuple, ast.Set, ast.List)):
            return any(text(e) for e in o.elts)
        return isinstance(o, ast.Constant) and isinstance(o.value, str)

    out = set()
    for mod, fn in _functions(extra):
        if mod == "jaxident.cli":
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Compare) and any(
                text(o) for o in (node.left, *node.comparators)
            ):
                out.add((mod, fn.name))
    return out


# where a string is compared because text is what is read: the environment, the
# platform, files (PEtab, SBML, JSON keys), other libraries' modes and messages, names,
# and printouts
STRINGS_READ = {
    ("jaxident", "__getattr__"): "a lazily imported public name",
    ("jaxident._design._candidates", "__init__"): "a function's name as a label",
    ("jaxident._design._design", "rows"): "the platform",
    ("jaxident._design._result", "text"): "a printout",
    ("jaxident._fit._estimate", "summary"): "a printout",
    ("jaxident._fit._kept", "_checksum"): "a JSON record's keys",
    ("jaxident._identify._reduction", "__repr__"): "a printout",
    ("jaxident._identify._sweep", "_compiled_for"): "the platform",
    ("jaxident._identify._sweep", "_lanes"): "the platform",
    ("jaxident._io._petab", "__init__"): "PEtab's tables",
    ("jaxident._io._petab", "_build_model"): "PEtab's tables",
    ("jaxident._io._petab", "_linted"): "the PEtab linter's report",
    ("jaxident._io._petab", "_overrides"): "PEtab's tables",
    ("jaxident._io._petab", "_parameters"): "PEtab's tables",
    ("jaxident._io._petab", "_warn_priors"): "PEtab's tables",
    ("jaxident._io._petab", "emit"): "PEtab's tables",
    ("jaxident._io._petab", "overrides_of"): "PEtab's tables",
    ("jaxident._io._sbml", "_unsupported"): "SBML's elements",
    ("jaxident._linalg._selection", "__repr__"): "a printout",
    ("jaxident._model._checks", "check_model_shapes"): "JAX's error message",
    ("jaxident._report._result", "_practical_lines"): "a printout",
    ("jaxident._runtime._config", "_cpu_options"): "the environment",
    ("jaxident._runtime._config", "_default_cache_dir"): "the environment",
    ("jaxident._runtime._config", "_enable_cache"): "the environment",
    ("jaxident._runtime._config", "_quick_options"): "the environment",
    ("jaxident._runtime._config", "compiler_options"): "the platform",
    ("jaxident._runtime._config", "fit_device"): "the environment and the platform",
    ("jaxident._runtime._equinox", "as_nan"): "equinox's error modes",
    ("jaxident._runtime._equinox", "checks_as_nan"): "equinox's error modes",
    ("jaxident._runtime._exported", "_export"): "the platform",
    ("jaxident._runtime._exported", "_is_sympy"): "a module's name",
    ("jaxident._runtime._exported", "cache_folder"): "a path",
    ("jaxident._runtime._host", "_check"): "equinox's error modes",
    ("jaxident._solve._forward", "init"): "diffrax's options",
    ("jaxident.models._ecoli", "vector_field"): "a state's name in the curated model",
    ("jaxident.models._linear", "initial_estimates"): "the paper's case names",
    ("jaxident.plot", "intervals"): "a printout",
    ("jaxident.plot", "profiles"): "a printout",
}
# behaviour still chosen by comparing a string: to become objects (issue 83); the list
# only shrinks
STRINGS_CHOOSING: dict = {}


def test_strings_select_no_behaviour_but_the_listed():
    """Behaviour is chosen by objects (noise models, optimizer strategies, rank rules,
    criteria); a string is compared only where text is read (`STRINGS_READ`), or in the
    places still to mend (`STRINGS_CHOOSING`)."""
    planted = '\ndef _probe(box):\n    return 1 if box == "face" else 0\n'
    _ratchet(_string_compared, {**STRINGS_READ, **STRINGS_CHOOSING}, planted)


STATUS_FIELDS = {"ok", "success", "init_ok", "failed", "converged"}
# a flag that is a solver's state between steps, not a result's status
STATUS_FLAGS = {
    ("jaxident._fit._solvers", "_State", "failed"): "the LM's state: its `terminate` "
    "turns it into the fit's `RESULTS`",
}


def _status_fields(extra: str = "") -> set:
    """`(module, class, field)` of every class field (an annotated name in a class body:
    an `eqx.Module`'s, a dataclass's or a `NamedTuple`'s) named as a status flag, with
    `extra` source appended to `jaxident._fit._multistart` (a planted case)."""
    out = set()
    for mod, cls in _nodes((ast.ClassDef,), extra):
        for node in cls.body:
            name = getattr(getattr(node, "target", None), "id", None)
            if isinstance(node, ast.AnnAssign) and name in STATUS_FIELDS:
                out.add((mod, cls.name, name))
    return out


def test_results_carry_one_status_type():
    """No result carries its status as a flag of its own (`ok`, `success`, ...): every
    one carries `result`, a `ji.RESULTS` (an `ok` property may read it)."""
    planted = "\nclass _Probe(eqx.Module):\n    ok: bool\n"
    assert _status_fields() == set(STATUS_FLAGS)
    found = _status_fields(planted) - set(STATUS_FLAGS)
    assert found == {("jaxident._fit._multistart", "_Probe", "ok")}
