"""An estimate, before any build, of how long a Q/DQ graph's INT8 TensorRT engine and its FP16 twin take on common
GPUs, and so how much faster INT8 should be — per predicted TensorRT layer (trtlab.graph.fusion's report), one
kernel each, summed the way the GPU runs them. Every number it gives is an estimate with a band (low–high); a
TensorRT engine timed on the GPU replaces it (trtlab.graph.speed).

Per kernel (one predicted layer): time = fixed cost + max(compute, memory), where
- fixed cost: a kernel's launch latency, ramp-up and tail on the GPU (`Constants.kernel_us`); at batch 1 the small
  CNNs are dominated by it, which is why EfficientNet-B0 (≈150 kernels, 0.39 GMAC) is slower than ResNet-50
  (≈60 kernels, 4.1 GMAC) on an A100 (NVIDIA's published 0.67 vs 0.46 ms, trtlab.graph.speed_reference);
- compute: 2·MACs / (dense peak of its precision × achievable fraction), with tile quantization of the reduction
  length K (MMA k-steps of 32 INT8 / 16 FP16 elements) and wave quantization over the SMs where the grid is small
  (NVIDIA, "Matrix Multiplication Background User's Guide", §3.1 tile and §3.2 wave quantization,
  https://docs.nvidia.com/deeplearning/performance/pdf/Matrix-Multiplication-Background-User-Guide.pdf);
  depthwise convolutions run on CUDA cores, not tensor cores, in INT8 as in FP16 (TensorRT's
  CudaDepthwiseConvolution tactic; embedl's benchmarks leave them in FP16 as "memory-bound operators",
  https://docs.embedl.com/embedl-deploy/latest/guide/benchmarks.html) — INT8 only halves their bytes;
- memory: activations read and written at 1 (INT8), 2 (FP16) or 4 (FP32) bytes, from L2 for the part of the tensor
  that fits the share of L2 `Constants.l2_share` at that batch (it was just written by the layer before), the rest
  from DRAM; weights from L2 for the share of the engine's weights that fits (back-to-back inferences run the same
  weights), else DRAM; at the achievable fraction of the bandwidth.
Precision boundaries cost what the report predicts there: its unfused Quantize/Dequantize layers and Casts are
memory-bound kernels of their own (TensorRT's reformat layers), which the FP16 twin does not have — except a Q after
a float pointwise layer, which joins that layer's PointWise kernel (POINTWISE; the band keeps it as a kernel).

The engine: with a CUDA graph (trtexec --useCudaGraph) the kernels run back to back; without one (trtlab's own
timing: execute_async_v3 between CUDA events, trtlab.backends.tensorrt.latency), the host enqueues one kernel per
`Constants.enqueue_us` and a GPU faster than that waits ("Enqueue Time … If this is longer than GPU Compute Time,
the GPU may be under-utilized", trtexec in TensorRT's Command-Line Programs reference).

The five free constants (FITTED) are fitted on five published figures and held against the others
(trtlab.graph.speed_reference, tests/test_speed_estimate.py); the band is the estimate's range over the settings
those figures cannot tell apart (ENSEMBLE) and the sustained clock, widened by the fit's largest error. What it
cannot see: TensorRT's tactic choice and version, fusions beyond the documented ones (Myelin), the actual clock
under load, and the host CPU (the enqueue cost was fitted on NVIDIA's figures; a slower host enqueues slower).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from trtlab.core.errors import UserValueError
from trtlab.graph.gpus import GPU, GPUS

BYTES = {"INT8": 1, "FP16": 2, "BF16": 2, "FP32": 4}
WEIGHTED = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
TIMINGS = ("enqueue", "cuda-graph")
MMA_K = {"INT8": 32, "FP16": 16, "BF16": 16, "FP32": 8}  # k of mma.m16n8k32 (s8) / m16n8k16 (f16) / m16n8k8 (tf32)
TILE = 64  # output tile edge (M and N) the wave count assumes; TensorRT picks among several
#: Float layers TensorRT runs as PointWise kernels, which can also write INT8: "PWN(PWN(Sigmoid, Mul), Add)" runs
#: Int8 -> Int8 (NVIDIA/TensorRT#2204), so the Q the report leaves after one of them (its note: "a Quantize
#: kernel, or at best part of a PointWise kernel") adds no kernel in the estimate; the band keeps it as a kernel.
POINTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Sigmoid", "Relu", "Clip", "LeakyRelu",
                       "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus", "Gelu", "Erf", "Pow", "Sqrt",
                       "Exp", "Neg", "Abs", "PRelu"})


@dataclass(frozen=True)
class Constants:
    """The model's free constants (fitted: FITTED, ENSEMBLE)."""

    tensor_fraction: float  # share of the dense FP16 (TF32) tensor-core peak a well-shaped convolution reaches
    int8_relative: float  # INT8 convolutions reach this much of that share of their (2×) INT8 peak
    bandwidth_fraction: float  # share of DRAM / L2 bandwidth a streaming kernel reaches (assumed, not fitted)
    kernel_us: float  # fixed GPU time per kernel: launch latency, ramp-up, tail
    enqueue_us: float  # host time to enqueue one kernel without a CUDA graph
    l2_share: float  # share of L2 an activation (or the engine's weights) may take and stay in it
    pointwise_quantize: bool = True  # an unfused Q after a float pointwise layer joins its PointWise kernel


