"""Readable names for the nodes of an exported graph: the model's own module paths, read from the names of the
weights each layer reads (`_blocks.3._project_conv.weight` → `_blocks.3._project_conv`). Exporters name nodes
after op counters (`node_Conv_875`) and tensors after functions (`hardtanh_32`), which say nothing about where in
the model they are. Guards keep using node names: they are what the quantizer and the FP16 converter resolve.
"""
from __future__ import annotations

import re

# Parameter names that end a module path: PyTorch (`.weight`, `.bias`; torch's exporter adds `_bias` for folded
# batch norms), TensorFlow/Keras (`/kernel`, `/bias`, `:0`).
_PARAMETER = re.compile(r"[./](weight|weight_bias|bias|kernel|depthwise_kernel|gamma|beta)(:\d+)?$")
_GENERATED = re.compile(r"^(onnx::|_?val_|const|_v_|pnnx_)", re.IGNORECASE)  # exporter-made constant names
AFTER = " › "  # "<block> › <op>": a node without weights, named by the weighted block that feeds it


def module_path(initializer: str) -> str | None:
    """The module path an initializer's name carries, or None when the name is not one (`onnx::Conv_123`)."""
    if _GENERATED.match(initializer):
        return None
    path = _PARAMETER.sub("", initializer)
    if path == initializer or not path or not re.search(r"[./]", initializer):
        return None
    return path


def block_names(model) -> dict[str, str]:
    """{node name: readable block name} for every node of `model` (onnx.ModelProto).

    A node that reads a named weight is that weight's module (`_blocks.3._project_conv`). Any other node is named
    after the nearest weighted block up its first data input, with its own op type (`_blocks.3._project_conv ›
    Add`); a node with no such block upstream (or weights without module names) keeps its node name."""
    initializers = {i.name for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    own: dict[str, str] = {}
    for node in model.graph.node:
        paths = [module_path(name) for name in node.input if name in initializers]
        paths = [p for p in paths if p]
        if paths:
            own[node.name] = paths[0]
    names = {}
    for node in model.graph.node:
        if node.name in own:
            names[node.name] = own[node.name]
            continue
        upstream = _upstream_block(node, producer, initializers, own)
        names[node.name] = f"{upstream}{AFTER}{node.op_type}" if upstream else node.name
    return names


def _upstream_block(node, producer, initializers, own, limit: int = 64) -> str | None:
    """The block of the nearest node with its own block along first data inputs (at most `limit` steps up)."""
    for _ in range(limit):
        data = [name for name in node.input if name and name not in initializers and name in producer]
        if not data:
            return None
        node = producer[data[0]]
        if node.name in own:
            return own[node.name]
    return None


def labelled(block: str, node: str) -> str:
    """'block (node)' for people who need both (the node name is what a guard names); the node alone when the
    block is just its name."""
    return node if block == node else f"{block} ({node})"
