"""The PEtab importer behind `jaxident.petab` (whose docstring says what it reads):
the tables read and linted by the `petab` package (imported where a file is read, an
optional dependency), the SBML model by `_sbml`, each condition an `Experiment`."""

import contextlib
import hashlib
import importlib.metadata
import logging
import os
import pickle
import re
import warnings
from typing import NamedTuple

import numpy as np
import sympy as sp

from .._model._parameters import Parameters
from .._problem._base import Experiment, Problem
from .._problem._noise import NOISES
from .._problem._scale import Scale
from .._runtime import _exported
from ._sbml import initial_set, initial_value, read_sbml, sbml_model
from ._symbolic import evaluate, symbols_of


def _petab():
    try:
        import petab.v1 as petab
        from petab.v1.math import sympify_petab
    except ImportError:
        raise ImportError(
            "Reading PEtab problems needs the petab package: pip install 'jaxident[petab]'."
        ) from None
    return petab, sympify_petab


def _parse(text, where: str):
    _, sympify_petab = _petab()
    if isinstance(text, (int, float, np.number)) and not isinstance(text, bool):
        return sp.Float(float(text))
    try:
        return sympify_petab(str(text))
    except Exception as e:  # the parser's message names the position
        raise ValueError(f"{where}: the formula {str(text)!r} could not be parsed: {e}") from None


def _overrides(value) -> list:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value == "":
        return []
    if isinstance(value, (int, float, np.number)):
        return [float(value)]
    out = []
    for part in str(value).split(";"):
        part = part.strip()
        try:
            out.append(float(part))
        except ValueError:
            out.append(part)
    return out


