"""Models: equinox modules with named parameters, integrated by diffrax."""

import abc
import math
from typing import ClassVar, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, Float, PyTree

from ._parameters import Parameters, ParameterValues


class AbstractSensitivityMethod(eqx.Module):
    """How forward sensitivities are computed (an `Integrator`'s `sensitivity`): each
    method carries its solve, `forward(model, theta, times, integrator, M, observed)`
    -> `(y, Y, solved)`: the outputs (flat, time-major), their LD-derivatives along the
    columns of `M`, and the solve's record. The methods are `ji.SensitivityEquations`
    and `ji.DifferentiateSolver` (`_solve/_forward.py`: they need the solves, a layer
    above the models). `steering()`: the method for the Jacobians that only steer a
    fit's steps (its final Jacobian is computed with this one).
    """

    @abc.abstractmethod
    def forward(self, model, theta, times, integrator, M, observed=None):
        """`(y, Y, solved)` of `model` at `theta` and `times` along `M`."""

    def steering(self) -> "AbstractSensitivityMethod":
        return self


class Integrator(eqx.Module):
    """How a model is integrated: a diffrax solver, tolerances and a step cap.

    **Arguments:**

    - `solver`: any diffrax solver with an error estimate; `diffrax.Tsit5()` (default)
      for non-stiff models; for stiff ones `ji.Rodas4()` (no Newton iteration: cheapest
      for small and medium systems, with sensitivities) or `diffrax.Kvaerno5()`.
    - `rtol`, `atol`: tolerances of the PID step-size controller. With the default
      `sensitivity` the sensitivities are in the error test too,
      so they are accurate to a few times `rtol` (see `Sensitivity.accuracy`). `atol`
      `None` (default): `rtol / 100` times each state's size (`state_scale`: its initial
      value, never above 1), so that a model in nanomoles is solved as accurately as the
      same model in moles; a number: that absolute tolerance for every state.
    - `max_steps`: the step cap; reaching it is an error (or a failure flag in a sweep).
    - `sensitivity`: how sensitivities are computed: `None` (default) for
      `ji.SensitivityEquations()` (error-controlled sensitivities),
      `ji.SensitivityEquations(error_control=False)` (on the state's own steps) or
      `ji.DifferentiateSolver()`.
    - `dt0`: initial step; `None` lets the controller choose.
    - `algebraic_rtol`, `algebraic_atol`, `algebraic_max_steps`: the Newton solve that
      eliminates the algebraic variables of a `DAEModel` (optimistix).

    **Example:**

    ```python
    ji.sensitivity_matrix(model, theta, integrator=ji.Integrator(diffrax.Kvaerno5(), rtol=1e-10))
    ```
    """

    solver: diffrax.AbstractSolver = diffrax.Tsit5()
    rtol: float = 1e-8
    atol: float | None = None
    max_steps: int = 100_000
    dt0: float | None = None
    algebraic_rtol: float = 1e-12
    algebraic_atol: float = 1e-12
    algebraic_max_steps: int = 64
    sensitivity: AbstractSensitivityMethod | None = None

    def __check_init__(self):
        # (a re-solve at other tolerances sets them as arrays, concrete here)
        rtol = float(np.max(np.asarray(self.rtol)))
        atol = 0.0 if self.atol is None else float(np.max(np.asarray(self.atol)))
        if not (math.isfinite(rtol) and 0 < rtol < 1):
            raise ValueError(f"rtol must lie in (0, 1), got {self.rtol}.")
        if not (math.isfinite(atol) and atol >= 0):
            raise ValueError(f"atol must be finite and >= 0, got {self.atol}.")
        if self.dt0 is not None and not (math.isfinite(self.dt0) and self.dt0 > 0):
            raise ValueError(
                f"dt0 (the first step) must be positive and finite, or None to let the "
                f"controller choose, got {self.dt0}."
            )
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}.")
        if self.algebraic_max_steps < 1:
            raise ValueError(f"algebraic_max_steps must be >= 1, got {self.algebraic_max_steps}.")
        if not isinstance(self.sensitivity, AbstractSensitivityMethod | None):
            raise TypeError(
                "sensitivity must be ji.SensitivityEquations() or ji.DifferentiateSolver(), "
                f"got {self.sensitivity!r}."
            )

    def controller(
        self, jump_ts=None, step_ts=None, times=None, norm=optx.rms_norm, scale=None
    ) -> diffrax.AbstractStepSizeController:
        """The step-size controller; `times` (the observation times) become step ends
        for a solver whose dense output is less accurate than its steps (`ji.Rodas4`);
        `norm` measures the scaled error estimate (a pytree like the state); `scale`
        (a pytree like the state, `state_scale`) makes the default absolute tolerance
        relative to each state's size (`StateScaled`; a given `atol` is absolute)."""
        if times is not None and getattr(self.solver, "steps_onto_outputs", False):
            step_ts = times if step_ts is None else jnp.concatenate([step_ts, times])
        pid = diffrax.PIDController(
            rtol=self.rtol, atol=self.absolute, norm=norm, jump_ts=jump_ts, step_ts=step_ts
        )
        scaled = scale is not None and self.atol is None
        return NonfiniteGuard(StateScaled(pid, scale) if scaled else pid)

    @property
    def absolute(self):
        """The absolute tolerance the controller starts from: `atol`, or `rtol / 100`
        (then times each state's size, `controller(scale=...)`)."""
        return 1e-2 * self.rtol if self.atol is None else self.atol


