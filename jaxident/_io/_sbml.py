"""SBML models as `ji.ODEModel`s: the file is read by libsbml, its MathML walked into
SymPy trees (no string is ever evaluated), and the trees evaluated as JAX operations.

Supported: species in compartments of constant size (concentrations or amounts, as the
file declares them), boundary and constant species, initial assignments, assignment
and rate rules, reactions with kinetic laws and local parameters, function
definitions (inlined), `piecewise` conditions on `time` against parameters, which
become switching times (the solver steps onto them, and the sensitivities jump
there), and events that assign to states, at a time from parameters (`time >= t_dose`)
or triggered by the state (`X < c`): the solve stops there, and the sensitivities
take the jump condition. Triggers combining comparisons (and/or), event delays,
algebraic rules, delays, fast reactions, conversion factors, variable stoichiometry
and compartments of varying size raise a `ValueError` naming the feature.
"""

import dataclasses
import functools
import math
import os
import warnings
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import sympy as sp
from jaxtyping import Array, ArrayLike, Float

from .._model._base import Integrator, ODEModel, ParameterDependence
from .._model._parameters import Parameters, ParameterValues
from .._solve._bdf import BDF
from .._solve._rosenbrock import Rodas4
from ._symbolic import dependency_order, evaluate, from_mathml, stack, symbols_of, TIME


def _libsbml():
    try:
        import libsbml
    except ImportError:
        raise ImportError(
            "Reading SBML needs python-libsbml: pip install 'jaxident[petab]'."
        ) from None
    return libsbml


def _unsupported(model) -> list[str]:
    L = _libsbml()
    found = []
    for ev in model.getListOfEvents():
        if ev.isSetDelay():
            found.append(f"a delay in event {ev.getId()!r}")
    for rule in model.getListOfRules():
        if rule.isAlgebraic():
            found.append("algebraic rules")
    for r in model.getListOfReactions():
        if r.isSetFast() and r.getFast():
            found.append(f"fast reaction {r.getId()!r}")
        for ref in [*r.getListOfReactants(), *r.getListOfProducts()]:
            if ref.isSetStoichiometryMath() or (
                model.getLevel() == 3 and ref.isSetId() and ref.getId()
            ):
                found.append(f"variable stoichiometry in reaction {r.getId()!r}")
    if model.getLevel() == 3 and model.isSetConversionFactor():
        found.append("conversion factors")
    for s in model.getListOfSpecies():
        if model.getLevel() == 3 and s.isSetConversionFactor():
            found.append(f"conversion factor of species {s.getId()!r}")
    for c in model.getListOfCompartments():
        if not c.getConstant():
            found.append(f"compartment {c.getId()!r} of varying size")
    for kind, items in (("rule", model.getListOfRules()), ("reaction", model.getListOfReactions())):
        for item in items:
            math = item.getMath() if kind == "rule" else item.getKineticLaw()
            math = math.getMath() if kind == "reaction" and math is not None else math
            if math is not None and _has_delay(math, L):
                found.append(f"delay in {kind} {item.getId() or item.getVariable()!r}")
    return sorted(set(found))


def _has_delay(node, L) -> bool:
    if node.getType() == L.AST_FUNCTION_DELAY:
        return True
    return any(_has_delay(node.getChild(i), L) for i in range(node.getNumChildren()))


def read_sbml(path: str | os.PathLike):
    """The libsbml model of a file, with function definitions inlined; a clear error for
    a file that does not parse or uses what is not supported."""
    L = _libsbml()
    doc = L.readSBMLFromFile(os.fspath(path))
    errors = [
        doc.getError(i).getMessage().strip()
        for i in range(doc.getNumErrors())
        if doc.getError(i).getSeverity() >= L.LIBSBML_SEV_ERROR
    ]
    if errors or doc.getModel() is None:
        raise ValueError(f"{path}: not a readable SBML model: {'; '.join(errors)[:500]}")
    props = L.ConversionProperties()
    props.addOption("expandFunctionDefinitions", True)
    if doc.convert(props) != L.LIBSBML_OPERATION_SUCCESS:
        raise ValueError(f"{path}: its function definitions could not be inlined.")
    model = doc.getModel()
    bad = _unsupported(model)
    if bad:
        raise ValueError(f"{path}: unsupported SBML features: {', '.join(bad)}.")
    return doc, model


