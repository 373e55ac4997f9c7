"""The one progress-bar factory: every long loop in trtlab gets its bar here.

`quiet()` (the CLI's -q) hides every bar for the duration of a command without touching tqdm itself. In a
notebook the bars are tqdm's widgets; `finish(bar)` closes a bar that stopped early on purpose (a search that
reached its target) as complete, so it ends green, not red.
"""
from __future__ import annotations

import collections
import contextlib
import threading
import time
import weakref

_state = threading.local()
_quiet_depth = 0
_bars: "weakref.WeakSet" = weakref.WeakSet()  # the bars made here: `close_open` names the one interrupted
_cut_short: "collections.deque" = collections.deque(maxlen=4)  # bars closed short of their total, newest last
RECENT_S = 2.0


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

    return _register(tqdm(total=total, desc=desc, unit=unit, disable=not enabled or is_quiet(), **options), desc)


def progress_iter(iterable, desc: str = "", unit: str = "it", enabled: bool = True, total=None, **options):
    """`iterable` wrapped in a progress bar (see `progress_bar`)."""
    from tqdm.auto import tqdm

    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    return _register(tqdm(iterable, total=total, desc=desc, unit=unit, disable=not enabled or is_quiet(), **options),
                     desc)


def _register(bar, desc: str):
    bar.trtlab_desc = desc  # tqdm's `desc` may be changed later; the activity named at Ctrl-C is the first one
    if not bar.disable:
        # Note when it closes: a loop left by an exception closes its bar while the frame unwinds, before main sees
        # the exception. Through a weak reference and the class's close, so the bar holds no cycle to itself and is
        # still closed as soon as it is dropped.
        this, close = weakref.ref(bar), type(bar).close

        def closing():
            target = this()
            if target is not None:
                if not target.disable and target.total and target.n < target.total:
                    target.trtlab_closed_at = time.monotonic()
                    _cut_short.append(target)  # kept (closed) for `close_open`, though its loop's frame is gone
                close(target)

        bar.close = closing
    _bars.add(bar)
    return bar


def close_open() -> str:
    """At Ctrl-C or an error: close the bars still open (so the next line starts on a line of its own, not inside a
    bar) and say what was running — 'infer fp32 (64 of 600 img)': the newest bar still open, or closed short of its
    total in the last RECENT_S seconds (a loop an exception left); '' when there is none (or bars were hidden)."""
    now = time.monotonic()
    open_bars = [bar for bar in list(_bars) if not getattr(bar, "disable", True)]
    cut_short = [bar for bar in _cut_short if now - bar.trtlab_closed_at < RECENT_S]
    doing = ""
    for bar in sorted(open_bars + cut_short, key=lambda b: getattr(b, "start_t", 0) or 0):
        total = f" of {bar.total:,}" if bar.total else ""
        what = (bar.trtlab_desc or "").rstrip(": ") or "a loop"
        doing = f"{what} ({bar.n:,}{total} {bar.unit})"
    for bar in open_bars:
        with contextlib.suppress(Exception):
            bar.close()
    _bars.clear()
    _cut_short.clear()
    return doing


def finish(bar) -> None:
    """Close `bar` as complete even when the loop stopped before `total` (early success, not a failure)."""
    if getattr(bar, "disable", False):
        bar.close()
        return
    bar.total = bar.n
    # A notebook bar is an ipywidgets progress bar whose maximum was fixed when drawn (tqdm.notebook sets it only in
    # reset(), which also restarts the clock): set it too, so "1/1" shows on a full bar, not on one scaled to 51.
    widgets = getattr(getattr(bar, "container", None), "children", ())
    if len(widgets) == 3 and hasattr(widgets[1], "max"):
        widgets[1].max = max(bar.n, 1)
        widgets[1].value = bar.n
    bar.refresh()
    bar.close()
