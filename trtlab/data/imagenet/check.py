"""Checks of ImageNet val images against their labels: what stops preparation and what is only reported."""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.data.imagenet.common import (VAL_CLASSES, VAL_IMAGES, VAL_PER_CLASS, ImageNetPrepError, LabelSource,
                                         examples, folder_wnid)


@dataclass
class Problem:
    kind: str  # duplicate_ids, unknown_wnids, conflicting_labels, images_without_labels, labels_without_images,
    #            class_counts, no_labelled_images
    severity: str  # "error" stops preparation; "warning" is reported and recorded
    message: str
    items: list[str] = field(default_factory=list)  # every affected id / WNID, for check_report.json


@dataclass
class CheckReport:
    images: int  # image files found
    labelled: list[tuple[str, str, int, str]]  # (id, path, class index, wnid), sorted by id
    per_class: np.ndarray  # labelled images per class index
    problems: list[Problem]
    source: str

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    def kinds(self, severity: str | None = None) -> set[str]:
        return {p.kind for p in self.problems if severity is None or p.severity == severity}

    @property
    def classes(self) -> int:
        return int((self.per_class > 0).sum())

    @property
    def is_full_set(self) -> bool:
        return (len(self.labelled) == VAL_IMAGES and self.classes == VAL_CLASSES
                and bool((self.per_class == VAL_PER_CLASS).all()))

    def summary_lines(self) -> list[str]:
        counts = self.per_class[self.per_class > 0]
        spread = f"{counts.min()}–{counts.max()} per class" if len(counts) else "no classes"
        full = " (the full ImageNet val set)" if self.is_full_set else ""
        lines = [f"{self.images:,} image files, {len(self.labelled):,} labelled in {self.classes:,} classes "
                 f"({spread}){full}; labels from {self.source}"]
        lines += [f"{p.severity.upper()}: {p.message}" for p in self.problems]
        return lines

    def raise_for_errors(self) -> None:
        if self.errors:
            text = " | ".join(p.message for p in self.errors)  # one line: the CLI prints `error: … — …`
            raise ImageNetPrepError(f"ImageNet val preparation stopped ({len(self.errors)} problem(s)): {text}",
                                    "fix the inputs listed and run prep again")

    def to_dict(self) -> dict:
        return {"images": self.images, "labelled": len(self.labelled), "classes": self.classes,
                "full_set": self.is_full_set, "source": self.source,
                "problems": [{"kind": p.kind, "severity": p.severity, "message": p.message, "count": len(p.items),
                              "items": p.items} for p in self.problems]}


def check_imagenet(images: dict[str, list[str]], source: LabelSource, classes: dict[int, tuple[str, str]],
                   images_dir: str | os.PathLike = "", expect_full_set: bool = False) -> CheckReport:
    """Match image files (id → paths) with labels and check them: duplicate ids, unknown WNIDs, conflicting folder
    labels, images without labels, labels without images, and per-class counts (50,000 = 1,000 × 50 for the full
    set, checked when `expect_full_set` or when 50,000 images are labelled)."""
    wnid_index = {wnid: i for i, (wnid, _) in classes.items()}
    dup_files = {k: v for k, v in images.items() if len(v) > 1}
    problems = (_duplicate_problems(dup_files, source, images_dir) + _unknown_wnid_problems(source, wnid_index)
                + _conflict_problems(images, source, images_dir)
                + _coverage_problems(images, source, images_dir, "error" if expect_full_set else "warning"))
    labelled = []
    for image_id in sorted(images):
        wnid = source.labels.get(image_id)
        if wnid in wnid_index and image_id not in dup_files:
            labelled.append((image_id, images[image_id][0], wnid_index[wnid], wnid))
    per_class = np.bincount([row[2] for row in labelled], minlength=len(classes)).astype(np.int64)
    if not labelled:
        problems.append(Problem("no_labelled_images", "error",
                                f"none of the {len(images):,} image(s) under {images_dir} has a usable label from "
                                f"{source.description}; check that images=... is the val folder and that the labels "
                                f"belong to it"))
    elif expect_full_set or len(labelled) == VAL_IMAGES:
        problems += _class_count_problems(len(labelled), per_class, classes)
    return CheckReport(len(images), labelled, per_class, problems, source.description)


