"""Hierarchical optimization (Loos et al. 2018, Schmiester et al. 2020, as pyPESTO runs
it): the parameters of a problem that scale whole observables (`y = s h`), shift them
(`y = h + b`, or `y = s h + b` with a scaling), or scale whole noise levels
(`sigma = p c`), entering nothing else, are solved in closed form for the rest of the
parameters, so the optimizer steps in the dynamic parameters alone.

One solve with every such parameter at 1 gives `h` (less 1 where an offset is solved)
and `c` (and their derivatives); then, over the data `d` each parameter covers:

- a scaling `s` of linear observables, with weights `w = 1 / c^2`: `-log L` is quadratic
  in `s`, minimal at `s* = sum w h d / sum w h^2`; of log or log10 observables
  (`T(s h) = T(s) + T(h)`): `T(s*) = sum w (T(d) - T(h)) / sum w`;
- an offset `b` of linear observables: `b* = sum w (d - h) / sum w`; with its outputs'
  scaling, `(s, b)` minimise a quadratic in two unknowns on their box, solved exactly
  (the interior optimum, each edge's, the corners; the cost is convex);
- a noise scale `p`, from the residuals at `s*`, `b*` on the transformed scale over `c`,
  `u`: `p* = sqrt(mean u^2)` (normal noise) or `mean |u|` (Laplace);

each clipped to the parameter's bounds (the cost is convex in `s`, `T(s)` and `b`, and
unimodal in `p`). A scaling's or offset's weights must share one noise scale (`p`
cancels from `s*`, `b*`), so a noise scale that meets their data beside another is left
to the optimizer; so is a scaling of an output whose offset is not solved with it (or
that shares its offset with another scaling). The outputs and the Jacobian at the
optimum follow from the one solve (`y = s* h + b*`, `sigma = p* c`). The gradient in the
other parameters is the partial one there (the envelope theorem), their Fisher
information the Schur complement of the full one over the solved parameters that lie
inside their bounds."""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .._model._base import AbstractModel
from .._model._checks import n_outputs
from .._problem._base import Problem, unscale
from .._problem._predict import likelihood, PLAIN_ADJOINT, solved_outputs
from .._problem._scale import Scale
from .._runtime._choice import Choice


class Solved(Choice):
    """What a parameter solved in closed form is: a noise scale (`noise`), an offset of
    linear observables (`offset`), or a scaling of observables compared on the scale it
    is named by (`lin`, `log`, `log10`)."""

    noise = "noise"
    offset = "offset"
    lin = "lin"
    log = "log"
    log10 = "log10"

    @property
    def scaling(self) -> bool:
        return self not in (Solved.noise, Solved.offset)


# an offset added to a noise level: nothing to solve in closed form
_NOISE_OFFSET = object()


class Scalings(NamedTuple):
    """A problem's parameters solved in closed form: `index`, their positions among the
    problem's parameters; `mask[g][e][o]`, whether parameter `g` multiplies (or, an
    offset, is added to) output `o` in experiment `e` (`o < m`: an observable, a
    scaling or an offset; `o >= m`: the noise level of observable `o - m`, a noise
    scale); `transform`, what each is (`Solved`: a noise scale, an offset, or a scaling
    of observables on the scale it names); `partner`, the position in `index` of the
    offset solved with a scaling and of the scaling solved with an offset (else -1);
    tuples, so that a compiled fit is keyed on them."""

    index: tuple[int, ...]
    mask: tuple[tuple[tuple[bool, ...], ...], ...]
    transform: tuple[Solved, ...]
    partner: tuple[int, ...]


def _declared(model: AbstractModel, method: str) -> tuple[str | None, ...]:
    """The model's `output_scalings()` or `output_offsets()`, one entry per output,
    checked: as many as the model has outputs, each a parameter's name or `None`."""
    n = n_outputs(model)
    found = getattr(model, method)()
    if found is None:
        return (None,) * n
    names = model.parameters.names
    if len(found) != n:
        raise ValueError(
            f"{type(model).__name__}.{method}() gives {len(found)} entries for {n} outputs."
        )
    unknown = [x for x in found if x is not None and x not in names]
    if unknown:
        raise ValueError(
            f"{type(model).__name__}.{method}() names {unknown[0]!r}, not a parameter of "
            f"the model ({', '.join(names)})."
        )
    return tuple(found)


