"""Where trtlab writes, and how: atomic writes, content hashes, read-only input protection."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

READ_ONLY_ROOTS = ("/kaggle/input",)


def workspace_dir(override: str | os.PathLike | None = None) -> Path:
    """The workspace: `override`, else $TRTLAB_WORKSPACE, else /kaggle/working/trtlab on Kaggle, else ./runs."""
    if override is not None:
        path = Path(override)
    elif os.environ.get("TRTLAB_WORKSPACE"):
        path = Path(os.environ["TRTLAB_WORKSPACE"])
    elif Path("/kaggle/working").is_dir():
        path = Path("/kaggle/working/trtlab")
    else:
        path = Path.cwd() / "runs"
    check_writable_location(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_writable_location(path: str | os.PathLike) -> None:
    """Refuse any write under a read-only input root (Kaggle datasets are mounted there)."""
    resolved = os.path.abspath(os.fspath(path))
    for root in READ_ONLY_ROOTS:
        if resolved == root or resolved.startswith(root + os.sep):
            raise PermissionError(
                f"{resolved} is under {root}, which holds read-only inputs that trtlab never modifies; "
                f"choose a folder under /kaggle/working (or pass workspace=...)"
            )


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename.

    A crash mid-write leaves the old file (or nothing) in place, never a half-written one.
    """
    path = Path(path)
    check_writable_location(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix + ".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the result ordinary permissions
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj):
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(obj)
    raise TypeError(f"cannot store {type(obj).__name__} as JSON")


_SHA_MEMO: dict[tuple, str] = {}


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes, remembered per (path, size, mtime) so repeated evaluations don't rehash models."""
    stat = os.stat(path)
    key = (os.path.abspath(os.fspath(path)), stat.st_size, stat.st_mtime_ns)
    if key not in _SHA_MEMO:
        _SHA_MEMO[key] = _sha256_uncached(path, chunk)
    return _SHA_MEMO[key]


def _sha256_uncached(path, chunk: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def hash_json(obj, length: int = 16) -> str:
    """Stable short hash of a JSON-able object (dict keys sorted)."""
    text = json.dumps(obj, sort_keys=True, default=_json_default, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]
