"""Streaming activation statistics: one pass over the calibration images collects, for every tensor the quantizer
may quantize, the running max |x| and a histogram of |x| (trtlab.quantization.thresholds derives every algorithm's
threshold from them without running the model again). Memory is bounded by the sub-batch in flight
(`collect_statistics` cuts the calibration batch into sub-batches that fit `memory_budget_mb`) plus the histogram
counters, whatever the number of images (ONNX Runtime's own calibrator keeps every intermediate output instead).

What the statistics depend on: the model, the calibration images *in their order*, the preprocessing and the
recipe's `calibration_batch` — never the memory budget, the sub-batch size or the device's free memory. The
histograms' bin width is set by the max |x| of the first calibration batch (its first `calibration_batch` images; a
fixed-batch model's own batch), as TensorRT's entropy calibrator sets its histogram from the first batch its
calibrator hands it (get_batch_size() images per get_batch). TensorRT's developer guide (INT8 calibration,
docs.nvidia.com/deeplearning/tensorrt/developer-guide/index.html#enable_int8_c, as quoted in ultralytics/ultralytics
PR #10165): "Calibration batch size can also affect the truncation error for IInt8EntropyCalibrator2 … a different
order of calibration batches can result in the histogram size being increased at different points, producing
slightly different calibration scales"; NVIDIA/TensorRT#1411 and #1023 (maintainer: the histogram is updated with
every batch, so the result differs with the batch size).

Where the first calibration batch spans several sub-batches (a budget smaller than one batch's exposed activations),
a first pass over those sub-batches computes only each tensor's max |x|, then the counting pass runs over all
images: the first batch is run twice, nothing of it is held (EfficientNet-Lite0, first 8 images in sub-batches of 4:
0.1–0.25 s on 2 cores, about 2 % of a 1,000-image forward pass). After the range is set, a value's bin depends on the
value alone (histogram.py), so how the images are grouped changes no count. ONNX Runtime's CPU results for an image
do not depend on how many images share its run (checked on the demo model and a light ResNet-50), and a GPU runs one
calibration batch per forward (statistics_torch), so thresholds are identical bit for bit across budgets and
sub-batch sizes (tests/test_calibration_batch.py). A tensor that is zero on every image of the first batch takes its
range from the first image where it is not.

The histogram itself (its specification, the numpy reference and the CPU counter) is trtlab.quantization.histogram;
this module dispatches to where the activations are computed and counted (`collect_statistics(device=...)`):
- "cpu" (statistics_ort): ONNX Runtime computes the sub-batches; their tensors are histogrammed while ONNX Runtime
  runs the next one, by numba's counter in one thread per core (without numba: by numpy, same counts);
- "cuda" (default where torch sees a GPU): the FP32 graph runs on the GPU through the torch backend and the
  histograms are counted there (statistics_torch), at forward-pass speed.
The histogram modules never import this one.

A model exported with a fixed batch runs exactly that batch: the batch source pads the last one, and padded rows
are never counted.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np

# the histogram's names stay importable from here (thresholds, variants and users' code take them from this module)
from trtlab.quantization.histogram import (HISTOGRAM_BINS, MAX_HISTOGRAM_BINS, NonFiniteActivation,  # noqa: F401
                                          TensorHistogram, merge_pairs)

log = logging.getLogger(__name__)

# Part of the identities of statistics and variants: bumped when the histogram or an algorithm changes meaning
# (2: ModelOpt's fixed-width growing histogram, entropy = NVIDIA's reference; 3: one float32 multiplier kept through
# growth, growth decided per batch — counts independent of chunking, equal on every device; 4: the 256 MB budget
# makes the first sub-batch, which sets the bin width, smaller — 4 images of EfficientNet-Lite0 instead of 8; 5: the
# first calibration batch sets the bin width whatever the sub-batching, bins grow to the float32 bin of the max), so
# old workspaces are not reused. A change to the code below needs no bump: STATISTICS_SOURCES' fingerprint is in
# the identity too; the revision is for what code cannot show (and names the meaning for people).
CALIBRATION_REVISION = 5
#: The modules whose code decides the statistics of a (model, images, preprocessing): the counting, the activations
#: ONNX Runtime exposes (session options, blocked layout) and those the torch backend computes on the GPU, the
#: normalisation of the crops. The fingerprint of their code (core.fingerprint, `statistics_code()`) is part of the
#: statistics' identity and of every INT8 variant's, so editing them recollects statistics and rebuilds INT8
#: variants without a bump; tests/test_code_fingerprint.py fails when one of them imports a trtlab module that is
#: neither listed nor named there as not deciding the numbers.
STATISTICS_SOURCES = ("trtlab.quantization.statistics", "trtlab.quantization.histogram",
                      "trtlab.quantization.histogram_numba", "trtlab.quantization.statistics_ort",
                      "trtlab.quantization.exposure_ort", "trtlab.quantization.statistics_torch",
                      "trtlab.data.batches", "trtlab.data.preprocess", "trtlab.graph.onnx_utils",
                      "trtlab.core.ort_session", "trtlab.backends.gpu", "trtlab.backends.gpu.graph_module",
                      "trtlab.backends.gpu.registry", "trtlab.backends.gpu.ops_nn", "trtlab.backends.gpu.ops_quant",
                      "trtlab.backends.gpu.ops_tensor", "trtlab.backends.gpu.runner", "trtlab.backends.gpu.feed",
                      "trtlab.backends.gpu.capture", "trtlab.backends.gpu.qdq_kernel", "trtlab.backends.gpu.qdq_triton",
                      "trtlab.quantization.statistics_stream")
# Bytes of exposed activations (x2: one sub-batch being histogrammed while the next runs) per ONNX Runtime run.
# 256: EfficientNet-Lite0 (26.5 MB exposed per image) runs in sub-batches of 4 and calibrates 128 images in about
# 660 MB peak RSS (512: sub-batches of 9, about 1 GB; bench/bench_calibration.py).
MEMORY_BUDGET_MB = 256
DEVICES = ("auto", "cpu", "cuda", "torch-cpu")
def statistics_code() -> str:
    """The fingerprint of STATISTICS_SOURCES' code (computed once per process)."""
    from trtlab.core.fingerprint import code_fingerprint

    return code_fingerprint(STATISTICS_SOURCES)


