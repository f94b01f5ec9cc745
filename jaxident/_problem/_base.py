"""Problems: a model measured in one or more experiments, each with its own condition
(parameters fixed to numbers or mapped to experiment-specific parameters), times,
data and noise model; the parameters estimated on their own scales (lin, log, log10).

The experiments are padded to one time grid (missing data, NaN, where an experiment has
fewer times) and solved one after another by one compiled kernel (`jax.lax.map`), so
that a problem with many conditions compiles once and no experiment waits for a slower
one; each integrates the sensitivity columns of the parameters its measured outputs
depend on (`AbstractModel.parameter_dependence`). Its sensitivity matrix stacks the
experiments, each row divided by its noise standard deviation, with respect to the
parameters on their estimation scale: its Gram matrix is the Fisher information of the
problem.
"""

import copy
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from .._model._base import AbstractModel, AlgebraicModel
from .._model._checks import check_model, n_outputs
from .._model._parameters import Parameters
from .._model._transforms import reparameterize
from .._runtime._host import device_array
from ._measurements import MeasurementError
from ._noise import AbstractNoise, as_noises, Normal
from ._scale import as_scales, Scale


def rescale(values: ArrayLike, scales: Sequence[str]) -> Array:
    """Values on the linear scale on their estimation scales (`unscale`'s inverse)."""
    values = jnp.asarray(values)
    out = [Scale(s).forward(v, jnp) for v, s in zip(jnp.unstack(values), scales)]
    return jnp.stack(out) if out else values


def unscale(values: ArrayLike, scales: Sequence[str]) -> Array:
    """Values on their estimation scales back on the linear scale."""
    values = jnp.asarray(values)
    out = [Scale(s).inverse(v, jnp) for v, s in zip(jnp.unstack(values), scales)]
    return jnp.stack(out) if out else values


def unscale_derivative(values: ArrayLike, scales: Sequence[str]) -> Array:
    """The diagonal of `unscale`'s Jacobian: `d lin / d value` for each parameter."""
    values = jnp.asarray(values)
    out = [Scale(s).inverse_derivative(v, jnp) for v, s in zip(jnp.unstack(values), scales)]
    return jnp.stack(out) if out else values


def to_scale(values, scales: Sequence[str]) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.array([Scale(s).forward(v) for v, s in zip(values, scales)], dtype=float)


def from_scale(values, scales: Sequence[str]) -> np.ndarray:
    """`unscale` on the host, in NumPy (no small programs to compile)."""
    values = np.asarray(values, dtype=float)
    return np.array([Scale(s).inverse(v) for v, s in zip(values, scales)], dtype=float)


