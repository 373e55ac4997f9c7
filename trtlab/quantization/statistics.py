"""Streaming activation statistics: one pass over the calibration images collects, for every tensor the quantizer
may quantize, the running max |x| and a histogram of |x| (trtlab.quantization.thresholds derives every algorithm's
threshold from them without running the model again). Memory is bounded by the ONNX Runtime sub-batch in flight
(`collect_statistics` cuts the calibration batch into sub-batches that fit `memory_budget_mb`) plus the histogram
counters, whatever the number of images (ONNX Runtime's own calibrator keeps every intermediate output instead).

Histogram (the one of ModelOpt's `HistogramCalibrator.collect`, torch path, with num_bins=2048): equal-width bins
of |x| over [0, max |x| of the first batch); the bin *width* stays fixed from then on, and a later batch holding a
larger value appends bins up to ceil(max / width) (NVIDIA's MLPerf calibration notes describe TensorRT doing the
same with a doubled range: the bin width is kept, the bin count grows). Values equal to the upper edge fall in the
last bin. Because the width is fixed after the first batch, how later images are grouped does not change the
histogram; the first batch is the first ONNX Runtime sub-batch. Unlike ModelOpt, growth is capped at
`MAX_HISTOGRAM_BINS` (then neighbouring bin pairs merge and the width doubles), so memory and the entropy search stay
bounded when a later batch is orders of magnitude larger than the first. (Before issue 13 trtlab kept exactly 2048
bins and merged pairs on every range doubling, which halved the resolution each time.)

A model exported with a fixed batch runs exactly that batch: the batch source pads the last one, and padded rows
are never counted.
"""
from __future__ import annotations

import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

# Part of the cache keys of statistics and variants: bumped when the histogram or an algorithm changes meaning
# (2: ModelOpt's fixed-width growing histogram, entropy = NVIDIA's reference), so old workspaces are not reused.
CALIBRATION_REVISION = 2
HISTOGRAM_BINS = 2048
MAX_HISTOGRAM_BINS = 32 * HISTOGRAM_BINS
# Bytes of exposed activations (x2: one sub-batch being histogrammed while the next runs) per ONNX Runtime run.
MEMORY_BUDGET_MB = 512
_CHUNK = 1 << 16  # values per histogram step: small enough that abs/scale/index stay in the CPU cache


@dataclass
class TensorHistogram:
    """Running max |x| and a histogram of |x| over [0, range): `bins` bins of width range / bins.

    `bins` is the initial bin count; it grows (same width) when a later batch exceeds the range."""

    bins: int = HISTOGRAM_BINS
    counts: np.ndarray = None
    range: float = 0.0
    absmax: float = 0.0
    values: int = 0
    max_bins: int = MAX_HISTOGRAM_BINS

    def __post_init__(self):
        if self.counts is None:
            self.counts = np.zeros(self.bins, np.int64)
        self.bins = len(self.counts)

    def update(self, values: np.ndarray, consume: bool = False) -> None:
        """Add a batch of values (any shape; not modified — `consume` is accepted for compatibility)."""
        flat = np.asarray(values).reshape(-1)
        if flat.size == 0:
            return
        if self.range == 0.0:
            # The first batch with a non-zero value sets the bin width (its max / bins), as ModelOpt's does.
            batch_max = float(np.max(np.abs(flat)))
            if not np.isfinite(batch_max):
                raise ValueError("activation holds NaN or Inf; check the model and preprocessing before calibrating")
            if batch_max == 0.0:
                self.counts[0] += flat.size
                self.values += flat.size
                return
            self.range = batch_max
        scratch = np.empty(min(_CHUNK, flat.size), np.float32)
        index = np.empty(len(scratch), np.intp)
        for start in range(0, flat.size, _CHUNK):
            chunk = flat[start:start + _CHUNK]
            absolute, idx = scratch[:chunk.size], index[:chunk.size]
            np.abs(chunk, out=absolute)
            chunk_max = float(absolute.max())
            if not chunk_max <= self.absmax:  # also true for NaN
                if not np.isfinite(chunk_max):
                    raise ValueError("activation holds NaN or Inf; check the model and preprocessing before "
                                     "calibrating")
                self.absmax = chunk_max
                if chunk_max > self.range:
                    self._grow(chunk_max)
            # |x|·bins/range in float32, truncated (= floor for x ≥ 0) straight into intp, bincount's own index type
            np.multiply(absolute, np.float32(self.bins / self.range), out=idx, casting="unsafe")
            found = np.bincount(idx, minlength=self.bins)
            self.counts += found[:self.bins]
            if len(found) > self.bins:  # a value on the upper edge (x·bins/range rounded to bins) → last bin
                self.counts[-1] += found[self.bins:].sum()
        self.values += flat.size

    def _grow(self, new_max: float) -> None:
        """Append bins of the same width up to `new_max` (ModelOpt: num_bins = ceil(max / width))."""
        width = self.range / self.bins
        needed = max(math.ceil(new_max / width), self.bins)
        while needed > self.max_bins:  # cap: merge neighbouring pairs, the width doubles
            counts = np.concatenate([self.counts, np.zeros(len(self.counts) % 2, np.int64)])
            self.counts = counts.reshape(-1, 2).sum(axis=1)
            width *= 2.0
            self.bins = len(self.counts)
            needed = max(math.ceil(new_max / width), self.bins)
        self.counts = np.concatenate([self.counts, np.zeros(needed - self.bins, np.int64)])
        self.bins = needed
        self.range = needed * width

    @property
    def bin_width(self) -> float:
        return self.range / self.bins if self.range else 0.0


