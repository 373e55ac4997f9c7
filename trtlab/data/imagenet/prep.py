"""Preparing ImageNet val once (labels CSV, classes TSV, checks, saved split) and loading what was prepared.

Outputs (workspace/imagenet/): `imagenet_val_labels.csv` (file, index, wnid), `imagenet_classes.tsv` (index, wnid,
name) in the torchvision (sorted WNID) order of `assets/imagenet_class_index.json`, `split.json` (seeded,
class-stratified calibration/evaluation split), `check_report.json` and `prep.json`. The user's image files are
never modified.
"""
from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import io
import json
import logging
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtlab.core.workspace import kaggle_input, read_json_checked, workspace_dir
from trtlab.data.dataset import UNLABELLED, Dataset, describe_extensions
from trtlab.data.disk import write_json, writing_to
from trtlab.data.imagenet.check import check_imagenet
from trtlab.data.imagenet.common import (CLASSES_TSV, FAILED_JSON, LABELS_CSV, PREP_JSON, REPORT_JSON, SOURCES, SPLIT_JSON,
                                         ImageNetPrepError, ImageNetPrepFileNotFound)
from trtlab.data.imagenet.files import link, write_outputs
from trtlab.data.imagenet.labels import read_source
from trtlab.data.imagenet.locate import describe_attached, find_imagenet_root, locate_inputs, scan_images
from trtlab.data.split import Split, saved_split

log = logging.getLogger(__name__)


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
    standin: bool = False  # the demo photos standing in for ImageNet (no ImageNet was found)

    @property
    def what(self) -> str:
        """What was prepared, for people: ImageNet val, the user's own photos (labels CSV), or the stand-in."""
        if self.standin:
            return "the demo stand-in (labelled demo photos, NOT ImageNet val)"
        if self.source == "csv":
            return f"your photos in {self.images_dir} ({self.source_description})"
        return "ImageNet val"

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
        calib_pc, eval_pc = (_range(info[f"{name}_images_per_class"]) for name in ("calibration", "evaluation"))
        return "\n".join([
            f"{self.what}: {len(self.dataset):,} images, {int((self.dataset.labels >= 0).sum()):,} labelled, in "
            f"{self.report['classes']:,} classes from {self.images_dir}",
            f"labels: {self.source_description}",
            f"classes (torchvision order): {self.class_index_source}",
            f"split (seed {self.split.seed}): calibration {info['calibration']:,} images ({calib_pc} per class; "
            f"{self.calibration_rule()}), evaluation {info['evaluation']:,} images ({eval_pc} per class), disjoint",
            f"written: {self.labels_csv}, {self.classes_tsv}, {self.split_json}",
        ])

    def calibration_rule(self) -> str:
        """How the calibration images were chosen, in words (why a per-class quota was not applied, when not)."""
        per_class, size = self.split.params.get("calibration_per_class"), self.split.params.get("calibration_size")
        if self.standin:
            return "half of the stand-in's photos: too few per class for a per-class quota"
        if self.source == "csv" and not per_class:
            return "half of your photos, stratified by class: too few per class for a per-class quota"
        if per_class:
            fewest = self.split.describe(self.dataset)["calibration_images_per_class"][0]
            return (f"{per_class} per class, as asked" if fewest >= per_class else
                    f"{per_class} per class asked; a class with fewer images keeps one to evaluate")
        return f"{size:,} in total, stratified by class" if size else "as saved"

    def split_table(self):
        """The split for people: one row per set — images, classes, images per class, how they were chosen (whole:
        pandas cut the calibration rule at 50 characters)."""
        from trtlab.core.tables import full_text_frame

        info = self.split.describe(self.dataset)
        rows = {}
        for name, chosen in (("calibration", self.calibration_rule()), ("evaluation", "every other labelled image")):
            rows[name] = {"images": f"{info[name]:,}", "classes": f"{info[f'{name}_classes']:,}",
                          "per class": _range(info[f"{name}_images_per_class"]), "chosen": chosen}
        table = full_text_frame([{"set": name, **row} for name, row in rows.items()]).set_index("set")
        table.index.name = f"split (seed {self.split.seed})"
        return table

    def _repr_markdown_(self) -> str:
        return "\n\n".join(f"**{line.split(': ', 1)[0]}:** {line.split(': ', 1)[1]}" if ": " in line else line
                             for line in self.summary().splitlines())


def _range(low_high) -> str:
    """(1, 2) → '1–2', (1, 1) → '1'."""
    low, high = low_high
    return f"{low}" if low == high else f"{low}–{high}"


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
        link(root / class_index()[int(label)][0] / Path(path).name, Path(path))
    return root


