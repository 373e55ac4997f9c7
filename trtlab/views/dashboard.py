"""Accuracy and consistency dashboards, read from the results store only (nothing here runs inference).

`build_dashboard(store)` gathers the numbers (variant table, pairwise McNemar tests, per-class drift, flips,
introduced confusions); its figures are matplotlib `Figure`s made without pyplot (no global figure state to leak,
Agg rendering anywhere); `Dashboard.write_html()` writes one self-contained HTML file (PNG figures inlined as
base64, tables as HTML); `DashboardControls` puts variant/reference pickers and buttons in front of the same
functions; `python -m trtlab dashboard` is trtlab.cli.commands.dashboard.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.evaluation.metrics import (consistency_table, flips, introduced_confusions, pairwise_significance, per_class_drift)
from trtlab.evaluation.results import ResultsStore, VariantResult
from trtlab.views.figures import FIGURE_DPI, _figure, _short, figure_png, plot_variant_summary, stamp
from trtlab.core.workspace import atomic_path, atomic_write_text, check_writable_location, workspace_dir

GALLERY_DPI = 72  # galleries are photos, which compress poorly as PNG; a lower dpi keeps the HTML report small
GALLERY_MAX_IMAGES = 24
DRIFT_BARS = 12  # classes shown on each side (losers, gainers) of the drift bar chart
LOSS_COLOUR, GAIN_COLOUR, NEUTRAL_COLOUR = "#c0392b", "#27ae60", "#34495e"


# --------------------------------------------------------------------------------------------------------------
# Finding the store
# --------------------------------------------------------------------------------------------------------------

def find_result_stores(workspace=None, legacy: bool = False) -> list[Path]:
    """Result-store folders under `<workspace>/results`, most recently updated first (with `legacy=True`, the
    stores written by trtlab 0.1 without experiment identity, which are refused)."""
    root = workspace_dir(workspace) / "results"
    if not root.is_dir():
        return []
    stores = [p for p in root.iterdir()
              if p.is_dir() and ResultsStore(p).variants() and ResultsStore(p).is_legacy() == legacy]
    return sorted(stores, key=lambda p: max(f.stat().st_mtime for f in p.glob("*.json")), reverse=True)


def open_store(store=None, workspace=None) -> ResultsStore:
    """A ResultsStore from a store, a folder, or (None) the most recently updated store in the workspace."""
    if isinstance(store, ResultsStore):
        store.check_identity()
        return store
    if store is not None:
        folder = Path(store)
        if not folder.is_dir():
            raise FileNotFoundError(f"results folder {folder} does not exist; pass a folder under "
                                    f"<workspace>/results (python -m trtlab dashboard --list shows them)")
        opened = ResultsStore(folder)
        opened.check_identity()
        return opened
    stores = find_result_stores(workspace)
    if not stores:
        legacy = find_result_stores(workspace, legacy=True)
        if legacy:
            ResultsStore(legacy[0]).check_identity()  # raises: says why and how to rebuild
        raise FileNotFoundError(f"no stored results under {workspace_dir(workspace) / 'results'}; evaluate a model "
                                f"first (python -m trtlab demo, or trtlab.evaluate(...))")
    return ResultsStore(stores[0])


def load_results(stores, workspace=None) -> tuple[ResultsStore, dict[str, VariantResult]]:
    """(first store, every stored result) of one or several stores — which must hold one experiment: results of
    different models or evaluation sets are refused (identity.MixedExperimentError names both)."""
    from trtlab.evaluation.identity import check_one_experiment

    stores = [stores] if isinstance(stores, (ResultsStore, str, os.PathLike)) or stores is None else list(stores)
    opened = [open_store(s, workspace) for s in stores]
    results: dict[str, VariantResult] = {}
    for store in opened:
        for name, result in store.load_all().items():
            results[name if name not in results else f"{name}~{store.folder.name[-6:]}"] = result
    check_one_experiment(results)
    return opened[0], results


def resolve_selection(available, chosen=None, reference=None) -> tuple[list[str], str]:
    """(variants to show, reference) from what is stored and what the user picked: the reference defaults to
    fp32 (else the first stored variant) and is always shown, first."""
    available = list(available)
    if not available:
        raise ValueError("no stored variants to show; evaluate at least one variant first")
    chosen = list(chosen or available)
    unknown = [name for name in [*chosen, *([reference] if reference else [])] if name not in available]
    if unknown:
        raise KeyError(f"variant(s) {', '.join(map(repr, unknown))} not stored (stored: {', '.join(available)}); "
                       f"evaluate them first or pick from the stored ones")
    reference = reference or ("fp32" if "fp32" in chosen else chosen[0])
    return [reference] + [name for name in chosen if name != reference], reference


# --------------------------------------------------------------------------------------------------------------
# Thumbnails for the flips gallery: decode cache (already decoded crops) → original file → placeholder
# --------------------------------------------------------------------------------------------------------------

class Thumbnails:
    """Crops of stored images, looked up by image id without running any model.

    Sources, in order: the decode cache passed in; the decode cache the results were evaluated from (found in the
    workspace through the run record); the original file (absolute id, or `image_root`/id) decoded with the
    record's preprocessing; a grey placeholder when the image cannot be found.
    """

    def __init__(self, result: VariantResult, store_folder=None, decode_cache=None, image_root=None):
        self.record = result.record
        self.image_root = Path(image_root) if image_root else None
        self.missing: list[str] = []
        self._crops = None
        self._index: dict[str, int] = {}
        self._crop_size = int((self.record.get("preprocess") or {}).get("crop", 224))
        if decode_cache is not None:
            self._use_cache(decode_cache.crops, decode_cache.dataset.image_ids(),
                            np.flatnonzero(np.asarray(decode_cache.status) == 1))
        elif store_folder is not None:
            self._find_cache(Path(store_folder), result)

    def _use_cache(self, crops, ids, decoded):
        self._crops = crops
        decoded = set(int(i) for i in decoded)
        self._index = {image_id: i for i, image_id in enumerate(ids) if i in decoded}
        self._crop_size = int(crops.shape[1])

    def _find_cache(self, store_folder: Path, result: VariantResult) -> None:
        from trtlab.data.decode_cache import DECODED

        dataset = self.record.get("dataset") or {}
        key = dataset.get("decode_cache")
        if not key or store_folder.parent.name != "results":
            return
        folder = store_folder.parent.parent / "decode_cache" / key
        try:
            meta = json.loads((folder / "meta.json").read_text())
            status = np.load(folder / "status.npy")
            if meta.get("fingerprint") != dataset.get("fingerprint"):
                return  # the cache was rebuilt for changed files: its crops are not these images
            crops = np.memmap(folder / "crops.u8", np.uint8, "r", shape=tuple(meta["shape"]))
        except (OSError, ValueError, KeyError):
            return
        decoded = np.flatnonzero(status == DECODED)
        # Evaluation stores the decoded images in cache order, so the k-th stored id is the k-th decoded crop.
        if len(decoded) == len(result.image_ids):
            self._crops = crops
            self._index = {image_id: int(i) for image_id, i in zip(result.image_ids, decoded)}
            self._crop_size = int(crops.shape[1])

    def get(self, image_id: str) -> tuple[np.ndarray, bool]:
        """(uint8 HWC image, found). `found` is False for the placeholder."""
        if self._crops is not None and image_id in self._index:
            return np.asarray(self._crops[self._index[image_id]]), True
        from trtlab.data.preprocess import ImageDecodeError, decode_image, get_preprocess

        candidates = [Path(image_id)] if os.path.isabs(image_id) else []
        if self.image_root is not None:
            candidates.insert(0, self.image_root / image_id)
        spec = get_preprocess(self.record["preprocess"]) if self.record.get("preprocess") else get_preprocess("tf-lite")
        for path in candidates:
            if path.is_file():
                try:
                    return decode_image(path, spec), True
                except ImageDecodeError:
                    break
        self.missing.append(image_id)
        return np.full((self._crop_size, self._crop_size, 3), 200, np.uint8), False


# --------------------------------------------------------------------------------------------------------------
# Figures (matplotlib Figure objects, no pyplot)
# --------------------------------------------------------------------------------------------------------------

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


@dataclass
class Dashboard:
    """Everything the dashboard shows, computed from stored results. Figures are made on demand and cached."""

    store: ResultsStore
    results: dict[str, VariantResult]
    reference: str
    table: object  # pandas DataFrame: consistency_table
    significance: object  # pandas DataFrame: pairwise_significance
    drift: dict = field(default_factory=dict)  # variant → per_class_drift
    flips: dict = field(default_factory=dict)  # variant → flips
    confusions: dict = field(default_factory=dict)  # variant → introduced_confusions
    notes: list = field(default_factory=list)
    focus: list = field(default_factory=list)  # compared variants whose per-variant figures are drawn
    decode_cache: object = None
    image_root: str | None = None
    workspace: object = None
    _pngs: dict = field(default_factory=dict, repr=False)

    @property
    def compared(self) -> list[str]:
        """The variants compared with the reference."""
        return [name for name in self.results if name != self.reference]

    @property
    def labelled(self) -> int:
        return int(self.table.loc[self.reference, "labelled"])

    def figure_names(self, variants=None) -> list[str]:
        """The summary, then the per-variant figures of `variants` (default: the focused ones)."""
        names = ["summary"]
        for variant in (self.focus if variants is None else variants):
            names += self.variant_figure_names(variant)
        return names

    def variant_figure_names(self, variant: str) -> list[str]:
        names = [f"class_drift-{variant}", f"class_scatter-{variant}", f"drift_histogram-{variant}"] \
            if self.labelled else []
        return names + [f"flips-{variant}", f"confusions-{variant}"]

    def least_agreeing(self, count: int) -> list[str]:
        """The `count` compared variants that agree least with the reference (top-1 agreement, then cosine)."""
        rows = self.table.loc[self.compared]
        order = rows.sort_values([f"top1_agreement_vs_{self.reference}", "cosine_mean"], kind="stable")
        return [str(name) for name in order.index[:count]]

    def make_figure(self, name: str):
        """A fresh matplotlib Figure by name (see figure_names()), stamped with the experiment it shows."""
        figure = self._make_figure(name)
        experiment = self.store.experiment
        stamp(figure, experiment.short() if experiment else "")
        return figure

    def _make_figure(self, name: str):
        if name == "summary":
            return plot_variant_summary(self.table, self.reference)
        kind, _, variant = name.partition("-")
        if variant not in self.results or variant == self.reference:
            raise KeyError(f"no figure {name!r}; available: {', '.join(self.figure_names(self.compared))}")
        if kind == "class_drift":
            return plot_class_drift(self.drift[variant])
        if kind == "class_scatter":
            return plot_class_scatter(self.drift[variant])
        if kind == "drift_histogram":
            return plot_drift_histogram(self.drift[variant])
        if kind == "flips":
            thumbs = Thumbnails(self.results[self.reference], self.store.folder, self.decode_cache, self.image_root)
            return plot_flips_gallery(self.flips[variant], thumbs)
        if kind == "confusions":
            return plot_confusions(self.confusions[variant])
        raise KeyError(f"no figure {name!r}; available: {', '.join(self.figure_names())}")

    def png(self, name: str) -> bytes:
        if name not in self._pngs:
            dpi = GALLERY_DPI if name.startswith("flips-") else FIGURE_DPI
            self._pngs[name] = figure_png(self.make_figure(name), dpi)
        return self._pngs[name]

    def pngs(self) -> dict[str, bytes]:
        """Every figure as PNG bytes, rendered once (with a progress bar: galleries decode thumbnails)."""
        from trtlab.core.progress import progress_iter

        names = self.figure_names()
        for name in progress_iter(names, desc="dashboard figures", unit="fig", enabled=len(names) >= 4):
            self.png(name)
        return {name: self._pngs[name] for name in names}

    def display_table(self):
        return format_variant_table(self.table)

    def display_significance(self):
        return format_significance(self.significance)

    def show_significance(self) -> None:
        """Display the pairwise McNemar table in a notebook, or say why there is none."""
        from IPython.display import HTML, Markdown, display

        if not len(self.significance):
            display(Markdown(f"Only **{self.reference}** is selected: a significance test needs two variants."))
        elif not int(self.significance["labelled"].max()):
            display(Markdown("No labelled images: accuracy differences (and their significance) cannot be measured; "
                             "see agreement and cosine in the variant table."))
        else:
            display(HTML(self.display_significance().to_html(escape=True, index=False)))

    def show(self) -> None:
        """Notes, tables and figures in a notebook (figures as PNG, so any matplotlib backend works)."""
        from IPython.display import HTML, Image, Markdown, display

        display(Markdown("\n".join(f"- {note}" for note in self.notes)))
        display(HTML(self.display_table().to_html(escape=True)))
        if len(self.significance):
            display(HTML(self.display_significance().to_html(escape=True, index=False)))
        for name, data in self.pngs().items():
            if name.endswith(tuple(f"-{v}" for v in self.focus)) and name.startswith(("class_drift-", "flips-")) \
                    and (name.startswith("class_drift-") or not self.labelled):
                display(Markdown(f"**{name.partition('-')[2]} vs {self.reference}**"))
            display(Image(data=data, format="png"))

    def most_changed(self) -> str | None:
        """The compared variant that agrees least with the reference (top-1 agreement, then mean cosine)."""
        return (self.least_agreeing(1) or [None])[0]

    def variant_tables(self, variant: str | None = None) -> dict:
        """Per-class drift, flips and introduced confusions of one compared variant (default: most_changed())."""
        if not self.compared:
            raise ValueError(f"only {self.reference} is selected: per-variant tables need a second variant")
        variant = variant or self.most_changed()
        if variant not in self.flips:
            raise KeyError(f"{variant!r} is not compared here; choose from {', '.join(self.compared)}")
        tables = {"flips": self.flips[variant], "introduced confusions": self.confusions[variant]}
        if variant in self.drift:
            tables = {"per-class drift": self.drift[variant], **tables}
        return tables

    def show_variant(self, variant: str | None = None, figures: bool | None = None) -> None:
        """Display variant_tables() of one variant in a notebook (and its figures, by default when show() did not
        already draw them), or say why there is nothing to show."""
        from IPython.display import Image, Markdown, display

        if not self.compared:
            display(Markdown(f"Only **{self.reference}** is selected: evaluate or select a second variant to see "
                             f"its per-class drift, flips and introduced confusions."))
            return
        variant = variant or self.most_changed()
        for title, table in self.variant_tables(variant).items():
            display(Markdown(f"**{variant} vs {self.reference}: {title}** ({len(table)} rows)"))
            if len(table):
                display(table.head(25))
        if variant not in self.compared:
            raise KeyError(f"{variant!r} is not compared here; choose from {', '.join(self.compared)}")
        if figures if figures is not None else variant not in self.focus:
            for name in self.variant_figure_names(variant):
                display(Image(data=self.png(name), format="png"))

    def save_pngs(self, folder=None) -> list[Path]:
        """Every figure as `<name>.png` in `folder` (default: the report folder), written atomically."""
        folder = Path(folder) if folder else self.report_dir()
        paths = []
        for name, data in self.pngs().items():
            path = folder / f"{name}.png"
            with atomic_path(path, suffix=".png") as tmp:
                tmp.write_bytes(data)
            paths.append(path)
        return paths

    def report_dir(self) -> Path:
        """<workspace>/reports/<store name>: the store's own workspace when it is writable, else the default one."""
        workspace = self.workspace
        if workspace is None and self.store.folder.parent.name == "results":
            candidate = self.store.folder.parent.parent
            try:
                check_writable_location(candidate)
                workspace = candidate
            except PermissionError:
                workspace = None  # results attached read-only (e.g. /kaggle/input): report into the workspace
        return workspace_dir(workspace) / "reports" / self.store.folder.name

    def write_html(self, path=None) -> Path:
        """One self-contained HTML file (figures inlined as base64 PNG), written atomically; returns its path."""
        path = Path(path) if path else self.report_dir() / "dashboard.html"
        atomic_write_text(path, render_html(self))
        return path


