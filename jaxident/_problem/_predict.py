"""Simulating a `ji.Problem`: its experiments one after another in one compiled kernel
(the model's parameters per experiment and their derivatives with respect to the
problem's, only the columns each experiment depends on, a pre-equilibration where
asked), the weighted residuals on each observable's transformed scale, PEtab's
log-likelihood, and the noise-weighted sensitivity matrix."""

from collections.abc import Mapping

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .._model._base import Integrator
from .._model._checks import check_theta
from .._model._parameters import box_units
from .._runtime._config import solve_optimized
from .._runtime._host import (
    call_kept,
    callback_free,
    device_array,
    is_traced,
    on_error_mode,
)
from .._runtime._results import first_failure, RESULTS, succeeded
from .._solve._forward import accuracy, forward_sensitivities
from .._solve._sensitivity_result import Sensitivity, SensitivityScale
from .._solve._simulate import simulate, solve
from .._solve._steady_state import preequilibrated, steady_state, why_no_steady_state
from ._base import Problem, unscale, unscale_derivative
from ._noise import per_output
from ._scale import Scale


def _at_steady_state(model, th_e, M_e, n, integrator, jacobian):
    """Outputs (`(n, outputs)`, every row the same) at the steady state the experiment's
    model reaches, with their derivatives in the directions `M_e` (`(n, outputs, k)`)."""

    def outputs(p):
        view = model.parameters.view(p)
        x = steady_state(model, view, model.initial_state(view), integrator)
        t = jnp.asarray(jnp.inf, dtype=p.dtype)
        return jnp.atleast_1d(jnp.asarray(model.output(t, x, view), dtype=p.dtype))

    if jacobian:
        y, Y = jax.vmap(lambda d: jax.jvp(outputs, (th_e,), (d,)), in_axes=1, out_axes=(0, 1))(M_e)
        y = y[0]
        Y = jnp.broadcast_to(Y, (n, *Y.shape))
    else:
        y, Y = outputs(th_e), None
    return jnp.broadcast_to(y, (n, y.shape[0])), Y


def _model_theta(problem: Problem, theta: Array, source, constant):
    """The model's parameter vector per experiment, and its derivative with respect to
    the problem's parameters on their estimation scale."""
    lin = unscale(theta, problem.scales)
    dlin = unscale_derivative(theta, problem.scales)
    src = jnp.asarray(source)
    idx = jnp.maximum(src, 0)
    mapped = src >= 0
    th = jnp.where(mapped, lin[idx], constant)
    q = theta.shape[0]
    onehot = jax.nn.one_hot(idx, q, dtype=theta.dtype) * mapped[..., None].astype(theta.dtype)
    M = onehot * dlin
    return th, M


def _directions(problem: Problem, theta: Array):
    th, M = _model_theta(problem, theta, problem.source, problem.constant)
    if problem.pre_source is not None:
        thp, Mp = _model_theta(problem, theta, problem.pre_source, problem.pre_constant)
        th = jnp.concatenate([th, thp], axis=1)
        M = jnp.concatenate([M, Mp], axis=1)
    return th, M


def _own(model, args):
    """An experiment's `(theta, directions, times, outputs measured)` for `model`: a
    model that is not pre-equilibrated takes the first half of a pre-equilibrated
    problem's parameter vector (its own condition's)."""
    th_e, M_e, times, seen = args
    p = model.parameters.p
    return th_e[:p], M_e[:p], times, seen


def _padded_columns(problem: Problem) -> np.ndarray | None:
    """`(e, k)`: each experiment's sensitivity columns (`problem.columns`), padded to the
    longest with `q` (a column of zeros); `None` where every experiment needs all."""
    q = problem.parameters.p
    k = max(1, *(len(c) for c in problem.columns))
    if k == q and all(c == tuple(range(q)) for c in problem.columns):
        return None
    return np.asarray([(*c, *(q,) * (k - len(c))) for c in problem.columns], dtype=np.int32)


