"""What the precision report (trtlab.graph.fusion) takes from TensorRT's documentation and its ONNX parser: the op
families, the sentences each rule rests on, and the Q/DQ facts read off a graph (a Q/DQ's scale values, its UINT8
type). The predictor applies them; a fact TensorRT does not document is written here as the assumption the report
then shows ("undocumented / assumed"), never asserted.
"""
from __future__ import annotations

#: Ops Q/DQ propagate through ("DQ forward-propagation and Q backward-propagation", Explicit Quantization: a layer
#: that commutes with quantization, Q(op(x)) = op(Q(x)); the guide's example is max pooling).
COMMUTING = frozenset({"MaxPool", "GlobalMaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
                       "Identity"})
ACTIVATIONS = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu",
                         "Softplus", "Gelu", "PRelu"})
SCALE_OPS = frozenset({"Add", "Sub", "Mul", "Div"})
ELEMENTWISE_INT8 = frozenset({"Add", "Sum", "Mul", "Sub", "Max", "Min", "Concat"})
NO_COMPUTE = frozenset({"Shape", "Constant", "ConstantOfShape", "Gather", "Unsqueeze", "Squeeze", "Reshape",
                        "Flatten", "Transpose", "Identity", "Concat", "Slice", "Size", "Range", "Expand"})

#: ONNX ops that ONNX-TensorRT imports as a Reduce layer, not a Pooling layer (onnx-tensorrt onnxOpImporters.cpp:
#: GlobalAveragePool / GlobalMaxPool go through globalPoolingHelper with ReduceOperation::kAVG / kMAX —
#: "GlobalAveragePool operators are implemented via Reduce layers rather than Pooling layers" — and ReduceMean through
#: reduceTensor with kAVG). The developer guide's quantizable pool is AveragePool, a Pooling layer ("A quantizable
#: AveragePool layer (in blue) is fused with a DQ layer and a Q layer. All three layers are replaced by a quantized
#: AveragePool layer", Explicit Quantization, figure 1), and its commuting example is max pooling: the same Q/DQ
#: handling of a Reduce is not documented (the Reduce operator lists int8 among its types), so GlobalAveragePool and a
#: spatial ReduceMean are predicted alike — INT8, marked assumed.
REDUCE_POOLS = {"GlobalAveragePool": "AVG", "ReduceMean": "AVG", "GlobalMaxPool": "MAX"}


def reduce_assumption(op_type: str) -> str:
    """The assumption behind predicting INT8 for an op ONNX-TensorRT imports as a Reduce layer ('' for any other)."""
    operation = REDUCE_POOLS.get(op_type)
    if operation is None:
        return ""
    documented = "AveragePool's DQ → pool → Q fusion" if operation == "AVG" else "MaxPool's Q/DQ commutation"
    return (f"ONNX-TensorRT imports {op_type} as a Reduce layer ({operation}), not a Pooling layer; the developer "
            f"guide documents {documented} for the Pooling layer only, so that the Reduce runs on INT8 data is not "
            f"documented")


#: ONNX-TensorRT's operator support (docs/operators.md): "UINT8 is only supported as network input or output tensor
#: types"; its QuantizeLinear / DequantizeLinear importer refuses a UINT8 input or zero point as an unsupported node
#: (QuantDequantLinearHelper: notInvalidType(..., {"UINT8"}); onnx/onnx-tensorrt#886 "Check that QuantizeLinear is not
#: UINT8 type"). Quantizers that write UINT8 (asymmetric) activations — NNCF's ONNX output, ONNX Runtime's
#: quantize_static with QUInt8 — make graphs TensorRT does not take; its INT8 is signed and symmetric.
UINT8_NOTE = ("unsupported by TensorRT: a UINT8 Q/DQ (ONNX-TensorRT supports UINT8 only as a network input or "
              "output, and its parser refuses this node) — not INT8")
UINT8_FIX = "quantize to signed INT8 with zero point 0 (symmetric), as ModelOpt and trtlab do"
_UINT8 = 2  # onnx.TensorProto.UINT8


def is_uint8_qdq(node, types: dict, producer: dict) -> bool:
    """A QuantizeLinear / DequantizeLinear in UINT8: its zero point (ONNX: the quantized type) or `output_dtype` is
    UINT8, or — a DequantizeLinear without a zero point — what it reads is. A Q without zero point or output_dtype
    is UINT8 for ONNX but INT8 for TensorRT ("ONNX default is UINT8, TRT will default to INT8"), and so is a DQ of
    it."""
    if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
        return False
    if len(node.input) > 2 and node.input[2]:
        return types.get(node.input[2]) == _UINT8
    if any(a.name == "output_dtype" and a.i == _UINT8 for a in node.attribute):
        return True
    if node.op_type == "QuantizeLinear":
        return False
    source = producer.get(node.input[0])
    if source is not None and source.op_type == "QuantizeLinear":
        return is_uint8_qdq(source, types, producer)
    return types.get(node.input[0]) == _UINT8


def scale_values(name: str, initializers: dict):
    """A Q/DQ scale as float32 values (FP16 scales on the FP16 path included), or None when it is computed."""
    import numpy as np
    from onnx import numpy_helper

    init = initializers.get(name)
    return None if init is None else np.asarray(numpy_helper.to_array(init), np.float32)


def same_scales(names: list, initializers: dict) -> bool | None:
    """Whether the scales `names` are one scale (equal values, compared as float32: what TensorRT computes with); None
    when one of them is not a constant."""
    import numpy as np

    values = [scale_values(name, initializers) for name in names]
    if any(v is None for v in values):
        return None
    return all(v.shape == values[0].shape and np.array_equal(v, values[0]) for v in values[1:])
