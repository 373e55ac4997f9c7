"""Elementwise arithmetic, comparisons, casts, constants, shape and data-movement ops, reductions.

Each op computes in the type of its inputs, as ONNX types them (a valid graph gives both operands of an Add one
type, so torch's promotion never widens anything). Shape tensors (Shape and what is computed from it) stay on the
CPU, so reading them (Reshape, Expand, Slice) never waits for the device.
"""
from __future__ import annotations

import numpy as np

from trtlab.backends.gpu.registry import NodeContext, op, same_device, torch_dtype


def _ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _runtime_ints(ctx: NodeContext, index: int):
    """A function giving input `index` as a list of ints: the constant when there is one, else read at run time."""
    value = ctx.constant(index)
    if value is not None:
        fixed = _ints(value)
        return lambda tensor: fixed
    return lambda tensor: [int(v) for v in tensor.reshape(-1).tolist()]


# -- elementwise -------------------------------------------------------------------------------------------------
def _binary(function):
    def build(ctx: NodeContext):
        def run(a, b):
            a, b = same_device(a, b)
            return function(a, b)
        return run
    return build


def _div(a, b):
    import torch

    if a.is_floating_point():
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")  # ONNX integer Div truncates (C semantics)


def _pow(a, b):
    import torch

    # The result has the base's type (ONNX Pow: T for the base, T1 for the exponent).
    return torch.pow(a, b.to(a.dtype) if a.is_floating_point() else b).to(a.dtype)


def _register_binaries():
    import operator

    table = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": _div, "Pow": _pow,
             "Equal": lambda a, b: a == b, "Less": lambda a, b: a < b, "Greater": lambda a, b: a > b,
             "LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b,
             "And": operator.and_, "Or": operator.or_, "Xor": operator.xor}
    for name, function in table.items():
        op(name)(_binary(function))


_register_binaries()


@op("Sum", "Mean", "Max", "Min")
def variadic(ctx: NodeContext):
    import torch

    kind = ctx.op_type

    def run(*inputs):
        inputs = same_device(*[t for t in inputs if t is not None])
        result = inputs[0]
        for other in inputs[1:]:
            result = {"Sum": torch.add, "Mean": torch.add, "Max": torch.maximum, "Min": torch.minimum}[kind](
                result, other)
        if kind == "Mean":
            result = result / len(inputs)
        return result
    return run


@op("Where")
def where(ctx: NodeContext):
    import torch

    def run(condition, a, b):
        condition, a, b = same_device(condition, a, b)
        return torch.where(condition, a, b)
    return run


_UNARY = {"Neg": "neg", "Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
          "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign", "Erf": "erf", "Not": "logical_not",
          "Tanh": "tanh", "Sigmoid": "sigmoid", "Relu": "relu", "Sin": "sin", "Cos": "cos"}


@op(*_UNARY)
def unary(ctx: NodeContext):
    import torch

    return getattr(torch, _UNARY[ctx.op_type])  # torch.round rounds half to even, as ONNX Round


# -- constants and casts -----------------------------------------------------------------------------------------
@op("Constant")
def constant(ctx: NodeContext):
    import torch

    value = None
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        found = ctx.attr(key)
        if found is not None:
            dtype = np.float32 if key.startswith("value_float") else np.int64
            value = np.asarray(found) if key == "value" else np.asarray(found, dtype)
    if value is None:
        ctx.fail("a Constant that is not a tensor, float(s) or int(s)")
    tensor = torch.from_numpy(np.array(value))
    return lambda: tensor


@op("ConstantOfShape")
def constant_of_shape(ctx: NodeContext):
    import torch

    fill = ctx.attr("value")
    fill = np.zeros(1, np.float32) if fill is None else np.asarray(fill).reshape(-1)
    fill_tensor = torch.from_numpy(np.array(fill)).reshape(())
    shape_of = _runtime_ints(ctx, 0)
    return lambda shape: fill_tensor.expand(shape_of(shape)).clone()


@op("Cast")
def cast(ctx: NodeContext):
    dtype = torch_dtype(int(ctx.attr("to")), ctx)
    return lambda x: x.to(dtype)


@op("CastLike")
def cast_like(ctx: NodeContext):
    return lambda x, like: x.to(like.dtype)


@op("Identity", "Dropout")
def identity(ctx: NodeContext):
    import torch

    if ctx.op_type == "Dropout" and (ctx.attr("training_mode") or ctx.has_input(2) and ctx.constant(2) is not None
                                     and bool(ctx.constant(2))):
        ctx.fail("Dropout in training mode")
    if len(ctx.node.output) > 1 and ctx.node.output[1]:  # Dropout's mask: all kept in inference
        return lambda x, *rest: (x, torch.ones_like(x, dtype=torch.bool))
    return lambda x, *rest: x


