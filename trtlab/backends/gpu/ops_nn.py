"""Convolutions, matrix products, pools, normalisations and activations, each as the ONNX spec defines it.

Where torch's own layer computes the same thing (conv, pooling, batch norm), it is used as it is; where torch's
formula differs from ONNX's (HardSwish, HardSigmoid, LRN's window for even sizes, asymmetric pads) the ONNX formula
is written out.
"""
from __future__ import annotations

import numpy as np

from trtlab.backends.gpu.registry import NodeContext, op


def _padding(ctx: NodeContext, spatial_rank_hint: int | None = None):
    """A function (input spatial shape, kernel, strides, dilations) → (begin pads, end pads), per ONNX auto_pad."""
    auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    pads = ctx.attr("pads")
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        ctx.fail(f"auto_pad={auto_pad!r}")

    def resolve(spatial, kernel, strides, dilations):
        rank = len(spatial)
        if auto_pad == "VALID":
            return [0] * rank, [0] * rank
        if auto_pad == "NOTSET":
            given = list(pads) if pads is not None else [0] * (2 * rank)
            return given[:rank], given[rank:]
        begin, end = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        return begin, end
    return resolve


def _torch_pads(begin, end) -> list[int]:
    """ONNX (begin..., end...) spatial pads → F.pad's order (last axis first)."""
    pads = []
    for b, e in zip(reversed(begin), reversed(end)):
        pads += [int(b), int(e)]
    return pads


def _widened_on_cpu(function):
    """On the CPU, FP16/BF16 products run in float32 and are rounded once to the tensor's type: torch's CPU
    half-precision kernels are slow, and this is the arithmetic of the GPU's kernels (float32 accumulation) and of
    ONNX Runtime's CPU, which casts FP16 convolutions and GEMMs to float32 and back. On CUDA the op runs as it is."""
    import torch

    low = (torch.float16, torch.bfloat16)

    def run(x, *args, **kwargs):
        if x.device.type != "cpu" or x.dtype not in low:
            return function(x, *args, **kwargs)
        args = [a.float() if isinstance(a, torch.Tensor) and a.dtype in low else a for a in args]
        return function(x.float(), *args, **kwargs).to(x.dtype)
    return run


def _conv_function(rank: int, transposed: bool = False):
    import torch.nn.functional as F

    table = ({1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d} if transposed
             else {1: F.conv1d, 2: F.conv2d, 3: F.conv3d})
    return _widened_on_cpu(table[rank])


@op("Conv")
def conv(ctx: NodeContext):
    import torch.nn.functional as F

    group = int(ctx.attr("group", 1))
    strides_attr, dilations_attr = ctx.attr("strides"), ctx.attr("dilations")
    padding = _padding(ctx)

    def run(x, weight, bias=None):
        rank = x.dim() - 2
        if rank not in (1, 2, 3):
            raise ValueError(f"{ctx.label}: {rank}-D convolution")
        kernel = list(weight.shape[2:])
        strides = list(strides_attr or [1] * rank)
        dilations = list(dilations_attr or [1] * rank)
        begin, end = padding(list(x.shape[2:]), kernel, strides, dilations)
        if begin != end:  # asymmetric: pad explicitly with zeros, as the spec's implicit padding
            x, begin = F.pad(x, _torch_pads(begin, end)), [0] * rank
        return _conv_function(rank)(x, weight, bias, strides, begin, dilations, group)
    return run


@op("ConvTranspose")
def conv_transpose(ctx: NodeContext):
    group = int(ctx.attr("group", 1))
    if ctx.attr("output_shape") is not None or (ctx.attr("auto_pad", "NOTSET") or "NOTSET") != "NOTSET":
        ctx.fail("ConvTranspose with output_shape or auto_pad")
    strides_attr, dilations_attr = ctx.attr("strides"), ctx.attr("dilations")
    pads_attr, output_padding_attr = ctx.attr("pads"), ctx.attr("output_padding")

    def run(x, weight, bias=None):
        rank = x.dim() - 2
        strides = list(strides_attr or [1] * rank)
        dilations = list(dilations_attr or [1] * rank)
        pads = list(pads_attr or [0] * (2 * rank))
        begin, end = pads[:rank], pads[rank:]
        output_padding = list(output_padding_attr or [0] * rank)
        padding = [min(b, e) for b, e in zip(begin, end)]
        y = _conv_function(rank, True)(x, weight, bias, strides, padding, output_padding, group, dilations)
        if begin != end:  # crop what the symmetric padding left over
            index = [slice(None), slice(None)] + [slice(b - p, y.shape[2 + i] - (e - p))
                                                  for i, (b, e, p) in enumerate(zip(begin, end, padding))]
            y = y[tuple(index)]
        return y
    return run


