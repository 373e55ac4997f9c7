"""Streaming activation statistics and the calibration algorithms, named as TensorRT names them.

One pass over the calibration images collects, for every tensor the quantizer will quantize, the running max |x|
and a histogram of |x|; minmax, entropy and percentile thresholds are then all derived from those statistics
without running the model again. Memory is bounded by the ONNX Runtime sub-batch in flight (see `collect_statistics`:
the calibration batch is cut into sub-batches that fit `memory_budget_mb`) plus the histogram counters, whatever the
number of images (ONNX Runtime's own calibrator keeps every intermediate output instead).

Histogram (the one of ModelOpt's `HistogramCalibrator.collect`, torch path, with num_bins=2048): equal-width bins
of |x| over [0, max |x| of the first batch); the bin *width* stays fixed from then on, and a later batch holding a
larger value appends bins up to ceil(max / width) (NVIDIA's MLPerf calibration notes describe TensorRT doing the
same with a doubled range: the bin width is kept, the bin count grows). Values equal to the upper edge fall in the
last bin. Because the width is fixed after the first batch, how later images are grouped does not change the
histogram; the first batch is the first ONNX Runtime sub-batch. Unlike ModelOpt, growth is capped at
`MAX_HISTOGRAM_BINS` (then neighbouring bin pairs merge and the width doubles), so memory and the entropy search stay
bounded when a later batch is orders of magnitude larger than the first. (Before issue 13 trtlab kept exactly 2048
bins and merged pairs on every range doubling, which halved the resolution each time.)

Entropy (default, `entropy`) = NVIDIA's published reference for TensorRT's entropy calibration: the histogram
calibrator of pytorch-quantization (TensorRT repo, tools/pytorch-quantization/pytorch_quantization/calib/
histogram.py), identical in ModelOpt (modelopt/torch/quantization/calib/histogram.py, `_compute_amax_entropy`,
checked against nvidia-modelopt 0.47.0), whose documentation says it matches TensorRT's entropy calibration:
- bins = the histogram of |x| with the zero bin replaced by its neighbour (bins[0] = bins[1]); total = sum(bins);
- for every candidate i = start_bin (128) … len(bins), stride 1: P = bins[0:i] with the outlier mass sum(bins[i:])
  added to bin i-1; Q = bins[0:i] merged into 128 levels, bin j in level floor(j·128/i) (np.linspace(0, i, 129) +
  np.digitize), each level's sum spread evenly over its non-empty bins, empty bins stay empty; divergence =
  scipy.stats.entropy(P, Q) = KL(P‖Q) after normalising both;
- the LAST candidate of least divergence wins (ties go to the larger threshold); amax = bin_edges[i] = i · width,
  the left edge of bin i (the right edge of the last bin kept).
Two places where the published code computes something it cannot mean, and what trtlab does instead:
  a candidate whose empty last bin receives the outliers has P>0 where Q=0, divergence = inf in the reference too
  (never chosen); a candidate with no mass at all below it (every bin < i empty, only possible when the first 128+
  bins are empty) makes the reference divide 0/0 and numpy's argmin then *prefers* that NaN, giving amax = the left
  edge of the first non-empty bin — trtlab treats those candidates as inadmissible instead.
The search is vectorised over all candidates at once (prefix sums; a closed form of the same divergence), and the
candidates within rounding distance of the minimum are re-evaluated with the reference's own per-bin arithmetic, so
ties are broken exactly as the reference breaks them.

`entropy-gtc` = trtlab's earlier variant, from "8-bit Inference with TensorRT" (Migacz, GTC 2017) and NVIDIA's
MLPerf calibration notes; it differs in three steps: the zero bin is discarded (set to 0) rather than copied from
its neighbour; levels are i // 128 consecutive bins (the last level takes the remainder) rather than a linspace
split; the FIRST candidate of least divergence wins and threshold = (i + 0.5) · width (clipped to max |x|). Bins
with P>0 and Q=0 get Q=1e-10 there.
Percentile: the |x| value below which `percentile` % of the histogram mass lies (linear within a bin).
MinMax: the exact running max |x|.
Scale = threshold / 127 (symmetric, zero point 0) for all of them.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

ALGORITHMS = ("minmax", "entropy", "entropy-gtc", "percentile")
# Part of the cache keys of statistics and variants: bumped when the histogram or an algorithm changes meaning
# (2: ModelOpt's fixed-width growing histogram, entropy = NVIDIA's reference), so old workspaces are not reused.
CALIBRATION_REVISION = 2
HISTOGRAM_BINS = 2048
MAX_HISTOGRAM_BINS = 32 * HISTOGRAM_BINS
ENTROPY_START_BIN = 128
ENTROPY_LEVELS = 128
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


# -- entropy: one vectorised search, two variants ---------------------------------------------------------------------
def _level_edges(candidates: np.ndarray, levels: int, split: str) -> np.ndarray:
    """edges[c, k] = first bin of level k for candidate i = candidates[c]; edges[c, levels] = i.

    'linspace' (reference): bin j is in level floor(j·levels/i), so level k starts at ceil(k·i/levels) — exact in
    integers, and equal to np.digitize(range(i), np.linspace(0, i, levels + 1)) - 1 since i/levels is a dyadic
    fraction for levels = 128 (linspace's points are then exact).
    'floor' (GTC): levels of i // levels bins, the last one takes the remainder."""
    k = np.arange(levels + 1, dtype=np.int64)
    i = candidates.astype(np.int64)[:, None]
    if split == "linspace":
        edges = (k * i + levels - 1) // levels
    else:
        edges = k * (i // levels)
        edges[:, -1] = i[:, 0]
    return edges


@functools.lru_cache(maxsize=4)
def _search_plan(capacity: int, start_bin: int, stride: int, levels: int, split: str):
    """What depends only on the bin count: the candidates up to `capacity` bins and, for each (candidate, level),
    the level's segment as an index into a (length, first bin) table. Levels of different candidates share segments
    (at most ~16 lengths × 2048 first bins for 2048 bins, against 1921 × 128 levels), so per tensor only the table
    needs logarithms. A histogram of n ≤ capacity bins uses the first rows (candidates ≤ n), so grown histograms of
    different sizes share one plan."""
    candidates = np.arange(start_bin, capacity + 1, stride, dtype=np.int64)
    edges = _level_edges(candidates, levels, split)
    lengths = np.diff(edges, axis=1)
    longest = int(lengths.max())
    dtype = np.int32 if (longest + 1) * (capacity + 1) < 2**31 else np.int64
    segment = (lengths * (capacity + 1) + edges[:, :-1]).astype(dtype)
    return candidates, segment, longest


def _divergences(b: np.ndarray, start_bin: int, stride: int, levels: int, split: str, q_floor: float):
    """(candidates, KL(P‖Q) of every candidate) at once, by a closed form over prefix sums (`_divergence_exact` is
    the plain per-bin arithmetic). With p_j = P_j/T and q_j = Q_j/C (T = total mass, C = mass below i = the sum of
    Q), every non-empty bin j < i of level k has Q_j = S_k/N_k (level sum / non-empty bins), so
        Σ_j p_j log(p_j/q_j) = [Σ_j b_j log b_j − Σ_k S_k log(S_k/N_k)] / T + (C/T) log(C/T),
    corrected for the last bin, which also carries the outlier mass t = T − C. inf: P>0 where Q=0 (no floor);
    nan: no mass below i (Q undefined)."""
    nbins = len(b)
    capacity = max(HISTOGRAM_BINS, 1 << (nbins - 1).bit_length())  # the next power of two: few distinct plans
    candidates, segment, longest = _search_plan(capacity, start_bin, stride, levels, split)
    rows = int(np.searchsorted(candidates, nbins, side="right"))
    candidates, segment = candidates[:rows], segment[:rows]
    longest = int(segment.max()) // (capacity + 1)  # the longest level among the candidates kept
    T = float(b.sum())
    cum = np.concatenate([[0.0], np.cumsum(b)])
    nonzero = np.concatenate([[0], np.cumsum(b > 0)])
    xlogx = np.zeros_like(b)
    np.log(b, out=xlogx, where=b > 0)
    xlogx *= b
    cum_xlogx = np.concatenate([[0.0], np.cumsum(xlogx)])
    # table[length, first bin] of every segment: its sum S, its non-empty bins N, S log(S/N); the columns past
    # nbins are never referenced by the rows kept, they only keep the plan's indexing
    first = np.minimum(np.arange(capacity + 1), nbins)
    ends = np.minimum(first[None, :] + np.arange(longest + 1)[:, None], nbins)
    S = cum[ends] - cum[first]
    N = nonzero[ends] - nonzero[first]
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.where(N > 0, S / np.maximum(N, 1), 0.0).ravel()  # Q of a non-empty bin of the segment
        term = np.where(S > 0, S * np.log(np.where(S > 0, S / np.maximum(N, 1), 1.0)), 0.0).ravel()
        level_term = np.take(term, segment).sum(axis=1)
        C = cum[candidates]
        kl = (cum_xlogx[candidates] - level_term) / T + (C / T) * np.log(C / T)
        # last bin j = i-1 (in the last level): replace b log(b·…) by (b+t) log((b+t)·…)
        last = b[candidates - 1]
        tail = T - C
        log_q = np.log(spread[segment[:, -1]]) - np.log(C)  # log of the normalised Q of the last bin (if non-empty)
        has_tail = tail > 0
        keep = last > 0
        old = np.where(keep, (last / T) * (np.log(np.where(keep, last, 1.0) / T) - log_q), 0.0)
        new = ((last + tail) / T) * (np.log((last + tail) / T) - np.where(keep, log_q, np.log(q_floor or 1.0)))
        kl = np.where(has_tail, kl - old + new, kl)
        if not q_floor:
            kl = np.where(has_tail & ~keep, np.inf, kl)
        kl = np.where(C > 0, kl, np.nan)
    return candidates, kl


def _divergence_exact(b: np.ndarray, i: int, levels: int, split: str, q_floor: float) -> float:
    """One candidate's divergence with the reference's own arithmetic (same arrays, same sums, same order), used to
    break near-ties exactly as the reference does."""
    edges = _level_edges(np.array([i]), levels, split)[0]
    level = np.repeat(np.arange(levels), np.diff(edges))
    head = b[:i]
    filled = head != 0
    sums = np.bincount(level[filled], weights=head[filled], minlength=levels)
    count = np.bincount(level[filled], minlength=levels)
    q = np.zeros(i)
    q[filled] = sums[level[filled]] / count[level[filled]]
    p = head.copy()
    p[-1] += b[i:].sum()
    if q.sum() == 0:
        return math.nan
    p = p / p.sum()
    q = q / q.sum()
    if q_floor:
        q = np.maximum(q, q_floor)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0) / q), 0.0)
    return float(np.sum(terms))


