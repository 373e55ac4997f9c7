"""What an image file holds: a content hash (blake2b, 128 bits) of its bytes, computed once and remembered.

A dataset's identity (`Dataset.fingerprint`) is made of these hashes, so results, splits and decode caches follow
the files' content: a same-size replacement that keeps its modification time (`cp -p`, `rsync -a`, unzip) is a
new image, and a file that was only touched or copied is still the same one.

Hashing 50,000 files on every run would cost a full read of the set, so each hash is remembered with the file's
stat — size, mtime, ctime, inode, device — in memory and in `<default workspace>/file_hashes.sqlite`, and a file
is read again only when that stat changed. The ctime is what makes this safe: no tool can set it, and every write
or metadata change moves it, `cp -p` onto an existing file (same inode, same size, mtime put back) included. A
hash taken within RACY_NS of the file's last change is not trusted on a later look-up ("racy git": a write in the
same clock tick would leave the stat unchanged) and is taken again.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trtlab.core.log import warn_once
from trtlab.core.workspace import path_text

log = logging.getLogger(__name__)

DIGEST_BYTES = 16
MISSING = "missing"  # the "hash" of a file that cannot be read: still part of the identity, so its return shows
RACY_NS = 2_000_000_000  # coarse file-system clocks (and FAT's 2 s) cannot tell changes this close apart
STORE_NAME = "file_hashes.sqlite"
_READ_CHUNK = 1 << 20
# Progress bar and threads only where they pay: hashing is I/O-bound; cv2-free, so threads share the work well.
_BAR_FROM, _THREADS = 200, 8
_CHUNK = 64  # files per hashing task


def content_hash(data: bytes) -> str:
    """The content hash of bytes already in memory (the decode cache hashes what it decodes)."""
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def hash_file(path: str) -> str:
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    with open(path, "rb") as fh:
        while block := fh.read(_READ_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def stat_key(stat: os.stat_result) -> tuple[int, int, int, int, int]:
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev


class FileHashes:
    """Content hashes of files by absolute path, re-read only when a file's stat changed (see the module doc)."""

    def __init__(self, store: Path | None):
        self.store = store
        self._memo: dict[str, tuple[tuple, str, int]] = {}  # path → (stat key, hash, hashed at, ns)
        self._lock = threading.Lock()
        self.hashed = 0  # files read in this process (for tests and measurements)

    def hashes(self, paths: list[str], progress: bool = True, desc: str = "hash") -> list[str]:
        """The content hash of each path (MISSING where it cannot be read), reading only files not known under
        their current stat."""
        paths = [os.path.abspath(p) for p in paths]
        stats = [_stat(p) for p in paths]
        known = self._known(paths, stats)
        todo = [i for i, h in enumerate(known) if h is None and stats[i] is not None]
        if todo:
            for i, value in zip(todo, self._hash_all([paths[i] for i in todo], progress, desc)):
                known[i] = value
            self._save([(paths[i], stats[i], known[i]) for i in todo if known[i] != MISSING])
        return [MISSING if h is None else h for h in known]

    def remember(self, path: str, stat: os.stat_result, value: str) -> None:
        """Record a hash computed elsewhere from the bytes of `path` read under `stat`."""
        self._memo[os.path.abspath(path)] = (stat_key(stat), value, time.time_ns())

    def forget(self) -> None:
        """Drop the in-memory hashes (the store still answers; tests use this to act as a new process)."""
        self._memo.clear()

    def _known(self, paths: list[str], stats: list) -> list[str | None]:
        now = time.time_ns()
        found: list[str | None] = [None] * len(paths)
        missing = []
        for i, (path, stat) in enumerate(zip(paths, stats)):
            entry = self._memo.get(path)
            if stat is not None and entry is not None and _trusted(entry, stat, now):
                found[i] = entry[1]
            elif stat is not None:
                missing.append(i)
        if missing and self.store is not None:
            stored = self._load([paths[i] for i in missing])
            for i in missing:
                entry = stored.get(paths[i])
                if entry is not None and _trusted(entry, stats[i], now):
                    self._memo[paths[i]] = entry
                    found[i] = entry[1]
        return found

    def _hash_all(self, paths: list[str], progress: bool, desc: str) -> list[str]:
        from trtlab.core.progress import progress_bar

        bar = progress_bar(total=len(paths), desc=desc, unit="file", enabled=progress and len(paths) >= _BAR_FROM)

        def one(path: str) -> tuple[str, tuple | None, int]:
            try:
                before = os.stat(path)
                return hash_file(path), stat_key(before), time.time_ns()
            except OSError:
                return MISSING, None, 0

        def some(chunk: list[str]) -> list[str]:
            """A chunk of files per task: one lock, one bar update and one future per _CHUNK files, not per file
            (their overhead was most of the work for 50,000 JPEGs of ~70 KB)."""
            found = [one(path) for path in chunk]
            with self._lock:
                for path, (value, key, hashed_at) in zip(chunk, found):
                    if key is not None:
                        self._memo[path] = (key, value, hashed_at)
                self.hashed += len(chunk)
                bar.update(len(chunk))
            return [value for value, _, _ in found]

        try:
            if len(paths) < 16:
                return some(paths)
            chunks = [paths[k:k + _CHUNK] for k in range(0, len(paths), _CHUNK)]
            with ThreadPoolExecutor(min(_THREADS, os.cpu_count() or 1), thread_name_prefix="trtlab-hash") as pool:
                return [value for values in pool.map(some, chunks) for value in values]
        finally:
            bar.close()

    # -- the store (a cache: any failure to use it costs time, never correctness) ------------------------------
    def _connect(self) -> sqlite3.Connection | None:
        try:
            self.store.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.store, timeout=30)
            db.execute("CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, "
                       "ctime_ns INTEGER, ino INTEGER, dev INTEGER, hash TEXT, hashed_ns INTEGER)")
            return db
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc) or "malformed" in str(exc):
                from trtlab.core.workspace import set_aside

                set_aside(self.store, str(exc))
                return None
            self._store_failed(exc)
        except OSError as exc:
            self._store_failed(exc)
        return None

    def _load(self, paths: list[str]) -> dict[str, tuple[tuple, str, int]]:
        db = self._connect()
        if db is None:
            return {}
        rows = {}
        try:
            by_key = {path_text(p): p for p in paths}  # a name that is not UTF-8 is stored as its \\xNN text
            keys = list(by_key)
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                query = f"SELECT * FROM files WHERE path IN ({','.join('?' * len(chunk))})"
                for path, *key, value, hashed in db.execute(query, chunk):
                    rows[by_key.get(path, path)] = (tuple(key), value, hashed)
        except sqlite3.DatabaseError as exc:
            self._store_failed(exc)
        finally:
            db.close()
        return rows

    def _save(self, entries: list[tuple[str, os.stat_result, str]]) -> None:
        if not entries or self.store is None:
            return
        db = self._connect()
        if db is None:
            return
        try:
            with db:
                db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                               [(path_text(p), *self._memo[p][0], v, self._memo[p][2]) for p, _, v in entries
                                if p in self._memo])
        except sqlite3.DatabaseError as exc:
            self._store_failed(exc)
        finally:
            db.close()

    def _store_failed(self, exc: Exception) -> None:
        from trtlab.data.disk import describe_disk

        warn_once(log, ("file-hash-store", str(self.store)), "cannot use %s (%s; %s): file hashes are kept for this "
                  "process only and taken again by the next one", self.store, exc, describe_disk(self.store))


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _trusted(entry: tuple[tuple, str, int], stat: os.stat_result, now: int) -> bool:
    key, _, hashed_ns = entry
    return tuple(key) == stat_key(stat) and stat.st_ctime_ns < hashed_ns - RACY_NS


_STORES: dict[str, FileHashes] = {}


def file_hashes() -> FileHashes:
    """The process's FileHashes, remembered in the default workspace's store."""
    from trtlab.core.workspace import default_workspace

    folder, _ = default_workspace()
    key = os.path.abspath(folder)
    if key not in _STORES:
        _STORES[key] = FileHashes(Path(key) / STORE_NAME)
    return _STORES[key]