class _Findings(logging.Handler):
    """Collects what `petab`'s linter logs at error level."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        text = record.getMessage().strip()
        if text and text != "Not OK":
            self.messages.append(text)


def _linted(yaml_path: str, allow_missing: bool):
    """The problem as `petab` reads it and the YAML's one problem entry, refused with
    the linter's findings where the linter rejects it. With `allow_missing`,
    measurements that are NaN or empty are dropped first (with a warning naming the
    rows); without it they are an error."""
    petab, _ = _petab()
    import pandas as pd
    import yaml as _yaml

    try:
        with open(yaml_path) as fh:
            cfg = _yaml.safe_load(fh)
    except (OSError, _yaml.YAMLError) as e:
        raise ValueError(f"{yaml_path}: not a readable PEtab YAML file: {e}") from None
    if not isinstance(cfg, dict) or "format_version" not in cfg:
        raise ValueError(f"{yaml_path}: not a PEtab problem (no 'format_version' in the YAML).")
    version = str(cfg["format_version"])
    if version.split(".")[0] == "1" and not re.fullmatch(r"1(\.\d+){0,2}", version):
        raise ValueError(f"{yaml_path}: format_version {version!r} is not a version number.")
    if version.split(".")[0] != "1":
        raise ValueError(
            f"{yaml_path}: format_version {version}: PEtab v2 is not supported yet; "
            "jaxident reads PEtab v1 problems."
            if version.startswith("2")
            else f"{yaml_path}: unknown PEtab format_version {version!r}; jaxident reads v1."
        )
    problems = cfg.get("problems", [])
    if len(problems) != 1 or len(problems[0].get("sbml_files", [])) != 1:
        raise ValueError(f"{yaml_path}: exactly one problem with one SBML model is supported.")
    _check_files(yaml_path, cfg, problems[0])
    try:
        with _quiet_pandas():
            problem = petab.Problem.from_yaml(yaml_path)
    except Exception as e:  # pandas' and petab's errors do not name the file
        why = "".join(f"\n  {m}" for m in _sbml_errors(yaml_path, problems[0])[:10])
        raise ValueError(
            f"{yaml_path}: its PEtab files could not be read ({type(e).__name__}: {e}).{why}"
        ) from None
    for name, table, columns in (
        ("measurement", problem.measurement_df, ("observableId", "simulationConditionId",
                                                 "measurement", "time")),
        ("parameter", problem.parameter_df, ("parameterScale", "lowerBound", "upperBound",
                                             "nominalValue", "estimate")),
        ("observable", problem.observable_df, ("observableFormula", "noiseFormula")),
    ):  # fmt: skip
        absent = [c for c in columns if c not in table.columns]
        if absent:
            raise ValueError(f"{yaml_path}: the {name} table has no column {absent[0]!r}.")
    if len(problem.measurement_df) == 0:
        raise ValueError(
            f"{yaml_path}: the measurement table ({', '.join(spec_files(problems[0]))}) has "
            "no rows: there is nothing to analyse or fit."
        )
    _check_tables(yaml_path, problem.parameter_df, problem.measurement_df)
    meas = problem.measurement_df
    missing = pd.to_numeric(meas["measurement"], errors="coerce").isna()
    if missing.any():
        rows = [int(i) + 2 for i in np.flatnonzero(missing.to_numpy())]
        where = f"the measurement table, rows {rows[:20]} (column 'measurement')"
        if not allow_missing:
            raise ValueError(
                f"{yaml_path}: {where} hold no number. Pass allow_missing=True to treat "
                "them as missing data, or remove them."
            )
        warnings.warn(f"{yaml_path}: {where} are missing data and are left out.", stacklevel=3)
        problem.measurement_df = meas[~missing.to_numpy()]
    findings = _Findings()
    lint_logger = logging.getLogger("petab")  # the linter's, and its SBML check's (libSBML)
    lint_logger.addHandler(findings)
    try:
        with _quiet_pandas():
            rejected = petab.lint_problem(problem)
    except Exception as e:
        rejected, findings.messages = True, [*findings.messages, str(e).strip()]
    finally:
        lint_logger.removeHandler(findings)
    if rejected:
        # where the linter says only "Not OK", libSBML's own reading of the model says why
        reasons = findings.messages or _sbml_errors(yaml_path, problems[0])
        reasons = reasons or ["(it gives no reason; petab.v1.lint_problem logs what it checks)"]
        text = "\n  ".join(m.replace("\n", "\n    ") for m in reasons[:10])
        raise ValueError(f"{yaml_path}: petab's linter rejects this problem:\n  {text}")
    return problem, problems[0]


def _sbml_errors(yaml_path: str, entry: dict) -> list[str]:
    """The errors libSBML finds reading the problem's SBML file, each with its line."""
    import libsbml

    path = os.path.join(os.path.dirname(os.fspath(yaml_path)), entry["sbml_files"][0])
    doc = libsbml.readSBMLFromFile(path)
    errors = [doc.getError(i) for i in range(doc.getNumErrors())]
    return [
        f"{os.path.basename(path)}, line {e.getLine()}: libSBML {e.getSeverityAsString()}: "
        f"{e.getMessage().strip()}"
        for e in errors
        if e.getSeverity() >= libsbml.LIBSBML_SEV_ERROR
    ]


