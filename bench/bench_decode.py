"""Decode img/s per core into the decode cache (issue 38 item 7): OpenCV (decoder 'opencv', the default) at 1, 2 and
4 cores, each count pinned (core.cores.pinned_cores: the measuring thread and the decode threads it starts run on
the first N usable cores, one decode thread per core), and nvJPEG (decoder 'nvjpeg': torchvision.io.decode_jpeg on
the GPU, its files read by N threads) where torchvision and a CUDA GPU are, with its pixel difference to OpenCV.

    python bench/bench_decode.py [--images 2000] [--cores 1,2,4] [--repeat 2] [--photos DIR] [--json FILE]
    python bench/bench_decode.py --smoke        # a small CPU run (the tests run it)

The files: --photos DIR uses the JPEGs in DIR (e.g. ImageNet val on Kaggle); otherwise bench/ab_stages.photo_files
writes them as bench_ab.py does: the 26 demo photos' 224×224 crops replicated with flips and shifts
(bench_backends.replicated_crops), upscaled to 500×375 (ImageNet's typical size) and written as JPEG quality 90 —
ImageNet-sized, not ImageNet's content (smoother: they decode somewhat faster than real photos). The files are
read once before timing (a warm page cache). img/s is the decode cache's own figure: reading, checking, decoding,
resizing, cropping and writing the rows (the files' content hashes, computed before, are not in it). The anchor is
a plain single-threaded decode_image loop on 1 pinned core in the same run, so the numbers compare across machines.
Every line says what ran: CPU, device, torch/torchvision/OpenCV versions, files, sizes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def demo_jpegs(count: int, folder: Path) -> list[str]:
    """`count` 500×375 JPEG files made from the demo photos' crops (ab_stages.photo_files)."""
    from ab_stages import photo_files
    from trtlab.core.cores import usable_cores
    from trtlab.core.progress import progress_iter
    from trtlab.data.demo import demo_dataset
    from trtlab.data.preprocess import decode_image, get_preprocess

    spec = get_preprocess("tf-lite")
    paths = demo_dataset().paths
    base = np.stack([decode_image(p, spec) for p in progress_iter(paths, desc="demo crops", unit="img")])
    dataset, _ = photo_files(base, np.full(len(base), -1), count, folder, usable_cores())
    return list(dataset.paths)


