"""Issue 20: the head-to-head verdict between two variants — which pair by default, McNemar between the two (not
each against FP32) with columns named by the variants, the classes each loses, the calibration thresholds that
differ most (read from real TensorRT-format caches), and one sentence saying whether the difference is real."""
from __future__ import annotations

import numpy as np
import pytest

from test_dashboard import hand_ids, hand_store  # noqa: F401 (fixtures)
from trtlab.evaluation.results import ResultsStore, VariantResult, top5_from_logits
from trtlab.views.formatting import UNFORMATTED_FLOAT


def _result(name, labels, top1, recipe, classes=10):
    logits = np.tile(np.arange(classes, dtype=np.float32)[::-1] / classes, (len(top1), 1))
    logits[np.arange(len(top1)), top1] = 5
    indices, probs = top5_from_logits(logits)
    return VariantResult(name, [f"img{i}" for i in range(len(top1))], np.asarray(labels, np.int64), indices, probs,
                         logits.astype(np.float16), {"backend": {"backend": "hand"}, "recipe": recipe})


def _int8(algorithm, images=64, guards=()):
    return {"precision": "int8", "algorithm": algorithm, "calibration_images": images, "calibration_batch": 8,
            "guards": list(guards), "seed": 0}


def test_head_to_head_on_the_hand_store(hand_store):
    from trtlab.views.verdict import head_to_head

    h2h = head_to_head(hand_store.load_all())
    # No minmax/entropy and one INT8 variant: the best two variants besides the reference, best first.
    assert (h2h.first, h2h.second, h2h.reference) == ("fp16", "int8-a", "fp32")
    # Labelled images 0-6: fp16 right on all, int8-a wrong on 1 and 4 → only fp16 right on 2, only int8-a on 0.
    assert (h2h.accuracy_test["b"], h2h.accuracy_test["c"]) == (2, 0)
    assert h2h.accuracy_test["pvalue"] == pytest.approx(0.5)
    # Top-1 cannot decide (p = 0.50) and the cosine interval spans 0 on 8 images: no recommendation yet, and
    # Connor's sample size for a 2-of-7 discordance: (1.96·√ψ + 0.8416·√(ψ − δ²))² / δ², ψ = δ = 2/7 → 25.
    assert h2h.sentence.startswith("Neither fp16 nor int8-a can be recommended yet: their logits are not "
                                   "distinguishably closer to fp32 over 8 images (cosine 0.9977 vs 0.9250, paired 95 "
                                   "% CI of the difference ")
    assert h2h.sentence.endswith("7 labelled images cannot tell whether the top-1 difference is real (100.0 % vs "
                                 "71.4 % on 7 labelled images, McNemar p = 0.50); about 25 labelled images would "
                                 "resolve a top-1 difference of this size (28.6 points; Connor 1987 sample size for "
                                 "McNemar, α 0.05, power 0.8).")
    assert (h2h.decision.ship, h2h.decision.decided_by, h2h.decision.images_needed) == (None, "undecided", 25)
    tests = h2h.test_table().shown
    assert list(tests.columns) == ["only fp16", "only int8-a", "McNemar p", "real difference? (5 %)"]
    assert tests.loc["top-1 right (7 labelled images)"].tolist() == [2, 0, "0.50 (exact)", "no"]
    # Agreement with fp32 on all 8: fp16 differs on image 3, int8-a on 1, 3, 4, 7 → only fp16 agrees on 1, 4, 7.
    assert tests.loc["top-1 agrees with fp32 (8 images)"].tolist() == [3, 0, "0.25 (exact)", "no"]
    assert h2h.losses() == ("fp16 loses 0 classes, gains 1 (goldfish); int8-a loses 2 classes (tench, great white "
                            "shark), gains 1 (goldfish) against fp32.")
    drift = h2h.drift_table().shown
    assert drift.loc["goldfish"].tolist() == [2, "50.0 %", "100.0 % (+50 pts)", "100.0 % (+50 pts)"]
    assert drift.loc["tench"].tolist() == [2, "100.0 %", "100.0 %", "50.0 % (-50 pts)"]
    assert "tiger shark" not in drift.index  # unchanged under both
    assert h2h.scales is None and "No calibration cache for fp16 and int8-a" in h2h.scale_notes[0]
    summary = h2h.summary_table().shown
    assert summary.loc["fp16", "top-1 agreement with fp32 (95 % CI)"] == "87.5 % (52.9–97.8)"
    text = repr(h2h)
    assert text.startswith("Head to head: fp16 vs int8-a (reference fp32)\n" + h2h.sentence)
    assert not UNFORMATTED_FLOAT.search(text + h2h.html())
    # Either order, explicitly; the partner of one given variant is found.
    swapped = head_to_head(hand_store.load_all(), "int8-a", "fp16")
    assert (swapped.accuracy_test["b"], swapped.accuracy_test["c"]) == (0, 2)
    assert head_to_head(hand_store.load_all(), "int8-a").second == "fp16"


