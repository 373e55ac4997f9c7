"""Datasets: a list of image paths with optional integer labels (-1 = unlabelled)."""
from __future__ import annotations

import csv
import logging
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from trtlab.core.errors import UserError, UserFileNotFound
from trtlab.core.log import warn_once
from trtlab.core.workspace import hash_json

# Photos OpenCV reads (any case): JPEG (also as .jpe/.jfif, and phone "motion photos" with a video appended), PNG,
# BMP, TIFF, WebP.
IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".bmp", ".dib", ".tif", ".tiff", ".webp"}
# Photo formats some OpenCV builds cannot decode (HEIC from iPhones, AVIF, ...): a folder's files of these kinds are
# still listed, so one the installed OpenCV cannot read is named as skipped (with what to do) rather than ignored.
OTHER_PHOTO_EXTENSIONS = {".heic", ".heif", ".avif", ".gif", ".jp2", ".jxl"}
UNLABELLED = -1
# Header names accepted in a labels CSV (case-insensitive), in order of preference.
FILE_HEADERS = ("file", "filename", "file_name", "image", "image_id", "imageid", "image_name", "img", "path", "name",
                "id")
LABEL_HEADERS = ("label", "index", "class_index", "class_id", "classid", "class", "target", "category", "label_id",
                 "wnid", "synset", "y")
log = logging.getLogger(__name__)
_WNID = re.compile(r"^n\d{8}$")


class LabelsCsvError(UserError, ValueError):
    """A labels CSV that cannot be read as `file,label` rows (names the file and, where it can, the line)."""


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
        """Stable per-image ids: paths relative to the root when there is one."""
        if self.root:
            return [os.path.relpath(p, self.root) for p in self.paths]
        return list(self.paths)

    def content_hashes(self, progress: bool = True) -> list[str]:
        """A content hash (blake2b) of each file's bytes, "missing" for a file that cannot be read. Read once and
        remembered by the file's stat (data.file_hashes): later calls only stat the files."""
        from trtlab.data.file_hashes import file_hashes

        return file_hashes().hashes(self.paths, progress=progress, desc=f"hash {self.name}")

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
                    name: str | None = None) -> "Dataset":
        """Images in `root`, flat or one sub-folder per class, scanned recursively (linked folders followed, each
        folder once).

        Labels come from `labels_csv` (columns `file,label`; label = class index or WNID) when given, else from
        sub-folder names that are WNIDs (n01440764) or class indices (0..999); otherwise images are unlabelled.
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
        else:
            labels, source, kind = _folder_labels(paths, root)
        return cls(name=name or root.name, paths=paths, labels=labels, root=str(root), label_source=source,
                   label_kind=kind)


def _folder_labels(paths: list[str], root: Path) -> tuple[np.ndarray, str | None, str | None]:
    """Labels from each image's folder name (a WNID or a class index), the source ("folders") and kind."""
    from trtlab.data.classes import wnid_to_index

    labels = np.full(len(paths), UNLABELLED, np.int64)
    wnids = wnid_to_index()
    kinds = set()
    for i, path in enumerate(paths):
        parent = Path(path).parent
        if parent == root:
            continue
        folder = parent.name
        if folder in wnids:
            labels[i] = wnids[folder]
            kinds.add("wnid")
        elif folder.isdigit():
            labels[i] = int(folder)
            kinds.add("index")
    source = "folders" if kinds else None
    kind = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else None)
    return labels, source, kind


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