class Experiment(eqx.Module):
    """One experiment of a `ji.Problem`: when the outputs were measured, what was
    measured, how noisy it was, and under which condition.

    **Arguments:**

    - `times`: the measurement times, non-decreasing (a time given twice holds
      replicate measurements); all `inf` for measurements at the steady state that
      the model reaches from its initial state (PEtab's time `inf`).
    - `data`: `(n_times, n_outputs)` measurements, NaN where an output was not measured
      at a time; `None` for a design study (no data: only the noise model matters).
    - `sigma`: the noise standard deviations: a scalar, one per output, one per datum,
      or a `ji.MeasurementError` (computed from the data).
    - `condition`: `{model parameter: value}` for this experiment: a number fixes the
      parameter at that value here (an input, a dose, a known initial amount), a string
      maps it to a parameter of the problem (e.g. a scale factor per experiment).
    - `name`: a label.
    - `preequilibration`: a condition like `condition` under which the model is first
      brought to steady state from its initial state (PEtab's
      `preequilibrationConditionId`): the experiment starts there (a state its
      `condition` sets starts from that value). `None`: from the initial state. The
      experiments of one problem may mix both.
    """

    times: Float[np.ndarray, " n"]
    data: Float[np.ndarray, "n m"] | None
    sigma: object
    condition: tuple[tuple[str, float | str], ...] = eqx.field(static=True)
    name: str = eqx.field(static=True)
    preequilibration: tuple[tuple[str, float | str], ...] | None = eqx.field(static=True)

    def __init__(
        self,
        times: ArrayLike | Sequence[float],
        data: ArrayLike | None = None,
        sigma: float | ArrayLike | MeasurementError = 1.0,
        condition: Mapping[str, float | str] | None = None,
        name: str = "",
        preequilibration: Mapping[str, float | str] | None = None,
    ):
        times = np.asarray(times, dtype=float)
        if times.ndim != 1 or times.size == 0:
            raise ValueError(f"times must be a non-empty 1-D array, got shape {times.shape}.")
        if np.any(np.isnan(times)) or np.any(times == -np.inf):
            raise ValueError("times must be numbers, or inf for a steady-state measurement.")
        if np.any(np.isinf(times)) and not np.all(np.isinf(times)):
            raise ValueError(
                "An experiment measures at finite times or at steady state (inf), not both: "
                "give the steady-state measurements an experiment of their own."
            )
        if np.any(np.diff(times) < 0):
            raise ValueError("times must be non-decreasing (a time repeats for replicates).")
        self.times = times
        if data is not None:
            data = np.asarray(data, dtype=float)
            if data.ndim == 1:
                data = data[:, None]
            if data.ndim != 2 or data.shape[0] != times.size:
                raise ValueError(
                    f"data has shape {data.shape}; expected ({times.size}, n_outputs)."
                )
            if np.any(np.isinf(data)):
                raise ValueError("data contains inf; mark a missing datum with NaN.")
        self.data = data
        if not isinstance(sigma, MeasurementError):
            sigma = np.asarray(sigma, dtype=float)
            if np.any(~(sigma > 0)) or np.any(np.isinf(sigma)):
                raise ValueError("sigma must be positive and finite.")
            if np.any(sigma < _SMALLEST_SIGMA):
                raise ValueError(
                    f"sigma {float(sigma.min()):.3g} is below {_SMALLEST_SIGMA:g}: its "
                    "square underflows to 0 in float64 and the log-likelihood would be "
                    "NaN. Give the data and the noise in other units."
                )
        self.sigma = sigma
        self.condition = _as_condition(condition)
        self.preequilibration = (
            None if preequilibration is None else _as_condition(preequilibration)
        )
        self.name = str(name)


def _as_condition(condition) -> tuple:
    out = []
    for k, v in dict(condition or {}).items():
        if isinstance(v, str):
            out.append((str(k), v))
        else:
            v = float(v)
            if not math.isfinite(v):
                raise ValueError(f"condition value for {k!r} is not finite: {v}.")
            out.append((str(k), v))
    return tuple(out)


# the smallest standard deviation whose square is a normal float64 number
_SMALLEST_SIGMA = 1e-150


def _stacked(model, experiments, m: int) -> tuple[np.ndarray, ...]:
    """The experiments' times, data, standard deviations and observed entries, each
    `(n_experiments, T, ...)`, padded to the longest (`T`) with their last time, NaN
    data, sigma 1 and nothing observed; checked against the model (its start `t0`, its
    `m` outputs)."""
    T = max(e.times.size for e in experiments)
    times, data, sigma, observed = [], [], [], []
    t0 = -np.inf if isinstance(model, AlgebraicModel) else float(model.t0)
    for e in experiments:
        n = e.times.size
        if e.times[0] < t0:
            raise ValueError(
                f"experiment {e.name!r} measures at t = {e.times[0]:g}, before the "
                f"model starts (t0 = {t0:g}): give times from t0 on."
            )
        d = np.full((n, m), np.nan) if e.data is None else e.data
        if d.shape[1] != m:
            raise ValueError(
                f"experiment {e.name!r}: data has {d.shape[1]} outputs, the model {m}."
            )
        if isinstance(e.sigma, MeasurementError):
            s = np.asarray(e.sigma.sigma(np.where(np.isnan(d), 0.0, d)))
        else:
            s = np.asarray(e.sigma, dtype=float)
            if s.shape not in ((), (m,), (n, m)):
                raise ValueError(
                    f"experiment {e.name!r}: sigma has shape {s.shape}; give a scalar, one "
                    f"per output ({m},) or one per datum ({n}, {m}) ({n} times, {m} outputs)."
                )
            s = np.broadcast_to(s, (n, m))
        pad = T - n
        times.append(np.concatenate([e.times, np.full(pad, e.times[-1])]))
        data.append(np.concatenate([d, np.full((pad, m), np.nan)]))
        sigma.append(np.concatenate([s, np.ones((pad, m))]))
        # the rows of the sensitivity matrix: the data, or every output at every
        # time of a design study (no data)
        seen = np.ones((n, m), bool) if e.data is None else ~np.isnan(d)
        observed.append(np.concatenate([seen, np.zeros((pad, m), bool)]))
    return tuple(np.stack(a) for a in (times, data, sigma, observed))