@dataclass
class CalibrationStats:
    """Statistics for every tensor to quantize, plus what they were collected from."""

    tensors: dict[str, TensorHistogram]
    images: int
    model_sha256: str
    preprocess: dict
    image_ids: list[str] = field(default_factory=list)
    seconds: float = 0.0
    peak_batch_bytes: int = 0

    def save(self, path) -> None:
        from trtlab.core.workspace import atomic_path

        arrays = {}
        for i, (name, h) in enumerate(self.tensors.items()):
            arrays[f"c{i}"] = h.counts
            arrays[f"m{i}"] = np.array([h.range, h.absmax, h.values], np.float64)
        meta = {"names": list(self.tensors), "images": self.images, "model_sha256": self.model_sha256,
                "preprocess": self.preprocess, "image_ids": self.image_ids, "seconds": self.seconds,
                "peak_batch_bytes": self.peak_batch_bytes}
        import json

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
                rng, absmax, values = data[f"m{i}"]
                tensors[name] = TensorHistogram(counts=data[f"c{i}"].copy(), range=float(rng), absmax=float(absmax),
                                                values=int(values))
        return cls(tensors, meta["images"], meta["model_sha256"], meta["preprocess"], meta["image_ids"],
                   meta["seconds"], meta["peak_batch_bytes"])


