"""Q/DQ insertion: carry out a `QuantPlan` (trtlab.quantization.placement) with calibrated scales.

Activation tensors get one QuantizeLinear/DequantizeLinear pair each (per-tensor scale, INT8 zero point 0), read by
every consumer the plan lists; weights become INT8 initializers with a per-output-channel DequantizeLinear. Guards
with '=fp16' are then carried out by the one precision converter (trtlab.graph.precision): a plan over the Q/DQ
graph in which only those nodes are FP16, so neighbouring FP16 guards share their tensors and no Cast pair remains.
"""
from __future__ import annotations

import numpy as np

from trtlab.core.errors import UserValueError
from trtlab.quantization.placement import QuantPlan

INT8_MAX = 127.0
ZERO_POINT = "trtlab_zero_point_int8"


def quantize_weight(values: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric INT8: scale_c = max|w_c| / 127, zero point 0."""
    moved = np.moveaxis(values.astype(np.float32), axis, 0).reshape(values.shape[axis], -1)
    amax = np.abs(moved).max(axis=1)
    scale = np.where(amax > 0, amax / INT8_MAX, 1.0).astype(np.float32)
    shape = [1] * values.ndim
    shape[axis] = -1
    q = np.clip(np.rint(values / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def insert_qdq(model, plan: QuantPlan, scales: dict[str, float]):
    """A new ModelProto with Q/DQ inserted per `plan` and activation `scales` (tensor → scale), '=fp16' guards in
    FP16."""
    import onnx
    from onnx import numpy_helper

    _check_scales(plan, scales)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    node_index = {node.name: node for node in graph.node}
    new_inits = [numpy_helper.from_array(np.array(0, np.int8), ZERO_POINT)]
    before: dict[str, list] = {}  # consumer node name → Q/DQ nodes that must come before it
    for tensor in plan.activations:
        _activation_pair(tensor, scales[tensor], plan.consumers[tensor], node_index, new_inits, before)
    initializers = {init.name: init for init in graph.initializer}
    for weight, (node_name, axis) in plan.weights.items():
        _weight_dequantize(weight, initializers[weight], axis, node_index[node_name], new_inits, before)
    rebuilt = []
    for node in graph.node:
        rebuilt.extend(before.get(node.name, []))
        rebuilt.append(node)
    # Weights now stored as INT8 are dropped when nothing reads the float original any more.
    used = {name for node in rebuilt for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.node[:]
    graph.node.extend(rebuilt)
    del graph.initializer[:]
    graph.initializer.extend(kept + [init for init in new_inits if init.name in used])
    # QuantizeLinear/DequantizeLinear with per-axis scales need opset ≥ 13.
    for opset in out.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version < 13:
            opset.version = 13
    return apply_guard_precisions(out, plan)


def _check_scales(plan: QuantPlan, scales: dict[str, float]) -> None:
    missing = [t for t in plan.activations if t not in scales]
    if missing:
        raise KeyError(f"no calibrated scale for {len(missing)} tensor(s), e.g. {missing[:3]}; the scales were made "
                       f"for another graph or guard set — recalibrate")
    bad = {t: s for t, s in scales.items() if t in plan.consumers and not (np.isfinite(s) and s > 0)}
    if bad:
        raise UserValueError(f"scales must be finite and > 0; got {dict(list(bad.items())[:3])}",
                             "recalibrate, or fix the imported scales")


def _activation_pair(tensor, scale, consumers, node_index, new_inits, before) -> None:
    """One Q/DQ pair on `tensor`, placed before its first quantized reader; every reader takes the DQ output."""
    from onnx import helper, numpy_helper

    scale_name = f"{tensor}__scale"
    new_inits.append(numpy_helper.from_array(np.array(scale, np.float32), scale_name))
    q_out, dq_out = f"{tensor}__q", f"{tensor}__dq"
    q = helper.make_node("QuantizeLinear", [tensor, scale_name, ZERO_POINT], [q_out], name=f"{tensor}__Q")
    dq = helper.make_node("DequantizeLinear", [q_out, scale_name, ZERO_POINT], [dq_out], name=f"{tensor}__DQ")
    before.setdefault(consumers[0][0], []).extend([q, dq])
    for node_name, index in consumers:
        node_index[node_name].input[index] = dq_out


def _weight_dequantize(weight, initializer, axis, node, new_inits, before) -> None:
    """The weight as INT8 + per-channel scales, read through a DequantizeLinear on `axis`."""
    from onnx import helper, numpy_helper

    q, scale = quantize_weight(numpy_helper.to_array(initializer), axis)
    q_name, s_name, z_name, dq_out = f"{weight}__int8", f"{weight}__scale", f"{weight}__zp", f"{weight}__dq"
    new_inits += [numpy_helper.from_array(q, q_name), numpy_helper.from_array(scale, s_name),
                  numpy_helper.from_array(np.zeros(len(scale), np.int8), z_name)]
    dq = helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [dq_out], name=f"{weight}__DQ", axis=axis)
    before.setdefault(node.name, []).append(dq)
    for i, name in enumerate(node.input):
        if name == weight:
            node.input[i] = dq_out


def apply_guard_precisions(model, plan: QuantPlan):
    """The Q/DQ graph with its '=fp16' guarded nodes in FP16 (everything else as it is: FP32 float path), by the
    one precision converter; unchanged when no guard asks for FP16."""
    from trtlab.graph.precision import convert_precisions, plan_precisions

    if not any(g.precision == "fp16" for g in plan.guarded):
        return model
    precisions = plan_precisions(model, default="fp32", guarded=plan.guarded)
    return convert_precisions(model, precisions, check=False).model


def check_quantized_model(model) -> None:
    """onnx.checker + strict shape inference; raises with the checker's message."""
    import onnx

    onnx.checker.check_model(model, full_check=False)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
