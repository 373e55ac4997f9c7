"""Q/DQ placement: which tensors get an activation Q/DQ pair and which weights become INT8 — decided, not inserted
(trtlab.quantization.insertion carries out the plan), as TensorRT wants it.

TensorRT developer guide, "Explicit Quantization": "Q/DQ Layer-Placement Recommendations" and "TensorRT Processing
of Q/DQ Networks" (Q/DQ propagation: Q moves backward and DQ forward through layers that commute with them, such as
MaxPool; quantizable layers such as AveragePool fuse with a DQ input and a Q output). Each rule is a named function
with a switch; `RULES` is the table (as ONNX Runtime's quantization registry keeps per-op rules), in the order they
run. `plan_quantization(model, guards, rules=...)` asks them over every node that is not guarded:

- exclusions (`exclude_gemv`, `exclude_small_channels`, off by default: ModelOpt's, from
  modelopt/onnx/quantization/graph_utils.py) name weighted nodes left unquantized, in the float path's precision;
- `weighted_op_inputs` (Conv, ConvTranspose, Gemm, MatMul): the activation input gets a per-tensor symmetric Q/DQ
  pair; the weight becomes an INT8 initializer with a per-output-channel DequantizeLinear (zero point 0) on the
  axis `weight_axis` names (per-tensor where no axis has one entry per output channel, and for a constant first
  MatMul/Gemm input); an activation × activation MatMul gets both inputs per-tensor. Outputs of weighted ops are
  not quantized (TensorRT fuses the following Q into the op when the next op is quantized);
- `residual_add_input` (Add, or a two-input Sum as older exporters write it): the *skip* input — the one not
  produced by a Conv whose only reader is this Add (of two such, the projection shortcut: the shorter path to their
  common ancestor) — gets a Q/DQ pair, so TensorRT fuses Conv + Add with an INT8 residual;
- `pool_input`: an AveragePool / GlobalAveragePool (or a ReduceMean over H and W with keepdims, which TensorRT turns
  into a pooling layer) gets its input quantized when a neighbour is quantized — the weighted op feeding it (through
  its activation / residual epilogue), or a reader of its output (through MaxPool/Reshape/Flatten) — so the conv
  before it can write INT8; its output too when nothing quantized reads it ("non-weighted layers with INT8 inputs
  also need INT8 outputs"). ModelOpt's `find_quantizable_nodes` has the same either-neighbour test (it does not
  treat ReduceMean as a pool);
- `commute_through_copies`: a quantized tensor made by MaxPool / Reshape / Flatten from one float input, all of
  whose readers are quantized, is quantized at that op's input instead (the op commutes with Q/DQ: one scale, no
  separate requantization; TensorRT runs the op on INT8);
- `concat_shared_scale`: the quantized inputs and output of a Concat share one scale, calibrated on the Concat's
  output — which holds exactly the values of all its inputs (ModelOpt's `get_concat_eliminated_tensors`: equal
  scales let TensorRT drop the DQ→Q requantization at the Concat).

Guarded nodes (trtlab.graph.guards) get nothing. One Q/DQ pair per tensor is shared by all its quantized readers (one
scale per tensor, as TensorRT has). `LEGACY_RULES` are the rules before issue 17 (the low-level default here, and the
FP32 float path's default in a Recipe, so `Recipe(high_precision="fp32")` makes the graph trtlab made before);
`DEFAULT_RULES` are the ones a Recipe uses by default.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from trtlab.core.errors import UserValueError
from trtlab.graph.guards import WEIGHTED_OPS, GuardedNode, resolve_guards
from trtlab.graph.onnx_utils import attribute
from trtlab.graph.onnx_utils import is_average_pool as _is_average_pool

POOL_OPS = ("AveragePool", "GlobalAveragePool")
#: Ops that commute with Q and DQ (TensorRT moves Q/DQ through them): quantizing their input equals quantizing
#: their output with the same scale.
COMMUTING_OPS = ("MaxPool", "Reshape", "Flatten")
#: Ops TensorRT fuses into a weighted op's output (bias, BatchNorm, activations, residual sum): what `pool_input`
#: walks back through to find the weighted op that feeds a pool.
EPILOGUE_OPS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu",
                "Softplus", "PRelu", "Gelu", "BatchNormalization", "Add", "Sum", "Mul", "Sub", "Div")
MIN_CHANNELS = 16  # ModelOpt's threshold for Conv channels and MatMul/Gemm K and N


@dataclass
class ScaleGroup:
    """Activation tensors that share one scale, and the tensors whose statistics hold their pooled values."""

    tensors: list[str]
    pooled: list[str]  # the Concat outputs: their histogram is the joint distribution of the group

    def to_dict(self) -> dict:
        return {"tensors": list(self.tensors), "pooled": list(self.pooled)}


@dataclass
class QuantPlan:
    """Which tensors get activation Q/DQ (and for which consumer inputs), and which weights get quantized."""

    activations: list[str]  # tensor names that need a calibrated scale, graph order
    consumers: dict[str, list[tuple[str, int]]]  # tensor → [(node name, input index)] that read the DQ output
    weights: dict[str, tuple[str, int | None]]  # initializer → (first reader, output-channel axis; None: per-tensor)
    guarded: list[GuardedNode] = field(default_factory=list)
    skipped_nodes: list[str] = field(default_factory=list)  # weighted nodes left float because guarded
    excluded: dict[str, str] = field(default_factory=dict)  # weighted node → the exclusion rule that left it float
    shared_scales: list[ScaleGroup] = field(default_factory=list)
    rules: tuple = ()  # the rules that made the plan, in RULES order
    placed_by: dict[str, str] = field(default_factory=dict)  # tensor → the rule that put its Q/DQ there
    #: initializer → every quantized node reading it (one weight DQ shared by all: graphs that share a weight, as
    #: ONNX Runtime's constant sharing makes of identical initializers, quantize it for every reader)
    weight_users: dict[str, list[str]] = field(default_factory=dict)

    def describe(self) -> dict:
        by_rule: dict[str, int] = {}
        for tensor in self.activations:
            rule = self.placed_by.get(tensor, "?")
            by_rule[rule] = by_rule.get(rule, 0) + 1
        return {"activation_tensors": len(self.activations), "weights": len(self.weights),
                "guarded": [(g.name, g.op_type, g.precision) for g in self.guarded],
                "rules": list(self.rules), "activations_by_rule": by_rule, "excluded": dict(self.excluded),
                "shared_scale_groups": [g.to_dict() for g in self.shared_scales]}

    def add(self, tensor: str, node: str, index: int, rule: str) -> None:
        """`node` input `index` reads `tensor` through its Q/DQ pair (made when the tensor has none yet)."""
        if tensor not in self.consumers:
            self.consumers[tensor] = []
            self.activations.append(tensor)
            self.placed_by[tensor] = rule
        if (node, index) not in self.consumers[tensor]:
            self.consumers[tensor].append((node, index))

    def drop(self, tensor: str) -> list[tuple[str, int]]:
        self.activations.remove(tensor)
        self.placed_by.pop(tensor, None)
        return self.consumers.pop(tensor)

    def quantizes(self, node: str) -> bool:
        """True when some input of `node` is read through a Q/DQ pair (or, for a weighted node, its weight)."""
        return any(n == node for uses in self.consumers.values() for n, _ in uses) \
            or any(node in users for users in self.weight_users.values())


SUBGRAPH_READ = -1  # GraphFacts.readers' input index for a tensor read inside a node's subgraph


@dataclass
class GraphFacts:
    """What the rules read about the graph: initializers, producers, readers, guarded and excluded node names."""

    model: object
    initializers: dict
    producers: dict
    readers: dict  # tensor → [(node, input index)]; SUBGRAPH_READ where a subgraph of the node reads it
    guarded: set
    excluded: dict = field(default_factory=dict)
    _shapes: dict | None = None

    @classmethod
    def of(cls, model, guarded_names: set) -> "GraphFacts":
        from trtlab.graph.onnx_utils import reads

        readers: dict[str, list] = {}
        for node in model.graph.node:
            for index, name in enumerate(node.input):
                if name:
                    readers.setdefault(name, []).append((node, index))
            for name in reads(node) - set(node.input):  # read by name inside an If/Loop body: index -1, never
                readers.setdefault(name, []).append((node, SUBGRAPH_READ))  # quantized, but a reader all the same
        return cls(model, {init.name: init for init in model.graph.initializer},
                   {out: node for node in model.graph.node for out in node.output}, readers, guarded_names)

    def left_float(self, node) -> bool:
        return node.name in self.guarded or node.name in self.excluded

    def reader_count(self, tensor: str) -> int:
        return len(self.readers.get(tensor, ()))

    @property
    def shapes(self) -> dict:
        """tensor → list of dims (None where unknown), by ONNX shape inference (computed on first use)."""
        if self._shapes is None:
            import onnx

            inferred = onnx.shape_inference.infer_shapes(self.model)
            self._shapes = {}
            for info in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
                dims = info.type.tensor_type.shape.dim
                self._shapes[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
            for init in inferred.graph.initializer:
                self._shapes[init.name] = list(init.dims)
        return self._shapes


@dataclass
class Placement:
    """One rule's answer for one node: (input index, tensor) pairs to quantize per tensor, and weights to quantize
    per output channel (initializer name, axis)."""

    activations: list[tuple[int, str]] = field(default_factory=list)
    weights: list[tuple[str, int | None]] = field(default_factory=list)  # axis None: one per-tensor scale


def weight_axis(node, weight_dims) -> int | None:
    """The output-channel axis of a weighted node's weight (input 1): Conv (M, C/g, kH, kW) → 0; ConvTranspose
    (C, M/g, kH, kW) → 1; Gemm B (K, N) → 1, or (N, K) with transB=1 → 0; MatMul B (…, K, N) → the last axis.
    None (one per-tensor scale) where no axis holds one scale per output channel: a 1-D MatMul B (K: the product
    sums over it, there is no N), and a grouped ConvTranspose, whose axis 1 has M/g entries for M output channels
    (channel j of every group would share a scale; TensorRT wants M)."""
    if node.op_type == "Gemm":
        return 0 if _attr(node, "transB", 0) else 1
    if node.op_type == "MatMul":
        return len(weight_dims) - 1 if len(weight_dims) >= 2 else None
    if node.op_type == "ConvTranspose":
        return 1 if _attr(node, "group", 1) == 1 else None
    return 0


def _attr(node, name: str, default):
    return attribute(node, name, default)


# -- exclusions (off by default) ------------------------------------------------------------------------------------
def exclude_small_channels(facts: GraphFacts) -> dict[str, str]:
    """ModelOpt's INT8 Conv exclusion (find_nodes_from_convs_to_exclude): fewer than 16 input or output channels,
    except a plain conv with a channel count divisible by 8, a square kernel and ≥ 16 channels on one side (or
    reading the graph input), and a grouped conv with output channels divisible by 8 and kernels ≥ 3."""
    graph_inputs = {i.name for i in facts.model.graph.input}
    excluded = {}
    for node in facts.model.graph.node:
        if node.op_type != "Conv" or node.input[1] not in facts.initializers:
            continue
        dims = list(facts.initializers[node.input[1]].dims)
        out_c, in_c, kernel = dims[0], dims[1], dims[2:]
        group = _attr(node, "group", 1)
        if out_c >= MIN_CHANNELS and in_c >= MIN_CHANNELS:
            continue
        plain_ok = group == 1 and (out_c % 8 == 0 or in_c % 8 == 0) and len(set(kernel)) <= 1 \
            and (node.input[0] in graph_inputs or max(out_c, in_c) >= MIN_CHANNELS)
        grouped_ok = group > 1 and out_c % 8 == 0 and all(k >= 3 for k in kernel)
        if not (plain_ok or grouped_ok):
            excluded[node.name] = f"exclude_small_channels: {in_c} in / {out_c} out channels"
    return excluded


def exclude_gemv(facts: GraphFacts) -> dict[str, str]:
    """ModelOpt's GEMV / small-GEMM exclusion (find_nodes_from_matmul_to_exclude): a MatMul or Gemm whose rows M are
    1 (known from the graph's shapes: a batch-1 model), or whose K or N is below 16 — shapes Tensor Cores do not
    speed up, where Q/DQ only costs time. A dynamic batch is not assumed to be 1 (ModelOpt sets it to 1)."""
    excluded = {}
    for node in facts.model.graph.node:
        if node.op_type not in ("MatMul", "Gemm"):
            continue
        a, b = (facts.shapes.get(name) for name in node.input[:2])
        if not a or not b or len(b) < 2:
            continue
        trans_a = node.op_type == "Gemm" and _attr(node, "transA", 0)
        trans_b = node.op_type == "Gemm" and _attr(node, "transB", 0)
        rows = a[-1] if trans_a else (a[-2] if len(a) >= 2 else 1)
        k, n = (b[-1], b[-2]) if trans_b else (b[-2], b[-1])
        small = [f"{name}={value}" for name, value in (("M", rows), ("K", k), ("N", n))
                 if value is not None and (value == 1 if name == "M" else value < MIN_CHANNELS)]
        if small:
            excluded[node.name] = f"exclude_gemv: {', '.join(small)}"
    return excluded


# -- per-node rules ------------------------------------------------------------------------------------------------
def weighted_op_inputs(node, facts: GraphFacts) -> Placement | None:
    """Conv / ConvTranspose / Gemm / MatMul: activation input per-tensor, weight per output channel."""
    if node.op_type not in WEIGHTED_OPS:
        return None
    placement = Placement()
    data = node.input[0]
    if data not in facts.initializers:
        placement.activations.append((0, data))
    elif node.op_type in ("MatMul", "Gemm"):  # a constant A (W · x): per-tensor, as ONNX Runtime's quantizer
        placement.weights.append((data, None))  # treats input A (per-output-channel scales are B's)
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
               and not facts.left_float(facts.producers[name]) and facts.reader_count(name) == 1]
    if not fusable:
        return None
    fused = fusable[0] if len(fusable) == 1 else _main_branch(fusable, facts)
    return Placement([(index, name) for index, name in enumerate(node.input) if name != fused])


def _main_branch(inputs: list[str], facts: GraphFacts) -> str:
    """Of two Conv-made inputs of an Add (a downsampling block: main branch and projection shortcut), the one on
    the longer path back to their nearest common ancestor — the main branch, which fuses with the Add; the shortcut
    is quantized (ModelOpt's build_non_residual_input_map does the same), whatever order the exporter wrote."""
    def distances(tensor: str) -> dict[str, int]:
        seen, frontier, step = {tensor: 0}, [tensor], 0
        while frontier:
            step += 1
            frontier = [name for t in frontier if t in facts.producers
                        for name in facts.producers[t].input
                        if name and name not in seen and name not in facts.initializers]
            seen.update({name: step for name in frontier if name not in seen})
        return seen

    first, second = (distances(t) for t in inputs)
    common = [t for t in first if t in second]
    if not common:
        return inputs[0]
    ancestor = min(common, key=lambda t: first[t] + second[t])
    return inputs[0] if first[ancestor] >= second[ancestor] else inputs[1]


# -- rules over the whole plan ---------------------------------------------------------------------------------------
def is_average_pool(node, facts: GraphFacts) -> bool:
    """trtlab.graph.onnx_utils.is_average_pool on this graph's initializers and inferred shapes."""
    return _is_average_pool(node, facts.initializers, lambda name: len(facts.shapes.get(name) or []) or None)


def _quantized_weighted_producer(tensor: str, plan: QuantPlan, facts: GraphFacts, depth: int = 8) -> bool:
    """True when `tensor` comes from a quantized weighted op through ops TensorRT fuses into it (single readers)."""
    node = facts.producers.get(tensor)
    if node is None or depth == 0 or facts.left_float(node):
        return False
    if node.op_type in WEIGHTED_OPS:
        return plan.quantizes(node.name)
    if node.op_type not in EPILOGUE_OPS:
        return False
    return any(_quantized_weighted_producer(name, plan, facts, depth - 1) for name in node.input
               if name and name not in facts.initializers and facts.reader_count(name) == 1)


def _reaches_quantized_reader(tensor: str, plan: QuantPlan, facts: GraphFacts) -> bool:
    """True when a reader of `tensor` (directly, or after MaxPool/Reshape/Flatten) reads it through a Q/DQ pair."""
    for node, index in facts.readers.get(tensor, ()):
        if (node.name, index) in plan.consumers.get(tensor, ()):
            return True
        if node.op_type in COMMUTING_OPS and index == 0 and _reaches_quantized_reader(node.output[0], plan, facts):
            return True
    return False


def pool_input(plan: QuantPlan, facts: GraphFacts) -> None:
    """Quantize an average pool's input when a neighbour is quantized, and its output when nothing quantized reads
    it (see the module docstring)."""
    graph_outputs = {o.name for o in facts.model.graph.output}
    for node in facts.model.graph.node:
        if facts.left_float(node) or not is_average_pool(node, facts) or node.input[0] in facts.initializers:
            continue
        data, out = node.input[0], node.output[0]
        read_quantized = _reaches_quantized_reader(out, plan, facts)
        if not (read_quantized or _quantized_weighted_producer(data, plan, facts)):
            continue
        plan.add(data, node.name, 0, "pool_input")
        if not read_quantized and out not in graph_outputs:
            for reader, index in facts.readers.get(out, ()):
                if index != SUBGRAPH_READ:
                    plan.add(out, reader.name, index, "pool_input")


def commute_through_copies(plan: QuantPlan, facts: GraphFacts) -> None:
    """Move the Q/DQ of a MaxPool/Reshape/Flatten output whose readers are all quantized to that op's input."""
    graph_outputs = {o.name for o in facts.model.graph.output}
    moved = True
    while moved:
        moved = False
        for tensor in list(plan.activations):
            op = facts.producers.get(tensor)
            if op is None or op.op_type not in COMMUTING_OPS or facts.left_float(op) or tensor in graph_outputs:
                continue
            source = op.input[0]
            if source in facts.initializers or len([o for o in op.output if o]) != 1 \
                    or len(plan.consumers[tensor]) != facts.reader_count(tensor):
                continue  # a float reader of the output would see INT8-rounded values: keep the Q/DQ where it is
            plan.drop(tensor)
            plan.add(source, op.name, 0, "commute_through_copies")
            moved = True


def concat_shared_scale(plan: QuantPlan, facts: GraphFacts) -> None:
    """One scale for the quantized inputs and output of each Concat (groups joined when they share a tensor)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pooled_by_root: dict[str, list[str]] = {}
    concats = []
    for node in facts.model.graph.node:
        if node.op_type != "Concat" or facts.left_float(node):
            continue
        members = [t for t in [node.output[0]] + list(node.input) if t in plan.consumers]
        if len(dict.fromkeys(members)) < 2:
            continue
        for other in members[1:]:
            parent[find(other)] = find(members[0])
        concats.append((members[0], node.output[0]))
    for member, output in concats:
        pooled_by_root.setdefault(find(member), []).append(output)
    groups: dict[str, list[str]] = {}
    for tensor in plan.activations:
        if tensor in parent:
            groups.setdefault(find(tensor), []).append(tensor)
    plan.shared_scales = [ScaleGroup(tensors, pooled_by_root.get(root, [])) for root, tensors in groups.items()]


def per_tensor_weights(plan: QuantPlan, facts: GraphFacts) -> None:
    """One scale per weight tensor instead of one per output channel (off by default: a stress case, and what
    cross-layer equalization is for). TensorRT takes per-tensor weight scales too ("The quantization process uses
    per-tensor, per-channel, or block-wise scaling": TensorRT developer guide, Working with Quantized Types)."""
    plan.weights = {weight: (node, None) for weight, (node, _) in plan.weights.items()}


@dataclass(frozen=True)
class Rule:
    """One placement rule: its name (the switch), when it runs, whether a Recipe uses it by default, and what it is.
    stage 'exclude' returns {node: reason} of weighted nodes left float; 'node' answers a Placement for one node
    (the first 'node' rule that answers decides); 'plan' edits the plan after the node rules."""

    name: str
    stage: str
    default: bool
    fn: Callable
    label: str  # short name used in variant labels

    @property
    def what(self) -> str:
        return (self.fn.__doc__ or "").strip().split("\n")[0]


#: The placement rules, in the order they run.
RULES = {rule.name: rule for rule in (
    Rule("exclude_gemv", "exclude", False, exclude_gemv, "gemv"),
    Rule("exclude_small_channels", "exclude", False, exclude_small_channels, "small16"),
    Rule("weighted_op_inputs", "node", True, weighted_op_inputs, "weighted"),
    Rule("residual_add_input", "node", True, residual_add_input, "residual"),
    Rule("pool_input", "plan", True, pool_input, "pool"),
    Rule("commute_through_copies", "plan", True, commute_through_copies, "commute"),
    Rule("concat_shared_scale", "plan", True, concat_shared_scale, "concat"),
    Rule("per_tensor_weights", "plan", False, per_tensor_weights, "pertensor"),
)}
DEFAULT_RULES = tuple(name for name, rule in RULES.items() if rule.default)
LEGACY_RULES = ("weighted_op_inputs", "residual_add_input")  # trtlab's placement before issue 17


def resolve_rules(rules=None, base=DEFAULT_RULES) -> tuple[str, ...]:
    """Rule names in RULES order: None → LEGACY_RULES (this module's functions keep their behaviour; a Recipe picks
    its own default); an iterable of names (or of the rules' functions); or {name: on} switches applied to `base`."""
    if rules is None:
        return LEGACY_RULES
    if isinstance(rules, str) or callable(rules):
        rules = [rules]
    by_fn = {rule.fn: name for name, rule in RULES.items()}  # a rule's function names it (the API before the table)
    if not isinstance(rules, dict):
        rules = [by_fn.get(r, r) if callable(r) else r for r in rules]
    if isinstance(rules, dict):
        unknown = [name for name in rules if name not in RULES]
        chosen = {name for name in base if rules.get(name, True)} | {n for n, on in rules.items() if on}
    else:
        names = list(rules)
        unknown = [name for name in names if name not in RULES]
        chosen = set(names)
    if unknown:
        raise UserValueError(f"placement rule(s) {unknown} are not trtlab's", f"choose from {', '.join(RULES)}")
    return tuple(name for name in RULES if name in chosen)


def plan_quantization(model, guards=(), rules=None, int8_float_path: str | None = None) -> QuantPlan:
    """Where Q/DQ go in `model` (a sanitized graph: every node named) with `guards` (Guards or guard texts) and
    `rules` (see resolve_rules; default LEGACY_RULES). `int8_float_path` gives bare first_layer / last_layer guards
    their precision (trtlab.graph.guards.resolve_guards)."""
    from trtlab.graph.sanitize import check_node_names

    check_node_names(model, "quantization")
    names = resolve_rules(rules)
    guarded = resolve_guards(model, guards, int8_float_path)
    facts = GraphFacts.of(model, {g.name for g in guarded})
    for name in names:
        if RULES[name].stage == "exclude":
            facts.excluded.update({node: why for node, why in RULES[name].fn(facts).items()
                                   if node not in facts.guarded and node not in facts.excluded})
    plan = QuantPlan([], {}, {}, guarded, [], dict(facts.excluded), rules=names)
    node_rules = [RULES[name] for name in names if RULES[name].stage == "node"]
    for node in model.graph.node:
        if facts.left_float(node):
            if node.name in facts.guarded and node.op_type in WEIGHTED_OPS:
                plan.skipped_nodes.append(node.name)
            continue
        answer = next(((rule, p) for rule in node_rules if (p := rule.fn(node, facts)) is not None), None)
        if answer is None:
            continue
        rule, placement = answer
        for index, tensor in placement.activations:
            plan.add(tensor, node.name, index, rule.name)
        for weight, axis in placement.weights:
            if weight not in plan.weights:
                plan.weights[weight] = (node.name, axis)
            if plan.weights[weight][1] == axis:  # a reader on another axis (rare) keeps the float weight
                plan.weight_users.setdefault(weight, []).append(node.name)
    plan_rules = [RULES[name] for name in names if RULES[name].stage == "plan"]
    for rule in plan_rules:
        rule.fn(plan, facts)
    if plan_rules:  # tensors added or moved by plan rules: back to the order their producers have in the graph
        position = {out: i for i, node in enumerate(model.graph.node) for out in node.output}
        plan.activations.sort(key=lambda t: position.get(t, -1))
    return plan


def plan_for_recipe(model, recipe) -> QuantPlan:
    """The plan a variant of `recipe` (quantization.recipe.Recipe) quantizes by: its guards, placement rules and
    float path — what build_variant builds, and so what every check before the build (an imported cache's
    tensors, calibration-size searches) must plan too."""
    return plan_quantization(model, recipe.guards, recipe.placement, int8_float_path=recipe.high_precision)
