"""Maximum-likelihood estimation of a `ji.Problem` from many starts: a bounded
Levenberg-Marquardt on the negative log-likelihood with the Fisher information as its
Hessian (Fisher scoring), then with a secant of the rest of the Hessian added where
Fisher scoring alone would stop; it covers noise models with estimated parameters and
Laplace noise. And the multi-start result with its waterfall plot."""

import abc
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int
from tqdm.auto import tqdm

from .. import plot
from .._model._base import Integrator
from .._model._checks import check_count, check_theta
from .._model._sampling import check_key, latin_hypercube
from .._problem._base import Problem
from .._problem._measurements import free_mask
from .._problem._noise import per_output
from .._problem._predict import PLAIN_ADJOINT, predict_kernel, Prediction
from .._runtime._batches import batched
from .._runtime._config import fit_device
from .._runtime._host import call_kept, callback_free, on_error_mode
from .._runtime._results import promoted, RESULTS, succeeded
from . import _hierarchical as hierarchical
from ._kept import fingerprint, KeptFits, row, stacked
from ._solvers import (
    Clip,
    LevenbergMarquardt,
    outcome,
    run_steps,
    RunningMaximum,
    structured_secant as structured_secant,
)


class AbstractNoiseCurvature(eqx.Module):
    """How a fit's model of the cost curves along each estimated noise parameter."""

    # whether the matrix stepped on is the Fisher information itself
    fisher: ClassVar[bool]

    @abc.abstractmethod
    def matrix(self, noises, r, rows, N, expected, metric) -> tuple:
        """The matrix a fit steps on (and, where it is not the Fisher information, the
        curvatures of its damping), from the data's rows of the weighted Jacobian
        `rows`, the noise rows `N` (`sqrt(c) dsigma / sigma`, or `None`), their expected
        curvatures and the Fisher information's diagonal `metric`."""


class ExpectedCurvature(AbstractNoiseCurvature):
    """The Fisher information along the noise parameters (Fisher scoring; default)."""

    fisher: ClassVar[bool] = True

    def matrix(self, noises, r, rows, N, expected, metric):
        full = rows if N is None else jnp.concatenate([rows, N.reshape(-1, rows.shape[-1])])
        return (full.T @ full,)


class SmallerCurvature(AbstractNoiseCurvature):
    """Each noise parameter's part of the Fisher information `c n^T n` scaled down to its
    observed curvature (`c r^2` and `c |r|` per datum in place of `c`, summed over the
    data it sets) where that is the smaller: where a noise level is far too large for
    the residuals, Fisher scoring moves `ln sigma` by at most 1/2 a step (a start at
    sigma = 5e7 on Perelson took 37 steps down), while a step too long is cut by the
    damping in a few rejected trials. At a noise level's optimum the two agree. The
    damping stays scaled by the Fisher information (scaled by the smaller curvature, it
    would not shorten the long step). Faster on Perelson, but it finds Boehm's optimum
    less often (benchmarks/README.md)."""

    fisher: ClassVar[bool] = False

    def matrix(self, noises, r, rows, N, expected, metric):
        if N is not None:
            w = per_output(noises, lambda d: d.scale_curvature, r, xp=jnp)[..., None]
            observed = jnp.sum(jnp.where(N != 0, w * N**2, 0.0), axis=(0, 1, 2))
            some = expected > 0
            ratio = jnp.where(some, observed / jnp.where(some, expected, 1.0), 1.0)
            N = N * jnp.sqrt(jnp.minimum(ratio, 1.0))
            rows = jnp.concatenate([rows, N.reshape(-1, rows.shape[-1])])
        return rows.T @ rows, metric