def _candidates(problem: Problem):
    """`(j, mask (e, outputs), kind)` for each parameter that maps only to model
    parameters that `model.output_scalings()` or `output_offsets()` names for one kind
    of output (or that no formula uses), and meets at least one measured datum
    (`kind`: `None` for a scaling, whose scale its observables decide, else
    `Solved.noise` or `Solved.offset`); and `(e, m)`, the problem parameter that
    each observable's offset maps to there (-1: a number; -2: it has none)."""
    model: AbstractModel = problem.model
    m = problem.n_observables
    source = np.asarray(problem.source)  # (e, model parameters): problem index or -1
    offset_of = np.full((source.shape[0], m), -2)
    scaled, added = _declared(model, "output_scalings"), _declared(model, "output_offsets")
    if not any(scaled) and not any(added):
        return [], offset_of
    n_out = len(scaled)
    names = model.parameters.names
    for o in range(m):
        if added[o] is not None:
            offset_of[:, o] = source[:, names.index(added[o])]
    dep = model.parameter_dependence()
    used = set() if dep is None else set(dep.dynamics).union(*dep.outputs)
    noise_out = np.asarray(problem.noise_outputs, bool)
    sources = [source] + ([np.asarray(problem.pre_source)] if problem.pre_source else [])
    observed = np.asarray(problem.observed).any(axis=1)  # (e, m)
    seen = np.concatenate([observed, observed & noise_out], axis=1)
    out = []
    for j in range(problem.parameters.p):
        mask = np.zeros((observed.shape[0], n_out), bool)
        shift = np.zeros_like(mask)
        ok = True
        for src in sources:
            for e, k in zip(*np.nonzero(src == j)):
                outs = [o for o in range(n_out) if scaled[o] == names[k]]
                plus = [o for o in range(n_out) if added[o] == names[k]]
                if src is source and (outs or plus):
                    mask[e, outs] = True
                    shift[e, plus] = True
                elif names[k] in used and not (outs or plus):
                    ok = False  # j enters the model elsewhere
        kinds = {None if o < m else Solved.noise for o in np.nonzero(mask.any(axis=0))[0]}
        kinds |= {Solved.offset if o < m else _NOISE_OFFSET
                  for o in np.nonzero(shift.any(axis=0))[0]}  # fmt: skip
        both = mask | shift
        usable = _NOISE_OFFSET not in kinds
        if ok and len(kinds) == 1 and usable and (both & seen[:, :n_out]).any():
            out.append((j, both, kinds.pop()))
    return out, offset_of


def _solvable(problem: Problem, cols, kind: Solved | None) -> Solved | None:
    """What a candidate solved in closed form is, or `None` where it cannot be."""
    m = problem.n_observables
    if kind is Solved.noise:
        return kind if len({problem.distributions[o - m] for o in cols}) == 1 else None
    transforms = {problem.transforms[o] for o in cols}
    if not all(problem.distributions[o].quadratic for o in cols) or len(transforms) != 1:
        return None
    if kind is Solved.offset:
        return kind if transforms == {Scale.lin} else None
    return Solved(Scale(transforms.pop()).value)


def _paired(found: dict, offset_of, m: int) -> dict:
    """The scaling solved with each offset, the scalings of outputs with an offset that
    cannot be solved with them removed from `found` (in place): a scaling's outputs
    must have no offset or one, solved, of no other scaling."""
    while True:
        partner = {}
        for j, (mask, t) in found.items():
            if t.scaling:
                owners = set(offset_of[mask[:, :m]].tolist()) - {-2}
                if owners:
                    partner[j] = owners.pop() if len(owners) == 1 else -1
        shared = [b for b in partner.values() if list(partner.values()).count(b) > 1]
        drop = [j for j, b in partner.items() if b not in found or b in shared]
        if not drop:
            return {**partner, **{b: j for j, b in partner.items()}}
        for j in drop:
            del found[j]


def scalings(problem: Problem) -> Scalings | None:
    """The problem's parameters that a hierarchical fit solves for (`None` where there
    are none): scalings whose observables share one transformation and have normal
    noise, with their outputs' offset solved with them where they have one; offsets of
    linear observables with normal noise; each over data of one noise scale at most;
    and noise scales of one distribution, not beside another noise scale in a scaling's
    or offset's data."""
    m = problem.n_observables
    candidates, offset_of = _candidates(problem)
    found = {}
    for j, mask, kind in candidates:
        t = _solvable(problem, np.nonzero(mask.any(axis=0))[0], kind)
        if t is not None:
            found[j] = (mask, t)
    partner = _paired(found, offset_of, m)
    noise = {j: mask for j, (mask, t) in found.items() if t is Solved.noise}
    data = [mask | found[partner[j]][0] if j in partner else mask
            for j, (mask, t) in found.items() if t is not Solved.noise]  # fmt: skip
    # a noise scale beside another in some scaling's or offset's data: to the optimizer
    clash = {j for j, mask in noise.items()
             if any((d[:, :m] & mask[:, m:]).any()
                    and any((d[:, :m] & other[:, m:]).any() for i, other in noise.items() if i != j)
                    for d in data)}  # fmt: skip
    keep = [j for j in found if j not in clash]
    if not keep:
        return None
    width = m + (m if any(problem.noise_outputs) else 0)
    return Scalings(
        tuple(keep),
        tuple(tuple(map(tuple, _padded(found[j][0], width).tolist())) for j in keep),
        tuple(found[j][1] for j in keep),
        tuple(keep.index(partner[j]) if j in partner else -1 for j in keep),
    )


