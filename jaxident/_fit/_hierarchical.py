"""Hierarchical optimization (Loos et al. 2018, Schmiester et al. 2020, as pyPESTO runs
it): the parameters of a problem that scale whole observables (`y = s h`) or whole noise
levels (`sigma = p c`), entering nothing else, are solved in closed form for the rest of
the parameters, so the optimizer steps in the dynamic parameters alone.

One solve with every such parameter at 1 gives `h` and `c` (and their derivatives);
then, over the data `d` each parameter covers:

- a scaling `s` of linear observables, with weights `w = 1 / c^2`: `-log L` is quadratic
  in `s`, minimal at `s* = sum w h d / sum w h^2`; of log or log10 observables
  (`T(s h) = T(s) + T(h)`): `T(s*) = sum w (T(d) - T(h)) / sum w`;
- a noise scale `p`, from the residuals at `s*` on the transformed scale over `c`,
  `u`: `p* = sqrt(mean u^2)` (normal noise) or `mean |u|` (Laplace);

each clipped to the parameter's bounds (the cost is convex in `s`, or `T(s)`, and
unimodal in `p`). A scaling's weights must share one noise scale (`p` cancels from `s*`),
so a noise scale that meets a scaling's data beside another is left to the optimizer.
The outputs and the Jacobian at the optimum follow from the one solve (`y = s* h`,
`sigma = p* c`). The gradient in the other parameters is the partial one there (the
envelope theorem), their Fisher information the Schur complement of the full one over
the solved parameters that lie inside their bounds."""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .._model._base import AbstractModel
from .._problem._base import Problem, unscale
from .._problem._noise import Noise
from .._problem._predict import likelihood, PLAIN_ADJOINT, solved_outputs
from .._problem._scale import Scale


class Scalings(NamedTuple):
    """A problem's parameters solved in closed form: `index`, their positions among the
    problem's parameters; `mask[g][e][o]`, whether parameter `g` multiplies output `o`
    in experiment `e` (`o < m`: an observable, a scaling; `o >= m`: the noise level of
    observable `o - m`, a noise scale); `transform`, the transformation of a scaling's
    observables (`""` for a noise scale); tuples, so that a compiled fit is keyed on
    them."""

    index: tuple[int, ...]
    mask: tuple[tuple[tuple[bool, ...], ...], ...]
    transform: tuple[str, ...]


def _candidates(problem: Problem):
    """`(j, mask (e, outputs), is scaling)` for each parameter that maps only to model
    parameters that `model.output_scalings()` names for one kind of output (or that no
    formula uses), and multiplies at least one measured datum."""
    model: AbstractModel = problem.model
    per_output = model.output_scalings()
    if per_output is None or not any(per_output):
        return []
    names = model.parameters.names
    dep = model.parameter_dependence()
    used = set() if dep is None else set(dep.dynamics).union(*dep.outputs)
    m = problem.n_observables
    noise_out = np.asarray(problem.noise_outputs, bool)
    source = np.asarray(problem.source)  # (e, model parameters): problem index or -1
    sources = [source] + ([np.asarray(problem.pre_source)] if problem.pre_source else [])
    observed = np.asarray(problem.observed).any(axis=1)  # (e, m)
    seen = np.concatenate([observed, observed & noise_out], axis=1)
    out = []
    for j in range(problem.parameters.p):
        mask = np.zeros((observed.shape[0], len(per_output)), bool)
        ok = True
        for src in sources:
            for e, k in zip(*np.nonzero(src == j)):
                outs = [o for o in range(len(per_output)) if per_output[o] == names[k]]
                if src is source and outs:
                    mask[e, outs] = True
                elif names[k] in used and not outs:
                    ok = False  # j enters the model elsewhere
        kinds = {o < m for o in np.nonzero(mask.any(axis=0))[0]}
        if ok and len(kinds) == 1 and (mask & seen[:, : mask.shape[1]]).any():
            out.append((j, mask, kinds.pop()))
    return out


