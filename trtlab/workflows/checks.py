"""Validation before work: every check a command can make before decoding or inferring anything, in this order —

1. workspace writable and not inside the data folder          `check_workspace`
2. model parses, one N×3×H×W input, an N×C output             `check_model` (graph.classifier.inspect_classifier)
   (external-data files there, no custom-domain op; with the data: which output holds the logits and how the
   classes are numbered, graph.classifier_view; the crop from the model's input, preprocess_for)
   guards select nodes of that model (node:NAME exists)        `check_guards`
3. data folder, labels CSV well-formed, labels within C        `check_dataset` / `check_labels`
4. batch and calibration sizes possible                        `check_sizes`
5. output folders writable (and not under /kaggle/input)       `check_output_dir`
   plus the backend asked for is installed                     `check_backend`
6. the decode cache and the variants fit in the free space      `check_free_space`
   (Kaggle's /kaggle/working holds 20 GB), before any decoding

`check_inputs(...)` runs them in that order; `checked_inputs(...)` does the same and also supplies the demo model
and photos where none are given (what the stage commands work on). Commands and notebook entry points call them
(or the single checks) on their first line; values that need no file (algorithm, percentile, preset, guard
syntax, sizes) were checked before that, by the CLI's argument groups (trtlab.cli.args). Each failure is a
`trtlab.core.errors.UserError`: one line naming the thing and what to do.
"""
from __future__ import annotations

import errno
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trtlab.core.errors import UserError, UserFileNotFound, UserPermissionError, UserValueError, write_error
from trtlab.core.workspace import check_writable_location, load_npy, mark_read_only, read_checked, workspace_dir

log = logging.getLogger(__name__)
IMAGENET_CLASSES = 1000


def _is_within(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False


def probe_writable(folder: str | os.PathLike, what: str = "folder", option: str | None = None) -> Path:
    """Create `folder` if needed and write+delete a small file in it: a read-only or full file system is found
    now, not after the work. UserError naming the folder otherwise, its fix naming `option` (the flag / keyword
    that chose the folder: '--out / out=') where given, else the workspace's."""
    folder = Path(folder)
    check_writable_location(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".trtlab-write-probe-")
        try:
            os.write(fd, b"ok")
        finally:
            os.close(fd)
            os.unlink(tmp)
    except OSError as exc:
        converted = write_error(folder, exc)
        if converted is None:
            raise UserPermissionError(f"cannot write the {what} {folder}: {exc.strerror or exc}",
                                      "choose another folder") from exc
        fix = converted.fix
        if option is not None:  # the folder was chosen by `option`, not by the workspace
            full = exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1))
            article = "an" if what[:1] in "aeiou" else "a"
            fix = f"{'free some space or ' if full else ''}choose {article} {what} you can write ({option})"
        raise UserPermissionError(f"the {what} {folder} is not writable: {converted.what}", fix) from exc
    return folder


def check_workspace(workspace=None, data=None) -> Path:
    """The workspace (as `workspace_dir` resolves it), writable and not inside the data folder `data`."""
    folder = Path(workspace_dir(workspace) if workspace is None else workspace)
    check_writable_location(folder)
    if data is not None:
        data_root, ws = Path(data).resolve(), folder.resolve()
        if _is_within(ws, data_root):
            raise UserValueError(
                f"the workspace {folder} is inside the data folder {data}, so trtlab's own outputs (reports, "
                f"figures) would be read back as photos",
                "choose a workspace outside the data folder (--workspace or $TRTLAB_WORKSPACE)")
    try:
        probe_writable(folder, "workspace")
    except UserPermissionError as exc:
        # A finished workspace that cannot be written (attached read-only): what it stores is still shown; a write
        # it would need fails then, in one line naming the file. One that stores no results is refused now.
        if not (folder / "results").is_dir() or not isinstance(exc.__cause__, OSError) or \
                exc.__cause__.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        mark_read_only(folder, exc.__cause__.strerror or str(exc.__cause__))
    return workspace_dir(folder)


def check_model(model_path):
    """`ModelInfo` of a classifier that parses and has one N×3×H×W input and an N×C output (UserError otherwise)."""
    from trtlab.graph.classifier import inspect_classifier

    if model_path is None:
        raise UserValueError("no model given", "pass --model path/to/model.onnx")
    return inspect_classifier(model_path)


