"""`python -m trtlab calibrate`: calibrate + quantize INT8 variants and compare them with FP32."""
from __future__ import annotations

from trtlab.quantization.variants import Recipe
from trtlab.workflows.compare import compare


# -- CLI ----------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m trtlab calibrate",
                                     description="calibrate INT8 variants and compare them with FP32")
    parser.add_argument("--model", help="ONNX classifier (default: the demo EfficientNet-Lite0)")
    parser.add_argument("--data", help="image folder (default: the demo photos)")
    parser.add_argument("--labels", help="optional labels CSV (file,label)")
    parser.add_argument("--preset", default="tf-lite")
    parser.add_argument("--algorithms", default="minmax,entropy,percentile")
    parser.add_argument("--percentile", type=float, default=99.99)
    parser.add_argument("--calibration-images", type=int, default=None,
                        help="images to calibrate on (default: the split's calibration set, at most 512)")
    parser.add_argument("--calibration-batch", type=int, default=8)
    parser.add_argument("--guards", default="", help="comma separated: first_layer,last_layer,softmax,node:NAME,"
                                                      "op:TYPE; add =fp16 to run a guard in FP16")
    parser.add_argument("--fp16", action="store_true", help="also build and evaluate an FP16 variant")
    parser.add_argument("--workspace")
    parser.add_argument("--force", action="store_true", help="rebuild and re-evaluate even if cached")
    args = parser.parse_args(argv)
    from trtlab.data.demo import model_and_data

    model, dataset, preset, split = model_and_data(args.model, args.data, args.labels, args.preset, args.workspace)
    guards = tuple(g.strip() for g in args.guards.split(",") if g.strip())
    recipes = [Recipe(precision="int8", algorithm=a.strip(), percentile=args.percentile,
                      calibration_images=args.calibration_images, calibration_batch=args.calibration_batch,
                      guards=guards) for a in args.algorithms.split(",") if a.strip()]
    if args.fp16:
        recipes.insert(0, Recipe(precision="fp16"))
    result = compare(model, dataset, recipes, preset, split=split, workspace=args.workspace, force=args.force,
                     calibration_images=args.calibration_images)
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(f"{result.store.describe()}; results in {result.store.folder}")
        print(result.table.round(4))
    return 0
