"""Datasets: a list of image paths with optional integer labels (-1 = unlabelled)."""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .workspace import hash_json

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png"}
UNLABELLED = -1


@dataclass
class Dataset:
    """Image files and their labels. `labels[i] == -1` marks an unlabelled image (still used for consistency)."""

    name: str
    paths: list[str]
    labels: np.ndarray = field(default=None)
    root: str | None = None

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

    def fingerprint(self) -> str:
        """Hash of the file list (path, size, mtime) and labels: changes when any file or label changes."""
        entries = []
        for path in self.paths:
            try:
                stat = os.stat(path)
                entries.append((path, stat.st_size, int(stat.st_mtime)))
            except OSError:
                entries.append((path, -1, -1))
        return hash_json({"files": entries, "labels": self.labels.tolist()})

    def subset(self, indices, name: str | None = None) -> "Dataset":
        indices = np.asarray(indices, np.int64)
        return Dataset(
            name=name or f"{self.name}[{len(indices)}]",
            paths=[self.paths[i] for i in indices],
            labels=self.labels[indices],
            root=self.root,
        )

    @classmethod
    def from_folder(cls, root: str | os.PathLike, labels_csv: str | os.PathLike | None = None,
                    name: str | None = None) -> "Dataset":
        """Images in `root`, flat or one sub-folder per class, scanned recursively.

        Labels come from `labels_csv` (columns `file,label`; label = class index or WNID) when given, else from
        sub-folder names that are WNIDs (n01440764) or class indices (0..999); otherwise images are unlabelled.
        """
        from .classes import wnid_to_index

        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"dataset folder {root} does not exist; pass the folder that holds the images")
        paths = sorted(
            str(p) for p in root.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file()
        )
        if not paths:
            raise FileNotFoundError(f"no .jpg/.jpeg/.png images under {root}")
        labels = np.full(len(paths), UNLABELLED, np.int64)
        if labels_csv is not None:
            table = read_labels_csv(labels_csv)
            for i, path in enumerate(paths):
                rel = os.path.relpath(path, root)
                for key in (rel, os.path.basename(path), os.path.splitext(os.path.basename(path))[0]):
                    if key in table:
                        labels[i] = table[key]
                        break
        else:
            wnids = wnid_to_index()
            for i, path in enumerate(paths):
                parent = Path(path).parent
                if parent == root:
                    continue
                folder = parent.name
                if folder in wnids:
                    labels[i] = wnids[folder]
                elif folder.isdigit():
                    labels[i] = int(folder)
        return cls(name=name or root.name, paths=paths, labels=labels, root=str(root))


def read_labels_csv(path: str | os.PathLike) -> dict[str, int]:
    """`file,label` rows (header optional); label is a class index or a WNID."""
    from .classes import wnid_to_index

    wnids = wnid_to_index()
    table: dict[str, int] = {}
    with open(path, newline="") as fh:
        for line_no, row in enumerate(csv.reader(fh), start=1):
            if not row or row[0].strip().lower() in ("file", "filename", "image", "path"):
                continue
            if len(row) < 2:
                raise ValueError(f"{path}:{line_no}: expected 'file,label', got {row!r}")
            key, label = row[0].strip(), row[1].strip()
            if label.isdigit():
                table[key] = int(label)
            elif label in wnids:
                table[key] = wnids[label]
            else:
                raise ValueError(f"{path}:{line_no}: label {label!r} is neither a class index nor a known WNID")
    return table
