"""`python -m trtlab debug`: per-tensor error, per-layer sensitivity and an automatic guard search."""
from __future__ import annotations

import logging
import math
from pathlib import Path

from trtlab.cli.args import (ArgGroup, BackendArgs, CalibrationArgs, Command, GuardArgs, Items, ModelDataArgs,
                             OutputArgs, RecoveryArgs, WorkspaceArgs, check_choice, positive)
from trtlab.debug.guard_search import DEFAULT_RECOVERY
from trtlab.cli.main import command_main
from trtlab.core.errors import UserValueError
from trtlab.debug.targets import DEFAULT_TARGET, Target

log = logging.getLogger(__name__)
GUARD_PRECISIONS = ("fp32", "fp16")


def parse_overrides(items) -> dict[str, float]:
    """`NAME=FACTOR` items → {name: factor} (UserError on a malformed one)."""
    overrides = {}
    for item in items or []:
        name, sep, factor = item.rpartition("=")
        if not sep or not name:
            raise UserValueError(f"--scale-override {item!r} is not NAME=FACTOR", "write TENSOR_OR_LAYER=FACTOR, e.g. "
                                                                                  "node_Conv_805=50")
        try:
            overrides[name] = float(factor)
        except ValueError:
            raise UserValueError(f"--scale-override {item!r}: {factor!r} is not a number",
                                 "write TENSOR_OR_LAYER=FACTOR with a number, e.g. node_Conv_805=50") from None
        if not math.isfinite(overrides[name]) or overrides[name] <= 0:
            raise UserValueError(f"--scale-override {item!r}: the factor must be a positive number",
                                 "write TENSOR_OR_LAYER=FACTOR with FACTOR > 0, e.g. node_Conv_805=50")
    return overrides


class DebugArgs(ArgGroup):
    """debug: what to analyse and the guard search"""

    def add_options(self, group):
        group.add_argument("--images", type=int, metavar="N", default=8,
                           help="evaluation images for tensor errors + sensitivity (default: 8)")
        group.add_argument("--target", metavar="METRIC=BOUND", default=DEFAULT_TARGET,
                           help="what the INT8 logits must reach against FP32, on the search images and again on "
                                "the verification images: cosine=C (mean logit cosine), sqnr=DB (logit SQNR), kl=K "
                                "(mean softmax KL), top1=F (top-1 agreement; a bare number means top1), "
                                f"comma-joined to require several (default: {DEFAULT_TARGET})")
        group.add_argument("--max-guards", type=int, metavar="N", default=None, help="stop the search after N guards")
        group.add_argument("--guard-precision", metavar="PRECISION", default=None,
                           help="precision the found guards keep: fp16 or fp32 (Casts in the graph, layer precision "
                                "on TensorRT 10) (default: the recipe's float path, fp16)")
        group.add_argument("--scale-override", action=Items, metavar="NAME=FACTOR", default=None,
                           help="debugging aid: multiply a tensor's (or a layer input's) calibrated scale; repeat "
                                "or comma-separate")
        group.add_argument("--no-search", action="store_true", help="tensor errors and sensitivity only")
        group.add_argument("--no-verify", action="store_true", help="skip building + evaluating the found recipe")

    def parse(self, args):
        args.images = positive("--images", args.images, optional=False)
        try:
            args.target = Target.of(args.target)
        except ValueError as exc:
            raise UserValueError(f"--target {args.target}: {str(exc).partition(': ')[2] or exc}",
                                 "e.g. --target cosine=0.99, --target sqnr=20 or --target top1=0.995 (a top-1 "
                                 "agreement fraction in (0, 1])") from None
        args.max_guards = positive("--max-guards", args.max_guards)
        if args.guard_precision is not None:
            args.guard_precision = check_choice("--guard-precision", args.guard_precision, GUARD_PRECISIONS,
                                                "a guard precision")
        args.scale_overrides = parse_overrides(args.scale_override)



COMMAND = Command("debug", "layer-wise INT8 debugging of one recipe: per-tensor error vs FP32, per-layer "
                  "sensitivity and an automatic guard search",
                  [ModelDataArgs(), CalibrationArgs(default=("entropy",), many=False), GuardArgs(),
                   RecoveryArgs("what the guard search tries before keeping any layer out of INT8 (no speed lost)",
                                DEFAULT_RECOVERY),
                   BackendArgs(backend=False, batch_default=8), WorkspaceArgs(),
                   OutputArgs("CSV, JSON and PNG results", "the workspace's debug folder"), DebugArgs()],
                  check_failed="the guard search did not reach --target, or the found recipe missed it on the "
                               "held-out verification images")