@contextlib.contextmanager
def _quiet_pandas():
    """The `petab` package's own use of pandas features that pandas deprecates warns at
    every load, about code that is not the caller's: silenced while `petab` runs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def check_flags(**flags) -> None:
    """Refuse a flag that is not a bool (`allow_missing='no'` acted as True)."""
    for flag, value in flags.items():
        if not isinstance(value, bool | np.bool_):
            raise TypeError(f"{flag} must be True or False, got {value!r}.")


def spec_files(spec: dict) -> list[str]:
    """The measurement files a YAML problem entry names."""
    files = spec.get("measurement_files") or []
    return [files] if isinstance(files, str) else [str(f) for f in files]


def _check_files(yaml_path, cfg: dict, spec: dict) -> None:
    """The files a PEtab v1 YAML must name, before `petab` reads them (it reads a
    missing one as no table, and fails later without naming it)."""
    if not cfg.get("parameter_file"):
        raise ValueError(f"{yaml_path}: the YAML names no parameter_file.")
    for key in ("measurement_files", "observable_files", "condition_files"):
        if not spec.get(key):
            raise ValueError(f"{yaml_path}: the YAML's problem names no {key}.")


def _check_tables(yaml_path, par_df, meas_df):
    """What the import cannot take, checked before `petab`'s linter (whose own findings
    on these are not readable): `estimate` other than 0 or 1, no parameter estimated,
    a nominal value that is not a number, and times that are not finite numbers at or
    after t0 = 0. Errors name the table, the row (as in the file, the header being row
    1) and the column."""
    import pandas as pd

    def row(i):
        return f"{yaml_path}: the parameter table, row {i + 2} ({par_df.index[i]!r}), column"

    est = pd.to_numeric(par_df["estimate"], errors="coerce")
    bad = [(i, v) for i, v in enumerate(par_df["estimate"]) if est.iloc[i] not in (0, 1)]
    if bad:
        i, v = bad[0]
        raise ValueError(f"{row(i)} 'estimate': {'empty' if _empty(v) else repr(v)}; it "
                         "must be 0 or 1.")  # fmt: skip
    if not (est == 1).any():
        raise ValueError(
            f"{yaml_path}: no parameter of the parameter table has estimate = 1: there is "
            "nothing to analyse or fit."
        )
    nominal = pd.to_numeric(par_df["nominalValue"], errors="coerce")
    for i, v in enumerate(par_df["nominalValue"]):
        if _empty(v):
            raise ValueError(
                f"{row(i)} 'nominalValue' is empty: jaxident needs a nominal value for "
                "every parameter (the point an analysis is made at, and a fit's default "
                "start)."
            )
        if not np.isfinite(nominal.iloc[i]):
            raise ValueError(f"{row(i)} 'nominalValue': {v!r} is not a finite number.")
    t = pd.to_numeric(meas_df["time"], errors="coerce").to_numpy(float)
    for rows, what in (
        (np.flatnonzero(np.isnan(t)), "is not a number"),
        (np.flatnonzero(t < 0), "lies before the initial time 0"),
    ):
        if rows.size:
            raise ValueError(
                f"{yaml_path}: the measurement table, rows {[int(r) + 2 for r in rows[:20]]}, "
                f"column 'time': the time {what}."
            )


def load(
    yaml_path: str | os.PathLike,
    *,
    name: str | None = None,
    allow_missing: bool = False,
    estimate_noise: bool = False,
):
    """Load a PEtab problem (format version 1) as a `ji.Problem`.

    The problem is first checked by `petab`'s own linter (`petab.v1.lint_problem`): a
    problem it rejects is refused with its findings. Measurements that are NaN or empty
    are an error naming the rows, unless `allow_missing=True` (then they are left out,
    with a warning). PEtab v2 files are refused.

    Estimated parameters that enter only the noise model are held at their nominal
    values (`problem.noise_parameters`: an identifiability analysis at given noise
    levels); with `estimate_noise=True` they are parameters of the problem like the
    others, their noise formulas outputs of the model (for `ji.estimate`, which fits
    every parameter the PEtab problem estimates).

    A problem loaded once is kept beside the compilation cache (`jaxident-problems/`),
    under a key of the bytes of every file of the problem, the arguments and the
    versions of jaxident (its source), petab, libsbml, sympy and pandas: a second
    process with the same files takes it from there (milliseconds, instead of about
    two seconds, most of them importing `petab`), with the same warnings.

    **Returns:** a `ji.Problem` whose model is an `SBMLModel` with the observables and
    noise formulas as outputs, with one `ji.Experiment` per (pre-equilibration,
    simulation) condition pair, and whose parameters are the estimated PEtab parameters
    (without the noise-only ones) on their PEtab scales.

    **Raises:** `ValueError` naming an unsupported feature, a formula that does not
    parse, the linter's findings, or the table, row and column of an inconsistency.
    """
    check_flags(allow_missing=allow_missing, estimate_noise=estimate_noise)
    yaml_path = os.fspath(yaml_path)
    key = _load_key(yaml_path, name, allow_missing, estimate_noise)
    folder = _exported.cache_folder("jaxident-problems")
    file = None if key is None or folder is None else folder / f"{key}.pickle"
    if file is not None and file.exists():
        try:
            kept_key, problem, caught = pickle.loads(file.read_bytes())
            if kept_key != key:
                raise ValueError("an entry of another problem")
        except Exception as e:  # a damaged or foreign entry: load anew, and say so
            warnings.warn(
                f"The kept copy of {yaml_path} ({file}) is damaged or belongs to another "
                f"problem ({type(e).__name__}: {e}); it is loaded anew.",
                stacklevel=2,
            )
        else:
            for text, category in caught:
                warnings.warn(text, category, stacklevel=2)
            return problem
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problem = _load(yaml_path, name, allow_missing, estimate_noise)
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if file is not None:
        said = [(str(w.message), w.category) for w in caught]
        _exported.write_kept(file, pickle.dumps((key, problem, said)))
    return problem


def _load_key(yaml_path: str, name, allow_missing, estimate_noise) -> str | None:
    """The key of a loaded problem: every file the YAML names, by its bytes, the
    arguments and the versions that the import depends on; `None` where the YAML
    cannot be read (the full load then says why)."""

    import yaml as _yaml

    try:
        with open(yaml_path, "rb") as fh:
            text = fh.read()
        cfg = _yaml.safe_load(text)
        base = os.path.dirname(os.path.abspath(yaml_path))
        files = [cfg["parameter_file"]] if isinstance(cfg.get("parameter_file"), str) else []
        for entry in cfg.get("problems", []):
            for v in entry.values():
                files += [v] if isinstance(v, str) else [f for f in v if isinstance(f, str)]
        h = hashlib.sha256(text)
        for f in files:
            h.update(f.encode())
            with open(os.path.join(base, f), "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    except Exception:
        return None
    for lib in ("petab", "python-libsbml", "sympy", "pandas"):
        try:
            h.update(f"{lib}={importlib.metadata.version(lib)}".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{lib}=?".encode())
    h.update(f"{os.path.abspath(yaml_path)}|{name!r}|{allow_missing!r}|{estimate_noise!r}".encode())
    h.update(_exported.environment().encode())
    return h.hexdigest()


def _load(yaml_path: str, name, allow_missing, estimate_noise):
    """The steps of an import: the tables, the observables, the SBML file's ids, the
    estimated parameters, the model, the experiments."""

    tables = _tables(yaml_path, allow_missing)
    obs = _observables(tables.observables)
    par = _parameter_table(tables)
    ids = _sbml_ids(tables.sbml_path)
    est = _estimated(tables, obs, par, ids, estimate_noise)
    model = _build_model(tables, obs, par, ids, est)
    experiments = _Experiments(yaml_path, tables, obs, par, ids, est, model)
    built = experiments.all()
    problem_params = _parameters(par.table, est.estimated, yaml_path)
    if estimate_noise:  # loaded to be fitted, where a prior would change the estimate
        _warn_priors(par.table, est.estimated, yaml_path)
    return Problem(
        model.model,
        built,
        problem_params,
        {p: par.scale_of[p] for p in est.estimated},
        obs.transforms,
        obs.distributions,
        noise_outputs=[not h for h in model.on_host] if not all(model.on_host) else False,
        noise_parameters=est.noise_only,
        name=name if name is not None else os.path.splitext(os.path.basename(yaml_path))[0],
        override_text=experiments.override_text,
    )


class _Tables(NamedTuple):
    """The linted tables (pandas frames) and the SBML file."""

    parameters: object
    conditions: object
    measurements: object
    observables: object
    sbml_path: str


def _tables(yaml_path: str, allow_missing: bool) -> _Tables:
    base = os.path.dirname(os.path.abspath(yaml_path))
    linted, spec = _linted(yaml_path, allow_missing)
    meas_df = linted.measurement_df.reset_index(drop=True)
    return _Tables(
        linted.parameter_df.reset_index(),
        linted.condition_df.reset_index(),
        meas_df,
        linted.observable_df.reset_index(),
        os.path.join(base, spec["sbml_files"][0]),
    )


class _Observables(NamedTuple):
    """The observable table: formulas by id, noise formulas by `sigma_<id>`, the
    transformations and noise distributions in the table's order, and the placeholders
    (`observableParameter1_<id>`: `(id, kind, index)`)."""

    formulas: dict
    noise: dict
    transforms: list
    distributions: list
    placeholders: dict


def _observables(obs_df) -> _Observables:

    observables, noise, transforms, distributions, placeholders = {}, {}, [], [], {}
    for _, row in obs_df.iterrows():
        oid = row["observableId"]
        f = _parse(row["observableFormula"], f"observable {oid!r}")
        s = _parse(row["noiseFormula"], f"noise formula of {oid!r}")
        observables[oid], noise[f"sigma_{oid}"] = f, s
        transforms.append(_cell(row.get("observableTransformation"), "lin"))
        distributions.append(_cell(row.get("noiseDistribution"), "normal"))
        for sym in sorted(f.free_symbols | s.free_symbols, key=lambda x: x.name):
            m = re.fullmatch(r"(observable|noise)Parameter(\d+)_(.+)", sym.name)
            if m and m.group(3) == oid:
                placeholders[sym.name] = (oid, m.group(1), int(m.group(2)))
    known = {scale.value for scale in Scale}
    transforms = [t if t in known else _bad(f"observable transformation {t!r}") for t in transforms]
    noises = set(NOISES)
    distributions = [d if d in noises else _bad(f"noise distribution {d!r}") for d in distributions]
    return _Observables(observables, noise, transforms, distributions, placeholders)


class _ParameterTable(NamedTuple):
    """The parameter table by `parameterId`, which rows are estimated, and each
    parameter's scale and nominal value."""

    table: object
    estimated: object
    scale_of: dict
    nominal_of: dict


