"""Recovery (issue 39): bias correction, cross-layer equalization and adaptive rounding on small graphs built here,
each graph checked by onnx.checker (full) and for what TensorRT takes; the recipe's label and identity; and, on the
demo model, bias correction bringing INT8 logits closer to FP32 on images calibration did not use."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


# -- small graphs --------------------------------------------------------------------------------------------------
def conv(name, x, w, b=None, group=1, pads=(1, 1, 1, 1)):
    inputs = [x, f"{name}_w"] + ([f"{name}_b"] if b is not None else [])
    kernel = list(w.shape[2:])
    node = helper.make_node("Conv", inputs, [f"{name}_out"], name=name, group=group, kernel_shape=kernel,
                            pads=list(pads) if kernel[0] > 1 else [0, 0, 0, 0])
    inits = [numpy_helper.from_array(w.astype(np.float32), f"{name}_w")]
    if b is not None:
        inits.append(numpy_helper.from_array(b.astype(np.float32), f"{name}_b"))
    return node, inits


def model_of(nodes, inits, channels: int, size: int, out: str, out_channels: int, extra_inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          ["N", channels, size, size])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT,
                                                             ["N", out_channels, size, size])],
                              list(inits) + list(extra_inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def run(model, x):
    from trtlab.core.ort_session import ort_session

    session = ort_session(model, optimization="disable")
    return session.run(None, {"x": x.astype(np.float32)})[0]


def tensorrt_legal(quantized, plain) -> None:
    """What TensorRT takes from a Q/DQ graph (issue 39's list): onnx.checker full, signed INT8 with zero point 0
    everywhere, weight scales per output channel or per tensor, and the same op types as the plain variant."""
    onnx.checker.check_model(quantized, full_check=True)
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    for node in quantized.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            zero = inits[node.input[2]]
            assert zero.dtype == np.int8 and not zero.any(), node.name
            if node.op_type == "DequantizeLinear" and node.input[0] in inits:  # a weight
                assert inits[node.input[0]].dtype == np.int8
                scale = inits[node.input[1]]
                axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
                assert scale.ndim == 0 or scale.shape == (inits[node.input[0]].shape[axis],)
    assert Counter(n.op_type for n in quantized.graph.node) == Counter(n.op_type for n in plain.graph.node)


def named(model):
    from trtlab.graph.sanitize import name_nodes

    name_nodes(model)
    return model


def planned(model, recipe):
    from trtlab.quantization.placement import plan_for_recipe

    return plan_for_recipe(model, recipe)


def scales_for(model, plan, images):
    """minmax activation scales of the plan's tensors over `images` (the FP32 graph with them as outputs)."""
    from trtlab.quantization.recovery.layerwise import LayerwiseGraph

    graph = LayerwiseGraph(model, [])
    values = {}

    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in plan.activations
                                if t not in {o.name for o in exposed.graph.output} and t != "x")
    from trtlab.core.ort_session import ort_session

    names = [o.name for o in exposed.graph.output]
    outs = dict(zip(names, ort_session(exposed, optimization="disable").run(names, {"x": images})))
    outs["x"] = images
    for t in plan.activations:
        values[t] = float(np.abs(outs[t]).max()) / 127
    del graph
    return values


def quantized_pair(model, recipe, images):
    """(plain Q/DQ graph, recovered Q/DQ graph, recovery report, recovered float model) for `recipe`."""
    from trtlab.quantization.insertion import quantize_graph
    from trtlab.quantization.recovery.recover import RecoveryReport, recover_layers

    plan = planned(model, recipe)
    scales = scales_for(model, plan, images)
    plain = quantize_graph(model, plan, scales, recipe.high_precision).model
    recovered, report = recover_layers(model, plan, scales, recipe, images, report=RecoveryReport(recipe.recovery),
                                       progress=False)
    return plain, quantize_graph(recovered, plan, scales, recipe.high_precision).model, report, recovered, scales


# -- bias correction -------------------------------------------------------------------------------------------------
def biased_model():
    """Conv (8 → 16, 3×3) → Relu → Conv (16 → 8, 1×1): every weight of the first but its largest sits 0.45 of a
    step above an integer, so nearest rounding takes 0.45 s off each — a per-channel shift of the output, planted."""
    scale = np.linspace(0.002, 0.02, 16)[:, None, None, None]
    w1 = (RNG.integers(5, 40, (16, 8, 3, 3)) + 0.45) * scale
    w1[:, 0, 0, 0] = 127 * scale[:, 0, 0, 0]  # the largest |w|: scale = max|w| / 127 exactly
    n1, i1 = conv("c1", "x", w1, RNG.normal(0, 0.1, 16))
    relu = helper.make_node("Relu", ["c1_out"], ["r1"], name="r1")
    n2, i2 = conv("c2", "r1", RNG.normal(0, 0.2, (8, 16, 1, 1)), RNG.normal(0, 0.1, 8))
    return named(model_of([n1, relu, n2], i1 + i2, 8, 12, "c2_out", 8))