def scalings(problem: Problem) -> Scalings | None:
    """The problem's parameters that a hierarchical fit solves for (`None` where there
    are none): scalings whose observables share one transformation and have normal
    noise, each over data of one noise scale at most; and noise scales of one
    distribution, not beside another noise scale in a scaling's data."""
    m = problem.n_observables
    found = []
    for j, mask, is_scaling in _candidates(problem):
        cols = np.nonzero(mask.any(axis=0))[0]
        if is_scaling:
            transforms = {problem.transforms[o] for o in cols}
            noises = {problem.distributions[o] for o in cols}
            if len(transforms) == 1 and noises == {Noise.normal}:
                found.append((j, mask, Scale(transforms.pop()).value))
        elif len({problem.distributions[o - m] for o in cols}) == 1:
            found.append((j, mask, ""))
    noise = [(j, mask) for j, mask, t in found if not t]
    keep = []
    for j, mask, t in found:
        if not t:
            # a noise scale beside another in some scaling's data is left to the optimizer
            clash = any(
                (s_mask[:, :m] & mask[:, m:]).any()
                and any((s_mask[:, :m] & other[:, m:]).any() for i, other in noise if i != j)
                for _, s_mask, st in found
                if st
            )
            if clash:
                continue
        keep.append((j, mask, t))
    if not keep:
        return None
    width = m + (m if any(problem.noise_outputs) else 0)
    return Scalings(
        tuple(j for j, _, _ in keep),
        tuple(tuple(map(tuple, _padded(mask, width).tolist())) for _, mask, _ in keep),
        tuple(t for _, _, t in keep),
    )


def only(inner: Scalings, free) -> Scalings | None:
    """`inner` without the parameters that `free` (a mask) holds; where it holds a noise
    scale, without any noise scale (a scaling's weights then hold the held one's value
    beside a solved one's 1)."""
    held_noise = any(not free[j] and not t for j, t in zip(inner.index, inner.transform))
    keep = [g for g, (j, t) in enumerate(zip(inner.index, inner.transform))
            if free[j] and (t or not held_noise)]  # fmt: skip
    if not keep:
        return None
    return Scalings(*(tuple(part[g] for g in keep) for part in inner))


def _padded(mask, width):
    out = np.zeros((mask.shape[0], width), bool)
    out[:, : mask.shape[1]] = mask
    return out


def _at_one(problem: Problem, inner: Scalings, theta):
    """`theta` with every solved parameter at 1 (on its estimation scale)."""
    one = jnp.asarray([Scale(problem.scales[j]).forward(1.0, jnp) for j in inner.index])
    return theta.at[jnp.asarray(inner.index)].set(one.astype(theta.dtype))


def _factor(inner: Scalings, values, shape, rows):
    """`(e, len(rows))`: each output's factor, the solved value of the parameter that
    multiplies it there, else 1."""
    factor = jnp.ones(shape, values.dtype)
    for g in range(len(inner.index)):
        factor = jnp.where(jnp.asarray(inner.mask[g])[:, rows], values[g], factor)
    return factor