def _entropy_search(counts: np.ndarray, start_bin: int, stride: int, levels: int, variant: str):
    """(candidates, divergences, chosen candidate) for the reference ('nvidia') or the 'gtc' variant."""
    b = counts.astype(np.float64)
    if variant == "nvidia":
        b[0] = b[1]
        split, q_floor, last = "linspace", 0.0, True
    else:
        b[0] = 0.0
        split, q_floor, last = "floor", 1e-10, False
    if len(b) < start_bin:
        raise ValueError(f"histogram of {len(b)} bins is smaller than start_bin={start_bin}")
    if b.sum() == 0:
        candidates = np.arange(start_bin, len(b) + 1, stride, dtype=np.int64)
        return candidates, np.full(len(candidates), np.nan), None
    candidates, kl = _divergences(b, start_bin, stride, levels, split, q_floor)
    admissible = np.isfinite(kl)
    if not admissible.any():
        return candidates, kl, None
    best = kl[admissible].min()
    # Candidates within rounding distance of the minimum: re-evaluate exactly, then pick as the reference picks.
    near = np.flatnonzero(admissible & (kl <= best + 1e-9 + 1e-6 * abs(best)))
    exact = np.array([_divergence_exact(b, int(candidates[c]), levels, split, q_floor) for c in near])
    exact_best = exact.min()
    pick = near[np.flatnonzero(exact == exact_best)[-1 if last else 0]]
    return candidates, kl, int(candidates[pick])


