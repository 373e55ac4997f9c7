"""Decode once: preprocessed uint8 crops of a dataset in a memmap, keyed by (file contents, preprocessing).

Calibration and every variant's evaluation read batches from here, so JPEG decoding and resizing happen once per
dataset and preprocessing. A per-image status file makes an interrupted decode resume where it stopped; images
that fail to decode are recorded with the reason and skipped (`DecodeCache.skipped()` names them for the run
record and the report). Each row's checksum is stored, and every row read is verified (decode_files.py).

Crash safety: workers write each crop into the (sparse, pre-sized) crops file with pwrite; after every chunk the
file is fdatasync'ed and only then are the chunk's checksums and status saved (atomically). A kill at any point
therefore leaves either a decoded row vouched for by the status file or a pending row that the next run decodes
again.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.core.errors import DamagedArtefact, UserError
from trtlab.core.workspace import DAMAGE_ERRORS, atomic_path, hash_json, load_npy, workspace_dir
from trtlab.data.dataset import Dataset, describe_extensions
from trtlab.data.decode_files import (DECODED, FAILED, PENDING, CacheFiles, CheckedCrops, CropRows, check_on_open,
                                      load_state, save_npy, save_state)
from trtlab.data.decode_nvjpeg import executor_and_task, require_nvjpeg, rows_decoder
from trtlab.data.decode_workers import (DEFAULT_POOL, POOLS, RowResult, decode_rows, make_executor,  # noqa: F401
                                        task_for)
from trtlab.data.disk import format_bytes, write_json, writing_to  # noqa: F401  (format_bytes: re-exported)
from trtlab.data.preprocess import Preprocess, get_preprocess

CACHE_FORMAT = 2  # 2: rows verified by crc32 (checksums.npy); the key follows the files' contents
log = logging.getLogger(__name__)


class InsufficientDiskSpace(UserError, OSError):
    """The decode cache would not fit in the free space of the workspace's file system."""


