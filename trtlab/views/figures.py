"""Figures shared by the report, the dashboard and the A/B panel: matplotlib `Figure`s made without pyplot (no
global figure state, Agg rendering anywhere), and `FigureView`, which makes such a figure display as PNG wherever
it is returned — JupyterLab, an executed notebook, the HTML export (a bare pyplot-free Figure would show as
`<Figure size ...>` text, because Jupyter registers its PNG formatter only when pyplot is imported)."""
from __future__ import annotations

import io
import math

import numpy as np

FIGURE_DPI = 100
MANY_VARIANTS = 5  # above this, summaries stack their panels and slant the variant labels


class FigureView:
    """A figure that shows itself as PNG in notebooks; `.figure` is the matplotlib Figure."""

    def __init__(self, figure, dpi: int = FIGURE_DPI):
        self.figure, self.dpi = figure, dpi

    def _repr_png_(self) -> bytes:
        return figure_png(self.figure, self.dpi)

    def savefig(self, *args, **kwargs):
        return self.figure.savefig(*args, **kwargs)

    def __getattr__(self, name):  # axes, suptitle, ... of the figure
        return getattr(self.figure, name)


def figure_png(fig, dpi: int = FIGURE_DPI) -> bytes:
    """The figure as PNG bytes (Agg)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def stamp(fig, text: str) -> None:
    """Say what a figure is about (model, data) in small print at its bottom left."""
    if text:
        fig.text(0.005, 0.002, text, fontsize=7, color="#555555", ha="left", va="bottom")


def tick_label(variant: str, width: int = 18) -> str:
    """Variant names get long with guards ('int8-entropy+first_layer+last_layer-fp16'): break them at '+'."""
    import textwrap

    return "\n".join(textwrap.wrap(variant.replace("+", " +").replace("@", " @").replace("~", " ~"), width,
                                   break_on_hyphens=False, break_long_words=False)).replace(" @", "@").replace(" ~", "~")


def _short(name: str, limit: int = 22) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), constrained_layout=True)


def plot_variant_summary(table, reference: str):
    """Left: top-1/top-5 per variant with 95% Wilson intervals (or a note when unlabelled). Right: top-1
    agreement, top-5 overlap and logit cosine (mean, 1st percentile) against the reference."""
    if len(table) > MANY_VARIANTS:  # side by side, ten groups of bars per panel get too narrow: stack the panels
        fig = _figure(min(16.0, 1.1 * len(table) + 4), 9.0)
        draw_variant_summary(*fig.subplots(2, 1), table, reference)
    else:
        fig = _figure(max(9.0, 1.3 * len(table) + 5), 4.2)
        draw_variant_summary(*fig.subplots(1, 2), table, reference)
    return fig


def draw_variant_summary(ax_acc, ax_cons, table, reference: str) -> None:
    """The two summary panels on given axes (a consistency_table as input); the report reuses them."""
    names = list(table.index)
    x = np.arange(len(names))
    labelled = int(table["labelled"].max()) if len(table) else 0
    if labelled:
        for offset, metric, label in ((-0.2, "top1", "top-1"), (0.2, "top5", "top-5")):
            values = table[metric].to_numpy(float) * 100
            # Clipped at 0: a 100 % score's upper bound can round to a hair below the value itself.
            err = np.clip(np.vstack([values - table[f"{metric}_low"].to_numpy(float) * 100,
                                     table[f"{metric}_high"].to_numpy(float) * 100 - values]), 0, None)
            ax_acc.bar(x + offset, values, 0.4, yerr=err, capsize=3, label=label)
        ax_acc.set_ylim(0, 105)
        ax_acc.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8)
        ax_acc.set_title(f"Accuracy on {labelled} labelled images (95% Wilson CI)")
    else:
        ax_acc.text(0.5, 0.5, "no labelled images:\nconsistency metrics only", ha="center", va="center",
                    transform=ax_acc.transAxes)
        ax_acc.set_title("Accuracy (needs labels)")
    ax_acc.set_ylabel("accuracy (%)")
    _variant_ticks(ax_acc, x, names)
    series = [(f"top1_agreement_vs_{reference}", "top-1 agreement"), (f"top5_overlap_vs_{reference}", "top-5 overlap"),
              ("cosine_mean", "logit cosine, mean"), ("cosine_p1", "logit cosine, 1st pct")]
    width = 0.8 / len(series)
    for k, (column, label) in enumerate(series):
        ax_cons.bar(x + (k - (len(series) - 1) / 2) * width, table[column].to_numpy(float) * 100, width, label=label)
    low = np.nanmin([table[c].to_numpy(float).min() for c, _ in series]) * 100 if len(table) else 0
    ax_cons.set_ylim(max(0.0, min(90.0, math.floor(low / 10) * 10 - 5)) if np.isfinite(low) else 0, 101)
    _variant_ticks(ax_cons, x, names)
    ax_cons.set_ylabel("% (cosine ×100)")
    ax_cons.set_title(f"Consistency with {reference}")
    ax_cons.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8)


def _variant_ticks(ax, x, names) -> None:
    """Variant names under bars: wrapped at '+', and slanted when there are many."""
    if len(names) > MANY_VARIANTS:
        ax.set_xticks(x, [tick_label(n, 24) for n in names], fontsize=7, rotation=30, ha="right",
                      rotation_mode="anchor")
    else:
        ax.set_xticks(x, [tick_label(n) for n in names], fontsize=8)
