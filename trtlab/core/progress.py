"""The one progress-bar factory: every long loop in trtlab gets its bar here.

`quiet()` (the CLI's -q) hides every bar for the duration of a command without touching tqdm itself. In a
notebook the bars are tqdm's widgets; `finish(bar)` closes a bar that stopped early on purpose (a search that
reached its target) as complete, so it ends green, not red.
"""
from __future__ import annotations

import contextlib
import threading

_state = threading.local()
_quiet_depth = 0


def is_quiet() -> bool:
    return _quiet_depth > 0


@contextlib.contextmanager
def quiet(enabled: bool = True):
    """No progress bars inside the block (nests; restored after)."""
    global _quiet_depth
    if not enabled:
        yield
        return
    _quiet_depth += 1
    try:
        yield
    finally:
        _quiet_depth -= 1


def progress_bar(total=None, desc: str = "", unit: str = "it", enabled: bool = True, **options):
    """A tqdm bar (notebook widget where one renders), hidden when `enabled` is False or inside `quiet()`."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled or is_quiet(), **options)


def progress_iter(iterable, desc: str = "", unit: str = "it", enabled: bool = True, total=None, **options):
    """`iterable` wrapped in a progress bar (see `progress_bar`)."""
    from tqdm.auto import tqdm

    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=not enabled or is_quiet(), **options)


def finish(bar) -> None:
    """Close `bar` as complete even when the loop stopped before `total` (early success, not a failure)."""
    if getattr(bar, "disable", False):
        bar.close()
        return
    bar.total = bar.n
    bar.refresh()
    bar.close()