def gradient_and_fisher(problem: Problem, out: Prediction,
                        curvature: AbstractNoiseCurvature = ExpectedCurvature()):  # fmt: skip
    """The gradient of the negative log-likelihood and the Fisher information, from a
    prediction with its Jacobian. With `r` the weighted residuals, `J = dr/dtheta` at
    fixed sigma and `n = dsigma/dtheta / sigma` (zero without a noise model that
    depends on the parameters): normal noise `g = sum r J + (1 - r^2) n`, Laplace noise
    `g = sum sign(r) J + (1 - |r|) n`; `F = J^T J + c n^T n` (`c` = 2 and 1).

    `curvature`: the matrix a fit steps on (`AbstractNoiseCurvature.matrix`): `(g, F)`
    for `ExpectedCurvature()`, `(g, matrix, diag(F))` for `SmallerCurvature()`."""
    r, J = out.residuals, out.jacobian
    q = J.shape[-1]
    noises = problem.distributions
    g = jnp.sum(per_output(noises, lambda d: d.score, r, xp=jnp)[..., None] * J, axis=(0, 1, 2))
    rows = J.reshape(-1, q)
    metric = jnp.sum(rows**2, axis=0)
    N = expected = None
    if out.noise_jacobian is not None:
        N = out.noise_jacobian  # sqrt(c) dsigma / sigma; 0 where unobserved
        c = jnp.asarray([d.scale_information for d in noises])
        n = N / jnp.sqrt(c)[..., None]
        score = per_output(noises, lambda d: d.scale_score, r, xp=jnp)
        g = g + jnp.sum(score[..., None] * n, (0, 1, 2))
        expected = jnp.sum(N**2, axis=(0, 1, 2))
        metric = metric + expected
    return (g, *curvature.matrix(noises, r, rows, N, expected, metric))


_NOISE = 1e-6  # the relative size of the cost's noise (solves at rtol 1e-8, summed)
_PROMISE = 1e-3  # a decrease of -log L that no likelihood-based conclusion notices


_AT_BOUND = 1e-3  # of the box's width: a parameter that ended this near a bound


def at_bound(theta, lower, upper, free):
    """Which `free` parameters ended within `_AT_BOUND` of their box's width from a
    bound (every optimizer's rule; NumPy or JAX arrays)."""
    width = upper - lower
    near = (theta - lower <= _AT_BOUND * width) | (upper - theta <= _AT_BOUND * width)
    return free & near


def _objective(problem, integrator, error_mode, inner=None):
    """The function every fit of a problem minimises, as two functions of `theta`: the
    negative log-likelihood from a plain solve (`inf` where the model cannot be solved
    or the likelihood is not finite), and `(nll, gradient, Fisher information, good)`
    from a solve with sensitivities (`gradient_and_fisher`; zeros and `inf` where not
    `good`). With `inner` (`_hierarchical.Scalings`), its scalings are solved for in
    closed form at every `theta` (their values in it ignored): the cost is the profile
    over them, its gradient and Fisher information those of the other parameters."""

    def predicted(theta, jacobian):
        if inner is None:
            return predict_kernel(problem, theta, integrator, jacobian, PLAIN_ADJOINT, error_mode)
        return hierarchical.prediction(problem, inner, theta, integrator, jacobian)[0]

    def nll(theta):
        out = predicted(theta, False)
        good = jnp.all(out.ok) & jnp.isfinite(out.log_likelihood)
        return jnp.where(good, -out.log_likelihood, jnp.inf)

    def with_derivatives(theta, curvature=ExpectedCurvature()):
        """`(f, g, F, good)`; where `curvature` steps on another matrix than the Fisher
        information, `(f, g, matrix, good, metric)`: that matrix and the curvatures of
        its damping (`gradient_and_fisher`; for a hierarchical fit the Fisher
        information and its diagonal)."""
        if inner is None:
            out = predicted(theta, True)
            g, H, *metric = gradient_and_fisher(problem, out, curvature)
        else:
            out, _, inside = hierarchical.prediction(problem, inner, theta, integrator, True)
            g, H = gradient_and_fisher(problem, out)
            g = g.at[jnp.asarray(inner.index)].set(0.0)
            H = hierarchical.outer_fisher(H, inner, inside)
            metric = [] if curvature.fisher else [jnp.diag(H)]
        good = jnp.all(out.ok) & jnp.isfinite(out.log_likelihood)
        good = good & jnp.all(jnp.isfinite(g)) & jnp.all(jnp.isfinite(H))
        f = jnp.where(good, -out.log_likelihood, jnp.inf)
        keep = lambda a: jnp.where(good, a, 0.0)  # noqa: E731
        return f, keep(g), keep(H), good, *map(keep, metric)

    return nll, with_derivatives


