"""Quantization stage behaviour the older tests left open: the weight's output-channel axis of every weighted op
(checked numerically on a real weight), the placement rules as a table, '=fp16' guards and Q/DQ in the precision
plan, and fixed-batch models whose short last batch is padded in calibration and evaluation without the padding
being counted."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtlab.graph.guards import parse_guards
from trtlab.quantization.insertion import insert_qdq, quantize_weight
from trtlab.quantization.placement import LEGACY_RULES, RULES, plan_quantization, residual_add_input, weighted_op_inputs


@pytest.fixture(scope="module")
def real_weights(demo_model):
    """Trained weights of the demo EfficientNet-Lite0: the classifier (1000 × 1280) and a 1×1 conv's kernel."""
    model = onnx.load(str(demo_model))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    conv = next(w for w in inits.values() if w.ndim == 4 and w.shape[2:] == (1, 1) and min(w.shape[:2]) >= 16)
    return inits[gemm.input[1]], conv


def _single_op_model(op: str, weight: np.ndarray, attributes: dict, x_shape: list) -> onnx.ModelProto:
    node = helper.make_node(op, ["x", "w"], ["y"], name=f"{op}_under_test", **attributes)
    graph = helper.make_graph([node], "one_op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c"] + ["h", "w"][
                                  :len(x_shape) - 2])],
                              [numpy_helper.from_array(weight.astype(np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """ONNX Runtime with graph optimizations off: the literal Q/DQ semantics (its fusions would requantize the
    activation of a weight-only DQ → MatMul/Gemm dynamically)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _fake_quantized(weight: np.ndarray, out_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference: symmetric INT8 per output channel along `out_axis`, written independently of trtlab."""
    amax = np.abs(weight).max(axis=tuple(a for a in range(weight.ndim) if a != out_axis), keepdims=True)
    scale = amax / 127.0
    return np.clip(np.rint(weight / scale), -127, 127) * scale, scale.reshape(-1)


@pytest.mark.parametrize("case", ["Conv", "ConvTranspose", "Gemm transB=1", "Gemm transB=0", "MatMul"])
def test_weight_axis_is_the_output_channel_numerically(case, real_weights):
    fc, kernel = real_weights  # fc: (1000 outputs, 1280 inputs); kernel: (M, C, 1, 1)
    rng = np.random.default_rng(0)
    if case == "Conv":
        weight, attrs, x_shape, out_axis = kernel, {}, [2, kernel.shape[1], 5, 5], 0
    elif case == "ConvTranspose":  # weight (C_in, C_out, kH, kW): output channels on axis 1
        weight, attrs, x_shape, out_axis = kernel, {}, [2, kernel.shape[0], 5, 5], 1
    elif case == "Gemm transB=1":  # B (N, K): output features on axis 0
        weight, attrs, x_shape, out_axis = fc, {"transB": 1}, [3, fc.shape[1]], 0
    elif case == "Gemm transB=0":  # B (K, N): output features on axis 1
        weight, attrs, x_shape, out_axis = np.ascontiguousarray(fc.T), {"transB": 0}, [3, fc.shape[1]], 1
    else:  # MatMul B (K, N): the last axis
        weight, attrs, x_shape, out_axis = np.ascontiguousarray(fc.T), {}, [3, fc.shape[1]], 1
    op = case.split()[0]
    model = _single_op_model(op, weight, attrs, x_shape)
    plan = plan_quantization(model)
    assert plan.weights == {"w": (f"{op}_under_test", out_axis)}
    plan.activations, plan.consumers = [], {}  # weights only: the output differs from FP32 by the weight's rounding
    quantized = insert_qdq(model, plan, {})
    onnx.checker.check_model(quantized)
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    reference, reference_scale = _fake_quantized(weight, out_axis)
    np.testing.assert_allclose(inits["w__scale"], reference_scale, rtol=1e-6)  # one scale per output channel
    # dequantized per channel: each channel's largest |w| is exact, every value within half a step of its channel
    dequantized = inits["w__int8"].astype(np.float32) * inits["w__scale"].reshape(
        [-1 if a == out_axis else 1 for a in range(weight.ndim)])
    moved = np.moveaxis(np.abs(weight), out_axis, 0).reshape(weight.shape[out_axis], -1)
    assert np.allclose(np.moveaxis(np.abs(dequantized), out_axis, 0).reshape(len(moved), -1).max(1), moved.max(1),
                       rtol=1e-6)
    step = np.moveaxis(np.abs(dequantized - weight), out_axis, 0).reshape(len(moved), -1).max(1)
    assert (step <= reference_scale / 2 * (1 + 1e-5)).all()
    # ONNX Runtime running the Q/DQ graph computes with exactly that weight
    x = rng.normal(size=x_shape).astype(np.float32)
    expected = _run(_single_op_model(op, reference.astype(np.float32), attrs, x_shape), x)
    np.testing.assert_allclose(_run(quantized, x), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    # a wrong axis would not be that weight (the check can fail)
    if weight.shape[1 - out_axis] != weight.shape[out_axis]:
        wrong, _ = _fake_quantized(weight, 1 - out_axis)
        assert not np.allclose(_run(_single_op_model(op, wrong.astype(np.float32), attrs, x_shape), x), expected,
                               rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("case", ["grouped ConvTranspose", "MatMul 1-D"])
def test_a_weight_without_an_output_channel_axis_gets_one_scale(case, real_weights):
    """A grouped ConvTranspose's axis 1 has M/g entries for M output channels, and a 1-D MatMul B is summed over: no
    axis holds one scale per output channel, so the weight gets one per-tensor scale (no `axis` on its DQ)."""
    fc, kernel = real_weights
    if case == "grouped ConvTranspose":  # (C_in, C_out/g, kH, kW) with g = 2: 2 × 8 = 16 output channels
        weight, attrs, x_shape = kernel[:16, :8], {"group": 2}, [2, 16, 5, 5]
    else:  # B (K,): y = x · w, one value per row
        weight, attrs, x_shape = fc[0], {}, [3, fc.shape[1]]
    op = "ConvTranspose" if case.startswith("grouped") else "MatMul"
    model = _single_op_model(op, weight, attrs, x_shape)
    if case == "MatMul 1-D":
        model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"]))
    plan = plan_quantization(model)
    assert plan.weights == {"w": (f"{op}_under_test", None)}
    plan.activations, plan.consumers = [], {}
    quantized = insert_qdq(model, plan, {})
    onnx.checker.check_model(quantized)
    dq = next(n for n in quantized.graph.node if n.op_type == "DequantizeLinear")
    assert not any(a.name == "axis" for a in dq.attribute)
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    assert inits["w__scale"].shape == () and inits["w__zp"].shape == ()
    np.testing.assert_allclose(inits["w__scale"], np.abs(weight).max() / 127.0, rtol=1e-6)
    reference = np.clip(np.rint(weight / inits["w__scale"]), -127, 127) * inits["w__scale"]
    x = np.random.default_rng(0).normal(size=x_shape).astype(np.float32)
    expected = _run(_single_op_model(op, reference.astype(np.float32), attrs, x_shape), x)
    np.testing.assert_allclose(_run(quantized, x), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_a_constant_first_matmul_input_is_quantized_per_tensor(real_weights):
    """MatMul(W, x), W an initializer: W gets one scale and the activation x its Q/DQ pair, so the op reads INT8
    on both sides (W used to stay float)."""
    fc, _ = real_weights  # W (1000, 1280) · x (1280, n)
    node = helper.make_node("MatMul", ["w", "x"], ["y"], name="matmul_wx")
    graph = helper.make_graph([node], "wx", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1280, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1000, 4])],
                              [numpy_helper.from_array(fc.astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    plan = plan_quantization(model)
    assert plan.weights == {"w": ("matmul_wx", None)} and plan.activations == ["x"]
    quantized = insert_qdq(model, plan, {"x": 0.02})
    onnx.checker.check_model(quantized)
    matmul = next(n for n in quantized.graph.node if n.op_type == "MatMul")
    assert list(matmul.input) == ["w__dq", "x__dq"]
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    np.testing.assert_allclose(inits["w__scale"], np.abs(fc).max() / 127.0, rtol=1e-6)
    x = np.random.default_rng(0).normal(size=(1280, 4)).astype(np.float32)
    w_q = np.clip(np.rint(fc / inits["w__scale"]), -127, 127) * inits["w__scale"]
    x_q = np.clip(np.rint(x / 0.02), -128, 127) * np.float32(0.02)
    expected = w_q.astype(np.float32) @ x_q.astype(np.float32)
    np.testing.assert_allclose(_run(quantized, x), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_an_ungrouped_conv_transpose_keeps_its_output_channel_axis(real_weights):
    _, kernel = real_weights
    model = _single_op_model("ConvTranspose", kernel[:16, :8], {"group": 1}, [2, 16, 5, 5])
    assert plan_quantization(model).weights == {"w": ("ConvTranspose_under_test", 1)}


def test_weight_quantization_is_symmetric_with_zero_channels_kept():
    weights = np.array([[0.5, -1.0], [0.0, 0.0]], np.float32)
    q, scale = quantize_weight(weights, axis=0)
    np.testing.assert_allclose(scale, [1.0 / 127, 1.0])  # an all-zero channel gets scale 1, not 0
    np.testing.assert_array_equal(q, [[64, -127], [0, 0]])


def test_placement_rules_are_a_table_of_named_functions(demo_model):
    assert [RULES[name].fn for name in LEGACY_RULES] == [weighted_op_inputs, residual_add_input]
    assert all(rule.what and rule.stage in ("exclude", "node", "plan") for rule in RULES.values())
    model = onnx.load(str(demo_model))
    adds = {n.name for n in model.graph.node if n.op_type == "Add"}
    full = plan_quantization(model)
    weighted_only = plan_quantization(model, rules=(weighted_op_inputs,))
    readers = lambda plan: [(node, index) for uses in plan.consumers.values() for node, index in uses]  # noqa: E731
    assert len([r for r in readers(full) if r[0] in adds]) == 9  # EfficientNet-Lite0's 9 residual Adds: skip inputs
    assert not [r for r in readers(weighted_only) if r[0] in adds]
    # the skip input is shared with the next Conv's input: one Q/DQ pair, one scale, two readers
    assert full.activations == weighted_only.activations and len(full.weights) == 50


def test_qdq_stays_fp32_before_opset_19_in_the_precision_plan(demo_model):
    from trtlab.graph.precision import plan_precisions

    model = onnx.load(str(demo_model))
    plan = plan_quantization(model, parse_guards(["last_layer=fp16"]))
    quantized = insert_qdq(model, plan, {t: 0.05 for t in plan.activations})
    precisions = plan_precisions(quantized, default="fp16")  # issue 17's float path, as a plan
    qdq = [n.name for n in quantized.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq and all(precisions.precisions[name] == "fp32" for name in qdq)
    assert precisions.reasons[qdq[0]].startswith("Q/DQ scales float32")
    assert all(p == "fp16" for name, p in precisions.precisions.items() if name not in qdq)


# -- fixed batch > 1: the short last batch is padded, padded rows never counted ------------------------------------
@pytest.fixture(scope="module")
def fixed_batch_model(demo_model, tmp_path_factory):
    """The demo model edited to a fixed batch of 4 (input and output dims set, shapes re-inferred)."""
    model = onnx.load(str(demo_model))
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 4
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    path = tmp_path_factory.mktemp("fixed") / "efficientnet-lite0-b4.onnx"
    onnx.save(model, str(path))
    return path


def test_fixed_batch_calibration_pads_the_last_batch_and_counts_only_real_rows(fixed_batch_model, demo_model,
                                                                              demo_cache, session_workspace):
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.thresholds import compute_thresholds
    from trtlab.quantization.variants import stats_tensors

    assert inspect_classifier(fixed_batch_model).fixed_batch == 4
    images = demo_cache.valid_indices[:6]  # one batch of 4, then 2 real rows + 2 padded
    fixed = sanitize_model(fixed_batch_model, session_workspace)
    dynamic = sanitize_model(demo_model, session_workspace)
    tensors = stats_tensors(onnx.load(str(fixed)))
    common = sorted(set(tensors) & set(stats_tensors(onnx.load(str(dynamic)))))
    assert len(common) >= 50
    padded = collect_statistics(fixed, common, demo_cache, images, batch_size=8, progress=False)
    one_by_one = collect_statistics(dynamic, common, demo_cache, images, batch_size=1, progress=False)
    assert padded.images == one_by_one.images == 6
    for name in common:
        # every value counted once: the padded copies of the last image are not (they would add 2 images' worth)
        assert padded.tensors[name].values == one_by_one.tensors[name].values, name
        assert padded.tensors[name].counts.sum() == one_by_one.tensors[name].values, name
    minmax_padded = compute_thresholds(padded, "minmax")
    minmax_single = compute_thresholds(one_by_one, "minmax")
    for name in common:  # the same 6 images: the same max |x| (batch 4 vs 1 kernels: float32 rounding only)
        assert minmax_padded[name] == pytest.approx(minmax_single[name], rel=1e-4), name


def test_fixed_batch_model_calibrates_builds_and_evaluates_a_short_last_batch(fixed_batch_model, demo_model,
                                                                             demo_cache, session_workspace):
    from trtlab.evaluation.evaluate import evaluate
    from trtlab.quantization.recipe import Recipe
    from trtlab.quantization.variants import build_variant

    images = demo_cache.valid_indices[:6]
    built = build_variant(fixed_batch_model, Recipe(algorithm="minmax", calibration_batch=4), demo_cache, images,
                          session_workspace, progress=False)
    assert built.calibration["images"] == 6 and built.recipe.calibration_images == 6
    quantized = onnx.load(str(built.model_path))
    assert quantized.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 4
    # evaluation: 6 images through a batch-4 model = 4 + (2 real + 2 padded); 6 results, equal to the dynamic model's
    fixed = evaluate(fixed_batch_model, demo_cache, "fp32", workspace=session_workspace, indices=images,
                     backend="ort", progress=False, force=True)
    dynamic = evaluate(demo_model, demo_cache, "fp32", workspace=session_workspace, indices=images, backend="ort",
                       progress=False, force=True)
    assert len(fixed) == 6 and fixed.record["batch_size"] == 4
    np.testing.assert_array_equal(fixed.top1, dynamic.top1)
    np.testing.assert_allclose(fixed.logits.astype(np.float32), dynamic.logits.astype(np.float32), atol=2e-2)
    int8 = evaluate(built.model_path, demo_cache, "int8", workspace=session_workspace, indices=images,
                    backend="ort", progress=False, force=True)
    assert len(int8) == 6 and (int8.top1 == dynamic.top1).mean() >= 0.5
