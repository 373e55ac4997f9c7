"""QuantizeLinear as one GPU kernel, bit for bit the ONNX formula the plain ops compute (issue 38 item 5).

Why a kernel of its own: the literal QuantizeLinear is four elementwise kernels in torch (divide, round, clamp,
convert), each reading and writing the whole activation; at the batches that fill a GPU the INT8 graph ran at half
FP32's speed for it. torch's own fused ops do not compute the ONNX formula: `fake_quantize_per_tensor_affine` and
`quantize_per_tensor` multiply by a reciprocal scale or divide in double precision, which moves values that lie
within an ulp of a half-integer to the neighbouring integer; and `torch.compile`'s Triton code divides with
Triton's `/`, which is approximate (`div.full.f32`, ≤ 2 ulp: triton-lang/triton#446, #10661; pytorch#164144 made
inductor's division exact only recently). So the kernel is written here in Triton with the IEEE round-to-nearest
division (`div_rn`) and each step in the type the plain ops use:

    v = div_rn(float32(x in the compute type), float32(scale in the compute type))   # the eager float32 division
    v = float32(float16(v))                  when the compute type is FP16 (eager divides FP16 in float32, rounds)
    v = clamp(v, low - zero_point, high - zero_point)     NaN kept (torch's clamp propagates it)
    y = round_half_to_even(v) + zero_point   (the float32 "magic number" rounding: exact for |v| < 2**22)
    stored as int8 / uint8

Clamping before rounding gives the same integers as rounding before clamping (the bounds are integers), and after
the clamp every value is far below 2**22, where adding and subtracting 1.5 · 2**23 rounds to the nearest even
integer exactly. `quantize_formula` computes the same steps with torch ops (the CPU test of the formula on every
Q of the demo and light models); each compiled signature is checked against the plain ops on its first real input
before it is used (one line and the plain ops when it differs or does not compile).

Only per-tensor scales with int8/uint8 outputs and float32/float16 inputs take the kernel; everything else (per-axis
scales, weights — folded at conversion —, the CPU) runs the plain ops.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

MAGIC = 12582912.0  # 1.5 · 2**23: v + MAGIC - MAGIC rounds |v| < 2**22 to the nearest even integer in float32
_STATE = {"kernel": None, "failed": "", "checked": set()}


def quantize_formula(x, scale, offset: float, compute_dtype, low: int, high: int, out_dtype):
    """The kernel's steps as torch ops (per-tensor scale, zero point `offset`): the reference the tests compare with
    the plain ops, on the CPU."""
    import torch

    v = torch.div(x.to(compute_dtype).to(torch.float32), scale.to(compute_dtype).to(torch.float32))
    if compute_dtype == torch.float16:
        v = v.to(torch.float16).to(torch.float32)
    clamped = v.clamp(low - offset, high - offset)
    rounded = (clamped + MAGIC) - MAGIC
    return (rounded + offset).to(out_dtype)


def _make_kernel():
    from trtlab.backends.gpu.qdq_triton import quantize_kernel

    if quantize_kernel is None:
        raise ImportError("no module named 'triton'")
    return quantize_kernel


def _kernel():
    if _STATE["kernel"] is None and not _STATE["failed"]:
        try:
            _STATE["kernel"] = _make_kernel()
        except Exception as exc:  # noqa: BLE001 - no Triton (or an old one): the plain ops
            disable(f"Triton is not usable here ({type(exc).__name__}: {str(exc)[:120]})")
    return _STATE["kernel"]


def disable(reason: str) -> None:
    """Plain ops from now on in this process, said once."""
    if not _STATE["failed"]:
        _STATE["failed"] = reason
        log.info("QuantizeLinear runs as the plain torch ops (4 kernels each): %s", reason)


def status() -> str:
    """How QuantizeLinear runs on CUDA here, in words (the runner's description)."""
    if _STATE["failed"]:
        return f"plain torch ops ({_STATE['failed']})"
    if _STATE["checked"]:
        return "one Triton kernel per QuantizeLinear (IEEE division, checked against the plain ops)"
    return "one Triton kernel per QuantizeLinear where available (checked against the plain ops on first use)"


def fused_quantize(x, scale, offset: float, compute_dtype, low: int, high: int, out_dtype, plain):
    """QuantizeLinear of CUDA tensor `x` by one kernel (per-tensor `scale`, the zero point's value `offset`, known at
    conversion), or None where the kernel does not apply or is disabled (the caller then runs `plain`). The first
    call of each signature is checked against `plain(x)` bit for bit."""
    import torch

    if _STATE["failed"] or not x.is_cuda or scale.numel() != 1 \
            or x.dtype not in (torch.float32, torch.float16) or out_dtype not in (torch.int8, torch.uint8) \
            or compute_dtype not in (torch.float32, torch.float16) or scale.dtype not in (torch.float32,
                                                                                           torch.float16):
        return None
    kernel = _kernel()
    if kernel is None:
        return None
    signature = (x.dtype, scale.dtype, compute_dtype, out_dtype, low, high, offset)
    source = x.contiguous()
    out = torch.empty(source.shape, dtype=out_dtype, device=x.device)
    count = source.numel()
    block = 1024
    try:
        kernel[(max(1, -(-count // block)),)](
            source, scale.to(compute_dtype).reshape(1), out, count, float(low) - offset, float(high) - offset,
            offset, HALF=compute_dtype == torch.float16,
            X_TO_HALF=compute_dtype == torch.float16 and x.dtype == torch.float32, BLOCK=block)
    except Exception as exc:  # noqa: BLE001 - a compiler missing or refusing: the plain ops
        disable(f"the Triton kernel did not run ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})")
        return None
    if signature not in _STATE["checked"]:
        expected = plain(x)
        if not torch.equal(out, expected):
            differ = int((out != expected).sum())
            disable(f"the Triton kernel differs from the plain ops on {differ} of {count} values")
            return expected
        _STATE["checked"].add(signature)
    return out

