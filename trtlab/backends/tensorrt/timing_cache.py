"""TensorRT's timing cache file, shared by every build of a workspace and locked while it is read or written.

Two kernels (two notebooks, a notebook and the CLI) may build engines at once. The file is read under the lock
before a build; after it, the lock is taken again, entries another build wrote in between are merged in
(ITimingCache.combine, as Polygraphy's save_timing_cache does) and the result is written atomically. The builds
themselves run outside the lock.
"""
from __future__ import annotations

from pathlib import Path

from trtlab.backends.tensorrt.loader import log

LOCK_TIMEOUT_S = 300  # a build of another kernel holds the lock only while it reads or writes the file


def _lock(path: Path):
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S)


def load_timing_cache(config, path: Path) -> bytes:
    """Give `config` the timing cache stored at `path` (a new one when there is none); returns the bytes read."""
    path = Path(path)
    with _lock(path):
        previous = path.read_bytes() if path.is_file() else b""
    config.set_timing_cache(config.create_timing_cache(previous), False)
    return previous


def save_timing_cache(config, path: Path, read_before: bytes = b"") -> None:
    """Write `config`'s timing cache to `path`, merged with what other builds wrote since `read_before` was read
    (load_timing_cache's return value)."""
    from trtlab.core.workspace import atomic_write_bytes

    path = Path(path)
    cache = config.get_timing_cache()
    with _lock(path):
        on_disk = path.read_bytes() if path.is_file() else b""
        if on_disk and on_disk != read_before:
            if not cache.combine(config.create_timing_cache(on_disk), False):
                log.info(f"timing cache {path.name}: entries written meanwhile by another TensorRT version or GPU "
                         f"were not merged (TensorRT refused them); this build's cache replaces them")
        atomic_write_bytes(path, bytes(memoryview(cache.serialize())))
