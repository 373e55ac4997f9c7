"""The one float-precision converter: decide a precision per node (a plan), then rewrite the graph once.

TensorRT 11 builds only strongly typed networks (and trtlab builds strongly typed networks on 10.x too): every layer
runs in the type its tensors have in the graph, so an FP16 engine needs an FP16 graph, and an FP16 guard inside an
INT8 graph needs that node's tensors in FP16. NVIDIA's migration guide points to ModelOpt AutoCast for this; trtlab
follows its split (`NodeClassifier` decides, `PrecisionConverter` rewrites):

1. **decide** (`plan_precisions`): one `PrecisionPlan` — node name → 'fp16' / 'fp32' and the rule that decided it.
   Rules, first match wins: nodes with subgraphs stay FP32 (their bodies are not rewritten); Q/DQ stay FP32 before
   opset 19 (their scales may only be float32 there); guards (trtlab.graph.guards) give their precision;
   `keep_fp32_nodes` and `keep_op_types` keep FP32; every other node takes the plan's default precision
   ('fp16' for FP16 variants, 'fp32' for today's INT8 float path, where only '=fp16' guards are FP16).
2. **rewrite** (`convert_precisions`, trtlab.graph.precision_rewrite): one pass in graph order that tracks the
   type each float tensor has and inserts a Cast only where a node needs the other type — shared per tensor and
   target type, so adjacent nodes of one precision pass tensors directly and no Cast(FP16→FP32) → Cast(FP32→FP16)
   pair is left; float32 initializers and Constant payloads of FP16 nodes become float16 (values beyond FP16's range
   are clipped and counted); graph inputs and outputs stay float32 through boundary Casts; checked with
   onnx.checker and strict shape inference.

FP16 variants (`convert_to_fp16`), '=fp16' guards inside INT8 graphs (the quantizer) and TensorRT builds (which take
the variant's ONNX) all go through these two steps. Issue 17's FP16 float path is a plan with default 'fp16' over an
INT8 graph and Q/DQ in FP16 at opset ≥ 19 (`qdq_precision='fp16'`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from trtlab.core.errors import UserValueError
from trtlab.graph.guards import GuardedNode, parse_guards, resolve_guards
from trtlab.graph.onnx_utils import opset_of
# The rewrite builds FP16Conversion, so the type lives beside it (no precision ↔ precision_rewrite import cycle);
# re-exported here for importers of this module.
from trtlab.graph.precision_rewrite import FP16Conversion, rewrite  # noqa: F401

#: Op types kept FP32 unless a guard says '=fp16': the quantizer's scales are computed for float32 activations.
DEFAULT_FP32_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
#: Nodes with subgraphs are left as they are (their bodies are not rewritten) and kept FP32.
SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan"})
#: Q/DQ take float16 scales from opset 19 on (float32 only before).
FP16_QDQ_OPSET = 19
PLAN_PRECISIONS = ("fp16", "fp32")


@dataclass
class PrecisionPlan:
    """The decision: every node's float precision and the rule that chose it (for reports and tests)."""

    precisions: dict[str, str]  # node name → 'fp16' | 'fp32', every node of the graph, in graph order
    reasons: dict[str, str]  # node name → the rule that decided ('default', 'guard node:X=fp16', ...)
    default: str
    guarded: list[GuardedNode] = field(default_factory=list)

    def is_fp16(self, node_name: str) -> bool:
        return self.precisions[node_name] == "fp16"

    def names(self, precision: str) -> list[str]:
        return [name for name, p in self.precisions.items() if p == precision]


