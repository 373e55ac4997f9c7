"""Calibration core: streaming statistics, the three algorithms, TensorRT-format caches, Q/DQ placement, guards,
variants and the A/B workflow — on the real demo model and photos, synthetic tensors only for the histogram math."""
from __future__ import annotations

import collections
import json
import logging
import math
import time
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from trtlab.core.errors import UserValueError
from trtlab.graph.guards import parse_guards
from trtlab.evaluation.evaluate import evaluate
from trtlab.quantization.calibration_cache import (CacheMetadata, StaleCacheError, decode_scale, encode_scale,
                                                   load_if_valid, read_calibration_cache, trt_version_number,
                                                   write_calibration_cache)
from trtlab.quantization.insertion import insert_qdq, quantize_weight
from trtlab.quantization.placement import plan_quantization
from trtlab.quantization.recipe import Recipe
from trtlab.quantization.statistics import TensorHistogram, collect_statistics
from trtlab.quantization.thresholds import (ALGORITHMS, compute_thresholds, threshold_entropy, threshold_entropy_gtc,
                                           threshold_minmax, threshold_percentile)
from trtlab.quantization.variants import build_variant, stats_tensors

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


# -- histogram math (synthetic data is the point here) -------------------------------------------------------------
def test_streaming_histogram_keeps_the_first_batch_bin_width_and_equals_a_one_shot_histogram():
    rng = np.random.default_rng(0)
    batches = [rng.normal(0, scale, 20_000).astype(np.float32) for scale in (0.5, 1.0, 4.0, 2.0, 9.0)]
    hist = TensorHistogram()
    for batch in batches:
        hist.update(batch)
    everything = np.abs(np.concatenate(batches))
    first_max = np.abs(batches[0]).max()
    assert hist.absmax == pytest.approx(everything.max())
    assert hist.bin_width == pytest.approx(first_max / 2048, rel=1e-12)  # ModelOpt: width fixed by the first batch
    assert hist.bins == int(np.ceil(everything.max() / hist.bin_width)) > 2048  # grown, not re-binned
    assert hist.range >= hist.absmax and hist.counts.sum() == everything.size == hist.values
    reference, _ = np.histogram(everything, bins=hist.bins, range=(0, hist.range))
    # identical up to values within float32 rounding of a bin edge (x · bins/range is computed in float32), which
    # land in the neighbouring bin: few, and never further than one bin
    assert np.abs(reference - hist.counts).sum() <= 1e-3 * everything.size
    assert np.abs(np.cumsum(reference) - np.cumsum(hist.counts)).max() <= 2
    # grouping after the first batch does not matter
    regrouped = TensorHistogram()
    regrouped.update(batches[0])
    regrouped.update(np.concatenate(batches[1:]))
    np.testing.assert_array_equal(regrouped.counts, hist.counts)


def test_histogram_growth_is_capped_by_merging_bin_pairs():
    hist = TensorHistogram(bins=64, max_bins=256)
    hist.update(np.linspace(0, 1, 1000, dtype=np.float32))
    hist.update(np.float32([10.0]))  # 640 bins of the first width would be needed: merge to width 4/64, 160 bins
    assert hist.bins == 160 and hist.bin_width == pytest.approx(4 / 64)
    assert hist.counts.sum() == 1001 and hist.counts[-1] == 1 and hist.counts[:16].sum() == 1000


def test_percentile_and_minmax_thresholds():
    values = np.linspace(0, 1, 1_000_001, dtype=np.float32)
    hist = TensorHistogram()
    hist.update(values)
    assert threshold_minmax(hist) == pytest.approx(1.0)
    assert threshold_percentile(hist, 99.0) == pytest.approx(0.99, abs=1e-3)
    assert threshold_percentile(hist, 99.99) == pytest.approx(0.9999, abs=1e-3)
    with pytest.raises(ValueError, match="percentile"):
        threshold_percentile(hist, 0)


@pytest.mark.parametrize("method", [threshold_entropy, threshold_entropy_gtc])
def test_entropy_clips_rare_outliers_but_keeps_a_dense_range(method):
    rng = np.random.default_rng(1)
    dense = np.abs(rng.normal(0, 1, 400_000)).astype(np.float32)
    with_outliers = np.concatenate([dense, np.float32([60.0, -55.0, 58.0])])
    hist = TensorHistogram()
    hist.update(with_outliers)
    threshold = method(hist)
    assert 2.0 < threshold < 15.0  # far below the 60.0 max, well above the bulk of N(0,1)
    uniform = TensorHistogram()
    uniform.update(rng.uniform(-1, 1, 400_000).astype(np.float32))
    assert method(uniform) > 0.9  # nothing to clip in a uniform distribution


