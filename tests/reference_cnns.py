"""Architecture-only ONNX graphs of the small CNNs NVIDIA publishes TensorRT latencies for, built with onnx.helper
(random weights, BatchNorm already folded into the convolutions' biases): MobileNet-v1, MobileNet-v2,
MobileNet-v3-Large and EfficientNet-B0, layer for layer as their papers define them. Useless for accuracy; what the
speed estimate (trtlab.graph.roofline) reads is the graph's structure, shapes and MACs, which are the real ones.

  MobileNet-v1: Howard et al. 2017, table 1 (depthwise-separable blocks, ReLU).
  MobileNet-v2: Sandler et al. 2018, table 2 (inverted residuals, ReLU6 = Clip(0, 6), linear bottlenecks).
  MobileNet-v3-Large: Howard et al. 2019, table 1 (hard-swish, squeeze-excite with hard-sigmoid).
  EfficientNet-B0: Tan & Le 2019, table 1 (MBConv with squeeze-excite ratio 0.25 of the block input, swish).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Builder:
    def __init__(self, name: str):
        self.name, self.nodes, self.inits, self.count = name, [], [], 0
        self.rng = np.random.default_rng(0)

    def _name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def op(self, op_type: str, inputs: list, **attrs) -> str:
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{out}_node", **attrs))
        return out

    def const(self, values: np.ndarray, stem: str) -> str:
        name = self._name(stem)
        self.inits.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1) -> str:
        weight = self.const(self.rng.normal(0, 0.05, (cout, cin // groups, k, k)), "w")
        bias = self.const(self.rng.normal(0, 0.01, cout), "b")
        pad = k // 2
        return self.op("Conv", [x, weight, bias], kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad, pad, pad, pad], group=groups)

    def act(self, x: str, kind: str) -> str:
        if kind == "relu":
            return self.op("Relu", [x])
        if kind == "relu6":
            return self.op("Clip", [x, self.const(np.array(0.0), "lo"), self.const(np.array(6.0), "hi")])
        if kind == "swish":
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        if kind == "hswish":
            return self.op("HardSwish", [x])
        assert kind == "linear", kind
        return x

    def squeeze_excite(self, x: str, channels: int, squeezed: int, inner: str, gate: str) -> str:
        pooled = self.op("GlobalAveragePool", [x])
        reduced = self.act(self.conv(pooled, channels, squeezed), inner)
        expanded = self.conv(reduced, squeezed, channels)
        scale = self.op("Sigmoid", [expanded]) if gate == "sigmoid" else \
            self.op("HardSigmoid", [expanded], alpha=1 / 6, beta=0.5)
        return self.op("Mul", [x, scale])

    def head(self, x: str, channels: int, classes: int = 1000) -> str:
        flat = self.op("Flatten", [self.op("GlobalAveragePool", [x])])
        weight = self.const(self.rng.normal(0, 0.05, (classes, channels)), "fc_w")
        bias = self.const(np.zeros(classes), "fc_b")
        return self.op("Gemm", [flat, weight, bias], transB=1)

    def model(self, output: str):
        graph = helper.make_graph(self.nodes, self.name,
                                  [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["N", 1000])],
                                  self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        onnx.checker.check_model(model, full_check=True)
        return model


def mobilenet_v1():
    b = _Builder("mobilenet_v1")
    x, c = b.act(b.conv("input", 3, 32, 3, 2), "relu"), 32
    for cout, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 \
            + [(1024, 2), (1024, 1)]:
        x = b.act(b.conv(x, c, c, 3, stride, groups=c), "relu")
        x, c = b.act(b.conv(x, c, cout), "relu"), cout
    return b.model(b.head(x, c))


def _inverted_residual(b, x, cin, expanded, cout, k, stride, act, se=None):
    """MBConv / inverted residual: 1×1 expansion (skipped when `expanded` == `cin`), k×k depthwise, optional
    squeeze-excite `se` = (squeezed channels, inner activation, gate), linear 1×1 projection, identity shortcut."""
    y = b.act(b.conv(x, cin, expanded), act) if expanded != cin else x
    y = b.act(b.conv(y, expanded, expanded, k, stride, groups=expanded), act)
    if se is not None:
        y = b.squeeze_excite(y, expanded, *se)
    y = b.conv(y, expanded, cout)
    return b.op("Add", [y, x]) if stride == 1 and cin == cout else y


def mobilenet_v2():
    b = _Builder("mobilenet_v2")
    x, c = b.act(b.conv("input", 3, 32, 3, 2), "relu6"), 32
    for t, cout, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                          (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            x = _inverted_residual(b, x, c, c * t, cout, 3, s if i == 0 else 1, "relu6")
            c = cout
    x = b.act(b.conv(x, c, 1280), "relu6")
    return b.model(b.head(x, 1280))


def mobilenet_v3_large():
    def divisible(v: float, d: int = 8) -> int:  # the paper's make_divisible
        new = max(d, int(v + d / 2) // d * d)
        return new + d if new < 0.9 * v else new

    b = _Builder("mobilenet_v3_large")
    x, c = b.act(b.conv("input", 3, 16, 3, 2), "hswish"), 16
    for k, expanded, cout, se, act, s in [
            (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
            (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
            (3, 240, 80, False, "hswish", 2), (3, 200, 80, False, "hswish", 1), (3, 184, 80, False, "hswish", 1),
            (3, 184, 80, False, "hswish", 1), (3, 480, 112, True, "hswish", 1), (3, 672, 112, True, "hswish", 1),
            (5, 672, 160, True, "hswish", 2), (5, 960, 160, True, "hswish", 1), (5, 960, 160, True, "hswish", 1)]:
        x = _inverted_residual(b, x, c, expanded, cout, k, s, act,
                               (divisible(expanded / 4), "relu", "hardsigmoid") if se else None)
        c = cout
    x = b.act(b.conv(x, c, 960), "hswish")
    x = b.act(b.conv(b.op("GlobalAveragePool", [x]), 960, 1280), "hswish")
    return b.model(b.head(x, 1280))


def efficientnet_b0():
    b = _Builder("efficientnet_b0")
    x, c = b.act(b.conv("input", 3, 32, 3, 2), "swish"), 32
    for t, k, s, cout, n in [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                             (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]:
        for i in range(n):
            x = _inverted_residual(b, x, c, c * t, cout, k, s if i == 0 else 1, "swish",
                                   (max(1, int(c * 0.25)), "swish", "sigmoid"))
            c = cout
    x = b.act(b.conv(x, c, 1280), "swish")
    return b.model(b.head(x, 1280))


BUILDERS = {"mobilenet_v1": mobilenet_v1, "mobilenet_v2": mobilenet_v2, "mobilenet_v3_large": mobilenet_v3_large,
            "efficientnet_b0": efficientnet_b0}


LIGHT_RESNET50 = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"


def qdq_graph(name: str, workspace: Path, source: Path | None = None):
    """The INT8 Q/DQ graph trtlab's placement writes for `name` ('resnet50': the onnx wheel's light ResNet-50,
    'efficientnet_lite0': `source`, the exported demo model, else a BUILDERS key), on the FP16 float path with one
    scale everywhere (the speed estimate reads structure, not scales): sanitized, planned, quantized."""
    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.insertion import quantize_graph
    from trtlab.quantization.placement import DEFAULT_RULES, plan_quantization

    if name == "resnet50":
        source = LIGHT_RESNET50
    elif name in BUILDERS:
        source = workspace / f"{name}.onnx"
        onnx.save(BUILDERS[name](), source)
    model = onnx.load(str(sanitize_model(source, workspace)))
    plan = plan_quantization(model, (), DEFAULT_RULES, int8_float_path="fp16")
    return quantize_graph(model, plan, {tensor: 0.05 for tensor in plan.activations}, "fp16").model
