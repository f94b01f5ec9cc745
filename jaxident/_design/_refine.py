"""The times of the chosen measurements that are free in a window, refined together by
gradient. Each chosen measurement is its own experiment of the candidate problem, at
its own time; one solve gives its row `g` and the row's time derivative `dg/dt`
(`_candidates`), and the criterion's gradient with respect to the rows (`jax.grad`
through the singular value decomposition) contracted with `dg/dt` is the exact
gradient with respect to the times. A bounded quasi-Newton method (L-BFGS-B, Byrd et
al. 1995) keeps each time inside its window."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._candidates import candidate_problem
from ._design import _factor, Pool, rows, Scorer, Setup


def pick_blocks(pool: Pool, picks, times):
    """One block per chosen measurement, at its own time."""
    out = []
    for i, t in zip(picks, times):
        b = pool.blocks[pool.block[i]]
        out.append(eqx.tree_at(lambda b: b.times, b, np.asarray([t], dtype=float)))
    return out


def chosen_rows(problem, pool: Pool, picks, times, thetas, integrator):
    """The rows `(S, j, q)` of the chosen measurements at `times`, their time
    derivatives, and the predicted values `(S, j)`."""
    blocks = pick_blocks(pool, picks, times)
    cp, where = candidate_problem(problem, pool.model, blocks)
    G, dG, y = rows(cp, where, pool.model, blocks, jnp.asarray(thetas), integrator)
    return tuple(np.concatenate(part, axis=1) for part in (G, dG, y))


@eqx.filter_jit
def _value(scorer: Scorer, R, G, summary):
    values = jax.vmap(lambda R_s, G_s, u: scorer.one(R_s, G_s, u)[1])(R, G, scorer.units)
    return summary(values)


def windows(pool: Pool, picks):
    """Each pick's window, or `None` where its candidate's times are fixed."""
    return [pool.candidates[pool.owner[pool.block[i]]].window for i in picks]


def refine(setup: Setup, picks, summary):
    """The chosen times with those free in a window moved to a local optimum of the
    summarised criterion (over the scored samples). Returns `(times, found)`
    (`found`: SciPy's result, or `None` where no time is free)."""
    pool = setup.pool
    times = pool.time[np.asarray(picks)].astype(float)
    win = windows(pool, picks)
    free = np.asarray([w is not None for w in win])
    if not free.any():
        return times, None
    sel = np.flatnonzero(setup.scored)
    R = jnp.asarray(_factor([setup.base[i] for i in sel]))
    thetas = setup.thetas[sel]
    grad_fn = jax.value_and_grad(lambda G: _value(setup.scorer, R, G, summary))

    def objective(t_free):
        t = times.copy()
        t[free] = t_free
        G, dG, _ = chosen_rows(setup.problem, pool, picks, t, thetas, setup.integrator)
        v, dv = grad_fn(jnp.asarray(G))
        if not np.isfinite(float(v)):
            return np.inf, np.zeros(int(free.sum()))
        dt = np.einsum("sjq,sjq->j", np.asarray(dv), dG)
        return -float(v), -dt[free]

    import scipy.optimize

    bounds = [w for w in win if w is not None]
    found = scipy.optimize.minimize(
        objective, times[free], jac=True, method="L-BFGS-B", bounds=bounds,
        options=dict(ftol=0.0, gtol=1e-10, maxiter=500),
    )  # fmt: skip
    out = times.copy()
    out[free] = found.x
    return out, found
