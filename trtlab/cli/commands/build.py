"""`python -m trtlab build`: TensorRT engines of an ONNX classifier's variants (needs TensorRT)."""
from __future__ import annotations

import argparse
import logging

from trtlab.backends.tensorrt.loader import (EngineBuildError, EngineCompatibilityError, OnnxParseError,
                                             TensorRTUnavailable, import_tensorrt)
from trtlab.backends.tensorrt.options import PRECISIONS
from trtlab.core.errors import UserError, report

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    """`python -m trtlab build`: build the variants' engines (and optionally inspect and benchmark them)."""
    parser = argparse.ArgumentParser(prog="python -m trtlab build",
                                     description="Build TensorRT 10/11 engines of an ONNX classifier's variants "
                                                 "(fp32, fp16, int8 Q/DQ made by trtlab; int8-implicit: TensorRT "
                                                 "10's own calibrator)")
    parser.add_argument("--model", default=None, help="ONNX model (default: the demo EfficientNet-Lite0)")
    parser.add_argument("--precision", action="append", choices=PRECISIONS,
                        help="repeatable; default fp32 and fp16")
    parser.add_argument("--min-batch", type=int, default=1)
    parser.add_argument("--opt-batch", type=int, default=32)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--workspace-mb", type=int, default=2048, help="builder workspace memory pool limit")
    parser.add_argument("--guard", action="append", default=[], help="keep a node out of INT8/FP16 (first_layer, "
                                                                     "last_layer, softmax, op:<Op>, node:<name>"
                                                                     "[=fp16]); part of the variant's recipe")
    parser.add_argument("--weakly-typed", action="store_true",
                        help="TensorRT 10 legacy path: precision flags and layer precision guards instead of a "
                             "strongly typed network (deprecated since TensorRT 10.12, refused on 11)")
    parser.add_argument("--calibrator", choices=("entropy", "minmax", "percentile"), default="entropy",
                        help="calibration algorithm of int8 (trtlab's Q/DQ) and int8-implicit (TensorRT's own: "
                             "entropy or minmax)")
    parser.add_argument("--calib-data", default=None, help="image folder to calibrate on ('demo' = the demo "
                                                           "photos; default: the workspace's prepared data, else "
                                                           "the demo photos)")
    parser.add_argument("--calib-images", type=int, default=None,
                        help="calibration images (default: the split's calibration set, at most 512)")
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
        return report(UserError(f"build needs TensorRT: {exc.what}", exc.fix))
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.engines import build_engines

    precisions = args.precision or ["fp32", "fp16"]
    guards = tuple(args.guard)
    recipes = [Recipe(precision=p, guards=guards if p != "fp32" else ()) for p in precisions if p in ("fp32", "fp16")]
    if "int8" in precisions:
        recipes.append(Recipe(precision="int8", algorithm=args.calibrator, calibration_images=args.calib_images,
                              calibration_batch=args.calib_batch, guards=guards))
    implicit = (args.calibrator,) if "int8-implicit" in precisions else ()
    options = dict(min_batch=args.min_batch, opt_batch=args.opt_batch, max_batch=args.max_batch,
                   workspace_mb=args.workspace_mb)
    try:
        engines = build_engines(args.model, recipes, _calibration_data(args.calib_data), "trt", args.workspace,
                                args.preset, tensorrt_calibrators=implicit, calibration_images=args.calib_images,
                                calibration_batch=args.calib_batch, weakly_typed=args.weakly_typed,
                                force=args.force, timing_cache=not args.no_timing_cache, verbose=args.verbose,
                                **options)
    except (OnnxParseError, EngineBuildError, EngineCompatibilityError) as exc:
        log.error(f"build failed: {exc}")
        return 1
    for name, path in engines.variants.items():
        print(f"{name}: {path}")
    if args.inspect:
        print(engines.inspection().to_string())
    if args.bench:
        print(engines.benchmark(tuple(int(s) for s in args.bench.split(",") if s.strip())))
    return 0


def _calibration_data(folder):
    """None (the workspace's prepared data, else the demo photos), the demo photos, or a folder's images."""
    if folder is None:
        return None
    from trtlab.data.demo import demo_dataset, demo_split

    if folder == "demo":
        dataset = demo_dataset()
        return dataset, demo_split(dataset)
    from trtlab.data.dataset import Dataset

    return Dataset.from_folder(folder)
