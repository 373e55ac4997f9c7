"""Issue 20: every figure reads at 1 to 10 variants with long labels — no two texts (titles, axis labels, tick
labels, legends, captions, the provenance stamp) overlap, none leaves the figure, legends sit off the axes, and the
agreement axes start at 0 (the cosine axis says where it starts).

Figures are rendered with Agg; the texts checked are the ones matplotlib really draws (Text.draw is recorded), so
ticks outside the view or labels hidden by `labelleft=False` do not count. TRTLAB_FIGURE_DIR=<folder> keeps the
PNGs for looking at them.
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest

from trtlab.evaluation.results import ResultsStore, VariantResult, top5_from_logits

LONG = "int8-percentile99.99@512b32s1+first_layer-fp16+last_layer-fp16~abc123"
# 11 classes, the longest ImageNet names among them (American Staffordshire terrier, black and gold garden spider, ...)
CLASSES = [180, 72, 202, 203, 210, 238, 179, 25, 1, 2, 3]


def _variant_names(count: int) -> list[str]:
    """fp32, then long INT8 labels (minmax and entropy among them from 3 variants on), up to `count` in all."""
    names = ["fp32", "int8-minmax@512b32s1+first_layer-fp16+last_layer-fp16~abc123",
             "int8-entropy@512b32s1+first_layer-fp16+last_layer-fp16~abc123", LONG]
    names += [f"int8-percentile99.{k}@512b32s1+first_layer-fp16+last_layer-fp16~abc12{k}" for k in range(9)]
    return names[:count]


def _recipe(name: str) -> dict:
    if name == "fp32":
        return {"precision": "fp32"}
    algorithm = name.split("-")[1].split("@")[0].rstrip("0123456789.")
    return {"precision": "int8", "algorithm": algorithm, "calibration_images": 512, "guards": ["first_layer=fp16"]}


def make_store(folder: Path, count: int, image_ids, seed: int = 0) -> ResultsStore:
    """`count` variants on the given images: fp32 right on ~80 %, each INT8 variant flipping a few more."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(rng.choice(CLASSES, len(image_ids)), np.int64)
    fp32 = labels.copy()
    wrong = rng.random(len(labels)) < 0.2
    fp32[wrong] = rng.choice(CLASSES, int(wrong.sum()))
    store = ResultsStore(folder)
    preprocess = {"name": "tf-lite", "resize_short": 256, "crop": 224, "mean": [127.0] * 3, "std": [128.0] * 3,
                  "channel_order": "RGB", "interpolation": "area"}
    base = rng.normal(0, 1.0, (len(labels), 1000)).astype(np.float32)
    for k, name in enumerate(_variant_names(count)):
        top1 = fp32.copy()
        if k:
            flip = rng.random(len(labels)) < 0.05 * k
            top1[flip] = rng.choice(CLASSES, int(flip.sum()))
        # INT8-like: the reference's logits plus noise growing with k (cosines 0.9x), the winner set to top1
        logits = base + rng.normal(0, 0.08 * k, base.shape).astype(np.float32)
        logits[np.arange(len(labels)), top1] = 6.0
        indices, probs = top5_from_logits(logits)
        store.save(VariantResult(name, list(image_ids), labels, indices, probs, logits.astype(np.float16),
                                 {"backend": {"backend": "hand"}, "recipe": _recipe(name), "preprocess": preprocess}))
    return store


@pytest.fixture
def image_ids(demo_data):
    # Real photos first (the gallery decodes them), then ids whose files are gone (placeholders).
    return [*demo_data.paths, *(f"/nonexistent/photo-{k}.jpg" for k in range(34))]


def drawn_texts(fig):
    """Every Text artist matplotlib draws when rendering `fig` (Agg), with its window extent."""
    import matplotlib.text
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    drawn = []
    original = matplotlib.text.Text.draw

    def record(self, renderer):
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append(self)

    FigureCanvasAgg(fig)
    matplotlib.text.Text.draw = record
    try:
        fig.canvas.draw()
    finally:
        matplotlib.text.Text.draw = original
    renderer = fig.canvas.get_renderer()
    return [(text, text.get_window_extent(renderer)) for text in drawn]


