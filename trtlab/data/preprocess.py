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


_INTERPOLATION = {"area": "INTER_AREA", "linear": "INTER_LINEAR", "bilinear": "INTER_LINEAR", "cubic": "INTER_CUBIC"}
#: Who decodes the JPEGs into the decode cache: 'opencv' (the CPU, the default) or 'nvjpeg' (torchvision's
#: decode_jpeg on a CUDA GPU, data.decode_nvjpeg); 'auto' is TRTLAB_DECODER where set, else 'opencv'. The decoder
#: changes pixels, so it is part of the cache's identity (and of everything made from its crops) when not opencv.
DECODERS = ("opencv", "nvjpeg")
DECODER_ENV = "TRTLAB_DECODER"


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
    decoder: str = "auto"

    def __post_init__(self):
        # A mistake here would only show as wrong crops (or a crash) deep inside decoding: refused when made.
        from trtlab.core.errors import UserValueError

        for field in ("resize_short", "crop"):
            value = getattr(self, field)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise UserValueError(f"Preprocess {field}={value!r} is not possible",
                                     f"give a whole number of pixels ≥ 1, e.g. {field}=224")
        for field in ("mean", "std"):
            value = getattr(self, field)
            try:
                numbers = [float(v) for v in value]
            except (TypeError, ValueError):
                numbers = []
            if len(numbers) != 3 or not all(np.isfinite(numbers)) or (field == "std" and 0 in numbers):
                raise UserValueError(f"Preprocess {field}={value!r} is not three finite numbers"
                                     + (" (none zero)" if field == "std" else ""),
                                     f"give one value per RGB channel in 0..255 pixel units, e.g. {field}=(127, 127, 127)"
                                     if field == "mean" else "e.g. std=(128, 128, 128)")
        if self.channel_order not in ("RGB", "BGR"):
            raise UserValueError(f"Preprocess channel_order={self.channel_order!r} is not RGB or BGR",
                                 "use channel_order='RGB' (or 'BGR' for models trained on OpenCV's order)")
        if self.interpolation not in _INTERPOLATION:
            raise UserValueError(f"Preprocess interpolation={self.interpolation!r} is not one trtlab has",
                                 f"use one of {', '.join(_INTERPOLATION)}")
        if self.decoder not in ("auto",) + DECODERS:
            raise UserValueError(f"Preprocess decoder={self.decoder!r} is not a decoder trtlab has",
                                 DECODER_FIX)

    def to_dict(self) -> dict:
        """Its fields; `decoder` only where it is not OpenCV's (so every identity made before it existed stays)."""
        fields = dataclasses.asdict(self)
        if self.decoder != "nvjpeg":
            del fields["decoder"]
        return fields

    def channel_constants(self) -> tuple[tuple, tuple]:
        """(mean, std) in the crops' channel order: mean/std are given per RGB channel, a BGR crop holds blue first."""
        if self.channel_order == "BGR":
            return tuple(self.mean[::-1]), tuple(self.std[::-1])
        return tuple(self.mean), tuple(self.std)

    def cache_key_fields(self) -> dict:
        """Fields that change the uint8 crops (mean/std don't: they are applied per batch); the decoder where it is
        not OpenCV's (an nvJPEG cache is another cache; OpenCV's keeps the key it had)."""
        fields = {k: getattr(self, k) for k in ("resize_short", "crop", "channel_order", "interpolation")}
        return {**fields, "decoder": self.decoder} if self.decoder == "nvjpeg" else fields


DECODER_FIX = (f"use decoder='opencv' (the CPU, the default) or decoder='nvjpeg' (a CUDA GPU through torchvision), "
               f"or leave it 'auto' ({DECODER_ENV}, else opencv)")


def resolve_decoder(spec: Preprocess) -> Preprocess:
    """`spec` with decoder 'auto' made the one TRTLAB_DECODER names ('nvjpeg'); unset or 'opencv', `spec` as it is
    (OpenCV is what 'auto' means). An unknown name is one UserValueError line, before any work."""
    if spec.decoder != "auto":
        return spec
    import os

    raw = os.environ.get(DECODER_ENV, "")
    name = raw.strip().lower()
    if name in ("", "auto", "opencv"):
        return spec
    if name not in DECODERS:
        from trtlab.core.errors import UserValueError

        raise UserValueError(f"{DECODER_ENV}={raw!r} is not a decoder trtlab has",
                             f"set {DECODER_ENV}=opencv (the CPU, the default) or {DECODER_ENV}=nvjpeg (a CUDA GPU "
                             f"through torchvision), or unset it")
    return dataclasses.replace(spec, decoder=name)


PRESETS = {
    # EfficientNet-Lite (TF-Lite training recipe): RGB (x - 127) / 128.
    "tf-lite": Preprocess(name="tf-lite"),
    # torchvision ImageNet models: RGB x/255 then mean/std, i.e. (x - 255*mean) / (255*std).
    "torchvision": Preprocess(name="torchvision", mean=IMAGENET_MEAN_255, std=IMAGENET_STD_255),
}


