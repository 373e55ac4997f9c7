"""Issue 7: accuracy/consistency metrics, McNemar, dashboards (figures, HTML, widgets, CLI).

Metric math is checked on a small hand-built result set whose every number is worked out in the comments; the
significance test on textbook contingency tables; the flips gallery, thumbnails and HTML report on real results
of the demo model and a weight-perturbed copy of it.
"""
from __future__ import annotations

import base64
import dataclasses
import html.parser
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from trtlab.evaluation import metrics, significance
from trtlab.views import formatting
from trtlab.evaluation.results import ResultsStore, VariantResult, top5_from_logits

# ----------------------------------------------------------------------------------------------------------------
# A hand-built result set: 8 images, 6 classes. Each image's logits are a ranking: the class listed first gets 5,
# the next 4, ... the last 0 (exact in float16). Classes 0..3 are tench, goldfish, great white shark, tiger shark.
# ----------------------------------------------------------------------------------------------------------------
LABELS = [0, 0, 1, 1, 2, 2, 3, -1]
RANKINGS = {
    "fp32": [[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5], [1, 0, 2, 3, 4, 5], [2, 1, 0, 3, 4, 5],
             [2, 0, 1, 3, 4, 5], [2, 0, 1, 3, 4, 5], [3, 0, 1, 2, 4, 5], [4, 0, 1, 2, 3, 5]],
    # fp32 with image 3 fixed (top-1 1 = its label)
    "fp16": [[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5], [1, 0, 2, 3, 4, 5], [1, 2, 0, 3, 4, 5],
             [2, 0, 1, 3, 4, 5], [2, 0, 1, 3, 4, 5], [3, 0, 1, 2, 4, 5], [4, 0, 1, 2, 3, 5]],
    # vs fp32: image 1 broken (0→1), image 3 fixed (2→1), image 4 broken (2→3), image 7 changed (4→5, unlabelled)
    "int8-a": [[0, 1, 2, 3, 4, 5], [1, 0, 2, 3, 4, 5], [1, 0, 2, 3, 4, 5], [1, 2, 0, 3, 4, 5],
               [3, 2, 0, 1, 4, 5], [2, 0, 1, 3, 4, 5], [3, 0, 1, 2, 4, 5], [5, 0, 1, 2, 3, 4]],
}
# softmax of (5, 4, 3, 2, 1, 0): e^5 / Σ e^k = 148.41316 / 234.19842
TOP_CONFIDENCE = math.exp(5) / sum(math.exp(k) for k in range(6))


def _logits(rankings) -> np.ndarray:
    logits = np.zeros((len(rankings), 6), np.float32)
    for row, ranking in enumerate(rankings):
        for position, cls in enumerate(ranking):
            logits[row, cls] = 5 - position
    return logits


def _save_hand_store(folder: Path, image_ids, labels) -> ResultsStore:
    store = ResultsStore(folder)
    for variant, rankings in RANKINGS.items():  # saved in this order: fp32 is the oldest
        logits = _logits(rankings)
        indices, probs = top5_from_logits(logits)
        store.save(VariantResult(variant, list(image_ids), np.asarray(labels, np.int64), indices, probs,
                                 logits.astype(np.float16),
                                 {"preprocess": {"name": "tf-lite", "resize_short": 256, "crop": 224,
                                                 "mean": [127.0] * 3, "std": [128.0] * 3,
                                                 "channel_order": "RGB", "interpolation": "area"},
                                  "backend": {"backend": "hand"}, "recipe": {"precision": variant}}))
    return store


@pytest.fixture
def hand_ids(demo_data):
    # Real photo paths as ids (the gallery decodes them); the last one is gone, so it gets a placeholder.
    return [*demo_data.paths[:7], "/nonexistent/trtlab-missing-photo.jpg"]


@pytest.fixture
def hand_store(tmp_path, hand_ids) -> ResultsStore:
    return _save_hand_store(tmp_path / "hand-store", hand_ids, LABELS)


@pytest.fixture
def unlabelled_store(tmp_path, hand_ids) -> ResultsStore:
    return _save_hand_store(tmp_path / "unlabelled-store", hand_ids, [-1] * 8)


# ----------------------------------------------------------------------------------------------------------------
# McNemar on textbook tables
# ----------------------------------------------------------------------------------------------------------------

def test_mcnemar_matches_textbook_tables():
    # Armitage & Berry (1994, p. 127), two culture media on 50 sputum specimens, as worked in the StatsDirect
    # manual: Yates-corrected chi-square 5.785714, P = 0.0162; exact two-sided P = 0.0129.
    table = [[20, 12], [2, 16]]
    chi2 = significance.mcnemar(table, method="chi2")
    assert chi2["statistic"] == pytest.approx(5.785714, abs=1e-6)
    assert chi2["pvalue"] == pytest.approx(0.0162, abs=5e-5)
    exact = significance.mcnemar(table, method="exact")
    assert exact["pvalue"] == pytest.approx(0.0129, abs=5e-5)
    assert exact["pvalue"] == 212 / 16384  # 2·(C(14,0)+C(14,1)+C(14,2))/2^14, exactly
    # 14 discordant pairs ≤ 25: "auto" takes the exact test.
    assert significance.mcnemar(table)["method"] == "exact"
    # Bentur et al. (Fagerland, Lydersen & Laake 2013, Table 1): b=1, c=7 → exact p = 2·9/256 = 0.0703.
    assert significance.mcnemar([[1, 1], [7, 12]])["pvalue"] == pytest.approx(0.0703125, abs=1e-12)
    # The 314-patient example (b=121, c=59): uncorrected chi-square 21.35; 180 discordant → auto uses chi-square.
    uncorrected = significance.mcnemar(b=121, c=59, method="chi2", correction=False)
    assert uncorrected["statistic"] == pytest.approx(21.35, abs=0.01)
    auto = significance.mcnemar(b=121, c=59)
    assert auto["method"] == "chi2" and auto["statistic"] == pytest.approx(61 ** 2 / 180)
    # MedCalc's example: 3 + 1 discordant → binomial, P = 0.625.
    assert significance.mcnemar(b=3, c=1)["pvalue"] == pytest.approx(0.625)