@dataclass
class DecodeCache:
    """A finished decode cache. `crops[i]` is image i's uint8 HWC crop; only `valid_indices` hold real data."""

    folder: Path
    dataset: Dataset
    preprocess: Preprocess
    crops: object  # CheckedCrops (verified reads) or, for a subset, CropRows over the parent's
    status: np.ndarray
    failures: dict[int, str] = field(default_factory=dict)
    decoded_now: int = 0
    decode_seconds: float = 0.0
    pool: str = ""
    workers: int = 0
    decoder: object = field(default=None, repr=False)  # the decode run that rows still pending are left to

    def pending(self) -> np.ndarray:
        """Rows not decoded yet (build_decode_cache(first=...) leaves them to data.decode_stream)."""
        rows = np.flatnonzero(self.status == PENDING)
        changed = getattr(self.decoder, "changed", None)  # files that changed while decoded: left for the next run
        return np.setdiff1d(rows, changed) if changed else rows

    @property
    def valid_indices(self) -> np.ndarray:
        return np.flatnonzero(self.status == DECODED)

    @property
    def key(self) -> str:
        return self.folder.name

    @property
    def images_per_second(self) -> float | None:
        """Decode throughput of this call (None when nothing was decoded now)."""
        if not self.decoded_now or self.decode_seconds <= 0:
            return None
        return self.decoded_now / self.decode_seconds

    def failure_list(self) -> list[dict]:
        return [{"index": i, "path": self.dataset.paths[i], "reason": r} for i, r in sorted(self.failures.items())]

    def skipped(self, indices=None) -> list[dict]:
        """The images of this cache (or of its rows `indices`, e.g. the evaluated ones) that could not be decoded,
        for the run record and the report: `image` (the id results are stored under), `file` (its path) and
        `reason` (what is wrong with it and, where known, what to do)."""
        rows = sorted(self.failures) if indices is None else \
            sorted({int(i) for i in np.asarray(indices, np.int64).ravel()} & set(self.failures))
        ids = self.dataset.image_ids()
        return [{"image": ids[i], "file": self.dataset.paths[i],
                 "reason": self.failures[i].removeprefix(f"{self.dataset.paths[i]}: ")} for i in rows]

    def iter_batches(self, indices=None, batch_size: int = 32):
        """Yield (indices, uint8 NHWC batch) over `indices` (default: every decoded image), from the batch source."""
        from trtlab.data.batches import iter_batches

        for batch in iter_batches(self, indices, batch_size, crops=True):
            yield batch.indices, batch.images

    def verify(self, progress: bool = True) -> int:
        """Check every decoded row of the crops file against its checksum now (rows are otherwise checked on their
        first read in this process); rows that do not match are decoded again. Returns the rows checked."""
        crops = self.crops.base if isinstance(self.crops, CropRows) else self.crops
        return crops.verify_all(progress) if hasattr(crops, "verify_all") else 0

    def subset(self, indices, name: str | None = None) -> "DecodeCache":
        """The cache of `dataset.subset(indices)`, read from this cache's crops without copying or decoding.

        This is how a calibration set and an evaluation set share one decode of the full dataset.
        """
        indices = np.asarray(indices, np.int64)
        position = {int(old): new for new, old in enumerate(indices)}
        return DecodeCache(
            folder=self.folder,
            dataset=self.dataset.subset(indices, name=name),
            preprocess=self.preprocess,
            crops=CropRows(self.crops, indices),
            status=self.status[indices],
            failures={position[i]: reason for i, reason in self.failures.items() if i in position},
        )

    def summary(self) -> str:
        """One line for people: images ready, skipped (with the first reason), preprocessing and where it lives."""
        info = self.describe()
        skipped = f", {info['failed']:,} skipped ({info['skipped'][0]['path']}: {info['skipped'][0]['reason']}" \
                  f"{', …' if info['failed'] > 1 else ''})" if info["failed"] else ", none skipped"
        spec = self.preprocess
        return (f"{self.dataset.name}: {info['decoded']:,} of {info['images']:,} images decoded{skipped}; "
                f"{spec.name} {spec.crop}×{spec.crop}{', decoded by nvJPEG' if spec.decoder == 'nvjpeg' else ''}; "
                f"cache {self.folder}")

    def describe(self) -> dict:
        return {
            "key": self.key,
            "images": len(self.dataset),
            "decoded": int((self.status == DECODED).sum()),
            "failed": len(self.failures),
            "skipped": self.skipped(),
            "decoded_this_run": self.decoded_now,
            "images_per_second": self.images_per_second,
            "preprocess": self.preprocess.to_dict(),
        }


def cache_key(dataset: Dataset, preprocess: str | Preprocess, hashes: list[str] | None = None) -> str:
    """The key of the decode cache of (dataset, preprocess): the Identity of the dataset's files and labels, the
    preprocessing fields that shape the crops (the decoder where not OpenCV's) and the cache format."""
    return _cache_identity(dataset.fingerprint(hashes), get_preprocess(preprocess)).key


def _cache_identity(fingerprint: str, preprocess: Preprocess):
    from trtlab.core.identity import Identity

    return Identity(data={"dataset": fingerprint}, preprocess=preprocess.cache_key_fields(), revision=CACHE_FORMAT)


def cache_folder(dataset: Dataset, preprocess: str | Preprocess = "tf-lite", workspace=None,
                 hashes: list[str] | None = None) -> Path:
    """Where the decode cache of (dataset, preprocess) lives (whether or not it exists yet). A cache an earlier
    trtlab named by a hash of its own dict (same fields) is found under that name and used as it is: its crops are
    these, and run records name it by that key."""
    spec = get_preprocess(preprocess)
    fingerprint = dataset.fingerprint(hashes)
    root = workspace_dir(workspace) / "decode_cache"
    folder = root / f"{_safe_name(dataset.name)}-{_cache_identity(fingerprint, spec).key}"
    earlier = root / f"{_safe_name(dataset.name)}-" \
        f"{hash_json({'format': CACHE_FORMAT, 'dataset': fingerprint, 'pre': spec.cache_key_fields()})}"
    return earlier if not folder.exists() and earlier.exists() else folder


def estimate_cache_bytes(count: int, preprocess: str | Preprocess = "tf-lite") -> int:
    """Bytes of crops for `count` images: count × crop × crop × 3 (uint8). 50,000 × 224² × 3 ≈ 7.5 GB."""
    spec = get_preprocess(preprocess)
    return int(count) * spec.crop * spec.crop * 3


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:40] or "dataset"