def check_guards(model_path, guards, workspace=None, flag: str = "--guards") -> list:
    """The nodes `guards` select in `model_path` as trtlab quantizes it (its sanitized graph, cached in the
    workspace, so names match what the quantizer sees): a guard that selects nothing — `node:NAME` of a node that
    is not there, `op:TYPE` of an op the graph lacks — is refused now, before any image is decoded."""
    if not guards:
        return []
    import onnx

    from trtlab.graph.guards import parse_guards, resolve_guards, weighted_nodes_in_order
    from trtlab.graph.sanitize import sanitize_model

    sanitized = sanitize_model(model_path, workspace)
    model = onnx.load(str(sanitized), load_external_data=False)
    try:
        return resolve_guards(model, parse_guards(guards))
    except UserValueError as exc:  # resolve_guards names the guard; here: which flag, and examples to copy
        reason = exc.what
        name = Path(model_path).name
        named = ([n.name for n in weighted_nodes_in_order(model) if n.name]
                 or [n.name for n in model.graph.node if n.name])[:3]
        ops = sorted({n.op_type for n in model.graph.node})
        fix = (f"name a node of {name}'s graph, e.g. {', '.join(f'node:{n}' for n in named)} (as in its sanitized "
               f"copy {sanitized})" if named else
               f"{name}'s nodes have no names: select by op type instead ({', '.join(f'op:{o}' for o in ops)})")
        if "op:" in reason:
            fix = f"{name}'s op types are {', '.join(ops)}"
        raise UserValueError(f"{flag}: {reason} in {name}", fix) from None


def check_calibration_cache(path, model_path, recipes, preprocess, workspace=None, flag: str = "--import-cache",
                            model_name: str | None = None):
    """An imported calibration cache (trtlab's, or TensorRT's own without trtlab's sidecar), checked for every INT8
    recipe against the model before any decoding: readable, made for this model, algorithm and preprocessing (its
    sidecar), holding a scale for every tensor the recipe quantizes (quantization.calibration_cache.check_imported).
    Returns the ImportedCache; its scales are checked again, against statistics when they exist, at the build."""
    import onnx

    from trtlab.graph.classifier import inspect_classifier
    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.calibration_cache import check_imported, read_imported_cache
    from trtlab.quantization.placement import plan_for_recipe
    from trtlab.quantization.variants import tensor_names

    imported = read_imported_cache(path, flag)
    int8 = [r for r in recipes if r.precision == "int8"]
    if not int8:
        raise UserValueError(f"{flag} {path} was given but no INT8 variant is made", "drop it, or ask for an INT8 "
                                                                                     "variant")
    info = inspect_classifier(model_path)
    model = onnx.load(str(sanitize_model(model_path, workspace)), load_external_data=False)
    known = tensor_names(model)
    for recipe in int8:
        plan = plan_for_recipe(model, recipe)  # as the build plans it: the tensors it will need scales for
        check_imported(imported, info.sha256, recipe.algorithm, preprocess.to_dict(), recipe.percentile,
                       plan.activations, known, model_name=model_name or Path(model_path).name)
    log.info("%s: %s (%s, %d scales, sha256 %s) checked against %s", path, imported.format, imported.header,
             len(imported.scales), imported.sha256[:12], model_name or Path(model_path).name)
    return imported


def check_dataset(data, labels=None, name: str | None = None, folder_labels: bool = True):
    """The Dataset of image folder `data` (labels from `labels` CSV or sub-folder names, unless `folder_labels` is
    False: CLI --unlabelled), CSV checked."""
    from trtlab.data.dataset import Dataset
    from trtlab.data.photo_types import file_head, first_image

    dataset = Dataset.from_folder(data, labels_csv=labels, name=name, folder_labels=folder_labels)
    if dataset.paths and first_image(dataset.paths) is None:  # before any cache folder, hash or decode
        example = dataset.paths[0]
        raise UserValueError(
            f"none of the {len(dataset.paths)} file(s) in {data} is an image: none starts with a JPEG, PNG, BMP, TIFF "
            f"or WebP header (e.g. {example} starts with {file_head(example)!r})",
            "check that the files are photos, not placeholders, text or web pages saved under an image name; "
            "nothing was decoded or written")
    return dataset