def _c(tensor, int8, kernel, enqueue, l2) -> Constants:
    return Constants(tensor, int8, 0.8, kernel, enqueue, l2)


#: Fitted on the five figures marked 'fit' in trtlab.graph.speed_reference.PUBLISHED by a grid search (tensor
#: 0.4–1.0, INT8 relative 0.4–1.0, kernel 0.5–4 µs, enqueue 5–7 µs, L2 share 0.5/0.75/0.9; bandwidth held at 0.8):
#: the smallest largest |log(estimate / published)| (0.22), then the smallest RMS: the top settings (RMS 0.121–0.122)
#: trade the FP16 fraction against the INT8 one and the L2 share; FITTED is the one among them that puts no kernel at
#: 100 % of its peak. Refit: python bench/bench_speed_estimate.py --fit.
FITTED = _c(0.9, 0.7, 2.5, 6.5, 0.75)
#: The settings the five figures cannot tell apart from FITTED (RMS within 0.02 of the best): for each constant the
#: member with its lowest and its highest value. The band is the estimate's range over them (constants move
#: together here, as the fit couples them), over an unfused Q as a kernel of its own, and over the GPU's sustained
#: clock — widened by FIT_RESIDUAL.
ENSEMBLE = (_c(0.5, 1.0, 2.0, 6.5, 0.9), _c(1.0, 0.6, 2.5, 6.5, 0.75), _c(1.0, 0.5, 2.5, 6.5, 0.75),
            _c(0.7, 1.0, 2.5, 6.5, 0.9), _c(0.6, 0.8, 2.0, 6.5, 0.9), _c(1.0, 0.7, 3.0, 6.5, 0.9),
            _c(1.0, 0.6, 2.5, 6.0, 0.75), _c(1.0, 0.6, 2.5, 7.0, 0.75), _c(1.0, 0.5, 2.0, 6.5, 0.5),
            _c(0.8, 0.7, 2.5, 6.5, 0.9), replace(FITTED, pointwise_quantize=False))
#: What the constants cannot absorb: the largest |log(estimate / published)| over the fit figures (0.22: A100
#: MobileNet-v2 at +24 %, A100 ResNet-50 at −15 %), by which each time band is widened both ways. A speed-up's
#: errors largely cancel (the one fitted pair, L4 ResNet-50 FP16/INT8, lands within 2 %): its band is widened by
#: RATIO_RESIDUAL only.
FIT_RESIDUAL = 0.22
RATIO_RESIDUAL = 0.05


@dataclass(frozen=True)
class Kernel:
    """One predicted TensorRT kernel as the estimate costs it (per image unless said otherwise)."""

    name: str
    kind: str
    precision: str  # what it computes in
    path: str  # 'tensor' | 'cuda-core' | 'memory'
    macs: int
    reads: float  # bytes of activations read
    writes: float  # bytes of activations written
    weights: float  # bytes of weights (once per batch)
    k: int = 0  # reduction length per output element
    channels: int = 0  # output channels (N of the implicit GEMM)
    pixels: int = 0  # output positions per image (M of the implicit GEMM, per image)