@eqx.filter_jit
def _nll_kernel(problem, theta, integrator, error_mode, inner):
    return _objective(problem, integrator, error_mode, inner)[0](theta)


@eqx.filter_jit
def _derivatives_kernel(problem, theta, integrator, error_mode, inner):
    return _objective(problem, integrator, error_mode, inner)[1](theta)


@eqx.filter_jit
def _filled_kernel(problem, theta, integrator, inner):
    return hierarchical.prediction(problem, inner, theta, integrator, False)[1]


def objective(problem: Problem, theta, integrator, derivatives: bool, inner=None):
    """The fit's objective at `theta` from the host, through kept kernels (compiled
    once per problem): the negative log-likelihood from a plain solve, or, with
    `derivatives`, `(nll, gradient, Fisher information)` from a solve with
    sensitivities; NumPy values, `inf` (and zeros) where the model cannot be solved.
    With `inner`, the hierarchical objective (`_objective`)."""
    kernel = _derivatives_kernel if derivatives else _nll_kernel
    with callback_free():
        out = call_kept(kernel, problem, jnp.asarray(theta, float), integrator,
                        on_error_mode(), inner, device=fit_device())  # fmt: skip
    out = jax.tree.map(np.asarray, out)
    return out[:3] if derivatives else out


def filled(problem: Problem, theta, integrator, inner):
    """`theta` (NumPy, `(q,)` or `(B, q)`) with the scalings of `inner` at their optimum
    there (a hierarchical fit's estimate, every parameter reported)."""
    theta = np.asarray(theta, float)
    if inner is None:
        return theta
    with callback_free():
        one = lambda t: call_kept(_filled_kernel, problem, jnp.asarray(t), integrator, inner,
                                  device=fit_device())  # fmt: skip
        if theta.ndim == 1:
            return np.asarray(one(theta))
        return np.stack([np.asarray(one(t)) for t in theta])


def _settings(settings):
    """`(noise curvature, box, scaling)` of a compiled fit: `ji.FisherLM`'s, or the
    engine's defaults."""
    if settings is None:
        return ExpectedCurvature(), Clip(), RunningMaximum()
    return settings


@eqx.filter_jit
def _fit_problem(problem, theta0, free, integrator, max_steps, rtol, error_mode, inner=None,
                 settings=None):  # fmt: skip
    """One bounded fit from `theta0` (estimation scale) of the parameters where `free`
    (the others held at `theta0`: a profile), all in one compiled loop: a trial point
    costs one plain solve of every experiment, an accepted one a solve with
    sensitivities (the gradient and Fisher information for the next step). Where the
    Fisher information alone would stop the fit, it goes on with the Fisher information
    plus a secant of the rest of the Hessian (`structured_secant`, accumulated from the
    first step) until it stops again, as fides turns from the Fisher information to
    BFGS (what it gained on Fujita and Boehm: benchmarks/README.md)."""
    lower = jnp.asarray(problem.parameters.lower, theta0.dtype)
    upper = jnp.asarray(problem.parameters.upper, theta0.dtype)
    nll, with_derivatives = _objective(problem, integrator, error_mode, inner)
    if inner is not None:  # the scalings are solved for, not stepped
        free = free.at[jnp.asarray(inner.index)].set(False)
    theta0 = jnp.where(free, jnp.clip(theta0, lower, upper), theta0)
    curvature, box, scaling = _settings(settings)
    solver = LevenbergMarquardt(rtol=rtol, noise=_NOISE, ftol=_PROMISE, box=box, scaling=scaling)
    fn = lambda theta, _: (nll(theta), None)  # noqa: E731
    options = {"derivatives": lambda theta, _: with_derivatives(theta, curvature),
               "free": free, "bounds": (lower, upper)}  # fmt: skip
    state = solver.deferred_init(fn, theta0, options)
    theta, s, steps = run_steps(solver, fn, options, theta0, state, jnp.asarray(0), max_steps)
    result = outcome(solver, fn, options, theta, s, steps, max_steps)
    # (with noise parameters the matrix stepped on is not quite the Fisher information:
    # NaN, and `ji.estimate` computes it at the best fit)
    exact = curvature.fisher or not any(problem.noise_outputs)
    fisher = s.H if exact else jnp.full_like(s.H, jnp.nan)
    return theta, s.f, steps, result, at_bound(theta, lower, upper, free), fisher