class Problem(eqx.Module):
    """A model and its experiments: what `ji.analyze`, `ji.sensitivity` and the
    PEtab importer (`ji.petab.load`) work on.

    **Arguments:**

    - `model`: any jaxident model.
    - `experiments`: one or more `ji.Experiment`s.
    - `parameters`: the problem's parameters (names, nominal values and bounds on the
      linear scale); default: the model's, less those that every experiment fixes to a
      number. A string in an experiment's condition must name one of them; a model
      parameter that is not one of them and not in the condition keeps its nominal
      value.
    - `scales`: `{name: "lin" | "log" | "log10"}`, the scale each parameter is
      estimated on (default `"lin"`): the sensitivity matrix and the Fisher information
      are taken with respect to the parameters on these scales.
    - `transforms`, `distributions`: per model output, `"lin"`, `"log"` or `"log10"`
      (the data are compared on that scale, PEtab's observable transformation) and
      `ji.Normal()` or `ji.Laplace()` (the noise distribution; PEtab's names `"normal"`,
      `"laplace"` are taken too); default lin
      and normal.
    - `noise_outputs`: per observable (or one for all), whether the model has an
      output after its observables that gives that observable's noise standard
      deviation (a noise model with parameters: PEtab's `noiseFormula`).
    - `noise_parameters`: the names of the parameters that enter only the noise.
    - `name`: the problem's name, for reports.
    - `override_text`: the PEtab import's override cells, per experiment `((i, o),
      (observableParameters, noiseParameters))` per datum as the measurement table
      writes them, for its simulation tables; `None` for a problem built by hand.

    `parameters` of the result holds the nominal values and bounds on the estimation
    scales, so that `theta` everywhere means the estimation-scale vector.
    """

    model: AbstractModel
    parameters: Parameters
    linear: Parameters
    scales: tuple[str, ...] = eqx.field(static=True)
    times: Float[Array, "e n"]
    data: Float[Array, "e n m"]
    sigma: Float[Array, "e n m"]
    observed: Bool[Array, "e n m"]
    source: tuple = eqx.field(static=True)
    constant: Float[Array, "e pm"]
    pre_source: tuple | None = eqx.field(static=True)
    preequilibrated: tuple[bool, ...] = eqx.field(static=True)
    steady: tuple[bool, ...] = eqx.field(static=True)
    columns: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    pre_constant: Float[Array, "e pm"] | None
    experiment_names: tuple[str, ...] = eqx.field(static=True)
    transforms: tuple[str, ...] = eqx.field(static=True)
    distributions: tuple[AbstractNoise, ...] = eqx.field(static=True)
    noise_outputs: tuple[bool, ...] = eqx.field(static=True)
    noise_parameters: tuple[str, ...] = eqx.field(static=True)
    name: str = eqx.field(static=True)
    # the PEtab import's override cells per experiment, `((i, o), (observableParameters,
    # noiseParameters))` per datum as written in the measurement table, for its
    # simulation tables; `None` for a problem built by hand
    override_text: tuple[tuple, ...] | None = eqx.field(static=True, default=None)

    def __init__(
        self,
        model: AbstractModel,
        experiments: Sequence[Experiment] | Experiment,
        parameters: Parameters | None = None,
        scales: Mapping[str, str] | None = None,
        transforms: Sequence[str] | None = None,
        distributions: Sequence[str | AbstractNoise] | None = None,
        *,
        noise_outputs: bool | Sequence[bool] = False,
        noise_parameters: Sequence[str] = (),
        name: str = "",
        override_text: Sequence[Sequence[tuple]] | None = None,
    ):
        check_model(model)
        if isinstance(experiments, Experiment):
            experiments = [experiments]
        experiments = list(experiments)
        if not experiments or not all(isinstance(e, Experiment) for e in experiments):
            raise TypeError("experiments must be one or more ji.Experiment.")
        params = _default_parameters(model, experiments) if parameters is None else parameters
        scales = dict(scales or {})
        for k, s in scales.items():
            params.index(k)
            (scales[k],) = as_scales([s], f"scale of {k!r}")
        scale = tuple(scales.get(n, Scale.lin) for n in params.names)
        nom, lo, up = (
            np.asarray(a, dtype=float) for a in (params.nominal, params.lower, params.upper)
        )
        for i, (n, s) in enumerate(zip(params.names, scale)):
            if s != Scale.lin and not (nom[i] > 0 and lo[i] >= 0):
                raise ValueError(
                    f"{n!r} is estimated on a {s.value} scale, so its nominal value must be "
                    f"positive and its lower bound >= 0; got {nom[i]:g} in [{lo[i]:g}, {up[i]:g}]."
                )
        self.linear = params
        self.parameters = Parameters(
            params.names, to_scale(nom, scale), to_scale(lo, scale), to_scale(up, scale)
        )
        self.scales = scale
        self.model = model
        n_out = n_outputs(model)
        m = n_out // 2 if np.any(noise_outputs) else n_out
        self.noise_outputs = tuple(np.broadcast_to(np.asarray(noise_outputs, bool), (m,)).tolist())
        self.noise_parameters = tuple(noise_parameters)
        self.override_text = (
            None if override_text is None else tuple(tuple(e) for e in override_text)
        )
        self.transforms = as_scales(transforms or (Scale.lin,) * m, "observable transformation")
        self.distributions = as_noises(distributions or (Normal(),) * m, "noise distribution")
        if len(self.transforms) != m or len(self.distributions) != m:
            raise ValueError(f"Give one transform and one distribution per output ({m}).")
        times, data, sigma, observed = _stacked(model, experiments, m)
        self.steady = tuple(bool(np.isinf(e.times[0])) for e in experiments)
        self.times = device_array(times)
        self.data = device_array(data)
        self.sigma = device_array(sigma)
        self.observed = device_array(observed)
        self.preequilibrated = tuple(e.preequilibration is not None for e in experiments)
        src, const = _mapping(model, params, experiments, "condition")
        self.source, self.constant = src, device_array(const)
        if any(self.preequilibrated):
            # (an experiment without a pre-equilibration maps the model's parameters by
            # name there, which no solve reads)
            src, const = _mapping(model, params, experiments, "preequilibration")
            self.pre_source, self.pre_constant = src, device_array(const)
        else:
            self.pre_source, self.pre_constant = None, None
        self.experiment_names = tuple(
            e.name or f"experiment {i}" for i, e in enumerate(experiments)
        )
        self.columns = parameter_columns(model, self.source, self.pre_source, self.preequilibrated,
                                observed, self.noise_outputs)  # fmt: skip
        self.name = name

    @classmethod
    def from_model(
        cls,
        model: AbstractModel,
        data: ArrayLike | None = None,
        times: ArrayLike | Sequence[float] | None = None,
        sigma: float | ArrayLike | MeasurementError = 1.0,
        *,
        name: str = "",
    ) -> "Problem":
        """A model alone as a problem of one experiment: its outputs measured at `times`
        (default `model.times`) as `data` (`(n_times, n_outputs)`, NaN where missing;
        `None` for a design study) with standard deviations `sigma` (see
        `ji.Experiment`); the parameters, their nominal values and bounds the model's,
        every one estimated on the linear scale."""
        times = getattr(model, "times", None) if times is None else times
        if times is None:
            raise ValueError(f"{type(model).__name__} has no default times: give times.")
        experiment = Experiment(np.asarray(times, dtype=float), data, sigma)
        return cls(model, experiment, name=name or type(model).__name__)

    def fix(self, values: Mapping[str, float]) -> "Problem":
        """This problem with the parameters in `values` (`{name: value}`, each on its
        estimation scale, as every problem vector) held at those values: they leave
        `parameters`, and every model parameter an experiment mapped to one of them
        takes its value as a constant. What `ji.reduce_parameters` fixes (its `fixed`),
        so that `ji.estimate` fits the rest."""
        names = self.parameters.names
        held = {self.parameters.index(k): float(v) for k, v in dict(values).items()}
        if not all(math.isfinite(v) for v in held.values()):
            raise ValueError(f"Fixed values must be finite, got {dict(values)}.")
        keep = [i for i in range(len(names)) if i not in held]
        if not keep:
            raise ValueError("Every parameter of the problem would be fixed.")
        index = np.full(len(names), -1)
        index[keep] = np.arange(len(keep))
        linear = {i: float(Scale(self.scales[i]).inverse(v)) for i, v in held.items()}

        def remap(source, constant):
            src, const = np.asarray(source), np.array(constant, dtype=float)
            for i, v in linear.items():
                const[src == i] = v
            src = np.where(src >= 0, index[np.maximum(src, 0)], -1)
            return tuple(map(tuple, src.tolist())), device_array(const)

        def subset(params):
            return Parameters(
                [params.names[i] for i in keep],
                *(np.asarray(a)[keep] for a in (params.nominal, params.lower, params.upper)),
            )

        source, constant = remap(self.source, self.constant)
        pre_source, pre_constant = None, None
        if self.pre_source is not None:
            pre_source, pre_constant = remap(self.pre_source, self.pre_constant)
        columns = parameter_columns(self.model, source, pre_source, self.preequilibrated,
                           np.asarray(self.observed), self.noise_outputs)  # fmt: skip
        # the constructor's checks hold for the rest: the fields are replaced in a copy
        out = copy.copy(self)
        for k, v in dict(
            parameters=subset(self.parameters), linear=subset(self.linear),
            scales=tuple(self.scales[i] for i in keep), source=source, constant=constant,
            pre_source=pre_source, pre_constant=pre_constant, columns=columns,
        ).items():  # fmt: skip
            object.__setattr__(out, k, v)
        return out

    @property
    def is_one_model(self) -> bool:
        """Whether this problem is one model with data, as `as_model` takes it."""
        return not self._not_one_model()

    def _not_one_model(self) -> list[str]:
        refuse = []
        if self.n_experiments != 1:
            refuse.append(f"{self.n_experiments} experiments")
        if any(self.steady) or any(self.preequilibrated):
            refuse.append("a steady-state measurement or pre-equilibration")
        logs = [n for n, s in zip(self.parameters.names, self.scales) if s != Scale.lin]
        if logs:
            refuse.append(f"parameters estimated on log scales ({', '.join(logs)})")
        if any(t != Scale.lin for t in self.transforms):
            refuse.append("observable transformations")
        if not all(d.quadratic for d in self.distributions):
            refuse.append("Laplace noise")
        if any(self.noise_outputs) or self.noise_parameters:
            refuse.append("noise parameters")
        source = np.asarray(self.source[0])
        takes = [np.flatnonzero(source == i) for i in range(self.parameters.p)]
        shared = [n for n, t in zip(self.parameters.names, takes) if t.size != 1]
        if shared:
            refuse.append(f"parameters that are not one model parameter each ({', '.join(shared)})")
        return refuse

    def as_model(self, what: str = "Problem.as_model") -> "ModelView":
        """This problem as a model with data, for the analyses written for one model
        (`what` names the analysis in errors): its one experiment's times, data
        (`None` for a design study) and standard deviations, and the model with the
        problem's parameters (their nominal values and bounds; a parameter the
        experiment's condition fixes is held at its value, `ji.fix_parameters`).

        **Raises:** `ValueError` naming what the analysis cannot take: several
        experiments, a steady-state measurement or pre-equilibration, a parameter or
        observable not on the linear scale, Laplace noise, noise parameters, or a
        problem parameter that is not exactly one model parameter."""
        refuse = self._not_one_model()
        if refuse:
            raise ValueError(
                f"{what} analyses one model with data: a problem of one experiment whose "
                "outputs are the model's, on linear scales with normal noise. This problem "
                f"has {'; '.join(refuse)}. Every analysis (ji.sensitivity, ji.estimate, "
                "ji.profile, ji.analyze, ji.set_by_set, ji.one_by_one, ji.lserc, "
                "ji.reduce_parameters) takes any problem."
            )
        source = np.asarray(self.source[0])
        takes = [np.flatnonzero(source == i) for i in range(self.parameters.p)]
        data = None if not bool(np.any(np.isfinite(np.asarray(self.data[0])))) else self.data[0]
        free = tuple(int(t[0]) for t in takes)
        model, params = self.model, self.linear
        same = (free == tuple(range(model.parameters.p))
                and params.names == model.parameters.names
                and all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in (
                    (params.nominal, model.parameters.nominal),
                    (params.lower, model.parameters.lower),
                    (params.upper, model.parameters.upper))))  # fmt: skip
        if not same:
            fixed = jnp.asarray(self.constant[0])
            model = reparameterize(model, params, free, fixed, jnp.ones(len(free)))
        return ModelView(model, np.asarray(self.times[0]), data, np.asarray(self.sigma[0]))

    @property
    def model_file(self) -> str | None:
        """The SBML file of an imported model, else `None`."""
        return getattr(self.model, "source", None)

    @property
    def n_experiments(self) -> int:
        return len(self.experiment_names)

    @property
    def n_observables(self) -> int:
        return len(self.transforms)

    @property
    def output_names(self) -> tuple[str, ...]:
        names = self.model.output_names or tuple(f"y{i}" for i in range(self.n_observables))
        return tuple(names[: self.n_observables])


