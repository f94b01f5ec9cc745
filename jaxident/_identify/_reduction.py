"""Parameter reduction over Latin-hypercube samples (Algorithm 2 of Abdelfattah,
Stechlinski & Eisa 2024): L-SERC at every sample, the parameters non-identifiable in
most samples fixed at their mean, the rest re-estimated."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, PRNGKeyArray

from .._model._base import AbstractModel, Integrator
from .._model._parameters import Parameters
from .._model._sampling import latin_hypercube
from .._problem._base import Problem
from .._runtime._choice import Choice
from .._runtime._results import RESULTS, succeeded
from ._lserc import confirmed_mask, lserc_tree, ModelOutputs, outputs_of, ProblemOutputs
from ._lserc_method import at_accuracy, LSERC, probe_directions
from ._sweep import sweep


class Reduction(eqx.Module):
    """The result of parameter reduction over samples (Algorithm 2 of Abdelfattah et al.
    2024).

    **Fields:**

    - `names`: parameter names.
    - `counts`: per parameter, in how many successful samples it was judged locally
      non-identifiable.
    - `n_samples`, `n_failed`: samples tested and samples whose solve failed (these are
      left out of the counts).
    - `samples`: the parameter samples; `mask`: `(n, p)` per-sample non-identifiable
      masks; `result`: per-sample status (`ji.RESULTS`; `ok`: where it is `successful`).
    - `fixed`: `{name: value}` for the non-locally non-identifiable parameters, at the
      sample mean (or the chosen value); for a problem, on the estimation scales.
    - `reduced_model`: the model with those parameters fixed (`None` for a problem).
    - `reduced_problem`: for a problem, the problem with them fixed (`Problem.fix`),
      for `ji.estimate` of the rest; else `None`.
    - `scales`: for a problem, each parameter's estimation scale (that of the samples
      and of `fixed`); else `None`.

    **Properties:** `non_identifiable` (judged non-identifiable in every successful
    sample: Theta_lni of the paper), `identifiable` (the rest, Theta_nli).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    counts: np.ndarray
    n_samples: int = eqx.field(static=True)
    n_failed: int = eqx.field(static=True)
    samples: np.ndarray
    mask: np.ndarray
    result: RESULTS
    fixed: dict
    reduced_model: AbstractModel | None
    reduced_problem: Problem | None = None
    scales: tuple[str, ...] | None = eqx.field(static=True, default=None)

    @property
    def ok(self) -> np.ndarray:
        """Which samples succeeded (`result == successful`)."""
        return succeeded(self.result)

    @property
    def non_identifiable(self) -> tuple[str, ...]:
        n_ok = self.n_samples - self.n_failed
        return tuple(n for n, c in zip(self.names, self.counts) if n_ok > 0 and c == n_ok)

    @property
    def identifiable(self) -> tuple[str, ...]:
        bad = set(self.non_identifiable)
        return tuple(n for n in self.names if n not in bad)

    def to_dict(self) -> dict:
        return {
            "counts": dict(zip(self.names, (int(c) for c in self.counts))),
            "n_samples": self.n_samples,
            "n_failed": self.n_failed,
            "non_identifiable": list(self.non_identifiable),
            "identifiable": list(self.identifiable),
            "fixed": {k: float(v) for k, v in self.fixed.items()},
        }

    def __repr__(self) -> str:
        n_ok = self.n_samples - self.n_failed
        w = max(len(n) for n in self.names)
        lines = [
            f"Parameter reduction over {self.n_samples} samples ({self.n_failed} failed):",
        ]
        for n, c in zip(self.names, self.counts):
            lines.append(f"  {n:<{w}}  locally non-identifiable in {int(c):>4d} / {n_ok}")
        lines.append(f"  non-identifiable (fixed): {', '.join(self.non_identifiable) or '(none)'}")
        if self.fixed:
            scale = dict(zip(self.names, self.scales or ()))
            lines.append(
                "  fixed at: "
                + ", ".join(
                    f"{k} = {v:.6g}" + (f" ({scale[k]})" if scale.get(k, "lin") != "lin" else "")
                    for k, v in self.fixed.items()
                )
            )
        lines.append(f"  identifiable (kept)     : {', '.join(self.identifiable)}")
        return "\n".join(lines)


class _ReductionSample(eqx.Module):
    """Algorithm 1 at one sample, as `reduce_parameters` sweeps it: a module rather than a
    closure, so that a second reduction with the same model structure and shapes reuses
    the compiled sweep (its arrays are arguments of the compiled chunk)."""

    outputs: ModelOutputs | ProblemOutputs
    D: Array
    integrator: Integrator
    method: LSERC
    confirmed: bool = eqx.field(static=True)

    def __call__(self, theta):
        # Without `confirmed`, the singularity probes would be computed for nothing.
        method = self.method if self.confirmed else eqx.tree_at(lambda m: m.q, self.method, 0)
        theta = self.outputs.linear(theta)
        ref, probes, active, _ = lserc_tree(self.outputs, theta, self.D, self.integrator, method)
        mask = confirmed_mask(ref, probes, active)  # (no probes without `confirmed`)
        return mask, jnp.all(ref.ok)