def get_preprocess(spec: str | Preprocess | dict) -> Preprocess:
    """A preset name ('tf-lite', 'torchvision'), a dict of Preprocess fields, or a Preprocess — its decoder 'auto'
    resolved (`resolve_decoder`: TRTLAB_DECODER)."""
    return resolve_decoder(_get_preprocess(spec))


def _get_preprocess(spec: str | Preprocess | dict) -> Preprocess:
    if isinstance(spec, Preprocess):
        return spec
    if isinstance(spec, dict):
        fields = dict(spec)
        known = [f.name for f in dataclasses.fields(Preprocess)]
        unknown = sorted(str(k) for k in fields if k not in known)
        if unknown:
            from trtlab.core.errors import UserValueError

            raise UserValueError(f"preprocessing field(s) {', '.join(map(repr, unknown))} do not exist",
                                 f"use only {', '.join(known)}")
        for key in ("mean", "std"):
            try:
                fields[key] = tuple(float(v) for v in fields[key])
            except (KeyError, TypeError, ValueError):
                pass  # absent, or not numbers: Preprocess refuses the latter in one line
        return Preprocess(**{"name": "custom", **fields})
    if spec in PRESETS:
        return PRESETS[spec]
    from trtlab.core.errors import UserValueError

    raise UserValueError(f"unknown preprocessing preset {spec!r}",
                         f"use one of {', '.join(sorted(PRESETS))}, or pass a Preprocess(...)")


_JPEG_SOI, _PNG_SIGNATURE = b"\xff\xd8", b"\x89PNG\r\n\x1a\n"


class _NotJpegStructure(ValueError):
    """Bytes after SOI that do not follow the JPEG marker-segment layout."""


def _jpeg_end(data: bytes) -> int | None:
    """Offset just past the JPEG's end-of-image marker (EOI), found by walking its marker segments and scans, or
    None when the bytes end before it (truncated). Bytes after EOI — a phone "motion photo"'s appended video, a
    camera's trailer — are not part of the image and are not looked at."""
    pos, size = 2, len(data)
    while True:
        if pos >= size:
            return None
        if data[pos] != 0xFF:
            raise _NotJpegStructure(f"byte {pos}: expected a marker")
        while pos < size and data[pos] == 0xFF:  # fill bytes may precede any marker
            pos += 1
        if pos >= size:
            return None
        marker, pos = data[pos], pos + 1
        if marker == 0xD9:
            return pos
        if marker == 0x00:
            raise _NotJpegStructure(f"byte {pos - 1}: stuffed byte outside a scan")
        if 0xD0 <= marker <= 0xD8 or marker == 0x01:  # restart, SOI and TEM markers carry no length
            continue
        if pos + 2 > size:
            return None
        length = int.from_bytes(data[pos:pos + 2], "big")
        if length < 2:
            raise _NotJpegStructure(f"byte {pos}: segment length {length}")
        pos += length
        if marker == 0xDA:  # start of scan: entropy-coded data runs to the next marker
            pos = _scan_end(data, pos)
            if pos is None:
                return None


def _scan_end(data: bytes, pos: int) -> int | None:
    """Offset of the marker that ends the entropy-coded scan starting at `pos` (None: the data ends first). In a
    scan 0xFF is followed by 0x00 (a stuffed data byte), 0xD0–0xD7 (restart markers) or 0xFF (fill); anything else
    is a marker. bytes.find (memchr) is ~25× faster here than a regular expression."""
    find, last = data.find, len(data) - 1
    while True:
        pos = find(b"\xff", pos)
        if pos < 0 or pos >= last:
            return None
        following = data[pos + 1]
        if following == 0x00 or following == 0xFF or 0xD0 <= following <= 0xD7:
            pos += 1
            continue
        return pos


def _png_complete(data: bytes) -> bool:
    """Whether the PNG's chunks reach the IEND chunk (bytes after it are not part of the image)."""
    pos, size = len(_PNG_SIGNATURE), len(data)
    while pos + 8 <= size:
        length, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
        if kind == b"IEND":
            return True
        pos += 12 + length  # length, type, data, CRC
    return False