@op("Gemm")
def gemm(ctx: NodeContext):
    import torch

    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    trans_a, trans_b = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    mm = _widened_on_cpu(torch.mm)
    addmm = _widened_on_cpu(lambda c, a, b: torch.addmm(c, a, b))

    def run(a, b, c=None):
        a = a.t() if trans_a else a
        b = b.t() if trans_b else b
        if c is not None and alpha == 1.0 and beta == 1.0:
            return addmm(c, a, b)  # C added in the product's accumulation, as ONNX Runtime's Gemm does
        y = mm(a, b)
        if alpha != 1.0:
            y = y * alpha
        if c is not None:
            y = y + (c * beta if beta != 1.0 else c)
        return y
    return run


@op("MatMul")
def matmul(ctx: NodeContext):
    import torch

    return _widened_on_cpu(torch.matmul)


def _pool(ctx: NodeContext, kind: str):
    import torch
    import torch.nn.functional as F

    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        ctx.fail("MaxPool's Indices output")
    if int(ctx.attr("storage_order", 0)):
        ctx.fail("storage_order=1")
    kernel = list(ctx.attr("kernel_shape"))
    rank = len(kernel)
    if rank not in (1, 2, 3):
        ctx.fail(f"{rank}-D pooling")
    strides = list(ctx.attr("strides") or [1] * rank)
    dilations = list(ctx.attr("dilations") or [1] * rank)
    if kind == "avg" and any(d != 1 for d in dilations):
        ctx.fail("dilated AveragePool")
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    include_pad = bool(ctx.attr("count_include_pad", 0))
    padding = _padding(ctx)
    pool = getattr(F, f"{kind}_pool{rank}d")

    def run(x):
        begin, end = padding(list(x.shape[2:]), kernel, strides, dilations)
        if begin == end and all(2 * p <= k for p, k in zip(begin, kernel)):  # what torch's pools take
            if kind == "max":
                return pool(x, kernel, strides, begin, dilations, ceil_mode)
            return pool(x, kernel, strides, begin, ceil_mode, include_pad)
        pads = _torch_pads(begin, end)
        if kind == "max":
            return pool(F.pad(x, pads, value=float("-inf")), kernel, strides, 0, dilations, ceil_mode)
        padded = pool(F.pad(x, pads), kernel, strides, 0, ceil_mode, True)
        if include_pad:
            return padded
        ones = F.pad(torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device), pads)
        return padded / pool(ones, kernel, strides, 0, ceil_mode, True)  # divide by the real pixels only
    return run


@op("MaxPool")
def max_pool(ctx: NodeContext):
    return _pool(ctx, "max")


@op("AveragePool")
def average_pool(ctx: NodeContext):
    return _pool(ctx, "avg")


@op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: NodeContext):
    import torch

    average = ctx.op_type == "GlobalAveragePool"

    def run(x):
        dims = tuple(range(2, x.dim()))
        return torch.mean(x, dim=dims, keepdim=True) if average else torch.amax(x, dim=dims, keepdim=True)
    return run


@op("BatchNormalization")
def batch_norm(ctx: NodeContext):
    import torch.nn.functional as F

    if ctx.attr("training_mode", 0) or len([o for o in ctx.node.output if o]) > 1:
        ctx.fail("BatchNormalization in training mode")
    epsilon = float(ctx.attr("epsilon", 1e-5))
    return lambda x, scale, bias, mean, var: F.batch_norm(x, mean, var, scale, bias, False, 0.0, epsilon)


@op("InstanceNormalization")
def instance_norm(ctx: NodeContext):
    import torch.nn.functional as F

    epsilon = float(ctx.attr("epsilon", 1e-5))
    return lambda x, scale, bias: F.instance_norm(x, weight=scale, bias=bias, eps=epsilon)


@op("LayerNormalization")
def layer_norm(ctx: NodeContext):
    import torch
    import torch.nn.functional as F

    if len([o for o in ctx.node.output if o]) > 1:
        ctx.fail("LayerNormalization's Mean/InvStdDev outputs")
    axis, epsilon = int(ctx.attr("axis", -1)), float(ctx.attr("epsilon", 1e-5))

    def run(x, scale, bias=None):
        shape = tuple(x.shape[axis % x.dim():])
        if tuple(scale.shape) == shape and (bias is None or tuple(bias.shape) == shape):
            return F.layer_norm(x, shape, scale, bias, epsilon)
        dims = tuple(range(axis % x.dim(), x.dim()))
        work = x.float()  # stash_type 1: statistics in float32
        mean = work.mean(dim=dims, keepdim=True)
        normed = ((work - mean) / torch.sqrt((work - mean).pow(2).mean(dim=dims, keepdim=True) + epsilon)).to(x.dtype)
        return normed * scale + (bias if bias is not None else 0)
    return run