# -- shapes ------------------------------------------------------------------------------------------------------
@op("Shape")
def shape(ctx: NodeContext):
    import torch

    start, end = ctx.attr("start", 0), ctx.attr("end")
    return lambda x: torch.tensor(list(x.shape)[start:end], dtype=torch.int64)


@op("Size")
def size(ctx: NodeContext):
    import torch

    return lambda x: torch.tensor(x.numel(), dtype=torch.int64)


@op("Reshape")
def reshape(ctx: NodeContext):
    allow_zero = bool(ctx.attr("allowzero", 0))
    shape_of = _runtime_ints(ctx, 1)

    def run(x, shape_tensor):
        target = shape_of(shape_tensor)
        if not allow_zero:  # 0 copies the input's dimension
            target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
        return x.reshape(target)
    return run


@op("Flatten")
def flatten(ctx: NodeContext):
    axis = int(ctx.attr("axis", 1))

    def run(x):
        split = axis % x.dim() if axis < 0 else axis
        outer = int(np.prod(x.shape[:split], dtype=np.int64))
        return x.reshape(outer, -1)
    return run


@op("Transpose")
def transpose(ctx: NodeContext):
    perm = ctx.attr("perm")
    return lambda x: x.permute(*(perm if perm is not None else reversed(range(x.dim()))))


def _axes(ctx: NodeContext, attr_until: int, index: int = 1):
    """Axes given as an attribute (before opset `attr_until`) or as input `index` (from it on)."""
    if ctx.opset < attr_until:
        axes = ctx.attr("axes")
        return lambda tensor: None if axes is None else list(axes)
    if not ctx.has_input(index):
        return lambda tensor: None
    return _runtime_ints(ctx, index)


@op("Squeeze")
def squeeze(ctx: NodeContext):
    axes_of = _axes(ctx, 13)

    def run(x, axes_tensor=None):
        axes = axes_of(axes_tensor)
        if axes is None:
            return x.reshape([d for d in x.shape if d != 1])
        drop = {a % x.dim() for a in axes}
        return x.reshape([d for i, d in enumerate(x.shape) if i not in drop])
    return run


@op("Unsqueeze")
def unsqueeze(ctx: NodeContext):
    axes_of = _axes(ctx, 13)

    def run(x, axes_tensor=None):
        axes = axes_of(axes_tensor)
        rank = x.dim() + len(axes)
        shape = list(x.shape)
        for axis in sorted(a % rank for a in axes):
            shape.insert(axis, 1)
        return x.reshape(shape)
    return run


@op("Concat")
def concat(ctx: NodeContext):
    import torch

    axis = int(ctx.attr("axis"))
    return lambda *inputs: torch.cat(same_device(*inputs), dim=axis)


