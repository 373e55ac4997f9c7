"""Streaming activation statistics: one pass over the calibration images collects, for every tensor the quantizer
may quantize, the running max |x| and a histogram of |x| (trtlab.quantization.thresholds derives every algorithm's
threshold from them without running the model again). Memory is bounded by the sub-batch in flight
(`collect_statistics` cuts the calibration batch into sub-batches that fit `memory_budget_mb`) plus the histogram
counters, whatever the number of images (ONNX Runtime's own calibrator keeps every intermediate output instead).

Histogram (the one of ModelOpt's `HistogramCalibrator.collect`, torch path, with num_bins=2048): equal-width bins
of |x| over [0, max |x| of the first batch); the bin *width* stays fixed from then on, and a later batch holding a
larger value appends bins up to ceil(max / width) (NVIDIA's MLPerf calibration notes describe TensorRT doing the
same with a doubled range: the bin width is kept, the bin count grows). A value's bin is trunc(float32(|x| · s))
with one float32 multiplier s = float32(bins / first max), fixed with the width; a value on the upper edge of a
batch's range falls in the last bin. Because the width is fixed after the first batch, how later images are grouped
does not change the histogram; the first batch is the first sub-batch. Unlike ModelOpt, growth is capped at
`MAX_HISTOGRAM_BINS` (then neighbouring bin pairs merge, the width doubles and s halves — exactly: halving a float32
commutes with its rounding, so trunc(fl(|x|·s/2)) = trunc(fl(|x|·s)) // 2 and counting before or after a merge
gives the same counts), so memory and the entropy search stay bounded when a later batch is orders of magnitude
larger than the first. Within a batch, growth is decided by the batch's max before anything is counted, so the
counts do not depend on how a batch is cut into chunks, threads, processes or GPU kernels: the numpy update here and
the torch update (statistics_torch, CPU or CUDA) give the same histograms to the count on the same tensors.

Where the counting runs (`collect_statistics(device=...)`):
- "cpu" (statistics_ort): ONNX Runtime computes the sub-batches; their tensors are histogrammed while ONNX Runtime
  runs the next one, by the compiled counter (native_counting) in one thread per core — without a C compiler, by
  numpy in worker processes (histogram_workers) or threads;
- "cuda" (default where torch sees a GPU): the FP32 graph runs on the GPU through the torch backend and the
  histograms are counted there (statistics_torch), at forward-pass speed.

A model exported with a fixed batch runs exactly that batch: the batch source pads the last one, and padded rows
are never counted.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from trtlab.core.errors import UserValueError
from trtlab.quantization.native_counting import native_counter

log = logging.getLogger(__name__)

# Part of the cache keys of statistics and variants: bumped when the histogram or an algorithm changes meaning
# (2: ModelOpt's fixed-width growing histogram, entropy = NVIDIA's reference; 3: one float32 multiplier kept through
# growth, growth decided per batch — counts independent of chunking, equal on every device), so old workspaces are
# not reused.
CALIBRATION_REVISION = 3
HISTOGRAM_BINS = 2048
MAX_HISTOGRAM_BINS = 32 * HISTOGRAM_BINS
# Bytes of exposed activations (x2: one sub-batch being histogrammed while the next runs) per ONNX Runtime run.
MEMORY_BUDGET_MB = 512
_CHUNK = 1 << 16  # values per histogram step: small enough that abs/scale/index stay in the CPU cache
DEVICES = ("auto", "cpu", "cuda", "torch-cpu")
_device_override: contextvars.ContextVar = contextvars.ContextVar("trtlab_calibration_device", default=None)


class NonFiniteActivation(UserValueError):
    """An activation holds NaN or Inf: the model or its input, not trtlab (one line `error: … — …`, exit 2)."""


def _non_finite() -> NonFiniteActivation:
    return NonFiniteActivation("an activation holds NaN or Inf on the calibration images, so no INT8 scale can be "
                               "found", "check the model's FP32 outputs and the preprocessing (--preset) before "
                               "calibrating")


@dataclass
class TensorHistogram:
    """Running max |x| and a histogram of |x| over [0, range): `bins` bins of width range / bins.

    `bins` is the initial bin count; it grows (same width) when a later batch exceeds the range. `scale` is the
    float32 multiplier that maps |x| to its bin (0 until the first batch with a non-zero value), `width` the bin
    width it stands for."""

    bins: int = HISTOGRAM_BINS
    counts: np.ndarray = None
    range: float = 0.0
    absmax: float = 0.0
    values: int = 0
    max_bins: int = MAX_HISTOGRAM_BINS
    scale: float = 0.0
    width: float = 0.0

    def __post_init__(self):
        if self.counts is None:
            self.counts = np.zeros(self.bins, np.int64)
        self.bins = len(self.counts)
        if self.range and not self.width:  # statistics saved before the multiplier was stored
            self.width = self.range / self.bins
        if self.range and not self.scale:
            self.scale = float(np.float32(self.bins / self.range))

    @property
    def bin_width(self) -> float:
        return self.range / self.bins if self.range else 0.0

    # -- the state machine both updates share (numpy here, torch in statistics_torch) ------------------------------
    def start(self, top: float) -> None:
        """The first batch with a non-zero value sets the bin width (its max / bins), as ModelOpt's does."""
        self.range = float(top)
        self.width = self.range / self.bins
        self.scale = float(np.float32(self.bins / self.range))

    def plan(self, top: float) -> tuple[int, int]:
        """(pair merges, bins) after a batch whose max |x| is `top`: bins of the same width up to `top`
        (ModelOpt: num_bins = ceil(max / width)), merging neighbouring pairs while that is over `max_bins`."""
        if top <= self.range:
            return 0, self.bins
        width, bins, merges = self.width, self.bins, 0
        needed = max(math.ceil(top / width), bins)
        while needed > self.max_bins:
            merges, width, bins = merges + 1, width * 2.0, (bins + 1) // 2
            needed = max(math.ceil(top / width), bins)
        return merges, needed

    def merge(self, times: int) -> None:
        """Merge neighbouring bin pairs `times` times: the width doubles, the multiplier halves (exactly)."""
        for _ in range(times):
            self.counts = merge_pairs(self.counts)
            self.width *= 2.0
            self.scale = self.scale / 2.0  # a float32 value halved stays exact (far from the subnormal range)
            self.bins = len(self.counts)
            self.range = self.bins * self.width

    def grow(self, bins: int) -> None:
        if bins > self.bins:
            self.counts = np.concatenate([self.counts, np.zeros(bins - self.bins, np.int64)])
            self.bins = bins
            self.range = bins * self.width

    def commit(self, found: np.ndarray, top: float, values: int) -> None:
        """Add one batch's counts at the current multiplier (they may run past `bins`): bins are appended up to the
        batch's max and indices at or past the new upper edge go to the last bin."""
        merges, bins = self.plan(top)
        if merges:
            self.merge(merges)
            found = merge_pairs(found, merges)
        self.grow(bins)
        if len(found) > self.bins:
            found[self.bins - 1] += found[self.bins:].sum()
            found = found[:self.bins]
        self.counts[:len(found)] += found
        self.absmax = max(self.absmax, float(top))
        self.values += int(values)

    # -- numpy update ------------------------------------------------------------------------------------------------
    def update(self, values: np.ndarray, consume: bool = False, native: bool = True) -> None:
        """Add a batch of values (any shape; not modified — `consume` is accepted for compatibility). float32
        values are counted by the compiled loop where there is one (`native=False`: by numpy; same counts)."""
        flat = np.asarray(values).reshape(-1)
        if flat.size == 0:
            return
        if not self.scale:
            top = _abs_max(flat)
            if top == 0.0:  # nothing to set a width from yet: every value is in bin 0
                self.counts[0] += flat.size
                self.values += flat.size
                return
            self.start(top)
        counter = native_counter() if native and flat.dtype == np.float32 else None
        if counter is not None:
            self._update_native(counter, flat)
            return
        top, found = 0.0, None
        scratch = np.empty(min(_CHUNK, flat.size), np.float32)
        index = np.empty(len(scratch), np.intp)
        for begin in range(0, flat.size, _CHUNK):
            chunk = flat[begin:begin + _CHUNK]
            high, low = float(chunk.max()), float(chunk.min())
            chunk_top = max(high, -low)
            if not math.isfinite(chunk_top):
                raise _non_finite()
            if chunk_top > top:
                top = chunk_top
                merges, _ = self.plan(top)
                if merges:  # merge what is counted so far, then count on at the halved multiplier
                    self.merge(merges)
                    found = None if found is None else merge_pairs(found, merges)
            if low >= 0:  # ReLU outputs: |x| is x
                absolute = chunk
            else:
                absolute = scratch[:chunk.size]
                np.abs(chunk, out=absolute)
            idx = index[:chunk.size]
            # |x|·s in float32, truncated (= floor for x ≥ 0) straight into intp, bincount's own index type
            np.multiply(absolute, np.float32(self.scale), out=idx, casting="unsafe")
            counted = np.bincount(idx, minlength=self.bins)
            found = counted if found is None else _add_counts(found, counted)
        self.commit(found, top, flat.size)

    def _update_native(self, counter, flat: np.ndarray) -> None:
        """One pass at the current multiplier and bins; when the batch's max needs more bins (or merges), the
        histogram grows first and the batch is counted again at the new multiplier (rare after the first batches)."""
        found, top, finite = counter.count(flat, self.scale, self.bins)
        if not finite:
            raise _non_finite()
        merges, bins = self.plan(top)
        if merges or bins != self.bins:
            self.merge(merges)
            self.grow(bins)
            found, _, _ = counter.count(flat, self.scale, self.bins)
        self.counts += found
        self.absmax = max(self.absmax, top)
        self.values += flat.size

    def state(self) -> dict:
        """Everything a worker process sends back (statistics_torch and histogram_workers rebuild from it)."""
        return {"bins": self.bins, "counts": self.counts, "range": self.range, "absmax": self.absmax,
                "values": self.values, "max_bins": self.max_bins, "scale": self.scale, "width": self.width}

    @classmethod
    def from_state(cls, state: dict) -> "TensorHistogram":
        return cls(**state)


