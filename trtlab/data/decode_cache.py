"""Decode once: preprocessed uint8 crops of a dataset in a memmap, keyed by (file list, preprocessing).

Calibration and every variant's evaluation read batches from here, so JPEG decoding and resizing happen once per
dataset and preprocessing. A per-image status file makes an interrupted decode resume where it stopped; images
that fail to decode are recorded with the reason and skipped.

Crash safety: workers write each crop into the (sparse, pre-sized) crops file with pwrite; after every chunk the
file is fdatasync'ed and only then is the chunk's status saved (atomically). A kill at any point therefore leaves
either a decoded row vouched for by the status file or a pending row that the next run decodes again.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.data.dataset import Dataset
from trtlab.data.preprocess import ImageDecodeError, Preprocess, decode_image, get_preprocess
from trtlab.core.errors import UserError, writing
from trtlab.core.workspace import atomic_path, atomic_write_json, hash_json, read_checked, read_json_checked, set_aside, \
    workspace_dir

PENDING, DECODED, FAILED = 0, 1, 2
CACHE_FORMAT = 1
POOLS = ("threads", "processes")
# bench/bench_decode.py on real JPEGs (images/s, 16-core host): threads 321/541/1063/1651 vs processes
# 297/603/925/1189 at 2/4/8/16 workers; on 2 cores 508 vs 482. cv2 releases the GIL in imdecode/resize, threads
# start instantly and need no pickling, so they are the default; processes stay available as an option.
DEFAULT_POOL = "threads"


log = logging.getLogger(__name__)


class InsufficientDiskSpace(UserError, OSError):
    """The decode cache would not fit in the free space of the workspace's file system."""


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
    decode_seconds: float = 0.0
    pool: str = ""
    workers: int = 0

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
        """Yield (indices, uint8 NHWC batch) over `indices` (default: every decoded image)."""
        indices = self.valid_indices if indices is None else np.asarray(indices, np.int64)
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            yield chunk, np.asarray(self.crops[chunk])

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

    def describe(self) -> dict:
        return {
            "key": self.key,
            "images": len(self.dataset),
            "decoded": int((self.status == DECODED).sum()),
            "failed": len(self.failures),
            "decoded_this_run": self.decoded_now,
            "images_per_second": self.images_per_second,
            "preprocess": self.preprocess.to_dict(),
        }


class CropRows:
    """Rows `rows` of a crops array, indexed like an array of its own (a subset's view of a parent cache)."""

    def __init__(self, base, rows):
        self.base = base
        self.rows = np.asarray(rows, np.int64)

    @property
    def shape(self) -> tuple:
        return (len(self.rows),) + tuple(self.base.shape[1:])

    @property
    def dtype(self):
        return self.base.dtype

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key):
        return self.base[self.rows[key]]

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.base[self.rows], dtype=dtype)


def cache_key(dataset: Dataset, preprocess: Preprocess) -> str:
    return hash_json({"format": CACHE_FORMAT, "dataset": dataset.fingerprint(), "pre": preprocess.cache_key_fields()})


def cache_folder(dataset: Dataset, preprocess: str | Preprocess = "tf-lite", workspace=None) -> Path:
    """Where the decode cache of (dataset, preprocess) lives (whether or not it exists yet)."""
    spec = get_preprocess(preprocess)
    return workspace_dir(workspace) / "decode_cache" / f"{_safe_name(dataset.name)}-{cache_key(dataset, spec)}"


def estimate_cache_bytes(count: int, preprocess: str | Preprocess = "tf-lite") -> int:
    """Bytes of crops for `count` images: count × crop × crop × 3 (uint8). 50,000 × 224² × 3 ≈ 7.5 GB."""
    spec = get_preprocess(preprocess)
    return int(count) * spec.crop * spec.crop * 3


def format_bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1000
    return f"{size:.2f} TB"


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:40] or "dataset"


