"""The result of `ji.analyze`: the report (text, JSON, figure) and its dependent
groups."""

import dataclasses
import math
import os

import equinox as eqx
import numpy as np

from .. import plot
from .._linalg._selection import Selection
from .._problem._scale import Scale
from .._runtime._files import strict_json


class Group(eqx.Module):
    """Parameters that move together in the null space: `names`, the null vectors
    restricted to them (`directions`, columns, on the log scale of each parameter),
    what the data do determine about them (`combinations`, as text), and whether the
    group is a scaling symmetry (`monomial`: the combinations are monomials, valid
    everywhere; else linear combinations valid near `theta`), with the integer
    `exponents` of the monomials (one row per combination) when it is.

    `structural`: whether its directions are a structural non-identifiability (exact,
    or null at every point of a sample of the box), else weak: a real but tiny effect,
    structurally identifiable (a parameter with a tiny effect alone is a group of one);
    `size`: its largest null direction's singular value relative to the largest (for
    a parameter alone, its column's norm relative to the largest); `evidence`: why, in
    words."""

    names: tuple[str, ...]
    directions: np.ndarray
    combinations: tuple[str, ...]
    monomial: bool
    exponents: np.ndarray | None = None
    structural: bool = True
    size: float = math.nan
    evidence: str = ""