def state_scale(x0) -> Array:
    """Each state's size for the absolute tolerance, from its initial value: `|x0_i|`,
    for a state that starts at 0 the smallest nonzero `|x0_j|` (1 where all are 0), and
    never above 1 (at and above unit size `rtol |x|` governs the error test anyway, and
    the tolerance stays what it was). A model in nanomoles (`x0` 2e-9) so gets an
    absolute tolerance of `atol * 2e-9`, as a modeller would set it; one in units of
    order 1 keeps `atol`. Held constant (no derivative)."""
    a = jnp.abs(jnp.asarray(x0))
    nonzero = a > 0
    smallest = jnp.min(jnp.where(nonzero, a, jnp.inf)) if a.size else jnp.asarray(1.0)
    smallest = jnp.where(jnp.isfinite(smallest), smallest, 1.0)
    return jax.lax.stop_gradient(jnp.minimum(jnp.where(nonzero, a, smallest), 1.0))


class AbstractControllerWrapper(diffrax.AbstractAdaptiveStepSizeController):
    """A step-size controller that wraps another (`inner`) and shares its tolerances."""

    inner: eqx.AbstractVar[diffrax.AbstractAdaptiveStepSizeController]

    @property
    def rtol(self):
        return self.inner.rtol

    @property
    def atol(self):
        return self.inner.atol

    @property
    def norm(self):
        return self.inner.norm


def _divided(tree, scale):
    return jax.tree.map(lambda y, s: y / s, tree, scale)


class StateScaled(AbstractControllerWrapper):
    """Hands the inner (PID) controller the state, the candidate and the error
    estimate divided by each state's size `scale` (a pytree like the state: `s` for the
    states, `s[:, None]` for their tangents), so that its error test
    `e / (atol + rtol |y|)` becomes `e / (atol s + rtol |y|)`: an absolute tolerance
    per state, relative to its size, without touching the solver."""

    inner: diffrax.AbstractAdaptiveStepSizeController
    scale: PyTree

    def wrap(self, direction):
        return StateScaled(self.inner.wrap(direction), self.scale)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        scale = self.scale

        def scaled(terms_, t, y, args_):
            return _divided(func(terms_, t, jax.tree.map(jnp.multiply, y, scale), args_), scale)

        return self.inner.init(terms, t0, t1, _divided(y0, scale), dt0, args, scaled, error_order)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, state):
        return self.inner.adapt_step_size(
            t0, t1, _divided(y0, self.scale), _divided(y1_candidate, self.scale), args,
            _divided(y_error, self.scale), error_order, state,
        )  # fmt: skip


