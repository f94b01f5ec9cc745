"""The (lexicographic) sensitivity rank condition: L-SERC identifiability (Algorithm 1)
and parameter reduction over Latin-hypercube samples (Algorithm 2) of Abdelfattah,
Stechlinski & Eisa (2024). For smooth models L-SERC is the classical SERC test."""

import warnings
from collections.abc import Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .._linalg._nullspace import null_space, rref
from .._linalg._rank import AbstractRankRule, near_threshold, NearThresholdWarning
from .._model._base import AbstractModel, Integrator
from .._model._checks import check_theta, check_times
from .._model._nonsmooth import directions_matrix, ld_jvp
from .._model._transforms import fix_parameters
from .._problem._base import Problem, rescale, unscale
from .._problem._predict import predict_kernel
from .._runtime._host import on_error_mode, run_kernel
from .._runtime._results import RESULTS, succeeded
from .._solve._simulate import failure_message, raise_if_failed, solve, status
from ._lserc_method import at_accuracy, check_method, LSERC, probe_directions


class Probe(eqx.Module):
    """The L-SERC test at one point in several directions (stages S1 and S2).

    Leading axis: the directions (`LSERCResult.kinds` says which are primary, S1, and
    which twin, S2). `theta`: the point; `directions`: `(d, p)`, the directions; per
    direction, `rank` of the L-SERC matrix, its `singular_values`, the `pivots` (the
    pivot columns of `rref(V_r^T)`: the locally non-identifiable parameters) and, per
    pivot, its `partners`; `result` (`ji.RESULTS`) is not `successful` where the
    sensitivity solve failed (`ok`: where it is).
    """

    theta: Float[Array, " p"]
    directions: Float[Array, "d p"]
    rank: Int[Array, " d"]
    singular_values: Float[Array, "d p"]
    pivots: Bool[Array, "d p"]
    partners: Bool[Array, "d p p"]
    result: RESULTS

    @property
    def ok(self) -> Bool[ArrayLike, "*batch d"]:
        return succeeded(self.result)

    @property
    def non_identifiable(self) -> Bool[Array, "*batch p"]:
        """Union of the pivots over the directions (Algorithm 1, lines 6 and 14)."""
        return jnp.any(self.pivots & self.ok[..., :, None], axis=-2)

    @property
    def pairs(self) -> Bool[Array, "*batch p p"]:
        return jnp.any(self.partners & self.ok[..., :, None, None], axis=-3)


class ModelOutputs(eqx.Module):
    """What L-SERC differentiates for a model: its outputs at `times`, flat, as
    functions of its parameters; `status` is the solve's (for the failure message)."""

    model: AbstractModel
    times: Array

    def __call__(self, theta, integrator):
        solved = solve(self.model, theta, self.times, integrator, diffrax.ForwardMode())
        return solved.ys.reshape(-1), (solved.ok, status(solved))

    @property
    def owner(self) -> AbstractModel:
        """What the parameter vectors are given for: the model."""
        return self.model

    def linear(self, theta):
        return theta

    def reduction(self, fixed: dict) -> dict:
        """The `Reduction` fields of the model with `fixed` held (none if empty)."""
        model = fix_parameters(self.model, fixed) if fixed else None
        return dict(reduced_model=model, reduced_problem=None, scales=None)

    def raise_if_failed(self, x, st):
        return raise_if_failed(self.model, x, st)

    def message(self, st) -> str | None:
        return failure_message(self.model, st)


class ProblemOutputs(eqx.Module):
    """What L-SERC differentiates for a problem: every experiment's outputs where they
    were measured (the model's outputs, before any observable transformation), flat, as
    functions of the problem's parameters on the linear scale (a diagonal change of
    variables changes no rank at a nonzero point); `status` is `ok` per experiment."""

    problem: Problem

    def __call__(self, theta, integrator):
        # (jvp-able: the plain solve differentiated in forward mode)
        problem = self.problem
        est = rescale(theta, problem.scales)
        out = predict_kernel(problem, est, integrator, False, diffrax.ForwardMode())
        y = jnp.where(problem.observed, out.outputs, 0.0).reshape(-1)
        return y, (jnp.all(out.ok), out.ok)

    @property
    def owner(self) -> Problem:
        """What the parameter vectors are given for: the problem, on its estimation
        scales."""
        return self.problem

    def linear(self, theta):
        return unscale(theta, self.problem.scales)

    def reduction(self, fixed: dict) -> dict:
        """The `Reduction` fields of the problem with `fixed` held (none if empty)."""
        problem = self.problem.fix(fixed) if fixed else None
        return dict(reduced_model=None, reduced_problem=problem,
                    scales=tuple(map(str, self.problem.scales)))  # fmt: skip

    def raise_if_failed(self, x, ok):
        return eqx.error_if(
            x, ~jnp.all(ok), "The model could not be solved in an experiment of the problem."
        )

    def message(self, ok) -> str | None:
        failed = [n for n, k in zip(self.problem.experiment_names, np.asarray(ok)) if not k]
        if not failed:
            return None
        return (
            f"The model could not be solved in experiment(s) {', '.join(map(repr, failed))} "
            "at theta: check theta and the integrator's tolerances and max_steps."
        )