class SBMLModel(ODEModel):
    """An ODE model read from SBML (`ji.sbml_model`); its expressions are SymPy trees
    from the file's MathML, evaluated as JAX operations.

    **Fields:** `parameters` (the constant compartment sizes and global parameters of
    the file, plus any extra ones such as observable placeholders), `times`, `t0`, and
    the static model: `state_ids`, `rates` (`dx/dt`), `initial` (initial values,
    evaluated with the rules at `t0`), `rules` (assignment rules and derived constants,
    in dependency order), `observables` and `observable_ids` (the outputs; default:
    every state).

    An imported model integrates with a stiff solver by default, at rtol 1e-8 and an
    absolute tolerance of 1e-10 times each state's size (`ji.Integrator`'s default
    `atol`: a model in nanomolar is solved as accurately as one in molar): biochemical
    networks usually are stiff. A network of fewer than 40 states
    takes `ji.Rodas4()` (a Rosenbrock method: no Newton iteration, cheapest for small
    systems and in vmapped sweeps); a larger one `ji.BDF()` (variable order, its
    Jacobian and factorization kept across steps, the Jacobian by groups of columns
    from the formulas' sparsity), and its rates are evaluated by flux templates
    (`_rolled`): on SalazarCavazos_MBoC2020 (75 states) BDF's sensitivities are many
    times faster than Rodas4's (`benchmarks/README.md`).
    """

    parameters: Parameters
    times: Float[Array, " n"]
    t0: float
    state_ids: tuple[str, ...] = eqx.field(static=True)
    rates: tuple[sp.Expr, ...] = eqx.field(static=True)
    initial: tuple[tuple[str, sp.Expr], ...] = eqx.field(static=True)
    rules: tuple[tuple[str, sp.Expr], ...] = eqx.field(static=True)
    observables: tuple[sp.Expr, ...] = eqx.field(static=True)
    observable_ids: tuple[str, ...] = eqx.field(static=True)
    name: str = eqx.field(static=True, default="sbml")
    source: str | None = eqx.field(static=True, default=None)
    switches: tuple[sp.Expr, ...] = eqx.field(static=True, default=())
    overrides: tuple[str, ...] = eqx.field(static=True, default=())
    events: tuple[tuple[sp.Expr, tuple[tuple[int, sp.Expr], ...], bool], ...] = eqx.field(
        static=True, default=()
    )
    triggered: tuple[tuple[sp.Expr, tuple[tuple[int, sp.Expr], ...], bool], ...] = eqx.field(
        static=True, default=()
    )
    # the right-hand side's values stacked in groups that XLA fuses (`_symbolic.stack`):
    # for one solve at a time; `for_batches` turns it off inside batched kernels
    grouped: bool = eqx.field(static=True, default=True, repr=False)

    def for_batches(self, batched: bool = True) -> "SBMLModel":
        """This model compiled for kernels that solve many samples side by side
        (`vmap`: `ji.sweep`, a multi-start fit) or, with `batched=False`, one at a
        time: the same values, stacked as suits each (`_symbolic.stack`)."""
        if self.grouped != batched:
            return self
        return dataclasses.replace(self, grouped=not batched)

    @property
    def integrator(self) -> Integrator:
        return _LARGE if len(self.state_ids) >= LARGE_NETWORK else _SMALL

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.state_ids

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.observable_ids

    def _env(self, t, theta: ParameterValues) -> dict:
        env = dict(zip(self.parameters.names, theta))
        env[TIME] = t
        return env

    def _with_rules(self, env: dict) -> dict:
        for name, expr in self.rules:
            env[name] = evaluate(expr, env)
        return env

    def initial_state(self, theta: ParameterValues) -> Array:
        env = self._env(jnp.asarray(self.t0, dtype=float), theta)
        for name, expr in self.initial:
            env[name] = evaluate(expr, env)
            if name in self.overrides:
                env[name] = self._override(name, env[name], theta)
        return stack([jnp.asarray(env[s], dtype=float) for s in self.state_ids], self.grouped)

    def _override(self, name, value, theta):
        return jnp.where(theta[initial_set(name)] > 0.5, theta[initial_value(name)], value)

    def event_times(self, theta: ParameterValues) -> Array | None:
        """The times of the SBML events (triggers `time >= tau`, `tau` from
        parameters)."""
        if not self.events:
            return None
        env = self._env(jnp.asarray(self.t0, dtype=float), theta)
        zero = jnp.zeros((), dtype=float)
        return jnp.stack([zero + evaluate(tau, env) for tau, _, _ in self.events])

    def event_triggers(self, t, x, theta: ParameterValues) -> Array | None:
        """The root functions of the triggered events (`a - b` for `a > b`)."""
        if not self.triggered:
            return None
        env = self.state_env(t, x, theta)
        zero = jnp.zeros((), dtype=float)
        return stack([zero + evaluate(root, env) for root, _, _ in self.triggered], self.grouped)

    def apply_event(self, i: int, t, x, theta: ParameterValues) -> Array:
        """The event's assignments (timed events, then triggered ones), all evaluated
        with the state before it."""
        env = self.state_env(t, x, theta)
        _, assignments, _ = (*self.events, *self.triggered)[i]
        for k, expr in assignments:
            x = x.at[k].set(jnp.asarray(evaluate(expr, env), dtype=x.dtype))
        return x

    @property
    def fires_at_t0(self) -> tuple[bool, ...]:
        return tuple(not initial for _, _, initial in (*self.events, *self.triggered))

    def reinitialize(self, x, theta: ParameterValues) -> Array:
        """The state after a pre-equilibration, with the states that this condition
        sets (`initial_overrides`) at its values and the others kept."""
        for name in self.overrides:
            i = self.state_ids.index(name)
            x = x.at[i].set(self._override(name, x[i], theta))
        return x

    def output_scalings(self) -> tuple[str | None, ...]:
        """Per output, the parameter that is a factor of the whole formula but its
        offset (`y = s h + b`), appearing nowhere else (rates, rules, initial values,
        events, switches, other outputs but as such a factor), or `None`; an output with
        two such factors has none (they scale it together)."""
        return self._output_terms()[0]

    def output_offsets(self) -> tuple[str | None, ...]:
        """Per output, the parameter added to the whole formula (`y = s h + b`, `b` with
        coefficient 1), appearing nowhere else but as such a term, or `None`."""
        return self._output_terms()[1]

    def _output_terms(self) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
        elsewhere = (*self.rates, *(v for _, v in self.initial), *(v for _, v in self.rules),
                     *self.switches)  # fmt: skip
        for tau, assignments, _ in (*self.events, *self.triggered):
            elsewhere += (tau, *(v for _, v in assignments))
        return _output_terms(self.parameters.names, self.observables, elsewhere)

    def state_env(self, t, x, theta: ParameterValues) -> dict:
        env = self._env(t, theta)
        env.update(zip(self.state_ids, x))
        return self._with_rules(env)

    def vector_field(self, t, x, theta: ParameterValues) -> Array:
        key = (self.parameters.names, self.state_ids, self.rules, self.rates)
        fn = _rolled(*key) or _of_state(*key, self.grouped)
        return fn(t, x, theta.values)

    def switching_times(self, theta: ParameterValues) -> Array | None:
        """The times at which a `piecewise` condition on `time` switches (`time < t_1`,
        `time >= 2*tau`), from parameters alone: the solver steps onto them, and their
        parameters get the jump of the sensitivities there (`TimeWarped`)."""
        if not self.switches:
            return None
        env = self._env(jnp.asarray(self.t0, dtype=float), theta)
        zero = jnp.zeros((), dtype=float)
        return jnp.stack([zero + evaluate(e, env) for e in self.switches])

    def output(self, t, x, theta: ParameterValues) -> Array:
        fn = _of_state(self.parameters.names, self.state_ids, self.rules, self.observables,
                       self.grouped)  # fmt: skip
        return fn(t, x, theta.values)

    def jacobian_sparsity(self) -> np.ndarray:
        """`df_i/dx_j` can be nonzero where state `j` appears in the rate of state `i`,
        with the assignment rules followed to the end."""
        index = {s: j for j, s in enumerate(self.state_ids)}
        defs = dict(self.rules)
        pattern = np.zeros((len(self.state_ids),) * 2, dtype=bool)
        for i, rate in enumerate(self.rates):
            pattern[i, [index[s] for s in _reached([rate], defs) if s in index]] = True
        return pattern

    def parameter_dependence(self) -> ParameterDependence:
        """The parameters in the formulas: of the rates, initial values, switching
        times and events (the solution), and of each observable, with the assignment
        rules (and the initial values' intermediate names) followed to the end."""
        params = set(self.parameters.names)
        defs = {**dict(self.initial), **dict(self.rules)}

        def reach(exprs) -> frozenset[str]:
            return frozenset(_reached(exprs, defs) & params)

        solution = [*self.rates, *(e for _, e in self.initial), *self.switches]
        for tau, assignments, _ in (*self.events, *self.triggered):
            solution += [tau, *(e for _, e in assignments)]
        overrides = {f(s) for s in self.overrides for f in (initial_value, initial_set)}
        return ParameterDependence(
            reach(solution) | overrides, tuple(reach([o]) for o in self.observables)
        )


