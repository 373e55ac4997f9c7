"""The dashboard's per-variant figures: per-class drift (bars, scatter, histogram), the flips gallery and the
confusions a variant introduces. matplotlib `Figure`s made without pyplot (see views/figures.py)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from trtlab.views.figures import _figure, _short

if TYPE_CHECKING:
    from trtlab.views.dashboard.thumbnails import Thumbnails

GALLERY_MAX_IMAGES = 24
DRIFT_BARS = 12  # classes shown on each side (losers, gainers) of the drift bar chart
LOSS_COLOUR, GAIN_COLOUR, NEUTRAL_COLOUR = "#c0392b", "#27ae60", "#34495e"


def plot_class_drift(drift, top: int = DRIFT_BARS):
    """Horizontal bars: the classes whose top-1 accuracy falls (red) or rises (green) most vs the reference,
    labelled with class name and image count."""
    variant, reference = drift.attrs.get("variant", "variant"), drift.attrs.get("reference", "reference")
    losers = drift[drift["delta"] < 0].head(top)
    gainers = drift[drift["delta"] > 0].sort_values("delta", ascending=False, kind="stable").head(top)
    shown = list(losers.itertuples()) + list(gainers.iloc[::-1].itertuples())
    fig = _figure(8.5, max(3.0, 0.32 * len(shown) + 1.6))
    ax = fig.subplots()
    ax.set_title(f"Per-class top-1 change: {variant} vs {reference}")
    ax.set_xlabel(f"Δ top-1 accuracy vs {reference} (percentage points)")
    if not shown:
        ax.text(0.5, 0.5, "no class changed its accuracy", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        return fig
    y = np.arange(len(shown))[::-1]
    values = [row.delta * 100 for row in shown]
    ax.barh(y, values, color=[LOSS_COLOUR if v < 0 else GAIN_COLOUR for v in values])
    ax.set_yticks(y, [f"{_short(row.name)} (n={row.images})" for row in shown], fontsize=8)
    ax.axvline(0, color="black", linewidth=0.8)
    unchanged = int((drift["delta"] == 0).sum())
    ax.text(0.99, 0.01, f"{int((drift['delta'] < 0).sum())} classes lose, {int((drift['delta'] > 0).sum())} gain, "
            f"{unchanged} unchanged", ha="right", va="bottom", transform=ax.transAxes, fontsize=8)
    return fig


def plot_class_scatter(drift, annotate: int = 5):
    """Per-class top-1 of the reference (x) against the variant (y); points below the diagonal lost accuracy.
    Classes with identical accuracies share one marker, sized and labelled by how many they are."""
    variant, reference = drift.attrs.get("variant", "variant"), drift.attrs.get("reference", "reference")
    fig = _figure(5.6, 5.2)
    ax = fig.subplots()
    ax.plot([0, 100], [0, 100], color="grey", linewidth=0.8, linestyle="--")
    points = (drift.assign(x=(drift["reference_accuracy"] * 100).round(6), y=(drift["variant_accuracy"] * 100).round(6))
              .groupby(["x", "y"], sort=False).agg(classes=("name", list), worst=("delta", "min")).reset_index())
    x, y = points["x"].to_numpy(float), points["y"].to_numpy(float)
    counts = points["classes"].map(len).to_numpy()
    colours = np.where(y < x, LOSS_COLOUR, np.where(y > x, GAIN_COLOUR, NEUTRAL_COLOUR))
    ax.scatter(x, y, s=18 + 14 * np.sqrt(counts), c=list(colours), alpha=0.55)
    for row in points[points["y"] < points["x"]].sort_values("worst", kind="stable").head(annotate).itertuples():
        names = row.classes
        label = ", ".join(_short(n, 14) for n in names[:2]) + (f" +{len(names) - 2}" if len(names) > 2 else "")
        ax.annotate(label, (row.x, row.y), fontsize=7, xytext=(4, 4), textcoords="offset points",
                    ha="right" if row.x > 60 else "left")
    ax.set_xlim(-3, 103)
    ax.set_ylim(-3, 103)
    ax.set_xlabel(f"{reference} top-1 per class (%)")
    ax.set_ylabel(f"{variant} top-1 per class (%)")
    ax.set_title(f"Per-class top-1: {reference} vs {variant} ({len(drift)} classes)")
    return fig


def plot_drift_histogram(drift):
    """Histogram of the per-class accuracy changes (percentage points), with the mean marked."""
    variant, reference = drift.attrs.get("variant", "variant"), drift.attrs.get("reference", "reference")
    fig = _figure(6.0, 3.6)
    ax = fig.subplots()
    deltas = drift["delta"].to_numpy(float) * 100
    if len(deltas):
        span = max(1.0, float(np.abs(deltas).max()))
        bins = np.linspace(-span, span, 2 * min(20, max(3, len(np.unique(deltas)))) + 2)
        ax.hist(deltas, bins=bins, color=NEUTRAL_COLOUR)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.axvline(float(deltas.mean()), color=LOSS_COLOUR if deltas.mean() < 0 else GAIN_COLOUR, linestyle="--",
                   label=f"mean {deltas.mean():+.2f} pts")
        ax.legend(fontsize=8)
    ax.set_title(f"Distribution of per-class change: {variant} vs {reference}")
    ax.set_xlabel("Δ top-1 accuracy (percentage points)")
    ax.set_ylabel("classes")
    return fig


def plot_flips_gallery(flip_table, thumbnails: Thumbnails, max_images: int = GALLERY_MAX_IMAGES):
    """Thumbnails of the images whose top-1 changed: both predictions with confidences, the label when known;
    red = broken by the variant, green = fixed."""
    variant, reference = flip_table.attrs.get("variant", "variant"), flip_table.attrs.get("reference", "reference")
    shown = flip_table.head(max_images)
    columns = max(1, min(6, len(shown)))
    rows = max(1, math.ceil(len(shown) / columns))
    # At least 6.5 inches wide so the title fits even over a single thumbnail.
    fig = _figure(max(6.5, 2.35 * columns + 0.4), 2.75 * rows + 0.6 if len(shown) else 2.0)
    compared = flip_table.attrs.get("compared", len(flip_table))
    fig.suptitle(f"Top-1 flips: {variant} vs {reference} ({len(flip_table)} of {compared} images changed"
                 + (f", first {len(shown)} shown)" if len(shown) < len(flip_table) else ")"), fontsize=11)
    if not len(shown):
        ax = fig.subplots()
        ax.text(0.5, 0.5, "no image changed its top-1 prediction", ha="center", va="center", transform=ax.transAxes)
        ax.axis("off")
        return fig
    axes = np.atleast_1d(fig.subplots(rows, columns)).ravel()
    colours = {"broken": LOSS_COLOUR, "fixed": GAIN_COLOUR}
    for ax, row in zip(axes, shown.itertuples()):
        image, found = thumbnails.get(row.image_id)
        ax.imshow(image)
        title = (f"{_short(reference, 14)}: {_short(row.reference_name, 16)} {row.reference_confidence:.0%}\n"
                 f"{_short(variant, 14)}: {_short(row.variant_name, 16)} {row.variant_confidence:.0%}")
        if row.label >= 0:
            title += f"\ntrue: {_short(row.label_name, 18)}"
        if not found:
            title += "\n(image file not found)"
        ax.set_title(title, fontsize=7, color=colours.get(row.outcome, "black"))
        ax.axis("off")
    for ax in axes[len(shown):]:
        ax.axis("off")
    return fig


def plot_confusions(confusions, top: int = 10):
    """Bars: the (true → predicted) confusions the variant makes more often than the reference."""
    variant, reference = confusions.attrs.get("variant", "variant"), confusions.attrs.get("reference", "reference")
    shown = confusions.head(top)
    fig = _figure(8.0, max(2.6, 0.35 * len(shown) + 1.5))
    ax = fig.subplots()
    basis = confusions.attrs.get("basis", "labels")
    ax.set_title(f"Confusions introduced by {variant} (vs {reference})"
                 + ("" if basis == "labels" else "\nunlabelled: the reference's top-1 stands in for the truth"))
    ax.set_xlabel(f"images: {variant} count − {reference} count")
    if not len(shown):
        ax.text(0.5, 0.5, "no confusion introduced", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        return fig
    y = np.arange(len(shown))[::-1]
    ax.barh(y, shown["introduced"].to_numpy(), color=LOSS_COLOUR)
    ax.set_yticks(y, [f"{_short(r.true_name, 20)} → {_short(r.predicted_name, 20)}" for r in shown.itertuples()],
                  fontsize=8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    return fig