def fp16_variant(results: dict[str, VariantResult]) -> str | None:
    """The FP16 variant among `results`: the one named fp16, else the first whose recipe says precision fp16."""
    if "fp16" in results:
        return "fp16"
    return next((name for name, r in results.items() if (r.record.get("recipe") or {}).get("precision") == "fp16"),
                None)


DEFAULT_FOCUS = 2  # per-variant figures by default: every compared variant up to this many, else the least agreeing


def build_dashboard(store=None, variants=None, reference=None, decode_cache=None, image_root=None, workspace=None,
                    alpha: float = 0.05, focus=None, all_pairs: bool = False) -> Dashboard:
    """Load the chosen variants (default: all stored) from a results store and compute every dashboard table.

    store: a ResultsStore, its folder, a list of them (which must hold one experiment — different models or data
    are refused), or None for the most recently updated store in the workspace. reference: what the others are
    compared with (default fp32 when stored). Significance is each variant against the reference (`all_pairs=True`:
    every pair). `focus`: the variants whose per-variant figures (drift, flips, confusions) are drawn — default all
    when there are at most two, else the two that agree least with the reference. decode_cache (optional) supplies
    thumbnails; without it the evaluation's own cache or the original files are used.
    """
    store, stored = load_results(store, workspace)
    available = list(stored)
    if not available:
        raise FileNotFoundError(f"no stored results in {store.folder}; evaluate a variant first "
                                f"(python -m trtlab demo, or trtlab.evaluate(...))")
    names, reference = resolve_selection(available, variants, reference)
    results = {name: stored[name] for name in names}
    table = consistency_table(results, reference, compare_with=("fp32", fp16_variant(results) or "fp16"), alpha=alpha)
    significance = pairwise_significance(results, alpha=alpha, reference=None if all_pairs else reference)
    dash = Dashboard(store, results, reference, table, significance,
                     decode_cache=decode_cache, image_root=image_root, workspace=workspace)
    ref = results[reference]
    labelled = int((ref.labels >= 0).sum())
    experiment = store.experiment
    notes = [f"Experiment: {experiment.describe() if experiment else store.folder}.",
             f"Results store {store.folder}; reference **{reference}**; variants: {', '.join(names)}."]
    # Stores beside this one (same workspace): other models or data, which are never mixed in — say they exist.
    others = [p for p in find_result_stores(store.folder.parent.parent) if p != store.folder] \
        if store.folder.parent.name == "results" else []
    if others:
        notes.append(f"{len(others)} other results store(s) in this workspace hold other models or data; they are "
                     f"never mixed in — `python -m trtlab dashboard --list` shows them, `--store` opens one.")
    if not dash.compared:
        notes.append(f"Only {reference} is {'stored' if len(available) == 1 else 'selected'}: agreement, "
                     f"significance, per-class drift and flips need a second variant"
                     + (" — evaluate an INT8 or FP16 variant (e.g. python -m trtlab calibrate) and re-run."
                        if len(available) == 1 else " — select another variant."))
    if labelled == 0:
        notes.append(f"None of the {len(ref)} images is labelled: showing consistency only (top-1 agreement, top-5 "
                     f"overlap, logit cosine, flips); accuracy, significance tests and per-class drift need labels.")
    elif labelled < len(ref):
        notes.append(f"{labelled} of {len(ref)} images are labelled: accuracy, significance and per-class drift use "
                     f"those; agreement, cosine and flips use all {len(ref)}.")
    for variant in dash.compared:
        result = results[variant]
        common = len(result.align(ref)[0])
        if common < max(len(result), len(ref)):
            notes.append(f"{variant} holds {len(result)} images and {reference} {len(ref)}: compared on the "
                         f"{common} they share.")
        if labelled:
            dash.drift[variant] = per_class_drift(result, ref)
        dash.flips[variant] = flips(result, ref)
        dash.confusions[variant] = introduced_confusions(result, ref)
    for row in dash.significance.itertuples():
        if row.labelled and row.first == reference:  # every other pair is in the significance table
            notes.append(row.verdict)
    if focus is None:
        focus = dash.compared if len(dash.compared) <= DEFAULT_FOCUS else dash.least_agreeing(DEFAULT_FOCUS)
    unknown = [name for name in focus if name not in dash.compared]
    if unknown:
        raise KeyError(f"focus variant(s) {', '.join(map(repr, unknown))} are not compared here; choose from "
                       f"{', '.join(dash.compared) or 'none'}")
    dash.focus = list(focus)
    if len(dash.focus) < len(dash.compared):
        notes.append(f"Per-variant figures for {', '.join(dash.focus)} (the least agreeing with {reference}); "
                     f"`dash.show_variant(name)` or `focus=[...]` for the others.")
    dash.notes = notes
    return dash


