"""Seeded, class-stratified split of a dataset into a calibration set and a disjoint evaluation set; the one split
store (`saved_split`: made once, saved as JSON, reused by every notebook, CLI run and ImageNet prep while it was made
for this dataset with these settings); and the one calibration-image rule (`select_calibration_images`) that
trtlab's calibration and TensorRT's calibrator share, so both calibrate on the same images."""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.core.errors import UserValueError
from trtlab.core.provenance import check_provenance, differences
from trtlab.core.workspace import atomic_write_json, hash_json, read_checked, workspace_dir
from trtlab.data.dataset import Dataset

log = logging.getLogger(__name__)

# Calibration images when a recipe names no number: NVIDIA suggests about 500 for ImageNet classifiers; more costs
# time and rarely moves a threshold.
DEFAULT_CALIBRATION_IMAGES = 512


#: Recorded in a split's settings: splits saved before the calibration set kept its seeded order (sorted by index)
#: differ in it, so they are made again rather than reused.
CALIBRATION_ORDER = "seeded"


class CalibrationSizeError(UserValueError):
    """More calibration images were asked for than the calibration set has."""


@dataclass
class Split:
    calibration: np.ndarray  # indices into the dataset
    evaluation: np.ndarray
    seed: int
    dataset_fingerprint: str
    method: str
    params: dict = field(default_factory=dict)  # the make_split arguments, so a saved split can be re-checked

    def calibration_set(self, dataset: Dataset) -> Dataset:
        self._check(dataset)
        return dataset.subset(self.calibration, name=f"{dataset.name}-calib")

    def evaluation_set(self, dataset: Dataset, per_class: int | None = None) -> Dataset:
        """The evaluation images, or with `per_class` a quick subset of them (see evaluation_subset)."""
        self._check(dataset)
        if per_class is None:
            return dataset.subset(self.evaluation, name=f"{dataset.name}-eval")
        return dataset.subset(self.evaluation_subset(dataset, per_class), name=f"{dataset.name}-eval{per_class}pc")

    def evaluation_subset(self, dataset: Dataset, per_class: int) -> np.ndarray:
        """Indices of at most `per_class` evaluation images of each labelled class, for quick runs.

        Seeded by the split's seed and nested: the 5-per-class subset is part of the 10-per-class one, so a quick
        result is always a subset of a fuller one. Unlabelled evaluation images are left out (no accuracy).
        """
        self._check(dataset)
        if per_class < 1:
            raise ValueError(f"per_class={per_class} must be at least 1")
        labels = dataset.labels[self.evaluation]
        chosen = []
        for label in np.unique(labels[labels >= 0]):
            members = self.evaluation[labels == label]
            # One fixed permutation per class (seed, label): taking its first N makes subsets nested.
            order = np.random.default_rng([self.seed, int(label)]).permutation(len(members))
            chosen.extend(members[order[:per_class]].tolist())
        return np.asarray(sorted(chosen), np.int64)

    def describe(self, dataset: Dataset | None = None) -> dict:
        """Sizes and settings (and, given the dataset, classes and (min, max) images per class) of both sets."""
        info = {"calibration": len(self.calibration), "evaluation": len(self.evaluation), "seed": self.seed,
                "method": self.method, **self.params}
        if dataset is not None:
            for name, indices in (("calibration", self.calibration), ("evaluation", self.evaluation)):
                labels = dataset.labels[indices]
                counts = np.bincount(labels[labels >= 0]) if (labels >= 0).any() else np.zeros(0, np.int64)
                counts = counts[counts > 0]
                info[f"{name}_classes"] = int(len(counts))
                info[f"{name}_images_per_class"] = (int(counts.min()), int(counts.max())) if len(counts) else (0, 0)
        return info

    def identity(self) -> dict:
        """What the split was made for: the dataset version, the seed and the make_split settings."""
        return {"dataset_fingerprint": self.dataset_fingerprint, "seed": self.seed, "params": dict(self.params)}

    def _check(self, dataset: Dataset) -> None:
        check_provenance({"dataset_fingerprint": self.dataset_fingerprint},
                         {"dataset_fingerprint": dataset.fingerprint()}, what=f"this split of {dataset.name!r}",
                         fix="the dataset's files or labels changed; make a new split (saved_split / make_split)")

    def save(self, path: str | os.PathLike) -> Path:
        return atomic_write_json(path, {
            "calibration": self.calibration.tolist(), "evaluation": self.evaluation.tolist(), "seed": self.seed,
            "dataset_fingerprint": self.dataset_fingerprint, "method": self.method, "params": self.params,
        })

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Split":
        raw = json.loads(Path(path).read_text())
        return cls(np.asarray(raw["calibration"], np.int64), np.asarray(raw["evaluation"], np.int64), raw["seed"],
                   raw["dataset_fingerprint"], raw["method"], raw.get("params", {}))