def outputs_of(target, times, method, what: str):
    """`(model, outputs)`: what L-SERC differentiates, checked with `method`: a model's
    outputs (at `times`, default its own: `ModelOutputs`), or a problem's measured
    outputs (`ProblemOutputs`); the outputs object carries what the parameter vectors
    are given for (its `owner`) and the reduced model or problem (`reduction`)."""
    if not isinstance(target, Problem):  # the API edge: a model alone
        check_method(target, method)
        return target, ModelOutputs(target, check_times(target, times))
    if times is not None:
        raise TypeError("A problem holds its times: give none.")
    check_method(target.model, method)
    if any(target.noise_outputs):
        raise ValueError(
            f"{what} tests what the outputs determine; this problem estimates noise "
            "parameters, which enter no output. Load it with the noise parameters held "
            "(ji.petab.load(..., estimate_noise=False), the default)."
        )
    return target.model, ProblemOutputs(target)


@eqx.filter_jit
def _probe(target, theta, D, integrator, method: LSERC, on_error):
    """The L-SERC matrices of every direction in `D` at `theta`, their null spaces and
    rref pivots, and per direction the step of singularity probing (stage S3) in the
    parameters' units. Jitted so that the singularity-probing levels reuse its trace (a
    DAE solve costs seconds to trace); `on_error`, equinox's error mode while tracing,
    is part of the cache key (see `jaxident._runtime._host.run_kernel`)."""
    del on_error
    Ms = jax.vmap(directions_matrix)(D)

    def one(M):
        f = lambda th: target(th, integrator)  # noqa: E731
        _, Y, (solved_ok, st) = ld_jvp(f, (theta,), (M,), has_aux=True)
        L = Y[:, 1:]
        ok = solved_ok & jnp.all(jnp.isfinite(L))
        result = RESULTS.where(jnp.all(jnp.isfinite(L)), RESULTS.successful,
                               RESULTS.nonfinite_sensitivity)  # fmt: skip
        result = RESULTS.where(solved_ok, result, RESULTS.sample_failed)
        return jnp.where(ok, L, 0.0), ok, result, st

    L, ok, result, solved = jax.vmap(one)(Ms)
    ns = jax.vmap(null_space, in_axes=(0, None, None))(L, method.rank, method.equilibrate)
    A = jnp.where(ns.mask[:, :, None], jnp.swapaxes(ns.basis, -1, -2), 0.0)
    ech = jax.vmap(lambda a: rref(a, method.rref_tol))(A)
    probe = Probe(
        theta=theta,
        directions=D,
        rank=ns.rank,
        singular_values=ns.singular_values,
        pivots=ech.pivots & ok[:, None],
        partners=ech.partners & ok[:, None, None],
        result=result,
    )
    V = ns.raw_basis()  # (d, p, p), unit null vectors in the parameters' units
    if method.relative:
        # The same null space in relative coordinates u = v / |theta| (the null vectors
        # of Upsilon_d diag|theta|), each of unit norm, mapped back: a step moves no
        # parameter by more than eps_sing of its own value.
        s = _relative_scale(theta)
        U = V / s[:, None]
        V = s[:, None] * (U / jnp.linalg.norm(U, axis=-2, keepdims=True))
    null_sum = jnp.sum(jnp.where(ns.mask[:, None, :], V, 0.0), axis=-1)  # (d, p)
    return probe, null_sum, solved


def _relative_scale(theta):
    """`|theta_i|`, or 1 for a parameter at 0 (probed by an absolute step)."""
    a = jnp.abs(theta)
    return jnp.where(a > 0, a, 1.0)