def _parameter_table(tables: _Tables) -> _ParameterTable:
    par_df = tables.parameters.set_index("parameterId")
    est = par_df["estimate"].astype(float) == 1
    scale_of = {p: str(par_df.loc[p, "parameterScale"]) for p in par_df.index}
    nominal_of = {p: float(par_df.loc[p, "nominalValue"]) for p in par_df.index}
    return _ParameterTable(par_df, est, scale_of, nominal_of)


class _SBMLIds(NamedTuple):
    """The ids the SBML file declares: parameters and compartments, species,
    compartments, the targets of its rules and of its rate rules, and the symbols with
    an initial assignment."""

    model: object
    parameters: set
    species: set
    compartments: set
    ruled: set
    rated: set
    assigned: set


def _sbml_ids(sbml_path: str) -> _SBMLIds:

    _, sbml = read_sbml(sbml_path)
    rules = list(sbml.getListOfRules())
    return _SBMLIds(
        sbml,
        {x.getId() for x in [*sbml.getListOfParameters(), *sbml.getListOfCompartments()]},
        {s.getId() for s in sbml.getListOfSpecies()},
        {c.getId() for c in sbml.getListOfCompartments()},
        {r.getVariable() for r in rules},
        {r.getVariable() for r in rules if r.isRate()},
        {a.getSymbol() for a in sbml.getListOfInitialAssignments()},
    )


