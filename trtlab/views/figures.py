"""Figures shared by the report, the dashboard and the A/B panel: matplotlib `Figure`s made without pyplot (no
global figure state, Agg rendering anywhere), and `FigureView`, which makes such a figure display as PNG wherever
it is returned — JupyterLab, an executed notebook, the HTML export (a bare pyplot-free Figure would show as
`<Figure size ...>` text, because Jupyter registers its PNG formatter only when pyplot is imported).

Layout rules every figure here follows (tests/test_views_figures.py renders them at 1 to 10 variants with long
labels and checks that no two texts overlap and none leaves the figure): constrained layout; variant names on the
y axis of horizontal bars (read horizontally, wrapped at '+', '@', '~'); legends in the figure's top margin, never over
data or labels; titles wrapped to the width they have; the provenance stamp in a margin reserved for it.
"""
from __future__ import annotations

import io
import math
import textwrap

import numpy as np

FIGURE_DPI = 100
STAMP_INCHES = 0.22  # bottom margin reserved for the provenance stamp
CHAR_EM = 0.62  # average glyph width of DejaVu Sans in ems, rounded up: wrapping by characters never overflows
TOP1, TOP5, AGREE, OVERLAP, COS_MEAN, COS_WORST = "#2c7fb8", "#a6bddb", "#31a354", "#a1d99b", "#756bb1", "#d95f0e"


class FigureView:
    """A figure that shows itself as PNG in notebooks; `.figure` is the matplotlib Figure."""

    def __init__(self, figure, dpi: int = FIGURE_DPI):
        self.figure, self.dpi = figure, dpi

    def _repr_png_(self) -> bytes:
        return figure_png(self.figure, self.dpi)

    def savefig(self, *args, **kwargs):
        return self.figure.savefig(*args, **kwargs)

    def __getattr__(self, name):  # axes, suptitle, ... of the figure
        if name == "figure":
            raise AttributeError(name)
        return getattr(self.figure, name)


