"""Structural or weak: whether a null direction the rank rule finds at one point is a
structural non-identifiability or a real but tiny effect.

The rank rule calls a direction null when its singular value lies below the threshold
(by default the claimed accuracy of the sensitivities, `10 rtol`). Two different things
live there: a structural non-identifiability (the outputs do not depend on the direction
at all: its singular value is the solver's error, and it is null at every point of the
box) and a weak direction (a real effect, smaller than the threshold at this point: a
fast reversible binding whose forward and reverse rates move together, a saturation far
from its half-saturation constant). A symbolic tool (STRIKE-GOLDD; Villaverde et al.
2016, or the differential-algebra methods of StructuralIdentifiability.jl; Dong et al.
2023) calls the latter identifiable; the remedies differ (a reparametrization or a new
observable against more precise or better placed data).

Each null direction (a no-effect column, or a group of dependent sets with `count`
directions among `columns`) is measured by its size: the largest of the `count`
smallest singular values of the equilibrated columns it lies in (no-effect columns
zero), relative to the largest singular value of the whole matrix; for a column without
effect, its norm in comparable units relative to the largest. Both are free of the
parameters' units (equilibrated columns, or the estimation scale's units) and of the
basis an SVD returns (only index sets enter). Then:

1. **Exact** (the cheap proof): its size at rounding level (`10 max(n, p) eps`), and for
   a group a scaling symmetry (its null directions on the log scale null at a second
   point too): structural, without further solves.
2. Otherwise a close call: the sensitivities are solved at `rtol / 100` (never below
   1e-13; the decisions' own re-solve where they took one) and decided again 10 times
   above every small value not shown real (`Finer`: a value is real above 10 times the
   finer solve's accuracy, or where it stays the same in both solves while the matrix
   moved more than it): a direction resolved there is a real effect: **weak**.
3. Otherwise **generic**: at every point of a Latin-hypercube sample of the box (8
   points; each solved at the analysis' tolerances, the same rank rule with the same
   units), are the directions still there (`count` singular values of its columns at or
   below the threshold; a no-effect column still without effect or dependent)? Null at
   every point solved: **structural**; resolved at one: **weak** (small here only).

`generic=True` runs steps 2 and 3 for every direction (an exact symmetry at one point
can still be resolved far away in the box), `False` none of them (every null direction
is then structural, at this point).
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._linalg._dependence import Dependence, dependence
from .._linalg._rank import AbstractRankRule
from .._model._sampling import latin_hypercube
from .._problem._scale import Scale


POINTS = 8  # of the Latin-hypercube sample of the generic check
FINER = 100.0  # the close call's re-solve: rtol / FINER
ABOVE = 10.0  # a size this many times the accuracy is a real effect
_ROUNDING = 10.0  # times max(n, p) eps: a size at rounding level


class Direction(NamedTuple):
    """A null direction to classify: `count` directions in the span of `columns` (the
    supports of a group's dependent sets), or a column without effect."""

    columns: tuple[int, ...]
    count: int
    no_effect: bool


class Measured(NamedTuple):
    """One weighted sensitivity matrix, measured by the rank rule: `A` equilibrated and
    divided by its largest singular value (no-effect columns zero), `tau` the rule's
    threshold relative to it, `norms` the column norms in comparable units relative to
    the largest, `effect` their threshold, `out` the columns non-identifiable there,
    `rounding` the size of rounding (`10 max(n, p) eps`)."""

    A: np.ndarray
    tau: float
    norms: np.ndarray
    effect: float
    out: np.ndarray
    rounding: float


def measure(S: np.ndarray, rule: AbstractRankRule, units: np.ndarray) -> Measured:
    """The rank rule's decisions on `S` (rows weighted) as a `Measured`."""
    return measured(dependence(jnp.asarray(S), rule, units=jnp.asarray(units)), S)


def measured(dep: Dependence, S: np.ndarray) -> Measured:
    """`ji.linalg.dependence`'s decisions `dep` on `S` as a `Measured`."""
    s1 = float(dep.singular_values[0])
    top = float(np.max(np.asarray(dep.norms)))
    scale, no_effect = np.asarray(dep.scale), np.asarray(dep.no_effect)
    A = np.where(no_effect[None, :], 0.0, S / scale[None, :]) / (s1 if s1 > 0 else 1.0)
    return Measured(
        A=A,
        tau=float(dep.threshold) / s1 if s1 > 0 else 0.0,
        norms=np.asarray(dep.norms) / (top if top > 0 else 1.0),
        effect=float(dep.effect_threshold) / (top if top > 0 else 1.0),
        out=np.asarray(dep.non_identifiable),
        rounding=_ROUNDING * max(S.shape) * float(np.finfo(S.dtype).eps),
    )


def size(m: Measured, d: Direction) -> float:
    """The direction's size on `m`: the largest of its `count` smallest singular values
    among its columns (a column's norm for a no-effect column)."""
    if d.no_effect:
        return float(m.norms[d.columns[0]])
    s = np.linalg.svd(m.A[:, list(d.columns)], compute_uv=False)
    s = np.concatenate([s, np.zeros(len(d.columns) - s.size)])
    return float(s[-d.count]) if d.count <= s.size else 0.0


def deficient(m: Measured, d: Direction) -> bool:
    """Whether the direction is null on `m` by the rank rule."""
    if d.no_effect:
        return bool(m.out[d.columns[0]])
    return size(m, d) <= m.tau


def box(lower, upper, theta, scales) -> tuple[np.ndarray, np.ndarray]:
    """The box to sample: the bounds, an infinite one replaced by a decade (log scales)
    or the parameter's size (linear) from `theta`."""
    lo, up, th = (np.asarray(x, dtype=float) for x in (lower, upper, theta))
    width = np.array([Scale(sc).unit(max(abs(t), 1.0)) for t, sc in zip(th, scales)])
    return np.where(np.isfinite(lo), lo, th - width), np.where(np.isfinite(up), up, th + width)


def generic_check(
    directions: list[Direction],
    matrix: Callable[[np.ndarray | None, float], tuple | None],
    bounds: tuple[np.ndarray, np.ndarray],
    rule: AbstractRankRule,
    points: int = POINTS,
) -> tuple[list[list[float]], int]:
    """Whether each direction stays null at the points of a Latin-hypercube sample of the
    box `bounds` (a fixed key: the same points on every call): per direction, its size
    over the threshold at each point solved where it is resolved (empty: null at every
    one), and how many points were solved (the sample stops early once every direction
    is resolved somewhere).

    `matrix(theta, factor)`: `(S, units, accuracy, rtol)`, the weighted sensitivities at
    `theta` solved `factor` times more accurately than the analysis, the estimation units
    there, their accuracy and the solve's rtol; `None` where the solve fails."""
    samples = np.asarray(latin_hypercube(jax.random.key(0), bounds, points))
    resolved: list[list[float]] = [[] for _ in directions]
    solved = 0
    for th in samples:
        got = matrix(th, 1.0)
        if got is None:
            continue
        solved += 1
        m = measure(got[0], rule, got[1])
        for i, d in enumerate(directions):
            if not deficient(m, d):
                resolved[i].append(size(m, d) / max(m.tau, m.rounding))
        if all(resolved):  # every one weak: the other points change no verdict
            break
    return resolved, solved


def generic_evidence(here: float, resolved: list[float], solved: int, points: int) -> str:
    """The generic check's evidence in words (`here`: the size at the analysed point)."""
    if solved == 0:
        return "at this point only: the model could not be solved elsewhere in the box"
    if resolved:
        return (
            f"small here ({here:.2g} of the largest) but resolved elsewhere in the box: at "
            f"{len(resolved)} of the {solved} points solved, up to {max(resolved):.3g} "
            "times the threshold"
        )
    failed = "" if solved == points else f" ({points - solved} could not be solved)"
    return (
        f"generic: null at all {solved} points of a Latin-hypercube sample of the box{failed}, "
        "and at the accuracy of the sensitivities here"
    )


class Finer(NamedTuple):
    """The same sensitivities solved twice, `first` at rtol `r0` and `fine` at `r1`
    (accuracy `accuracy`), measured by the same rule: which of the values below the
    first decisions' thresholds are real effects.

    A value is real when it exceeds `ABOVE` times the accuracy claimed for the finer
    solve, or when it is the same to `1 / ABOVE` in both solves while the sensitivities
    themselves changed by more than it between them (`change`, in the spectral norm):
    the solver's error moved the matrix, and could have moved any singular value that
    much (Weyl's inequality), but not this value. A structural direction's value is
    that error: it changes with the tolerance, or sits at rounding level (below `ABOVE`
    times `10 max(n, p) eps`). (The claimed accuracy, `10 rtol`, is far above the
    error of the small singular values: Fujita's stay the same to four digits from rtol
    1e-8 to 1e-12.)"""

    first: Measured
    fine: Measured
    accuracy: float
    r0: float
    r1: float

    @property
    def change(self) -> float:
        """How much the equilibrated matrix changed between the solves (each relative
        to its largest singular value; the spectral norm: by Weyl's inequality, the most
        any singular value could have moved)."""
        if self.first.A.shape != self.fine.A.shape:
            return math.inf
        return float(np.linalg.norm(self.first.A - self.fine.A, 2))

    def real(self, v0: float, v1: float) -> str | None:
        """Why the value `v1` of the finer solve (`v0` of the first) is a real effect,
        or `None`."""
        r = self.fine.rounding
        if v1 > ABOVE * max(self.accuracy, r):
            return (
                f"a real effect: {v1:.2g} of the largest, more than {ABOVE:g} times the "
                f"accuracy ({self.accuracy:.0e}) of sensitivities solved at rtol {self.r1:.0e}"
            )
        if v1 > ABOVE * r and abs(v0 - v1) <= v1 / ABOVE and self.change >= v1:
            return (
                f"a real effect: {v1:.2g} of the largest, the same at rtol {self.r0:.0e} and "
                f"{self.r1:.0e} (to {100 / ABOVE:g}%) while the sensitivities changed by up "
                f"to {self.change:.1e}"
            )
        return None

    def threshold(self) -> float:
        """The finer decisions' relative threshold: `ABOVE` times every value below the
        first decisions' thresholds (singular values of the columns with an effect,
        and the norms of those without) that is not a real effect (the margin: a
        column's distance to the span of the others, by which membership is decided,
        exceeds the smallest singular value by up to the inverse of its component in
        the null vector); never above those thresholds, never below `ABOVE` times
        rounding (no value there is real)."""
        cols = ~(self.first.norms <= self.first.effect)
        s0 = np.linalg.svd(self.first.A[:, cols], compute_uv=False)
        s1 = np.linalg.svd(self.fine.A[:, cols], compute_uv=False)
        small = [(a, b) for a, b in zip(s0, s1) if b <= self.first.tau]
        small += [(self.first.norms[i], self.fine.norms[i]) for i in np.flatnonzero(~cols)]
        top = max((b for a, b in small if self.real(a, b) is None), default=0.0)
        ceiling = max(self.first.tau, self.first.effect)
        return min(ABOVE * max(top, self.fine.rounding), ceiling)

    def why(self, d: Direction) -> str:
        """The evidence that a direction the finer decisions resolve is real."""
        text = self.real(size(self.first, d), size(self.fine, d))
        return text or f"a real effect: resolved by sensitivities solved at rtol {self.r1:.0e}"
