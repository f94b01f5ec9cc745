"""Hierarchical optimization (Loos et al. 2018, Schmiester et al. 2020, as pyPESTO runs
it): the observable scalings of a problem, `y = s h` with `s` entering nothing else, are
solved in closed form for the rest of the parameters, so the optimizer steps in the
dynamic parameters alone.

For normal noise, one scaling `s` of the observables `o` it multiplies (a set of
experiments and outputs), with `w = 1 / sigma^2` over their data `d`:

- a linear observable: `-log L` is quadratic in `s`, minimal at
  `s* = sum w h d / sum w h^2`;
- a log or log10 observable: `T(s h) = T(s) + T(h)`, so `T(s*) = sum w (T(d) - T(h)) /
  sum w`, the offset's weighted mean;

each clipped to the parameter's bounds (the cost is convex in `s`, or in `T(s)`). One
solve at `s = 1` gives `h` and its derivatives, and so the outputs and the Jacobian at
`s*` (`y = s* h`): no second solve. The gradient in the other parameters is the
partial one at `s*` (the envelope theorem), their Fisher information the Schur
complement of the full one over the scalings that are not at a bound."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._model._base import AbstractModel
from .._problem._base import Problem, unscale
from .._problem._noise import Noise
from .._problem._predict import _likelihood, _solved_outputs, PLAIN_ADJOINT
from .._problem._scale import Scale


class Scalings(NamedTuple):
    """A problem's scalings solved in closed form: `index`, their positions among the
    problem's parameters; `mask[g][e][o]`, whether scaling `g` multiplies output `o` in
    experiment `e`; `log`, whether the outputs of each are on a log scale (then the
    closed form is for `T(s)`, with `T` the outputs' transformation); tuples, so that a
    compiled fit is keyed on them."""

    index: tuple[int, ...]
    mask: tuple[tuple[tuple[bool, ...], ...], ...]
    transform: tuple[str, ...]


def scalings(problem: Problem) -> Scalings | None:
    """The problem's parameters that are observable scalings as a hierarchical fit
    solves them (`None` where there are none): each maps, in every experiment, only to
    model parameters that `model.output_scalings()` names (or that no formula uses),
    multiplies at least one measured output, and the outputs it multiplies share one
    transformation and have normal noise."""
    model: AbstractModel = problem.model
    per_output = model.output_scalings()
    if per_output is None or not any(per_output):
        return None
    names = model.parameters.names
    dep = model.parameter_dependence()
    used = set() if dep is None else set(dep.dynamics).union(*dep.outputs)
    m = problem.n_observables
    # a scaling that a noise model uses too (`sigma = c s`) is not solved for here
    noise = set() if dep is None else set().union(*dep.outputs[m:])
    source = np.asarray(problem.source)  # (e, model parameters): problem index or -1
    sources = [source] + ([np.asarray(problem.pre_source)] if problem.pre_source else [])
    observed = np.asarray(problem.observed).any(axis=1)  # (e, m)
    found = []
    for j in range(problem.parameters.p):
        mask = np.zeros(observed.shape, bool)
        ok = True
        for src in sources:
            for e, k in zip(*np.nonzero(src == j)):
                name = names[k]
                outs = [o for o in range(m) if per_output[o] == name]
                if name in noise:
                    ok = False
                elif src is source and outs:
                    mask[e, outs] = True
                elif name in used and not outs:
                    ok = False  # j enters the model elsewhere
        ok = ok and (mask & observed).any()
        transforms = {problem.transforms[o] for o in np.nonzero(mask.any(axis=0))[0]}
        noises = {problem.distributions[o] for o in np.nonzero(mask.any(axis=0))[0]}
        if ok and len(transforms) == 1 and noises == {Noise.normal}:
            found.append((j, mask, Scale(transforms.pop()).value))
    if not found:
        return None
    return Scalings(
        tuple(j for j, _, _ in found),
        tuple(tuple(map(tuple, mask.tolist())) for _, mask, _ in found),
        tuple(t for _, _, t in found),
    )


def _at_one(problem: Problem, inner: Scalings, theta):
    """`theta` with every scaling at 1 (on its estimation scale)."""
    one = jnp.asarray([Scale(problem.scales[j]).forward(1.0, jnp) for j in inner.index])
    return theta.at[jnp.asarray(inner.index)].set(one.astype(theta.dtype))


def optimal(problem: Problem, inner: Scalings, h, sigma):
    """The scalings' optimal values on the linear scale, `(g,)`, from the outputs `h`
    at `s = 1` and their noise levels, clipped to the bounds; and which of them lie
    strictly inside."""
    observed = problem.observed & ~jnp.isnan(problem.data)
    data = jnp.where(observed, problem.data, 1.0)
    m = problem.n_observables
    w = jnp.where(observed, 1.0 / jnp.where(observed, sigma, 1.0) ** 2, 0.0)
    lower = unscale(problem.parameters.lower, problem.scales)
    upper = unscale(problem.parameters.upper, problem.scales)
    values, inside = [], []
    for j, mask, transform in zip(inner.index, inner.mask, inner.transform):
        wj = jnp.where(jnp.asarray(mask)[:, None, :m], w, 0.0)
        if transform == Scale.lin.value:
            num, den = jnp.sum(wj * h * data), jnp.sum(wj * h * h)
            s = num / jnp.where(den > 0, den, 1.0)
        else:
            T = Scale(transform)
            hh = jnp.where(wj > 0, h, 1.0)
            num, den = jnp.sum(wj * (T.forward(data, jnp) - T.forward(hh, jnp))), jnp.sum(wj)
            s = T.inverse(num / jnp.where(den > 0, den, 1.0), jnp)
        s = jnp.where(den > 0, s, 1.0)  # no information: any value; 1
        clipped = jnp.clip(s, lower[j], upper[j])
        values.append(clipped)
        inside.append((clipped > lower[j]) & (clipped < upper[j]) & (den > 0))
    return jnp.stack(values), jnp.stack(inside)


def prediction(problem: Problem, inner: Scalings, theta, integrator, jacobian: bool):
    """The prediction at `theta` with its scalings at their optimum (the values given
    for them ignored), from one solve at `s = 1`; `theta` with them filled in; and which
    of them lie inside their bounds."""
    at_one = _at_one(problem, inner, theta)
    y, Y, ok, steps = _solved_outputs(problem, at_one, integrator, jacobian, PLAIN_ADJOINT)
    m = problem.n_observables
    h = y[..., :m]
    sigma = problem.sigma
    if any(problem.noise_outputs):
        sigma = jnp.where(jnp.asarray(problem.noise_outputs), y[..., m : 2 * m], sigma)
    s, inside = optimal(problem, inner, h, sigma)
    factor = jnp.ones(h.shape[0::2], h.dtype)  # (e, m)
    for g in range(len(inner.index)):
        factor = jnp.where(jnp.asarray(inner.mask[g])[:, :m], s[g], factor)
    scale = jnp.concatenate([factor, jnp.ones_like(y[:, 0, m:])], axis=-1)[:, None, :]
    fitted = theta.at[jnp.asarray(inner.index)].set(
        jnp.stack([Scale(problem.scales[j]).forward(v, jnp) for j, v in zip(inner.index, s)])
    )
    if jacobian:
        # d(s h)/dtheta = s dh/dtheta for the others; for scaling g, h ds/dtheta_g
        Y = Y * scale[..., None]
        for g, j in enumerate(inner.index):
            dlin = jax.grad(lambda v, sc=problem.scales[j]: Scale(sc).inverse(v, jnp))(fitted[j])
            col = jnp.where(jnp.asarray(inner.mask[g])[:, None, :m], h * dlin, 0.0)
            col = jnp.concatenate([col, jnp.zeros_like(y[..., m:])], axis=-1)
            Y = Y.at[..., j].set(col)
    out = _likelihood(problem, y * scale, Y, ok, steps, jacobian)
    return out, fitted, inside


def outer_fisher(H, inner: Scalings, inside):
    """The Fisher information of the other parameters with the scalings that lie
    inside their bounds solved for (the Schur complement over them); the scalings'
    rows and columns zero (they are not stepped)."""
    idx = jnp.asarray(inner.index)
    q = H.shape[0]
    free = jnp.zeros(q, bool).at[idx].set(inside)
    Hii = jnp.where(jnp.outer(inside, inside), H[idx][:, idx], 0.0)
    Hoi = jnp.where(free[None, :], H, 0.0)[:, idx]
    schur = H - Hoi @ jnp.linalg.pinv(Hii) @ Hoi.T
    out = jnp.zeros(q, bool).at[idx].set(True)
    return jnp.where(out[:, None] | out[None, :], 0.0, schur)