@eqx.filter_jit
def _fit_problems(problem, thetas, free, integrator, max_steps, rtol, error_mode, inner=None,
                  settings=None):  # fmt: skip
    """`_fit_problem` from every start in `thetas` side by side (one `vmap`): every lane
    steps until the slowest ends, and computes a trial point and its sensitivities at
    every step (an accepted point's `cond` becomes a select)."""

    def one(theta0):
        return _fit_problem(problem, theta0, free, integrator, max_steps, rtol, error_mode,
                            inner, settings)  # fmt: skip

    return jax.vmap(one)(thetas)


def _call_fit(kernel, problem, theta, free, integrator, max_steps, rtol, inner, settings):
    with callback_free():
        out = call_kept(
            kernel,
            problem,
            jnp.asarray(theta, float),
            jnp.asarray(free, bool),
            integrator,
            jnp.asarray(max_steps),
            jnp.asarray(rtol, float),
            on_error_mode(),
            inner,
            settings,
            device=fit_device(),
        )
    theta, nll, steps, result, bound, fisher = jax.tree.map(np.asarray, out)
    if inner is None:
        return theta, nll, steps, result, bound, fisher
    theta = filled(problem, theta, integrator, inner)
    # a scaling solved for may end at a bound too
    solved = np.zeros(theta.shape[-1], bool)
    solved[list(inner.index)] = True
    lower, upper = (
        np.asarray(b, float) for b in (problem.parameters.lower, problem.parameters.upper)
    )
    # (the Fisher information of the stepped parameters alone: the estimate's is computed
    # at the best fit, `ji.estimate`)
    fisher = np.full_like(fisher, np.nan)
    return theta, nll, steps, result, bound | at_bound(theta, lower, upper, solved & free), fisher


def fit_once(problem, theta0, free, integrator, max_steps: int, rtol: float, inner=None,
             settings=None):  # fmt: skip
    """One fit from the host, through the kept kernel (compiled once per problem and
    shapes): `(theta, nll, steps, result, at_bound, fisher)` as NumPy values (`fisher`:
    the Fisher information at `theta`, NaN for a hierarchical fit). With `inner`, a
    hierarchical fit (`_objective`), its scalings filled in at their optimum."""
    return _call_fit(_fit_problem, problem, theta0, np.asarray(free, bool), integrator,
                     max_steps, rtol, inner, settings)  # fmt: skip


def fit_batch(problem, thetas, free, integrator, max_steps: int, rtol: float, inner=None,
              settings=None):  # fmt: skip
    """The fits from the starts `thetas` (`(B, q)`) side by side, through the kept
    kernel; as `fit_once`, each output with a leading axis of `B`."""
    with batched():
        return _call_fit(_fit_problems, problem, thetas, np.asarray(free, bool), integrator,
                         max_steps, rtol, inner, settings)  # fmt: skip