def _singularity_points(theta, null_sum, deficient, active, singular):
    """Stage S3 of Algorithm 1: for every rank-deficient direction (every element of
    `D_sing`), the points `theta +- epsilon_sing sum_k v_k`. Leading axes of the inputs
    are the points of the previous level; returns `(points, active)` flattened."""
    signs = jnp.asarray([1.0, -1.0], theta.dtype)
    pts = theta[:, None, None, :] + signs[None, None, :, None] * singular * null_sum[:, :, None, :]
    act = active[:, None, None] & deficient[:, :, None] & jnp.ones((1, 1, 2), bool)
    p = theta.shape[-1]
    return pts.reshape(-1, p), act.reshape(-1)


def lserc_tree(target, theta, D, integrator, method: LSERC):
    """The probe at `theta` and, level by level (`method.q` levels), the probes at the
    singularity-probing points of every rank-deficient direction. The points of a level
    are probed one after another (`lax.map`; each point's directions vmapped), so that
    a point whose solves take many steps holds up no other, and the compiled size does
    not grow with the number of directions."""
    mode = on_error_mode()
    probe, null_sum, solved = _probe(target, theta, D, integrator, method, mode)
    probes, active = [], []
    if method.singular > 0 and method.q > 0:
        p = theta.shape[0]
        thetas = theta[None]
        sums = null_sum[None]
        deficient = ((probe.rank < p) & probe.ok)[None]
        act = jnp.ones((1,), bool)
        for _ in range(method.q):
            thetas, act = _singularity_points(thetas, sums, deficient, act, method.singular)
            level, sums, _ = _probe_points(target, thetas, act, D, integrator, method, mode)
            deficient = (level.rank < p) & level.ok
            probes.append(level)
            active.append(act)
    return probe, tuple(probes), tuple(active), solved


def _probe_points(target, thetas, active, D, integrator, method, mode):
    """The probes at `thetas`, one point after another; an inactive point (its direction
    was not rank deficient) is probed at the first active one instead, and its result is
    discarded by the caller through `active`."""
    thetas = jnp.where(active[:, None], thetas, thetas[jnp.argmax(active)])

    def one(x):
        th, a = x
        probe = lambda th: _probe(target, th, D, integrator, method, mode)  # noqa: E731
        skip = lambda th: jax.tree.map(jnp.zeros_like, jax.eval_shape(probe, th))  # noqa: E731
        return jax.lax.cond(a, probe, skip, th)

    return jax.lax.map(one, (thetas, active))


def confirmed_mask(ref: Probe, probes, active) -> Bool[Array, " p"]:
    """Non-identifiable at the reference point and at every active singularity probe
    whose solves all succeeded (a probe whose solve failed in some direction says
    nothing). Jittable: `reduce_parameters` counts it per sample."""
    mask = ref.non_identifiable
    for probe, act in zip(probes, active):
        counted = act & jnp.all(probe.ok, axis=-1)
        mask = mask & jnp.all(jnp.where(counted[:, None], probe.non_identifiable, True), 0)
    return mask


