"""How a problem's fit steps from one start to an estimate: `ji.FisherLM`, the compiled
bounded Levenberg-Marquardt (the default), or `ji.Fides`, the fides package's trust
region (Fröhlich and Sorger 2022) driven by the same compiled objective. Each is a
strategy object: `ji.estimate(problem, starts=..., optimizer=ji.Fides())`."""

import abc
import logging
from collections.abc import Mapping
from typing import ClassVar

import equinox as eqx
import numpy as np
import optimistix as optx

from .._problem._base import Problem
from ._hierarchical import only, scalings
from ._multistart import (
    AbstractNoiseCurvature,
    at_bound,
    ExpectedCurvature,
    filled,
    fit_batch,
    fit_once,
    objective,
)
from ._solvers import AbstractBox, AbstractCurvatureScaling, Clip, FadingMaximum


class AbstractOptimizer(eqx.Module):
    """How `ji.estimate` fits a problem from one start (`fit`), and from several side by
    side where it can (`fit_batch`). Both return `(theta, nll, steps, result,
    at_bound, fisher)` as NumPy values (a leading axis per start for `fit_batch`): the
    estimate on the estimation scale, its negative log-likelihood (a plain solve's,
    `inf` where a fit failed), the steps taken, an `optimistix.RESULTS`, which
    parameters ended at a bound, and the Fisher information of every parameter at the
    estimate where the optimizer has it (else NaN). `max_steps`: the step cap
    `ji.estimate` uses where it is given none."""

    max_steps: eqx.AbstractClassVar[int]
    hierarchical: eqx.AbstractVar[bool]

    def inner(self, problem: Problem, free=None):
        """The scalings a hierarchical fit solves for in closed form, or `None`: those
        among `free` (a parameter held by the caller, as a profile holds its own, is
        held, not solved for)."""
        if not self.hierarchical:
            return None
        found = scalings(problem)
        if found is not None and free is not None:
            found = only(found, np.asarray(free, bool))
            if found is None:
                return None
        if found is None:
            raise ValueError(
                f"hierarchical=True: {problem.name or 'the problem'} has no scalings to "
                "solve for (an estimated parameter that multiplies whole observables with "
                "normal noise, is added to whole linear ones, or multiplies whole noise "
                "levels, and enters nothing else)."
            )
        return found

    @abc.abstractmethod
    def fit(self, problem: Problem, theta0, free, integrator, max_steps: int) -> tuple:
        """The fit of the `free` parameters (a mask) from `theta0`, the others held."""

    def fit_batch(self, problem: Problem, thetas, free, integrator, max_steps: int) -> tuple:
        raise TypeError(f"{type(self).__name__} fits one start at a time: leave out batch=.")


