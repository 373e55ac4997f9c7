"""The INT8-vs-FP16 speed estimate (trtlab.graph.roofline) held against published TensorRT figures
(trtlab.graph.speed_reference), the effects it models one by one, and the verdict's speed clause
(trtlab.graph.speed) with recorded engine latencies injected.

Graphs: the onnx wheel's light ResNet-50; MobileNet-v1/v2/v3-Large and EfficientNet-B0 built with onnx.helper
(reference_cnns.py); the demo model EfficientNet-Lite0, for which nothing is published — it is held against
MobileNet-v2's figure, the closest published structure (inverted residuals, no squeeze-excite), as a proxy only.
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from reference_cnns import BUILDERS, qdq_graph
from trtlab.core.errors import UserError
from trtlab.graph.fusion import precision_report
from trtlab.graph.roofline import FITTED, GPUS, engine_seconds, estimate, kernel_seconds, kernels, speedup_estimate
from trtlab.graph.speed import SHIP_THRESHOLD, speed_clause
from trtlab.graph.speed_reference import PUBLISHED, held_against


@pytest.fixture(scope="module")
def reports(demo_model):
    workspace = Path(os.environ["TRTLAB_WORKSPACE"])
    names = ["resnet50", *BUILDERS, "efficientnet_lite0"]
    return {name: precision_report(qdq_graph(name, workspace, demo_model), name) for name in names}


def _err(row) -> float:
    return math.log(row["estimate / published"])


def test_the_estimate_lands_near_the_published_tensorrt_figures_fit_and_held_out(reports):
    table = held_against(reports)
    print(table.drop(columns="source").to_string())  # the calibration record (-s shows it)
    assert len(table) == len(PUBLISHED) + 3  # the ratio figure is compared on each of the four GPUs
    assert table["in band"].all(), table[~table["in band"]]
    fit, held = table[table.role == "fit"], table[table.role == "held out"]
    # the five figures that chose the constants: within ±25 % (A100 MobileNet-v2 +24 %, A100 ResNet-50 −15 %)
    assert max(abs(_err(r)) for _, r in fit.iterrows()) <= math.log(1.25)
    # held out, never used to fit: small CNNs at batch 1 and the T4's large-batch MobileNet-v1 — within ±30 % but
    # for MobileNet-v1 on the A100 (+32 %), the one held-out figure outside it
    times = held[held.what != "ratio"]
    assert max(abs(_err(r)) for _, r in times.iterrows()) <= math.log(1.33)
    outside = times[[abs(_err(r)) > math.log(1.30) for _, r in times.iterrows()]]
    assert list(zip(outside.model, outside.GPU)) == [("mobilenet_v1", "A100")]
    # MobileNetV3 measured no faster in INT8 (NVIDIA/TensorRT#2197, 1279.64 vs 1286.08 qps): so on every GPU
    ratios = held[held.what == "ratio"]
    assert len(ratios) == len(GPUS) and all(abs(_err(r)) <= math.log(1.05) for _, r in ratios.iterrows())
    # the demo model beside MobileNet-v2's figure (proxy: not a claim about EfficientNet-Lite0)
    proxy = table[table.role == "proxy"].iloc[0]
    assert abs(_err(proxy)) <= math.log(1.30)


def test_models_are_ordered_as_nvidia_published_them_on_the_a100(reports):
    # NVIDIA's A100 INT8 batch-1 latencies: MobileNet-v1 0.16 < MobileNet-v2 0.30 < ResNet-50 0.46 <
    # EfficientNet-B0 0.67 ms — B0 slowest with a tenth of ResNet-50's MACs: it is kernels, not MACs, at batch 1
    order = ["mobilenet_v1", "mobilenet_v2", "resnet50", "efficientnet_b0"]
    published = [next(f.value for f in PUBLISHED if f.model == m and f.gpu == "A100") for m in order]
    assert published == sorted(published)
    estimated = [estimate(reports[m], GPUS["A100"], 1, "enqueue")["int8_ms"] for m in order]
    assert estimated == sorted(estimated), dict(zip(order, estimated))
    assert reports["efficientnet_b0"].total_macs < reports["resnet50"].total_macs / 10


def test_gpus_differ_where_their_l2_clocks_and_peaks_differ(reports):
    resnet = reports["resnet50"]
    for batch in (1, 32):
        table = speedup_estimate(resnet, batch=batch)
        int8 = table["INT8 ms (estimate)"]
        assert list(int8) == sorted(int8, reverse=True) and int8.is_unique  # T4 > L4 > A100 > H100
        assert table["speed-up (estimate)"].nunique() > 1
        assert (table["INT8 low"] <= int8).all() and (int8 <= table["INT8 high"]).all()
        assert (table["speed-up low"] <= table["speed-up (estimate)"]).all()
    a100 = GPUS["A100"]
    found = kernels(resnet)
    # L2: the same GPU with a T4's 4 MB of L2 serves fewer activations from it
    assert engine_seconds(found, dataclasses.replace(a100, l2_mb=4.0), 32) > engine_seconds(found, a100, 32)
    # peaks: doubling the INT8 tensor peak speeds up a compute-bound batch, not a launch-bound one
    double = dataclasses.replace(a100, int8_tops=2 * a100.int8_tops)
    assert engine_seconds(found, double, 256) < 0.9 * engine_seconds(found, a100, 256)
    assert engine_seconds(found, double, 1) > 0.9 * engine_seconds(found, a100, 1)
    # clocks: the 70 W T4 is estimated at its boost clock, its band reaches down to its sustained clock
    t4 = estimate(resnet, GPUS["T4"], 256)
    assert t4["int8_band"][1] > t4["int8_ms"] / GPUS["T4"].sustained_clock


def _graph(depthwise: bool, channels: int = 64):
    """input → Q/DQ → 3×3 conv (depthwise or dense) with INT8 weights → Q/DQ → output, N×C×56×56."""
    groups = channels if depthwise else 1
    rng = np.random.default_rng(0)
    weights = rng.integers(-127, 127, (channels, channels // groups, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"), numpy_helper.from_array(weights, "w"),
             numpy_helper.from_array(np.full(channels, 0.01, np.float32), "ws"),
             numpy_helper.from_array(np.zeros(channels, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], name="wdq", axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv", group=groups, pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["y", "s", "z"], ["yq"], name="yq_q"),
             helper.make_node("DequantizeLinear", ["yq", "s", "z"], ["out"], name="yq_dq")]
    shape = ["N", channels, 56, 56]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_depthwise_convolutions_get_no_int8_tensor_core_gain():
    gpu = dataclasses.replace(GPUS["A100"], bandwidth_gbs=1e9, l2_gbs=1e9)  # memory free: compute alone
    found = {}
    for depthwise in (True, False):
        report = precision_report(_graph(depthwise))
        conv = next(k for k in kernels(report) if k.kind == "Conv")
        twin = next(k for k in kernels(report, as_fp16=True) if k.kind == "Conv")
        assert conv.precision == "INT8" and twin.precision == "FP16"
        found[depthwise] = (conv, twin)
    (dw, dw16), (dense, dense16) = found[True], found[False]
    assert (dw.path, dw.k, dw.channels) == ("cuda-core", 9, 64) and (dense.path, dense.k) == ("tensor", 576)
    batch = 256
    # depthwise: CUDA cores in INT8 as in FP16 — the same compute time; dense: the INT8 tensor-core rate
    assert kernel_seconds(dw, gpu, batch) == pytest.approx(kernel_seconds(dw16, gpu, batch))
    fixed = FITTED.kernel_us * 1e-6
    ratio = (kernel_seconds(dense16, gpu, batch) - fixed) / (kernel_seconds(dense, gpu, batch) - fixed)
    assert ratio == pytest.approx(2 * FITTED.int8_relative, rel=0.02)
    # on a real GPU the depthwise INT8 kernel still halves its bytes (and more of them stay in L2): faster, from
    # memory alone
    a100 = GPUS["A100"]
    assert kernel_seconds(dw16, a100, batch) > kernel_seconds(dw, a100, batch)


def test_precision_boundaries_cost_kernels_the_fp16_twin_does_not_have(reports):
    b0 = reports["efficientnet_b0"]
    # the Q after each squeeze-excite multiply is unfused in the report; as part of the PointWise kernel
    # (NVIDIA/TensorRT#2204) it adds none, as a kernel of its own it adds one each — the band keeps that case
    separate, fused = kernels(b0, pointwise_quantize=False), kernels(b0)
    assert len(separate) - len(fused) == sum(1 for q in b0.unfused_qdq if "(Mul)" in q["why"]) > 0
    a100 = GPUS["A100"]
    assert engine_seconds(separate, a100, 1) > engine_seconds(fused, a100, 1)
    e = estimate(b0, a100, 1)
    assert e["int8_band"][1] >= 1e3 * engine_seconds(separate, a100, 1)
    # the graph input's Quantize is a reformat kernel of the INT8 engine only
    resnet = reports["resnet50"]
    assert [k.kind for k in kernels(resnet)].count("Quantize") == len(resnet.input_quantize) == 1
    assert "Quantize" not in [k.kind for k in kernels(resnet, as_fp16=True)]


def test_small_cnns_at_batch_1_are_bound_by_per_kernel_costs(reports):
    for name in ("efficientnet_lite0", "efficientnet_b0", "mobilenet_v3_large"):
        table = speedup_estimate(reports[name], batch=1)
        assert (table["per-kernel share"] > 0.75).all(), name
        # so INT8's 2× tensor-core rate cannot show: about as fast as FP16, as measured for MobileNetV3
        assert (table["speed-up (estimate)"] < 1.15).all() and (table["speed-up low"] < 1.0).all(), name
    assert (speedup_estimate(reports["resnet50"], batch=32)["per-kernel share"] < 0.4).all()


def test_every_estimate_is_labelled_and_carries_its_band(reports):
    table = reports["efficientnet_lite0"].speedup_estimate(batch=1)
    assert all("estimate" in c for c in table.columns if not c.endswith(("low", "high", "share")))
    assert "Estimate, not a measurement" in table.attrs["note"] and table.index.name.endswith("batch 1")
    for precision in ("FP16", "INT8"):
        assert (table[f"{precision} low"] <= table[f"{precision} ms (estimate)"]).all()
        assert (table[f"{precision} ms (estimate)"] <= table[f"{precision} high"]).all()
    sentence = reports["resnet50"].sentence()
    assert "estimate" in sentence and "band" in sentence and "INT8 should beat FP16" in sentence
    # all-INT8 too, but squeeze-excite's kernels and unfused Qs: the band reaches below FP16, so no promise
    assert "INT8 may not beat FP16" in reports["efficientnet_b0"].sentence()


# -- the speed clause ------------------------------------------------------------------------------------------------
def _latency_report(fp16_ms: float, int8_ms: float, backend: str = "TensorRT (GPU time, CUDA events)"):
    from trtlab.backends.tensorrt.latency import latency_stats, latency_table
    from trtlab.workflows.engine_reports import LatencyReport

    rows = [{"variant": variant, "backend": "trt", "timer": "GPU (CUDA events)", **latency_stats([ms] * 20, batch)}
            for variant, base in (("fp16", fp16_ms), ("int8-entropy@512", int8_ms)) for batch, ms in
            ((1, base), (32, base * 20))]
    return LatencyReport(latency_table(rows), backend, 20)


def test_the_speed_clause_ships_fp16_where_measured_int8_is_not_faster(reports):
    lite0 = reports["efficientnet_lite0"]
    # recorded: INT8 1 % faster than FP16 on the engines — below ModelOpt's 1.02
    clause = speed_clause(lite0, _latency_report(0.200, 0.198), gpu="Tesla T4")
    assert clause.source == "measured" and clause.ship == "fp16" and clause.batch == 1
    assert str(clause).startswith("ship FP16: INT8 is not faster on this GPU (1.010×")
    assert "measured on TensorRT on Tesla T4" in clause.text and "estimate" not in clause.text
    # embedl's L4 ResNet-50 pair, 0.267 vs 0.222 ms: 1.20×, INT8 pays
    clause = speed_clause(reports["resnet50"], {"fp16": 0.267, "int8": 0.222}, gpu="L4")
    assert clause.ship == "int8" and clause.speedup == pytest.approx(1.2027, abs=1e-3)
    assert "supports shipping INT8" in clause.text
    # the threshold is a parameter: 1.25 turns the same measurement into FP16
    assert speed_clause(reports["resnet50"], {"fp16": 0.267, "int8": 0.222}, threshold=1.25).ship == "fp16"
    assert SHIP_THRESHOLD == 1.02
    # the batch asked for is the one read from the report; a batch not timed falls back to the smallest
    assert speed_clause(lite0, _latency_report(0.2, 0.1), batch=32).batch == 32
    assert speed_clause(lite0, _latency_report(0.2, 0.1), batch=8).batch == 1


def test_without_engines_the_speed_clause_is_the_estimate_with_its_band(reports):
    clause = speed_clause(reports["efficientnet_lite0"])
    assert clause.source == "estimate" and clause.ship is None and clause.batch == 1
    assert clause.low <= clause.speedup <= clause.high and set(clause.per_gpu) == set(GPUS)
    assert "estimate (no TensorRT engine timed)" in clause.text and "band" in clause.text
    assert "only a TensorRT build timed on the target GPU can confirm" in clause.text
    one = speed_clause(reports["resnet50"], batch=32, gpu="T4")
    assert one.gpu == "T4" and one.low >= 1.02 and "INT8 is expected to be faster" in one.text


def test_the_speed_clause_refuses_what_is_not_a_tensorrt_measurement(reports):
    resnet = reports["resnet50"]
    with pytest.raises(UserError, match="not a TensorRT measurement"):
        speed_clause(resnet, _latency_report(2.0, 1.5, backend="ONNX Runtime (CPU)"))
    with pytest.raises(UserError, match="lack a positive int8"):
        speed_clause(resnet, {"fp16": 0.3, "int8": 0})
    with pytest.raises(UserError, match="no speed estimate for GPU 'P100'"):
        speed_clause(resnet, gpu="P100")
    with pytest.raises(UserError, match="is not a speed-up"):
        speed_clause(resnet, threshold=0)
    with pytest.raises(UserError, match="no speed estimate for GPU 'V100'"):
        speedup_estimate(resnet, gpus=["T4", "V100"])
    with pytest.raises(UserError, match="timing 'graph' is not one the estimate knows"):
        speedup_estimate(resnet, timing="graph")
