"""The graphs the analyses run: which tensors to compare, graph suffixes that start at a layer, and the literal
ONNX Runtime session they run in.

The quantizer keeps every original tensor name (it only adds `<tensor>__q/__dq`, `<weight>__int8/__dq` and fp16
casts), so the node outputs of the sanitized FP32 graph name the tensors an INT8 variant is compared on.
"""
from __future__ import annotations


def literal_session(model, threads: int | None = None):
    """ONNX Runtime CPU session with graph optimizations disabled (the literal semantics), from a ModelProto."""
    from trtlab.core.ort_session import ort_session

    return ort_session(model, optimization="disable", threads=threads)


def compared_tensors(fp32_model, quantized_model=None) -> list[str]:
    """Original float tensors in graph order: node outputs of the FP32 graph (present in the quantized graph too)."""
    from onnx import TensorProto

    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(fp32_model.graph.value_info)
             + list(fp32_model.graph.output)}
    names = [o for node in fp32_model.graph.node for o in node.output if o]
    names = [n for n in names if types.get(n, TensorProto.FLOAT) == TensorProto.FLOAT]
    if quantized_model is not None:
        present = {o for node in quantized_model.graph.node for o in node.output}
        names = [n for n in names if n in present]
    return names


def suffix_model(fp32, start: int):
    """The graph from node `start` on; tensors it reads from earlier nodes (or the graph input) become inputs.
    (None, []) when a graph output is produced before `start`."""
    from onnx import TensorProto, helper

    nodes = list(fp32.graph.node)
    initializers = {i.name: i for i in fp32.graph.initializer}
    produced_before = {i.name for i in fp32.graph.input} | {o for n in nodes[:start] for o in n.output}
    cut, used_inits = [], []
    for node in nodes[start:]:
        for name in node.input:
            if name in initializers:
                used_inits.append(name)
            elif name in produced_before and name not in cut:
                cut.append(name)
    produced_after = {o for n in nodes[start:] for o in n.output}
    if any(o.name not in produced_after for o in fp32.graph.output):
        return None, []
    infos = {vi.name: vi for vi in list(fp32.graph.value_info) + list(fp32.graph.input)}
    inputs = [infos[name] if name in infos else helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
              for name in cut]
    graph = helper.make_graph(nodes[start:], f"{fp32.graph.name}-from-{start}", inputs, list(fp32.graph.output),
                              [initializers[n] for n in dict.fromkeys(used_inits)])
    graph.value_info.extend(vi for vi in fp32.graph.value_info if vi.name in produced_after)
    model = helper.make_model(graph, opset_imports=list(fp32.opset_import))
    model.ir_version = fp32.ir_version
    return model, cut


def is_float_only(model, fp32) -> bool:
    """True when a variant computes exactly what the FP32 graph computes: the quantizer added no node (no Q/DQ,
    no fp16 Cast)."""
    return len(model.graph.node) == len(fp32.graph.node)


def plan_signature(plan, nodes: set[str]) -> tuple:
    """What a Q/DQ plan does to `nodes` (activation sites, weights, guards): equal signatures, equal graphs there."""
    acts = sorted((t, n, i) for t, cs in plan.consumers.items() for n, i in cs if n in nodes)
    weights = sorted((w, n, a) for w, (n, a) in plan.weights.items() if n in nodes)
    guarded = sorted((g.name, g.precision) for g in plan.guarded if g.name in nodes)
    return acts, weights, guarded


def node_guard(node_name: str, precision: str = "fp32"):
    """The Guard that keeps one node out of INT8: node:<name>, FP16 for precision='fp16' (else FP32)."""
    from trtlab.graph.guards import Guard

    return Guard("node", node_name, "fp16" if precision == "fp16" else "fp32")
