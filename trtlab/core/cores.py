"""The CPU cores this process may use: taskset/cgroup affinity where the OS reports it (a Kaggle kernel's 4 of a
bigger host), else the machine's count. The one place that asks (decode workers, crc checkers, row chunks), and
`pinned_cores`, which narrows them for a measurement (bench/bench_decode.py)."""
from __future__ import annotations

import contextlib
import os


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this OS (macOS)
        return os.cpu_count() or 1


@contextlib.contextmanager
def pinned_cores(count: int):
    """The calling thread — and the threads it starts inside the block, which inherit its affinity — pinned to the
    first `count` of the cores it may use (os.sched_setaffinity; Linux); yields those cores, and restores the
    earlier set after. ValueError where fewer than `count` are usable or the OS has no affinity."""
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("this OS cannot pin threads to cores (no os.sched_setaffinity)")
    before = sorted(os.sched_getaffinity(0))
    if not 1 <= count <= len(before):
        raise ValueError(f"{count} core(s) asked for, {len(before)} usable here")
    os.sched_setaffinity(0, before[:count])
    try:
        yield before[:count]
    finally:
        os.sched_setaffinity(0, before)