# -- TensorRT cache format -------------------------------------------------------------------------------------------
def test_cache_scales_are_big_endian_float_hex_like_tensorrt_writes_them(tmp_path):
    # A line from a real TensorRT 7.2 cache: "data: 3c008912" (input scale ≈ 1/127.5).
    assert decode_scale("3c008912") == pytest.approx(0.0078449, rel=1e-4)
    assert encode_scale(1.0) == "3f800000"
    assert trt_version_number("10.3.0") == 100300 and trt_version_number("8.6.1") == 8601
    meta = CacheMetadata("ab" * 32, "entropy", {"crop": 224}, 10)
    path = write_calibration_cache(tmp_path / "c.cache", {"input": 0.0078, "conv/out:0": 0.5}, meta)
    header, scales = read_calibration_cache(path)
    assert header == "TRT-0-EntropyCalibration2"
    assert scales["conv/out:0"] == pytest.approx(0.5) and scales["input"] == pytest.approx(0.0078)
    assert load_if_valid(path, meta) == scales


def test_stale_cache_is_refused_naming_the_field(tmp_path):
    meta = CacheMetadata("ab" * 32, "entropy", {"crop": 224}, 10)
    path = write_calibration_cache(tmp_path / "c.cache", {"x": 0.1}, meta)
    for changed, field in [(CacheMetadata("cd" * 32, "entropy", {"crop": 224}, 10), "model_sha256"),
                           (CacheMetadata("ab" * 32, "minmax", {"crop": 224}, 10), "algorithm"),
                           (CacheMetadata("ab" * 32, "entropy", {"crop": 256}, 10), "preprocess"),
                           (CacheMetadata("ab" * 32, "entropy", {"crop": 224}, 500), "images")]:
        with pytest.raises(StaleCacheError) as err:
            load_if_valid(path, changed)
        assert field in str(err.value) and "reuse_cache=False" in str(err.value)


# -- streaming statistics on the real model -------------------------------------------------------------------------
def test_statistics_memory_does_not_grow_with_image_count(demo_model, demo_cache):
    model = onnx.load(str(demo_model))
    tensors = stats_tensors(model)
    peaks = []
    for repeats in (1, 4):
        indices = np.tile(demo_cache.valid_indices[:8], repeats)
        tracemalloc.start()
        stats = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=8, progress=False)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert stats.images == 8 * repeats
    assert peaks[1] < 1.3 * peaks[0], f"peak traced memory grew from {peaks[0]/1e6:.0f} to {peaks[1]/1e6:.0f} MB"
    # the first conv reads the normalised image: (x-127)/128 of uint8 → |x| ≤ 1.0
    first = plan_quantization(model).activations[0]
    assert stats.tensors[first].absmax <= 1.0 + 1e-6


def test_sub_batching_counts_every_value_and_is_logged(demo_model, demo_cache, caplog):
    tensors = stats_tensors(onnx.load(str(demo_model)))
    indices = demo_cache.valid_indices[:12]
    with caplog.at_level("INFO", logger="trtlab.quantization.statistics"):
        whole = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=6, progress=False,
                                   memory_budget_mb=512)
        # a budget of ~2 images: the batch of 6 runs as 3 sub-batches of 2
        split = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=6, progress=False,
                                   memory_budget_mb=120)
    assert "sub-batches of 2 image(s)" in caplog.text and "sub-batches of 6 image(s)" in caplog.text
    for name in tensors:
        assert whole.tensors[name].absmax == split.tensors[name].absmax
        # sub-batches of 2 set a (finer or equal) bin width from the first 2 images; all values are counted
        assert split.tensors[name].counts.sum() == whole.tensors[name].counts.sum()
        assert split.tensors[name].bin_width <= whole.tensors[name].bin_width


