"""Finding ImageNet val: its root ($TRTLAB_IMAGENET, /kaggle/input), the images folder, the label files, the images."""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from trtlab.core.workspace import kaggle_input
from trtlab.data.dataset import IMAGE_EXTENSIONS
from trtlab.data.imagenet.common import KAGGLE_IMAGENET_NAME, LABELS_CSV_NAMES, PRUNE, WNID, ImageNetPrepError


@dataclass
class Inputs:
    images_dir: Path
    meta_mat: Path | None = None
    ground_truth: Path | None = None
    loc_solution: Path | None = None
    synset_mapping: Path | None = None
    labels_csv: Path | None = None  # the user's own `file,label` CSV beside (or named with) the photos


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
            found = find_file(inputs, name, max_depth=4)
            if found is not None:
                parts = found.relative_to(inputs).parts
                return inputs / parts[0] if len(parts) > 1 else inputs
        return _find_wnid_folders(inputs)
    return None


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
            wnids = [c for c in children if WNID.match(c.name)]
            if wnids and len(wnids) >= len(children) / 2:
                return folder
            following += children
        level = following[:200]  # wide trees: look at the first 200 folders of each level
    return None


def describe_attached(root: Path | None = None, limit: int = 5) -> str:
    """What is attached under `root` (default Kaggle's input folder), for a message that says why nothing there
    was used: 'photos-ds (26 images), other-ds (no images)'."""
    from trtlab.data.dataset import walk_files

    root = Path(root) if root is not None else kaggle_input()
    if not root.is_dir():
        return f"{root} does not exist"
    parts = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir())[:limit]:
        count = sum(1 for path in walk_files(folder) if Path(path).suffix.lower() in IMAGE_EXTENSIONS)
        parts.append(f"{folder.name} ({count:,} images)" if count else f"{folder.name} (no images)")
    return ", ".join(parts) or "nothing"


def find_file(root: Path, name: str, max_depth: int = 3) -> Path | None:
    """First file called `name` within `max_depth` folder levels of root, skipping image and training folders."""
    root = Path(root)
    for current, dirs, files in os.walk(root):
        depth = len(Path(current).relative_to(root).parts)
        if name in files:
            return Path(current) / name
        dirs[:] = [] if depth >= max_depth else sorted(
            d for d in dirs if d not in PRUNE and not WNID.match(d) and not d.startswith("."))
    return None


def locate_inputs(root: str | os.PathLike | None = None, images: str | os.PathLike | None = None,
                  devkit: str | os.PathLike | None = None, ground_truth: str | os.PathLike | None = None,
                  loc_solution: str | os.PathLike | None = None,
                  synset_mapping: str | os.PathLike | None = None,
                  labels_csv: str | os.PathLike | None = None) -> Inputs:
    """Find the images folder and the label files under `root` (or take the ones named). `root` may be a labels
    CSV itself: the photos are the folder it lies in."""
    root = Path(root) if root is not None else None
    if root is not None and root.is_file() and root.suffix.lower() == ".csv":
        root, labels_csv = root.parent, labels_csv or root
    if root is not None and not root.is_dir():
        raise ImageNetPrepError(f"folder {root} does not exist",
                                "pass the folder holding the images: an ImageNet val tree, one folder per class, or "
                                "photos with a labels.csv (file,label rows) beside them")
    found = Inputs(_images_dir(root, images))
    found.labels_csv = Path(labels_csv) if labels_csv else _labels_csv_beside(root, found.images_dir)
    if devkit is not None:
        devkit = Path(devkit)
        found.meta_mat = devkit if devkit.is_file() else find_file(devkit, "meta.mat")
        if found.meta_mat is None:
            raise ImageNetPrepError(f"no meta.mat under {devkit}; pass the ILSVRC2012 devkit folder or its meta.mat")
        found.ground_truth = Path(ground_truth) if ground_truth else \
            find_file(found.meta_mat.parent, "ILSVRC2012_validation_ground_truth.txt", 1)
        if found.ground_truth is None:
            raise ImageNetPrepError(f"no ILSVRC2012_validation_ground_truth.txt beside {found.meta_mat}; pass "
                                    f"ground_truth=...")
    elif root is not None:
        found.ground_truth = Path(ground_truth) if ground_truth else \
            find_file(root, "ILSVRC2012_validation_ground_truth.txt")
        if found.ground_truth is not None:
            found.meta_mat = find_file(found.ground_truth.parent, "meta.mat", 1) or find_file(root, "meta.mat")
    if loc_solution is not None:
        found.loc_solution = Path(loc_solution)
    elif root is not None:
        found.loc_solution = find_file(root, "LOC_val_solution.csv", 2)
    if synset_mapping is not None:
        found.synset_mapping = Path(synset_mapping)
    elif found.loc_solution is not None and (found.loc_solution.parent / "LOC_synset_mapping.txt").is_file():
        found.synset_mapping = found.loc_solution.parent / "LOC_synset_mapping.txt"
    return found


def _labels_csv_beside(root: Path | None, images_dir: Path) -> Path | None:
    """A labels CSV lying beside the photos (in `root` or the images folder): labels.csv, else the one CSV there
    that is not one of ImageNet's own label files."""
    for folder in dict.fromkeys(p for p in (root, images_dir) if p is not None):
        for name in LABELS_CSV_NAMES:
            if (folder / name).is_file():
                return folder / name
        try:
            csvs = [p for p in folder.iterdir() if p.suffix.lower() == ".csv" and p.is_file()
                    and p.name not in ("LOC_val_solution.csv", "LOC_sample_submission.csv", "imagenet_val_labels.csv")]
        except OSError:
            continue
        if len(csvs) == 1:
            return csvs[0]
    return None


def _images_dir(root: Path | None, images) -> Path:
    if images is not None:
        images_dir = Path(images)
    elif root is None:
        raise ImageNetPrepError("no ImageNet location given", "pass root=... / --root (or images=... / --data)")
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
    return images_dir


def scan_images(images_dir: str | os.PathLike, progress: bool = True) -> dict[str, list[str]]:
    """Image files under images_dir, recursively (linked folders followed, each folder once): id (name without
    extension) → paths."""
    from trtlab.core.progress import progress_bar
    from trtlab.data.dataset import walk_files

    images: dict[str, list[str]] = defaultdict(list)
    paths = list(walk_files(images_dir))  # listed first: the bar knows its total (50,000 names list in well under 1 s)
    bar = progress_bar(total=len(paths), desc=f"scan {Path(images_dir).name}", unit="file", enabled=progress)
    for path in paths:
        stem, ext = os.path.splitext(os.path.basename(path))
        if ext.lower() in IMAGE_EXTENSIONS:
            images[stem].append(path)
        bar.update(1)
    bar.close()
    return dict(images)
