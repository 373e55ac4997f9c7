"""Adaptive rounding (AdaRound; Nagel et al., "Up or Down? Adaptive Rounding for Post-Training Quantization", ICML
2020): per weighted layer, each INT8 weight is rounded down or up — floor(w/s) or floor(w/s) + 1, so never more
than one step from nearest rounding — to minimise the layer's output error against FP32.

The objective is the paper's with the FP32 output as target and the quantized graph's own input (its eq. 25:
‖W x_fp32 − W̃ x̂‖², x̂ after upstream quantization): the layer's output at sampled positions of the calibration
images. Written with the inputs' second moments (G = E[x̂ x̂ᵀ] per group, C = E[t x̂ᵀ]), the error of a weight row
w̃ is w̃ G w̃ᵀ − 2 w̃·C + const, so each step costs Cout·F² whatever the number of samples. The rounding is relaxed
to the paper's rectified sigmoid h(V) with its regulariser (β annealed 20 → 2 after a 20 % warm start) and Adam;
the final choice is h ≥ ½.

Correct only what the data can estimate: the positions of every fourth image are held out; a layer keeps the
rounding found only when it lowers the output error on those held-out positions too, else it keeps nearest
rounding (said), and a layer with fewer sampled positions than MIN_SAMPLES_PER_INPUT × its fan-in is left at
nearest rounding (said) — a classifier head sees one position per image. The element with the largest |w| of each
output channel keeps its nearest rounding (±127): the scale, max|w|/127, stays the scale the graph stores.

Weights are written back as exact multiples of that scale — the FP16 scale on the FP16 float path, since the graph
stores FP16 scales (quantization.insertion rounds the scale to FP16 before it rounds the weights) — so trtlab's Q/DQ
writer, which rounds w/s to the nearest integer, stores exactly the integers chosen here; its INT8 initializers are
what TensorRT reads: "When using pre-quantized weights, an IDequantizeLayer is required between the weights and
the linear operator" — pre-quantized INT8 weights are taken as they are; only high-precision weights are quantized
at build time (TensorRT developer guide, Explicit Quantization, "Quantized Weights").
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

ITERATIONS = 300  # the full-batch gradient is exact: on the demo model 150 → 500 → 1500 lower the held-out layer
#: error by 4.4 → 5.2 → 5.3 % on average, and each iteration costs Cout · F² multiply-adds
LEARNING_RATE = 0.05
#: λ, with the recon error normalised to nearest rounding's and the regulariser averaged over the weights (the
#: rounding found barely moves over λ = 0.1 … 10).
REGULARISATION = 1.0
BETA = (20.0, 2.0)
WARM_START = 0.2
ZETA, GAMMA = 1.1, -0.1  # the rectified sigmoid's stretch
MAX_SAMPLES = 8192  # positions sampled per layer
MAX_PATCH_VALUES = 32_000_000  # samples × fan-in held at once (128 MB of float32)
MIN_SAMPLES_PER_INPUT = 4
HOLDOUT_EVERY = 4  # every fourth image's positions check the rounding found on the others
SECONDS = 600.0  # the whole method's time budget: layers after it keep nearest rounding (said)


@dataclass
class LayerShape:
    """How a weighted node's weight rows meet its input: rows (Cout × F), groups, and how to take patches."""

    rows: np.ndarray  # float32 (Cout, F)
    groups: int
    to_weight: object  # rows (Cout, F) → the initializer's layout
    kind: str  # 'conv' or 'dense'
    alpha: float = 1.0
    beta: float = 1.0
    kernel: tuple = ()  # (kh, kw) of a conv


@dataclass
class LayerWeights:
    """What AdaRound needs of one quantized layer: its weight initializer's name and float values, the scale the
    graph stores for it (per output channel, or 0-d per tensor) and its float bias (0 where none)."""

    name: str
    values: np.ndarray
    scale: np.ndarray
    bias: np.ndarray | float = 0.0
    axis: int | None = 0  # the scale's axis in the weight (None: per tensor)


