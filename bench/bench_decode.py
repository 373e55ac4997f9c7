"""Decode-cache throughput on real JPEGs: images/s and images/s per core, threads vs processes.

    python bench/bench_decode.py [--images 600] [--workers 1,2] [--repeat 2] [--photos DIR]

The photos are the demo photos (foolbox's ImageNet JPEGs, scikit-image/matplotlib photos; PNGs re-encoded as
JPEG quality 90), copied under distinct names until --images files exist; --photos DIR uses the JPEGs in DIR
instead (e.g. real ImageNet val images on Kaggle). The anchor is a plain single-threaded
`decode_image` loop over the same files in the same run; every configuration prints its ratio to it, so the
numbers compare across machines. The files are read once before timing, so all runs see a warm page cache.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_jpeg_folder(folder: Path, count: int, photos: str | None = None) -> list[str]:
    import cv2

    from trtlab.data.demo import demo_dataset

    if photos:
        originals = sorted(str(p) for p in Path(photos).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
        if not originals:
            raise SystemExit(f"no .jpg/.jpeg files under {photos}")
    else:
        originals = demo_dataset().paths
    sources = []
    for path in originals:
        if path.lower().endswith((".jpg", ".jpeg")):
            sources.append(Path(path).read_bytes())
        else:
            ok, data = cv2.imencode(".jpg", cv2.imread(path, cv2.IMREAD_COLOR), [cv2.IMWRITE_JPEG_QUALITY, 90])
            sources.append(data.tobytes())
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"ILSVRC2012_val_{i + 1:08d}.JPEG"
        path.write_bytes(sources[i % len(sources)])
        paths.append(str(path))
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--workers", default=None, help="comma-separated worker counts (default: 1 and all cores)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per configuration; the best is reported")
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--photos", default=None, help="folder of JPEGs to use instead of the demo photos")
    args = parser.parse_args(argv)

    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import build_decode_cache, default_workers
    from trtlab.data.preprocess import decode_image, get_preprocess

    cores = default_workers()
    worker_counts = sorted({int(w) for w in args.workers.split(",")}) if args.workers else sorted({1, cores})
    spec = get_preprocess("tf-lite")
    tmp = Path(tempfile.mkdtemp(prefix="trtlab-bench-decode-"))
    try:
        paths = make_jpeg_folder(tmp / "images", args.images, args.photos)
        dataset = Dataset("bench-jpegs", paths)
        mean_kb = sum(Path(p).stat().st_size for p in paths) / len(paths) / 1000
        for path in paths:  # warm the page cache so every configuration reads from memory
            Path(path).read_bytes()
        import cv2

        cv2.setNumThreads(1)
        best_anchor = 0.0
        for _ in range(args.repeat):
            started = time.perf_counter()
            for path in paths:
                decode_image(path, spec)
            best_anchor = max(best_anchor, len(paths) / (time.perf_counter() - started))
        print(f"{len(paths)} real JPEGs (mean {mean_kb:.0f} KB), preprocessing {spec.name} "
              f"(short side {spec.resize_short}, crop {spec.crop}), {cores} core(s) available")
        print(f"anchor: plain decode_image loop, 1 thread: {best_anchor:.1f} images/s")
        print(f"{'pool':<10} {'workers':>7} {'images/s':>10} {'per core':>9} {'vs anchor':>9}")
        for workers in worker_counts:
            for pool in ("threads", "processes"):
                if workers == 1 and pool == "processes":
                    continue  # workers=1 decodes inline; one row is enough
                best = 0.0
                for run in range(args.repeat):
                    workspace = tmp / f"ws-{pool}-{workers}-{run}"
                    started = time.perf_counter()
                    cache = build_decode_cache(dataset, spec, workspace, workers=workers, pool=pool,
                                               chunk_size=args.chunk_size, progress=False)
                    elapsed = time.perf_counter() - started  # includes pool start-up and cache file creation
                    assert cache.decoded_now == len(paths), cache.failure_list()[:3]
                    best = max(best, len(paths) / elapsed)
                    shutil.rmtree(workspace)
                used = min(workers, cores)
                label = pool if workers > 1 else "inline"
                print(f"{label:<10} {workers:>7} {best:>10.1f} {best / used:>9.1f} {best / best_anchor:>8.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