class Report(eqx.Module):
    """The identifiability report of `ji.analyze` (print it, `to_dict()`, `to_json()`,
    `plot()`).

    **Fields:**

    - `name`, `names` (the parameters), `theta` (on the estimation scale), `scales`.
    - `singular_values`: of the equilibrated, noise-weighted sensitivity matrix,
      relative to the largest; `rank`, `rank_rule`, `margin` (`sigma_k / sigma_{k+1}`,
      inf at full rank), `near_threshold` (a sentence when the decision would change if
      the threshold moved by a factor 10, else `None`).
    - `no_effect`: parameters whose columns (on the estimation scale, times the box
      width on a linear one: `units`) are below the rank rule's threshold: they do not
      change the outputs.
    - `non_identifiable`: structurally non-identifiable: those, and every parameter
      whose equilibrated column lies within the rank rule's threshold of the span of the
      others (`distance`, in units of that threshold, is at most 1), decided by rank
      (`ji.linalg.dependence`), where the direction is structural (`evidence`, per
      parameter: exact, or null at every point of a Latin-hypercube sample of the box);
      `groups`: the latter in connected sets of minimal dependent sets (`Group`), with
      their null directions and identifiable combinations; `null_directions`: every
      null direction on the log scale of each parameter (one per no-effect parameter,
      one per pivot of a dependent set: `p - rank` of them where every decision fits).
    - `weakly_identifiable`: parameters in a null direction at the rank rule's threshold
      whose effect is real (far above the accuracy of the sensitivities, or resolved
      elsewhere in the box): structurally identifiable, not from data of this precision;
      their groups are those with `structural` off, their standard deviations finite.
      `checked`: what telling the two apart cost (`finer`: the rtol of the re-solve,
      `points`: points of the box solved and tried).
    - `undecided`: parameters whose decision was within a factor 10 of its threshold
      on the most accurate sensitivities computed (`resolved_rtol`: the tolerance they
      were re-solved at, negative where that solve failed, `None` where none was
      needed; `accuracy`: of the sensitivities decided on). They are neither
      identifiable nor non-identifiable at this accuracy.
    - `identifiable`: the rest.
    - `selection`: the column subset selection (`ji.select_parameters`) with its metrics.
    - `std`: the marginal standard deviation of each parameter on its estimation scale,
      from the pseudo-inverse of the Fisher information on the subspace the rank
      resolves and the weak directions (every identifiable combination free to move, not
      conditional on fixing the non-identifiable parameters); inf for the structurally
      non-identifiable parameters.
      `decades`: the same in decades (log10 units; NaN for a linear-scale parameter at
      or within 1e-9 of its box width of 0); `threshold` and
      `practically_non_identifiable` (identifiable parameters above it);
      `weak_directions`: `(1 / std, std, direction)` of the eigen-directions of the
      marginal covariance in decades whose standard deviation exceeds the threshold
      (each with its largest component positive).
    - `noise_model`: whether the rows were weighted by a noise model (else sigma = 1);
      `n_data`: the number of rows (observed data).
    - `profiles`: `{name: ji.Profile}` of the profiled parameters (`ji.analyze(...,
      profile=...)`); `intervals`: `{name: ji.LikelihoodInterval}`
      (`with_intervals`); `optima`: a multi-start fit's distinct optima, `(nll, fits,
      theta)` each, and `locally_identifiable`: the parameters that differ between
      them (`with_fit`).
    """

    name: str
    names: tuple[str, ...]
    theta: np.ndarray
    scales: tuple[str, ...]
    singular_values: np.ndarray
    rank: int
    rank_rule: str
    margin: float
    non_identifiable: tuple[str, ...]
    groups: tuple[Group, ...]
    selection: Selection
    std: np.ndarray
    threshold: float
    weak_directions: tuple
    noise_model: bool
    n_data: int
    near_threshold: str | None = None
    profiles: dict = eqx.field(default_factory=dict)
    no_effect: tuple[str, ...] = ()
    undecided: tuple[str, ...] = ()
    units: np.ndarray | None = None
    accuracy: float | None = None
    resolved_rtol: float | None = None
    distance: np.ndarray | None = None
    null_directions: tuple = ()
    intervals: dict = eqx.field(default_factory=dict)
    optima: tuple = ()
    locally_identifiable: tuple[str, ...] = ()
    weakly_identifiable: tuple[str, ...] = ()
    evidence: dict = eqx.field(default_factory=dict)
    checked: dict = eqx.field(default_factory=dict)

    def with_fit(self, fit) -> "Report":
        """This report with a multi-start fit's distinct optima (`ji.Estimate.optima`,
        within the 95% chi-square threshold of the best) and the parameters that differ
        between them (`locally_identifiable`: identifiable only locally from these data,
        the Wald and profile intervals at one optimum leaving out an equally good fit),
        printed with the practical answer."""
        found = fit.optima()
        return dataclasses.replace(
            self,
            optima=tuple((o.nll, o.fits, dict(zip(fit.names, o.theta.tolist()))) for o in found),
            locally_identifiable=tuple(fit.locally_identifiable),
        )

    def with_intervals(self, found) -> "Report":
        """This report with the profile-likelihood intervals `found`
        (`ji.likelihood_intervals` at its `theta`, `{name: LikelihoodInterval}`): each
        is printed beside its parameter, and a parameter with one is practically
        non-identifiable where the data do not bound it on both sides (an end open, set
        by a partner's bound, or failed), whatever its standard deviation."""
        return dataclasses.replace(self, intervals={**self.intervals, **dict(found)})

    @property
    def rse(self) -> np.ndarray:
        """Each parameter's relative standard error in percent: `100 ln(10)` times
        its standard deviation in decades (to first order, the relative standard error
        of its linear value, the pharmacometrician's measure, flagged above 30-50%)."""
        return 100 * math.log(10) * self.decades

    def profile_confirms(self, name: str) -> bool | None:
        """Whether the profile of `name` (from `ji.analyze(..., profile=True)`) stays
        within the 95% chi-square bound (twice the cost within 3.84 of its minimum) over
        the whole range, i.e. confirms that the data do not determine it there; `None`
        without a profile or when every fit on it failed."""
        prof = self.profiles.get(name)
        if prof is None or not np.any(prof.ok):
            return None
        c = np.asarray(prof.cost)[np.asarray(prof.ok)]
        return bool(2 * (c.max() - c.min()) < 3.84)

    @property
    def identifiable(self) -> tuple[str, ...]:
        """The parameters neither structurally non-identifiable, weak nor undecided."""
        out = set(self.non_identifiable) | set(self.undecided) | set(self.weakly_identifiable)
        return tuple(n for n in self.names if n not in out)

    @property
    def linear(self) -> np.ndarray:
        """`theta` on the linear scale."""
        return np.array([Scale(sc).inverse(float(t)) for t, sc in zip(self.theta, self.scales)])

    @property
    def decades(self) -> np.ndarray:
        return decades(self.std, self.theta, self.scales, self.units)

    @property
    def practically_non_identifiable(self) -> tuple[str, ...]:
        """The identifiable parameters the data do not determine in practice: where a
        profile-likelihood interval was computed (`with_intervals`), those it does not
        bound on both sides; else those whose standard deviation exceeds `threshold`
        decades (one decade, the default, is a relative standard error of 230%: give a
        smaller one, 0.13-0.2 decades, for the 30-50% of pharmacometrics)."""
        d = self.decades
        ident = set(self.identifiable)

        def flagged(i, n):
            iv = self.intervals.get(n)
            return (not iv.bounded) if iv is not None else bool(d[i] > self.threshold)

        return tuple(n for i, n in enumerate(self.names) if n in ident and flagged(i, n))

    @property
    def combinations(self) -> tuple[str, ...]:
        """What the data determine about the structurally non-identifiable groups."""
        return tuple(c for g in self.groups if g.structural for c in g.combinations)

    def to_dict(self) -> dict:
        def num(x):
            x = float(x)
            if math.isnan(x):
                return None
            return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")

        return {
            "name": self.name,
            "parameters": list(self.names),
            "theta": [num(x) for x in self.theta],
            "scales": list(self.scales),
            "rank": self.rank,
            "n_parameters": len(self.names),
            "rank_rule": self.rank_rule,
            "margin": num(self.margin),
            "near_threshold": self.near_threshold,
            "singular_values": [num(x) for x in self.singular_values],
            "accuracy": None if self.accuracy is None else num(self.accuracy),
            "resolved_rtol": None if self.resolved_rtol is None else num(self.resolved_rtol),
            "no_effect": list(self.no_effect),
            "non_identifiable": list(self.non_identifiable),
            "evidence": dict(self.evidence),
            "weakly_identifiable": list(self.weakly_identifiable),
            "undecided": list(self.undecided),
            "distance": None
            if self.distance is None
            else {n: num(d) for n, d in zip(self.names, self.distance)},
            "null_directions": [_direction_dict(self.names, v) for v in self.null_directions],
            "std_kind": "marginal",
            "groups": [
                {
                    "parameters": list(g.names),
                    "null_directions": np.asarray(g.directions).T.tolist(),
                    "identifiable_combinations": list(g.combinations),
                    "monomial": bool(g.monomial),
                    "structural": bool(g.structural),
                    "size": num(g.size),
                    "evidence": g.evidence,
                }
                for g in self.groups
            ],
            "identifiable": list(self.identifiable),
            "checked": {
                "finer_rtol": self.checked.get("finer"),
                "points": list(self.checked.get("points", (0, 0))),
            },
            "n_data": self.n_data,
            "selection": self.selection.to_dict(),
            "noise_model": self.noise_model,
            "std": {n: num(s) for n, s in zip(self.names, self.std)},
            "std_decades": {n: num(s) for n, s in zip(self.names, self.decades)},
            "threshold_decades": self.threshold,
            "practically_non_identifiable": list(self.practically_non_identifiable),
            "rse_percent": {n: num(r) for n, r in zip(self.names, self.rse)},
            "linear": {n: num(v) for n, v in zip(self.names, self.linear)},
            "intervals": {n: iv.to_dict() for n, iv in self.intervals.items()},
            "optima": [
                {"nll": nll, "fits": fits, "theta": theta} for nll, fits, theta in self.optima
            ],  # fmt: skip
            "locally_identifiable": list(self.locally_identifiable),
            "profiles": {
                n: {**prof.to_dict(), "confirms": self.profile_confirms(n)}
                for n, prof in self.profiles.items()
            },
            "weak_directions": [
                {
                    "singular_value": num(s),
                    "std": num(d),
                    "direction": _direction_dict(self.names, v),
                }
                for s, d, v in self.weak_directions
            ],
        }

    def to_json(self, path: str | os.PathLike | None = None, **kwargs) -> str:
        text = strict_json(self.to_dict(), indent=2, **kwargs)
        if path is not None:
            with open(path, "w") as fh:
                fh.write(text)
        return text

    def __str__(self) -> str:
        lines = [f"Identifiability of {self.name}: {len(self.names)} parameters"]
        lines += self._structural_lines() + self._selection_lines() + self._practical_lines()
        return "\n".join(lines)

    def _structural_lines(self) -> list[str]:
        """The rank and its margin, close calls, and the structural verdicts."""
        p = len(self.names)
        lines = []
        if self.rank == p:
            margin = "full rank"
        elif not math.isfinite(self.margin):
            margin = "no null direction among the columns with an effect"
        else:
            margin = f"gap {self.margin:.3g}"
        lines.append(f"  numerical rank {self.rank} of {p} ({self.rank_rule}; {margin})")
        if self.near_threshold:
            resolved = self.resolved_rtol is not None and self.resolved_rtol > 0
            lines.append(
                f"  CLOSE CALL: {self.near_threshold}: a threshold 10 times larger or smaller "
                "would change the rank"
                + (
                    ""
                    if resolved
                    else "; more accurate sensitivities (integrator=ji.Integrator(rtol=...), "
                    "--solver-rtol) may change it"
                )
            )
        if self.resolved_rtol is not None:
            if self.resolved_rtol > 0:
                lines.append(
                    "  decisions within a factor 10 of their thresholds were taken again on "
                    f"sensitivities solved at rtol = {self.resolved_rtol:.0e} (same thresholds)"
                )
            else:
                lines.append(
                    "  decisions within a factor 10 of their thresholds could not be taken again: "
                    f"the solve at rtol = {-self.resolved_rtol:.0e} failed"
                )
        if self.no_effect:
            lines.append(
                f"  {len(self.no_effect)} without effect on the outputs (column below the "
                f"threshold): {', '.join(self.no_effect)}"
            )
            lines += _evidence_lines({n: self.evidence.get(n, "") for n in self.no_effect})
        structural = [g for g in self.groups if g.structural]
        dependent = [n for n in self.non_identifiable if n not in self.no_effect]
        if dependent:
            d = sum(g.directions.shape[1] for g in structural)
            lines.append(
                f"  {len(dependent)} structurally non-identifiable (in {d} null direction(s) "
                "with others): " + ", ".join(dependent)
            )
        for g in structural:
            d = g.directions.shape[1]
            head = f"    {{{', '.join(g.names)}}}"
            if not g.combinations:
                lines.append(f"{head}: no combination of them is identifiable")
            elif g.monomial or len(g.combinations) <= 2:
                lines.append(f"{head}: identifiable only {'; '.join(g.combinations)}")
            else:
                lines.append(
                    f"{head}: {d} non-identifiable direction(s), {len(g.combinations)} "
                    "identifiable linear combinations of the log parameters near theta "
                    "(Report.groups)"
                )
            if g.evidence:
                lines.append(f"      ({g.evidence})")
        lines += self._weak_lines()
        if self.undecided:
            at = (
                "" if self.accuracy is None else f" (sensitivities accurate to {self.accuracy:.0e})"
            )
            lines.append(
                f"  UNDECIDED at this accuracy{at}: {', '.join(self.undecided)}; neither "
                "identifiable nor non-identifiable (a decision within a factor 10 of its "
                "threshold)"
            )
        if self.rank == p and not self.no_effect and not self.undecided:
            lines.append("  every parameter is structurally identifiable (locally, here)")
        elif not self.non_identifiable and not self.undecided:
            lines.append(
                "  no structural non-identifiability: every parameter is structurally "
                "identifiable (locally, here), the weak ones not from data of this precision"
            )
        return lines

    def _weak_lines(self) -> list[str]:
        """The weak directions at the rank threshold: real but tiny effects, with the
        data precision they would need."""
        weak = [g for g in self.groups if not g.structural]
        if not weak:
            return []
        lines = [
            f"  {len(self.weakly_identifiable)} weakly identifiable (in a null direction at "
            "the threshold, but a real effect: structurally identifiable): "
            + ", ".join(self.weakly_identifiable)
        ]
        dec = dict(zip(self.names, self.decades))
        for g in weak:
            head = f"    {{{', '.join(g.names)}}}" + (" together" if len(g.names) > 1 else "")
            text = (
                f"{head}: a real but tiny effect, {g.size:.2g} of the largest; structurally "
                "identifiable, not from data of this precision"
            )
            worst = max((dec[n] for n in g.names if math.isfinite(dec[n])), default=math.nan)
            if self.noise_model and worst > self.threshold:
                text += (
                    f" (data {worst / self.threshold:.0e} times more precise would determine "
                    f"it to {self.threshold:g} decade(s))"
                )
            elif self.noise_model and math.isfinite(worst):
                text += f" (these data determine it to {worst:.2g} decades)"
            if g.combinations:
                text += f"; the data determine {'; '.join(g.combinations)}"
            lines += [text, f"      ({g.evidence})"]
        return lines

    def _selection_lines(self) -> list[str]:
        """The column subset selection and its metrics."""
        p = len(self.names)
        lines = []
        sel = self.selection.to_dict()

        def fmt(v):
            return "n/a" if v is None else f"{v:.3g}"

        how = "k chosen by hand" if self.selection.rank_rule is None else "at the numerical rank"
        lines.append(
            f"  column subset selection ({type(self.selection.method).__name__}, "
            f"k={sel['k']}, {how}): " + ", ".join(sel["identifiable"])
        )
        for g in self.selection.groups:
            lines.append(f"    {g}")
        g2 = fmt(sel["gamma2"])
        if sel["gamma2"] is None:
            g2 += " (k = p)" if sel["k"] == p else " (sigma_(k+1) at rounding level)"
        lines.append(f"    gamma1 {fmt(sel['gamma1'])}, gamma2 {g2}, tau {fmt(sel['tau'])}")
        return lines

    def _practical_lines(self) -> list[str]:
        """The marginal standard deviations, profiles and weak directions."""
        p = len(self.names)
        lines = []
        if len(self.optima) > 1:
            local = ", ".join(self.locally_identifiable) or "none"
            lines.append(
                f"  {len(self.optima)} distinct optima of the fits within 1.92 of the best "
                f"-log L (95%): identifiable only locally from these data: {local}"
            )
            for k, (nll, fits, theta) in enumerate(self.optima):
                values = ", ".join(f"{n} {theta[n]:.4g}" for n in self.locally_identifiable)
                lines.append(f"    {k + 1}: -log L {nll:.6g}, {fits} fit(s): {values}")
        if self.n_data < p:
            lines.append(
                f"  only {self.n_data} data for {p} parameters: at most {self.n_data} "
                "can be identifiable"
            )
        noise = "noise model" if self.noise_model else "sigma = 1 (no noise model given)"
        by = "; flagged by the profile where an interval was computed" if self.intervals else ""
        lines.append(
            f"  practical identifiability ({noise}; marginal standard deviations, every "
            f"identifiable combination free; threshold {self.threshold:g} decade(s), an "
            f"RSE of {100 * math.log(10) * self.threshold:.0f}%{by}):"
        )
        if not self.noise_model:
            lines.append(
                "    (every datum with sigma = 1: the standard deviations scale with the true "
                "noise level; give sigma= or a problem with its noise model)"
            )
        w = max(len(n) for n in self.names)
        dec, rse, lin = self.decades, self.rse, self.linear
        practical = set(self.practically_non_identifiable)
        for i, n in enumerate(self.names):
            flag = ""
            if n in self.no_effect:
                flag = "  no effect"
            elif n in self.non_identifiable:
                flag = "  non-identifiable"
            elif n in self.undecided:
                flag = "  UNDECIDED"
            elif n in self.weakly_identifiable:
                flag = "  weak"
            elif n in practical:
                flag = "  PRACTICALLY NON-IDENTIFIABLE"
            if np.isfinite(dec[i]):
                size = f"{float(dec[i]):.3g} decades, RSE {float(rse[i]):.3g}%"
            elif np.isinf(self.std[i]):
                size = "inf decades"
            else:
                size = "near 0: absolute, no decades"
            value = f"{float(self.theta[i]):>11.4g}"
            if self.scales[i] != "lin":
                value += f" (= {float(lin[i]):.4g})"
            lines.append(
                f"    {n:<{w}}  {self.scales[i]:>5} {value}  std {float(self.std[i]):.3g} "
                f"({size}){flag}"
            )
            iv = self.intervals.get(n)
            if iv is not None:
                lines.append(f"    {'':<{w}}  {100 * iv.level:g}% profile interval "
                             f"{iv.ends(4)}")  # fmt: skip
        verdict = {True: "confirmed: flat", False: "NOT confirmed: it rises", None: "failed"}
        for n, prof in self.profiles.items():
            ok = np.asarray(prof.ok)
            c = np.asarray(prof.cost)[ok]
            rise = 2 * (c.max() - c.min()) if c.size else float("nan")
            x = np.asarray(prof.values)
            lines.append(
                f"    profile of {n} over [{x.min():.4g}, {x.max():.4g}]: "
                f"{verdict[self.profile_confirms(n)]} (2 delta cost {rise:.3g}, "
                f"{int(ok.sum())}/{ok.size} fits)"
            )
        for s, d, v in self.weak_directions:
            lines.append(
                f"    weak direction (sigma {s:.3g}, std {d:.3g}): {_direction_text(self.names, v)}"
            )
        return lines

    def __repr__(self) -> str:
        return self.__str__()

    def plot(self, **kwargs):
        """The report as a figure (`ji.plot.report`): the singular values with the rank
        marked, and each parameter's marginal standard deviation in decades against the
        threshold. Returns the matplotlib figure."""
        return plot.report(self, **kwargs)


