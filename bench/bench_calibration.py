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
Runs: N=128 (--images) at batch 8 for the three-way comparison (trtlab with numba's counter and with numpy's),
trtlab again at batch 32 (peak RSS), and trtlab vs forward at N=1000 (--images-large), `--repeats` times alternately
(median). trtlab calibrates on the CPU (device='cpu': ONNX Runtime), also on a GPU host. `--cores 2` (the default)
pins the bench and every side to the first 2 cores it may use (os.sched_setaffinity, as `taskset -c` does) and
ONNX Runtime's intra-op threads to that count on every side: the 2-core CI machine and a Kaggle CPU. numba's loop
is compiled (and cached) once before the timed sides, as a user's second calibration finds it.
The first lines name the machine (CPU model from /proc/cpuinfo), the versions and what ran; the last lines the
bars of issue 28 with PASS/FAIL; --json writes every figure.

    python bench/bench_calibration.py [--images 128] [--images-large 1000] [--batch 8] [--cores 2] [--repeats 2]
    python bench/bench_calibration.py --only-large --repeats 3   # the calibration / forward bar alone
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


def machine() -> str:
    """The CPU model (from /proc/cpuinfo), the cores visible and the cores this process may use."""
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs visible, pinned to {sorted(os.sched_getaffinity(0))}"


def pin_cores(cores: int) -> None:
    """Keep this process (and the sides it starts) on the first `cores` CPUs it may use."""
    if cores:
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, allowed[:cores])


def run_side(side: str, model: str, images_path: str, batch: int, threads: int, out: str, counter: str = "",
             budget: float = 0) -> dict:
    import onnx

    cache = load_images(Path(images_path))
    images = len(cache.crops)
    result = {"side": side, "images": images, "batch": batch}
    start = time.perf_counter()
    if side == "trtlab":
        from trtlab.quantization.statistics import MEMORY_BUDGET_MB, collect_statistics
        from trtlab.quantization.thresholds import compute_thresholds
        from trtlab.quantization.variants import stats_tensors

        messages = []
        handler = logging.Handler()
        handler.emit = lambda record: messages.append(record.getMessage())
        for name in ("trtlab.quantization.statistics", "trtlab.quantization.thresholds"):
            logging.getLogger(name).addHandler(handler)
            logging.getLogger(name).setLevel(logging.INFO)
        tensors = stats_tensors(onnx.load(model))
        stats = collect_statistics(model, tensors, cache, batch_size=batch, progress=False, threads=threads,
                                   device="cpu", counting=counter or None, memory_budget_mb=budget or None)
        result["counting"] = stats.counting
        result["budget_mb"] = budget or MEMORY_BUDGET_MB
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


