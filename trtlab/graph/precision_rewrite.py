"""The rewrite half of the precision converter (trtlab.graph.precision decides; this module only carries out a
`PrecisionPlan`), read like an onnx-graphsurgeon pass: find, insert, clean up, check.

One walk in graph order tracks the type each float tensor has in the new graph. A node reads a tensor directly when
the types agree and through one Cast when they do not — one Cast per (tensor, target type), shared by every consumer —
so neighbouring nodes of one precision exchange tensors without Casts, and a region boundary costs exactly one Cast
per crossing tensor. Float32 initializers read by FP16 nodes become float16 (a `__fp16` copy when FP32 nodes read
them too); Constant / ConstantOfShape payloads and Cast(to=float) targets inside FP16 nodes follow. Graph inputs are
float32 (their FP16 readers get a Cast) and FP16-produced graph outputs are cast back under their original names,
so every runner feeds and reads float32 as before.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.core.errors import UserValueError

FP16_MAX = float(np.finfo(np.float16).max)  # 65504
#: Float inputs that the ONNX spec requires in float32 whatever the data type (op → input indices).
FLOAT32_ONLY_INPUTS = {"Resize": {2}, "Upsample": {1}}
METADATA_KEY = "trtlab.graph.precision"


@dataclass
class FP16Conversion:
    """The rewritten model and what the rewrite did."""

    model: object  # onnx.ModelProto
    fp16_nodes: int  # float-handling nodes now computing in FP16
    fp32_nodes: list[str]  # float-handling nodes kept FP32 (names)
    casts_inserted: int
    initializers_converted: int
    overflowed_values: int  # float32 values beyond FP16's range, clipped to ±65504
    guards: list = field(default_factory=list)  # GuardedNode
    path: Path | None = None
    plan: object = None  # the PrecisionPlan carried out (trtlab.graph.precision)

    def summary(self) -> dict:
        return {
            "fp16_nodes": self.fp16_nodes,
            "fp32_nodes": len(self.fp32_nodes),
            "fp32_node_names": self.fp32_nodes[:20],
            "casts_inserted": self.casts_inserted,
            "initializers_converted": self.initializers_converted,
            "overflowed_values": self.overflowed_values,
        }


def rewrite(model, plan, check: bool = True):
    """Carry out `plan` on `model` (modified in place and returned inside an FP16Conversion)."""
    rewriter = _Rewriter(model, plan)
    for node in list(model.graph.node):
        rewriter.place(node)
    rewriter.keep_outputs_float32()
    rewriter.finish()
    import onnx

    if check:
        onnx.checker.check_model(model)
    # value_info was cleared (types changed): shape inference fills it again (strictly when checking)
    model = onnx.shape_inference.infer_shapes(model, check_type=check, strict_mode=check)
    return FP16Conversion(model, rewriter.fp16_count, rewriter.fp32_names, rewriter.casts, rewriter.converted_inits,
                          rewriter.overflow, list(plan.guarded), plan=plan)


class _Rewriter:
    """State of one rewrite: tensor types so far, the Casts and FP16 initializer copies made, the new node list."""

    def __init__(self, model, plan):
        from onnx import TensorProto

        self.model, self.graph, self.plan = model, model.graph, plan
        self.float_tensors = float32_tensors(model)
        self.initializers = {init.name: init for init in self.graph.initializer}
        # Current type of every float tensor in the rewritten graph: graph inputs start float32.
        self.tensor_type = {i.name: TensorProto.FLOAT for i in self.graph.input if i.name in self.float_tensors}
        self.casts_made: dict[tuple[str, int], str] = {}
        self.fp16_copies: dict[str, str] = {}
        self.new_nodes: list = []
        self.casts = self.fp16_count = self.overflow = self.converted_inits = 0
        self.fp32_names: list[str] = []
        # initializer → {True if read as FP16, False if read as FP32}: decides between converting and copying
        self.init_readers: dict[str, set] = {}
        for node in self.graph.node:
            for index, name in enumerate(node.input):
                if name in self.initializers:
                    self.init_readers.setdefault(name, set()).add(self._wants_fp16(node, index))

    def _wants_fp16(self, node, index: int) -> bool:
        return self.plan.is_fp16(node.name) and index not in FLOAT32_ONLY_INPUTS.get(node.op_type, set())

    def place(self, node) -> None:
        """Append `node` with its float inputs in the type its precision needs."""
        from onnx import TensorProto

        fp16 = self.plan.is_fp16(node.name)
        target = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
        if any(n in self.float_tensors for n in list(node.input) + list(node.output)) \
                or node.op_type in ("Constant", "ConstantOfShape", "Cast"):
            if fp16:
                self.fp16_count += 1
            else:
                self.fp32_names.append(node.name)
        for index, name in enumerate(node.input):
            # A Cast reads any type (casting its input first would make a round trip FP16→FP32→FP16)
            if not name or name not in self.float_tensors or node.op_type == "Cast":
                continue
            want = TensorProto.FLOAT16 if self._wants_fp16(node, index) else TensorProto.FLOAT
            if name in self.initializers and name not in self.tensor_type:
                if want == TensorProto.FLOAT16:
                    node.input[index] = self._fp16_initializer(name)
                continue  # a float32 initializer read as float32: nothing to do
            if self.tensor_type.get(name, TensorProto.FLOAT) != want:
                node.input[index] = self._cast(name, want)
        if fp16:
            convert_payload(node)
        if node.op_type == "Cast":  # its output has the type it casts to, whatever the node's precision
            target = next((a.i for a in node.attribute if a.name == "to"), target)
        for name in node.output:
            if name in self.float_tensors:
                self.tensor_type[name] = target
        self.new_nodes.append(node)

    def _fp16_initializer(self, name: str) -> str:
        from onnx import TensorProto, numpy_helper

        if name in self.fp16_copies:
            return self.fp16_copies[name]
        init = self.initializers[name]
        values = numpy_helper.to_array(init)
        self.overflow += int(np.count_nonzero(np.abs(values) > FP16_MAX))
        half = np.clip(values, -FP16_MAX, FP16_MAX).astype(np.float16)
        shared = self.init_readers.get(name, set()) != {True}  # FP32 readers too: keep the original, add a copy
        new_name = f"{name}__fp16" if shared else name
        new_init = numpy_helper.from_array(half, new_name)
        if shared:
            self.graph.initializer.append(new_init)
        else:
            init.CopyFrom(new_init)
        self.converted_inits += 1
        self.fp16_copies[name] = new_name
        self.tensor_type[new_name] = TensorProto.FLOAT16
        return new_name

    def _cast(self, name: str, target: int) -> str:
        """The name of `name` cast to `target`: one Cast per (tensor, type), shared by every reader."""
        from onnx import TensorProto, helper

        key = (name, target)
        if key not in self.casts_made:
            suffix = "fp16" if target == TensorProto.FLOAT16 else "fp32"
            out = f"{name}__cast_{suffix}"
            self.new_nodes.append(helper.make_node("Cast", [name], [out], to=target, name=f"{out}__node"))
            self.tensor_type[out] = target
            self.casts_made[key] = out
            self.casts += 1
        return self.casts_made[key]

    def keep_outputs_float32(self) -> None:
        """FP16-produced graph outputs: rename the producer's output and Cast back under the original name."""
        from onnx import TensorProto, helper

        for output in self.graph.output:
            if output.name not in self.float_tensors or self.tensor_type.get(output.name) != TensorProto.FLOAT16:
                continue
            inner = f"{output.name}__fp16"
            for node in self.new_nodes:
                for i, name in enumerate(node.input):
                    if name == output.name:
                        node.input[i] = inner
                for i, name in enumerate(node.output):
                    if name == output.name:
                        node.output[i] = inner
            self.new_nodes.append(helper.make_node("Cast", [inner], [output.name], to=TensorProto.FLOAT,
                                                   name=f"{output.name}__cast_fp32__node"))
            self.casts += 1

    def finish(self) -> None:
        """Install the new node list; drop float32 initializers nothing reads any more; record the plan."""
        import onnx

        from trtlab.graph.onnx_utils import names_read

        graph = self.graph
        del graph.node[:]
        graph.node.extend(self.new_nodes)
        used = names_read(graph) | {i.name for i in graph.input}  # subgraphs read outer initializers by name
        kept = [init for init in graph.initializer if init.name in used]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        del graph.value_info[:]  # stale float32 annotations; shape inference recomputes them
        record = json.dumps({"fp32_nodes": sorted(self.fp32_names),
                             "guards": [[g.name, g.precision] for g in self.plan.guarded]})
        others = [p for p in self.model.metadata_props if p.key != METADATA_KEY]
        del self.model.metadata_props[:]
        self.model.metadata_props.extend(others + [onnx.StringStringEntryProto(key=METADATA_KEY, value=record)])