def _reached(exprs, defs: Mapping[str, sp.Expr]) -> set[str]:
    """The names in `exprs`, and in the definitions (`defs`: name -> expression) of
    those names, followed to the end."""
    seen: set[str] = set()
    stack = [s for e in exprs for s in symbols_of(e)]
    while stack:
        s = stack.pop()
        if s not in seen:
            seen.add(s)
            stack.extend(symbols_of(defs[s]) if s in defs else ())
    return seen


def _state_env(names, state_ids, rules, t, x, p) -> dict:
    """The values of the parameters `p`, the time `t`, the states `x` and the rules
    (evaluated in order) by name."""
    env = dict(zip(names, jnp.unstack(p)))
    env[TIME] = t
    env.update(zip(state_ids, jnp.unstack(x)))
    for name, expr in rules:
        env[name] = evaluate(expr, env)
    return env


@functools.lru_cache(maxsize=64)
def _of_state(names, state_ids, rules, exprs, grouped: bool = True):
    """`(t, x, p) -> [expr for expr in exprs]` with the rules, as a jitted function: the
    solvers and the transforms around them (`jvp`, `vmap`, diffrax's shape checks) call
    a model's right-hand side tens of times per solve, and a jitted function is traced
    once per signature (its jaxpr transformed after that), not walked through the
    formulas again each time.

    The expressions share their common subexpressions (SymPy's `cse`, evaluated after
    the rules): a reaction's flux enters the rates of its reactants and its products,
    and is computed once. Zheng's right-hand side (15 states) takes 244 operations instead
    of 627, and so does every copy of it that the solvers and their derivatives make."""
    common, reduced = sp.cse(list(exprs), symbols=sp.numbered_symbols("__cse"), order="none")

    def fn(t, x, p):
        env = _state_env(names, state_ids, rules, t, x, p)
        for symbol, expr in common:
            env[symbol.name] = evaluate(expr, env)
        zero = jnp.zeros((), dtype=x.dtype)
        return stack([zero + evaluate(e, env) for e in reduced], grouped)

    return jax.jit(fn, inline=True)