class _Estimated(NamedTuple):
    """The estimated parameters of the problem, those held as noise-only, and per
    observable the names its noise overrides use."""

    estimated: list
    noise_only: tuple
    noise_names: dict


def _estimated(tables, obs: _Observables, par: _ParameterTable, ids: _SBMLIds, estimate_noise):
    """Which estimated parameters are noise-only: they appear only among noise
    overrides and noise formulas (held at their nominal values, unless
    `estimate_noise`)."""
    noise_refs, other_refs = set(), set()
    noise_names: dict[str, set] = {}  # per observable, the names its noise overrides use
    for _, row in tables.measurements.iterrows():
        for v in _overrides(row.get("noiseParameters")):
            if isinstance(v, str):
                noise_refs.add(v)
                noise_names.setdefault(row["observableId"], set()).add(v)
        for v in _overrides(row.get("observableParameters")):
            if isinstance(v, str):
                other_refs.add(v)
    for col in tables.conditions.columns:
        for v in tables.conditions[col]:
            if isinstance(v, str):
                other_refs.add(v)
    for e in obs.formulas.values():
        other_refs |= {s.name for s in e.free_symbols}
    for e in obs.noise.values():
        noise_refs |= {s.name for s in e.free_symbols}
    other_refs |= ids.parameters
    index = par.table.index[par.estimated]
    noise_only = tuple(
        p for p in index if p in noise_refs and p not in other_refs and not estimate_noise
    )
    estimated = [p for p in index if p not in noise_only]
    return _Estimated(estimated, noise_only, noise_names)


