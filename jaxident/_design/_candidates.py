"""Candidate measurements for `ji.design`: what could be measured next (an output of
the model, a state, or a new observable), at which times (a grid, or free in a window),
under which condition (an experiment of the problem, with parameters overridden), and
how noisy it would be.

Every candidate becomes an experiment of a *candidate problem*: the problem's model
wrapped so that its outputs are its own, the new observables, and their time
derivatives (`Observed`), with the problem's parameters, scales and conditions. One
`ji.predict` of that problem gives every candidate's row of the weighted sensitivity
matrix, `d(h(y)/sigma)/dtheta` on the estimation scale (its outer product is the
candidate's Fisher information), and with the derivative outputs the row's derivative
with respect to the measurement time: `d/dt dy/dtheta = d/dtheta dy/dt`, and
`dy/dt = dh/dt + dh/dx f(t, x, theta)` is an output like any other, so the time
gradient of any design criterion is exact without differentiating the solver.
"""

import copy
import functools
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import sympy
from jaxtyping import ArrayLike

from .._model._base import AbstractModel, DAEModel, ODEModel, ParameterDependence
from .._model._checks import n_outputs
from .._model._transforms import AbstractSameParameters, AbstractTransformedODE
from .._problem._base import parameter_columns, Problem
from .._problem._noise import Normal
from .._problem._scale import Scale
from .._runtime._host import device_array


