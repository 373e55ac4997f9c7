"""trtlab's messages go through `logging` under the `trtlab` logger (modules use `logging.getLogger(__name__)`).

- CLI: `python -m trtlab ... -q` shows warnings and errors only, `-v` adds debug messages (`setup(verbosity)`).
- Notebooks: importing trtlab inside IPython shows INFO as ordinary output (stdout: JupyterLab paints stderr pink,
  and an info line is not an error), after the cell's own result (issue 35: a notebook's output opens with its
  answer, then the evidence — how it ran comes last); warnings and errors go to stderr at once, and an INFO line
  logged with `extra=NOW` (a time estimate before a long step) shows at once too. A `UserError` raised in a cell
  shows as its one line (`error: <what> — <fix>`), its traceback kept in the run log and one `%tb` away.
- Library use elsewhere: nothing is configured; the application's logging decides.
- A run log: once the CLI or a notebook configured logging, every message (with time and level, debug included)
  is also appended to `<workspace>/trtlab.log`, the workspace the run writes its results to.

`warn_once(logger, key, message)` emits a warning once per process (a kernel) for each cause (`key`), so a message
about the CPU or a cache does not repeat for every variant and every run.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time

ROOT = "trtlab"
LOG_FILE = "trtlab.log"
_HANDLER_FLAG = "_trtlab_handler"
#: `log.info(message, extra=NOW)`: shown at once in a notebook, not after the cell's result.
NOW = {"trtlab_now": True}
_warned: set = set()
_lock = threading.Lock()
_file_logging = False


def path_text(path: str | os.PathLike) -> str:
    """A path as text that every UTF-8 writer (JSON, CSV, sqlite, a terminal) accepts: a file name whose bytes are
    not UTF-8 reaches Python with surrogate escapes (os.fsdecode, PEP 383); those bytes are written as `\\xNN`.
    UTF-8 names are returned unchanged. Opening a file always uses the path itself, never this text."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate that is no escaped byte (not from a file name)
            return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Format(logging.Formatter):
    """`[trtlab] message` for info, `[trtlab] warning: message` for warnings (what the CLI printed before); file
    names that are not UTF-8 as `\\xNN` (path_text), so no stream refuses the line."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and record.levelno >= logging.ERROR:
            message += "\n" + self.formatException(record.exc_info)
        if record.levelno >= logging.WARNING:
            return path_text(f"[trtlab] {record.levelname.lower()}: {message}")
        return path_text(f"[trtlab] {message}")


class _FileFormat(logging.Formatter):
    """The run log's lines: time, level, logger, message (path_text, as on screen)."""

    def format(self, record: logging.LogRecord) -> str:
        return path_text(super().format(record))


def setup(verbosity: int = 0, stream=None, info_stream=None) -> logging.Logger:
    """Configure the `trtlab` logger: verbosity -1 = warnings only (-q), 0 = info, 1+ = debug (-v).

    Messages below WARNING go to `info_stream` (default: the same as `stream`, i.e. stderr), warnings and errors
    to `stream` (default stderr). Idempotent: trtlab's handlers are replaced on each call (their streams follow
    the current sys.stderr / sys.stdout, which pytest and notebooks swap). Enables the run log file."""
    global _file_logging
    _cell_notes.active = False  # a new setup is not inside a notebook cell until setup_for_notebook says so
    logger = logging.getLogger(ROOT)
    level = logging.WARNING if verbosity < 0 else logging.INFO if verbosity == 0 else logging.DEBUG
    for handler in list(logger.handlers):
        if getattr(handler, _HANDLER_FLAG, False) and not isinstance(handler, _RunLogHandler):
            logger.removeHandler(handler)
    if info_stream is None:
        handlers = [_StreamHandler(stream, "stderr")]
        handlers[0].setLevel(level)
    else:
        low = _StreamHandler(None if info_stream in ("stdout", "stderr") else info_stream,
                             info_stream if isinstance(info_stream, str) else "stdout")
        low.addFilter(lambda record: record.levelno < logging.WARNING)
        low.setLevel(level)
        high = _StreamHandler(stream, "stderr")
        high.setLevel(max(level, logging.WARNING))
        handlers = [low, high]
    for handler in handlers:
        setattr(handler, _HANDLER_FLAG, True)
        handler.setFormatter(_Format())
        logger.addHandler(handler)
    # The run log takes debug messages too; the screen handlers filter by their own levels.
    logger.setLevel(logging.DEBUG if _run_log_handler() is not None else level)
    _file_logging = True
    return logger


class _StreamHandler(logging.StreamHandler):
    """A StreamHandler that writes to whatever sys.stderr / sys.stdout is at emit time unless a stream was given;
    while a notebook cell runs (`_cell_notes` active) an info handler keeps its lines for the end of the cell."""

    def __init__(self, stream=None, follow: str = "stderr"):
        super().__init__(stream)
        self._fixed = stream is not None
        self._follow = follow

    def emit(self, record):
        if self._follow == "stdout" and _cell_notes.keep(self, record):
            return
        if not self._fixed:
            self.stream = getattr(sys, self._follow)
        super().emit(record)