def figure_png(fig, dpi: int = FIGURE_DPI) -> bytes:
    """The figure as PNG bytes (Agg)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def stamp(fig, text: str) -> None:
    """Say what a figure is about (model, data) in small print at its bottom left, in a margin reserved for it
    (constrained layout leaves figure texts out, so without the margin the stamp sat on the x-axis label)."""
    if not text:
        return
    width, height = fig.get_size_inches()
    fig.text(0.004, 0.004, fit(text, width - 0.1, 7), fontsize=7, color="#555555", ha="left", va="bottom")
    lines = fit(text, width - 0.1, 7).count("\n") + 1
    bottom = min(0.3, (STAMP_INCHES + 0.12 * (lines - 1)) / height)
    engine = fig.get_layout_engine()
    if engine is not None and hasattr(engine, "set"):
        left, _, right, top = engine.get()["rect"]
        engine.set(rect=(left, bottom, right, top - bottom))


def fit(text: str, inches: float, fontsize: float) -> str:
    """`text` wrapped to lines that fit `inches` at `fontsize` points: breaks at spaces, and inside long variant
    names before '+', '@' and '~' (where a recipe's parts begin)."""
    chars = max(8, int(inches * 72 / (fontsize * CHAR_EM)))
    out = []
    for line in str(text).split("\n"):
        out.append(_wrap(line, chars))
    return "\n".join(out)


def _wrap(line: str, chars: int) -> str:
    marked = line.replace("+", "\0+").replace("@", "\0@").replace("~", "\0~")
    words = []
    for word in marked.split(" "):
        pieces = [p for p in word.split("\0") if p]
        words.append(pieces or [""])
    lines, current = [], ""
    for pieces in words:
        for k, piece in enumerate(pieces):
            joiner = " " if (k == 0 and current) else ""
            if current and len(current) + len(joiner) + len(piece) > chars:
                lines.append(current)
                current = piece
            else:
                current += joiner + piece
    lines.append(current)
    return "\n".join(textwrap.fill(part, chars, break_on_hyphens=False) if len(part) > chars else part
                     for part in lines)


def fit_title(ax, text: str, fontsize: float = 11, xlabel: str | None = None, ylabel: str | None = None) -> None:
    """Set an axes title (and x/y labels) wrapped to the axes' size once the layout has placed it: tick labels on
    the left take their share, so text wrapped to the figure's width would still overflow."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = ax.get_figure(root=True)
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    guess = _panel_inches(ax)  # a first guess shapes the layout
    ax.set_title(fit(text, guess, fontsize), fontsize=fontsize)
    if xlabel is not None:
        ax.set_xlabel(fit(xlabel, guess, 10))
    if ylabel is not None:
        ax.set_ylabel(fit(ylabel, 3.0, 10))
    fig.draw_without_rendering()
    box = ax.get_window_extent()
    ax.set_title(fit(text, box.width / fig.dpi, fontsize), fontsize=fontsize)
    if xlabel is not None:
        ax.set_xlabel(fit(xlabel, box.width / fig.dpi, 10))
    if ylabel is not None:
        ax.set_ylabel(fit(ylabel, box.height / fig.dpi, 10))


def tick_label(variant: str, width: int = 24) -> str:
    """A variant name under or beside bars, wrapped at '+', '@', '~' ('int8-entropy+first_layer+last_layer-fp16')."""
    return _wrap(str(variant), width)


def _short(name: str, limit: int = 22) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), constrained_layout=True)


def summary_height(count: int, names=()) -> float:
    """Inches for a horizontal-bar summary of `count` variants (wrapped names take more lines)."""
    lines = sum(max(1, tick_label(n).count("\n") + 1) for n in names) if names else count
    return 2.3 + max(0.42 * count, 0.16 * lines)


def plot_variant_summary(table, reference: str):
    """Three panels, one row per variant: top-1/top-5 accuracy with 95 % Wilson intervals (or a note when
    unlabelled); top-1 agreement (with interval) and top-5 overlap with the reference, both on 0–100 %; logit
    cosine with the reference (mean, worst) on its own axis, marked where it does not start at 0."""
    fig = _figure(13.0, summary_height(len(table), list(table.index)))
    draw_variant_summary(fig.subplots(1, 3, sharey=True), table, reference, fig)
    return fig


def draw_variant_summary(axes, table, reference: str, legend_owner) -> None:
    """The summary panels on three given axes (a consistency_table as input); the report reuses them. The legend
    goes into `legend_owner`'s bottom margin (a Figure or SubFigure)."""
    ax_acc, ax_agree, ax_cos = axes
    names = [str(n) for n in table.index]
    y = np.arange(len(names))[::-1].astype(float)
    labelled = int(table["labelled"].max()) if len(table) else 0
    handles = []
    if labelled:
        for offset, metric, label, colour in ((0.2, "top1", "top-1 accuracy", TOP1),
                                              (-0.2, "top5", "top-5 accuracy", TOP5)):
            values = table[metric].to_numpy(float) * 100
            handles.append(ax_acc.barh(y + offset, values, 0.38, xerr=_errors(table, metric, values), capsize=2,
                                       color=colour, label=label, error_kw={"elinewidth": 0.8}))
        ax_acc.set_title(fit(f"Accuracy on {labelled} labelled images (95 % CI)", _panel_inches(ax_acc), 10),
                         fontsize=10)
    else:
        ax_acc.text(50, float(np.mean(y)) if len(y) else 0, "no labelled images:\nagreement and cosine only",
                    ha="center", va="center", fontsize=9)
        ax_acc.set_title("Accuracy (needs labels)", fontsize=10)
    ax_acc.set_xlim(0, 100)
    ax_acc.set_xlabel("accuracy (%)")
    ax_acc.set_yticks(y, [tick_label(n) for n in names], fontsize=8)

    agree = table[f"top1_agreement_vs_{reference}"].to_numpy(float) * 100
    low, high = f"top1_agreement_low_vs_{reference}", f"top1_agreement_high_vs_{reference}"
    err = None
    if low in table and high in table:
        err = np.clip(np.vstack([agree - table[low].to_numpy(float) * 100, table[high].to_numpy(float) * 100 - agree]),
                      0, None)
    handles.append(ax_agree.barh(y + 0.2, agree, 0.38, xerr=err, capsize=2, color=AGREE,
                                 label=f"top-1 agreement with {reference}", error_kw={"elinewidth": 0.8}))
    handles.append(ax_agree.barh(y - 0.2, table[f"top5_overlap_vs_{reference}"].to_numpy(float) * 100, 0.38,
                                 color=OVERLAP, label=f"top-5 overlap with {reference}"))
    ax_agree.set_xlim(0, 100)
    ax_agree.set_xlabel("% of images")
    ax_agree.set_title(fit(f"Agreement with {reference} (95 % CI)", _panel_inches(ax_agree), 10), fontsize=10)
    ax_agree.tick_params(labelleft=False)

    handles += _draw_cosine(ax_cos, table, y)
    ax_cos.set_title(fit(f"Logit cosine with {reference}", _panel_inches(ax_cos), 10), fontsize=10)
    ax_cos.tick_params(labelleft=False)
    for ax in axes:
        ax.set_ylim(-0.6, len(names) - 0.4)
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
    # Above the panels (the bottom margin belongs to the provenance stamp), in no axes' way.
    legend_owner.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 6), fontsize=8,
                        frameon=False)


