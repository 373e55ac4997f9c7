"""The classifier the labels talk about: which output holds the logits, in which class numbering, at which crop.

A model with several outputs is refused unless the user names the logits output (`--output NAME`, `output=`) or it
is unambiguous (exactly one N×C output whose C fits the labels' classes); the choice is said. A 1001-class model
(TensorFlow's background class at index 0 before the 1000 ImageNet classes) is recognised from the labels: with
labels numbered as ImageNet numbers them (WNID folders or CSV, trtlab's ImageNet preparation, index labels with a 0)
output 0 is dropped, so output k+1 is scored as class k; labels in the model's own numbering (a 1000 among them)
keep it; where the labels cannot tell, `--background-class first|none` (`background_class=`) is asked for.

Both decisions are carried out once, in the model every stage then runs: `classifier_view` returns the user's file
when nothing needs doing, else a derived copy in the workspace (only the logits output; a Slice dropping the
background column), so FP32 evaluation, calibration, every variant and every backend see one N×C output in the
labels' numbering, and the copy's sha256 — the experiment's model identity — carries the choice.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from trtlab.core.errors import UserValueError
from trtlab.core.workspace import atomic_path, atomic_write_json, read_json_checked, stored_model_ok, workspace_dir
from trtlab.graph.classifier import (ModelInfo, ModelInputError, check_output, inspect_classifier, is_logits_shape,
                                     show_shape)
from trtlab.graph.onnx_utils import reads

log = logging.getLogger(__name__)
IMAGENET_CLASSES = 1000
BACKGROUND_CHOICES = ("auto", "first", "none")
#: Part of the derived copy's sidecar: bumped when what the copy holds changes, so older copies are rebuilt.
VIEW_REVISION = 1
ONNX_SIZE_LIMIT = 1 << 31  # protobuf's 2 GiB: larger copies keep their weights in an external-data file
_announced: set = set()


class OutputChoiceError(ModelInputError):
    """Which output holds the logits, or how the classes are numbered, cannot be told: the user must say."""


@dataclass(frozen=True)
class ClassifierView:
    path: Path  # the model file every stage runs: the user's own, or the derived copy
    info: ModelInfo  # of `path`
    source: ModelInfo  # of the user's file
    output: str  # the source's logits output
    background_dropped: bool
    notes: tuple = ()  # what was decided, one line each (already logged)

    @property
    def derived(self) -> bool:
        return Path(self.path) != Path(self.source.path)


@dataclass(frozen=True)
class LabelSpace:
    """What the labels say about the class numbering: 'imagenet' (WNIDs, numbered as ImageNet numbers them),
    'index' (numbers from a CSV or folder names, model numbering unknown), or None (no labels)."""

    kind: str | None
    max_label: int = -1
    has_zero: bool = False
    origin: str = "the labels"

    @classmethod
    def of(cls, dataset) -> "LabelSpace":
        import numpy as np

        if dataset is None:
            return cls(None)
        labels = np.asarray(dataset.labels)
        labels = labels[labels >= 0]
        if not len(labels):
            return cls(None)
        kind = getattr(dataset, "label_kind", None)
        source = getattr(dataset, "label_source", None)
        origin = ("sub-folder names" if source == "folders" else f"labels CSV {Path(source).name}" if source
                  else f"the labels of {dataset.name!r}")
        # Labels trtlab made itself (the demo photos, ImageNet preparation) carry no kind: they are ImageNet
        # indices, like WNIDs; a 1000 among them can only be a model's own numbering of 1001 classes.
        if kind == "wnid" or (kind is None and int(labels.max()) < IMAGENET_CLASSES):
            kind = "imagenet"
        elif kind not in ("index", "mixed"):
            kind = "index"
        return cls(kind, int(labels.max()), bool((labels == 0).any()), origin)

    def fits(self, classes) -> bool:
        """Whether an N×`classes` output can hold these labels."""
        if not isinstance(classes, int):
            return True
        if self.kind == "imagenet":
            return classes in (IMAGENET_CLASSES, IMAGENET_CLASSES + 1)
        return self.kind is None or classes > self.max_label

    def describe(self) -> str:
        if self.kind == "imagenet":
            return f"ImageNet classes ({self.origin})"
        return f"class indices up to {self.max_label} ({self.origin})" if self.kind else "no labels"


# -- which output ------------------------------------------------------------------------------------------------
def choose_output(info: ModelInfo, labels: LabelSpace, output: str | None = None) -> tuple[str, str]:
    """(name, why) of the logits output; OutputChoiceError when the user must name it."""
    name = Path(info.path).name
    listed = ", ".join(f"{n} {show_shape(s)}" for n, s in info.outputs)
    if output is not None:
        shapes = dict(info.outputs)
        if output not in shapes:
            raise OutputChoiceError(f"--output {output!r} is not an output of {name} (its outputs: {listed})",
                                    "give one of those names (output= in Python)")
        check_output(info.path, output, shapes[output])
        return output, "named by --output" if len(info.outputs) > 1 else "its only output"
    if len(info.outputs) == 1:
        return info.outputs[0][0], "its only output"
    candidates = [(n, s) for n, s in info.outputs if is_logits_shape(s)]
    if not candidates:
        raise OutputChoiceError(f"{name} has {len(info.outputs)} outputs ({listed}) and none is N×classes logits",
                                "export the classifier's logits as an output, then name it with --output NAME "
                                "(output= in Python)")
    fitting = [(n, s) for n, s in candidates if labels.fits(s[1])] if labels.kind else candidates
    if len(candidates) == 1:
        return candidates[0][0], "the only N×C output"
    if len(fitting) == 1:
        return fitting[0][0], f"the only N×C output whose classes fit {labels.describe()}"
    why = ("the data has no labels to tell them apart" if not labels.kind else
           f"{len(fitting) or 'none'} of them fit {labels.describe()}")
    raise OutputChoiceError(f"{name} has {len(info.outputs)} outputs ({listed}) and {len(candidates)} are N×C, so "
                            f"which holds the logits is not clear ({why})",
                            f"name it: --output {candidates[-1][0]} (output= in Python), or the one you mean")


# -- the background class ------------------------------------------------------------------------------------------
def decide_background(classes, labels: LabelSpace, choice: str = "auto", model: str = "the model") -> tuple[bool, str]:
    """(drop output 0?, why) for a model with `classes` outputs and these labels; OutputChoiceError when a
    1001-class model's numbering cannot be told from the labels."""
    if choice not in BACKGROUND_CHOICES:
        raise UserValueError(f"--background-class {choice!r} is not one of {', '.join(BACKGROUND_CHOICES)}",
                             "use first (output 0 is a background class, dropped), none (no background class) or "
                             "auto (decided from the labels)")
    if choice != "auto":
        if choice == "first" and not (isinstance(classes, int) and classes > 2):
            raise UserValueError(f"--background-class first: {model} has {classes} classes, too few to drop one",
                                 "drop --background-class")
        return choice == "first", f"--background-class {choice}"
    if classes != IMAGENET_CLASSES + 1:
        return False, ""
    ask = (f"give --background-class first (the labels number ImageNet's classes 0..999 and {model}'s output 0 is "
           f"TensorFlow's background class) or --background-class none (the labels use {model}'s own numbering); "
           f"background_class= in Python")
    if labels.kind == "imagenet":
        return True, f"the labels are ImageNet classes ({labels.origin})"
    if labels.kind is None:
        return True, "no labels tell otherwise (1001 = TensorFlow's background class + the 1000 ImageNet classes)"
    if labels.kind == "index" and labels.max_label == IMAGENET_CLASSES:
        return False, f"{labels.origin} include class 1000, so they use the model's own numbering"
    if labels.kind == "index" and labels.has_zero:
        return True, f"{labels.origin} include class 0, which is the background class in the model's numbering"
    raise OutputChoiceError(f"{model} has 1001 classes (TensorFlow's background class first?) and {labels.origin} "
                            f"are class indices 1..{labels.max_label}, which fit both numberings — scored the "
                            f"wrong way every prediction would be off by one", ask)


