"""Decode once: preprocessed uint8 crops of a dataset in a memmap, keyed by (file list, preprocessing).

Calibration and every variant's evaluation read batches from here, so JPEG decoding and resizing happen once per
dataset and preprocessing. A per-image status file makes an interrupted decode resume where it stopped; images
that fail to decode are recorded with the reason and skipped.
"""
from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .dataset import Dataset
from .preprocess import ImageDecodeError, Preprocess, decode_image, get_preprocess
from .workspace import atomic_path, atomic_write_json, hash_json, workspace_dir

PENDING, DECODED, FAILED = 0, 1, 2
CACHE_FORMAT = 1


@dataclass
class DecodeCache:
    """A finished decode cache. `crops[i]` is image i's uint8 HWC crop; only `valid_indices` hold real data."""

    folder: Path
    dataset: Dataset
    preprocess: Preprocess
    crops: np.ndarray
    status: np.ndarray
    failures: dict[int, str] = field(default_factory=dict)
    decoded_now: int = 0

    @property
    def valid_indices(self) -> np.ndarray:
        return np.flatnonzero(self.status == DECODED)

    @property
    def key(self) -> str:
        return self.folder.name

    def failure_list(self) -> list[dict]:
        return [{"index": i, "path": self.dataset.paths[i], "reason": r} for i, r in sorted(self.failures.items())]

    def iter_batches(self, indices=None, batch_size: int = 32):
        """Yield (indices, uint8 NHWC batch) over `indices` (default: every decoded image)."""
        indices = self.valid_indices if indices is None else np.asarray(indices, np.int64)
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            yield chunk, np.asarray(self.crops[chunk])

    def describe(self) -> dict:
        return {
            "key": self.key,
            "images": len(self.dataset),
            "decoded": int((self.status == DECODED).sum()),
            "failed": len(self.failures),
            "decoded_this_run": self.decoded_now,
            "preprocess": self.preprocess.to_dict(),
        }


def cache_key(dataset: Dataset, preprocess: Preprocess) -> str:
    return hash_json({"format": CACHE_FORMAT, "dataset": dataset.fingerprint(), "pre": preprocess.cache_key_fields()})


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:40] or "dataset"


def build_decode_cache(
    dataset: Dataset,
    preprocess: str | Preprocess = "tf-lite",
    workspace: str | os.PathLike | None = None,
    workers: int | None = None,
    chunk_size: int = 64,
    progress: bool = True,
    stop_after: int | None = None,
) -> DecodeCache:
    """Open the decode cache for (dataset, preprocess), decoding whatever is still pending.

    A second call with the same inputs decodes nothing. `stop_after` ends early after that many chunks (used to
    simulate interruption in tests); the next call resumes.
    """
    from tqdm.auto import tqdm

    spec = get_preprocess(preprocess)
    folder = workspace_dir(workspace) / "decode_cache" / f"{_safe_name(dataset.name)}-{cache_key(dataset, spec)}"
    folder.mkdir(parents=True, exist_ok=True)
    count = len(dataset)
    shape = (count, spec.crop, spec.crop, 3)
    crops_path, status_path, failures_path = folder / "crops.u8", folder / "status.npy", folder / "failures.json"

    if not crops_path.exists():
        with atomic_path(crops_path) as tmp:
            # Sparse file of the final size: the memmap can then be filled in any order and resumed.
            with open(tmp, "wb") as fh:
                fh.truncate(int(np.prod(shape)))
        atomic_write_json(folder / "meta.json", {
            "format": CACHE_FORMAT, "dataset": dataset.name, "images": count, "shape": list(shape),
            "preprocess": spec.to_dict(), "fingerprint": dataset.fingerprint(),
        })
    status = np.load(status_path) if status_path.exists() else np.zeros(count, np.int8)
    failures = {int(k): v for k, v in json.loads(failures_path.read_text()).items()} if failures_path.exists() else {}

    pending = np.flatnonzero(status == PENDING)
    decoded_now = 0
    if len(pending):
        crops = np.memmap(crops_path, np.uint8, "r+", shape=shape)
        workers = workers or min(8, os.cpu_count() or 1)

        def decode_one(index: int):
            try:
                return index, decode_image(dataset.paths[index], spec), None
            except ImageDecodeError as exc:
                return index, None, str(exc)

        bar = tqdm(total=len(pending), desc=f"decode {dataset.name}", unit="img", disable=not progress)
        try:
            import cv2

            cv2.setNumThreads(1)  # parallelism comes from the thread pool; cv2's own threads would oversubscribe
            # Threads suffice: cv2.imdecode and cv2.resize release the GIL.
            with ThreadPoolExecutor(workers) as pool:
                for chunk_no, start in enumerate(range(0, len(pending), chunk_size)):
                    if stop_after is not None and chunk_no >= stop_after:
                        break
                    chunk = pending[start : start + chunk_size]
                    for index, crop, error in pool.map(decode_one, chunk.tolist()):
                        if error is None:
                            crops[index] = crop
                            status[index] = DECODED
                            decoded_now += 1
                        else:
                            status[index] = FAILED
                            failures[index] = error
                    # Data first, then the status that vouches for it: a crash in between only repeats work.
                    crops.flush()
                    _save_status(status_path, status)
                    atomic_write_json(failures_path, {str(k): v for k, v in failures.items()})
                    bar.update(len(chunk))
        finally:
            bar.close()
            del crops
        if failures and progress:
            print(f"[trtlab] {len(failures)} image(s) could not be decoded and are skipped "
                  f"(listed in {failures_path}):")
            for index in sorted(failures)[:10]:
                print(f"  - {failures[index]}")
    readonly = np.memmap(crops_path, np.uint8, "r", shape=shape)
    return DecodeCache(folder, dataset, spec, readonly, status, failures, decoded_now)


def _save_status(path: Path, status: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy") as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, status)
