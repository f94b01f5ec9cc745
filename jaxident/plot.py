"""Figures for identifiability analyses (matplotlib). Every function takes an optional
`ax` and returns it."""

from collections.abc import Mapping, Sequence

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
    return ax


def selection(selection, ax=None, *, title: str | None = None):
    """One bar per parameter: `|R_ii|` of the pivoted factor, in selection order,
    coloured by identifiable / non-identifiable."""
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
    ax.set_title(title or f"{type(selection.method).__name__}: {k} of {len(perm)} identifiable")
    return ax


def frequency(
    freq: Mapping[str, float], ax=None, *, n: int | None = None, title: str | None = None
):
    """How often each parameter was selected as identifiable over a sweep."""
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
    ax.set_ylabel("fraction identifiable")
    ax.axhline(0.5, color="0.6", ls="--", lw=1)
    ax.set_title(title or ("selection frequency" + (f" over {n} samples" if n else "")))
    return ax


def histogram_k(ks: Sequence[int], p: int, ax=None):
    """The distribution of the numerical rank over a sweep."""
    ax = _axes(ax)
    ks = np.asarray(ks)
    counts = np.bincount(ks, minlength=p + 1)
    ax.bar(np.arange(p + 1), counts, color="0.4")
    ax.set_xlabel("numerical rank k")
    ax.set_ylabel("samples")
    ax.set_title("rank over samples")
    return ax


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