def optimal(problem: Problem, inner: Scalings, h, c):
    """The solved parameters' values on the linear scale, `(g,)`, from the observables
    `h` and noise levels `c` at 1, clipped to the bounds; and which lie strictly inside
    them. The scalings first (their weights `1 / c^2`), then the noise scales from the
    residuals at the scalings' optimum."""
    m = problem.n_observables
    observed = problem.observed & ~jnp.isnan(problem.data)
    data = jnp.where(observed, problem.data, 1.0)
    w = jnp.where(observed, 1.0 / jnp.where(observed, c, 1.0) ** 2, 0.0)
    lower = unscale(problem.parameters.lower, problem.scales)
    upper = unscale(problem.parameters.upper, problem.scales)
    values = jnp.ones(len(inner.index), h.dtype)
    informed = jnp.ones(len(inner.index), bool)
    for g, (j, mask, transform) in enumerate(zip(inner.index, inner.mask, inner.transform)):
        if not transform:
            continue
        wg = jnp.where(jnp.asarray(mask)[:, None, :m], w, 0.0)
        if transform == Scale.lin.value:
            num, den = jnp.sum(wg * h * data), jnp.sum(wg * h * h)
            s = num / jnp.where(den > 0, den, 1.0)
        else:
            T = Scale(transform)
            hh = jnp.where(wg > 0, h, 1.0)
            num, den = jnp.sum(wg * (T.forward(data, jnp) - T.forward(hh, jnp))), jnp.sum(wg)
            s = T.inverse(num / jnp.where(den > 0, den, 1.0), jnp)
        values = values.at[g].set(jnp.clip(jnp.where(den > 0, s, 1.0), lower[j], upper[j]))
        informed = informed.at[g].set(den > 0)
    pred = h * _factor(inner, values, h.shape[0::2], slice(0, m))[:, None, :]
    T = problem.transforms
    delta = jnp.stack([T[o].forward(pred[..., o], jnp) - T[o].forward(data[..., o], jnp)
                       for o in range(m)], axis=-1)  # fmt: skip
    u = delta / c
    for g, (j, mask, transform) in enumerate(zip(inner.index, inner.mask, inner.transform)):
        if transform:
            continue
        where = observed & jnp.asarray(mask)[:, None, m:]
        noise = problem.distributions[int(np.nonzero(np.asarray(mask)[:, m:].any(axis=0))[0][0])]
        p = noise.scale_at_optimum(u, where, jnp)
        values = values.at[g].set(jnp.clip(p, lower[j], upper[j]))
        informed = informed.at[g].set(jnp.any(where))
    index = jnp.asarray(inner.index)
    inside = (values > lower[index]) & (values < upper[index]) & informed
    return values, inside


def prediction(problem: Problem, inner: Scalings, theta, integrator, jacobian: bool):
    """The prediction at `theta` with its solved parameters at their optimum (the values
    given for them ignored), from one solve with them at 1; `theta` with them filled in;
    and which of them lie inside their bounds."""
    at_one = _at_one(problem, inner, theta)
    y, Y, ok, steps = solved_outputs(problem, at_one, integrator, jacobian, PLAIN_ADJOINT)
    m = problem.n_observables
    h = y[..., :m]
    c = problem.sigma
    if any(problem.noise_outputs):
        c = jnp.where(jnp.asarray(problem.noise_outputs), y[..., m : 2 * m], c)
    values, inside = optimal(problem, inner, h, c)
    rows = y.shape[-1]
    scale = _factor(inner, values, (y.shape[0], rows), slice(0, rows))[:, None, :]
    fitted = theta.at[jnp.asarray(inner.index)].set(
        jnp.stack([Scale(problem.scales[j]).forward(v, jnp) for j, v in zip(inner.index, values)])
    )
    if jacobian:
        # d(v u)/dtheta = v du/dtheta for the others; for the solved v, u dv/dtheta_v
        Y = Y * scale[..., None]
        for g, j in enumerate(inner.index):
            dlin = Scale(problem.scales[j]).inverse_derivative(fitted[j], jnp)
            col = jnp.where(jnp.asarray(inner.mask[g])[:, None, :rows], y * dlin, 0.0)
            Y = Y.at[..., j].set(col)
    out = likelihood(problem, y * scale, Y, ok, steps, jacobian)
    return out, fitted, inside


def outer_fisher(H, inner: Scalings, inside):
    """The Fisher information of the other parameters with the solved ones that lie
    inside their bounds profiled out (the Schur complement over them); the solved
    parameters' rows and columns zero (they are not stepped)."""
    idx = jnp.asarray(inner.index)
    q = H.shape[0]
    free = jnp.zeros(q, bool).at[idx].set(inside)
    Hii = jnp.where(jnp.outer(inside, inside), H[idx][:, idx], 0.0)
    Hoi = jnp.where(free[None, :], H, 0.0)[:, idx]
    schur = H - Hoi @ jnp.linalg.pinv(Hii) @ Hoi.T
    solved = jnp.zeros(q, bool).at[idx].set(True)
    return jnp.where(solved[:, None] | solved[None, :], 0.0, schur)