def float32_tensors(model) -> set[str]:
    """Names of every tensor that is float32 in the graph (inputs, initializers, node outputs)."""
    import onnx
    from onnx import TensorProto

    inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    graph = inferred.graph
    names = {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT}
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            names.add(value.name)
    # Outputs shape inference could not type: take the node's float-in → float-out behaviour as the evidence.
    known = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    known |= {i.name for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type == TensorProto.FLOAT:
                    names.update(node.output)
        for out in node.output:
            if out not in known and any(i in names for i in node.input):
                raise UserValueError(f"node {node.name!r} ({node.op_type}): ONNX shape inference cannot type its "
                                     f"output {out!r}", "sanitize the model first (trtlab.sanitize_model: shape "
                                     "inference + constant folding)")
    return names


def convert_payload(node) -> None:
    """Float32 payloads carried by attributes of a node that now runs in FP16."""
    from onnx import TensorProto, numpy_helper

    for attr in node.attribute:
        if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
            attr.i = TensorProto.FLOAT16
        elif node.op_type in ("Constant", "ConstantOfShape") and attr.name == "value" \
                and attr.t.data_type == TensorProto.FLOAT:
            values = numpy_helper.to_array(attr.t)
            attr.t.CopyFrom(numpy_helper.from_array(np.clip(values, -FP16_MAX, FP16_MAX).astype(np.float16),
                                                    attr.t.name))
        elif node.op_type == "Constant" and attr.name in ("value_float", "value_floats"):
            raise UserValueError(f"Constant node {node.name!r} uses {attr.name}",
                                 "sanitize the model first (constant folding removes such Constants)")
