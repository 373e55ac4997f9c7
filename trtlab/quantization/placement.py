"""Q/DQ placement: which tensors get an activation Q/DQ pair and which weights become INT8 — decided, not inserted
(trtlab.quantization.insertion carries out the plan), as TensorRT wants it.

TensorRT developer guide, "Working with Quantized Types" → Q/DQ layer-placement recommendations. Each rule below is
a named function over one node that says which of its inputs to quantize; `plan_quantization` runs the rules in
`RULES` (a table, as ONNX Runtime's quantization registry keeps per-op rules) over every unguarded node:

- `weighted_op_inputs` (Conv, ConvTranspose, Gemm, MatMul): the activation input gets a per-tensor symmetric Q/DQ
  pair; the weight becomes an INT8 initializer with a per-output-channel DequantizeLinear (zero point 0) on the
  axis `weight_axis` names; an activation × activation MatMul gets both inputs per-tensor. Outputs of weighted ops
  are not quantized (TensorRT fuses the following Q into the op when the next op is quantized);
- `residual_add_input` (Add, or a two-input Sum as older exporters write it): the *skip* input — the one not
  produced by a Conv whose only reader is this Add — gets a Q/DQ pair, so TensorRT fuses Conv + Add with an INT8
  residual.
Guarded nodes (trtlab.graph.guards) get nothing. One Q/DQ pair per tensor is shared by all its quantized readers (one
scale per tensor, as TensorRT has). Issue 17's rules (pool inputs, Concat scale sharing, commuting through MaxPool /
Reshape) are further entries of `RULES`, each with its switch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from trtlab.graph.guards import WEIGHTED_OPS, GuardedNode, resolve_guards


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


@dataclass
class GraphFacts:
    """What the rules read about the graph: initializers, producers, reader counts, guarded node names."""

    initializers: dict
    producers: dict
    readers: dict
    guarded: set

    @classmethod
    def of(cls, model, guarded_names: set) -> "GraphFacts":
        readers: dict[str, int] = {}
        for node in model.graph.node:
            for name in node.input:
                readers[name] = readers.get(name, 0) + 1
        return cls({init.name: init for init in model.graph.initializer},
                   {out: node for node in model.graph.node for out in node.output}, readers, guarded_names)


@dataclass
class Placement:
    """One rule's answer for one node: (input index, tensor) pairs to quantize per tensor, and weights to quantize
    per output channel (initializer name, axis)."""

    activations: list[tuple[int, str]] = field(default_factory=list)
    weights: list[tuple[str, int]] = field(default_factory=list)


def weight_axis(node, weight_dims) -> int:
    """The output-channel axis of a weighted node's weight (input 1): Conv (M, C/g, kH, kW) → 0; ConvTranspose
    (C, M/g, kH, kW) → 1; Gemm B (K, N) → 1, or (N, K) with transB=1 → 0; MatMul B (…, K, N) → the last axis."""
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    if node.op_type == "MatMul":
        return len(weight_dims) - 1
    if node.op_type == "ConvTranspose":
        return 1
    return 0


def weighted_op_inputs(node, facts: GraphFacts) -> Placement | None:
    """Conv / ConvTranspose / Gemm / MatMul: activation input per-tensor, weight per output channel."""
    if node.op_type not in WEIGHTED_OPS:
        return None
    placement = Placement()
    data = node.input[0]
    if data not in facts.initializers:
        placement.activations.append((0, data))
    weight = node.input[1] if len(node.input) > 1 else ""
    if weight in facts.initializers:
        placement.weights.append((weight, weight_axis(node, list(facts.initializers[weight].dims))))
    elif weight and node.op_type == "MatMul":
        placement.activations.append((1, weight))  # activation × activation MatMul: both inputs per-tensor
    return placement


def residual_add_input(node, facts: GraphFacts) -> Placement | None:
    """A residual Add (or two-input Sum) after a Conv: quantize the skip input, the Conv branch fuses."""
    if node.op_type not in ("Add", "Sum") or len(node.input) != 2:
        return None
    if any(name in facts.initializers for name in node.input):
        return None  # a bias or scalar add, not a residual
    fusable = [name for name in node.input
               if name in facts.producers and facts.producers[name].op_type in ("Conv", "ConvTranspose")
               and facts.producers[name].name not in facts.guarded and facts.readers.get(name, 0) == 1]
    if not fusable:
        return None
    return Placement([(index, name) for index, name in enumerate(node.input) if name != fusable[0]])


#: The placement rules, in the order they are asked; the first that answers for a node decides it.
RULES = (weighted_op_inputs, residual_add_input)


def plan_quantization(model, guards=(), rules=RULES) -> QuantPlan:
    """Where Q/DQ go in `model` (a sanitized graph: every node named) with `guards` (Guards or guard texts)."""
    from trtlab.graph.sanitize import check_node_names

    check_node_names(model, "quantization")
    guarded = resolve_guards(model, guards)
    facts = GraphFacts.of(model, {g.name for g in guarded})
    plan = QuantPlan([], {}, {}, guarded, [])
    for node in model.graph.node:
        if node.name in facts.guarded:
            if node.op_type in WEIGHTED_OPS:
                plan.skipped_nodes.append(node.name)
            continue
        placement = next((p for p in (rule(node, facts) for rule in rules) if p is not None), None)
        if placement is None:
            continue
        for index, tensor in placement.activations:
            if tensor not in plan.consumers:
                plan.consumers[tensor] = []
                plan.activations.append(tensor)
            plan.consumers[tensor].append((node.name, index))
        for weight, axis in placement.weights:
            plan.weights[weight] = (node.name, axis)
    return plan