def positive_images(count, seed):
    return np.random.default_rng(seed).uniform(0.2, 1.0, (count, 8, 12, 12)).astype(np.float32)


def c1_errors(fp32, quantized, images):
    """FP32 minus INT8 mean output of c1 per channel (c1_out exposed as an output of both graphs)."""
    outs = []
    for model in (fp32, quantized):
        exposed = onnx.shape_inference.infer_shapes(model)
        kind = next(v.type.tensor_type.elem_type for v in exposed.graph.value_info if v.name == "c1_out")
        exposed.graph.output.insert(0, helper.make_tensor_value_info("c1_out", kind, None))
        outs.append(run(exposed, images).astype(np.float64))
    return (outs[0] - outs[1]).mean(axis=(0, 2, 3))


@pytest.mark.parametrize("float_path", ["fp32", "fp16"])
def test_bias_correction_removes_a_planted_per_channel_shift(float_path):
    from trtlab.quantization.recipe import Recipe

    model = biased_model()
    recipe = Recipe(algorithm="minmax", high_precision=float_path, recovery=("bias_correction",))
    calibration, held_out = positive_images(32, 1), positive_images(32, 2)
    plain, corrected, report, _, _ = quantized_pair(model, recipe, calibration)
    tensorrt_legal(corrected, plain)
    before, after = c1_errors(model, plain, held_out), c1_errors(model, corrected, held_out)
    assert (before > 0).all() and before.min() > 5 * np.abs(after).max()  # planted shift gone, on other images
    result = report.bias_correction
    assert result["per_layer"][0]["layer"] == "c1" and result["per_layer"][0]["corrected"] == 16


def test_bias_correction_leaves_channels_it_cannot_tell_from_noise():
    from trtlab.quantization.recovery.bias_correction import Z, estimate_shift

    rng = np.random.default_rng(3)
    errors = rng.normal(0, 1.0, (40, 6))  # noise only…
    errors[:, 0] += 2.0  # …but channel 0 is shifted by 2, ~13 standard errors
    shift, record = estimate_shift("layer", errors)
    assert shift[0] == pytest.approx(errors[:, 0].mean()) and record.corrected >= 1
    assert np.all(shift[np.abs(errors.mean(0)) < Z * errors.std(0, ddof=1) / np.sqrt(40)] == 0)
    few, record = estimate_shift("layer", errors[:3])
    assert not few.any() and "fewer than" in record.skipped


# -- equalization ----------------------------------------------------------------------------------------------------
def chain_model():
    """c1 → Relu → c2 (ranges 1000× apart across c1's channels: equalized); c2 → ReLU6 → dw (depthwise) → c3;
    c3 → HardSwish → c4; c4 → SiLU → c5: those three pairs are not positively homogeneous."""
    ranges = np.logspace(-2, 1, 8)[:, None, None, None]
    n1, i1 = conv("c1", "x", RNG.normal(0, 1, (8, 4, 3, 3)) * ranges, RNG.normal(0, 0.1, 8))
    relu = helper.make_node("Relu", ["c1_out"], ["a1"], name="a1")
    n2, i2 = conv("c2", "a1", RNG.normal(0, 0.5, (8, 8, 1, 1)), RNG.normal(0, 0.1, 8))
    lo, hi = numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32),
                                                                                             "hi")
    relu6 = helper.make_node("Clip", ["c2_out", "lo", "hi"], ["a2"], name="a2")
    n3, i3 = conv("dw", "a2", RNG.normal(0, 0.5, (8, 1, 3, 3)), RNG.normal(0, 0.1, 8), group=8)
    relu_b = helper.make_node("Relu", ["dw_out"], ["a3"], name="a3")
    n4, i4 = conv("c3", "a3", RNG.normal(0, 0.5, (8, 8, 1, 1)), RNG.normal(0, 0.1, 8))
    hswish = helper.make_node("HardSwish", ["c3_out"], ["a4"], name="a4")
    n5, i5 = conv("c4", "a4", RNG.normal(0, 0.5, (8, 8, 1, 1)), RNG.normal(0, 0.1, 8))
    sig = helper.make_node("Sigmoid", ["c4_out"], ["s5"], name="s5")
    mul = helper.make_node("Mul", ["c4_out", "s5"], ["a5"], name="a5")
    n6, i6 = conv("c5", "a5", RNG.normal(0, 0.5, (4, 8, 1, 1)), RNG.normal(0, 0.1, 4))
    return named(model_of([n1, relu, n2, relu6, n3, relu_b, n4, hswish, n5, sig, mul, n6],
                          i1 + i2 + i3 + i4 + i5 + i6, 4, 10, "c5_out", 4, [lo, hi]))


