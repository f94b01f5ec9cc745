"""The settings of the L-SERC test (`ji.LSERC`) and the probing directions they ask for
(Abdelfattah, Stechlinski & Eisa 2024, Algorithm 1, stages S1-S3)."""

import equinox as eqx
import numpy as np

from .._linalg._rank import AbstractRankRule, RelativeTolerance, with_accuracy
from .._model._checks import check_model
from .._runtime._choice import Choice
from .._solve._forward import accuracy


class TwinPartners(Choice):
    """Which coordinates twin a primary probing direction of L-SERC (stage S2):
    `next`, `j = i + 1` for the largest entry `i` (one twin per direction); `all`, every
    `j != i`, as in the authors' code."""

    next = "next"
    all = "all"


def _twin_partners(value) -> TwinPartners:
    return TwinPartners.of(value, "twin_partners")


def _rows(directions) -> tuple[tuple[float, ...], ...] | None:
    """Probing directions as a hashable tuple of rows (the settings are static)."""
    if directions is None:
        return None
    return tuple(tuple(map(float, d)) for d in np.atleast_2d(np.asarray(directions, float)))


class LSERC(eqx.Module):
    """The settings of the L-SERC test (Algorithm 1 of Abdelfattah, Stechlinski & Eisa
    2024), for `ji.lserc(..., method=LSERC(...))` and `ji.reduce_parameters`.

    **Arguments:**

    - `directions`: primary probing directions, an `(m, p)` array (default `+-e_i`).
    - `twin`: `epsilon_twin`; each primary direction also probes `d + epsilon e_j`
      (stage S2, against false positives at kinks). 0 disables.
    - `twin_partners`: `ji.TwinPartners.next` (`j = i + 1`, one twin per primary
      direction; the default) or `ji.TwinPartners.all` (every `j != i`, as in the
      authors' code); the names `"next"` and `"all"` work too.
    - `singular`, `q`: `epsilon_sing` and depth of singularity probing (stage S3, against
      false negatives): the test is repeated at `theta +- epsilon sum_k v_k`, with `v_k`
      the null vectors of each rank-deficient direction (all of `D_sing`). 0 disables.
    - `relative`: how the singularity-probing step is measured. `True` (default): relative
      to each parameter, `theta_i (1 +- epsilon sum_k u_ki)` with `u_k` the unit null
      vectors of `Upsilon_d diag|theta|` (the relative sensitivities; a parameter at 0
      takes an absolute step): no parameter moves by more than `epsilon` of its own value
      per null vector, whatever its units. `False`: `v_k` of unit norm in the parameters'
      own units, Algorithm 1 as Abdelfattah et al. (2024) state it, which reproduces their
      Examples 1-2 (`ji.LSERC(relative=False)`); a parameter much smaller than 1 then
      moves by many times its value (IVGTT's `p4 = 4.92e-6` by 2,000-fold).
    - `rank`: the rank decision on each `Upsilon_d`, recorded in the result. It is taken
      on the column-equilibrated matrix (unit-free); the default `RelativeTolerance()`
      asks for no more digits than the sensitivities have (`10 rtol` of the integrator).
    - `rref_tol`: relative tolerance for nonzero entries of `rref(V_r^T)`.
    - `equilibrate`: `True` (default): the rank decision and the null basis on
      `Upsilon_d` with unit column norms, so that no change of a parameter's units
      changes them; `False`: on `Upsilon_d` as given, the convention of Abdelfattah et
      al. (2024) and of Stigter & Molenaar's SERC, for reproducing their numbers.
    """

    directions: tuple[tuple[float, ...], ...] | None = eqx.field(
        default=None, static=True, converter=_rows
    )
    twin: float = 0.01
    twin_partners: TwinPartners = eqx.field(default=TwinPartners.next, converter=_twin_partners)
    singular: float = 0.01
    q: int = 1
    rank: AbstractRankRule = RelativeTolerance()
    rref_tol: float = 1e-8
    equilibrate: bool = eqx.field(default=True, static=True)
    relative: bool = eqx.field(default=True, static=True)

    def __check_init__(self):
        if not isinstance(self.rank, AbstractRankRule):
            raise TypeError(
                f"rank must be a rank rule such as RelativeTolerance(1e-9), got {self.rank!r}."
            )
        if not (self.twin >= 0 and self.singular >= 0):
            raise ValueError("twin and singular (epsilon_twin, epsilon_sing) must be >= 0.")
        if not isinstance(self.q, int) or self.q < 0 or self.q > 3:
            raise ValueError(f"q must be an integer in [0, 3], got {self.q!r}.")
        if not self.rref_tol > 0:
            raise ValueError(f"rref_tol must be positive, got {self.rref_tol}.")


def at_accuracy(method: LSERC, model, integrator, dtype) -> LSERC:
    """The settings with the rank rule at the accuracy of the sensitivities."""
    rank = with_accuracy(method.rank, accuracy(model, integrator, dtype))
    return eqx.tree_at(lambda m: m.rank, method, rank)


def check_method(model, method) -> None:
    check_model(model)
    if not isinstance(method, LSERC):
        raise TypeError(f"method must be a ji.LSERC(...) configuration, got {method!r}.")


def probe_directions(p: int, method: LSERC):
    directions, twin, twin_partners = method.directions, method.twin, method.twin_partners
    if directions is None:
        eye = np.eye(p)
        primary = np.concatenate([eye, -eye], axis=0)
    else:
        primary = np.atleast_2d(np.asarray(directions, dtype=float))
        if primary.shape[1] != p:
            raise ValueError(f"Probing directions need {p} entries, got shape {primary.shape}.")
        if not np.all(np.isfinite(primary)):
            raise ValueError("Probing directions must be finite.")
    kinds = ["primary"] * len(primary)
    twins = []
    if twin > 0:
        for d in primary:
            i = int(np.argmax(np.abs(d)))
            js = (
                [(i + 1) % p]
                if twin_partners == TwinPartners.next
                else [j for j in range(p) if j != i]
            )
            for j in js:
                if j == i:
                    continue
                dt = d.copy()
                dt[j] += twin  # d + epsilon_twin e_j (Algorithm 1, stage S2)
                twins.append(dt)
        kinds += ["twin"] * len(twins)
    D = np.concatenate([primary] + ([np.stack(twins)] if twins else []), axis=0)
    return D, tuple(kinds)