def default_workers() -> int:
    """Decode workers by default: one per CPU core this process may use (core.cores)."""
    from trtlab.core.cores import usable_cores

    return usable_cores()


def build_decode_cache(
    dataset: Dataset,
    preprocess: str | Preprocess = "tf-lite",
    workspace: str | os.PathLike | None = None,
    workers: int | None = None,
    chunk_size: int = 64,
    progress: bool = True,
    stop_after: int | None = None,
    pool: str = "auto",
    check_disk: bool = True,
    first=None,
) -> DecodeCache:
    """Open the decode cache for (dataset, preprocess), decoding whatever is still pending.

    A second call with the same inputs decodes nothing. `stop_after` ends early after that many chunks (used to
    simulate interruption in tests); the next call resumes. `workers` decode in parallel, as threads or processes
    (`pool`: "threads", "processes" or "auto" = DEFAULT_POOL). Before decoding, the bytes still to write are
    compared with the free space of the workspace; `check_disk=False` skips the refusal (the estimate is still
    printed). `first` (row indices): decode only those rows now and leave the rest pending, for
    data.decode_stream to decode in the background while they are evaluated; when none of them decodes, every row
    is decoded now (so that a folder of undecodable files is refused as without `first`).
    """
    spec = get_preprocess(preprocess)
    pool = DEFAULT_POOL if pool == "auto" else pool
    if pool not in POOLS:
        raise ValueError(f"pool={pool!r}: choose 'threads', 'processes' or 'auto'")
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be at least 1")
    hashes = dataset.content_hashes(progress)
    files = CacheFiles(cache_folder(dataset, spec, workspace, hashes), len(dataset), spec.crop * spec.crop * 3)
    with writing_to(files.folder):
        files.folder.mkdir(parents=True, exist_ok=True)
    shape = (files.count, spec.crop, spec.crop, 3)
    status, failures, checksums = load_state(files)
    if files.crops.exists() and files.count:
        check_on_open(files, np.memmap(files.crops, np.uint8, "r", shape=shape), status, checksums, dataset.paths,
                      progress)
    pending = np.flatnonzero(status == PENDING)
    if len(pending) and spec.decoder == "nvjpeg":
        require_nvjpeg()  # one line where it cannot run: never the CPU for the whole run instead
    if len(pending):
        _check_disk_space(files, dataset.name, len(pending), check_disk, progress)
    _create_files(files, dataset, spec, hashes)
    run = _DecodeRun(files, dataset, spec, hashes, status, failures, checksums, progress)
    run.pool, run.chunk_size = pool, chunk_size
    workers = max(1, int(workers or default_workers()))
    if first is not None and len(pending):
        now = pending[np.isin(pending, np.asarray(first, np.int64))]
        if len(now):
            run.decode(now, pool, workers, chunk_size, stop_after, report=False)
        rest = np.setdiff1d(np.flatnonzero(status == PENDING), run.changed)
        if len(rest) and len(now) and not (status[now] == DECODED).any() and stop_after is None:
            log.info("none of the %d image(s) decoded first could be decoded: decoding the other %d now",
                     len(now), len(rest))
            run.decode(rest, pool, workers, chunk_size, None, report=False)
            rest = rest[:0]
        if len(now) and not len(rest):
            run._report(pool)  # nothing left for the background: said now, as without `first`
    elif len(pending):
        run.decode(pending, pool, workers, chunk_size, stop_after)
    if files.count and bool((status == FAILED).all()):
        _refuse_undecodable(dataset, failures, files)
    base = np.memmap(files.crops, np.uint8, "r", shape=shape) if files.count else np.zeros(shape, np.uint8)
    # Rows decoded just now are verified on their first read too: another program may write the file between
    # the decode and the read (a damaged row is never trusted, issue 36); crc32 of a row costs ~0.1 ms.
    crops = CheckedCrops(base, status, checksums, run.repair)
    return DecodeCache(files.folder, dataset, spec, crops, status, failures, run.decoded, run.seconds, pool,
                       run.workers or workers, decoder=run)