def make_split(dataset: Dataset, calibration_size: int | None = None, calibration_per_class: int | None = None,
               evaluation_per_class: int | None = None, evaluation_size: int | None = None,
               seed: int = 0) -> Split:
    """Pick calibration images (stratified by class when labels exist) and keep the rest, or a per-class/size
    subset of it, for evaluation. Calibration and evaluation never share an image.

    - calibration_per_class: N images of each labelled class (fewer if a class has fewer, keeping ≥1 for eval
      when the class has ≥2 images); calibration_size: a total, spread over classes in proportion.
    - Unlabelled images are split at random in the same proportion.
    """
    rng = np.random.default_rng(seed)
    count = len(dataset)
    if calibration_size is None and calibration_per_class is None:
        raise ValueError("give calibration_size (total images) or calibration_per_class")
    if calibration_size is not None and not 0 < calibration_size < count:
        raise ValueError(f"calibration_size={calibration_size} must be between 1 and {count - 1} "
                         f"(the dataset has {count} images and evaluation needs at least one)")
    labels = dataset.labels
    groups = {int(c): np.flatnonzero(labels == c) for c in np.unique(labels)}
    fraction = None if calibration_size is None else calibration_size / count
    calibration, evaluation = [], []
    for label, members in sorted(groups.items()):
        members = rng.permutation(members)
        if label >= 0 and calibration_per_class is not None:
            take = min(calibration_per_class, max(len(members) - 1, 1) if len(members) > 1 else 1)
        else:
            take = int(round(len(members) * (fraction if fraction is not None else 0.5)))
        calibration.extend(members[:take].tolist())
        rest = members[take:]
        if label >= 0 and evaluation_per_class is not None:
            rest = rest[:evaluation_per_class]
        evaluation.extend(rest.tolist())
    calibration = np.asarray(sorted(calibration), np.int64)
    evaluation = np.asarray(sorted(evaluation), np.int64)
    if calibration_size is not None and len(calibration) != calibration_size:
        # Rounding per class can miss the total by a few images: move images between the sets at random.
        if len(calibration) > calibration_size:
            drop = rng.choice(calibration, len(calibration) - calibration_size, replace=False)
            calibration = np.setdiff1d(calibration, drop)
            evaluation = np.union1d(evaluation, drop)
        else:
            add = rng.choice(evaluation, calibration_size - len(calibration), replace=False)
            evaluation = np.setdiff1d(evaluation, add)
            calibration = np.union1d(calibration, add)
    if evaluation_size is not None and len(evaluation) > evaluation_size:
        evaluation = np.sort(rng.choice(evaluation, evaluation_size, replace=False))
    # Calibration takes the first N of this set (select_calibration_images): in a seeded order, not by index, or a
    # dataset listed class by class (one folder per WNID) would calibrate on its first classes only.
    calibration = rng.permutation(calibration)
    method = "stratified" if (labels >= 0).any() else "random"
    params = {"calibration_size": calibration_size, "calibration_per_class": calibration_per_class,
              "evaluation_per_class": evaluation_per_class, "evaluation_size": evaluation_size,
              "calibration_order": CALIBRATION_ORDER}
    return Split(calibration, evaluation, seed, dataset.fingerprint(), method, params)


def split_settings(calibration_size: int | None = None, calibration_per_class: int | None = None) -> dict:
    """The make_split settings a saved split records (and is reused for)."""
    return {"calibration_size": calibration_size, "calibration_per_class": calibration_per_class,
            "evaluation_per_class": None, "evaluation_size": None, "calibration_order": CALIBRATION_ORDER}


def default_split_path(dataset: Dataset, calibration_images: int | None, seed: int, calibration_per_class: int | None,
                       workspace=None) -> Path:
    """Where saved_split keeps the split of (dataset version, sizes, seed): named by their Identity; a split saved
    under the name an earlier trtlab gave it (a hash of its own dict) is found there and used as it is."""
    from trtlab.core.identity import Identity

    fingerprint = dataset.fingerprint()
    folder = workspace_dir(workspace) / "splits"
    made_from = Identity(data={"dataset": fingerprint}, options={"calibration_images": calibration_images, "seed": seed,
                                                                 "calibration_per_class": calibration_per_class})
    path = folder / f"{dataset.name}-{made_from.digest(12)}.json"
    legacy = {"fp": fingerprint, "n": calibration_images, "seed": seed}
    if calibration_per_class is not None:
        legacy["per_class"] = calibration_per_class
    earlier = folder / f"{dataset.name}-{hash_json(legacy, 12)}.json"
    return earlier if not path.exists() and earlier.exists() else path