def layer_shape(node, weight: np.ndarray) -> LayerShape | str:
    """The layer's weight as rows per output channel, or why AdaRound leaves it (a text)."""
    from trtlab.graph.onnx_utils import attribute

    if node.op_type == "Conv":
        if attribute(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
            return "Conv with auto_pad SAME"
        if weight.ndim != 4:
            return f"Conv with a {weight.ndim - 2}-D kernel (2-D only)"
        shape = weight.shape
        return LayerShape(weight.reshape(shape[0], -1).astype(np.float32), int(attribute(node, "group", 1)),
                          lambda rows: rows.reshape(shape), "conv", kernel=tuple(shape[2:]))
    if node.op_type == "Gemm":
        if attribute(node, "transA", 0):
            return "Gemm with transA"
        trans_b = bool(attribute(node, "transB", 0))
        rows = weight if trans_b else weight.T
        return LayerShape(np.ascontiguousarray(rows, np.float32), 1, (lambda r: r) if trans_b else (lambda r: r.T),
                          "dense", float(attribute(node, "alpha", 1.0)), float(attribute(node, "beta", 1.0)))
    if node.op_type == "MatMul" and weight.ndim == 2:
        return LayerShape(np.ascontiguousarray(weight.T, np.float32), 1, lambda r: r.T, "dense")
    return f"{node.op_type} with a {weight.ndim}-D weight"


def sample_positions(output_shape, kind: str, seed: int, name: str) -> np.ndarray:
    """Up to MAX_SAMPLES output positions (rows of (image, y, x) for a conv, (row,) of the flattened leading axes
    for a dense layer), drawn the same way in the FP32 and the quantized pass."""
    rng = np.random.default_rng([seed, *name.encode()])
    if kind == "conv":
        n, _, height, width = output_shape
        total = n * height * width
        flat = np.sort(rng.choice(total, MAX_SAMPLES, replace=False)) if total > MAX_SAMPLES else np.arange(total)
        return np.stack(np.unravel_index(flat, (n, height, width)), axis=1)
    total = int(np.prod(output_shape[:-1]))
    flat = np.sort(rng.choice(total, MAX_SAMPLES, replace=False)) if total > MAX_SAMPLES else np.arange(total)
    return flat[:, None]


def output_at(output: np.ndarray, positions: np.ndarray, kind: str) -> np.ndarray:
    """(K, Cout) float32 values of a layer's output at `positions`."""
    output = np.asarray(output, np.float32)
    if kind == "conv":
        return output[positions[:, 0], :, positions[:, 1], positions[:, 2]]
    return output.reshape(-1, output.shape[-1])[positions[:, 0]]


def patches_at(node, x: np.ndarray, positions: np.ndarray, shape: LayerShape) -> np.ndarray:
    """(K, groups, F) float32: the inputs each sampled output position reads (im2col at those positions)."""
    from trtlab.graph.onnx_utils import attribute

    x = np.asarray(x, np.float32)
    if shape.kind == "dense":
        return x.reshape(-1, x.shape[-1])[positions[:, 0]][:, None, :]
    channels = x.shape[1]
    cin_g = channels // shape.groups
    kh, kw = shape.kernel
    sh, sw = list(attribute(node, "strides", None) or [1, 1])
    dh, dw = list(attribute(node, "dilations", None) or [1, 1])
    top, left, bottom, right = list(attribute(node, "pads", None) or [0, 0, 0, 0])
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    images, ys, xs = positions[:, 0], positions[:, 1] * sh, positions[:, 2] * sw
    taken = np.empty((len(positions), channels, kh, kw), np.float32)
    for i in range(kh):  # one kernel offset at a time: the index arrays stay (K,)
        for j in range(kw):
            taken[:, :, i, j] = padded[images, :, ys + i * dh, xs + j * dw]
    return taken.reshape(len(positions), shape.groups, cin_g * kh * kw)


@dataclass
class Moments:
    """Second moments of one layer's samples: G (groups, F, F) = E[x xᵀ], C (Cout, F) = E[t x], T (Cout,) = E[t²]."""

    gram: np.ndarray
    cross: np.ndarray
    target: np.ndarray
    samples: int

    @classmethod
    def of(cls, patches: np.ndarray, targets: np.ndarray, groups: int) -> "Moments":
        k = max(len(patches), 1)
        per_group = np.ascontiguousarray(patches.transpose(1, 0, 2), np.float64)  # (g, K, F)
        gram = np.matmul(per_group.transpose(0, 2, 1), per_group) / k
        t = np.ascontiguousarray(targets.T.reshape(groups, -1, len(targets)), np.float64)  # (g, Cout_g, K)
        cross = np.matmul(t, per_group).reshape(targets.shape[1], -1) / k
        return cls(gram, cross, (targets.astype(np.float64) ** 2).mean(axis=0), len(patches))

    def error(self, rows: np.ndarray) -> float:
        """Mean squared output error of weight rows (Cout, F) over these samples and every output channel."""
        grouped = rows.reshape(self.gram.shape[0], -1, rows.shape[1])
        quad = (np.matmul(grouped, self.gram) * grouped).sum(axis=2).reshape(-1)
        return float((quad - 2 * (rows * self.cross).sum(axis=1) + self.target).mean())


@dataclass
class LayerRounding:
    layer: str
    weights: int
    moved: int = 0  # weights rounded the other way than nearest
    error_nearest: float = float("nan")  # mean squared output error on the held-out positions
    error_adaround: float = float("nan")
    kept_nearest: str = ""  # why the layer keeps nearest rounding
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v != "" and not (isinstance(v, float) and np.isnan(v))}