def _side(side, model, images_path, batch, threads, out, counter="", budget=0) -> dict:
    command = [sys.executable, __file__, "--side", side, "--model", model, "--images-path", str(images_path),
               "--batch", str(batch), "--threads", str(threads), "--out", out, "--counter", counter,
               "--budget", str(budget)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if done.returncode:
        raise SystemExit(f"{side} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _relative(a: dict, b: dict) -> np.ndarray:
    return np.array([abs(a[t] - b[t]) / max(abs(b[t]), 1e-12) for t in b])


BARS = {"calibration_vs_forward": 2.0, "peak_rss_mb": 850.0, "ort_time": 5.0, "ort_memory": 5.0}


def header(args, ort_version: str) -> str:
    import platform

    try:
        import numba
        counter = f"numba {numba.__version__}"
    except ImportError:
        counter = "numba not installed: numpy counts"
    return (f"machine: {machine()}, Python {platform.python_version()}\n"
            f"EfficientNet-Lite0 (trtlab's demo export), onnxruntime {ort_version}, CPU histogram counter: {counter}; "
            f"ONNX Runtime intra-op threads {args.threads or 'default'} on every side; trtlab on the CPU "
            f"(ONNX Runtime + counting threads)\n"
            f"images: {args.images} and {args.images_large} crops of the 26 real demo photos (mirrored/shifted "
            f"variants, see the module docstring), calibration batch {args.batch}")


def _line(label: str, x: dict) -> str:
    extra = (f"  (collect {x['collect_seconds']:.1f} s, entropy search {x['search_seconds']:.3f} s, "
             f"{x['tensors']} tensors, largest histogram {x['max_bins']} bins; {x['counting']})"
             if "search_seconds" in x else "")
    return (f"{label:28s} N={x['images']:5d} batch {x['batch']:2d}: {x['seconds']:7.1f} s "
            f"({1000 * x['per_image']:6.1f} ms/image)  peak RSS {x['peak_rss_mb']:6.0f} MB{extra}")


def _median(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda x: x["seconds"])[len(runs) // 2]


def large_runs(args, model, large) -> dict:
    """The FP32 forward pass and trtlab's calibration (at each --budgets) at N=--images-large, `--repeats` times
    alternately."""
    sides = {"forward": ("forward", 0)} | {f"trtlab@{b}": ("trtlab", b) for b in args.budgets}
    runs = {name: [] for name in sides}
    for _ in range(max(1, args.repeats)):
        for name, (side, budget) in sides.items():
            runs[name].append(_side(side, model, large, args.batch, args.threads, "", budget=budget))
    for side, found in runs.items():
        print(f"{side:12s} N={args.images_large}: " + ", ".join(f"{x['seconds']:.1f} s" for x in found)
              + (" (median counts)" if len(found) > 1 else ""))
    first = f"trtlab@{args.budgets[0]}"
    pairs = [t["seconds"] / f["seconds"] for f, t in zip(runs["forward"], runs[first])]
    if len(pairs) > 1:  # each trtlab run over the forward pass run just before it: the spread a shared CPU adds
        print(f"pairs (trtlab / the forward run before it): {', '.join(f'{x:.2f}x' for x in pairs)}; "
              f"median {np.median(pairs):.2f}x, {sum(x <= BARS['calibration_vs_forward'] for x in pairs)} of "
              f"{len(pairs)} within the bar")
    medians = {side: _median(found) for side, found in runs.items()}
    medians[first]["pair_ratios"] = pairs
    return medians


def timed(args, model, small, large, out) -> dict:
    r = {}
    if not args.only_large:
        r["onnxruntime"] = _side("onnxruntime", model, small, args.batch, args.threads, out + "-ort")
        r["trtlab"] = _side("trtlab", model, small, args.batch, args.threads, out + "-trtlab", budget=args.budgets[0])
        for budget in args.budgets[1:]:
            r[f"trtlab@{budget}"] = _side("trtlab", model, small, args.batch, args.threads, "", budget=budget)
        r["trtlab_numpy"] = _side("trtlab", model, small, args.batch, args.threads, "", "numpy", args.budgets[0])
        r["trtlab32"] = _side("trtlab", model, small, 32, args.threads, out + "-trtlab32", budget=args.budgets[0])
    medians = large_runs(args, model, large)
    r["forward_large"] = medians.pop("forward")
    r["trtlab_large"] = medians.pop(f"trtlab@{args.budgets[0]}")
    r.update({f"{name}_large": found for name, found in medians.items()})
    for key, x in r.items():
        label = {"onnxruntime": "onnxruntime entropy", "forward_large": "FP32 forward (ONNX Runtime)"}.get(key)
        if label is None:
            label = f"trtlab entropy{' (numpy count)' if key == 'trtlab_numpy' else ''} @{x['budget_mb']:.0f} MB"
        print(_line(label, x))
    if "trtlab32" in r:
        print("trtlab log (batch 32):", *r["trtlab32"]["log"], sep="\n  ")
    return r


def bars(args, r: dict) -> dict:
    """Issue 28's bars from this run's figures: (value, bar, passed) by name."""
    found = {}
    calibration, forward = r["trtlab_large"], r["forward_large"]
    ratio = calibration["seconds"] / forward["seconds"]
    found["calibration_vs_forward"] = (ratio, BARS["calibration_vs_forward"], ratio <= BARS["calibration_vs_forward"])
    print(f"N={args.images_large}: trtlab calibration / one FP32 forward pass {ratio:.2f}x ({calibration['seconds']:.1f} s"
          f" / {forward['seconds']:.1f} s; bar <= {BARS['calibration_vs_forward']}x): "
          f"{'PASS' if found['calibration_vs_forward'][2] else 'FAIL'}")
    for key, other in r.items():
        if key.startswith("trtlab@") and key.endswith("_large"):
            print(f"  at a memory budget of {other['budget_mb']:.0f} MB: {other['seconds'] / forward['seconds']:.2f}x")
    if "trtlab" in r:
        a, t = r["onnxruntime"], r["trtlab"]
        rss = t["peak_rss_mb"]
        found["peak_rss_mb"] = (rss, BARS["peak_rss_mb"], rss <= BARS["peak_rss_mb"])
        found["ort_time"] = (a["seconds"] / t["seconds"], BARS["ort_time"], a["seconds"] / t["seconds"] >= 5)
        found["ort_memory"] = (a["peak_rss_mb"] / rss, BARS["ort_memory"], a["peak_rss_mb"] / rss >= 5)
        print(f"N={args.images} batch {args.batch}: trtlab peak RSS {rss:.0f} MB (bar <= {BARS['peak_rss_mb']:.0f} MB): "
              f"{'PASS' if found['peak_rss_mb'][2] else 'FAIL'}")
        for key, other in r.items():
            if key.startswith("trtlab@") and not key.endswith("_large"):
                print(f"  at a memory budget of {other['budget_mb']:.0f} MB: {other['peak_rss_mb']:.0f} MB")
        print(f"N={args.images}: ONNX Runtime's entropy calibrator / trtlab: time {found['ort_time'][0]:.1f}x "
              f"(bar >= 5x): {'PASS' if found['ort_time'][2] else 'FAIL'}; peak RSS {found['ort_memory'][0]:.1f}x "
              f"(bar >= 5x): {'PASS' if found['ort_memory'][2] else 'FAIL'}")
        print(f"counting: numba vs numpy at N={args.images}: {r['trtlab_numpy']['seconds']:.1f} s with numpy, "
              f"{t['seconds']:.1f} s with numba; entropy search {t['search_seconds']:.3f} s for {t['tensors']} tensors")
    return found


def warm_numba() -> None:
    """Compile (or load from numba's cache) the counter once, outside the timed sides."""
    try:
        from trtlab.quantization.histogram import cpu_counter
    except ImportError:
        return
    counter = cpu_counter()
    if counter is not None:
        counter.count(np.ones(8, np.float32), 1.0, 16)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--images-large", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--cores", type=int, default=2, help="CPUs to pin to (0: no pinning)")
    parser.add_argument("--threads", type=int, default=None,
                        help="ONNX Runtime intra-op threads (default: --cores; 0: ONNX Runtime's default)")
    parser.add_argument("--counter", default="", help="(a side) trtlab's histogram counter: numba, numpy or ''")
    parser.add_argument("--budget", type=float, default=0, help="(a side) trtlab's memory budget in MB (0: default)")
    parser.add_argument("--budgets", default="", help="trtlab's memory budgets to run, comma-separated MB; the first "
                        "gives the bars (default: trtlab's own, MEMORY_BUDGET_MB)")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--skip-modelopt", action="store_true")
    parser.add_argument("--only-large", action="store_true",
                        help="only trtlab calibration vs one FP32 forward pass at N=--images-large")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side at N=--images-large (median)")
    parser.add_argument("--only-modelopt", action="store_true",
                        help="only the ModelOpt comparison, on the trtlab statistics of an earlier run in --workspace")
    parser.add_argument("--workspace")
    parser.add_argument("--side", choices=["trtlab", "onnxruntime", "forward", "modelopt"])
    parser.add_argument("--model")
    parser.add_argument("--images-path")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.side:  # child process
        print(json.dumps(run_side(args.side, args.model, args.images_path, args.batch, args.threads, args.out,
                                  args.counter, args.budget)))
        return 0
    import onnxruntime

    from trtlab.quantization.statistics import MEMORY_BUDGET_MB

    pin_cores(args.cores)
    if args.threads is None:
        args.threads = args.cores
    args.budgets = [float(b) for b in args.budgets.split(",") if b] or [float(MEMORY_BUDGET_MB)]
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
        print(header(args, onnxruntime.__version__), flush=True)
        warm_numba()
        figures = timed(args, model, small, large, out)
        passed = bars(args, figures)
        if args.json:
            json.dump({"machine": machine(), "header": header(args, onnxruntime.__version__), "runs": figures,
                       "bars": passed}, open(args.json, "w"), indent=1)
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
