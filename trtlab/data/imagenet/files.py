"""The files preparation writes (labels CSV, classes TSV) and the links re-organisation makes."""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from trtlab.core.workspace import atomic_write_text, check_writable_location
from trtlab.data.dataset import Dataset
from trtlab.data.imagenet.common import CLASSES_TSV, LABELS_CSV, ImageNetPrepError

LABELS_HEADER = ["file", "index", "wnid"]


def write_outputs(folder: Path, dataset: Dataset, rows, classes) -> None:
    """`imagenet_val_labels.csv` (file relative to the images folder, class index, WNID; one row per labelled
    image) and `imagenet_classes.tsv` (index, WNID, name), each written atomically."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(LABELS_HEADER)
    writer.writerows((Path(os.path.relpath(path, dataset.root)).as_posix(), index, wnid)
                     for _, path, index, wnid in rows)
    atomic_write_text(folder / LABELS_CSV, text.getvalue())
    tsv = ["index\twnid\tname"] + [f"{i}\t{classes[i][0]}\t{classes[i][1]}" for i in sorted(classes)]
    atomic_write_text(folder / CLASSES_TSV, "\n".join(tsv) + "\n")


def link(path: Path, target: Path) -> None:
    """Create (or correct) the symbolic link `path` → `target` atomically; an existing correct link is left alone."""
    if path.is_symlink() and os.readlink(path) == str(target):
        return
    check_writable_location(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    try:
        os.symlink(target, tmp)
    except OSError as exc:
        raise ImageNetPrepError(f"cannot create links in {path.parent} ({exc.strerror}); choose a target on a file "
                                f"system that supports symbolic links") from exc
    os.replace(tmp, path)