class _Model(NamedTuple):
    """The SBML model with the observables (and noise formulas evaluated in the solve)
    as outputs, which noise formulas are evaluated per datum on the host instead, the
    condition table's columns and those of them that set initial values, and the value
    of every fixed name."""

    model: object
    on_host: list
    condition_columns: list
    initial_columns: list
    constants: dict


def _build_model(tables, obs: _Observables, par: _ParameterTable, ids: _SBMLIds, est: _Estimated):

    estimated = est.estimated
    # extra parameters: placeholders and PEtab parameters the SBML file lacks
    extra = {ph: 1.0 for ph in obs.placeholders}
    used = set().union(*(symbols_of(e) for e in [*obs.formulas.values(), *obs.noise.values()]))
    for p in par.table.index:
        if p not in ids.parameters and p not in extra and (p in estimated or p in used):
            extra[p] = par.nominal_of[p]
    # a noise formula in numbers and fixed parameters only is evaluated per datum here;
    # one that depends on the state or on estimated parameters becomes a model output
    dynamic = ids.species | set(estimated) | {"time"} | ids.ruled
    # so does one whose noise overrides name an estimated parameter (a scale factor that
    # is estimated for the observable too: `s_gel1;sigma` for `np1 * np2`)
    by_estimated = {oid for oid, names in est.noise_names.items() if names & set(estimated)}
    on_host = [
        oid not in by_estimated
        and not any(
            s.name in dynamic or obs.placeholders.get(s.name, ("", "noise"))[1] == "observable"
            for s in obs.noise[f"sigma_{oid}"].free_symbols
        )
        for oid in obs.formulas
    ]
    outputs = dict(obs.formulas)
    if not all(on_host):
        outputs.update(obs.noise)
    # species (and rate-rule variables) set by a condition: their initial values
    cond_cols = [c for c in tables.conditions.columns if c not in ("conditionId", "conditionName")]
    init_cols = [c for c in cond_cols if c in ids.species or c in ids.rated]
    # parameters and compartments with an initial assignment that a condition sets
    set_by_conditions = [c for c in cond_cols if c in ids.parameters and c in ids.assigned]
    model = sbml_model(
        tables.sbml_path,
        observables=outputs,
        extra_parameters=extra,
        initial_overrides=init_cols,
        parameter_overrides=set_by_conditions,
    )
    constants = dict(zip(model.parameters.names, np.asarray(model.parameters.nominal).tolist()))
    constants.update(par.nominal_of)
    return _Model(model, on_host, cond_cols, init_cols, constants)