# a network of this many states on integrates with ji.BDF and is rolled (`_rolled`,
# where its fluxes take at most a quarter as many templates): measured on one core,
# E. coli's 18 states and the shipped PEtab problems' 4-15 are faster with Rodas4 in
# vmapped sweeps, SalazarCavazos' 75 with BDF in every use
LARGE_NETWORK = 40
_SMALL = Integrator(Rodas4(), rtol=1e-8)  # (atol: 1e-10 times each state's size)
_LARGE = Integrator(BDF(), rtol=1e-8)


def _template(core: sp.Expr) -> tuple[sp.Expr, tuple[str, ...]]:
    """`(template, names)`: `core` with its symbols replaced by slots `_s0, _s1, ...`
    (in the order they first appear; equal templates are equal forms), and the names in
    the slots."""
    names = sorted({s.name for s in core.free_symbols}, key=sp.srepr(core).index)
    slots = {sp.Symbol(n): sp.Symbol(f"_s{i}") for i, n in enumerate(names)}
    return core.xreplace(slots), tuple(names)


@functools.lru_cache(maxsize=64)
def _rolled(names, state_ids, rules, rates):
    """The right-hand side evaluated by flux templates, or `None` where that does not
    pay. Each rate is a sum of numbers times fluxes (`-1.0*k*A*B/c1`); a network's
    fluxes take few forms (SalazarCavazos_MBoC2020: 465 fluxes of 7 forms over 75
    states; Chen_MSB2009: 1,558 of 3 over 500). Each form is evaluated once, on vectors
    gathered from `[parameters, states, rules, time]`, and each rate is its fluxes
    gathered, times their coefficients, summed: a program whose size grows with the
    number of forms, not of reactions (SalazarCavazos' and Chen's right-hand sides and
    Jacobians compile four to sixteen times faster than written out reaction by
    reaction; `benchmarks/README.md`)."""
    terms, cores = [], {}
    for i, rate in enumerate(rates):
        for term in sp.Add.make_args(rate):
            coeff, core = term.as_coeff_Mul()
            if core == 1:  # a constant term: a flux of its own
                coeff, core = 1.0, term
            terms.append((i, float(coeff), cores.setdefault(core, len(cores))))
    groups: dict[sp.Expr, list] = {}
    for core in cores:
        template, slot_names = _template(core)
        groups.setdefault(template, []).append((core, slot_names))
    if len(state_ids) < LARGE_NETWORK or 4 * len(groups) > len(cores):
        return None
    env_names = [*names, *state_ids, *(n for n, _ in rules), TIME]
    index = {n: j for j, n in enumerate(env_names)}
    order, plans = [], []
    for template, members in groups.items():
        slots = np.array([[index[n] for n in slot_names] for _, slot_names in members])
        plans.append((template, slots.reshape(len(members), -1)))
        order.extend(cores[core] for core, _ in members)
    position = np.empty(len(cores), dtype=int)
    position[np.asarray(order)] = np.arange(len(order))
    # each state's terms gathered and summed, the states in buckets of sums of up to
    # 1, 2, 4, ... terms (padded within a bucket): about as many gathers as terms, and no
    # scatter (XLA's CPU scatter is slower); `back` puts the states in order again
    n = len(state_ids)
    per_state = [[] for _ in range(n)]
    for i, coeff, j in terms:
        per_state[i].append((coeff, position[j]))
    widths = [1 << max(0, (len(r) - 1).bit_length()) for r in per_state]
    buckets, placed = [], []
    for w in sorted(set(widths)):
        states = [i for i in range(n) if widths[i] == w]
        coeffs = np.zeros((len(states), w))
        cols = np.zeros((len(states), w), dtype=int)
        for a, i in enumerate(states):
            for k, (c, j) in enumerate(per_state[i]):
                coeffs[a, k], cols[a, k] = c, j
        buckets.append((coeffs, cols))
        placed.extend(states)
    back = np.argsort(np.asarray(placed))
    rule_names = [name for name, _ in rules]

    def fn(t, x, p):
        parts = [p, x]
        if rules:
            env = _state_env(names, state_ids, rules, t, x, p)
            parts.append(jnp.stack([jnp.zeros((), x.dtype) + env[r] for r in rule_names]))
        values = jnp.concatenate([*parts, jnp.reshape(jnp.asarray(t, x.dtype), (1,))])
        fluxes = []
        for template, slots in plans:
            slot_env = {f"_s{k}": values[slots[:, k]] for k in range(slots.shape[1])}
            fluxes.append(jnp.zeros(slots.shape[0], x.dtype) + evaluate(template, slot_env))
        flux = jnp.concatenate(fluxes)
        sums = [jnp.sum(coeffs * flux[cols], axis=1) for coeffs, cols in buckets]
        return jnp.concatenate(sums)[back]

    return jax.jit(fn, inline=True)