# -- the view ----------------------------------------------------------------------------------------------------
def classifier_view(model_path, dataset=None, output: str | None = None, background_class: str = "auto",
                    workspace=None, announce: bool = True) -> ClassifierView:
    """The model to run for `model_path` on `dataset`'s labels: its logits output chosen (or `output`), a
    1001-class model's background class dropped where the labels number ImageNet's classes (or as
    `background_class` says). Refusals are one-line UserErrors, before any image is decoded. A copy this function
    made carries its choices: given again (to evaluate() or a variant build), it is returned as it is."""
    made = derived_from(model_path)
    if made is not None:
        info = inspect_classifier(model_path)
        return ClassifierView(Path(model_path), info, _source_of(made, info), made["output"],
                              bool(made["background_dropped"]))
    source = inspect_classifier(model_path)
    labels = LabelSpace.of(dataset)
    chosen, why = choose_output(source, labels, output)
    shape = dict(source.outputs)[chosen]
    name = Path(source.path).name
    drop, because = decide_background(shape[1] if len(shape) == 2 else None, labels, background_class, name)
    notes = []
    if len(source.outputs) > 1:
        listed = ", ".join(f"{n} {show_shape(s)}" for n, s in source.outputs)
        notes.append(f"{name} has {len(source.outputs)} outputs ({listed}): scoring {chosen!r}, {why}"
                     + ("" if why.startswith("named") else "; --output NAME picks another"))
    if drop:
        notes.append(f"{name}: output 0 of {shape[1]} is taken as a background class and dropped, so output k+1 "
                     f"is scored as class k ({because}; --background-class none if it has no background class)")
    elif because and background_class == "auto":
        notes.append(f"{name} has {shape[1]} classes, scored as they are numbered ({because})")
    for note in notes if announce else ():
        if note not in _announced:  # once per process: evaluate() and every variant look at the model again
            _announced.add(note)
            log.info(note)
    # A copy when something was chosen: the output, or how 1001 classes are numbered (kept in the copy's sidecar,
    # so a later look at the copy does not decide again from other labels).
    if len(source.outputs) == 1 and not drop and shape[1:] != (IMAGENET_CLASSES + 1,):
        return ClassifierView(Path(model_path), source, source, chosen, False, tuple(notes))
    path = _derived_copy(source, chosen, drop, workspace)
    return ClassifierView(path, inspect_classifier(path), source, chosen, drop, tuple(notes))


