"""`python -m trtlab build`: TensorRT engines of an ONNX classifier (needs TensorRT)."""
from __future__ import annotations

import logging

from trtlab.backends.tensorrt.calibrator import ALGORITHMS as TRT_CALIBRATORS
from trtlab.backends.tensorrt.engine import PRECISIONS
from trtlab.cli.args import (ArgGroup, CalibrationArgs, Command, GuardArgs, Items, ModelDataArgs, WorkspaceArgs,
                             given, positive)
from trtlab.core.errors import UserError, UserValueError

log = logging.getLogger(__name__)
IMPLICIT = "int8-implicit"


class EngineArgs(ArgGroup):
    """engines: precisions, batch profile and builder settings"""

    def add_options(self, group):
        group.add_argument("--precision", action=Items, metavar="PRECISION", default=None,
                           help=f"{', '.join(PRECISIONS)}; repeat or comma-separate (default: fp32,fp16)")
        group.add_argument("--int8-model", metavar="MODEL.onnx", default=None,
                           help="Q/DQ ONNX for --precision int8 (default: newest in the workspace)")
        for name, default in (("min", 1), ("opt", 32), ("max", 64)):
            group.add_argument(f"--{name}-batch", type=int, metavar="N", default=default,
                               help=f"{name} batch of the optimization profile (default: {default})")
        group.add_argument("--workspace-mb", type=int, metavar="MB", default=2048,
                           help="builder workspace memory pool limit (default: 2048)")
        group.add_argument("--weakly-typed", action="store_true",
                           help="TensorRT 10 legacy path: precision flags and layer precision guards instead of a "
                                "strongly typed network (deprecated since TensorRT 10.12, refused on 11)")
        group.add_argument("--no-timing-cache", action="store_true")
        group.add_argument("--force", action="store_true", help="rebuild even when a matching engine exists")
        group.add_argument("--inspect", action="store_true", help="print each engine's layer precision counts")
        group.add_argument("--bench", action=Items, metavar="N", default=None,
                           help="batch sizes to benchmark, e.g. 1,8,32 (repeat or comma-separate)")

    def parse(self, args):
        args.precision = tuple(dict.fromkeys(args.precision or ("fp32", "fp16")))
        for precision in args.precision:
            if precision not in PRECISIONS:
                raise UserValueError(f"--precision {precision!r} is not an engine precision",
                                     f"use {', '.join(PRECISIONS)} (int8: a Q/DQ model; int8-implicit: TensorRT "
                                     f"10's calibrator)")
        batches = [positive(f"--{n}-batch", getattr(args, f"{n}_batch"), optional=False) for n in ("min", "opt", "max")]
        if not batches[0] <= batches[1] <= batches[2]:
            raise UserValueError(f"--min-batch {batches[0]} --opt-batch {batches[1]} --max-batch {batches[2]} are not "
                                 f"in order", "give --min-batch ≤ --opt-batch ≤ --max-batch")
        positive("--workspace-mb", args.workspace_mb, optional=False)
        sizes = []
        for item in args.bench or ():
            try:
                sizes.append(positive("--bench", int(item), optional=False))
            except ValueError:  # int('x'); a UserValueError (≤ 0) is a ValueError too and names itself
                raise UserValueError(f"--bench {item!r} is not a batch size", "give whole numbers ≥ 1, e.g. "
                                                                              "--bench 1,8,32") from None
        args.bench = tuple(sizes)


def _check_calibration_options(args) -> None:
    """TensorRT's calibrator options matter only with --precision int8-implicit: refused, not ignored, without."""
    if IMPLICIT in args.precision:
        return
    named = [flag for flag, on in (("--data", given(args, "data")), ("--preset", args.preset_given),
                                   ("--algorithms/--calibration-images/--calibration-batch", args.calibration_given))
             if on]
    if named:
        raise UserValueError(f"TensorRT's calibrator options ({', '.join(named)}) are used by --precision "
                             f"{IMPLICIT} only", f"add --precision {IMPLICIT} (TensorRT 10), or drop them")


COMMAND = Command("build", "build TensorRT 10/11 engines of an ONNX classifier (and optionally inspect and "
                  "benchmark them)",
                  [ModelDataArgs(labels=False, data_default="the demo photos",
                                 data_help="calibration images for --precision int8-implicit"),
                   CalibrationArgs(choices=tuple(TRT_CALIBRATORS), default=("entropy",), many=False, percentile=False,
                                   images_default=512, what="TensorRT's calibrators (int8-implicit)"),
                   GuardArgs(), WorkspaceArgs(), EngineArgs()],
                  check_failed="TensorRT could not parse the model or build an engine")
main = COMMAND.main


def run(args) -> int:
    from trtlab.backends.tensorrt.engine import (EngineBuildError, EngineCompatibilityError, ImplicitInt8Unsupported,
                                                 OnnxParseError, TensorRTUnavailable, build_engines, import_tensorrt)
    from trtlab.data.demo import export_demo_model
    from trtlab.workflows import checks

    _check_calibration_options(args)
    checks.check_demo_preset(args.model, args.preset, args.preset_given)
    try:  # the backend asked for is checked first, as check_inputs does: without TensorRT nothing can be built
        import_tensorrt()
    except TensorRTUnavailable as exc:
        raise UserError(f"build needs TensorRT: {str(exc).split('; ')[0]}",
                        "run `python -m trtlab doctor` (or notebook 00_env_setup) to find and load it; without "
                        "TensorRT, `python -m trtlab eval` and `calibrate` run on ONNX Runtime") from exc
    implicit = IMPLICIT in args.precision
    workspace = checks.check_workspace(args.workspace, args.data if implicit else None)
    model = args.model or export_demo_model(workspace=workspace)
    info = checks.check_model(model)
    checks.check_guards(model, args.guards, workspace)
    calibration = None
    if implicit:
        from trtlab.data.decode_cache import build_decode_cache
        from trtlab.data.demo import demo_dataset

        dataset = checks.check_dataset(args.data) if args.data is not None else demo_dataset()
        checks.check_sizes(info, calibration_images=args.calibration_images, calibration_batch=args.calibration_batch)
        calibration = build_decode_cache(dataset, args.preset, args.workspace)
    options = dict(min_batch=args.min_batch, opt_batch=args.opt_batch, max_batch=args.max_batch,
                   workspace_mb=args.workspace_mb, guards=args.guards, weakly_typed=args.weakly_typed)
    if implicit:
        options.update(calibrator=args.algorithms[0], calibration_images=args.calibration_images,
                       calibration_batch=args.calibration_batch)
    try:
        engines = build_engines(model, args.precision, args.int8_model, "trt", args.workspace, calibration,
                                timing_cache=not args.no_timing_cache, force=args.force, verbose=args.verbosity > 0,
                                **options)
    except ImplicitInt8Unsupported as exc:
        raise UserError(str(exc).split(". Use ")[0], "quantize with `python -m trtlab calibrate`, then build its "
                        "Q/DQ model with --precision int8") from exc
    except UserError:
        raise
    except (OnnxParseError, EngineBuildError, EngineCompatibilityError, ValueError) as exc:
        log.error(f"build failed: {exc}")
        return 1
    for name, path in engines.variants.items():
        print(f"{name}: {path}")
    if args.inspect:
        print(engines.inspection().to_string())
    if args.bench:
        table = engines.benchmark(args.bench)
        print(table.to_string())
        if "ratio" in table.attrs:
            print(table.attrs["ratio"].to_string())
    return 0
