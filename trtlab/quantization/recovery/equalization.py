"""Cross-layer equalization (Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias Correction",
ICCV 2019, §4.1): for two consecutive Convs y = W₂ f(W₁ x + b₁) with f positively homogeneous (f(x/s) = f(x)/s for
every s > 0), output channel c of the first is divided by s_c and input channel c of the second multiplied by it,
with s_c = √(r₁_c / r₂_c) (r: the channel's max |w|) — both ranges become √(r₁_c r₂_c) and the FP32 output is
unchanged. It is for weights quantized per tensor, where one wide channel costs every other channel its
resolution; with per-channel weight scales (trtlab's default) each channel already has its own scale.

Positively homogeneous: ReLU, LeakyReLU, PReLU, Clip(0, ∞), or no activation. Not: ReLU6 (Clip(0, 6): the bound
6 would have to move to 6/s_c, per channel), HardSwish, HardSigmoid, SiLU (x·sigmoid x), Sigmoid, Tanh and the
rest — those pairs are left as they are and listed with the reason (EfficientNet-Lite's ReLU6 leaves it only its
linear projection → expansion pairs). The second Conv must be plain (groups 1) or depthwise (its channel c reads
only channel c); a chain A → B → C is equalized pair by pair, sweeping until the scales settle (DFQ iterates the
same way). Pairs whose tensors other nodes also read are not candidates (the scaling would reach those readers).
"""
from __future__ import annotations

import numpy as np

HOMOGENEOUS = ("Relu", "LeakyRelu", "PRelu")
ACTIVATIONS = HOMOGENEOUS + ("Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Elu", "Selu", "Softplus",
                             "Gelu", "Mish", "Celu", "ThresholdedRelu")
SWEEPS = 20
SETTLED = 1e-4  # stop when no channel's scale moves more than this (relative)


def _const(name: str, initializers: dict):
    from onnx import numpy_helper

    return numpy_helper.to_array(initializers[name]) if name in initializers else None


def activation_reason(node, initializers: dict) -> str | None:
    """None when `node` is positively homogeneous, else why not (one phrase)."""
    from trtlab.graph.onnx_utils import attribute

    if node.op_type in HOMOGENEOUS:
        return None
    if node.op_type == "Clip":
        low = _const(node.input[1], initializers) if len(node.input) > 1 and node.input[1] else \
            attribute(node, "min", None)
        high = _const(node.input[2], initializers) if len(node.input) > 2 and node.input[2] else \
            attribute(node, "max", None)
        low = None if low is None else float(np.asarray(low))
        high = None if high is None else float(np.asarray(high))
        if low in (None, 0.0, -np.inf) and high in (None, np.inf):
            return None
        name = "ReLU6" if (low, high) == (0.0, 6.0) else f"Clip({low:g}, {high:g})"
        return f"{name} is not positively homogeneous (its finite bound would have to scale per channel)"
    return f"{node.op_type} is not positively homogeneous"


class _Graph:
    def __init__(self, model):
        self.model = model
        self.initializers = {i.name: i for i in model.graph.initializer}
        self.producers = {out: node for node in model.graph.node for out in node.output}
        self.readers: dict[str, list] = {}
        for node in model.graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
        self.outputs = {o.name for o in model.graph.output}

    def only_reader(self, tensor: str, node) -> bool:
        return tensor not in self.outputs and [r.name for r in self.readers.get(tensor, [])] == [node.name]

    def conv(self, node) -> bool:
        return node is not None and node.op_type == "Conv" and len(node.input) > 1 \
            and node.input[1] in self.initializers and (len(node.input) < 3 or not node.input[2]
                                                        or node.input[2] in self.initializers)


