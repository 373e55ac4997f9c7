"""Issue 20: every table reads the same for people — notebooks, the HTML dashboard, report.md, the CLI — with the
numbers kept for code; McNemar tables say who won.

The hand-built store of tests/test_dashboard.py is the known answer: on the 7 labelled images fp32 is right on 6,
fp16 on all 7, int8-a on 5; only fp32 is right on images 1 and 4 (int8-a broke them), only int8-a on image 3.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from test_dashboard import hand_ids, hand_store  # noqa: F401 (fixtures)
from trtlab.views import formatting
from trtlab.views.formatting import UNFORMATTED_FLOAT


def test_number_formats():
    assert formatting.percent(0.9) == "90.0 %" and formatting.percent(float("nan")) == "—"
    assert formatting.percent_ci(0.9, 0.698966, 0.972134) == "90.0 % (69.9–97.2)"
    assert formatting.percent_ci(1.0, 0.8389, 1.0) == "100.0 % (83.9–100.0)"
    assert formatting.percent_ci(0.5, float("nan"), 0.7) == "50.0 %"
    assert formatting.points(-0.05) == "-5.0 pts" and formatting.points(1 / 7) == "+14.3 pts"
    assert [formatting.pvalue(p) for p in (1.0, 0.5, 0.0312, 0.0012, 1e-7, None)] == [
        "1.00", "0.50", "0.031", "0.0012", "< 0.001", "—"]
    assert formatting.cosine(0.99370812) == "0.9937"
    assert [formatting.milliseconds(v) for v in (44.139577, 0.51234, 1234.5, 3.14159)] == [
        "44.1 ms", "0.512 ms", "1234 ms", "3.14 ms"]
    assert [formatting.number(v) for v in (6.0, 36.0, 3.4512, 61.84, 0.01234, 0.0004, 12345.6)] == [
        "6.00", "36.0", "3.45", "61.8", "0.0123", "4.00e-04", "12346"]
    assert formatting.ratio(1.7412) == "1.74×"
    # Nothing any of them writes looks like an unformatted float.
    written = [formatting.percent_ci(v, v / 2, (1 + v) / 2) for v in np.linspace(0, 1, 101)]
    written += [formatting.number(v) for v in np.geomspace(1e-6, 1e7, 200)]
    assert not [w for w in written if UNFORMATTED_FLOAT.search(w)]


def test_variant_table_shows_text_and_keeps_the_numbers(hand_store):
    from trtlab.views.report import report_tables

    full, table = report_tables(hand_store.load_all())
    assert list(table.shown.columns) == [
        "top-1 (95 % CI)", "top-5 (95 % CI)", "Δ top-1 vs fp32 (McNemar p)", "top-1 agreement with fp32 (95 % CI)",
        "top-1 agreement with fp16", "top-5 overlap with fp32", "logit cosine with fp32: mean / worst"]
    assert table.shown.loc["int8-a"].tolist() == [
        "71.4 % (35.9–91.8)", "100.0 % (64.6–100.0)", "-14.3 pts (p = 1.00)", "50.0 % (21.5–78.5)", "62.5 %",
        "97.5 %", "0.9250 / 0.5455"]
    assert table.caption == ("8 images (7 labelled); backend hand; intervals: 95 % Wilson; agreement, overlap and "
                             "cosine against fp32.")
    # The numbers, for code: indexing reads the compact A/B frame.
    assert table.loc["int8-a", "top1"] == pytest.approx(5 / 7) and list(table.index) == ["fp32", "fp16", "int8-a"]
    assert table["top1_agreement"].tolist() == pytest.approx([1.0, 0.875, 0.5]) and len(table) == 3
    assert table.raw.loc["int8-a", "mcnemar_p"] == pytest.approx(1.0)
    # Displayed: text and HTML of the formatted view, with the caption; nothing unformatted.
    assert repr(table).splitlines()[3].split()[:4] == ["int8-a", "71.4", "%", "(35.9–91.8)"] and table.caption in repr(table)
    html = table._repr_html_()
    assert "<th>top-1 (95 % CI)</th>" in html and "71.4 % (35.9–91.8)" in html and table.caption in html
    assert "| int8-a | 71.4 % (35.9–91.8) |" in table.markdown()
    for text in (repr(table), html, table.markdown()):
        assert not UNFORMATTED_FLOAT.search(text)
    assert UNFORMATTED_FLOAT.search(table.raw.to_string())  # (the raw frame does have them: the check can fail)


def test_unlabelled_and_mixed_tables_say_so(hand_store, tmp_path, hand_ids):  # noqa: F811
    from test_dashboard import _save_hand_store
    from trtlab.evaluation.identity import MixedBackendError
    from trtlab.views.report import report_tables

    unlabelled = _save_hand_store(tmp_path / "unlabelled", hand_ids, [-1] * 8)
    _, table = report_tables(unlabelled.load_all())
    assert "top-1 (95 % CI)" not in table.shown.columns  # no accuracy columns of dashes
    assert table.caption.startswith("8 images (none labelled: agreement and cosine only)")
    # Rows that differ in what every row usually shares get their own columns.
    results = hand_store.load_all()
    results["int8-a"].record["backend"] = {"backend": "trt"}
    with pytest.raises(MixedBackendError, match="refusing to compare"):
        report_tables(results)
    _, mixed = report_tables(results, allow_mixed_backends=True)
    assert mixed.shown["backend"].tolist() == ["hand", "hand", "trt"] and "backend" not in mixed.caption


def test_mcnemar_table_reads_the_right_way_round(hand_store):
    from trtlab.evaluation.significance import pairwise_significance
    from trtlab.views.tables import significance_view

    results = hand_store.load_all()
    against_fp32 = significance_view(pairwise_significance(results, reference="fp32"))
    shown = against_fp32.shown
    # Each row is a variant against fp32; the columns name fp32 and "variant" (the row): int8-a broke 2, fixed 1.
    assert list(shown.columns) == ["labelled images", "top-1: fp32 → variant", "only fp32 right",
                                   "only variant right", "McNemar p", "real difference? (5 %)"]
    assert shown.loc["int8-a"].tolist() == [7, "85.7 % → 71.4 % (-14.3 pts)", 2, 1, "1.00 (exact)", "no"]
    assert shown.loc["fp16"].tolist() == [7, "85.7 % → 100.0 % (+14.3 pts)", 0, 1, "1.00 (exact)", "no"]
    # Every pair: columns A and B name the variants, "only A right" counts what only A gets right.
    pairs = significance_view(pairwise_significance(results)).shown.set_index(["A", "B"])
    assert pairs.loc[("fp16", "int8-a"), ["only A right", "only B right"]].tolist() == [2, 0]
    assert pairs.loc[("fp32", "int8-a"), ["only A right", "only B right"]].tolist() == [2, 1]
    assert pairs.loc[("fp16", "int8-a"), "top-1: A → B"] == "100.0 % → 71.4 % (-28.6 pts)"


def test_report_markdown_and_print_summary_are_formatted(hand_store, tmp_path, capsys):
    from trtlab.views.report import write_report
    from trtlab.workflows.job import JobResult, print_summary

    report = write_report(hand_store, tmp_path / "report", reference="fp32")
    markdown = report["md"].read_text()
    assert "| variant | top-1 (95 % CI) |" in markdown and "| int8-a | 71.4 % (35.9–91.8) |" in markdown
    assert not UNFORMATTED_FLOAT.search(markdown)
    csv = report["csv"].read_text()  # for code: the numbers
    assert "0.714286" in csv
    job = JobResult(tmp_path / "model.onnx", None, hand_store, list(hand_store.variants()), report)
    assert job.table is report["view"] and job.data is report["table"]
    assert job.table.loc["fp16", "top1"] == pytest.approx(1.0)
    print_summary(job)
    printed = capsys.readouterr().out
    assert "FP32 top-1 on 7 labelled photos: 85.7 % (48.7–97.4)" in printed
    assert "int8-a: top-1 71.4 %, top-1 agreement with fp32 50.0 %, mean logit cosine 0.9250" in printed
    assert not UNFORMATTED_FLOAT.search(printed)


def test_dashboard_tables_for_people(hand_store):
    from trtlab.views.dashboard import build_dashboard
    from trtlab.views.dashboard.tables import variant_table_views

    dash = build_dashboard(hand_store)
    views = variant_table_views(dash.variant_tables("int8-a"))
    drift = views["per-class drift"].shown
    assert drift.to_dict("records")[0] == {"class": "tench", "images": 2, "fp32 top-1": "100.0 %",
                                           "int8-a top-1": "50.0 %", "Δ": "-50.0 pts"}
    assert views["flips"].shown["outcome"].tolist() == ["broken by int8-a", "broken by int8-a", "fixed by int8-a",
                                                        "unlabelled"]
    assert views["introduced confusions"].shown.columns.tolist() == [
        "true class", "int8-a predicts", "images (fp32)", "images (int8-a)", "introduced"]
    for view in [*views.values(), dash.table_view(), dash.significance_view()]:
        assert not UNFORMATTED_FLOAT.search(view.html() + view.text())
    assert views["per-class drift"].raw is dash.drift["int8-a"]


def test_unformatted_float_pattern():
    assert UNFORMATTED_FLOAT.search("top1 0.909091") and UNFORMATTED_FLOAT.search("44.139577 ms")
    assert not UNFORMATTED_FLOAT.search("90.0 % (69.9–97.2) 0.9937 44.1 ms 1.23e-03")
    assert re.fullmatch(UNFORMATTED_FLOAT, "0.98949") is not None


def test_kl_intervals_read_in_fixed_decimals_in_every_fidelity_table():
    """KL bounds below 0.001 in fixed decimals, as in the head-to-head (the dashboard's every-pair table showed
    '-9.0e-05 (-0.0011 … +9.0e-04)')."""
    import pandas as pd

    from trtlab.views.formatting import signed_nats
    from trtlab.views.tables import fidelity_pairs_view

    assert [signed_nats(v) for v in (-9.0e-05, 9.0e-04, -0.0011, 0.022, 0.0)] == \
        ["-0.0001", "+0.0009", "-0.0011", "+0.022", "+0.0000"]
    rows = [dict(first="int8-a", second="int8-b", metric="cosine", first_mean=0.9937, second_mean=0.9938,
                 difference=-0.0001, low=-0.0006, high=0.0004, n=20),
            dict(first="int8-a", second="int8-b", metric="kl", first_mean=0.0061, second_mean=0.0062,
                 difference=-9.0e-05, low=-0.0011, high=9.0e-04, n=20)]
    shown = fidelity_pairs_view(pd.DataFrame(rows), "fp32").shown
    assert shown.loc["int8-a vs int8-b", "KL difference, nats (95 % CI)"] == "-0.0001 (-0.0011 … +0.0009)"