def _refuse_undecodable(dataset: Dataset, failures: dict[int, str], files: CacheFiles) -> None:
    """Not one image of `dataset` decodes: one line naming the folder and a reason, instead of an empty evaluation."""
    first = failures[min(failures)] if failures else ""
    where = dataset.root or dataset.name
    raise UserError(f"none of the {len(dataset):,} image(s) in {where} could be decoded (e.g. {first})",
                    f"check that the files are photos OpenCV reads ({describe_extensions()}), not damaged or "
                    f"placeholders; every reason is listed in {files.failures}")


def _create_files(files: CacheFiles, dataset: Dataset, spec: Preprocess, hashes: list[str]) -> None:
    with writing_to(files.crops):
        if not files.crops.exists():
            with atomic_path(files.crops) as tmp:
                # Sparse file of the final size: rows can then be filled in any order and resumed.
                with open(tmp, "wb") as fh:
                    fh.truncate(files.count * files.row_bytes)
    if not files.meta.exists():
        write_json(files.meta, {
            "format": CACHE_FORMAT, "dataset": dataset.name, "images": files.count,
            "shape": [files.count, spec.crop, spec.crop, 3], "preprocess": spec.to_dict(),
            "fingerprint": dataset.fingerprint(hashes), "checksums": "crc32 of each row, checksums.npy",
        })