@functools.lru_cache(maxsize=64)
def _output_terms(parameters: tuple[str, ...], exprs: tuple, elsewhere: tuple):
    """Per output formula of `exprs`, its scaling and its offset among `parameters`
    (`SBMLModel.output_scalings`, `output_offsets`): those that the formulas of
    `elsewhere` do not use; kept per model, as both are asked for together."""
    names = set(parameters) - set().union(*(symbols_of(e) for e in elsewhere))
    while True:  # each output is its terms' own, and a term is only that in its outputs
        terms = [{b for b in symbols_of(e) & names if _is_offset(e, b)} for e in exprs]
        offset = [next(iter(t)) if len(t) == 1 else None for t in terms]
        rests = [e if b is None else e - _symbol(e, b) for e, b in zip(exprs, offset)]
        factors = [{s for s in symbols_of(r) & names if _is_factor(r, s)} for r in rests]
        scale = [next(iter(f)) if len(f) == 1 else None for f in factors]
        wrong = {
            n
            for e, s, b in zip(exprs, scale, offset)
            for n in symbols_of(e) & names
            if n not in (s, b)
        }
        if not wrong:
            return tuple(scale), tuple(offset)
        names -= wrong


def _symbol(expr: sp.Expr, name: str) -> sp.Symbol:
    """The symbol `name` of `expr` (with its assumptions)."""
    return next(x for x in expr.free_symbols if x.name == name)


def _is_factor(expr: sp.Expr, name: str) -> bool:
    """Whether `expr` is `name` times an expression free of it."""
    s = _symbol(expr, name)
    rest = sp.diff(expr, s)
    return s not in rest.free_symbols and sp.expand(expr - s * rest) == 0


def _is_offset(expr: sp.Expr, name: str) -> bool:
    """Whether `expr` is `name` plus a nonzero expression free of it (a formula that is
    `name` alone is `name` times 1: a scaling)."""
    b = _symbol(expr, name)
    return sp.expand(expr - b) != 0 and sp.expand(sp.diff(expr, b)) == 1


def initial_value(state: str) -> str:
    """The parameter holding a condition's initial value of `state` (`initial_overrides`)."""
    return f"__init_{state}"


def initial_set(state: str) -> str:
    """The parameter that is 1 where a condition sets `state` and 0 where it keeps it."""
    return f"__set_{state}"


def _time_of(rel, rules: Mapping[str, sp.Expr], constants):
    """`(tau, slope)` for a relation `lhs ~ rhs` whose `lhs - rhs`, with the assignment
    rules substituted, is `slope * (time - tau)` with a constant slope and `tau` from
    `constants` alone; else `None`."""
    time = sp.Symbol(TIME)
    d = _with_rules_substituted(rel.lhs - rel.rhs, rules)
    if time not in d.free_symbols or not symbols_of(d) - {TIME} <= set(constants):
        return None
    slope = sp.diff(d, time)
    if slope.free_symbols or slope == 0:
        return None
    return -d.xreplace({time: sp.Integer(0)}) / slope, float(slope)


def _events(m, rules, constants, state_ids, path):
    """The SBML events, timed and triggered, each `(e, ((state index, value), ...),
    initialValue)`: a timed event's trigger is `time >= tau` (or `>`, or `tau <= time`)
    with `e = tau` from parameters; any other comparison `a > b` (`>=`, `<`, `<=`) is a
    triggered event with `e = a - b` (`b - a`), which fires when `e` rises through 0.
    Assignments go to states. Anything else is refused by name."""
    timed, triggered = [], []
    for ev in m.getListOfEvents():
        name = ev.getId() or f"#{len(timed) + len(triggered) + 1}"
        trig = ev.getTrigger()
        rel = from_mathml(trig.getMath() if trig is not None else None, f"event {name!r}")
        if not isinstance(rel, (sp.GreaterThan, sp.StrictGreaterThan, sp.LessThan,
                                sp.StrictLessThan)):  # fmt: skip
            raise ValueError(
                f"{path}: event {name!r} has the trigger {rel}; only one comparison "
                "(x > c, time >= t_event, ...) is supported, not and/or/not of several."
            )
        found = _time_of(rel, rules, constants)
        rising = isinstance(rel, (sp.GreaterThan, sp.StrictGreaterThan))
        if found is not None and (found[1] > 0) != rising:
            raise ValueError(
                f"{path}: event {name!r} has the trigger {rel}, which turns false as "
                "time goes on; a timed trigger must turn true (time >= t_event)."
            )
        assignments = []
        for ea in ev.getListOfEventAssignments():
            var = ea.getVariable()
            if var not in state_ids:
                raise ValueError(
                    f"{path}: event {name!r} assigns to {var!r}, which is not a state "
                    "(species or rate-rule variable); only states can be assigned."
                )
            expr = from_mathml(ea.getMath(), f"event {name!r} assignment to {var!r}")
            assignments.append((state_ids.index(var), expr))
        initial = bool(trig.getInitialValue() if trig.isSetInitialValue() else True)
        order = (-_priority(ev, name, rules, path), len(timed) + len(triggered))
        at_trigger = not ev.isSetUseValuesFromTriggerTime() or ev.getUseValuesFromTriggerTime()
        if found is not None:
            timed.append((order, found[0], tuple(assignments), initial, at_trigger))
        else:
            root = rel.lhs - rel.rhs if rising else rel.rhs - rel.lhs
            triggered.append((order, root, tuple(assignments), initial))
    # Events that fire at one time run in the order of their priorities (SBML: the
    # highest first; without one, after those with one): the timed ones sorted so, and
    # of the triggers that fire at once the first in this order goes first.
    timed = _merged([e[1:] for e in sorted(timed, key=lambda e: e[0])], rules, state_ids)
    triggered = tuple(e[1:] for e in sorted(triggered, key=lambda e: e[0]))
    return timed, triggered