class Candidate(eqx.Module):
    """One kind of measurement `ji.design` may choose, at any of its times and under
    any of its conditions.

    **Arguments:**

    - `observable`: what is measured: the name of an output of the model, the name of
      a state (`model.state_names`), an expression in the states and parameters
      (`"x1 + x2"`, `"k1 * x2"`, parsed by sympy, never `eval`), or a function
      `f(t, x, theta) -> scalar` (`theta` the model's `ParameterValues`).
    - `times`: the times it may be measured at (each a candidate measurement); with
      `window`, the starting grid of the free times (default 21 points across it).
    - `window`: `(start, end)`: the times are free in it, refined by gradient after the
      greedy choice (an `ODEModel` only: the time derivative of the sensitivities comes
      from its vector field).
    - `sigma`: the noise standard deviation of one measurement (on the `transform`'s
      scale: with `"log"`, 0.1 is a 10% error).
    - `transform`: `"lin"`, `"log"` or `"log10"`, the scale the datum is compared on.
    - `experiment`: the problem's experiment (name or index) whose condition it is
      measured under; `None`: each of the problem's experiments at finite times.
    - `condition`: `{model parameter: value}` overrides of that condition (a dose, an
      initial amount, a knock-down: a number; a string maps to a problem parameter):
      a new experiment.
    - `name`: a label (default: the observable's name).
    """

    observable: str | Callable = eqx.field(static=True)
    times: np.ndarray
    window: tuple[float, float] | None = eqx.field(static=True)
    sigma: float = eqx.field(static=True)
    transform: Scale = eqx.field(static=True)
    experiment: str | int | None = eqx.field(static=True)
    condition: tuple[tuple[str, float | str], ...] = eqx.field(static=True)
    name: str = eqx.field(static=True)

    def __init__(
        self,
        observable: str | Callable,
        times: ArrayLike | Sequence[float] | None = None,
        *,
        window: tuple[float, float] | None = None,
        sigma: float = 1.0,
        transform: str = "lin",
        experiment: str | int | None = None,
        condition: Mapping[str, float | str] | None = None,
        name: str | None = None,
    ):
        if not (isinstance(observable, str) or callable(observable)):
            raise TypeError("observable must be a name, an expression or f(t, x, theta).")
        if window is not None:
            lo, hi = (float(w) for w in window)
            if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
                raise ValueError(f"window must be (start, end) with start < end, got {window}.")
            window = (lo, hi)
            if times is None:
                times = np.linspace(lo, hi, 21)
        if times is None:
            raise ValueError("Give the candidate's times, or a window.")
        times = np.atleast_1d(np.asarray(times, dtype=float))
        if times.ndim != 1 or not np.all(np.isfinite(times)):
            raise ValueError("times must be a 1-D array of finite numbers.")
        if window is not None and np.any((times < window[0]) | (times > window[1])):
            raise ValueError(f"times must lie in the window {window}.")
        sigma = float(sigma)
        if not (np.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be positive and finite, got {sigma}.")
        self.observable = observable
        self.times = np.unique(times)
        self.window = window
        self.sigma = sigma
        self.transform = Scale.of(transform, "transform")
        self.experiment = experiment
        given = dict(condition or {}).items()
        self.condition = tuple((str(k), v if isinstance(v, str) else float(v)) for k, v in given)
        if name is None:
            name = getattr(observable, "__name__", observable)
            name = name if isinstance(name, str) and name != "<lambda>" else "observable"
        self.name = str(name)


class Observable(eqx.Module):
    """A candidate's observable: a model output (`output`, its index), a state
    (`state`), or a function `fn(t, x, theta)` (an expression's, kept per text, or the
    user's); with the text PEtab writes for it (`None` for a function). Equal
    observables compare equal, so that a second design with the same candidates reuses
    the compiled solve."""

    formula: str | None = eqx.field(static=True)
    output: int | None = eqx.field(static=True, default=None)
    state: int | None = eqx.field(static=True, default=None)
    fn: Callable | None = eqx.field(static=True, default=None)

    def value(self, model: AbstractModel, t, x, th):
        if self.output is not None:
            return jnp.atleast_1d(model.output(t, x, th))[self.output]
        if self.state is not None:
            return jnp.ravel(x)[self.state]
        return self.fn(t, x, th)


def observable(model: AbstractModel, what, base_outputs: int) -> Observable:
    """`what` (an output name, a state name, an expression or a function) as an
    `Observable` of `model`."""
    if callable(what):
        return Observable(None, fn=what)
    outputs = tuple(model.output_names or ())[:base_outputs]
    if what in outputs:
        return Observable(what, output=outputs.index(what))
    states = tuple(model.state_names or ())
    if what in states:
        return Observable(what, state=states.index(what))
    return Observable(what, fn=_expression(what, states, tuple(model.parameters.names)))


@functools.lru_cache(maxsize=256)
def _expression(text: str, states: tuple, parameters: tuple) -> Callable:
    """A sympy expression in the states, the parameters and `t`, as a jax function
    (one per text and model names: a design again compiles nothing new)."""
    names = {s: sympy.Symbol(s) for s in (*states, *parameters, "t")}
    try:
        expr = sympy.parse_expr(text, local_dict=names, evaluate=True)
    except (SyntaxError, TypeError, sympy.SympifyError) as e:
        raise ValueError(f"Cannot read the observable {text!r}: {e}") from None
    unknown = sorted(str(s) for s in expr.free_symbols if str(s) not in names)
    if unknown or not expr.free_symbols & {names[s] for s in states}:
        known = f"states {list(states)}, parameters {list(parameters)}"
        raise ValueError(
            f"The observable {text!r} is not an output name, a state or an expression "
            f"in the states ({'unknown: ' + ', '.join(unknown) if unknown else 'no state in it'}); "
            f"the model has {known}."
        )
    fn = sympy.lambdify([names[s] for s in (*states, *parameters, "t")], expr, modules="jax")

    def value(t, x, th):
        x = jnp.ravel(x)
        args = [x[i] for i in range(len(states))] + [getattr(th, p) for p in parameters]
        return jnp.asarray(fn(*args, t), dtype=x.dtype)

    return value


class Observed(AbstractSameParameters, AbstractTransformedODE):
    """`base` with outputs `[its own m, the k observables, their k time derivatives]`
    (and, for a problem with noise outputs, its m noise outputs and 2k of ones after
    them): the candidate problem's model."""

    base: ODEModel
    observables: tuple[Observable, ...] = eqx.field(static=True)
    m: int = eqx.field(static=True)
    noise: bool = eqx.field(static=True)

    def output(self, t, x, theta):
        th = self.base_theta(theta)
        y = jnp.atleast_1d(self.base.output(t, x, th))
        new = [jnp.asarray(o.value(self.base, t, x, th), y.dtype) for o in self.observables]
        f = self.base.vector_field(t, x, th)
        rates = []
        for o in self.observables:

            def value(s, z, o=o):
                return jnp.asarray(o.value(self.base, s, z, th), y.dtype)

            rates.append(jax.jvp(value, (t, x), (jnp.ones_like(t), f))[1])
        parts = [y[: self.m], jnp.stack(new), jnp.stack(rates)]
        if self.noise:
            parts += [y[self.m :], jnp.ones(2 * len(self.observables), y.dtype)]
        return jnp.concatenate(parts)

    @property
    def output_names(self):
        return None

    def parameter_dependence(self):
        dep = self.base.parameter_dependence()
        if dep is None:
            return None
        every = frozenset(self.base.parameters.names)
        k = len(self.observables)
        own = dep.outputs[: self.m]
        new = tuple(every for _ in range(2 * k))
        noise = ()
        if self.noise:
            noise = dep.outputs[self.m :] + tuple(frozenset() for _ in range(2 * k))
        return ParameterDependence(dep.dynamics, own + new + noise)


def observed_model(problem: Problem, observables) -> Observed:
    model = problem.model
    if isinstance(model, DAEModel) or not isinstance(model, ODEModel):
        raise ValueError(
            f"ji.design takes an ODE model; {type(model).__name__} is not one (a DAE's "
            "new observables and their time derivatives need its algebraic states)."
        )
    noise = any(problem.noise_outputs)
    return Observed(model, tuple(observables), problem.n_observables, noise)


class Block(eqx.Module):
    """One experiment of a candidate problem: observable `k` (of the `Observed` model)
    at `times`, under the condition of the problem's experiment `e` with `override`."""

    k: int = eqx.field(static=True)
    e: int = eqx.field(static=True)
    override: tuple = eqx.field(static=True)
    times: np.ndarray
    sigma: float = eqx.field(static=True)
    transform: Scale = eqx.field(static=True)
    name: str = eqx.field(static=True)
    values: np.ndarray | None = None  # data at `times` (the predicted ones), or none


def experiment_index(problem: Problem, which) -> int:
    names = problem.experiment_names
    if isinstance(which, str):
        if which not in names:
            raise ValueError(f"Unknown experiment {which!r}; the problem has {list(names)}.")
        return names.index(which)
    i = int(which)
    if not 0 <= i < len(names):
        raise ValueError(f"experiment {i} out of range: the problem has {len(names)}.")
    return i


def _mapped(problem: Problem, e: int, override, pre: bool):
    """Experiment `e`'s parameter mapping with `override` applied (a number fixes a
    model parameter, a string maps it to a problem parameter)."""
    source = np.array((problem.pre_source if pre else problem.source)[e])
    constant = np.array((problem.pre_constant if pre else problem.constant)[e], dtype=float)
    for k, v in override:
        j = problem.model.parameters.index(k)
        if isinstance(v, str):
            source[j] = problem.parameters.index(v)
        else:
            source[j], constant[j] = -1, v
    return tuple(source.tolist()), constant


def _grouped(blocks):
    """The blocks by condition (`(e, override)`): per group, its blocks' `(block, time
    index)` pairs in the order of their times (stable)."""
    groups: dict = {}
    for i, b in enumerate(blocks):
        groups.setdefault((b.e, b.override), []).extend((i, j) for j in range(b.times.size))
    out = []
    for key, pairs in groups.items():
        t = np.asarray([blocks[i].times[j] for i, j in pairs])
        out.append((key, [pairs[r] for r in np.argsort(t, kind="stable")]))
    return out


def candidate_problem(problem: Problem, model: Observed, blocks, keep: bool = False,
                      rates: bool = True):  # fmt: skip
    """The problem of `model` with one experiment per condition of `blocks`, whose rows
    are the blocks' measurements in the order of their times, each observing its
    observable (and with `rates` its time derivative, so that those rows come back);
    after the problem's own experiments where `keep` (their data's rows; the new
    observables are not observed there). Returns the problem and, per block, its
    experiment and rows (`(e, rows)`): one solve per condition, not per candidate."""
    m, k = model.m, len(model.observables)
    mm = m + 2 * k
    keep = list(range(problem.n_experiments)) if keep else []
    groups = _grouped(blocks)
    T = max([len(p) for _, p in groups] + [problem.times.shape[1] if keep else 1])
    parts = {f: [] for f in ("times", "data", "sigma", "observed", "src", "const", "psrc",
                             "pconst", "names", "pre")}  # fmt: skip
    has_pre = problem.pre_source is not None

    def add(t, d, s, o, e, override, name):
        n = t.size
        parts["times"].append(np.concatenate([t, np.full(T - n, t[-1])]))
        for key, a, fill in (("data", d, np.nan), ("sigma", s, 1.0), ("observed", o, False)):
            full = np.full((T, mm), fill, dtype=a.dtype)
            full[:n] = a
            parts[key].append(full)
        for pre, (ks, kc) in ((False, ("src", "const")), (True, ("psrc", "pconst"))):
            if has_pre or not pre:
                s_, c_ = _mapped(problem, e, override, pre)
                parts[ks].append(s_)
                parts[kc].append(c_)
        parts["names"].append(name)
        parts["pre"].append(problem.preequilibrated[e])

    for e in keep:
        n = problem.times.shape[1]
        d, s, o = np.full((n, mm), np.nan), np.ones((n, mm)), np.zeros((n, mm), bool)
        d[:, :m], s[:, :m] = np.asarray(problem.data[e]), np.asarray(problem.sigma[e])
        o[:, :m] = np.asarray(problem.observed[e])
        add(np.asarray(problem.times[e]), d, s, o, e, (), problem.experiment_names[e])
    where = [None] * len(blocks)
    for g, ((e, override), pairs) in enumerate(groups):
        n = len(pairs)
        t = np.asarray([blocks[i].times[j] for i, j in pairs])
        d, s, o = np.full((n, mm), np.nan), np.ones((n, mm)), np.zeros((n, mm), bool)
        for r, (i, j) in enumerate(pairs):
            b = blocks[i]
            if b.values is not None:
                d[r, m + b.k] = b.values[j]
            s[r, m + b.k] = b.sigma
            o[r, m + b.k] = True
            o[r, m + k + b.k] = rates
        for i in {i for i, _ in pairs}:
            where[i] = (
                len(keep) + g,
                np.asarray([r for r, (i2, _) in enumerate(pairs) if i2 == i]),
            )
        names = dict.fromkeys(blocks[i].name for i, _ in pairs)
        add(t, d, s, o, e, override, " + ".join(names))
    return _assembled(problem, model, blocks, keep, parts), where


def _assembled(problem: Problem, model: Observed, blocks, keep, parts) -> Problem:
    k = len(model.observables)
    noise = tuple(problem.noise_outputs) + (False,) * (2 * k)
    transforms = list(problem.transforms) + [Scale.lin] * (2 * k)
    for b in blocks:
        transforms[model.m + b.k] = b.transform
    observed = np.stack(parts["observed"])
    pre = tuple(parts["pre"])
    psrc = tuple(parts["psrc"]) if problem.pre_source is not None else None
    columns = parameter_columns(model, tuple(parts["src"]), psrc, pre, observed, noise)
    out = copy.copy(problem)
    fields = dict(
        model=model,
        times=device_array(np.stack(parts["times"])),
        data=device_array(np.stack(parts["data"])),
        sigma=device_array(np.stack(parts["sigma"])),
        observed=device_array(observed),
        source=tuple(parts["src"]),
        constant=device_array(np.stack(parts["const"])),
        pre_source=psrc,
        pre_constant=None if psrc is None else device_array(np.stack(parts["pconst"])),
        preequilibrated=pre,
        steady=tuple(problem.steady[e] for e in keep) + (False,) * (len(pre) - len(keep)),
        columns=columns,
        experiment_names=tuple(parts["names"]),
        transforms=tuple(transforms),
        distributions=tuple(problem.distributions) + (Normal(),) * (2 * k),
        noise_outputs=noise,
        override_text=None,
    )
    for name, value in fields.items():
        object.__setattr__(out, name, value)
    n_outputs(model)
    return out