def test_default_pair_is_minmax_vs_entropy_calibrated_alike(tmp_path):
    from trtlab.views.verdict import PairError, default_pair

    labels = list(range(10)) * 2
    store = ResultsStore(tmp_path / "pairs")
    store.save(_result("fp32", labels, labels, {"precision": "fp32"}))
    wrong = lambda k: [(c + 1) % 10 if i < k else c for i, c in enumerate(labels)]  # noqa: E731
    store.save(_result("int8-percentile99.99@64", labels, wrong(0), _int8("percentile")))
    store.save(_result("int8-minmax@64", labels, wrong(3), _int8("minmax")))
    store.save(_result("int8-minmax@8", labels, wrong(1), _int8("minmax", images=8)))
    store.save(_result("int8-entropy@64", labels, wrong(2), _int8("entropy")))
    results = store.load_all()
    # Both algorithms stored: minmax vs entropy, the pair calibrated alike (64 images) even though minmax@8 scores
    # better; percentile, the best of all, is not what the question is about.
    assert default_pair(results, "fp32") == ("int8-minmax@64", "int8-entropy@64")
    del results["int8-entropy@64"]
    assert default_pair(results, "fp32") == ("int8-percentile99.99@64", "int8-minmax@8")  # the best two INT8
    with pytest.raises(PairError, match="needs two variants besides the reference 'fp32'"):
        default_pair({"fp32": results["fp32"], "int8-minmax@8": results["int8-minmax@8"]}, "fp32")


def test_a_real_difference_is_called_one(tmp_path):
    from trtlab.views.verdict import head_to_head

    labels = [k % 10 for k in range(200)]
    store = ResultsStore(tmp_path / "real")
    store.save(_result("fp32", labels, labels, {"precision": "fp32"}))
    store.save(_result("int8-minmax@64", labels, [(c + 1) % 10 if i < 30 else c for i, c in enumerate(labels)],
                       _int8("minmax")))
    store.save(_result("int8-entropy@64", labels, [(c + 1) % 10 if i < 4 else c for i, c in enumerate(labels)],
                       _int8("entropy")))
    h2h = head_to_head(store.load_all())
    assert (h2h.first, h2h.second) == ("int8-minmax@64", "int8-entropy@64")
    assert (h2h.accuracy_test["b"], h2h.accuracy_test["c"]) == (0, 26) and h2h.accuracy_test["method"] == "chi2"
    assert h2h.sentence.startswith("Ship int8-entropy@64: it is right on more labelled images than int8-minmax@64 "
                                   "(top-1 85.0 % vs 98.0 % on 200 labelled images, McNemar p < 0.001); logit "
                                   "cosine with the reference ")
    assert (h2h.decision.ship, h2h.decision.decided_by, h2h.decision.images_needed) == \
        ("int8-entropy@64", "top-1", None)


