"""Labels CSVs: `file,label` rows (label = class index or WNID) as spreadsheets and scripts write them, and how
they are matched to the images of a folder."""
from __future__ import annotations

import csv
import logging
import os
import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from trtlab.core.errors import UserError, UserFileNotFound
from trtlab.core.log import warn_once

UNLABELLED = -1  # the label of an image no row names (it still counts for agreement metrics)
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
    rows = _read_rows(path)
    wnids = wnid_to_index()
    _refuse_loc_solution(path, rows[0][1])
    file_col, label_col, body = _columns(path, rows, lambda value: value.isdigit() or value in wnids)
    labels: dict[str, int] = {}
    lines: dict[str, int] = {}
    conflicts: list[str] = []
    kinds = set()
    for line_no, row in body:
        if len(row) <= max(file_col, label_col):
            raise LabelsCsvError(f"{path}:{line_no}: expected 'file,label', got {row!r}",
                                 "give every row a file and a label")
        key, label = row[file_col], row[label_col]
        value, kind = _label_value(path, line_no, key, label, wnids)
        kinds.add(kind)
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
    return LabelsTable(path, labels, lines, kinds.pop() if len(kinds) == 1 else "mixed")


def _read_rows(path: str) -> list[tuple[int, list[str]]]:
    """(line number, stripped cells) of every non-empty row."""
    if not os.path.isfile(path):
        raise UserFileNotFound(f"labels CSV {path} does not exist", "check the path given as --labels")
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
    return rows


def _refuse_loc_solution(path: str, header: list[str]) -> None:
    lowered = [h.lower() for h in header]
    if "predictionstring" in lowered or (len(header) >= 2 and len(header[1].split()) >= 5
                                         and _WNID.match(header[1].split()[0])):
        raise LabelsCsvError(
            f"{path} is Kaggle's ImageNet localization solution (ImageId,PredictionString with boxes), not a "
            f"file,label table",
            f"run `python -m trtlab prep --loc-solution {path}` once; it writes imagenet_val_labels.csv in the "
            f"workspace, which --labels accepts")


def _columns(path: str, rows, is_label) -> tuple[int, int, list]:
    """(file column, label column, data rows): from the header's names, else file,label — or label,file when
    only the first column holds labels."""
    header = rows[0][1]
    named_image = [_looks_like_image(cell) for cell in header[:2]]
    if len(header) >= 2 and any(named_image) and not (is_label(header[1]) or is_label(header[0])):
        # A first row that names an image file is data, not a header (`img0.jpg,tench` is a row with a bad label,
        # reported as such by _label_value, not a header without known column names).
        log.info("%s has no header (its first row names the image %r): every row is read as data",
                 os.path.basename(path), header[named_image.index(True)])
        return (0, 1, rows) if named_image[0] else (1, 0, rows)
    if len(header) >= 2 and not (is_label(header[1]) or is_label(header[0])):
        lowered = [h.lower().replace(" ", "_") for h in header]
        file_col = next((lowered.index(h) for h in FILE_HEADERS if h in lowered), None)
        label_col = next((lowered.index(h) for h in LABEL_HEADERS if h in lowered), None)
        if file_col is None or label_col is None or file_col == label_col:
            raise LabelsCsvError(
                f"{path}:1: header {header} has no {'file' if file_col is None else 'label'} column I know",
                f"name the columns one of {', '.join(FILE_HEADERS)} (the image) and one of "
                f"{', '.join(LABEL_HEADERS)} (class index or WNID)")
        return file_col, label_col, rows[1:]
    if len(header) >= 2:
        pairs = [row for _, row in rows if len(row) >= 2]
        if not all(is_label(row[1]) for row in pairs) and all(is_label(row[0]) for row in pairs):
            log.info("%s has no header and its first column holds the labels: read as label,file",
                     os.path.basename(path))
            return 1, 0, rows
    return 0, 1, rows


def _looks_like_image(cell: str) -> bool:
    """Whether a CSV cell is an image file name (`img0.jpg`, `day1/IMG_2.HEIC`): such a first row is data."""
    from trtlab.data.photo_types import IMAGE_EXTENSIONS, OTHER_PHOTO_EXTENSIONS

    return os.path.splitext(cell)[1].lower() in IMAGE_EXTENSIONS | OTHER_PHOTO_EXTENSIONS


def _label_value(path: str, line_no: int, key: str, label: str, wnids: dict[str, int]) -> tuple[int, str]:
    if label.isdigit():
        return int(label), "index"
    if label in wnids:
        return wnids[label], "wnid"
    hint = _class_name_hint(label, wnids)
    raise LabelsCsvError(f"{path}:{line_no}: label {label!r} (for {key!r}) is neither a class index (0, 1, 2, …) "
                         f"nor an ImageNet WNID (n01440764 …){hint}",
                         "write each row's label as the model's class index or the WNID (class names are not read: "
                         "they are ambiguous), and check that the columns are file,label")


def _class_name_hint(label: str, wnids: dict[str, int]) -> str:
    """"; it reads like a class name (ImageNet's 'tench' is class 0, n01440764)" when `label` is the short name of
    exactly one ImageNet class, else ''."""
    from trtlab.data.classes import class_index

    wanted = label.strip().lower()
    found = [(i, wnid) for i, (wnid, name) in class_index().items() if name.split(",")[0].strip().lower() == wanted]
    if len(found) != 1:
        return ""
    index, wnid = found[0]
    return f"; it reads like a class name (ImageNet's {label!r} is class {index}, {wnid})"


def read_labels_csv(path: str | os.PathLike) -> dict[str, int]:
    """`file,label` rows as {file: class index} (see parse_labels_csv for what is accepted)."""
    return parse_labels_csv(path).labels