@op("LRN")
def lrn(ctx: NodeContext):
    import torch.nn.functional as F

    size = int(ctx.attr("size"))
    alpha, beta, bias = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)), float(ctx.attr("bias", 1.0))
    front, back = (size - 1) // 2, size - 1 - (size - 1) // 2  # ONNX's window (torch's swaps them for even sizes)

    def run(x):
        squares = (x * x).unsqueeze(1)  # N×1×C×H×W: sum over a channel window with a 3-D pool
        squares = F.pad(squares, (0, 0, 0, 0, front, back))
        window_sum = F.avg_pool3d(squares, (size, 1, 1), stride=1).squeeze(1) * size
        return x / (bias + alpha / size * window_sum) ** beta
    return run


# -- activations -------------------------------------------------------------------------------------------------
@op("Clip")
def clip(ctx: NodeContext):
    import torch

    def bound(index, attr):
        if ctx.opset < 11:
            value = ctx.attr(attr)
            return (lambda t: value) if value is not None else (lambda t: None)
        value = ctx.constant(index)
        if value is not None:
            fixed = value.item()
            return lambda t: fixed
        return lambda t: t  # a run-time tensor, or None when the input is omitted

    low, high = bound(1, "min"), bound(2, "max")

    def run(x, min_value=None, max_value=None):
        lo, hi = low(min_value), high(max_value)
        if lo is None and hi is None:
            return x
        return torch.clamp(x, lo, hi)
    return run


@op("LeakyRelu")
def leaky_relu(ctx: NodeContext):
    import torch.nn.functional as F

    alpha = float(np.float32(ctx.attr("alpha", 0.01)))
    return lambda x: F.leaky_relu(x, alpha)


@op("PRelu")
def prelu(ctx: NodeContext):
    import torch

    return lambda x, slope: torch.where(x < 0, x * slope, x)


@op("HardSigmoid", "HardSwish")
def hard_sigmoid(ctx: NodeContext):
    import torch

    # ONNX: HardSigmoid(x) = max(0, min(1, alpha*x + beta)); HardSwish(x) = x * HardSigmoid(x) with alpha=1/6,
    # beta=0.5 (torch's hardswish is x*relu6(x+3)/6, which rounds differently).
    swish = ctx.op_type == "HardSwish"
    alpha = float(np.float32(1 / 6 if swish else ctx.attr("alpha", 0.2)))
    beta = float(np.float32(0.5 if swish else ctx.attr("beta", 0.5)))

    def run(x):
        gate = torch.clamp(x * alpha + beta, 0.0, 1.0)
        return x * gate if swish else gate
    return run


@op("Elu", "Selu", "Celu", "Softplus", "Softsign", "Gelu", "Mish", "ThresholdedRelu")
def smooth_activation(ctx: NodeContext):
    import torch
    import torch.nn.functional as F

    kind = ctx.op_type
    if kind == "Elu":
        alpha = float(ctx.attr("alpha", 1.0))
        return lambda x: F.elu(x, alpha)
    if kind == "Selu":
        alpha, gamma = float(ctx.attr("alpha", 1.67326319217681884765625)), float(ctx.attr("gamma", 1.05070102214813232421875))
        return lambda x: gamma * torch.where(x > 0, x, alpha * (torch.exp(x) - 1))
    if kind == "Celu":
        alpha = float(ctx.attr("alpha", 1.0))
        return lambda x: F.celu(x, alpha)
    if kind == "Softplus":
        return F.softplus
    if kind == "Softsign":
        return lambda x: x / (1 + torch.abs(x))
    if kind == "Gelu":
        approximate = ctx.attr("approximate", "none")
        return lambda x: F.gelu(x, approximate=approximate)
    if kind == "Mish":
        return lambda x: x * torch.tanh(F.softplus(x))
    alpha = float(ctx.attr("alpha", 1.0))
    return lambda x: torch.where(x > alpha, x, torch.zeros_like(x))


@op("Softmax", "LogSoftmax")
def softmax(ctx: NodeContext):
    import torch.nn.functional as F

    axis = int(ctx.attr("axis", -1))  # opset ≥ 13 semantics (older graphs are converted to 13 first)
    function = F.softmax if ctx.op_type == "Softmax" else F.log_softmax
    return lambda x: function(x, dim=axis)