def test_unlabelled_images_compare_agreement_with_the_reference(tmp_path):
    from trtlab.views.verdict import head_to_head

    truth = [k % 10 for k in range(12)]
    store = ResultsStore(tmp_path / "unlabelled")
    store.save(_result("fp32", [-1] * 12, truth, {"precision": "fp32"}))
    store.save(_result("int8-minmax@8", [-1] * 12, truth, _int8("minmax", 8)))
    store.save(_result("int8-entropy@8", [-1] * 12, truth, _int8("entropy", 8)))
    h2h = head_to_head(store.load_all())
    # Identical outputs: the paired cosine interval is 0…0, inside the margin — equivalent, ship either.
    assert h2h.sentence.startswith("int8-minmax@8 and int8-entropy@8 are equivalent — this rests on logit fidelity "
                                   "over 12 images: their logits are equally close to fp32 (cosine 1.0000 vs "
                                   "1.0000, paired 95 % CI of the difference +0.0000…+0.0000, within ±0.001); ship "
                                   "either. 12 images (agreement with fp32; no labels) cannot measure a top-1 cost "
                                   "(agreement 100.0 % vs 100.0 % on 12 images, agreement with fp32, McNemar p = "
                                   "1.00): a difference of up to 24 points would go unseen")
    assert h2h.sentence.endswith("so no number of images is predicted to resolve one.")
    assert h2h.decision.decided_by == "equivalent" and h2h.decision.ship is None
    assert list(h2h.test_table().shown.index) == ["top-1 agrees with fp32 (12 images)"]


def test_scales_where_two_calibration_caches_differ_most(tmp_path):
    from trtlab.quantization.calibration_cache import CacheMetadata, write_calibration_cache
    from trtlab.views.verdict import scale_differences

    meta = CacheMetadata(model_sha256="0" * 64, algorithm="minmax", preprocess={}, images=8)
    tensors = [f"t{k}" for k in range(14)]
    minmax = {t: (k + 1) / 127 for k, t in enumerate(tensors)}  # thresholds 1..14
    entropy = {t: s * (0.5 if t in ("t3", "t9") else 0.8 if t == "t0" else 1.0) for t, s in minmax.items()}
    entropy["only-in-entropy"] = 1.0
    a = write_calibration_cache(tmp_path / "minmax.cache", minmax, meta)
    b = write_calibration_cache(tmp_path / "entropy.cache",
                                entropy, CacheMetadata(**{**meta.__dict__, "algorithm": "entropy"}))
    frame, notes = scale_differences("int8-minmax@8", a, "int8-entropy@8", b, top=3)
    assert frame["tensor"].tolist() == ["t3", "t9", "t0"]
    assert frame["block"].tolist() == ["t3", "t9", "t0"]  # no graph given: the tensor names stand
    assert frame["first_threshold"].tolist() == pytest.approx([4.0, 10.0, 1.0], rel=1e-6)
    assert frame["second_threshold"].tolist() == pytest.approx([2.0, 5.0, 0.8], rel=1e-6)
    assert frame["ratio"].tolist() == pytest.approx([2.0, 2.0, 1.25], rel=1e-6)
    assert notes == ["3 of 14 activation tensors have thresholds more than 10 % apart (median int8-minmax@8 / "
                     "int8-entropy@8: 1.00×); threshold = scale × 127, TensorRT's per-tensor symmetric INT8."]
    assert scale_differences("a", a, "b", None)[0] is None
    # The same calibration (a plain and a recovered variant): one sentence, not a table of 1.00× rows.
    frame, notes = scale_differences("int8-minmax@8", a, "int8-minmax@8+biascorr", a)
    assert frame is None and notes == ["All 14 activation thresholds of int8-minmax@8 and int8-minmax@8+biascorr "
                                       "are identical (the same calibration): they differ elsewhere (weights, "
                                       "biases or guards), not in their scales."]