_device_override: contextvars.ContextVar = contextvars.ContextVar("trtlab_calibration_device", default=None)


@dataclass
class CalibrationStats:
    """Statistics for every tensor to quantize, plus what they were collected from and where."""

    tensors: dict[str, TensorHistogram]
    images: int
    model_sha256: str
    preprocess: dict
    image_ids: list[str] = field(default_factory=list)
    seconds: float = 0.0
    peak_batch_bytes: int = 0
    device: str = "cpu"  # what computed the activations: "cpu" (ONNX Runtime) or the torch device
    counting: str = ""  # how the histograms were counted (for people and the bench)
    range_images: int = 0  # the first images (the first calibration batch) whose max |x| set every bin width

    def save(self, path) -> None:
        import json

        from trtlab.core.workspace import atomic_path

        arrays = {}
        for i, (name, h) in enumerate(self.tensors.items()):
            arrays[f"c{i}"] = h.counts
            arrays[f"m{i}"] = np.array([h.range, h.absmax, h.values, h.scale, h.width], np.float64)
        meta = {"names": list(self.tensors), "images": self.images, "model_sha256": self.model_sha256,
                "preprocess": self.preprocess, "image_ids": self.image_ids, "seconds": self.seconds,
                "peak_batch_bytes": self.peak_batch_bytes, "device": self.device, "counting": self.counting,
                "range_images": self.range_images}
        with atomic_path(path, suffix=".npz") as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)

    @classmethod
    def load(cls, path) -> "CalibrationStats":
        import json

        from trtlab.core.workspace import NPZ_MAGIC, check_magic

        with open(path, "rb") as fh:
            check_magic(fh, NPZ_MAGIC, ".npz")  # other bytes are damage (ValueError), not a pickle numpy refuses
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            tensors = {}
            for i, name in enumerate(meta["names"]):
                rng, absmax, values, *multiplier = data[f"m{i}"]
                scale, width = multiplier if multiplier else (0.0, 0.0)
                tensors[name] = TensorHistogram(counts=data[f"c{i}"].copy(), range=float(rng), absmax=float(absmax),
                                                values=int(values), scale=float(scale), width=float(width))
        return cls(tensors, meta["images"], meta["model_sha256"], meta["preprocess"], meta["image_ids"],
                   meta["seconds"], meta["peak_batch_bytes"], meta.get("device", "cpu"), meta.get("counting", ""),
                   meta.get("range_images", 0))