def default_workers() -> int:
    """CPU cores this process may use (respects taskset/cgroup affinity where the OS reports it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


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
) -> DecodeCache:
    """Open the decode cache for (dataset, preprocess), decoding whatever is still pending.

    A second call with the same inputs decodes nothing. `stop_after` ends early after that many chunks (used to
    simulate interruption in tests); the next call resumes. `workers` decode in parallel, as threads or processes
    (`pool`: "threads", "processes" or "auto" = DEFAULT_POOL). Before decoding, the bytes still to write are
    compared with the free space of the workspace; `check_disk=False` skips the refusal (the estimate is still
    printed).
    """
    from trtlab.core.progress import progress_bar

    spec = get_preprocess(preprocess)
    pool = DEFAULT_POOL if pool == "auto" else pool
    if pool not in POOLS:
        raise ValueError(f"pool={pool!r}: choose 'threads', 'processes' or 'auto'")
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be at least 1")
    folder = cache_folder(dataset, spec, workspace)
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
    count = len(dataset)
    shape = (count, spec.crop, spec.crop, 3)
    row_bytes = spec.crop * spec.crop * 3
    crops_path, status_path, failures_path = folder / "crops.u8", folder / "status.npy", folder / "failures.json"

    status, failures = _load_state(folder, count, row_bytes)
    # A kill between saving status and failures can leave a FAILED row without its reason: decode it again.
    status[(status == FAILED) & ~np.isin(np.arange(count), list(failures))] = PENDING
    failures = {i: r for i, r in failures.items() if i < count and status[i] == FAILED}
    pending = np.flatnonzero(status == PENDING)

    if len(pending):
        _check_disk_space(folder, dataset.name, count, len(pending), row_bytes, check_disk, progress)
    if not crops_path.exists():
        with atomic_path(crops_path) as tmp:
            # Sparse file of the final size: rows can then be filled in any order and resumed.
            with open(tmp, "wb") as fh:
                fh.truncate(count * row_bytes)
    if not (folder / "meta.json").exists():
        atomic_write_json(folder / "meta.json", {
            "format": CACHE_FORMAT, "dataset": dataset.name, "images": count, "shape": list(shape),
            "preprocess": spec.to_dict(), "fingerprint": dataset.fingerprint(),
        })

    decoded_now, seconds = 0, 0.0
    workers = max(1, int(workers or default_workers()))
    if len(pending):
        started = time.perf_counter()
        bar = progress_bar(total=len(pending), desc=f"decode {dataset.name}", unit="img", enabled=progress)
        fd = os.open(crops_path, os.O_RDWR)
        try:
            with writing(crops_path):  # a full disk mid-decode names the crops file, not a bare errno
                with _make_executor(pool, workers, str(crops_path), row_bytes, spec) as executor:
                    task = _decode_rows_in_thread if pool == "threads" or workers == 1 else _decode_rows_in_process
                    extra = (fd, row_bytes, spec) if task is _decode_rows_in_thread else ()

                    def submit(chunk: np.ndarray):
                        pieces = np.array_split(chunk, min(workers, len(chunk)))
                        items = [[(int(i), dataset.paths[i]) for i in piece] for piece in pieces if len(piece)]
                        return chunk, [executor.submit(task, piece, *extra) for piece in items]

                    def commit(chunk: np.ndarray, futures: list[Future]) -> int:
                        done = 0
                        for future in futures:
                            for index, error in future.result():
                                if error is None:
                                    status[index] = DECODED
                                    done += 1
                                else:
                                    status[index] = FAILED
                                    failures[index] = error
                        # Data first, then the status that vouches for it: a crash in between only repeats work.
                        _fdatasync(fd)
                        atomic_write_json(failures_path, {str(k): v for k, v in sorted(failures.items())})
                        _save_status(status_path, status)
                        bar.update(len(chunk))
                        return done

                    starts = range(0, len(pending), chunk_size)
                    if stop_after is not None:
                        starts = starts[: max(0, stop_after)]
                    in_flight: deque = deque()
                    for start in starts:
                        # Two chunks in flight keep every worker busy while the previous chunk is committed.
                        in_flight.append(submit(pending[start : start + chunk_size]))
                        if len(in_flight) >= 2:
                            decoded_now += commit(*in_flight.popleft())
                    while in_flight:
                        decoded_now += commit(*in_flight.popleft())
        finally:
            os.close(fd)
            bar.close()
        seconds = time.perf_counter() - started
        if progress:
            processed = int(bar.n)
            rate = processed / seconds if seconds > 0 else float("nan")
            log.info("decoded %s image(s) in %.1f s: %.1f images/s with %d %s (%.1f images/s per worker)",
                     f"{processed:,}", seconds, rate, workers, pool if workers > 1 else "worker", rate / workers)
        if failures and progress:
            log.warning("%d image(s) could not be decoded and are skipped (listed in %s):\n%s", len(failures),
                        failures_path, "\n".join(f"  - {failures[i]}" for i in sorted(failures)[:10]))
    readonly = np.memmap(crops_path, np.uint8, "r", shape=shape) if count else np.zeros(shape, np.uint8)
    return DecodeCache(folder, dataset, spec, readonly, status, failures, decoded_now, seconds, pool, workers)


def _check_disk_space(folder: Path, name: str, count: int, pending: int, row_bytes: int, check: bool,
                      progress: bool) -> None:
    total, needed = count * row_bytes, pending * row_bytes
    free = shutil.disk_usage(folder).free
    if progress:
        still = "" if pending == count else f", {format_bytes(needed)} of it still to write"
        log.info("decode cache for %r: %s images × %s bytes = %s%s; %s free in %s", name, f"{count:,}",
                 f"{row_bytes:,}", format_bytes(total), still, format_bytes(free), folder.parent)
    if needed > free:
        what = (f"the decode cache for {name!r} needs {format_bytes(needed)} more but only {format_bytes(free)} "
                f"is free in {folder.parent}")
        # Only flags that exist are named: `prep` has --ignore-disk-check, eval/calibrate do not.
        fix = ("free some space, choose another workspace (--workspace or $TRTLAB_WORKSPACE), or decode a smaller "
               "set (`python -m trtlab prep --decode evaluation --eval-per-class N`); to try anyway: "
               "build_decode_cache(..., check_disk=False) or `prep --ignore-disk-check`")
        if check:
            raise InsufficientDiskSpace(what, fix)
        log.warning("%s (check_disk=False: trying anyway)", what)


def _load_state(folder: Path, count: int, row_bytes: int) -> tuple[np.ndarray, dict[int, str]]:
    """Status and failures of an existing cache, each checked; a damaged file is set aside (named in a warning)
    and what it vouched for is decoded again. A crops file of the wrong size (truncated, replaced) is set aside
    too, and with it every row's status. Rows of the right size hold whatever was written: their content is
    vouched for by status.npy, which is written only after the rows were synced."""
    crops_path, status_path, failures_path = folder / "crops.u8", folder / "status.npy", folder / "failures.json"
    expected = count * row_bytes
    if crops_path.exists() and crops_path.stat().st_size != expected:
        set_aside(crops_path, f"{crops_path.stat().st_size:,} bytes where {count:,} × {row_bytes:,} = "
                              f"{expected:,} were expected")
        if status_path.exists():
            set_aside(status_path, f"it describes the set-aside {crops_path.name}")
    meta = read_json_checked(folder / "meta.json")
    if meta is not None and (meta.get("images") != count):
        set_aside(folder / "meta.json", f"it describes {meta.get('images')} images, this dataset has {count}")

    def load_status(path):
        with open(path, "rb") as fh:
            return np.load(fh, allow_pickle=False)

    def status_ok(status):
        if status.shape != (count,) or status.dtype != np.int8:
            return f"shape {status.shape} {status.dtype}, expected ({count},) int8"
        if not np.isin(status, (PENDING, DECODED, FAILED)).all():
            return "values other than pending/decoded/failed"
        return None

    status = read_checked(status_path, load_status, status_ok) if crops_path.exists() else None
    if status is None:
        status = np.zeros(count, np.int8)

    def failures_ok(raw):
        return None if all(str(k).isdigit() and isinstance(v, str) for k, v in raw.items()) else "unexpected entries"

    raw = read_checked(failures_path, lambda p: _json_object(p), failures_ok, missing={})
    return status, {int(k): v for k, v in raw.items()}


def _json_object(path: Path) -> dict:
    import json

    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, found {type(value).__name__}")
    return value


class _InlineExecutor:
    """Runs tasks in the calling thread (workers=1): no pool start-up, same code path."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, *args):
        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # re-raised by future.result() in commit()
            future.set_exception(exc)
        return future