def _derived_copy(source: ModelInfo, output: str, drop_background: bool, workspace=None) -> Path:
    """The workspace copy of `source` with `output` as its only output (background column dropped when asked),
    reused while its sidecar says it was made from this very model (sha256 incl. external data) the same way."""
    stem = Path(source.path).stem
    classes = dict(source.outputs)[output][1:]
    tag = ("" if len(source.outputs) == 1 else f".{_safe(output)}") + (
        ".no-background" if drop_background else ".own-numbering" if classes == (IMAGENET_CLASSES + 1,) else "")
    folder = workspace_dir(workspace) / "models" / f"{stem}-{source.sha256[:12]}"
    target = folder / f"{stem}{tag}.onnx"
    made = {"source": source.path, "source_sha256": source.sha256, "output": output,
            "background_dropped": drop_background, "revision": VIEW_REVISION}
    sidecar = target.with_name(target.name + ".json")
    if target.exists() and read_json_checked(sidecar) == made and stored_model_ok(target):
        return target  # (a damaged copy is set aside, named, and made again below)
    _write_copy(source, output, drop_background, target)
    atomic_write_json(sidecar, made)
    return target


def derived_from(path) -> dict | None:
    """What a derived copy was made from (its sidecar), None for a user's own model."""
    sidecar = Path(path).with_name(Path(path).name + ".json")
    record = read_json_checked(sidecar) if sidecar.exists() else None
    wanted = ("source", "source_sha256", "output", "background_dropped", "revision")
    return record if record and all(k in record for k in wanted) and record["revision"] == VIEW_REVISION else None


def _source_of(made: dict, copy: ModelInfo) -> ModelInfo:
    """The ModelInfo of the user's model a copy was made from, when it is still there unchanged; else the copy's."""
    try:
        source = inspect_classifier(made["source"])
    except (ModelInputError, OSError, UserValueError):
        return copy
    return source if source.sha256 == made["source_sha256"] else copy


def _safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:40] or "output"