# -- Q/DQ placement ------------------------------------------------------------------------------------------------
def test_quantized_demo_model_follows_tensorrt_placement(demo_model):
    model = onnx.load(str(demo_model))
    plan = plan_quantization(model)
    scales = {t: 0.05 for t in plan.activations}
    quantized = insert_qdq(model, plan, scales)
    onnx.checker.check_model(quantized)
    onnx.shape_inference.infer_shapes(quantized, strict_mode=True)
    ops = collections.Counter(n.op_type for n in quantized.graph.node)
    assert ops["Conv"] == 49 and ops["Gemm"] == 1
    assert ops["QuantizeLinear"] == len(plan.activations)
    assert ops["DequantizeLinear"] == len(plan.activations) + 50  # + one per Conv/Gemm weight
    producers = {o: n for n in quantized.graph.node for o in n.output}
    inits = {i.name: i for i in quantized.graph.initializer}
    for node in quantized.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            data, weight = producers[node.input[0]], producers[node.input[1]]
            assert data.op_type == "DequantizeLinear" and weight.op_type == "DequantizeLinear"
            w_int8 = numpy_helper.to_array(inits[weight.input[0]])
            assert w_int8.dtype == np.int8 and np.abs(w_int8).max() <= 127
            w_scale = numpy_helper.to_array(inits[weight.input[1]])
            axis = next(a.i for a in weight.attribute if a.name == "axis")
            assert w_scale.shape == (w_int8.shape[axis],)  # per output channel
            assert not numpy_helper.to_array(inits[weight.input[2]]).any()  # zero points are 0
        if node.op_type == "Add":
            kinds = [producers[i].op_type for i in node.input]
            assert sorted(kinds) == ["Conv", "DequantizeLinear"]  # conv output fuses, skip input quantized
    # outputs of weighted ops are never quantized
    for node in quantized.graph.node:
        if node.op_type == "QuantizeLinear":
            assert producers.get(node.input[0]) is None or producers[node.input[0]].op_type != "Gemm"


def test_weight_quantization_is_per_channel_symmetric():
    weights = np.array([[[[0.5, -1.0]]], [[[2.0, 0.25]]]], np.float32)  # two output channels
    q, scale = quantize_weight(weights, axis=0)
    np.testing.assert_allclose(scale, [1.0 / 127, 2.0 / 127])
    np.testing.assert_array_equal(q.reshape(2, 2), [[64, -127], [127, 16]])


def test_residual_sum_placement_on_real_resnet50_graph(session_workspace):
    from trtlab.graph.sanitize import sanitize_model

    path = LIGHT / "light_resnet50.onnx"
    if not path.exists():
        pytest.skip(f"{path} not shipped by this onnx wheel")
    model = onnx.load(str(sanitize_model(path, session_workspace)))
    assert model.opset_import[0].version >= 13
    plan = plan_quantization(model, parse_guards(["softmax"]))
    assert len(plan.weights) == 54  # 53 convs (BatchNorm folded) + the Gemm
    producers = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type == "Sum":
            quantized = [i for i in node.input if (node.name, list(node.input).index(i)) in
                         [c for cs in plan.consumers.values() for c in cs]]
            assert len(quantized) == 1  # exactly one input fuses into its Conv, the other is the INT8 residual
    quantized = insert_qdq(model, plan, {t: 0.1 for t in plan.activations})
    onnx.checker.check_model(quantized)
    softmax = next(n for n in quantized.graph.node if n.op_type == "Softmax")
    assert {producers.get(i, None) and producers[i].op_type for i in softmax.input} != {"DequantizeLinear"}


# -- guards ---------------------------------------------------------------------------------------------------------
def test_guards_leave_first_and_last_layer_in_float_and_fp16_is_in_the_graph(demo_model):
    model = onnx.load(str(demo_model))
    plan = plan_quantization(model, parse_guards(["first_layer", "last_layer=fp16", "softmax"]))
    assert [(g.op_type, g.precision) for g in plan.guarded] == [("Conv", "fp32"), ("Gemm", "fp16")]
    quantized = insert_qdq(model, plan, {t: 0.05 for t in plan.activations})
    onnx.checker.check_model(quantized)
    nodes = {n.name: n for n in quantized.graph.node}
    producers = {o: n for n in quantized.graph.node for o in n.output}
    first = nodes[plan.guarded[0].name]
    assert first.input[0] == "input" and first.input[1] in {i.name for i in quantized.graph.initializer}
    last = nodes[plan.guarded[1].name]
    assert producers[last.input[0]].op_type == "Cast"
    fp16_weight = next(i for i in quantized.graph.initializer if i.name == last.input[1])
    assert fp16_weight.data_type == onnx.TensorProto.FLOAT16
    with pytest.raises(ValueError, match="no node named"):
        plan_quantization(model, parse_guards(["node:does_not_exist"]))
    with pytest.raises(ValueError, match="not understood"):
        parse_guards(["middle_layer"])


