"""One pass of a graph over images held in memory, a weighted layer at a time — the pass adaptive rounding and bias
correction share, on the FP32 graph (the reference outputs) and on the quantized graph (the layers to recover).

The graph (nodes in topological order, as ONNX requires) is cut into segments: each weighted layer alone, and the
nodes between two layers. Nodes that read only constants (a weight's DequantizeLinear, Casts of initializers) go
with every segment that reads them. Each segment runs as its own literal ONNX Runtime session (optimizations off:
what the Q/DQ graph says, as the layer debugger runs it) on every image before the next one starts, so a hook can
change a layer's INT8 weights before it runs (`before`) and its output after (`after`), and every later layer sees
the change — the layer order is the graph's topological order. Tensors no later segment reads are dropped at once;
`bytes_per_image` is the most the pass holds at one time, per image (callers cap the images to a memory budget).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from trtlab.core.errors import UserValueError

#: Bytes per element of the ONNX tensor types a classifier's activations have.
_ITEMSIZE = {1: 4, 10: 2, 11: 8, 7: 8, 6: 4, 9: 1, 3: 1, 2: 1, 16: 2}


@dataclass
class Segment:
    """Nodes run as one session: a weighted `layer` alone (with the constant nodes it reads), or the nodes between
    two layers (layer None)."""

    nodes: list
    inputs: list[str]
    outputs: list[str]
    layer: object | None = None
    replaced: dict = field(default_factory=dict)  # initializer name → array to use instead (set by a hook)


class LayerwiseGraph:
    """`model` (an onnx.ModelProto) cut at the nodes named in `layers` (module docstring)."""

    def __init__(self, model, layers):
        import onnx

        self.model = onnx.shape_inference.infer_shapes(model)
        graph = self.model.graph
        self.initializers = {init.name: init for init in graph.initializer}
        self.input_name = graph.input[0].name
        self.output_names = [o.name for o in graph.output]
        infos = list(graph.value_info) + list(graph.input) + list(graph.output)
        self.types = {vi.name: vi.type.tensor_type.elem_type for vi in infos}
        self.shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None
                                 for d in vi.type.tensor_type.shape.dim] for vi in infos}
        self.segments = self._cut(set(layers))

    def _cut(self, layers: set[str]) -> list[Segment]:
        nodes = list(self.model.graph.node)
        constant_out: dict[str, object] = {}  # tensor → the constant node making it
        for node in nodes:
            if all(not name or name in self.initializers or name in constant_out for name in node.input) \
                    and not any(a.type in (5, 10) for a in node.attribute):  # no subgraph attributes
                constant_out.update({out: node for out in node.output})
        runs: list[tuple[list, object | None]] = []
        current: list = []
        for node in nodes:
            if node.output and node.output[0] in constant_out:
                continue
            if node.name in layers:
                if current:
                    runs.append((current, None))
                runs.append(([node], node))
                current = []
            else:
                current.append(node)
        if current:
            runs.append((current, None))
        order = {id(node): i for i, node in enumerate(nodes)}
        segments = []
        for run, layer in runs:
            needed: dict[int, object] = {}
            stack = [name for node in run for name in node.input if name in constant_out]
            while stack:
                producer = constant_out[stack.pop()]
                if id(producer) not in needed:
                    needed[id(producer)] = producer
                    stack += [name for name in producer.input if name in constant_out]
            members = sorted(list(needed.values()) + run, key=lambda n: order[id(n)])
            produced = {out for node in members for out in node.output}
            inputs = list(dict.fromkeys(name for node in members for name in node.input
                                        if name and name not in produced and name not in self.initializers))
            segments.append(Segment(members, inputs, [], layer))
        later_reads: set[str] = set(self.output_names)
        for segment in reversed(segments):  # outputs: what a later segment (or the graph's output) reads
            produced = [out for node in segment.nodes for out in node.output if out]
            segment.outputs = [name for name in produced if name in later_reads]
            later_reads |= set(segment.inputs)
        return segments

    def bytes_per_image(self) -> int | None:
        """The most bytes per image the pass holds at one time (live tensors plus a segment's outputs), by the
        graph's inferred shapes; None where a shape is unknown."""
        def size(name: str) -> int | None:
            dims = self.shapes.get(name)
            if not dims or any(d is None for d in dims[1:]):
                return None
            return int(np.prod(dims[1:], dtype=np.int64)) * _ITEMSIZE.get(self.types.get(name, 1), 4)

        last_read = {}
        for k, segment in enumerate(self.segments):
            for name in segment.inputs:
                last_read[name] = k
        live, peak = {self.input_name: size(self.input_name)}, 0
        for k, segment in enumerate(self.segments):
            outputs = {name: size(name) for name in segment.outputs}
            held = list(live.values()) + list(outputs.values())
            if any(v is None for v in held):
                return None
            peak = max(peak, sum(held))
            live.update(outputs)
            live = {n: v for n, v in live.items() if last_read.get(n, -1) > k or n in self.output_names}
        return peak

    def segment_model(self, segment: Segment):
        """The segment as a standalone ModelProto (its replaced initializers in place)."""
        from onnx import helper, numpy_helper

        read = {name for node in segment.nodes for name in node.input}
        initializers = [numpy_helper.from_array(segment.replaced[name], name) if name in segment.replaced
                        else self.initializers[name] for name in sorted(read & set(self.initializers))]
        inputs = [helper.make_tensor_value_info(name, self.types.get(name, 1), None) for name in segment.inputs]
        outputs = [helper.make_tensor_value_info(name, self.types.get(name, 1), None) for name in segment.outputs]
        graph = helper.make_graph(segment.nodes, "segment", inputs, outputs, initializers)
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        model.ir_version = self.model.ir_version
        return model

    def run(self, images: np.ndarray, before: Callable | None = None, after: Callable | None = None,
            rows: int = 16, fixed_batch: int | None = None, progress=None) -> dict[str, np.ndarray]:
        """The graph's outputs for `images` (N×…, the graph input), one segment at a time over all of them.
        before(layer, live) → {initializer: array} replaces that layer's initializers before it runs;
        after(layer, live, outputs) → {tensor: array} replaces its outputs (both may return None). `progress`: a
        bar advanced once per layer."""
        from trtlab.core.ort_session import ort_session

        check_images(images)
        live = {self.input_name: images}
        last_read = {}
        for k, segment in enumerate(self.segments):
            for name in segment.inputs:
                last_read[name] = k
        for k, segment in enumerate(self.segments):
            if segment.layer is not None and before is not None:
                segment.replaced = dict(before(segment.layer, live) or {})
            session = ort_session(self.segment_model(segment), optimization="disable")
            values = _run_session(session, {name: live[name] for name in segment.inputs}, segment.outputs, rows,
                                  fixed_batch)
            del session
            produced = dict(zip(segment.outputs, values))
            if segment.layer is not None:
                if after is not None:
                    produced.update(after(segment.layer, live, produced) or {})
                if progress is not None:
                    progress.update(1)
            live.update(produced)
            for name in [n for n in live if last_read.get(n, -1) <= k and n not in self.output_names]:
                del live[name]
        return {name: live[name] for name in self.output_names}


def _run_session(session, inputs: dict[str, np.ndarray], outputs: list[str], rows: int,
                 fixed_batch: int | None) -> list[np.ndarray]:
    """Run `session` over the leading axis of `inputs` in chunks of `rows` (each padded to `fixed_batch` when the
    model takes a fixed batch) and join the outputs."""
    count = len(next(iter(inputs.values())))
    step = fixed_batch or rows
    parts: list[list[np.ndarray]] = [[] for _ in outputs]
    for start in range(0, count, step):
        feed = {name: value[start:start + step] for name, value in inputs.items()}
        taken = len(next(iter(feed.values())))
        if fixed_batch and taken < fixed_batch:
            feed = {name: np.concatenate([v, np.repeat(v[-1:], fixed_batch - taken, axis=0)]) for name, v in
                    feed.items()}
        for part, value in zip(parts, session.run(outputs, feed)):
            part.append(value[:taken])
    return [np.concatenate(part) for part in parts]


def check_images(images: np.ndarray) -> None:
    if images.ndim < 2 or len(images) == 0:
        raise UserValueError("recovery needs calibration images", "calibrate on at least 2 images")