@op("Split")
def split(ctx: NodeContext):
    import torch

    axis = int(ctx.attr("axis", 0))
    outputs = len(ctx.node.output)
    sizes_of = _runtime_ints(ctx, 1) if ctx.opset >= 13 and ctx.has_input(1) else None
    fixed = ctx.attr("split") if ctx.opset < 13 else None

    def run(x, sizes_tensor=None):
        sizes = sizes_of(sizes_tensor) if sizes_of else (list(fixed) if fixed is not None else None)
        if sizes is None:
            length = x.shape[axis]
            chunk = -(-length // outputs)  # ceil, as opset 18's num_outputs (equal split when it divides)
            sizes = [min(chunk, length - i * chunk) for i in range(outputs)]
        return tuple(torch.split(x, sizes, dim=axis))
    return run


@op("Slice")
def slice_(ctx: NodeContext):
    if ctx.opset < 10:
        ctx.fail("Slice before opset 10")
    starts_of, ends_of = _runtime_ints(ctx, 1), _runtime_ints(ctx, 2)
    axes_of = _runtime_ints(ctx, 3) if ctx.has_input(3) else (lambda t: None)
    steps_of = _runtime_ints(ctx, 4) if ctx.has_input(4) else (lambda t: None)

    def run(x, starts, ends, axes=None, steps=None):
        import torch

        starts, ends = starts_of(starts), ends_of(ends)
        axes = axes_of(axes) or list(range(len(starts)))
        steps = steps_of(steps) or [1] * len(starts)
        result = x
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis %= x.dim()
            length = x.shape[axis]
            start, end = (v + length if v < 0 else v for v in (start, end))
            if step > 0:
                index = [slice(None)] * x.dim()
                index[axis] = slice(max(0, min(length, start)), max(0, min(length, end)), step)
                result = result[tuple(index)]
            else:  # torch slices have no negative step: gather the indices ONNX names
                start, end = max(0, min(length - 1, start)), max(-1, min(length - 1, end))
                picked = torch.arange(start, end, step, device=x.device)
                result = torch.index_select(result, axis, picked)
        return result
    return run


@op("Gather")
def gather(ctx: NodeContext):
    import torch

    axis = int(ctx.attr("axis", 0))

    def run(data, indices):
        data, indices = same_device(data, indices)
        indices = torch.where(indices < 0, indices + data.shape[axis], indices)
        return torch.index_select(data, axis, indices.reshape(-1)).reshape(
            data.shape[:axis % data.dim()] + indices.shape + data.shape[axis % data.dim() + 1:])
    return run


@op("Expand")
def expand(ctx: NodeContext):
    shape_of = _runtime_ints(ctx, 1)

    def run(x, shape_tensor):
        target = shape_of(shape_tensor)
        rank = max(len(target), x.dim())
        target = [1] * (rank - len(target)) + target
        current = [1] * (rank - x.dim()) + list(x.shape)
        final = [c if t == 1 else t for c, t in zip(current, target)]
        return x.reshape(current).expand(final)
    return run


@op("Tile")
def tile(ctx: NodeContext):
    repeats_of = _runtime_ints(ctx, 1)
    return lambda x, repeats: x.repeat(repeats_of(repeats))


@op("Range")
def range_(ctx: NodeContext):
    import torch

    return lambda start, limit, delta: torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)


@op("Pad")
def pad(ctx: NodeContext):
    import torch.nn.functional as F

    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        ctx.fail(f"Pad mode {mode!r}")
    pads_of = _runtime_ints(ctx, 1)
    axes_of = _runtime_ints(ctx, 3) if ctx.has_input(3) else (lambda t: None)

    def run(x, pads, value=None, axes=None):
        pads = pads_of(pads)
        axes = [a % x.dim() for a in (axes_of(axes) or range(x.dim()))]
        half = len(pads) // 2
        begin, end = dict(zip(axes, pads[:half])), dict(zip(axes, pads[half:]))
        torch_pads = []
        for axis in reversed(range(x.dim())):  # F.pad takes the last dimension first
            torch_pads += [begin.get(axis, 0), end.get(axis, 0)]
        if mode == "constant":
            fill = 0.0 if value is None or value.numel() == 0 else value.item()
            return F.pad(x, torch_pads, value=fill)
        while len(torch_pads) > 2 and torch_pads[-2:] == [0, 0]:  # torch pads only the last 1–3 axes here
            torch_pads = torch_pads[:-2]
        return F.pad(x, torch_pads, mode="reflect" if mode == "reflect" else "replicate")
    return run


# -- reductions --------------------------------------------------------------------------------------------------
_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "amax", "ReduceMin": "amin", "ReduceProd": "prod",
           "ReduceL2": "l2", "ReduceSumSquare": "sumsquare"}


@op(*_REDUCE)
def reduce(ctx: NodeContext):
    import torch

    kind = _REDUCE[ctx.op_type]
    keep = bool(ctx.attr("keepdims", 1))
    noop_when_empty = bool(ctx.attr("noop_with_empty_axes", 0))
    axes_of = _axes(ctx, 13 if ctx.op_type == "ReduceSum" else 18)

    def run(x, axes_tensor=None):
        axes = axes_of(axes_tensor)
        if not axes:
            if noop_when_empty:
                return x
            axes = list(range(x.dim()))
        if kind == "l2":
            return torch.sqrt(torch.sum(x * x, dim=axes, keepdim=keep))
        if kind == "sumsquare":
            return torch.sum(x * x, dim=axes, keepdim=keep)
        if kind == "prod":
            for axis in sorted((a % x.dim() for a in axes), reverse=True):
                x = torch.prod(x, dim=axis, keepdim=keep)
            return x
        return getattr(torch, kind)(x, dim=axes, keepdim=keep)
    return run


@op("ArgMax", "ArgMin")
def arg_extreme(ctx: NodeContext):
    import torch

    axis, keep = int(ctx.attr("axis", 0)), bool(ctx.attr("keepdims", 1))
    if ctx.attr("select_last_index", 0):
        ctx.fail("select_last_index=1")
    function = torch.argmax if ctx.op_type == "ArgMax" else torch.argmin
    return lambda x: function(x, dim=axis, keepdim=keep)
