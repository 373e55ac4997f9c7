"""Empirical bias correction: per output channel of each Conv/ConvTranspose/Gemm, the mean error quantization
leaves in its output — FP32 output minus the quantized graph's, over the calibration images, layer by layer in graph
order with the upstream layers already corrected — added to the layer's float bias (Nagel et al., "Data-Free
Quantization Through Weight Equalization and Bias Correction", 2019, §4.2 empirical variant; NNCF's
FastBiasCorrection corrects each layer from FP32 inputs instead, not sequentially).

Only what the data can estimate is corrected: per image, the channel's error averaged over its positions is one
observation; a channel is corrected when its mean error is at least `Z` standard errors from zero (the standard
error of that mean over the images), and left alone otherwise — a per-channel mean fitted to a few images would
correct noise (issue 39 measured it: the head's wide layers corrected from 12 images undid half the gain). The
report counts, per layer, the channels corrected and those left (with the reason), and names layers that have no
bias to fold into (a MatMul, whose bias would need a new Add node: the op types stay those of the plain variant).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: A channel is corrected when |mean error| ≥ Z · its standard error over the images (about 99.7 % two-sided for a
#: normal mean): stricter than 2, because a model has ~10⁴ channels and every false correction adds its noise.
Z = 3.0
#: Fewer images than this and no standard error is worth trusting: the layer is left as it is (said).
MIN_IMAGES = 4
CORRECTABLE_OPS = ("Conv", "ConvTranspose", "Gemm")


def channel_axis(op_type: str) -> int:
    """The output's channel axis: 1 for Conv/ConvTranspose (N, C, …), the last for Gemm/MatMul."""
    return 1 if op_type in ("Conv", "ConvTranspose") else -1


def channel_means(op_type: str, output: np.ndarray) -> np.ndarray:
    """(N, C) float64: each image's output averaged over every position of each channel."""
    values = np.moveaxis(np.asarray(output, np.float32), channel_axis(op_type), -1)
    values = values.reshape(values.shape[0], -1, values.shape[-1])
    return values.mean(axis=1, dtype=np.float64)


@dataclass
class LayerShift:
    """What bias correction did to one layer."""

    layer: str
    channels: int
    corrected: int
    mean_abs_error: float  # the mean |error| over the channels before correction
    mean_abs_correction: float  # over the corrected channels
    skipped: str = ""  # why nothing was corrected, where nothing could be

    def to_dict(self) -> dict:
        return {"layer": self.layer, "channels": self.channels, "corrected": self.corrected,
                "mean_abs_error": self.mean_abs_error, "mean_abs_correction": self.mean_abs_correction,
                **({"skipped": self.skipped} if self.skipped else {})}


@dataclass
class BiasCorrection:
    """The quantized pass's `after` hook: corrects each layer's output by its estimated mean error (so later layers
    see the corrected values) and keeps the shifts to fold into the float biases."""

    reference: dict  # layer name → (N, C) FP32 channel means per image (from the FP32 pass)
    z: float = Z
    shifts: dict = field(default_factory=dict)  # layer name → float32 (C,) shift added to its output
    layers: list = field(default_factory=list)  # LayerShift per layer, graph order

    def after(self, layer, live, outputs) -> dict | None:
        name = layer.output[0]
        if layer.name not in self.reference:
            return None
        if layer.op_type not in CORRECTABLE_OPS:
            self.layers.append(LayerShift(layer.name, 0, 0, 0.0, 0.0, f"{layer.op_type} has no bias input to fold "
                                                                        "a correction into"))
            return None
        quantized = channel_means(layer.op_type, outputs[name])
        shift, record = estimate_shift(layer.name, self.reference[layer.name] - quantized, self.z)
        self.layers.append(record)
        if not record.corrected:
            return None
        self.shifts[layer.name] = shift
        axis = channel_axis(layer.op_type) % outputs[name].ndim
        shape = [1] * outputs[name].ndim
        shape[axis] = -1
        return {name: (outputs[name] + shift.reshape(shape).astype(outputs[name].dtype)).astype(outputs[name].dtype)}

    def report(self) -> dict:
        done = [r for r in self.layers if r.corrected]
        return {"z": self.z, "layers": len(self.layers), "layers_corrected": len(done),
                "channels": sum(r.channels for r in self.layers),
                "channels_corrected": sum(r.corrected for r in self.layers),
                "skipped_layers": {r.layer: r.skipped for r in self.layers if r.skipped},
                "per_layer": [r.to_dict() for r in self.layers]}


def estimate_shift(layer: str, errors: np.ndarray, z: float = Z) -> tuple[np.ndarray, LayerShift]:
    """(float32 shift per channel, its record) from `errors` (N images × C channels: FP32 minus quantized channel
    means): the mean error where it is at least `z` standard errors from zero, else 0."""
    images, channels = errors.shape
    mean = errors.mean(axis=0)
    if images < MIN_IMAGES:
        return np.zeros(channels, np.float32), LayerShift(
            layer, channels, 0, float(np.abs(mean).mean()), 0.0,
            f"{images} image(s): fewer than {MIN_IMAGES} give no standard error to tell a shift from noise")
    stderr = errors.std(axis=0, ddof=1) / np.sqrt(images)
    keep = np.abs(mean) >= z * stderr
    keep &= mean != 0
    shift = np.where(keep, mean, 0.0).astype(np.float32)
    corrected = int(keep.sum())
    return shift, LayerShift(layer, channels, corrected, float(np.abs(mean).mean()),
                             float(np.abs(shift[keep]).mean()) if corrected else 0.0)


def fold_shifts(model, shifts: dict) -> None:
    """Add each layer's shift to its float bias, in place: the Conv/ConvTranspose bias (made when absent), the
    Gemm's C divided by its beta (made, or broadcast to one value per output channel, when needed). A bias
    initializer other nodes also read is copied first, so only this layer changes."""
    from onnx import numpy_helper

    from trtlab.graph.onnx_utils import attribute

    initializers = {init.name: init for init in model.graph.initializer}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    for node in model.graph.node:
        shift = shifts.get(node.name)
        if shift is None:
            continue
        if node.op_type == "Gemm":
            shift = shift / float(attribute(node, "beta", 1.0))
        if len(node.input) > 2 and node.input[2]:
            bias_name = node.input[2]
            if bias_name not in initializers:
                raise ValueError(f"{node.name}: its bias {bias_name!r} is not an initializer; cannot correct it")
            bias = numpy_helper.to_array(initializers[bias_name]).astype(np.float32)
            bias = np.broadcast_to(bias, shift.shape) + shift if bias.size != shift.size else \
                bias.reshape(shift.shape) + shift
            if readers.get(bias_name, 0) > 1:
                bias_name = f"{bias_name}__{node.name}"
                node.input[2] = bias_name
                initializers[bias_name] = model.graph.initializer.add()
            target = initializers[bias_name]
        else:
            bias_name = f"{node.name}__bias"
            if len(node.input) == 2:
                node.input.append(bias_name)
            else:
                node.input[2] = bias_name
            bias = shift
            target = initializers[bias_name] = model.graph.initializer.add()
        target.CopyFrom(numpy_helper.from_array(np.asarray(bias, np.float32), bias_name))