def _priority(ev, name: str, rules: Mapping[str, sp.Expr], path) -> float:
    """An event's priority (`-inf` where it has none): a number, or an expression of
    assignment rules that is one."""
    if not ev.isSetPriority() or ev.getPriority().getMath() is None:
        return -np.inf
    expr = from_mathml(ev.getPriority().getMath(), f"event {name!r} priority")
    value = _with_rules_substituted(expr, rules)
    if not value.is_number:
        raise ValueError(
            f"{path}: event {name!r} has the priority {expr}, which is not a number; only "
            "constant priorities are supported."
        )
    return float(value)


def _merged(timed, rules: Mapping[str, sp.Expr], state_ids):
    """Timed events with the same time and initial value, in the order they run, made
    one: SBML evaluates the assignments of an event that uses the values from its
    trigger time in the state before any of them ran, and those of one that does not
    in the state the events before it left. `(tau, assignments, initial)` each."""
    groups: dict[tuple[str, bool], list] = {}
    for tau, assignments, initial, at_trigger in timed:
        groups.setdefault((sp.srepr(tau), initial), []).append((tau, assignments, at_trigger))
    out = []
    for (_, initial), events in groups.items():
        now: dict[int, sp.Expr] = {}  # state index: its value after the events so far
        for _, assignments, at_trigger in events:
            ran = {sp.Symbol(state_ids[k]): v for k, v in now.items()}
            now = now | {
                k: v if at_trigger else _with_rules_substituted(v, rules).xreplace(ran)
                for k, v in assignments
            }
        out.append((events[0][0], tuple(now.items()), initial))
    return tuple(out)


def _switches(exprs, rules: Mapping[str, sp.Expr], constants) -> tuple[sp.Expr, ...]:
    """The switching times of the relations on `time` in `exprs`: each relation
    `lhs < rhs` (any of <, <=, >, >=) whose `lhs - rhs`, with the assignment rules
    substituted, is linear in `time` with other symbols among `constants` only."""
    out: dict[str, sp.Expr] = {}
    for e in exprs:
        for rel in e.atoms(sp.core.relational.Relational):
            if isinstance(rel, (sp.Eq, sp.Ne)):
                continue
            found = _time_of(rel, rules, constants)
            if found is not None:
                out.setdefault(sp.srepr(found[0]), found[0])
    return tuple(out.values())


def _with_rules_substituted(expr, rules: Mapping[str, sp.Expr]):
    """`expr` with the assignment rules (and derived constants) substituted to the end."""
    for _ in range(len(rules) + 1):  # rules are acyclic: at most that deep
        inner = {sp.Symbol(n): rules[n] for n in symbols_of(expr) if n in rules}
        if not inner:
            break
        expr = expr.xreplace(inner)
    return expr


def _constant_value(expr, names, rules, path, pid) -> float:
    """The value of an initial assignment from constants and parameters alone."""
    expr = _with_rules_substituted(expr, rules)
    known = {sp.Symbol(n): sp.Float(v) for n, v in names.items() if not np.isnan(v)}
    value = sp.sympify(expr).xreplace(known)
    if value.free_symbols:
        raise ValueError(
            f"{path}: {pid!r} is set by a condition, but its initial assignment {expr} "
            f"depends on {sorted(s.name for s in value.free_symbols)}, not on constants."
        )
    return float(value)


def _value(item, what: str, path) -> float:
    for getter in ("getValue", "getSize"):
        if hasattr(item, getter):
            isset = getattr(item, "isSet" + getter[3:])()
            if isset:
                return float(getattr(item, getter)())
    raise ValueError(f"{path}: {what} {item.getId()!r} has no value and no initial assignment.")


