"""The result of `ji.design`: the chosen measurements, what they buy (the rank and the
criterion before and after, the report predicted after them), a figure, and the
proposed experiment as PEtab rows."""

import copy
import math
import os
from typing import NamedTuple

import equinox as eqx
import jax
import numpy as np
from jaxtyping import PRNGKeyArray

from .. import plot
from .._problem._base import Problem
from .._report._result import Report
from .._runtime._files import plain, strict_json
from .._runtime._host import device_array


class Measurement(NamedTuple):
    """One chosen measurement: the candidate's `name`, its `observable` (the text, or
    `None` for a function), the problem's `experiment` whose condition it is taken
    under, the `condition` overrides, the `time`, the noise `sigma` on the `transform`'s
    scale, the `value` predicted at theta, the (summarised) `rank` and `criterion` after
    it, the parameters it `resolves` (non-identifiable before it, not after), and
    whether the observable is one of the problem's `output`s."""

    name: str
    observable: str | None
    experiment: str
    condition: tuple
    time: float
    sigma: float
    transform: str
    value: float
    rank: float
    criterion: float
    resolves: tuple[str, ...]
    output: bool = False


class Design(eqx.Module):
    """The next experiment (`ji.design`).

    **Fields:** `name`; `names` (the parameters) and `theta` (on the estimation
    scale); `measurements` (`Measurement`s in the order chosen); `criterion` and
    `summary` (what was maximised, over how many `samples`); `rank_before`,
    `rank_after` (out of `len(names)`), `value_before`, `value_after` (the criterion);
    `unresolved`: the parameters still non-identifiable after the design at theta;
    `reachable`: the rank every candidate measurement together would give (more than
    `rank_after`: a larger budget resolves more);
    `refined`: how the gradient refinement of the free times ended (`None` where no
    time was free); `before`, `after`: the `ji.analyze` reports at theta of the problem
    and of the problem with the designed measurements (`None` with `report=False`),
    whose `std` are the predicted marginal standard deviations; `problem`: the problem
    with the designed measurements (their predicted values as data: `ji.analyze` of it
    is `after`), `designed` its `(e, n, outputs)` entries that are the design's.

    **Methods:** `simulate(key)` (`problem` with noisy designed data), `plot()`,
    `to_dict()`, `to_json()`, `to_petab(folder)`.
    """

    name: str
    names: tuple[str, ...]
    theta: np.ndarray
    measurements: tuple[Measurement, ...]
    criterion: str
    summary: str
    samples: int
    rank_before: float
    rank_after: float
    value_before: float
    value_after: float
    unresolved: tuple[str, ...]
    reachable: float
    refined: str | None
    before: Report | None
    after: Report | None
    problem: Problem
    designed: np.ndarray

    def simulate(self, key: PRNGKeyArray) -> Problem:
        """`problem` with the designed measurements drawn: each predicted value with
        its noise (normal, `sigma` on its transform's scale) drawn with `key`; the
        problem's own data as they are. Fit it (`ji.estimate`) and analyze it to check
        the design on simulated data."""
        data = np.array(self.problem.data)
        noise = np.asarray(jax.random.normal(key, data.shape)) * np.asarray(self.problem.sigma)
        for o, h in enumerate(self.problem.transforms):
            at = self.designed[..., o]
            if at.any():
                data[..., o][at] = h.inverse(h.forward(data[..., o][at]) + noise[..., o][at])
        out = copy.copy(self.problem)
        object.__setattr__(out, "data", device_array(data))
        return out

    @property
    def times(self) -> np.ndarray:
        return np.asarray([m.time for m in self.measurements])

    def __repr__(self) -> str:
        return self.text()

    def text(self) -> str:
        p = len(self.names)
        lines = [f"Design for {self.name}: {len(self.measurements)} measurements"]
        over = "" if self.samples == 0 else f", {self.summary} over {self.samples} samples"
        lines.append(f"  criterion: {self.criterion}{over}")
        lines.append(
            f"  rank {_rank(self.rank_before)} -> {_rank(self.rank_after)} of {p}; criterion "
            f"{self.value_before:.4g} -> {self.value_after:.4g}"
        )
        for i, m in enumerate(self.measurements, 1):
            gain = f"; resolves {{{', '.join(m.resolves)}}}" if m.resolves else ""
            lines.append(
                f"  {i:>3}. observe {m.name} at t = {m.time:.6g} (sigma {m.sigma:g}"
                f"{'' if m.transform == 'lin' else ', ' + m.transform}){gain}"
            )
        if self.unresolved and self.reachable > self.rank_after + 1e-9:
            lines.append(
                f"  still non-identifiable: {', '.join(self.unresolved)} (the candidates "
                f"together reach rank {_rank(self.reachable)}: a larger budget resolves more)"
            )
        elif self.unresolved:
            lines.append(
                f"  still non-identifiable: {', '.join(self.unresolved)} (no candidate "
                "resolves them: measure something else, or fix them)"
            )
        if self.after is not None:
            lines.append("  predicted marginal std (estimation scale) before -> after:")
            first = np.full(len(self.names), np.inf) if self.before is None else self.before.std
            for n, a, b in zip(self.names, first, self.after.std):
                lines.append(f"    {n:>20}: {_std(a)} -> {_std(b)}")
        if self.refined is not None:
            lines.append(f"  free times refined by gradient: {self.refined}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        out = dict(
            name=self.name, names=list(self.names), theta=self.theta.tolist(),
            criterion=self.criterion, summary=self.summary, samples=self.samples,
            rank_before=self.rank_before, rank_after=self.rank_after,
            value_before=self.value_before, value_after=self.value_after,
            unresolved=list(self.unresolved), reachable=self.reachable, refined=self.refined,
            measurements=[m._asdict() for m in self.measurements],
        )  # fmt: skip
        for k in ("before", "after"):
            rep = getattr(self, k)
            out[f"std_{k}"] = None if rep is None else np.asarray(rep.std).tolist()
        return plain(out)

    def to_json(self, path=None) -> str:
        text = strict_json(self.to_dict(), indent=2)
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    def plot(self, **kwargs):
        """The design as a figure (`ji.plot.design`)."""
        return plot.design(self, **kwargs)

    def to_petab(self, folder) -> dict:
        """Write the proposed experiment as PEtab tables into `folder`:
        `measurements_design.tsv` (one row per measurement, its predicted value as the
        measurement, its sigma as the noise parameter; the conditions of an imported
        problem's experiments by their PEtab ids), `conditions_design.tsv` (the new
        conditions: the overridden parameters, and as `conditionName` the condition
        they change, whose other columns a merged condition table takes over) and
        `observables_design.tsv` (the new observables; a measurement of one of the
        problem's outputs uses its observable). Returns `{table: path}`.

        **Raises:** `ValueError` for an observable given as a function (PEtab needs
        its formula)."""
        return write_petab(self, folder)


