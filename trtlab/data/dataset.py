"""Datasets: a list of image paths with optional integer labels (-1 = unlabelled)."""
from __future__ import annotations

import logging
import os
from collections import Counter
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from trtlab.core.errors import UserFileNotFound
from trtlab.core.log import warn_once
from trtlab.core.workspace import hash_json
# The labels CSV reader, importable from here as before.
from trtlab.data.labels_csv import (FILE_HEADERS, LABEL_HEADERS, UNLABELLED, LabelsCsvError,  # noqa: F401
                                    LabelsTable, parse_labels_csv, read_labels_csv)

from trtlab.data.photo_types import IMAGE_EXTENSIONS, OTHER_PHOTO_EXTENSIONS  # noqa: F401  (re-exported)
log = logging.getLogger(__name__)


def _relative_ids(paths: list[str], root: str) -> list[str]:
    """os.path.relpath(p, root) for each path: cut where p is a normalised path under the normalised root."""
    prefix = os.path.join(os.path.normpath(root), "")
    cut = len(prefix)
    return [p[cut:] if p.startswith(prefix) and len(p) > cut and os.path.normpath(p) == p
            else os.path.relpath(p, root) for p in paths]


@dataclass
class Dataset:
    """Image files and their labels. `labels[i] == -1` marks an unlabelled image (still used for consistency)."""

    name: str
    paths: list[str]
    labels: np.ndarray = field(default=None)
    root: str | None = None
    # Where labels came from ("folders", a CSV path, or None) and what they are ("wnid": ImageNet classes given as
    # WNIDs, "index": class indices): validation uses both to say which folder/CSV holds an impossible label.
    label_source: str | None = None
    label_kind: str | None = None

    def __post_init__(self):
        self.paths = [str(p) for p in self.paths]
        if self.labels is None:
            self.labels = np.full(len(self.paths), UNLABELLED, np.int64)
        self.labels = np.asarray(self.labels, np.int64)
        if len(self.labels) != len(self.paths):
            raise ValueError(f"dataset {self.name!r}: {len(self.paths)} paths but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def labelled_count(self) -> int:
        return int((self.labels >= 0).sum())

    def image_ids(self) -> list[str]:
        """Stable per-image ids: paths relative to the root when there is one. Made once per paths list (a run asks
        about 20 times: os.path.relpath on 50,000 paths took 0.17 s each time); a path already normalised under the
        root is cut, not re-resolved (the same id, 5× faster)."""
        key = (id(self.paths), len(self.paths), self.root)
        made = self.__dict__.get("_image_ids")
        if made is None or made[0] != key:
            made = (key, tuple(_relative_ids(self.paths, self.root)) if self.root else tuple(self.paths))
            self.__dict__["_image_ids"] = made
        return list(made[1])

    def content_hashes(self, progress: bool = True) -> list[str]:
        """A content hash (blake2b) of each file's bytes, "missing" for a file that cannot be read. Read once and
        remembered by the file's stat (data.file_hashes): later calls only stat the files — except on a copy made
        by `holding_hashes`, which answers the hashes it was made with."""
        held = self.__dict__.get("_held_hashes")
        if held is not None:
            return list(held)
        from trtlab.data.file_hashes import file_hashes

        return file_hashes().hashes(self.paths, progress=progress, desc=f"hash {self.name}")

    def holding_hashes(self, progress: bool = True) -> "Dataset":
        """A copy of this dataset whose content_hashes() answers the hashes taken now, without looking at the files
        again: for one run, whose steps each took them (compare() stat'ed 50,000 files six times: 10–17 s of a cold
        A/B on the H200's 4 pinned cores). A file changed later in the run is still caught where it is read (the
        decode cache checks each file's bytes against these hashes)."""
        held = dataclasses.replace(self)
        held.__dict__["_held_hashes"] = tuple(self.content_hashes(progress))
        return held

    def fingerprint(self, hashes: list[str] | None = None) -> str:
        """Hash of the files' paths and contents (content_hashes, or `hashes` already taken) and the labels: it
        changes when any file's bytes, path or label changes — a same-size replacement that keeps its mtime
        included — and not when a file is only touched or copied in place."""
        hashes = self.content_hashes() if hashes is None else hashes
        return hash_json({"content": "blake2b-128", "files": [[p, h] for p, h in zip(self.paths, hashes)],
                          "labels": self.labels.tolist()})

    def subset(self, indices, name: str | None = None) -> "Dataset":
        indices = np.asarray(indices, np.int64)
        return Dataset(
            name=name or f"{self.name}[{len(indices)}]",
            paths=[self.paths[i] for i in indices],
            labels=self.labels[indices],
            root=self.root,
            label_source=self.label_source,
            label_kind=self.label_kind,
        )

    @classmethod
    def from_folder(cls, root: str | os.PathLike, labels_csv: str | os.PathLike | None = None,
                    name: str | None = None, folder_labels: bool = True) -> "Dataset":
        """Images in `root`, flat or one sub-folder per class, scanned recursively (linked folders followed, each
        folder once).

        Labels come from `labels_csv` (columns `file,label`; label = class index or WNID) when given, else from
        sub-folder names that are WNIDs (n01440764, the nearest above the photo: n01440764/images/ too) or class
        indices (0..999) — numbered folders read as class indices are named in one warning, since album folders
        (01/, 02/) look the same, and so are sub-folders that name no class —; `folder_labels=False` (CLI:
        --unlabelled) ignores folder names; otherwise images are unlabelled.
        """
        root = Path(root)
        if not root.is_dir():
            what = "is a file, not a folder" if root.is_file() else "does not exist"
            raise UserFileNotFound(f"dataset folder {root} {what}", "pass the folder that holds the images (--data)")
        paths = sorted(photo_files(root))
        if not paths:
            raise UserFileNotFound(f"no images ({describe_extensions()}) under {root}",
                                   "pass the folder that holds the images (sub-folders are searched too)")
        if labels_csv is not None:
            table = parse_labels_csv(labels_csv)
            labels, source, kind = table.apply(paths, root), str(labels_csv), table.kind
        elif folder_labels:
            labels, source, kind = _folder_labels(paths, root)
        else:
            labels, source, kind = np.full(len(paths), UNLABELLED, np.int64), None, None
        return cls(name=name or root.name, paths=paths, labels=labels, root=str(root), label_source=source,
                   label_kind=kind)


def _folder_labels(paths: list[str], root: Path) -> tuple[np.ndarray, str | None, str | None]:
    """Labels from each image's folder name (a WNID or a class index), the source ("folders") and kind."""
    from trtlab.data.classes import wnid_to_index

    labels = np.full(len(paths), UNLABELLED, np.int64)
    wnids = wnid_to_index()
    kinds, numbered, unnamed = set(), {}, Counter()
    for i, path in enumerate(paths):
        parent = Path(path).parent
        if parent == root:
            continue
        folder = parent.name
        # The nearest WNID folder above the photo (Tiny-ImageNet keeps them in n01443537/images/).
        wnid = next((f for f in reversed(parent.relative_to(root).parts) if f in wnids), None)
        if wnid is not None:
            labels[i] = wnids[wnid]
            kinds.add("wnid")
        elif folder.isdigit():
            labels[i] = int(folder)
            kinds.add("index")
            numbered[folder] = numbered.get(folder, 0) + 1
        else:
            unnamed[os.path.relpath(parent, root)] += 1
    if numbered:
        _say_numbered_folders(root, numbered)
    if unnamed and kinds:  # some folders name classes, these do not: say so rather than score fewer images
        shown = ", ".join(f"{f}/ ({n})" for f, n in unnamed.most_common(4))
        warn_once(log, ("unnamed-folders", str(root)), "%s: %d image(s) in sub-folders that name no class (%s%s) "
                  "are unlabelled — name the folders by WNID or class index, or pass --labels CSV", root,
                  sum(unnamed.values()), shown, ", …" if len(unnamed) > 4 else "")
    source = "folders" if kinds else None
    kind = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else None)
    return labels, source, kind


