"""Decoder 'nvjpeg' (issue 38 item 7): the decode cache's JPEGs decoded on a CUDA GPU by nvJPEG, through
`torchvision.io.decode_jpeg(device="cuda")`, resized and center-cropped there as `preprocess.resize_center_crop`
does on the CPU, and written into the same rows of the same kind of cache (another cache: the decoder is part of
its identity, `Preprocess.cache_key_fields`). Chosen with `Preprocess(decoder="nvjpeg")` or `TRTLAB_DECODER=nvjpeg`;
opt-in, so without torchvision or without a CUDA GPU asking for it is one `error:` line (`require_nvjpeg`), never
a quiet decode on the CPU.

- Per chunk of rows, reader threads read each file, check that its bytes are the dataset's (content hash) and
  complete (`check_image_bytes`: a truncated file fails its row with the CPU path's own reason), and sort out what
  nvJPEG is not given (`nvjpeg_refusal`): files that are not JPEGs (PNG…), JPEGs with an EXIF orientation (OpenCV's
  imdecode turns them upright, torchvision's CUDA decode does not), CMYK/YCCK or RGB-coded JPEGs, lossless or
  arithmetic coding, unreadable EXIF. Those rows, and JPEGs nvJPEG refuses, are decoded by OpenCV (the CPU path,
  so a corrupt file fails exactly as there), counted by reason and said in one log line by the cache.
- The chunk's other JPEGs are decoded in one batched call into RGB on the GPU (a grayscale JPEG becomes three equal
  channels, as OpenCV's IMREAD_COLOR makes it), while the reader threads already read the next chunk.
- `resize_center_crop_tensor`: cv2.resize's own weights (computeResizeAreaTab for area reduction; its linear and
  cubic coefficients, in OpenCV's 11-bit fixed point for uint8) for the crop's rows and columns only, applied as
  gathers and float32 multiply-adds (no matrix product, so no TF32), rounded as OpenCV rounds. On the demo photos
  it matches OpenCV's resize within the bound tests/test_decode_nvjpeg.py states.
- `decode_difference`: the pixel difference between the two decoders on given files.

torch and torchvision are imported only when this decoder runs (CI installs no torchvision; Kaggle ships it).
"""
from __future__ import annotations

import contextlib
import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from trtlab.core.errors import UserError
from trtlab.data.decode_workers import (RowResult, decode_row, decode_rows, make_executor, read_row_bytes, row_failure,
                                        task_for, write_row)
from trtlab.data.preprocess import (_JPEG_SOF, _PNG_SIGNATURE, DECODER_ENV, Preprocess,
                                    check_image_bytes, decode_image_data, read_image_file)

COEF_SCALE = 2048  # OpenCV's INTER_RESIZE_COEF_SCALE: linear and cubic weights of uint8 images, in 1/2048
_STAND_IN: dict = {}  # decode_step_stand_in: the decode step of tests and CPU benches (never set by trtlab itself)


class NvjpegUnavailable(UserError, RuntimeError):
    """Decoder 'nvjpeg' asked for where it cannot run (no torchvision, no CUDA GPU)."""


def require_nvjpeg() -> str:
    """What decodes (e.g. 'nvJPEG on NVIDIA H200, torch 2.x, torchvision 0.y'); NvjpegUnavailable, one line, where
    torchvision does not import or torch sees no CUDA GPU."""
    if _STAND_IN:
        return f"stand-in decode step {_STAND_IN['name']} on {_STAND_IN['device']} (not nvJPEG)"
    fix = f"use decoder='opencv' (the CPU, the default; {DECODER_ENV}=opencv)"
    try:
        import torch
        from torchvision.io import decode_jpeg  # noqa: F401
        import torchvision
    except Exception as exc:  # noqa: BLE001 — ImportError, or a torchvision built for another torch
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NvjpegUnavailable(f"decoder 'nvjpeg' needs torchvision's decode_jpeg, which does not import here "
                                f"({type(exc).__name__}: {reason})",
                                f"install torchvision built for the installed torch (Kaggle's GPU images ship it), "
                                f"or {fix}") from None
    if not torch.cuda.is_available():
        raise NvjpegUnavailable("decoder 'nvjpeg' decodes on a CUDA GPU and torch sees none here",
                                f"{fix}, or run where a GPU is visible")
    return (f"nvJPEG on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
            f"torchvision {torchvision.__version__}")


