"""`python -m trtlab calibrate`: calibrate + quantize INT8 variants and compare them with FP32."""
from __future__ import annotations

from trtlab.cli.args import (ArgGroup, BackendArgs, CalibrationArgs, Command, GuardArgs, ModelDataArgs,
                             WorkspaceArgs)


class CalibrateArgs(ArgGroup):
    """calibrate: which variants"""

    def add_options(self, group):
        group.add_argument("--fp16", action="store_true", help="also build and evaluate an FP16 variant")
        group.add_argument("--force", action="store_true", help="rebuild and re-evaluate even if cached")
        group.add_argument("--parallel", metavar="N", default="auto",
                           help="auto (one process per GPU when several GPUs run the variants), off, or a number of "
                                "worker processes (default: auto)")

    def parse(self, args):
        from trtlab.cli.args import positive

        if args.parallel in ("auto", "off"):
            return
        if not args.parallel.isdigit() or int(args.parallel) < 1:
            from trtlab.core.errors import UserValueError

            raise UserValueError(f"--parallel {args.parallel!r} is not auto, off or a number of processes",
                                 "use --parallel auto, --parallel off or e.g. --parallel 2")
        args.parallel = positive("--parallel", int(args.parallel))


COMMAND = Command("calibrate", "calibrate INT8 variants (one per algorithm, with the guards) and compare them with "
                  "FP32 on the evaluation images", [ModelDataArgs(), CalibrationArgs(), GuardArgs(),
                                                    WorkspaceArgs(), BackendArgs(), CalibrateArgs()])
main = COMMAND.main


def run(args) -> int:
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.checks import checked_inputs
    from trtlab.workflows.compare import compare

    inputs = checked_inputs(model=args.model, data=args.data, labels=args.labels, preset=args.preset,
                            preset_given=args.preset_given, workspace=args.workspace, guards=args.guards,
                            calibration_images=args.calibration_images, calibration_batch=args.calibration_batch)
    recipes = [Recipe(precision="int8", algorithm=algorithm, percentile=args.percentile,
                      calibration_images=args.calibration_images,
                      calibration_batch=inputs.sizes.calibration_batch, guards=args.guards)
               for algorithm in args.algorithms]
    if args.fp16:
        recipes.insert(0, Recipe(precision="fp16"))
    result = compare(inputs.model, inputs.dataset, recipes, inputs.preset, split=inputs.split,
                     workspace=args.workspace, force=args.force, calibration_images=args.calibration_images,
                     backend=args.backend, batch_size=args.batch_size, parallel=args.parallel)
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(f"{result.store.describe()}; results in {result.store.folder}")
        print(result.table.round(4))
    return 0