def _exact_two_sided(k: int, n: int) -> float:
    """The exact McNemar p-value in integer arithmetic: min(1, 2·Σ_{i ≤ min(k, n−k)} C(n, i) / 2^n), correctly
    rounded (Python's int / int) — the values trtlab gave before its tails came from scipy."""
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2 ** n)


def test_mcnemar_keeps_the_exact_integer_values_and_handles_edges():
    for n in range(1, 61):
        for b in range(n + 1):
            exact = significance.mcnemar(b=b, c=n - b, method="exact")
            assert exact["pvalue"] == pytest.approx(_exact_two_sided(b, n), rel=1e-12, abs=0)
            assert exact["statistic"] == min(b, n - b)
    for b, c in [(30, 10), (100, 140), (2400, 2600)]:  # large counts forced exact: deep tails stay accurate
        assert significance.mcnemar(b=b, c=c, method="exact")["pvalue"] == pytest.approx(
            _exact_two_sided(b, b + c), rel=1e-12, abs=0)
    # The χ² tail with 1 dof is erfc(√(x/2)): the formula trtlab used before scipy.
    for b, c in [(30, 10), (100, 140), (13, 12), (0, 5)]:
        statistic = (abs(b - c) - 1) ** 2 / (b + c)
        chi2 = significance.mcnemar(b=b, c=c, method="chi2")
        assert chi2["statistic"] == statistic
        assert chi2["pvalue"] == pytest.approx(math.erfc(math.sqrt(statistic / 2)), rel=1e-12, abs=1e-300)
    assert significance.mcnemar(b=0, c=0) == {"b": 0, "c": 0, "discordant": 0, "method": "exact",
                                              "statistic": 0.0, "pvalue": 1.0}
    assert significance.mcnemar(b=6, c=6, method="chi2")["statistic"] == 0.0  # no correction when b == c (as R)
    assert significance.mcnemar(b=6, c=6, method="chi2")["pvalue"] == 1.0
    with pytest.raises(ValueError, match="2×2"):
        significance.mcnemar([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError, match="non-negative integers"):
        significance.mcnemar(b=-1, c=3)
    with pytest.raises(ValueError, match="non-negative integers"):
        significance.mcnemar(b=1.5, c=3)
    with pytest.raises(ValueError, match="both discordant counts"):
        significance.mcnemar(b=1)
    with pytest.raises(ValueError, match="unknown McNemar method"):
        significance.mcnemar(b=1, c=3, method="fisher")


@pytest.mark.parametrize("b, c, method", [
    (12, 13, "exact"), (5, 20, "exact"), (0, 25, "exact"), (1, 3, "exact"),  # ≤ 25 discordant: exact binomial
    (13, 13, "chi2"), (5, 21, "chi2"), (0, 26, "chi2"), (59, 121, "chi2"),  # 26 and above: corrected χ²
])
def test_mcnemar_auto_matches_scipy_direct_computation(b, c, method):
    from scipy import stats

    n = b + c
    test = significance.mcnemar(b=b, c=c)  # method="auto": the switch sits between 25 and 26 discordant pairs
    assert (test["method"], test["discordant"]) == (method, n)
    if method == "exact":
        # Two-sided at p = 1/2: twice the lower tail of Binomial(n, 1/2), capped at 1.
        assert test["pvalue"] == pytest.approx(min(1.0, 2 * stats.binom.cdf(min(b, c), n, 0.5)), rel=1e-12)
        assert test["pvalue"] == pytest.approx(_exact_two_sided(b, n), rel=1e-12)
    else:
        statistic = (abs(b - c) - (1 if b != c else 0)) ** 2 / n
        assert test["statistic"] == statistic
        assert test["pvalue"] == pytest.approx(stats.chi2.sf(statistic, df=1), rel=1e-12)


# ----------------------------------------------------------------------------------------------------------------
# Metrics on the hand-built set
# ----------------------------------------------------------------------------------------------------------------

def test_consistency_table_hand_computed(hand_store):
    results = hand_store.load_all()
    table = metrics.consistency_table(results)
    assert table.attrs["reference"] == "fp32" and table.attrs["compared_with"] == ["fp32", "fp16"]
    row = table.loc["int8-a"]
    # Labelled images 0-6: int8-a right on 0, 2, 3, 5, 6 → 5/7; every label is in its top-5 → 7/7.
    assert row["labelled"] == 7
    assert row["top1"] == pytest.approx(5 / 7) and row["top5"] == pytest.approx(1.0)
    assert (row["top1_low"], row["top1_high"]) == pytest.approx(metrics.wilson_interval(5, 7))
    assert table.loc["fp32", "top1"] == pytest.approx(6 / 7) and table.loc["fp16", "top1"] == pytest.approx(1.0)
    # Top-1 differs from fp32 on images 1, 3, 4, 7 → 4/8; from fp16 on 1, 4, 7 → 5/8.
    assert row["top1_agreement_vs_fp32"] == pytest.approx(0.5)
    assert row["top1_agreement_vs_fp16"] == pytest.approx(0.625)
    # Top-5 sets match except image 7 ({4,0,1,2,3} vs {5,0,1,2,3}: 4/5) → (7 + 0.8)/8.
    assert row["top5_overlap_vs_fp32"] == pytest.approx(0.975)
    # Cosines (|x|² = 55): swapping the top two → 54/55 (images 1, 3); image 4 → 49/55; image 7 → 30/55.
    assert row["cosine_mean"] == pytest.approx((4 * 55 + 54 + 54 + 49 + 30) / (8 * 55))
    # 1st percentile, linear interpolation: 30/55 + 0.07·(49/55 − 30/55).
    assert row["cosine_p1"] == pytest.approx((30 + 0.07 * 19) / 55)
    # Paired: both right 0,2,5,6; only fp32 right 1,4 (b=2); only int8-a right 3 (c=1) → exact p = 2·4/8 = 1.
    assert row["delta_top1_vs_reference"] == pytest.approx(5 / 7 - 6 / 7)
    assert row["mcnemar_p_vs_reference"] == pytest.approx(1.0)
    assert math.isnan(table.loc["fp32", "mcnemar_p_vs_reference"])
    # The existing variant table is untouched by the additions.
    assert metrics.variant_table(results, "fp32").loc["int8-a", "top1_agreement"] == pytest.approx(0.5)


def test_pairwise_significance_hand_computed(hand_store):
    results = hand_store.load_all()
    assert significance.paired_correctness(results["fp32"], results["int8-a"]).tolist() == [[4, 2], [1, 0]]
    pairs = significance.pairwise_significance(results).set_index(["first", "second"])
    assert list(pairs.index) == [("fp32", "fp16"), ("fp32", "int8-a"), ("fp16", "int8-a")]
    # fp16 is right on all 7, int8-a on 5: only-fp16 = images 1, 4 → b=2, c=0 → p = 2·(1/4) = 0.5.
    row = pairs.loc[("fp16", "int8-a")]
    assert (row["b"], row["c"], row["method"]) == (2, 0, "exact")
    assert row["pvalue"] == pytest.approx(0.5) and not row["significant"]
    assert row["delta_top1"] == pytest.approx(5 / 7 - 1)
    assert "not distinguishable from chance" in row["verdict"]


def test_per_class_drift_hand_computed(hand_store):
    results = hand_store.load_all()
    drift = metrics.per_class_drift(results["int8-a"], results["fp32"])
    # tench 2/2 → 1/2, great white shark 2/2 → 1/2, tiger shark 1/1 → 1/1, goldfish 1/2 → 2/2; losses first.
    assert drift["class"].tolist() == [0, 2, 3, 1]
    assert drift["name"].tolist() == ["tench", "great white shark", "tiger shark", "goldfish"]
    assert drift["images"].tolist() == [2, 2, 1, 2]
    assert drift["reference_correct"].tolist() == [2, 2, 1, 1]
    assert drift["variant_correct"].tolist() == [1, 1, 1, 2]
    assert drift["delta"].tolist() == pytest.approx([-0.5, -0.5, 0.0, 0.5])
    assert drift.attrs == {"variant": "int8-a", "reference": "fp32"}


def test_flips_and_introduced_confusions_hand_computed(hand_store, hand_ids):
    results = hand_store.load_all()
    table = metrics.flips(results["int8-a"], results["fp32"])
    # Broken first (images 1 and 4, equal confidence → stored order), then fixed (3), then unlabelled (7).
    assert table["image_id"].tolist() == [hand_ids[1], hand_ids[4], hand_ids[3], hand_ids[7]]
    assert table["outcome"].tolist() == ["broken", "broken", "fixed", "unlabelled"]
    assert table["reference_top1"].tolist() == [0, 2, 2, 4] and table["variant_top1"].tolist() == [1, 3, 1, 5]
    assert table["variant_name"].tolist()[:2] == ["goldfish", "tiger shark"]
    assert table["reference_confidence"].to_numpy() == pytest.approx(TOP_CONFIDENCE, rel=1e-5)
    assert table.attrs["compared"] == 8
    # fp32's only error is 1→2 (image 3), which int8-a no longer makes; int8-a adds 0→1 and 2→3.
    confusions = metrics.introduced_confusions(results["int8-a"], results["fp32"])
    assert confusions.attrs["basis"] == "labels"
    assert list(zip(confusions["true_class"], confusions["predicted_class"], confusions["introduced"])) == [
        (0, 1, 1), (2, 3, 1)]
    assert confusions["true_name"].tolist() == ["tench", "great white shark"]


def test_unlabelled_set_gives_consistency_only(unlabelled_store):
    results = unlabelled_store.load_all()
    table = metrics.consistency_table(results)
    assert table.loc["int8-a", "labelled"] == 0 and math.isnan(table.loc["int8-a", "top1"])
    assert table.loc["int8-a", "top1_agreement_vs_fp32"] == pytest.approx(0.5)
    assert math.isnan(table.loc["int8-a", "mcnemar_p_vs_reference"])
    comparison = significance.compare_accuracy(results["fp32"], results["int8-a"])
    assert comparison["labelled"] == 0 and "no labelled images" in comparison["verdict"]
    assert metrics.flips(results["int8-a"], results["fp32"])["outcome"].tolist() == ["unlabelled"] * 4
    assert len(metrics.per_class_drift(results["int8-a"], results["fp32"])) == 0
    # Without labels, the reference's top-1 stands in for the truth: the four flips are the pairs.
    confusions = metrics.introduced_confusions(results["int8-a"], results["fp32"])
    assert confusions.attrs["basis"] == "reference top-1"
    assert list(zip(confusions["true_class"], confusions["predicted_class"])) == [(0, 1), (2, 1), (2, 3), (4, 5)]


# ----------------------------------------------------------------------------------------------------------------
# Dashboard: figures, HTML, widgets, CLI
# ----------------------------------------------------------------------------------------------------------------

def _texts(fig):
    return [t.get_text() for t in fig.axes[0].get_yticklabels()]


def test_figures_render_with_expected_titles_and_axes(hand_store):
    from trtlab.views import dashboard

    dash = dashboard.build_dashboard(hand_store)
    assert dash.reference == "fp32" and dash.compared == ["fp16", "int8-a"]
    assert dash.figure_names() == ["summary"] + [f"{kind}-{v}" for v in ("fp16", "int8-a") for kind in (
        "class_drift", "class_scatter", "drift_histogram", "flips", "confusions")]
    summary = dash.make_figure("summary")
    assert [ax.get_title() for ax in summary.axes[:3]] == ["Accuracy on 7 labelled images (95 % CI)",
                                                           "Agreement with fp32 (95 % CI)", "Logit cosine with fp32"]
    assert [t.get_text() for t in summary.axes[0].get_yticklabels()] == ["fp32", "fp16", "int8-a"]

    drift = dash.make_figure("class_drift-int8-a")
    ax = drift.axes[0]
    assert ax.get_title() == "Per-class top-1 change: int8-a vs fp32"
    assert ax.get_xlabel() == "Δ top-1 accuracy vs fp32 (percentage points)\n2 classes lose, 1 gain, 1 unchanged"
    assert _texts(drift) == ["tench (n=2)", "great white shark (n=2)", "goldfish (n=2)"]
    assert [round(p.get_width()) for p in ax.patches] == [-50, -50, 50]

    scatter = dash.make_figure("class_scatter-int8-a").axes[0]
    assert (scatter.get_xlabel(), scatter.get_ylabel()) == ("fp32 top-1 per class (%)", "int8-a top-1 per class (%)")
    assert scatter.get_title() == "Per-class top-1: fp32 vs int8-a (4 classes)"

    hist = dash.make_figure("drift_histogram-int8-a").axes[0]
    assert hist.get_title() == "Distribution of per-class change: int8-a vs fp32"
    assert (hist.get_xlabel(), hist.get_ylabel()) == ("Δ top-1 accuracy (percentage points)", "classes")
    assert sum(p.get_height() for p in hist.patches) == 4  # one count per class

    gallery = dash.make_figure("flips-int8-a")
    assert gallery._suptitle.get_text() == "Top-1 flips: int8-a vs fp32 (4 of 8 images changed)"
    titles = [ax.get_title() for ax in gallery.axes if ax.get_title()]
    assert len(titles) == 4
    assert titles[0] == "true: tench\nfp32: tench 63%\nint8-a: goldfish 63%"
    assert "(image file not found)" in titles[3]  # the missing file gets the placeholder
    assert [ax.title.get_color() for ax in gallery.axes[:3]] == ["#c0392b", "#c0392b", "#27ae60"]

    confusions = dash.make_figure("confusions-int8-a")
    assert confusions.axes[0].get_title() == "Confusions introduced by int8-a (vs fp32)"
    assert _texts(confusions) == ["tench → goldfish", "great white shark → tiger shark"]

    no_flips = dash.make_figure("flips-fp16")  # fp16 changes one image: the gallery still renders
    assert no_flips._suptitle.get_text() == "Top-1 flips: fp16 vs fp32 (1 of 8 images changed)"
    for name in dash.figure_names():
        assert dash.png(name)[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(KeyError, match="available"):
        dash.make_figure("flips-int4")


class _HtmlAudit(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.external, self.tags, self.headings = [], [], [], []
        self._open_heading = None

    def handle_data(self, data):
        if self._open_heading:
            self.headings[-1] = (self._open_heading, self.headings[-1][1] + data)

    def handle_endtag(self, tag):
        if tag == self._open_heading:
            self._open_heading = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag in ("h2", "h3"):
            self._open_heading = tag
            self.headings.append((tag, ""))
        for key, value in attrs:
            if key == "src" and value.startswith("data:image/png;base64,"):
                self.images.append(base64.b64decode(value.split(",", 1)[1]))
            elif key in ("src", "href"):
                self.external.append(value)


def test_html_report_is_self_contained_and_atomic(hand_store, tmp_path):
    from trtlab.views import dashboard

    dash = dashboard.build_dashboard(hand_store)
    path = dash.write_html(tmp_path / "out" / "dash.html")
    audit = _HtmlAudit()
    audit.feed(path.read_text(encoding="utf-8"))
    assert not audit.external and "script" not in audit.tags and "link" not in audit.tags
    # Every figure with something to show, + the head-to-head's side-by-side drift (issue 30): fp16 introduces no
    # confusion, and with 1 (fp16) or 3 (int8-a) of 4 classes changed a scatter or histogram is a dot or a bar off
    # a pile at zero — each is one sentence, said once, not a figure.
    assert len(audit.images) == len(dash.pngs()) + 1 == 7
    assert sorted(dash.pngs()) == ["class_drift-fp16", "class_drift-int8-a", "confusions-int8-a", "flips-fp16",
                                   "flips-int8-a", "summary"]
    assert dash.figure_sentence("confusions-fp16") == "No confusion introduced by fp16 (vs fp32)."
    assert dash.figure_sentence("class_scatter-fp16") == dash.figure_sentence("drift_histogram-fp16") == (
        "Only 1 of 4 classes changed their top-1 accuracy (goldfish +50 pts): the bars above show it, so no scatter "
        "or distribution is drawn.")
    page = path.read_text(encoding="utf-8")
    assert "<p>No confusion introduced by fp16 (vs fp32).</p>" in page
    assert page.count("so no scatter or distribution is drawn") == 2  # once per variant
    assert all(data[:8] == b"\x89PNG\r\n\x1a\n" for data in audit.images)
    text = path.read_text(encoding="utf-8")
    assert "great white shark" in text
    assert [h for level, h in audit.headings if level == "h2"] == [
        "Variants", "Is the difference real? (McNemar's test on paired top-1 correctness)", "Overview",
        "Head to head: fp16 vs int8-a (reference fp32)", "fp16 vs fp32", "int8-a vs fp32"]
    assert [h for level, h in audit.headings if level == "h3"] == [
        "Runs", "Which is closer to fp32? Paired per-image fidelity"] + [
        "Accuracy and agreement", "Is the top-1 difference real? McNemar's test between fp16 and int8-a",
        "Which is closer to fp32? Paired per-image fidelity", "Classes each loses or gains",
        "Calibration thresholds"] + [  # fp16 has none: the note, under a heading that promises no table
        "Per-class accuracy drift", "Flips (1 image changed top-1)", "Confusions introduced",
        "Per-class accuracy drift", "Flips (4 images changed top-1)", "Confusions introduced"]
    # Variants, runs, McNemar; head to head: accuracy, McNemar, fidelity, drift side by side; fp16: drift rows,
    # flips (it introduces no confusion); int8-a: drift, flips, confusions.
    assert text.count("<table") == 13  # + every pair's paired fidelity
    assert html.escape(dash.compare("fp16", "int8-a").sentence, quote=False) in text
    assert not formatting.UNFORMATTED_FLOAT.search(re.sub(r"data:image/png;base64,[^\"]+", "", text))
    assert [p.name for p in path.parent.iterdir()] == ["dash.html"]  # no temp files left behind
    pngs = dash.save_pngs(tmp_path / "pngs")
    assert sorted(p.stem for p in pngs) == sorted(dash.pngs())


def test_dashboard_states_what_it_cannot_show(hand_store, unlabelled_store, tmp_path):
    from trtlab.views import dashboard

    dash = dashboard.build_dashboard(unlabelled_store)
    assert any("None of the 8 images is labelled" in note for note in dash.notes)
    assert dash.figure_names() == ["summary", "flips-fp16", "confusions-fp16", "flips-int8-a", "confusions-int8-a"]
    assert dash.make_figure("summary").axes[0].get_title() == "Accuracy (needs labels)"
    assert "needs labels" in dashboard.format_significance(dash.significance)["real difference? (5 %)"].tolist()
    assert "per-class drift" not in dash.variant_tables("int8-a")

    labelled = dashboard.build_dashboard(hand_store)
    assert labelled.notes == [
        f"Experiment: {hand_store.folder}.",
        f"Results store {hand_store.folder}; reference **fp32**; variants: fp32, fp16, int8-a.",
        "7 of 8 images are labelled: accuracy, significance and per-class drift use those; agreement, cosine and "
        "flips use all 8."]
    # Each variant's McNemar test against the reference: shown below the variant table, not among the notes.
    assert labelled.reference_tests == [
        "fp16 vs fp32: +14.3 pts top-1 on 7 labelled images; only fp32 right on 0, only fp16 on 1 (McNemar exact "
        "p = 1.00): not a real difference at the 5 % level.",
        "int8-a vs fp32: -14.3 pts top-1 on 7 labelled images; only fp32 right on 2, only int8-a on 1 (McNemar exact "
        "p = 1.00): not a real difference at the 5 % level."]
    assert labelled.reference_summary == ("McNemar's test against fp32 (table below): no variant's top-1 differs "
                                          "from fp32's at the 5 % level on 7 labelled images.")
    # The answer: what the INT8 variant costs per class (no verdict stored: the INT8 variant closest to fp32).
    assert str(labelled.answer()) == (
        "int8-a (the INT8 variant closest to fp32) changes top-1 on 3 of 4 labelled classes against fp32 (2 lose, "
        "1 gain); worst: tench, −50 points (100 % → 50 % of 2 images); each class's figure rests on 2 labelled "
        "images (median), too few to tell a real per-class change from chance.")
    assert str(dashboard.build_dashboard(unlabelled_store).answer()).startswith(
        "int8-a (the INT8 variant closest to fp32) changes the top-1 prediction of ")

    single = dashboard.build_dashboard(hand_store, variants=["fp32"])
    assert single.compared == [] and single.figure_names() == ["summary"] and len(single.significance) == 0
    assert any("need a second variant" in note for note in single.notes)
    assert single.write_html(tmp_path / "single.html").is_file()
    with pytest.raises(ValueError, match="second variant"):
        single.variant_tables()

    with pytest.raises(KeyError, match=r"'int4'.*stored: fp32, fp16, int8-a"):
        dashboard.build_dashboard(hand_store, reference="int4")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no stored results"):
        dashboard.build_dashboard(tmp_path / "empty")


def _displayed(monkeypatch) -> list:
    """What IPython.display.display is called with (as a notebook would render it), in order."""
    import IPython.display

    shown: list = []
    monkeypatch.setattr(IPython.display, "display", lambda *objects, **kwargs: shown.extend(objects))
    return shown


def _describe(shown) -> list[str]:
    from IPython.display import HTML, Image, Markdown

    kinds = {Markdown: "markdown", HTML: "html", Image: "image"}
    return [next((f"{name}: {obj.data}" if name == "markdown" else name for cls, name in kinds.items()
                  if isinstance(obj, cls)), type(obj).__name__) for obj in shown]


def test_notebook_display_order_and_what_it_says_when_empty(hand_store, monkeypatch):
    from trtlab.views import dashboard

    dash = dashboard.build_dashboard(hand_store)
    shown = _displayed(monkeypatch)
    dash.show()
    described = _describe(shown)
    assert described[0] == "markdown: " + "\n".join(f"- {note}" for note in dash.notes)
    sentences = {name: f"markdown: {dash.figure_sentence(name)}" for name in dash.figure_names()}
    # The per-variant McNemar tests in one sentence above their table, not repeated as bullets (issue 35's answer
    # first; the numbers stay in the table).
    assert described[1] == "html" and described[2] == f"markdown: {dash.reference_summary}"
    assert dash.reference_summary.startswith("McNemar's test against fp32 (table below): ")
    assert described[3:] == ["html", "image", "markdown: **fp16 vs fp32**", "image",
                             sentences["class_scatter-fp16"], "image", sentences["confusions-fp16"],
                             "markdown: **int8-a vs fp32**", "image", sentences["class_scatter-int8-a"], "image",
                             "image"]
    assert [obj.data for obj in shown if type(obj).__name__ == "Image"] == list(dash.pngs().values())

    shown.clear()
    dash.show_variant("int8-a")  # its figures are already drawn by show(): tables only
    assert _describe(shown) == ["markdown: **int8-a vs fp32: per-class drift** (4 classes, 3 changed)",
                                "html", "markdown: **int8-a vs fp32: flips** (4 rows)", "html",
                                "markdown: **int8-a vs fp32: introduced confusions** (2 rows)", "html"]
    tables = [obj.data for obj in shown if type(obj).__name__ == "HTML"]
    assert "<th>fp32 top-1</th>" in tables[0] and "<td>-50.0 pts</td>" in tables[0]
    assert "<td>broken by int8-a</td>" in tables[1] and "<td>tench (63 %)</td>" in tables[1]
    assert "<th>int8-a predicts</th>" in tables[2]
    shown.clear()
    dash.show_variant("int8-a", figures=True)
    assert _describe(shown)[6:] == ["image", sentences["class_scatter-int8-a"], "image", "image"]
    with pytest.raises(KeyError, match="not compared here"):
        dash.show_variant("int4")

    shown.clear()
    dash.show_significance()  # McNemar against fp32, then which of each pair is closer to fp32
    assert _describe(shown) == ["html", "markdown: **Which is closer to fp32?** Every pair, image by image:", "html"]
    pairs = dash.fidelity_view()
    assert list(pairs.shown.index) == ["fp16 vs int8-a"] and pairs.shown.iloc[0]["closer to fp32"] in (
        "fp16", "int8-a", "not distinguishable")
    assert pairs.raw.set_index("metric").loc["cosine", "n"] == 8

    single = dashboard.build_dashboard(hand_store, variants=["fp32"])
    shown.clear()
    single.show_variant()
    single.show_significance()
    assert _describe(shown) == [
        "markdown: Only **fp32** is selected: evaluate or select a second variant to see its per-class drift, flips "
        "and introduced confusions.",
        "markdown: Only **fp32** is selected: a significance test needs two variants."]


def test_resolve_selection():
    from trtlab.evaluation.stores import resolve_selection

    stored = ["fp16", "fp32", "int8-a"]
    assert resolve_selection(stored) == (["fp32", "fp16", "int8-a"], "fp32")
    assert resolve_selection(stored, ["int8-a"], "fp16") == (["fp16", "int8-a"], "fp16")
    assert resolve_selection(stored, ["int8-a", "fp16"]) == (["int8-a", "fp16"], "int8-a")
    with pytest.raises(KeyError, match="not stored"):
        resolve_selection(stored, ["int8-x"])
    with pytest.raises(ValueError, match="no stored variants"):
        resolve_selection([])


def test_fp16_reference_found_by_name_or_recipe(hand_store):
    from trtlab.evaluation.stores import fp16_variant
    from trtlab.views.dashboard import build_dashboard

    results = hand_store.load_all()
    assert fp16_variant(results) == "fp16"
    half = results.pop("fp16")
    half.record["recipe"] = {"precision": "fp16"}
    assert fp16_variant({**results, "half-precision": half}) == "half-precision"
    assert fp16_variant(results) is None
    # Without an FP16 variant selected, the table compares with the reference only.
    table = build_dashboard(hand_store, variants=["fp32", "int8-a"]).table
    assert table.attrs["compared_with"] == ["fp32"] and "top1_agreement_vs_fp16" not in table.columns



def test_widget_lists_variants_in_reading_order(hand_store):
    """Notebook 04 evaluates FP16 after 03's INT8 variants; the picker listed it last, below every INT8 one."""
    from trtlab.views import dashboard

    newest = max(p.stat().st_mtime for p in hand_store.folder.iterdir()) + 60
    for path in hand_store.folder.glob("fp16.*"):
        os.utime(path, (newest, newest))  # fp16 stored last
    assert hand_store.variants()[-1] == "fp16"
    controls = dashboard.controls(hand_store)
    assert controls.variants.options == ("fp32", "fp16", "int8-a") == controls.reference.options

def test_widget_callbacks_without_a_browser(hand_store):
    from trtlab.views import dashboard

    controls = dashboard.controls(hand_store)
    assert controls.variants.options == ("fp32", "fp16", "int8-a") and controls.reference.value == "fp32"
    controls.variants.value = ("int8-a",)
    controls.reference.value = "fp16"
    controls.show_button.click()  # the same call a browser click makes
    assert list(controls.dashboard.results) == ["fp16", "int8-a"] and controls.dashboard.reference == "fp16"
    assert controls.dashboard.table.loc["int8-a", "top1_agreement_vs_fp16"] == pytest.approx(0.625)
    controls.export_button.click()
    # A partial selection never replaces the full dashboard: its file is named by the selection, and says so.
    assert controls.exported == controls.dashboard.report_dir() / "dashboard-fp16+int8-a.html"
    assert controls.exported.is_file() and not (controls.exported.parent / "dashboard.html").exists()
    assert controls.status.value == (
        f"HTML report written: <code>{controls.exported}</code> — 2 of 3 stored variants (fp16, int8-a), reference "
        f"fp16: a partial dashboard, so dashboard.html (every variant) was left as it was.")
    assert all(w.style.description_width == "initial" for w in (controls.variants, controls.reference))
    # Reuses the dashboard it showed rather than rebuilding it ...
    shown = controls.dashboard
    assert controls.export() == controls.exported and controls.dashboard is shown
    # ... and rebuilds when the selection changed since.
    controls.variants.value = ("fp32", "int8-a")
    controls.reference.value = "fp32"
    controls.export()
    assert controls.dashboard is not shown and list(controls.dashboard.results) == ["fp32", "int8-a"]
    assert controls.exported.name == "dashboard-fp32+int8-a.html"
    assert "int8-a vs fp32" in controls.exported.read_text(encoding="utf-8")
    # Every variant against the default reference: the full dashboard.
    controls.variants.value = ("fp32", "fp16", "int8-a")
    assert controls.export().name == "dashboard.html"
    assert controls.status.value.endswith("— every stored variant, reference fp32.")


def test_cli_writes_report(hand_store, tmp_path, capsys):
    from trtlab.cli.main import main

    out = tmp_path / "cli" / "dashboard.html"  # --out names the folder; the file name is the dashboard's own
    assert main(["dashboard", "--store", str(hand_store.folder), "--variants", "fp32,int8-a", "--out",
                 str(out.parent), "--png"]) == 0
    printed = capsys.readouterr().out
    assert out.is_file() and (out.parent / "flips-int8-a.png").is_file()
    assert "int8-a vs fp32" in printed and str(out) in printed
    assert main(["dashboard", "--store", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == (f"error: results folder {tmp_path / 'missing'} does not exist — pass a folder "
                                       f"under <workspace>/results (python -m trtlab dashboard --list shows them)\n")
    assert main(["dashboard", "--store", str(hand_store.folder), "--reference", "int4"]) == 2
    assert capsys.readouterr().err == ("error: variant(s) 'int4' not stored (stored: fp32, fp16, int8-a) — evaluate "
                                       "them first or pick from the stored ones\n")


# ----------------------------------------------------------------------------------------------------------------
# Real results: the demo model against a copy with its weights rounded to 7-bit per-tensor (a real, harsher
# quantization error than INT8) — real photos, real flips, thumbnails from the real decode cache.
# ----------------------------------------------------------------------------------------------------------------

def _weights_fake_quantized(source: Path, target: Path, levels: int) -> Path:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    for init in model.graph.initializer:
        weights = numpy_helper.to_array(init)
        if weights.dtype != np.float32 or weights.size < 2:
            continue
        scale = float(np.abs(weights).max()) / levels or 1.0
        init.CopyFrom(numpy_helper.from_array((np.round(weights / scale) * scale).astype(np.float32), init.name))
    onnx.save(model, str(target))
    return target


@pytest.fixture(scope="module")
def real_store(demo_model, demo_cache, session_workspace, tmp_path_factory):
    from trtlab.evaluation.identity import Experiment
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.evaluation.evaluate import evaluate

    # Under <workspace>/results, beside the demo's decode cache, as evaluations normally are.
    store = ResultsStore(session_workspace / "results" / "dashboard-test-real")
    folder = tmp_path_factory.mktemp("perturbed")
    evaluate(demo_model, demo_cache, "fp32", store=store, progress=False)
    # The 7-bit copy is a variant of the demo model: it is stored under the demo model's experiment.
    experiment = Experiment.for_evaluation(inspect_classifier(demo_model), demo_cache, range(len(demo_cache.dataset)))
    evaluate(_weights_fake_quantized(demo_model, folder / "w7.onnx", 63), demo_cache, "weights-7bit",
             recipe={"weights": "7-bit per-tensor"}, store=store, progress=False, experiment=experiment)
    return store


def test_real_results_flips_and_significance(real_store, demo_cache, session_workspace, monkeypatch):
    import trtlab.data.preprocess
    from trtlab.views import dashboard

    dash = dashboard.build_dashboard(real_store)
    reference, variant = dash.results["fp32"], dash.results["weights-7bit"]
    changed = np.flatnonzero(reference.top1 != variant.top1)
    assert len(changed) > 0, "the 7-bit weights should change some predictions"
    flip_table = dash.flips["weights-7bit"]
    assert sorted(flip_table["image_id"]) == sorted(reference.image_ids[i] for i in changed)
    labelled = reference.labels >= 0
    ref_ok = reference.top1 == reference.labels
    var_ok = variant.top1 == variant.labels
    broken = int((labelled & ref_ok & ~var_ok).sum())
    fixed = int((labelled & ~ref_ok & var_ok).sum())
    assert (flip_table["outcome"] == "broken").sum() == broken
    row = dash.significance.iloc[0]
    assert (row["b"], row["c"]) == (broken, fixed)
    assert row["pvalue"] == pytest.approx(significance.mcnemar(b=broken, c=fixed)["pvalue"])
    assert dash.table.loc["weights-7bit", "top1_agreement_vs_fp32"] == pytest.approx(1 - len(changed) / len(reference))

    # Thumbnails come from the evaluation's own decode cache, found through the run record (decoding a file now
    # would fail: every crop is the cache's).
    def no_decoding(*args, **kwargs):
        raise AssertionError("a thumbnail was decoded from its file, not read from the decode cache")

    monkeypatch.setattr(trtlab.data.preprocess, "decode_image", no_decoding)
    thumbs = dashboard.Thumbnails(reference, real_store.folder)
    ids = demo_cache.dataset.image_ids()
    for image_id in reference.image_ids:
        image, found = thumbs.get(image_id)
        assert found and np.array_equal(image, demo_cache.crops[ids.index(image_id)])
    assert thumbs.missing == []
    gallery = dash.make_figure("flips-weights-7bit")
    monkeypatch.undo()
    shown = "" if len(changed) <= 20 else ", first 20 shown"
    assert gallery._suptitle.get_text() == (f"Top-1 flips: weights-7bit vs fp32 ({len(changed)} of {len(reference)} "
                                            f"images changed{shown})")
    assert len(reference) == 26
    assert not any("not found" in ax.get_title() for ax in gallery.axes)
    path = dash.write_html()
    assert path == session_workspace / "reports" / "dashboard-test-real" / "dashboard.html" and path.is_file()


# ----------------------------------------------------------------------------------------------------------------
# Thumbnails read the decode cache through its own reader: read-only, checked, never set aside
# ----------------------------------------------------------------------------------------------------------------

def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_decode_cache_opens_for_reading_only(demo_cache, demo_data, session_workspace, tmp_path):
    from trtlab.data.decode_cache import UnreadableCache, open_decode_cache

    stored = open_decode_cache(demo_cache.key, session_workspace, fingerprint=demo_data.fingerprint())
    assert stored.folder == demo_cache.folder and stored.meta["images"] == len(demo_data)
    assert np.array_equal(stored.valid_indices, demo_cache.valid_indices)
    assert np.array_equal(np.asarray(stored.crops), np.asarray(demo_cache.crops))
    with pytest.raises(ValueError, match="read-only"):
        stored.crops[0, 0, 0, 0] = 0
    with pytest.raises(UnreadableCache, match="built for other files"):
        open_decode_cache(demo_cache.key, session_workspace, fingerprint="0" * 16)
    with pytest.raises(UnreadableCache, match="not a folder name"):
        open_decode_cache(f"../{demo_cache.key}", session_workspace)
    with pytest.raises(UnreadableCache, match="FileNotFoundError"):
        open_decode_cache(demo_cache.key, tmp_path / "elsewhere")


@pytest.mark.parametrize("victim, damage, reason", [
    ("crops.u8", lambda p: p.write_bytes(p.read_bytes()[:-1]), "bytes, status"),
    ("status.npy", lambda p: p.write_bytes(b"not numpy"), "ValueError"),
    ("status.npy", lambda p: np.save(p, np.full(26, 7, np.int8)), "other than pending/decoded/failed"),
    ("meta.json", lambda p: p.write_text("[1, 2]"), "expected a JSON object"),
    ("meta.json", lambda p: p.write_text(p.read_text().replace('"format": 2', '"format": 99')), "format 99"),
])
def test_damaged_decode_cache_is_refused_untouched_and_thumbnails_fall_back(victim, damage, reason, real_store,
                                                                             demo_cache, demo_data, tmp_path):
    import shutil

    from trtlab.data.decode_cache import UnreadableCache, open_decode_cache
    from trtlab.views import dashboard

    workspace = tmp_path / "ws"
    copy = workspace / "decode_cache" / demo_cache.key
    shutil.copytree(demo_cache.folder, copy)
    damage(copy / victim)
    before = _files(copy)
    with pytest.raises(UnreadableCache, match=reason):
        open_decode_cache(demo_cache.key, workspace, fingerprint=demo_data.fingerprint())
    # The stored ids made relative to the photos' folder: only `image_root` (or the cache) can find them.
    reference = real_store.load("fp32")
    root = os.path.commonpath(reference.image_ids)
    relative = dataclasses.replace(reference, image_ids=[os.path.relpath(i, root) for i in reference.image_ids])
    thumbs = dashboard.Thumbnails(relative, workspace / "results" / "copied-store", image_root=root)
    assert _files(copy) == before  # nothing set aside, rebuilt or rewritten: reading never writes
    # The photos are decoded again from the original files with the record's preprocessing: the same crops.
    ids = demo_cache.dataset.image_ids()
    for image_id, original in list(zip(relative.image_ids, reference.image_ids))[:3]:
        image, found = thumbs.get(image_id)
        assert found and np.array_equal(image, demo_cache.crops[ids.index(original)])
    # Without the files either: a grey placeholder, and the id is listed as missing.
    blind = dashboard.Thumbnails(relative, workspace / "results" / "copied-store")
    image, found = blind.get(relative.image_ids[0])
    assert not found and image.shape == (224, 224, 3) and (image == 200).all()
    assert blind.missing == [relative.image_ids[0]]


def test_runs_table_reads_as_words_with_the_raw_recipe_one_click_away(hand_store, tmp_path):
    """Issue 30: the HTML "Runs" table shows when (UTC, to the minute) and the recipe in words; the raw JSON sits
    in a <details> under it."""
    from trtlab.views import dashboard
    from trtlab.views.dashboard.html_report import human_time, recipe_summary

    assert human_time("2026-11-28T04:19:04+00:00") == "28 Nov 2026, 04:19 UTC"
    assert human_time("2026-11-28T06:19:04+02:00") == "28 Nov 2026, 04:19 UTC"
    assert human_time(None) == "—" and human_time("yesterday") == "yesterday"
    record = {"recipe": {"algorithm": "entropy", "calibration_batch": 8, "calibration_images": 6,
                         "guards": ["first_layer=fp16", "node:fc"], "high_precision": "fp16", "precision": "int8"}}
    assert recipe_summary(record) == ("INT8 entropy, 6 calibration images (batch 8), guards: first_layer → fp16, "
                                      "node:fc, float path fp16")
    assert recipe_summary({"recipe": {"precision": "fp16"}}) == "FP16"
    text = dashboard.build_dashboard(hand_store).write_html(tmp_path / "d.html").read_text(encoding="utf-8")
    runs = text[text.index("<h3>Runs</h3>"):text.index("</table>", text.index("<h3>Runs</h3>"))]
    assert runs.count("<details><summary>raw recipe</summary><pre>") == 3
    assert "&quot;precision&quot;: &quot;int8-a&quot;" in runs  # the raw recipe, escaped, inside <details>
    assert "<td>FP16" in runs and "<td>fp32</td>" in runs


def test_reference_summary_names_the_variants_whose_top1_really_differs():
    from collections import namedtuple

    from trtlab.views.dashboard.build import _reference_summary

    Row = namedtuple("Row", "first second labelled delta_top1 significant")
    rows = [Row("fp32", "int8-a", 200, -0.06, True), Row("fp32", "int8-b", 200, -0.005, False)]
    assert _reference_summary(rows, "fp32", 0.05) == (
        "McNemar's test against fp32 (table below): a real top-1 difference at the 5 % level for int8-a (-6.0 pts); "
        "not for the others.")
    assert _reference_summary([], "fp32", 0.05) == ""