def _solved(out):
    return out[1]


class FixAt(Choice):
    """Where `ji.reduce_parameters` fixes the parameters it finds non-identifiable at
    every sample: `mean`, their sample mean (Abdelfattah et al.'s choice), or
    `nominal`, the model's nominal values (or give a `{name: value}` dict)."""

    mean = "mean"
    nominal = "nominal"


def reduce_parameters(
    model: AbstractModel | Problem,
    samples: ArrayLike | Sequence | None = None,
    *,
    key: PRNGKeyArray | None = None,
    n: int = 25,
    box: Parameters | ArrayLike | tuple[ArrayLike, ArrayLike] | None = None,
    fix_at: FixAt | str | dict = FixAt.mean,
    confirmed: bool = False,
    method: LSERC = LSERC(),
    batch_size: int = 32,
    devices: Sequence[jax.Device] | None = None,
    progress: bool = True,
    times: ArrayLike | Sequence | None = None,
    integrator: Integrator | None = None,
) -> Reduction:
    """Parameter reduction by repeated L-SERC tests, Algorithm 2 of Abdelfattah et al.
    (2024).

    Algorithm 1 is run at every sample (one vmapped, chunked sweep); a parameter judged
    locally non-identifiable at every sample is non-locally non-identifiable and is
    fixed, giving the reduced model.

    **Arguments:**

    - `model`: the model, or a `ji.Problem` (as `ji.lserc` takes it: through its
      measured outputs, its samples, bounds and fixed values on the estimation scales,
      and the result's `reduced_problem` the problem with the parameters fixed).
    - `samples`: an `(n, p)` array of parameter points; or give `key` (and `n`, `box`,
      default the bounds) for Latin-hypercube samples.
    - `fix_at`: `ji.FixAt.mean` (the sample mean of each fixed parameter, the paper's
      choice; the default), `ji.FixAt.nominal`, or a `{name: value}` dict; the names
      `"mean"` and `"nominal"` work too.
    - `confirmed`: count at each sample only the non-identifiable parameters that the
      singularity probes confirm (default `False`: the whole non-identifiable set at
      the sample, as in the paper).
    - `method`: the L-SERC settings, a `ji.LSERC` (defaults as in the paper: directions
      `+-e_i`, `epsilon_twin = epsilon_sing = 0.01`, `q = 1`).
    - `batch_size`, `progress`, `devices`: for the sweep (`ji.sweep`; default: all
      local devices).
    - `times`, `integrator`: a model's observation times (default `model.times`) and
      solver (default the model's); a problem has its own times.

    **Returns:** a `Reduction`, with `reduced_model`.

    **Example:**

    ```python
    red = ji.reduce_parameters(model, key=jax.random.key(0), n=25)
    red.non_identifiable, red.reduced_model.parameters.names
    ```
    """
    model, outputs = outputs_of(model, times, method, "ji.reduce_parameters")
    owner = outputs.owner
    if not isinstance(fix_at, dict):
        fix_at = FixAt.of(fix_at, "fix_at (or a {name: value} dict)")
    params = owner.parameters
    p = params.p
    if samples is None:
        if key is None:
            raise ValueError("Give samples, or a key for Latin-hypercube samples.")
        samples = latin_hypercube(key, params if box is None else box, n)
    samples = jnp.asarray(samples, dtype=float)
    if samples.ndim != 2 or samples.shape[1] != p:
        raise ValueError(f"samples must have shape (n, {p}), got {samples.shape}.")
    D, _ = probe_directions(p, method)
    D = jnp.asarray(D)
    integrator = model.integrator if integrator is None else integrator
    method = at_accuracy(method, model, integrator, samples.dtype)
    one = _ReductionSample(outputs, D, integrator, method, bool(confirmed))
    res = sweep(
        one,
        samples,
        batch_size=batch_size,
        progress=progress,
        ok=_solved,
        desc=f"L-SERC at {samples.shape[0]} samples",
        devices=devices,
    )
    mask = np.asarray(res.values[0], bool)
    ok = np.asarray(res.ok, bool)
    counts = mask[ok].sum(axis=0)
    names = params.names
    n_ok = int(ok.sum())
    lni = [nm for nm, c in zip(names, counts) if n_ok > 0 and c == n_ok]
    nominal = np.asarray(params.nominal)
    if isinstance(fix_at, dict):
        fixed = {k: float(v) for k, v in fix_at.items()}
    elif fix_at == FixAt.mean:
        means = np.asarray(samples)[ok].mean(axis=0) if n_ok else nominal
        fixed = {nm: float(means[names.index(nm)]) for nm in lni}
    else:
        fixed = {nm: float(nominal[names.index(nm)]) for nm in lni}
    some = bool(fixed) and len(fixed) < p
    return Reduction(
        names=names,
        counts=counts,
        n_samples=int(samples.shape[0]),
        n_failed=int((~ok).sum()),
        samples=np.asarray(samples),
        mask=mask,
        result=res.result,
        fixed=fixed,
        **outputs.reduction(fixed if some else {}),
    )
