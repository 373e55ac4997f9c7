"""trtlab's ONNX Runtime reference path vs a bare onnxruntime session on the same batches.

Measures steady-state images/s of (a) a bare `onnxruntime.InferenceSession.run` on pre-normalised float32 batches
and (b) trtlab's inference loop as evaluation runs it: uint8 crops from the decode cache → normalize_batch (next
batch prepared while the current one runs) → OrtRunner.infer (input checks, timing). Goal: (b) within 10% of (a).
Also printed, for information: a whole `evaluate` call (session creation, top-5, atomic store write included).

    python bench/bench_ort_reference.py [--images 256] [--batch 32] [--repeats 3]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workspace", default=None)
    args = parser.parse_args()

    import onnxruntime as ort

    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.demo import demo_dataset, export_demo_model
    from trtlab.backends.ort import OrtRunner
    from trtlab.evaluation.evaluate import evaluate, infer_cached
    from trtlab.data.preprocess import normalize_batch
    from trtlab.evaluation.results import ResultsStore

    workspace = Path(args.workspace or tempfile.mkdtemp(prefix="trtlab-bench-"))
    model = export_demo_model(workspace=workspace)
    photos = demo_dataset()
    # Real photos, repeated to the requested count (decode once; the bench times inference, not decoding).
    reps = -(-args.images // len(photos))
    dataset = Dataset("bench-photos", (photos.paths * reps)[: args.images], np.tile(photos.labels, reps)[: args.images])
    cache = build_decode_cache(dataset, "tf-lite", workspace, progress=False)
    indices = np.arange(len(dataset))

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    batches = [normalize_batch(cache.crops[indices[i:i + args.batch]], cache.preprocess)
               for i in range(0, len(indices), args.batch)]
    session.run(None, {name: batches[0]})  # warm-up

    bare, ours, whole = [], [], []
    store = ResultsStore(workspace / "bench-results")
    runner = OrtRunner(model).activate()
    infer_cached(runner, cache, indices[: args.batch], args.batch, progress=False)  # warm-up
    for _ in range(args.repeats):
        # Alternate the measurements so drift in machine load hits all alike.
        start = time.perf_counter()
        for batch in batches:
            session.run(None, {name: batch})
        bare.append(len(indices) / (time.perf_counter() - start))
        start = time.perf_counter()
        infer_cached(runner, cache, indices, args.batch, progress=False)
        ours.append(len(indices) / (time.perf_counter() - start))
        start = time.perf_counter()
        evaluate(model, cache, "bench", store=store, batch_size=args.batch, progress=False, force=True)
        whole.append(len(indices) / (time.perf_counter() - start))
    runner.deactivate()
    bare_best, ours_best = max(bare), max(ours)
    ratio = ours_best / bare_best
    print(f"images={len(indices)} batch={args.batch} onnxruntime={ort.__version__} repeats={args.repeats} (best of)")
    print(f"bare onnxruntime session, pre-normalised batches : {bare_best:8.1f} images/s")
    print(f"trtlab runner from the decode cache (normalise+run): {ours_best:8.1f} images/s")
    print(f"trtlab evaluate() whole call (+session, top-5, store): {max(whole):8.1f} images/s  (information)")
    print(f"ratio trtlab/bare = {ratio:.3f}  (goal ≥ 0.90: {'met' if ratio >= 0.9 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
