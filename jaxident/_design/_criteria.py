"""What a design maximises, after the rank: the practical criteria on the Fisher
information of the subspace the measurements resolve, and how a criterion over
parameter samples is summarised (robust design).

Each criterion is a function of the singular values `s` (descending) and right
singular vectors `V` of the weighted sensitivity matrix in the report's units (each
column times its parameter's unit: 1 on a log scale, the box width on a linear one),
of which the first `r` (the rank the rule resolves) count: the Fisher information of
the resolved subspace is `V_r diag(s_r^2) V_r^T`. Larger is better.
"""

import abc
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int


class AbstractCriterion(eqx.Module):
    """A design criterion: larger is better."""

    @abc.abstractmethod
    def __call__(
        self, s: Float[Array, " q"], V: Float[Array, "q q"], r: Int[Array, ""], units
    ) -> Float[Array, ""]:
        """The criterion of the resolved subspace (the first `r` of `s` and `V`'s
        columns); `units` `(q,)`: each parameter's unit, by which the columns were
        multiplied."""

    def describe(self, names: Sequence[str]) -> str:
        return type(self).__name__


def _resolved(s, r):
    index = jnp.arange(s.shape[0])
    return index < jnp.asarray(r).astype(index.dtype)


class DOptimal(AbstractCriterion):
    """`log det` of the Fisher information on the resolved subspace (the sum of
    `log s_i^2` over it): the volume of the confidence ellipsoid shrinks as it grows.
    Free of the parameters' units where the rank is full (Atkinson, Donev & Tobias
    2007, ch. 10)."""

    def __call__(self, s, V, r, units):
        keep = _resolved(s, r)
        return jnp.sum(jnp.where(keep, 2.0 * jnp.log(jnp.where(keep, s, 1.0)), 0.0))

    def describe(self, names):
        return "D-optimal (log det of the Fisher information)"


class AOptimal(AbstractCriterion):
    """Minus the summed variances of `names` (default: every parameter) on their
    estimation scales, each in its unit (decades squared on a log10 scale), from the
    pseudo-inverse of the resolved Fisher information: the predicted marginal
    standard deviations of the parameters a modeller asked for. `index`: their
    positions among the parameters (set by `ji.design` from `names`; give `names`)."""

    names: tuple[str, ...] | None = eqx.field(static=True)
    index: tuple[int, ...] | None = eqx.field(static=True)

    def __init__(self, names: Sequence[str] | None = None, index: Sequence[int] | None = None):
        self.names = None if names is None else tuple(str(n) for n in names)
        self.index = None if index is None else tuple(int(i) for i in index)

    def __call__(self, s, V, r, units):
        keep = _resolved(s, r)
        inv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0) ** 2, 0.0)
        var = jnp.einsum("ij,j,ij->i", V, inv, V)
        if self.index is not None:
            var = var[jnp.asarray(self.index)]
        return -jnp.sum(var)

    def describe(self, names):
        which = "every parameter" if self.names is None else ", ".join(self.names)
        return f"A-optimal (the summed variances of {which})"


class EOptimal(AbstractCriterion):
    """`log` of the smallest eigenvalue of the resolved Fisher information: the
    longest axis of the confidence ellipsoid shrinks as it grows."""

    def __call__(self, s, V, r, units):
        last = s[jnp.maximum(r - 1, 0)]
        return 2.0 * jnp.log(jnp.where(r > 0, last, 1.0))

    def describe(self, names):
        return "E-optimal (the smallest eigenvalue of the Fisher information)"


def bound(criterion: AbstractCriterion, names: Sequence[str]) -> AbstractCriterion:
    """`criterion` with the indices of its parameter names resolved."""
    if isinstance(criterion, AOptimal) and criterion.names is not None:
        unknown = [n for n in criterion.names if n not in names]
        if unknown:
            raise ValueError(
                f"AOptimal names {unknown}, which are not parameters of the problem {list(names)}."
            )
        return AOptimal(tuple(criterion.names), tuple(names.index(n) for n in criterion.names))
    if not isinstance(criterion, AbstractCriterion):
        raise TypeError(
            f"criterion must be ji.DOptimal(), ji.AOptimal(names) or ji.EOptimal(), got "
            f"{type(criterion).__name__}."
        )
    return criterion


class AbstractSummary(eqx.Module):
    """How a criterion over parameter samples becomes one number (robust design)."""

    @abc.abstractmethod
    def __call__(self, values: Float[Array, "samples ..."]) -> Float[Array, "..."]:
        """Over the first axis."""


class Average(AbstractSummary):
    """The mean over the samples (a Bayesian, or ED-, design over the sampled box;
    Pronzato & Walter 1985)."""

    def __call__(self, values):
        return jnp.mean(values, axis=0)


class WorstCase(AbstractSummary):
    """The worst sample's (a maximin design)."""

    def __call__(self, values):
        return jnp.min(values, axis=0)