def test_demo_ab_verdict_reads_the_variants_calibration_caches(demo_model, ort_workspace):
    """Real minmax and entropy variants of the demo model: every entropy threshold is at most the minmax one (the
    largest |x| seen), the verdict names the tensors where they differ most, and says the 20 photos cannot tell
    the two apart."""
    from trtlab.data.demo import demo_dataset, demo_split
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.compare import compare

    dataset = demo_dataset()
    # ONNX Runtime pinned: the verdict's numbers below are those of its literal results (torch's differ slightly)
    result = compare(demo_model, dataset, [Recipe(algorithm=a) for a in ("minmax", "entropy")],
                     split=demo_split(dataset), workspace=ort_workspace, backend="ort", progress=False)
    h2h = result.verdict()
    assert (h2h.first, h2h.second) == ("int8-minmax@6", "int8-entropy@6")
    assert len(h2h.scales) == 10
    assert (h2h.scales["first_threshold"] >= h2h.scales["second_threshold"] * (1 - 1e-6)).all()
    assert h2h.scales["ratio"].iloc[0] > 1.1
    # Issue 26: on the 20 bundled photos the verdict decides from fidelity (minmax's logits are closer to FP32)
    # and says how many images would settle top-1.
    decision = h2h.decision
    assert decision.decided_by == "fidelity" and decision.ship == "int8-minmax@6"
    assert h2h.sentence.startswith("Ship int8-minmax@6 — this rests on logit fidelity over 20 images: its logits are "
                                   "closer to fp32 (cosine ")
    assert "20 labelled images cannot tell whether the top-1 difference is real" in h2h.sentence
    assert "on 20 labelled images, McNemar p = 1.00" in h2h.sentence and "Connor 1987" in h2h.sentence
    cos = decision.fidelity["cosine"]
    assert cos["first"] > cos["second"] and cos["low"] > 0 and decision.fidelity["kl"]["difference"] < 0
    assert decision.images_needed and decision.images_needed > 20
    assert f"about {decision.images_needed:,} labelled images would resolve" in h2h.sentence
    # One vocabulary: the thresholds are named by the model's blocks, the exporter's tensor name beside them.
    assert h2h.scale_table().shown.index.name == "block" and h2h.scales["block"].str.startswith("_").all()
    assert "Which is closer to fp32? Paired per-image fidelity" in h2h.text()
    assert result.data is result.table.raw and result.table.loc["fp32", "labelled"] == 20
    for part in (repr(result.table), result.table.html(), h2h.text(), h2h.html()):
        assert not UNFORMATTED_FLOAT.search(part.split("base64,")[0])


def test_ab_widget_ends_with_the_verdict(demo_model, session_workspace, capsys):
    """Run A/B (minmax and entropy, the widget's default) shows the formatted table, the figure and then the
    head-to-head; its labels are never cut ("calib ima…")."""
    from trtlab.data.demo import demo_dataset, demo_split
    from trtlab.workflows.compare import ab_widgets

    dataset = demo_dataset()
    panel = ab_widgets(demo_model, dataset, workspace=session_workspace, split=demo_split(dataset))
    controls = [panel.children[0].children[0], *panel.children[0].children[1].children, panel.children[2].children[0],
                panel.children[2].children[1], panel.children[3]]
    assert all(w.style.description_width == "initial" for w in controls)
    assert panel.children[0].children[1].children[0].description == "calibration images"
    capsys.readouterr()
    result = panel.run_callback()  # outside a kernel, display() prints what a notebook would render
    printed = capsys.readouterr().out
    assert printed.index("top-1 (95 % CI)") < printed.index("Head to head: int8-minmax@6 vs int8-entropy@6")
    assert result.verdict().sentence in printed
    assert not UNFORMATTED_FLOAT.search(printed)


# -- the decision (issue 26.1) ---------------------------------------------------------------------------------------
def _noisy(name, labels, noise, recipe, seed, classes=10, truth=None):
    """A result whose logits are the reference's plus Gaussian noise of size `noise` (top-1 kept); `truth`: the
    reference's top-1 where it differs from the labels (unlabelled images)."""
    truth = labels if truth is None else truth
    result = _result(name, labels, truth, recipe, classes)
    rng = np.random.default_rng(seed)
    logits = result.logits.astype(np.float32)
    jitter = rng.normal(0, noise, logits.shape).astype(np.float32)
    jitter[np.arange(len(labels)), truth] = 0  # the top-1 logit (5) stays on top: only fidelity differs
    logits = logits + np.clip(jitter, -1, 1)
    indices, probs = top5_from_logits(logits)
    return VariantResult(name, result.image_ids, result.labels, indices, probs, logits.astype(np.float16),
                         result.record)


