"""Entropy calibration: trtlab's streaming calibrator vs ONNX Runtime's own calibrator, same model, same images.

Each side runs in its own subprocess so peak memory (ru_maxrss) is measured separately:
- anchor: `onnxruntime.quantization.calibrate.create_calibrator(..., CalibrationMethod.Entropy)` with
  `collect_data` + `compute_data` — it keeps every intermediate output of every image until the end;
- trtlab: `collect_statistics` (running max + 2048-bin histograms per tensor, one batch in memory) and
  `compute_thresholds(..., "entropy")`.
Prints seconds, seconds per image and peak RSS of both, and the ratios anchor/trtlab.

    python bench/bench_calibration.py [--images 64] [--batch 8]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _dataset(images: int):
    import numpy as np

    from trtlab.dataset import Dataset
    from trtlab.demo import demo_dataset

    photos = demo_dataset()
    reps = -(-images // len(photos))
    return Dataset("calib-bench", (photos.paths * reps)[:images], np.tile(photos.labels, reps)[:images])


def run_side(side: str, model: str, workspace: str, images: int, batch: int) -> dict:

    from trtlab.decode_cache import build_decode_cache
    from trtlab.preprocess import normalize_batch

    cache = build_decode_cache(_dataset(images), "tf-lite", workspace, progress=False)
    start = time.perf_counter()
    if side == "trtlab":
        import onnx

        from trtlab.calibrate import collect_statistics, compute_thresholds
        from trtlab.variants import stats_tensors

        tensors = stats_tensors(onnx.load(model))
        stats = collect_statistics(model, tensors, cache, batch_size=batch, progress=False)
        thresholds = compute_thresholds(stats, "entropy")
        count = len(thresholds)
    else:
        from onnxruntime.quantization.calibrate import CalibrationDataReader, CalibrationMethod, create_calibrator

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.batches = (normalize_batch(c, cache.preprocess) for _, c in cache.iter_batches(None, batch))

            def get_next(self):
                batch_ = next(self.batches, None)
                return None if batch_ is None else {"input": batch_}

        calibrator = create_calibrator(model, None, augmented_model_path=str(Path(workspace) / "augmented.onnx"),
                                       calibrate_method=CalibrationMethod.Entropy)
        calibrator.collect_data(Reader())
        count = len(calibrator.compute_data().data)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"side": side, "seconds": seconds, "per_image": seconds / images, "peak_rss_mb": peak_mb,
            "tensors": count, "images": images}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--side", choices=["trtlab", "onnxruntime"])
    parser.add_argument("--model")
    parser.add_argument("--workspace")
    args = parser.parse_args()
    if args.side:  # child process
        print(json.dumps(run_side(args.side, args.model, args.workspace, args.images, args.batch)))
        return 0
    from trtlab.demo import export_demo_model

    workspace = tempfile.mkdtemp(prefix="trtlab-calib-bench-")
    model = str(export_demo_model(workspace=workspace))
    results = {}
    for side in ("onnxruntime", "trtlab"):
        out = subprocess.run([sys.executable, __file__, "--side", side, "--model", model, "--workspace", workspace,
                              "--images", str(args.images), "--batch", str(args.batch)],
                             capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if out.returncode:
            print(out.stderr[-3000:])
            return out.returncode
        results[side] = json.loads(out.stdout.strip().splitlines()[-1])
    import onnxruntime

    print(f"EfficientNet-Lite0, {args.images} real photos, batch {args.batch}, onnxruntime {onnxruntime.__version__}")
    for side, r in results.items():
        print(f"{side:12s}: {r['seconds']:7.1f} s  ({1000 * r['per_image']:6.1f} ms/image)  peak RSS "
              f"{r['peak_rss_mb']:8.0f} MB  tensors calibrated {r['tensors']}")
    a, t = results["onnxruntime"], results["trtlab"]
    print(f"ratio onnxruntime/trtlab: time {a['seconds'] / t['seconds']:.2f}x, peak memory "
          f"{a['peak_rss_mb'] / t['peak_rss_mb']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