class _CellNotes:
    """Info lines of the running notebook cell, shown after the cell's result (post_run_cell): the answer first."""

    def __init__(self):
        self.active = False
        self.lines: list[str] = []

    def keep(self, handler: logging.Handler, record: logging.LogRecord) -> bool:
        if not self.active or record.levelno >= logging.WARNING or getattr(record, "trtlab_now", False):
            return False
        self.lines.append(handler.format(record))
        return True

    def start(self, *_):
        self.active, self.lines = True, []

    def flush(self, *_):
        lines, self.active, self.lines = self.lines, False, []
        if lines:
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()


_cell_notes = _CellNotes()


class _RunLogHandler(logging.FileHandler):
    """Appends every trtlab message, with time and level, to the run log of the current workspace."""


def _run_log_handler() -> _RunLogHandler | None:
    return next((h for h in logging.getLogger(ROOT).handlers if isinstance(h, _RunLogHandler)), None)


def attach_run_log(folder) -> str | None:
    """Append trtlab's messages to `<folder>/trtlab.log` from now on (the workspace being written), when the CLI
    or a notebook configured logging. One log file at a time: a run that moves to another workspace moves its log.
    Returns the log's path (None when logging is not configured by trtlab or the file cannot be opened)."""
    if not _file_logging:
        return None
    path = os.path.join(os.fspath(folder), LOG_FILE)
    logger = logging.getLogger(ROOT)
    current = _run_log_handler()
    if current is not None and os.path.abspath(current.baseFilename) == os.path.abspath(path):
        return path
    try:
        handler = _RunLogHandler(path, mode="a", encoding="utf-8", delay=False)
    except OSError:
        return None  # a read-only workspace is reported by whatever writes there next
    if current is not None:
        logger.removeHandler(current)
        current.close()
    setattr(handler, _HANDLER_FLAG, True)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(_FileFormat("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # the file takes everything; the screen handlers keep their own levels
    logger.debug("--- run started %s (pid %d): %s", time.strftime("%Y-%m-%d %H:%M:%S"), os.getpid(), run_name())
    return path


def run_name() -> str:
    """What started this run, for the run log: the notebook's path in a Jupyter kernel (jupyter_server 2's
    services/sessions/sessionmanager.py gives each kernel JPY_SESSION_NAME = the session's path; the kernel's argv
    only names `kernel-<uuid>.json`), else the command line."""
    notebook = os.environ.get("JPY_SESSION_NAME", "").strip()
    if notebook:
        return f"notebook {notebook}"
    if sys.argv and sys.argv[0]:
        if os.path.basename(sys.argv[0]).startswith("ipykernel"):
            return "a Jupyter kernel (notebook path not given by Jupyter)"
        return " ".join(sys.argv)
    return "python"


def _log_once(logger: logging.Logger, level: int, key, message: str, args) -> bool:
    with _lock:
        if key in _warned:
            logger.debug(message, *args)
            return False
        _warned.add(key)
    logger.log(level, message, *args)
    return True


def warn_once(logger: logging.Logger, key, message: str, *args) -> bool:
    """Log `message` as a warning the first time `key` is seen in this process; True when it was logged."""
    return _log_once(logger, logging.WARNING, key, message, args)


def info_once(logger: logging.Logger, key, message: str, *args) -> bool:
    """Log `message` at INFO the first time `key` is seen in this process (shares `warn_once`'s memory); later at
    debug level. True when it was logged at INFO."""
    return _log_once(logger, logging.INFO, key, message, args)


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
    """In a notebook: INFO as ordinary output (stdout) after the cell's result, warnings on stderr — unless the user
    configured the trtlab logger already — and a UserError in a cell as its one line."""
    logger = logging.getLogger(ROOT)
    if _in_ipython() and not logger.handlers:
        setup(0, info_stream="stdout")
        shell = sys.modules["IPython"].get_ipython()
        _hook_cells(shell)
        _cell_notes.start()  # `import trtlab` runs inside a cell whose pre_run_cell has passed
        _show_user_errors_as_one_line(shell)


def _hook_cells(shell) -> None:
    events = getattr(shell, "events", None)
    if events is None:
        return
    for name, callback in (("pre_run_cell", _cell_notes.start), ("post_run_cell", _cell_notes.flush)):
        try:
            events.unregister(name, callback)
        except ValueError:
            pass
        events.register(name, callback)


def _show_user_errors_as_one_line(shell) -> None:
    """A UserError (a mistake in what the user asked for, with what to do) is its one line in a notebook, as on
    the command line; its traceback goes to the run log and stays one `%tb` away. Other exceptions (bugs) keep
    IPython's traceback."""
    from trtlab.core.errors import UserError

    def one_line(shell, etype, value, tb, tb_offset=None):
        _cell_notes.flush()  # what ran before the mistake, then the mistake
        sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # what %tb shows
        if sys.version_info >= (3, 12):
            sys.last_exc = value
        logging.getLogger(ROOT).debug("user error in a notebook cell", exc_info=(etype, value, tb))
        where = _run_log_handler()
        sys.stderr.write(f"{value.line()}\n(the full traceback: run %tb in a new cell"
                         f"{'; it is also in ' + where.baseFilename if where is not None else ''})\n")
        sys.stderr.flush()
        return None

    if hasattr(shell, "set_custom_exc"):
        shell.set_custom_exc((UserError,), one_line)