def threshold_entropy(hist: TensorHistogram, start_bin: int = ENTROPY_START_BIN, stride: int = 1,
                      levels: int = ENTROPY_LEVELS) -> float:
    """NVIDIA's published reference (pytorch-quantization / ModelOpt `_compute_amax_entropy`): the left edge of the
    bin of least KL divergence, last among ties (see the module docstring)."""
    if hist.range == 0:
        return float(hist.absmax)
    _, _, i = _entropy_search(hist.counts, start_bin, stride, levels, "nvidia")
    return float(hist.absmax) if i is None else float(i * hist.bin_width)


def threshold_entropy_gtc(hist: TensorHistogram, start_bin: int = ENTROPY_START_BIN,
                          levels: int = ENTROPY_LEVELS) -> float:
    """trtlab's earlier GTC-2017-style variant (see the module docstring): (i* + 0.5) · width, first among ties."""
    if hist.range == 0:
        return float(hist.absmax)
    _, _, i = _entropy_search(hist.counts, start_bin, 1, levels, "gtc")
    if i is None:
        return float(hist.absmax)
    return float(min((i + 0.5) * hist.bin_width, max(hist.absmax, hist.bin_width)))


def compute_thresholds(stats: CalibrationStats, algorithm: str, percentile: float = 99.99) -> dict[str, float]:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown calibration algorithm {algorithm!r}; choose from {ALGORITHMS}")
    if algorithm == "minmax":
        return {name: threshold_minmax(h) for name, h in stats.tensors.items()}
    if algorithm == "percentile":
        return {name: threshold_percentile(h, percentile) for name, h in stats.tensors.items()}
    method = threshold_entropy if algorithm == "entropy" else threshold_entropy_gtc
    started = time.perf_counter()
    thresholds = {name: method(h) for name, h in stats.tensors.items()}
    log.info("%s search over %d tensors: %.3f s", algorithm, len(thresholds), time.perf_counter() - started)
    return thresholds


