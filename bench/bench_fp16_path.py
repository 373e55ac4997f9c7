"""Issue 17: what the FP16 float path costs in accuracy, on the demo (EfficientNet-Lite0, bundled photos).

For each calibration algorithm, the FP16-path INT8 variant (the default) and its FP32-path twin
(`Recipe(high_precision="fp32")`) are built on the demo's calibration photos and run on its evaluation photos by the
literal reference (ONNX Runtime with Q/DQ computed as written: all optimizations off). Printed per variant: top-1
agreement and mean / worst logit cosine against FP32, and of the FP16-path variant against its FP32-path twin, with
the ratio FP16-path / FP32-path of the agreement and cosine to FP32 (1.00: the float path costs nothing), and each
graph's predicted MAC shares (trtlab.graph.fusion.precision_report). CPU only, about 2–3 minutes on 2 cores.

    python bench/bench_fp16_path.py [--algorithms minmax entropy percentile] [--workspace DIR]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def literal_logits(model_path, cache, indices) -> np.ndarray:
    from trtlab.backends.ort import OrtRunner
    from trtlab.evaluation.evaluate import infer_cached
    from trtlab.evaluation.literal_check import LITERAL_OPTIONS

    with OrtRunner(model_path, providers=["CPUExecutionProvider"], **LITERAL_OPTIONS) as runner:
        return np.concatenate(infer_cached(runner, cache, indices, 8, desc="literal", progress=False))


def compare(logits: np.ndarray, reference: np.ndarray) -> dict:
    from trtlab.evaluation.metrics import cosine_per_image

    cosine = cosine_per_image(reference.astype(np.float32), logits.astype(np.float32))
    return {"top1": float((logits.argmax(1) == reference.argmax(1)).mean()), "cos": float(cosine.mean()),
            "worst": float(cosine.min())}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithms", nargs="+", default=["minmax", "entropy", "percentile"])
    parser.add_argument("--workspace", default=None)
    args = parser.parse_args()

    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.demo import demo_dataset, demo_split, export_demo_model
    from trtlab.graph.fusion import precision_report
    from trtlab.quantization.recipe import Recipe
    from trtlab.quantization.variants import build_variant

    started = time.time()
    workspace = Path(args.workspace or tempfile.mkdtemp(prefix="trtlab-bench-"))
    model = export_demo_model(workspace=workspace)
    photos = demo_dataset()
    split = demo_split(photos)
    cache = build_decode_cache(photos, "tf-lite", workspace, progress=False)
    evaluation = split.evaluation[np.isin(split.evaluation, cache.valid_indices)]
    fp32 = literal_logits(model, cache, evaluation)
    print(f"demo EfficientNet-Lite0, {len(split.calibration)} calibration / {len(evaluation)} evaluation photos, "
          f"literal reference (ONNX Runtime, optimizations off)\n")
    header = (f"{'variant':<34}{'top1=fp32':>10}{'cos fp32':>10}{'worst':>8}{'top1=twin':>10}{'cos twin':>10}"
              f"{'ratio top1':>11}{'ratio cos':>10}  MACs INT8/FP16/FP32 %")
    print(header)
    print("-" * len(header))
    for algorithm in args.algorithms:
        rows = {}
        for path in ("fp32", "fp16"):
            recipe = Recipe(algorithm=algorithm, high_precision=path)
            built = build_variant(model, recipe, cache, split.calibration, workspace, progress=False)
            share = precision_report(built.model_path).mac_share
            rows[path] = (built.name, literal_logits(built.model_path, cache, evaluation), share)
        twin = rows["fp32"][1]
        for path in ("fp32", "fp16"):
            name, logits, share = rows[path]
            to_fp32 = compare(logits, fp32)
            macs = "/".join(f"{100 * share[k]:.0f}" for k in ("INT8", "FP16", "FP32"))
            if path == "fp32":
                print(f"{name:<34}{to_fp32['top1']:>10.3f}{to_fp32['cos']:>10.5f}{to_fp32['worst']:>8.4f}"
                      f"{'(twin)':>10}{'':>10}{'':>11}{'':>10}  {macs}")
                anchor = to_fp32
                continue
            to_twin = compare(logits, twin)
            print(f"{name:<34}{to_fp32['top1']:>10.3f}{to_fp32['cos']:>10.5f}{to_fp32['worst']:>8.4f}"
                  f"{to_twin['top1']:>10.3f}{to_twin['cos']:>10.5f}{to_fp32['top1'] / anchor['top1']:>11.3f}"
                  f"{to_fp32['cos'] / anchor['cos']:>10.5f}  {macs}")
    print(f"\nratio: FP16-path / FP32-path twin, agreement and mean cosine to FP32 (1.00 = no accuracy cost). "
          f"Latency is not measured here: only a TensorRT engine shows it. {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
