"""Streaming activation statistics and the three calibration algorithms, named as TensorRT names them.

One pass over the calibration images collects, for every tensor the quantizer will quantize, the running max |x|
and a fixed-size histogram of |x|; minmax, entropy and percentile thresholds are then all derived from those
statistics without running the model again. Memory is bounded by one batch of those tensors plus 2048 counters per
tensor, whatever the number of images (ONNX Runtime's calibrator keeps every intermediate output instead).

Histogram (what TensorRT describes for its calibrators, in NVIDIA's MLPerf calibration notes): equal-width bins of
|x| whose range is set by the first batch and doubles whenever a later batch holds a larger value. We keep the bin
*count* fixed at 2048 and merge neighbouring bin pairs on each doubling (NVIDIA's text doubles the number of bins
instead), so memory is constant; the resolution then matches a 2048-bin histogram of the final range.

Entropy = TensorRT's EntropyCalibration2, as described in "8-bit Inference with TensorRT" (Migacz, GTC 2017) and
NVIDIA's MLPerf calibration notes:
- 2048-bin histogram of |x|; the first bin is discarded (set to 0) before the search, as NVIDIA's notes say TensorRT
  does, because it holds the mass of near-zero activations (e.g. ReLU zeros);
- for every candidate i in [128, 2048]: P = bins[0:i] with the outlier mass sum(bins[i:]) added to bin i-1;
  Q = bins[0:i] merged into 128 quantization levels (i // 128 bins per level, the last level takes the remainder)
  and expanded back to i bins, each level's count spread evenly over its non-empty bins (empty bins stay empty);
  both normalised; divergence = KL(P‖Q), where bins with P>0 and Q=0 get Q=1e-10 (our choice: NVIDIA only says
  empty bins get special treatment);
- threshold = (i* + 0.5) · bin width for the i* of least divergence. NVIDIA's MLPerf text merges into 127 levels; we
  use 128 levels as in the GTC material (configurable: `levels`).
Percentile: the |x| value below which `percentile` % of the histogram mass lies (linear within a bin).
MinMax: the exact running max |x|.
Scale = threshold / 127 (symmetric, zero point 0) for all three.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

ALGORITHMS = ("minmax", "entropy", "percentile")
HISTOGRAM_BINS = 2048
ENTROPY_START_BIN = 128
ENTROPY_LEVELS = 128


@dataclass
class TensorHistogram:
    """Running max |x| and a fixed-size histogram of |x| over [0, range)."""

    bins: int = HISTOGRAM_BINS
    counts: np.ndarray = None
    range: float = 0.0
    absmax: float = 0.0
    values: int = 0

    def __post_init__(self):
        if self.counts is None:
            self.counts = np.zeros(self.bins, np.int64)

    def update(self, values: np.ndarray, consume: bool = False) -> None:
        """Add a batch of values. consume=True lets the update overwrite `values` (saves a copy per batch)."""
        values = np.asarray(values, np.float32)
        flat = values.reshape(-1) if (consume and values.flags.c_contiguous) else values.ravel().copy()
        if flat.size == 0:
            return
        np.abs(flat, out=flat)
        batch_max = float(flat.max())
        if not np.isfinite(batch_max):
            raise ValueError("activation holds NaN or Inf; check the model and preprocessing before calibrating")
        self.absmax = max(self.absmax, batch_max)
        self.values += flat.size
        if self.range == 0.0:
            if batch_max == 0.0:
                self.counts[0] += flat.size
                return
            # First non-zero batch sets the range (anything counted so far was exactly 0 and stays in bin 0).
            self.range = batch_max
        while batch_max > self.range:
            # Double the range: bin pairs merge into the lower half, the upper half starts empty.
            self.counts = np.concatenate([self.counts.reshape(-1, 2).sum(axis=1), np.zeros(self.bins // 2, np.int64)])
            self.range *= 2.0
        flat *= np.float32(self.bins / self.range)
        np.minimum(flat, np.float32(self.bins - 1), out=flat)
        self.counts += np.bincount(flat.astype(np.int32), minlength=self.bins)

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
        from .workspace import atomic_path

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


def threshold_minmax(hist: TensorHistogram) -> float:
    return float(hist.absmax)


def threshold_percentile(hist: TensorHistogram, percentile: float = 99.99) -> float:
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    total = hist.counts.sum()
    if total == 0 or hist.range == 0:
        return float(hist.absmax)
    cumulative = np.cumsum(hist.counts)
    target = total * percentile / 100.0
    k = int(np.searchsorted(cumulative, target, side="left"))
    k = min(k, hist.bins - 1)
    before = cumulative[k - 1] if k else 0
    inside = hist.counts[k]
    fraction = (target - before) / inside if inside else 1.0
    return float(min((k + fraction) * hist.bin_width, hist.absmax))


def threshold_entropy(hist: TensorHistogram, start_bin: int = ENTROPY_START_BIN, levels: int = ENTROPY_LEVELS,
                      discard_first_bin: bool = True) -> float:
    """TensorRT EntropyCalibration2-style KL-divergence threshold (see module docstring for the exact variant)."""
    counts = hist.counts.astype(np.float64).copy()
    if hist.range == 0:
        return float(hist.absmax)
    if discard_first_bin:
        counts[0] = 0.0
    nbins = len(counts)
    if counts.sum() == 0:
        return float(hist.absmax)
    tail = np.concatenate([np.cumsum(counts[::-1])[::-1], [0.0]])  # tail[i] = sum(counts[i:])
    best_i, best_kl = nbins, np.inf
    for i in range(start_bin, nbins + 1):
        reference = counts[:i].copy()
        reference[i - 1] += tail[i]
        ref_total = reference.sum()
        if ref_total == 0:
            continue
        sliced = counts[:i]
        per_level = i // levels
        starts = np.arange(levels) * per_level
        level_sums = np.add.reduceat(sliced, starts)
        nonzero = sliced > 0
        level_nonzero = np.add.reduceat(nonzero.astype(np.float64), starts)
        level_of_bin = np.minimum(np.arange(i) // per_level, levels - 1)
        spread = np.divide(level_sums, level_nonzero, out=np.zeros(levels), where=level_nonzero > 0)
        candidate = np.where(nonzero, spread[level_of_bin], 0.0)
        cand_total = candidate.sum()
        if cand_total == 0:
            continue
        p = reference / ref_total
        q = candidate / cand_total
        mask = p > 0
        kl = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-10))))
        if kl < best_kl:
            best_kl, best_i = kl, i
    return float(min((best_i + 0.5) * hist.bin_width, max(hist.absmax, hist.bin_width)))


def compute_thresholds(stats: CalibrationStats, algorithm: str, percentile: float = 99.99) -> dict[str, float]:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown calibration algorithm {algorithm!r}; choose from {ALGORITHMS}")
    if algorithm == "minmax":
        return {name: threshold_minmax(h) for name, h in stats.tensors.items()}
    if algorithm == "percentile":
        return {name: threshold_percentile(h, percentile) for name, h in stats.tensors.items()}
    return {name: threshold_entropy(h) for name, h in stats.tensors.items()}


def scales_from_thresholds(thresholds: dict[str, float]) -> dict[str, float]:
    """Scale = threshold / 127; an all-zero tensor gets a tiny positive scale (Q/DQ needs scale > 0)."""
    return {name: (t / 127.0 if t > 0 else 1e-8) for name, t in thresholds.items()}


def collect_statistics(model_path, tensors: list[str], cache, indices=None, batch_size: int = 16,
                       progress: bool = True, bins: int = HISTOGRAM_BINS) -> CalibrationStats:
    """Run the FP32 model over the calibration images once and accumulate statistics for `tensors`."""
    import onnx
    import onnxruntime as ort
    from tqdm.auto import tqdm

    from .model import inspect_classifier
    from .preprocess import normalize_batch

    info = inspect_classifier(model_path)
    if info.fixed_batch:  # a model exported with a fixed batch runs only that batch (trtlab.validate.check_sizes)
        batch_size = info.fixed_batch
    model = onnx.load(str(model_path))
    graph_inputs = {i.name for i in model.graph.input}
    existing_outputs = {o.name for o in model.graph.output}
    requested = [t for t in tensors if t not in graph_inputs]
    for name in requested:
        if name not in existing_outputs:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    del model
    indices = cache.valid_indices if indices is None else np.asarray(indices, np.int64)
    if len(indices) == 0:
        raise ValueError("no decodable calibration images; check the calibration set and the decode cache failures")
    stats = {name: TensorHistogram(bins=bins) for name in tensors}
    started, peak = time.time(), 0

    def run_batch(crops):
        batch = normalize_batch(crops, cache.preprocess)
        return batch, (session.run(requested, {info.input_name: batch}) if requested else [])

    bar = tqdm(total=len(indices), desc="calibrate (collect stats)", unit="img", disable=not progress)
    # The next batch runs in ONNX Runtime (which releases the GIL) while this one's histograms are updated.
    with ThreadPoolExecutor(1) as pool:
        batches = cache.iter_batches(indices, batch_size)
        first = next(batches, None)
        pending = pool.submit(run_batch, first[1]) if first is not None else None
        while pending is not None:
            batch, outputs = pending.result()
            following = next(batches, None)
            pending = pool.submit(run_batch, following[1]) if following is not None else None
            peak = max(peak, 2 * (sum(o.nbytes for o in outputs) + batch.nbytes))
            for name, value in zip(requested, outputs):
                stats[name].update(value, consume=True)
            for name in tensors:
                if name in graph_inputs:
                    stats[name].update(batch)
            bar.update(len(batch))
            del outputs, batch
    bar.close()
    ids = cache.dataset.image_ids()
    return CalibrationStats(stats, len(indices), info.sha256, cache.preprocess.to_dict(), [ids[i] for i in indices],
                            round(time.time() - started, 3), int(peak))