def folder_jpegs(folder: str, count: int) -> list[str]:
    found = sorted(str(p) for p in Path(folder).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    if not found:
        raise SystemExit(f"no .jpg/.jpeg files under {folder}")
    return found[:count]


def describe_files(paths: list[str]) -> dict:
    from trtlab.data.preprocess import claimed_size

    sizes = [claimed_size(Path(p).read_bytes()) for p in paths]  # also warms the page cache
    known = [s for s in sizes if s]
    shapes = {}
    for width, height in known:
        shapes[f"{width}×{height}"] = shapes.get(f"{width}×{height}", 0) + 1
    common = sorted(shapes.items(), key=lambda kv: -kv[1])[:3]
    return {"files": len(paths), "mean_kb": sum(Path(p).stat().st_size for p in paths) / len(paths) / 1000,
            "mean_pixels": float(np.mean([w * h for w, h in known])) if known else 0.0,
            "common_sizes": ", ".join(f"{k} ({v})" for k, v in common)}


def machine() -> dict:
    import cv2

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else \
        platform.processor()
    facts = {"cpu": cpu, "python": platform.python_version(), "opencv": cv2.__version__, "numpy": np.__version__}
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "none visible to torch"
    except ImportError:
        facts["torch"], facts["gpu"] = "not installed", "unknown (no torch)"
    try:
        import torchvision

        facts["torchvision"] = torchvision.__version__
    except Exception as exc:  # noqa: BLE001 — not installed, or built for another torch
        facts["torchvision"] = f"does not import ({type(exc).__name__})"
    return facts


def anchor(paths: list[str], spec, repeat: int) -> float:
    """img/s of a plain decode_image loop on 1 pinned core."""
    import cv2

    from trtlab.core.cores import pinned_cores
    from trtlab.data.preprocess import decode_image

    cv2.setNumThreads(1)
    best = 0.0
    with pinned_cores(1):
        for _ in range(repeat):
            started = time.perf_counter()
            for path in paths:
                decode_image(path, spec)
            best = max(best, len(paths) / (time.perf_counter() - started))
    return best


def decode_rate(paths: list[str], spec, cores: int, repeat: int, work: Path, pool: str) -> dict:
    """Best img/s of `repeat` fresh decode caches on `cores` pinned cores (one decode thread per core)."""
    from trtlab.core.cores import pinned_cores
    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import build_decode_cache

    best, fallbacks = 0.0, {}
    for run in range(repeat):
        dataset = Dataset("bench-decode", paths)
        dataset.content_hashes(False)  # hashed before: not in the figure
        workspace = work / f"ws-{spec.decoder}-{cores}-{run}"
        with pinned_cores(cores):
            cache = build_decode_cache(dataset, spec, workspace, workers=cores, pool=pool, progress=False)
        assert cache.decoded_now == len(paths), cache.failure_list()[:3]
        best = max(best, cache.images_per_second or 0.0)
        fallbacks = dict(cache.decoder.fallbacks)
        shutil.rmtree(workspace)
    return {"cores": cores, "img_s": best, "img_s_per_core": best / cores, "decoded_by_opencv": fallbacks}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--cores", default="1,2,4", help="comma-separated core counts, each pinned (default 1,2,4)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per configuration; the best is reported")
    parser.add_argument("--pool", default="threads", choices=("threads", "processes"), help="OpenCV's workers")
    parser.add_argument("--photos", default=None, help="folder of JPEGs to use instead of the demo-made ones")
    parser.add_argument("--difference-files", type=int, default=500, help="files the pixel difference is taken on")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--smoke", action="store_true", help="a small CPU run: 40 files, 1 and 2 cores, 1 repeat")
    parser.add_argument("--stand-in", action="store_true",
                        help="tests only: run the nvjpeg path with OpenCV standing in for nvJPEG's decode step on "
                             "the CPU (labelled so; not an nvJPEG figure)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.images, args.cores, args.repeat, args.difference_files = 40, "1,2", 1, 8

    import dataclasses

    from trtlab.core.cores import usable_cores
    from trtlab.data.decode_nvjpeg import NvjpegUnavailable, decode_difference, decode_step_stand_in, require_nvjpeg
    from trtlab.data.preprocess import get_preprocess

    usable = usable_cores()
    wanted = sorted({int(c) for c in args.cores.split(",")})
    counts = [c for c in wanted if c <= usable]
    spec = dataclasses.replace(get_preprocess("tf-lite"), decoder="opencv")
    work = Path(tempfile.mkdtemp(prefix="trtlab-bench-decode-"))
    result: dict = {"machine": machine(), "usable_cores": usable}
    try:
        paths = folder_jpegs(args.photos, args.images) if args.photos else demo_jpegs(args.images, work / "images")
        files = result["files"] = {**describe_files(paths), "source": args.photos or
                                   "demo photos' crops, flipped/shifted, upscaled to 500×375, JPEG quality 90"}
        facts = result["machine"]
        print(f"machine: {facts['cpu']}, {usable} usable core(s); Python {facts['python']}, OpenCV {facts['opencv']}, "
              f"numpy {facts['numpy']}, torch {facts['torch']}, torchvision {facts['torchvision']}; GPU: "
              f"{facts['gpu']}")
        print(f"files: {files['files']:,} JPEGs ({files['source']}), mean {files['mean_kb']:.0f} KB, "
              f"{files['mean_pixels'] / 1e6:.2f} MP; sizes {files['common_sizes']}")
        print(f"preprocessing {spec.name}: short side {spec.resize_short} ({spec.interpolation}), crop {spec.crop}; "
              f"img/s = decode cache rows per second (read, check, decode, resize, crop, write)")
        if len(counts) < len(wanted):
            print(f"not measured: {', '.join(str(c) for c in wanted if c > usable)} core(s) — only {usable} usable here")
        result["anchor_img_s"] = anchor(paths, spec, args.repeat)
        print(f"anchor: plain decode_image loop, 1 pinned core: {result['anchor_img_s']:.1f} img/s")
        print(f"{'decoder':<8} {'cores':>5} {'img/s':>9} {'img/s per core':>15} {'vs anchor':>9}")
        result["opencv"] = []
        for cores in counts:
            row = decode_rate(paths, spec, cores, args.repeat, work, args.pool)
            result["opencv"].append(row)
            print(f"{'opencv':<8} {cores:>5} {row['img_s']:>9.1f} {row['img_s_per_core']:>15.1f} "
                  f"{row['img_s'] / result['anchor_img_s']:>8.2f}x")
        stand_in = None
        if args.stand_in:
            import torch

            torch.set_num_threads(1)  # the stand-in's torch resize runs in the pinned decode threads
            stand_in = decode_step_stand_in(name="opencv_decode_step (stand-in, CPU)")
        with stand_in or contextlib.nullcontext():
            try:
                decoder = require_nvjpeg()
            except NvjpegUnavailable as exc:
                result["nvjpeg"] = {"measured": False, "why": exc.what}
                print(f"nvjpeg: not measured — {exc.what}")
                return _finish(result, args.json)
            nvjpeg = dataclasses.replace(spec, decoder="nvjpeg")
            decode_rate(paths[:64], nvjpeg, counts[0], 1, work, args.pool)  # warm-up: CUDA context, nvJPEG handles
            result["nvjpeg"] = {"measured": True, "decoder": decoder, "rows": []}
            for cores in counts:
                row = decode_rate(paths, nvjpeg, cores, args.repeat, work, args.pool)
                result["nvjpeg"]["rows"].append(row)
                others = sum(row["decoded_by_opencv"].values())
                print(f"{'nvjpeg':<8} {cores:>5} {row['img_s']:>9.1f} {row['img_s_per_core']:>15.1f} "
                      f"{row['img_s'] / result['anchor_img_s']:>8.2f}x" + (f"  ({others} by OpenCV)" if others else ""))
            print(f"nvjpeg rows: {decoder}; the cores read the files and run what OpenCV decodes instead")
            diff = decode_difference(paths[:args.difference_files], spec, progress=False)
            result["nvjpeg"]["difference"] = {k: v for k, v in diff.items() if k != "per_file_max"}
            print(f"pixel difference nvjpeg vs opencv on {diff['compared']} of {diff['files']} files "
                  f"({diff['left_to_opencv']} left to OpenCV, not compared), uint8 channel values of the "
                  f"{spec.crop}×{spec.crop} crops: max |diff| {diff['max_abs']}, mean |diff| {diff['mean_abs']:.4f}, "
                  f"share > 2: {diff['share_over_2']:.4%}")
        return _finish(result, args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _finish(result: dict, path: str | None) -> int:
    if path:
        Path(path).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