def _in_turn(kinds: tuple[int, ...], fns, xs):
    """`fns[kinds[i]]` of experiment i's slice of `xs`, one experiment after another
    (`jax.lax.map`), so that none steps in lockstep with a slower one, as it would in a
    `vmap`; each kind is compiled once. The results come back in the experiments'
    order."""
    kinds = np.asarray(kinds)
    parts = []
    for kind, fn in enumerate(fns):
        idx = np.flatnonzero(kinds == kind)
        if idx.size == 0:
            continue
        sub = xs if idx.size == kinds.size else jax.tree.map(lambda a, i=idx: a[i], xs)
        parts.append((idx, jax.lax.map(fn, sub)))
    if len(parts) == 1:
        return parts[0][1]
    order = np.argsort(np.concatenate([idx for idx, _ in parts]))
    return jax.tree.map(lambda *a: jnp.concatenate(a)[order], *(out for _, out in parts))


class Prediction(eqx.Module):
    """What a problem predicts at one parameter vector, per experiment, on the padded
    time grid: `outputs` `(e, n, m)`, `sigma` `(e, n, m)`, `residuals` (weighted, on
    the transformed scale, 0 where no datum), `jacobian` `(e, n, m, q)` (of the weighted
    residuals with respect to `theta` on the estimation scale, or `None`),
    `log_likelihood` (PEtab's, over the observed data), `result` (`ji.RESULTS`) per
    experiment (`ok`: whether each is `successful`), `noise_jacobian` (for a noise
    model with parameters, the noise rows of the Fisher information, `sqrt(c)
    dsigma/dtheta / sigma`; else `None`), and
    `steps`, the accepted steps of each experiment's solve (after its
    pre-equilibration, if any; 0 for measurements at steady state)."""

    outputs: Float[Array, "e n m"]
    sigma: Float[Array, "e n m"]
    residuals: Float[Array, "e n m"]
    jacobian: Float[Array, "e n m q"] | None
    log_likelihood: Float[Array, ""]
    result: RESULTS
    noise_jacobian: Float[Array, "e n m q"] | None = None
    steps: Int[Array, " e"] | None = None

    @property
    def ok(self) -> Bool[ArrayLike, "*batch e"]:
        """Whether each experiment's solve succeeded with finite outputs."""
        return succeeded(self.result)


PLAIN_ADJOINT = diffrax.RecursiveCheckpointAdjoint()


@eqx.filter_jit
def predict_kernel(
    problem: Problem,
    theta: Array,
    integrator: Integrator,
    jacobian: bool,
    adjoint: diffrax.AbstractAdjoint = PLAIN_ADJOINT,
    error_mode: str | None = None,
) -> Prediction:
    """The kernel of `predict`; `adjoint` is how the plain solve (no `jacobian`) may be
    differentiated: reverse mode by default, `diffrax.ForwardMode()` for a fit that
    takes Jacobians by `jax.jacfwd`. `error_mode` (equinox's, see `on_error_mode`) only
    keys the compilation cache: called from the host the kernel is compiled with the
    libraries' checks as NaN (no host callbacks; its `ok` flags report failures)."""
    y, Y, result, steps = solved_outputs(problem, theta, integrator, jacobian, adjoint)
    return likelihood(problem, y, Y, result, steps, jacobian)


