"""Where TensorRT will compute each node of an ONNX graph, predicted without a GPU: fused layers, their precision,
the share of multiply-accumulates (MACs) per precision, FP32 islands, unfused Q/DQ and precision boundaries.

`precision_report(onnx_path)` reads the exact graph TensorRT would receive (a variant's model.onnx) and applies the
rules TensorRT's developer guide documents for explicitly quantized, strongly typed networks (Explicit
Quantization); each rule is cited where the code applies it:

1. Quantized weights: "When TensorRT builds an engine, it quantizes high-precision weights using the IQuantizeLayer
   scale" — a Q (or Q → DQ) on a constant is folded at build time: never a kernel, never "unfused" (ModelOpt's FP16
   weights + Q + DQ, QAT exports); trtlab's INT8 weights + DQ likewise.
2. Q/DQ propagation ("DQ forward-propagation and Q backward-propagation"): DQ moves forward and Q backward through
   layers that commute with them (MaxPool, Reshape/Flatten/Transpose/Squeeze/Unsqueeze, Identity). DQ → MaxPool →
   Q is one INT8 layer (requantizing when the scales differ); a Q after a Concat moves to each of its inputs. A
   MaxPool is INT8 only when a DQ reaches it or its Q is absorbed upstream — otherwise it runs float and its Q is
   unfused: one consistent story per MaxPool.
3. Weighted layers ("Fuse Q/DQ with weighted node": [DQ(activation), DQ(weight)] → Conv/Gemm/MatMul → Q): a Conv,
   ConvTranspose, Gemm or MatMul whose data and weight inputs are both dequantized INT8 computes in INT8. Its
   epilogue fuses into it ("Types of Fusions": Convolution and ReLU / Clip / GELU activation, Convolution and
   Scale, Convolution and ElementWise Operation): bias, BatchNormalization, Add/Mul/Sub/Div by a constant,
   activations (Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Elu, Selu, Softplus, Gelu, and
   x·Sigmoid(x)), and one residual Add/Sum — into ONE convolution: with two convolutions feeding the Add, the first
   in graph order takes it and the other's output is read as the residual input (which one TensorRT picks is not
   documented; the MACs and precisions do not depend on it). A trailing Q (every reader of the epilogue's output a
   Q, possibly after commuting ops) fuses too and the layer writes INT8 — unless the residual input is float: "the
   precision of the residual input determines the precision of the fused output" (Q/DQ Layer-Placement
   Recommendations), and then the Q stays a layer of its own.
4. Non-weighted quantizable layers ("Fuse Q/DQ with non-weighted node": DQ → op → Q): an AveragePool,
   GlobalAveragePool, element-wise Add/Sum/Mul/Sub/Max/Min or a Concat whose float inputs are all dequantized INT8
   and whose output only Q reads computes in INT8. "Non-weighted layers with INT8 inputs also need INT8 outputs":
   with a float reader, the DQ stays a layer. A spatial ReduceMean is replaced by a pooling layer ("Types of
   Fusions": Reduce, documented for float networks); that the pooling then takes the INT8 fusion is NOT documented,
   so such a layer is marked "undocumented / assumed" (`Layer.assumed`, `PrecisionReport.assumptions`).
5. A DQ feeding a Concat whose other inputs are float cannot propagate past it: the Concat runs float and the DQ is
   a precision boundary. TensorRT builds a Concat by having its producers write into its output, so the DQ writes
   there instead of a copy — listed as a boundary, marked assumed, not counted as an unfused Q/DQ.
6. Everything else computes in the type the graph gives it (strongly typed networks): FP16 or FP32. A Cast is a
   precision boundary; a Q/DQ that no layer absorbs is unfused (its own kernel, inside the network); the Q that
   quantizes the graph's input is always a layer of its own and listed apart.

MACs come from the shapes ONNX shape inference gives with the batch set to 1: Conv N·Cout·H·W·(Cin/groups)·kh·kw,
ConvTranspose N·Cin·H·W·(Cout/groups)·kh·kw, Gemm / MatMul M·N·K (per image); each layer also records the elements
it reads, its weights and what it writes (per image), which trtlab.graph.roofline turns into a per-GPU estimate.

What a graph cannot tell (so neither can this report): the tactic TensorRT times fastest, its reformat layers
(e.g. NCHW ↔ NC/32HW32 for INT8 convolutions), whether an allowed fusion is taken on a given GPU (kernel
availability, PointWise fusion, Myelin regions), and latency — only a built engine's inspector / profiler show those.
"""
from __future__ import annotations

