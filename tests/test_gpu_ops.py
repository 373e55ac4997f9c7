"""The torch backend's ops (backends/gpu) against ONNX's own semantics, on the CPU: QuantizeLinear/DequantizeLinear
bit for bit against onnx.reference (ties, saturation, negative values, zero points, per-axis, FP16 scales), the
other ops of classifier graphs within float rounding, the onnx wheel's real architectures tensor by tensor against
ONNX Runtime, and the one-line refusal of what the backend does not run."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

torch = pytest.importorskip("torch")

from trtlab.backends.gpu.graph_module import convert_onnx  # noqa: E402
from trtlab.core.errors import UserError  # noqa: E402

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
    # IR 10 (onnx 1.16+): an onnx newer than the installed ONNX Runtime would otherwise stamp an IR it refuses.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


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


@pytest.mark.parametrize("graph", ["light_resnet50", "light_inception_v1", "light_shufflenet"])
def test_real_classifier_graphs_match_onnx_runtime_tensor_by_tensor(graph):
    """The onnx wheel's real architectures (opset 9, brought to 13; BatchNorm, Sum, LRN, pools with pads, Concat,
    channel shuffles, Dropout, Softmax): every intermediate tensor within float rounding of ONNX Runtime's."""
    import os

    from trtlab.core.ort_session import ort_session
    from trtlab.graph.onnx_utils import with_outputs

    model = onnx.load(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                                   f"{graph}.onnx"))
    module = convert_onnx(model)
    x = _r(1, 3, 224, 224, seed=5)
    with torch.inference_mode():
        ours = module.trace(torch.from_numpy(x))
    read = {i for node in model.graph.node for i in node.input} | {o.name for o in model.graph.output}
    names = [o for node in model.graph.node for o in node.output  # (an unread Dropout mask changed type at opset 10)
             if o in ours and o in read and node.op_type != "ConstantOfShape"]
    producer = {o: node for node in model.graph.node for o in node.output}
    session = ort_session(with_outputs(model, names), optimization="disable")
    theirs = dict(zip([o.name for o in session.get_outputs()], session.run(None, {session.get_inputs()[0].name: x})))
    worst = max(float(np.abs(ours[n].numpy() - theirs[n]).max() / max(np.abs(theirs[n]).max(), 1e-30))
                for n in names if producer[n].op_type != "Softmax")
    assert len(names) > 50 and worst < 1e-4, worst
    # The light graphs' constant weights give logits of ~1e18, whose rounding differences (~1e13, within 1e-4 of
    # their range above) are huge in absolute terms: Softmax of them depends on summation order (on the H200
    # machine's ONNX Runtime 1.30 every class came out 0.001). So Softmax is checked given ONNX Runtime's input.
    for node in (n for n in model.graph.node if n.op_type == "Softmax" and n.output[0] in names):
        given = torch.from_numpy(theirs[node.input[0]]) if node.input[0] in theirs else ours[node.input[0]]
        step = next(s for s in module.steps if s.outputs[0] == node.output[0])
        with torch.inference_mode():
            np.testing.assert_allclose(step.fn(given).numpy(), theirs[node.output[0]], rtol=1e-5, atol=1e-6)


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




def _per_tensor_weight_graphs():
    """trtlab's Q/DQ graphs whose weight has one per-tensor scale: a grouped ConvTranspose, a 1-D MatMul weight and
    MatMul(W, x) (quantization/placement.weight_axis)."""
    from trtlab.quantization.insertion import insert_qdq
    from trtlab.quantization.placement import plan_quantization

    rng = np.random.default_rng(4)
    cases = {
        "grouped-conv-transpose": ("ConvTranspose", ["x", "w"], rng.normal(size=(16, 8, 3, 3)), [2, 16, 5, 5],
                                   {"group": 2}),
        "matmul-1d-weight": ("MatMul", ["x", "w"], rng.normal(size=(32,)), [3, 32], {}),
        "matmul-weight-first": ("MatMul", ["w", "x"], rng.normal(size=(24, 32)), [32, 5], {}),
    }
    for name, (op_type, inputs, weight, x_shape, attrs) in cases.items():
        node = helper.make_node(op_type, inputs, ["y"], name=name, **attrs)
        graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [numpy_helper.from_array(weight.astype(np.float32), "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
        plan = plan_quantization(model)
        assert plan.weights == {"w": (name, None)}
        yield name, insert_qdq(model, plan, {"x": 0.03}), rng.normal(size=x_shape).astype(np.float32)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_per_tensor_weight_scales_run_literally_on_the_torch_backend(device):
    """Each graph on the torch backend equals ONNX Runtime's literal run (optimizations off) of the same graph."""
    import onnxruntime as ort

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for name, model, x in _per_tensor_weight_graphs():
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        expected = session.run(None, {"x": x})[0]
        module = convert_onnx(model).to(device)
        with torch.inference_mode():
            got = module(torch.from_numpy(x).to(device))[0].cpu().numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max(), err_msg=name)