def layout_problems(fig) -> list[str]:
    """Texts that overlap each other or leave the figure; legends over axes."""
    texts = drawn_texts(fig)
    width, height = fig.bbox.width, fig.bbox.height
    problems = []
    for text, box in texts:
        if box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1 or box.y1 > height + 1:
            problems.append(f"outside the figure: {text.get_text()!r} {box.bounds}")
    for (a, box_a), (b, box_b) in itertools.combinations(texts, 2):
        shrunk_a = box_a.padded(-0.5)
        if shrunk_a.overlaps(box_b.padded(-0.5)):
            problems.append(f"overlap: {a.get_text()!r} and {b.get_text()!r}")
    renderer = fig.canvas.get_renderer()
    legends = list(fig.legends) + [sub_legend for sub in fig.subfigs for sub_legend in sub.legends]
    for legend in legends:
        box = legend.get_window_extent(renderer).padded(-1)
        for ax in fig.get_axes():
            if ax.get_visible() and ax.axison and box.overlaps(ax.bbox):
                problems.append(f"legend over axes {ax.get_title()!r}")
    return problems


STAMP = "efficientnet-lite0 [4c8411f6] · demo-photos, 20 evaluation images [bd4a848f] · tf-lite"


def _keep(fig, name: str) -> None:
    """Save the figure to $TRTLAB_FIGURE_DIR, after it was checked: constrained layout can move texts on a second
    render, so checking a saved figure would hide what the first render (the notebook's) shows."""
    folder = os.environ.get("TRTLAB_FIGURE_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(folder) / f"{name}.png", dpi=100)


@pytest.mark.parametrize("count", [1, 2, 5, 10])
def test_dashboard_figures_have_no_overlapping_or_clipped_text(count, image_ids, tmp_path):
    from trtlab.views.dashboard import build_dashboard
    from trtlab.views.figures import stamp

    store = make_store(tmp_path / f"store{count}", count, image_ids)
    dash = build_dashboard(store)
    names = dash.figure_names(dash.compared[:2])
    assert names[0] == "summary" and len(names) == 1 + 5 * min(2, count - 1)
    for name in names:
        fig = dash.make_figure(name)
        stamp(fig, STAMP)  # what the dashboard adds from a store's experiment (hand stores have none)
        problems = layout_problems(fig)  # the first render: the one a notebook shows
        _keep(fig, f"{count}-{name[:40]}")
        assert problems == [], name


@pytest.mark.parametrize("count", [2, 5, 10])
def test_head_to_head_figure_reads_at_any_size(count, image_ids, tmp_path):
    from trtlab.views.figures import stamp
    from trtlab.views.verdict import head_to_head

    store = make_store(tmp_path / f"h2h{count}", max(count, 3), image_ids)
    h2h = head_to_head(store.load_all())
    fig = h2h.figure()
    stamp(fig, STAMP)
    problems = layout_problems(fig)
    _keep(fig, f"{count}-head-to-head")
    assert problems == []
    assert [ax.get_xlim()[0] < 0 < ax.get_xlim()[1] for ax in fig.axes] == [True, True]


@pytest.mark.parametrize("count", [1, 2, 5, 10])
def test_report_figure_with_photos_is_captioned_and_reads(count, demo_data, demo_cache, tmp_path):
    from trtlab.views.report import plot_summary

    store = make_store(tmp_path / f"report{count}", count, demo_cache.dataset.image_ids()[:26])
    fig, table = plot_summary(store, decode_cache=demo_cache)
    problems = layout_problems(fig)
    _keep(fig, f"{count}-report")
    assert problems == []
    captions = [sub._suptitle.get_text() for sub in fig.subfigs if sub._suptitle is not None] if count else []
    assert captions == ["fp32's top-1 predictions on the first 16 evaluation photos (with confidence; red = wrong, "
                        "the true class below)"]
    assert list(table.index) == _variant_names(count)


def test_summary_axes_start_at_zero_and_the_cosine_axis_says_where_it_starts(image_ids, tmp_path):
    from trtlab.views.dashboard import build_dashboard

    dash = build_dashboard(make_store(tmp_path / "axes", 5, image_ids))
    accuracy, agreement, cosine = dash.make_figure("summary").axes[:3]
    assert accuracy.get_xlim() == (0, 100) and agreement.get_xlim() == (0, 100)
    start = cosine.get_xlim()[0]
    worst = float(dash.table["cosine_worst"].min())
    assert 0 < start < worst  # zoomed in on the cosines, and ...
    assert cosine.get_xlabel() == f"cosine (axis from {start:g}, not 0)"  # ... saying so
    # Variant names read horizontally on the y axis, top to bottom in stored order, wrapped at '+'.
    labels = [t.get_text().replace("\n", "") for t in accuracy.get_yticklabels()]
    assert labels == list(dash.results) and list(accuracy.get_yticks()) == [4, 3, 2, 1, 0]


def _title_and_legend_boxes(fig):
    """Window extents of the suptitle and of every legend (the figure's and its subfigures'), after a render."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = list(fig.legends) + [legend for sub in fig.subfigs for legend in sub.legends]
    return fig._suptitle.get_window_extent(renderer), [legend.get_window_extent(renderer) for legend in legends]


@pytest.mark.parametrize("count", [2, 4, 10])
def test_ab_plot_title_never_overlaps_its_legend(count, image_ids, tmp_path):
    """Issue 30: `result.plot()` (plot_summary without photos) drew its title over the legend row."""
    from trtlab.views.report import plot_summary

    store = make_store(tmp_path / f"ab{count}", count, image_ids)
    fig, _ = plot_summary(store, reference="fp32")
    title, legends = _title_and_legend_boxes(fig)
    assert legends and not any(title.overlaps(box) for box in legends)
    assert all(box.y1 <= title.y0 for box in legends)  # the legend row sits under the title
    assert layout_problems(fig) == []
    _keep(fig, f"{count}-ab-plot")


@pytest.mark.parametrize("images", [10, 3000])
def test_dashboard_figures_at_10_and_3000_images(images, tmp_path):
    """The per-variant figures at notebook size and at a few thousand images: drawn when they say something, one
    sentence when they have nothing to show, and readable either way."""
    from trtlab.views.dashboard import build_dashboard
    from trtlab.views.figures import stamp

    ids = [f"/nonexistent/photo-{k}.jpg" for k in range(images)]
    dash = build_dashboard(make_store(tmp_path / f"n{images}", 3, ids, seed=3), focus=["int8-minmax@512b32s1"
                                                                                         "+first_layer-fp16"
                                                                                         "+last_layer-fp16~abc123"])
    for name in dash.figure_names():
        sentence = dash.figure_sentence(name)
        if sentence is not None:
            assert name not in dash.pngs() and sentence.endswith(".")
            continue
        fig = dash.make_figure(name)
        stamp(fig, STAMP)
        assert layout_problems(fig) == [], name
        _keep(fig, f"{images}-images-{name[:32]}")
    if images >= 3000:  # thousands of images: every figure has something to show
        assert all(dash.figure_sentence(name) is None for name in dash.figure_names())


def test_figures_with_nothing_to_show_are_one_sentence():
    """No class changed, one point, one bar, no flip, no confusion: sentences, not empty axes."""
    import pandas as pd

    from trtlab.views.dashboard.figures import nothing_to_show

    def drift(reference, variant):
        frame = pd.DataFrame({"class": range(len(reference)), "name": [f"c{k}" for k in range(len(reference))],
                              "images": 1, "reference_accuracy": reference, "variant_accuracy": variant})
        frame["delta"] = frame["variant_accuracy"] - frame["reference_accuracy"]
        frame.attrs.update({"variant": "int8-minmax@6", "reference": "fp32"})
        return frame

    same = drift([1.0, 1.0, 0.0], [1.0, 1.0, 0.0])
    assert nothing_to_show("class_drift", same) == "No class changed its top-1 accuracy: int8-minmax@6 vs fp32, 3 classes."
    assert nothing_to_show("drift_histogram", same) == (
        "Per-class change, int8-minmax@6 vs fp32: every class kept its accuracy (3 classes), so there is no "
        "distribution to draw.")
    assert nothing_to_show("class_scatter", same) == (  # two points, (100, 100) and (0, 0), both on the diagonal
        "Per-class top-1, fp32 vs int8-minmax@6: all 3 classes sit on the diagonal (no class changed), so there is "
        "no scatter to draw.")
    one_point = drift([1.0, 1.0], [1.0, 1.0])
    assert nothing_to_show("class_scatter", one_point) == (
        "Per-class top-1, fp32 vs int8-minmax@6: all 2 classes sit at one point (100 % vs 100 %), so there is no "
        "scatter to draw.")
    lost = drift([1.0, 1.0, 0.0], [0.0, 1.0, 0.0])
    assert nothing_to_show("class_drift", lost) is None  # one class lost: the bars show it
    assert nothing_to_show("class_scatter", lost) == nothing_to_show("drift_histogram", lost) == (
        "Only 1 of 3 classes changed their top-1 accuracy (c0 -100 pts): the bars above show it, so no scatter or "
        "distribution is drawn.")
    spread = drift([1.0, 0.8, 0.6, 0.4, 0.2, 0.5], [0.9, 0.7, 0.4, 0.5, 0.0, 0.5])  # five classes changed
    assert all(nothing_to_show(kind, spread) is None for kind in ("class_drift", "class_scatter", "drift_histogram"))
    empty = pd.DataFrame(columns=["image_id"])
    empty.attrs.update({"variant": "fp16", "reference": "fp32", "compared": 20})
    assert nothing_to_show("flips", empty) == "No image changed its top-1 prediction: fp16 vs fp32 (20 images)."
    assert nothing_to_show("confusions", empty) == "No confusion introduced by fp16 (vs fp32)."
