"""One error type for user mistakes: what was wrong and what to do, shown as one line.

`UserError("labels.csv: label 1000 on line 3 is not a class of m.onnx (0..999)", "fix the row")` is printed by
every CLI command as `error: <what> — <fix>` with exit status 2, and by the widgets as the same line in their
output area. Anything else (a bug in trtlab) keeps its traceback.
"""
from __future__ import annotations

import contextlib
import errno as _errno
import os
import sys

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A mistake in what the user asked for (a file, a flag, a label), not a bug in trtlab."""

    def __init__(self, what: str, fix: str = ""):
        self.what, self.fix = str(what).rstrip(". "), str(fix).strip()
        super().__init__(self.line(prefix=""))

    def line(self, prefix: str = "error: ") -> str:
        return f"{prefix}{self.what} — {self.fix}" if self.fix else f"{prefix}{self.what}"


class UserFileNotFound(UserError, FileNotFoundError):
    """A path the user gave does not exist (still a FileNotFoundError for callers that catch that)."""


class UserPermissionError(UserError, PermissionError):
    """A place trtlab may not or cannot write (still a PermissionError for callers that catch that)."""


class UserValueError(UserError, ValueError):
    """A value the user gave is impossible (still a ValueError for callers that catch that)."""


class DamagedArtefact(UserError):
    """A workspace file that cannot be read back; it has been set aside and will be rebuilt."""


# errno values that mean "this place cannot take the write", as opposed to a bug.
_WRITE_ERRNOS = {
    _errno.ENOSPC: ("the disk is full", "free some space or choose another workspace (--workspace or "
                                        "$TRTLAB_WORKSPACE)"),
    getattr(_errno, "EDQUOT", -1): ("the disk quota is exhausted", "free some space or choose another workspace"),
    _errno.EROFS: ("the file system is read-only", "choose a writable workspace (--workspace or $TRTLAB_WORKSPACE)"),
    _errno.EACCES: ("permission denied", "choose a folder you can write (--workspace or $TRTLAB_WORKSPACE)"),
    _errno.EPERM: ("operation not permitted", "choose a folder you can write (--workspace or $TRTLAB_WORKSPACE)"),
    # A writer that reports no errno of its own (ONNX Runtime's "Protobuf serialization failed", see
    # core.ort_session) is given EIO: the disk is named with its free space, as for a full disk.
    _errno.EIO: ("the write failed", "check the free space and the disk, or choose another workspace (--workspace or "
                                     "$TRTLAB_WORKSPACE)"),
}
_SPACE_ERRNOS = {_errno.ENOSPC, getattr(_errno, "EDQUOT", -1), _errno.EIO}


def free_space(path) -> str:
    """'1.2 GB free on /kaggle/working': the free space of the file system holding `path` (its nearest existing
    folder) and that file system's mount point; '' when it cannot be read."""
    import shutil

    folder = os.path.abspath(os.fspath(path))
    while folder and not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return ""
    mount = folder
    while not os.path.ismount(mount) and os.path.dirname(mount) != mount:
        mount = os.path.dirname(mount)
    size = float(free)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            break
        size /= 1000
    shown = f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
    return f"{shown} free on {mount}"


def write_error(path, exc: OSError) -> UserError | None:
    """The UserError for an OSError raised while writing `path` (disk full, read-only, permission), else None."""
    if exc.errno not in _WRITE_ERRNOS:
        return None
    reason, fix = _WRITE_ERRNOS[exc.errno]
    space = free_space(path) if exc.errno in _SPACE_ERRNOS else ""
    space = f"; {space}" if space else ""
    return UserPermissionError(f"cannot write {os.fspath(path)}: {reason} ({exc.strerror or exc}{space})", fix)


@contextlib.contextmanager
def writing(path):
    """Turn disk-full / read-only / permission OSErrors inside the block into a UserError naming `path`."""
    try:
        yield
    except UserError:
        raise
    except OSError as exc:
        converted = write_error(getattr(exc, "filename", None) or path, exc)
        if converted is None:
            raise
        raise converted from exc


def report(exc: UserError, stream=None) -> int:
    """Print `error: <what> — <fix>` on stderr (or `stream`); return the CLI exit status for user errors."""
    print(exc.line(), file=stream or sys.stderr)
    return EXIT_USER_ERROR


@contextlib.contextmanager
def shown_in(output=None):
    """For widget callbacks: a UserError raised in the block is shown as its one line (in the ipywidgets Output
    `output` when given, else printed) instead of a traceback. Other exceptions propagate unchanged.

        with shown_in(out):
            recipes = recipes_from_selection(...)
    """
    try:
        yield
    except UserError as exc:
        if output is not None and hasattr(output, "append_stderr"):
            output.append_stderr(exc.line() + "\n")
        else:
            print(exc.line(), file=sys.stderr)