def scales_from_thresholds(thresholds: dict[str, float]) -> dict[str, float]:
    """Scale = threshold / 127; an all-zero tensor gets a tiny positive scale (Q/DQ needs scale > 0)."""
    return {name: (t / 127.0 if t > 0 else 1e-8) for name, t in thresholds.items()}


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
    """
    import onnx

    from trtlab.core.ort_session import ort_session
    from trtlab.core.progress import progress_bar
    from trtlab.data.batches import iter_batches
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.graph.onnx_utils import with_outputs

    info = inspect_classifier(model_path)
    model = onnx.load(str(model_path))
    graph_inputs = {i.name for i in model.graph.input}
    existing_outputs = {o.name for o in model.graph.output}
    requested = [t for t in tensors if t not in graph_inputs]
    shapes = _exposed_shapes(model, requested)
    per_tensor = None if shapes is None else [4 * int(np.prod(shape, dtype=np.int64)) for shape in shapes]
    per_image = sum(per_tensor) if per_tensor else None
    # ONNX Runtime's idle intra-op threads spin by default; here they would take the cores from the histogram
    # updates that run while the next sub-batch is computed.
    session = ort_session(with_outputs(model, [n for n in requested if n not in existing_outputs]), threads=threads,
                          spinning=False)
    del model
    indices = cache.valid_indices if indices is None else np.asarray(indices, np.int64)
    if len(indices) == 0:
        raise ValueError("no decodable calibration images; check the calibration set and the decode cache failures")
    budget = float(MEMORY_BUDGET_MB if memory_budget_mb is None else memory_budget_mb) * 2**20
    # A model exported with a fixed batch runs exactly that batch (the batch source pads the last one; padded rows
    # are not counted).
    sub_batch = info.fixed_batch or sub_batch_size(batch_size, per_image, budget)
    if per_image:
        log.info("calibration batch %d runs through ONNX Runtime in sub-batches of %d image(s): %d tensors exposed, "
                 "%.1f MB per image, memory budget %.0f MB", batch_size, sub_batch, len(requested), per_image / 2**20,
                 budget / 2**20)
    else:
        log.info("calibration batch %d: exposed tensor sizes unknown to shape inference, no sub-batching",
                 batch_size)
    stats = {name: TensorHistogram(bins=bins) for name in tensors}
    started, peak = time.time(), 0

    def run_batch(batch):
        outputs = session.run(requested, {info.input_name: batch.images}) if requested else []
        return batch, [o[:batch.count] for o in outputs]

    def count(outputs, k):
        stats[requested[k]].update(outputs[k])
        outputs[k] = None  # free each tensor once counted: the peak stays about one sub-batch

    bar = progress_bar(total=len(indices), desc="calibrate (collect stats)", unit="img", enabled=progress)
    # The next sub-batch runs in ONNX Runtime (which releases the GIL) while this one's histograms are updated, by
    # one thread per available core (numpy's elementwise steps release the GIL; np.bincount does not).
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, min(4, cores))
    order = sorted(range(len(requested)), key=lambda k: -(per_tensor[k] if per_tensor else 0))
    with ThreadPoolExecutor(1) as pool, ThreadPoolExecutor(workers) as counters:
        batches = iter_batches(cache, indices, sub_batch, fixed_batch=info.fixed_batch)
        first = next(batches, None)
        pending = pool.submit(run_batch, first) if first is not None else None
        while pending is not None:
            batch, outputs = pending.result()
            following = next(batches, None)
            pending = pool.submit(run_batch, following) if following is not None else None
            peak = max(peak, 2 * (sum(o.nbytes for o in outputs) + batch.images.nbytes))
            list(counters.map(lambda k: count(outputs, k), order))  # largest tensors first: even load
            for name in tensors:
                if name in graph_inputs:
                    stats[name].update(batch.images[:batch.count])
            bar.update(batch.count)
            del outputs, batch
    bar.close()
    ids = cache.dataset.image_ids()
    return CalibrationStats(stats, len(indices), info.sha256, cache.preprocess.to_dict(), [ids[i] for i in indices],
                            round(time.time() - started, 3), int(peak))
