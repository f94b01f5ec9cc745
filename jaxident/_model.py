"""Models: equinox modules with named parameters, integrated by diffrax."""

import abc
from typing import ClassVar

import diffrax
import equinox as eqx
from jaxtyping import Array, Float, PyTree

from ._parameters import Parameters, ParameterValues


class Integrator(eqx.Module):
    """How a model is integrated: a diffrax solver, tolerances and a step cap.

    **Arguments:**

    - `solver`: any diffrax solver with an error estimate; `diffrax.Tsit5()` (default)
      for non-stiff models, `diffrax.Kvaerno5()` for stiff ones.
    - `rtol`, `atol`: tolerances of the PID step-size controller. Sensitivities are
      exact derivatives of the discretised solution, which is within about `rtol` of
      the true one, so `rtol` also bounds the accuracy of a sensitivity matrix.
    - `max_steps`: the step cap; reaching it is an error (or a failure flag in a sweep).
    - `dt0`: initial step; `None` lets the controller choose.

    **Example:**

    ```python
    ji.sensitivity_matrix(model, theta, integrator=ji.Integrator(diffrax.Kvaerno5(), rtol=1e-10))
    ```
    """

    solver: diffrax.AbstractSolver = diffrax.Tsit5()
    rtol: float = 1e-8
    atol: float = 1e-10
    max_steps: int = 100_000
    dt0: float | None = None

    def __check_init__(self):
        if not (self.rtol > 0 and self.atol >= 0):
            raise ValueError(
                f"Need rtol > 0 and atol >= 0, got rtol={self.rtol}, atol={self.atol}."
            )
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}.")

    def controller(self) -> diffrax.AbstractStepSizeController:
        return diffrax.PIDController(rtol=self.rtol, atol=self.atol)


class AbstractModel(eqx.Module):
    """A dynamical model with named parameters.

    Every model has `parameters` (a `Parameters`), a default observation grid `times`,
    an initial time `t0`, and an `output(t, x, theta)` observation function. Subclass
    `ODEModel` rather than this class.
    """

    parameters: eqx.AbstractVar[Parameters]
    times: eqx.AbstractVar[Float[Array, " n"]]
    t0: eqx.AbstractVar[float]

    # Optional labels and defaults, set as class attributes by concrete models.
    description: ClassVar[str | None] = None
    state_names: ClassVar[tuple[str, ...] | None] = None
    output_names: ClassVar[tuple[str, ...] | None] = None
    integrator: ClassVar[Integrator] = Integrator()

    @abc.abstractmethod
    def output(self, t: Float[Array, ""], x: PyTree[Array], theta: ParameterValues) -> Array:
        """The observed quantity at time `t` in state `x`: a scalar or a vector."""


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