def optimise(rows: np.ndarray, scale: np.ndarray, train: Moments, iterations: int = ITERATIONS):
    """(integers (Cout, F), nearest integers): the rounding AdaRound chooses for weight rows with per-row scale
    (float32 steps: the gradient needs no more, and BLAS runs them twice as fast as float64)."""
    ratio = rows / scale[:, None]
    nearest = np.clip(np.rint(ratio), -127, 127)
    lower = np.clip(np.floor(ratio), -127, 127)
    step = np.clip(np.floor(ratio) + 1, -127, 127) - lower
    pinned = np.zeros(rows.shape, bool)
    pinned[np.arange(len(rows)), np.abs(rows).argmax(axis=1)] = True  # the scale's element keeps ±127
    lower = np.where(pinned, nearest, lower)
    step = np.where(pinned, 0.0, step)
    rest = np.clip(ratio - np.floor(ratio), 0.0, 1.0)
    v = (-np.log((ZETA - GAMMA) / (np.clip(rest, 1e-3, 1 - 1e-3) - GAMMA) - 1)).astype(np.float32)
    baseline = max(train.error(nearest * scale[:, None]), 1e-30)  # the recon error starts near 1
    gram, cross = train.gram.astype(np.float32), train.cross.astype(np.float32)
    lower32, step32, scale32 = lower.astype(np.float32), step.astype(np.float32), scale.astype(np.float32)[:, None]
    movable = step32 > 0
    norm = np.float32(2 / (len(rows) * baseline))
    m, s2 = np.zeros_like(v), np.zeros_like(v)
    g_count = gram.shape[0]
    for it in range(1, iterations + 1):
        sig = 1 / (1 + np.exp(-v))
        raw = sig * (ZETA - GAMMA) + GAMMA
        h = np.clip(raw, 0, 1)
        w = (lower32 + h * step32) * scale32
        grad_w = (np.matmul(w.reshape(g_count, -1, w.shape[1]), gram).reshape(w.shape) - cross) * norm
        grad_h = grad_w * scale32 * step32
        frac = (it - 1) / iterations
        if frac >= WARM_START:
            beta = BETA[1] + (BETA[0] - BETA[1]) * (1 - (frac - WARM_START) / (1 - WARM_START))
            centred = 2 * h - 1
            grad_h -= (REGULARISATION / h.size * 2 * beta) * np.abs(centred) ** (beta - 1) * np.sign(centred) \
                * movable
        grad_v = grad_h * ((raw > 0) & (raw < 1)) * sig * (1 - sig) * np.float32(ZETA - GAMMA)
        m = 0.9 * m + 0.1 * grad_v
        s2 = 0.999 * s2 + 0.001 * grad_v ** 2
        v -= np.float32(LEARNING_RATE / (1 - 0.9 ** it)) * m / (np.sqrt(s2 / np.float32(1 - 0.999 ** it)) + 1e-8)
    h = np.clip((1 / (1 + np.exp(-v))) * (ZETA - GAMMA) + GAMMA, 0, 1)
    return lower + (h >= 0.5) * step, nearest


