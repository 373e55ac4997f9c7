"""Guards: which nodes stay out of INT8, as data.

A guard is a string: 'first_layer', 'last_layer', 'softmax', 'op:<OpType>' or 'node:<name>', optionally suffixed
'=fp16' (run that node in FP16) — the default keeps it in FP32. The quantizer leaves guarded nodes unquantized;
strongly typed TensorRT builds keep them in the graph ('=fp16' as Casts, trtlab.graph.precision); only TensorRT 10's legacy
weakly typed builds (weakly_typed=True, int8-implicit) map the list to layer.precision + OBEY_PRECISION_CONSTRAINTS.
"""
from __future__ import annotations

from dataclasses import dataclass

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
NAMED_GUARDS = ("first_layer", "last_layer", "softmax")
PRECISIONS = ("fp32", "fp16")


@dataclass(frozen=True)
class GuardedNode:
    name: str
    op_type: str
    precision: str  # 'fp32' or 'fp16'
    guard: str  # the guard string that selected it


def parse_guard(guard: str) -> tuple[str, str]:
    """'last_layer=fp16' → ('last_layer', 'fp16'); checks the selector's form."""
    selector, _, precision = guard.strip().partition("=")
    precision = precision or "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"guard {guard!r}: precision must be one of {PRECISIONS}, got {precision!r}")
    if selector not in NAMED_GUARDS and not selector.startswith(("op:", "node:")):
        raise ValueError(f"guard {guard!r} is not understood; use one of {NAMED_GUARDS}, 'op:<OpType>' or "
                         f"'node:<node name>', optionally with '=fp16'")
    return selector, precision


def weighted_nodes_in_order(model) -> list:
    """Conv/Gemm/MatMul nodes in the graph's (topological) order."""
    return [n for n in model.graph.node if n.op_type in WEIGHTED_OPS]


def resolve_guards(model, guards) -> list[GuardedNode]:
    """The nodes of `model` (onnx.ModelProto) selected by `guards`, in graph order, one entry per node (a later
    guard naming the same node overrides its precision). Raises when a guard selects nothing, naming what exists."""
    chosen: dict[str, GuardedNode] = {}
    nodes = list(model.graph.node)
    for guard in guards or []:
        selector, precision = parse_guard(guard)
        if selector == "first_layer":
            matched = weighted_nodes_in_order(model)[:1]
        elif selector == "last_layer":
            matched = weighted_nodes_in_order(model)[-1:]
        elif selector == "softmax":
            matched = [n for n in nodes if n.op_type in ("Softmax", "LogSoftmax")]
        elif selector.startswith("op:"):
            matched = [n for n in nodes if n.op_type == selector[3:]]
        else:
            matched = [n for n in nodes if n.name == selector[5:]]
        if not matched:
            if selector.startswith("node:"):
                names = [n.name for n in weighted_nodes_in_order(model)][:8]
                raise ValueError(f"guard {guard!r}: no node named {selector[5:]!r}; weighted nodes are e.g. {names}")
            if selector == "softmax":
                # A classifier exported without Softmax (logits out) has nothing to guard: not an error.
                continue
            ops = sorted({n.op_type for n in nodes})
            raise ValueError(f"guard {guard!r} selects no node; the graph's op types are {ops}")
        for node in matched:
            chosen[node.name] = GuardedNode(node.name, node.op_type, precision, guard)
    order = {n.name: i for i, n in enumerate(nodes)}
    return sorted(chosen.values(), key=lambda g: order[g.name])