class NonfiniteGuard(AbstractControllerWrapper):
    """Wraps a step-size controller so that a right-hand side that returns NaN or inf ends
    the solve with `RESULTS.nonfinite` after `limit` successive rejected steps with
    non-finite values, instead of shrinking the step until `max_steps` is reached (which
    would be reported as a step cap, after 100,000 steps). A step that overflows only
    because it is too long succeeds again within a few rejections: each shrinks the
    step by the controller's `factormin` (0.2), so 30 of them shrink it by 1e-21.
    Likewise a rejected step whose retry is at the resolution of floating point (the
    step size collapsed at a singularity) ends the solve with `dt_min_reached`, or
    `nonfinite` when the rejected values were NaN or inf."""

    inner: diffrax.AbstractAdaptiveStepSizeController
    limit: int = 30

    def wrap(self, direction):
        return NonfiniteGuard(self.inner.wrap(direction), self.limit)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        next_t1, state = self.inner.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return next_t1, (state, jnp.asarray(0, jnp.int32))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, state):
        inner_state, count = state
        keep, next_t0, next_t1, made_jump, inner_state, result = self.inner.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, inner_state
        )
        finite = jnp.asarray(True)
        for x in jax.tree.leaves((y1_candidate, y_error)):
            finite = finite & jnp.all(jnp.isfinite(x))
        count = jnp.where(finite, 0, count + 1)
        # a retry after a rejection at the resolution of floating point: the step size
        # has collapsed (a singularity, or non-finite values just ahead)
        t_abs = jnp.maximum(jnp.abs(next_t0), jnp.abs(next_t1))
        eps = jnp.finfo(jnp.result_type(t_abs)).eps
        collapsed = ~keep & (jnp.abs(next_t1 - next_t0) <= 64 * eps * t_abs)
        going = result == diffrax.RESULTS.successful
        result = diffrax.RESULTS.where(
            going & ((count >= self.limit) | (collapsed & ~finite)),
            diffrax.RESULTS.nonfinite,
            result,
        )
        result = diffrax.RESULTS.where(
            going & collapsed & finite, diffrax.RESULTS.dt_min_reached, result
        )
        return keep, next_t0, next_t1, made_jump, (inner_state, count), result


class ParameterDependence(NamedTuple):
    """Which parameters (by name) a model's solution can depend on at all, `dynamics`
    (through its right-hand side, initial state, switching and event times and events),
    and, per output, which enter that output's formula directly, `outputs`. An output
    depends on `dynamics` and its own set; a parameter in neither has no effect on it,
    so its sensitivity column is zero there and need not be integrated."""

    dynamics: frozenset[str]
    outputs: tuple[frozenset[str], ...]


class AbstractModel(eqx.Module):
    """A dynamical model with named parameters.

    Every model has `parameters` (a `Parameters`), a default observation grid `times` and
    an initial time `t0`. Subclass `ODEModel` or `DAEModel` rather than this class.

    Optional class attributes: `description` (one line, for `jaxident models`),
    `state_names` (one name per state, e.g. `("S", "I", "R")`: what
    `ji.free_initial_state(model, states=[...])` and `jaxident analyze
    --free-initial-states` name, and the labels of simulations), `output_names` (one per
    output) and `integrator` (the default `ji.Integrator`, e.g. a stiff solver).
    """

    parameters: eqx.AbstractVar[Parameters]
    times: eqx.AbstractVar[Float[Array, " n"]]
    t0: eqx.AbstractVar[float]

    # Optional labels and defaults, set as class attributes by concrete models.
    description: ClassVar[str | None] = None
    state_names: ClassVar[tuple[str, ...] | None] = None
    output_names: ClassVar[tuple[str, ...] | None] = None
    integrator: ClassVar[Integrator] = Integrator()

    def parameter_dependence(self) -> ParameterDependence | None:
        """Which parameters the solution and each output can depend on (a `ParameterDependence`),
        or `None` (the default): any parameter may matter anywhere. A `ji.Problem`
        integrates, per experiment, only the sensitivity columns of the parameters its
        measured outputs depend on (as AMICI does per condition); a model read from
        SBML knows its dependence from its formulas. A hand-written model may declare
        it; a parameter left out wrongly would get a zero column there, so declare it
        only from the formulas themselves."""
        return None

    def jacobian_sparsity(self) -> np.ndarray | None:
        """Which entries of the Jacobian `df_i/dx_j` of the right-hand side can be
        nonzero (a boolean `(n, n)` array over the flat state), or `None` (the default:
        any). `ji.BDF` evaluates a sparse Jacobian by columns that share no row (one
        `jvp` per group, not per state). A model read from SBML knows it from its
        formulas; a hand-written model may declare it, from its formulas alone (an
        entry left out wrongly gives a wrong Jacobian there, which slows the Newton
        iteration; the solution stays error-controlled)."""
        return None

    def output_scalings(self) -> tuple[str | None, ...] | None:
        """Per output, the name of the parameter that multiplies it (`y = s h`, `h` free
        of `s`) and enters nothing else: not the dynamics, the initial state, another
        output but as such a factor, nor a noise model; else `None` (the default:
        none). A hierarchical fit (`ji.FisherLM(hierarchical=True)`) solves for such
        scalings in closed form. A model read from SBML finds them in its formulas; a
        hand-written one may declare them, from its formulas alone. With an offset
        (`output_offsets`), `s` multiplies the output less its offset (`y = s h + b`)."""
        return None

    def output_offsets(self) -> tuple[str | None, ...] | None:
        """Per output, the name of the parameter added to it with coefficient 1
        (`y = s h + b`, `h` free of `b`) and entering nothing else, as for
        `output_scalings`; else `None` (the default: none). A hierarchical fit solves
        for such offsets of linear observables in closed form, with their output's
        scaling where it has one."""
        return None