def _rank(r: float) -> str:
    return str(int(r)) if float(r).is_integer() else f"{r:.2f}"


def _std(v) -> str:
    v = float(v)
    return "inf" if math.isinf(v) else f"{v:.3g}"


def _ident(text: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in text)
    return out if out and not out[0].isdigit() else "o_" + out


def write_petab(d: Design, folder) -> dict:
    os.makedirs(folder, exist_ok=True)
    obs, conds, meas = {}, {}, []
    for m in d.measurements:
        if m.observable is None:
            raise ValueError(
                f"{m.name!r} is observed through a function: PEtab needs its formula. "
                "Give the candidate's observable as a name or an expression."
            )
        oid = m.observable if m.output else "design_" + _ident(m.observable)
        if not m.output:
            obs[oid] = (m.observable, m.transform)
        # an imported problem's experiments are named 'preequilibration->simulation#k'
        pre, _, cid = m.experiment.split("#")[0].rpartition("->")
        cid = _ident(cid)
        if m.condition:
            base = cid
            cid = _ident(cid + "_" + "_".join(f"{k}_{v}" for k, v in m.condition))
            conds[cid] = (base, dict(m.condition))
        meas.append((oid, pre, cid, m.time, m.value, m.sigma))
    paths = {}
    head = ("observableId", "observableFormula", "observableTransformation", "noiseFormula",
            "noiseDistribution")  # fmt: skip
    rows = ["\t".join(head)]
    rows += [f"{o}\t{f}\t{t}\tnoiseParameter1_{o}\tnormal" for o, (f, t) in obs.items()]
    paths["observables"] = _write(folder, "observables_design.tsv", rows)
    head = ("observableId", "preequilibrationConditionId", "simulationConditionId", "time",
            "measurement", "noiseParameters")  # fmt: skip
    rows = ["\t".join(head)]
    rows += [f"{o}\t{p}\t{c}\t{t!r}\t{v!r}\t{s!r}" for o, p, c, t, v, s in meas]
    paths["measurements"] = _write(folder, "measurements_design.tsv", rows)
    keys = sorted({k for _, c in conds.values() for k in c})
    rows = ["\t".join(["conditionId", "conditionName", *keys])]
    rows += ["\t".join([c, f"{base} with " + ", ".join(f"{k}={x}" for k, x in v.items()),
                        *(str(v.get(k, "")) for k in keys)])
             for c, (base, v) in conds.items()]  # fmt: skip
    paths["conditions"] = _write(folder, "conditions_design.tsv", rows)
    return paths


def _write(folder, name, rows) -> str:
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")
    return path