class FisherLM(AbstractOptimizer):
    """The compiled fit (default): `ji.LevenbergMarquardt`, the engine of every fit, on
    the negative log-likelihood with the Fisher information as its Hessian (Fisher
    scoring) inside the bounds, which, where it would stop, goes on with a
    Dennis-Gay-Welsch secant of the rest of the Hessian added until it stops again. One
    compiled loop per problem (every start and every `free` mask share it), and
    `batch=` fits starts side by side. `rtol`: the relative decrease of the cost over
    two steps below which it stops.

    `hierarchical=True` (either optimizer): the observable scalings, offsets and noise
    scales (parameters that multiply whole observables with normal noise, are added to
    whole linear ones, or multiply whole noise levels, and enter nothing else: found in
    SBML formulas, declared by a hand-written model's `output_scalings()` and
    `output_offsets()`) are solved in closed form at every evaluation (Loos et
    al. 2018, as pyPESTO's hierarchical optimization), so the optimizer steps in the
    other parameters alone; the estimate reports every parameter
    (`_fit/_hierarchical.py`).

    `noise_curvature`: how the steps' model curves along each estimated noise
    parameter: `ji.ExpectedCurvature()` (default: its Fisher information) or
    `ji.SmallerCurvature()` (the smaller of that and its observed curvature). `box`:
    what a step that leaves the box becomes: `ji.Clip()` (default) or `ji.Face()`.
    `scaling`: how the curvatures that scale the damping carry over from step to step:
    `ji.FadingMaximum()` (default: Moré's running maximum, halved at each accepted
    step) or `ji.RunningMaximum()` (Moré's). Each says why and what it was measured to
    do in its own docstring."""

    rtol: float = 1e-8
    hierarchical: bool = False
    noise_curvature: AbstractNoiseCurvature = eqx.field(default=ExpectedCurvature(), static=True)
    box: AbstractBox = eqx.field(default=Clip(), static=True)
    scaling: AbstractCurvatureScaling = eqx.field(default=FadingMaximum(), static=True)
    max_steps: ClassVar[int] = 256

    def _settings(self) -> tuple:
        """The compiled fit's static settings: the noise curvature, the box and the
        damping's scaling."""
        return (self.noise_curvature, self.box, self.scaling)

    def fit(self, problem, theta0, free, integrator, max_steps):
        inner = self.inner(problem, free)
        return fit_once(problem, theta0, free, integrator, max_steps, self.rtol, inner,
                        self._settings())  # fmt: skip

    def fit_batch(self, problem, thetas, free, integrator, max_steps):
        inner = self.inner(problem, free)
        return fit_batch(problem, thetas, free, integrator, max_steps, self.rtol, inner,
                         self._settings())  # fmt: skip


def failure(nll, result, max_steps: int) -> str:
    """Why a fit (its -log L `nll` and `result`, an `optimistix.RESULTS`) is no
    converged fit, in words; "" where it is one: what a profile point that is not one
    reports."""
    if not np.isfinite(float(nll)):
        return "the model could not be solved, or its likelihood is not finite"
    if result == optx.RESULTS.successful:
        return ""
    if result == optx.RESULTS.nonlinear_max_steps_reached:
        return f"the fit reached its step cap (max_steps={max_steps}) unconverged"
    if result == optx.RESULTS.stagnation:
        return "the fit stagnated (no step lowers the cost, yet the gradient does not vanish)"
    if result == optx.RESULTS.nonlinear_divergence:
        return "the model could not be solved at the start"
    return f"the fit failed ({result})"


def checked_optimizer(optimizer) -> AbstractOptimizer:
    """`optimizer`, or the default `FisherLM()` for `None`."""
    if optimizer is None:
        return FisherLM()
    if not isinstance(optimizer, AbstractOptimizer):
        raise TypeError(
            f"optimizer must be ji.FisherLM() or ji.Fides(), got {type(optimizer).__name__}."
        )
    return optimizer


# A fit is converged where a Gauss-Newton step from it promises at most this much of
# -log L (FisherLM's own stop tests the same promise against the cost's noise)
PROMISE = 1e-3


def promised(g, H, theta, lower, upper, free) -> float:
    """What a Gauss-Newton step from `theta` promises to lower -log L by (its gradient
    `g`, Fisher information `H`): `g^T H^+ g / 2` over the free parameters that can
    move (not at a bound the gradient pushes against), the pseudo-inverse on the
    directions the information resolves (a null direction promises nothing: no data
    move it)."""
    g, H, theta = (np.asarray(a, float) for a in (g, H, theta))
    blocked = ((theta <= lower) & (g > 0)) | ((theta >= upper) & (g < 0))
    m = np.asarray(free, bool) & ~blocked
    if not m.any() or not (np.all(np.isfinite(g[m])) and np.all(np.isfinite(H[np.ix_(m, m)]))):
        return 0.0 if not m.any() else float("inf")
    gm, Hm = g[m], H[np.ix_(m, m)]
    lam, V = np.linalg.eigh(0.5 * (Hm + Hm.T))
    keep = lam > max(lam.max(), 0.0) * m.sum() * np.finfo(float).eps * 1e3
    c = V[:, keep].T @ gm
    return float(0.5 * np.sum(c**2 / lam[keep]))