def _errors(table, metric: str, values):
    # Clipped at 0: a 100 % score's upper bound can round to a hair below the value itself.
    return np.clip(np.vstack([values - table[f"{metric}_low"].to_numpy(float) * 100,
                              table[f"{metric}_high"].to_numpy(float) * 100 - values]), 0, None)


def _draw_cosine(ax, table, y) -> list:
    """Mean and worst logit cosine as dots. Cosines of INT8 variants crowd near 1, so the axis starts at a round
    value below the worst one; when that is not 0 the axis says so (label and a break mark at its start)."""
    mean, worst = table["cosine_mean"].to_numpy(float), table["cosine_worst"].to_numpy(float)
    finite = np.concatenate([mean[np.isfinite(mean)], worst[np.isfinite(worst)]])
    lowest = float(finite.min()) if len(finite) else 0.0
    start = 0.0
    for candidate in (0.99, 0.95, 0.9, 0.8, 0.5):
        if lowest >= candidate + (1 - candidate) * 0.1:
            start = candidate
            break
    for k in range(len(y)):
        ax.plot([worst[k], mean[k]], [y[k], y[k]], color="#bbbbbb", linewidth=1, zorder=1)
    handles = [ax.scatter(mean, y, color=COS_MEAN, s=22, zorder=2, label="logit cosine, mean"),
               ax.scatter(worst, y, color=COS_WORST, marker="D", s=18, zorder=2, label="logit cosine, worst image")]
    ax.set_xlim(start, 1.0 + (1 - start) * 0.02)
    if start > 0:
        ax.set_xlabel(f"cosine (axis from {start:g}, not 0)")
        kwargs = {"transform": ax.transAxes, "color": "black", "clip_on": False, "linewidth": 1}
        for dx in (0.012, 0.03):  # the broken-axis mark: two slashes across the x axis just after its start
            ax.plot([dx - 0.008, dx + 0.008], [-0.012, 0.012], **kwargs)
    else:
        ax.set_xlabel("cosine")
    return handles


def _panel_inches(ax) -> float:
    """The width an axes' title has — its grid cell's share of the (sub)figure — before the layout runs."""
    owner = ax.get_figure(root=False)
    width = owner.bbox.width / owner.get_figure(root=True).dpi
    spec = ax.get_subplotspec()
    if spec is not None:
        width *= (spec.colspan.stop - spec.colspan.start) / spec.get_gridspec().ncols
    return max(1.5, width - 0.45)