def only(inner: Scalings, free) -> Scalings | None:
    """`inner` without the parameters that `free` (a mask) holds; where it holds a noise
    scale, without any noise scale (a scaling's weights then hold the held one's value
    beside a solved one's 1); where it holds an offset, without its scaling (no longer
    a factor of its outputs less a solved offset)."""
    held_noise = any(
        not free[j] and t is Solved.noise for j, t in zip(inner.index, inner.transform)
    )
    keep = [g for g, (j, t, b) in enumerate(zip(inner.index, inner.transform, inner.partner))
            if free[j] and (t is not Solved.noise or not held_noise)
            and (t is Solved.offset or b < 0 or free[inner.index[b]])]  # fmt: skip
    if not keep:
        return None
    return Scalings(
        *(tuple(part[g] for g in keep) for part in inner[:3]),
        tuple(keep.index(inner.partner[g]) if inner.partner[g] in keep else -1 for g in keep),
    )


def _padded(mask, width):
    out = np.zeros((mask.shape[0], width), bool)
    out[:, : mask.shape[1]] = mask
    return out


def _at_one(problem: Problem, inner: Scalings, theta):
    """`theta` with every solved parameter at 1 (on its estimation scale)."""
    one = jnp.asarray([Scale(problem.scales[j]).forward(1.0, jnp) for j in inner.index])
    return theta.at[jnp.asarray(inner.index)].set(one.astype(theta.dtype))


def _factor(inner: Scalings, values, shape, rows, offsets: bool = False):
    """`(e, len(rows))`: each output's factor, the solved value of the scaling or noise
    scale that multiplies it there, else 1; with `offsets`, each output's solved
    offset, else 0."""
    out = jnp.full(shape, 0.0 if offsets else 1.0, values.dtype)
    for g, t in enumerate(inner.transform):
        if (t is Solved.offset) == offsets:
            out = jnp.where(jnp.asarray(inner.mask[g])[:, rows], values[g], out)
    return out


def _box_quadratic(Q, r, lower, upper):
    """The minimiser of `z Q z / 2 - r z` over the box `lower <= z <= upper` in two
    unknowns (`Q` positive semidefinite): the best of the interior optimum (where `Q` is
    regular and it lies in the box), each edge's (the other unknown at a bound) and the
    corners."""
    cost = lambda z: 0.5 * z @ Q @ z - r @ z  # noqa: E731
    det = Q[0, 0] * Q[1, 1] - Q[0, 1] ** 2
    regular = det > 1e-12 * Q[0, 0] * Q[1, 1]
    inner = jnp.stack([Q[1, 1] * r[0] - Q[0, 1] * r[1], Q[0, 0] * r[1] - Q[0, 1] * r[0]])
    points = [jnp.where(regular, inner / jnp.where(regular, det, 1.0), lower)]
    for i in (0, 1):  # unknown i at a bound, the other at its best there
        k = 1 - i
        for at in (lower[i], upper[i]):
            best = (r[k] - Q[k, i] * at) / jnp.where(Q[k, k] > 0, Q[k, k], 1.0)
            best = jnp.where(Q[k, k] > 0, jnp.clip(best, lower[k], upper[k]), lower[k])
            points += [jnp.stack([at, best] if i == 0 else [best, at])]
    points += [jnp.stack([a, b]) for a in (lower[0], upper[0]) for b in (lower[1], upper[1])]
    points = jnp.stack(points)
    feasible = jnp.all((points >= lower) & (points <= upper), axis=1)
    costs = jnp.where(feasible, jnp.stack([cost(z) for z in points]), jnp.inf)
    return points[jnp.argmin(jnp.where(jnp.isnan(costs), jnp.inf, costs))]