main = command_main(COMMAND.name)


def run(args) -> int:
    """Tensor errors, sensitivity, guard search (+ verification) for one recipe: 0 when the target was reached on
    the search images and met on the verification images (or no search ran), 1 when either missed."""
    from trtlab.debug.debugger import layer_debugger
    from trtlab.quantization.recipe import Recipe
    from trtlab.workflows.checks import checked_inputs

    # Everything checkable before any decoding or inference: workspace, model, guards, labels, sizes, --out.
    inputs = checked_inputs(model=args.model, data=args.data, labels=args.labels, preset=args.preset,
                            preset_given=args.preset_given, workspace=args.workspace, guards=args.guards,
                            batch_size=args.batch_size, calibration_images=args.calibration_images,
                            calibration_batch=args.calibration_batch, outputs=[args.out] if args.out else (),
                            **args.model_options)
    # Without --algorithms (or another recipe option) the recipe the last A/B verdict recommends is debugged, as in
    # notebook 05 (layer_debugger(recipe=None) says which and why).
    recipe = Recipe(precision="int8", algorithm=args.algorithms[0], percentile=args.percentile,
                    calibration_images=args.calibration_images, calibration_batch=inputs.sizes.calibration_batch,
                    guards=args.guards) if args.calibration_given or args.guards else None
    debugger = layer_debugger(inputs.model, inputs.dataset, split=inputs.split, recipe=recipe, preprocess=inputs.preset,
                              images=args.images, batch_size=inputs.sizes.batch_size,
                              scale_overrides=args.scale_overrides, workspace=args.workspace,
                              progress=args.verbosity >= 0)
    out = Path(args.out) if args.out else debugger.folder
    status = _analyse(debugger, args, out)
    log.info("debug results in %s", out)
    return status


def _analyse(debugger, args, out: Path) -> int:
    """Tensor errors, sensitivity, guard search (+ verification): printed for people, saved under `out`. The last
    line is the calibrate command with the found guards, to paste."""
    from trtlab.debug.plots import save_figure
    from trtlab.debug.tables import search_steps_table, sensitivity_table

    errors = debugger.tensor_errors()
    errors.save(out)
    save_figure(errors.plot(), out / "tensor_errors.png")
    print(errors.summary())
    sensitivity = debugger.sensitivity()
    sensitivity.save(out)
    save_figure(sensitivity.plot(), out / "sensitivity.png")
    ranked = sensitivity_table(sensitivity.table.head(10))
    print(ranked.drop(columns=["op", "only it INT8", "all but it INT8"]).to_string(index=False))
    if args.no_search:
        return 0
    found = debugger.search_guards(target=args.target, sensitivity=sensitivity, max_guards=args.max_guards,
                                   precision=args.guard_precision, recovery=args.recovery)
    print(search_steps_table(found.steps).to_string(index=False))
    print(found.summary())
    verified = found.verify() if found.reached and not args.no_verify else None
    if verified is not None:
        print(verified.summary())
    found.save(out)
    status, verdict = _verdict(found, verified)
    print(found.answer())
    print(verdict)
    command = found.calibrate_command(model=args.model, data=args.data, labels=args.labels, preset=args.preset,
                                      workspace=args.workspace)
    print(("calibrate with the found guards:" if found.reached else
           "the target was not reached; the most guarded recipe tried:") + f"\n  {command}")
    return status


def _verdict(found, verified) -> tuple[int, str]:
    """(exit status, one line saying whether the target was met where it counts): 0 met, 1 missed."""
    target, searched = found.target.describe(), f"the {found.evaluation_images} search images"
    if not found.reached:
        return 1, f"target {target} NOT reached on {searched} (exit status 1)"
    if verified is None:
        return 0, f"target {target} reached on {searched}; not verified (--no-verify)"
    if not verified["meets_target"]:
        return 1, (f"target {target} reached on {searched} but MISSED on the {verified['images']} verification "
                   f"images (exit status 1)")
    return 0, f"target {target} met on {searched} and on the {verified['images']} verification images"
