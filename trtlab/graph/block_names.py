"""One vocabulary for places in a model: the model's own module paths, read from the names of the weights each
layer reads (`_blocks.3._project_conv.weight` → `_blocks.3._project_conv`). Exporters name nodes after op counters
(`node_Conv_875`) and tensors after functions (`hardtanh_32`), which say nothing about where in the model they are.

Every view that names a node or a tensor for people (the threshold tables, sensitivity, guard lists) goes through
`block_name`, so one layer reads the same everywhere. Guards keep using node names: they are what the quantizer and
the FP16 converter resolve.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

# Parameter names that end a module path: PyTorch (`.weight`, `.bias`; torch's exporter adds `_bias` for folded
# batch norms), TensorFlow/Keras (`/kernel`, `/bias`, `:0`).
_PARAMETER = re.compile(r"[./](weight|weight_bias|bias|kernel|depthwise_kernel|gamma|beta)(:\d+)?$")
_GENERATED = re.compile(r"^(onnx::|_?val_|const|_v_|pnnx_)", re.IGNORECASE)  # exporter-made constant names
AFTER = " › "  # "<block> › <op>": a node without weights, named by the weighted block that feeds it
_UPSTREAM_LIMIT = 64  # steps up the first data inputs when looking for a weighted block
# Nodes a quantizer or FP16 rewrite inserts: a tensor read through them keeps the name of what produced it.
_INSERTED = {"QuantizeLinear", "DequantizeLinear", "Cast"}


def module_path(initializer: str) -> str | None:
    """The module path an initializer's name carries, or None when the name is not one (`onnx::Conv_123`)."""
    if _GENERATED.match(initializer):
        return None
    path = _PARAMETER.sub("", initializer)
    if path == initializer or not path or not re.search(r"[./]", initializer):
        return None
    return path


@dataclass
class BlockIndex:
    """{node name: block name} and {tensor name: producing node} of one graph, built once; `name(x)` answers for a
    node or a tensor."""

    nodes: dict = field(default_factory=dict)
    producers: dict = field(default_factory=dict)
    inputs: frozenset = frozenset()

    def name(self, tensor_or_node: str) -> str:
        """The block of a node, or of the node producing a tensor (through inserted Q/DQ and Casts); a graph
        input reads 'input <name>'; a name the graph does not hold is returned unchanged."""
        if tensor_or_node in self.nodes:
            return self.nodes[tensor_or_node]
        if tensor_or_node in self.producers:
            return self.nodes[self.producers[tensor_or_node]]
        if tensor_or_node in self.inputs:
            return f"input {tensor_or_node}"
        return tensor_or_node


def block_index(model) -> BlockIndex:
    """The BlockIndex of `model` (onnx.ModelProto or a path to one)."""
    model = _load(model)
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    own: dict[str, str] = {}
    for node in graph.node:
        paths = [module_path(name) for name in _weights(node, producer, initializers)]
        paths = [p for p in paths if p]
        if paths:
            own[node.name] = paths[0]
    nodes = {}
    for node in graph.node:
        if node.name in own:
            nodes[node.name] = own[node.name]
            continue
        if node.op_type in _INSERTED:
            continue  # named below, after what they carry
        upstream = _upstream_block(node, producer, initializers, own)
        nodes[node.name] = f"{upstream}{AFTER}{node.op_type}" if upstream else node.name
    graph_inputs = frozenset(i.name for i in graph.input if i.name not in initializers)
    for node in graph.node:
        if node.name not in nodes:
            source = _through_inserted(node, producer, initializers)
            if isinstance(source, str):  # reached a graph input
                nodes[node.name] = f"input {source}" if source in graph_inputs else node.name
            else:
                nodes[node.name] = nodes.get(source.name, source.name)
    tensors = {}
    for node in graph.node:
        for out in node.output:
            tensors[out] = node.name
    return BlockIndex(nodes, tensors, graph_inputs)


def block_names(model) -> dict[str, str]:
    """{node name: readable block name} for every node of `model` (onnx.ModelProto or a path).

    A node that reads a named weight is that weight's module (`_blocks.3._project_conv`). Any other node is named
    after the nearest weighted block up its first data input, with its own op type (`_blocks.3._project_conv ›
    Add`); a node with no such block upstream (or weights without module names) keeps its node name."""
    return dict(block_index(model).nodes)


def block_name(model_or_index, tensor_or_node_name: str) -> str:
    """The block name of one node or tensor (`hardtanh_29` → `_blocks.8._depthwise_conv › Clip`).

    model_or_index: an onnx.ModelProto, a path to one, a BlockIndex, or a {node: block} dict from block_names.
    Build the index once (block_index) when naming many."""
    if isinstance(model_or_index, BlockIndex):
        return model_or_index.name(tensor_or_node_name)
    if isinstance(model_or_index, dict):
        return model_or_index.get(tensor_or_node_name, tensor_or_node_name)
    return block_index(model_or_index).name(tensor_or_node_name)


def labelled(block: str, node: str) -> str:
    """'block (node)' for people who need both (the node name is what a guard names); the node alone when the
    block is just its name."""
    return node if block == node else f"{block} ({node})"


def _load(model):
    if isinstance(model, (str, os.PathLike)):
        import onnx

        return onnx.load(str(model), load_external_data=False)
    return model


def _weights(node, producer, initializers):
    """The initializers a node reads, directly or through a weight's DequantizeLinear/Cast (Q/DQ, FP16 graphs)."""
    if node.op_type in _INSERTED:
        return []
    found = []
    for name in node.input:
        if name in initializers:
            found.append(name)
        elif name in producer and producer[name].op_type in _INSERTED and producer[name].input \
                and producer[name].input[0] in initializers:
            found.append(producer[name].input[0])
    return found


def _data_inputs(node, producer, initializers):
    return [name for name in node.input if name and name not in initializers and name in producer]


def _upstream_block(node, producer, initializers, own, limit: int = _UPSTREAM_LIMIT) -> str | None:
    """The block of the nearest node with its own block along first data inputs (at most `limit` steps up)."""
    for _ in range(limit):
        data = _data_inputs(node, producer, initializers)
        if not data:
            return None
        node = producer[data[0]]
        if node.name in own:
            return own[node.name]
    return None


def _through_inserted(node, producer, initializers, limit: int = _UPSTREAM_LIMIT):
    """The first node up the first data input that a quantizer or FP16 rewrite did not insert, or the name of the
    tensor the chain starts from (a graph input)."""
    for _ in range(limit):
        if node.op_type not in _INSERTED:
            return node
        data = _data_inputs(node, producer, initializers)
        if not data:
            return next((name for name in node.input if name and name not in initializers), node.name)
        node = producer[data[0]]
    return node