@dataclass
class LabelsTable:
    """A parsed labels CSV: key (file as written) → class index, with the line each came from."""

    path: str
    labels: dict[str, int]
    lines: dict[str, int]
    kind: str | None  # "wnid", "index" or "mixed"

    def apply(self, paths: list[str], root) -> np.ndarray:
        """Labels for `paths` (keys may be the path relative to `root`, the file name, or the name without
        extension). A CSV that matches no image is an error; rows for files that are not there are reported."""
        labels = np.full(len(paths), UNLABELLED, np.int64)
        matched: dict[str, list[str]] = defaultdict(list)  # row key → the images it labels (relative paths)
        for i, path in enumerate(paths):
            rel = os.path.relpath(path, root)
            base = os.path.basename(path)
            for key in (rel, rel.replace(os.sep, "/"), base, os.path.splitext(base)[0]):
                if key in self.labels:
                    labels[i] = self.labels[key]
                    matched[key].append(rel.replace(os.sep, "/"))
                    break
        self._refuse_rows_matching_several(matched)
        used = set(matched)
        name = os.path.basename(self.path)
        if not used:
            example_row = next(iter(self.labels), "?")
            example_file = os.path.relpath(paths[0], root)
            raise LabelsCsvError(
                f"{self.path} labels none of the {len(paths):,} images under {root} (the CSV names e.g. "
                f"{example_row!r}, the folder holds e.g. {example_file!r})",
                "the first column must be each image's path relative to the data folder, its file name, or its "
                "name without extension")
        unused = [k for k in self.labels if k not in used]
        if unused:
            shown = ", ".join(f"{k!r} (line {self.lines[k]})" for k in unused[:5])
            warn_once(log, ("labels-rows-without-files", self.path, str(root), len(unused)),
                      "%s: %d row(s) name files that are not under %s and are ignored: %s%s", name, len(unused),
                      root, shown, ", …" if len(unused) > 5 else "")
        unlabelled = int((labels == UNLABELLED).sum())
        if unlabelled:
            log.info("%s: %d of %d image(s) have no row and stay unlabelled (they still count for agreement "
                     "metrics)", name, unlabelled, len(paths))
        return labels

    def _refuse_rows_matching_several(self, matched: dict[str, list[str]]) -> None:
        """A row naming a file only by its name (`img.jpg,243`) must label one image: with `day1/img.jpg` and
        `day2/img.jpg` both present, it is an error naming both, never a silent double label."""
        several = {key: rels for key, rels in matched.items() if len(rels) > 1}
        if not several:
            return
        shown = "; ".join(f"line {self.lines[key]}: {key!r} matches {', '.join(rels[:4])}"
                          + (f" (and {len(rels) - 4} more)" if len(rels) > 4 else "")
                          for key, rels in list(several.items())[:3])
        key, rels = next(iter(several.items()))
        raise LabelsCsvError(
            f"{self.path}: {len(several)} row(s) name a file that exists in several folders: {shown}",
            f"write each image's path relative to the data folder in the first column, one row per image "
            f"(e.g. '{rels[0]},{self.labels[key]}' and '{rels[1]},<its label>')")


def _sniff_delimiter(first_line: str) -> str:
    # Excel writes ';' in locales with a decimal comma; tabs come from spreadsheets too.
    counts = {d: first_line.count(d) for d in (",", ";", "\t")}
    best = max(counts, key=counts.get)
    return best if counts[best] else ","


