"""The decode cache's files and the checks on them: crops.u8 (uint8 rows), status.npy (pending/decoded/failed per
row), checksums.npy (crc32 of each decoded row), failures.json (why a row failed) and meta.json.

Every row read is verified against its checksum the first time this process reads it while the crops file is
unchanged (`CheckedCrops`; rows this process decoded itself too), so a damaged crops file can never
feed a model garbage: rows that do not match are decoded again from their files. A later read of a verified row,
in this or another opening of the same unchanged file in this process (an A/B run again with another recipe), is
not checked again; `verify_all()` checks every row on demand. When a cache is opened, a sample of rows is verified
first; if any fails, all rows are, and a file that is mostly garbage is set aside and rebuilt. `read_into` reads
rows straight into a caller's buffer (a pinned ring slot of the torch backend) and verifies them there: one read.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtlab.core.workspace import atomic_path, load_npy, read_checked, read_json_checked, set_aside
from trtlab.data.decode_workers import row_checksum
from trtlab.data.disk import write_json, writing_to

PENDING, DECODED, FAILED = 0, 1, 2
SAMPLE_ROWS = 32  # rows verified each time a cache is opened (~5 MB read): whole-file damage shows at once
log = logging.getLogger(__name__)


@dataclass
class CacheFiles:
    """Where a decode cache's files are, and its size."""

    folder: Path
    count: int
    row_bytes: int

    @property
    def crops(self) -> Path:
        return self.folder / "crops.u8"

    @property
    def status(self) -> Path:
        return self.folder / "status.npy"

    @property
    def checksums(self) -> Path:
        return self.folder / "checksums.npy"

    @property
    def failures(self) -> Path:
        return self.folder / "failures.json"

    @property
    def meta(self) -> Path:
        return self.folder / "meta.json"


def load_state(files: CacheFiles) -> tuple[np.ndarray, dict[int, str], np.ndarray]:
    """Status, failures and checksums of an existing cache, each checked; a damaged file is set aside (named in a
    warning) and what it vouched for is decoded again. A crops file of the wrong size (truncated, replaced) is set
    aside too, and with it every row's status. A decoded row without a checksum is decoded again (it could not be
    verified)."""
    count = files.count
    expected = count * files.row_bytes
    if files.crops.exists() and files.crops.stat().st_size != expected:
        set_aside(files.crops, f"{files.crops.stat().st_size:,} bytes where {count:,} × {files.row_bytes:,} = "
                               f"{expected:,} were expected")
        if files.status.exists():
            set_aside(files.status, f"it describes the set-aside {files.crops.name}")
    meta = read_json_checked(files.meta)
    if meta is not None and (meta.get("images") != count):
        set_aside(files.meta, f"it describes {meta.get('images')} images, this dataset has {count}")
    exists = files.crops.exists()
    status = read_checked(files.status, load_npy, _array_check((count,), np.int8, (PENDING, DECODED, FAILED))) \
        if exists else None
    status = np.zeros(count, np.int8) if status is None else status
    checksums = read_checked(files.checksums, load_npy, _array_check((count,), np.uint32)) if exists else None
    if checksums is None:
        checksums = np.zeros(count, np.uint32)
        status[status == DECODED] = PENDING
    raw = read_checked(files.failures, _json_object, _failures_check, missing={})
    failures = {int(k): v for k, v in raw.items()}
    # A kill between saving status and failures can leave a FAILED row without its reason: decode it again.
    status[(status == FAILED) & ~np.isin(np.arange(count), list(failures))] = PENDING
    failures = {i: r for i, r in failures.items() if i < count and status[i] == FAILED}
    return status, failures, checksums


def save_state(files: CacheFiles, status: np.ndarray, failures: dict[int, str], checksums: np.ndarray) -> None:
    """Reasons and checksums first, then the status that vouches for them (a kill in between repeats work only)."""
    write_json(files.failures, {str(k): v for k, v in sorted(failures.items())})
    save_npy(files.checksums, checksums)
    save_npy(files.status, status)


def save_npy(path: Path, array: np.ndarray) -> None:
    with writing_to(path), atomic_path(path, suffix=".npy") as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, array)