def kernels(report, as_fp16: bool = False, pointwise_quantize: bool = True) -> list[Kernel]:
    """The kernels of the report's INT8 engine, or of its FP16 twin (`as_fp16`: INT8 layers in FP16, no Q/DQ);
    `pointwise_quantize`: a Q after a float pointwise layer is part of that layer's kernel (POINTWISE)."""
    casts = {b["node"]: b["from"] for b in getattr(report, "boundaries", [])}
    found = []
    for layer in report.layers:
        if layer.computes_in == "-" or pointwise_quantize and _after_pointwise(layer):
            continue
        elements = layer.elements or {}
        ins, outs, weights = elements.get("in", 0), elements.get("out", 0), elements.get("weights", 0)
        if layer.kind in ("Quantize", "Dequantize"):
            if as_fp16:
                continue  # the FP16 twin has no Q/DQ
            source = "INT8" if layer.kind == "Dequantize" else layer.computes_in
            found.append(Kernel(layer.name, layer.kind, "INT8", "memory", 0, ins * BYTES.get(source, 2),
                                outs * BYTES.get(layer.output, 1), 0))
            continue
        compute = "FP16" if as_fp16 and layer.computes_in == "INT8" else layer.computes_in
        output = "FP16" if as_fp16 and layer.output == "INT8" else layer.output
        width = BYTES.get(compute, 2)
        reads = ins * (BYTES.get(casts.get(layer.name), width) if layer.kind == "Cast" else width)
        if layer.kind in WEIGHTED and layer.macs and outs:
            k, channels, depthwise = _gemm_shape(layer.kind, layer.macs, ins, outs, weights)
            found.append(Kernel(layer.name, layer.kind, compute, "cuda-core" if depthwise else "tensor",
                                layer.macs, reads, outs * BYTES.get(output, 2), weights * width, k, channels,
                                layer.macs // max(k * channels, 1)))
        else:
            found.append(Kernel(layer.name, layer.kind, compute, "memory", 0, reads, outs * BYTES.get(output, 2),
                                0))
    return found


def _after_pointwise(layer) -> bool:
    """An unfused Quantize whose producer (named in the report's note) is a float pointwise layer."""
    match = re.search(r"its producer \((\w+)\) is a float layer", layer.note or "")
    return layer.kind == "Quantize" and match is not None and match.group(1) in POINTWISE


def _gemm_shape(kind: str, macs: int, ins: int, outs: int, weights: int) -> tuple[int, int, bool]:
    """(reduction length K, output channels N, depthwise?) of a weighted layer, from its MACs and element counts
    (the report keeps no shapes): weights = N·K (+ N of bias), MACs = P·N·K for P output positions, and P·N is at
    most what the layer writes (which can hold more than the GEMM's output when a fused chain writes two
    tensors). Of the N dividing the weights that fit, the one whose output is largest. A depthwise convolution has
    K = k² (one input channel per filter, k = 3, 5, 7) and reads as many channels as it writes (input = output
    elements × 1, or × 4 at stride 2)."""
    best = None
    for n in _divisors(weights):
        for k in {weights // n - 1, weights // n}:  # with a bias, without
            if k < 1 or macs % (n * k):
                continue
            output = macs // k  # P·N
            if output <= outs and (best is None or output > best[0]):
                best = (output, k, n)
    if best is None:  # no consistent split: treat it as a full GEMM on its output
        return max(1, round(macs / max(outs, 1))), max(1, outs), False
    output, k, n = best
    depthwise = kind not in ("Gemm", "MatMul") and k in (9, 25, 49) and ins in (output, 4 * output)
    return k, n, depthwise


def _divisors(value: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(value) + 1) if value % d == 0] if value > 0 else []
    return small + [value // d for d in reversed(small) if d * d != value]


def kernel_seconds(kernel: Kernel, gpu: GPU, batch: int, c: Constants = FITTED, clock: float = 1.0,
                   weights_cached: float = 0.0) -> float:
    """GPU time of one kernel for `batch` images: fixed cost + max(compute, memory) (module docstring);
    `weights_cached`: the share of its weights still in L2 from the previous inference."""
    compute = 0.0
    if kernel.path == "tensor":
        peak = c.tensor_fraction * (gpu.int8_tops * c.int8_relative if kernel.precision == "INT8" else
                                    gpu.fp16_tflops if kernel.precision in ("FP16", "BF16") else gpu.fp32_tflops)
        step = MMA_K.get(kernel.precision, 16)
        tile_k = kernel.k / (math.ceil(kernel.k / step) * step)
        compute = 2.0 * kernel.macs * batch / (peak * 1e12 * clock * tile_k * _wave_efficiency(kernel, gpu, batch))
    elif kernel.path == "cuda-core":  # at the same achievable share, of the CUDA cores' FMA rate
        compute = 2.0 * kernel.macs * batch / (gpu.cuda_core_tflops * 1e12 * clock * c.tensor_fraction)
    l2 = gpu.l2_mb * 1e6 * c.l2_share
    dram, cache = gpu.bandwidth_gbs * 1e9 * c.bandwidth_fraction, gpu.l2_gbs * 1e9 * c.bandwidth_fraction
    memory = 0.0
    for size, cached in ((kernel.reads * batch, None), (kernel.writes * batch, None), (kernel.weights, weights_cached)):
        hit = min(1.0, l2 / size) if cached is None and size else (cached or 0.0)  # the share L2 holds
        memory += size * (hit / cache + (1 - hit) / dram)
    return c.kernel_us * 1e-6 / clock + max(compute, memory)


def _wave_efficiency(kernel: Kernel, gpu: GPU, batch: int) -> float:
    """Share of the SMs' time the grid fills: output tiles (split along K when there are fewer tiles than SMs and K
    is long) over whole waves of SMs."""
    tiles = math.ceil(kernel.pixels * batch / TILE) * math.ceil(kernel.channels / TILE)
    split = max(1, min(gpu.sms // max(tiles, 1), kernel.k // 256)) if tiles < gpu.sms else 1
    blocks = tiles * split
    return blocks / (math.ceil(blocks / gpu.sms) * gpu.sms)


def engine_seconds(found: list[Kernel], gpu: GPU, batch: int, c: Constants = FITTED, timing: str = "cuda-graph",
                   clock: float = 1.0) -> float:
    """The engine's time for `batch` images: kernels back to back ('cuda-graph'), or each started no earlier than
    the host enqueued it, one per `enqueue_us` ('enqueue')."""
    if timing not in TIMINGS:
        raise UserValueError(f"timing {timing!r} is not one the estimate knows",
                             "use 'cuda-graph' (GPU time) or 'enqueue' (without a CUDA graph, as trtlab times)")
    # back-to-back inferences run the same weights: the share of them that fits L2 stays there
    weights = sum(kernel.weights for kernel in found)
    cached = min(1.0, gpu.l2_mb * 1e6 * c.l2_share / weights) if weights else 0.0
    end = 0.0
    for index, kernel in enumerate(found):
        enqueued = (index + 1) * c.enqueue_us * 1e-6 if timing == "enqueue" else 0.0
        end = max(end, enqueued) + kernel_seconds(kernel, gpu, batch, c, clock, cached)
    return end


def estimate(report, gpu: GPU, batch: int, timing: str = "cuda-graph") -> dict:
    """FP16 and INT8 engine times (ms) and INT8's speed-up: the estimate (FITTED) and its band (ENSEMBLE, sustained
    clock, FIT_RESIDUAL), the kernel counts and the share of the INT8 time spent on per-kernel costs."""
    fp16 = kernels(report, as_fp16=True)
    int8 = {fused: kernels(report, pointwise_quantize=fused) for fused in (True, False)}
    central = (engine_seconds(fp16, gpu, batch, FITTED, timing),
               engine_seconds(int8[FITTED.pointwise_quantize], gpu, batch, FITTED, timing))
    spread = [central]
    for c in ENSEMBLE:
        for clock in {1.0, gpu.sustained_clock}:
            spread.append((engine_seconds(fp16, gpu, batch, c, timing, clock),
                           engine_seconds(int8[c.pointwise_quantize], gpu, batch, c, timing, clock)))
    per_kernel = len(int8[True]) * (FITTED.enqueue_us if timing == "enqueue" else FITTED.kernel_us) * 1e-6
    widen, ratio_widen = math.exp(FIT_RESIDUAL), math.exp(RATIO_RESIDUAL)
    ratios = [f / i for f, i in spread if i]
    return {"fp16_ms": 1e3 * central[0], "int8_ms": 1e3 * central[1],
            "fp16_band": (1e3 * min(f for f, _ in spread) / widen, 1e3 * max(f for f, _ in spread) * widen),
            "int8_band": (1e3 * min(i for _, i in spread) / widen, 1e3 * max(i for _, i in spread) * widen),
            "speedup": central[0] / central[1] if central[1] else float("nan"),
            "speedup_band": (min(ratios, default=float("nan")) / ratio_widen,
                             max(ratios, default=float("nan")) * ratio_widen),
            "kernels": (len(fp16), len(int8[True])),
            "launch_share": min(1.0, per_kernel / central[1]) if central[1] else float("nan")}


def speedup_estimate(report, batch: int = 32, gpus=None, timing: str = "cuda-graph"):
    """pandas DataFrame, one row per GPU: the estimated FP16 and INT8 engine times (ms for `batch` images) and
    INT8's speed-up over FP16, each with its band (low, high); the share of the INT8 time spent on per-kernel
    costs; and the speed-up when the engines run without a CUDA graph (trtlab's own timing, execute_async_v3 between
    CUDA events, where small engines wait on the host's enqueue). `timing` of the main columns: 'cuda-graph' (GPU
    time, trtexec --useCudaGraph) or 'enqueue'. An estimate, labelled so (column names, attrs['note'])."""
    import pandas as pd

    unknown = [name for name in gpus or () if isinstance(name, str) and name not in GPUS]
    if unknown:
        raise UserValueError(f"no speed estimate for GPU {', '.join(map(repr, unknown))}",
                             f"choose among {', '.join(GPUS)} (or pass a trtlab.graph.gpus.GPU)")
    rows = []
    for name in gpus or GPUS:
        gpu = GPUS[name] if isinstance(name, str) else name
        e = estimate(report, gpu, batch, timing)
        other = "enqueue" if timing == "cuda-graph" else "cuda-graph"
        rows.append({"GPU": gpu.name, "FP16 ms (estimate)": round(e["fp16_ms"], 4),
                     "FP16 low": round(e["fp16_band"][0], 4), "FP16 high": round(e["fp16_band"][1], 4),
                     "INT8 ms (estimate)": round(e["int8_ms"], 4),
                     "INT8 low": round(e["int8_band"][0], 4), "INT8 high": round(e["int8_band"][1], 4),
                     "speed-up (estimate)": round(e["speedup"], 2), "speed-up low": round(e["speedup_band"][0], 2),
                     "speed-up high": round(e["speedup_band"][1], 2), "per-kernel share": round(e["launch_share"], 2),
                     f"speed-up, {_TIMING_WORDS[other]} (estimate)": round(central_speedup(report, gpu, batch,
                                                                                           other), 2)})
    table = pd.DataFrame(rows).set_index("GPU")
    table.index.name = f"GPU · estimate, batch {batch}"
    table.attrs.update(batch=batch, timing=timing, note=(
        f"Estimate, not a measurement: per predicted TensorRT layer of {report.model}, a fixed kernel cost plus the "
        f"larger of compute (achievable share of the dense tensor-core peak; depthwise convolutions on CUDA cores) "
        f"and memory (L2 where the tensor fits, else DRAM), summed {_TIMING_WORDS[timing]}, at batch {batch}; "
        f"low–high: the settings the published figures cannot tell apart, an unfused Q as its own kernel, the "
        f"sustained clock, widened by the fit's largest error (±{100 * (math.exp(FIT_RESIDUAL) - 1):.0f} %). Held "
        f"against published TensorRT figures in trtlab.graph.speed_reference; only a built engine's timing says what "
        f"the GPU does."))
    return table


_TIMING_WORDS = {"cuda-graph": "with a CUDA graph", "enqueue": "without a CUDA graph"}


def central_speedup(report, gpu: GPU, batch: int, timing: str = "cuda-graph") -> float:
    """INT8's estimated speed-up over FP16 with the fitted constants alone (no band)."""
    int8 = engine_seconds(kernels(report, pointwise_quantize=FITTED.pointwise_quantize), gpu, batch, FITTED, timing)
    return engine_seconds(kernels(report, as_fp16=True), gpu, batch, FITTED, timing) / int8 if int8 else float("nan")
