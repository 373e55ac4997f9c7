"""Where trtlab writes, and how: atomic writes, content hashes, read-only input protection."""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from trtlab.core.errors import DamagedArtefact, UserPermissionError, write_error
from trtlab.core.log import path_text  # noqa: F401  (re-exported: the one text of a path)

# Kaggle's layout, relocatable for tests ($TRTLAB_KAGGLE_ROOT emulates /kaggle in a temporary folder).
KAGGLE_ROOT_ENV = "TRTLAB_KAGGLE_ROOT"
#: Set by Kaggle in every notebook and script kernel; Kaggle's own client reads it to know it runs there
#: (kagglehub, src/kagglehub/env.py: KAGGLE_NOTEBOOK_ENV_VAR_NAME = "KAGGLE_KERNEL_RUN_TYPE").
KAGGLE_KERNEL_ENV = "KAGGLE_KERNEL_RUN_TYPE"
#: The workspace folder's name on Kaggle. Never "trtlab": the kernel's working directory is /kaggle/working, and a
#: folder named like the package there is imported as a namespace package ahead of the installed trtlab.
KAGGLE_WORKSPACE_NAME = "trtlab-runs"
log = logging.getLogger(__name__)
T = TypeVar("T")
_announced: set = set()


def kaggle_root() -> Path:
    return Path(os.environ.get(KAGGLE_ROOT_ENV) or "/kaggle")


def kaggle_input() -> Path:
    """Where Kaggle mounts attached datasets, read-only."""
    return kaggle_root() / "input"


def kaggle_working() -> Path:
    return kaggle_root() / "working"


def on_kaggle() -> bool:
    """Whether this process runs in a Kaggle kernel: Kaggle sets $KAGGLE_KERNEL_RUN_TYPE ("Interactive", "Batch")
    and every kernel has its working directory /kaggle/working (Kaggle's starter cell: "You can write … to the
    current directory (/kaggle/working/) that gets preserved as output"). Both are needed: a folder named
    /kaggle/working alone says nothing (any machine may have one), and the variable alone is a machine that merely
    carries it (a copied environment, a container started with Kaggle's variables) — trtlab then says so once and
    creates nothing under a /kaggle that is not there. Tests emulate Kaggle with the variable and
    $TRTLAB_KAGGLE_ROOT."""
    if not os.environ.get(KAGGLE_KERNEL_ENV):
        return False
    if kaggle_working().is_dir():
        return True
    if KAGGLE_KERNEL_ENV not in _announced:
        _announced.add(KAGGLE_KERNEL_ENV)
        log.warning("$%s is set but %s does not exist: not a Kaggle kernel's layout, so Kaggle's defaults are not "
                    "used (nothing is created under %s)", KAGGLE_KERNEL_ENV, kaggle_working(), kaggle_root())
    return False


def read_only_roots() -> tuple[str, ...]:
    """Folders trtlab never writes: Kaggle's inputs (the real ones and, under tests, the emulated ones)."""
    return tuple(dict.fromkeys(["/kaggle/input", os.fspath(kaggle_input())]))


def source_checkout() -> Path | None:
    """The repository this trtlab was imported from (an editable install or a checkout on sys.path), else None."""
    root = Path(__file__).resolve().parents[2]  # <checkout>/trtlab/core/workspace.py
    project = root / "pyproject.toml"
    try:
        return root if project.is_file() and 'name = "trtlab"' in project.read_text(encoding="utf-8") else None
    except OSError:
        return None


def default_workspace() -> tuple[Path, str]:
    """(folder, why) of the workspace when none is given — the same for notebooks and the CLI, whatever the
    current directory: $TRTLAB_WORKSPACE, else /kaggle/working/trtlab-runs on Kaggle, else runs/ in the source
    checkout, else ~/trtlab-runs."""
    if os.environ.get("TRTLAB_WORKSPACE"):
        return Path(os.environ["TRTLAB_WORKSPACE"]), "$TRTLAB_WORKSPACE"
    if on_kaggle():
        return kaggle_working() / KAGGLE_WORKSPACE_NAME, "Kaggle"
    checkout = source_checkout()
    if checkout is not None:
        return checkout / "runs", "the trtlab checkout"
    return Path.home() / KAGGLE_WORKSPACE_NAME, "home folder"