def find_pairs(model) -> tuple[list[tuple], list[dict]]:
    """([(first Conv, second Conv, activation node or None, second is depthwise)] that can be equalized, [skipped pairs: {'first',
    'second', 'activation', 'reason'}])."""
    from trtlab.graph.onnx_utils import attribute

    g = _Graph(model)
    pairs, skipped = [], []
    for second in model.graph.node:
        if not g.conv(second):
            continue
        between = g.producers.get(second.input[0])
        if between is None:
            continue
        if g.conv(between):
            first, activation = between, None
        elif between.op_type in ACTIVATIONS and g.conv(g.producers.get(between.input[0])):
            first, activation = g.producers[between.input[0]], between
        elif between.op_type == "Mul" and _silu(between, g):
            skipped.append({"first": g.producers[_silu(between, g)].name, "second": second.name, "activation": "SiLU",
                            "reason": "SiLU (x·sigmoid x) is not positively homogeneous"})
            continue
        else:
            continue
        if activation is not None and not (g.only_reader(first.output[0], activation)
                                           and g.only_reader(activation.output[0], second)):
            continue
        if activation is None and not g.only_reader(first.output[0], second):
            continue
        item = {"first": first.name, "second": second.name,
                "activation": activation.op_type if activation is not None else "none"}
        reason = activation_reason(activation, g.initializers) if activation is not None else None
        weights = _const(second.input[1], g.initializers)
        groups = int(attribute(second, "group", 1))
        if reason is None and groups != 1 and not (groups == weights.shape[0] and weights.shape[1] == 1):
            reason = f"the second Conv is grouped ({groups} groups, not depthwise)"
        shared = [n for n in [first.input[1], *(first.input[2:3]), second.input[1]]
                  if n and len(g.readers.get(n, [])) > 1]
        if reason is None and shared:
            reason = f"weight {shared[0]!r} is shared with another node"
        if reason is None:
            pairs.append((first, second, activation, groups > 1))
        else:
            skipped.append({**item, "reason": reason})
    return pairs, skipped


def _silu(mul, g: _Graph) -> str | None:
    """The tensor x of a Mul(x, Sigmoid(x)) made by a Conv, else None."""
    a, b = (list(mul.input) + ["", ""])[:2]
    for x, s in ((a, b), (b, a)):
        producer = g.producers.get(s)
        if producer is not None and producer.op_type == "Sigmoid" and producer.input[0] == x and g.conv(
                g.producers.get(x)):
            return x
    return None


def channel_ranges(first_w: np.ndarray, second_w: np.ndarray, depthwise: bool) -> tuple[np.ndarray, np.ndarray]:
    """(max |w| per output channel of the first, per input channel of the second)."""
    r1 = np.abs(first_w).reshape(first_w.shape[0], -1).max(axis=1)
    r2 = np.abs(second_w).reshape(second_w.shape[0], -1).max(axis=1) if depthwise else \
        np.abs(np.moveaxis(second_w, 1, 0)).reshape(second_w.shape[1], -1).max(axis=1)
    return r1, r2


def equalize_pairs(model):
    """(a copy of `model` with every equalizable pair equalized, the report: pairs equalized, pairs skipped and why,
    sweeps, and the channel-range spread before and after)."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    pairs, skipped = find_pairs(out)
    inits = {i.name: i for i in out.graph.initializer}
    values = {name: numpy_helper.to_array(inits[name]).astype(np.float32)
              for first, second, _, _ in pairs for name in [first.input[1], second.input[1], *first.input[2:3]] if name}
    spread_before = _spread(pairs, values)
    sweeps = 0
    for sweeps in range(1, SWEEPS + 1):
        moved = 0.0
        for first, second, _, depthwise in pairs:
            w1, w2 = values[first.input[1]], values[second.input[1]]
            r1, r2 = channel_ranges(w1, w2, depthwise)
            scale = np.where((r1 > 0) & (r2 > 0), np.sqrt(r1 / np.where(r2 > 0, r2, 1)), 1.0).astype(np.float32)
            values[first.input[1]] = w1 / scale.reshape([-1] + [1] * (w1.ndim - 1))
            if len(first.input) > 2 and first.input[2]:
                values[first.input[2]] = values[first.input[2]] / scale
            values[second.input[1]] = w2 * scale.reshape([-1] + [1] * (w2.ndim - 1) if depthwise else
                                                         [1, -1] + [1] * (w2.ndim - 2))
            moved = max(moved, float(np.abs(np.log(scale)).max()) if scale.size else 0.0)
        if moved < SETTLED:
            break
    for name, array in values.items():
        inits[name].CopyFrom(numpy_helper.from_array(array.astype(np.float32), name))
    return out, {"pairs_equalized": len(pairs), "pairs": [[f.name, s.name] for f, s, _, _ in pairs],
                 "skipped": skipped, "sweeps": sweeps if pairs else 0,
                 "range_spread_before": spread_before, "range_spread_after": _spread(pairs, values)}


def _spread(pairs, values) -> float | None:
    """The median over equalized layers of (largest / smallest non-zero output-channel range) of the first Conv:
    what per-tensor weight scales suffer from."""
    ratios = []
    for first, *_ in pairs:
        r = np.abs(values[first.input[1]]).reshape(values[first.input[1]].shape[0], -1).max(axis=1)
        r = r[r > 0]
        if len(r):
            ratios.append(float(r.max() / r.min()))
    return float(np.median(ratios)) if ratios else None
