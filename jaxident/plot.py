"""Figures for identifiability analyses (matplotlib). A function that draws one panel
takes an optional `ax` and returns it; one that draws several (`profile`, `profiles`,
`analysis`, `report`, ...) returns its figure."""

from collections.abc import Mapping

import numpy as np


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(5, 3.5))
    return ax


def singular_values(selection, ax=None, *, title: str | None = None):
    """The singular values of `S` on a log scale, the numerical rank `k` marked."""
    ax = _axes(ax)
    s = np.asarray(selection.singular_values, float)
    k = int(selection.k)
    idx = np.arange(1, s.size + 1)
    s_plot = np.where(s > 0, s, np.nan)
    ax.semilogy(idx, s_plot, "o-", color="0.3", zorder=2)
    ax.semilogy(idx[:k], s_plot[:k], "o", color="tab:blue", label="identifiable", zorder=3)
    if k < s.size:
        ax.semilogy(idx[k:], s_plot[k:], "o", color="tab:red", label="non-identifiable", zorder=3)
        ax.axvline(k + 0.5, color="0.6", ls="--", lw=1)
    ax.set_xlabel("index i")
    ax.set_ylabel(r"$\sigma_i(S)$")
    ax.set_xticks(idx if s.size <= 20 else idx[:: max(1, s.size // 10)])
    ax.set_title(title or f"singular values (k = {k})")
    ax.legend(frameon=False, fontsize="small")
    return ax.figure


def selection(selection, ax=None, *, title: str | None = None):
    """One bar per parameter: `|R_ii|` of the pivoted factor, in selection order, the
    first `k` in blue and the rest in red (identifiable / non-identifiable where `k` is
    the numerical rank; selected / not selected where it was chosen by hand)."""
    ax = _axes(ax)
    perm = np.asarray(selection.perm)
    k = int(selection.k)
    d = np.abs(np.diag(np.asarray(selection.R)))
    d = np.where(d > 0, d, np.nan)
    names = [selection.names[i] for i in perm]
    colors = ["tab:blue" if i < k else "tab:red" for i in range(len(perm))]
    ax.bar(np.arange(len(perm)), d, color=colors)
    ax.set_yscale("log")
    rot = len(perm) > 6
    ax.set_xticks(
        np.arange(len(perm)), names, rotation=45 if rot else 0, ha="right" if rot else "center"
    )
    ax.set_ylabel(r"$|R_{ii}|$ (pivoted QR)")
    what = "selected (k by hand)" if selection.rank_rule is None else "identifiable"
    ax.set_title(title or f"{type(selection.method).__name__}: {k} of {len(perm)} {what}")
    return ax.figure


def frequency(
    freq: Mapping[str, float], ax=None, *, n: int | None = None, title: str | None = None
):
    """How often each parameter was selected as identifiable over a sweep (blue: in at
    least half of the samples, red: less)."""
    ax = _axes(ax)
    names = list(freq)
    values = np.array([freq[k] for k in names])
    colors = ["tab:blue" if v >= 0.5 else "tab:red" for v in values]
    bars = ax.bar(np.arange(len(names)), values, color=colors)
    for b, v in zip(bars, values):
        ax.annotate(
            f"{100 * v:.0f}%",
            (b.get_x() + b.get_width() / 2, v),
            ha="center",
            va="bottom",
            fontsize="small",
            xytext=(0, 1),
            textcoords="offset points",
        )
    ax.set_ylim(0, 1.12)
    rot = len(names) > 6
    ax.set_xticks(
        np.arange(len(names)), names, rotation=45 if rot else 0, ha="right" if rot else "center"
    )
    ax.set_ylabel("fraction of samples selected")
    ax.axhline(0.5, color="0.6", ls="--", lw=1)
    ax.set_title(title or ("selection frequency" + (f" over {n} samples" if n else "")))
    return ax.figure


def analysis(sel, freq: Mapping[str, float] | None = None, *, n: int | None = None, title=None):
    """The summary figure of `jaxident analyze`: spectrum, selection, and (with a sweep)
    selection frequencies. Returns the figure."""
    import matplotlib.pyplot as plt

    panels = 3 if freq is not None else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 3.8), constrained_layout=True)
    singular_values(sel, axes[0])
    selection(sel, axes[1])
    if freq is not None:
        frequency(freq, axes[2], n=n)
    if title:
        fig.suptitle(title)
    return fig


def delay_histograms(result, kind: str = "singular", *, column: int = 0, pairs=None, bins=50):
    """Colour-coded histograms over the delay `tau`, one panel per quantity, of a
    `ji.delay_estimability` result (Schumann-Bischoff et al. 2016, Figs. 3-5 and 10-16):
    `kind` is `"singular"`, `"basis"` (column `column` of `V~_B`), `"uncertainty"` or
    `"correlation"` (`pairs`, default every pair). Returns the figure."""
    import matplotlib.pyplot as plt

    panels = result.histogram_panels(kind, column, pairs)
    ncol = min(4, len(panels))
    nrow = -(-len(panels) // ncol)
    fig, axes = plt.subplots(
        nrow, ncol, figsize=(3.0 * ncol, 2.3 * nrow), squeeze=False, constrained_layout=True
    )
    taus = np.asarray(result.taus)
    for ax, (item, label) in zip(axes.flat, panels):
        counts, _, edges = result.histogram(kind, item, bins=bins, column=column)
        if taus.size > 1:
            dt = np.diff(taus)
            tedges = np.concatenate(
                [[taus[0] - dt[0] / 2], taus[:-1] + dt / 2, [taus[-1] + dt[-1] / 2]]
            )
        else:
            tedges = np.array([taus[0] * 0.9, taus[0] * 1.1])
        ax.pcolormesh(tedges, edges, np.ma.masked_equal(counts.T, 0), cmap="viridis")
        ax.set_title(label, fontsize="small")
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.set_xlabel(r"$\tau$", fontsize="small")
        ax.tick_params(labelsize="x-small")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    return fig


def profile(prof, *, true: Mapping[str, float] | None = None):
    """The estimates of the free parameters, and the cost, against the profiled
    parameter (Schumann-Bischoff et al. 2016, Figs. 9 and 18); a profile-likelihood
    interval (one of `ji.likelihood_intervals`' results) is drawn by `profiles`.
    Returns the figure."""
    if hasattr(prof, "threshold") and hasattr(prof, "lower_end"):
        return profiles({prof.name: prof})
    import matplotlib.pyplot as plt

    names = prof.names
    n = len(names) + 1
    ncol = min(3, n)
    nrow = -(-n // ncol)
    fig, axes = plt.subplots(
        nrow, ncol, figsize=(3.2 * ncol, 2.4 * nrow), squeeze=False, constrained_layout=True
    )
    x = np.asarray(prof.values)
    est = np.asarray(prof.estimates)
    for i, (ax, name) in enumerate(zip(axes.flat, names)):
        ax.plot(x, est[:, i], "o", ms=3, color="tab:blue")
        if true is not None and name in true:
            ax.axhline(true[name], color="tab:red", ls="--", lw=1)
        if true is not None and prof.name in true:
            ax.axvline(true[prof.name], color="k", lw=1)
        ax.set_title(name, fontsize="small")
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.set_xlabel(prof.name, fontsize="small")
    ax = list(axes.flat)[len(names)]
    # the negative log-likelihood: twice its rise, against the 95% chi-square bound
    cost = np.asarray(prof.cost, float)
    ax.plot(x, 2 * (cost - np.nanmin(cost)), "o-", ms=3, color="0.3")
    ax.axhline(3.84, color="tab:red", ls="--", lw=1)
    ax.set_title("2 (-log L - min)", fontsize="small")
    ax.set_xlabel(prof.name, fontsize="small")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    return fig


def stepwise(result, ax=None):
    """A stepwise selection (`ji.set_by_set`, `ji.one_by_one`): for each evaluation the
    size of the candidate set tried (green: accepted, red: rejected) and the number of
    parameters selected after it."""
    ax = _axes(ax)
    sizes = np.array([e.size for e in result.history])
    ok = np.array([e.accepted for e in result.history])
    idx = np.arange(1, sizes.size + 1)
    ax.bar(idx, sizes, color=np.where(ok, "tab:green", "tab:red"), alpha=0.7, width=0.8)
    selected, n = [], 0
    for e in result.history:
        n = e.size if e.accepted else n
        selected.append(n)
    ax.step(idx, selected, where="mid", color="k", label="selected")
    ax.set_xlabel("evaluation")
    ax.set_ylabel("parameters in the set")
    ax.set_title(
        f"{result.procedure}: {len(result.selected)} selected in {result.n_evaluations} evaluations"
    )
    ax.legend(frameon=False, fontsize="small", loc="upper left")
    return ax.figure


def waterfall(fits, ax=None):
    """A multi-start estimation (`ji.estimate(problem, starts=N)`, or its `fits`): each
    fit's negative log-likelihood above the best, plus 1, on a log axis, sorted; the
    fits within `fits.tol` of the best in blue, failed fits (infinite) left out."""
    fits = getattr(fits, "fits", None) or fits
    ax = _axes(ax)
    nll = np.asarray(fits.nll, float)
    finite = np.isfinite(nll)
    idx = np.arange(1, nll.size + 1)
    above = nll - nll[0] + 1.0
    best = finite & (nll <= nll[0] + fits.tol)
    ax.semilogy(idx[finite], above[finite], "-", color="0.6", zorder=1)
    ax.semilogy(idx[best], above[best], "o", color="tab:blue", zorder=2,
                label=f"within {fits.tol:g} of the best ({int(best.sum())})")  # fmt: skip
    rest = finite & ~best
    if rest.any():
        ax.semilogy(idx[rest], above[rest], "o", color="tab:red", zorder=2, label="other optima")
    ax.set_xlabel("start (sorted)")
    ax.set_ylabel("negative log-likelihood - best + 1")
    failed = int((~finite).sum())
    more = f", {failed} failed" if failed else ""
    ax.set_title(f"{nll.size} starts: best log-likelihood {-nll[0]:.6g}{more}")
    ax.legend(frameon=False, fontsize="small", loc="upper left")
    ax.xaxis.get_major_locator().set_params(integer=True)
    if finite.any():  # at least a decade, so that agreeing fits do not get one repeated tick
        ax.set_ylim(0.8, max(10.0, 1.5 * float(np.max(above[finite]))))
    ax.figure.tight_layout()
    return ax.figure


def parameters(fits, ax=None, *, level: float = 0.95):
    """The parameters across starts (as pyPESTO's parameters plot), beside the
    waterfall: each fit within the chi-square threshold of `level` (1.92 at 95%) of the
    best as a line through its parameters, each at its place in its box on the
    estimation scale (0 its lower bound, 1 its upper), coloured by the distinct optimum
    it reached (`Estimate.optima`, where `fits` is an `Estimate`), the other converged
    fits in light gray. Fits that agree draw one line; two optima of equal likelihood
    (a flip-flop) draw two. Returns the figure."""
    est = fits if hasattr(fits, "optima") else None
    fits = getattr(fits, "fits", None) or fits
    ax = _axes(ax)
    theta, nll = np.asarray(fits.theta, float), np.asarray(fits.nll, float)
    from scipy.special import chdtri  # (kept out of `import jaxident`)

    within = 0.5 * float(chdtri(1, 1.0 - level))
    lo, up = (np.asarray(b, float) for b in _bounds(fits, est))
    place = (theta - lo) / np.where(up > lo, up - lo, 1.0)
    y = np.arange(theta.shape[1])
    near = np.isfinite(nll) & (nll <= nll[0] + within)
    for i in np.flatnonzero(np.isfinite(nll) & ~near):
        ax.plot(place[i], y, "-", color="0.85", lw=0.8, zorder=1)
    groups = est.optima(level) if est is not None else ()
    colours = _colours()
    for i in np.flatnonzero(near)[::-1]:
        # the optimum this fit reached: the nearest one (itself for a group's best)
        k = int(np.argmin([np.max(np.abs(theta[i] - o.theta)) for o in groups])) if groups else 0
        colour = colours[k % len(colours)]
        ax.plot(place[i], y, "o-", color=colour, ms=4, lw=1, zorder=2)
    for k, o in enumerate(groups):
        ax.plot([], [], "o-", color=colours[k % len(colours)],
                label=f"optimum {k + 1}: -log L {o.nll:.6g} ({o.fits} fits)")  # fmt: skip
    ax.axvline(0.0, color="0.5", ls="--", lw=0.8)
    ax.axvline(1.0, color="0.5", ls="--", lw=0.8)
    ax.set_yticks(y, list(fits.names), fontsize="small")
    ax.invert_yaxis()
    ax.set_xlim(-0.05, 1.05)
    ax.set_xlabel("place in its bounds (estimation scale; 0 lower, 1 upper)")
    ax.set_title(f"parameters of the {int(near.sum())} fits within {within:.3g} of the best",
                 fontsize="small")  # fmt: skip
    if groups:
        ax.legend(frameon=False, fontsize="x-small", loc="best")
    return ax.figure


def _colours() -> list:
    """Matplotlib's default colour cycle."""
    import matplotlib.pyplot as plt

    return plt.rcParams["axes.prop_cycle"].by_key()["color"]


def _bounds(fits, est):
    """The bounds the fits were drawn in (a `MultiStart` keeps its problem's), or the
    span of the fits where they are not known."""
    box = getattr(fits, "bounds", None)
    if box is not None:
        return box
    theta = np.asarray(fits.theta, float)
    finite = np.isfinite(np.asarray(fits.nll, float))
    return theta[finite].min(axis=0), theta[finite].max(axis=0)


def multistart(est):
    """A multi-start estimation in one figure: the waterfall plot beside the parameters
    across starts. Returns the figure."""
    import matplotlib.pyplot as plt

    p = len(est.names)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, max(3.5, 0.3 * p + 1.5)))
    waterfall(est, ax=a1)
    parameters(est, ax=a2)
    fig.tight_layout()
    return fig


def intervals(found: Mapping, ax=None):
    """Profile-likelihood intervals (`{label: interval}`, as `ji.likelihood_intervals`
    returns them): one row per entry,
    its interval as a bar on the estimation scale and the estimate as a dot; an open end
    (the profile stays below the threshold up to the bound) drawn as an orange arrow
    head at the bound, one set by a partner's bound as a green diamond, and a failed one
    as a red cross."""
    ax = _axes(ax)
    rows = list(found.values())
    for i, iv in enumerate(rows):
        ax.plot([iv.lower, iv.upper], [i, i], "-", color="tab:blue", lw=3, solid_capstyle="butt")
        ax.plot(iv.estimate, i, "o", color="k", ms=5, zorder=3)
        for v, end, sign in ((iv.lower, iv.lower_end, -1), (iv.upper, iv.upper_end, 1)):
            if end.value == "open":  # an arrow head at the bound
                ax.plot(v, i, ">" if sign > 0 else "<", color="tab:orange", ms=8)
            elif end.value == "failed":
                ax.plot(v, i, "x", color="tab:red", ms=8)
            elif end.value == "at a partner's bound":
                ax.plot(v, i, "D", color="tab:green", ms=6)
    ax.set_yticks(range(len(rows)), list(found))
    ax.invert_yaxis()
    level = rows[0].level if rows else 0.95
    ax.set_xlabel("estimation scale")
    ax.set_title(
        f"{100 * level:g}% profile-likelihood intervals (orange: open, up to the bound)",
        fontsize="small",
    )
    ax.figure.tight_layout()
    return ax.figure


_END_STYLE = {  # how each kind of interval end is marked on a profile
    "crossed": ("o", "tab:blue", "crossed the threshold"),
    "open": (">", "tab:orange", "open: below the threshold up to the bound"),
    "at a partner's bound": ("D", "tab:green", "set by a partner's bound (named)"),
    "at bound": ("s", "tab:purple", "the estimate at its bound"),
    "failed": ("x", "tab:red", "failed"),
}


def profiles(found: Mapping, *, ncols: int = 3):
    """The profile likelihoods behind `ji.likelihood_intervals` (`{name: interval}`):
    for each parameter twice the rise of the negative log-likelihood over the fit's,
    against the parameter on its estimation scale, every profile point computed, the
    threshold (the chi-square quantile of the interval's level), the estimate, and each
    end marked by how it ended (crossed, set by a partner's bound (named beside it), open
    at the bound, the estimate at its bound, failed). A profile that stays flat below the
    threshold is a parameter the data do not bound (Raue et al. 2009, Fig. 2). Returns
    the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rows = list(found.items())
    if not rows:
        raise ValueError("No intervals to plot: give ji.likelihood_intervals' result.")
    ncols = max(1, min(int(ncols), len(rows)))
    nrows = -(-len(rows) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.6 * nrows), squeeze=False,
                             constrained_layout=True)  # fmt: skip
    seen = set()
    for ax, (name, iv) in zip(axes.flat, rows):
        x, cost = np.asarray(iv.values, float), np.asarray(iv.cost, float)
        at = np.flatnonzero(x == iv.estimate)
        best = float(cost[at[0]]) if at.size else float(np.nanmin(cost))
        ax.plot(x, 2 * (cost - best), ".-", color="0.3", ms=4, lw=1)
        ax.axhline(2 * iv.threshold, color="tab:red", ls="--", lw=1)
        ax.axvline(iv.estimate, color="k", lw=0.6)
        for v, end, side in ((iv.lower, iv.lower_end, "lower"), (iv.upper, iv.upper_end, "upper")):
            kind = str(end.value)
            marker, colour, _ = _END_STYLE[kind]
            crossing = kind in ("crossed", "at a partner's bound")
            y = 2 * iv.threshold if crossing else 2 * float(np.interp(v, x, cost) - best)
            ax.plot(v, y, marker, color=colour, ms=7, zorder=3)
            seen.add(kind)
            partner = getattr(iv, f"{side}_partner", None)
            if partner:
                ax.annotate(partner, (v, y), xytext=(0, 6), textcoords="offset points",
                            ha="center", fontsize="x-small", color=colour)  # fmt: skip
        ax.set_title(name, fontsize="small")
        ax.set_xlabel(f"{name} (estimation scale)", fontsize="small")
        ax.set_ylabel("2 (-log L - best)", fontsize="small")
    for ax in list(axes.flat)[len(rows) :]:
        ax.set_visible(False)
    level = rows[0][1].level
    handles = [Line2D([], [], color="tab:red", ls="--", label=f"{100 * level:g}% threshold")]
    handles += [Line2D([], [], marker=_END_STYLE[k][0], color=_END_STYLE[k][1], ls="",
                       label=_END_STYLE[k][2]) for k in _END_STYLE if k in seen]  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)),
               frameon=False, fontsize="small")  # fmt: skip
    return fig


def report(rep, *, title: str | None = None):
    """The figure of a `ji.analyze` report: the singular values of the equilibrated
    sensitivity matrix (the rank marked), and each parameter's marginal standard
    deviation in decades against the threshold: non-identifiable parameters (inf) at
    the axis' end in red, undecided ones in gray, practically non-identifiable ones in
    orange, the rest in blue; a linear-scale parameter at 0 has no decades (no bar,
    its absolute std written beside it). Returns the figure."""
    import matplotlib.pyplot as plt

    p = len(rep.names)
    fig, (a1, a2) = plt.subplots(
        1, 2, figsize=(11, max(3.5, 0.28 * p + 1.2)), gridspec_kw={"width_ratios": [1, 1.3]}
    )
    s = np.asarray(rep.singular_values, float)
    idx = np.arange(1, p + 1)
    s_plot = np.where(s > 0, s, np.nan)
    a1.semilogy(idx, s_plot, "o-", color="0.3")
    a1.semilogy(idx[: rep.rank], s_plot[: rep.rank], "o", color="tab:blue", label="identifiable")
    if rep.rank < p:
        a1.semilogy(idx[rep.rank :], s_plot[rep.rank :], "o", color="tab:red", label="null space")
        a1.axvline(rep.rank + 0.5, color="0.6", ls="--", lw=1)
    a1.set_xlabel("index i")
    a1.set_ylabel(r"$\sigma_i / \sigma_1$ (equilibrated)")
    a1.set_title(f"numerical rank {rep.rank} of {p}")
    a1.legend(frameon=False, fontsize="small")
    dec = np.asarray(rep.decades, float)
    finite = dec[np.isfinite(dec)]
    top = max(10 * rep.threshold, finite.max() * 3 if finite.size else 1.0)
    shown = np.where(np.isfinite(dec), dec, np.where(np.isnan(dec), 0.0, top))
    undecided = set(getattr(rep, "undecided", ()))

    practical = set(rep.practically_non_identifiable)  # (by the profile where computed)

    def color(n, d):
        if n in rep.non_identifiable:
            return "tab:red"
        if n in undecided:
            return "0.6"
        if n in getattr(rep, "weakly_identifiable", ()):
            return "tab:purple"
        return "tab:orange" if n in practical else "tab:blue"

    y = np.arange(p)
    colors = [color(n, d) for n, d in zip(rep.names, dec)]
    a2.barh(y, shown, color=colors)
    for i in np.flatnonzero(np.isnan(dec)):
        a2.annotate(
            f"std {float(rep.std[i]):.3g} (absolute: at 0)",
            (rep.threshold / 100, y[i]),
            va="center",
            fontsize="x-small",
        )
    a2.set_xscale("log")
    a2.axvline(rep.threshold, color="0.3", ls="--", lw=1, label=f"threshold {rep.threshold:g}")
    a2.set_yticks(y, rep.names, fontsize="small")
    a2.invert_yaxis()
    a2.set_xlabel("marginal standard deviation (decades)", fontsize="small")
    a2.set_title("practical identifiability")
    from matplotlib.patches import Patch

    meaning = {
        "tab:blue": "below the threshold",
        "tab:orange": "above the threshold",
        "tab:red": "structurally non-identifiable",
        "tab:purple": "weak: a real but tiny effect",
        "0.6": "undecided",
    }
    keys = [Patch(color=c, label=text) for c, text in meaning.items() if c in colors]
    handles = [*keys, *a2.get_legend_handles_labels()[0]]
    a2.legend(handles=handles, frameon=False, fontsize="small", loc="center left",
              bbox_to_anchor=(1.0, 0.5))  # fmt: skip
    fig.suptitle(title or rep.name)
    fig.tight_layout()
    return fig


def design(d, *, title: str | None = None):
    """The figure of a `ji.design` result: when each chosen measurement is taken (one
    row per candidate and condition, numbered in the order chosen), and each
    parameter's predicted marginal standard deviation on its estimation scale before
    and after them (infinite: structurally non-identifiable, drawn at the axis' end,
    hatched). Returns the figure."""
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(m.name for m in d.measurements))
    p = len(d.names)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, max(3.5, 0.28 * max(p, len(labels)) + 1.5)))
    for i, m in enumerate(d.measurements, 1):
        y = labels.index(m.name)
        a1.plot(m.time, y, "o", color="tab:green" if m.resolves else "tab:blue")
        a1.annotate(str(i), (m.time, y), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize="x-small")  # fmt: skip
    a1.set_yticks(range(len(labels)), labels, fontsize="small")
    a1.set_ylim(-0.7, len(labels) - 0.3)
    a1.invert_yaxis()
    a1.set_xlabel("time")
    a1.set_title("measurements (green: resolves a null direction)", fontsize="small")
    if d.after is not None:
        after = np.asarray(d.after.std, float)
        before = np.full(p, np.inf) if d.before is None else np.asarray(d.before.std, float)
        finite = np.concatenate([before, after])
        finite = finite[np.isfinite(finite) & (finite > 0)]
        top = finite.max() * 10 if finite.size else 1.0
        y = np.arange(p)
        for shift, v, colour, label in ((-0.2, before, "0.6", "before"),
                                        (0.2, after, "tab:blue", "after")):  # fmt: skip
            shown = np.where(np.isfinite(v), v, top)
            bars = a2.barh(y + shift, shown, height=0.4, color=colour, label=label)
            for b, inf in zip(bars, ~np.isfinite(v)):
                if inf:
                    b.set_hatch("//")
        a2.set_xscale("log")
        a2.set_yticks(y, d.names, fontsize="small")
        a2.invert_yaxis()
        a2.set_xlabel("predicted marginal std (estimation scale; hatched: infinite)",
                      fontsize="small")  # fmt: skip
        a2.legend(frameon=False, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    a2.set_title(f"rank {d.rank_before:g} -> {d.rank_after:g} of {p}", fontsize="small")
    fig.suptitle(title or f"design for {d.name}")
    fig.tight_layout()
    return fig