class _Experiments:
    """One experiment per (pre-equilibration, simulation) condition pair: its time grid,
    data and noise levels, and the model's parameters in it (condition values, overrides,
    fixed parameters at their nominal values, estimated ones by name)."""

    def __init__(self, yaml_path, tables, obs, par, ids, est, model: _Model):
        self.yaml_path = yaml_path
        self.obs = obs
        self.par = par
        self.ids = ids
        self.estimated = est.estimated
        self.m = model
        self.model = model.model
        self.obs_ids = list(obs.formulas)
        self.conditions = tables.conditions.set_index("conditionId")
        for c in model.condition_columns:
            if c not in self.model.parameters.names and c not in model.initial_columns:
                raise ValueError(
                    f"{yaml_path}: condition column {c!r} is not a parameter or compartment "
                    "of the model."
                )
        meas_df = tables.measurements.copy()
        if "preequilibrationConditionId" not in meas_df:
            meas_df["preequilibrationConditionId"] = ""
        meas_df["preequilibrationConditionId"] = (
            meas_df["preequilibrationConditionId"].astype(object).fillna("").astype(str)
        )
        self.measurements = meas_df
        self.override_text: list = []

    def resolve(self, v):
        """A number, or the name of an estimated parameter; fixed and noise-only
        parameters become their nominal values, other model ids stay names."""
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                pass
            if v in self.estimated:
                return v
            if v in self.m.constants:
                return self.m.constants[v]
            raise ValueError(f"{self.yaml_path}: {v!r} is neither a number nor a known parameter.")
        return float(v)

    def condition_map(self, cid):

        out = {}
        for c in self.m.condition_columns:
            v = self.conditions.loc[cid, c]
            if isinstance(v, float) and np.isnan(v):
                continue  # a species keeps its value (the model's, or pre-equilibrated)
            if c in self.m.initial_columns:
                out[initial_value(c)], out[initial_set(c)] = self.resolve(v), 1.0
            else:
                out[c] = self.resolve(v)
                if c in self.ids.compartments and isinstance(out[c], float) and not out[c] > 0:
                    raise ValueError(
                        f"{self.yaml_path}: the condition table sets compartment {c!r} to "
                        f"{out[c]:g} in condition {cid!r}: a compartment's size must be "
                        "positive."
                    )
        for p in self.model.parameters.names:
            if p not in out and p in self.par.table.index:
                out[p] = self.resolve(p)
        return out

    def host_sigma(self, oid, vals):

        env = dict(self.m.constants)
        for k, v in enumerate(vals, start=1):
            env[f"noiseParameter{k}_{oid}"] = self.resolve(v)
        return float(evaluate(self.obs.noise[f"sigma_{oid}"], env))

    def overrides_of(self, row):
        """`{(observable, kind): values}` of the overrides a row puts in the model."""
        oid = row["observableId"]
        if oid not in self.obs.formulas:
            raise ValueError(f"{self.yaml_path}: measurement of unknown observable {oid!r}.")
        out = {}
        for kind, col in (("observable", "observableParameters"), ("noise", "noiseParameters")):
            if kind == "noise" and self.m.on_host[self.obs_ids.index(oid)]:
                continue
            out[(oid, kind)] = tuple(_overrides(row.get(col)))
        return out

    def buckets(self, df):
        """The rows of one condition pair in groups whose overrides agree: one group
        unless the overrides change between time points (each group an experiment)."""
        groups: list[tuple[dict, list]] = []
        for _, row in df.iterrows():
            ov = self.overrides_of(row)
            for assigned, rows in groups:
                if all(assigned.get(k, v) == v for k, v in ov.items()):
                    assigned.update(ov)
                    rows.append(row)
                    break
            else:
                groups.append((dict(ov), [row]))
        return groups

    def experiment(self, rows, pre, sim, label):
        import pandas as pd

        df = pd.DataFrame(rows)
        df_t = df["time"].astype(float)
        counts = df.assign(t=df_t).groupby(["t", "observableId"]).size()
        slots = counts.groupby(level=0).max()  # replicates: a time repeats
        times = np.repeat(slots.index.to_numpy(float), slots.to_numpy(int))
        first = {t: int(np.searchsorted(times, t)) for t in slots.index}
        data = np.full((times.size, len(self.obs_ids)), np.nan)
        sigma = np.ones_like(data)
        cond = self.condition_map(sim)
        text = {}
        for _, row in df.iterrows():
            oid = row["observableId"]
            o = self.obs_ids.index(oid)
            i = first[float(row["time"])]
            while not np.isnan(data[i, o]):
                i += 1
            data[i, o] = float(row["measurement"])
            # the override cells as written (noise overrides may differ per datum)
            text[i, o] = tuple(
                "" if _empty(row.get(col)) else row.get(col)
                for col in ("observableParameters", "noiseParameters")
            )
            if self.m.on_host[o]:
                noise = tuple(_overrides(row.get("noiseParameters")))
                sigma[i, o] = self.host_sigma(oid, noise)
            for (_, kind), vals in self.overrides_of(row).items():
                for k, v in enumerate(vals, start=1):
                    ph = f"{kind}Parameter{k}_{oid}"
                    if ph not in self.model.parameters.names:
                        raise ValueError(f"{self.yaml_path}: {oid!r} has no placeholder {ph!r}.")
                    cond[ph] = self.resolve(v)
        pre_map = self.condition_map(pre) if pre else None
        self.override_text.append(tuple(sorted(text.items())))
        return Experiment(times, data, sigma, cond, label, pre_map)

    def all(self) -> list:
        """Every experiment, in the measurement table's order of condition pairs; the
        measurements at steady state (time `inf`) of a pair are an experiment of their
        own."""
        experiments = []
        pairs = ["preequilibrationConditionId", "simulationConditionId"]
        for (pre, sim), both in self.measurements.groupby(pairs, sort=False):
            label = f"{pre}->{sim}" if pre else sim
            steady = np.isinf(both["time"].astype(float).to_numpy())
            for df, tag in ((both[~steady], ""), (both[steady], "#steady-state")):
                if df.empty:
                    continue
                parts = self.buckets(df)
                for k, (_, rows) in enumerate(parts):
                    label_k = label + tag + (f"#{k + 1}" if len(parts) > 1 else "")
                    experiments.append(self.experiment(rows, pre, sim, label_k))
        return experiments