@contextlib.contextmanager
def decode_step_stand_in(decode=None, device: str = "cpu", name: str = ""):
    """Tests and CPU benches only: the nvjpeg path with `decode` (a list of 1-D uint8 byte tensors → a list of
    3×H×W uint8 RGB tensors) standing in for nvJPEG's decode step, on `device` — everything else (reading, the
    sorting out, the resize and crop in torch, the rows) as with nvJPEG. Default: `opencv_decode_step`."""
    decode = decode or opencv_decode_step
    _STAND_IN.update(decode=decode, device=device, name=name or getattr(decode, "__name__", "decode"))
    try:
        yield
    finally:
        _STAND_IN.clear()


def torchvision_decode_step(tensors: list, device) -> list:
    """torchvision.io.decode_jpeg of a list of JPEGs into RGB on `device` (nvJPEG on a CUDA device, batched)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    return list(decode_jpeg(tensors, mode=ImageReadMode.RGB, device=device))


def opencv_decode_step(tensors: list, device) -> list:
    """A stand-in decode step made of OpenCV (EXIF ignored, as torchvision's CUDA decode ignores it): for tests of
    the nvjpeg path where torchvision is not installed."""
    import cv2
    import torch

    out = []
    for tensor in tensors:
        image = cv2.imdecode(tensor.numpy(), cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
        if image is None:
            raise RuntimeError("OpenCV could not decode the JPEG")
        out.append(torch.from_numpy(np.ascontiguousarray(image[:, :, ::-1].transpose(2, 0, 1))).to(device))
    return out


# -- what nvJPEG is not given ---------------------------------------------------------------------------------------
def nvjpeg_refusal(data: bytes) -> str | None:
    """Why OpenCV, not nvJPEG, decodes these bytes (the log line's category), or None: nvJPEG decodes them."""
    if data[:8] == _PNG_SIGNATURE:
        return "PNG"
    if data[:2] != b"\xff\xd8":
        return "not a JPEG"
    pos, size, components, ids, adobe = 2, len(data), None, (), None
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            return "JPEG laid out unusually"
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if length < 2:
            return "JPEG laid out unusually"
        body = data[pos + 4:pos + 2 + length]
        if marker == 0xE1 and body[:6] == b"Exif\x00\x00":
            orientation = exif_orientation(body[6:])
            if orientation is None:
                return "unreadable EXIF"
            if orientation not in (0, 1):
                return "EXIF orientation"
        elif marker == 0xEE and body[:5] == b"Adobe" and len(body) >= 12:
            adobe = body[11]
        elif marker in _JPEG_SOF:
            if marker not in (0xC0, 0xC1, 0xC2):
                return "lossless, arithmetic or hierarchical JPEG"
            if len(body) < 6:
                return "JPEG laid out unusually"
            components = body[5]
            ids = tuple(body[6 + 3 * i] for i in range(components) if 6 + 3 * i < len(body))
        elif marker == 0xDA:
            break
        pos += 2 + length
    if components is None:
        return "JPEG laid out unusually"
    if components == 4:
        return "CMYK/YCCK JPEG"
    if components not in (1, 3):
        return f"JPEG of {components} components"
    if components == 3 and (adobe == 0 or ids == (82, 71, 66)):  # libjpeg reads these as RGB, not YCbCr
        return "RGB-coded JPEG"
    return None


def exif_orientation(tiff: bytes) -> int | None:
    """The EXIF orientation tag (0x0112) of an Exif block's TIFF bytes: 0 when absent, None when unreadable."""
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return None
    order = "little" if tiff[:2] == b"II" else "big"
    offset = int.from_bytes(tiff[4:8], order)
    if offset + 2 > len(tiff):
        return None
    for entry in range(offset + 2, offset + 2 + 12 * int.from_bytes(tiff[offset:offset + 2], order), 12):
        if entry + 12 > len(tiff):
            return None
        if int.from_bytes(tiff[entry:entry + 2], order) == 0x0112:
            kind = int.from_bytes(tiff[entry + 2:entry + 4], order)
            return int.from_bytes(tiff[entry + 8:entry + (10 if kind == 3 else 12)], order)
    return 0


# -- resize and center crop in torch, as cv2.resize does --------------------------------------------------------
def crop_geometry(height: int, width: int, spec: Preprocess) -> tuple[int, int, int, int]:
    """(new_h, new_w, top, left) of resize_center_crop for an image of height × width."""
    scale = spec.resize_short / min(height, width)
    new_w, new_h = max(spec.crop, round(width * scale)), max(spec.crop, round(height * scale))
    return new_h, new_w, (new_h - spec.crop) // 2, (new_w - spec.crop) // 2


@functools.lru_cache(maxsize=1024)
def axis_taps(in_size: int, out_size: int, start: int, count: int, interpolation: str,
              area_reduces: bool) -> tuple[np.ndarray, np.ndarray]:
    """(indices, float32 weights), each count × K: the source pixels and weights cv2.resize gives output pixels
    start … start+count-1 of an axis resized from in_size to out_size (OpenCV's resize.cpp, uint8 images).
    `area_reduces`: INTER_AREA with both axes reduced (computeResizeAreaTab); INTER_AREA otherwise is OpenCV's
    linear variant."""
    inv_scale = out_size / in_size
    scale = 1.0 / inv_scale
    dx = np.arange(start, start + count, dtype=np.float64)
    if interpolation == "area" and area_reduces:
        fsx1 = dx * scale
        fsx2 = fsx1 + scale
        cell = np.minimum(scale, in_size - fsx1)
        sx2 = np.minimum(np.floor(fsx2), in_size - 1)
        sx1 = np.minimum(np.ceil(fsx1), sx2)
        span = int(np.ceil(scale)) + 1
        index = np.concatenate([(sx1 - 1)[:, None], sx1[:, None] + np.arange(span)[None, :], sx2[:, None]], 1)
        left = np.where(sx1 - fsx1 > 1e-3, (sx1 - fsx1) / cell, 0.0)
        middle = np.where(sx1[:, None] + np.arange(span)[None, :] < sx2[:, None], 1.0 / cell[:, None], 0.0)
        right = np.where(fsx2 - sx2 > 1e-3, np.minimum(np.minimum(fsx2 - sx2, 1.0), cell) / cell, 0.0)
        weight = np.concatenate([left[:, None], middle, right[:, None]], 1).astype(np.float32)
    elif interpolation == "cubic":
        fx = ((dx + 0.5) * scale - 0.5).astype(np.float32)
        sx = np.floor(fx)
        fx = (fx - sx).astype(np.float32)
        a = np.float32(-0.75)
        c0 = ((a * (fx + 1) - 5 * a) * (fx + 1) + 8 * a) * (fx + 1) - 4 * a
        c1 = ((a + 2) * fx - (a + 3)) * fx * fx + 1
        c2 = ((a + 2) * (1 - fx) - (a + 3)) * (1 - fx) * (1 - fx) + 1
        coefficients = np.stack([c0, c1, c2, 1 - c0 - c1 - c2], 1)
        index = sx[:, None] + np.arange(-1, 3)[None, :]
        weight = _fixed_point(coefficients)
    else:  # linear, and area where an axis grows
        if interpolation == "area":
            sx = np.floor(dx * scale)
            fx = ((dx + 1) - (sx + 1) * inv_scale).astype(np.float32)
            fx = np.where(fx <= 0, np.float32(0), fx - np.floor(fx)).astype(np.float32)
        else:
            fx = ((dx + 0.5) * scale - 0.5).astype(np.float32)
            sx = np.floor(fx)
            fx = (fx - sx).astype(np.float32)
        low, high = sx < 0, sx >= in_size - 1
        fx = np.where(low | high, np.float32(0), fx)
        sx = np.where(low, 0, np.where(high, in_size - 1, sx))
        index = np.stack([sx, sx + 1], 1)
        weight = _fixed_point(np.stack([1 - fx, fx], 1))
    index = np.clip(index, 0, in_size - 1).astype(np.int64)  # out of range: weight 0, or replicated (cubic)
    return index, weight


def _fixed_point(coefficients: np.ndarray) -> np.ndarray:
    """OpenCV's uint8 weights: each rounded to 1/2048 (saturate_cast<short>(c * INTER_RESIZE_COEF_SCALE))."""
    return (np.rint(coefficients.astype(np.float32) * COEF_SCALE) / COEF_SCALE).astype(np.float32)


def resize_center_crop_tensor(image, spec: Preprocess):
    """`preprocess.resize_center_crop` of a 3×H×W (or 1×H×W) uint8 RGB torch tensor, on its device: the crop's
    rows and columns of cv2.resize (spec.interpolation), rounded to uint8, as crop × crop × 3 in
    spec.channel_order. A 4-D N×3×H×W batch of same-size images gives N crops with the same kernels once (each
    image's values are computed by the same elementwise operations: identical to one at a time)."""
    import torch

    if image.shape[-3] == 1:
        image = image.expand(*image.shape[:-3], 3, -1, -1)
    height, width = image.shape[-2:]
    new_h, new_w, top, left = crop_geometry(height, width, spec)
    reduces = new_h <= height and new_w <= width  # OpenCV: scale_x >= 1 and scale_y >= 1
    interpolation = {"bilinear": "linear"}.get(spec.interpolation, spec.interpolation)
    rows = _device_taps(height, new_h, top, spec.crop, interpolation, reduces, image.device)
    cols = _device_taps(width, new_w, left, spec.crop, interpolation, reduces, image.device)
    pixels = image.to(torch.float32)
    across = None
    for k in range(cols[0].shape[1]):  # columns first, as OpenCV's horizontal pass
        term = pixels[..., cols[0][:, k]] * cols[1][:, k]
        across = term if across is None else across.add_(term)
    out = None
    for k in range(rows[0].shape[1]):
        term = across[..., rows[0][:, k], :] * rows[1][:, k, None]
        out = term if out is None else out.add_(term)
    if interpolation == "area" and (height, width) == (2 * new_h, 2 * new_w):
        out = out.add_(0.5).floor_()  # OpenCV's 2×2 area average of uint8 rounds halves up: (sum + 2) >> 2
    else:
        out = out.round_()  # cvRound: halves to even
    crop = out.clamp_(0, 255).to(torch.uint8)
    if spec.channel_order == "BGR":
        crop = crop.flip(-3)
    return crop.movedim(-3, -1).contiguous()


# Pixels of one same-size batch resized at once (float32 working copies: ~4 bytes × 3 channels each, twice)
BATCH_PIXELS = 32 * 1024 * 1024


def resize_same_size_batches(images: list, spec: Preprocess) -> list:
    """resize_center_crop_tensor of each image, images of one size stacked and resized together, at most
    BATCH_PIXELS pixels at once (a chunk of large photos must not take the GPU's memory); crops in input order."""
    import torch

    by_size: dict = {}
    for k, image in enumerate(images):
        by_size.setdefault(tuple(image.shape), []).append(k)
    crops: list = [None] * len(images)
    for shape, members in by_size.items():
        per_batch = max(1, BATCH_PIXELS // max(1, shape[-1] * shape[-2]))
        for start in range(0, len(members), per_batch):
            part = members[start:start + per_batch]
            batch = images[part[0]][None] if len(part) == 1 else torch.stack([images[k] for k in part])
            for k, crop in zip(part, resize_center_crop_tensor(batch, spec)):
                crops[k] = crop
    return crops


_DEVICE_TAPS: dict = {}


def _device_taps(in_size, out_size, start, count, interpolation, reduces, device):
    import torch

    key = (in_size, out_size, start, count, interpolation, reduces, str(device))
    taps = _DEVICE_TAPS.get(key)
    if taps is None:
        index, weight = axis_taps(in_size, out_size, start, count, interpolation, reduces)
        if len(_DEVICE_TAPS) > 4096:
            _DEVICE_TAPS.clear()
        taps = _DEVICE_TAPS[key] = (torch.from_numpy(index).to(device), torch.from_numpy(weight).to(device))
    return taps


# -- the decode cache's rows ----------------------------------------------------------------------------------------
class NvjpegDecoder:
    """The decode cache's executor for decoder 'nvjpeg' (decode_workers.executor_and_task): `submit(task, items, fd,
    row_bytes, spec)` reads the items' files in `readers` threads at once and queues their batched decode on the
    GPU after the chunks submitted before; its future is the chunk's RowResults, as OpenCV's workers return."""

    def __init__(self, readers: int, device=None, decode=None):
        import cv2

        cv2.setNumThreads(1)  # the fallback decodes run in the reader threads
        self.device = device or _STAND_IN.get("device") or "cuda"
        self.decode_step = decode or _STAND_IN.get("decode") or torchvision_decode_step
        self.readers = ThreadPoolExecutor(max(1, readers), thread_name_prefix="trtlab-read")
        self.gpu = ThreadPoolExecutor(1, thread_name_prefix="trtlab-nvjpeg")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.gpu.shutdown(wait=True)
        self.readers.shutdown(wait=True)
        return False

    def submit(self, task, items, fd: int, row_bytes: int, spec: Preprocess):
        reads = [self.readers.submit(self._read, item, fd, row_bytes, spec) for item in items]
        return self.gpu.submit(task, reads, fd, row_bytes, spec)

    def decode_rows(self, reads, fd: int, row_bytes: int, spec: Preprocess) -> list[RowResult]:
        """The task: the chunk's JPEGs decoded in one batch, resized and cropped on the device, written."""
        import torch

        results, jpegs = [], []
        for future in reads:
            read = future.result()
            (results if isinstance(read, RowResult) else jpegs).append(read)
        if not jpegs:
            return results
        images = self._decode_batch([data for _, _, data in jpegs])
        decoded, kept, refused = [], [], []
        for (index, path, data), image in zip(jpegs, images):
            if isinstance(image, BaseException) or image.ndim != 3 or image.shape[0] not in (1, 3):
                refused.append(self.readers.submit(_opencv_row, index, path, data, fd, row_bytes, spec,
                                                   "refused by nvJPEG"))
                continue
            decoded.append(image)
            kept.append((index, path))
        if decoded:
            host = torch.stack(resize_same_size_batches(decoded, spec)).cpu().numpy()  # one copy back
            results += [write_row(fd, row_bytes, index, path, host[k]) for k, (index, path) in enumerate(kept)]
        return results + [future.result() for future in refused]

    def _decode_batch(self, datas: list[bytes]) -> list:
        """One decoded image (or the exception) per JPEG: the batch at once; where it fails, one by one."""
        import torch

        tensors = [torch.from_numpy(np.frombuffer(data, np.uint8).copy()) for data in datas]
        try:
            return list(self.decode_step(tensors, self.device))
        except Exception:  # noqa: BLE001 — one odd JPEG fails the whole batch: find it
            pass
        out = []
        for tensor in tensors:
            try:
                out.append(self.decode_step([tensor], self.device)[0])
            except Exception as exc:  # noqa: BLE001 — decoded by OpenCV instead, counted
                out.append(exc)
        return out

    @staticmethod
    def _read(item, fd: int, row_bytes: int, spec: Preprocess):
        """A final RowResult (changed, failed, or decoded by OpenCV), or (index, path, bytes) for nvJPEG."""
        index, path, expected = item
        data = read_row_bytes(index, path, expected)
        if isinstance(data, RowResult):
            return data
        try:
            check_image_bytes(data, path)
        except Exception as exc:  # noqa: BLE001 — as decode_workers.decode_rows: an odd file never stops a decode
            return row_failure(index, path, exc)
        reason = nvjpeg_refusal(data)
        if reason is not None:
            return _opencv_row(index, path, data, fd, row_bytes, spec, reason)
        return index, path, data


def _opencv_row(index: int, path: str, data: bytes, fd: int, row_bytes: int, spec: Preprocess,
                reason: str) -> RowResult:
    """Row `index` decoded by the CPU path (its failure recorded exactly as there); `fallback` says why."""
    result = decode_row(index, path, data, fd, row_bytes, spec)
    if result.error is None:
        result.fallback = reason
    return result


def decode_rows_nvjpeg(items, fd: int, row_bytes: int, spec: Preprocess, readers: int = 1) -> list[RowResult]:
    """decode_workers.decode_rows with nvJPEG: the items' rows decoded now (the cache's repair of damaged rows)."""
    require_nvjpeg()
    with NvjpegDecoder(readers) as decoder:
        return decoder.submit(decoder.decode_rows, items, fd, row_bytes, spec).result()


def executor_and_task(pool: str, workers: int, fd: int, crops_path: str, row_bytes: int, spec: Preprocess):
    """(executor, task, its extra arguments, pieces per chunk) that decode rows with `spec`'s decoder: OpenCV in
    `workers` threads or processes (a chunk split among them), or nvJPEG (data.decode_nvjpeg: a chunk is one batch
    on the GPU, its files read in `workers` threads)."""
    if spec.decoder == "nvjpeg":
        decoder = NvjpegDecoder(workers)
        return decoder, decoder.decode_rows, (fd, row_bytes, spec), 1
    task, extra = task_for(pool, workers, fd, row_bytes, spec)
    return make_executor(pool, workers, crops_path, row_bytes, spec), task, extra, workers


def rows_decoder(spec: Preprocess):
    """decode_rows, or its nvJPEG counterpart for decoder 'nvjpeg' (the rows of a cache are decoded by its decoder)."""
    if spec.decoder == "nvjpeg":
        return decode_rows_nvjpeg
    return decode_rows


# -- the two decoders compared --------------------------------------------------------------------------------------
def decode_difference(paths, spec="tf-lite", batch: int = 64, progress: bool = True) -> dict:
    """OpenCV's crops against nvJPEG's (this module's path; a stand-in's inside decode_step_stand_in) of the files
    `paths`, over the files nvJPEG decodes: `max_abs`, `mean_abs` and `share_over_2` (share of the uint8 channel
    values that differ by more than 2) of |opencv − nvjpeg|, with `files`, `compared`, `left_to_opencv` (files
    either would decode by OpenCV: not compared) and `per_file_max`. Raises NvjpegUnavailable as the cache does."""
    from trtlab.core.progress import progress_iter
    from trtlab.data.preprocess import get_preprocess

    spec = get_preprocess(spec)
    decoder_name = require_nvjpeg()
    total, count, over, worst, per_file, left = 0.0, 0, 0, 0, [], 0
    with NvjpegDecoder(1) as decoder:
        starts = range(0, len(paths), batch)
        for start in progress_iter(starts, desc="nvjpeg vs opencv", unit="batch", enabled=progress):
            datas = [read_image_file(p) for p in paths[start:start + batch]]
            chosen = [(p, d) for p, d in zip(paths[start:start + batch], datas) if nvjpeg_refusal(d) is None]
            left += len(datas) - len(chosen)
            images = decoder._decode_batch([d for _, d in chosen]) if chosen else []
            for (path, data), image in zip(chosen, images):
                if isinstance(image, BaseException):
                    left += 1
                    continue
                gpu = resize_center_crop_tensor(image, spec).cpu().numpy().astype(np.int16)
                diff = np.abs(decode_image_data(data, str(path), spec).astype(np.int16) - gpu)
                total, count, over = total + float(diff.sum()), count + diff.size, over + int((diff > 2).sum())
                worst = max(worst, int(diff.max()))
                per_file.append(int(diff.max()))
    return {"decoder": decoder_name, "files": len(paths), "compared": len(per_file), "left_to_opencv": left,
            "max_abs": worst, "mean_abs": total / count if count else float("nan"),
            "share_over_2": over / count if count else float("nan"), "per_file_max": per_file}


__all__ = ["NvjpegDecoder", "NvjpegUnavailable", "axis_taps", "decode_difference", "decode_rows_nvjpeg",
           "decode_step_stand_in", "executor_and_task", "exif_orientation", "nvjpeg_refusal", "opencv_decode_step",
           "require_nvjpeg", "resize_center_crop_tensor", "resize_same_size_batches", "rows_decoder", "torchvision_decode_step"]