class _DecodeRun:
    """One call's decoding: chunks of pending rows through a pool of workers, each chunk committed (data synced,
    then checksums and status saved) before it counts; and the repair of rows found damaged when read."""

    def __init__(self, files: CacheFiles, dataset: Dataset, spec: Preprocess, hashes, status, failures, checksums,
                 progress: bool):
        self.files, self.dataset, self.spec, self.hashes = files, dataset, spec, hashes
        self.status, self.failures, self.checksums, self.progress = status, failures, checksums, progress
        self.decoded, self.processed, self.seconds, self.workers, self.changed = 0, 0, 0.0, 0, []
        self.pool, self.chunk_size, self.pieces = DEFAULT_POOL, 64, 1
        self.fallbacks: dict[str, int] = {}  # decoder 'nvjpeg': rows OpenCV decoded instead, by reason

    def decode(self, pending: np.ndarray, pool: str, workers: int, chunk_size: int, stop_after: int | None,
               on_commit=None, stop=None, report: bool = True) -> None:
        """Decode `pending` rows in this order; `on_commit(rows)` after each chunk is committed; `stop` (an Event)
        ends it after the chunks in flight; `report`: say what this run decoded so far (and what failed)."""
        from trtlab.core.progress import progress_bar

        self.workers = workers
        seconds = self.seconds
        started = time.perf_counter()
        bar = progress_bar(total=len(pending), desc=f"decode {self.dataset.name}", unit="img", enabled=self.progress)
        fd = os.open(self.files.crops, os.O_RDWR)
        try:
            with writing_to(self.files.crops):  # a full disk mid-decode names the crops file and the disk
                executor, task, extra, self.pieces = executor_and_task(pool, workers, fd, str(self.files.crops),
                                                                       self.files.row_bytes, self.spec)
                with executor:
                    starts = range(0, len(pending), chunk_size)
                    if stop_after is not None:
                        starts = starts[: max(0, stop_after)]
                    in_flight: deque = deque()
                    for start in starts:
                        if stop is not None and stop.is_set():
                            break
                        # Two chunks in flight keep every worker busy while the previous chunk is committed.
                        in_flight.append(self._submit(executor, task, extra, pending[start:start + chunk_size]))
                        if len(in_flight) >= 2:
                            self._commit(fd, bar, *in_flight.popleft(), on_commit)
                    while in_flight:
                        self._commit(fd, bar, *in_flight.popleft(), on_commit)
        finally:
            os.close(fd)
            bar.close()
        self.seconds = seconds + time.perf_counter() - started  # every call of this run (first rows, then the rest)
        if report:
            self._report(pool)

    def _submit(self, executor, task, extra, chunk: np.ndarray):
        pieces = np.array_split(chunk, min(self.pieces, len(chunk)))
        items = [[(int(i), self.dataset.paths[i], self.hashes[i]) for i in piece] for piece in pieces if len(piece)]
        return chunk, [executor.submit(task, piece, *extra) for piece in items]

    def _commit(self, fd: int, bar, chunk: np.ndarray, futures: list[Future], on_commit=None) -> None:
        for future in futures:
            for result in future.result():
                self._take(result)
        # Data first, then what vouches for it: a crash in between only repeats work.
        getattr(os, "fdatasync", os.fsync)(fd)  # flushes the pages whichever thread or worker process wrote them
        save_state(self.files, self.status, self.failures, self.checksums)
        self.processed += len(chunk)
        bar.update(len(chunk))
        if on_commit is not None:
            on_commit(chunk)

    def _take(self, result: RowResult) -> None:
        if result.changed:
            self.changed.append(result.index)  # stays pending: the next run decodes the new content
        elif result.error is None:
            self.status[result.index], self.checksums[result.index] = DECODED, result.checksum
            self.decoded += 1
            if result.fallback:
                self.fallbacks[result.fallback] = self.fallbacks.get(result.fallback, 0) + 1
        else:
            self.status[result.index], self.failures[result.index] = FAILED, result.error

    def _report(self, pool: str) -> None:
        processed, seconds = self.processed, self.seconds
        if self.progress:
            rate = processed / seconds if seconds > 0 else float("nan")
            how = f"{self.workers} {pool if self.workers > 1 else 'worker'}" if self.spec.decoder != "nvjpeg" else \
                f"nvJPEG and {self.workers} reader thread(s)"
            log.info("decoded %s image(s) in %.1f s: %.1f images/s with %s (%.1f images/s per %s)",
                     f"{processed:,}", seconds, rate, how, rate / self.workers,
                     "worker" if self.spec.decoder != "nvjpeg" else "reader thread")
        if self.fallbacks:
            log.info("decoder nvjpeg: %d of %d image(s) decoded by OpenCV instead (%s)", sum(self.fallbacks.values()),
                     processed, ", ".join(f"{reason}: {n}" for reason, n in sorted(self.fallbacks.items())))
        if self.failures and self.progress:
            log.warning("%d image(s) could not be decoded and are skipped (listed in %s):\n%s", len(self.failures),
                        self.files.failures, "\n".join(f"  - {self.failures[i]}" for i in sorted(self.failures)[:10]))
        if self.changed:
            log.warning("%d file(s) changed while they were being decoded (e.g. %s); they are left out of this run "
                        "— run again to use their new content", len(self.changed),
                        self.dataset.paths[self.changed[0]])

    def repair(self, rows: np.ndarray) -> None:
        """Decode again rows whose bytes in crops.u8 no longer match their checksums (damaged after writing)."""
        paths = self.dataset.paths
        log.warning("%s: %d row(s) do not match their checksums (damaged after they were written; e.g. row %d = "
                    "%s); decoding them again", self.files.crops, len(rows), rows[0], paths[rows[0]])
        fd = os.open(self.files.crops, os.O_RDWR)
        try:
            with writing_to(self.files.crops):
                results = rows_decoder(self.spec)([(int(i), paths[i], self.hashes[i]) for i in rows], fd,
                                                  self.files.row_bytes, self.spec)
                getattr(os, "fdatasync", os.fsync)(fd)
        finally:
            os.close(fd)
        lost = [r for r in results if r.changed or r.error is not None]
        for result in results:
            if not (result.changed or result.error is not None):
                self.checksums[result.index] = result.checksum
        if lost:
            self.status[[r.index for r in lost]] = PENDING
        save_npy(self.files.checksums, self.checksums)
        save_npy(self.files.status, self.status)
        if lost:
            first = lost[0]
            raise DamagedArtefact(f"{self.files.crops} row {first.index} ({paths[first.index]}) is damaged and cannot "
                                  f"be decoded again now ({first.error or 'the file changed since'})",
                                  "run the command again: the decode cache decodes that image anew")