def check_labels(dataset, info) -> None:
    """Every label must be a class of the model (0..C-1); ImageNet WNID labels need a 1000-class model."""
    import numpy as np

    classes = info.num_classes
    if classes is None:
        return
    model = Path(info.path).name
    labels = np.asarray(dataset.labels)
    if dataset.label_kind == "wnid" and classes != IMAGENET_CLASSES:
        where = "sub-folder names" if dataset.label_source == "folders" else dataset.label_source
        raise UserValueError(
            f"the labels ({where}) are ImageNet WNIDs, i.e. classes of the 1000 ImageNet classes, but {model} has "
            f"{classes} classes, so every score would be meaningless",
            f"give a labels CSV with this model's class indices 0..{classes - 1}, or use a 1000-class ImageNet model")
    bad = np.flatnonzero(labels >= classes)
    if not len(bad):
        if dataset.label_kind == "index" and classes != IMAGENET_CLASSES and labels.max(initial=-1) >= 0:
            log.debug("labels are class indices of a %d-class model", classes)
        return
    values = sorted({int(v) for v in labels[bad]})
    shown = ", ".join(map(str, values[:5])) + (", …" if len(values) > 5 else "")
    if dataset.label_source == "folders":
        folders = sorted({Path(dataset.paths[i]).parent.name for i in bad})
        origin = f"sub-folder(s) {', '.join(repr(f) for f in folders[:5])} of {dataset.root} give class(es) {shown}"
        fix = ("rename the folders to this model's class indices or ImageNet WNIDs, or give --labels CSV "
               "(sub-folder names that are numbers are read as class indices)")
    else:
        files = [os.path.basename(dataset.paths[i]) for i in bad[:3]]
        origin = f"{dataset.label_source or 'the dataset'} gives label(s) {shown} (e.g. for {', '.join(files)})"
        fix = f"labels must be class indices 0..{classes - 1} of this model (or WNIDs for a 1000-class model)"
    raise UserValueError(f"{origin}, but {model} has {classes} classes (0..{classes - 1}); "
                         f"{len(bad)} image(s) affected", fix)


@dataclass(frozen=True)
class Sizes:
    batch_size: int | None
    calibration_images: int | None
    calibration_batch: int | None


def check_sizes(info=None, batch_size: int | None = None, calibration_images: int | None = None,
                calibration_batch: int | None = None, flag_prefix: str = "--") -> Sizes:
    """Batch and calibration sizes that can work: positive integers; with a model exported for a fixed batch,
    inference and calibration use that batch (said once). Returns the sizes to use."""
    def flag(name):
        return f"{flag_prefix}{name.replace('_', '-')}" if flag_prefix == "--" else name

    for name, value in (("batch_size", batch_size), ("calibration_images", calibration_images),
                        ("calibration_batch", calibration_batch)):
        if value == "auto" and name == "batch_size":  # resolved where the backend is known (evaluate)
            continue
        if value is not None and (not isinstance(value, (int,)) or isinstance(value, bool) or value < 1):
            raise UserValueError(f"{flag(name)} {value!r} is not possible", f"give a whole number ≥ 1 for {flag(name)}"
                                 + (" (or 'auto')" if name == "batch_size" else ""))
    fixed = info.fixed_batch if info is not None else None
    if fixed:
        changed = [flag(n) for n, v in (("batch_size", batch_size), ("calibration_batch", calibration_batch))
                   if v is not None and v != fixed]
        if changed:
            log.info("%s was exported with a fixed batch of %d: %s %s %d (re-export with a dynamic batch for "
                     "faster runs)", Path(info.path).name, fixed, " and ".join(changed),
                     "use" if len(changed) > 1 else "uses", fixed)
        batch_size = fixed if batch_size is not None else None
        calibration_batch = fixed if calibration_batch is not None else None
    return Sizes(batch_size, calibration_images, calibration_batch)


def check_output_dir(path, what: str = "output folder") -> Path | None:
    """An output folder the user named (e.g. --out): not under /kaggle/input and writable, checked before any
    computation. None passes (the command then writes into the workspace, checked by check_workspace)."""
    if path is None:
        return None
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserValueError(f"the {what} {path} is a file", "give a folder (it is created if missing)")
    return probe_writable(path, what, option="--out FOLDER, or out=... in Python; without it the workspace is used")


def check_backend(backend: str | None) -> None:
    """A backend trtlab has; `trt` needs TensorRT importable here; refused before any decoding (and before any
    cached ONNX Runtime result could be shown)."""
    from trtlab.backends import BACKEND_ALIASES, BACKENDS

    known = ("auto",) + BACKENDS + tuple(BACKEND_ALIASES)
    if backend is not None and backend not in known:  # None: the caller's default
        raise UserValueError(f"unknown backend {backend!r}", f"choose one of {', '.join(known)}")
    if backend != "trt":
        return
    from trtlab.backends import tensorrt_available

    if not tensorrt_available():
        raise UserError("backend 'trt' was asked for but TensorRT does not import here",
                        "run `python -m trtlab doctor` (or notebook 00_env_setup) to find and load TensorRT, or use "
                        "--backend ort / auto")
    from trtlab.backends.tensorrt.loader import import_tensorrt
    from trtlab.backends.tensorrt.readiness import gpu_for_tensorrt

    gpu_for_tensorrt(import_tensorrt())  # TensorRT imports but cannot run here (no GPU, an old driver): one line