def check_problem(problem, what: str) -> None:
    """Refuse anything but a `Problem` for `what`, an entry point that takes only one
    (a model with data becomes one by `Problem.from_model`)."""
    if not isinstance(problem, Problem):
        raise TypeError(
            f"{what} takes a ji.Problem, got {type(problem).__name__} (a model with data "
            "becomes one: ji.Problem.from_model(model, data, times, sigma))."
        )


class ModelView(NamedTuple):
    """A one-experiment problem as a model with data (`Problem.as_model`)."""

    model: AbstractModel
    times: np.ndarray
    data: Array | None
    sigma: np.ndarray


def parameter_columns(model, source, pre_source, preequilibrated, observed, noise_outputs):
    """Per experiment, the problem parameters (indices) its measured outputs can depend
    on: those mapped to a model parameter of the solution's or of a measured output's
    formula (`parameter_dependence`), or of the solution of its pre-equilibration (for
    the experiments that have one). Without a known dependence, every parameter mapped
    into the experiment."""
    if pre_source is not None:
        pre_source = tuple(src if f else () for src, f in zip(pre_source, preequilibrated))
    dep = model.parameter_dependence()
    names = model.parameters.names
    if dep is not None and len(dep.outputs) != n_outputs(model):
        raise ValueError(
            f"{type(model).__name__}.parameter_dependence() gives {len(dep.outputs)} output "
            f"sets for {n_outputs(model)} outputs."
        )
    out = []
    for e, src in enumerate(source):
        pre = () if pre_source is None else pre_source[e]
        if dep is None:
            cols = {j for j in (*src, *pre) if j >= 0}
        else:
            m = len(noise_outputs)
            used = set(dep.dynamics)
            for o in np.flatnonzero(observed[e].any(axis=0)):
                used |= dep.outputs[o]
                if noise_outputs[o]:
                    used |= dep.outputs[m + o]
            cols = {j for n, j in zip(names, src) if j >= 0 and n in used}
            cols |= {j for n, j in zip(names, pre) if j >= 0 and n in dep.dynamics}
        out.append(tuple(sorted(cols)))
    return tuple(out)