class ODEModel(AbstractModel):
    """An ODE model `x' = f(t, x, theta)`, `x(t0) = x0(theta)`, `y = h(t, x, theta)`.

    Subclass it and implement `vector_field`, `initial_state` and `output`, and declare
    the fields `parameters`, `times` and `t0`. Each method receives `theta` as a
    `ParameterValues`, so that `theta["beta"]`, `theta.beta` and
    `beta, gamma = theta` all work. Array defaults need
    `eqx.field(default_factory=...)` (dataclass rules).

    **Example:**

    ```python
    class Decay(ji.ODEModel):
        parameters: ji.Parameters = ji.Parameters(["k", "x0"], [0.5, 2.0])
        times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.0, 4.0, 9))
        t0: float = 0.0

        def vector_field(self, t, x, theta):
            return -theta.k * x

        def initial_state(self, theta):
            return jnp.array([theta.x0])

        def output(self, t, x, theta):
            return x[0]
    ```
    """

    @abc.abstractmethod
    def vector_field(
        self, t: Float[Array, ""], x: PyTree[Array], theta: ParameterValues
    ) -> PyTree[Array]:
        """The right-hand side `dx/dt`."""

    @abc.abstractmethod
    def initial_state(self, theta: ParameterValues) -> PyTree[Array]:
        """The state at `t0`, possibly depending on the parameters."""

    @abc.abstractmethod
    def output(self, t: Float[Array, ""], x: PyTree[Array], theta: ParameterValues) -> Array:
        """The observed quantity at time `t` in state `x`: a scalar or a vector."""

    def switching_times(self, theta: ParameterValues) -> Array | None:
        """Times at which the right-hand side switches (kinks in `t` of `nabs`, `nmax`,
        `nmin`, `nmid`, or steps in an input), possibly depending on the parameters, or
        `None` (the default). The step-size controller steps onto them, so that no step
        straddles a kink and the error control stays valid there."""
        return None

    def event_times(self, theta: ParameterValues) -> Array | None:
        """The times of the model's events (a dose, a reset), possibly depending on the
        parameters, or `None` (the default). At each, the solve stops and
        `apply_event` maps the state; the sensitivities take the jump there, with
        respect to the event times too (`TimeWarped`)."""
        return None

    def event_triggers(
        self, t: Float[Array, ""], x: PyTree[Array], theta: ParameterValues
    ) -> Array | None:
        """The root functions of the events the state triggers (`X > 2`: `X - 2`), a
        vector, or `None` (the default). Trigger `j` fires when it rises through zero
        (from negative to positive, once per rise): the solve stops there (located by
        root finding), `apply_event(n + j, ...)` maps the state (`n` timed events
        before it), and the sensitivities take the jump condition, with the event
        time's derivative `-(h_x S + h_theta) / (h_x f + h_t)`."""
        return None

    def apply_event(
        self, i: int, t: Float[Array, ""], x: PyTree[Array], theta: ParameterValues
    ) -> PyTree[Array]:
        """The state just after event `i` at `t`, from the state `x` just before it: a
        static index into `event_times`, then into `event_triggers`."""
        return x

    @property
    def fires_at_t0(self) -> tuple[bool, ...]:
        """Per event (timed, then triggered), whether it fires when its time is at or
        before `t0`, or its trigger is true at `t0` (an SBML trigger whose
        `initialValue` is false)."""
        th = self.parameters.view(self.parameters.nominal)
        times = self.event_times(th)
        t0 = jnp.asarray(self.t0, dtype=float)
        triggers = self.event_triggers(t0, self.initial_state(th), th)
        n = sum(0 if a is None else int(jnp.size(a)) for a in (times, triggers))
        return (False,) * n

    def reinitialize(self, x: PyTree[Array], theta: ParameterValues) -> PyTree[Array]:
        """The state an experiment starts from after a pre-equilibration ended in `x`:
        `x` itself by default; a model whose conditions set some states (PEtab's
        species in the condition table) puts their values in."""
        return x

    def lift(self, x: PyTree[Array]) -> PyTree[Array]:
        """The state in the full space; identity except for reduced-order models
        (`ji.pod_reduce`), which return `basis @ x + mean`."""
        return x

    def restrict(self, y: PyTree[Array]) -> PyTree[Array]:
        """A full-space state mapped to this model's state; identity except for
        reduced-order models, which return `basis.T @ (y - mean)`."""
        return y


