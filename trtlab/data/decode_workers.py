"""The decode cache's workers: decode image files into crop rows of the crops file, in threads or processes.

Each worker reads a file once, checks that its bytes are the ones the dataset's identity was made of (content
hash), decodes and crops them, writes the crop at its row with pwrite and returns the row's checksum (crc32), which
the cache stores so that every later read can be verified.
"""
from __future__ import annotations

import os
import zlib
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from trtlab.data.file_hashes import content_hash
from trtlab.data.preprocess import ImageDecodeError, Preprocess, decode_image_data, read_image_file

POOLS = ("threads", "processes")
# bench/bench_decode.py on real JPEGs (images/s, 16-core host): threads 321/541/1063/1651 vs processes
# 297/603/925/1189 at 2/4/8/16 workers; on 2 cores 508 vs 482. cv2 releases the GIL in imdecode/resize, threads
# start instantly and need no pickling, so they are the default; processes stay available as an option.
DEFAULT_POOL = "threads"


@dataclass
class RowResult:
    index: int
    error: str | None = None  # why the file cannot be decoded (the row stays FAILED)
    checksum: int = 0  # crc32 of the crop row written
    changed: bool = False  # the file's bytes are not the ones the dataset identity names: leave the row pending
    fallback: str | None = None  # decoder 'nvjpeg': why OpenCV decoded this row instead (data.decode_nvjpeg)


def row_checksum(row) -> int:
    """crc32 of one crop row's bytes (zlib releases the GIL: verification runs beside inference)."""
    return zlib.crc32(memoryview(np.ascontiguousarray(row)).cast("B"))


def decode_rows(items: list[tuple[int, str, str]], fd: int, row_bytes: int, spec: Preprocess) -> list[RowResult]:
    """Decode each (index, path, expected content hash) and write its crop at row `index` of the crops file."""
    results = []
    for index, path, expected in items:
        data = read_row_bytes(index, path, expected)
        results.append(data if isinstance(data, RowResult) else decode_row(index, path, data, fd, row_bytes, spec))
    return results


def read_row_bytes(index: int, path: str, expected: str | None) -> bytes | RowResult:
    """The file's bytes, or the row's final RowResult: unreadable (failed) or not the bytes the dataset identity
    names (`expected` content hash: changed)."""
    try:
        data = read_image_file(path)
    except Exception as exc:  # an odd file must never stop a 50,000-image decode; its reason is kept
        return row_failure(index, path, exc)
    return RowResult(index, changed=True) if expected and content_hash(data) != expected else data


def decode_row(index: int, path: str, data: bytes, fd: int, row_bytes: int, spec: Preprocess) -> RowResult:
    """OpenCV's crop of `data` written at row `index`, or why it cannot be decoded."""
    try:
        crop = decode_image_data(data, path, spec)
    except Exception as exc:
        return row_failure(index, path, exc)
    return write_row(fd, row_bytes, index, path, crop)


def row_failure(index: int, path: str, exc: Exception) -> RowResult:
    """A failed row's RowResult: an ImageDecodeError's own reason, any other error named with its file."""
    if isinstance(exc, ImageDecodeError):
        return RowResult(index, str(exc))
    return RowResult(index, f"{path}: {type(exc).__name__}: {exc}")


def write_row(fd: int, row_bytes: int, index: int, path: str, crop: np.ndarray) -> RowResult:
    """Write `crop` at row `index` of the crops file; its RowResult (the row's crc32, or why it is the wrong size)."""
    data = memoryview(np.ascontiguousarray(crop)).cast("B")
    if len(data) != row_bytes:
        return RowResult(index, f"{path}: crop has {len(data)} bytes, expected {row_bytes}")
    offset, written = index * row_bytes, 0
    while written < row_bytes:
        written += os.pwrite(fd, data[written:], offset + written)
    return RowResult(index, checksum=zlib.crc32(data))


class InlineExecutor:
    """Runs tasks in the calling thread (workers=1): no pool start-up, same code path."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, *args):
        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # re-raised by future.result() when the chunk is committed
            future.set_exception(exc)
        return future


def make_executor(pool: str, workers: int, crops_path: str, row_bytes: int, spec: Preprocess):
    import cv2

    cv2.setNumThreads(1)  # parallelism comes from our workers; cv2's own threads would oversubscribe the cores
    if workers == 1:
        return InlineExecutor()
    if pool == "threads":
        # Threads suffice for the heavy part: cv2.imdecode, cv2.resize and os.pwrite release the GIL.
        return ThreadPoolExecutor(workers, thread_name_prefix="trtlab-decode")
    import multiprocessing

    # forkserver/spawn, never fork: forking a process that runs threads (Jupyter, tqdm) can deadlock.
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method),
                               initializer=_process_worker_init, initargs=(crops_path, row_bytes, spec))


def task_for(pool: str, workers: int, fd: int, row_bytes: int, spec: Preprocess):
    """(function, extra arguments) that decode a list of items in this pool."""
    if pool == "threads" or workers == 1:
        return decode_rows, (fd, row_bytes, spec)
    return _decode_rows_in_process, ()


_WORKER: dict = {}


def _process_worker_init(crops_path: str, row_bytes: int, spec: Preprocess) -> None:
    import cv2

    cv2.setNumThreads(1)
    _WORKER.update(fd=os.open(crops_path, os.O_RDWR), row_bytes=row_bytes, spec=spec)


def _decode_rows_in_process(items) -> list[RowResult]:
    return decode_rows(items, _WORKER["fd"], _WORKER["row_bytes"], _WORKER["spec"])