def _exposed_shapes(model, names: list[str]) -> list[tuple] | None:
    """Per-image shapes (the first dimension is the batch) of `names` from ONNX shape inference; None unless every
    one is a fully known float32 tensor."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - shape inference is only an optimisation here
        return None
    known = {}
    for info in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        tensor = info.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if tensor.elem_type == onnx.TensorProto.FLOAT and dims and None not in dims[1:]:
            known[info.name] = tuple(dims[1:])
    if any(name not in known for name in names):
        return None
    return [known[name] for name in names]


def _exposed_bytes_per_image(model, names: list[str]) -> int | None:
    """float32 bytes per image of `names` (None when shape inference does not know them all)."""
    shapes = _exposed_shapes(model, names)
    return None if shapes is None else sum(4 * int(np.prod(shape, dtype=np.int64)) for shape in shapes)


def sub_batch_size(batch_size: int, bytes_per_image: int | None, budget_bytes: float) -> int:
    """Images per sub-batch: as many as fit budget / (2 × exposed bytes per image), in equal parts of the
    calibration batch (32 with room for 9 → 4 runs of 8, not 9+9+9+5); the whole batch when sizes are unknown."""
    if not bytes_per_image:
        return batch_size
    fit = max(1, int(budget_bytes // (2 * bytes_per_image)))
    runs = -(-batch_size // fit)
    return -(-batch_size // runs)


def first_batch_images(batch_size: int, images: int, fixed_batch: int | None = None) -> int:
    """How many images set the histograms' range: the first calibration batch — `batch_size` images, or a fixed-batch
    model's own batch, which is what TensorRT's calibrator is given per get_batch — at most all `images`."""
    return max(1, min(fixed_batch or batch_size, images))


@dataclass(frozen=True)
class CalibrationPass:
    """One statistics pass, as the device paths (statistics_ort, statistics_torch) run it: the FP32 `model` with
    `requested` exposed (graph inputs in `input_tensors` are counted from the batches), the images `indices` of
    `cache` in this order, `first_images` of them setting the range, run in sub-batches of `sub_batch` (host memory)."""

    model: object  # onnx.ModelProto
    input_name: str
    requested: list
    input_tensors: list
    per_tensor: list | None  # float32 bytes per image of each requested tensor (None: unknown to shape inference)
    cache: object
    indices: np.ndarray
    sub_batch: int
    first_images: int
    fixed_batch: int | None = None
    bins: int = HISTOGRAM_BINS
    progress: bool = True

    @property
    def names(self) -> list[str]:
        """Every histogram's tensor, in the order the device paths hand their values over."""
        return list(self.requested) + list(self.input_tensors)

    @property
    def per_image(self) -> int | None:
        return sum(self.per_tensor) if self.per_tensor else None


# -- where calibration runs ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def calibration_device(device: str | None):
    """Calibrations inside this block run on `device` unless they name one (workflows.compare sets it from the
    evaluation backend: the GPU when the backend has one, the CPU when ONNX Runtime was asked for)."""
    token = _device_override.set(device)
    try:
        yield
    finally:
        _device_override.reset(token)


def resolve_calibration_device(device: str | None = None) -> str:
    """'cpu', 'torch-cpu' or a CUDA device for `device` (None: the enclosing `calibration_device`, else
    $TRTLAB_CALIBRATION_DEVICE, else 'auto' = 'cuda' where torch sees a GPU, else 'cpu')."""
    requested = device or _device_override.get() or os.environ.get("TRTLAB_CALIBRATION_DEVICE") or "auto"
    if requested == "auto":
        from trtlab.backends import torch_gpu_available

        return "cuda" if torch_gpu_available() else "cpu"
    if requested in ("cpu", "torch-cpu") or requested == "cuda" or requested.startswith("cuda:"):
        return requested
    from trtlab.core.errors import UserValueError

    raise UserValueError(f"calibration device {requested!r} is not one of {', '.join(DEVICES)} (or cuda:N)",
                         "use 'cpu' (ONNX Runtime), 'cuda' (the GPU, through torch) or 'auto'")


