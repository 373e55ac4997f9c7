"""The A/B a user waits for, end to end, and calibration against one forward pass — the parts of issue 19's bench
that go through trtlab's public workflow (bench/bench_backends.py `run` calls both; this file runs alone too).

- `ab_end_to_end`: FP32 + three INT8 recipes (minmax, entropy, percentile), calibrated on `--ab-calibration` images
  and evaluated on `--ab-images` images by `trtlab.workflows.compare.compare` on one backend, timed from the call to
  the table. The images are real photos only in the sense that they are the 26 demo photos flipped and shifted
  (bench_backends.replicated_crops) and written as PNG files — there is no ImageNet on the bench machine, so the
  accuracies mean nothing; the wall time and the agreement between variants are what this measures. Decoding them
  into trtlab's decode cache is timed apart (a user decodes once and then tries recipe after recipe).
- `calibration_vs_forward`: trtlab's entropy calibration statistics (`collect_statistics`, then the entropy search)
  on N images vs one FP32 forward pass over the same N images at the same batch, on one device: 'cpu' (ONNX
  Runtime, pinned to `cores` cores in a child process) or 'cuda' (the torch backend).

    python bench/bench_ab.py --device cuda [--ab-images 5000] [--ab-calibration 512] [--calibration-images 1000]
    python bench/bench_ab.py --device cpu --cores 2 --ab-images 0 --calibration-images 1000   # the 2-core bar
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RECIPES = ("minmax", "entropy", "percentile")


def photo_dataset(base: np.ndarray, labels: np.ndarray, count: int, folder: Path):
    """A Dataset of `count` PNG files: replicated crops of the demo photos (labels of their photo; -1 unlabelled)."""
    import cv2

    from bench_backends import replicated_crops
    from trtlab.data.dataset import Dataset

    folder.mkdir(parents=True, exist_ok=True)
    crops = replicated_crops(base, count)
    paths = []
    for index, crop in enumerate(crops):
        path = folder / f"photo{index:06d}.png"
        if not path.exists():
            cv2.imwrite(str(path), np.ascontiguousarray(crop[:, :, ::-1]), [cv2.IMWRITE_PNG_COMPRESSION, 1])
        paths.append(str(path))
    return Dataset("bench-ab-photos", paths, np.asarray([labels[k % len(base)] for k in range(count)], np.int64),
                   root=str(folder))


def ab_end_to_end(model, base, labels, preprocess, images: int, calibration: int, backend: str, batch: int,
                  work: Path, engines: bool = False) -> dict:
    """Decode (timed apart), then compare() FP32 + three INT8 recipes on `images` evaluation images."""
    from trtlab.core.progress import quiet
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.quantization.variants import Recipe
    from trtlab.evaluation.options import RunOptions
    from trtlab.workflows.compare import compare

    started = time.perf_counter()
    dataset = photo_dataset(base, labels, images + calibration, work / "photos")
    written = time.perf_counter() - started
    started = time.perf_counter()
    build_decode_cache(dataset, preprocess, work, progress=False)
    decoded = time.perf_counter() - started
    recipes = [Recipe(algorithm=name, calibration_images=calibration, calibration_batch=32) for name in RECIPES]
    started = time.perf_counter()
    with quiet():
        result = compare(model, dataset, recipes, preprocess, workspace=work,
                         run=RunOptions(backend=backend, batch_size=batch, progress=False, parallel=False,
                                        engines=engines))
    seconds = time.perf_counter() - started
    table = result.table
    columns = [c for c in ("top1", "agreement", "consistency", "backend") if c in table.columns]
    return {"images": images, "calibration_images": calibration, "variants": list(table.index), "backend": backend,
            "seconds": seconds, "decode_seconds": decoded, "write_seconds": written,
            "table": table[columns].to_string() if columns else table.to_string(), "ran_on": result.ran_on,
            "engines": None if result.engines is None else repr(result.engines)}


def print_ab(ab: dict) -> None:
    print(f"\nA/B end to end ({ab['backend']}): FP32 + INT8 {', '.join(RECIPES)}; calibration on "
          f"{ab['calibration_images']} images, evaluation on {ab['images']} images — the 26 demo photos flipped and "
          f"shifted, written as PNG (no ImageNet on this machine: the accuracies mean nothing, the time does)")
    print(f"  compare(): {ab['seconds']:.1f} s from the call to the table (decode cache reused; decoding "
          f"{ab['images'] + ab['calibration_images']} PNGs first took {ab['decode_seconds']:.1f} s)")
    print(f"  {ab.get('ran_on', '')}")
    print("  " + ab["table"].replace("\n", "\n  "))
    if ab.get("engines"):
        print("  " + ab["engines"].replace("\n", "\n  "))


# -- calibration vs one forward pass ------------------------------------------------------------------------------
def calibration_vs_forward(model, base, preprocess, images: int, batch: int, device: str, work: Path,
                           cores: int | None = None, repeats: int = 3) -> dict:
    """Seconds of entropy calibration statistics + search vs one FP32 forward pass, same images, same batch. On
    'cpu' each side runs in a child process pinned to `cores` cores (ONNX Runtime with as many threads). The two
    sides alternate `repeats` times (a shared machine's load drifts); the ratio is taken per pair."""
    from bench_backends import replicated_crops

    crops = replicated_crops(base, images)
    path = work / f"calibration-{images}.npy"
    np.save(path, crops)
    (work / "preprocess.json").write_text(json.dumps(preprocess))
    pairs = []
    for _ in range(max(1, repeats)):
        sides = {}
        for side_name in ("forward", "calibration"):
            command = [sys.executable, __file__, "_side", side_name, str(model), str(path),
                       str(work / "preprocess.json"), str(batch), device, str(cores or 0)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"{side_name} on {device} failed:\n{done.stderr[-3000:]}")
            sides[side_name] = json.loads(done.stdout.strip().splitlines()[-1])
        sides["ratio"] = sides["calibration"]["seconds"] / sides["forward"]["seconds"]
        pairs.append(sides)
    ratios = sorted(pair["ratio"] for pair in pairs)
    median = pairs[[pair["ratio"] for pair in pairs].index(ratios[len(ratios) // 2])]
    return {"device": device, "cores": cores, "images": images, "batch": batch, "pairs": pairs,
            "forward": median["forward"], "calibration": median["calibration"], "ratio": median["ratio"],
            "ratios": ratios}


def print_calibration(result: dict) -> None:
    where = f"ONNX Runtime CPU, {result['cores']} pinned cores" if result["device"] == "cpu" else \
        f"torch {result['device']}"
    c = result["calibration"]
    print(f"calibration N={result['images']} batch {result['batch']} on {where}, {len(result['pairs'])} alternating "
          f"pair(s); the median pair: {c['seconds']:.2f} s (statistics {c['collect_seconds']:.2f} s via {c['how']}, "
          f"entropy search {c['search_seconds']:.2f} s) vs one FP32 forward pass {result['forward']['seconds']:.2f} s "
          f"= {result['ratio']:.2f}× (bar ≤ 2.5× on 2 cores)")
    if len(result["pairs"]) > 1:
        print("  every pair: " + ", ".join(f"{p['calibration']['seconds']:.2f} s / {p['forward']['seconds']:.2f} s = "
                                           f"{p['ratio']:.2f}×" for p in result["pairs"]))


def side(name, model, crops_path, preprocess_path, batch, device, cores) -> dict:
    if device == "cpu" and int(cores):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: int(cores)])
    import onnx

    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import DECODED, DecodeCache
    from trtlab.data.preprocess import get_preprocess

    crops = np.load(crops_path, mmap_mode="r")
    spec = get_preprocess(json.loads(Path(preprocess_path).read_text()))
    cache = DecodeCache(Path(crops_path).parent, Dataset("bench", [f"crop{k}" for k in range(len(crops))]), spec,
                        crops, np.full(len(crops), DECODED, np.uint8))
    threads = int(cores) or None
    batch = int(batch)
    start = time.perf_counter()
    if name == "forward":
        _forward(model, cache, spec, batch, device, threads)
        return {"seconds": time.perf_counter() - start}
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.thresholds import compute_thresholds
    from trtlab.quantization.variants import stats_tensors

    stats = collect_statistics(model, stats_tensors(onnx.load(model)), cache, batch_size=batch, progress=False,
                               threads=threads, device=device)
    collected = time.perf_counter()
    compute_thresholds(stats, "entropy")
    end = time.perf_counter()
    return {"seconds": end - start, "collect_seconds": collected - start, "search_seconds": end - collected,
            "how": f"{stats.device}, {stats.counting}"}


def _forward(model, cache, spec, batch: int, device: str, threads) -> None:
    """One FP32 pass as trtlab's evaluation makes it: normalised batches into ONNX Runtime; uint8 crops into the
    torch backend (normalised on the device)."""
    from trtlab.data.batches import iter_batches

    indices = np.arange(len(cache.crops))
    if device == "cpu":
        from trtlab.backends.ort import OrtRunner

        with OrtRunner(model, providers=["CPUExecutionProvider"], intra_op_threads=threads,
                       graph_optimization="all") as runner:
            for chunk in iter_batches(cache, indices, batch):
                runner.infer(chunk.images)
        return
    from trtlab.backends.gpu.runner import TorchRunner

    with TorchRunner(model, device="cpu" if device == "torch-cpu" else device) as runner:
        for first in range(0, len(indices), batch):
            runner.infer_crops(np.asarray(cache.crops[first:first + batch]), spec)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_side":
        print(json.dumps(side(*argv[1:])))
        return 0
    from bench_backends import DEFAULT_ASSETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", default=str(DEFAULT_ASSETS))
    parser.add_argument("--device", default="cuda", help="cuda (the torch backend) or cpu (ONNX Runtime)")
    parser.add_argument("--cores", type=int, default=2, help="with --device cpu: pinned cores")
    parser.add_argument("--ab-images", type=int, default=5000, help="0: no A/B")
    parser.add_argument("--ab-calibration", type=int, default=512)
    parser.add_argument("--ab-batch", type=int, default=256)
    parser.add_argument("--calibration-images", type=int, default=1000, help="0: no calibration timing")
    parser.add_argument("--calibration-batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="alternating forward/calibration pairs")
    parser.add_argument("--engines", action="store_true", help="the A/B with its TensorRT engine column (timed in)")
    args = parser.parse_args(argv)
    assets = Path(args.assets)
    manifest = json.loads((assets / "manifest.json").read_text())
    base = np.load(assets / "crops.npy")
    labels = np.load(assets / "labels.npy") if (assets / "labels.npy").exists() else np.full(len(base), -1)
    work = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    model = str(assets / "fp32.onnx")
    if args.calibration_images:
        print_calibration(calibration_vs_forward(model, base, manifest["preprocess"], args.calibration_images,
                                                 args.calibration_batch, args.device, work, args.cores,
                                                 args.repeats))
    if args.ab_images:
        backend = "ort" if args.device == "cpu" else "torch"
        print_ab(ab_end_to_end(model, base, labels, manifest["preprocess"], args.ab_images, args.ab_calibration,
                               backend, args.ab_batch, work, engines=args.engines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