# OpenCV refuses larger images (imgcodecs/src/loadsave.cpp, validateInputImageSize: OPENCV_IO_MAX_IMAGE_PIXELS,
# default 1 << 30, and OPENCV_IO_MAX_IMAGE_WIDTH / _HEIGHT, default 1 << 20 each), with an assertion some builds
# print to stderr and return no image for: checked here from the file's header, so the reason is trtlab's own line.
_MAX_SIDE_DEFAULT, _MAX_PIXELS_DEFAULT = 1 << 20, 1 << 30
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def claimed_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) a PNG's IHDR or a JPEG's frame header (SOFn) claims; None for other formats or when the
    header is not where the format puts it (OpenCV then judges the file)."""
    if data[:8] == _PNG_SIGNATURE and data[12:16] == b"IHDR" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:2] != _JPEG_SOI:
        return None
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker in _JPEG_SOF and pos + 9 <= len(data):
            return int.from_bytes(data[pos + 7:pos + 9], "big"), int.from_bytes(data[pos + 5:pos + 7], "big")
        if marker == 0xDA or length < 2:  # the scan starts before any frame header: not laid out as expected
            return None
        pos += 2 + length
    return None


def _check_size(data: bytes, path: str) -> None:
    """Refuse, with the numbers, an image whose header claims more pixels than OpenCV decodes (a hand-made or
    damaged header: a 2 KB PNG claiming 100000×100000)."""
    size = claimed_size(data)
    if size is None:
        return
    width, height = size
    max_side = _env_int("OPENCV_IO_MAX_IMAGE_WIDTH", _MAX_SIDE_DEFAULT)
    max_pixels = _env_int("OPENCV_IO_MAX_IMAGE_PIXELS", _MAX_PIXELS_DEFAULT)
    if width * height > max_pixels or max(width, height) > max_side or not width or not height:
        raise ImageDecodeError(f"{path}: its header claims {width}×{height} pixels ({width * height / 1e6:,.0f} "
                               f"megapixels in a {len(data):,}-byte file), beyond what OpenCV decodes "
                               f"({max_pixels / 1e6:,.0f} megapixels, {max_side:,} per side; "
                               f"OPENCV_IO_MAX_IMAGE_PIXELS): skipped")


def _env_int(name: str, default: int) -> int:
    import os

    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        return default


def _check_complete(data: bytes, path: str) -> None:
    """OpenCV decodes truncated JPEGs into grey-padded images with only a warning; catch them here."""
    if data[:2] == _JPEG_SOI:
        if data.endswith(b"\xff\xd9"):
            return  # ends in an end-of-image marker (it cannot occur inside a scan): the common, complete case
        try:
            complete = _jpeg_end(data) is not None  # a motion photo's video or a trailer after the image, or cut
        except _NotJpegStructure:
            # Not laid out as the standard says: keep the older rule (an end-of-image marker after the last
            # start-of-scan) and let OpenCV judge the rest.
            complete = data.rfind(b"\xff\xd9") > data.rfind(b"\xff\xda")
        if not complete:
            raise ImageDecodeError(f"{path}: truncated JPEG (the file ends before the image's end-of-image marker)")
    elif data[:8] == _PNG_SIGNATURE and not _png_complete(data):
        raise ImageDecodeError(f"{path}: truncated PNG (no IEND chunk)")


def check_image_bytes(data: bytes, path: str) -> None:
    """ImageDecodeError (the reason) for a truncated JPEG/PNG or a header claiming more pixels than OpenCV decodes:
    what every decoder refuses before decoding (data.decode_nvjpeg too)."""
    _check_complete(data, path)
    _check_size(data, path)


def read_image_file(path: str | Path) -> bytes:
    """The bytes of an image file; ImageDecodeError (with the reason) when it cannot be read or is empty."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ImageDecodeError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if not data:
        raise ImageDecodeError(f"{path}: empty file")
    return data


def decode_image(path: str | Path, spec: Preprocess) -> np.ndarray:
    """Decode one image file into a (crop, crop, 3) uint8 array in `spec.channel_order`.

    Raises ImageDecodeError with the reason for missing, empty, truncated or undecodable files.
    """
    return decode_image_data(read_image_file(path), str(path), spec)


def decode_image_data(data: bytes, path: str, spec: Preprocess) -> np.ndarray:
    """decode_image of bytes already read from `path` (the decode cache hashes the same bytes)."""
    import cv2

    check_image_bytes(data, path)
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        from trtlab.data.photo_types import OTHER_PHOTO_EXTENSIONS

        ext = Path(path).suffix.lower()
        if ext in OTHER_PHOTO_EXTENSIONS:
            raise ImageDecodeError(f"{path}: {ext} photos cannot be read by the installed OpenCV "
                                   f"({cv2.__version__}); convert it to JPEG or PNG")
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
    """uint8 NHWC crops → float32 NCHW model input, (x - mean) / std per channel (in the crops' channel order)."""
    crops = np.asarray(crops)
    n, h, w, _ = crops.shape
    batch = np.empty((n, 3, h, w), np.float32)  # C-contiguous, as runtimes want it: no second copy later
    mean, std = spec.channel_constants()
    for channel in range(3):
        plane = batch[:, channel]
        np.copyto(plane, crops[..., channel], casting="unsafe")
        plane -= np.float32(mean[channel])
        plane *= np.float32(1.0 / std[channel])
    return batch
