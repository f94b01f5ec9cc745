"""The settings of stepwise selection (`ji.Stepwise`), for `ji.set_by_set` and
`ji.one_by_one` (Alberton, Alberton, Di Maggio, Diaz & Secchi 2013)."""

import math
from collections.abc import Iterator, Sequence

import equinox as eqx
import optimistix as optx

from .._fit._solvers import LevenbergMarquardt
from .._linalg._rank import AbstractRankRule, RelativeTolerance
from .._linalg._ranking import AbstractRankingCriterion, Orthogonalization
from .._runtime._choice import Choice


class Procedure(Choice):
    """The stepwise procedure a selection ran: `set-by-set` (Alberton et al.'s binary
    search, `ji.set_by_set`) or `one-by-one` (the classical one, `ji.one_by_one`)."""

    set_by_set = "set-by-set"
    one_by_one = "one-by-one"

    def trials(self, ranked: Sequence[int]) -> Iterator[Sequence[int]]:
        """The sets a round tries to add, in order, until one is accepted: the first
        half of the ranked candidates, halved after each failure down to the first
        alone (set-by-set, Alberton et al. Fig. 4); or each candidate alone in rank
        order (one-by-one)."""
        if self is Procedure.one_by_one:
            yield from ([j] for j in ranked)
            return
        a = math.ceil(len(ranked) / 2)
        while True:
            yield ranked[:a]
            if a == 1:
                return
            a = math.ceil(a / 2)


class Stepwise(eqx.Module):
    """How a stepwise selection ranks, tests and re-estimates: `method=ji.Stepwise(...)`
    of `ji.set_by_set` and `ji.one_by_one`.

    **Arguments:**

    - `criterion`: the ranking, `ji.Orthogonalization()` (Yao et al. 2003, the paper's
      choice, default), `ji.SensitivityNorm()`, `ji.NSRGA()` or `ji.CollinearityIndex()`,
      applied to the scaled matrix `B_N = diag(ybar)^-1 S diag(theta)` (eq. 2; `ybar`
      the mean absolute measurement of each output).
    - `rank`: when the Fisher matrix of a set counts as invertible: its weighted
      sensitivity columns (in log-parameters) must have full numerical rank under this
      rule. Default `RelativeTolerance(1e-6)`: condition number of the Fisher matrix
      below 1e12.
    - `reestimate`: re-estimate the selected parameters after every successful step
      (the others held at their current values). A step whose re-estimation fails
      counts as a failure.
    - `solver`: how to re-estimate: `ji.LevenbergMarquardt(rtol=1e-6, updates=10)`
      (default: stops when two successive steps each lower the weighted cost by less
      than 1e-6 of itself; residuals only at trial points, and Broyden updates of the
      Jacobian between computed ones) or any optimistix least-squares solver. Every
      re-estimation runs `ji.estimate`'s compiled kernel with the candidate set as a
      mask, so the model is compiled once for the whole selection.
    - `max_steps`: the re-estimation's iteration cap.
    - `accept_unconverged`: whether a re-estimation that used all `max_steps` without
      meeting the solver's convergence test may still count as a success (when it
      lowered the cost and the Fisher test passes at its end; noted in the history).
      Default False: it is a failure, and the set is halved.

    With re-estimation, a step succeeds only if the Fisher matrix of the set is
    invertible at the current values, the re-estimation converges and lowers the cost,
    and the Fisher matrix is still invertible at the re-estimated values.
    """

    criterion: AbstractRankingCriterion = Orthogonalization()
    rank: AbstractRankRule = RelativeTolerance(1e-6)
    reestimate: bool = eqx.field(default=False, static=True)
    solver: optx.AbstractLeastSquaresSolver = LevenbergMarquardt(rtol=1e-6, updates=10)
    max_steps: int = eqx.field(default=100, static=True)
    accept_unconverged: bool = eqx.field(default=False, static=True)

    def __check_init__(self):
        if not isinstance(self.criterion, AbstractRankingCriterion):
            raise TypeError(
                "criterion must be a ranking criterion such as ji.Orthogonalization(), "
                f"got {self.criterion!r}."
            )
        if not isinstance(self.rank, AbstractRankRule):
            raise TypeError(
                f"rank must be a rank rule such as RelativeTolerance(), got {self.rank!r}."
            )
        if not isinstance(self.solver, (optx.AbstractLeastSquaresSolver, optx.AbstractMinimiser)):
            raise TypeError(
                "solver must be ji.LevenbergMarquardt() or an optimistix least-squares "
                f"solver, got {self.solver!r}."
            )
        for name in ("reestimate", "accept_unconverged"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {self.max_steps!r}.")
