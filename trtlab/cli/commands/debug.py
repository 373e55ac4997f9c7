"""`python -m trtlab debug`: per-tensor error, per-layer sensitivity and an automatic guard search."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from trtlab.core.errors import UserValueError
from trtlab.debug.debugger import layer_debugger
from trtlab.debug.plots import save_figure

log = logging.getLogger(__name__)


def _parse_overrides(items) -> dict[str, float]:
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
    return overrides


def main(argv=None) -> int:
    """`python -m trtlab debug`: tensor errors, sensitivity, guard search (+ verification) for one recipe.
    Exit status 0 when the target was reached (or no search ran), 1 when it was not."""
    from trtlab.quantization.calibrate import ALGORITHMS

    parser = argparse.ArgumentParser(prog="python -m trtlab debug",
                                     description="layer-wise INT8 debugging: per-tensor error vs FP32, per-layer "
                                                 "sensitivity and an automatic guard search")
    parser.add_argument("--model", help="ONNX classifier (default: the demo EfficientNet-Lite0)")
    parser.add_argument("--data", help="image folder (default: the demo photos)")
    parser.add_argument("--labels", help="optional labels CSV (file,label)")
    parser.add_argument("--preset", default="tf-lite", help="preprocessing preset")
    parser.add_argument("--algorithm", default="entropy", choices=list(ALGORITHMS))
    parser.add_argument("--percentile", type=float, default=99.99)
    parser.add_argument("--calibration-images", type=int, default=None,
                        help="images to calibrate on (default: the split's calibration set, at most 512)")
    parser.add_argument("--calibration-batch", type=int, default=8)
    parser.add_argument("--guards", default="", help="recipe guards kept on throughout (comma separated)")
    parser.add_argument("--images", type=int, default=8, help="evaluation images for tensor errors + sensitivity")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--target", type=float, default=0.995, help="top-1 agreement with FP32 to reach")
    parser.add_argument("--max-guards", type=int, default=None)
    parser.add_argument("--guard-precision", default="fp32", choices=["fp32", "fp16"],
                        help="precision the found guards keep (fp16: Casts in the graph, layer precision on TRT 10)")
    parser.add_argument("--scale-override", action="append", default=[], metavar="NAME=FACTOR",
                        help="debugging aid: multiply a tensor's (or a layer input's) calibrated scale")
    parser.add_argument("--no-search", action="store_true", help="tensor errors and sensitivity only")
    parser.add_argument("--no-verify", action="store_true", help="skip building + evaluating the found recipe")
    parser.add_argument("--out", help="folder for CSV/JSON/PNG results (default: the workspace's debug folder)")
    parser.add_argument("--workspace")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if not 0 < args.target <= 1:
        parser.error(f"--target {args.target}: a top-1 agreement fraction in (0, 1], e.g. 0.995")

    from trtlab.data.demo import model_and_data
    from trtlab.workflows.checks import check_inputs
    from trtlab.quantization.variants import Recipe

    if args.images < 1:
        raise UserValueError(f"--images {args.images} is not possible", "give a whole number ≥ 1 for --images")
    # Everything checkable before any decoding or inference: workspace, model, labels, sizes, --out.
    _, _, dataset, sizes = check_inputs(model=args.model, data=args.data, labels=args.labels,
                                        workspace=args.workspace, batch_size=args.batch_size,
                                        calibration_images=args.calibration_images,
                                        calibration_batch=args.calibration_batch,
                                        outputs=[args.out] if args.out else ())
    # The data folder was read by check_inputs already; model_and_data supplies the model (or the demo's).
    model, demo_data, preset, split = model_and_data(args.model, None, None, args.preset, args.workspace)
    if dataset is not None:
        split = None  # the demo split belongs to the demo photos; the user's data gets a saved split
    else:
        dataset = demo_data
    guards = tuple(g.strip() for g in args.guards.split(",") if g.strip())
    recipe = Recipe(precision="int8", algorithm=args.algorithm, percentile=args.percentile,
                    calibration_images=args.calibration_images, calibration_batch=sizes.calibration_batch,
                    guards=guards)
    debugger = layer_debugger(model, dataset, split=split, recipe=recipe, preprocess=preset, images=args.images,
                              batch_size=sizes.batch_size, scale_overrides=_parse_overrides(args.scale_override),
                              workspace=args.workspace, progress=not args.quiet)
    out = Path(args.out) if args.out else debugger.folder
    status = _analyse(debugger, args, out)
    log.info("debug results in %s", out)
    return status


def _analyse(debugger, args, out: Path) -> int:
    """Tensor errors, sensitivity, guard search (+ verification): printed for people, saved under `out`. The last
    line is the calibrate command with the found guards, to paste."""
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
                                   precision=args.guard_precision)
    print(search_steps_table(found.steps).to_string(index=False))
    print(found.summary())
    if found.reached and not args.no_verify:
        print(found.verify().summary())
    found.save(out)
    command = found.calibrate_command(model=args.model, data=args.data, labels=args.labels, preset=args.preset,
                                      workspace=args.workspace)
    print(("calibrate with the found guards:" if found.reached else
           "the target was not reached; the most guarded recipe tried:") + f"\n  {command}")
    return 0 if found.reached else 1