def _make_executor(pool: str, workers: int, crops_path: str, row_bytes: int, spec: Preprocess):
    import cv2

    cv2.setNumThreads(1)  # parallelism comes from our workers; cv2's own threads would oversubscribe the cores
    if workers == 1:
        return _InlineExecutor()
    if pool == "threads":
        # Threads suffice for the heavy part: cv2.imdecode, cv2.resize and os.pwrite release the GIL.
        return ThreadPoolExecutor(workers, thread_name_prefix="trtlab-decode")
    import multiprocessing

    # forkserver/spawn, never fork: forking a process that runs threads (Jupyter, tqdm) can deadlock.
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method),
                               initializer=_process_worker_init, initargs=(crops_path, row_bytes, spec))


def _decode_rows(items: list[tuple[int, str]], fd: int, row_bytes: int, spec: Preprocess) -> list:
    """Decode each (index, path) and write its crop at row `index` of the crops file; return (index, error)."""
    results = []
    for index, path in items:
        try:
            crop = decode_image(path, spec)
        except ImageDecodeError as exc:
            results.append((index, str(exc)))
            continue
        except Exception as exc:  # an odd file must never stop a 50,000-image decode; its reason is kept
            results.append((index, f"{path}: {type(exc).__name__}: {exc}"))
            continue
        data = memoryview(np.ascontiguousarray(crop)).cast("B")
        if len(data) != row_bytes:
            results.append((index, f"{path}: crop has {len(data)} bytes, expected {row_bytes}"))
            continue
        offset, written = index * row_bytes, 0
        while written < row_bytes:
            written += os.pwrite(fd, data[written:], offset + written)
        results.append((index, None))
    return results


def _decode_rows_in_thread(items, fd: int, row_bytes: int, spec: Preprocess) -> list:
    return _decode_rows(items, fd, row_bytes, spec)


_WORKER: dict = {}


def _process_worker_init(crops_path: str, row_bytes: int, spec: Preprocess) -> None:
    import cv2

    cv2.setNumThreads(1)
    _WORKER.update(fd=os.open(crops_path, os.O_RDWR), row_bytes=row_bytes, spec=spec)


def _decode_rows_in_process(items) -> list:
    return _decode_rows(items, _WORKER["fd"], _WORKER["row_bytes"], _WORKER["spec"])


def _fdatasync(fd: int) -> None:
    # fdatasync flushes the file's dirty pages whichever descriptor (thread or worker process) wrote them.
    getattr(os, "fdatasync", os.fsync)(fd)


def _save_status(path: Path, status: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy") as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, status)