#: Kaggle's /kaggle/working holds 20 GB (the kernel's own "Output" quota); said in the refusal on Kaggle.
KAGGLE_WORKING_GB = 20


def decode_cache_pending(dataset, preprocess, workspace=None, progress: bool = True) -> int:
    """How many images of (dataset, preprocess) the decode cache still has to decode: all of them without a cache,
    else the rows its status file marks pending. Reads only (a damaged cache is the decode cache's business; it
    counts as not decoded here). The files are hashed as the decode cache hashes them (with its progress bar),
    remembered for it: the decode cache then reads none of them again."""
    import numpy as np

    from trtlab.data.decode_cache import cache_folder
    from trtlab.data.decode_files import PENDING
    from trtlab.data.preprocess import get_preprocess

    spec = get_preprocess(preprocess)
    status = cache_folder(dataset, spec, workspace, dataset.content_hashes(progress)) / "status.npy"
    try:  # only looks: a damaged status file is set aside (named) by the decode cache itself, right after this
        rows = read_checked(status, load_npy, set_aside_damaged=False)
    except OSError:
        rows = None
    pending = len(dataset) if rows is None or rows.shape != (len(dataset),) else int(np.count_nonzero(rows == PENDING))
    if pending and spec.decoder == "nvjpeg":
        from trtlab.data.decode_nvjpeg import require_nvjpeg

        require_nvjpeg()  # decoder 'nvjpeg' where it cannot run: one line before any image is decoded
    return pending


def check_free_space(workspace, images: int, crop: int, model_path=None, variants: int = 0) -> int:
    """Refuse work that cannot fit, before any image is decoded: the decode cache's `images` still to decode
    (images × crop × crop × 3 bytes, uint8 crops) plus `variants` new model files (each at most the model's size:
    FP16 halves the weights, INT8 Q/DQ keeps them in FP32) against the free space of the workspace's file system.
    Returns the bytes needed; one InsufficientDiskSpace line (exit 2) when they exceed the free space."""
    import shutil

    from trtlab.core.workspace import on_kaggle
    from trtlab.data.decode_cache import InsufficientDiskSpace
    from trtlab.data.disk import format_bytes, mount_point

    folder = workspace_dir(workspace) if workspace is None else Path(workspace)
    cache = int(images) * int(crop) * int(crop) * 3
    model = os.path.getsize(model_path) if model_path is not None and os.path.isfile(model_path) else 0
    needed = cache + model * int(variants)
    try:
        free = shutil.disk_usage(mount_point(folder)).free
    except OSError:  # unknown free space: the decode cache's own check and the writes say it if it runs out
        return needed
    if needed <= free:
        return needed
    parts = [f"decode cache {images:,} images × {crop}×{crop}×3 = {format_bytes(cache)}"] if cache else []
    if model and variants:
        parts.append(f"{variants} variant(s) × {format_bytes(model)} model = {format_bytes(model * variants)}")
    where = f"{folder} ({KAGGLE_WORKING_GB} GB on Kaggle)" if on_kaggle() else str(folder)
    raise InsufficientDiskSpace(
        f"this run needs about {format_bytes(needed)} in the workspace but only {format_bytes(free)} is free in "
        f"{where} ({'; '.join(parts)})",
        f"free some space (old decode caches are under {folder / 'decode_cache'}), evaluate fewer images, or "
        f"choose another workspace (--workspace or $TRTLAB_WORKSPACE)")


def check_inputs(model=None, data=None, labels=None, workspace=None, batch_size: int | None = None,
                 calibration_images: int | None = None, calibration_batch: int | None = None, outputs=(),
                 backend: str | None = None, dataset=None, guards=()):
    """All checks in the documented order; returns (workspace path, ModelInfo or None, Dataset or None, Sizes).

    `model=None` / `data=None` skip the model / data checks (the command uses the demo's); `dataset` checks a
    Dataset built elsewhere against the model's classes; `guards` are checked against the model."""
    check_backend(backend)
    ws = check_workspace(workspace, data)
    info = check_model(model) if model is not None else None
    if info is not None:
        check_guards(model, guards, ws)
    if dataset is None and data is not None:
        dataset = check_dataset(data, labels)
    if dataset is not None and info is not None:
        check_labels(dataset, info)
    sizes = check_sizes(info, batch_size, calibration_images, calibration_batch)
    for out in outputs:
        check_output_dir(out)
    return ws, info, dataset, sizes