def collect_statistics(model_path, tensors: list[str], cache, indices=None, batch_size: int = 16,
                       progress: bool = True, bins: int = HISTOGRAM_BINS, memory_budget_mb: float | None = None,
                       threads: int | None = None, device: str | None = None,
                       counting: str | None = None) -> CalibrationStats:
    """Run the FP32 model over the calibration images once and accumulate statistics for `tensors`.

    `batch_size` is the calibration batch: its first batch (the first `batch_size` images of `indices`, in order; a
    fixed-batch model's own batch) sets every histogram's bin width (module docstring). Every tensor is exposed as a
    graph output, so one run holds all of them for its images at once: on the CPU the images are run in sub-batches
    of at most budget / (2 × exposed bytes per image) (×2: the next sub-batch runs while this one is histogrammed);
    the statistics do not depend on that grouping. `device`: 'cpu' (ONNX Runtime), 'cuda' / 'cuda:N' (the GPU
    through torch), 'torch-cpu' (torch on the CPU: how the GPU path is checked without a GPU) or None (module
    docstring). `threads`: ONNX Runtime intra-op threads. `counting` (CPU only): the histogram counter, 'numba',
    'numpy' or None/'auto' (histogram.cpu_counter; the counts are the same). A model exported with a fixed batch
    runs exactly that batch; padded rows are not counted.
    """
    import onnx

    from trtlab.graph.classifier import inspect_classifier

    info = inspect_classifier(model_path)
    model = onnx.load(str(model_path))
    graph_inputs = {i.name for i in model.graph.input}
    requested = [t for t in tensors if t not in graph_inputs]
    input_tensors = [t for t in tensors if t in graph_inputs]
    shapes = _exposed_shapes(model, requested)
    per_tensor = None if shapes is None else [4 * int(np.prod(shape, dtype=np.int64)) for shape in shapes]
    indices = cache.valid_indices if indices is None else np.asarray(indices, np.int64)
    if len(indices) == 0:
        from trtlab.core.errors import UserValueError

        raise UserValueError("no decodable calibration images", "check the calibration set and the decode cache "
                             "failures (failures.json in the decode cache folder)")
    budget = float(MEMORY_BUDGET_MB if memory_budget_mb is None else memory_budget_mb) * 2**20
    sub_batch = _sub_batch(info, batch_size, per_tensor, budget, len(requested))
    device = resolve_calibration_device(device)
    job = CalibrationPass(model, info.input_name, requested, input_tensors, per_tensor, cache, indices, sub_batch,
                          first_batch_images(batch_size, len(indices), info.fixed_batch), info.fixed_batch, bins,
                          progress)
    started = time.time()
    if device == "cpu":
        from trtlab.quantization.statistics_ort import collect_on_ort

        histograms, peak, how = collect_on_ort(job, threads, counting)
    else:
        from trtlab.quantization.statistics_torch import collect_on_torch

        histograms, peak, how = collect_on_torch(job, "cpu" if device == "torch-cpu" else device)
    ids = cache.dataset.image_ids()
    log.info("calibration statistics of %d image(s) on %s (%s; bin widths from the first %d): %.1f s", len(indices),
             device, how, job.first_images, time.time() - started)
    return CalibrationStats({name: histograms[name] for name in tensors}, len(indices), info.sha256,
                            cache.preprocess.to_dict(), [ids[i] for i in indices], round(time.time() - started, 3),
                            int(peak), device, how, job.first_images)


def _sub_batch(info, batch_size: int, per_tensor: list[int] | None, budget: float, exposed: int) -> int:
    """Images per sub-batch (a fixed-batch model: exactly its batch), logged with the reason."""
    per_image = sum(per_tensor) if per_tensor else None
    sub_batch = info.fixed_batch or sub_batch_size(batch_size, per_image, budget)
    if per_image:
        log.info("calibration batch %d runs in sub-batches of %d image(s): %d tensors exposed, %.1f MB per image, "
                 "memory budget %.0f MB", batch_size, sub_batch, exposed, per_image / 2**20, budget / 2**20)
    else:
        log.info("calibration batch %d: exposed tensor sizes unknown to shape inference, no sub-batching",
                 batch_size)
    return sub_batch
