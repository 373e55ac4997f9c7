"""INT8 literal-reference throughput on ONNX Runtime: all optimizations off (before) vs `session.disable_quant_qdq`
with optimizations on (after), against FP32, on the same real photos.

The literal reference must compute what the Q/DQ graph says (QuantizeLinear → DequantizeLinear → float ops), not
ORT's fused INT8 kernels (see trtlab/evaluation/literal_check.py). With `session.disable_quant_qdq=1` ORT leaves Q/DQ pairs
unfused but may constant-fold the weights' DequantizeLinear and run its other graph optimizations. Each
configuration is checked against the all-off outputs (same top-1, logits within ort_check.FAST_REFERENCE_RTOL
of the logit range) before its speed counts.

    python bench/bench_int8_reference.py [--images 128] [--batch 32] [--repeats 3] [--algorithm entropy]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = [
    # (label, model, OrtRunner options)
    ("fp32, all optimizations", "fp32", {"graph_optimization": "all"}),
    ("fp32, extended (no NCHWc layout)", "fp32", {"graph_optimization": "extended"}),
    ("int8 literal: all optimizations off (before)", "int8", {"graph_optimization": "disable"}),
    ("int8 disable_quant_qdq + basic", "int8", {"graph_optimization": "basic", "disable_quant_qdq": True}),
    ("int8 disable_quant_qdq + extended (after)", "int8", {"graph_optimization": "extended", "disable_quant_qdq": True}),
    ("int8 disable_quant_qdq + all", "int8", {"graph_optimization": "all", "disable_quant_qdq": True}),
    ("int8 fused ORT kernels (not literal)", "int8", {"graph_optimization": "all"}),
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--algorithm", default="entropy")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: ORT's choice)")
    parser.add_argument("--workspace", default=None)
    args = parser.parse_args()

    import onnxruntime as ort

    from trtlab.backends.ort import OrtRunner
    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.demo import demo_dataset, demo_split, export_demo_model
    from trtlab.evaluation.literal_check import FAST_LITERAL_OPTIONS, cpu_features, describe_cpu, literal_outputs_match
    from trtlab.evaluation.evaluate import infer_cached
    from trtlab.quantization.recipe import Recipe
    from trtlab.quantization.variants import build_variant

    workspace = Path(args.workspace or tempfile.mkdtemp(prefix="trtlab-bench-"))
    model = export_demo_model(workspace=workspace)
    photos = demo_dataset()
    split = demo_split(photos)
    photo_cache = build_decode_cache(photos, "tf-lite", workspace, progress=False)
    int8 = build_variant(model, Recipe(algorithm=args.algorithm), photo_cache, split.calibration, workspace,
                         progress=False).model_path
    # The bench images: the demo photos repeated to the requested count (decoded once; inference is timed).
    reps = -(-args.images // len(photos))
    dataset = Dataset("bench-photos", (photos.paths * reps)[: args.images], np.tile(photos.labels, reps)[: args.images])
    cache = build_decode_cache(dataset, "tf-lite", workspace, progress=False)
    indices = np.arange(len(dataset))
    paths = {"fp32": model, "int8": int8}

    runners, outputs = [], {}
    for label, which, options in CONFIGS:
        runner = OrtRunner(paths[which], providers=["CPUExecutionProvider"], intra_op_threads=args.threads,
                           **options).activate()
        outputs[label] = np.concatenate(infer_cached(runner, cache, indices, args.batch, progress=False))  # warm-up
        runners.append((label, which, options, runner))
    speeds = {label: [] for label, *_ in CONFIGS}
    for _ in range(args.repeats):
        for label, _, _, runner in runners:  # interleaved, so drift in machine load hits every configuration alike
            start = time.perf_counter()
            infer_cached(runner, cache, indices, args.batch, progress=False)
            speeds[label].append(len(indices) / (time.perf_counter() - start))
    for *_, runner in runners:
        runner.deactivate()

    literal = outputs[CONFIGS[2][0]]
    fp32 = max(speeds[CONFIGS[0][0]])
    before = max(speeds[CONFIGS[2][0]])
    print(f"images={len(indices)} (demo photos, real) batch={args.batch} repeats={args.repeats} (best of) "
          f"onnxruntime={ort.__version__} cpu: {describe_cpu(cpu_features())}; int8 = {int8.parent.name}")
    print(f"{'configuration':48} {'images/s':>9} {'vs fp32':>8} {'vs before':>9}  literal? (top-1 same, max rel. logit err)")
    for label, which, options, _ in runners:
        best = max(speeds[label])
        if which == "fp32":
            verdict = "-"
        else:
            match = literal_outputs_match(literal, outputs[label])
            verdict = (f"{'yes' if match['matches'] else 'NO '} ({'same' if match['same_top1'] else 'DIFFERENT'} "
                       f"top-1, {match['max_relative_logit_error']:.2e})")
        print(f"{label:48} {best:9.1f} {best / fp32:8.2f} {best / before:9.2f}  {verdict}")
    chosen = next(label for label, _, options, _ in runners if options == FAST_LITERAL_OPTIONS)
    after = max(speeds[chosen])
    print(f"INT8 literal reference: before {before:.1f} images/s ({before / fp32:.2f}× FP32), after {after:.1f} "
          f"images/s ({after / fp32:.2f}× FP32): speed-up {after / before:.2f}×  [trtlab uses: {FAST_LITERAL_OPTIONS}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
