"""ONNX → FP16 / mixed-precision graph, for the strongly typed networks trtlab builds on TensorRT 10 and 11 (and
ONNX Runtime).

TensorRT 11 removed BuilderFlag.FP16 (deprecated since 10.12): a strongly typed network runs every layer in the type its tensors have
in the graph, so an FP16 engine needs an FP16 graph (NVIDIA's migration guide points to ModelOpt AutoCast for
this; trtlab does the same conversion itself, with its own guards). The rewrite reads like an
onnx-graphsurgeon pass:

1. decide a precision per node: FP16, except nodes the guards keep FP32 and op types that must stay FP32
   (QuantizeLinear/DequantizeLinear: before opset 19 their scales may only be float32);
2. walk the graph in order, tracking the type each float tensor has in the new graph, and insert one ``Cast``
   wherever a node needs its float input in the other type (shared per tensor and target type);
3. convert float32 initializers read by FP16 nodes to float16 (a copy when FP32 nodes read them too), and the
   float payload of ``Constant`` / ``ConstantOfShape`` / ``Cast(to=float)`` nodes inside FP16 regions;
4. keep the graph boundary float32: inputs stay float32 (the first FP16 consumer gets a Cast) and FP16 graph
   outputs get a final Cast back to float32, so every runner feeds and reads float32 exactly as before;
5. check with ``onnx.checker`` and strict shape inference.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FP16_MAX = float(np.finfo(np.float16).max)  # 65504
#: Op types kept FP32 unless a guard says '=fp16': Q/DQ scales are float32-only before opset 19, and the
#: quantizer's scales are computed for float32 activations.
DEFAULT_FP32_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
#: Float inputs that the ONNX spec requires in float32 whatever the data type (op → input indices).
FLOAT32_ONLY_INPUTS = {"Resize": {2}, "Upsample": {1}}
#: Nodes with subgraphs are left as they are (their bodies are not rewritten) and kept FP32.
_SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan"})


def resolve_guard_nodes(model, guards) -> list:
    """Guard strings → trtlab.graph.guards.GuardedNode list (the quantizer's resolver, so both agree on the nodes)."""
    from trtlab.graph.guards import resolve_guards

    return resolve_guards(model, list(guards or []))


@dataclass
class FP16Conversion:
    """The converted model and what the rewrite did."""

    model: object  # onnx.ModelProto
    fp16_nodes: int
    fp32_nodes: list[str]
    casts_inserted: int
    initializers_converted: int
    overflowed_values: int
    guards: list = field(default_factory=list)  # trtlab.graph.guards.GuardedNode
    path: Path | None = None

    def summary(self) -> dict:
        return {
            "fp16_nodes": self.fp16_nodes,
            "fp32_nodes": len(self.fp32_nodes),
            "fp32_node_names": self.fp32_nodes[:20],
            "casts_inserted": self.casts_inserted,
            "initializers_converted": self.initializers_converted,
            "overflowed_values": self.overflowed_values,
        }


def convert_to_fp16(model, guards=(), keep_fp32_nodes=(), keep_op_types=DEFAULT_FP32_OPS,
                    output_path: str | os.PathLike | None = None) -> FP16Conversion:
    """Convert an ONNX model (ModelProto or path) to FP16 with FP32 kept where guards/`keep_fp32_nodes` say.

    Graph inputs and outputs stay float32 (Cast nodes at the boundary). With `output_path` the result is
    written atomically and `path` is set. Raises ValueError naming the node when something cannot be typed.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(str(model))
    else:
        model = _copy_model(model)
    graph = model.graph
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)

    guarded = resolve_guard_nodes(model, guards)
    keep_fp32 = set(keep_fp32_nodes) | {g.name for g in guarded if g.precision == "fp32"}
    force_fp16 = {g.name for g in guarded if g.precision == "fp16"}
    unknown = set(keep_fp32_nodes) - {n.name for n in graph.node}
    if unknown:
        raise ValueError(f"keep_fp32_nodes names nodes the model does not have: {sorted(unknown)[:5]}")
    unnamed = [i for i, n in enumerate(graph.node) if not n.name]
    for i in unnamed:  # Casts and messages need node names; name anonymous nodes after their position
        graph.node[i].name = f"trtlab_node_{i}"

    float_tensors = _float32_tensors(model)
    initializers = {init.name: init for init in graph.initializer}

    def node_is_fp16(node) -> bool:
        if node.name in force_fp16:
            return True
        if node.name in keep_fp32 or node.op_type in keep_op_types or node.op_type in _SUBGRAPH_OPS:
            return False
        return True

    # Current type of every float tensor in the rewritten graph: graph inputs start float32.
    tensor_type: dict[str, int] = {i.name: TensorProto.FLOAT for i in graph.input if i.name in float_tensors}
    cast_cache: dict[tuple[str, int], str] = {}
    fp16_initializer_names: dict[str, str] = {}
    new_nodes = []
    casts = 0
    fp16_count = 0
    fp32_names = []
    overflow = 0
    converted_inits = 0
    init_consumers: dict[str, set] = {}
    for node in graph.node:
        only_fp32 = FLOAT32_ONLY_INPUTS.get(node.op_type, set())
        for index, name in enumerate(node.input):
            if name in initializers:
                init_consumers.setdefault(name, set()).add(node_is_fp16(node) and index not in only_fp32)

    def fp16_initializer(name: str) -> str:
        nonlocal converted_inits, overflow
        if name in fp16_initializer_names:
            return fp16_initializer_names[name]
        init = initializers[name]
        values = numpy_helper.to_array(init)
        overflow += int(np.count_nonzero(np.abs(values) > FP16_MAX))
        half = np.clip(values, -FP16_MAX, FP16_MAX).astype(np.float16)
        shared = init_consumers.get(name, set()) != {True}
        new_name = f"{name}__fp16" if shared else name
        new_init = numpy_helper.from_array(half, new_name)
        if shared:
            graph.initializer.append(new_init)
        else:
            init.CopyFrom(new_init)
        converted_inits += 1
        fp16_initializer_names[name] = new_name
        tensor_type[new_name] = TensorProto.FLOAT16
        return new_name

    def cast_to(name: str, target: int) -> str:
        nonlocal casts
        key = (name, target)
        if key not in cast_cache:
            suffix = "fp16" if target == TensorProto.FLOAT16 else "fp32"
            out = f"{name}__cast_{suffix}"
            new_nodes.append(helper.make_node("Cast", [name], [out], to=target, name=f"{out}__node"))
            tensor_type[out] = target
            cast_cache[key] = out
            casts += 1
        return cast_cache[key]

    for node in graph.node:
        fp16 = node_is_fp16(node)
        target = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
        touches_float = any(n in float_tensors for n in list(node.input) + list(node.output))
        if touches_float or node.op_type in ("Constant", "ConstantOfShape", "Cast"):
            if fp16:
                fp16_count += 1
            else:
                fp32_names.append(node.name)
        only_fp32 = FLOAT32_ONLY_INPUTS.get(node.op_type, set())
        for index, name in enumerate(node.input):
            if not name or name not in float_tensors:
                continue
            want = TensorProto.FLOAT if index in only_fp32 else target
            if name in initializers and name not in tensor_type:
                if want == TensorProto.FLOAT16:
                    node.input[index] = fp16_initializer(name)
                continue  # float32 initializer read as float32: nothing to do
            have = tensor_type.get(name, TensorProto.FLOAT)
            if have != want:
                node.input[index] = cast_to(name, want)
        if fp16:
            _convert_node_payload(node)
        for name in node.output:
            if name in float_tensors:
                tensor_type[name] = target
        new_nodes.append(node)

    # Graph outputs stay float32: rename an FP16 producer's output and cast back under the original name.
    for output in graph.output:
        if output.name in float_tensors and tensor_type.get(output.name) == TensorProto.FLOAT16:
            inner = f"{output.name}__fp16"
            for node in new_nodes:
                for i, name in enumerate(node.input):
                    if name == output.name:
                        node.input[i] = inner
                for i, name in enumerate(node.output):
                    if name == output.name:
                        node.output[i] = inner
            new_nodes.append(helper.make_node("Cast", [inner], [output.name], to=TensorProto.FLOAT,
                                              name=f"{output.name}__cast_fp32__node"))
            casts += 1

    # Drop float32 initializers nothing reads any more (fully replaced by their FP16 copies).
    used = {name for node in new_nodes for name in node.input}
    keep_inits = [init for init in graph.initializer if init.name in used or init.name in
                  {i.name for i in graph.input}]
    del graph.initializer[:]
    graph.initializer.extend(keep_inits)
    del graph.node[:]
    graph.node.extend(new_nodes)
    del graph.value_info[:]  # stale float32 annotations; shape inference recomputes them
    model.metadata_props.append(onnx.StringStringEntryProto(
        key="trtlab.graph.precision", value=json.dumps({"fp32_nodes": sorted(fp32_names), "guards": [
            [g.name, g.precision] for g in guarded]})))
    if opset < 13:
        raise ValueError(f"the model uses opset {opset}; FP16 conversion needs opset >= 13 (re-export the model)")

    onnx.checker.check_model(model)
    model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    result = FP16Conversion(model, fp16_count, fp32_names, casts, converted_inits, overflow, guarded)
    if output_path is not None:
        from trtlab.core.workspace import atomic_path

        with atomic_path(output_path, suffix=".onnx") as tmp:
            onnx.save(model, str(tmp))
        result.path = Path(output_path)
    return result


def _copy_model(model):
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _float32_tensors(model) -> set[str]:
    """Names of every tensor that is float32 in the original graph (inputs, initializers, node outputs)."""
    import onnx
    from onnx import TensorProto

    inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    graph = inferred.graph
    names = {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT}
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            names.add(value.name)
    # Outputs shape inference could not type: take the node's float-in → float-out behaviour as the evidence.
    known = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    known |= {i.name for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type == TensorProto.FLOAT:
                    names.update(node.output)
        for out in node.output:
            if out not in known and any(i in names for i in node.input):
                raise ValueError(f"node {node.name!r} ({node.op_type}): ONNX shape inference cannot type its output "
                                 f"{out!r}; run trtlab's sanitize step (shape inference + constant folding) first")
    return names


def _convert_node_payload(node) -> None:
    """Float32 payloads carried by attributes of a node that now runs in FP16."""
    from onnx import TensorProto, numpy_helper

    for attr in node.attribute:
        if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
            attr.i = TensorProto.FLOAT16
        elif node.op_type in ("Constant", "ConstantOfShape") and attr.name == "value" \
                and attr.t.data_type == TensorProto.FLOAT:
            values = numpy_helper.to_array(attr.t)
            attr.t.CopyFrom(numpy_helper.from_array(np.clip(values, -FP16_MAX, FP16_MAX).astype(np.float16),
                                                    attr.t.name))
        elif node.op_type == "Constant" and attr.name in ("value_float", "value_floats"):
            raise ValueError(f"Constant node {node.name!r} uses {attr.name}; constant-fold the model first")


def node_precision_table(model):
    """pandas DataFrame, one row per node (Cast/Constant left out): name, op type and the float type of its first
    typed output — the ONNX-graph counterpart of TensorRT's per-layer engine table."""
    import onnx
    import pandas as pd
    from onnx import TensorProto

    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(str(model))
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) +
             list(inferred.graph.output) + list(inferred.graph.input)}
    names = {TensorProto.FLOAT: "FP32", TensorProto.FLOAT16: "FP16", TensorProto.INT8: "INT8",
             TensorProto.UINT8: "UINT8"}
    rows = []
    for node in inferred.graph.node:
        if node.op_type in ("Cast", "Constant"):
            continue
        kind = next((names[types[o]] for o in node.output if types.get(o) in names), None)
        if kind:
            rows.append({"name": node.name, "type": node.op_type, "precision": kind})
    return pd.DataFrame(rows, columns=["name", "type", "precision"])


def precision_summary(model) -> dict:
    """Counts of nodes by the float type of their first float output, e.g. {'fp16': 92, 'fp32': 2}."""
    table = node_precision_table(model)
    counts = table["precision"].str.lower().value_counts()
    return {str(k): int(v) for k, v in counts.items()}