def test_paired_interval_and_connor_sample_size_match_their_formulas():
    from scipy import stats

    from trtlab.evaluation.significance import mcnemar_sample_size, paired_interval

    diffs = np.array([0.012, 0.015, 0.009, 0.020, 0.011, 0.013, 0.010, 0.017])
    low, high = stats.t.interval(0.95, len(diffs) - 1, loc=diffs.mean(), scale=stats.sem(diffs))
    got = paired_interval(diffs)
    assert (got["mean"], got["low"], got["high"]) == pytest.approx((diffs.mean(), low, high))
    # Connor (1987): ψ = 0.3, δ = 0.1 → (1.96·√0.3 + 0.8416·√0.29)² / 0.01 = 233.1 → 234 pairs.
    assert mcnemar_sample_size(0.2, 0.1) == 234
    assert mcnemar_sample_size(0.1, 0.1) is None and mcnemar_sample_size(0, 0) is None
    # A larger difference needs fewer images; more power needs more.
    assert mcnemar_sample_size(0.3, 0.0) < mcnemar_sample_size(0.2, 0.1) < mcnemar_sample_size(0.2, 0.1, power=0.9)


def test_the_verdict_says_when_kl_does_not_back_the_cosine(monkeypatch):
    """Cosine decides; KL is quoted with what its own interval says: 'lower too' where it excludes 0 on the
    winner's side, 'not distinguishable' where it straddles 0 (notebook 03's recovered pair read as if KL agreed)."""
    import trtlab.views.decision as decision

    labels = [k % 10 for k in range(40)]
    reference = _result("fp32", labels, labels, {"precision": "fp32"})
    close = _noisy("int8-minmax@64", labels, 0.02, _int8("minmax"), seed=1)
    far = _noisy("int8-entropy@64", labels, 0.3, _int8("entropy"), seed=2)
    results = {"fp32": reference, close.variant: close, far.variant: far}
    real = decision.paired_fidelity

    def straddling(a, b, ref, level):
        fidelity = real(a, b, ref, level)
        fidelity["kl"] = {**fidelity["kl"], "low": -abs(fidelity["kl"]["low"]), "high": abs(fidelity["kl"]["high"])}
        return fidelity

    assert " nats, lower too). " in decision.decide(results, close.variant, far.variant, "fp32").sentence
    monkeypatch.setattr(decision, "paired_fidelity", straddling)
    verdict = decision.decide(results, close.variant, far.variant, "fp32")
    assert verdict.ship == close.variant and " nats, not distinguishable). " in verdict.sentence


def test_fidelity_decides_where_top1_cannot(tmp_path):
    """Same top-1 everywhere, one variant's logits noisier: ship the closer one, with the paired interval; identical
    noise: equivalent within the margin."""
    from trtlab.views.decision import decide

    labels = [k % 10 for k in range(40)]
    reference = _result("fp32", labels, labels, {"precision": "fp32"})
    close = _noisy("int8-minmax@64", labels, 0.02, _int8("minmax"), seed=1)
    far = _noisy("int8-entropy@64", labels, 0.3, _int8("entropy"), seed=2)
    results = {"fp32": reference, close.variant: close, far.variant: far}
    verdict = decide(results, far.variant, close.variant, "fp32")
    assert (verdict.ship, verdict.decided_by) == ("int8-minmax@64", "fidelity")
    cos = verdict.fidelity["cosine"]
    assert cos["high"] < 0 and verdict.fidelity["kl"]["low"] > 0  # far − close: lower cosine, higher KL
    assert verdict.sentence.startswith(f"Ship int8-minmax@64 — this rests on logit fidelity over 40 images: its "
                                       f"logits are closer to fp32 (cosine "
                                       f"{cos['second']:.4f} vs {cos['first']:.4f}, paired 95 % CI of the difference "
                                       f"+{-cos['high']:.4f}…+{-cos['low']:.4f}; KL ")
    assert " nats, lower too). " in verdict.sentence  # KL's own interval agrees: said so
    assert verdict.sentence.endswith("40 labelled images cannot measure a top-1 cost (100.0 % vs 100.0 % on 40 "
                                     "labelled images, McNemar p = 1.00): a difference of up to 9 points would go "
                                     "unseen; none was seen (0 vs 0 images where only one is right), so no number "
                                     "of images is predicted to resolve one.")
    twin = _noisy("int8-percentile99.99@64", labels, 0.02, _int8("percentile"), seed=1)
    same = decide({**results, twin.variant: twin}, close.variant, twin.variant, "fp32")
    assert same.decided_by == "equivalent" and same.ship is None and "within ±0.001" in same.sentence
    assert str(same) == same.sentence