def parse_labels_csv(path: str | os.PathLike) -> LabelsTable:
    """Read a labels CSV: `file,label` rows, label = class index or WNID.

    Tolerated: a UTF-8 byte-order mark and CRLF line ends (Excel), `;` or tab separators, a header with any of the
    names in FILE_HEADERS / LABEL_HEADERS in either order, and headerless files whose columns are swapped
    (label,file). Refused with the file and line named: unknown header names (the accepted ones are listed), a
    label that is neither a non-negative integer nor a WNID, one file given two different labels, and Kaggle's
    LOC_val_solution.csv (which `python -m trtlab prep` reads).
    """
    from trtlab.data.classes import wnid_to_index

    path = str(path)
    name = os.path.basename(path)
    if not os.path.isfile(path):
        raise UserFileNotFound(f"labels CSV {path} does not exist", "check the path given as --labels")
    wnids = wnid_to_index()
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise LabelsCsvError(f"{path} is not UTF-8 text (byte {exc.start})",
                             "save it as CSV UTF-8 (Excel: File › Save As › CSV UTF-8)") from None
    rows = [(n, [c.strip() for c in row]) for n, row in
            enumerate(csv.reader(text.splitlines(), delimiter=_sniff_delimiter(text.split("\n", 1)[0])), start=1)]
    rows = [(n, row) for n, row in rows if any(row)]
    if not rows:
        raise LabelsCsvError(f"{path} is empty", "write one 'file,label' row per image")

    def is_label(value: str) -> bool:
        return value.isdigit() or value in wnids

    header = rows[0][1]
    lowered = [h.lower().replace(" ", "_") for h in header]
    if "predictionstring" in lowered or (len(header) >= 2 and len(header[1].split()) >= 5
                                         and _WNID.match(header[1].split()[0])):
        raise LabelsCsvError(
            f"{path} is Kaggle's ImageNet localization solution (ImageId,PredictionString with boxes), not a "
            f"file,label table",
            f"run `python -m trtlab prep --loc-solution {path}` once; it writes imagenet_val_labels.csv in the "
            f"workspace, which --labels accepts")
    file_col, label_col = 0, 1
    if len(header) >= 2 and not (is_label(header[1]) or is_label(header[0])):
        # A header row: find the columns by name.
        file_col = next((lowered.index(h) for h in FILE_HEADERS if h in lowered), None)
        label_col = next((lowered.index(h) for h in LABEL_HEADERS if h in lowered), None)
        if file_col is None or label_col is None or file_col == label_col:
            raise LabelsCsvError(
                f"{path}:1: header {header} has no {'file' if file_col is None else 'label'} column I know",
                f"name the columns one of {', '.join(FILE_HEADERS)} (the image) and one of "
                f"{', '.join(LABEL_HEADERS)} (class index or WNID)")
        body = rows[1:]
    else:
        body = rows
        if body and len(body[0][1]) >= 2:
            second = [row[1] for _, row in body if len(row) >= 2]
            first = [row[0] for _, row in body if len(row) >= 2]
            if not all(is_label(v) for v in second) and all(is_label(v) for v in first):
                file_col, label_col = 1, 0
                log.info("%s has no header and its first column holds the labels: read as label,file", name)
    labels: dict[str, int] = {}
    lines: dict[str, int] = {}
    conflicts: list[str] = []
    kinds = set()
    for line_no, row in body:
        if len(row) <= max(file_col, label_col):
            raise LabelsCsvError(f"{path}:{line_no}: expected 'file,label', got {row!r}",
                                 "give every row a file and a label")
        key, label = row[file_col], row[label_col]
        if label.isdigit():
            value = int(label)
            kinds.add("index")
        elif label in wnids:
            value = wnids[label]
            kinds.add("wnid")
        else:
            raise LabelsCsvError(f"{path}:{line_no}: label {label!r} (for {key!r}) is neither a class index "
                                 f"(0, 1, 2, …) nor an ImageNet WNID (n01440764 …)",
                                 "fix the row, or check that the columns are file,label")
        if key in labels and labels[key] != value:
            conflicts.append(f"{key!r} is {labels[key]} on line {lines[key]} and {value} on line {line_no}")
            continue
        labels.setdefault(key, value)
        lines.setdefault(key, line_no)
    if conflicts:
        more = f" (and {len(conflicts) - 5} more)" if len(conflicts) > 5 else ""
        raise LabelsCsvError(f"{path}: {len(conflicts)} file(s) have two different labels: "
                             + "; ".join(conflicts[:5]) + more, "keep one row per file")
    if not labels:
        raise LabelsCsvError(f"{path} has a header but no rows", "write one 'file,label' row per image")
    kind = kinds.pop() if len(kinds) == 1 else "mixed"
    return LabelsTable(path, labels, lines, kind)


def read_labels_csv(path: str | os.PathLike) -> dict[str, int]:
    """`file,label` rows as {file: class index} (see parse_labels_csv for what is accepted)."""
    return parse_labels_csv(path).labels