def _array_check(shape: tuple, dtype, values=None):
    def check(array) -> str | None:
        if array.shape != shape or array.dtype != dtype:
            return f"shape {array.shape} {array.dtype}, expected {shape} {np.dtype(dtype)}"
        if values is not None and not np.isin(array, values).all():
            return "values other than pending/decoded/failed"
        return None
    return check


def _json_object(path: Path) -> dict:
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, found {type(value).__name__}")
    return value


def _failures_check(raw: dict) -> str | None:
    return None if all(str(k).isdigit() and isinstance(v, str) for k, v in raw.items()) else "unexpected entries"


def mismatched_rows(crops, rows: np.ndarray, checksums: np.ndarray, batch: int = 64) -> np.ndarray:
    """The rows among `rows` whose bytes in `crops` do not match their checksums."""
    bad = []
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        data = np.asarray(crops[chunk])
        bad += [int(r) for r, ok in zip(chunk, rows_match(data, checksums[chunk])) if not ok]
    return np.asarray(bad, np.int64)


_CHECKERS: list = []


def rows_match(data: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Whether each row of `data` has its expected crc32 — in a few threads for many rows (zlib releases the GIL),
    so verifying a batch keeps pace with a GPU reading it."""
    if len(data) < 16:
        return np.asarray([row_checksum(row) == e for row, e in zip(data, expected)], bool)
    if not _CHECKERS:
        from concurrent.futures import ThreadPoolExecutor

        from trtlab.core.cores import usable_cores

        _CHECKERS.append(ThreadPoolExecutor(max(1, min(4, usable_cores() - 1)), thread_name_prefix="trtlab-crc"))
    pool = _CHECKERS[0]
    parts = np.array_split(np.arange(len(data)), pool._max_workers)
    sums = pool.map(lambda part: [row_checksum(data[i]) for i in part], [p for p in parts if len(p)])
    return np.asarray([s for chunk in sums for s in chunk], np.uint32) == np.asarray(expected, np.uint32)


def check_on_open(files: CacheFiles, crops, status: np.ndarray, checksums: np.ndarray, paths: list[str],
                  progress: bool) -> None:
    """Verify a sample of the decoded rows; when one fails, verify them all. Rows that fail are marked pending (and
    decoded again by the caller); when most fail, the crops file is garbage: it is set aside, to be rebuilt."""
    decoded = np.flatnonzero(status == DECODED)
    if not len(decoded):
        return
    sample = np.unique(decoded[np.linspace(0, len(decoded) - 1, min(SAMPLE_ROWS, len(decoded))).astype(np.int64)])
    if not len(mismatched_rows(crops, sample, checksums)):
        return
    from trtlab.core.progress import progress_iter

    bad = np.concatenate([mismatched_rows(crops, chunk, checksums) for chunk in progress_iter(
        np.array_split(decoded, max(1, len(decoded) // 256)), desc=f"verify {files.crops.name}", unit="chunk",
        enabled=progress)])
    if len(bad) * 2 > len(decoded):
        status[decoded] = PENDING
        save_npy(files.status, status)  # first: the rows are no longer vouched for, whatever happens next
        set_aside(files.crops, f"{len(bad):,} of its {len(decoded):,} decoded rows do not match their checksums")
        return
    status[bad] = PENDING
    save_npy(files.status, status)
    log.warning("%s is damaged: %d of its %d decoded rows do not match their checksums (%s); they are decoded "
                "again", files.crops, len(bad), len(decoded), _examples(paths, bad))


def _examples(paths: list[str], rows, limit: int = 3) -> str:
    shown = ", ".join(f"row {int(r)} = {paths[int(r)]}" for r in rows[:limit])
    return shown + (f", … ({len(rows) - limit} more)" if len(rows) > limit else "")


_VERIFIED: dict = {}  # crops file state → rows verified in this process (module docstring)


def _file_state(base) -> tuple | None:
    """(path, device, inode, size, mtime) of a memmapped crops file: what a verification holds for."""
    path = getattr(base, "filename", None)
    if not path:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (str(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


class CheckedCrops:
    """The crops array, read-only, each decoded row verified against its checksum the first time it is read in this
    process while the file is unchanged (`verified`: rows known good already, e.g. decoded just now).

    A row that does not match is handed to `repair(rows)` (the cache decodes it again and returns nothing) and
    read again; indexing otherwise behaves like the uint8 N×H×W×3 array it wraps."""

    def __init__(self, base, status: np.ndarray, checksums: np.ndarray, repair, verified=None):
        self.base, self.status, self.checksums, self.repair = base, status, checksums, repair
        state = _file_state(base)
        known = _VERIFIED.get(state) if state is not None else None
        self._verified = known if known is not None and len(known) == len(status) else np.zeros(len(status), bool)
        if state is not None:
            if len(_VERIFIED) > 8:  # caches of earlier runs: forget them
                _VERIFIED.clear()
            _VERIFIED[state] = self._verified
        if verified is not None and len(verified):
            self._verified[np.asarray(verified, np.int64)] = True
        self._lock = threading.Lock()

    @property
    def shape(self) -> tuple:
        return tuple(self.base.shape)

    @property
    def dtype(self):
        return self.base.dtype

    @property
    def ndim(self) -> int:
        return len(self.base.shape)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, key):
        if isinstance(key, tuple):
            return self[key[0]][(slice(None),) * (not np.isscalar(key[0])) + key[1:]]
        if isinstance(key, (int, np.integer)):
            row = int(key) + (len(self) if key < 0 else 0)
            self._verify(np.asarray([row], np.int64))
            return np.asarray(self.base[row])
        rows = np.arange(len(self))[key]
        self._verify(rows)
        return np.asarray(self.base[rows])

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self[:], dtype=dtype)

    def __setitem__(self, key, value):
        # Rows are written only by the cache's decoder (through `base`); a reader changing them would break checksums.
        raise ValueError("the decode cache's crops are read-only — copy the rows (np.array(crops[i])) to change them")

    def read_into(self, rows, out: np.ndarray) -> None:
        """Rows `rows` into `out` (uint8 len(rows)×H×W×3, e.g. a pinned buffer), verified there on their first
        read: the bytes are read once."""
        rows = np.asarray(rows, np.int64)
        np.take(self.base, rows, axis=0, out=out, mode="clip")  # 'clip': no hidden buffer; rows are in range
        todo = (self.status[rows] == DECODED) & ~self._verified[rows]
        if not todo.any():
            return
        positions = np.flatnonzero(todo)
        ok = rows_match(out[positions], self.checksums[rows[positions]])
        if not ok.all():
            self._verify(rows[positions[~ok]])  # repaired, then read again
            np.take(self.base, rows, axis=0, out=out, mode="clip")
        self._verified[rows[positions]] = True

    def verify_all(self, progress: bool = True) -> int:
        """Check every decoded row against its checksum now (repairing what does not match); returns the rows
        checked."""
        from trtlab.core.progress import progress_iter

        decoded = np.flatnonzero(self.status == DECODED)
        self._verified[decoded] = False
        for chunk in progress_iter(np.array_split(decoded, max(1, len(decoded) // 256)), desc="verify crops",
                                   unit="chunk", enabled=progress):
            self._verify(chunk)
        return len(decoded)

    def _verify(self, rows: np.ndarray) -> None:
        todo = rows[(self.status[rows] == DECODED) & ~self._verified[rows]]
        if not len(todo):
            return
        with self._lock:
            bad = mismatched_rows(self.base, todo, self.checksums)
            if len(bad):
                self.repair(bad)
                still = mismatched_rows(self.base, bad, self.checksums)
                if len(still):
                    raise AssertionError(f"rows {still.tolist()} were decoded again but still do not match")
            self._verified[todo] = True


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
        if isinstance(key, tuple):
            return self[key[0]][(slice(None),) * (not np.isscalar(key[0])) + key[1:]]
        return self.base[self.rows[key]]

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.base[self.rows], dtype=dtype)

    def read_into(self, rows, out: np.ndarray) -> None:
        read_rows(self.base, self.rows[np.asarray(rows, np.int64)], out)


def read_rows(crops, rows, out: np.ndarray) -> None:
    """Rows `rows` of a crops array (CheckedCrops, CropRows or any array) into `out`."""
    if hasattr(crops, "read_into"):
        crops.read_into(rows, out)
    else:
        out[...] = np.asarray(crops[np.asarray(rows, np.int64)])
