"""The labelled sensitivity matrix (`ji.Sensitivity`): what `ji.sensitivity` and
`ji.sensitivity` return and every selection takes."""

import equinox as eqx
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from .._runtime._choice import Choice
from .._runtime._results import names as result_names, RESULTS, succeeded


class SensitivityScale(Choice):
    """What a sensitivity matrix's entries are: `none`, `dy_i/dtheta_j`; `relative`,
    `(theta_j / y_i) dy_i/dtheta_j` (`dlog y / dlog theta`, the scaled matrix `B_N` of
    Alberton et al. 2013, eq. 2); `noise`, a problem's (`ji.sensitivity(problem)`): each
    row divided by its datum's noise standard deviation, the parameters on their
    estimation scales. The strings `"none"`, `"relative"` and `"noise"` work too."""

    none = "none"
    relative = "relative"
    noise = "noise"


class Sensitivity(eqx.Module):
    """A sensitivity matrix with its labels.

    **Fields:**

    - `matrix`: `(n_times * n_outputs, p)`, rows in time-major order (all outputs at the
      first time, then the second time, ...), columns in the model's parameter order.
    - `outputs`: the model outputs at the same rows.
    - `times`: the observation times.
    - `names`: the parameter names (the columns).
    - `output_names`: the output names, or `None`.
    - `scale`: a `ji.SensitivityScale`: `none` (dy/dtheta), `relative` (dlog y / dlog theta) or
      `noise` (a problem's rows, weighted by their noise).
    - `result`: the status (`ji.RESULTS`): not `successful` where the solve failed or
      the matrix is not finite (only with `throw=False`; the matrix is NaN then); `ok`
      is `result == successful`.
    - `accuracy`: the relative accuracy of the entries (`10 rtol` of the integrator, see
      `ji.Integrator`); the default rank rules ask for no more digits than this.
    - `units`: `(p,)`, the size of a unit move of each parameter on the columns' scale
      (1 where the column is per log unit, the box width where it is per unit of the
      parameter), so that column norms compare for the "no effect" decision
      (`ji.linalg.dependence`); `None` where unknown (only a zero column has no
      effect then).
    """

    matrix: Float[Array, "rows p"]
    outputs: Float[Array, " rows"]
    times: Float[Array, " n"]
    names: tuple[str, ...] = eqx.field(static=True)
    output_names: tuple[str, ...] | None = eqx.field(static=True)
    scale: SensitivityScale = eqx.field(
        static=True, converter=lambda s: SensitivityScale.of(s, "scale")
    )
    result: RESULTS
    accuracy: float | None = eqx.field(static=True, default=None)
    units: Float[Array, " p"] | None = None

    @property
    def ok(self) -> Bool[ArrayLike, "*batch"]:
        """Whether the solve succeeded with a finite matrix."""
        return succeeded(self.result)

    @property
    def n_outputs(self) -> int:
        return self.outputs.shape[-1] // self.times.shape[-1]

    def to_dict(self) -> dict:
        return {
            "accuracy": None if self.accuracy is None else float(self.accuracy),
            "matrix": np.asarray(self.matrix).tolist(),
            "outputs": np.asarray(self.outputs).tolist(),
            "times": np.asarray(self.times).tolist(),
            "names": list(self.names),
            "output_names": None if self.output_names is None else list(self.output_names),
            "scale": self.scale,
            "ok": bool(self.ok),
            "result": result_names(self.result),
        }

    def __repr__(self) -> str:
        shape = "x".join(str(s) for s in self.matrix.shape)
        return (
            f"Sensitivity({shape}, parameters={list(self.names)}, "
            f"outputs={list(self.output_names or [])}, times={self.times.shape[-1]}, "
            f"scale={self.scale!r}, ok={np.asarray(self.ok).tolist()})"
        )

    @property
    def row_labels(self) -> list[str]:
        n_out = self.outputs.shape[-1] // self.times.shape[-1]
        outs = self.output_names or tuple(f"y{i}" for i in range(n_out))
        return [f"{o}(t={float(t):g})" for t in self.times for o in outs]