class LSERCResult(eqx.Module):
    """The result of the L-SERC test (Algorithm 1 of Abdelfattah et al. 2024) at a
    parameter point.

    **Fields:**

    - `names`: the parameter names.
    - `reference`: the `Probe` at `theta` (primary and twin directions).
    - `probes`: per level of singularity probing (stage S3), a batched `Probe` over the
      points `theta +- eps_sing sum_k v_k(d)` for every direction `d` of the level
      before (the null vectors `v_k(d)` in the parameters' units, each of unit norm);
      `probes_active` says which points were probed because `d` was rank deficient (an
      element of `D_sing`, as Algorithm 1 asks).
    - `kinds`: per direction of `reference`, `"primary"` (stage S1) or `"twin"` (S2).
    - `rank_rule`, `rref_tol`: the decision rules used.

    **Properties:** `identifiable`, `non_identifiable` (at `theta`: the union of the rref
    pivots over all directions), `isolated`, `pairwise` (`{name: partners}`),
    `confirmed` (non-identifiable at `theta` and at every active probe whose solves
    succeeded; `n_failed_probes` counts the others),
    `identifiable_at_theta` (full rank in every direction).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    reference: Probe
    probes: tuple[Probe, ...]
    probes_active: tuple[Array, ...]
    kinds: tuple[str, ...] = eqx.field(static=True)
    rank_rule: AbstractRankRule = eqx.field(static=True)
    rref_tol: float = eqx.field(static=True)

    def _mask(self):
        if self.reference.rank.ndim != 1:
            raise ValueError("A batch of L-SERC results: index one, or use ji.reduce_parameters.")
        return np.asarray(self.reference.non_identifiable)

    @property
    def non_identifiable(self) -> tuple[str, ...]:
        m = self._mask()
        return tuple(n for n, b in zip(self.names, m) if b)

    @property
    def identifiable(self) -> tuple[str, ...]:
        m = self._mask()
        return tuple(n for n, b in zip(self.names, m) if not b)

    @property
    def identifiable_at_theta(self) -> bool:
        """L-SERC identifiable: full rank in every direction tested (Definition 2)."""
        r = np.asarray(self.reference.rank)
        return bool(np.all(r[np.asarray(self.reference.ok)] == len(self.names)))

    @property
    def pairwise(self) -> dict[str, tuple[str, ...]]:
        """Pivot parameters whose rref row has other nonzeros, with those partners."""
        pairs = np.asarray(self.reference.pairs)
        m = self._mask()
        out = {}
        for i, n in enumerate(self.names):
            if m[i] and pairs[i].any():
                out[n] = tuple(self.names[j] for j in np.flatnonzero(pairs[i]))
        return out

    @property
    def isolated(self) -> tuple[str, ...]:
        pw = self.pairwise
        return tuple(n for n in self.non_identifiable if n not in pw)

    @property
    def confirmed(self) -> tuple[str, ...]:
        """Non-identifiable at `theta` and at every active singularity probe whose solves
        all succeeded (a probe whose solve failed in some direction says nothing: see
        `n_failed_probes`)."""
        self._mask()  # (one result, not a batch)
        m = np.asarray(confirmed_mask(self.reference, self.probes, self.probes_active))
        return tuple(n for n, b in zip(self.names, m) if b)

    @property
    def n_failed_probes(self) -> int:
        """Active singularity probes where the sensitivity solve failed in some direction
        (left out of `confirmed`)."""
        return sum(
            int(np.sum(np.asarray(a, bool) & ~np.all(np.asarray(p.ok), axis=-1)))
            for p, a in zip(self.probes, self.probes_active)
        )

    def direction_report(self, i: int) -> dict:
        """What direction `i` found: rank, singular values, pivots and partners."""
        ref = self.reference
        piv = np.asarray(ref.pivots[i])
        part = np.asarray(ref.partners[i])
        return {
            "direction": np.asarray(ref.directions[i]).tolist(),
            "kind": self.kinds[i],
            "rank": int(ref.rank[i]),
            "singular_values": np.asarray(ref.singular_values[i]).tolist(),
            "non_identifiable": [n for n, b in zip(self.names, piv) if b],
            "partners": {
                self.names[c]: [self.names[j] for j in np.flatnonzero(part[c])]
                for c in np.flatnonzero(piv)
                if part[c].any()
            },
            "ok": bool(ref.ok[i]),
        }

    def to_dict(self) -> dict:
        return {
            "identifiable": list(self.identifiable),
            "non_identifiable": list(self.non_identifiable),
            "isolated": list(self.isolated),
            "pairwise": {k: list(v) for k, v in self.pairwise.items()},
            "confirmed": list(self.confirmed),
            "identifiable_at_theta": self.identifiable_at_theta,
            "rank_rule": self.rank_rule.describe(),
            "directions": [self.direction_report(i) for i in range(len(self.kinds))],
        }

    def __repr__(self) -> str:
        if self.reference.rank.ndim != 1:
            return f"LSERCResult(batch of {self.reference.rank.shape[0]})"
        r = np.asarray(self.reference.rank)
        lines = [
            f"L-SERC test, {len(self.kinds)} directions "
            f"({self.kinds.count('primary')} primary, {self.kinds.count('twin')} twin), "
            f"rank rule: {self.rank_rule.describe()}",
            f"  ranks by direction : {r.tolist()} of p = {len(self.names)}",
            f"  identifiable       : {', '.join(self.identifiable) or '(none)'}",
            f"  non-identifiable   : {', '.join(self.non_identifiable) or '(none)'}",
        ]
        if self.non_identifiable:
            lines.append(f"    isolated         : {', '.join(self.isolated) or '(none)'}")
            for n, ps in self.pairwise.items():
                lines.append(f"    pairwise         : {n} with {', '.join(ps)}")
        if self.probes:
            failed = self.n_failed_probes
            lines.append(
                f"  singularity probes : "
                f"{sum(int(np.sum(np.asarray(a))) for a in self.probes_active)} active"
                + (f" ({failed} failed, left out)" if failed else "")
                + f"; confirmed non-identifiable: {', '.join(self.confirmed) or '(none)'}"
            )
        if not np.all(np.asarray(self.reference.ok)):
            lines.append("  WARNING: the sensitivity solve failed in some directions")
        return "\n".join(lines)


@eqx.filter_jit
def _lserc_jit(target, theta, D, integrator, method: LSERC, throw):
    ref, probes, active, solved = lserc_tree(target, theta, D, integrator, method)
    ok0 = jax.tree.map(lambda x: x[0], solved)
    if throw:  # (False, or the error mode: `run_kernel`)
        ref = eqx.tree_at(lambda r: r.rank, ref, target.raise_if_failed(ref.rank, ok0))
    return ref, tuple(probes), tuple(active), ok0


def _warn_near_threshold(rank, ref: Probe, p: int, kinds) -> None:
    """One warning naming the directions whose rank decision lies within a factor 10 of
    the threshold (host-side; nothing under a trace)."""
    sv = ref.singular_values
    if isinstance(sv, jax.core.Tracer) or sv.ndim != 2:
        return
    sv, ok = np.asarray(sv), np.asarray(ref.ok)
    near = [
        (i, msg)
        for i in range(sv.shape[0])
        if ok[i]
        for flag, msg in [near_threshold(rank, sv[i], (sv.shape[1], p))]
        if flag
    ]
    if near:
        i, msg = near[0]
        warnings.warn(
            f"lserc: the rank decision is close to the threshold in {len(near)} of "
            f"{sv.shape[0]} directions (first: direction {i}, {kinds[i]}, {msg}); a change "
            "of the tolerance or more accurate sensitivities may change it.",
            NearThresholdWarning,
            stacklevel=3,
        )


def lserc(
    model: AbstractModel | Problem,
    theta: ArrayLike | dict | Sequence | None = None,
    times: ArrayLike | Sequence | None = None,
    *,
    method: LSERC = LSERC(),
    integrator: Integrator | None = None,
    throw: bool | None = None,
) -> LSERCResult:
    """The L-SERC identifiability test, Algorithm 1 of Abdelfattah, Stechlinski & Eisa
    (2024): for smooth or nonsmooth ODE and DAE models; for smooth ones it is the SERC
    test of Stigter & Molenaar.

    For each probing direction `d` the L-SERC matrix `Upsilon_d` (the L-sensitivities
    with `M = [d I]`, eq. 12) is built; where its rank is below `p`, the pivot columns of
    `rref(V_r^T)` (eqs. 14-15, 22-23) are the locally non-identifiable parameters, each
    isolated or pairwise with the other nonzeros of its row.

    **Arguments:** `model` (or a `ji.Problem`, of one experiment or several, with log
    scales, steady states or pre-equilibration: through its measured outputs, every
    experiment's stacked, as functions of its parameters; `theta` is then on the
    estimation scales, and the probes' points on the linear scale; a problem that
    estimates noise parameters is refused: they enter no output), `theta` (default
    nominal), `times` (default `model.times`; a problem holds its own),
    `method` (a `ji.LSERC` with the probing directions, twin and singularity probing,
    rank rule and rref tolerance), `integrator`, `throw`.

    **Returns:** an `LSERCResult`.

    **Example:**

    ```python
    m = ji.models.load("nonsmooth_dae_example")
    primary = ji.LSERC(directions=[[1.0, 0, 0, 0]], twin=0, singular=0)
    res = ji.lserc(m, m.THETA_STAR, method=primary)
    res.non_identifiable, res.pairwise   # ('theta2', 'theta3'), {'theta3': ('theta4',)}
    ```
    """
    model, outputs = outputs_of(model, times, method, "ji.lserc")
    params = outputs.owner.parameters
    theta = outputs.linear(check_theta(outputs.owner, theta))
    D, kinds = probe_directions(params.p, method)
    integrator = model.integrator if integrator is None else integrator
    method = at_accuracy(method, model, integrator, theta.dtype)
    rank = method.rank
    ref, probes, active, _ = run_kernel(
        _lserc_jit,
        outputs,
        theta,
        jnp.asarray(D),
        integrator,
        method,
        throw=throw,
        message=lambda out: outputs.message(out[3]),
    )
    _warn_near_threshold(rank, ref, params.p, kinds)
    return LSERCResult(
        names=params.names,
        reference=ref,
        probes=probes,
        probes_active=active,
        kinds=kinds,
        rank_rule=rank,
        rref_tol=method.rref_tol,
    )
