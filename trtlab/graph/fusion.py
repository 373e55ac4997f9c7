"""Where TensorRT will compute each node of an ONNX graph, predicted without a GPU: fused layers, their precision,
the share of multiply-accumulates (MACs) per precision, FP32 islands, unfused Q/DQ and precision boundaries.

`precision_report(onnx_path)` reads the exact graph TensorRT would receive (a variant's model.onnx) and applies the
rules TensorRT's developer guide documents for explicitly quantized, strongly typed networks (Explicit
Quantization) and its ONNX parser's import of each op; each rule is cited where the code applies it (the sentences
in trtlab.graph.fusion_rules):

0. UINT8 Q/DQ (an asymmetric quantizer's output): ONNX-TensorRT supports UINT8 only as a network input or output and
   refuses such a Q/DQ node, so it is reported as unsupported by TensorRT (`PrecisionReport.unsupported_qdq`), never
   INT8; the layers reading it compute in the graph's float type. A Q without zero point is INT8 for TensorRT.
1. Quantized weights: "When TensorRT builds an engine, it quantizes high-precision weights using the IQuantizeLayer
   scale" — a Q (or Q → DQ) on a constant is folded at build time: never a kernel, never "unfused" (ModelOpt's FP16
   weights + Q + DQ, QAT exports); trtlab's INT8 weights + DQ likewise.
2. Q/DQ propagation ("DQ forward-propagation and Q backward-propagation"): DQ moves forward and Q backward through
   layers that commute with them (MaxPool, Reshape/Flatten/Transpose/Squeeze/Unsqueeze, Identity). DQ → MaxPool →
   Q is one INT8 layer, requantizing only when the DQ's and the Q's scale values differ (FP16 or FP32 constants;
   TensorRT compares scales for equality before it moves a Q). A MaxPool is INT8 only when a DQ reaches it or its Q
   is absorbed upstream — otherwise it runs float and its Q is unfused: one consistent story per MaxPool. A Q after
   a Concat moves to each of its inputs: a producer fuses it and writes INT8 into the Concat's output, a DQ meets it
   (a DQ → Q pair on INT8 data: one scale cancels, two requantize; marked assumed), a float producer keeps it as an
   unfused Quantize on that input.
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
   element-wise Add/Sum/Mul/Sub/Max/Min or a Concat whose float inputs are all dequantized INT8 and whose output
   only Q reads computes in INT8. "Non-weighted layers with INT8 inputs also need INT8 outputs": with a float reader,
   the DQ stays a layer. GlobalAveragePool and a spatial ReduceMean are one case: ONNX-TensorRT imports both as a
   Reduce layer, while the guide's quantizable pool is AveragePool (a Pooling layer); both are predicted INT8 and
   marked "undocumented / assumed" alike (`Layer.assumed`, `PrecisionReport.assumptions`), as is GlobalMaxPool
   (a Reduce too) commuting like MaxPool.
5. A DQ feeding a Concat that a float layer reads (so no Q moves back to it) cannot propagate past it: the Concat
   runs float and the DQ is a precision boundary. TensorRT builds a Concat by having its producers write into its
   output, so the DQ writes there instead of a copy — listed as a boundary, marked assumed, not counted as unfused.
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

import os

from trtlab.graph.fusion_report import LIMITS, Layer, PrecisionReport, precision_overview  # noqa: F401 (API)
from trtlab.graph.fusion_rules import (ACTIVATIONS, COMMUTING, ELEMENTWISE_INT8, NO_COMPUTE, SCALE_OPS, UINT8_NOTE,
                                       is_uint8_qdq, reduce_assumption, same_scales)
from trtlab.graph.fusion_tally import LayerTally
from trtlab.graph.guards import WEIGHTED_OPS
from trtlab.graph.onnx_utils import is_average_pool, types_and_shapes


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


class _Predictor(LayerTally):
    """One pass over a graph: Q/DQ propagation, weighted-layer chains, quantizable ops, the rest by type (MACs,
    elements and the report: fusion_tally.LayerTally)."""

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
        self.uint8 = {n.name for n in self.nodes if is_uint8_qdq(n, self.types, self.producer)}
        self.moved_q: dict[str, str] = {}  # layer of a Q moved before a Concat's float input → that input

    # -- propagation -------------------------------------------------------------------------------------------------
    def int8_data(self, tensor: str) -> bool:
        """A dequantized INT8 tensor: a DQ's output, or the output of a commuting op on one (DQ forward)."""
        if tensor not in self._int8:
            node = self.producer.get(tensor)
            self._int8[tensor] = node is not None and (
                node.op_type == "DequantizeLinear" and node.name not in self.uint8
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
            if node.op_type == "QuantizeLinear" and index == 0 and node.name not in self.uint8:
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
            if layer is not None and layer.computes_in == "INT8" or self.is_int8_q(node) or self.q_concat(node):
                continue
            return False
        return True

    def is_int8_q(self, node) -> bool:
        return node.op_type == "QuantizeLinear" and node.name not in self.uint8

    def q_concat(self, node) -> bool:
        """A Concat whose output only Qs read: Q backward propagation moves the Q to each of its inputs."""
        return node.op_type == "Concat" and self.q_readers(node.output[0]) is not None

    def dq_scale(self, tensor: str) -> str | None:
        """The scale (initializer name) of the DQ that dequantized `tensor` (through commuting ops), or None."""
        node = self._through(tensor, COMMUTING)
        return node.input[1] if node is not None and node.op_type == "DequantizeLinear" else None

    def one_scale(self, scales: list) -> bool | None:
        """Whether the scales named are one (their constant values, FP16 or FP32); None when one cannot be read."""
        return None if None in scales else same_scales(scales, self.inits)

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
        self.moved_quantizes()
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
                                 else "-", "INT8", 0, note, reduce_assumption(node.op_type)))

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
                                     + self._requantizes(floats, found[0]), reduce_assumption(node.op_type)))
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
                # "Fuse Q/DQ with non-weighted node" (DQ → AveragePool / element-wise → Q, the guide's figure 1);
                # GlobalAveragePool and ReduceMean are Reduce layers in TensorRT: assumed alike (fusion_rules)
                self.add_layer(Layer(node.name, node.op_type, [node.name] + [q.name for q in found[0]], "INT8",
                                     "INT8", 0, "DQ → op → Q fused" + (self._requantizes(floats, found[0])
                                                                        if node.op_type == "Concat" else ""),
                                     reduce_assumption(node.op_type)))
                for op in found[1]:
                    self.commuted(op, "its Q moved before it (commutes): runs on INT8 data")
                return
            # "Non-weighted layers with INT8 inputs also need INT8 outputs": a float reader leaves the DQs as layers
            self.notes[node.name] = "INT8 inputs but a float reader: its DQs stay layers of their own"
        if node.op_type == "Concat" and floats and (found := self.q_readers(out)):
            # Q backward propagation moves its Q to each input (a DQ meets it: qdq_layer; a float producer keeps
            # it: moved_quantizes); every producer writes INT8 into its output (concat elimination)
            self.add_layer(Layer(node.name, node.op_type, [node.name], "-", "INT8", 0,
                                 "its Q moves to each input (Q backward propagation): the producers write INT8"))
            for op in found[1]:
                self.commuted(op, "its Q moved before it (commutes): runs on INT8 data")
            return
        if node.op_type == "Cast":
            self.add_layer(Layer(node.name, "Cast", [node.name], self.float_type(out), self.float_type(out)))
            return
        computes = "-" if node.op_type in NO_COMPUTE or self.float_type(out) == "-" else self.float_type(out)
        self.add_layer(Layer(node.name, node.op_type, [node.name], computes, self.float_type(out), self.macs(node),
                             self.notes.get(node.name, "")))

    def moved_quantizes(self) -> None:
        """For each Concat that only Qs read, the copy of its Q that Q backward propagation moves before a float
        producer's input: a Quantize kernel of its own on that input (an INT8 producer fuses it, a DQ meets it)."""
        for node in self.nodes:
            if not self.q_concat(node):
                continue
            quantize = self.q_readers(node.output[0])[0][0]
            for tensor in dict.fromkeys(node.input):
                source = self.producer.get(tensor)
                writer = self.layer_of.get(source.name) if source is not None else None
                if not tensor or self._constant(tensor) or self.int8_data(tensor) \
                        or writer is not None and writer.output == "INT8":
                    continue
                what = f"its producer ({source.op_type})" if source is not None else "the graph input it reads"
                moved = Layer(f"{quantize.name}@{tensor}", "Quantize", [quantize.name], self.float_type(tensor),
                              "INT8", 0, f"unfused: moved before {node.name} (Q backward propagation); {what} is "
                                         f"a float layer")
                self.add_layer(moved)
                self.moved_q[moved.name] = tensor

    def _requantizes(self, inputs: list, quantizers: list) -> str:
        """'' when the DQs' scales into the op and the Qs' after it are one scale (TensorRT compares them for equality
        before it moves a Q: Q/DQ limitations, figure 10), else the note that the layer requantizes."""
        same = self.one_scale([self.dq_scale(n) for n in inputs] + [q.input[1] for q in quantizers])
        return {True: "", False: "; input and output scales differ: requantizes"}.get(same, "")

    def qdq_layer(self, node) -> None:
        """A Q or DQ no layer absorbed: a UINT8 one, a weight's, the input quantization, a DQ → Q pair, a DQ into a
        float Concat, or unfused."""
        if node.name in self.uint8:  # TensorRT has no UINT8 Q/DQ (fusion_rules.UINT8_NOTE): not INT8, not a kernel
            quantize = node.op_type == "QuantizeLinear"
            self.add_layer(Layer(node.name, "Quantize" if quantize else "Dequantize", [node.name],
                                 self.float_type(node.input[0] if quantize else node.output[0]),
                                 "UINT8" if quantize else self.float_type(node.output[0]), 0, UINT8_NOTE))
            return
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
            concats = [r for r in readers if self.q_concat(r)]
            if concats and self.int8_readers_only(node.output[0]):
                # the Q after the Concat moves back to this input (Q backward propagation) and meets this DQ
                quantizers = [q for c in concats for q in self.q_readers(c.output[0])[0]]
                same = self.one_scale([node.input[1]] + [q.input[1] for q in quantizers])
                note, assumed = self._pair(same)
                self.add_layer(Layer(node.name, "Dequantize", [node.name], "-", "INT8", 0,
                                     f"DQ → Q through {', '.join(c.name for c in concats)} (its Q moves to each "
                                     f"input): {note}; the INT8 data goes into the Concat's INT8 output", assumed))
                return
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
            concat = self._through(node.input[0], COMMUTING)
            if concat is not None and self.q_concat(concat):  # moved to the Concat's inputs: moved_quantizes
                self.layer_of[concat.name].nodes.append(node.name)
                self.layer_of[node.name] = self.layer_of[concat.name]
                return
            if self.int8_data(node.input[0]):  # DQ (moved forward through commuting ops) → Q: INT8 stays INT8
                note, assumed = self._pair(self.one_scale([self.dq_scale(node.input[0]), node.input[1]]))
                self.add_layer(Layer(node.name, "Quantize", [node.name], "-", "INT8", 0,
                                     "DQ → Q on INT8 data: " + note, assumed))
                return
            kind, note = ("Quantize", "quantizes the graph input") if source in self.graph_inputs else \
                ("Quantize", f"unfused: its producer ({producer.op_type if producer else '?'}) is a float layer — "
                             f"a Quantize kernel, or at best part of a PointWise kernel")
        self.add_layer(Layer(node.name, kind, [node.name], self.float_type(node.input[0]) if kind == "Quantize"
                             else self.float_type(node.output[0]), "INT8" if kind == "Quantize" else
                             self.float_type(node.output[0]), 0, note))

    @staticmethod
    def _pair(same: bool | None) -> tuple[str, str]:
        """(note, assumption) of a DQ → Q pair on INT8 data: one scale cancels; two are an INT8 → INT8 rescale."""
        if same:
            return "one scale, cancels", "a DQ → Q pair with one scale is removed"
        why = "scales differ" if same is False else "scales not constant"
        return f"{why}: requantizes", "a DQ → Q pair is an INT8 → INT8 rescale, not a float Quantize"

    def _float_readers(self, tensor: str) -> set:
        """Op types of the readers that need `tensor` as float (through commuting ops the DQ moves past)."""
        found = set()
        for reader, _ in self.readers.get(tensor, []):
            layer = self.layer_of.get(reader.name)
            if reader.op_type in COMMUTING and not (layer is not None and len(layer.nodes) > 1):
                found |= self._float_readers(reader.output[0])
            elif not self.is_int8_q(reader) and not self.q_concat(reader) \
                    and (layer is None or layer.computes_in != "INT8"):
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

    def _through(self, tensor: str, ops) -> object:
        """The producer of `tensor`, past the `ops` between (None for a graph input)."""
        node = self.producer.get(tensor)
        while node is not None and node.op_type in ops:
            node = self.producer.get(node.input[0])
        return node

    def _through_casts(self, tensor: str) -> str:
        node = self.producer.get(tensor)
        while node is not None and node.op_type == "Cast":
            tensor = node.input[0]
            node = self.producer.get(tensor)
        return tensor