# -- variants and A/B on real photos -----------------------------------------------------------------------------------
def test_int8_variants_stay_close_to_fp32_on_real_photos(demo_model, ort_workspace):
    from trtlab.workflows.compare import compare
    from trtlab.data.demo import demo_dataset, demo_split

    dataset = demo_dataset()
    split = demo_split(dataset)
    assert not set(split.calibration) & set(split.evaluation)
    # ONNX Runtime pinned: its literal settings and self-check are checked below ('auto' is torch on a GPU machine)
    result = compare(demo_model, dataset, [Recipe(algorithm=a) for a in ("minmax", "entropy", "percentile")],
                     split=split, workspace=ort_workspace, backend="ort", progress=False)
    table = result.table
    assert list(table.index) == ["fp32", "int8-minmax@6", "int8-entropy@6", "int8-percentile99.99@6"]
    assert (table["images"] == 20).all()
    # Real INT8 on real photos: close to FP32 but not identical (a no-op quantizer would give cosine 1.0).
    assert (table.loc["int8-minmax@6":, "top1_agreement"] >= 0.85).all()
    assert (table.loc["int8-minmax@6":, "cosine_mean"].between(0.95, 0.9999)).all()
    record = result.store.load("int8-entropy@6").record
    # The literal Q/DQ semantics, by the fast setting that reproduces them (Q/DQ fusion off, extended optimizations).
    assert record["recipe"]["algorithm"] == "entropy" and record["backend"]["graph_optimization"] == "extended"
    assert record["ort_qdq_check"]["fast_reference_matches"] is True
    assert set(record["ort_qdq_check"]) >= {"top1_agreement_optimized_vs_reference", "optimized_is_trustworthy"}
    cache_file = result.variants["int8-entropy@6"].calibration_cache
    header, scales = read_calibration_cache(cache_file)
    # 49 Conv + 1 Gemm inputs, and the head's pooling (ReduceMean) input: placement rule pool_input
    assert header.endswith("EntropyCalibration2") and len(scales) == 51
    meta = json.loads(Path(str(cache_file) + ".json").read_text())
    assert meta["images"] == 6 and meta["algorithm"] == "entropy"


def test_variant_build_is_deterministic_and_cached_by_recipe(demo_model, demo_cache, session_workspace):
    recipe = Recipe(algorithm="percentile", percentile=99.9, calibration_images=4, guards=("first_layer",))
    calib = demo_cache.valid_indices[:6]
    first = build_variant(demo_model, recipe, demo_cache, calib, session_workspace, progress=False)
    again = build_variant(demo_model, recipe, demo_cache, calib, session_workspace, progress=False)
    assert again.reused and again.model_path == first.model_path
    before = first.model_path.read_bytes()
    rebuilt = build_variant(demo_model, recipe, demo_cache, calib, session_workspace, force=True, progress=False)
    assert rebuilt.model_path.read_bytes() == before
    other = build_variant(demo_model, Recipe(algorithm="percentile", percentile=99.0, calibration_images=4,
                                             guards=("first_layer",)), demo_cache, calib, session_workspace,
                          progress=False)
    assert other.model_path != first.model_path
    assert Recipe.from_dict(recipe.to_dict()) == recipe and recipe.name == "int8-percentile99.9@4+first_layer-fp16"


def test_reused_calibration_cache_for_another_algorithm_is_refused(demo_model, demo_cache, session_workspace,
                                                                   tmp_path):
    calib = demo_cache.valid_indices[:6]
    cache_path = tmp_path / "lite0.cache"
    build_variant(demo_model, Recipe(algorithm="minmax"), demo_cache, calib, session_workspace, force=True,
                  progress=False, calibration_cache_path=cache_path)
    assert cache_path.exists()
    with pytest.raises(StaleCacheError, match="algorithm"):
        build_variant(demo_model, Recipe(algorithm="entropy"), demo_cache, calib, session_workspace, force=True,
                      progress=False, calibration_cache_path=cache_path, reuse_cache=True)
    reused = build_variant(demo_model, Recipe(algorithm="minmax"), demo_cache, calib, session_workspace, force=True,
                           progress=False, calibration_cache_path=cache_path, reuse_cache=True)
    assert reused.model_path.exists()