def prepare_imagenet(root: str | os.PathLike | None = None, **options) -> ImageNetPrep:
    """Find ImageNet val — or the user's own labelled photos — read its labels, check them, write the labels CSV /
    classes TSV and a saved split (see _prepare for the options). `root`: an ImageNet val tree, one folder per class
    (WNID), photos with a labels CSV beside them (found without being named), or that labels CSV itself. A
    preparation that fails records its one line (failed_attempt.json), so later notebooks say out loud that they
    do not run on the data asked for; a successful one removes it."""
    from trtlab.core.errors import UserError

    folder = workspace_dir(options.get("workspace")) / "imagenet"
    try:
        prep = _prepare(root, **options)
    except UserError as exc:
        try:
            write_json(folder / FAILED_JSON, {"error": exc.line(prefix=""), "root": str(root) if root else None,
                                              "time": _dt.datetime.now().isoformat(timespec="seconds")})
        except OSError:
            pass  # a read-only workspace: the error itself is what the user sees
        raise
    (folder / FAILED_JSON).unlink(missing_ok=True)
    return prep


def last_failed_attempt(workspace=None) -> dict | None:
    """What the last failed preparation said ({'error', 'root', 'time'}), when it failed after the last success."""
    path = workspace_dir(workspace) / "imagenet" / FAILED_JSON
    return read_json_checked(path) if path.exists() else None


