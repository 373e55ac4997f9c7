"""Image decoding and preprocessing: decode → RGB → resize short side → center crop (uint8), then normalise per batch.

Crops are kept as uint8 HWC so the decode cache stays 4× smaller than float32; normalisation to float32 NCHW
happens per batch right before inference or calibration.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

IMAGENET_MEAN_255 = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD_255 = (0.229 * 255, 0.224 * 255, 0.225 * 255)


class ImageDecodeError(ValueError):
    """An image file that cannot be decoded completely (missing, truncated, corrupt)."""


@dataclass(frozen=True)
class Preprocess:
    """How a photo becomes the model's input. mean/std are in 0..255 pixel units, per RGB channel."""

    name: str = "tf-lite"
    resize_short: int = 256
    crop: int = 224
    mean: tuple[float, float, float] = (127.0, 127.0, 127.0)
    std: tuple[float, float, float] = (128.0, 128.0, 128.0)
    channel_order: str = "RGB"
    interpolation: str = "area"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def cache_key_fields(self) -> dict:
        """Fields that change the uint8 crops (mean/std don't: they are applied per batch)."""
        return {k: getattr(self, k) for k in ("resize_short", "crop", "channel_order", "interpolation")}


PRESETS = {
    # EfficientNet-Lite (TF-Lite training recipe): RGB (x - 127) / 128.
    "tf-lite": Preprocess(name="tf-lite"),
    # torchvision ImageNet models: RGB x/255 then mean/std, i.e. (x - 255*mean) / (255*std).
    "torchvision": Preprocess(name="torchvision", mean=IMAGENET_MEAN_255, std=IMAGENET_STD_255),
}


def get_preprocess(spec: str | Preprocess | dict) -> Preprocess:
    """A preset name ('tf-lite', 'torchvision'), a dict of Preprocess fields, or a Preprocess."""
    if isinstance(spec, Preprocess):
        return spec
    if isinstance(spec, dict):
        fields = dict(spec)
        for key in ("mean", "std"):
            if key in fields:
                fields[key] = tuple(float(v) for v in fields[key])
        return Preprocess(**{"name": "custom", **fields})
    if spec in PRESETS:
        return PRESETS[spec]
    from trtlab.core.errors import UserValueError

    raise UserValueError(f"unknown preprocessing preset {spec!r}",
                         f"use one of {', '.join(sorted(PRESETS))}, or pass a Preprocess(...)")


_INTERPOLATION = {"area": "INTER_AREA", "linear": "INTER_LINEAR", "bilinear": "INTER_LINEAR", "cubic": "INTER_CUBIC"}


def _check_complete(data: bytes, path: str) -> None:
    """OpenCV decodes truncated JPEGs into grey-padded images with only a warning; catch them here."""
    if data[:2] == b"\xff\xd8":
        # The end-of-image marker must follow the last start-of-scan marker (byte stuffing keeps FFD9 out of scans).
        if data.rfind(b"\xff\xd9") < data.rfind(b"\xff\xda"):
            raise ImageDecodeError(f"{path}: truncated JPEG (no end-of-image marker after the last scan)")
    elif data[:8] == b"\x89PNG\r\n\x1a\n":
        if b"IEND" not in data[-32:]:
            raise ImageDecodeError(f"{path}: truncated PNG (no IEND chunk)")


def decode_image(path: str | Path, spec: Preprocess) -> np.ndarray:
    """Decode one image file into a (crop, crop, 3) uint8 array in `spec.channel_order`.

    Raises ImageDecodeError with the reason for missing, empty, truncated or undecodable files.
    """
    import cv2

    path = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ImageDecodeError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if not data:
        raise ImageDecodeError(f"{path}: empty file")
    _check_complete(data, path)
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ImageDecodeError(f"{path}: not a decodable image")
    return resize_center_crop(image, spec, bgr=True)


def resize_center_crop(image: np.ndarray, spec: Preprocess, bgr: bool = False) -> np.ndarray:
    """Resize so the short side is `resize_short`, then center-crop `crop`×`crop`; returns uint8 HWC."""
    import cv2

    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    if image.shape[2] == 4:
        image = image[:, :, :3]
    if bgr and spec.channel_order == "RGB":
        image = image[:, :, ::-1]
    elif not bgr and spec.channel_order == "BGR":
        image = image[:, :, ::-1]
    height, width = image.shape[:2]
    scale = spec.resize_short / min(height, width)
    new_w, new_h = max(spec.crop, round(width * scale)), max(spec.crop, round(height * scale))
    interp = getattr(cv2, _INTERPOLATION.get(spec.interpolation, "INTER_AREA"))
    resized = cv2.resize(np.ascontiguousarray(image), (new_w, new_h), interpolation=interp)
    top, left = (new_h - spec.crop) // 2, (new_w - spec.crop) // 2
    return np.ascontiguousarray(resized[top : top + spec.crop, left : left + spec.crop])


def normalize_batch(crops: np.ndarray, spec: Preprocess) -> np.ndarray:
    """uint8 NHWC crops → float32 NCHW model input, (x - mean) / std per channel."""
    crops = np.asarray(crops)
    n, h, w, _ = crops.shape
    batch = np.empty((n, 3, h, w), np.float32)  # C-contiguous, as runtimes want it: no second copy later
    for channel in range(3):
        plane = batch[:, channel]
        np.copyto(plane, crops[..., channel], casting="unsafe")
        plane -= np.float32(spec.mean[channel])
        plane *= np.float32(1.0 / spec.std[channel])
    return batch
