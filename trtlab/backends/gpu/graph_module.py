"""ONNX graph → torch.nn.Module that runs it node by node (the torch backend's converter).

Why an explicit executor rather than onnx2torch: onnx2torch has no QuantizeLinear/DequantizeLinear, imports
torchvision at import time (a wheel that must match the installed torch build, absent on bare CUDA machines), and
its converters choose torch layers whose rounding differs from the ONNX formulas (HardSwish, LRN); the op set of
real classifier graphs is small enough to write out, once, with the ONNX semantics and the graph's own types.

Conversion:
1. graphs below opset 13 are brought to 13 with ONNX's version converter (same computation, newer spelling);
2. nodes run in the graph's (topological) order; each node's builder checks its attributes and constant inputs
   now, so an unsupported op or form is a one-line UserError naming the node before any image is read;
3. nodes whose inputs are all constants and whose result is device-independent (weight DequantizeLinear, Casts,
   shape arithmetic) are computed once here with the very function that would run them on the device;
4. constants that running nodes read become buffers (moved with `.to(device)`); a tensor is dropped as soon as
   its last reader has run, so a batch of 256 holds only the live activations.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from trtlab.backends.gpu.registry import FOLDABLE, NodeContext, UnsupportedOnnx, builder_for
from trtlab.graph.onnx_utils import opset_of

MIN_OPSET = 13


@dataclass
class Step:
    fn: object
    inputs: tuple  # tensor names, "" for omitted optional inputs
    outputs: tuple
    release: tuple  # tensors no later step reads
    label: str


def _load(model):
    import onnx

    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model))
    return model


def _upgrade(model):
    """Graphs below opset 13 in opset 13's spelling (attributes that became inputs, Softmax's axis)."""
    opset = opset_of(model)
    if opset >= MIN_OPSET:
        return model
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:
        raise UnsupportedOnnx(f"the model uses opset {opset} and ONNX's version converter cannot bring it to "
                              f"{MIN_OPSET} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})",
                              "re-export the model with opset ≥ 13, or use backend='ort'") from exc


def _check_domains(model) -> None:
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise UnsupportedOnnx(f"node {node.name!r} ({node.domain}::{node.op_type}) is a custom-domain op, which "
                                  f"the torch backend does not run", "use backend='ort'")
        if any(a.type in (5, 10) for a in node.attribute):  # GRAPH / GRAPHS: If, Loop, Scan bodies
            raise UnsupportedOnnx(f"node {node.name!r} ({node.op_type}) has a subgraph, which the torch backend "
                                  f"does not run", "use backend='ort'")


QUANTIZE_PRECISIONS = ("scale", "float32")


def convert_onnx(model, quantize_precision: str = "scale", fused_qdq: bool = True):
    """An `OnnxModule` running `model` (a path or ModelProto). Raises UnsupportedOnnx (a UserError) naming the
    first node the torch backend cannot run.

    `quantize_precision`: the type QuantizeLinear divides in when its node does not say — "scale" (the spec: the
    scale's type, FP16 on the FP16 float path) or "float32" (what ONNX Runtime's CPU kernel does). `fused_qdq`:
    QuantizeLinear / DequantizeLinear as one kernel each where that is bit for bit the plain ops (ops_quant);
    False runs the plain ops everywhere (how the bench measures what the kernels bring)."""
    if quantize_precision not in QUANTIZE_PRECISIONS:
        from trtlab.core.errors import UserValueError

        raise UserValueError(f"quantize_precision={quantize_precision!r} is not one of {QUANTIZE_PRECISIONS}",
                             "use 'scale' (the ONNX spec) or 'float32' (ONNX Runtime's CPU arithmetic)")
    options = {"quantize_precision": quantize_precision, "fused_qdq": bool(fused_qdq)}
    import torch
    from onnx import numpy_helper

    model = _upgrade(_load(model))
    _check_domains(model)
    graph, opset = model.graph, opset_of(model)
    constants: dict[str, np.ndarray] = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    folded: dict[str, "torch.Tensor"] = {}
    inputs = [i.name for i in graph.input if i.name not in constants]
    known = set(inputs) | set(constants)
    steps: list[Step] = []
    for index, node in enumerate(graph.node):
        ctx = NodeContext(node, opset, constants, options, index)
        missing = [name for name in node.input if name and name not in known]
        if missing:
            raise UnsupportedOnnx(f"{ctx.label} reads {missing[0]!r}, which no earlier node produces",
                                  "the graph is not topologically sorted or is damaged: re-export it")
        builder = builder_for(node.op_type)
        if builder is None:
            ctx.fail(f"op type {node.op_type}")
        fn = builder(ctx)
        known.update(o for o in node.output if o)
        if node.op_type in FOLDABLE and all(not name or name in constants for name in node.input):
            values = _run_on_constants(fn, node, constants, folded, ctx.label)
            for name, value in zip(node.output, values):
                if name:
                    folded[name] = value
                    constants[name] = value.numpy()
            continue
        steps.append(Step(fn, tuple(node.input), tuple(node.output), (), ctx.label))
    outputs = [o.name for o in graph.output]
    return module_class()(inputs, outputs, _with_release(steps, outputs), _buffers(steps, outputs, constants, folded),
                      input_types=_input_types(graph, inputs), opset=opset, options=options)


def _run_on_constants(fn, node, constants, folded, label):
    import torch

    args = []
    for name in node.input:
        if not name:
            args.append(None)
        else:
            args.append(folded[name] if name in folded else torch.from_numpy(np.array(constants[name])))
    try:
        result = fn(*args)
    except Exception as exc:
        raise UnsupportedOnnx(f"{label} fails on its constant inputs ({exc})", "check the model with "
                              "onnx.checker, or use backend='ort'") from exc
    return result if isinstance(result, tuple) else (result,)


def _buffers(steps, outputs, constants, folded) -> dict:
    import torch

    read = {name for step in steps for name in step.inputs if name} | set(outputs)
    buffers = {}
    for name in read:
        if name in folded:
            buffers[name] = folded[name]
        elif name in constants:
            buffers[name] = torch.from_numpy(np.array(constants[name]))
    return buffers


def _with_release(steps: list[Step], outputs: list[str]) -> list[Step]:
    last_reader: dict[str, int] = {}
    for index, step in enumerate(steps):
        for name in step.inputs:
            if name:
                last_reader[name] = index
    keep = set(outputs)
    released: dict[int, list[str]] = {}
    for name, index in last_reader.items():
        if name not in keep:
            released.setdefault(index, []).append(name)
    for index, step in enumerate(steps):  # outputs nothing reads (a Dropout mask, unused branches)
        unread = [o for o in step.outputs if o and o not in last_reader and o not in keep]
        released.setdefault(index, []).extend(unread)
    return [Step(s.fn, s.inputs, s.outputs, tuple(released.get(i, ())), s.label) for i, s in enumerate(steps)]


def _input_types(graph, inputs) -> dict:
    types = {}
    for value in graph.input:
        if value.name in inputs:
            types[value.name] = value.type.tensor_type.elem_type
    return types


def _make_module_class():
    import torch

    class _OnnxModule(torch.nn.Module):
        """Runs the converted graph: `module(*inputs)` → tuple of the graph's outputs (torch tensors)."""

        def __init__(self, inputs, outputs, steps, buffers, input_types=None, opset=0, options=None):
            super().__init__()
            self.input_names = list(inputs)
            self.output_names = list(outputs)
            self.steps = steps
            self.input_types = dict(input_types or {})
            self.opset = opset
            self.options = dict(options or {})
            self._buffer_names = {}
            for index, (name, value) in enumerate(sorted(buffers.items())):
                attribute = f"constant_{index}"
                self.register_buffer(attribute, value, persistent=False)
                self._buffer_names[name] = attribute

        def forward(self, *inputs):
            env = self._execute(inputs, keep=None)
            return tuple(env[name] for name in self.output_names)

        def trace(self, *inputs) -> dict:
            """Every tensor the graph computes on `inputs` (name → tensor): layer-by-layer comparisons."""
            return self._execute(inputs, keep=True)

        def _execute(self, inputs, keep) -> dict:
            if len(inputs) != len(self.input_names):
                raise ValueError(f"the graph takes {len(self.input_names)} input(s) "
                                 f"{self.input_names}, got {len(inputs)}")
            env = {name: getattr(self, attribute) for name, attribute in self._buffer_names.items()}
            env.update(zip(self.input_names, inputs))
            for step in self.steps:
                args = [env[name] if name else None for name in step.inputs]
                try:
                    result = step.fn(*args)
                except Exception as exc:  # name the node: a shape error deep in a graph is otherwise anonymous
                    raise RuntimeError(f"{step.label}: {exc}") from exc
                if len(step.outputs) == 1:
                    env[step.outputs[0]] = result
                else:
                    result = result if isinstance(result, tuple) else (result,)
                    for name, value in zip(step.outputs, result):
                        if name:
                            env[name] = value
                if not keep:
                    for name in step.release:
                        env.pop(name, None)
            return env

        def constant(self, name: str):
            """The constant tensor `name` as the module holds it (initializer or folded, e.g. a dequantized
            weight), or None."""
            attribute = self._buffer_names.get(name)
            return None if attribute is None else getattr(self, attribute)

        def op_types(self) -> dict:
            counts: dict[str, int] = {}
            for step in self.steps:
                op_type = step.label.rsplit("(", 1)[-1].rstrip(")")
                counts[op_type] = counts.get(op_type, 0) + 1
            return counts

    return _OnnxModule


_MODULE_CLASS = []


def module_class():
    """The torch.nn.Module class of converted graphs (defined on first use: importing this module imports no torch)."""
    if not _MODULE_CLASS:
        _MODULE_CLASS.append(_make_module_class())
    return _MODULE_CLASS[0]


def __getattr__(name):
    if name == "OnnxModule":
        return module_class()
    raise AttributeError(name)
