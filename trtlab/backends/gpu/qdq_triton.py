"""The Triton kernel of QuantizeLinear (qdq_kernel says what it computes and why it is bit for bit the plain ops).
Imported only by qdq_kernel, on first use on CUDA; without Triton `quantize_kernel` is None (the plain ops run).
Module-level names, because Triton resolves a kernel's names in its module's globals, not in closures."""
from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton here: qdq_kernel runs the plain ops
    triton = tl = None

quantize_kernel = None
if triton is not None:
    # IEEE round-to-nearest division: tl.div_rn since Triton 3, tl.math.div_rn before (Triton's `/` is approximate,
    # div.full.f32: triton-lang/triton#446)
    if hasattr(tl, "div_rn"):
        @triton.jit
        def div_rn(a, b):
            return tl.div_rn(a, b)
    else:
        @triton.jit
        def div_rn(a, b):
            return tl.math.div_rn(a, b)

    @triton.jit
    def quantize_kernel(x_ptr, scale_ptr, out_ptr, n, low, high, offset, HALF: tl.constexpr,
                        X_TO_HALF: tl.constexpr, BLOCK: tl.constexpr):
        start = tl.program_id(0).to(tl.int64) * BLOCK
        index = start + tl.arange(0, BLOCK)
        mask = index < n
        x = tl.load(x_ptr + index, mask=mask, other=0.0)
        if X_TO_HALF:  # a float32 input quantized in FP16: rounded to FP16 first, as x.to(float16)
            x = x.to(tl.float16)
        s = tl.load(scale_ptr)
        v = div_rn(x.to(tl.float32), s.to(tl.float32))
        if HALF:  # eager divides FP16 in float32 and rounds the quotient to FP16
            v = v.to(tl.float16).to(tl.float32)
        clamped = tl.minimum(tl.maximum(v, low), high)
        clamped = tl.where(v != v, v, clamped)  # NaN stays NaN, as torch.clamp keeps it
        rounded = (clamped + 12582912.0) - 12582912.0  # round half to even: exact for |v| < 2**22
        tl.store(out_ptr + index, (rounded + offset).to(out_ptr.dtype.element_ty), mask=mask)