def test_equalization_keeps_the_fp32_output_and_equalizes_ranges():
    from trtlab.quantization.recovery.equalization import channel_ranges, equalize_pairs

    model = chain_model()
    equalized, report = equalize_pairs(model)
    onnx.checker.check_model(equalized, full_check=True)
    images = np.random.default_rng(4).normal(0, 1, (6, 4, 10, 10)).astype(np.float32)
    before, after = run(model, images), run(equalized, images)
    np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-4 * np.abs(before).max())
    assert sorted(map(tuple, report["pairs"])) == [("c1", "c2"), ("dw", "c3")]
    weights = {i.name: numpy_helper.to_array(i) for i in equalized.graph.initializer}
    r1, r2 = channel_ranges(weights["c1_w"], weights["c2_w"], depthwise=False)
    np.testing.assert_allclose(r1, r2, rtol=1e-4)  # equal ranges…
    original = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    spread = lambda w: np.abs(w).reshape(8, -1).max(1).max() / np.abs(w).reshape(8, -1).max(1).min()  # noqa: E731
    assert spread(weights["c1_w"]) < spread(original["c1_w"]) / 10  # …and c1's channels far closer to each other
    skipped = {(s["first"], s["second"]): s["reason"] for s in report["skipped"]}
    assert "ReLU6" in skipped[("c2", "dw")] and "HardSwish" in skipped[("c3", "c4")]
    assert "SiLU" in skipped[("c4", "c5")]
    assert Counter(n.op_type for n in equalized.graph.node) == Counter(n.op_type for n in model.graph.node)


def test_equalization_in_a_recipe_with_per_tensor_weights_is_legal_and_closer_to_fp32():
    from trtlab.quantization.insertion import quantize_graph
    from trtlab.quantization.recipe import Recipe
    from trtlab.quantization.recovery.equalization import equalize_pairs

    model = chain_model()
    recipe = Recipe(algorithm="minmax", placement={"per_tensor_weights": True}, high_precision="fp32")
    images = np.random.default_rng(5).normal(0, 1, (16, 4, 10, 10)).astype(np.float32)
    equalized, _ = equalize_pairs(model)
    graphs = []
    for float_model in (model, equalized):
        plan = planned(float_model, recipe)
        assert all(axis is None for _, axis in plan.weights.values())
        graphs.append(quantize_graph(float_model, plan, scales_for(float_model, plan, images), "fp32").model)
    tensorrt_legal(graphs[1], graphs[0])
    reference = run(model, images)
    errors = [np.abs(run(g, images) - reference).mean() for g in graphs]
    assert errors[1] < errors[0]


