"""What the layers trtlab.graph.fusion predicts add up to: per layer the multiply-accumulates (MACs) and the elements
it reads, weighs and writes per image (trtlab.graph.roofline's bytes), then the report — MAC shares by precision, FP32
islands (against the precision converter's FP32 guards), Casts, unfused / folded / unsupported Q/DQ.

`LayerTally` is mixed into the predictor: it reads the predictor's graph index (nodes, producer, readers, shapes,
types) and its layers.
"""
from __future__ import annotations

import json
import math

from trtlab.graph.fusion_report import PrecisionReport
from trtlab.graph.fusion_rules import UINT8_NOTE
from trtlab.graph.guards import WEIGHTED_OPS
from trtlab.graph.onnx_utils import attribute
from trtlab.graph.precision_rewrite import METADATA_KEY as PRECISION_RECORD_KEY  # the precision converter's record


class LayerTally:
    """MACs and elements per predicted layer, and the PrecisionReport of them (a mixin of the predictor)."""

    def count_elements(self) -> None:
        """Per layer and image, the elements it reads, its weights and what it writes (the roofline's bytes)."""
        by_name = {n.name: n for n in self.nodes}
        def size(tensor: str) -> int:  # elements per image; 0 when shape inference left a dimension unknown
            shape = self.shapes.get(tensor)
            return math.prod(shape) if shape and None not in shape else 0

        for layer in self.layers:
            if layer.name in self.moved_q:  # a Q moved before one Concat input quantizes that input only
                layer.elements = dict.fromkeys(("in", "out"), size(self.moved_q[layer.name])) | {"weights": 0}
                continue
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
            [{"node": l.nodes[0], "op": l.kind, "why": l.note} for l in self.layers if l.note.startswith("unfused")],
            [l.name for l in self.layers if l.note == "quantizes the graph input"], self._casts(), guarded,
            list(self.folded), [{"node": l.name, "op": l.kind, "why": l.note} for l in self.layers
                                if l.note == UINT8_NOTE])

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