def _say_numbered_folders(root: Path, numbered: dict[str, int]) -> None:
    """One warning: numbered sub-folders were taken as class indices (a choice: album folders 01/, 02/ look the same),
    with how to say otherwise."""
    names = sorted(numbered, key=lambda f: (int(f), f))
    shown = ", ".join(f"{f}/ → class {int(f)}" for f in names[:4]) + (f", … ({len(names)} folders)"
                                                                       if len(names) > 4 else "")
    images = sum(numbered.values())
    warn_once(log, ("numbered-folders", str(root), tuple(names)),
              "%s: %d image(s) in numbered sub-folders were labelled by the folder number as a class index (%s) — "
              "if the folders are not class indices (albums, dates), pass --unlabelled (from_folder(..., "
              "folder_labels=False)) to score agreement with FP32 only, or --labels CSV with the true classes",
              root, images, shown)


def describe_extensions() -> str:
    """The image file types read, for messages: '.jpg/.jpeg/.png/.bmp/.tif(f)/.webp'."""
    return ".jpg/.jpeg/.png/.bmp/.tif(f)/.webp"


def photo_files(root: str | os.PathLike) -> list[str]:
    """The photos under `root` (IMAGE_EXTENSIONS, and OTHER_PHOTO_EXTENSIONS, which decoding names if it cannot read
    them); other files are left out, counted in one info line."""
    photos, others = [], Counter()
    for path in walk_files(root):
        ext = os.path.splitext(path)[1].lower()
        if ext in IMAGE_EXTENSIONS or ext in OTHER_PHOTO_EXTENSIONS:
            photos.append(path)
        else:
            others[ext or "(no extension)"] += 1
    if others:
        log.info("%s: %d file(s) that are not photos are not used (%s)", root, sum(others.values()),
                 ", ".join(f"{n} {ext}" for ext, n in others.most_common(5)))
    return photos


