"""What content identity and verified reads cost: dataset fingerprints by content hash, and crc32 per crop row.

    python bench/bench_data_identity.py [--images 3000] [--photos DIR] [--batch 32] [--batches 40]

Fingerprints, on the demo photos and on a folder of --images small JPEGs (the demo photos cut into random
160×120 crops and re-encoded; --photos DIR uses the JPEGs in DIR instead, e.g. ImageNet val on Kaggle):
- anchor: the old identity, one os.stat per file (path, size, mtime) hashed as JSON;
- cold: every file read and hashed (a new workspace: the first run on a dataset);
- store: a new process whose hashes come from file_hashes.sqlite (stat only; the usual case);
- memo: the same process again (what every later fingerprint() of a run costs).
Files are aged past the racy window (2 s) before the warm measurements, as any real dataset is.

Verified reads, on a decode cache of those images: the anchor is reading batches of crops alone (memmap,
page cache warm); then the first, verified read of each row (crc32 per row) and a second read (rows already
verified in this process), with normalisation (what the batch source does anyway) for scale.
Every figure is printed with its ratio to the anchor measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def small_jpegs(folder: Path, count: int, photos: str | None) -> list[str]:
    import cv2

    from trtlab.data.demo import demo_dataset

    if photos:
        sources = sorted(str(p) for p in Path(photos).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))[:count]
        return sources
    rng = np.random.default_rng(0)
    images = [cv2.imread(p, cv2.IMREAD_COLOR) for p in demo_dataset().paths]
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        image = images[i % len(images)]
        top, left = rng.integers(0, image.shape[0] - 120), rng.integers(0, image.shape[1] - 160)
        path = folder / f"img{i:05d}.jpg"
        cv2.imwrite(str(path), image[top:top + 120, left:left + 160], [cv2.IMWRITE_JPEG_QUALITY, 85])
        paths.append(str(path))
    return paths


def stat_fingerprint(paths: list[str], labels) -> str:
    """The identity before issue 18: (path, size, whole-second mtime) per file."""
    from trtlab.core.workspace import hash_json

    entries = []
    for path in paths:
        stat = os.stat(path)
        entries.append((path, stat.st_size, int(stat.st_mtime)))
    return hash_json({"files": entries, "labels": labels.tolist()})


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def fingerprints(name: str, dataset, store: Path) -> None:
    from trtlab.data import file_hashes as fh

    megabytes = sum(os.path.getsize(p) for p in dataset.paths) / 1e6
    anchor = best(lambda: stat_fingerprint(dataset.paths, dataset.labels))
    hashes = fh.FileHashes(store)

    def cold():
        store.unlink(missing_ok=True)
        hashes.forget()
        dataset.fingerprint(hashes.hashes(dataset.paths, progress=False))

    cold_s = best(cold, 2)
    time.sleep(fh.RACY_NS / 1e9 + 0.2)  # real datasets are older than the racy window
    hashes.forget()
    hashes.hashes(dataset.paths, progress=False)  # hashes re-taken once, now trusted and stored

    def from_store():
        fresh = fh.FileHashes(store)
        dataset.fingerprint(fresh.hashes(dataset.paths, progress=False))
        assert fresh.hashed == 0

    store_s = best(from_store)
    memo_s = best(lambda: dataset.fingerprint(hashes.hashes(dataset.paths, progress=False)))
    print(f"\n{name}: {len(dataset):,} files, {megabytes:.1f} MB")
    print(f"  anchor  stat-only identity      {anchor * 1e3:9.1f} ms   1.00×")
    for label, seconds in (("cold    read + blake2b every file", cold_s), ("store   new process, stat + sqlite", store_s),
                           ("memo    same process, stat only", memo_s)):
        print(f"  {label:32s} {seconds * 1e3:9.1f} ms  {seconds / anchor:5.2f}×   "
              f"({seconds / len(dataset) * 1e6:.0f} µs/file)")
    print(f"  cold hashing throughput: {megabytes / cold_s:.0f} MB/s")


def reads(dataset, workspace: Path, batch: int, batches: int) -> None:
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.preprocess import normalize_batch

    cache = build_decode_cache(dataset, "tf-lite", workspace, progress=False)
    rng = np.random.default_rng(1)
    chunks = [np.sort(rng.choice(cache.valid_indices, batch, replace=False)) for _ in range(batches)]
    raw = cache.crops.base
    for chunk in chunks:  # warm the page cache: all runs read from memory
        np.asarray(raw[chunk])
    anchor = best(lambda: [np.asarray(raw[c]) for c in chunks])

    def first_read():
        cache.crops._verified[:] = False
        [np.asarray(cache.crops[c]) for c in chunks]

    verified = best(first_read)
    again = best(lambda: [np.asarray(cache.crops[c]) for c in chunks])
    normalised = best(lambda: [normalize_batch(np.asarray(raw[c]), cache.preprocess) for c in chunks])
    per = 1e3 / batches
    print(f"\nverified reads: {batches} batches of {batch} crops (224×224×3 uint8), page cache warm")
    print(f"  anchor  read alone                 {anchor * per:7.2f} ms/batch   1.00×")
    print(f"  first read, crc32 verified         {verified * per:7.2f} ms/batch  {verified / anchor:5.2f}×")
    print(f"  later reads (verified already)     {again * per:7.2f} ms/batch  {again / anchor:5.2f}×")
    print(f"  read + normalise (batch source)    {normalised * per:7.2f} ms/batch  {normalised / anchor:5.2f}×")
    print(f"  verification adds {(verified - anchor) / normalised:.0%} to read + normalise on a first read")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--photos", default=None, help="folder of JPEGs to use instead of synthetic ones")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args(argv)

    from trtlab.data.dataset import Dataset
    from trtlab.data.demo import demo_dataset

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ.setdefault("TRTLAB_WORKSPACE", str(tmp / "ws"))
        fingerprints("demo photos", demo_dataset(), tmp / "demo.sqlite")
        jpegs = Dataset("jpegs", small_jpegs(tmp / "jpegs", args.images, args.photos))
        fingerprints(f"{'--photos' if args.photos else 'synthetic'} JPEGs", jpegs, tmp / "jpegs.sqlite")
        reads(jpegs, tmp / "ws", args.batch, args.batches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
