"""The CPU cores this process may use: taskset/cgroup affinity where the OS reports it (a Kaggle kernel's 4 of a
bigger host), else the machine's count. The one place that asks (decode workers, crc checkers, row chunks)."""
from __future__ import annotations

import os


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this OS (macOS)
        return os.cpu_count() or 1
