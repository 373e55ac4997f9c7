"""Re-organisation of prepared ImageNet val: one folder per WNID, or flat; links by default, moves on request."""
from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path

from trtlab.core.workspace import check_writable_location
from trtlab.data.dataset import Dataset
from trtlab.data.disk import write_json, writing_to
from trtlab.data.imagenet.common import PREP_JSON, SPLIT_JSON, ImageNetPrepError, examples
from trtlab.data.imagenet.files import link, write_outputs

log = logging.getLogger(__name__)


def organize(prep, layout: str = "wnid", target: str | os.PathLike | None = None, move: bool = False,
             progress: bool = True) -> Path:
    """Lay the labelled images of `prep` (an ImageNetPrep) out as one folder per WNID (`layout="wnid"`) or flat
    (`layout="flat"`).

    Default: symbolic links in the workspace (target default workspace/imagenet/val_<layout>), the user's files
    untouched — the only way for read-only inputs such as /kaggle/input. `move=True` moves the files inside the
    images folder instead (only for a writable folder) and updates the saved labels and split to the new paths.
    """
    from trtlab.core.progress import progress_iter

    if layout not in ("wnid", "flat"):
        raise ValueError(f"layout={layout!r}: choose 'wnid' or 'flat'")
    base = _movable_folder(prep.images_dir) if move else \
        Path(target) if target is not None else prep.folder / f"val_{layout}"
    if not move:
        check_writable_location(base)
    destinations = [base / (wnid if layout == "wnid" else "") / Path(rel).name
                    for rel, wnid in zip(prep.dataset.image_ids(), prep.wnids)]
    clashes = [str(d) for d, n in Counter(destinations).items() if n > 1]
    if clashes:
        raise ImageNetPrepError(f"{len(clashes)} file name(s) would collide in the {layout} layout: "
                                f"{examples(clashes)}; rename those files first")
    for source, destination in progress_iter(list(zip(prep.dataset.paths, destinations)), desc=f"organize {layout}",
                                             unit="file", enabled=progress):
        if move:
            _move(Path(source), destination)
        else:
            link(destination, Path(source).resolve())
    if move:
        _remove_emptied_dirs({Path(p).parent for p in prep.dataset.paths}, prep.images_dir)
        _rewrite_after_move(prep, [str(d) for d in destinations])
    if progress:
        log.info("%s images %s into %s (%s layout)", f"{len(destinations):,}", "moved" if move else "linked", base,
                 layout)
    return base


def _movable_folder(base: Path) -> Path:
    try:
        check_writable_location(base)
    except PermissionError as exc:
        raise ImageNetPrepError(f"{base} is read-only input; organize(..., move=False) makes links in the "
                                f"workspace instead") from exc
    if not os.access(base, os.W_OK):
        raise ImageNetPrepError(f"{base} is not writable; use organize(..., move=False) to make links instead")
    return base


def _move(source: Path, destination: Path) -> None:
    if source == destination:
        return
    if destination.exists() and not source.exists():
        return  # moved by an interrupted earlier call
    if destination.exists():
        raise ImageNetPrepError(f"{destination} already exists and is not {source}; move it away first")
    destination.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, destination)


def _remove_emptied_dirs(folders: set[Path], root: Path) -> None:
    """Remove the folders our moves emptied (deepest first); other folders of the user's stay as they are."""
    for folder in sorted(folders, key=lambda f: len(f.parts), reverse=True):
        if folder != root and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _rewrite_after_move(prep, new_paths: list[str]) -> None:
    """Same images, same order (sorted by id), new paths: rewrite the labels CSV and re-key the split."""
    dataset = Dataset(prep.dataset.name, new_paths, prep.dataset.labels, root=prep.dataset.root)
    rows = [(None, p, int(label), prep.classes[int(label)][0]) for p, label in zip(new_paths, dataset.labels)]
    outputs = write_outputs(prep.folder, dataset, rows, prep.classes)
    prep.split.dataset_fingerprint = dataset.fingerprint()
    with writing_to(prep.folder / SPLIT_JSON):
        prep.split.save(prep.folder / SPLIT_JSON)
    record = json.loads((prep.folder / PREP_JSON).read_text())
    record["dataset_fingerprint"] = prep.split.dataset_fingerprint
    record["outputs"] = outputs
    write_json(prep.folder / PREP_JSON, record)
    prep.dataset = dataset
