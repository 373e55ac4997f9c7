"""Latency p50/p90/p99 and throughput per variant and batch size, INT8 next to FP16.

    python bench/bench_trt_latency.py [--batches 1,8,32] [--iterations 100] [--workspace DIR]

With TensorRT: builds the demo EfficientNet-Lite0 as FP32, FP16 and INT8 engines (INT8 from trtlab's Q/DQ
quantizer, calibrated on the demo photos; on TensorRT 10 also TensorRT's own implicit entropy calibration) and
times execute_async_v3 with CUDA events. Without TensorRT it says so and times the ONNX variants on ONNX
Runtime (host wall clock) instead. The anchor is the FP16 variant measured in the same run: every row prints its
p50 ratio to FP16 at the same batch size (below 1 = faster than FP16), so the numbers compare across machines.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--workspace", default=None)
    args = parser.parse_args(argv)
    batches = tuple(int(b) for b in args.batches.split(","))

    from trtlab.backends import tensorrt_available
    from trtlab.backends.tensorrt.engine import build_engines, import_tensorrt, tensorrt_major
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.demo import demo_dataset, export_demo_model
    from trtlab.quantization.variants import Recipe, build_variant

    model = export_demo_model("efficientnet-lite0", args.workspace)
    cache = build_decode_cache(demo_dataset(), "tf-lite", args.workspace, progress=False)
    qdq = build_variant(model, Recipe(calibration_images=24, calibration_batch=8), cache, cache.valid_indices,
                        workspace=args.workspace, progress=False).model_path
    precisions = ["fp32", "fp16", "int8"]
    if tensorrt_available() and tensorrt_major(import_tensorrt()) == 10:
        precisions.append("int8-implicit")
    engines = build_engines(model, precisions, int8_model=qdq, workspace=args.workspace, calibration=cache,
                            opt_batch=max(batches), max_batch=max(batches), calibration_batch=8)
    table = engines.benchmark(batches, iterations=args.iterations, warmup=args.warmup)
    fp16 = table.loc["fp16", "p50_ms"]
    print(f"backend: {engines.backend} ({table['timer'].iloc[0]}); anchor: fp16 p50 at the same batch size")
    print(f"{'variant':>14} {'batch':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'img/s':>9} {'p50/fp16':>9}")
    for (variant, batch), row in table.iterrows():
        print(f"{variant:>14} {batch:>5} {row.p50_ms:>8.3f} {row.p90_ms:>8.3f} {row.p99_ms:>8.3f} "
              f"{row.throughput_ips:>9.1f} {row.p50_ms / fp16.loc[batch]:>8.2f}x")
    if engines.backend == "trt":
        print(engines.inspection().to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