def walk_files(root: str | os.PathLike) -> Iterator[str]:
    """Every file under `root`, recursively, as os.walk orders them (a folder's files by name, then its sub-folders
    by name), without names starting with '.'. Linked folders are followed — datasets are often assembled from
    links — and each real folder is read once: a link back to an enclosing folder (a loop) or a second link to a
    folder already read is skipped with a warning naming both. A link to a file that no longer exists is listed,
    so that decoding names it."""
    root = os.fspath(root)
    seen: dict[tuple[int, int], str] = {}
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            info = os.stat(folder)
            entries = sorted((e for e in os.scandir(folder) if not e.name.startswith(".")), key=lambda e: e.name)
        except OSError as exc:
            warn_once(log, ("unreadable-folder", folder), "%s cannot be read (%s) and is skipped", folder,
                      exc.strerror or exc)
            continue
        identity = (info.st_dev, info.st_ino)
        if identity in seen:
            kind = "links back to the enclosing folder" if _encloses(seen[identity], folder) else "is the same folder as"
            warn_once(log, ("folder-seen-twice", folder), "%s %s %s (a symbolic link); its images are read once, "
                      "under %s", folder, kind, seen[identity], seen[identity])
            continue
        seen[identity] = folder
        folders = []
        for entry in entries:
            if _is_dir(entry):
                folders.append(entry.path)
            elif _is_file(entry):
                yield entry.path
        stack.extend(reversed(folders))


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def _is_file(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file(follow_symlinks=True) or (entry.is_symlink() and not os.path.exists(entry.path))
    except OSError:
        return False


def _encloses(first: str, later: str) -> bool:
    """Whether `later` (a path reached through links) lies inside `first`, i.e. the link makes a loop."""
    return os.path.commonpath([first, later]) == first