# --------------------------------------------------------------------------------------------------------------
# Tables for people (percentages, intervals) and the HTML report
# --------------------------------------------------------------------------------------------------------------

def _pct(value, digits: int = 2) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{100 * value:.{digits}f}%"


def _interval(row, metric: str) -> str:
    if not row["labelled"] or not np.isfinite(row[metric]):
        return "—"
    return f"{_pct(row[metric])} ({_pct(row[f'{metric}_low'], 1)}–{_pct(row[f'{metric}_high'], 1)})"


def format_variant_table(table):
    """The variant table with percentages, intervals and p-values as text, one row per variant."""
    import pandas as pd

    reference = table.attrs["reference"]
    rows = []
    for name, row in table.iterrows():
        out = {"images": int(row["images"]), "labelled": int(row["labelled"]),
               "top-1 (95% CI)": _interval(row, "top1"), "top-5 (95% CI)": _interval(row, "top5"),
               f"Δ top-1 vs {reference}": "—" if name == reference or not np.isfinite(row["delta_top1_vs_reference"])
               else f"{100 * row['delta_top1_vs_reference']:+.2f} pts",
               f"McNemar p vs {reference}": "—" if not np.isfinite(row["mcnemar_p_vs_reference"])
               else f"{row['mcnemar_p_vs_reference']:.3g}"}
        for other in table.attrs["compared_with"]:
            out[f"top-1 agreement vs {other}"] = _pct(row[f"top1_agreement_vs_{other}"])
            out[f"top-5 overlap vs {other}"] = _pct(row[f"top5_overlap_vs_{other}"])
        out[f"logit cosine vs {reference}: mean"] = f"{row['cosine_mean']:.5f}"
        out["1st percentile"] = f"{row['cosine_p1']:.5f}"
        rows.append(out)
    return pd.DataFrame(rows, index=pd.Index(list(table.index), name="variant"))