def solved_outputs(problem, theta, integrator, jacobian, adjoint):
    """Every experiment's outputs `(e, n, outputs)` (and noise outputs), with their
    derivatives along the problem's parameters where `jacobian`, each experiment solved
    by its kind (transient or steady-state measurements, pre-equilibrated or not), its
    `ok` flag and step count."""
    plain = problem.model
    pre = None if problem.pre_source is None else preequilibrated(problem.model, integrator)
    th, M = _directions(problem, theta)
    cols = _padded_columns(problem)
    if jacobian and cols is not None:
        # each experiment's own columns (a padding column of zeros after the last)
        M = jnp.concatenate([M, jnp.zeros_like(M[..., :1])], axis=-1)
        M = jnp.take_along_axis(M, jnp.asarray(cols)[:, None, :], axis=-1)

    def transient(model):
        def run(args):
            th_e, M_e, times, seen = _own(model, args)
            if jacobian:
                y, Y, solved = forward_sensitivities(model, th_e, times, integrator, M_e, seen)
                Y = Y.reshape(times.shape[0], -1, M_e.shape[1])
            else:
                solved = solve(model, th_e, times, integrator, adjoint, seen)
                y, Y = solved.ys, None
            return y.reshape(times.shape[0], -1), Y, solved.result, solved.num_steps

        return run

    def steady(model):
        def run(args):
            th_e, M_e, times, seen = _own(model, args)
            n = times.shape[0]
            y, Y = _at_steady_state(model, th_e, M_e, n, integrator, jacobian)
            ok = jnp.all(jnp.isfinite(y) | ~seen)
            result = RESULTS.where(ok, RESULTS.successful, RESULTS.nonfinite_output)
            if jacobian:  # (a tangent the implicit function theorem cannot give is NaN)
                good = jnp.all(jnp.isfinite(Y) | ~seen[..., None])
                result = RESULTS.where(good, result, RESULTS.nonfinite_sensitivity)
            return y, Y, result, jnp.zeros((), jnp.asarray(0).dtype)

        return run

    # kinds: (plain, pre-equilibrated) x (transient, steady-state measurements)
    fns = [transient(plain), steady(plain)]
    if pre is not None:
        fns += [transient(pre), steady(pre)]
    kinds = tuple(2 * p + s for p, s in zip(problem.preequilibrated, problem.steady))
    # the outputs that must be finite: the measured ones and their noise outputs (an
    # output nobody measured may be NaN, e.g. a ratio 0/0 at t0)
    seen = problem.observed
    if any(problem.noise_outputs):
        seen = jnp.concatenate([seen, seen & jnp.asarray(problem.noise_outputs)], axis=-1)
    y, Y, result, steps = _in_turn(kinds, fns, (th, M, problem.times, seen))
    if jacobian and cols is not None:
        q = theta.shape[0]
        Yt = jnp.moveaxis(Y, -1, 1)  # (e, columns, n, outputs)
        full = jnp.zeros((Yt.shape[0], q + 1, *Yt.shape[2:]), Yt.dtype)
        full = full.at[np.arange(Yt.shape[0])[:, None], cols].set(Yt)
        Y = jnp.moveaxis(full[:, :q], 1, -1)
    return y, Y, result, steps


def likelihood(problem, y, Y, result, steps, jacobian) -> Prediction:
    """The prediction from the solved outputs: the observables' residuals on their
    transformed scales over the noise, the log-likelihood, and where `jacobian` the
    weighted residuals' Jacobian (and the noise rows of a noise model with
    parameters)."""
    m = problem.n_observables
    pred = y[..., :m]
    if any(problem.noise_outputs):
        sigma = jnp.where(jnp.asarray(problem.noise_outputs), y[..., m : 2 * m], problem.sigma)
    else:
        sigma = problem.sigma
    observed = ~jnp.isnan(problem.data)
    data = jnp.where(observed, problem.data, 1.0)
    h = problem.transforms
    tr = jnp.stack([h[o].forward(pred[..., o], jnp) for o in range(m)], axis=-1)
    trd = jnp.stack([h[o].forward(data[..., o], jnp) for o in range(m)], axis=-1)
    r = jnp.where(observed, (tr - trd) / sigma, 0.0)
    noises = problem.distributions
    log_jac = jnp.stack([h[o].log_jacobian(data[..., o], jnp) for o in range(m)], axis=-1)
    ll = per_output(noises, lambda d: d.log_density, r, sigma, xp=jnp) - log_jac
    # a standard deviation at or below 0 has no likelihood (the normal density's
    # log(sigma^2) would not see the sign): -inf, which a fit's step never accepts
    ll = jnp.where(sigma > 0, ll, -jnp.inf)
    llh = jnp.sum(jnp.where(observed, ll, 0.0))
    J = noise_J = None
    if jacobian:
        dY = Y[..., :m, :]
        scale = jnp.stack([h[o].derivative(pred[..., o], jnp) for o in range(m)], axis=-1)
        J = jnp.where(problem.observed[..., None], dY * (scale / sigma)[..., None], 0.0)
        if any(problem.noise_outputs):
            # a noise model with parameters: the Fisher information of a datum has
            # the term `c (dsigma/dtheta)^T (dsigma/dtheta) / sigma^2` as well (c the
            # information of ln sigma, 2 for normal noise, 1 for Laplace): rows
            # `sqrt(c) dsigma / sigma`
            c = jnp.asarray([d.scale_information for d in noises])
            dS = jnp.where(jnp.asarray(problem.noise_outputs)[:, None], Y[..., m : 2 * m, :], 0.0)
            noise_J = jnp.where(
                problem.observed[..., None], dS * (jnp.sqrt(c) / sigma)[..., None], 0.0
            )
    return Prediction(pred, sigma, r, J, llh, result, noise_J, steps)


