"""Every TensorRT candidate folder on this machine: tar trees under ``/kaggle/input`` (or any root), pip installs
(``site-packages/tensorrt*_libs``) and system library folders, best first; and the table the notebook shows.
"""
from __future__ import annotations

import collections
import glob
import os
from pathlib import Path

from trtlab.env.candidates import Candidate, analyse_folder, scan_folder
from trtlab.env.install import install_hint, say_once
from trtlab.env.layout import (COMPONENT_ROLE, LIB_NAME_RE, default_roots, site_package_dirs, system_lib_dirs,
                               version_tuple)
from trtlab.core.tables import full_text_frame

#: What the last :func:`discover` call could not search (missing roots, entry budget hit).
LAST_SEARCH_NOTES: list[str] = []
_SOURCE_RANK = {"tar": 2, "pip": 1, "system": 0}


def _walk_for_lib_dirs(root: str, max_depth: int, budget: int) -> tuple[list[str], str | None]:
    """Breadth-first search for folders holding libnvinfer*/libnvonnxparser* files.

    Breadth first so the shallow TensorRT trees are found before a deep image dataset exhausts the entry budget
    (ImageNet under /kaggle/input has 1.3 M files). Symlinked folders are not followed (loops, double counts).
    """
    found, queue, seen = [], collections.deque([(root, 0)]), 0
    while queue:
        folder, depth = queue.popleft()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        seen += len(entries)
        if any(LIB_NAME_RE.match(e.name) for e in entries):
            found.append(folder)
        if depth < max_depth:
            queue.extend((e.path, depth + 1) for e in entries if e.is_dir(follow_symlinks=False))
        if seen > budget:
            return found, (f"stopped searching {root} after {seen} entries (depth {depth}); if TensorRT is deeper, "
                           f"pass its folder as a root (--root PATH)")
    return found, None


def discover(roots: list[str | os.PathLike] | None = None, *, pip: bool = True, system: bool = True,
             max_depth: int = 8, budget: int = 200_000) -> list[Candidate]:
    """Every TensorRT candidate folder on this machine, best first (see :func:`best_candidate`).

    ``roots``: folders searched recursively for TensorRT tar trees (default: ``/kaggle/input`` when present).
    ``pip``: look in site-packages for ``tensorrt*_libs`` folders. ``system``: look in system library folders
    and ``$LD_LIBRARY_PATH`` (top level only).
    """
    roots = default_roots() if roots is None else [Path(r) for r in roots]
    found: list[Candidate] = []
    seen_dirs: set[str] = set()
    notes: list[str] = []

    def add(folder: str, source: str) -> None:
        real = os.path.realpath(folder)
        if real in seen_dirs:
            return
        files = scan_folder(folder)
        if files:
            seen_dirs.add(real)
            found.append(analyse_folder(folder, files, source))

    for root in roots:
        if not root.exists():
            notes.append(f"root {root} does not exist")
            continue
        folders, stopped = _walk_for_lib_dirs(str(root), max_depth, budget)
        for folder in folders:
            add(folder, "tar")
        if stopped:
            notes.append(stopped)
    if pip:
        for sp in site_package_dirs():
            for folder in sorted(glob.glob(os.path.join(sp, "tensorrt*_libs"))):
                add(folder, "pip")
    if system:
        for folder in system_lib_dirs():
            add(folder, "system")
    found.sort(key=_rank, reverse=True)
    for c in found[:1]:
        c.notes.extend(notes)
    LAST_SEARCH_NOTES[:] = notes
    return found


def _rank(c: Candidate):
    # The user added a tar dataset on purpose, so it wins over a pip install of another version.
    return (c.usable, _SOURCE_RANK.get(c.source, 0), version_tuple(c.version), not c.problems)


def best_candidate(candidates: list[Candidate]) -> Candidate | None:
    """The candidate repair and load use: usable first, then tar > pip > system, then the newest version."""
    usable = [c for c in candidates if c.usable]
    return max(usable, key=_rank) if usable else None


def no_tensorrt_message(candidates: list[Candidate], roots: list | None = None) -> str:
    """One line for a machine without a usable TensorRT, naming where we looked and what to do — in full once per
    process (install.say_once), then short: notebook 00's steps each say it."""
    roots = [str(r) for r in (default_roots() if roots is None else roots)]
    where = ", ".join(roots + ["site-packages", "system library folders"])
    broken = [c.lib_dir for c in candidates if not c.usable]
    extra = f"; broken trees: {', '.join(broken)}" if broken else ""
    extra += "".join(f"; {n}" for n in LAST_SEARCH_NOTES)
    full = f"no real libnvinfer found in {where}{extra}"
    if say_once(full, "") == "":
        return "no real libnvinfer found (where trtlab looked and what to do: said above)"
    return f"{full}: add the TensorRT tar dataset to the notebook or {install_hint()}"


def candidates_frame(candidates: list[Candidate]):
    """One row per component of every candidate, as a pandas DataFrame (for the notebook; cells shown whole)."""
    rows = []
    for c in candidates:
        for key, comp in c.components.items():
            rows.append({
                "folder": c.lib_dir, "source": c.source, "component": key, "role": COMPONENT_ROLE.get(key, ""),
                "library": comp.best.name if comp.best else "—", "version": comp.version or "—",
                "status": "broken" if comp.problems and not comp.best else ("fixable" if comp.problems else "ok"),
                "problems": " | ".join(comp.problems),
            })
        if c.version_mix:
            rows.append({"folder": c.lib_dir, "source": c.source, "component": "(the set)", "role": "one release",
                         "library": "—", "version": c.version or "—", "status": "mixed", "problems": c.version_mix})
    if not rows:
        rows.append({"folder": "—", "source": "—", "component": "libnvinfer", "role": COMPONENT_ROLE["libnvinfer"],
                     "library": "—", "version": "—", "status": "not found", "problems": no_tensorrt_message(candidates)})
    return full_text_frame(rows)