def format_significance(significance):
    import pandas as pd

    rows = []
    for row in significance.itertuples():
        if not row.labelled:
            rows.append({"pair": f"{row.second} vs {row.first}", "labelled": 0, "top-1": "—", "Δ top-1": "—",
                         "only second right / only first right": "—", "test": "—", "p": "—",
                         "significant (5%)": "needs labels"})
            continue
        rows.append({
            "pair": f"{row.second} vs {row.first}", "labelled": int(row.labelled),
            "top-1": f"{_pct(row.second_top1)} vs {_pct(row.first_top1)}",
            "Δ top-1": f"{100 * row.delta_top1:+.2f} pts",
            "only second right / only first right": f"{row.c} / {row.b}",
            "test": "exact binomial" if row.method == "exact" else "χ² (continuity-corrected)",
            "p": f"{row.pvalue:.3g}", "significant (5%)": "yes" if row.significant else "no"})
    return pd.DataFrame(rows)


def _flip_rows(flip_table, limit: int = 60):
    import pandas as pd

    shown = flip_table.head(limit)
    return pd.DataFrame({
        "image": [Path(i).name for i in shown["image_id"]],
        "label": [name if label >= 0 else "—" for label, name in zip(shown["label"], shown["label_name"])],
        "reference top-1": [f"{n} ({c:.0%})" for n, c in zip(shown["reference_name"], shown["reference_confidence"])],
        "variant top-1": [f"{n} ({c:.0%})" for n, c in zip(shown["variant_name"], shown["variant_confidence"])],
        "outcome": shown["outcome"],
    })


