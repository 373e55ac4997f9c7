"""Small ONNX graph helpers shared by the stages (read like onnx-graphsurgeon passes: find, edit, check)."""
from __future__ import annotations


def opset_of(model) -> int:
    """The default-domain opset the model imports."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def with_outputs(model, names) -> object:
    """A copy of `model` whose graph outputs also include the tensors `names` (intermediate activations exposed
    for calibration statistics or layer-by-layer comparison)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    existing = {o.name for o in out.graph.output}
    for name in names:
        if name not in existing:
            out.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            existing.add(name)
    return out


def domains_used(model) -> set[str]:
    """The operator domains `model`'s nodes use — subgraph bodies (If/Loop/Scan) and local functions included — with
    the default domain spelled "" (its alias "ai.onnx" folded into it)."""
    def of(nodes) -> set[str]:
        found = set()
        for node in nodes:
            found.add("" if node.domain == "ai.onnx" else node.domain)
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    found |= of(sub.node)
        return found

    return of(model.graph.node).union(*(of(function.node) for function in model.functions))


def drop_unused_opsets(model) -> list[str]:
    """Remove the opset imports no node uses (ONNX Runtime writes every domain it registers into an optimized model:
    com.microsoft.nchwc, org.pytorch.aten, ai.onnx.training, …). The default domain is always kept. Returns the
    domains dropped."""
    used = domains_used(model) | {""}
    kept, dropped = [], []
    for opset in model.opset_import:
        (kept if ("" if opset.domain == "ai.onnx" else opset.domain) in used else dropped).append(opset)
    if dropped:
        kept = [type(o)(domain=o.domain, version=o.version) for o in kept]  # copies: clearing frees the originals
        del model.opset_import[:]
        model.opset_import.extend(kept)
    return [o.domain for o in dropped]


def reads(node) -> set[str]:
    """The tensor names `node` reads: its inputs, and the names its subgraphs (If/Loop/Scan bodies, nested ones
    too) read — a body may read an initializer or tensor of the enclosing graph by name."""
    names = {name for name in node.input if name}
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            names |= names_read(sub)
    return names


def names_read(graph) -> set[str]:
    """Every tensor name `graph` needs: read by its nodes (subgraphs included) or listed as a graph output."""
    names = {o.name for o in graph.output}
    for node in graph.node:
        names |= reads(node)
    return names


def attribute(node, name: str, default=None):
    """The value of `node`'s attribute `name` (onnx.helper.get_attribute_value), or `default`."""
    import onnx

    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def is_average_pool(node, initializers: dict, rank_of) -> bool:
    """AveragePool / GlobalAveragePool, or a ReduceMean over the two spatial axes of a 4-D tensor with keepdims — a
    Reduce that TensorRT replaces by a pooling layer ("Types of Fusions": Reduce). `rank_of(tensor)` gives a
    tensor's rank (None when unknown); `initializers` maps names to TensorProtos (ReduceMean-18 axes input)."""
    if node.op_type in ("AveragePool", "GlobalAveragePool"):
        return True
    if node.op_type != "ReduceMean" or not attribute(node, "keepdims", 1):
        return False
    axes = attribute(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1] in initializers:
        from onnx import numpy_helper

        axes = numpy_helper.to_array(initializers[node.input[1]]).tolist()
    return rank_of(node.input[0]) == 4 and axes is not None and sorted(a % 4 for a in axes) == [2, 3]


def types_and_shapes(model) -> tuple[dict, dict]:
    """Element types and shapes of every tensor, by ONNX shape inference with symbolic (batch) dims set to 1."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in list(copy.graph.input) + list(copy.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.dim_value = 1
    del copy.graph.value_info[:]
    inferred = onnx.shape_inference.infer_shapes(copy)
    types, shapes = {}, {}
    for value in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        tensor = value.type.tensor_type
        types[value.name] = tensor.elem_type
        shapes[value.name] = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    for init in inferred.graph.initializer:
        types[init.name] = init.data_type
        shapes[init.name] = list(init.dims)
    return types, shapes
