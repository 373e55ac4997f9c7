"""`python -m trtlab calibrate`: calibrate + quantize INT8 variants and compare them with FP32."""
from __future__ import annotations

import argparse
from pathlib import Path

from trtlab.cli.args import (ArgGroup, BackendArgs, CalibrationArgs, Command, GuardArgs, ModelDataArgs,
                             RecoveryArgs, WorkspaceArgs, given)
from trtlab.cli.main import command_main
from trtlab.core.errors import UserValueError


class CalibrateArgs(ArgGroup):
    """calibrate: which variants"""

    def add_options(self, group):
        group.add_argument("--fp16", action="store_true", help="also build and evaluate an FP16 variant")
        group.add_argument("--force", action="store_true", help="rebuild and re-evaluate even if cached")
        group.add_argument("--parallel", metavar="N", default="auto",
                           help="auto (one process per GPU when several GPUs run the variants), off, or a number of "
                                "worker processes (default: auto)")
        group.add_argument("--engines", action=argparse.BooleanOptionalAction, default=None,
                           help="also build each variant's TensorRT engine and evaluate it on the same images "
                                "(top-1, agreement with the literal result, INT8 vs FP16 latency); --no-engines: "
                                "the literal A/B only (default: on where TensorRT imports)")
        group.add_argument("--import-cache", metavar="FILE", default=None,
                           help="take the INT8 scales from this calibration cache instead of calibrating: trtlab's, "
                                "or TensorRT's own text cache (TRT-<version>-<calibrator> header) without trtlab's "
                                ".json; one INT8 variant, its algorithm from the cache, checked against this model")

    def parse(self, args):
        self._parse_parallel(args)
        args.import_cache = Path(args.import_cache) if given(args, "import_cache") else None
        if args.import_cache is None:
            return
        from trtlab.quantization.calibration_cache import read_imported_cache

        imported = read_imported_cache(args.import_cache)  # readable, a header trtlab knows: before any work
        if args.algorithms_given and tuple(args.algorithms) != (imported.algorithm,):
            raise UserValueError(f"--algorithms {','.join(args.algorithms)} was given with --import-cache "
                                 f"{args.import_cache}, whose scales are {imported.algorithm}'s ({imported.header})",
                                 f"drop --algorithms (the cache's algorithm is used), or give --algorithms "
                                 f"{imported.algorithm}")
        args.imported = imported

    @staticmethod
    def _parse_parallel(args):
        from trtlab.cli.args import positive

        if args.parallel in ("auto", "off"):
            return
        if not args.parallel.isdigit() or int(args.parallel) < 1:
            raise UserValueError(f"--parallel {args.parallel!r} is not auto, off or a number of processes",
                                 "use --parallel auto, --parallel off or e.g. --parallel 2")
        args.parallel = positive("--parallel", int(args.parallel))


COMMAND = Command("calibrate", "calibrate INT8 variants (one per algorithm, with the guards) and compare them with "
                  "FP32 on the evaluation images", [ModelDataArgs(), CalibrationArgs(), GuardArgs(),
                                                    RecoveryArgs("each algorithm's variant is then built plain and "
                                                                 "recovered, and the verdict compares the two"),
                                                    WorkspaceArgs(), BackendArgs(), CalibrateArgs()])
main = command_main(COMMAND.name)


def run(args) -> int:
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.checks import checked_inputs
    from trtlab.workflows.compare import compare

    inputs = checked_inputs(model=args.model, data=args.data, labels=args.labels, preset=args.preset,
                            preset_given=args.preset_given, workspace=args.workspace, guards=args.guards,
                            calibration_images=args.calibration_images, calibration_batch=args.calibration_batch,
                            **args.model_options)
    if args.import_cache is not None:  # one variant, with the cache's algorithm (and percentile, when it says)
        algorithms, percentile = (args.imported.algorithm,), args.imported.percentile or args.percentile
    else:
        algorithms, percentile = args.algorithms, args.percentile
    recipes = [Recipe(precision="int8", algorithm=algorithm, percentile=percentile,
                      calibration_images=args.calibration_images,
                      calibration_batch=inputs.sizes.calibration_batch, guards=args.guards, recovery=recovery)
               for algorithm in algorithms for recovery in ((), args.recovery)[:2 if args.recovery else 1]]
    if args.fp16:
        recipes.insert(0, Recipe(precision="fp16"))
    from trtlab.evaluation.options import RunOptions
    from trtlab.workflows.compare import CalibrationOptions

    run = RunOptions(backend=args.backend, batch_size=args.batch_size, parallel=args.parallel, force=args.force,
                     engines="auto" if args.engines is None else args.engines)
    result = compare(inputs.model, inputs.dataset, recipes, inputs.preset, split=inputs.split,
                     workspace=args.workspace, run=run,
                     calibration=CalibrationOptions(args.calibration_images, args.import_cache))
    print_ab(result, args.workspace)
    return 0


def print_ab(result, workspace) -> None:
    """What notebook 03 shows, as text: the formatted variant table, the verdict sentence (views.decision) and the
    report written for it."""
    from trtlab.core.workspace import workspace_dir
    from trtlab.views.decision import verdict_line
    from trtlab.views.report import write_report

    line = verdict_line(result.verdict)
    report = write_report(result.store, workspace_dir(workspace) / "reports" / result.store.folder.name,
                          list(result.table.index), decode_cache=result.cache,
                          verdict=line.removeprefix("verdict: ") if line else None)
    print(f"{result.store.describe()}; results in {result.store.folder}; {result.ran_on}")
    print()
    print(result.table.text())
    for note in result.notes():  # recipes whose graphs came out byte-identical: one variant, said
        print(note)
    print()
    if result.engines is not None:  # the TensorRT column (workflows.ab_engines): its own backend, its own table
        print(result.engines)
        print()
    if line:
        print(line)
    if report.get("md") is not None:  # None: a read-only workspace without a stored report (said above)
        print(f"report: {report['md']}  {report['png']}  {report['csv']}")