def _duplicate_problems(dup_files: dict[str, list[str]], source: LabelSource, images_dir) -> list[Problem]:
    problems = []
    if dup_files:
        shown = examples(f"{k} ({' | '.join(v[:3])})" for k, v in sorted(dup_files.items()))
        problems.append(Problem("duplicate_ids", "error",
                                f"{len(dup_files)} image id(s) occur in more than one file under {images_dir}: "
                                f"{shown}; an id is the file name without extension, so each image must exist once "
                                f"— delete the extra copies or point images=... at a folder holding one copy",
                                sorted(dup_files)))
    if source.duplicates:
        shown = examples(f"{k} ({', '.join(v)})" for k, v in sorted(source.duplicates.items()))
        problems.append(Problem("duplicate_ids", "error",
                                f"{len(source.duplicates)} image id(s) are listed more than once in the labels "
                                f"({source.description}): {shown}; keep one row per image",
                                sorted(source.duplicates)))
    return problems


def _unknown_wnid_problems(source: LabelSource, wnid_index: dict[str, int]) -> list[Problem]:
    unknown = Counter(w for w in source.labels.values() if w not in wnid_index)
    unknown_declared = sorted(set(source.declared_wnids) - set(wnid_index))
    if not (unknown or unknown_declared):
        return []
    listed = [f"{w} ({n} label(s))" for w, n in unknown.most_common()] + \
             [f"{w} (declared by the source)" for w in unknown_declared if w not in unknown]
    return [Problem("unknown_wnids", "error",
                    f"{len(listed)} WNID(s) are not among the {len(wnid_index):,} ImageNet-1k classes of the class "
                    f"index: {examples(listed)}; these labels are not ILSVRC2012 (ImageNet-1k) val labels — use the "
                    f"matching devkit/LOC files, or fix those rows", sorted(set(unknown) | set(unknown_declared)))]


def _conflict_problems(images: dict[str, list[str]], source: LabelSource, images_dir) -> list[Problem]:
    if source.kind == "folders":
        return []
    conflicts = []
    for image_id, paths in images.items():
        wnid = folder_wnid(paths[0], Path(images_dir))
        label = source.labels.get(image_id)
        if wnid and label and wnid != label:
            conflicts.append(f"{image_id} in folder {wnid} but labelled {label}")
    if not conflicts:
        return []
    return [Problem("conflicting_labels", "error",
                    f"{len(conflicts)} image(s) sit in a WNID folder that disagrees with their label "
                    f"({source.description}): {examples(sorted(conflicts))}; the folders and the labels come from "
                    f"different sources — re-create the folders with organize() or pass labels='folders' to trust "
                    f"the folders", sorted(conflicts))]


def _coverage_problems(images: dict[str, list[str]], source: LabelSource, images_dir, severity: str) -> list[Problem]:
    problems = []
    without_labels = sorted(k for k in images if k not in source.labels)
    if without_labels and source.kind == "csv":  # the user's own photos: the ones without a row stay, unlabelled
        problems.append(Problem("images_without_labels", "warning",
                                f"{len(without_labels)} of {len(images)} photo(s) under {images_dir} have no row in "
                                f"{source.description}: {examples(without_labels)}; they are kept unlabelled — they "
                                f"calibrate and count for fidelity to FP32 (agreement, logit cosine), not for "
                                f"accuracy", without_labels))
    elif without_labels:
        problems.append(Problem("images_without_labels", severity,
                                f"{len(without_labels)} image(s) under {images_dir} have no label in "
                                f"{source.description}: {examples(without_labels)}; they are left out. ImageNet val "
                                f"images must keep their original names (ILSVRC2012_val_XXXXXXXX) — rename them, or "
                                f"move files that are not val images out of the folder", without_labels))
    without_images = sorted(k for k in source.labels if k not in images)
    if without_images:
        problems.append(Problem("labels_without_images", severity,
                                f"{len(without_images):,} of {len(source.labels):,} labelled image(s) have no file "
                                f"under {images_dir}: {examples(without_images)}; working with the "
                                f"{len(source.labels) - len(without_images):,} present (a subset). For the full set, "
                                f"re-extract the missing images", without_images))
    return problems


def _class_count_problems(labelled: int, per_class: np.ndarray, classes) -> list[Problem]:
    off = [f"{classes[i][0]} {classes[i][1].split(',')[0]}: {n}" for i, n in enumerate(per_class)
           if n != VAL_PER_CLASS]
    if labelled == VAL_IMAGES and not off:
        return []
    return [Problem("class_counts", "error",
                    f"expected the full ImageNet val set — {VAL_IMAGES:,} images in {VAL_CLASSES:,} classes, "
                    f"{VAL_PER_CLASS} each — but found {labelled:,} labelled images in "
                    f"{int((per_class > 0).sum()):,} classes; {len(off)} class(es) off: {examples(off)}. Re-extract "
                    f"the missing images (or drop expect_full_set / --expect-full-set to work with a subset)", off)]