class MultiStart(eqx.Module):
    """Every start's fit of `ji.estimate(problem, starts=...)` (its `Estimate.fits`),
    sorted by negative log-likelihood (best first).

    **Fields:** `names`, `starts` (`(N, q)`, in the order drawn, on the estimation
    scale), `order` (the start of each sorted fit), `theta` (`(N, q)`, sorted), `nll`
    (negative log-likelihood, sorted; `inf` where a fit failed), `steps`, `result` (a
    `ji.RESULTS` per fit: `successful` (two successive steps lowered the cost
    by less than `rtol` of it, or the projected gradient vanished),
    `nonlinear_max_steps_reached`, `stagnation` (no step lowers the cost, yet the
    gradient does not vanish), `nonlinear_divergence` (the model could not be solved at
    the start)), `at_bound` (which parameters ended within 1e-3 of
    their box's width from a bound), `tol` (a fit within `tol` of the best
    negative log-likelihood counts as having reached it), `bounds` (the box the starts
    were drawn in, `(lower, upper)` on the estimation scale).

    **Properties:** `best` (the best fit's parameters), `best_nll`, `log_likelihood`,
    `n_at_best` (fits within `tol` of the best), `ok` (which fits converged); `held`
    names the parameters held at their starting values (`ji.estimate(..., free=...)`);
    `planned` the starts asked for, and `interrupted` whether fewer were fitted (Ctrl-C:
    printed and written as such, never as a finished run).
    **Methods:** `plot()` (a waterfall plot), `to_dict()`.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    starts: Float[Array, "N q"]
    order: Int[Array, " N"]
    theta: Float[Array, "N q"]
    nll: Float[Array, " N"]
    steps: Int[Array, " N"]
    result: RESULTS = eqx.field(converter=promoted)
    at_bound: Bool[Array, "N q"]
    tol: float = eqx.field(static=True, default=0.1)
    held: tuple[str, ...] = eqx.field(static=True, default=())
    bounds: tuple | None = None
    planned: int | None = eqx.field(static=True, default=None)

    @property
    def interrupted(self) -> bool:
        """Whether the run stopped (Ctrl-C) before every planned start was fitted: the
        fits are those finished, not the run asked for."""
        return self.planned is not None and self.planned > int(np.asarray(self.nll).size)

    @property
    def best(self) -> Float[Array, " q"]:
        return self.theta[0]

    @property
    def best_nll(self) -> float:
        return float(self.nll[0])

    @property
    def log_likelihood(self) -> float:
        return -self.best_nll

    @property
    def ok(self) -> np.ndarray:
        return succeeded(self.result)

    @property
    def n_at_best(self) -> int:
        nll = np.asarray(self.nll)
        return int(np.sum(np.isfinite(nll) & (nll <= nll[0] + self.tol)))

    def to_dict(self) -> dict:
        nll = np.asarray(self.nll)
        return {
            "names": list(self.names),
            "best": dict(zip(self.names, np.asarray(self.best).tolist())),
            "log_likelihood": self.log_likelihood,
            "starts": int(nll.size),
            "at_best": self.n_at_best,
            "tol": self.tol,
            "converged": int(self.ok.sum()),
            "failed": int(np.sum(~np.isfinite(nll))),
            "nll": [None if not np.isfinite(v) else float(v) for v in nll],
            "steps": np.asarray(self.steps).tolist(),
            "at_bound_best": [n for n, b in zip(self.names, np.asarray(self.at_bound[0])) if b],
            "held": list(self.held),
            "planned": self.planned,
            "interrupted": self.interrupted,
        }

    def __repr__(self) -> str:
        d = self.to_dict()
        w = max(len(n) for n in self.names)
        n = d["starts"]
        if self.interrupted:
            n = f"INTERRUPTED after {n} of {self.planned}"
        lines = [
            f"Multi-start estimation: {n} starts, best log-likelihood "
            f"{self.log_likelihood:.6g}, reached (within {self.tol:g}) by {d['at_best']}; "
            f"{d['converged']} converged, {d['failed']} failed",
        ]
        at = set(d["at_bound_best"])
        for n, v in d["best"].items():
            note = "  (held)" if n in self.held else "  (at a bound)" if n in at else ""
            lines.append(f"  {n:<{w}} = {v:.8g}{note}")
        return "\n".join(lines)

    def plot(self):
        """The waterfall plot (each fit's negative log-likelihood above the best, plus 1,
        on a log axis, sorted; the fits that reached the best within `tol` in colour)
        beside the parameters across starts (`ji.plot.parameters`). Returns the figure."""
        return plot.multistart(self)


def _starts(problem: Problem, starts, key, theta0) -> np.ndarray:
    """The starts on the estimation scale, `(N, q)`, each inside the bounds: `theta0`
    alone (default nominal); `N` Latin-hypercube draws in the bounds, the first replaced
    by `theta0` where it is given; or the array given."""
    pts = _points(problem, starts, key, theta0)
    box = problem.parameters
    outside = (pts < np.asarray(box.lower)) | (pts > np.asarray(box.upper))
    if outside.any():
        i = int(np.flatnonzero(outside.any(axis=1))[0])
        names = [n for n, o in zip(box.names, outside[i]) if o]
        raise ValueError(
            f"start {i} lies outside the bounds (on the estimation scales) for {names}: "
            "a fit runs inside them; move the start in, or widen the bounds."
        )
    return pts


def _points(problem: Problem, starts, key, theta0) -> np.ndarray:
    q = problem.parameters.p
    if starts is None:
        return np.asarray(check_theta(problem, theta0))[None]
    if isinstance(starts, (bool, str, float, np.floating)):
        raise TypeError(
            "starts must be a number of starts (an int) or an (N, q) array of starts, "
            f"got {type(starts).__name__} {starts!r}."
        )
    if isinstance(starts, (int, np.integer)):
        if starts < 1:
            raise ValueError(f"starts must be a positive number of starts, got {starts}.")
        box = problem.parameters
        if not (np.all(np.isfinite(box.lower)) and np.all(np.isfinite(box.upper))):
            bad = [n for n, a, b in zip(box.names, box.lower, box.upper)
                   if not (np.isfinite(a) and np.isfinite(b))]  # fmt: skip
            raise ValueError(
                f"Starts are drawn in the parameters' bounds; {bad} have an infinite bound: "
                "give finite bounds, or the starts as an (N, q) array."
            )
        check_key(key)
        pts = np.array(latin_hypercube(key, box, int(starts)))
        if theta0 is not None:  # the given point is the first start
            pts[0] = np.asarray(check_theta(problem, theta0))
        return pts
    pts = np.asarray(starts, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != q:
        raise ValueError(f"starts must be a number or an (N, {q}) array, got shape {pts.shape}.")
    if pts.shape[0] == 0:
        raise ValueError(f"starts is an empty (0, {q}) array: give at least one start.")
    if not np.all(np.isfinite(pts)):
        raise ValueError("starts must be finite.")
    return pts


def _batch_size(batch, n: int) -> int:
    """Starts fitted side by side (one `vmap`): `batch`, default 1. Each fit's loop ends
    when it converges, while vmapped fits step in lockstep with the slowest lane (whose
    solves, from a random start in a stiff region, take thousands of steps) and compute
    a trial point and sensitivities in every lane at every step. On a GPU 40 Boehm
    starts side by side cost more per start-step than one start alone: lockstep ate
    the GPU's width (docs/performance.md)."""
    if batch is None:
        return 1
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"batch must be a positive number of starts, got {batch!r}.")
    return min(int(batch), n)