def _check_disk_space(files: CacheFiles, name: str, pending: int, check: bool, progress: bool) -> None:
    total, needed = files.count * files.row_bytes, pending * files.row_bytes
    free = shutil.disk_usage(files.folder).free
    if progress:
        still = "" if pending == files.count else f", {format_bytes(needed)} of it still to write"
        log.info("decode cache for %r: %s images × %s bytes = %s%s; %s free in %s", name, f"{files.count:,}",
                 f"{files.row_bytes:,}", format_bytes(total), still, format_bytes(free), files.folder.parent)
    if needed > free:
        what = (f"the decode cache for {name!r} needs {format_bytes(needed)} more but only {format_bytes(free)} "
                f"is free in {files.folder.parent}")
        # Only flags that exist are named: `prep` has --ignore-disk-check, eval/calibrate do not.
        fix = ("free some space, choose another workspace (--workspace or $TRTLAB_WORKSPACE), or decode a smaller "
               "set (`python -m trtlab prep --decode evaluation --eval-per-class N`); to try anyway: "
               "build_decode_cache(..., check_disk=False) or `prep --ignore-disk-check`")
        if check:
            raise InsufficientDiskSpace(what, fix)
        log.warning("%s (check_disk=False: trying anyway)", what)


class UnreadableCache(UserError, ValueError):
    """An existing decode cache that cannot be read as asked (absent, damaged, other format, other files). Reading
    leaves it as it is: the workspace may be read-only (attached under /kaggle/input)."""


@dataclass(frozen=True)
class StoredCrops:
    """An existing decode cache opened for reading, without its Dataset: `crops[i]` is row i's uint8 HWC crop
    (read-only, verified against its checksum when read: a damaged row raises UnreadableCache), real where
    `status[i] == DECODED`; `meta` is its meta.json."""

    folder: Path
    crops: object
    status: np.ndarray
    meta: dict

    @property
    def valid_indices(self) -> np.ndarray:
        return np.flatnonzero(self.status == DECODED)


def open_decode_cache(key: str, workspace, fingerprint: str | None = None) -> StoredCrops:
    """Open the decode cache `key` (a DecodeCache.key, as run records store it) of `workspace` for reading — the
    views' way in (thumbnails), without the dataset. Nothing is written, repaired or set aside (the workspace may
    be read-only). Checked against `fingerprint` (the dataset's, when given: a cache rebuilt for changed files
    holds other images) and against itself (format, crops size, status, checksums); raises UnreadableCache."""
    import json

    if not key or Path(key).name != key:
        raise UnreadableCache(f"decode cache key {key!r} is not a folder name", "pass DecodeCache.key")
    folder = Path(workspace) / "decode_cache" / key

    def unreadable(reason: str) -> UnreadableCache:
        return UnreadableCache(f"decode cache {folder}: {reason}", "build it again with build_decode_cache(...)")

    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise unreadable(f"meta.json holds a {type(meta).__name__}, expected a JSON object")
        shape = tuple(int(n) for n in meta["shape"])
        status, checksums = load_npy(folder / "status.npy"), load_npy(folder / "checksums.npy")
        size = (folder / "crops.u8").stat().st_size
    except UnreadableCache:
        raise
    except (OSError, AttributeError) + DAMAGE_ERRORS as exc:
        raise unreadable(f"{type(exc).__name__}: {exc}") from exc
    if meta.get("format") != CACHE_FORMAT or len(shape) != 4 or shape[3] != 3:
        raise unreadable(f"format {meta.get('format')} with crops of shape {list(shape)}; this trtlab reads "
                         f"format {CACHE_FORMAT}, (images, crop, crop, 3)")
    if fingerprint is not None and meta.get("fingerprint") != fingerprint:
        raise unreadable("it was built for other files (dataset fingerprint differs)")
    if size != int(np.prod(shape)) or status.shape != shape[:1] or status.dtype != np.int8 \
            or checksums.shape != shape[:1]:
        raise unreadable(f"crops.u8 has {size:,} bytes, status {status.shape} {status.dtype} and checksums "
                         f"{checksums.shape} for {shape[0]:,} images of {shape[1]}×{shape[2]}")
    if not np.isin(status, (PENDING, DECODED, FAILED)).all():
        raise unreadable("status.npy holds values other than pending/decoded/failed")

    def refuse(rows):
        raise unreadable(f"rows {np.asarray(rows)[:5].tolist()} of crops.u8 do not match their checksums")

    base = np.memmap(folder / "crops.u8", np.uint8, "r", shape=shape) if shape[0] else np.zeros(shape, np.uint8)
    return StoredCrops(folder, CheckedCrops(base, status, checksums.astype(np.uint32), refuse), status, meta)