def merge_pairs(counts: np.ndarray, times: int = 1) -> np.ndarray:
    """Sum neighbouring bin pairs `times` times (an odd last bin pairs with an empty one)."""
    for _ in range(times):
        if len(counts) % 2:
            counts = np.concatenate([counts, np.zeros(1, counts.dtype)])
        counts = counts.reshape(-1, 2).sum(axis=1)
    return counts


def _add_counts(total: np.ndarray, more: np.ndarray) -> np.ndarray:
    if len(more) > len(total):
        total, more = more, total
    total[:len(more)] += more
    return total


def _abs_max(flat: np.ndarray) -> float:
    top = max(float(flat.max()), -float(flat.min()))
    if not math.isfinite(top):
        raise _non_finite()
    return top


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

    def save(self, path) -> None:
        import json

        from trtlab.core.workspace import atomic_path

        arrays = {}
        for i, (name, h) in enumerate(self.tensors.items()):
            arrays[f"c{i}"] = h.counts
            arrays[f"m{i}"] = np.array([h.range, h.absmax, h.values, h.scale, h.width], np.float64)
        meta = {"names": list(self.tensors), "images": self.images, "model_sha256": self.model_sha256,
                "preprocess": self.preprocess, "image_ids": self.image_ids, "seconds": self.seconds,
                "peak_batch_bytes": self.peak_batch_bytes, "device": self.device, "counting": self.counting}
        with atomic_path(path, suffix=".npz") as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)

    @classmethod
    def load(cls, path) -> "CalibrationStats":
        import json

        with np.load(path) as data:
            meta = json.loads(str(data["meta"]))
            tensors = {}
            for i, name in enumerate(meta["names"]):
                rng, absmax, values, *multiplier = data[f"m{i}"]
                scale, width = multiplier if multiplier else (0.0, 0.0)
                tensors[name] = TensorHistogram(counts=data[f"c{i}"].copy(), range=float(rng), absmax=float(absmax),
                                                values=int(values), scale=float(scale), width=float(width))
        return cls(tensors, meta["images"], meta["model_sha256"], meta["preprocess"], meta["image_ids"],
                   meta["seconds"], meta["peak_batch_bytes"], meta.get("device", "cpu"), meta.get("counting", ""))


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

    Every tensor is exposed as a graph output, so one run holds all of them for its images at once: the
    calibration batch is run in sub-batches of at most budget / (2 × exposed bytes per image) images (×2: the next
    sub-batch runs while this one is histogrammed). The statistics do not depend on that grouping except the
    histograms' bin width, set by the first sub-batch (module docstring), and every device groups the images alike.
    `device`: 'cpu' (ONNX Runtime), 'cuda' / 'cuda:N' (the GPU through torch), 'torch-cpu' (torch on the CPU: how
    the GPU path is checked without a GPU) or None (module docstring). `threads`: ONNX Runtime intra-op threads.
    `counting` (CPU only): 'processes', 'threads' or None/'auto' ($TRTLAB_CALIBRATION_COUNTING, else threads with
    the compiled counter, processes for large numpy calibrations: statistics_ort). A model exported with a fixed
    batch runs exactly that batch; padded rows are not counted.
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
    started = time.time()
    if device == "cpu":
        from trtlab.quantization.statistics_ort import collect_on_ort

        histograms, peak, how = collect_on_ort(model, info, requested, input_tensors, shapes, per_tensor, cache,
                                                indices, sub_batch, threads, bins, progress, counting)
    else:
        from trtlab.quantization.statistics_torch import collect_on_torch

        histograms, peak, how = collect_on_torch(model, requested, input_tensors, cache, indices, sub_batch,
                                                 info.fixed_batch, "cpu" if device == "torch-cpu" else device,
                                                 bins, progress, per_tensor)
    ids = cache.dataset.image_ids()
    log.info("calibration statistics of %d image(s) on %s (%s): %.1f s", len(indices), device, how,
             time.time() - started)
    return CalibrationStats({name: histograms[name] for name in tensors}, len(indices), info.sha256,
                            cache.preprocess.to_dict(), [ids[i] for i in indices], round(time.time() - started, 3),
                            int(peak), device, how)


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