# -- adaptive rounding ---------------------------------------------------------------------------------------------
def smooth_images(count, seed, channels=8, size=12):
    """Images whose neighbouring pixels are correlated, as a photo's are (noise at 3×3, upsampled ×4, plus a little
    noise): on white noise no rounding beats nearest, and AdaRound rightly finds none."""
    rng = np.random.default_rng(seed)
    coarse = rng.normal(0, 1, (count, channels, size // 4, size // 4))
    return (np.repeat(np.repeat(coarse, 4, axis=2), 4, axis=3)
            + rng.normal(0, 0.1, (count, channels, size, size))).astype(np.float32)


def rounding_model():
    n1, i1 = conv("c1", "x", RNG.normal(0, 0.3, (16, 8, 3, 3)), RNG.normal(0, 0.1, 16))
    relu = helper.make_node("Relu", ["c1_out"], ["r1"], name="r1")
    n2, i2 = conv("dw", "r1", RNG.normal(0, 0.3, (16, 1, 3, 3)), RNG.normal(0, 0.1, 16), group=16)
    return named(model_of([n1, relu, n2], i1 + i2, 8, 12, "dw_out", 16))


@pytest.mark.parametrize("float_path", ["fp32", "fp16"])
def test_adaround_moves_no_weight_past_one_step_lowers_the_error_and_keeps_its_integers(float_path):
    from trtlab.quantization.insertion import quantize_weight
    from trtlab.quantization.recipe import Recipe

    model = rounding_model()
    recipe = Recipe(algorithm="minmax", high_precision=float_path, recovery=("adaround",))
    images = smooth_images(48, 6)
    plain, rounded, report, recovered, _ = quantized_pair(model, recipe, images)
    tensorrt_legal(rounded, plain)
    layers = {r["layer"]: r for r in report.adaround["per_layer"]}
    assert layers["c1"].get("moved", 0) > 0 and layers["c1"]["error_adaround"] < layers["c1"]["error_nearest"]
    original = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    written = {i.name: numpy_helper.to_array(i) for i in recovered.graph.initializer}
    stored = {i.name: numpy_helper.to_array(i) for i in rounded.graph.initializer}
    dtype = np.float16 if float_path == "fp16" else np.float32
    for weight in ("c1_w", "dw_w"):
        nearest, scale = quantize_weight(original[weight], 0, dtype)  # the scale the graph stores (FP16 on fp16)
        ratio = original[weight] / scale.reshape(-1, 1, 1, 1)
        chosen = stored[f"{weight}__int8"].astype(np.float64)
        assert np.abs(chosen - ratio).max() < 1 and np.abs(chosen - nearest).max() <= 1  # floor or ceil only
        # written back as multiples of that scale (float32(q · s): within float32's rounding of the product), so
        # the Q/DQ writer's rounding stores exactly the chosen integers
        multiple = written[weight].astype(np.float64) / scale.reshape(-1, 1, 1, 1)
        assert np.abs(multiple - np.rint(multiple)).max() < 1e-4
        np.testing.assert_array_equal(np.rint(multiple), chosen)
    assert (stored["c1_w__int8"] != quantize_weight(original["c1_w"], 0, dtype)[0]).any()


def test_adaround_keeps_nearest_where_the_data_cannot_fit_a_rounding():
    from trtlab.quantization.recipe import Recipe

    model = rounding_model()
    recipe = Recipe(algorithm="minmax", recovery=("adaround",))
    images = smooth_images(1, 7)  # 144 positions for a fan-in of 72: fewer than 4 per input
    _, _, report, _, _ = quantized_pair(model, recipe, images)
    assert "too few positions" in report.adaround["kept_nearest"]["c1"]
    assert report.adaround["layers_rounded"] < report.adaround["layers"]


# -- the recipe ------------------------------------------------------------------------------------------------------
def test_recipe_names_its_recovery_in_label_and_identity_and_refuses_unknown_methods():
    from trtlab.core.errors import UserValueError
    from trtlab.quantization.recipe import Recipe

    plain = Recipe(algorithm="minmax", calibration_images=8)
    both = Recipe(algorithm="minmax", calibration_images=8, recovery="adaround,bias_correction")
    assert both.recovery == ("adaround", "bias_correction")
    assert both.name == "int8-minmax@8+adaround+biascorr"
    assert Recipe(algorithm="minmax", calibration_images=8, recovery=("bias_correction", "adaround")) == both
    assert "recovery" not in plain.to_dict()  # recipes without recovery keep the identity they had before
    assert both.to_dict()["recovery"] == ["adaround", "bias_correction"]
    assert Recipe.from_dict(both.to_dict()) == both
    from trtlab.quantization.variants import variant_identity

    assert variant_identity(plain.to_dict()).key != variant_identity(both.to_dict()).key
    with pytest.raises(UserValueError, match="'rounding' are not trtlab's"):
        Recipe(recovery=("rounding",))
    with pytest.raises(UserValueError, match="INT8"):
        Recipe(precision="fp16", recovery=("adaround",))


# -- the demo model ----------------------------------------------------------------------------------------------------
def test_bias_correction_brings_the_demo_models_int8_logits_closer_to_fp32_on_held_out_images(
        demo_model, demo_cache, session_workspace):
    """Calibrate on the 6 scikit-image/matplotlib photos, score on the 20 foolbox photos (demo_split): images the
    correction never saw."""
    from trtlab.core.ort_session import ort_session
    from trtlab.data.batches import iter_batches
    from trtlab.data.demo import demo_dataset, demo_split
    from trtlab.quantization.recipe import Recipe
    from trtlab.quantization.variants import build_variant

    split = demo_split(demo_dataset())
    images = np.concatenate([b.images for b in iter_batches(demo_cache, split.evaluation, 32)])

    def logits(path):
        session = ort_session(path, optimization="disable")
        return session.run(None, {session.get_inputs()[0].name: images})[0].astype(np.float64)

    reference = logits(demo_model)
    sqnr = {}
    for recovery in ((), ("bias_correction",)):
        built = build_variant(demo_model, Recipe(algorithm="minmax", recovery=recovery), demo_cache,
                              split.calibration, session_workspace, progress=False)
        error = logits(built.model_path) - reference
        sqnr[recovery] = 10 * np.log10((reference ** 2).sum() / (error ** 2).sum())
    assert sqnr[("bias_correction",)] > sqnr[()] + 0.3, sqnr
    assert built.plan["recovery"]["bias_correction"]["channels_corrected"] > 0
    assert built.name.endswith("+biascorr")
    from trtlab.core.errors import UserValueError

    with pytest.raises(UserValueError, match="equalization changes the graph's activation ranges"):
        build_variant(demo_model, Recipe(algorithm="minmax", recovery=("equalization",)), demo_cache,
                      split.calibration, session_workspace, progress=False,
                      calibration_cache_path=built.calibration_cache, reuse_cache=True)
