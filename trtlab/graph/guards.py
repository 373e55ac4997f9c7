"""Guards: which nodes stay out of INT8, and in which float precision they run — parsed once into a `Guard`.

A guard is written `<selector>[=<precision>]`: the selector is `first_layer`, `last_layer` (the first / last
weighted node: Conv, ConvTranspose, Gemm, MatMul), `softmax` (Softmax and LogSoftmax), `op:<OpType>` or
`node:<name>`; the precision `fp32` or `fp16`. Without one, the seeds' meaning (issue 17; seed 000's FAQ names them
INT8_FP16_FIRST / INT8_FP16_LAST / INT8_FP32_SOFTMAX): `first_layer` and `last_layer` run in the float path's
precision — FP16 inside an INT8 graph with the FP16 float path (the default), FP32 on the FP32 float path and in FP16
variants, where keeping FP32 is the only thing a guard can mean — while `softmax`, `op:` and `node:` mean FP32.
`parse_guard` turns text into a Guard at the boundary (CLI, Recipe, widgets) and refuses anything else in one line;
everything after that reads the Guard's fields, and `resolve_guards(..., int8_float_path=)` gives every selected node
its precision. The quantizer leaves guarded nodes unquantized, and the one precision converter
(trtlab.graph.precision) runs them in their precision in the graph; only TensorRT 10's legacy weakly typed builds map
guards to layer.precision + OBEY_PRECISION_CONSTRAINTS.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from trtlab.core.errors import UserValueError

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
NAMED_GUARDS = ("first_layer", "last_layer", "softmax")
PRECISIONS = ("fp32", "fp16")
#: The precision a guard written without '=…' means: a precision, or FLOAT_PATH — the float path's precision where
#: the guard is resolved (FP16 in an INT8 graph with the FP16 float path, else FP32). Changing this table changes
#: what a bare guard means: variants made with the old meaning are rebuilt, since this module's code is part of
#: their identity (trtlab.quantization.variants.GRAPH_SOURCES).
FLOAT_PATH = "float-path"
DEFAULT_PRECISION = {"first_layer": FLOAT_PATH, "last_layer": FLOAT_PATH, "softmax": "fp32", "op": "fp32",
                     "node": "fp32"}
INT8_FLOAT_PATHS = ("fp16", "fp32")
ACCEPTED_FORMS = ("first_layer, last_layer, softmax, op:<OpType> or node:<node name>, optionally followed by "
                  "=fp16 or =fp32 (e.g. last_layer=fp16, node:Conv_12)")


@dataclass(frozen=True)
class Guard:
    """A node selector and the precision its nodes keep: `kind`, `target` (op type or node name) and `precision`,
    parsed once at the edges (CLI, widgets, Recipe, the public graph functions) and passed as this value everywhere
    after. `str(guard)` is its canonical text (the selector, with '=precision' unless it is the selector's default):
    what records store and hashes see. `precision` is '' for a bare `first_layer` / `last_layer` (the float path's
    precision, given by `precision_in`)."""

    kind: str  # 'first_layer' | 'last_layer' | 'softmax' | 'op' | 'node'
    target: str = ""  # the op type (kind 'op') or node name (kind 'node'); '' otherwise
    precision: str = ""  # 'fp32' | 'fp16' | '' (bare first_layer / last_layer: the float path's)

    def __post_init__(self):
        kind, target, precision = self.kind, self.target, self.precision
        if kind not in NAMED_GUARDS + ("op", "node"):
            raise UserValueError(f"guard kind {kind!r} is not one of {', '.join(NAMED_GUARDS)}, op, node",
                                 f"write a guard as {ACCEPTED_FORMS}")
        if (kind in ("op", "node")) != bool(target):
            raise UserValueError(f"guard {kind!r} {'needs a' if kind in ('op', 'node') else 'takes no'} target "
                                 f"(got {target!r})", f"write a guard as {ACCEPTED_FORMS}")
        if precision and precision not in PRECISIONS:
            raise UserValueError(f"guard precision {precision!r} is not one of {', '.join(PRECISIONS)}",
                                 f"write a guard as {ACCEPTED_FORMS}")
        default = DEFAULT_PRECISION[kind]
        if precision == default or not precision:  # spelled like the default: one value, the bare selector's
            object.__setattr__(self, "precision", "" if default == FLOAT_PATH else default)

    @classmethod
    def parse(cls, text) -> "Guard":
        """parse_guard: text → Guard."""
        return parse_guard(text)

    def __str__(self) -> str:
        default = DEFAULT_PRECISION[self.kind]
        return self.selector + ("" if self.precision in ("", default) else f"={self.precision}")

    def to_json(self) -> str:
        """What JSON records and hashes hold: the canonical text."""
        return str(self)

    @property
    def selector(self) -> str:
        """'first_layer', 'op:Softmax', 'node:Conv_12'."""
        return f"{self.kind}:{self.target}" if self.target else self.kind

    @property
    def label(self) -> str:
        """The guard's part of a variant label: 'last_layer', 'Conv_12' (a node guard is its node's name, without
        a 'node' prefix), 'op_Softmax'; '-fp16' / '-fp32' when spelled out. Safe in file names."""
        base = self.target if self.kind == "node" else (f"op_{self.target}" if self.kind == "op" else self.kind)
        suffix = "" if self.precision in ("", DEFAULT_PRECISION[self.kind]) else f"-{self.precision}"
        return re.sub(r"[^A-Za-z0-9_.-]", "_", base) + suffix

    @property
    def explicit(self) -> bool:
        """True when the precision does not depend on where the guard is used."""
        return bool(self.precision)

    def precision_in(self, int8_float_path: str | None = None) -> str:
        """The precision this guard's nodes run in: its own, or for a bare first_layer / last_layer the float path's
        — 'fp16' only in an INT8 graph with the FP16 float path (`int8_float_path='fp16'`); FP32 on the FP32 float
        path and in FP16 variants (None), where a guard can only mean "keep FP32"."""
        if self.precision:
            return self.precision
        if int8_float_path not in (None,) + INT8_FLOAT_PATHS:
            raise UserValueError(f"float path {int8_float_path!r} is not one of {', '.join(INT8_FLOAT_PATHS)}",
                                 "use 'fp16' (the default INT8 float path) or 'fp32'")
        return "fp16" if int8_float_path == "fp16" else "fp32"

    def with_precision(self, precision: str) -> "Guard":
        return Guard(self.kind, self.target, precision)

    def select(self, nodes: list) -> list:
        """The nodes of `nodes` (a graph's nodes, in order) this guard selects."""
        if self.kind == "first_layer":
            return [n for n in nodes if n.op_type in WEIGHTED_OPS][:1]
        if self.kind == "last_layer":
            return [n for n in nodes if n.op_type in WEIGHTED_OPS][-1:]
        if self.kind == "softmax":
            return [n for n in nodes if n.op_type in ("Softmax", "LogSoftmax")]
        if self.kind == "op":
            return [n for n in nodes if n.op_type == self.target]
        return [n for n in nodes if n.name == self.target]


def parse_guard(text) -> Guard:
    """'last_layer=fp16' → Guard('last_layer', precision='fp16'); a Guard is returned as it is. Anything else raises
    a one-line UserValueError naming the text and the accepted forms."""
    if isinstance(text, Guard):
        return text
    if not isinstance(text, str):
        raise UserValueError(f"guard {text!r} is not text", f"write a guard as {ACCEPTED_FORMS}")
    selector, sep, precision = text.strip().partition("=")
    selector, precision = selector.strip(), precision.strip()
    if sep and precision not in PRECISIONS:
        raise UserValueError(f"guard {text!r}: precision {precision!r} is not one of {', '.join(PRECISIONS)}",
                             f"write a guard as {ACCEPTED_FORMS}")
    if selector in NAMED_GUARDS:
        return Guard(selector, "", precision)
    kind, colon, target = selector.partition(":")
    if colon and kind in ("op", "node") and target.strip():
        return Guard(kind, target.strip(), precision)
    raise UserValueError(f"guard {text!r} is not understood", f"write a guard as {ACCEPTED_FORMS}")


def parse_guards(guards) -> tuple[Guard, ...]:
    """Guards or guard texts (a comma-separated string is several) → a tuple of Guards, in order: the edges' one
    parser (CLI, widgets, Recipe, the public graph functions)."""
    if guards is None:
        return ()
    if isinstance(guards, (str, Guard)):
        guards = [guards]
    parsed = []
    for item in guards:
        if isinstance(item, str) and "," in item:
            parsed += [parse_guard(part) for part in item.split(",") if part.strip()]
        else:
            parsed.append(parse_guard(item))
    return tuple(parsed)


@dataclass(frozen=True)
class GuardedNode:
    name: str
    op_type: str
    precision: str  # 'fp32' or 'fp16'
    guard: Guard  # the guard that selected it


def weighted_nodes_in_order(model) -> list:
    """Conv/ConvTranspose/Gemm/MatMul nodes in the graph's (topological) order."""
    return [n for n in model.graph.node if n.op_type in WEIGHTED_OPS]


def guard_values(guards) -> tuple[Guard, ...]:
    """`guards` as they must reach internal functions: Guard values. A text here skipped the parse at the edge —
    refused, naming the parser, rather than parsed a second time."""
    guards = tuple(guards or ())
    texts = [g for g in guards if not isinstance(g, Guard)]
    if texts:
        raise UserValueError(f"guards {texts!r} are not Guard values",
                             "parse them once where they come in: parse_guards(['last_layer=fp16', ...]) "
                             "(Recipe(guards=...) does it for you)")
    return guards


def resolve_guards(model, guards, int8_float_path: str | None = None) -> list[GuardedNode]:
    """The nodes of `model` (onnx.ModelProto) selected by `guards` (Guard values), in graph order, one entry per
    node (a later guard naming the same node overrides its precision), each with its precision — a bare
    first_layer / last_layer takes the INT8 graph's float path (`int8_float_path`: 'fp16', 'fp32', or None for an
    FP16 variant / TensorRT's layer precisions, where it means FP32). A guard that selects nothing is refused naming
    what exists — except `softmax` on a classifier exported without Softmax (logits out)."""
    chosen: dict[str, GuardedNode] = {}
    nodes = list(model.graph.node)
    for guard in guard_values(guards):
        matched = guard.select(nodes)
        if not matched:
            if guard.kind == "softmax":
                continue
            if guard.kind == "node":
                names = [n.name for n in weighted_nodes_in_order(model)][:8]
                raise UserValueError(f"guard {str(guard)!r}: no node named {guard.target!r} in the graph",
                                     f"name a node of the sanitized model; weighted nodes are e.g. {names}")
            ops = sorted({n.op_type for n in nodes})
            raise UserValueError(f"guard {str(guard)!r} selects no node", f"the graph's op types are {ops}")
        for node in matched:
            chosen[node.name] = GuardedNode(node.name, node.op_type, guard.precision_in(int8_float_path), guard)
    order = {n.name: i for i, n in enumerate(nodes)}
    return sorted(chosen.values(), key=lambda g: order[g.name])