import json
import math
import os

from trtlab.graph.fusion_report import LIMITS, Layer, PrecisionReport, precision_overview  # noqa: F401 (API)
from trtlab.graph.guards import WEIGHTED_OPS
from trtlab.graph.onnx_utils import attribute, is_average_pool, types_and_shapes
from trtlab.graph.precision_rewrite import METADATA_KEY as PRECISION_RECORD_KEY  # the precision converter's record

COMMUTING = frozenset({"MaxPool", "GlobalMaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
                       "Identity"})
ACTIVATIONS = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu",
                         "Softplus", "Gelu", "PRelu"})
SCALE_OPS = frozenset({"Add", "Sub", "Mul", "Div"})
ELEMENTWISE_INT8 = frozenset({"Add", "Sum", "Mul", "Sub", "Max", "Min", "Concat"})
NO_COMPUTE = frozenset({"Shape", "Constant", "ConstantOfShape", "Gather", "Unsqueeze", "Squeeze", "Reshape",
                        "Flatten", "Transpose", "Identity", "Concat", "Slice", "Size", "Range", "Expand"})


def precision_report(onnx_path, name: str | None = None) -> PrecisionReport:
    """The fusion-aware prediction for the graph at `onnx_path` (or a ModelProto); see the module docstring."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False) if isinstance(onnx_path, (str, os.PathLike)) \
        else onnx_path
    if name is None and isinstance(onnx_path, (str, os.PathLike)):
        path = os.fspath(onnx_path)  # a variant's model.onnx is named by its folder (label-key)
        name = os.path.basename(os.path.dirname(path)) if os.path.basename(path) == "model.onnx" else path
    label = name or model.graph.name
    return _Predictor(model, label).run()


class _Predictor:
    """One pass over a graph: Q/DQ propagation, weighted-layer chains, quantizable ops, the rest by type."""

    def __init__(self, model, label: str):
        self.model, self.label = model, label
        graph = model.graph
        self.nodes = list(graph.node)
        self.inits = {i.name: i for i in graph.initializer}
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.readers: dict[str, list] = {}
        for node in self.nodes:
            for index, name in enumerate(node.input):
                if name:
                    self.readers.setdefault(name, []).append((node, index))
        self.graph_inputs = {i.name for i in graph.input if i.name not in self.inits}
        self.graph_outputs = {o.name for o in graph.output}
        self.types, self.shapes = types_and_shapes(model)
        self.layer_of: dict[str, Layer] = {}  # node name → its layer
        self.layers: list[Layer] = []
        self.notes: dict[str, str] = {}
        self._int8: dict[str, bool] = {}
        self.folded: list[str] = []  # weight Qs TensorRT applies when it builds the engine

    # -- propagation -------------------------------------------------------------------------------------------------
    def int8_data(self, tensor: str) -> bool:
        """A dequantized INT8 tensor: a DQ's output, or the output of a commuting op on one (DQ forward)."""
        if tensor not in self._int8:
            node = self.producer.get(tensor)
            self._int8[tensor] = node is not None and (
                node.op_type == "DequantizeLinear"
                or (node.op_type in COMMUTING and self.int8_data(node.input[0])))
        return self._int8[tensor]

    def q_readers(self, tensor: str) -> tuple[list, list] | None:
        """(Q nodes, commuting nodes) when every reader of `tensor` is a Q, directly or after commuting ops (Q
        backward propagation); None when some reader needs the float value (or the tensor is a graph output)."""
        readers = self.readers.get(tensor, [])
        if not readers or tensor in self.graph_outputs:
            return None
        quantizers, commuting = [], []
        for node, index in readers:
            if node.op_type == "QuantizeLinear" and index == 0:
                quantizers.append(node)
            elif (node.op_type in COMMUTING and index == 0 or node.op_type == "Concat") \
                    and (below := self.q_readers(node.output[0])) is not None:
                commuting += [node] + below[1]
                quantizers += below[0]
            else:
                return None
        return quantizers, commuting

    def int8_readers_only(self, tensor: str) -> bool:
        """Every reader of `tensor` (after commuting ops) is a layer computing in INT8, or a Q (requantization)."""
        readers = self.readers.get(tensor, [])
        if not readers or tensor in self.graph_outputs:
            return False
        for node, _ in readers:
            layer = self.layer_of.get(node.name)
            if node.op_type in COMMUTING:
                # a commuting op that absorbed its Q reads INT8; otherwise the DQ moves past it (DQ forward
                # propagation) and its readers decide
                if layer is not None and len(layer.nodes) > 1 or self.int8_readers_only(node.output[0]):
                    continue
                return False
            if layer is not None and layer.computes_in == "INT8" or node.op_type == "QuantizeLinear":
                continue
            return False
        return True

    def scale_of(self, tensor: str) -> float | None:
        """The per-tensor scale of a Q's input or of dequantized INT8 data (through commuting ops)."""
        node = self.producer.get(tensor)
        while node is not None and node.op_type in COMMUTING:
            node = self.producer.get(node.input[0])
        return self._scalar(node.input[1]) if node is not None and node.op_type == "DequantizeLinear" else None

    def _scalar(self, name: str) -> float | None:
        """A per-tensor scale's value (None for per-channel or computed scales)."""
        from onnx import numpy_helper

        values = numpy_helper.to_array(self.inits[name]) if name in self.inits else None
        return float(values) if values is not None and values.size == 1 else None

    def float_type(self, tensor: str) -> str:
        return {1: "FP32", 10: "FP16", 16: "BF16", 3: "INT8"}.get(self.types.get(tensor), "-")

    # -- layers ------------------------------------------------------------------------------------------------------
    def add_layer(self, layer: Layer) -> None:
        self.layers.append(layer)
        for name in layer.nodes:
            self.layer_of.setdefault(name, layer)

    def run(self) -> PrecisionReport:
        for node in self.nodes:
            if node.op_type in WEIGHTED_OPS and node.name not in self.layer_of:
                self.weighted_layer(node)
        for node in self.nodes:
            if node.name not in self.layer_of and node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
                self.other_layer(node)
        for node in self.nodes:
            if node.name not in self.layer_of:
                self.qdq_layer(node)
        self.count_elements()
        return self.report()

    def weighted_layer(self, node) -> None:
        int8 = all(self.int8_data(name) for name in node.input[:2] if name)
        chain, end, residual = self.epilogue(node)
        residual_int8 = None if residual is None else self.int8_data(residual)
        computes = "INT8" if int8 else self.float_type(node.output[0])
        found = self.q_readers(end) if int8 and residual_int8 is not False else None
        nodes = [node.name] + [n.name for n in chain]
        notes = []
        if residual is not None:
            source = self.producer.get(self._through_casts(residual))
            # "TensorRT can fuse element-wise addition following weighted layers" — into one of them; the Add's other
            # input is read as the residual (Q/DQ Layer-Placement Recommendations, "Quantize the residual input")
            notes.append(f"residual Add fused (residual input from {source.name if source else residual})")
        if found:
            nodes += [q.name for q in found[0]]
            output = "INT8"
        else:
            output = self.float_type(end)
            if int8 and residual_int8 is False:
                # "The precision of the residual input determines the precision of the fused output"
                notes.append("float residual input: the fused output stays float")
        self.add_layer(Layer(node.name, node.op_type, nodes, computes, output, self.macs(node), "; ".join(notes)))
        for op in (found[1] if found else []):
            self.commuted(op, "its Q moved before it (commutes): runs on INT8 data")

    def commuted(self, node, note: str) -> None:
        if node.name not in self.layer_of:
            self.add_layer(Layer(node.name, node.op_type, [node.name], "INT8" if node.op_type.endswith("Pool")
                                 else "-", "INT8", 0, note))

    def epilogue(self, node):
        """Nodes TensorRT fuses after a weighted node, the tensor they end on, and the residual input of the fused
        Add (None: no residual)."""
        chain, tensor, residual = [], node.output[0], None
        while True:
            readers = self.readers.get(tensor, [])
            if tensor in self.graph_outputs or not readers:
                return chain, tensor, residual
            if len(readers) == 2 and {r.op_type for r, _ in readers} == {"Sigmoid", "Mul"}:  # x · Sigmoid(x)
                sig = next(r for r, _ in readers if r.op_type == "Sigmoid")
                mul = next(r for r, _ in readers if r.op_type == "Mul")
                if sig.output[0] in mul.input and len(self.readers.get(sig.output[0], [])) == 1:
                    chain += [sig, mul]
                    tensor = mul.output[0]
                    continue
            if len(readers) != 1:
                return chain, tensor, residual
            reader, index = readers[0]
            others = [n for i, n in enumerate(reader.input) if i != index and n]
            constant = all(self._constant(n) for n in others)
            if reader.op_type in ACTIVATIONS or reader.op_type == "BatchNormalization" and index == 0 \
                    or reader.op_type in SCALE_OPS and constant:
                pass
            elif reader.op_type in ("Add", "Sum") and len(others) == 1 and residual is None \
                    and reader.name not in self.layer_of:  # an Add fuses into one convolution only
                residual = others[0]
            else:
                return chain, tensor, residual
            chain.append(reader)
            tensor = reader.output[0]

    def _constant(self, name: str) -> bool:
        """A constant input: an initializer, a Constant's output, or a weight through Cast / Q / DQ (TensorRT folds
        them when it builds the engine)."""
        node = self.producer.get(name)
        if name in self.inits:
            return True
        if node is None:
            return False
        if node.op_type in ("DequantizeLinear", "QuantizeLinear", "Cast"):
            return self._constant(node.input[0])
        return node.op_type == "Constant"

    def other_layer(self, node) -> None:
        floats = [n for n in node.input if n and not self._constant(n)
                  and self.float_type(n) in ("FP16", "FP32", "BF16")]
        out = node.output[0] if node.output else ""
        if node.op_type in COMMUTING and floats[:1] and self.int8_data(floats[0]):
            found = self.q_readers(out)
            if found:  # DQ → MaxPool → Q: the DQ propagates forward, the Q backward; both fuse with the op
                self.add_layer(Layer(node.name, node.op_type, [node.name] + [q.name for q in found[0]],
                                     "INT8" if node.op_type.endswith("Pool") else "-", "INT8", 0,
                                     "DQ → op → Q: commutes with Q/DQ, runs on INT8 data"
                                     + self._requantizes(floats, found[0])))
                for op in found[1]:
                    self.commuted(op, "its Q moved before it (commutes): runs on INT8 data")
                return
            self.commuted(node, "commutes with Q/DQ: runs on INT8 data (its DQ moves after it)")
            return
        average_pool = is_average_pool(node, self.inits, lambda t: len(self.shapes.get(t) or []) or None)
        quantizable = average_pool or node.op_type in ELEMENTWISE_INT8
        if quantizable and floats and all(self.int8_data(n) for n in floats):
            found = self.q_readers(out)
            if found:
                # "Fuse Q/DQ with non-weighted node" (DQ → AveragePool / element-wise → Q, developer guide figure 1)
                assumed = ("a spatial ReduceMean becomes a pooling layer ('Types of Fusions': Reduce, documented "
                           "for float networks); that this pooling then takes the DQ → pool → Q INT8 fusion is not "
                           "documented") if node.op_type == "ReduceMean" else ""
                self.add_layer(Layer(node.name, node.op_type, [node.name] + [q.name for q in found[0]], "INT8",
                                     "INT8", 0, "DQ → op → Q fused" + (self._requantizes(floats, found[0])
                                                                        if node.op_type == "Concat" else ""), assumed))
                for op in found[1]:
                    self.commuted(op, "its Q moved before it (commutes): runs on INT8 data")
                return
            # "Non-weighted layers with INT8 inputs also need INT8 outputs": a float reader leaves the DQs as layers
            self.notes[node.name] = "INT8 inputs but a float reader: its DQs stay layers of their own"
        if node.op_type == "Cast":
            self.add_layer(Layer(node.name, "Cast", [node.name], self.float_type(out), self.float_type(out)))
            return
        computes = "-" if node.op_type in NO_COMPUTE or self.float_type(out) == "-" else self.float_type(out)
        self.add_layer(Layer(node.name, node.op_type, [node.name], computes, self.float_type(out), self.macs(node),
                             self.notes.get(node.name, "")))

    def _requantizes(self, inputs: list, quantizers: list) -> str:
        scales = {self.scale_of(n) for n in inputs} | {self.scale_of(q.output[0]) for q in quantizers}
        return "; input and output scales differ: requantizes" if len(scales) > 1 else ""

    def qdq_layer(self, node) -> None:
        """A Q or DQ no layer absorbed: a weight's, the input quantization, a DQ into a float Concat, or unfused."""
        if self._constant(node.input[0]):
            # "When TensorRT builds an engine, it quantizes high-precision weights using the IQuantizeLayer scale
            # ... The quantized weights are stored in the engine plan file" (Explicit Quantization → Quantized
            # Weights): a Q/DQ on a constant is folded at build time, never a kernel.
            target = self._weight_user(node)
            if target is not None and target.computes_in == "INT8":
                target.nodes.append(node.name)
                self.layer_of[node.name] = target
                if node.op_type == "QuantizeLinear":
                    self.folded.append(node.name)
                return
            self.add_layer(Layer(node.name, "Quantize" if node.op_type == "QuantizeLinear" else "Dequantize",
                                 [node.name], "-", self.float_type(node.output[0]), 0,
                                 "weight: folded when the engine is built" + (" (its layer runs float)"
                                                                               if target is not None else "")))
            if node.op_type == "QuantizeLinear":
                self.folded.append(node.name)
            return
        if node.op_type == "DequantizeLinear":
            readers = [r for r, _ in self.readers.get(node.output[0], [])]
            if self.int8_readers_only(node.output[0]):  # absorbed by the INT8 layers reading it
                target = next((self.layer_of[r.name] for r in readers if r.name in self.layer_of), None)
                if target is not None:
                    target.nodes.append(node.name)
                    self.layer_of[node.name] = target
                    return
            floats = sorted(self._float_readers(node.output[0]))
            if floats == ["Concat"]:
                # The Concat's other inputs are float, so the DQ cannot propagate past it: the DQ is the precision
                # boundary and the Concat runs in float. TensorRT builds a Concat by having its producers write into
                # the output (concat elimination), so the DQ's write replaces a copy — a boundary, not an extra
                # kernel on the way; not documented for Q/DQ networks, hence marked.
                self.add_layer(Layer(node.name, "Dequantize", [node.name], self.float_type(node.output[0]),
                                     self.float_type(node.output[0]), 0,
                                     "INT8 → float boundary into a Concat with float inputs (the Concat runs float)",
                                     "the DQ writes straight into the Concat's output (concat elimination)"))
                return
            kind, note = "Dequantize", "unfused: read by a float layer (" + ", ".join(floats) + ")"
        else:
            source = self._through_casts(node.input[0])
            producer = self.producer.get(source)
            if self.int8_data(node.input[0]):  # DQ (moved forward through commuting ops) → Q: INT8 stays INT8
                same = self.scale_of(node.input[0]) == self._scalar(node.input[1])
                self.add_layer(Layer(node.name, "Quantize", [node.name], "-", "INT8", 0,
                                     "DQ → Q on INT8 data: " + ("one scale, cancels" if same else "requantizes"),
                                     "a DQ → Q pair " + ("with one scale is removed" if same else
                                                         "is an INT8 → INT8 rescale, not a float Quantize")))
                return
            kind, note = ("Quantize", "quantizes the graph input") if source in self.graph_inputs else \
                ("Quantize", f"unfused: its producer ({producer.op_type if producer else '?'}) is a float layer — "
                             f"a Quantize kernel, or at best part of a PointWise kernel")
        self.add_layer(Layer(node.name, kind, [node.name], self.float_type(node.input[0]) if kind == "Quantize"
                             else self.float_type(node.output[0]), "INT8" if kind == "Quantize" else
                             self.float_type(node.output[0]), 0, note))

    def _float_readers(self, tensor: str) -> set:
        """Op types of the readers that need `tensor` as float (through commuting ops the DQ moves past)."""
        found = set()
        for reader, _ in self.readers.get(tensor, []):
            layer = self.layer_of.get(reader.name)
            if reader.op_type in COMMUTING and not (layer is not None and len(layer.nodes) > 1):
                found |= self._float_readers(reader.output[0])
            elif reader.op_type != "QuantizeLinear" and (layer is None or layer.computes_in != "INT8"):
                found.add(reader.op_type)
        return found or ({"graph output"} if tensor in self.graph_outputs else set())

    def _weight_user(self, node):
        """The layer of the weighted node a weight's Q/DQ chain feeds (None when no layer reads it)."""
        tensor = node.output[0]
        while True:
            readers = self.readers.get(tensor, [])
            if len(readers) != 1:
                return next((self.layer_of[r.name] for r, _ in readers if r.name in self.layer_of), None)
            reader = readers[0][0]
            if reader.op_type not in ("QuantizeLinear", "DequantizeLinear", "Cast") or reader.name in self.layer_of:
                return self.layer_of.get(reader.name)
            tensor = reader.output[0]

    def _through_casts(self, tensor: str) -> str:
        node = self.producer.get(tensor)
        while node is not None and node.op_type == "Cast":
            tensor = node.input[0]
            node = self.producer.get(tensor)
        return tensor

    def count_elements(self) -> None:
        """Per layer and image, the elements it reads, its weights and what it writes (the roofline's bytes)."""
        by_name = {n.name: n for n in self.nodes}
        def size(tensor: str) -> int:  # elements per image; 0 when shape inference left a dimension unknown
            shape = self.shapes.get(tensor)
            return math.prod(shape) if shape and None not in shape else 0

        for layer in self.layers:
            nodes = [by_name[n] for n in dict.fromkeys(layer.nodes) if n in by_name]
            own = {o for n in nodes if n.op_type != "QuantizeLinear" for o in n.output}
            # a Q moved here from after a commuting op or a Concat quantizes what this layer writes: it adds no
            # tensor of its own (its input is not this layer's, its output is shared with the other producers)
            nodes = [n for n in nodes if n.op_type != "QuantizeLinear" or n.input[0] in own or not own]
            inside = {o for n in nodes for o in n.output}
            reads = {t for n in nodes for t in n.input if t and t not in inside and not self._constant(t)}
            weights = {t for n in nodes if n.op_type in WEIGHTED_OPS for t in n.input[1:3] if t and self._constant(t)}
            members = set(layer.nodes)
            writes = {t for t in inside if t in self.graph_outputs
                      or any(r.name not in members for r, _ in self.readers.get(t, []))}
            layer.elements = {"in": sum(map(size, reads)), "weights": sum(map(size, weights)),
                              "out": sum(map(size, writes))}

    # -- MACs ----------------------------------------------------------------------------------------------------------
    def macs(self, node) -> int:
        """Multiply-accumulates per image of a weighted node (0 for other nodes or unknown shapes)."""
        if node.op_type not in WEIGHTED_OPS:
            return 0
        out = self.shapes.get(node.output[0])
        weight = self.shapes.get(node.input[1]) if len(node.input) > 1 else None
        data = self.shapes.get(node.input[0])
        if not out or not weight or None in out or None in weight or not data or None in data:
            return 0
        prod = lambda dims: int(math.prod(dims))  # noqa: E731
        if node.op_type == "Conv":
            return prod(out) * prod(weight[1:])
        if node.op_type == "ConvTranspose":
            return prod(data) * prod(weight[1:])
        k = data[-2] if node.op_type == "Gemm" and attribute(node, "transA", 0) else data[-1]
        return prod(out) * int(k)

    # -- the report ------------------------------------------------------------------------------------------------
    def report(self) -> PrecisionReport:
        import pandas as pd

        rows = []
        for node in self.nodes:
            layer = self.layer_of[node.name]
            rows.append({"node": node.name, "op": node.op_type, "layer": layer.name, "computes in": layer.computes_in,
                         "writes": layer.output, "MACs": layer.macs if layer.name == node.name else 0,
                         "note": layer.note if layer.name == node.name else f"fused into {layer.name}"})
        macs: dict[str, int] = {}
        for layer in self.layers:
            if layer.kind in WEIGHTED_OPS:
                macs[layer.computes_in] = macs.get(layer.computes_in, 0) + layer.macs
        total = sum(macs.values())
        share = {k: macs.get(k, 0) / total if total else 0.0 for k in ("INT8", "FP16", "FP32")}
        guarded = self._guarded_fp32()
        return PrecisionReport(
            self.label, self.layers, pd.DataFrame(rows), share, total, self._fp32_islands(guarded),
            [{"node": l.name, "op": l.kind, "why": l.note} for l in self.layers if l.note.startswith("unfused")],
            [l.name for l in self.layers if l.note == "quantizes the graph input"], self._casts(), guarded,
            list(self.folded))

    def _guarded_fp32(self) -> list:
        record = next((p.value for p in self.model.metadata_props if p.key == PRECISION_RECORD_KEY), None)
        if not record:
            return []
        return [name for name, precision in json.loads(record).get("guards", []) if precision == "fp32"]

    def _fp32_islands(self, guarded: list) -> list:
        """Connected groups of layers that compute in FP32 (Casts and data movement left out)."""
        fp32 = {l.name: l for l in self.layers if l.computes_in == "FP32" and l.kind not in ("Cast", "Quantize",
                                                                                            "Dequantize")}
        parent = {name: name for name in fp32}
        by_name = {n.name: n for n in self.nodes}

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for layer in fp32.values():
            for name in layer.nodes:
                node = by_name.get(name)
                for tensor in (node.input if node is not None else []):
                    source = self.producer.get(tensor)
                    other = self.layer_of.get(source.name) if source is not None else None
                    if other is not None and other.name in fp32 and other.name != layer.name:
                        parent[find(other.name)] = find(layer.name)
        groups: dict[str, list] = {}
        for name in fp32:
            groups.setdefault(find(name), []).append(name)
        return [{"nodes": names, "macs": sum(fp32[n].macs for n in names),
                 "guarded": all(n in set(guarded) for n in names)} for names in groups.values()]

    def _casts(self) -> list:
        casts, by_name = [], {n.name: n for n in self.nodes}
        for layer in self.layers:
            if layer.kind != "Cast":
                continue
            node = by_name[layer.name]
            source = self.float_type(node.input[0])
            where = ("graph input" if node.input[0] in self.graph_inputs else
                     "graph output" if node.output[0] in self.graph_outputs else "between precision regions")
            casts.append({"node": node.name, "from": source, "to": layer.output, "where": where})
        return casts