def predict(
    problem: Problem,
    theta: ArrayLike | Mapping | None = None,
    *,
    jacobian: bool = False,
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> Prediction:
    """Simulate every experiment of `problem` at `theta` (on the estimation scale;
    default: nominal), with the weighted residuals, the PEtab log-likelihood and, with
    `jacobian=True`, the Jacobian of the weighted residuals. A failed solve is an error
    naming the experiment (with `throw=False`, and by default under the caller's
    `jit`/`vmap`: NaN and `ok = False`; `throw=True` there is a run-time error).
    `integrator`: the solver and tolerances (default the model's). Jittable and
    vmappable over `theta`."""
    theta = check_theta(problem, theta)
    integrator = problem.model.integrator if integrator is None else integrator
    with callback_free(theta):
        out = call_kept(
            predict_kernel, problem, theta, integrator, bool(jacobian), PLAIN_ADJOINT,
            on_error_mode(), optimize=solve_optimized(),
        )  # fmt: skip
    if is_traced(out.result):  # failures are NaN and ok, unless asked to raise
        if throw is True:
            return eqx.error_if(out, ~jnp.all(out.ok), "A solve failed (see .ok).")
        return out
    if throw is False:
        return out
    ok = np.asarray(out.ok)
    sigma = np.asarray(out.sigma)
    bad_sigma = np.asarray(problem.observed) & ~(sigma > 0)
    if ok.all() and bad_sigma.any():
        (e, i, o), where = _first(problem, bad_sigma)
        raise ValueError(
            f"The noise model gives sigma = {float(sigma[e, i, o]):g} for "
            f"{problem.output_names[o]!r} {where}: a standard deviation must be positive "
            "(check the noise formula and its parameters)."
        )
    pred = np.asarray(out.outputs)
    logs = np.asarray([t != Scale.lin for t in problem.transforms])
    bad_log = np.asarray(problem.observed) & logs & ~(pred > 0)
    if ok.all() and bad_log.any():
        (e, i, o), where = _first(problem, bad_log)
        raise ValueError(
            f"The observable {problem.output_names[o]!r} is compared on a "
            f"{problem.transforms[o]} scale, but the model gives {float(pred[e, i, o]):g} "
            f"{where}: a logarithm of a value that is not positive "
            "(the log-likelihood would be NaN). Check the observable's formula and its "
            "parameters (an offset, a scaling) there."
        )
    if not ok.all():
        bad = [problem.experiment_names[i] for i in np.flatnonzero(~ok)]
        if jacobian:
            with callback_free(theta):
                plain = call_kept(
                    predict_kernel, problem, theta, integrator, False, PLAIN_ADJOINT,
                    on_error_mode(), optimize=solve_optimized(),
                )  # fmt: skip
            if np.asarray(plain.ok)[~ok].all():
                raise RuntimeError(
                    f"The simulation of {bad} succeeds, but its sensitivities fail: the "
                    "tangents turned non-finite (a parameter where the right-hand side is "
                    "not differentiable, e.g. sqrt at 0) or drove the step size down "
                    "(they are in the error test). Check the model's derivatives there, "
                    "or take them out of the error test: ji.Integrator(..., sensitivity="
                    "ji.SensitivityEquations(error_control=False)), or raise max_steps."
                )
        first = int(np.flatnonzero(~ok)[0])
        more = f" (and in {bad[1:]})" if len(bad) > 1 else ""
        raise RuntimeError(
            f"The solve of experiment {bad[0]!r} failed{more}: "
            f"{_why_failed(problem, theta, integrator, first)}"
        )
    return out


def _first(problem: Problem, mask: np.ndarray) -> tuple[tuple[int, int, int], str]:
    """The first `(experiment, time, output)` index where `mask` holds, and where that
    is in words ("at t = 2.5 in experiment 'e1'")."""
    e, i, o = (int(v[0]) for v in np.nonzero(mask))
    where = f"at t = {float(problem.times[e, i]):g} in experiment {problem.experiment_names[e]!r}"
    return (e, i, o), where


def _why_failed(problem: Problem, theta: Array, integrator: Integrator, e: int) -> str:
    """Why experiment `e`'s plain solve failed, from its model alone (host side, on the
    error path): its pre-equilibration's steady state, or the solver's reason and where
    it stopped (`ji.simulate`'s message)."""
    inner = problem.model
    p = inner.parameters.p
    th_e = _directions(problem, theta)[0][e]
    if problem.preequilibrated[e]:
        pre = inner.parameters.view(th_e[p:])
        why = why_no_steady_state(inner, pre, inner.initial_state(pre), integrator)
        if why:
            return (
                f"its pre-equilibration reached no steady state ({why}). Check the "
                "pre-equilibration condition's parameters."
            )
        model = preequilibrated(problem.model, integrator)
    else:
        model, th_e = inner, th_e[:p]
    if problem.steady[e]:
        view = model.parameters.view(th_e)
        why = why_no_steady_state(model, view, model.initial_state(view), integrator)
        return f"the model reaches no steady state from there ({why or 'its outputs are NaN'})."
    times = np.unique(np.asarray(problem.times[e]))
    try:
        simulate(model, th_e, times, integrator=integrator)
    except Exception as err:  # the solver's own reason, and where it stopped
        return str(err).replace(type(model).__name__, type(inner).__name__, 1)
    return (
        "the outputs are NaN or inf (the states are finite: check the observable and "
        "noise formulas at these parameter values)."
    )


def problem_sensitivity(
    problem: Problem,
    theta: ArrayLike | Mapping | None = None,
    *,
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> Sensitivity:
    """The noise-weighted sensitivity matrix of a problem: one row per observed datum
    (experiments stacked), `d((h(y) - h(data)) / sigma) / d theta` with `h` the
    observable transformation and `theta` on the estimation scale. Its Gram matrix is
    the Fisher information (for normal noise); every selection and rank analysis of
    jaxident takes it (`scale=ji.SensitivityScale.noise` marks it). A failed solve is an
    error, or with `throw=False` a matrix of NaN with `ok = False`."""
    out = predict(problem, theta, jacobian=True, integrator=integrator, throw=throw)
    observed = np.asarray(problem.observed)
    J = np.asarray(out.jacobian)[observed]
    outputs = np.asarray(out.outputs)[observed]
    if out.noise_jacobian is not None:
        # a noise model that depends on the parameters (or the state): its rows of the
        # Fisher information after the data's (`sqrt(2) dsigma/sigma` for normal noise)
        noisy = observed & np.asarray(problem.noise_outputs)[None, None, :]
        J = np.concatenate([J, np.asarray(out.noise_jacobian)[noisy]])
        outputs = np.concatenate([outputs, np.asarray(out.sigma)[noisy]])
    integrator = problem.model.integrator if integrator is None else integrator
    return Sensitivity(
        matrix=device_array(J),
        outputs=device_array(outputs),
        times=device_array(np.arange(J.shape[0], dtype=float)),
        names=problem.parameters.names,
        output_names=None,
        scale=SensitivityScale.noise,
        result=first_failure(out.result),
        accuracy=accuracy(problem.model, integrator, J.dtype),
        units=device_array(estimation_units(problem, check_theta(problem, theta))),
    )


def estimation_units(problem: Problem, theta) -> np.ndarray:
    """The size of a unit move of each parameter on its estimation scale, so that the
    columns of `problem_sensitivity` compare: 1 on a log scale (the columns are per
    log unit there, free of the parameter's units), the box width on a linear one
    (`|theta|` where the box is unbounded, 1 at 0)."""
    lin = np.asarray(box_units(problem.parameters.lower, problem.parameters.upper, theta))
    return np.asarray([Scale(s).unit(w) for s, w in zip(problem.scales, lin)], dtype=float)
