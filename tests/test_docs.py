"""The API reference (mkdocs.yml, docs/): it builds with warnings as errors, and it
documents every public name of `jaxident`."""

import enum
import inspect
import os
import pathlib
import re
import subprocess
import sys


ROOT = pathlib.Path(__file__).resolve().parents[1]


def _public_names() -> set[str]:
    """The names `jaxident/__init__.py` exports (`from ... import x as x`) and the two
    it imports lazily."""
    source = (ROOT / "jaxident" / "__init__.py").read_text()
    names = set(re.findall(r"\b(\w+) as \1\b", source)) - {"_config"}
    return names | {"sbml_model", "SBMLModel"}


def test_every_public_name_is_in_the_reference():
    documented = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        documented |= set(
            re.findall(r"^::: jaxident\.(?:_io\._sbml\.)?(\w+)", page.read_text(), re.M)
        )
    missing = sorted(_public_names() - documented)
    assert not missing, f"public names missing from docs/api/: {missing}"
    assert len(_public_names()) > 100


def test_the_reference_builds_without_warnings(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    page = (tmp_path / "site" / "api" / "fitting" / "index.html").read_text()
    assert "profile-likelihood" in page.lower() and "likelihood_intervals" in page


def _undocumented(obj) -> list[str]:
    """The arguments of `obj` that its docstring (or that of a base class of the
    library, or of `__init__`) does not write in backticks (`[]` for what takes none:
    an enumeration of options, `Choice`, takes no arguments of its own)."""
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return []
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return []
    docs = [inspect.getdoc(obj) or ""]
    if inspect.isclass(obj):
        docs += [c.__doc__ or "" for c in obj.__mro__ if c.__module__.startswith("jaxident")]
        docs += [inspect.getdoc(obj.__init__) or ""]
    doc = "\n".join(docs)
    return [p for p in params if p not in ("self", "args", "kwargs")
            and not any(f"`{p}{end}" in doc for end in "`=:")]  # fmt: skip


def test_every_public_callable_documents_its_arguments():
    """Each argument of every public function and class of `ji` and `ji.linalg` is
    named in its docstring; a planted function that leaves one out is found."""
    import jaxident as ji
    import jaxident.linalg as L

    found = {}
    for prefix, mod in (("ji", ji), ("ji.linalg", L)):
        for name in dir(mod):
            obj = getattr(mod, name)
            if name.startswith("_") or inspect.ismodule(obj) or not callable(obj):
                continue
            if missing := _undocumented(obj):
                found[f"{prefix}.{name}"] = missing
    assert found == {}

    def planted(x, k=1):
        """The sum of `x` and k."""

    assert _undocumented(planted) == ["k"]