def plan_precisions(model, guards=(), default: str = "fp16", keep_fp32_nodes=(), keep_op_types=DEFAULT_FP32_OPS,
                    qdq_precision: str = "fp32", guarded: list[GuardedNode] | None = None) -> PrecisionPlan:
    """Decide each node's precision (see the module docstring for the rules and their order).

    `guards`: Guards or guard texts, resolved on `model`; or `guarded`, guards already resolved (the quantizer
    passes its plan's). `qdq_precision='fp16'` lets Q/DQ follow the plan at opset ≥ 19."""
    from trtlab.graph.sanitize import check_node_names

    if default not in PLAN_PRECISIONS or qdq_precision not in PLAN_PRECISIONS:
        raise UserValueError(f"precision plan: default {default!r} / qdq_precision {qdq_precision!r} must be one of "
                             f"{PLAN_PRECISIONS}", "pass 'fp16' or 'fp32'")
    check_node_names(model, "precision conversion")
    guarded = list(guarded) if guarded is not None else resolve_guards(model, parse_guards(guards))  # a public edge
    by_guard = {g.name: g for g in guarded}
    keep_fp32 = set(keep_fp32_nodes)
    unknown = keep_fp32 - {n.name for n in model.graph.node}
    if unknown:
        raise UserValueError(f"keep_fp32_nodes names nodes the model does not have: {sorted(unknown)[:5]}",
                             "name nodes of the sanitized model")
    qdq_fp32 = opset_of(model) < FP16_QDQ_OPSET or qdq_precision == "fp32"
    precisions, reasons = {}, {}
    for node in model.graph.node:
        precision, reason = _decide(node, by_guard, keep_fp32, frozenset(keep_op_types), qdq_fp32, default)
        precisions[node.name], reasons[node.name] = precision, reason
    return PrecisionPlan(precisions, reasons, default, guarded)


def _decide(node, by_guard, keep_fp32, keep_op_types, qdq_fp32, default) -> tuple[str, str]:
    """One node's (precision, rule)."""
    if node.op_type in SUBGRAPH_OPS:
        return "fp32", "subgraph op (body not rewritten)"
    if node.op_type in QDQ_OPS and qdq_fp32:
        return "fp32", f"Q/DQ scales float32 (opset < {FP16_QDQ_OPSET} or qdq_precision='fp32')"
    if node.name in by_guard:
        guard = by_guard[node.name]
        return guard.precision, f"guard {guard.guard}"
    if node.name in keep_fp32:
        return "fp32", "keep_fp32_nodes"
    if node.op_type in keep_op_types:
        return "fp32", f"op type {node.op_type} kept FP32"
    return default, "default"


def convert_precisions(model, plan: PrecisionPlan, output_path: str | os.PathLike | None = None,
                       check: bool = True) -> FP16Conversion:
    """Rewrite a copy of `model` (ModelProto or path) as `plan` decided; write it atomically to `output_path`."""
    conversion = rewrite(_load_copy(model), plan, check=check)
    if output_path is not None:
        import onnx

        from trtlab.core.workspace import atomic_path

        with atomic_path(output_path, suffix=".onnx") as tmp:
            onnx.save(conversion.model, str(tmp))
        conversion.path = Path(output_path)
    return conversion


def convert_to_fp16(model, guards=(), keep_fp32_nodes=(), keep_op_types=DEFAULT_FP32_OPS,
                    output_path: str | os.PathLike | None = None) -> FP16Conversion:
    """An FP16 graph of `model` (ModelProto or path) with FP32 kept where guards / `keep_fp32_nodes` /
    `keep_op_types` say; graph inputs and outputs stay float32. Plan + rewrite (module docstring)."""
    model = _load_copy(model)
    if opset_of(model) < 13:
        raise UserValueError(f"the model uses opset {opset_of(model)}; FP16 conversion needs opset ≥ 13",
                             "sanitize it first (trtlab.sanitize_model converts to opset 13) or re-export it")
    plan = plan_precisions(model, guards, "fp16", keep_fp32_nodes, keep_op_types)
    return convert_precisions(model, plan, output_path)


def _load_copy(model):
    import onnx

    if isinstance(model, (str, os.PathLike)):
        return onnx.load(str(model))
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def cast_round_trips(model) -> list[tuple[str, str]]:
    """(first Cast, second Cast) names of every back-to-back Cast pair that casts a tensor to one float type and
    straight back (FP16→FP32→FP16 or FP32→FP16→FP32): what a plan with merged regions never leaves."""
    from onnx import TensorProto

    floats = (TensorProto.FLOAT, TensorProto.FLOAT16)
    producers = {o: n for n in model.graph.node for o in n.output}
    pairs = []
    for node in model.graph.node:
        first = producers.get(node.input[0]) if node.op_type == "Cast" and node.input else None
        if first is None or first.op_type != "Cast":
            continue
        to_first, to_second = _cast_to(first), _cast_to(node)
        if to_first in floats and to_second in floats and to_first != to_second:
            pairs.append((first.name, node.name))
    return pairs


def _cast_to(node) -> int:
    return next((a.i for a in node.attribute if a.name == "to"), 0)


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
