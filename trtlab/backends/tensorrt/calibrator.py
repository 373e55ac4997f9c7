"""TensorRT 10's implicit INT8 calibrators, fed from a trtlab decode cache through cuda-python device buffers.

Only TensorRT 10.x has these (IInt8EntropyCalibrator2 / IInt8MinMaxCalibrator, deprecated since 10.1 and removed
in 11.0); trtlab offers them so users can A/B TensorRT's own calibration against trtlab's Q/DQ models.

The contract (TensorRT Python API, IInt8Calibrator):

* the subclass calls the base ``__init__`` explicitly (pybind trampoline; Polygraphy notes it segfaults
  otherwise);
* ``get_batch(names)`` returns one **device** pointer (int) per input name, or ``None`` when the data is
  exhausted — a host pointer here is the classic cause of "cudaMemoryTypeHost" assertion failures, so the
  batch goes host (pinned) → device buffer first;
* every batch has exactly the calibration profile's shape, so the last partial batch is dropped;
* ``read_calibration_cache()`` returns the bytes of an earlier run (or None) and
  ``write_calibration_cache(cache)`` receives a buffer to persist; trtlab writes it atomically next to a JSON
  sidecar naming the model and data it was computed from, and refuses a cache made for another model.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from trtlab.core.workspace import atomic_write_bytes, atomic_write_json

ALGORITHMS = {"entropy": "IInt8EntropyCalibrator2", "minmax": "IInt8MinMaxCalibrator"}


class CalibrationCacheMismatch(ValueError):
    """A calibration cache file exists but was made for another model, data or algorithm."""


def calibration_indices(cache, images: int | None, batch_size: int) -> np.ndarray:
    """The decoded images used for calibration: the first `images` valid ones, whole batches only."""
    indices = cache.valid_indices
    if images is not None:
        indices = indices[:images]
    usable = (len(indices) // batch_size) * batch_size
    if usable == 0:
        raise ValueError(f"calibration needs at least one full batch of {batch_size} decoded images, but the decode "
                         f"cache {cache.key} has {len(indices)}; lower calibration_batch or add images")
    return indices[:usable]


def cache_identity(model_sha256: str, algorithm: str, cache, indices: np.ndarray, batch_size: int) -> dict:
    """What a calibration cache depends on; stored beside it and compared before it is reused."""
    return {
        "model_sha256": model_sha256,
        "algorithm": algorithm,
        "decode_cache": cache.key,
        "images": int(len(indices)),
        "batch_size": int(batch_size),
    }


def check_calibration_cache(path: str | os.PathLike, identity: dict) -> bool:
    """True when `path` holds a reusable cache for `identity`; False when there is none.

    Raises CalibrationCacheMismatch naming the differing field and the fix when the cache belongs elsewhere.
    """
    path = Path(path)
    if not path.is_file():
        return False
    sidecar = Path(str(path) + ".json")
    if not sidecar.is_file():
        raise CalibrationCacheMismatch(f"calibration cache {path} has no sidecar {sidecar.name}, so trtlab cannot tell "
                                       f"which model it belongs to; delete it or pass use_calibration_cache=False")
    stored = json.loads(sidecar.read_text())
    for key, value in identity.items():
        if stored.get(key) != value:
            short = (lambda v: v[:12] + "…" if isinstance(v, str) and len(v) > 16 else v)
            raise CalibrationCacheMismatch(
                f"calibration cache {path} was made for {key} {short(stored.get(key))}, not {short(value)}; "
                f"delete it or pass use_calibration_cache=False")
    return True


def make_calibrator(trt, algorithm: str, cache, indices: np.ndarray, batch_size: int,
                    cache_path: str | os.PathLike | None, identity: dict, use_cache: bool = True,
                    progress: bool = True):
    """An instance of a TensorRT calibrator class (`algorithm` 'entropy' or 'minmax') that streams the decode
    cache's crops at `indices`, normalised with the cache's preprocessing, in batches of `batch_size`."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"calibrator must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    base = getattr(trt, ALGORITHMS[algorithm])

    class TrtlabCalibrator(_CalibratorMixin, base):
        def __init__(self):
            base.__init__(self)  # the pybind11 trampoline must be initialised explicitly
            _CalibratorMixin.__init__(self, cache, indices, batch_size, cache_path, identity, use_cache, progress)

    TrtlabCalibrator.__name__ = f"Trtlab{ALGORITHMS[algorithm][1:]}"
    return TrtlabCalibrator()


class _CalibratorMixin:
    """The calibrator's behaviour, independent of which TensorRT base class it is mixed into."""

    def __init__(self, cache, indices, batch_size, cache_path, identity, use_cache, progress):
        self.decode_cache = cache
        self.indices = np.asarray(indices, np.int64)
        self.batch_size = int(batch_size)
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.identity = identity
        self.use_cache = use_cache
        self.progress = progress
        self.batches_served = 0
        self._batches = None
        self._device = None
        self._pinned = None
        self._stream = None
        self._bar = None

    # -- TensorRT callbacks --------------------------------------------------------------------------------
    def get_batch_size(self) -> int:
        return self.batch_size

    def get_batch(self, names):
        try:
            served = next(self._iter())
        except StopIteration:
            self.free()
            return None
        if len(names) != 1:
            raise ValueError(f"trtlab calibrates single-input classifiers; TensorRT asked for inputs {names}")
        batch = served.images
        self._ensure_buffers(batch)
        self._pinned.array[...] = batch
        self._device.copy_from_host(self._pinned.array, self._stream)
        self._stream.synchronize()  # TensorRT reads the buffer as soon as get_batch returns
        self.batches_served += 1
        if self._bar is not None:
            self._bar.update(served.count)
        return [self._device.ptr]

    def read_calibration_cache(self):
        if not (self.use_cache and self.cache_path is not None and self.cache_path.is_file()):
            return None
        check_calibration_cache(self.cache_path, self.identity)
        data = self.cache_path.read_bytes()
        return data or None

    def write_calibration_cache(self, cache) -> None:
        if self.cache_path is None:
            return
        atomic_write_bytes(self.cache_path, bytes(memoryview(cache)))
        atomic_write_json(Path(str(self.cache_path) + ".json"), {**self.identity, "batches": self.batches_served})

    # -- buffers -------------------------------------------------------------------------------------------
    def _iter(self):
        if self._batches is None:
            from trtlab.core.progress import progress_bar
            from trtlab.data.batches import iter_batches

            self._bar = progress_bar(total=len(self.indices), desc="TensorRT calibration", unit="img",
                                     enabled=self.progress)
            # TensorRT's calibrator takes full batches of get_batch_size(): the last one is padded (batch source rule)
            self._batches = iter_batches(self.decode_cache, self.indices, self.batch_size, fixed_batch=self.batch_size)
        return self._batches

    def _ensure_buffers(self, batch: np.ndarray) -> None:
        if self._device is None:
            from trtlab.backends.cuda_runtime import DeviceBuffer, PinnedBuffer, Stream

            self._stream = Stream()
            self._pinned = PinnedBuffer(batch.shape, batch.dtype)
            self._device = DeviceBuffer(batch.nbytes)

    def free(self) -> None:
        """Release the device/pinned buffers and the stream (also called when the data runs out)."""
        for attr in ("_device", "_pinned"):
            buffer = getattr(self, attr)
            if buffer is not None:
                buffer.free()
                setattr(self, attr, None)
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
