"""An estimate, before any build, of how much faster a Q/DQ graph's INT8 engine should be than its FP16 twin on
common GPUs: a roofline per predicted TensorRT layer (trtlab.graph.fusion's report), summed over the layers.

For each layer: time = max(2 · MACs / peak of its precision, bytes it moves / memory bandwidth), where bytes are the
elements it reads, its weights and what it writes, at 1 byte (INT8), 2 (FP16) or 4 (FP32). The INT8 engine is the
report's prediction (INT8 layers at the INT8 tensor-core peak, float layers at theirs, unfused Q/DQ and Casts as the
memory-bound kernels they are); the FP16 twin is the same layers with every INT8 layer in FP16 and no Q/DQ.

An estimate, not a measurement: peaks are datasheet figures (dense, no sparsity) that real kernels reach only in
part, small layers are bound by launch and tail effects the roofline ignores, and TensorRT's tactic choice and
reformat layers show only in a built engine. It bounds the INT8 gain from above — never more than the 2× that both the
tensor-core rate and the byte count allow — and tells a compute-bound graph (near 2×) from one that INT8 cannot
speed up (near 1×, or below where Q/DQ kernels stay).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    """Datasheet peaks of one GPU: dense tensor-core TFLOPS (FP16), TOPS (INT8), the FP32 path's TFLOPS, GB/s."""

    name: str
    fp16_tflops: float
    int8_tops: float
    fp32_tflops: float  # what TensorRT's FP32 layers get: TF32 tensor cores from Ampere on, plain FP32 on Turing
    bandwidth_gbs: float


#: Dense peaks (NVIDIA datasheets list L4/A100/H100 tensor figures "with sparsity"; dense is half of those).
GPUS = {
    # T4 datasheet: 65 FP16 TFLOPS (mixed precision), 130 INT8 TOPS, 8.1 FP32 TFLOPS (no TF32), 320 GB/s GDDR6
    "T4": GPU("T4", 65.0, 130.0, 8.1, 320.0),
    # L4 datasheet: FP16 tensor 242 TFLOPS*, INT8 485 TOPS*, TF32 120 TFLOPS* (*with sparsity), 300 GB/s
    "L4": GPU("L4", 121.0, 242.5, 60.0, 300.0),
    # A100 SXM4 40 GB datasheet: FP16 tensor 312 TFLOPS, INT8 624 TOPS, TF32 156 TFLOPS (dense), 1,555 GB/s HBM2
    "A100": GPU("A100", 312.0, 624.0, 156.0, 1555.0),
    # H100 SXM5 datasheet: FP16 tensor 1,979 TFLOPS*, INT8 3,958 TOPS*, TF32 989 TFLOPS* (*sparsity), 3.35 TB/s
    "H100": GPU("H100", 989.4, 1979.0, 494.7, 3350.0),
}
BYTES = {"INT8": 1, "FP16": 2, "BF16": 2, "FP32": 4}


def layer_seconds(layer, gpu: GPU, batch: int, as_fp16: bool = False) -> float:
    """Roofline time of one predicted layer for `batch` images (0 for layers that only move data or are folded);
    `as_fp16`: the same layer in the FP16 twin (INT8 becomes FP16; Q/DQ layers do not exist there)."""
    if layer.computes_in == "-" or not layer.elements:
        return 0.0
    if layer.kind in ("Quantize", "Dequantize"):
        if as_fp16:
            return 0.0
        reads = BYTES["INT8"] if layer.kind == "Dequantize" else BYTES.get(layer.computes_in, 2)
        writes = BYTES["INT8"] if layer.kind == "Quantize" else BYTES.get(layer.output, 2)
        return batch * (layer.elements["in"] * reads + layer.elements["out"] * writes) / (gpu.bandwidth_gbs * 1e9)
    compute = "FP16" if as_fp16 and layer.computes_in == "INT8" else layer.computes_in
    output = "FP16" if as_fp16 and layer.output == "INT8" else layer.output
    width = BYTES.get(compute, 2)
    moved = (batch * (layer.elements["in"] * width + layer.elements["out"] * BYTES.get(output, 2))
             + layer.elements["weights"] * width)
    peak = {"INT8": gpu.int8_tops, "FP16": gpu.fp16_tflops, "BF16": gpu.fp16_tflops}.get(compute, gpu.fp32_tflops)
    return max(2.0 * layer.macs * batch / (peak * 1e12), moved / (gpu.bandwidth_gbs * 1e9))


def speedup_estimate(report, batch: int = 32, gpus=None):
    """pandas DataFrame, one row per GPU: the estimated FP16 and INT8 engine times (ms, for `batch` images), the
    INT8 speed-up over FP16, and the share of the INT8 time in memory-bound layers. Labelled an estimate (attrs)."""
    import pandas as pd

    rows = []
    for name in gpus or GPUS:
        gpu = GPUS[name] if isinstance(name, str) else name
        fp16 = sum(layer_seconds(layer, gpu, batch, as_fp16=True) for layer in report.layers)
        int8 = sum(layer_seconds(layer, gpu, batch) for layer in report.layers)
        memory = sum(t for layer in report.layers if (t := layer_seconds(layer, gpu, batch))
                     and t > 2.0 * layer.macs * batch / (_peak(layer, gpu) * 1e12))
        rows.append({"GPU": gpu.name, "FP16 ms (est.)": round(1e3 * fp16, 4), "INT8 ms (est.)": round(1e3 * int8, 4),
                     "speed-up (est.)": round(fp16 / int8, 2) if int8 else float("nan"),
                     "memory-bound share": round(memory / int8, 2) if int8 else float("nan")})
    table = pd.DataFrame(rows).set_index("GPU")
    table.index.name = f"GPU · roofline estimate, batch {batch}"
    table.attrs.update(batch=batch, note=(
        f"Estimate, not a measurement: a per-layer roofline (max of 2·MACs / datasheet dense peak and bytes / memory "
        f"bandwidth) summed over the predicted layers of {report.model} at batch {batch}; real kernels reach part of "
        f"the peaks, launch and reformat costs are ignored — only a built engine's timing says what the GPU does."))
    return table


def _peak(layer, gpu: GPU) -> float:
    return {"INT8": gpu.int8_tops, "FP16": gpu.fp16_tflops, "BF16": gpu.fp16_tflops}.get(layer.computes_in,
                                                                                           gpu.fp32_tflops)
