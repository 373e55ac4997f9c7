"""Which disk a file goes to and how full it is, so that "the disk is full" names the disk (as `df` would)."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

from trtlab.core.errors import UserError, UserPermissionError, write_error

_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", -1)}


class DiskFull(UserPermissionError):
    """A write failed because the disk (or quota) is full; the message names the file and the disk's free space."""


def mount_point(path: str | os.PathLike) -> Path:
    """The mount point holding `path` (which need not exist yet)."""
    current = Path(os.path.abspath(os.fspath(path)))
    while not current.exists() and current != current.parent:
        current = current.parent
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return current


def _device(mount: Path) -> tuple[str, str] | None:
    """(device, file-system type) of `mount` from /proc/mounts (Linux); None elsewhere."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:  # the last entry for a mount point is the one in effect
        parts = line.split()
        if len(parts) >= 3 and parts[1].replace("\\040", " ") == str(mount):
            found = (parts[0], parts[2])
    return found


def format_bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1000
    return f"{size:.2f} TB"


def describe_disk(path: str | os.PathLike) -> str:
    """`df`-style: '/kaggle/working (/dev/sda1, ext4) has 12.30 MB free of 20.00 GB'."""
    mount = mount_point(path)
    device = _device(mount)
    where = f"{mount} ({device[0]}, {device[1]})" if device else str(mount)
    try:
        usage = shutil.disk_usage(mount)
    except OSError:
        return f"{where}: free space unknown"
    return f"{where} has {format_bytes(usage.free)} free of {format_bytes(usage.total)}"


def _errno_of(exc: BaseException) -> int | None:
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno is not None:
            return exc.errno
        exc = exc.__cause__
    return None


def disk_full(path: str | os.PathLike, fix: str = "") -> DiskFull:
    return DiskFull(f"cannot write {os.fspath(path)}: the disk is full; {describe_disk(path)}",
                    fix or f"free some space on {mount_point(path)}, or choose another workspace (--workspace or "
                           f"$TRTLAB_WORKSPACE)")


@contextlib.contextmanager
def writing_to(path: str | os.PathLike, fix: str = ""):
    """Around a write of `path`: a full disk (or quota) becomes a DiskFull naming the file, the disk and its free
    space, with `fix` (default: free space or choose another workspace); a read-only or forbidden place becomes
    the UserError of core.errors.write_error. Other errors pass unchanged."""
    try:
        yield
    except (OSError, UserError) as exc:
        if isinstance(exc, DiskFull):
            raise
        if _errno_of(exc) in _FULL:
            raise disk_full(getattr(exc, "filename", None) or path, fix) from exc
        if isinstance(exc, OSError) and not isinstance(exc, UserError):
            converted = write_error(getattr(exc, "filename", None) or path, exc)
            if converted is not None:
                raise converted from exc
        raise


def write_json(path: str | os.PathLike, obj) -> Path:
    """core.workspace.atomic_write_json, with a full disk named (writing_to)."""
    from trtlab.core.workspace import atomic_write_json

    with writing_to(path):
        return atomic_write_json(path, obj)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """core.workspace.atomic_write_text, with a full disk named (writing_to)."""
    from trtlab.core.workspace import atomic_write_text

    with writing_to(path):
        return atomic_write_text(path, text)
