"""trtlab's messages go through `logging` under the `trtlab` logger (modules use `logging.getLogger(__name__)`).

- CLI: `python -m trtlab ... -q` shows warnings and errors only, `-v` adds debug messages (`setup(verbosity)`).
- Notebooks: importing trtlab inside IPython installs a handler that shows INFO (call `setup()` to change it).
- Library use elsewhere: nothing is configured; the application's logging decides.

`warn_once(logger, key, message)` emits a warning once per process for each cause (`key`), so a message about
the CPU or a cache does not repeat for every variant and every run.
"""
from __future__ import annotations

import logging
import sys
import threading

ROOT = "trtlab"
_HANDLER_FLAG = "_trtlab_handler"
_warned: set = set()
_lock = threading.Lock()


class _Format(logging.Formatter):
    """`[trtlab] message` for info, `[trtlab] warning: message` for warnings (what the CLI printed before)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and record.levelno >= logging.ERROR:
            message += "\n" + self.formatException(record.exc_info)
        if record.levelno >= logging.WARNING:
            return f"[trtlab] {record.levelname.lower()}: {message}"
        return f"[trtlab] {message}"


def setup(verbosity: int = 0, stream=None) -> logging.Logger:
    """Configure the `trtlab` logger: verbosity -1 = warnings only (-q), 0 = info, 1+ = debug (-v).

    Idempotent: one trtlab handler, replaced on each call (its stream follows the current sys.stderr, which
    pytest and notebooks swap)."""
    logger = logging.getLogger(ROOT)
    level = logging.WARNING if verbosity < 0 else logging.INFO if verbosity == 0 else logging.DEBUG
    for handler in list(logger.handlers):
        if getattr(handler, _HANDLER_FLAG, False):
            logger.removeHandler(handler)
    handler = _StderrHandler(stream)
    setattr(handler, _HANDLER_FLAG, True)
    handler.setFormatter(_Format())
    logger.addHandler(handler)
    logger.setLevel(level)
    return logger


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler that writes to whatever sys.stderr is at emit time unless a stream was given."""

    def __init__(self, stream=None):
        super().__init__(stream)
        self._fixed = stream is not None

    def emit(self, record):
        if not self._fixed:
            self.stream = sys.stderr
        super().emit(record)


def warn_once(logger: logging.Logger, key, message: str, *args) -> bool:
    """Log `message` as a warning the first time `key` is seen in this process; True when it was logged."""
    with _lock:
        if key in _warned:
            logger.debug(message, *args)
            return False
        _warned.add(key)
    logger.warning(message, *args)
    return True


def reset_warnings() -> None:
    """Forget which warnings were given (tests; a notebook that wants to see them again)."""
    with _lock:
        _warned.clear()


def _in_ipython() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        return shell.get_ipython() is not None
    except Exception:
        return False


def setup_for_notebook() -> None:
    """Show INFO in a notebook unless the user configured the trtlab logger already."""
    logger = logging.getLogger(ROOT)
    if _in_ipython() and not logger.handlers:
        setup(0)