def optimal(problem: Problem, inner: Scalings, h, c):
    """The solved parameters' values on the linear scale, `(g,)`, from the observables
    `h` (the scalings at 1, the offsets at 0) and noise levels `c` at 1, clipped to the
    bounds; and which lie strictly inside them. The scalings and offsets first (their
    weights `1 / c^2`), then the noise scales from the residuals at their optimum."""
    m = problem.n_observables
    observed = problem.observed & ~jnp.isnan(problem.data)
    data = jnp.where(observed, problem.data, 1.0)
    w = jnp.where(observed, 1.0 / jnp.where(observed, c, 1.0) ** 2, 0.0)
    lower = unscale(problem.parameters.lower, problem.scales)
    upper = unscale(problem.parameters.upper, problem.scales)
    values = jnp.ones(len(inner.index), h.dtype)
    informed = jnp.ones(len(inner.index), bool)
    on = [jnp.asarray(mask)[:, None, :m] for mask in inner.mask]
    for g, (j, transform, b) in enumerate(zip(inner.index, inner.transform, inner.partner)):
        if transform is Solved.noise or (transform is Solved.offset and b >= 0):
            continue  # a noise scale (below), or an offset solved with its scaling
        wg = jnp.where(on[g], w, 0.0)
        if transform is Solved.offset:
            num, den = jnp.sum(wg * (data - h)), jnp.sum(wg)
            v = jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)
        elif transform is Solved.lin and b >= 0:  # (s, b) together on their box
            wp = jnp.where(on[g] | on[b], w, 0.0)
            a = jnp.stack([jnp.where(on[g], h, 0.0), jnp.where(on[b], jnp.ones_like(h), 0.0)])
            Q = jnp.einsum("i...,j...->ij", a * wp, a)
            r = jnp.einsum("i...,...->i", a * wp, data - jnp.where(on[g], 0.0, h))
            jb = inner.index[b]
            box = jnp.asarray([[lower[j], lower[jb]], [upper[j], upper[jb]]])
            z = _box_quadratic(Q, r, box[0], box[1])
            values = values.at[b].set(jnp.where(Q[1, 1] > 0, z[1], jnp.clip(0.0, *box[:, 1])))
            informed = informed.at[b].set(Q[1, 1] > 0)
            v, den = jnp.where(Q[0, 0] > 0, z[0], 1.0), Q[0, 0]
        elif transform is Solved.lin:
            num, den = jnp.sum(wg * h * data), jnp.sum(wg * h * h)
            v = jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 1.0)
        else:
            T = Scale(transform.value)
            hh = jnp.where(wg > 0, h, 1.0)
            num, den = jnp.sum(wg * (T.forward(data, jnp) - T.forward(hh, jnp))), jnp.sum(wg)
            v = jnp.where(den > 0, T.inverse(num / jnp.where(den > 0, den, 1.0), jnp), 1.0)
        values = values.at[g].set(jnp.clip(v, lower[j], upper[j]))
        informed = informed.at[g].set(den > 0)
    shape = h.shape[0::2]
    pred = h * _factor(inner, values, shape, slice(0, m))[:, None, :]
    pred = pred + _factor(inner, values, shape, slice(0, m), offsets=True)[:, None, :]
    T = problem.transforms
    delta = jnp.stack([T[o].forward(pred[..., o], jnp) - T[o].forward(data[..., o], jnp)
                       for o in range(m)], axis=-1)  # fmt: skip
    u = delta / c
    for g, (j, mask, transform) in enumerate(zip(inner.index, inner.mask, inner.transform)):
        if transform is not Solved.noise:
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
    y, Y, result, steps = solved_outputs(problem, at_one, integrator, jacobian, PLAIN_ADJOINT)
    m = problem.n_observables
    rows = y.shape[-1]
    ones = jnp.ones(len(inner.index), y.dtype)
    y = y - _factor(inner, ones, (y.shape[0], rows), slice(0, rows), offsets=True)[:, None, :]
    c = problem.sigma
    if any(problem.noise_outputs):
        c = jnp.where(jnp.asarray(problem.noise_outputs), y[..., m : 2 * m], c)
    values, inside = optimal(problem, inner, y[..., :m], c)
    scale = _factor(inner, values, (y.shape[0], rows), slice(0, rows))[:, None, :]
    shift = _factor(inner, values, (y.shape[0], rows), slice(0, rows), offsets=True)[:, None, :]
    fitted = theta.at[jnp.asarray(inner.index)].set(
        jnp.stack([Scale(problem.scales[j]).forward(v, jnp) for j, v in zip(inner.index, values)])
    )
    if jacobian:
        # d(v u + b)/dtheta = v du/dtheta for the others; for a solved scaling v,
        # u dv/dtheta_v; for a solved offset b, db/dtheta_b
        Y = Y * scale[..., None]
        for g, (j, t) in enumerate(zip(inner.index, inner.transform)):
            dlin = Scale(problem.scales[j]).inverse_derivative(fitted[j], jnp)
            col = jnp.broadcast_to(dlin, y.shape) if t is Solved.offset else y * dlin
            Y = Y.at[..., j].set(jnp.where(jnp.asarray(inner.mask[g])[:, None, :rows], col, 0.0))
    out = likelihood(problem, y * scale + shift, Y, result, steps, jacobian)
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