def test_the_cache_header_names_the_tensorrt_version_trtlab_backends_reports(demo_model, demo_cache, session_workspace,
                                                                             tmp_path, monkeypatch):
    import trtlab.backends
    import trtlab.quantization.variants as variants

    monkeypatch.setattr(trtlab.backends, "installed_tensorrt_version", lambda: "10.9.0.34")
    cache_path = tmp_path / "lite0.cache"
    build_variant(demo_model, Recipe(algorithm="minmax"), demo_cache, demo_cache.valid_indices[:6], session_workspace,
                  force=True, progress=False, calibration_cache_path=cache_path)
    assert json.loads(Path(str(cache_path) + ".json").read_text())["tensorrt_version"] == "10.9.0.34"
    assert not hasattr(variants, "tensorrt_version")  # no pass-through wrapper beside trtlab.backends'
    assert {"report_fp16_range", "default_calibration_pool"} <= set(variants.__all__)
    assert all(hasattr(variants, name) for name in variants.__all__)


def test_ab_widget_callbacks_without_a_browser(demo_model, session_workspace):
    from trtlab.workflows.compare import ab_widgets, recipes_from_selection
    from trtlab.data.demo import demo_dataset, demo_split

    recipes = recipes_from_selection(("minmax", "percentile"), 6, 4, ["last_layer"], "node_Conv_877", "fp16",
                                     99.9, include_fp16=True)
    assert [(r.precision, r.algorithm) for r in recipes] == [("fp16", "entropy"), ("int8", "minmax"),
                                                             ("int8", "percentile")]
    assert recipes[1].guard_texts == ["last_layer=fp16", "node:node_Conv_877=fp16"]
    with pytest.raises(ValueError, match="at least one"):
        recipes_from_selection((), 6, 4)
    dataset = demo_dataset()
    panel = ab_widgets(demo_model, dataset, workspace=session_workspace, split=demo_split(dataset))
    panel.children[0].children[0].value = ("minmax", "percentile")  # the algorithms selector
    result = panel.run_callback()
    assert panel.last_result is result
    assert list(result.table.index) == ["fp32", "fp16", "int8-minmax@6", "int8-percentile99.99@6"]


def test_saved_split_is_stratified_disjoint_seeded_and_reused(tmp_path):
    from trtlab.data.split import saved_split
    from trtlab.data.dataset import Dataset

    labels = np.repeat(np.arange(10), 20)  # 10 classes × 20 images (paths need not exist for splitting)
    dataset = Dataset("toy", [f"/nowhere/{i}.jpg" for i in range(200)], labels)
    split = saved_split(dataset, calibration_images=50, seed=1, workspace=tmp_path)
    assert len(split.calibration) == 50 and len(split.evaluation) == 150
    assert not set(split.calibration) & set(split.evaluation)
    per_class = np.bincount(labels[split.calibration], minlength=10)
    assert per_class.min() >= 4 and per_class.max() <= 6  # 5 per class, ± rounding
    saved = list((tmp_path / "splits").glob("toy-*.json"))
    assert len(saved) == 1
    again = saved_split(dataset, calibration_images=50, seed=1, workspace=tmp_path)
    np.testing.assert_array_equal(again.calibration, split.calibration)
    other = saved_split(dataset, calibration_images=50, seed=2, workspace=tmp_path)
    assert not np.array_equal(other.calibration, split.calibration)


def _entropy_threshold_reference(counts, bin_width, start=128, levels=128):
    """The GTC 2017 pseudo-code, written plainly (loops, no vectorisation), first bin discarded."""
    counts = counts.astype(float).copy()
    counts[0] = 0
    best, best_kl = None, float("inf")
    for i in range(start, len(counts) + 1):
        p = list(counts[:i])
        p[i - 1] += counts[i:].sum()
        per = i // levels
        q = [0.0] * i
        for level in range(levels):
            lo, hi = level * per, (i if level == levels - 1 else (level + 1) * per)
            chunk = counts[lo:hi]
            nonzero = sum(1 for v in chunk if v > 0)
            for b in range(lo, hi):
                q[b] = chunk.sum() / nonzero if counts[b] > 0 and nonzero else 0.0
        if sum(p) == 0 or sum(q) == 0:
            continue
        ps, qs = sum(p), sum(q)
        kl = sum((pv / ps) * np.log((pv / ps) / max(qv / qs, 1e-10)) for pv, qv in zip(p, q) if pv > 0)
        if kl < best_kl:
            best, best_kl = i, kl
    return (best + 0.5) * bin_width


