"""Repair: copy the real libraries of the best TensorRT candidate into a writable folder, create real-file
``.so.MAJOR`` and ``.so`` copies, write ``env.sh`` and install the tree's bindings wheel offline.

Inputs are only ever opened for reading; every write is a temp file in the destination + ``os.replace``
(trtlab.core.workspace's atomic writes). ``env.sh`` goes inside the folder given (``--dest``), or into the
workspace beside the default ``<workspace>/lib``, and never over a file trtlab did not write.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from trtlab.core.workspace import atomic_path, atomic_write_text
from trtlab.env.candidates import Candidate, expected_names
from trtlab.env.discovery import best_candidate, discover, no_tensorrt_message
from trtlab.env.install import install_hint
from trtlab.env.layout import MANIFEST, default_lib_dir, read_only_roots, workspace_dir
from trtlab.env.wheels import install_bindings

#: First line of every env.sh trtlab writes: how repair tells its own file from a user's.
ENV_SH_MARK = "# Written by trtlab.env"


@dataclass
class RepairResult:
    lib_dir: str | None
    env_sh: str | None
    candidate: Candidate | None
    actions: list[tuple[str, str]] = field(default_factory=list)   # (file name, copied|unchanged|removed)
    fixed: list[str] = field(default_factory=list)                 # problems of the input that the copy fixes
    bindings: str | None = None
    error: str | None = None       # one line: what is wrong — what to do
    note: str | None = None
    env_note: str | None = None    # env.sh could not take its usual name (another file is there)

    @property
    def ok(self) -> bool:
        return self.error is None and self.lib_dir is not None

    def summary(self) -> str:
        if self.error:
            return f"repair: {self.error}"
        tail = ([f"  note: {self.env_note}"] if self.env_note else []) + (
            [f"  shell: source {self.env_sh}"] if self.env_sh else [])
        if self.note:
            return "\n".join([f"repair: {self.note}"] + tail)
        copied = sum(a == "copied" for _, a in self.actions)
        same = sum(a == "unchanged" for _, a in self.actions)
        lines = [f"repair: TensorRT {self.candidate.version} from {self.candidate.lib_dir} -> {self.lib_dir} "
                 f"({copied} copied, {same} already up to date)"]
        lines += [f"  fixed: {p}" for p in self.fixed]
        if self.bindings:
            lines.append(f"  bindings: {self.bindings}")
        return "\n".join(lines + tail)


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _same_file_content(src: str, dst: str) -> bool:
    """Cheap idempotency check: same size and the mtime we stamped on the copy."""
    try:
        s, d = os.stat(src), os.stat(dst, follow_symlinks=False)
    except OSError:
        return False
    return not os.path.islink(dst) and s.st_size == d.st_size and int(s.st_mtime) == int(d.st_mtime)


def atomic_copy(src: str, dst: str) -> bool:
    """Copy ``src`` (following links) to ``dst`` as a real file via a temp file in dst's folder + os.replace.

    Returns False when dst already holds the same content (idempotent re-runs copy nothing). Readers never see
    a half-written library: the name appears only once the data is complete.
    """
    if _same_file_content(src, dst):
        return False
    with atomic_path(dst) as tmp:
        with open(tmp, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, length=16 << 20)
            out.flush()
            os.fsync(out.fileno())
        st = os.stat(src)
        os.chmod(tmp, 0o755)
        os.utime(tmp, (st.st_atime, st.st_mtime))
    return True


def _plan_copies(cand: Candidate) -> list[tuple[str, str]]:
    """(destination name, source real path) for every file the repaired folder needs."""
    plan: dict[str, str] = {}
    for key, comp in cand.components.items():
        if not comp.best:
            continue
        if key == "libnvinfer_builder_resource":
            for f in comp.variants:  # one per arch in 10.16+; each keeps its versioned file name
                plan.setdefault(f.name, f.real_path)
            continue
        src = comp.best.real_path
        plan.setdefault(comp.best.name, src)
        for name in expected_names(comp):
            plan.setdefault(name, src)
    return sorted(plan.items())


def is_trtlab_env_sh(path: str) -> bool:
    """Whether ``path`` is an env.sh trtlab wrote (a regular file starting with :data:`ENV_SH_MARK`)."""
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(len(ENV_SH_MARK)).decode("utf-8", "replace") == ENV_SH_MARK
    except OSError:
        return False


def env_sh_path(folder: str | os.PathLike) -> tuple[str, str | None]:
    """(path, note): ``folder/env.sh``, or the first free ``trtlab-env*.sh`` when another file holds that name."""
    folder = os.fspath(folder)
    preferred = os.path.join(folder, "env.sh")
    if not os.path.lexists(preferred) or is_trtlab_env_sh(preferred):
        return preferred, None
    for name in ["trtlab-env.sh"] + [f"trtlab-env-{n}.sh" for n in range(2, 100)]:
        path = os.path.join(folder, name)
        if not os.path.lexists(path) or is_trtlab_env_sh(path):
            return path, f"{preferred} is not trtlab's, so it was left as it is; wrote {name} instead"
    raise FileExistsError(f"{folder} holds env.sh and trtlab-env.sh … trtlab-env-99.sh, none written by trtlab")


def write_env_sh(lib_dir: str | os.PathLike, folder: str | os.PathLike | None = None,
                 pythonpath: str | None = None) -> tuple[str, str | None]:
    """Write an env.sh (LD_LIBRARY_PATH with ``lib_dir`` first) into ``folder`` (default ``lib_dir``) without
    replacing a file trtlab did not write; return (its path, a note when it took another name)."""
    lib_dir = os.path.abspath(lib_dir)
    path, note = env_sh_path(os.path.abspath(folder or lib_dir))
    lines = [
        f"{ENV_SH_MARK}. Source it in a shell before starting Python or a TensorRT tool:",
        f"#   source {path}",
        "# (Inside a running notebook kernel LD_LIBRARY_PATH changes are not seen: use trtlab.load_tensorrt().)",
        f'export TRTLAB_TRT_LIB_DIR="{lib_dir}"',
        f'export LD_LIBRARY_PATH="{lib_dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"',
    ]
    if pythonpath:
        lines.append(f'export PYTHONPATH="{pythonpath}${{PYTHONPATH:+:$PYTHONPATH}}"')
    text = "\n".join(lines) + "\n"
    try:
        unchanged = Path(path).read_text() == text
    except (OSError, UnicodeDecodeError):
        unchanged = False
    if not unchanged:  # a re-run rewrites nothing
        atomic_write_text(path, text)
    return path, note


def mix_refusal(cand: Candidate) -> str:
    return (f"refusing to repair: {cand.version_mix} — TensorRT loads only libraries of one release (a parser or "
            f"plugin of another release fails when loaded or first called): take libnvinfer, libnvonnxparser and "
            f"libnvinfer_plugin from one TensorRT tree (nothing was copied), or {install_hint()}")


def _destination_refusal(cand: Candidate, folder: str) -> str | None:
    """Why nothing may be written to ``folder`` (inside the input or a read-only root), else None."""
    forbidden = [cand.lib_dir, *read_only_roots()] + ([os.path.dirname(cand.lib_dir)] if cand.source == "tar" else [])
    for bad in forbidden:
        if _inside(folder, bad):
            return (f"destination {folder} is inside the input {bad}, which must stay untouched — pass a folder "
                    f"under /kaggle/working")
    return None


def _healthy_install(cand: Candidate, env_folder: str) -> RepairResult:
    """A healthy pip/system install loads as it is: only env.sh is written (for shells)."""
    refusal = _destination_refusal(cand, env_folder)
    if refusal:
        return RepairResult(None, None, cand, error=refusal)
    env, env_note = write_env_sh(cand.lib_dir, env_folder)
    return RepairResult(cand.lib_dir, env, cand, env_note=env_note,
                        note=f"the {cand.source} install of TensorRT {cand.version} in {cand.lib_dir} is healthy; "
                             f"nothing copied")


def _read_manifest(dest: str) -> list[str]:
    try:
        return json.loads(Path(dest, MANIFEST).read_text()).get("files", [])
    except (ValueError, OSError, AttributeError):
        return []


def _copy_set(cand: Candidate, dest: str, result: RepairResult) -> list[str]:
    """Copy the plan into dest, remove files an earlier repair wrote that this one does not; return the names."""
    plan = _plan_copies(cand)
    for name, src in plan:
        result.actions.append((name, "copied" if atomic_copy(src, os.path.join(dest, name)) else "unchanged"))
    keep = {name for name, _ in plan}
    for name in _read_manifest(dest):  # only files an earlier repair wrote, never anything else in dest
        if name not in keep and os.path.exists(os.path.join(dest, name)):
            os.unlink(os.path.join(dest, name))
            result.actions.append((name, "removed"))
    return sorted(keep)


def _space_refusal(cand: Candidate, dest: str) -> str | None:
    need = sum(os.path.getsize(src) for name, src in _plan_copies(cand)
               if not _same_file_content(src, os.path.join(dest, name)))
    free = shutil.disk_usage(dest).free
    if need > free:
        return (f"need {need / 1e9:.2f} GB in {dest} but only {free / 1e9:.2f} GB is free — delete old outputs or "
                f"pass another dest")
    return None


def repair(candidates: Candidate | list[Candidate] | None = None, dest: str | os.PathLike | None = None, *,
           bindings: bool = True, bindings_target: str | None = None, force: bool = False) -> RepairResult:
    """Copy the best candidate's real libraries into ``dest`` (default ``<workspace>/lib``) and write env.sh.

    Never writes into the input: files are only opened for reading, and ``dest`` inside the input (or under
    /kaggle/input) is refused, as is a set whose libraries come from different TensorRT releases. env.sh goes
    into ``dest`` (into the workspace when ``dest`` is not given), never over a file trtlab did not write.
    Re-running is cheap: copies whose size and mtime match are skipped, and files a previous repair wrote for
    another version are removed (tracked in ``trtlab_manifest.json``). A healthy pip or system install is left
    alone unless ``force``: ``import tensorrt`` already loads it.
    """
    if candidates is None:
        candidates = discover()
    cand = candidates if isinstance(candidates, Candidate) else best_candidate(candidates)
    if cand is None or not cand.usable:
        found = candidates if isinstance(candidates, list) else ([] if cand is None else [cand])
        return RepairResult(None, None, cand, error=no_tensorrt_message(found))
    if cand.version_mix:
        return RepairResult(None, None, cand, error=mix_refusal(cand))
    env_folder = os.path.abspath(dest) if dest else str(workspace_dir())
    if cand.healthy and cand.source in ("pip", "system") and not force:
        return _healthy_install(cand, env_folder)
    dest = os.path.abspath(dest or default_lib_dir())
    refusal = _destination_refusal(cand, dest)
    if refusal:
        return RepairResult(None, None, cand, error=refusal)
    os.makedirs(dest, exist_ok=True)
    refusal = _space_refusal(cand, dest)
    if refusal:
        return RepairResult(None, None, cand, error=refusal)
    result = RepairResult(dest, None, cand)
    files = _copy_set(cand, dest, result)
    result.fixed = list(cand.problems)
    if bindings:
        result.bindings = install_bindings(cand, target=bindings_target)
    result.env_sh, result.env_note = write_env_sh(dest, env_folder, pythonpath=bindings_target)
    atomic_write_text(os.path.join(dest, MANIFEST), json.dumps(
        {"source": cand.lib_dir, "version": cand.version, "files": files, "env_sh": result.env_sh}, indent=1))
    return result
