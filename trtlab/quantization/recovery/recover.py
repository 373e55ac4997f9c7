"""Run a recipe's recovery methods (trtlab.quantization.recovery) and say what they did.

`equalize(model)` is the step before calibration (cross-layer equalization rewrites the FP32 graph, and the
activation ranges calibration measures are those of the rewritten graph); `recover_layers(...)` is the step after:
one FP32 pass and one quantized pass over the calibration images, layer by layer (layerwise.py), in which adaptive
rounding picks each layer's integers before it runs and bias correction shifts its output after. Both return the
float model trtlab's Q/DQ writer quantizes (quantization.insertion.quantize_graph) and a `RecoveryReport`.

The passes hold the calibration images' activations in memory, a layer at a time: at most MEMORY_BUDGET bytes, so
recovery uses the first images of the calibration set that fit (all of them for the demo model up to ~300 images)
and the report says how many of how many.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

MEMORY_BUDGET = 2 << 30  # bytes of activations a recovery pass holds at one time
PASS_ROWS = 16  # images per ONNX Runtime call in the passes


@dataclass
class RecoveryReport:
    """What recovery did: per method its own report (JSON-able dicts), the images it used, and the seconds each
    step took (the calibration's beside them, where this build calibrated)."""

    methods: tuple
    images: int = 0
    images_available: int = 0
    seconds: dict = field(default_factory=dict)
    equalization: dict | None = None
    adaround: dict | None = None
    bias_correction: dict | None = None

    def to_dict(self) -> dict:
        out = {"methods": list(self.methods), "images": self.images, "images_available": self.images_available,
               "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}
        for name in ("equalization", "adaround", "bias_correction"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def lines(self) -> list[str]:
        """What each method did, one sentence each, for people (the log and the variant's record)."""
        out = []
        if self.equalization is not None:
            e = self.equalization
            text = f"equalization: {e['pairs_equalized']} layer pair(s) equalized"
            if e["skipped"]:
                reasons: dict[str, int] = {}
                for item in e["skipped"]:
                    reasons[item["reason"]] = reasons.get(item["reason"], 0) + 1
                text += "; not applied to " + "; ".join(f"{n} pair(s): {r}" for r, n in reasons.items())
            out.append(text)
        if self.adaround is not None:
            a = self.adaround
            out.append(f"adaround: {a['layers_rounded']} of {a['layers']} layers rounded adaptively "
                       f"({a['weights_moved']} weights rounded the other way than nearest); "
                       f"{len(a['kept_nearest'])} kept nearest rounding" + _reasons(a["kept_nearest"]))
        if self.bias_correction is not None:
            b = self.bias_correction
            out.append(f"bias correction: {b['channels_corrected']} of {b['channels']} output channels in "
                       f"{b['layers_corrected']} of {b['layers']} layers corrected; the other channels' mean error "
                       f"is within {b['z']:g} standard errors of zero over the {self.images} images (left as it is)"
                       + (f"; {len(b['skipped_layers'])} layer(s) not corrected" + _reasons(b["skipped_layers"])
                          if b["skipped_layers"] else ""))
        if self.images < self.images_available:
            out.append(f"recovery used the first {self.images} of the {self.images_available} calibration images "
                       f"(the activations of more do not fit its {MEMORY_BUDGET >> 20} MB)")
        return out


class BuildRecovery:
    """A variant build's recovery (quantization.variants): equalization before calibration, adaptive rounding and
    bias correction after it; what they did goes into the variant's plan (`describe`) and the log. A recipe without
    recovery passes through unchanged."""

    def __init__(self, recipe, workspace=None):
        self.recipe, self.workspace = recipe, workspace
        self.report = RecoveryReport(recipe.recovery) if recipe.recovery else None

    def before_calibration(self, model, source):
        """(graph to calibrate and quantize, its file): the equalized graph, written beside the workspace's other
        graphs (the statistics are keyed by the file), when the recipe equalizes."""
        if "equalization" not in self.recipe.recovery:
            return model, source
        model = equalize(model, self.report)
        return model, write_equalized(model, source, self.workspace)

    def after_calibration(self, model, plan, scales, calibration_seconds: float, cache, indices, fixed_batch,
                          progress: bool = True):
        """The float graph with adaptive rounding's weights and bias correction's biases (`model` as it is when the
        recipe asks for neither)."""
        if self.report is None:
            return model
        self.report.seconds["calibration"] = calibration_seconds
        if not set(self.recipe.recovery) - {"equalization"}:
            return model
        model, _ = recover_layers(model, plan, scales, self.recipe, calibration_images(cache, indices), fixed_batch,
                                  self.report, progress)
        return model

    def describe(self) -> dict:
        """{'recovery': the report} for the variant's plan ({} without recovery), each method's line logged."""
        if self.report is None:
            return {}
        for line in self.report.lines():
            log.info(f"{self.recipe.name}: {line}")
        return {"recovery": self.report.to_dict()}


def _reasons(by_layer: dict) -> str:
    counts: dict[str, int] = {}
    for reason in by_layer.values():
        key = reason.split(":")[0]  # 'too few positions to fit a rounding: 245 for …' counts as one reason
        counts[key] = counts.get(key, 0) + 1
    return " (" + "; ".join(f"{n}× {r}" for r, n in counts.items()) + ")" if counts else ""


def equalize(model, report: RecoveryReport):
    """The FP32 graph with its equalizable layer pairs equalized (recovery.equalization), timed into `report`."""
    from trtlab.quantization.recovery.equalization import equalize_pairs

    began = time.perf_counter()
    equalized, result = equalize_pairs(model)
    report.equalization = result
    report.seconds["equalization"] = time.perf_counter() - began
    return equalized


def write_equalized(model, source, workspace=None):
    """The equalized FP32 graph as a file beside the workspace's others (calibration statistics are keyed by the
    file's sha256, and the equalized graph's activation ranges are its own), written once per content."""
    import hashlib
    from pathlib import Path

    from trtlab.core.workspace import atomic_path, workspace_dir

    data = model.SerializeToString()
    digest = hashlib.sha256(data).hexdigest()[:12]
    path = workspace_dir(workspace) / "recovery" / f"{Path(source).stem}-equalized-{digest}.onnx"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path, suffix=".onnx") as tmp:
            Path(tmp).write_bytes(data)
    return path


def calibration_images(cache, indices, batch_size: int = 32) -> np.ndarray:
    """The calibration images as one float32 N×C×H×W array, normalised (the one batch source)."""
    from trtlab.data.batches import iter_batches

    return np.concatenate([batch.images for batch in iter_batches(cache, indices, batch_size)])


def layer_weights(model, plan, high_precision: str) -> dict:
    """{layer: adaround.LayerWeights} for each weighted node whose weight the plan quantizes for it alone, with the
    scale the graph will store (quantization.insertion.quantize_weight: FP16 scales on the FP16 float path)."""
    from onnx import numpy_helper

    from trtlab.quantization.insertion import quantize_weight
    from trtlab.quantization.recovery.adaround import LayerWeights

    initializers = {init.name: init for init in model.graph.initializer}
    out = {}
    for weight, (node_name, axis) in plan.weights.items():
        if plan.weight_users.get(weight, [node_name]) != [node_name]:
            continue  # a weight two layers share: one rounding cannot suit both
        node = next(n for n in model.graph.node if n.name == node_name)
        if len(node.input) < 2 or node.input[1] != weight:
            continue  # a constant first input (W · x): not a weight row layout AdaRound handles
        values = numpy_helper.to_array(initializers[weight]).astype(np.float32)
        _, scale = quantize_weight(values, axis, np.float16 if high_precision == "fp16" else np.float32)
        bias = numpy_helper.to_array(initializers[node.input[2]]).astype(np.float32) \
            if len(node.input) > 2 and node.input[2] in initializers else 0.0
        out[node_name] = LayerWeights(weight, values, scale, bias, axis)
    return out


def recover_layers(model, plan, scales: dict, recipe, images: np.ndarray, fixed_batch: int | None = None,
                   report: RecoveryReport | None = None, progress: bool = True):
    """(the float model with adaptive rounding's weights and bias correction's biases, the report): the FP32 pass
    records each layer's reference output, the quantized pass (quantize_graph of `model`, `plan`, `scales` on the
    recipe's float path) rounds and corrects layer by layer."""
    import onnx

    from trtlab.core.progress import progress_bar
    from trtlab.graph.guards import weighted_nodes_in_order
    from trtlab.quantization.insertion import quantize_graph
    from trtlab.quantization.recovery.adaround import AdaRound
    from trtlab.quantization.recovery.bias_correction import BiasCorrection, channel_means, fold_shifts
    from trtlab.quantization.recovery.layerwise import LayerwiseGraph

    report = report or RecoveryReport(recipe.recovery)
    methods = set(recipe.recovery)
    layers = [n.name for n in weighted_nodes_in_order(model)]
    quantized = quantize_graph(model, plan, scales, recipe.high_precision, check=False).model
    reference_graph, quantized_graph = LayerwiseGraph(model, layers), LayerwiseGraph(quantized, layers)
    per_image = max(reference_graph.bytes_per_image() or 0, quantized_graph.bytes_per_image() or 0)
    report.images_available = len(images)
    if per_image:
        images = images[:max(1, min(len(images), MEMORY_BUDGET // per_image))]
    report.images = len(images)
    rounding = AdaRound(layer_weights(model, plan, recipe.high_precision), seed=recipe.seed) \
        if "adaround" in methods else None
    means: dict[str, np.ndarray] = {}

    def reference(layer, live, outputs):
        means[layer.name] = channel_means(layer.op_type, outputs[layer.output[0]])
        if rounding is not None:
            rounding.record_reference(layer, live, outputs)

    correction = BiasCorrection(means) if "bias_correction" in methods else None
    # two passes (FP32 reference, then the quantized graph), each layer by layer: the bar says so, so its 2·L
    # steps are not read as 2·L layers beside the log's "L of L layers corrected"
    bar = progress_bar(total=2 * len(layers), desc=f"recovery ({', '.join(recipe.recovery)}): 2 passes × "
                       f"{len(layers)} layers", unit="layer", enabled=progress)
    began = time.perf_counter()
    reference_graph.run(images, after=reference, rows=PASS_ROWS, fixed_batch=fixed_batch, progress=bar)
    report.seconds["reference_pass"] = time.perf_counter() - began
    began = time.perf_counter()
    quantized_graph.run(images, before=rounding.before if rounding else None,
                        after=correction.after if correction else None, rows=PASS_ROWS, fixed_batch=fixed_batch,
                        progress=bar)
    bar.close()
    spent = time.perf_counter() - began
    recovered = onnx.ModelProto()
    recovered.CopyFrom(model)
    if rounding is not None:
        report.adaround = rounding.report()
        report.seconds["adaround"] = sum(r.seconds for r in rounding.layers)
        write_roundings(recovered, rounding.chosen, {w.name: (w.scale, w.axis) for w in rounding.weights.values()})
    if correction is not None:
        report.bias_correction = correction.report()
        fold_shifts(recovered, correction.shifts)
    report.seconds["quantized_pass"] = spent - report.seconds.get("adaround", 0.0)
    return recovered, report


def write_roundings(model, chosen: dict, scales: dict) -> None:
    """Each rounded weight as its integers × its scale (float32), in place: an exact multiple of the scale the graph
    stores, so the Q/DQ writer's rounding (w / s to the nearest integer) gives back exactly those integers.
    `scales`: {weight: (scale, output-channel axis or None)}."""
    from onnx import numpy_helper

    for init in model.graph.initializer:
        if init.name in chosen:
            integers = chosen[init.name].astype(np.float32)
            scale, axis = scales[init.name]
            shape = [1] * integers.ndim
            if axis is not None:
                shape[axis] = -1
            values = (integers * np.asarray(scale, np.float32).reshape(shape)).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(values, init.name))


__all__ = ["BuildRecovery", "RecoveryReport", "equalize", "recover_layers", "layer_weights", "write_roundings", "write_equalized",
           "calibration_images", "MEMORY_BUDGET"]
