"""The files preparation writes (labels CSV, classes TSV) and the links re-organisation makes."""
from __future__ import annotations

import csv
import errno
import hashlib
import io
import os
from pathlib import Path

from trtlab.core.workspace import check_writable_location
from trtlab.data.dataset import Dataset
from trtlab.data.disk import write_text, writing_to
from trtlab.data.imagenet.common import CLASSES_TSV, LABELS_CSV, ImageNetPrepError

LABELS_HEADER = ["file", "index", "wnid"]


def write_outputs(folder: Path, dataset: Dataset, rows, classes) -> dict:
    """`imagenet_val_labels.csv` (file relative to the images folder, class index, WNID; one row per labelled
    image) and `imagenet_classes.tsv` (index, WNID, name), each written atomically. Returns what prep.json records
    of them (rows and sha256), so that a file cut short or changed later is named when it is loaded."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(LABELS_HEADER)
    writer.writerows((Path(os.path.relpath(path, dataset.root)).as_posix(), index, wnid)
                     for _, path, index, wnid in rows)
    tsv = "\n".join(["index\twnid\tname"] + [f"{i}\t{classes[i][0]}\t{classes[i][1]}" for i in sorted(classes)])
    written = {}
    for name, content, count in ((LABELS_CSV, text.getvalue(), len(rows)), (CLASSES_TSV, tsv + "\n", len(classes))):
        write_text(folder / name, content)
        written[name] = {"rows": count, "sha256": hashlib.sha256(content.encode("utf-8")).hexdigest()}
    return written


def link(path: Path, target: Path) -> None:
    """Create (or correct) the symbolic link `path` → `target` atomically; an existing correct link is left alone."""
    if path.is_symlink() and os.readlink(path) == str(target):
        return
    check_writable_location(path)
    with writing_to(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        try:
            os.symlink(target, tmp)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1), errno.EROFS, errno.EACCES):
                raise  # a full disk or a read-only place: named by writing_to
            raise ImageNetPrepError(f"cannot create links in {path.parent} ({exc.strerror}); choose a target on a "
                                    f"file system that supports symbolic links") from exc
        os.replace(tmp, path)