def _write_copy(source: ModelInfo, output: str, drop_background: bool, target: Path) -> None:
    import onnx
    from onnx import helper, numpy_helper

    import numpy as np

    model = onnx.load(source.path)  # external data loaded: the copy holds its weights itself
    graph = model.graph
    kept = [o for o in graph.output if o.name == output]
    del graph.output[:]
    graph.output.extend(kept)
    if drop_background:
        trimmed = f"{output}_without_background"
        starts, ends, axes = (f"{trimmed}_{k}" for k in ("starts", "ends", "axes"))
        graph.initializer.extend([numpy_helper.from_array(np.array([1], np.int64), starts),
                                  numpy_helper.from_array(np.array([np.iinfo(np.int64).max], np.int64), ends),
                                  numpy_helper.from_array(np.array([1], np.int64), axes)])
        graph.node.append(helper.make_node("Slice", [output, starts, ends, axes], [trimmed],
                                           name="trtlab_drop_background_class"))
        shape = dict(source.outputs)[output]
        classes = shape[1] - 1 if isinstance(shape[1], int) else "C"
        elem = kept[0].type.tensor_type.elem_type or onnx.TensorProto.FLOAT
        del graph.output[:]
        graph.output.append(helper.make_tensor_value_info(trimmed, elem, [shape[0] if isinstance(shape[0], int)
                                                                          else "N", classes]))
    _prune(graph)
    large = model.ByteSize() > ONNX_SIZE_LIMIT - (64 << 20)
    with atomic_path(target, suffix=".onnx") as tmp:
        if large:
            onnx.save(model, str(tmp), save_as_external_data=True, location=f"{target.name}.data")
        else:
            onnx.save(model, str(tmp))
        onnx.checker.check_model(str(tmp) if large else model)


def _prune(graph) -> None:
    """Remove nodes, initializers and value infos nothing on the way to the outputs uses (a features branch
    whose output was dropped), so calibration and quantization see only the classifier."""
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(list(graph.node)):
        if any(name in needed for name in node.output):
            keep.append(node)
            needed.update(reads(node))  # its inputs, and names its subgraphs read from the outer scope
    keep.reverse()
    del graph.node[:]
    graph.node.extend(keep)
    initializers = [i for i in graph.initializer if i.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    infos = [v for v in graph.value_info if v.name in needed]
    del graph.value_info[:]
    graph.value_info.extend(infos)


# -- the crop ----------------------------------------------------------------------------------------------------
DEFAULT_CROP, DEFAULT_RESIZE = 224, 256  # the presets' values (data.preprocess.Preprocess)


def preprocess_for(info: ModelInfo, spec="tf-lite", crop: int | None = None, resize: int | None = None):
    """The preprocessing for `info`'s input: the crop is the model's input size unless set (`crop`, or a
    Preprocess whose crop is not the presets' 224), the short side `resize` or, unset, the crop × 256/224 (the
    presets' ratio). A crop the model cannot take, or a resize below the crop, is a one-line UserValueError."""
    from dataclasses import replace

    from trtlab.data.preprocess import get_preprocess

    spec = get_preprocess(spec)
    height, width = info.image_size
    name = Path(info.path).name
    if height != width:
        raise UserValueError(f"{name} takes {height}×{width} images; trtlab's preprocessing makes square center "
                             f"crops", "export the model with a square input (H = W)")
    for flag, value in (("--crop", crop), ("--resize", resize)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise UserValueError(f"{flag} {value!r} is not possible", f"give a whole number of pixels ≥ 1 for {flag}")
    wanted = crop if crop is not None else (spec.crop if spec.crop != DEFAULT_CROP else height)
    if wanted != height:
        given = f"--crop {crop}" if crop is not None else f"the preprocessing's crop={spec.crop}"
        raise UserValueError(f"{given} cannot feed {name}, which takes {height}×{width} images",
                             f"leave the crop out (it follows the model's input) or give --crop {height} "
                             f"(crop={height} in Python)")
    if resize is None:
        resize = spec.resize_short
        if spec.crop != wanted and spec.resize_short == DEFAULT_RESIZE:  # the presets' 256/224, kept for the size
            resize = round(wanted * DEFAULT_RESIZE / DEFAULT_CROP)
    if resize < wanted:
        raise UserValueError(f"--resize {resize} is smaller than the {wanted}-pixel crop {name} takes",
                             f"give a short side ≥ {wanted}, e.g. --resize {round(wanted * DEFAULT_RESIZE / DEFAULT_CROP)}")
    if (wanted, resize) == (spec.crop, spec.resize_short):
        return spec
    return replace(spec, crop=wanted, resize_short=resize)
