"""`python -m trtlab build`: TensorRT engines of an ONNX classifier's variants (needs TensorRT).

The engines are built from the variants trtlab makes (fp32, fp16, int8 Q/DQ — the recipes of `calibrate`), named by
the variant's label and identity key; `int8-implicit` adds TensorRT 10's own calibrator on the same images."""
from __future__ import annotations

import logging

from trtlab.backends.tensorrt.options import PRECISIONS
from trtlab.cli.args import (ArgGroup, CalibrationArgs, Command, GuardArgs, Items, ModelDataArgs, WorkspaceArgs,
                             given, positive)
from trtlab.cli.main import command_main
from trtlab.core.errors import UserError, UserValueError

log = logging.getLogger(__name__)
IMPLICIT = "int8-implicit"
#: TensorRT 10's own calibrators (IInt8EntropyCalibrator2, IInt8MinMaxCalibrator); percentile is trtlab's only.
TRT_CALIBRATORS = ("entropy", "minmax")


class EngineArgs(ArgGroup):
    """engines: precisions, batch profile and builder settings"""

    renamed = {"--int8-model": ("--precision int8", "the INT8 engine is built from trtlab's own Q/DQ variant of "
                                                    "--model (calibrated with --algorithms on --data)")}

    def add_options(self, group):
        group.add_argument("--precision", action=Items, metavar="PRECISION", default=None,
                           help=f"{', '.join(PRECISIONS)}; repeat or comma-separate (default: fp32,fp16)")
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
                                     f"use {', '.join(PRECISIONS)} (int8: trtlab's Q/DQ variant; int8-implicit: "
                                     f"TensorRT 10's calibrator)")
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
    """Calibration options matter only for int8 / int8-implicit engines: refused, not ignored, without them; and
    TensorRT's own calibrators are entropy and minmax only."""
    calibrated = {"int8", IMPLICIT} & set(args.precision)
    if not calibrated:
        named = [flag for flag, on in (("--data", given(args, "data")), ("--preset", args.preset_given),
                                       ("--algorithms/--calibration-images/--calibration-batch",
                                        args.calibration_given)) if on]
        if named:
            raise UserValueError(f"calibration options ({', '.join(named)}) are used by --precision int8 and "
                                 f"{IMPLICIT} only", "add --precision int8 (or int8-implicit on TensorRT 10), or "
                                                     "drop them")
    if IMPLICIT in args.precision and args.algorithms[0] not in TRT_CALIBRATORS:
        raise UserValueError(f"--algorithms {args.algorithms[0]} has no TensorRT calibrator",
                             f"TensorRT 10's calibrators are {', '.join(TRT_CALIBRATORS)}; percentile is trtlab's "
                             f"(--precision int8)")


COMMAND = Command("build", "build TensorRT 10/11 engines of an ONNX classifier's variants (and optionally inspect "
                  "and benchmark them)",
                  [ModelDataArgs(labels=False, data_default="the workspace's prepared data, else the demo photos",
                                 data_help="images INT8 variants calibrate on"),
                   CalibrationArgs(default=("entropy",), many=False, percentile=True,
                                   what="the INT8 calibration (int8: trtlab's; int8-implicit: TensorRT's)"),
                   GuardArgs(), WorkspaceArgs(), EngineArgs()],
                  check_failed="TensorRT could not parse the model or build an engine")
main = command_main(COMMAND.name)


def run(args) -> int:
    from trtlab.backends.tensorrt.loader import (EngineBuildError, EngineCompatibilityError, OnnxParseError,
                                                 TensorRTUnavailable, import_tensorrt)
    from trtlab.backends.tensorrt.readiness import gpu_for_tensorrt
    from trtlab.data.demo import export_demo_model
    from trtlab.quantization.recipe import Recipe
    from trtlab.workflows import checks
    from trtlab.workflows.engines import build_engines

    _check_calibration_options(args)
    checks.check_demo_preset(args.model, args.preset, args.preset_given)
    try:  # the backend asked for is checked first, as check_inputs does: without TensorRT nothing can be built
        trt = import_tensorrt()
    except TensorRTUnavailable as exc:
        raise UserError(f"build needs TensorRT: {exc.what.split('; ')[0]}",
                        "run `python -m trtlab doctor` (or notebook 00_env_setup) to find and load it; without "
                        "TensorRT, `python -m trtlab eval` and `calibrate` run on ONNX Runtime") from exc
    workspace = checks.check_workspace(args.workspace, args.data)
    # TensorRT imports but cannot build here (no GPU, an old driver): one line, after the inputs' own checks and
    # before any work — before the demo model's export (seconds) where no --model was given
    if not args.model:
        gpu_for_tensorrt(trt)
    model = args.model or export_demo_model(workspace=workspace)
    info = checks.check_model(model)
    checks.check_guards(model, args.guards, workspace)
    checks.check_sizes(info, calibration_images=args.calibration_images, calibration_batch=args.calibration_batch)
    data = checks.check_dataset(args.data) if given(args, "data") else None  # None: prepared data, else the demo
    if args.model:
        gpu_for_tensorrt(trt)
    recipes = [Recipe(precision=p, guards=args.guards if p != "fp32" else ()) for p in args.precision
               if p in ("fp32", "fp16")]
    if "int8" in args.precision:
        recipes.append(Recipe(precision="int8", algorithm=args.algorithms[0], percentile=args.percentile,
                              calibration_images=args.calibration_images, calibration_batch=args.calibration_batch,
                              guards=args.guards))
    implicit = (args.algorithms[0],) if IMPLICIT in args.precision else ()
    try:
        engines = build_engines(model, recipes, data, "trt", workspace, args.preset, tensorrt_calibrators=implicit,
                                calibration_images=args.calibration_images, calibration_batch=args.calibration_batch,
                                weakly_typed=args.weakly_typed, force=args.force,
                                timing_cache=not args.no_timing_cache, verbose=args.verbosity > 0,
                                min_batch=args.min_batch, opt_batch=args.opt_batch, max_batch=args.max_batch,
                                workspace_mb=args.workspace_mb)
    except UserError:
        raise
    except (OnnxParseError, EngineBuildError, EngineCompatibilityError) as exc:
        log.error(f"build failed: {exc}")
        return 1
    for name, path in engines.variants.items():
        print(f"{name}: {path}")
    if args.inspect:
        print(engines.inspection().to_string())
    if args.bench:
        print(engines.benchmark(args.bench).to_string())
    return 0