def _evidence_lines(evidence: dict) -> list[str]:
    """`(names: evidence)` lines, one per distinct evidence."""
    by: dict[str, list[str]] = {}
    for n, e in evidence.items():
        if e:
            by.setdefault(e, []).append(n)
    return [f"      ({', '.join(ns)}: {e})" for e, ns in by.items()]


def _direction_dict(names, v) -> dict:
    return {n: float(x) for n, x in zip(names, v) if abs(x) > 1e-3 * np.abs(v).max()}


def _direction_text(names, v) -> str:
    big = np.abs(v).max()
    return " ".join(f"{x:+.2f} {n}" for n, x in zip(names, v) if abs(x) > 0.05 * big)


def decades(std, theta, scales, units=None) -> np.ndarray:
    """Standard deviations on the estimation scale in decades (log10 units). A
    linear-scale parameter at 0, or within `1e-9 units` of it (`units`: its box width),
    has no size to measure decades by: NaN."""
    units = np.ones(len(scales)) if units is None else np.asarray(units, dtype=float)
    out = []
    for s, t, sc, u in zip(np.asarray(std), np.asarray(theta), scales, units):
        if sc == Scale.log10:
            out.append(s)
        elif sc == Scale.log:
            out.append(s / math.log(10))
        else:
            near_zero = t == 0 or abs(t) <= 1e-9 * u
            out.append(math.nan if near_zero else s / (abs(t) * math.log(10)))
    return np.asarray(out, dtype=float)
