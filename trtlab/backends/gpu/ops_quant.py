"""QuantizeLinear / DequantizeLinear, literally as the ONNX spec (and onnx.reference) computes them:

- QuantizeLinear: y = saturate(round_half_to_even(x / scale) + zero_point), the division in the scale's type (the
  graph's float type: float32, or float16 on the FP16 float path with opset-19 scales), as the spec says since
  opset 23 made it explicit ("precision ... if not provided, the same as the type of y_scale") and onnx.reference
  computes; the node's `precision` attribute chooses another. The result is stored as the zero point's integer
  type (uint8 when there is none). Saturation clamps in float before the integer conversion, so ±inf and huge
  values saturate too. ONNX Runtime's CPU kernel divides FP16 inputs in float32 instead (1–2 % of FP16-path
  quantized values differ by one step); the conversion option `quantize_precision="float32"` reproduces that.
- DequantizeLinear: y = (q - zero_point) * scale, computed in float32 and stored in the scale's type (or
  `output_dtype`), as onnx.reference does: for 8-bit q the float32 product is exact, so an FP16 scale gives the
  correctly rounded FP16 result.

Per-tensor (scalar scale) and per-axis (1-D scale along `axis`) are supported; blocked quantization (opset 21
`block_size`) and float8/int4 types are refused at conversion.

One kernel each where that stays bit for bit the same (conversion option `fused_qdq`, default on; issue 38):
- DequantizeLinear of 8-bit q with a zero zero point into the scale's type (or float32) is one `torch.mul(q, scale)`:
  q converts exactly, and the product of an 8-bit integer and an FP16 or FP32 scale is exact in float32, so the
  one rounding torch's multiply makes (in float32, to the result type) is the one the plain ops make;
- QuantizeLinear on CUDA with a per-tensor scale is one Triton kernel (qdq_kernel: IEEE division, each step in the
  plain ops' types, checked against them on first use); elsewhere the plain ops below.
"""
from __future__ import annotations

import numpy as np

from trtlab.backends.gpu.registry import NodeContext, op, torch_dtype

# ONNX data type → (lowest, highest) representable value.
INTEGER_RANGES = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767)}
_DQ_INPUTS = {2, 3, 4, 5, 6}  # uint8, int8, uint16, int16, int32 (int32: quantized biases)


def _onnx_type_of(array: np.ndarray) -> int:
    from onnx.helper import np_dtype_to_tensor_dtype

    return int(np_dtype_to_tensor_dtype(array.dtype))


def _broadcast(value, x, axis: int):
    """A scale or zero point shaped to broadcast against x: a scalar as it is, a 1-D vector along `axis`."""
    if value.dim() == 0 or value.numel() == 1 and value.dim() == 1:
        return value.reshape(())
    shape = [1] * x.dim()
    shape[axis % x.dim()] = value.numel()
    return value.reshape(shape)


def _check_scale_form(ctx: NodeContext) -> int:
    axis = int(ctx.attr("axis", 1))
    if int(ctx.attr("block_size", 0) or 0):
        ctx.fail("blocked quantization (block_size)")
    scale = ctx.constant(1)
    if scale is not None and scale.ndim > 1:
        ctx.fail(f"a {scale.ndim}-D scale")
    return axis


def _zero_point_is_zero(ctx: NodeContext) -> bool:
    zero = ctx.constant(2)
    return not ctx.has_input(2) or (zero is not None and not np.any(zero))


@op("QuantizeLinear")
def quantize_linear(ctx: NodeContext):
    import torch

    axis = _check_scale_form(ctx)
    zero = ctx.constant(2)
    if ctx.has_input(2) and zero is None:
        ctx.fail("a zero point computed at run time")
    output_type = _onnx_type_of(zero) if zero is not None else int(ctx.attr("output_dtype", 0) or 2)
    if output_type not in INTEGER_RANGES:
        from onnx import TensorProto

        ctx.fail(f"quantizing to {TensorProto.DataType.Name(output_type)}")
    low, high = INTEGER_RANGES[output_type]
    out_dtype = torch_dtype(output_type, ctx)
    precision = int(ctx.attr("precision", 0) or 0)
    if not precision and ctx.options.get("quantize_precision", "scale") == "float32":
        precision = 1  # FLOAT
    compute_dtype = torch_dtype(precision, ctx) if precision else None
    skip_zero = _zero_point_is_zero(ctx)
    # a per-tensor zero point's value, known now: the one-kernel path must not read it from the device
    offset = 0.0 if skip_zero else float(zero.reshape(-1)[0]) if zero.size == 1 else None
    fused = bool(ctx.options.get("fused_qdq", True)) and offset is not None

    def plain(x, scale, zero_point=None):
        dtype = compute_dtype or scale.dtype
        y = torch.div(x.to(dtype), _broadcast(scale, x, axis).to(dtype))
        y = torch.round(y, out=y)  # round half to even, as np.rint
        if not skip_zero:
            y.add_(_broadcast(zero_point, x, axis).to(dtype))
        return y.clamp_(low, high).to(out_dtype)

    def quantize(x, scale, zero_point=None):
        if fused and x.is_cuda:
            from trtlab.backends.gpu.qdq_kernel import fused_quantize

            y = fused_quantize(x, scale, offset, compute_dtype or scale.dtype, low, high, out_dtype,
                               lambda value: plain(value, scale, zero_point))
            if y is not None:
                return y
        return plain(x, scale, zero_point)

    return quantize


@op("DequantizeLinear")
def dequantize_linear(ctx: NodeContext):
    import torch

    axis = _check_scale_form(ctx)
    skip_zero = _zero_point_is_zero(ctx)
    output_type = int(ctx.attr("output_dtype", 0) or 0)
    out_dtype = torch_dtype(output_type, ctx) if output_type else None
    quantized = ctx.constant(0)
    if quantized is not None and _onnx_type_of(quantized) not in _DQ_INPUTS:
        ctx.fail(f"dequantizing {quantized.dtype}")
    fused = bool(ctx.options.get("fused_qdq", True)) and skip_zero
    exact_products = (torch.float32, torch.float16, torch.bfloat16)  # 8-bit × these: exact in float32

    def dequantize(q, scale, zero_point=None):
        if q.is_floating_point() or q.dtype == torch.bool:
            raise TypeError(f"{ctx.label}: DequantizeLinear of a {q.dtype} tensor")
        target = out_dtype or scale.dtype
        if fused and q.dtype in (torch.int8, torch.uint8) and scale.dtype in exact_products:
            if target == scale.dtype:
                return torch.mul(q, _broadcast(scale, q, axis))  # int8 × FP16 → FP16: one multiply, one rounding
            if target == torch.float32:
                return torch.mul(q, _broadcast(scale, q, axis).to(torch.float32))
        y = q.to(torch.float32)
        if not skip_zero:
            y.sub_(_broadcast(zero_point, q, axis).to(torch.float32))
        y.mul_(_broadcast(scale, q, axis).to(torch.float32))
        return y.to(out_dtype or scale.dtype)

    return dequantize