def estimate_problem(
    problem: Problem,
    *,
    starts: int | ArrayLike | Sequence | None = None,
    key=None,
    theta0: ArrayLike | Mapping | Sequence | None = None,
    optimizer,
    max_steps: int = 200,
    tol: float = 0.1,
    integrator: Integrator | None = None,
    progress: bool = True,
    batch: int | None = None,
    free: Sequence[str] | Sequence[bool] | ArrayLike | None = None,
    out: str | os.PathLike | None = None,
) -> tuple[MultiStart, np.ndarray | None]:
    """Maximum-likelihood estimation of a problem's parameters (on their estimation
    scales, in their bounds) from one or many starts: see `ji.estimate`. The parameters
    outside `free` (names or a mask; default all) are held at `theta0` (default
    nominal) in every start drawn, or at their values in starts given as an array: a
    mask of the same compiled fit, never a new compilation. `optimizer`: a
    `ji.FisherLM` or `ji.Fides` (`_optimizers`). `out`: a JSON file that keeps every
    finished fit (`_kept`): the same call again resumes where an interrupted one
    stopped. Returns the fits and the best one's Fisher information (None where it is
    not at hand: a fit read from `out`, or a hierarchical one)."""
    if key is None:
        key = jax.random.key(0)
    pts = _starts(problem, starts, key, theta0)
    free = np.asarray(free_mask(problem, free))
    if not free.any():
        raise ValueError("free holds every parameter: nothing to estimate.")
    if isinstance(starts, (int, np.integer)) and not free.all():
        pts = np.array(pts)  # (a writable copy)
        pts[:, ~free] = np.asarray(check_theta(problem, theta0))[~free]
    integrator = problem.model.integrator if integrator is None else integrator
    check_count("max_steps", max_steps)
    if not bool(np.any(np.isfinite(np.asarray(problem.data)) & np.asarray(problem.observed))):
        raise ValueError(f"{problem.name or 'The problem'} has no data to fit (every datum NaN).")
    size = _batch_size(batch, len(pts))
    kept = None
    if out is not None:
        key = fingerprint(problem, pts, free, max_steps, optimizer, integrator)
        kept = KeptFits(out, key, len(pts))
    rows = {} if kept is None else dict(kept.rows)
    fishers = {}  # each fit's Fisher information (in memory: a kept file has none)
    todo = [i for i in range(len(pts)) if i not in rows]
    bar = tqdm(total=len(pts), initial=len(rows), desc=f"fit {problem.name or 'problem'}",
               disable=not progress or len(pts) < 2)  # fmt: skip
    try:
        for c in range(0, len(todo), size):
            idx = todo[c : c + size]
            if size == 1:
                fit = optimizer.fit(problem, pts[idx[0]], free, integrator, max_steps)
                fit = jax.tree.map(lambda a: np.asarray(a)[None], fit)
            else:  # the last chunk padded with its last start: one compilation
                chunk = pts[idx + [idx[-1]] * (size - len(idx))]
                fit = optimizer.fit_batch(problem, chunk, free, integrator, max_steps)
            rows.update({i: row(fit[:5], r) for r, i in enumerate(idx)})
            fishers.update({i: np.asarray(fit[5])[r] for r, i in enumerate(idx)})
            if kept is not None:
                kept.append({i: rows[i] for i in idx})
            bar.update(len(idx))
            # (the log-likelihood, as the summary prints it: not the minimised -log L)
            bar.set_postfix(log_likelihood=f"{-min(r[1] for r in rows.values()):.6g}")
    except KeyboardInterrupt:  # Ctrl-C: the fits finished so far, as a stepwise run does
        if not rows:
            raise
        resume = "" if kept is None else f" ({out} keeps them: the same call goes on)"
        warnings.warn(
            f"Estimation interrupted after {len(rows)} of {len(pts)} starts: returning "
            f"their fits{resume}.",
            stacklevel=3,
        )
    finally:
        bar.close()
    done = sorted(rows)
    planned = len(pts)
    pts = pts[done]
    theta, nll, steps, result, at_bound = stacked([rows[i] for i in done])
    nll = np.where(np.isfinite(nll), nll, np.inf)
    order = np.argsort(nll, kind="stable")
    theta, nll, steps, result, at_bound = jax.tree.map(
        lambda a: jnp.asarray(a[order]), (theta, nll, steps, result, at_bound)
    )
    fits = MultiStart(
        names=problem.parameters.names,
        starts=jnp.asarray(pts),
        order=jnp.asarray(order),
        theta=theta,
        nll=nll,
        steps=steps,
        result=result,
        at_bound=at_bound,
        tol=float(tol),
        held=tuple(n for n, f in zip(problem.parameters.names, free) if not f),
        bounds=(
            np.asarray(problem.parameters.lower, float),
            np.asarray(problem.parameters.upper, float),
        ),  # fmt: skip
        planned=planned,
    )
    return fits, fishers.get(done[int(order[0])]) if done else None