def _default_parameters(model, experiments) -> Parameters:
    """The model's parameters less those every experiment fixes to a number."""
    fixed = set.intersection(
        *({k for k, v in e.condition if not isinstance(v, str)} for e in experiments)
    )
    p = model.parameters
    keep = [i for i, n in enumerate(p.names) if n not in fixed]
    if not keep:
        raise ValueError("Every parameter is fixed by the experiments' conditions.")
    idx = np.asarray(keep)
    return Parameters(
        [p.names[i] for i in keep],
        np.asarray(p.nominal)[idx],
        np.asarray(p.lower)[idx],
        np.asarray(p.upper)[idx],
    )


def _mapping(model, params: Parameters, experiments, field: str):
    """Per experiment and model parameter: the index of the problem parameter it takes
    (-1: a constant) and the constant."""
    names = model.parameters.names
    nominal = np.asarray(model.parameters.nominal, dtype=float)
    src = np.full((len(experiments), len(names)), -1, dtype=int)
    const = np.tile(nominal, (len(experiments), 1))
    for e, exp in enumerate(experiments):
        cond = dict(getattr(exp, field) or ())
        for k in cond:
            if k not in names:
                model.parameters.index(k)  # raises with a suggestion
        for j, n in enumerate(names):
            v = cond.get(n, n)
            if isinstance(v, str):
                if v in params.names:
                    src[e, j] = params.names.index(v)
                elif v == n:
                    continue
                else:
                    raise ValueError(
                        f"experiment {exp.name!r}: {n!r} is mapped to {v!r}, which is not a "
                        f"parameter of the problem {list(params.names)}."
                    )
            else:
                const[e, j] = float(v)
    return tuple(map(tuple, src.tolist())), const