def _empty(value) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return bool(np.isnan(value))
    return isinstance(value, str) and not value.strip()


def _cell(value, default: str) -> str:
    """A text cell of a table, or PEtab's default where it is empty (NaN in pandas)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return default
    return str(value).strip() or default


def _bad(what):
    raise ValueError(f"Unsupported PEtab feature: {what}.")


def _parameters(par_df, estimated, yaml_path):
    """The estimated parameters; a nominal value outside its bounds (petab's linter lets
    it pass; Lang_PLOSComputBiol2024 has four) widens the bounds to it, with a warning
    naming them: the analysis is at the nominal point, and fits start inside."""

    lo = np.array([float(par_df.loc[p, "lowerBound"]) for p in estimated])
    up = np.array([float(par_df.loc[p, "upperBound"]) for p in estimated])
    nom = np.array([float(par_df.loc[p, "nominalValue"]) for p in estimated])
    logs = np.array([str(par_df.loc[p, "parameterScale"]) in ("log", "log10") for p in estimated])
    bad = [f"{p} = {v:g}" for p, v, g in zip(estimated, nom, logs) if g and not v > 0]
    if bad:
        raise ValueError(
            f"{yaml_path}: the parameter table estimates {', '.join(bad)} on a log scale, "
            "where a value must be positive: give a positive nominalValue (or lin scale)."
        )
    outside = (nom < lo) | (nom > up)
    if outside.any():
        which = ", ".join(
            f"{estimated[i]} = {nom[i]:g} not in [{lo[i]:g}, {up[i]:g}]"
            for i in np.flatnonzero(outside)
        )
        warnings.warn(
            f"{yaml_path}: nominal values outside their bounds in the parameter table "
            f"({which}); the bounds are widened to include them.",
            UserWarning,
            stacklevel=4,
        )
        lo, up = np.minimum(lo, nom), np.maximum(up, nom)
    return Parameters(estimated, nom, lo, up)


def _warn_priors(par_df, estimated, yaml_path):
    """A warning naming the estimated parameters with an objective prior: a fit
    (`ji.estimate`) maximises the likelihood alone, not PEtab's posterior."""
    if "objectivePriorType" not in par_df.columns:
        return
    kinds = {p: par_df.loc[p, "objectivePriorType"] for p in estimated}
    named = [f"{p} ({k})" for p, k in kinds.items() if isinstance(k, str) and k.strip()]
    if named:
        warnings.warn(
            f"{yaml_path}: the parameter table sets objective priors on {', '.join(named)}; "
            "jaxident ignores priors, so ji.estimate maximises the likelihood alone, not "
            "the posterior that PEtab's objective (and pyPESTO) would.",
            UserWarning,
            stacklevel=4,
        )


def simulation_table(problem, prediction):
    """The simulated values at the measurements, as a PEtab simulation table (for
    `petab.calculate_llh` and plots)."""
    import pandas as pd

    rows = []
    data = np.asarray(problem.data)
    outputs = np.asarray(prediction.outputs)
    times = np.asarray(problem.times)
    for e, name in enumerate(problem.experiment_names):
        pre, _, sim = name.split("#")[0].rpartition("->")  # '#k': time-point overrides
        for i, o in zip(*np.nonzero(~np.isnan(data[e]))):
            row = {
                "observableId": problem.output_names[o],
                "preequilibrationConditionId": pre,
                "simulationConditionId": sim,
                "time": times[e, i],
                "simulation": outputs[e, i, o],
            }
            if problem.override_text is not None:
                # rows that differ only in their overrides are told apart by them
                obs_text, noise_text = dict(problem.override_text[e])[int(i), int(o)]
                row["observableParameters"], row["noiseParameters"] = obs_text, noise_text
            rows.append(row)
    return pd.DataFrame(rows)