def test_long_labels_get_aliases_in_headline_and_columns(tmp_path):
    from trtlab.views.formatting import alias_legend, aliases, variant_order
    from trtlab.views.verdict import head_to_head

    long_a = "int8-percentile99.99@10+first_layer-fp16+last_layer-fp16"
    long_b = "int8-entropy@10+first_layer-fp16+last_layer-fp16"
    assert aliases(["fp32", long_a, long_b, "A"]) == {"fp32": "fp32", long_a: "B", long_b: "C", "A": "A"}
    assert alias_legend(aliases([long_a, "fp16"])) == f"A = {long_a}"
    assert variant_order(["int8-minmax@6", "fp16", "fp32", "int8-entropy@6"]) == \
        ["fp32", "fp16", "int8-minmax@6", "int8-entropy@6"]
    labels = [k % 10 for k in range(20)]
    store = ResultsStore(tmp_path / "long")
    store.save(_result("fp32", labels, labels, {"precision": "fp32"}))
    store.save(_result(long_a, labels, [(c + 1) % 10 if i < 2 else c for i, c in enumerate(labels)],
                       _int8("percentile")))
    store.save(_result(long_b, labels, labels, _int8("entropy")))
    h2h = head_to_head(store.load_all(), long_a, long_b)
    text = h2h.text()
    assert text.startswith(f"Head to head: A vs B (reference fp32)\nA = {long_a}; B = {long_b}\n")
    assert list(h2h.test_table().shown.columns)[:2] == ["only A", "only B"]
    assert list(h2h.fidelity_table().shown.columns) == ["A", "B", "A − B (95 % CI)", "closer to fp32"]
    # The sentence names the variants in full, once each.
    assert long_a in h2h.sentence and long_b in h2h.sentence


def test_one_image_is_too_few_to_decide():
    from trtlab.views.decision import decide

    labels = [3]
    results = {"fp32": _result("fp32", labels, labels, {"precision": "fp32"}),
               "int8-minmax@1": _noisy("int8-minmax@1", labels, 0.02, _int8("minmax", 1), seed=1),
               "int8-entropy@1": _noisy("int8-entropy@1", labels, 0.3, _int8("entropy", 1), seed=2)}
    verdict = decide(results, "int8-minmax@1", "int8-entropy@1", "fp32")
    assert (verdict.ship, verdict.decided_by) == (None, "undecided")
    assert verdict.sentence.startswith("Neither int8-minmax@1 nor int8-entropy@1 can be recommended: too few images "
                                       "to compare their fidelity to fp32 (1 images); 1 labelled image cannot "
                                       "measure a top-1 cost (100.0 % vs 100.0 % on 1 labelled images, McNemar p = "
                                       "1.00): a difference of up to 79 points would go unseen")


def test_few_labels_say_top1_cannot_be_measured_and_what_the_recommendation_rests_on():
    """Issue 35: 24 photos, 5 of them labelled — the verdict names the basis (logit fidelity over all 24) and says
    in words that 5 labelled images cannot measure a top-1 cost, with the difference they could miss."""
    from trtlab.views.decision import decide

    labels = [k % 10 if k < 5 else -1 for k in range(24)]
    truth = [k % 10 for k in range(24)]
    reference = _result("fp32", labels, truth, {"precision": "fp32"})
    close = _noisy("int8-minmax@12", labels, 0.02, _int8("minmax", 12), seed=1, truth=truth)
    far = _noisy("int8-entropy@12", labels, 0.3, _int8("entropy", 12), seed=2, truth=truth)
    verdict = decide({"fp32": reference, close.variant: close, far.variant: far}, close.variant, far.variant, "fp32")
    assert (verdict.ship, verdict.decided_by) == ("int8-minmax@12", "fidelity")
    assert verdict.sentence.startswith("Ship int8-minmax@12 — this rests on logit fidelity over 24 images: ")
    # 0 of 5 discordant: Wilson's 95 % upper bound is 43 %, the top-1 difference 5 labels could miss.
    assert "5 labelled images cannot measure a top-1 cost (100.0 % vs 100.0 % on 5 labelled images, McNemar p = " \
           "1.00): a difference of up to 43 points would go unseen" in verdict.sentence
    assert verdict.images_needed is None and "so no number of images is predicted to resolve one." in \
        verdict.sentence