def test_entropy_gtc_variant_matches_its_plain_algorithm():
    rng = np.random.default_rng(7)
    for trial in range(3):
        hist = TensorHistogram(bins=512)  # smaller than 2048 to keep the plain version quick
        hist.update(np.abs(rng.standard_t(df=3 + trial, size=50_000)).astype(np.float32))
        expected = _entropy_threshold_reference(hist.counts, hist.bin_width)
        assert threshold_entropy_gtc(hist) == pytest.approx(min(expected, hist.absmax), rel=1e-9)


def _nvidia_entropy_candidate(counts, start_bin=128, stride=1, levels=128):
    """NVIDIA's published entropy steps (pytorch-quantization / ModelOpt `_compute_amax_entropy`), transcribed as
    plain loops: returns the chosen i (amax = left edge of bin i = i · width), or None if nothing is admissible."""
    bins = [int(c) for c in counts]
    bins[0] = bins[1]  # the zero bin takes its neighbour's count
    best_i, best_kl = None, math.inf
    for i in range(start_bin, len(bins) + 1, stride):
        level_of = [j * levels // i for j in range(i)]  # = np.digitize(j, np.linspace(0, i, levels + 1)) - 1
        level_sum, level_bins = [0] * levels, [0] * levels
        for j in range(i):
            if bins[j] != 0:  # empty bins belong to no level
                level_sum[level_of[j]] += bins[j]
                level_bins[level_of[j]] += 1
        q = [level_sum[level_of[j]] / level_bins[level_of[j]] if bins[j] != 0 else 0.0 for j in range(i)]
        p = bins[:i]
        p[-1] += sum(bins[i:])  # outliers folded into the last reference bin
        if sum(q) == 0:
            continue  # no mass below i: the published code divides 0/0 here (documented deviation: skipped)
        p_total, q_total = sum(p), sum(q)
        kl = 0.0
        for pj, qj in zip(p, q):
            if pj == 0:
                continue
            if qj == 0:
                kl = math.inf
                break
            kl += (pj / p_total) * math.log((pj / p_total) / (qj / q_total))
        if kl <= best_kl:  # "<=": the LAST candidate among equal divergences
            best_i, best_kl = i, kl
    return best_i if best_kl < math.inf else None


def _histogram(counts, width=0.01):
    counts = np.asarray(counts, np.int64)
    return TensorHistogram(counts=counts.copy(), range=len(counts) * width, absmax=len(counts) * width,
                           values=int(counts.sum()))


def test_entropy_is_nvidias_reference_on_hand_made_histograms_with_ties_and_empty_bins():
    n = 512  # the published steps in Python loops are slow; the algorithm does not depend on the bin count
    cases = {}
    # ties: equal counts on the first 300 bins, nothing above → KL(P‖Q) = 0 exactly for every i ≥ 300: the LAST
    # candidate wins (amax = the whole range), the GTC variant takes the first (300 + 0.5 bins)
    flat = np.zeros(n, np.int64)
    flat[:300] = 7
    cases["ties"] = flat
    # empty bins inside the levels (every third bin; the zero bin copies its empty neighbour): Q spreads each level
    # over its non-empty bins only, so P = Q again and ties again
    holes = flat.copy()
    holes[1::3] = 0
    cases["ties with empty bins"] = holes
    # a gap: candidates whose empty last bin would receive the outliers have infinite divergence
    rng = np.random.default_rng(3)
    gap = (1000 * np.exp(-np.arange(n) / 40.0)).astype(np.int64) + 1
    gap[150:260] = 0
    gap[400] = 5
    cases["gap and outlier"] = gap
    # a spike in bin 0 (ReLU zeros) that bins[0] = bins[1] removes; random bulk with empty bins
    relu = rng.poisson(200 * np.exp(-np.arange(n) / 90.0)).astype(np.int64)
    relu[0] = 10**7
    cases["zero spike"] = relu
    # a heavy first bin: copying it into bin 0 (rather than zeroing bin 0) moves the threshold here (383 vs 512)
    rng = np.random.default_rng(0)
    scale, first = rng.uniform(5, 200), rng.uniform(0.05, 0.9)
    heavy = rng.poisson(300 * np.exp(-np.arange(n) / scale)).astype(np.int64)
    heavy[1] = int(first * heavy.sum())
    heavy[0] = 10**6
    if rng.random() < 0.5:
        heavy[rng.integers(300, 512)] += 50
    cases["heavy first bin"] = heavy
    # all mass far from zero: candidates with nothing below them are inadmissible
    far = np.zeros(n, np.int64)
    far[200:240] = rng.integers(1, 50, 40)
    cases["nothing near zero"] = far
    for name, counts in cases.items():
        hist = _histogram(counts)
        expected = _nvidia_entropy_candidate(counts)
        assert expected is not None, name
        assert threshold_entropy(hist) == pytest.approx(expected * hist.bin_width, rel=1e-12), name
    assert threshold_entropy(_histogram(cases["ties"])) == pytest.approx(n * 0.01)
    assert threshold_entropy_gtc(_histogram(cases["ties"])) == pytest.approx(300.5 * 0.01)
    assert threshold_entropy(_histogram(cases["ties with empty bins"])) == pytest.approx(n * 0.01)
    assert threshold_entropy(_histogram(cases["heavy first bin"])) == pytest.approx(383 * 0.01)


def test_entropy_matches_the_reference_on_streamed_histograms_and_differs_from_the_gtc_variant():
    rng = np.random.default_rng(11)
    differs = 0
    for trial, data in enumerate([rng.standard_t(3, 60_000), np.maximum(rng.normal(0, 1, 60_000), 0),
                                  np.concatenate([rng.laplace(0, 1, 60_000), rng.normal(0, 40, 30)])]):
        hist = TensorHistogram(bins=384)
        hist.update(data[:20_000].astype(np.float32))
        hist.update(1.3 * data[20_000:].astype(np.float32))  # grows the histogram past 384 bins
        assert hist.bins > 384
        expected = _nvidia_entropy_candidate(hist.counts)
        assert threshold_entropy(hist) == pytest.approx(expected * hist.bin_width, rel=1e-12)
        differs += threshold_entropy(hist) != threshold_entropy_gtc(hist)
    assert differs >= 2


def test_entropy_agrees_with_modelopt_where_installed():
    histogram = pytest.importorskip("modelopt.torch.quantization.calib.histogram")
    rng = np.random.default_rng(5)
    for data in (rng.standard_t(4, 50_000), np.abs(rng.normal(0, 1, 50_000)) + (rng.random(50_000) < 0.3) * 3):
        hist = TensorHistogram(bins=512)
        hist.update(data.astype(np.float32))
        edges = np.arange(hist.bins + 1) * hist.bin_width
        amax = float(histogram._compute_amax_entropy(hist.counts.copy(), edges, 8, False))
        assert threshold_entropy(hist) == pytest.approx(amax, rel=1e-6)  # ModelOpt returns a float32 tensor


def test_entropy_search_is_fast_and_every_algorithm_is_selectable(demo_model, demo_cache):
    assert list(ALGORITHMS) == ["minmax", "entropy", "entropy-gtc", "percentile"]
    rng = np.random.default_rng(2)
    hists = {}
    for k in range(59):  # the demo model's tensor count, 2048 bins each
        hist = TensorHistogram()
        hist.update(rng.standard_t(2 + k % 5, 100_000).astype(np.float32))
        hists[f"t{k}"] = hist
    stats = collect_statistics(demo_model, [], demo_cache, demo_cache.valid_indices[:1], progress=False)
    stats.tensors = hists
    compute_thresholds(stats, "entropy")  # the first call builds the candidate plan for 2048 bins
    started = time.perf_counter()
    thresholds = compute_thresholds(stats, "entropy")
    assert time.perf_counter() - started < 3.0  # ≈ 0.3 s here; a per-candidate loop takes 10 s and more
    for algorithm in ALGORITHMS:
        values = compute_thresholds(stats, algorithm)
        assert all(0 < v <= 1.01 * hists[k].range for k, v in values.items()), algorithm
    assert thresholds != compute_thresholds(stats, "entropy-gtc")
    assert Recipe(algorithm="entropy-gtc", calibration_images=64).name == "int8-entropy-gtc@64"
    with pytest.raises(ValueError, match="entropy-gtc"):
        compute_thresholds(stats, "kl")


def test_an_algorithm_is_one_registration_and_an_unknown_name_lists_the_registered(demo_model, demo_cache):
    from trtlab.quantization.thresholds import Algorithm, register_algorithm, threshold_percentile

    stats = collect_statistics(demo_model, [], demo_cache, demo_cache.valid_indices[:1], progress=False)
    rng = np.random.default_rng(3)
    stats.tensors = {f"t{k}": TensorHistogram() for k in range(3)}
    for k, hist in enumerate(stats.tensors.values()):
        hist.update(rng.standard_t(2 + k, 50_000).astype(np.float32))
    register_algorithm(Algorithm("p99", lambda h: threshold_percentile(h, 99.0), "99th percentile of |x|"))
    try:
        assert Recipe(algorithm="p99", calibration_images=4).name == "int8-p99@4"  # a Recipe takes it at once
        mine, percentile = compute_thresholds(stats, "p99"), compute_thresholds(stats, "percentile", 99.0)
        assert mine == percentile and len(mine) == len(stats.tensors) > 0
        with pytest.raises(ValueError, match="registered already"):
            register_algorithm(Algorithm("p99", threshold_percentile, "again"))
    finally:
        del ALGORITHMS["p99"]
    with pytest.raises(UserValueError) as err:
        Recipe(algorithm="p99")
    line = err.value.line()
    assert "'p99' is not one of minmax, entropy, entropy-gtc, percentile" in line and line.count("\n") == 0


def test_self_check_catches_an_onnx_runtime_that_disagrees_with_the_qdq_graph(demo_model, demo_cache,
                                                                              session_workspace, monkeypatch,
                                                                              caplog):
    """ONNX Runtime's optimized INT8 kernels have given wrong answers on Q/DQ graphs (the issue's ModelOpt trap):
    simulate that and check trtlab notices, warns, and still evaluates the literal Q/DQ semantics."""
    from trtlab.backends.ort import OrtRunner
    from trtlab.evaluation.results import ResultsStore
    from trtlab.evaluation.evaluate import evaluate_variant
    from trtlab.core.log import reset_warnings
    from trtlab.evaluation.literal_check import ort_qdq_self_check

    reset_warnings()  # the cause is said once per session: an earlier test may have said it (the FP16 path's cause)
    built = build_variant(demo_model, Recipe(algorithm="minmax"), demo_cache, demo_cache.valid_indices[:6],
                          session_workspace, progress=False)
    real_infer = OrtRunner.infer_impl

    def broken_when_optimized(self, batch):
        logits = real_infer(self, batch)
        return logits[:, ::-1].copy() if self.graph_optimization == "all" else logits

    monkeypatch.setattr(OrtRunner, "infer_impl", broken_when_optimized)
    check = ort_qdq_self_check(built.model_path, demo_cache, demo_cache.valid_indices)
    assert not check["optimized_is_trustworthy"] and check["top1_agreement_optimized_vs_reference"] < 0.5
    store = ResultsStore(session_workspace / "results-selfcheck")
    with caplog.at_level(logging.INFO, logger="trtlab"):
        result = evaluate_variant(built, demo_cache, demo_cache.valid_indices[6:], store, backend="ort", progress=True,
                                  force=True)  # ONNX Runtime's self-check is the subject: pinned, whatever 'auto' is
    assert "fused INT8 kernels differ from the literal Q/DQ graph on" in caplog.text and "unaffected" in caplog.text
    assert result.record["backend"]["graph_optimization"] == "extended"  # fused kernels never used
    assert result.record["ort_qdq_check"]["optimized_is_trustworthy"] is False
    # evaluated unoptimized, the variant still tracks FP32 (the reversed logits were never used)
    monkeypatch.undo()
    fp32 = evaluate(demo_model, demo_cache, "fp32", store=store, indices=demo_cache.valid_indices[6:], backend="ort",
                    progress=False)
    assert (result.top1 == fp32.top1).mean() >= 0.85


def test_fp16_recipe_converts_the_graph_and_keeps_guarded_nodes_fp32(demo_model, demo_cache, session_workspace):
    recipe = Recipe(precision="fp16", guards=("last_layer",))
    assert recipe.name == "fp16+last_layer-fp32" and Recipe.from_dict(recipe.to_dict()) == recipe
    built = build_variant(demo_model, recipe, workspace=session_workspace, progress=False)
    model = onnx.load(str(built.model_path))
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    inits = {i.name: i for i in model.graph.initializer}
    assert inits[gemm.input[1]].data_type == onnx.TensorProto.FLOAT
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    assert inits[conv.input[1]].data_type == onnx.TensorProto.FLOAT16
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # the input stays float32
    assert build_variant(demo_model, recipe, workspace=session_workspace, progress=False).reused