def workspace_dir(override: str | os.PathLike | None = None) -> Path:
    """The workspace: `override`, else `default_workspace()`; created if missing. The default is named once per
    process (notebooks and the CLI write to the same place, and the user should see where)."""
    if override is not None:
        path = Path(override)
    else:
        path, why = default_workspace()
        if path not in _announced:
            _announced.add(path)
            log.info("workspace: %s (%s; --workspace or $TRTLAB_WORKSPACE to change)", path, why)
    check_writable_location(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise (write_error(path, exc) or exc) from exc
    if (path / "results").is_dir() and not os.access(path, os.W_OK):  # a finished workspace attached read-only
        read_only_fs = bool(os.statvfs(path).f_flag & os.ST_RDONLY) if hasattr(os, "statvfs") else False
        mark_read_only(path, "Read-only file system" if read_only_fs else "no write permission")
    from trtlab.core.log import attach_run_log

    attach_run_log(path)  # the run's messages go beside its results (when the CLI or a notebook set up logging)
    return path


# -- a read-only workspace (a finished one attached as a Kaggle dataset, a read-only mount) ----------------------------
_read_only: dict[str, str] = {}


def mark_read_only(folder: str | os.PathLike, reason: str) -> None:
    """Remember that `folder` (an existing workspace) cannot be written, and say once what that means: stored
    results are read and shown; whatever is not stored yet cannot be made here."""
    key = os.path.abspath(os.fspath(folder))
    if key in _read_only:
        return
    _read_only[key] = reason
    log.warning("the workspace %s is read-only (%s): stored results are read and shown; anything not stored yet "
                "(decoding, variants, evaluations, reports) cannot be written there — choose a writable workspace "
                "(--workspace or $TRTLAB_WORKSPACE) to compute more", key, reason)


def read_only_workspace(path: str | os.PathLike) -> str | None:
    """Why `path` lies in a workspace marked read-only (mark_read_only), else None."""
    resolved = os.path.abspath(os.fspath(path))
    return next((why for root, why in _read_only.items() if resolved == root or resolved.startswith(root + os.sep)),
                None)


def check_writable_location(path: str | os.PathLike) -> None:
    """Refuse any write under a read-only input root (Kaggle datasets are mounted there)."""
    resolved = os.path.abspath(os.fspath(path))
    for root in read_only_roots():
        if resolved == root or resolved.startswith(root + os.sep):
            raise UserPermissionError(
                f"{resolved} is under {root}, which holds read-only inputs that trtlab never modifies",
                f"choose a folder under {kaggle_working()} (--workspace / --out, or workspace=...)",
            )


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename.

    A crash mid-write leaves the old file (or nothing) in place, never a half-written one.
    """
    path = Path(path)
    check_writable_location(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix + ".tmp")
    except OSError as exc:
        raise (write_error(path, exc) or exc) from exc
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the result ordinary permissions
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        # Disk full / read-only inside the block: say which file, not a bare "[Errno 28]" (the old file is intact).
        if isinstance(exc, OSError) and (converted := write_error(path, exc)) is not None:
            raise converted from exc
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """UTF-8 text; file names in it whose bytes are not UTF-8 are written as `\\xNN` (path_text)."""
    return atomic_write_bytes(path, path_text(text).encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj):
    if hasattr(obj, "to_json"):  # values that are stored as text (a Guard: its canonical text)
        return obj.to_json()
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
    """sha256 of a file's bytes, remembered per (path, size, mtime, ctime) so repeated evaluations don't rehash
    models. ctime is in the key because `cp -p`, `rsync -a` and unzip restore a replaced file's mtime, never its
    ctime: new weights of the same size are hashed again, also within one notebook kernel."""
    stat = os.stat(path)
    key = (os.path.abspath(os.fspath(path)), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _SHA_MEMO:
        _SHA_MEMO[key] = _sha256_uncached(path, chunk)
    return _SHA_MEMO[key]


def sha256_with_companions(path: str | os.PathLike, companions=()) -> str:
    """sha256 of a file together with the files it needs beside it (an ONNX model's external-data files): the
    file's own sha256 when it has none (so a model without external data keeps the hash it always had), else the
    sha256 of its hash and each companion's (name relative to the file's folder, sha256), in a stable order. New
    weights in `model.onnx.data` are a new identity even when `model.onnx` is byte for byte the same."""
    main = sha256_file(path)
    if not companions:
        return main
    base = os.path.dirname(os.path.abspath(os.fspath(path)))
    digest = hashlib.sha256(main.encode("ascii"))
    for companion in sorted({os.path.abspath(os.fspath(c)) for c in companions}):
        digest.update(f"\0{os.path.relpath(companion, base)}\0{sha256_file(companion)}".encode("utf-8"))
    return digest.hexdigest()


def _sha256_uncached(path, chunk: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def canonical_json(obj) -> str:
    """The one text of a JSON-able object that hashes see: keys sorted, no spaces."""
    return json.dumps(obj, sort_keys=True, default=_json_default, separators=(",", ":"))


def hash_json(obj, length: int = 16) -> str:
    """Stable short hash of a JSON-able object: sha256 of its canonical JSON."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:length]


# -- damaged artefacts ----------------------------------------------------------------------------------------
def set_aside(path: str | os.PathLike, reason: str, kind: str = "damaged") -> Path | None:
    """Rename a damaged workspace file or folder to `<name>.<kind>-<UTC time>` — kept for inspection, never read
    again — and log which and why. `kind`: "damaged" (unreadable), or "stale" (readable, but made for another
    identity than its place says: a variant folder of an older trtlab revision). Returns the new path; None when it
    vanished meanwhile, or when it cannot be renamed (a read-only workspace: said in one line, and the caller still
    does not trust it)."""
    path = Path(path)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.{kind}-{stamp}")
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return None
    except OSError as exc:  # read-only workspace, or no permission: the file stays, unused
        log.warning("%s is %s (%s) and cannot be set aside (%s): it is not used", path, kind, reason,
                    exc.strerror or exc)
        return None
    log.warning("%s is %s (%s); set aside as %s and rebuilt", path, kind, reason, target.name)
    return target


def _damage_errors() -> tuple:
    import pickle
    import struct
    import zipfile

    return (ValueError, KeyError, EOFError, TypeError, IndexError, OverflowError, struct.error, zipfile.BadZipFile,
            pickle.UnpicklingError)


#: What a reader raises on content it cannot parse (never I/O errors: EACCES or EIO are not the file's content).
#: A reader for another format converts its parser's error into one of these (ValueError), as load_npy does.
DAMAGE_ERRORS = _damage_errors()


def read_checked(path: str | os.PathLike, reader: Callable[[Path], T], check: Callable[[T], str | None] | None = None,
                 missing=None, rebuild: bool = True, set_aside_damaged: bool = True):
    """`reader(path)` for a file trtlab wrote itself, with damage detected instead of a bare parser error.

    When reading fails (truncated, garbage, wrong JSON) or `check(value)` returns a reason, the file is set aside
    (`set_aside`) and `missing` is returned so the caller rebuilds it; with `rebuild=False` a DamagedArtefact
    naming the path is raised instead. `set_aside_damaged=False` only looks (an estimate before the work, a view
    of a read-only workspace): a damaged file is left where it is and `missing` returned. A file that does not
    exist returns `missing`.
    """
    path = Path(path)
    if not path.exists():
        return missing
    try:
        value = reader(path)
        reason = check(value) if check is not None else None
    except DAMAGE_ERRORS as exc:  # parser errors only: I/O errors (EACCES, EIO) are not the file's content
        reason = f"{type(exc).__name__}: {str(exc)[:200]}"
    if reason is None:
        return value
    if not set_aside_damaged:
        return missing
    set_aside(path, reason)
    if not rebuild:
        raise DamagedArtefact(f"{path} is damaged ({reason}) and was set aside",
                              "run the command again to rebuild it")
    return missing


def load_npy(path: str | os.PathLike):
    """The one array of an .npy file trtlab wrote (np.load without pickles); anything else there — an .npz archive,
    a pickle — raises ValueError (damage, for read_checked)."""
    import numpy as np

    with open(path, "rb") as fh:
        check_magic(fh, NPY_MAGIC, ".npy")
        return np.load(fh, allow_pickle=False)


NPY_MAGIC, NPZ_MAGIC = b"\x93NUMPY", b"PK\x03\x04"  # numpy's format header; an .npz is a zip archive


def check_magic(fh, magic: bytes, what: str) -> None:
    """ValueError unless the open binary file `fh` starts with `magic` (then rewound): other bytes where trtlab
    wrote a `what` are damage, said as such — not numpy's guess that they are a pickle."""
    head = fh.read(len(magic))
    fh.seek(0)
    if head != magic:
        raise ValueError(f"not an {what} file (it starts with {head[:8]!r})" if head else "empty file")


def stored_model_ok(path: str | os.PathLike, set_aside_damaged: bool = True) -> bool:
    """Whether the ONNX file trtlab wrote at `path` can be used again: it exists and onnx.checker accepts it (a file
    cut short fails to parse; one cut at a field boundary loses its opset or graph and fails the check). A damaged
    one is set aside (named) and False returned, so the caller writes it again."""
    path = Path(path)
    if not path.is_file():
        return False
    import onnx

    try:
        onnx.checker.check_model(str(path))
        return True
    except Exception as exc:  # noqa: BLE001 — protobuf's DecodeError, onnx's ValidationError, …: all mean damaged
        reason = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
    if set_aside_damaged:
        set_aside(path, reason)
    return False


def files_differ(folder: str | os.PathLike, recorded: dict) -> dict[str, str]:
    """{file name: reason} for each file of `recorded` ({name in folder: sha256 when written}) that is missing or
    whose bytes changed since — a record that vouches for its files (a variant folder's model.onnx)."""
    found = {}
    for name, expected in recorded.items():
        path = Path(folder) / name
        try:
            actual = sha256_file(path)
        except FileNotFoundError:
            found[name] = "missing"
            continue
        if actual != expected:
            found[name] = f"sha256 {actual[:12]}… where {expected[:12]}… was recorded when it was written"
    return found


def read_json_checked(path: str | os.PathLike, expect=dict, missing=None, set_aside_damaged: bool = True):
    """A JSON file trtlab wrote (`read_checked` with json.loads; the top level must be an `expect`)."""
    def check(value):
        return None if isinstance(value, expect) else f"expected a JSON {expect.__name__}, found {type(value).__name__}"

    return read_checked(path, lambda p: json.loads(p.read_text(encoding="utf-8")), check, missing,
                        set_aside_damaged=set_aside_damaged)


def read_npz_checked(path: str | os.PathLike, keys=(), missing=None, same_length: bool = False) -> dict | None:
    """All arrays of an .npz trtlab wrote, as a dict (`read_checked`); `keys` must all be present and, with
    `same_length`, have one first dimension (rows of the same images)."""
    import numpy as np

    def reader(p):
        with open(p, "rb") as fh:
            check_magic(fh, NPZ_MAGIC, ".npz")
        with np.load(p, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}

    def check(arrays):
        absent = [k for k in keys if k not in arrays]
        if absent:
            return f"missing arrays {absent}"
        lengths = {k: len(arrays[k]) if arrays[k].ndim else None for k in keys}
        if same_length and len(set(lengths.values())) > 1:
            return f"arrays of different lengths {lengths}"
        return None

    return read_checked(path, reader, check, missing)
