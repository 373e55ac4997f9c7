"""The op table of the torch backend: ONNX op type → builder.

A builder reads its node once, at conversion (attributes, constant inputs, opset), refuses what it does not
implement with a one-line UserError naming the node, and returns the function that runs the node: it takes the
node's inputs as torch tensors (None for an omitted optional input) and returns one tensor, or a tuple when the
node has several outputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from trtlab.core.errors import UserError

OPS: dict[str, Callable] = {}
#: Ops whose result on constant inputs is the same bit for bit on any device (IEEE-rounded arithmetic, data
#: movement, Q/DQ): computed once at conversion when every input is a constant (e.g. a weight's
#: DequantizeLinear), with the same function that would run them on the device.
FOLDABLE = {"Constant", "ConstantOfShape", "Identity", "Cast", "CastLike", "Reshape", "Flatten", "Transpose",
            "Squeeze", "Unsqueeze", "Concat", "Gather", "Slice", "Shape", "Size", "Expand", "Tile", "Split",
            "QuantizeLinear", "DequantizeLinear", "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Range", "Where",
            "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or"}


class UnsupportedOnnx(UserError):
    """A node (op type, attribute or input form) the torch backend does not implement."""


def op(*names: str):
    """Register a builder for the ONNX op types `names` (default domain)."""
    def register(builder):
        for name in names:
            OPS[name] = builder
        return builder
    return register


def builder_for(op_type: str):
    """The builder registered for `op_type` (None when no op module registers it). The op modules register
    themselves on import; the package (trtlab.backends.gpu) imports them, so every importer of this module has
    them: the table never imports its own entries."""
    return OPS.get(op_type)


@dataclass
class NodeContext:
    """What a builder sees of its node."""

    node: object  # onnx.NodeProto
    opset: int
    constants: dict = field(default_factory=dict)  # tensor name → numpy array, for every constant tensor
    options: dict = field(default_factory=dict)  # conversion options (graph_module.convert_onnx)
    index: int = 0  # position in the graph: names an unnamed node

    @property
    def name(self) -> str:
        return self.node.name or f"#{self.index}"

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def label(self) -> str:
        return f"node {self.name!r} ({self.node.op_type})"

    def attr(self, name: str, default=None):
        from onnx import helper, numpy_helper

        for attribute in self.node.attribute:
            if attribute.name == name:
                value = helper.get_attribute_value(attribute)
                if isinstance(value, bytes):
                    return value.decode()
                if hasattr(value, "data_type"):  # TensorProto
                    return numpy_helper.to_array(value)
                return value
        return default

    def has_input(self, index: int) -> bool:
        return index < len(self.node.input) and bool(self.node.input[index])

    def constant(self, index: int) -> np.ndarray | None:
        """The value of input `index` when it is a constant (initializer, Constant or folded), else None."""
        if not self.has_input(index):
            return None
        return self.constants.get(self.node.input[index])

    def fail(self, what: str, fix: str = "") -> None:
        raise UnsupportedOnnx(f"{self.label}: {what} is not supported by the torch backend",
                              fix or "run this model with backend='ort' (ONNX Runtime runs every standard op)")


# ONNX TensorProto data type → torch dtype name (resolved lazily: torch is imported only when used).
_TORCH_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
                 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}


def torch_dtype(onnx_type: int, ctx: NodeContext | None = None):
    import torch

    name = _TORCH_DTYPES.get(int(onnx_type))
    if name is None or not hasattr(torch, name):
        from onnx import TensorProto

        label = TensorProto.DataType.Name(int(onnx_type)) if int(onnx_type) in TensorProto.DataType.values() \
            else str(onnx_type)
        if ctx is not None:
            ctx.fail(f"data type {label}")
        raise UnsupportedOnnx(f"data type {label} is not supported by the torch backend",
                              "run this model with backend='ort'")
    return getattr(torch, name)


def same_device(*tensors):
    """Tensors moved to one device: small shape tensors live on the CPU (no device sync to read them) and meet
    device tensors in Concat, Gather and arithmetic."""
    present = [t for t in tensors if t is not None]
    devices = {t.device for t in present}
    if len(devices) <= 1:
        return tensors
    target = next(t.device for t in present if t.device.type != "cpu")
    return tuple(None if t is None else t.to(target) for t in tensors)
