"""Entropy calibration on EfficientNet-Lite0: trtlab vs ONNX Runtime's calibrator vs one FP32 forward pass, and
trtlab's thresholds vs ModelOpt's entropy calibrator (where nvidia-modelopt is installed).

Images: the 26 real demo photos (the ones `trtlab.data.demo.demo_dataset` finds in installed packages), decoded once by
trtlab's decode cache; image k of the N is variant r = k // 26 of photo k % 26: mirrored left-right when r is odd and
shifted by (4·(r//2 % 5), 4·(r//2 // 5 % 5)) pixels (edge pixels repeated), so up to 26 × 50 = 1300 distinct real-photo
crops. They are written once to a uint8 file that every side memory-maps, as trtlab's decode cache does.

Each side runs in its own subprocess and reports its own peak RSS (ru_maxrss), seconds from session creation on:
- onnxruntime: `onnxruntime.quantization.calibrate.create_calibrator(..., CalibrationMethod.Entropy)` (its
  defaults), `collect_data` + `compute_data` — it keeps every intermediate output of every image until the end;
- trtlab: `collect_statistics` + `compute_thresholds(..., "entropy")` (NVIDIA's reference; search timed apart);
- forward: one FP32 ONNX Runtime pass per image over the same crops (normalisation included, as in trtlab);
- modelopt: ModelOpt's `HistogramCalibrator(num_bins=2048)` fed the same tensors of the same ONNX Runtime
  sub-batches, `compute_amax("entropy")` per tensor (also ModelOpt's `_compute_amax_entropy` on trtlab's own
  histograms: the search alone). Not timed: it is the reference, not a competitor.
Runs: N=128 (--images) at batch 8 for the three-way comparison, trtlab again at batch 32 (peak RSS), and trtlab vs
forward at N=1000 (--images-large). `--threads` pins ONNX Runtime's intra-op threads on every side (with
`taskset -c 0,1` and --threads 2 this mimics the 2-core CI machine).

    python bench/bench_calibration.py [--images 128] [--images-large 1000] [--batch 8] [--threads 2]
    taskset -c 0,1 python bench/bench_calibration.py --only-large --threads 2 --repeats 3   # issue 19's bar
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS_PER_PHOTO = 50


def _augment(crop: np.ndarray, variant: int) -> np.ndarray:
    step = variant // 2
    dy, dx = 4 * (step % 5), 4 * (step // 5 % 5)
    out = crop[:, ::-1] if variant % 2 else crop
    if dy or dx:
        h, w = out.shape[:2]
        out = np.pad(out, ((dy, 0), (dx, 0), (0, 0)), mode="edge")[:h, :w]
    return out


def demo_photos(workspace: Path):
    """(uint8 crops, paths) of the decodable demo photos: decoded by trtlab's decode cache, kept in photos.npz so a
    machine without the photo packages (or without the decoders) can run the bench from a copied workspace."""
    saved = workspace / "photos.npz"
    if saved.exists():
        with np.load(saved) as data:
            return data["crops"], [str(p) for p in data["paths"]]
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.demo import demo_dataset

    photos = demo_dataset()
    cache = build_decode_cache(photos, "tf-lite", workspace, progress=False)
    valid = cache.valid_indices
    crops, paths = np.asarray(cache.crops[valid]), [photos.paths[i] for i in valid]
    np.savez(saved, crops=crops, paths=np.array(paths))
    return crops, paths


def prepare_images(workspace: Path, images: int) -> Path:
    """Write `images` crops of the demo photos (module docstring) to crops-N.u8."""
    photos, paths = demo_photos(workspace)
    if images > len(photos) * VARIANTS_PER_PHOTO:
        raise SystemExit(f"at most {len(photos) * VARIANTS_PER_PHOTO} distinct crops from {len(photos)} photos")
    path = workspace / f"crops-{images}.u8"
    crops = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(images,) + photos.shape[1:])
    for k in range(images):
        crops[k] = _augment(photos[k % len(photos)], k // len(photos))
    crops.flush()
    json.dump({"photos": paths, "preprocess": "tf-lite"}, open(workspace / f"crops-{images}.json", "w"))
    return path


def load_images(path: Path):
    """A DecodeCache over the prepared crops (memory-mapped, like a real one)."""
    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import DECODED, DecodeCache
    from trtlab.data.preprocess import get_preprocess

    crops = np.load(path, mmap_mode="r")
    photos = json.load(open(str(path)[:-3] + ".json"))["photos"]
    names = [f"{photos[k % len(photos)]}#variant{k // len(photos)}" for k in range(len(crops))]
    return DecodeCache(path.parent, Dataset("calib-bench", names), get_preprocess("tf-lite"), crops,
                       np.full(len(crops), DECODED, np.uint8))


def run_side(side: str, model: str, images_path: str, batch: int, threads: int, out: str) -> dict:
    import onnx

    cache = load_images(Path(images_path))
    images = len(cache.crops)
    result = {"side": side, "images": images, "batch": batch}
    start = time.perf_counter()
    if side == "trtlab":
        from trtlab.quantization.statistics import collect_statistics
        from trtlab.quantization.thresholds import compute_thresholds
        from trtlab.quantization.variants import stats_tensors

        messages = []
        handler = logging.Handler()
        handler.emit = lambda record: messages.append(record.getMessage())
        for name in ("trtlab.quantization.statistics", "trtlab.quantization.thresholds"):
            logging.getLogger(name).addHandler(handler)
            logging.getLogger(name).setLevel(logging.INFO)
        tensors = stats_tensors(onnx.load(model))
        stats = collect_statistics(model, tensors, cache, batch_size=batch, progress=False, threads=threads)
        collected = time.perf_counter()
        thresholds = compute_thresholds(stats, "entropy")
        result["search_seconds"] = time.perf_counter() - collected
        result["collect_seconds"] = collected - start
        result["tensors"] = len(thresholds)
        result["log"] = messages
        result["max_bins"] = max(h.bins for h in stats.tensors.values())
        if out:
            stats.save(out + ".npz")
            json.dump(thresholds, open(out + ".json", "w"))
    elif side == "onnxruntime":
        import onnxruntime as ort
        from onnxruntime.quantization.calibrate import CalibrationDataReader, CalibrationMethod, create_calibrator

        from trtlab.data.preprocess import normalize_batch

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.batches = (normalize_batch(c, cache.preprocess) for _, c in cache.iter_batches(None, batch))

            def get_next(self):
                batch_ = next(self.batches, None)
                return None if batch_ is None else {"input": batch_}

        calibrator = create_calibrator(model, None, augmented_model_path=str(Path(out).parent / "augmented.onnx"),
                                       calibrate_method=CalibrationMethod.Entropy)
        if threads:  # its own session, as create_inference_session makes it, with the thread count pinned
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            options.intra_op_num_threads = threads
            calibrator.infer_session = ort.InferenceSession(calibrator.augmented_model_path, options,
                                                            providers=calibrator.execution_providers)
        calibrator.collect_data(Reader())
        result["tensors"] = len(calibrator.compute_data().data)
    elif side == "forward":
        import onnxruntime as ort

        from trtlab.data.preprocess import normalize_batch

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        for _, crops in cache.iter_batches(None, batch):
            session.run(None, {name: normalize_batch(crops, cache.preprocess)})
    elif side == "modelopt":
        result.update(modelopt_thresholds(model, cache, batch, threads, out))
    result["seconds"] = time.perf_counter() - start
    result["per_image"] = result["seconds"] / images
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _modelopt_amax(job):
    from modelopt.torch.quantization.calib.histogram import _compute_amax_entropy

    name, hist, edges = job
    return name, float(_compute_amax_entropy(hist, edges, 8, False))


def modelopt_thresholds(model: str, cache, batch: int, threads: int, out: str) -> dict:
    """ModelOpt's entropy amax per tensor: its own histograms of the same activations (same sub-batches as trtlab),
    and its search on trtlab's histograms. The searches run in a process pool (ModelOpt's loop takes seconds each)."""
    import warnings
    from concurrent.futures import ProcessPoolExecutor

    import onnx
    import onnxruntime as ort
    import torch
    from modelopt.torch.quantization.calib.histogram import HistogramCalibrator

    from trtlab.quantization.statistics import (MEMORY_BUDGET_MB, CalibrationStats, _exposed_bytes_per_image,
                                                sub_batch_size)
    from trtlab.data.preprocess import normalize_batch

    warnings.filterwarnings("ignore")
    trtlab_stats = CalibrationStats.load(out + "-trtlab.npz")
    tensors = list(trtlab_stats.tensors)
    graph = onnx.load(model)
    inputs = {i.name for i in graph.graph.input}
    requested = [t for t in tensors if t not in inputs]
    sub = sub_batch_size(batch, _exposed_bytes_per_image(graph, requested), MEMORY_BUDGET_MB * 2**20)
    for name in requested:
        graph.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(graph.SerializeToString(), options, providers=["CPUExecutionProvider"])
    calibrators = {t: HistogramCalibrator(num_bits=8, axis=None, unsigned=False, num_bins=2048) for t in tensors}
    with torch.no_grad():
        for _, crops in cache.iter_batches(None, batch):
            for start in range(0, len(crops), sub):
                x = normalize_batch(crops[start:start + sub], cache.preprocess)
                outputs = dict(zip(requested, session.run(requested, {"input": x})))
                for t in tensors:
                    calibrators[t].collect(torch.from_numpy(outputs[t] if t in outputs else x))
    # what HistogramCalibrator.compute_amax hands _compute_amax_entropy (int counts, numpy edges)
    own = [(t, c._calib_hist.int().cpu().numpy(), c._calib_bin_edges.cpu().numpy()) for t, c in calibrators.items()]
    on_trtlab = [(t, h.counts.copy(), np.arange(h.bins + 1) * h.bin_width) for t, h in trtlab_stats.tensors.items()]
    import multiprocessing

    with ProcessPoolExecutor(max(1, len(os.sched_getaffinity(0))), mp_context=multiprocessing.get_context("spawn")) as pool:
        amax_own = dict(pool.map(_modelopt_amax, own))
        amax_search = dict(pool.map(_modelopt_amax, on_trtlab))
    return {"modelopt_amax": amax_own, "modelopt_search_on_trtlab_hist": amax_search, "tensors": len(tensors),
            "sub_batch": sub, "modelopt_bins": {t: len(c._calib_hist) for t, c in calibrators.items()}}


def _side(side, model, images_path, batch, threads, out) -> dict:
    command = [sys.executable, __file__, "--side", side, "--model", model, "--images-path", str(images_path),
               "--batch", str(batch), "--threads", str(threads), "--out", out]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if done.returncode:
        raise SystemExit(f"{side} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _relative(a: dict, b: dict) -> np.ndarray:
    return np.array([abs(a[t] - b[t]) / max(abs(b[t]), 1e-12) for t in b])


def timed(args, model, small, large, out, ort_version) -> None:
    print(f"EfficientNet-Lite0, onnxruntime {ort_version}, {os.cpu_count()} CPUs visible, "
          f"affinity {sorted(os.sched_getaffinity(0))}, ONNX Runtime threads {args.threads or 'default'}")
    print(f"images: {args.images} and {args.images_large} crops of the 26 real demo photos (mirrored/shifted "
          f"variants, see the module docstring)")
    if args.only_large:
        calibration_vs_forward(args, model, large)
        return
    r = {}
    r["onnxruntime"] = _side("onnxruntime", model, small, args.batch, args.threads, out + "-ort")
    r["trtlab"] = _side("trtlab", model, small, args.batch, args.threads, out + "-trtlab")
    r["trtlab32"] = _side("trtlab", model, small, 32, args.threads, out + "-trtlab32")
    r["trtlab_large"] = _side("trtlab", model, large, args.batch, args.threads, "")
    r["forward_large"] = _side("forward", model, large, args.batch, args.threads, "")
    for key, label in (("onnxruntime", "onnxruntime entropy"), ("trtlab", "trtlab entropy"),
                       ("trtlab32", "trtlab entropy"), ("trtlab_large", "trtlab entropy"),
                       ("forward_large", "FP32 forward")):
        x = r[key]
        extra = (f"  (collect {x['collect_seconds']:.1f} s, entropy search {x['search_seconds']:.3f} s, "
                 f"{x['tensors']} tensors, largest histogram {x['max_bins']} bins)") if "search_seconds" in x else ""
        print(f"{label:20s} N={x['images']:5d} batch {x['batch']:2d}: {x['seconds']:7.1f} s "
              f"({1000 * x['per_image']:6.1f} ms/image)  peak RSS {x['peak_rss_mb']:6.0f} MB{extra}")
    print("trtlab log (batch 32):", *r["trtlab32"]["log"], sep="\n  ")
    a, t = r["onnxruntime"], r["trtlab"]
    print(f"N={args.images}: onnxruntime/trtlab time {a['seconds'] / t['seconds']:.2f}x (bar >= 5x), peak RSS "
          f"{a['peak_rss_mb'] / t['peak_rss_mb']:.2f}x (bar >= 5x)")
    print_calibration_ratio(args.images_large, r["trtlab_large"], r["forward_large"])
    print(f"peak RSS trtlab at calibration batch 8: {t['peak_rss_mb']:.0f} MB, at batch 32: "
          f"{r['trtlab32']['peak_rss_mb']:.0f} MB (bar <= 1536 MB); entropy search {t['search_seconds']:.3f} s "
          f"for {t['tensors']} tensors (bar < 1 s)")


def print_calibration_ratio(images: int, calibration: dict, forward: dict) -> None:
    print(f"N={images}: trtlab calibration / FP32 forward pass {calibration['seconds'] / forward['seconds']:.2f}x "
          f"({calibration['seconds']:.1f} s / {forward['seconds']:.1f} s; bar <= 2.5x on 2 cores)")


def calibration_vs_forward(args, model, large) -> None:
    """Only the N=--images-large comparison, each side `--repeats` times alternately (the median counts: a shared
    machine's neighbours slow single runs)."""
    runs = {"trtlab": [], "forward": []}
    for _ in range(args.repeats):
        for side in runs:
            runs[side].append(_side(side, model, large, args.batch, args.threads, ""))
    median = {side: sorted(found, key=lambda x: x["seconds"])[len(found) // 2] for side, found in runs.items()}
    for side, found in runs.items():
        print(f"{side:8s} N={args.images_large}: " + ", ".join(f"{x['seconds']:.1f} s" for x in found))
    print_calibration_ratio(args.images_large, median["trtlab"], median["forward"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--images-large", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: its default)")
    parser.add_argument("--skip-modelopt", action="store_true")
    parser.add_argument("--only-large", action="store_true",
                        help="only trtlab calibration vs one FP32 forward pass at N=--images-large")
    parser.add_argument("--repeats", type=int, default=1, help="with --only-large: runs of each side (median)")
    parser.add_argument("--only-modelopt", action="store_true",
                        help="only the ModelOpt comparison, on the trtlab statistics of an earlier run in --workspace")
    parser.add_argument("--workspace")
    parser.add_argument("--side", choices=["trtlab", "onnxruntime", "forward", "modelopt"])
    parser.add_argument("--model")
    parser.add_argument("--images-path")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.side:  # child process
        print(json.dumps(run_side(args.side, args.model, args.images_path, args.batch, args.threads, args.out)))
        return 0
    import onnxruntime

    workspace = Path(args.workspace or tempfile.mkdtemp(prefix="trtlab-calib-bench-"))
    workspace.mkdir(parents=True, exist_ok=True)
    model_path = workspace / "models" / "efficientnet-lite0.onnx"
    if not model_path.exists():
        from trtlab.data.demo import export_demo_model

        model_path = export_demo_model(workspace=workspace)
    model = str(model_path)
    small = workspace / f"crops-{args.images}.u8"
    large = workspace / f"crops-{args.images_large}.u8"
    for path, n in ((small, args.images), (large, args.images_large))[1 if args.only_large else 0:]:
        if not path.exists():
            prepare_images(workspace, n)
    out = str(workspace / "result")
    if not args.only_modelopt:
        timed(args, model, small, large, out, onnxruntime.__version__)
    if args.skip_modelopt or args.only_large:
        print("ModelOpt comparison skipped (--skip-modelopt)")
        return 0
    try:
        import modelopt.torch.quantization.calib.histogram  # noqa: F401
    except Exception as err:  # noqa: BLE001 - any import failure means "not available here"
        print(f"ModelOpt comparison not run: nvidia-modelopt does not import here ({type(err).__name__}: {err})")
        return 0
    import modelopt

    m = _side("modelopt", model, small, args.batch, args.threads, out)
    ours = json.load(open(out + "-trtlab.json"))
    own, search = m["modelopt_amax"], m["modelopt_search_on_trtlab_hist"]
    for label, theirs in (("ModelOpt HistogramCalibrator on the same activations", own),
                          ("ModelOpt _compute_amax_entropy on trtlab's histograms", search)):
        rel = _relative(ours, theirs)
        worst = max(theirs, key=lambda k: abs(ours[k] - theirs[k]) / max(abs(theirs[k]), 1e-12))
        print(f"{label} (nvidia-modelopt {modelopt.__version__}, {m['tensors']} tensors, N={args.images}, "
              f"sub-batches of {m['sub_batch']}): relative threshold difference median {np.median(rel):.2e}, "
              f"worst {rel.max():.2e} ({worst}: trtlab {ours[worst]:.6g}, ModelOpt {theirs[worst]:.6g}); "
              f"identical to float32: {int((rel <= 1e-6).sum())}/{len(rel)}")
    trtlab_bins = max(len(c) for c in np.load(out + "-trtlab.npz").values() if c.ndim == 1 and len(c) > 3)
    print(f"histogram sizes: ModelOpt max {max(m['modelopt_bins'].values())} bins, trtlab max {trtlab_bins} bins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
