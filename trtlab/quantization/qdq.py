"""Explicit INT8 quantization in the ONNX graph, placed the way TensorRT wants it.

Placement (TensorRT developer guide, "Working with Quantized Types" → Q/DQ placement recommendations):
- weighted ops (Conv, ConvTranspose, Gemm, MatMul): activation input gets a per-tensor symmetric Q/DQ pair; the
  weight becomes an INT8 initializer with a per-output-channel DequantizeLinear (zero point 0);
- outputs of weighted ops are not quantized (TensorRT fuses the following Q into the op when the next op is
  quantized);
- residual Add (or a two-input Sum, as older exporters write it): the *skip* input (the one not produced by a Conv whose only consumer is this Add) gets a Q/DQ
  pair, so TensorRT can fuse Conv + Add with an INT8 residual;
- guarded nodes keep float inputs and weights; an '=fp16' guard wraps the node in Casts to/from float16.
One Q/DQ pair per tensor is shared by all quantized consumers of that tensor (one scale per tensor, as TensorRT has).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trtlab.graph.guards import WEIGHTED_OPS, GuardedNode, resolve_guards

INT8_MAX = 127.0


@dataclass
class QuantPlan:
    """Which tensors get activation Q/DQ (and for which consumer inputs), and which weights get quantized."""

    activations: list[str]  # tensor names that need a calibrated scale, graph order
    consumers: dict[str, list[tuple[str, int]]]  # tensor → [(node name, input index)] that read the DQ output
    weights: dict[str, tuple[str, int]]  # initializer name → (node name, output-channel axis)
    guarded: list[GuardedNode] = field(default_factory=list)
    skipped_nodes: list[str] = field(default_factory=list)  # weighted nodes left float because guarded

    def describe(self) -> dict:
        return {"activation_tensors": len(self.activations), "weights": len(self.weights),
                "guarded": [(g.name, g.op_type, g.precision) for g in self.guarded]}


def ensure_node_names(model) -> None:
    """Give unnamed nodes stable unique names (guards and layer tables refer to nodes by name)."""
    seen = set()
    for index, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{index}"
        seen.add(node.name)


def _weight_axis(node, initializer_dims) -> int:
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    if node.op_type == "MatMul":
        return len(initializer_dims) - 1
    if node.op_type == "ConvTranspose":
        return 1
    return 0


def plan_quantization(model, guards=()) -> QuantPlan:
    ensure_node_names(model)
    guarded = resolve_guards(model, guards)
    guarded_names = {g.name for g in guarded}
    initializers = {init.name: init for init in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}
    consumer_count: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            consumer_count[name] = consumer_count.get(name, 0) + 1

    activations: list[str] = []
    consumers: dict[str, list[tuple[str, int]]] = {}
    weights: dict[str, tuple[str, int]] = {}
    skipped: list[str] = []

    def quantize_input(tensor: str, node, index: int) -> None:
        if tensor not in consumers:
            consumers[tensor] = []
            activations.append(tensor)
        consumers[tensor].append((node.name, index))

    for node in model.graph.node:
        if node.name in guarded_names:
            if node.op_type in WEIGHTED_OPS:
                skipped.append(node.name)
            continue
        if node.op_type in WEIGHTED_OPS:
            data = node.input[0]
            if data not in initializers:
                quantize_input(data, node, 0)
            weight = node.input[1] if len(node.input) > 1 else ""
            if weight in initializers:
                dims = list(initializers[weight].dims)
                weights[weight] = (node.name, _weight_axis(node, dims))
            elif weight and node.op_type == "MatMul":
                quantize_input(weight, node, 1)  # activation × activation MatMul: both inputs per-tensor
        elif node.op_type in ("Add", "Sum") and len(node.input) == 2:
            fusable = [
                name for name in node.input
                if name in producers and producers[name].op_type in ("Conv", "ConvTranspose")
                and producers[name].name not in guarded_names and consumer_count.get(name, 0) == 1
            ]
            if not fusable or any(name in initializers for name in node.input):
                continue  # not a residual Add after a weighted op (bias adds, scalar adds)
            fused = fusable[0]
            for index, name in enumerate(node.input):
                if name != fused:
                    quantize_input(name, node, index)
    return QuantPlan(activations, consumers, weights, guarded, skipped)


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
    """Return a new ModelProto with Q/DQ inserted per `plan` and activation `scales` (tensor → scale)."""
    import onnx
    from onnx import helper, numpy_helper

    missing = [t for t in plan.activations if t not in scales]
    if missing:
        raise KeyError(f"no calibrated scale for {len(missing)} tensor(s), e.g. {missing[:3]}; the scales were made "
                       f"for another graph or guard set — recalibrate")
    bad = {t: s for t, s in scales.items() if t in plan.consumers and not (np.isfinite(s) and s > 0)}
    if bad:
        raise ValueError(f"scales must be finite and > 0; got {dict(list(bad.items())[:3])}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    node_index = {node.name: node for node in graph.node}
    new_inits = []
    zero_i8 = "trtlab_zero_point_int8"
    new_inits.append(numpy_helper.from_array(np.array(0, np.int8), zero_i8))
    qdq_nodes_before: dict[str, list] = {}  # consumer node name → nodes that must come before it

    for tensor in plan.activations:
        scale_name = f"{tensor}__scale"
        new_inits.append(numpy_helper.from_array(np.array(scales[tensor], np.float32), scale_name))
        q_out, dq_out = f"{tensor}__q", f"{tensor}__dq"
        q = helper.make_node("QuantizeLinear", [tensor, scale_name, zero_i8], [q_out], name=f"{tensor}__Q")
        dq = helper.make_node("DequantizeLinear", [q_out, scale_name, zero_i8], [dq_out], name=f"{tensor}__DQ")
        first_consumer = plan.consumers[tensor][0][0]
        qdq_nodes_before.setdefault(first_consumer, []).extend([q, dq])
        for node_name, index in plan.consumers[tensor]:
            node_index[node_name].input[index] = dq_out

    initializers = {init.name: init for init in graph.initializer}
    for weight, (node_name, axis) in plan.weights.items():
        values = numpy_helper.to_array(initializers[weight])
        q, scale = quantize_weight(values, axis)
        q_name, s_name, z_name, dq_out = f"{weight}__int8", f"{weight}__scale", f"{weight}__zp", f"{weight}__dq"
        new_inits += [numpy_helper.from_array(q, q_name), numpy_helper.from_array(scale, s_name),
                      numpy_helper.from_array(np.zeros(len(scale), np.int8), z_name)]
        dq = helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [dq_out], name=f"{weight}__DQ", axis=axis)
        qdq_nodes_before.setdefault(node_name, []).append(dq)
        node = node_index[node_name]
        for i, name in enumerate(node.input):
            if name == weight:
                node.input[i] = dq_out

    fp16_nodes = {g.name for g in plan.guarded if g.precision == "fp16"}
    rebuilt = []
    for node in graph.node:
        rebuilt.extend(qdq_nodes_before.get(node.name, []))
        if node.name in fp16_nodes:
            rebuilt.extend(_wrap_fp16(node, initializers, new_inits))
        else:
            rebuilt.append(node)
    # Weights now stored as INT8 (or fp16 copies) are dropped when nothing reads the float original any more.
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
    return out


def _wrap_fp16(node, initializers, new_inits) -> list:
    """Run `node` in float16: Cast float inputs to fp16 (float initializers get fp16 copies), Cast outputs back."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = []
    for i, name in enumerate(list(node.input)):
        if not name:
            continue
        if name in initializers and initializers[name].data_type == TensorProto.FLOAT:
            fp16_name = f"{name}__fp16"
            if not any(init.name == fp16_name for init in new_inits):
                new_inits.append(numpy_helper.from_array(numpy_helper.to_array(initializers[name]).astype(np.float16),
                                                         fp16_name))
            node.input[i] = fp16_name
        elif name not in initializers:
            cast_out = f"{name}__to_fp16_{node.name}"
            nodes.append(helper.make_node("Cast", [name], [cast_out], name=f"{node.name}__cast_in{i}",
                                          to=TensorProto.FLOAT16))
            node.input[i] = cast_out
    casts_out = []
    for i, name in enumerate(list(node.output)):
        half = f"{name}__fp16"
        node.output[i] = half
        casts_out.append(helper.make_node("Cast", [half], [name], name=f"{node.name}__cast_out{i}",
                                          to=TensorProto.FLOAT))
    return nodes + [node] + casts_out


def check_quantized_model(model) -> None:
    """onnx.checker + strict shape inference; raises with the checker's message."""
    import onnx

    onnx.checker.check_model(model, full_check=False)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
