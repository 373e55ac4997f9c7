"""Latency percentiles and throughput per variant and batch size, INT8 next to FP16.

    python bench/bench_trt_latency.py [--batches 1,8,32] [--iterations 500] [--workspace DIR]

With TensorRT: builds the demo EfficientNet-Lite0's variants — FP32, FP16 and INT8 (trtlab's Q/DQ, minmax and
entropy, calibrated on the demo photos' calibration split), on TensorRT 10 also TensorRT's own implicit entropy
calibration on the same images — as engines, and times execute_async_v3 with CUDA events. Without TensorRT it says
so and times the ONNX variants on ONNX Runtime (host wall clock), which does not predict TensorRT. The anchor is the
FP16 variant measured in the same run: every row prints its median's ratio to FP16 at the same batch size (below 1
= faster than FP16), so the numbers compare across machines. Percentiles are printed only where the number of
timings supports them (p99 from 500).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--workspace", default=None)
    args = parser.parse_args(argv)
    batches = tuple(int(b) for b in args.batches.split(","))

    from trtlab.backends import tensorrt_available
    from trtlab.backends.tensorrt.latency import format_ms
    from trtlab.backends.tensorrt.loader import import_tensorrt, tensorrt_major
    from trtlab.data.demo import demo_dataset, demo_split
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.engines import build_engines

    dataset = demo_dataset()
    recipes = [Recipe(precision="fp32"), Recipe(precision="fp16"), Recipe(algorithm="minmax"),
               Recipe(algorithm="entropy")]
    calibrators = ("entropy",) if tensorrt_available() and tensorrt_major(import_tensorrt()) == 10 else ()
    engines = build_engines(None, recipes, (dataset, demo_split(dataset)), workspace=args.workspace,
                            tensorrt_calibrators=calibrators, opt_batch=max(batches), max_batch=max(batches),
                            progress=False)
    report = engines.benchmark(batches, iterations=args.iterations, warmup=args.warmup)
    table = report.table
    typical = table.attrs["typical"]
    percentiles = [c for c in ("p50_ms", "p90_ms", "p99_ms") if c in table]
    fp16 = table.loc["fp16", typical]
    print(f"backend: {report.backend}; {report.percentiles_note()}; anchor: fp16 {typical[:-3]} at the same batch")
    if report.note:
        print(f"note: {report.note}")
    header = " ".join(f"{c[:-3] + ' ms':>9}" for c in percentiles)
    print(f"{'variant':>26} {'batch':>5} {header} {'img/s':>9} {'÷fp16':>7}")
    for (variant, batch), row in table.iterrows():
        values = " ".join(f"{format_ms(row[c]):>9}" for c in percentiles)
        print(f"{variant:>26} {batch:>5} {values} {row.throughput_ips:>9,.0f} {row[typical] / fp16.loc[batch]:>6.2f}×")
    if engines.backend == "trt":
        print(engines.inspection().to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