def test_the_verdict_ends_with_the_speed_clause_measured_where_engines_were_timed(demo_model, demo_cache,
                                                                                   session_workspace):
    """Issue 37.4: INT8 only where it pays. With TensorRT engine latencies (injected here as an A/B's engine column
    records them) below 1.02× the verdict says to ship FP16; above it that the speed supports INT8; without engines
    it gives the estimate with its band and says only a build can confirm."""
    from trtlab.data.demo import demo_split
    from trtlab.quantization.recipe import Recipe
    from trtlab.views.verdict import head_to_head
    from trtlab.workflows.compare import compare

    dataset = demo_cache.dataset
    result = compare(demo_model, dataset, [Recipe(algorithm="minmax"), Recipe(algorithm="entropy")],
                     split=demo_split(dataset), workspace=session_workspace, progress=False)
    results = result.store.load_all(list(result.table.index))
    estimated = head_to_head(results).decision
    assert estimated.speed.source == "estimate" and estimated.speed.ship is None
    assert estimated.sentence.startswith("Ship int8-minmax@6 — ") and " Speed of int8-minmax@6: INT8 vs FP16, " \
        "estimate (no TensorRT engine timed): " in estimated.sentence
    assert estimated.sentence.endswith("only a TensorRT build timed on the target GPU can confirm.")
    kept = result.store.last_verdict()  # compare() kept the verdict with its speed clause
    assert kept is not None and kept["first"] == "int8-minmax@6" and (kept["speed"] or {}).get("source") == \
        "estimate", kept
    slower = head_to_head(results, latencies={"fp16": 0.300, "int8-minmax@6": 0.298, "int8-entropy@6": 0.31,
                                              "batch": 8}).decision
    assert slower.speed.source == "measured" and slower.speed.ship == "fp16" and slower.speed.batch == 8
    assert "Speed of int8-minmax@6: ship FP16: INT8 is not faster on this GPU (1.007×, 0.298 ms against FP16's " \
           "0.3 ms at batch 8, measured on TensorRT" in slower.sentence
    faster = head_to_head(results, latencies={"fp16": 0.300, "int8-minmax@6": 0.200}).decision
    assert faster.speed.ship == "int8" and "INT8 is 1.500× faster than FP16 on this GPU" in faster.sentence
    # A variant whose FP16 twin was not timed falls back to the estimate, saying so.
    assert head_to_head(results, latencies={"int8-minmax@6": 0.2}).decision.speed.source == "estimate"


def test_algorithm_names_resolve_to_the_plain_pair_before_a_recovered_or_guarded_one(tmp_path):
    """compare('minmax', 'percentile') after notebook 03 stored a recovered minmax (better fidelity) and a guarded one:
    the plain pair, calibrated alike — never a recovered variant against a plain one (CI found it in notebook 04)."""
    from trtlab.views.verdict import head_to_head, resolve_variant

    labels = [k % 10 for k in range(40)]
    wrong = lambda n: [(c + 1) % 10 if i < n else c for i, c in enumerate(labels)]  # noqa: E731
    store = ResultsStore(tmp_path / "recovered")
    store.save(_result("fp32", labels, labels, {"precision": "fp32"}))
    store.save(_result("int8-minmax@8", labels, wrong(6), _int8("minmax", 8)))
    store.save(_result("int8-minmax@8+biascorr", labels, wrong(1), {**_int8("minmax", 8), "recovery": ["bias_correction"]}))
    store.save(_result("int8-minmax@8+first_layer", labels, wrong(2), _int8("minmax", 8, guards=("first_layer",))))
    store.save(_result("int8-percentile99.99@8", labels, wrong(3), _int8("percentile", 8)))
    results = store.load_all()
    assert resolve_variant(results, "minmax", "fp32") == "int8-minmax@8"
    h2h = head_to_head(results, "minmax", "percentile")
    assert (h2h.first, h2h.second) == ("int8-minmax@8", "int8-percentile99.99@8")
    # Named by label, the other side is the one calibrated alike with it where stored, else the plain one.
    assert head_to_head(results, "int8-minmax@8+biascorr", "percentile").second == "int8-percentile99.99@8"
