"""The package's import graph: no cycles among its modules' top-level imports, and no
import inside a function except the listed ones (optional dependencies, imports kept
lazy for the start-up time, and the known back-arrows still to remove)."""

import ast
import pathlib

import jaxident


ROOT = pathlib.Path(jaxident.__file__).parent

# (importing module, imported module): each with its reason
ALLOWED_INSIDE = {
    # optional dependencies (the `petab` extra) and matplotlib, imported where needed so
    # that `import jaxident` stays headless and fast
    ("jaxident._sbml", "libsbml"),
    ("jaxident._symbolic", "libsbml"),
    ("jaxident", "jaxident._sbml"),  # ji.sbml_model: needs libsbml, loaded on first use
    ("jaxident.plot", "matplotlib.pyplot"),
    # heavy imports only some calls need (start-up time of a first answer)
    ("jaxident._report", "sympy"),
    ("jaxident._exported", "sympy"),
    ("jaxident._estimate", "scipy.stats"),
    # known debt (issue 33): equinox's private error machinery, and the kept-kernel
    # module that imports the context it is called from
    ("jaxident._context", "equinox._errors"),
    ("jaxident._context", "jaxident._exported"),
}
# the command line and the PEtab importer import everything lazily (`jaxident --help`
# without JAX; `petab` and `pandas` optional)
LAZY_MODULES = {"jaxident.cli", "jaxident.petab"}


def _modules():
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _imported(mod, node, modules):
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = mod if modules[mod].name == "__init__.py" else mod.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        base = base + ("." + node.module if node.module else "")
    else:
        base = node.module
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
    assert "jaxident._predict" in top["jaxident._sensitivity"]  # the graph is read
    top = {m: {n for n in deps if n != "jaxident"} for m, deps in top.items()}
    assert _cycles(top) == []
    # the search finds a cycle where there is one
    top["jaxident._predict"].add("jaxident._sensitivity")
    (cycle,) = _cycles(top)
    assert set(cycle) == {"jaxident._predict", "jaxident._sensitivity"} and len(cycle) == 3


def test_no_imports_inside_functions_but_the_listed_ones():
    _, inner = _graph()
    found = {(m, n) for m, n in inner if m not in LAZY_MODULES}
    assert found - ALLOWED_INSIDE == set()
    # the list holds no stale entries: a mended one leaves it
    assert ALLOWED_INSIDE - found == set()
