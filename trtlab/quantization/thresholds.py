"""Thresholds from activation statistics: the calibration algorithms, named as TensorRT names them.

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

The algorithms are a registry (`ALGORITHMS`, name → Algorithm), as the placement rules are (placement.RULES): a
new one is one `register_algorithm(...)` call; Recipe, the CLI's --algorithms and notebook 03's widget list what is
registered, and an unknown name gets one error listing the registered names.
"""
from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from trtlab.core.errors import UserValueError
from trtlab.quantization.statistics import HISTOGRAM_BINS, CalibrationStats, TensorHistogram

log = logging.getLogger(__name__)

ENTROPY_START_BIN = 128
ENTROPY_LEVELS = 128


def threshold_minmax(hist: TensorHistogram) -> float:
    return float(hist.absmax)


def threshold_percentile(hist: TensorHistogram, percentile: float = 99.99) -> float:
    if not 0 < percentile <= 100:
        raise UserValueError(f"percentile {percentile} is outside (0, 100]", "use e.g. 99.99 (the share of |x| "
                             "values the threshold keeps, in %)")
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


@dataclass(frozen=True)
class Algorithm:
    """A calibration algorithm: its name (what recipes, the CLI and the widget say), the threshold of one tensor's
    histogram, the Recipe parameters it reads besides the histogram, and one line for people."""

    name: str
    threshold: Callable  # (TensorHistogram, **parameters) -> float
    what: str
    parameters: tuple = ()  # Recipe fields passed to `threshold` by name, e.g. ("percentile",)
    search: bool = False  # a search over candidates worth timing in the log (entropy)


#: The registered calibration algorithms, name → Algorithm, in the order they are offered.
ALGORITHMS: dict[str, Algorithm] = {}


def register_algorithm(algorithm: Algorithm) -> Algorithm:
    """Add `algorithm` to ALGORITHMS (a name is registered once)."""
    if algorithm.name in ALGORITHMS:
        raise ValueError(f"calibration algorithm {algorithm.name!r} is registered already")
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


register_algorithm(Algorithm("minmax", threshold_minmax, "max |x| (TensorRT's MinMax calibrator)"))
register_algorithm(Algorithm("entropy", threshold_entropy, "least KL divergence (TensorRT's EntropyCalibration2)",
                             search=True))
register_algorithm(Algorithm("entropy-gtc", threshold_entropy_gtc, "least KL divergence, GTC 2017 variant",
                             search=True))
register_algorithm(Algorithm("percentile", threshold_percentile, "the |x| below which `percentile` % of values lie",
                             parameters=("percentile",)))


def algorithm_named(name) -> Algorithm:
    """The registered algorithm `name`; anything else is one UserValueError listing the registered names."""
    found = ALGORITHMS.get(name) if isinstance(name, str) else None
    if found is None:
        raise UserValueError(f"calibration algorithm {name!r} is not one of {', '.join(ALGORITHMS)}",
                             "use " + "; ".join(f"{a.name}: {a.what}" for a in ALGORITHMS.values()))
    return found


def compute_thresholds(stats: CalibrationStats, algorithm: str, percentile: float = 99.99) -> dict[str, float]:
    """Every tensor's threshold by the registered `algorithm` (its parameters from the keywords here)."""
    chosen = algorithm_named(algorithm)
    given = {"percentile": percentile}
    parameters = {name: given[name] for name in chosen.parameters}
    started = time.perf_counter()
    thresholds = {name: chosen.threshold(h, **parameters) for name, h in stats.tensors.items()}
    if chosen.search:
        log.info("%s search over %d tensors: %.3f s", chosen.name, len(thresholds), time.perf_counter() - started)
    return thresholds


def scales_from_thresholds(thresholds: dict[str, float]) -> dict[str, float]:
    """Scale = threshold / 127; an all-zero tensor gets a tiny positive scale (Q/DQ needs scale > 0)."""
    return {name: (t / 127.0 if t > 0 else 1e-8) for name, t in thresholds.items()}


# -- one threshold for the tensors that share a scale (placement rule concat_shared_scale) ---------------------
def joint_thresholds(stats: CalibrationStats, plan, algorithm: str, percentile: float,
                     thresholds: dict[str, float]) -> dict[str, float]:
    """One threshold per shared-scale group (placement rule `concat_shared_scale`), for every tensor of the group:
    the threshold of the Concat output's histogram — the pooled values of all the Concat's inputs — or, for a group
    joined over several Concats, of their histograms merged (`merge_histograms`)."""
    joint = {}
    for group in plan.shared_scales:
        pooled = [name for name in group.pooled if name in stats.tensors]
        if not pooled:  # statistics without the Concat output: the widest member threshold keeps every value
            value = max(thresholds[t] for t in group.tensors)
        elif len(pooled) == 1:
            value = thresholds[pooled[0]]
        else:
            merged = CalibrationStats({"joint": merge_histograms([stats.tensors[n] for n in pooled])}, stats.images,
                           stats.model_sha256, stats.preprocess)
            value = compute_thresholds(merged, algorithm, percentile)["joint"]
        joint.update({tensor: value for tensor in group.tensors})
    return joint


def merge_histograms(histograms):
    """One |x| histogram of the values of several: the widest bin width of them, each source bin's count moved to
    the bin holding its centre (exact for the widest histogram, within one bin for the others)."""
    widths = [h.bin_width for h in histograms if h.range]
    absmax = max(h.absmax for h in histograms)
    if not widths:
        return TensorHistogram(counts=np.array([sum(int(h.counts.sum()) for h in histograms)], np.int64),
                               absmax=absmax, values=sum(h.values for h in histograms))
    width = max(widths)
    bins = max(1, math.ceil(max(max(h.range for h in histograms), absmax) / width))
    counts = np.zeros(bins, np.int64)
    for h in histograms:
        if not h.range:
            counts[0] += int(h.counts.sum())
            continue
        centres = (np.arange(h.bins) + 0.5) * h.bin_width
        np.add.at(counts, np.minimum((centres / width).astype(np.int64), bins - 1), h.counts)
    return TensorHistogram(counts=counts, range=bins * width, absmax=absmax, values=sum(h.values for h in histograms))
