"""Seeded, class-stratified split of a dataset into a calibration set and a disjoint evaluation set, saved as JSON
so every notebook and CLI run uses the same images."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.data.dataset import Dataset
from trtlab.core.workspace import atomic_write_json


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

    def _check(self, dataset: Dataset) -> None:
        if dataset.fingerprint() != self.dataset_fingerprint:
            raise ValueError(f"this split was made for another version of dataset {dataset.name!r} (files or labels "
                             f"changed); make a new one with make_split(...)")

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
    method = "stratified" if (labels >= 0).any() else "random"
    params = {"calibration_size": calibration_size, "calibration_per_class": calibration_per_class,
              "evaluation_per_class": evaluation_per_class, "evaluation_size": evaluation_size}
    return Split(calibration, evaluation, seed, dataset.fingerprint(), method, params)
