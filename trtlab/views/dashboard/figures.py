"""The dashboard's per-variant figures: per-class drift (bars, scatter, histogram), the flips gallery and the
confusions a variant introduces. matplotlib `Figure`s made without pyplot (see views/figures.py)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from trtlab.views.figures import _figure, _short, fit, fit_title

if TYPE_CHECKING:
    from trtlab.views.dashboard.thumbnails import Thumbnails

GALLERY_MAX_IMAGES = 20
GALLERY_COLUMNS = 5
THUMB_INCHES = 2.6
CAPTION_NAME = 20  # variant names up to this long are written under each photo; longer ones once, in the title
CAPTION_POINTS = 8.5
DRIFT_BARS = 12  # classes shown on each side (losers, gainers) of the drift bar chart
DISTRIBUTION_MIN_CHANGED = 5  # changed classes below which the scatter and histogram are a sentence
LOSS_COLOUR, GAIN_COLOUR, NEUTRAL_COLOUR = "#c0392b", "#27ae60", "#34495e"


def nothing_to_show(kind: str, table) -> str | None:
    """The sentence that replaces a figure with nothing to show (no class changed, no confusion introduced, a
    scatter of one point, a histogram of one bar, no flip), or None when the figure says something. `kind`: the
    figure's name before its variant (class_drift, class_scatter, drift_histogram, flips, confusions); `table` its
    input."""
    variant, reference = table.attrs.get("variant", "variant"), table.attrs.get("reference", "reference")
    if kind == "class_drift" and not (table["delta"] != 0).any():
        return f"No class changed its top-1 accuracy: {variant} vs {reference}, {len(table)} classes."
    changed = table[table["delta"] != 0] if kind in ("class_scatter", "drift_histogram") else None
    if changed is not None and 0 < len(changed) < DISTRIBUTION_MIN_CHANGED:
        # A scatter or histogram of a few changed classes among many unchanged ones is one dot or one bar off a
        # pile at zero: the drift bars already show every change.
        listed = ", ".join(f"{_short(row.name, 24)} {row.delta * 100:+.0f} pts" for row in changed.itertuples())
        return (f"Only {len(changed)} of {len(table)} classes changed their top-1 accuracy ({listed}): the bars "
                f"above show {'it' if len(changed) == 1 else 'them all'}, so no scatter or distribution is drawn.")
    if kind == "class_scatter":
        points = set(zip((table["reference_accuracy"] * 100).round(6), (table["variant_accuracy"] * 100).round(6)))
        if not (table["delta"] != 0).any() and len(points) >= 2:
            return (f"Per-class top-1, {reference} vs {variant}: all {len(table)} classes sit on the diagonal (no "
                    f"class changed), so there is no scatter to draw.")
        if len(points) < 2:
            x, y = next(iter(points), (math.nan, math.nan))
            return (f"Per-class top-1, {reference} vs {variant}: all {len(table)} classes sit at one point "
                    f"({x:.0f} % vs {y:.0f} %), so there is no scatter to draw.")
    if kind == "drift_histogram":
        deltas = np.unique(table["delta"].to_numpy(float))
        if len(deltas) < 2:
            change = ("kept its accuracy" if not len(deltas) or deltas[0] == 0
                      else f"changed by {deltas[0] * 100:+.1f} pts")
            return (f"Per-class change, {variant} vs {reference}: every class {change} ({len(table)} classes), "
                    f"so there is no distribution to draw.")
    if kind == "flips" and not len(table):
        return (f"No image changed its top-1 prediction: {variant} vs {reference} "
                f"({table.attrs.get('compared', 0)} images).")
    if kind == "confusions" and not len(table):
        return f"No confusion introduced by {variant} (vs {reference})."
    return None


def plot_class_drift(drift, top: int = DRIFT_BARS):
    """Horizontal bars: the classes whose top-1 accuracy falls (red) or rises (green) most vs the reference,
    labelled with class name and image count."""
    variant, reference = drift.attrs.get("variant", "variant"), drift.attrs.get("reference", "reference")
    losers = drift[drift["delta"] < 0].head(top)
    gainers = drift[drift["delta"] > 0].sort_values("delta", ascending=False, kind="stable").head(top)
    shown = list(losers.itertuples()) + list(gainers.iloc[::-1].itertuples())
    title = f"Per-class top-1 change: {variant} vs {reference}"
    fig = _figure(8.5, max(3.0, 0.32 * len(shown) + 1.6) + 0.2 * fit(title, 5.5, 11).count("\n"))
    ax = fig.subplots()
    ax.set_xlabel(f"Δ top-1 accuracy vs {reference} (percentage points)")
    if not shown:
        ax.text(0.5, 0.5, "no class changed its accuracy", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        fit_title(ax, title)
        return fig
    y = np.arange(len(shown))[::-1]
    values = [row.delta * 100 for row in shown]
    ax.barh(y, values, color=[LOSS_COLOUR if v < 0 else GAIN_COLOUR for v in values])
    ax.set_yticks(y, [f"{_short(row.name)} (n={row.images})" for row in shown], fontsize=8)
    ax.axvline(0, color="black", linewidth=0.8)
    unchanged = int((drift["delta"] == 0).sum())
    # The counts go under the axis label, not over the bars.
    losing = int((drift["delta"] < 0).sum())
    ax.set_xlabel(f"Δ top-1 accuracy vs {reference} (percentage points)\n{losing} class{'es' if losing != 1 else ''} "
                  f"lose{'s' if losing == 1 else ''}, {int((drift['delta'] > 0).sum())} gain, {unchanged} unchanged")
    fit_title(ax, title)
    return fig


def plot_class_scatter(drift, annotate: int = 5):
    """Per-class top-1 of the reference (x) against the variant (y); points below the diagonal lost accuracy.
    Classes with identical accuracies share one marker, sized and labelled by how many they are."""
    variant, reference = drift.attrs.get("variant", "variant"), drift.attrs.get("reference", "reference")
    title = f"Per-class top-1: {reference} vs {variant} ({len(drift)} class{'es' if len(drift) != 1 else ''})"
    fig = _figure(5.6, 5.0 + 0.2 * fit(title, 4.6, 11).count("\n"))
    ax = fig.subplots()
    ax.plot([0, 100], [0, 100], color="grey", linewidth=0.8, linestyle="--")
    points = (drift.assign(x=(drift["reference_accuracy"] * 100).round(6), y=(drift["variant_accuracy"] * 100).round(6))
              .groupby(["x", "y"], sort=False).agg(classes=("name", list), worst=("delta", "min")).reset_index())
    x, y = points["x"].to_numpy(float), points["y"].to_numpy(float)
    counts = points["classes"].map(len).to_numpy()
    colours = np.where(y < x, LOSS_COLOUR, np.where(y > x, GAIN_COLOUR, NEUTRAL_COLOUR))
    ax.scatter(x, y, s=18 + 14 * np.sqrt(counts), c=list(colours), alpha=0.55)
    ax.set_xlim(-3, 103)
    ax.set_ylim(-3, 103)
    fit_title(ax, title, xlabel=f"{reference} top-1 per class (%)", ylabel=f"{variant} top-1 per class (%)")
    worst = points[points["y"] < points["x"]].sort_values("worst", kind="stable").head(annotate)
    _annotate_apart(fig, ax, [(", ".join(_short(n, 20) for n in row.classes[:2])
                               + (f" +{len(row.classes) - 2}" if len(row.classes) > 2 else ""), row.x, row.y)
                              for row in worst.itertuples()])
    return fig


def _annotate_apart(fig, ax, labels) -> None:
    """Label points (worst first), leaving out a label that would overlap one already placed or leave the axes:
    a crowded corner shows its worst classes, not a pile of text."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not labels:
        return
    FigureCanvasAgg(fig)
    fig.draw_without_rendering()  # the layout fixes the axes size, which the label positions depend on
    renderer = fig.canvas.get_renderer()
    placed = [ax.xaxis.label.get_window_extent(renderer), ax.yaxis.label.get_window_extent(renderer)]
    inside = ax.get_window_extent(renderer)
    for text, x, y in labels:
        label = ax.annotate(text, (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points",
                            ha="right" if x > 60 else "left")
        box = label.get_window_extent(renderer)
        if any(box.overlaps(other) for other in placed) or not (inside.x0 <= box.x0 and box.x1 <= inside.x1
                                                                 and inside.y0 <= box.y0 and box.y1 <= inside.y1):
            label.remove()
        else:
            placed.append(box)


def plot_drift_histogram(drift):
    """Histogram of the per-class accuracy changes (percentage points), with the mean marked."""
    variant, reference = drift.attrs.get("variant", "variant"), drift.attrs.get("reference", "reference")
    title = f"Distribution of per-class change: {variant} vs {reference}"
    fig = _figure(6.0, 3.4 + 0.2 * fit(title, 5.0, 11).count("\n"))
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
    ax.set_xlabel("Δ top-1 accuracy (percentage points)")
    ax.set_ylabel("classes")
    ax.yaxis.get_major_locator().set_params(integer=True)  # class counts: never "1.25 classes"
    fit_title(ax, title)
    return fig


def plot_flips_gallery(flip_table, thumbnails: Thumbnails, max_images: int = GALLERY_MAX_IMAGES):
    """Thumbnails of the images whose top-1 changed: the label when known, then both predictions with
    confidences; red = broken by the variant, green = fixed. A variant name too long for a caption is named once in
    the title and called "variant" under the photos; class names wrap rather than being cut."""
    variant, reference = flip_table.attrs.get("variant", "variant"), flip_table.attrs.get("reference", "reference")
    shown = flip_table.head(max_images)
    columns = max(1, min(GALLERY_COLUMNS, len(shown)))
    rows = max(1, math.ceil(len(shown) / columns))
    width = max(6.5, THUMB_INCHES * columns + 0.4)  # at least 6.5 inches, so the title fits over one thumbnail
    compared = flip_table.attrs.get("compared", len(flip_table))
    in_caption = variant if len(variant) <= CAPTION_NAME else "variant"
    title = fit(f"Top-1 flips: {variant}" + ("" if in_caption == variant else " (“variant” below)")
                + f" vs {reference} ({len(flip_table)} of {compared} images changed"
                + (f", first {len(shown)} shown)" if len(shown) < len(flip_table) else ")"), width - 0.3, 11)
    found = [thumbnails.get(row.image_id) for row in shown.itertuples()]
    captions = [_flip_caption(row, reference, in_caption, width / columns - 0.15)
                + ("" if present else "\n(image file not found)") for row, (_, present) in zip(shown.itertuples(), found)]
    lines = max((c.count("\n") + 1 for c in captions), default=0)
    fig = _figure(width, ((THUMB_INCHES - 0.1) * rows + rows * lines * CAPTION_POINTS * 1.25 / 72 + 0.5
                          if len(shown) else 1.6) + 0.2 * title.count("\n"))
    fig.suptitle(title, fontsize=11)
    if not len(shown):
        ax = fig.subplots()
        ax.text(0.5, 0.5, "no image changed its top-1 prediction", ha="center", va="center", transform=ax.transAxes)
        ax.axis("off")
        return fig
    axes = np.atleast_1d(fig.subplots(rows, columns)).ravel()
    colours = {"broken": LOSS_COLOUR, "fixed": GAIN_COLOUR}
    for ax, row, caption, (image, _) in zip(axes, shown.itertuples(), captions, found):
        ax.imshow(image)
        ax.set_title(caption, fontsize=CAPTION_POINTS, color=colours.get(row.outcome, "black"))
        ax.axis("off")
    for ax in axes[len(shown):]:
        ax.axis("off")
    # Constrained layout places multi-line axes titles under a wrapped suptitle only on its second pass: run the
    # first here, so the one render a notebook makes is already laid out.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    return fig


def _flip_caption(row, reference: str, variant: str, inches: float) -> str:
    """'true: …', then '<reference>: <class> 63%' and '<variant>: <class> 51%', each wrapped to the photo's width."""
    lines = [] if row.label < 0 else [f"true: {row.label_name}"]
    lines += [f"{_short(reference, CAPTION_NAME)}: {row.reference_name} {row.reference_confidence:.0%}",
              f"{variant}: {row.variant_name} {row.variant_confidence:.0%}"]
    return "\n".join(fit(line, inches, CAPTION_POINTS) for line in lines)


def plot_confusions(confusions, top: int = 10):
    """Bars: the (true → predicted) confusions the variant makes more often than the reference."""
    variant, reference = confusions.attrs.get("variant", "variant"), confusions.attrs.get("reference", "reference")
    shown = confusions.head(top)
    basis = confusions.attrs.get("basis", "labels")
    title = f"Confusions introduced by {variant} (vs {reference})" \
        + ("" if basis == "labels" else "\nunlabelled: the reference's top-1 stands in for the truth")
    fig = _figure(8.0, max(2.6, 0.35 * len(shown) + 1.5) + 0.2 * fit(title, 5.0, 11).count("\n"))
    ax = fig.subplots()
    xlabel = f"images: {variant} count − {reference} count"
    if not len(shown):
        ax.text(0.5, 0.5, "no confusion introduced", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        fit_title(ax, title, xlabel=xlabel)
        return fig
    y = np.arange(len(shown))[::-1]
    ax.barh(y, shown["introduced"].to_numpy(), color=LOSS_COLOUR)
    ax.set_yticks(y, [f"{_short(r.true_name, 20)} → {_short(r.predicted_name, 20)}" for r in shown.itertuples()],
                  fontsize=8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    fit_title(ax, title, xlabel=xlabel)
    return fig