def _drift_rows(drift, top: int = 10):
    import pandas as pd

    changed = pd.concat([drift[drift["delta"] < 0].head(top),
                         drift[drift["delta"] > 0].sort_values("delta", ascending=False, kind="stable").head(top)])
    return pd.DataFrame({
        "class": changed["class"], "name": changed["name"], "images": changed["images"],
        "reference": [_pct(v, 1) for v in changed["reference_accuracy"]],
        "variant": [_pct(v, 1) for v in changed["variant_accuracy"]],
        "Δ": [f"{100 * v:+.1f} pts" for v in changed["delta"]],
    })


_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}h3{margin-top:1.2em}
table{border-collapse:collapse;font-size:0.85em;margin:8px 0}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%;margin:6px 0}
.notes li{margin:3px 0}.meta{color:#666;font-size:0.85em}
"""


def _img(data: bytes, alt: str) -> str:
    return (f'<img alt="{html.escape(alt)}" src="data:image/png;base64,'
            f'{base64.b64encode(data).decode("ascii")}">')


def _table_html(frame, index: bool = True) -> str:
    return frame.to_html(escape=True, index=index, na_rep="—", border=0)


def render_html(dash: Dashboard) -> str:
    """The dashboard as one HTML document with no external resources."""
    pngs = dash.pngs()
    experiment = dash.store.experiment
    title = f"trtlab accuracy dashboard — {experiment.short() if experiment else dash.store.folder.name}"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
             f"<p class='meta'>written {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from "
             f"stored results; nothing was re-run.</p>",
             "<ul class='notes'>" + "".join(f"<li>{html.escape(note).replace('**', '')}</li>" for note in dash.notes)
             + "</ul>", "<h2>Variants</h2>", _table_html(dash.display_table())]
    runs = []
    for name, result in dash.results.items():
        record = result.record
        backend = record.get("backend") or {}
        runs.append({"variant": name, "date": record.get("date", "—"),
                     "backend": ", ".join(f"{k}={v}" for k, v in backend.items()) or "—",
                     "model": "/".join(Path(str(record.get("model", "—"))).parts[-2:]),
                     "calibration images": (record.get("calibration") or {}).get("images", "—"),
                     "scales": (record.get("scales") or {}).get("source", "—"),
                     "recipe": json.dumps(record.get("recipe", {}), sort_keys=True)})
    if runs:
        import pandas as pd

        parts += ["<h3>Runs</h3>", _table_html(pd.DataFrame(runs), index=False)]
    parts += ["<h2>Is the difference real? (McNemar's test on paired top-1 correctness)</h2>"]
    if len(dash.significance):
        parts.append(_table_html(format_significance(dash.significance), index=False))
        parts.append("<p class='meta'>Exact two-sided binomial test when the two disagree on ≤ 25 labelled images, "
                     "chi-square with continuity correction above.</p>")
    else:
        parts.append("<p>Needs two variants.</p>")
    parts += ["<h2>Overview</h2>", _img(pngs["summary"], "summary")]
    rest = [v for v in dash.compared if v not in dash.focus]
    if rest:
        parts.append(f"<p class='meta'>Per-variant sections below: {html.escape(', '.join(dash.focus))} (least "
                     f"agreeing with {html.escape(dash.reference)}); not drawn: {html.escape(', '.join(rest))} — "
                     f"export with focus=[...] (CLI: --focus) to see them.</p>")
    for variant in dash.focus:
        parts.append(f"<h2>{html.escape(variant)} vs {html.escape(dash.reference)}</h2>")
        if variant in dash.drift:
            parts += ["<h3>Per-class accuracy drift</h3>", _img(pngs[f"class_drift-{variant}"], "class drift"),
                      _img(pngs[f"class_scatter-{variant}"], "class scatter"),
                      _img(pngs[f"drift_histogram-{variant}"], "drift histogram")]
            rows = _drift_rows(dash.drift[variant])
            parts.append(_table_html(rows, index=False) if len(rows) else "<p>No class changed its accuracy.</p>")
        flip_table = dash.flips[variant]
        parts += [f"<h3>Flips ({len(flip_table)} images changed top-1)</h3>", _img(pngs[f"flips-{variant}"], "flips")]
        if len(flip_table):
            parts.append(_table_html(_flip_rows(flip_table), index=False))
        confusions = dash.confusions[variant]
        parts += ["<h3>Confusions introduced</h3>", _img(pngs[f"confusions-{variant}"], "confusions")]
        if len(confusions):
            parts.append(_table_html(confusions.head(20), index=False))
    parts.append("</body></html>")
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------------------------
# Widgets
# --------------------------------------------------------------------------------------------------------------

class DashboardControls:
    """Pick variants (SelectMultiple) and the reference (Dropdown); "Show" redraws the dashboard below, "Export
    HTML" writes the report. The buttons call update() and export(), plain methods usable without a browser."""

    def __init__(self, store=None, decode_cache=None, image_root=None, workspace=None):
        import ipywidgets as widgets

        self.store = open_store(store, workspace)
        self.decode_cache, self.image_root, self.workspace = decode_cache, image_root, workspace
        available = self.store.variants()
        if not available:
            raise FileNotFoundError(f"no stored results in {self.store.folder}; evaluate a variant first")
        _, default_reference = resolve_selection(available)
        self.variants = widgets.SelectMultiple(options=available, value=tuple(available), description="variants",
                                               rows=min(8, len(available)))
        self.reference = widgets.Dropdown(options=available, value=default_reference, description="reference")
        self.show_button = widgets.Button(description="Show", button_style="primary")
        self.export_button = widgets.Button(description="Export HTML")
        self.status = widgets.HTML()
        self.output = widgets.Output()
        self.show_button.on_click(lambda _: self.update())
        self.export_button.on_click(lambda _: self.export())
        self.widget = widgets.VBox([
            widgets.HBox([self.variants, widgets.VBox([self.reference, self.show_button, self.export_button])]),
            self.status, self.output])
        self.dashboard: Dashboard | None = None
        self.exported: Path | None = None

    def build(self) -> Dashboard:
        """The dashboard for the current selection (no display)."""
        self.dashboard = build_dashboard(self.store, list(self.variants.value), self.reference.value,
                                         self.decode_cache, self.image_root, self.workspace)
        return self.dashboard

    def update(self) -> Dashboard | None:
        """Rebuild for the current selection and show it in the output area; errors are shown, not raised."""
        from IPython.display import clear_output

        with self.output:
            clear_output(wait=True)
            try:
                self.build().show()
                self.status.value = ""
            except (KeyError, ValueError, FileNotFoundError) as exc:
                self.status.value = f"<b style='color:#c0392b'>{html.escape(str(exc))}</b>"
                return None
        return self.dashboard

    def export(self) -> Path | None:
        """Write the HTML report for the current selection; the path is shown and returned."""
        try:
            dash = self.dashboard if self._current() else self.build()
            self.exported = dash.write_html()
        except (KeyError, ValueError, FileNotFoundError) as exc:
            self.status.value = f"<b style='color:#c0392b'>{html.escape(str(exc))}</b>"
            return None
        self.status.value = f"HTML report written: <code>{html.escape(str(self.exported))}</code>"
        return self.exported

    def _current(self) -> bool:
        if self.dashboard is None:
            return False
        names, reference = resolve_selection(self.store.variants(), list(self.variants.value), self.reference.value)
        return list(self.dashboard.results) == names and self.dashboard.reference == reference

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)


def controls(store=None, decode_cache=None, image_root=None, workspace=None) -> DashboardControls:
    """Widgets to pick variants and reference over a results store (display the returned object)."""
    return DashboardControls(store, decode_cache, image_root, workspace)


# --------------------------------------------------------------------------------------------------------------
# python -m trtlab dashboard
# --------------------------------------------------------------------------------------------------------------