# fides' exit flags as optimistix results
_EXITS = {
    "FTOL": optx.RESULTS.successful,
    "XTOL": optx.RESULTS.successful,
    "GTOL": optx.RESULTS.successful,
    "MAXITER": optx.RESULTS.nonlinear_max_steps_reached,
    "MAXTIME": optx.RESULTS.nonlinear_max_steps_reached,
    "DELTA_TOO_SMALL": optx.RESULTS.stagnation,
}


def _fides():
    try:
        import fides
    except ImportError:
        raise ImportError(
            "ji.Fides drives the fides package, which is not installed: "
            "pip install 'jaxident[fides]' (or pip install fides)."
        ) from None
    return fides


class _Stalled(Exception):
    """fides' trial points keep failing while its best point no longer moves."""


def _stalled(tried: list, window: int, tol: float = 0.1) -> bool:
    """Whether, over the last `window` evaluations (`tried`: the cost at each, `inf`
    where the model failed), a quarter or more failed and the best cost fell by less
    than `tol` (a multi-start's test of having reached a fit: `MultiStart.tol`)."""
    if len(tried) <= window:
        return False
    recent = np.asarray(tried[-window:])
    before = min(tried[:-window])
    return bool(np.sum(np.isinf(recent)) >= window // 4
                and before - min(before, recent.min()) < tol)  # fmt: skip


def _options(fides, options: Mapping) -> dict:
    known = [o.value for o in fides.Options]
    unknown = [k for k in options if str(getattr(k, "value", k)) not in known]
    if unknown:
        raise ValueError(f"fides has no options {unknown}; it has {known}.")
    return {fides.Options(getattr(k, "value", k)): v for k, v in options.items()}


