"""Per-layer sensitivity. A layer is a weighted node (Conv/Gemm/MatMul) with its quantized input and weight;
guarding it is the guard `node:<name>`. For every layer the logits are compared with FP32 when *only that layer*
is INT8 (every other layer guarded) and when *all but that layer* are INT8.

Nodes before the layer compute exactly what a reference run computes (FP32 resp. the fully quantized variant), so
each run starts at the layer from the reference's tensors (a graph suffix with the cut tensors as inputs; see
LayerDebugger.quantized_model, which falls back to the full graph when the suffix's Q/DQ plan would differ).
Under additive quantization noise both experiments estimate the layer's share of the output noise:
only-one: Σerr²(only L) / Σerr²(all); all-but-one: 1 − Σerr²(all but L) / Σerr²(all). Layers are ranked by the
mean of the two (`noise_share`; the shares need not sum to 1: quantization noise compounds through the network).
Progress is saved after every run; an interrupted call resumes where it stopped.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtlab.core.workspace import atomic_path, atomic_write_json, hash_json, read_json_checked
from trtlab.graph.block_names import labelled
from trtlab.debug.errors import ErrorSums
from trtlab.debug.graphs import compared_tensors, is_float_only, literal_session
from trtlab.graph.onnx_utils import with_outputs

MODES = ("only", "all_but")  # only this layer INT8 / every layer but this one INT8


@dataclass
class Sensitivity:
    """Per-layer sensitivity, most sensitive first."""

    table: object  # pandas DataFrame indexed by layer name
    baseline: dict  # logits metrics of the fully quantized variant and of the unquantized one
    images: int
    resumed_runs: int = 0  # runs (layer × mode) read back from an earlier, interrupted or identical call

    @property
    def ranking(self) -> list[str]:
        return list(self.table.index)

    def plot(self, top: int = 20):
        from trtlab.debug.plots import plot_sensitivity

        return plot_sensitivity(self, top)

    def save(self, folder) -> dict:
        folder = Path(folder)
        path = folder / "sensitivity.csv"
        with atomic_path(path, suffix=".csv") as tmp:
            self.table.to_csv(tmp)
        return {"csv": path}

    def summary(self) -> str:
        b = self.baseline["all"]
        top = self.table.iloc[0]
        return (f"{len(self.table)} layers on {self.images} images; all layers INT8: output SQNR "
                f"{b['sqnr_db']:.1f} dB, top-1 agreement {b['top1_agreement']:.0%}. Most sensitive: "
                f"{labelled(top['block'], self.table.index[0])} ({top['op_type']}), ~{top['noise_share']:.0%} of the "
                f"output noise (only it INT8: {top['only_sqnr_db']:.1f} dB; guarding it alone: "
                f"{top['all_but_gain_db']:+.1f} dB)")

    def show(self, top: int = 15) -> None:
        from trtlab.debug.plots import display
        from trtlab.debug.tables import sensitivity_table

        display(self.summary(), self.plot(top), sensitivity_table(self.table.head(top)))


def state_path(debugger, layers=None) -> Path:
    """Where layer_sensitivity saves its progress for these layers, images and batch size."""
    from trtlab.core.identity import Identity

    images = debugger.image_ids(debugger.debug_indices)
    made_from = Identity(variant={"debugger": debugger.key}, batch_size=debugger.batch_size,
                         data={"ids_hash": hash_json(images), "images": len(images)},
                         options={"layers": list(debugger.layers if layers is None else layers)})
    return debugger.folder / f"sensitivity-{made_from.key}.json"


def layer_sensitivity(debugger, layers=None, resume: bool = True) -> Sensitivity:
    """Logits error vs FP32 with only each layer INT8 and with all but each layer INT8, ranked."""
    layers = list(debugger.layers if layers is None else layers)
    unknown = [name for name in layers if name not in set(debugger.layers)]
    if unknown:
        raise KeyError(f"not layers of this model (or already guarded by the recipe): {unknown[:4]}; "
                       f"layers are e.g. {debugger.layers[:4]}")
    path = state_path(debugger, layers)
    state = {"runs": {}, "baseline": {}}
    if resume:  # a damaged state file is set aside (named) and the runs are redone
        state = read_json_checked(path) or state
    batches = batch_count(debugger)
    resumed = sum(1 for v in state["runs"].values() if v["batches"] >= batches)
    # 'only' runs start from the unquantized variant's tensors, 'all_but' runs from the fully quantized one's.
    references = {"only": debugger.quantized_model(debugger.layers)[0], "all_but": debugger.quantized_model(())[0]}
    bar = debugger.progress_bar(2 * len(layers) * batches, "layer sensitivity", "run")
    bar.update(sum(min(v["batches"], batches) for v in state["runs"].values()))
    run = _BatchRuns(debugger, layers, state, path, references, bar)
    for b, (_, batch) in enumerate(debugger.batches(debugger.debug_indices)):
        run.batch(b, batch)
    bar.close()
    atomic_write_json(path, state)
    return _ranked(debugger, layers, state, resumed)


def batch_count(debugger) -> int:
    return -(-len(debugger.debug_indices) // debugger.batch_size)


class _BatchRuns:
    """The runs of one batch: for each mode, one reference run exposing every tensor, then one suffix run per
    layer still to do, each folded into the saved state (the resume point) at once."""

    def __init__(self, debugger, layers, state, path, references, bar):
        self.debugger, self.layers, self.state, self.path, self.bar = debugger, layers, state, path, bar
        self.references = references
        self.names = compared_tensors(debugger.fp32)
        self.none_is_fp32 = is_float_only(references["only"], debugger.fp32)

    def batch(self, b: int, batch: np.ndarray) -> None:
        d, state = self.debugger, self.state
        fp32_logits = None
        for mode in MODES:
            todo = [name for name in self.layers if state["runs"].get(f"{mode}|{name}", {}).get("batches", 0) <= b]
            if not todo and state["baseline"].get(mode, {}).get("batches", 0) > b:
                continue
            # One batch of every tensor of the reference variant: the most this loop ever holds.
            outputs = dict(zip(self.names, literal_session(with_outputs(self.references[mode], self.names)).run(
                self.names, {d.input_name: batch})))
            outputs[d.input_name] = batch
            if fp32_logits is None:
                fp32_logits = (outputs[d.output_name] if mode == "only" and self.none_is_fp32 else
                               literal_session(d.fp32).run([d.output_name], {d.input_name: batch})[0])
            if state["baseline"].get(mode, {}).get("batches", 0) <= b:
                state["baseline"][mode] = _folded(state["baseline"].get(mode), b, fp32_logits,
                                                  outputs[d.output_name])
            for name in todo:
                self._layer_run(mode, name, b, outputs, fp32_logits)
            del outputs

    def _layer_run(self, mode: str, name: str, b: int, outputs: dict, fp32_logits) -> None:
        d = self.debugger
        extra = [other for other in d.layers if other != name] if mode == "only" else [name]
        model, cut = d.quantized_model(extra, start=d.node_index[name])
        session = literal_session(model)
        del model
        # The cut tensors are FP16 in an FP16-path reference variant; the suffix takes them as float32 (its boundary
        # Cast gives back the same FP16 values).
        logits = session.run([d.output_name], {t: np.asarray(outputs[t], np.float32) for t in cut})[0]
        del session
        key = f"{mode}|{name}"
        self.state["runs"][key] = _folded(self.state["runs"].get(key), b, fp32_logits, logits)
        atomic_write_json(self.path, self.state)  # resume point after every run
        self.bar.update(1)


def _folded(entry: dict | None, b: int, reference, logits) -> dict:
    """A saved {batches, sums} entry with batch `b` added."""
    sums = ErrorSums.from_dict((entry or {}).get("sums", ErrorSums().to_dict()))
    sums.update(reference, logits, logits=True)
    return {"batches": b + 1, "sums": sums.to_dict()}


def _ranked(debugger, layers, state, resumed: int) -> Sensitivity:
    import pandas as pd

    all_sums = ErrorSums.from_dict(state["baseline"]["all_but"]["sums"])
    none_sums = ErrorSums.from_dict(state["baseline"]["only"]["sums"])
    rows = []
    for name in layers:
        only = ErrorSums.from_dict(state["runs"][f"only|{name}"]["sums"])
        all_but = ErrorSums.from_dict(state["runs"][f"all_but|{name}"]["sums"])
        node = debugger.fp32.graph.node[debugger.node_index[name]]
        share_only = only.err2 / all_sums.err2 if all_sums.err2 > 0 else 0.0
        share_all_but = max(0.0, 1.0 - all_but.err2 / all_sums.err2) if all_sums.err2 > 0 else 0.0
        rows.append({"layer": name, "block": debugger.block(name), "op_type": node.op_type,
                     "depth": debugger.all_layers.index(name),
                     "input": node.input[0],
                     "only_sqnr_db": only.sqnr_db, "only_top1_agreement": only.top1_agreement,
                     "only_cosine": only.cosine,
                     "all_but_sqnr_db": all_but.sqnr_db,
                     "all_but_top1_agreement": all_but.top1_agreement,
                     "all_but_gain_db": all_but.sqnr_db - all_sums.sqnr_db,
                     "noise_share_only": share_only, "noise_share_all_but": share_all_but,
                     "noise_share": 0.5 * (share_only + share_all_but)})
    table = pd.DataFrame(rows).set_index("layer")
    table = table.sort_values(["noise_share", "only_sqnr_db"], ascending=[False, True], kind="stable")
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    baseline = {"all": all_sums.metrics(logits=True), "none": none_sums.metrics(logits=True)}
    return Sensitivity(table, baseline, len(debugger.debug_indices), resumed)