@dataclass
class AdaRound:
    """The quantized pass's `before` hook (and the FP32 pass's `after` hook that records the targets)."""

    weights: dict  # layer name → LayerWeights
    seed: int = 0
    seconds: float = SECONDS
    iterations: int = ITERATIONS
    targets: dict = field(default_factory=dict)  # layer → (positions, (K, Cout) FP32 outputs)
    chosen: dict = field(default_factory=dict)  # weight initializer → int8 array in its layout
    layers: list = field(default_factory=list)
    started: float | None = None

    def record_reference(self, layer, live, outputs) -> None:
        """FP32 pass: the layer's output at the sampled positions."""
        if layer.name not in self.weights:
            return None
        shape = layer_shape(layer, self.weights[layer.name].values)
        if isinstance(shape, str):
            return None
        output = outputs[layer.output[0]]
        positions = sample_positions(output.shape, shape.kind, self.seed, layer.name)
        self.targets[layer.name] = (positions, output_at(output, positions, shape.kind))
        return None

    def before(self, layer, live) -> dict | None:
        if layer.name not in self.weights:
            return None
        weights = self.weights[layer.name]
        record = LayerRounding(layer.name, int(weights.values.size))
        self.layers.append(record)
        shape = layer_shape(layer, weights.values)
        if isinstance(shape, str):
            record.kept_nearest = shape
            return None
        if layer.name not in self.targets:
            record.kept_nearest = "no FP32 reference output"
            return None
        self.started = self.started or time.perf_counter()
        if time.perf_counter() - self.started > self.seconds:
            record.kept_nearest = f"the time budget ({self.seconds:.0f} s) was spent on the layers before"
            return None
        began = time.perf_counter()
        try:
            return self._round(layer, live, shape, weights, record)
        finally:
            record.seconds = time.perf_counter() - began

    def _round(self, layer, live, shape: LayerShape, weights: LayerWeights, record) -> dict | None:
        positions, targets = self.targets[layer.name]
        fan_in = shape.rows.shape[1]
        if len(positions) * fan_in > MAX_PATCH_VALUES:
            keep = np.linspace(0, len(positions) - 1, MAX_PATCH_VALUES // fan_in).astype(np.int64)
            positions, targets = positions[keep], targets[keep]
        held = (positions[:, 0] % HOLDOUT_EVERY) == HOLDOUT_EVERY - 1 if shape.kind == "conv" else \
            (np.arange(len(positions)) % HOLDOUT_EVERY) == HOLDOUT_EVERY - 1
        if (~held).sum() < MIN_SAMPLES_PER_INPUT * fan_in:
            record.kept_nearest = (f"too few positions to fit a rounding: {int((~held).sum())} for a fan-in of "
                                   f"{fan_in} (fewer than {MIN_SAMPLES_PER_INPUT} per input)")
            return None
        bias = np.asarray(weights.bias, np.float32)
        patches = patches_at(layer, live[layer.input[0]], positions, shape)
        goal = (targets - shape.beta * bias) / shape.alpha
        train = Moments.of(patches[~held], goal[~held], shape.groups)
        check = Moments.of(patches[held], goal[held], shape.groups) if held.any() else train
        row_scale = np.broadcast_to(np.asarray(weights.scale, np.float32).reshape(-1), (len(shape.rows),)).astype(np.float64)
        chosen, nearest = optimise(shape.rows.astype(np.float64), row_scale, train, self.iterations)
        record.error_nearest = check.error(nearest * row_scale[:, None])
        record.error_adaround = check.error(chosen * row_scale[:, None])
        if not record.error_adaround < record.error_nearest:
            record.kept_nearest = "no lower output error on the held-out positions"
            return None
        record.moved = int((chosen != nearest).sum())
        integers = np.asarray(shape.to_weight(chosen), np.float64).astype(np.int8)
        self.chosen[weights.name] = integers
        from trtlab.quantization.insertion import int8_weight_name

        return {int8_weight_name(weights.name): integers}

    def report(self) -> dict:
        rounded = [r for r in self.layers if not r.kept_nearest]
        return {"iterations": self.iterations, "layers": len(self.layers), "layers_rounded": len(rounded),
                "weights_moved": sum(r.moved for r in rounded), "seconds_budget": self.seconds,
                "kept_nearest": {r.layer: r.kept_nearest for r in self.layers if r.kept_nearest},
                "per_layer": [r.to_dict() for r in self.layers]}