class Fides(AbstractOptimizer):
    """fides' trust-region optimizer (Fröhlich and Sorger 2022, the optimizer pyPESTO
    uses) driven from the host by the compiled objective: the negative log-likelihood,
    its gradient and the Fisher information from one solve with sensitivities per
    evaluation. Steps in a 2-D subspace, reflected at the bounds. `hybrid=True`
    (default, as pyPESTO): the Fisher information until `switch` iterations pass
    without a change of the trust radius, then BFGS updates (fides' `HybridFixed`);
    `False`: the Fisher information throughout. `hierarchical`: as for `FisherLM`.
    `options`: more of fides' options
    (`{"fatol": 1e-8}`); its iteration cap is `ji.estimate`'s `max_steps` (default
    1,000, fides').

    `stall`: a fit ends (`stagnation`, at its best point) once, over its last `stall`
    evaluations, a quarter or more failed (the model could not be solved there) and
    its best cost fell by less than 0.1 (what counts as reaching a fit); `None`: never.
    Each failure shrinks fides' trust region, and each step after it widens it again,
    so without this stop such a fit can spend its whole iteration cap moving by less
    than what counts as reaching a fit (a Perelson start: benchmarks/README).

    An optional dependency (`pip install 'jaxident[fides]'`). It pays where the
    compiled fit stops early: on Fujita it reaches the best known optimum (-log L
    -66.58) from a start where the compiled fit ends on a plateau of 10,011, at about
    30 times the cost per start (benchmarks/README.md)."""

    hybrid: bool = True
    switch: int = 20
    hierarchical: bool = False
    stall: int | None = 100
    max_steps: ClassVar[int] = 1000  # fides' own iteration cap
    options: Mapping = eqx.field(default_factory=dict, static=True)

    def __check_init__(self):
        if isinstance(self.switch, bool) or not isinstance(self.switch, int) or self.switch < 1:
            raise ValueError(
                f"switch must be a positive number of iterations, got {self.switch!r}."
            )
        if self.stall is not None and (
            isinstance(self.stall, bool) or not isinstance(self.stall, int) or self.stall < 4
        ):
            raise ValueError(
                f"stall must be a number of evaluations (4 or more) or None, got {self.stall!r}."
            )
        if not isinstance(self.options, Mapping):
            raise TypeError(f"options must be a dict of fides options, got {self.options!r}.")

    def fit(self, problem, theta0, free, integrator, max_steps):
        fides = _fides()
        inner = self.inner(problem, free)
        free = np.array(free, bool)
        if inner is not None:  # the scalings are solved for, not stepped
            free[list(inner.index)] = False
        lower = np.asarray(problem.parameters.lower, float)
        upper = np.asarray(problem.parameters.upper, float)
        base = np.array(theta0, dtype=float)
        base[free] = np.clip(base[free], lower[free], upper[free])

        def full(x):
            theta = base.copy()
            theta[free] = x
            return theta

        tried = []  # the cost at each point fides evaluates, inf where it failed

        def fun(x):
            f, g, H = objective(problem, full(x), integrator, derivatives=True, inner=inner)
            tried.append(float(f) if np.isfinite(f) else np.inf)
            if self.stall is not None and _stalled(tried, self.stall):
                raise _Stalled
            if not np.isfinite(f):
                # fides tests its convergence at every trial point, rejected or not: a
                # point where the model cannot be solved must not pass for a flat one
                # (its zero gradient stopped fits there as converged); NaN, as
                # pyPESTO's objective gives fides for a failed simulation
                k = int(free.sum())
                return np.inf, np.full(k, np.nan), np.full((k, k), np.nan)
            return float(f), g[free], H[np.ix_(free, free)]

        options = {fides.Options.MAXITER: int(max_steps), **_options(fides, self.options)}
        hessian = fides.HybridFixed(switch_iteration=self.switch) if self.hybrid else None
        opt = fides.Optimizer(fun, ub=upper[free], lb=lower[free], verbose=logging.ERROR,
                              options=options, hessian_update=hessian)  # fmt: skip
        result = None
        try:
            # (fides' trust-region subproblem meets NaN and inf at tiny radii and rejects
            # those steps itself; NumPy's warnings about them are not the user's)
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                opt.minimize(base[free])
        except _Stalled:
            result = optx.RESULTS.stagnation
        except RuntimeError:  # the objective, its gradient or Fisher matrix not finite
            result = optx.RESULTS.nonlinear_divergence
            if not np.isfinite(opt.fval_min):  # at the start: nothing to report
                nan = np.full((base.size, base.size), np.nan)
                return base, np.asarray(np.inf), np.asarray(0), result, np.zeros_like(free), nan
        theta = filled(problem, full(opt.x_min), integrator, inner)
        # the plain solve's cost, as the compiled fit reports (a solve with
        # sensitivities takes other steps: its cost differs by the discretization)
        nll = float(objective(problem, theta, integrator, derivatives=False))
        if result is None:
            result = _EXITS.get(opt.exitflag.name, optx.RESULTS.nonlinear_divergence)
        if not np.isfinite(nll):
            result = optx.RESULTS.nonlinear_divergence
        steps = np.asarray(opt.iteration)
        fisher = np.full((theta.size, theta.size), np.nan)
        if inner is None and np.isfinite(nll):  # (compiled for the steps already)
            _, g, fisher = objective(problem, theta, integrator, derivatives=True)
            # fides' function and step tolerances stop a fit whose cost barely moves,
            # whatever its gradient: converged only where its own first-order test holds
            if (
                result == optx.RESULTS.successful
                and promised(g, fisher, theta, lower, upper, free) > PROMISE
            ):
                result = optx.RESULTS.stagnation  # fmt: skip
        return theta, np.asarray(nll), steps, result, at_bound(theta, lower, upper, free), fisher