def _prepare(root: str | os.PathLike | None = None, *, images: str | os.PathLike | None = None,
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
    labels_csv = None
    if isinstance(labels, (str, os.PathLike)) and os.fspath(labels).lower().endswith(".csv"):
        labels_csv, labels = Path(labels), "csv"  # the user's own labels CSV, named
        if not labels_csv.is_file():
            raise ImageNetPrepError(f"labels CSV {labels_csv} does not exist", "pass the path of a file,label CSV")
        if root is None and images is None:
            root = labels_csv.parent
    if root is None and images is None:
        root = find_imagenet_root()
        standin = root is None
        if standin:
            root = _use_standin(workspace, say)
            # 1–2 photos per class: a per-class calibration quota would leave nothing to evaluate.
            calibration_per_class, calibration_size = None, None
        else:
            say(f"[trtlab] ImageNet found at {root}")
    if labels not in ("auto",) + SOURCES:
        raise ImageNetPrepError(f"labels={labels!r}: choose auto, {', '.join(SOURCES)}")
    inputs = locate_inputs(root, images, devkit, ground_truth, loc_solution, synset_mapping, labels_csv)
    classes, class_source = _load_class_index(class_index)
    found = scan_images(inputs.images_dir, progress)
    if not found:
        raise ImageNetPrepError(f"no images ({describe_extensions()}) under {inputs.images_dir}; pass images=... "
                                f"(the folder with the ILSVRC2012_val_*.JPEG files)")
    source = read_source(labels, inputs, found)
    report = check_imagenet(found, source, classes, inputs.images_dir, expect_full_set)
    for line in report.summary_lines():
        say(f"[trtlab] {line}")

    folder = workspace_dir(workspace) / "imagenet"
    write_json(folder / REPORT_JSON, report.to_dict())
    report.raise_for_errors()

    rows = report.labelled
    if source.kind == "csv":  # the user's own photos: those without a label row stay, unlabelled (-1)
        rows = sorted(rows + [(image_id, found[image_id][0], UNLABELLED, "") for image_id in found
                              if image_id not in source.labels], key=lambda row: row[0])
    dataset = Dataset(_dataset_name(standin, source.kind, inputs.images_dir), [path for _, path, _, _ in rows],
                      np.asarray([r[2] for r in rows], np.int64), root=str(inputs.images_dir))
    # Written last, prep.json records the rows and sha256 of the files before it: an interrupted rerun leaves the
    # earlier preparation whole (atomic writes) or a file that load_imagenet names as changed.
    outputs = write_outputs(folder, dataset, rows, classes)
    if standin or (source.kind == "csv" and calibration_size is None):
        # The stand-in and a user's own photos hold a few images per class: a per-class quota would leave nothing
        # to evaluate, so half of them calibrate (stratified by class; unlabelled ones at random).
        calibration_per_class, calibration_size = None, max(1, len(dataset) // 2)
    with writing_to(folder / SPLIT_JSON):
        split = _load_or_make_split(folder / SPLIT_JSON, dataset, calibration_per_class, calibration_size, seed, say)
    summary = {k: v for k, v in report.to_dict().items() if k != "problems"}
    summary["problems"] = [{k: v for k, v in p.items() if k != "items"} for p in report.to_dict()["problems"]]
    record = {"images_dir": str(inputs.images_dir), "source": source.kind, "source_description": source.description,
              "class_index": class_source, "report": summary, "arguments": _jsonable(arguments),
              "standin": standin, "dataset_fingerprint": dataset.fingerprint(), "outputs": outputs}
    write_json(folder / PREP_JSON, record)
    prep = ImageNetPrep(folder, inputs.images_dir, source.kind, source.description, dataset, split, summary,
                        classes, class_source, standin)
    if progress:
        print(prep.summary())  # what prep produced: the command's output, on stdout
    return prep


def _dataset_name(standin: bool, source: str = "", images_dir: Path | None = None) -> str:
    """'imagenet-val'; 'photos-<folder>' for the user's own photos with a labels CSV; or the demo stand-in's own
    name: stores and titles never call photos that are not ImageNet val ImageNet."""
    from trtlab.data.demo import STANDIN_DATASET_NAME

    if standin:
        return STANDIN_DATASET_NAME
    if source == "csv":
        return "photos-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(images_dir).name if images_dir else "own")[:40]
    return "imagenet-val"


def _use_standin(workspace, say) -> Path:
    root = demo_standin(workspace)
    looked = ["$TRTLAB_IMAGENET is not set"]
    if kaggle_input().is_dir():
        looked.append(f"nothing under {kaggle_input()} ({describe_attached()}) holds LOC_val_solution.csv, an "
                      f"ILSVRC2012 devkit or WNID folders")
    else:
        looked.append(f"there is no {kaggle_input()} (not a Kaggle kernel)")
    say(f"[trtlab] no ImageNet val found: {' and '.join(looked)}. Using the demo stand-in {root} instead (the "
        f"labelled demo photos, one folder per WNID): it is not ImageNet, and results on it say nothing about "
        f"ImageNet accuracy. To use ImageNet, give its folder: --root FOLDER (notebook 01: IMAGENET = '...') or "
        f"$TRTLAB_IMAGENET")
    return root


def _jsonable(arguments: dict) -> dict:
    return {k: (str(v) if isinstance(v, os.PathLike) else v) for k, v in arguments.items()}


def _load_or_make_split(path: Path, dataset: Dataset, per_class, size, seed, say) -> Split:
    """The saved split at `path` when it was made for this dataset with these settings, else a new one (the one split
    store, trtlab.data.split.saved_split; it logs which setting differed)."""
    if per_class is None and size is None:
        raise ImageNetPrepError("no split settings given", "give calibration_per_class (e.g. 10) or "
                                "calibration_size for the split")
    before = path.stat().st_mtime_ns if path.exists() else None
    split = saved_split(dataset, size, seed, calibration_per_class=per_class, path=path)
    if before is not None and path.stat().st_mtime_ns == before:  # a new split's save is logged by saved_split
        say(f"[trtlab] reusing the saved split {path}: {len(split.calibration):,} calibration, "
            f"{len(split.evaluation):,} evaluation images")
    return split


def load_imagenet(workspace=None) -> ImageNetPrep:
    """The ImageNet val prepared earlier in this workspace (by prepare_imagenet / `python -m trtlab prep`).

    Each file is checked before it is used: a missing, cut-short or changed labels CSV, classes TSV or split is a
    one-line error naming the file and the command that writes it again (prep.json records what prep wrote)."""
    folder = workspace_dir(workspace) / "imagenet"
    # A damaged prep.json is set aside (named in a warning) and counts as "not prepared": prep rebuilds it.
    record = read_json_checked(folder / PREP_JSON)
    if record is None:
        raise ImageNetPrepFileNotFound(f"ImageNet val is not prepared in {folder.parent}",
                                       "run notebook 01_imagenet_prep or `python -m trtlab prep --root <imagenet "
                                       "folder>` first")
    rebuild = rebuild_command(record, workspace)
    images_dir = Path(record["images_dir"])
    files, labels = _read_labels(folder / LABELS_CSV, record, rebuild)
    dataset = Dataset(_dataset_name(record.get("standin"), record.get("source", ""), images_dir),
                      [str(images_dir / f) for f in files],
                      np.asarray(labels, np.int64), root=str(images_dir))
    classes = _read_classes(folder / CLASSES_TSV, record, set(labels) - {UNLABELLED}, rebuild)
    split = _read_split(folder / SPLIT_JSON, len(dataset), rebuild)
    if split.dataset_fingerprint != dataset.fingerprint():
        raise ImageNetPrepError(f"the images under {images_dir} changed since preparation (files added, removed or "
                                f"their contents replaced)", f"run `{rebuild}` to refresh the labels and split")
    return ImageNetPrep(folder, images_dir, record["source"], record["source_description"], dataset, split,
                        record["report"], classes, record.get("class_index", ""), bool(record.get("standin")))


def rebuild_command(record: dict, workspace=None) -> str:
    """The `python -m trtlab prep …` command that prepares again what prep.json describes."""
    arguments = record.get("arguments") or {}
    words = ["python", "-m", "trtlab", "prep"]
    for key, flag in (("root", "--root"), ("images", "--data"), ("devkit", "--devkit"),
                      ("ground_truth", "--ground-truth"), ("loc_solution", "--loc-solution"),
                      ("synset_mapping", "--synset-mapping"), ("class_index", "--class-index")):
        if arguments.get(key):
            words += [flag, str(arguments[key])]
    if arguments.get("labels") not in (None, "auto"):
        words += ["--label-source", arguments["labels"]]
    if arguments.get("calibration_size") is not None:
        words += ["--calibration-size", str(arguments["calibration_size"])]
    elif arguments.get("calibration_per_class") not in (None, 10):
        words += ["--calibration-per-class", str(arguments["calibration_per_class"])]
    if arguments.get("seed"):
        words += ["--seed", str(arguments["seed"])]
    if arguments.get("expect_full_set"):
        words.append("--expect-full-set")
    if workspace is not None:
        words += ["--workspace", str(workspace)]
    return shlex.join(words)


def _read_labels(path: Path, record: dict, rebuild: str) -> tuple[list[str], list[int]]:
    expected = (record.get("outputs") or {}).get(LABELS_CSV) or {}
    rows = expected.get("rows", (record.get("report") or {}).get("labelled"))
    text = _read_prepared(path, expected, rows, rebuild)
    files, labels = [], []
    for line_no, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        unlabelled = row.get("index") == str(UNLABELLED) and not row.get("wnid")  # own photos without a label
        if not (row.get("file") and ((row.get("index") or "").isdigit() and row.get("wnid") or unlabelled)):
            raise ImageNetPrepError(f"{path} is cut short or damaged at line {line_no} ({row})",
                                    f"run `{rebuild}` to write it again")
        files.append(row["file"])
        labels.append(int(row["index"]))
    if rows is not None and len(files) != rows:
        raise ImageNetPrepError(f"{path} is cut short: {len(files):,} of the {rows:,} rows prep wrote",
                                f"run `{rebuild}` to write it again")
    return files, labels


def _read_classes(path: Path, record: dict, labels: set[int], rebuild: str) -> dict[int, tuple[str, str]]:
    expected = (record.get("outputs") or {}).get(CLASSES_TSV) or {}
    text = _read_prepared(path, expected, expected.get("rows"), rebuild)
    classes = {}
    for row in csv.DictReader(io.StringIO(text), delimiter="\t"):
        if (row.get("index") or "").isdigit() and row.get("wnid"):
            classes[int(row["index"])] = (row["wnid"], row.get("name") or "")
    missing = sorted(labels - set(classes))
    if missing or len(classes) != expected.get("rows", len(classes)):
        raise ImageNetPrepError(f"{path} is cut short: {len(classes):,} classes"
                                + (f" of the {expected['rows']:,} prep wrote" if "rows" in expected else "")
                                + (f", without class {missing[0]} the labels use" if missing else ""),
                                f"run `{rebuild}` to write it again")
    return classes


def _read_prepared(path: Path, expected: dict, rows, rebuild: str) -> str:
    """The text of a file prep wrote, refused (with the file and the command that rewrites it) when it is missing
    or no longer the bytes prep recorded."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImageNetPrepFileNotFound(f"{path} is missing (prep.json says ImageNet val was prepared here: the "
                                       f"preparation was interrupted or the file was deleted)",
                                       f"run `{rebuild}` to write it again") from None
    if expected.get("sha256") and hashlib.sha256(data).hexdigest() != expected["sha256"]:
        lines = data.count(b"\n") - 1
        what = (f"is cut short: {max(lines, 0):,} of the {rows:,} rows prep wrote" if rows and lines < rows
                else "was changed since prep wrote it (its sha256 differs from the one in prep.json)")
        raise ImageNetPrepError(f"{path} {what}", f"run `{rebuild}` to write it again")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ImageNetPrepError(f"{path} is damaged (not UTF-8 text)", f"run `{rebuild}` to write it again") from None


def _read_split(path: Path, images: int, rebuild: str) -> Split:
    try:
        split = Split.load(path)
    except FileNotFoundError:
        raise ImageNetPrepFileNotFound(f"{path} is missing (the preparation was interrupted or the file was "
                                       f"deleted)", f"run `{rebuild}` to make the split again") from None
    except (ValueError, KeyError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
        raise ImageNetPrepError(f"{path} is cut short or damaged ({type(exc).__name__}: {exc})",
                                f"run `{rebuild}` to make the split again") from None
    used = np.concatenate([split.calibration, split.evaluation])
    if len(used) and (used.min() < 0 or used.max() >= images):
        raise ImageNetPrepError(f"{path} names image {int(used.max())} but the labels CSV has {images:,} images",
                                f"run `{rebuild}` to make the split again")
    return split