def _exposed_shapes(model, names: list[str]) -> list[tuple] | None:
    """Per-image shapes (the first dimension is the batch) of `names` from ONNX shape inference; None unless every
    one is a fully known float32 tensor. (Binding reused output buffers with these shapes was tried: ONNX Runtime
    still allocates the tensors and copies, so it only added memory.)"""
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
    """Images per ONNX Runtime run: as many as fit budget / (2 × exposed bytes per image), in equal parts of the
    calibration batch (32 with room for 9 → 4 runs of 8, not 9+9+9+5); the whole batch when sizes are unknown."""
    if not bytes_per_image:
        return batch_size
    fit = max(1, int(budget_bytes // (2 * bytes_per_image)))
    runs = -(-batch_size // fit)
    return -(-batch_size // runs)


def collect_statistics(model_path, tensors: list[str], cache, indices=None, batch_size: int = 16,
                       progress: bool = True, bins: int = HISTOGRAM_BINS, memory_budget_mb: float | None = None,
                       threads: int | None = None) -> CalibrationStats:
    """Run the FP32 model over the calibration images once and accumulate statistics for `tensors`.

    Every tensor is exposed as a graph output, so one ONNX Runtime run holds all of them for its images at once:
    the calibration batch is run in sub-batches of at most budget / (2 × exposed bytes per image) images (×2: the
    next sub-batch runs while this one is histogrammed). The statistics do not depend on that grouping except the
    histograms' bin width, set by the first sub-batch (module docstring). `threads`: ONNX Runtime intra-op threads.
    A model exported with a fixed batch runs exactly that batch; padded rows are not counted.
    """
    import onnx

    from trtlab.core.ort_session import ort_session
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.graph.onnx_utils import with_outputs

    info = inspect_classifier(model_path)
    model = onnx.load(str(model_path))
    graph_inputs = {i.name for i in model.graph.input}
    existing_outputs = {o.name for o in model.graph.output}
    requested = [t for t in tensors if t not in graph_inputs]
    shapes = _exposed_shapes(model, requested)
    per_tensor = None if shapes is None else [4 * int(np.prod(shape, dtype=np.int64)) for shape in shapes]
    # ONNX Runtime's idle intra-op threads spin by default; here they would take the cores from the histogram
    # updates that run while the next sub-batch is computed.
    session = ort_session(with_outputs(model, [n for n in requested if n not in existing_outputs]), threads=threads,
                          spinning=False)
    del model
    indices = cache.valid_indices if indices is None else np.asarray(indices, np.int64)
    if len(indices) == 0:
        from trtlab.core.errors import UserValueError

        raise UserValueError("no decodable calibration images", "check the calibration set and the decode cache "
                             "failures (failures.json in the decode cache folder)")
    budget = float(MEMORY_BUDGET_MB if memory_budget_mb is None else memory_budget_mb) * 2**20
    sub_batch = _sub_batch(info, batch_size, per_tensor, budget, len(requested))
    stats = {name: TensorHistogram(bins=bins) for name in tensors}
    started = time.time()
    run = _SubBatchRunner(session, info.input_name, requested)
    peak = _accumulate(run, stats, requested, [t for t in tensors if t in graph_inputs], per_tensor,
                       _batches(cache, indices, sub_batch, info.fixed_batch), len(indices), progress)
    ids = cache.dataset.image_ids()
    return CalibrationStats(stats, len(indices), info.sha256, cache.preprocess.to_dict(), [ids[i] for i in indices],
                            round(time.time() - started, 3), int(peak))


def _batches(cache, indices, sub_batch: int, fixed_batch: int | None):
    from trtlab.data.batches import iter_batches

    return iter_batches(cache, indices, sub_batch, fixed_batch=fixed_batch)


def _sub_batch(info, batch_size: int, per_tensor: list[int] | None, budget: float, exposed: int) -> int:
    """Images per ONNX Runtime run (a fixed-batch model: exactly its batch), logged with the reason."""
    per_image = sum(per_tensor) if per_tensor else None
    sub_batch = info.fixed_batch or sub_batch_size(batch_size, per_image, budget)
    if per_image:
        log.info("calibration batch %d runs through ONNX Runtime in sub-batches of %d image(s): %d tensors exposed, "
                 "%.1f MB per image, memory budget %.0f MB", batch_size, sub_batch, exposed, per_image / 2**20,
                 budget / 2**20)
    else:
        log.info("calibration batch %d: exposed tensor sizes unknown to shape inference, no sub-batching",
                 batch_size)
    return sub_batch


class _SubBatchRunner:
    """One ONNX Runtime run of a batch; only the real rows (`batch.count`) of each output are kept."""

    def __init__(self, session, input_name: str, requested: list[str]):
        self.session, self.input_name, self.requested = session, input_name, requested

    def __call__(self, batch):
        outputs = self.session.run(self.requested, {self.input_name: batch.images}) if self.requested else []
        return batch, [o[:batch.count] for o in outputs]


def _accumulate(run, stats: dict, requested: list[str], input_tensors: list[str], per_tensor, batches, total: int,
                progress: bool) -> int:
    """Histogram every batch's outputs while ONNX Runtime computes the next batch; returns the peak bytes held.

    The next sub-batch runs in ONNX Runtime (which releases the GIL) while this one's histograms are updated, by
    one thread per available core (numpy's elementwise steps release the GIL; np.bincount does not)."""
    from trtlab.core.progress import progress_bar

    def count(outputs, k):
        stats[requested[k]].update(outputs[k])
        outputs[k] = None  # free each tensor once counted: the peak stays about one sub-batch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, min(4, cores))
    order = sorted(range(len(requested)), key=lambda k: -(per_tensor[k] if per_tensor else 0))
    bar = progress_bar(total=total, desc="calibrate (collect stats)", unit="img", enabled=progress)
    peak = 0
    with ThreadPoolExecutor(1) as pool, ThreadPoolExecutor(workers) as counters:
        first = next(batches, None)
        pending = pool.submit(run, first) if first is not None else None
        while pending is not None:
            batch, outputs = pending.result()
            following = next(batches, None)
            pending = pool.submit(run, following) if following is not None else None
            peak = max(peak, 2 * (sum(o.nbytes for o in outputs) + batch.images.nbytes))
            list(counters.map(lambda k: count(outputs, k), order))  # largest tensors first: even load
            for name in input_tensors:
                stats[name].update(batch.images[:batch.count])
            bar.update(batch.count)
            del outputs, batch
    bar.close()
    return peak
