"""TensorRT 10's implicit INT8 calibrators, fed from a trtlab decode cache through cuda-python device buffers.

Only TensorRT 10.x has these (IInt8EntropyCalibrator2 / IInt8MinMaxCalibrator, deprecated since 10.1 and removed
in 11.0); trtlab offers them so users can A/B TensorRT's own calibration against trtlab's Q/DQ models. For that
A/B to mean anything both calibrate on the same images: TensorRT's calibrator takes exactly the images
trtlab.quantization.variants.select_calibration_indices picks for the same recipe, and its cache keeps the sidecar
schema of trtlab.quantization.calibration_cache (CacheMetadata, checked by load_if_valid before any reuse).

The contract (TensorRT Python API, IInt8Calibrator):

* the subclass calls the base ``__init__`` explicitly (pybind trampoline; Polygraphy notes it segfaults
  otherwise);
* ``get_batch(names)`` returns one **device** pointer (int) per input name, or ``None`` when the data is
  exhausted — a host pointer here is the classic cause of "cudaMemoryTypeHost" assertion failures, so the
  batch goes host (pinned) → device buffer first;
* every batch has exactly the calibration profile's shape: the last, short batch is padded with copies of its
  last image (the batch source's rule); how many rows were padding is recorded in the engine's identity;
* ``read_calibration_cache()`` returns the bytes of an earlier run (or None) and ``write_calibration_cache(cache)``
  receives a buffer to persist, written atomically next to its CacheMetadata sidecar.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from trtlab.core.errors import UserValueError
from trtlab.core.workspace import atomic_write_bytes, atomic_write_json, hash_json
from trtlab.quantization.calibration_cache import CacheMetadata, load_if_valid

ALGORITHMS = {"entropy": "IInt8EntropyCalibrator2", "minmax": "IInt8MinMaxCalibrator"}


def calibration_metadata(model_sha256: str, algorithm: str, cache, indices,
                         tensorrt_version: str | None) -> CacheMetadata:
    """The cache sidecar of a TensorRT calibration: the fields trtlab's own calibration caches carry."""
    ids = cache.dataset.image_ids()
    return CacheMetadata(model_sha256=model_sha256, algorithm=algorithm, preprocess=cache.preprocess.to_dict(),
                         images=int(len(indices)), calibration_ids_hash=hash_json([ids[int(i)] for i in indices]),
                         tensorrt_version=tensorrt_version)


def calibration_cache_path(model_path, meta: CacheMetadata, workspace=None) -> Path:
    """Where TensorRT's calibration cache of (model, algorithm, images, preprocessing, TensorRT) is kept."""
    from trtlab.core.identity import Identity
    from trtlab.core.workspace import workspace_dir

    made_from = Identity(model_sha256=meta.model_sha256, preprocess=meta.preprocess,
                         recipe={"algorithm": meta.algorithm, "percentile": meta.percentile,
                                 "guards": list(meta.guards)},
                         calibration={"images": meta.images, "ids_hash": meta.calibration_ids_hash,
                                      "batch": meta.batch_size},
                         backend={"name": "trt", "version": meta.tensorrt_version})
    return (workspace_dir(workspace) / "calibration" /
            f"tensorrt-{Path(model_path).stem}-{meta.model_sha256[:8]}-{meta.algorithm}-{made_from.digest(12)}.cache")


def tensorrt_calibrator(trt, model_path, recipe, cache, calibration_indices, workspace=None, use_cache: bool = True,
                        progress: bool = True):
    """(TensorRT calibrator for `recipe`'s algorithm and calibration size, the recipe with its size made explicit).

    The images are those trtlab's calibration of the same recipe uses (select_calibration_indices on
    `calibration_indices`, e.g. the split's calibration set); batches of recipe.calibration_batch (a fixed-batch
    model's batch). A cache made for another model, image set, preprocessing or TensorRT version is refused
    before the build starts (StaleCacheError naming the field)."""
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.quantization.variants import select_calibration_indices

    if recipe.algorithm not in ALGORITHMS:
        raise UserValueError(f"TensorRT's own calibrators are {', '.join(ALGORITHMS)}, not {recipe.algorithm!r}",
                             "use algorithm='entropy' or 'minmax' for TensorRT's calibrator (trtlab's Q/DQ variants "
                             "offer percentile as well)")
    recipe, indices = select_calibration_indices(cache, calibration_indices, recipe)
    info = inspect_classifier(model_path)
    batch = info.fixed_batch or recipe.calibration_batch
    meta = calibration_metadata(info.sha256, recipe.algorithm, cache, indices, str(trt.__version__))
    path = calibration_cache_path(model_path, meta, workspace)
    return make_calibrator(trt, recipe.algorithm, cache, indices, batch, path, meta, use_cache, progress), recipe


def make_calibrator(trt, algorithm: str, cache, indices: np.ndarray, batch_size: int,
                    cache_path: str | os.PathLike | None, meta: CacheMetadata, use_cache: bool = True,
                    progress: bool = True):
    """An instance of a TensorRT calibrator class (`algorithm` 'entropy' or 'minmax') that streams the decode
    cache's crops at `indices`, normalised with the cache's preprocessing, in batches of `batch_size`."""
    if algorithm not in ALGORITHMS:
        raise UserValueError(f"calibrator {algorithm!r} is not one of {', '.join(ALGORITHMS)}", "choose one of them")
    base = getattr(trt, ALGORITHMS[algorithm])

    class TrtlabCalibrator(_CalibratorMixin, base):
        def __init__(self):
            base.__init__(self)  # the pybind11 trampoline must be initialised explicitly
            _CalibratorMixin.__init__(self, cache, indices, batch_size, cache_path, meta, use_cache, progress)

    TrtlabCalibrator.__name__ = f"Trtlab{ALGORITHMS[algorithm][1:]}"
    return TrtlabCalibrator()


class _CalibratorMixin:
    """The calibrator's behaviour, independent of which TensorRT base class it is mixed into."""

    def __init__(self, cache, indices, batch_size, cache_path, meta: CacheMetadata, use_cache, progress):
        self.decode_cache = cache
        self.indices = np.asarray(indices, np.int64)
        self.batch_size = int(batch_size)
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.meta = meta
        self.progress = progress
        self.batches_served = 0
        self._batches = self._device = self._pinned = self._stream = self._bar = None
        # A foreign or damaged cache is refused here, before TensorRT builds (an exception inside TensorRT's
        # read_calibration_cache callback would surface as a failed build, not as this message).
        self.reuses_cache = bool(use_cache and self.cache_path is not None and self.cache_path.is_file())
        if self.reuses_cache:
            load_if_valid(self.cache_path, meta)

    @property
    def padded_rows(self) -> int:
        return int(-len(self.indices) % self.batch_size)

    @property
    def identity(self) -> dict:
        """What this calibration depends on: the cache metadata, the batch and the padding of the last batch."""
        return {**json.loads(json.dumps(asdict(self.meta))), "batch": self.batch_size,
                "padded_rows": self.padded_rows, "calibrator": ALGORITHMS[self.meta.algorithm]}

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
        if not self.reuses_cache:
            return None
        return self.cache_path.read_bytes() or None

    def write_calibration_cache(self, cache) -> None:
        if self.cache_path is None:
            return
        atomic_write_bytes(self.cache_path, bytes(memoryview(cache)))
        atomic_write_json(self.cache_path.with_name(self.cache_path.name + ".json"), asdict(self.meta))

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
            from trtlab.core.progress import finish

            finish(self._bar)
            self._bar = None