def sbml_model(
    path: str | os.PathLike,
    *,
    observables: Mapping[str, sp.Expr] | None = None,
    extra_parameters: Mapping[str, float] | None = None,
    times: Sequence[float] | Float[ArrayLike, " times"] | None = None,
    t0: float = 0.0,
    initial_overrides: Sequence[str] = (),
    parameter_overrides: Sequence[str] = (),
) -> SBMLModel:
    """Read an SBML file as an `SBMLModel`.

    **Arguments:**

    - `path`: the SBML file.
    - `observables`: `{id: sympy expression}` outputs in the symbols of the model (its
      species, compartments, parameters and rule targets, `time`, and
      `extra_parameters`); default: every state, named by its id.
    - `extra_parameters`: `{name: value}` parameters the file does not declare
      (observable and noise placeholders of a PEtab problem).
    - `times`, `t0`: the observation grid (default: 0..10) and the initial time.
    - `initial_overrides`: states (species, rate-rule variables) whose initial value a
      condition may set (PEtab's species in the condition table): two parameters each,
      `__init_<id>` (the value, in the state's units) and `__set_<id>` (1 to use it, 0
      for the model's own value); after a pre-equilibration, `reinitialize` sets them.
    - `parameter_overrides`: constant parameters and compartments whose value comes from
      an initial assignment but which a condition may set (PEtab's condition table): they
      become parameters, with the assignment's value (at the other parameters' values)
      as nominal.

    **Raises:** `ValueError` naming an unsupported feature or an undefined symbol.
    """
    _, m = read_sbml(path)
    parts = _Parts(m, path)
    _compartments(parts, parameter_overrides)
    _parameters(parts, initial_overrides, parameter_overrides)
    _species(parts, initial_overrides)
    _reactions(parts)
    names, rules, initial, rates, species = (
        parts.names, parts.rules, parts.initial, parts.rates, parts.species
    )  # fmt: skip
    extra = dict(extra_parameters or {})
    clash = sorted(set(extra) & (set(names) | set(species) | set(rules)))
    if clash:
        raise ValueError(f"{path}: extra parameters {clash} clash with ids of the model.")
    names.update(extra)
    state_ids = tuple(initial)
    unknown = sorted(set(initial_overrides) - set(state_ids))
    if unknown:
        raise ValueError(f"{path}: initial_overrides {unknown} are not states of the model.")
    for sid in initial_overrides:
        names[initial_value(sid)], names[initial_set(sid)] = 0.0, 0.0
    if observables is None:
        observables = {s: sp.Symbol(s) for s in state_ids}
    known = set(names) | set(state_ids) | set(rules) | {TIME}
    for what, exprs in (
        ("rules", rules),
        ("initial values", initial),
        ("rates", rates),
        ("observables", observables),
    ):
        for key, e in exprs.items():
            missing = sorted(symbols_of(e) - known)
            if missing:
                raise ValueError(f"{path}: the {what} of {key!r} use undefined symbols {missing}.")
    rule_order = dependency_order(rules, "assignment rules")
    switches = _switches([*rates.values(), *rules.values()], rules, names)
    events, triggered = _events(m, rules, names, state_ids, path)
    init_defs = {**initial, **rules}
    init_order = [n for n in dependency_order(init_defs, "initial values") if n in init_defs]
    nominal = np.array(list(names.values()), dtype=float)
    p = Parameters(
        list(names),
        nominal,
        np.full(len(names), -np.inf),
        np.full(len(names), np.inf),
    )
    return SBMLModel(
        parameters=p,
        times=jnp.asarray(np.linspace(0.0, 10.0, 11) if times is None else times, dtype=float),
        t0=float(t0),
        state_ids=state_ids,
        rates=tuple(rates[s] for s in state_ids),
        initial=tuple((n, init_defs[n]) for n in init_order),
        rules=tuple((n, rules[n]) for n in rule_order),
        observables=tuple(observables.values()),
        observable_ids=tuple(observables),
        name=m.getId() or os.path.basename(os.fspath(path)),
        source=os.path.abspath(os.fspath(path)),
        switches=switches,
        overrides=tuple(initial_overrides),
        events=events,
        triggered=triggered,
    )


class _Parts:
    """What a model's entities contribute, filled in by the readers below in the
    file's order: parameters with their values (`names`), assignment rules, initial
    values and rates, as SymPy expressions."""

    def __init__(self, m, path):
        self.m, self.path = m, path
        self.names: dict[str, float] = {}
        self.rules: dict[str, sp.Expr] = {}
        self.initial: dict[str, sp.Expr] = {}
        self.rates: dict[str, sp.Expr] = {}
        self.assigned = {r.getVariable() for r in m.getListOfRules() if r.isAssignment()}
        self.rated = {r.getVariable(): r for r in m.getListOfRules() if r.isRate()}
        self.ia = {
            a.getSymbol(): from_mathml(a.getMath(), f"initial assignment to {a.getSymbol()!r}")
            for a in m.getListOfInitialAssignments()
        }
        self.species = {s.getId(): s for s in m.getListOfSpecies()}
        self.size = {c.getId(): sp.Symbol(c.getId()) for c in m.getListOfCompartments()}
        if TIME in {x.getId() for x in [*m.getListOfParameters(), *m.getListOfSpecies()]}:
            raise ValueError(f"{path}: an SBML id {TIME!r} clashes with the time symbol.")
        for r in m.getListOfRules():
            if r.isAssignment():
                self.rules[r.getVariable()] = from_mathml(
                    r.getMath(), f"rule for {r.getVariable()!r}"
                )


