"""`python -m trtlab build`: TensorRT engines of an ONNX classifier (needs TensorRT)."""
from __future__ import annotations

import argparse
import logging

from trtlab.backends.tensorrt.engine import (PRECISIONS, EngineBuildError, EngineCompatibilityError,
                                             ImplicitInt8Unsupported, OnnxParseError, TensorRTUnavailable,
                                             build_engines, import_tensorrt)

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------------
# CLI: python -m trtlab build
# ----------------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """`python -m trtlab build`: build engines (and optionally inspect and benchmark them)."""
    parser = argparse.ArgumentParser(prog="python -m trtlab build",
                                     description="Build TensorRT 10/11 engines of an ONNX classifier")
    parser.add_argument("--model", default=None, help="ONNX model (default: the demo EfficientNet-Lite0)")
    parser.add_argument("--precision", action="append", choices=PRECISIONS,
                        help="repeatable; default fp32 and fp16")
    parser.add_argument("--int8-model", default=None, help="Q/DQ ONNX for --precision int8 (default: newest in "
                                                           "the workspace)")
    parser.add_argument("--min-batch", type=int, default=1)
    parser.add_argument("--opt-batch", type=int, default=32)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--workspace-mb", type=int, default=2048, help="builder workspace memory pool limit")
    parser.add_argument("--guard", action="append", default=[], help="keep a node FP32 (first_layer, last_layer, "
                                                                     "softmax, op:<Op>, node:<name>[=fp16])")
    parser.add_argument("--weakly-typed", action="store_true",
                        help="TensorRT 10 legacy path: precision flags and layer precision guards instead of a "
                             "strongly typed network (deprecated since TensorRT 10.12, refused on 11)")
    parser.add_argument("--calibrator", choices=("entropy", "minmax"), default="entropy")
    parser.add_argument("--calib-data", default=None, help="image folder for int8-implicit ('demo' = demo photos)")
    parser.add_argument("--calib-images", type=int, default=512)
    parser.add_argument("--calib-batch", type=int, default=8)
    parser.add_argument("--preset", default="tf-lite", help="preprocessing of the calibration images")
    parser.add_argument("--no-timing-cache", action="store_true")
    parser.add_argument("--force", action="store_true", help="rebuild even when a matching engine exists")
    parser.add_argument("--workspace", default=None)
    parser.add_argument("--inspect", action="store_true", help="print each engine's layer precision counts")
    parser.add_argument("--bench", default=None, help="comma-separated batch sizes to benchmark, e.g. 1,8,32")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    try:
        import_tensorrt()
    except TensorRTUnavailable as exc:
        log.error(f"build needs TensorRT: {exc}")
        return 2
    calibration = None
    precisions = args.precision or ["fp32", "fp16"]
    if "int8-implicit" in precisions:
        from trtlab.data.dataset import Dataset
        from trtlab.data.decode_cache import build_decode_cache

        if args.calib_data in (None, "demo"):
            from trtlab.data.demo import demo_dataset

            dataset = demo_dataset()
        else:
            dataset = Dataset.from_folder(args.calib_data)
        calibration = build_decode_cache(dataset, args.preset, args.workspace)
    options = dict(min_batch=args.min_batch, opt_batch=args.opt_batch, max_batch=args.max_batch,
                   workspace_mb=args.workspace_mb, guards=tuple(args.guard), weakly_typed=args.weakly_typed)
    if "int8-implicit" in precisions:
        options.update(calibrator=args.calibrator, calibration_images=args.calib_images,
                       calibration_batch=args.calib_batch)
    try:
        engines = build_engines(args.model, precisions, args.int8_model, "trt", args.workspace, calibration,
                                timing_cache=not args.no_timing_cache, force=args.force, verbose=args.verbose,
                                **options)
    except (ImplicitInt8Unsupported, OnnxParseError, EngineBuildError, EngineCompatibilityError, ValueError) as exc:
        log.error(f"build failed: {exc}")
        return 1
    for name, path in engines.variants.items():
        print(f"{name}: {path}")
    if args.inspect:
        print(engines.inspection().to_string())
    if args.bench:
        sizes = tuple(int(s) for s in args.bench.split(",") if s.strip())
        table = engines.benchmark(sizes)
        print(table.to_string())
        if "ratio" in table.attrs:
            print(table.attrs["ratio"].to_string())
    return 0