class DAEModel(AbstractModel):
    """A semi-explicit index-1 DAE (Abdelfattah, Stechlinski & Eisa 2024, eq. 3):

    `x' = f(t, x, w, theta)`, `0 = g(t, x, w, theta)`, `x(t0) = x0(theta)`,
    `y = h(t, x, w, theta)`,

    with differential variables `x` and algebraic variables `w` (1-D arrays). The
    algebraic variables are eliminated inside the vector field by a Newton solve
    (optimistix) of `g = 0`, differentiated by the implicit-function theorem, so
    sensitivities are exact derivatives of the discretised solution. `w(t0)` is found
    from `initial_algebraic_guess` by the same Newton solve and checked: a failed solve or
    a singular `g_w` (the DAE is not index 1 there) is an error, not a silent NaN.
    Between Newton solves, the starting guess follows `w' = -g_w^{-1} (g_t + g_x x')`, so
    the solve stays on the branch chosen at `t0`.

    Subclass it and implement `differential`, `algebraic`, `initial_state`,
    `initial_algebraic_guess` and `output`, and declare `parameters`, `times` and `t0`.
    The right-hand sides may use `nabs`, `nmax`, `nmin` and `nmid` (nonsmooth DAEs);
    the algebraic solution must then be regular (away from kinks of `g` in `w`).
    """

    @abc.abstractmethod
    def differential(
        self, t: Float[Array, ""], x: Array, w: Array, theta: ParameterValues
    ) -> Array:
        """`dx/dt = f(t, x, w, theta)`."""

    @abc.abstractmethod
    def algebraic(self, t: Float[Array, ""], x: Array, w: Array, theta: ParameterValues) -> Array:
        """The residual `g(t, x, w, theta)`, the same shape as `w`."""

    @abc.abstractmethod
    def initial_state(self, theta: ParameterValues) -> Array:
        """`x(t0)`."""

    @abc.abstractmethod
    def initial_algebraic_guess(self, theta: ParameterValues) -> Array:
        """A starting point for the Newton solve of `g(t0, x0, w, theta) = 0`; it also
        picks the branch of the algebraic solution."""

    @abc.abstractmethod
    def output(self, t: Float[Array, ""], x: Array, w: Array, theta: ParameterValues) -> Array:
        """The observed quantity `h(t, x, w, theta)`: a scalar or a vector."""


class AlgebraicModel(AbstractModel):
    """A static model `y_i = h(u_i, theta)`, observed at experimental conditions `u_i`
    (the rows of `conditions`): regression models, steady-state models, designed
    experiments (Alberton et al. 2013, eq. 7).

    There is no time: `times` are the experiment indices `0, 1, ..., n-1` (pass a subset
    of them wherever a function takes `times`), so sensitivities, selections,
    `ji.estimate` and `ji.set_by_set` apply unchanged. Rows of a sensitivity matrix are
    (experiment, output) pairs in experiment-major order.

    Subclass it, declare `parameters` and `conditions`, and implement `response`.

    **Example:**

    ```python
    class Line(ji.AlgebraicModel):
        parameters: ji.Parameters = ji.Parameters(["a", "b"], [1.0, 0.5])
        conditions: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0, 1, 5)[:, None])

        def response(self, u, theta):
            return theta.a + theta.b * u[0]
    ```
    """

    conditions: eqx.AbstractVar[Float[Array, "n d"]]

    @property
    def times(self) -> Float[Array, " n"]:
        """The experiment indices."""
        return jnp.arange(self.conditions.shape[0], dtype=float)

    @property
    def t0(self) -> float:
        return -1.0

    @abc.abstractmethod
    def response(self, u: Float[Array, " d"], theta: ParameterValues) -> Array:
        """The observed quantity at conditions `u`: a scalar or a vector."""