def _compartments(parts: _Parts, parameter_overrides) -> None:
    m, path, names = parts.m, parts.path, parts.names
    for c in m.getListOfCompartments():
        cid = c.getId()
        if cid in parts.assigned:
            continue
        if cid in parts.ia and cid not in parameter_overrides:
            parts.rules[cid] = parts.ia[cid]
        elif cid in parts.ia:
            names[cid] = np.nan  # the assignment's value, in _parameters
        else:
            names[cid] = _value(c, "compartment", path)
            if not names[cid] > 0 and any(x.getCompartment() == cid for x in m.getListOfSpecies()):
                raise ValueError(
                    f"{path}: compartment {cid!r} has size {names[cid]:g}: the concentrations "
                    "of the species in it are undefined. Give it a positive size."
                )


def _parameters(parts: _Parts, initial_overrides, parameter_overrides) -> None:
    path, names, ia = parts.path, parts.names, parts.ia
    for p in parts.m.getListOfParameters():
        pid = p.getId()
        if pid in parts.assigned:
            continue
        if pid in parts.rated:
            if pid in ia:
                parts.initial[pid] = ia[pid]
            elif p.isSetValue() or pid not in initial_overrides:
                parts.initial[pid] = sp.Float(_value(p, "parameter", path))
            else:  # set by the conditions alone: NaN where one does not
                parts.initial[pid] = sp.nan
            parts.rates[pid] = from_mathml(parts.rated[pid].getMath(), f"rate rule for {pid!r}")
        elif pid in ia and pid not in parameter_overrides:
            parts.rules[pid] = ia[pid]
        elif pid in ia:
            names[pid] = np.nan  # the assignment's value, below
        else:
            names[pid] = _value(p, "parameter", path)
    for pid in parameter_overrides:
        if pid in ia:
            names[pid] = _constant_value(ia[pid], names, parts.rules, path, pid)


def _species(parts: _Parts, initial_overrides) -> None:
    for sid, s in parts.species.items():
        if sid in parts.assigned:
            continue
        comp = parts.size[s.getCompartment()]
        conc = not s.getHasOnlySubstanceUnits()
        if sid in parts.ia:
            parts.initial[sid] = parts.ia[sid]
        elif s.isSetInitialConcentration():
            v = sp.Float(s.getInitialConcentration())
            parts.initial[sid] = v if conc else v * comp
        elif s.isSetInitialAmount():
            v = sp.Float(s.getInitialAmount())
            parts.initial[sid] = v / comp if conc else v
        elif sid in initial_overrides:  # set by the conditions alone
            parts.initial[sid] = sp.nan
        else:
            raise ValueError(f"{parts.path}: species {sid!r} has no initial value.")
        parts.rates[sid] = (
            from_mathml(parts.rated[sid].getMath(), f"rate rule for {sid!r}")
            if sid in parts.rated
            else sp.Integer(0)
        )


def _stoichiometry(parts: _Parts, reaction, ref) -> float:
    """A species reference's stoichiometry; in SBML Level 3 an unset one (NaN in libSBML)
    is taken as 1, as libroadrunner and COPASI take it, with a warning (the
    specification leaves it undefined; before, it made every rate NaN)."""
    value = ref.getStoichiometry()
    if math.isnan(value) or (parts.m.getLevel() == 3 and not ref.isSetStoichiometry()):
        warnings.warn(
            f"{parts.path}: reaction {reaction.getId()!r}: the stoichiometry of species "
            f"{ref.getSpecies()!r} is not set; taking 1 (as libroadrunner and COPASI do).",
            stacklevel=6,
        )
        return 1.0
    return value


def _reactions(parts: _Parts) -> None:
    """Each reaction's rate, times its stoichiometry, added to the rates of its
    reactants and products (per volume for a concentration)."""
    m = parts.m
    for r in m.getListOfReactions():
        law = r.getKineticLaw()
        if law is None:
            raise ValueError(f"{parts.path}: reaction {r.getId()!r} has no kinetic law.")
        rate = from_mathml(law.getMath(), f"kinetic law of reaction {r.getId()!r}")
        local = [*law.getListOfParameters()]
        if m.getLevel() == 3:
            local += [*law.getListOfLocalParameters()]
        rate = rate.subs({sp.Symbol(q.getId()): sp.Float(q.getValue()) for q in local})
        for sign, refs in ((-1, r.getListOfReactants()), (1, r.getListOfProducts())):
            for ref in refs:
                s = parts.species[ref.getSpecies()]
                sid = s.getId()
                fixed = s.getBoundaryCondition() or s.getConstant()
                if fixed or sid in parts.rated or sid in parts.assigned:
                    continue
                term = sign * sp.Float(_stoichiometry(parts, r, ref)) * rate
                if not s.getHasOnlySubstanceUnits():
                    term = term / parts.size[s.getCompartment()]
                parts.rates[sid] = parts.rates[sid] + term