def _prepared_folder(data, labels, workspace, folder_labels: bool = True):
    """The prepared data (data.prepared) when `data` is the very folder notebook 01 / `prep` prepared in this
    workspace and nothing overrides its labels: its labels and saved split, so a command pasted from a notebook
    (`calibrate --data <that folder>`) evaluates the notebook's experiment instead of re-splitting the folder."""
    from trtlab.data.imagenet import PREP_JSON
    from trtlab.data.prepared import prepared_data

    if labels is not None or not folder_labels or not (workspace_dir(workspace) / "imagenet" / PREP_JSON).exists():
        return None
    prepared = prepared_data(workspace, announce=False)
    root = prepared.dataset.root
    if root is None or not Path(data).is_dir() or Path(data).resolve() != Path(root).resolve():
        return None
    log.info(f"data: {data} is the folder notebook 01 prepared; its labels and saved split are used "
             f"({prepared.description})")
    return prepared


def check_demo_preset(model, preset: str, preset_given: bool) -> None:
    """Without a model the demo EfficientNet-Lite0 runs with its own preprocessing: a --preset for it would be
    ignored, so it is refused instead."""
    from trtlab.data.demo import DEMO_PREPROCESS

    if model is None and preset_given and preset != DEMO_PREPROCESS:
        raise UserValueError(f"--preset {preset} applies to --model, but none was given and the demo "
                             f"EfficientNet-Lite0 is preprocessed with {DEMO_PREPROCESS}",
                             "give --model with --preset, or drop --preset")


@dataclass(frozen=True)
class Inputs:
    """What a stage command works on, every input checked (see `checked_inputs`)."""

    workspace: Path
    model: Path
    info: object  # graph.classifier.ModelInfo
    dataset: object  # data.dataset.Dataset
    preset: object  # data.preprocess.Preprocess for the model's input size (a preset name's values, or custom)
    split: object | None  # the demo split with the demo photos; None: the stage makes and saves one
    sizes: Sizes
    guards: tuple


def checked_inputs(model=None, data=None, labels=None, preset: str = "tf-lite", workspace=None, guards=(),
                   batch_size: int | None = None, calibration_images: int | None = None,
                   calibration_batch: int | None = None, outputs=(), backend: str | None = None,
                   preset_given: bool = False, crop: int | None = None, resize: int | None = None,
                   output: str | None = None, background_class: str = "auto", folder_labels: bool = True) -> Inputs:
    """`check_inputs` in its order, with the demo EfficientNet-Lite0 (and its preprocessing) when no model is
    given and, when no data is, the data notebooks 02–05 use (data.prepared.prepared_data: notebook 01's prepared
    split in this workspace, else the demo photos and their split): nothing is decoded before every check passed.

    The model the stages get is the classifier the labels talk about (graph.classifier_view: the logits output —
    `output`, or the unambiguous one —, a 1001-class model's background class as `background_class` or the labels
    say), and `preset` becomes the Preprocess for its input size (`crop`, `resize` when given)."""
    from trtlab.data.demo import DEMO_PREPROCESS, export_demo_model
    from trtlab.data.prepared import prepared_data
    from trtlab.graph.classifier_view import classifier_view, preprocess_for

    check_demo_preset(model, preset, preset_given)
    check_backend(backend)
    ws = check_workspace(workspace, data)
    # The data folder before the demo model's export (about 25 s): a mistyped --data fails at once.
    prepared = prepared_data(ws) if data is None else _prepared_folder(data, labels, ws, folder_labels)
    dataset = prepared.dataset if prepared is not None else check_dataset(data, labels, folder_labels=folder_labels)
    if model is None:
        model, preset = export_demo_model(workspace=ws), DEMO_PREPROCESS
    check_model(model)  # the file: parses, one image input, external data there, ops ONNX Runtime runs
    view = classifier_view(model, dataset, output, background_class, ws)  # which output, which numbering
    info = view.info
    check_guards(view.path, guards, ws)
    check_labels(dataset, info)
    spec = preprocess_for(info, preset, crop, resize)
    sizes = check_sizes(info, batch_size, calibration_images, calibration_batch)
    for out in outputs:
        check_output_dir(out)
    return Inputs(ws, Path(view.path), info, dataset, spec, prepared.split if prepared is not None else None, sizes,
                  tuple(guards))


__all__ = ["check_inputs", "checked_inputs", "check_free_space", "decode_cache_pending", "check_guards", "check_calibration_cache", "check_demo_preset", "Inputs", "check_workspace", "check_model", "check_dataset", "check_labels", "check_sizes",
           "check_output_dir", "check_backend", "probe_writable", "Sizes", "UserError", "UserFileNotFound"]
