"""Per-tensor comparison: the INT8 variant and FP32 run on the same images with every original tensor exposed as
an output (Polygraphy calls this "mark all"). Each batch is reduced at once to running sums per tensor
(debug.errors), so memory holds one batch of tensors per model, whatever the number of images. The table says, in
graph order, where the error first jumps (find_jump) and which quantized tensors are lossy by their own Q/DQ
(find_suspect_scales: a scale problem rather than accumulated error)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.core.workspace import atomic_path, atomic_write_json
from trtlab.debug.errors import SQNR_CAP_DB, ErrorSums
from trtlab.debug.graphs import compared_tensors, literal_session
from trtlab.graph.onnx_utils import with_outputs

JUMP_MIN_DB = 6.0  # a jump loses at least this much SQNR at once (6 dB ≈ noise power ×4)
# One INT8 step of a bell-shaped activation (7 bits + sign, clipped at a few standard deviations) leaves roughly
# 30–45 dB; an exact input is judged against this rather than against infinity.
EXACT_INPUT_REFERENCE_DB = 40.0


@dataclass
class TensorErrors:
    """Per-tensor comparison of one INT8 variant with FP32, in graph order."""

    table: object  # pandas DataFrame, one row per tensor
    variant: str
    images: int
    peak_batch_bytes: int
    jump: dict | None = None  # the row where the error first jumps (see find_jump)
    output: str = ""  # the model output's tensor name (the logits row)
    suspect_scales: list = field(default_factory=list)  # quantized tensors whose own Q/DQ is unusually lossy

    def plot(self):
        from trtlab.debug.plots import plot_tensor_errors

        return plot_tensor_errors(self)

    def summary(self) -> str:
        from trtlab.graph.block_names import labelled

        t = self.table
        worst = t.loc[t["sqnr_db"].idxmin()]
        out = t[t["tensor"] == self.output].iloc[0] if self.output in set(t["tensor"]) else t.iloc[-1]
        text = (f"{self.variant}: {len(t)} tensors compared on {self.images} images; output SQNR "
                f"{out['sqnr_db']:.1f} dB, cosine {out['cosine']:.4f}; lowest SQNR {worst['sqnr_db']:.1f} "
                f"dB at {worst['tensor']} ({labelled(worst['block'], worst['node'])})")
        if self.jump:
            text += (f"; error first jumps at {self.jump['tensor']} (output of "
                     f"{labelled(self.jump['block'], self.jump['node'])}, {self.jump['op_type']}): SQNR "
                     f"{self.jump['sqnr_db']:.1f} dB, {self.jump['drop_db']:.1f} dB below its inputs")
        else:
            text += "; no jump (the error grows gradually)"
        for suspect in self.suspect_scales:
            readers = [labelled(b, n) for b, n in zip(suspect["read_by_blocks"], suspect["read_by"])]
            text += (f"; the Q/DQ of {suspect['tensor']} alone leaves {suspect['qdq_sqnr_db']:.1f} dB (median of the "
                     f"quantized tensors {suspect['median_db']:.1f} dB): check its scale (read by "
                     f"{', '.join(readers[:3])})")
        return text

    def save(self, folder) -> dict:
        folder = Path(folder)
        path = folder / "tensor_errors.csv"
        with atomic_path(path, suffix=".csv") as tmp:
            self.table.to_csv(tmp, index=False)
        meta = atomic_write_json(folder / "tensor_errors.json", {"variant": self.variant, "images": self.images,
                                                                  "peak_batch_bytes": self.peak_batch_bytes,
                                                                  "jump": self.jump, "output": self.output,
                                                                  "suspect_scales": self.suspect_scales})
        return {"csv": path, "json": meta}

    def worst(self, count: int = 10):
        """The `count` tensors with the lowest SQNR, plus the jump and suspect rows, in graph order."""
        t = self.table
        picked = set(t.nsmallest(count, "sqnr_db")["depth"])
        picked |= {self.jump["depth"]} if self.jump else set()
        picked |= {s["depth"] for s in self.suspect_scales}
        return t[t["depth"].isin(picked)]

    def show(self) -> None:
        """Summary, the plot and the worst tensors, in a notebook."""
        from trtlab.debug.plots import display
        from trtlab.debug.tables import tensor_errors_table

        display(self.summary(), self.plot(), tensor_errors_table(self.worst()))


def compare_tensors(debugger, extra_layers=(), indices=None, precision: str | None = None, batch_size: int | None = None,
                    jump_db: float = JUMP_MIN_DB) -> TensorErrors:
    """Every original tensor of `debugger`'s INT8 variant (with `extra_layers` guarded in `precision`) against
    FP32, in graph order, on the debug images (or `indices`). `qdq_sqnr_db` is the SQNR of a quantized tensor's own
    Q/DQ (its INT8 rounding and clipping on the variant's values): low means a bad scale."""
    import pandas as pd

    extra_layers = debugger.layer_names(extra_layers)
    quantized, _ = debugger.quantized_model(extra_layers, precision=precision)
    plan = debugger.plan(debugger.node_guards(extra_layers, precision))
    names = compared_tensors(debugger.fp32, quantized)
    sessions = (literal_session(with_outputs(debugger.fp32, names)), literal_session(with_outputs(quantized, names)))
    del quantized
    indices = debugger.debug_indices if indices is None else np.asarray(indices, np.int64)
    sums, qdq, peak = _accumulate(debugger, names, sessions, set(plan.activations), indices, batch_size)
    table = pd.DataFrame(_rows(debugger, [debugger.input_name] + names, sums, qdq))
    table["drop_db"] = _local_drops(debugger.fp32, table)
    variant = debugger.recipe.name + ("" if not extra_layers else f"+{len(extra_layers)}guarded")
    if debugger.scale_overrides:
        variant += f" (scale overrides on {len(debugger.scale_overrides)} tensor(s))"
    jump = find_jump(table, jump_db)
    suspects = find_suspect_scales(table)
    table["flag"] = ""
    for suspect in suspects:
        suspect["read_by"] = [node for node, _ in plan.consumers.get(suspect["tensor"], [])]
        suspect["read_by_blocks"] = [debugger.block(node) for node in suspect["read_by"]]
        table.loc[table["depth"] == suspect["depth"], "flag"] = "scale?"
    if jump:
        jump["block"] = debugger.block(jump["node"])
        table.loc[table["depth"] == jump["depth"], "flag"] = "JUMP"
    return TensorErrors(table, variant, len(indices), int(peak), jump, output=debugger.output_name,
                        suspect_scales=suspects)


def _accumulate(debugger, names, sessions, quantized_tensors: set, indices, batch_size):
    """Error sums per tensor (graph input first) and of each quantized tensor's own Q/DQ; peak bytes per batch."""
    fp32_session, int8_session = sessions
    rows_in_order = [debugger.input_name] + names
    sums = {name: ErrorSums() for name in rows_in_order}
    qdq = {name: ErrorSums() for name in rows_in_order if name in quantized_tensors}
    peak = 0
    bar = debugger.progress_bar(len(indices), "compare tensors", "img")
    for _, batch in debugger.batches(indices, batch_size):
        reference = fp32_session.run(names, {debugger.input_name: batch})
        test = int8_session.run(names, {debugger.input_name: batch})
        peak = max(peak, sum(a.nbytes for a in reference) + sum(a.nbytes for a in test) + batch.nbytes)
        for name, ref, out in zip(rows_in_order, [batch] + reference, [batch] + test):
            sums[name].update(ref, out, logits=(name == debugger.output_name))
            if name in qdq:
                qdq[name].update(out, fake_quantize(out, debugger.scales[name]))
        del reference, test
        bar.update(len(batch))
    bar.close()
    return sums, qdq, peak


def _rows(debugger, rows_in_order, sums, qdq) -> list[dict]:
    producer = {o: n for n in debugger.fp32.graph.node for o in n.output}
    layers = set(debugger.all_layers)
    rows = []
    for depth, name in enumerate(rows_in_order):
        node = producer.get(name)
        row = {"depth": depth, "tensor": name, "node": node.name if node is not None else "(graph input)",
               "block": debugger.block(node.name) if node is not None else "(graph input)",
               "op_type": node.op_type if node is not None else "input",
               "layer_output": node is not None and node.name in layers}
        row.update(sums[name].metrics())
        row["ref_absmax"] = sums[name].ref_absmax
        row["qdq_sqnr_db"] = qdq[name].sqnr_db if name in qdq else math.nan
        row["scale"] = debugger.scales[name] if name in qdq else math.nan
        rows.append(row)
    return rows


def fake_quantize(values: np.ndarray, scale: float) -> np.ndarray:
    """DequantizeLinear(QuantizeLinear(x)) with int8, zero point 0: round half to even, saturate to [-128, 127]."""
    return (np.clip(np.rint(values / np.float32(scale)), -128, 127) * np.float32(scale)).astype(np.float32)


def _local_drops(fp32, table) -> list[float]:
    """SQNR each node loses: the lowest SQNR among its compared inputs minus its output's SQNR (both capped at
    SQNR_CAP_DB). An exact input (the graph input, or a tensor nothing upstream has quantized yet) counts as
    EXACT_INPUT_REFERENCE_DB: what one well-calibrated INT8 step typically leaves, so a first quantized layer is
    judged against a normal INT8 step rather than against infinity."""
    sqnr = dict(zip(table["tensor"], table["sqnr_db"]))
    producer = {o: n for n in fp32.graph.node for o in n.output}
    drops = []
    for name in table["tensor"]:
        node = producer.get(name)
        if node is None:  # the graph input row
            drops.append(0.0)
            continue
        inputs = [min(sqnr[i], SQNR_CAP_DB) for i in node.input if i in sqnr]
        inputs = [EXACT_INPUT_REFERENCE_DB if value >= SQNR_CAP_DB else value for value in inputs]
        reference = min(inputs) if inputs else EXACT_INPUT_REFERENCE_DB
        drops.append(reference - min(sqnr[name], SQNR_CAP_DB))
    return drops


def find_jump(table, jump_db: float = JUMP_MIN_DB) -> dict | None:
    """The first tensor (graph order) whose node loses far more SQNR than a quantized layer typically does.

    Quantizing a layer normally costs a few dB (`drop_db`, see _local_drops); the jump is the first node whose loss
    is at least `jump_db` and above the median loss of the layer outputs plus 4 scaled median absolute deviations
    (a robust outlier rule: a uniformly noisier variant has no jump, one broken layer stands out).
    """
    drops = table["drop_db"].to_numpy(float)
    layer_drops = drops[table["layer_output"].to_numpy(bool) & np.isfinite(drops)]
    if len(layer_drops) == 0:
        return None
    median = float(np.median(layer_drops))
    mad = float(np.median(np.abs(layer_drops - median)))
    threshold = max(jump_db, median + 4 * 1.4826 * mad)
    for i, drop in enumerate(drops):
        if drop >= threshold:
            row = table.iloc[i]
            return {"depth": int(row["depth"]), "tensor": row["tensor"], "node": row["node"],
                    "op_type": row["op_type"], "sqnr_db": float(row["sqnr_db"]), "drop_db": float(drop),
                    "threshold_db": threshold}
    return None


def find_suspect_scales(table, min_gap_db: float = 10.0) -> list[dict]:
    """Quantized tensors whose own Q/DQ (`qdq_sqnr_db`) is far lossier than the others': at least `min_gap_db` and
    4 scaled median absolute deviations below the median. Such a tensor is clipped too hard or rounded too
    coarsely — a scale problem rather than accumulated error."""
    values = table["qdq_sqnr_db"].to_numpy(float)
    finite = values[np.isfinite(values)]
    if len(finite) < 3:
        return []
    median = float(np.median(finite))
    mad = float(np.median(np.abs(finite - median)))
    threshold = median - max(min_gap_db, 4 * 1.4826 * mad)
    return [{"tensor": row["tensor"], "depth": int(row["depth"]), "qdq_sqnr_db": float(row["qdq_sqnr_db"]),
             "median_db": median, "threshold_db": threshold, "scale": float(row["scale"])}
            for _, row in table.iterrows() if np.isfinite(row["qdq_sqnr_db"]) and row["qdq_sqnr_db"] < threshold]