def saved_split(dataset: Dataset, calibration_images: int | None = None, seed: int = 0, workspace=None, *,
                calibration_per_class: int | None = None, path: str | os.PathLike | None = None) -> Split:
    """The split for (dataset, calibration size or per-class quota, seed), made once and saved so every notebook, CLI
    run and ImageNet prep uses the same calibration and evaluation images.

    `path`: where it is kept (default: the workspace's splits/ folder, one file per dataset version and settings).
    A saved split is reused while it was made for this dataset (fingerprint), seed and settings; otherwise a new one
    is made and saved, and the log says which field differed. A damaged file is set aside (named) and remade."""
    if calibration_images is None and calibration_per_class is None:
        raise UserValueError(f"no calibration size given for the split of {dataset.name!r}",
                             "give calibration_images (a total, e.g. 500) or calibration_per_class (e.g. 10)")
    if len(dataset) < 2:  # (no "use calibration_images ≤ 0" below)
        raise CalibrationSizeError(f"dataset {dataset.name!r} has {len(dataset)} image(s); a split needs at least 2 "
                                   f"(one to calibrate, one to evaluate)", "add images to the data folder")
    if calibration_images is not None and not 0 < calibration_images <= len(dataset) - 1:
        raise CalibrationSizeError(
            f"{calibration_images} calibration images asked for, but dataset {dataset.name!r} has {len(dataset)} "
            f"images and evaluation needs at least one", f"use calibration_images ≤ {len(dataset) - 1}")
    settings = split_settings(calibration_images, calibration_per_class)
    path = Path(path) if path is not None else \
        default_split_path(dataset, calibration_images, seed, calibration_per_class, workspace)
    expected = {"dataset_fingerprint": dataset.fingerprint(), "seed": seed, "params": settings}
    saved = read_checked(path, Split.load)  # None when absent, or damaged (then set aside, named)
    if saved is not None:
        found = differences(saved.identity(), expected)
        if not found:
            log.debug("reusing the saved split %s", path)
            return saved
        log.info("the saved split %s was made for another %s; making a new one", path, found[0].describe())
    split = make_split(dataset, calibration_size=calibration_images, calibration_per_class=calibration_per_class,
                       seed=seed)
    if not len(split.evaluation):
        raise CalibrationSizeError(
            f"calibration_per_class={calibration_per_class} leaves no image of {dataset.name!r} for evaluation (the "
            f"classes have at most {int(np.bincount(dataset.labels[dataset.labels >= 0]).max())} images each)",
            "lower calibration_per_class or give calibration_images")
    split.save(path)
    log.info("split of %s saved to %s: %d calibration, %d evaluation images", dataset.name, path,
             len(split.calibration), len(split.evaluation))
    return split


def select_calibration_images(cache, calibration_indices, images: int | None = None) -> np.ndarray:
    """The images a calibration runs on — trtlab's and TensorRT's calibrator alike: the decodable ones among
    `calibration_indices` (the split's calibration set, already shuffled by its seed), the first `images` of them
    (None: all, at most DEFAULT_CALIBRATION_IMAGES). Asking for more than exist is refused with the available
    number (CalibrationSizeError): a run record must state what was really used. A fixed-batch consumer pads the
    last batch (trtlab.data.batches) rather than dropping images."""
    indices = np.asarray(calibration_indices, np.int64)
    valid = indices[np.isin(indices, cache.valid_indices)]
    if len(valid) == 0:
        raise CalibrationSizeError(f"no decodable calibration images in {cache.dataset.name!r}",
                                   f"check the split and the decode cache failures ({cache.folder}/failures.json)")
    count = min(len(valid), DEFAULT_CALIBRATION_IMAGES) if images is None else int(images)
    if count < 1 or count > len(valid):
        failed = len(indices) - len(valid)
        raise CalibrationSizeError(
            f"{count} calibration images asked for, but the calibration set of {cache.dataset.name!r} has "
            f"{len(valid)} decodable images" + (f" ({failed} failed to decode)" if failed else ""),
            f"use calibration_images ≤ {len(valid)}, or a split with a larger calibration set")
    return valid[:count]
