"""The calibration histogram: one specification (TensorHistogram's numpy update is the reference) and the CPU counter
beside it. Everything that counts histograms (statistics_ort on the CPU, statistics_torch on torch devices) builds on
this module; it imports none of them.

Histogram (the one of ModelOpt's `HistogramCalibrator.collect`, torch path, with num_bins=2048): equal-width bins
of |x| over [0, max |x| of the first calibration batch); the bin *width* stays fixed from then on, and a later batch
holding a larger value appends bins of that width up to the bin holding it (NVIDIA's MLPerf calibration notes
describe TensorRT doing the same with a doubled range: the bin width is kept, the bin count grows). A value's bin is
trunc(float32(|x| · s)) with one float32 multiplier s, fixed with the width: s = float32(bins / first max), lowered by
ulps where needed so that the first max itself lands in the last bin (ModelOpt's torch.histc puts the max of its
range there). Bins are appended up to that same float32 bin index of a batch's max (not ceil(max / width) in float64,
which can disagree with it by one bin at an edge), so no finite value is ever clamped into a bin: every value's bin
is a function of the value alone, and how the images after the first calibration batch are grouped into batches,
sub-batches, chunks, threads or GPU kernels does not change a single count. Which images set the range is the
callers' rule (statistics: the first `calibration_batch` images, whatever the memory budget), given to `start`; an
update before any `start` sets it from its own batch. Unlike ModelOpt, growth is capped at `MAX_HISTOGRAM_BINS` (then
neighbouring bin pairs merge, the width doubles and s halves — exactly: halving a float32 commutes with its rounding,
so trunc(fl(|x|·s/2)) = trunc(fl(|x|·s)) // 2 and counting before or after a merge gives the same counts; the merges
a histogram has made depend only on the largest value seen), so memory and the entropy search stay bounded when a
later batch is orders of magnitude larger than the first.

Counters (`cpu_counter`): numba's compiled loop (histogram_numba: the GIL released, so counting threads use every
core) where numba works, else numpy (the reference itself, slower: said once in the log) — whatever fails: numba's
import, a compile, its cache (pointed at a writable folder first when its own are not).
$TRTLAB_HISTOGRAM_COUNTER=numpy forces numpy. Both give the reference's counts to the count (tests/test_counters.py).
"""
from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass

import numpy as np

from trtlab.core.errors import UserValueError

log = logging.getLogger(__name__)

HISTOGRAM_BINS = 2048
MAX_HISTOGRAM_BINS = 32 * HISTOGRAM_BINS
_CHUNK = 1 << 16  # values per numpy step: small enough that abs/scale/index stay in the CPU cache
COUNTERS = ("auto", "numba", "numpy")
COUNTER_VARIABLE = "TRTLAB_HISTOGRAM_COUNTER"
_AUTO = "auto"


class NonFiniteActivation(UserValueError):
    """An activation holds NaN or Inf: the model or its input, not trtlab (one line `error: … — …`, exit 2)."""


def _non_finite() -> NonFiniteActivation:
    return NonFiniteActivation("an activation holds NaN or Inf on the calibration images, so no INT8 scale can be "
                               "found", "check the model's FP32 outputs and the preprocessing (--preset) before "
                               "calibrating")


# -- the counter registry ----------------------------------------------------------------------------------------------
_lock = threading.Lock()
_found: dict = {}


def cpu_counter(name: str | None = None):
    """The counter for float32 values on the CPU: an object with `count(values, scale, bins) → (counts[bins] int64,
    max |x|, finite)` counting the reference's bins (histogram_numba), or None where numpy counts. `name`: 'numba',
    'numpy' or 'auto' (None: $TRTLAB_HISTOGRAM_COUNTER, else 'auto' = numba where it imports)."""
    if counter_name(name) == "numpy":
        return None
    if "numba" not in _found:
        with _lock:
            if "numba" not in _found:
                _found["numba"] = _load_numba()
    return _found["numba"]


def counter_name(name: str | None = None) -> str:
    """The counter `name` asks for ('auto', 'numba' or 'numpy'; None: $TRTLAB_HISTOGRAM_COUNTER, else 'auto'),
    checked before any work: an unknown name is one line."""
    requested = (name or os.environ.get(COUNTER_VARIABLE) or _AUTO).strip().lower()
    if requested not in COUNTERS:
        from trtlab.core.errors import UserValueError

        raise UserValueError(f"histogram counter {requested!r} is not one of {', '.join(COUNTERS)}",
                             f"set {COUNTER_VARIABLE} to 'numba', 'numpy' or 'auto'")
    return requested


def _load_numba():
    """histogram_numba's counter behind `_GuardedCounter`, or None (numpy counts) when numba does not work here —
    whatever the reason: not installed (ImportError), llvmlite's library missing (OSError), a half-removed numba
    (AttributeError: no `njit`), no writable cache folder anywhere (RuntimeError "cannot cache function"), a
    compile error on the first count. Said once, with the reason."""
    relocated = _ensure_numba_cache_dir()
    try:
        from trtlab.quantization import histogram_numba
        counter = _GuardedCounter(histogram_numba)
        counter.count(np.arange(-4, 5, dtype=np.float32), 1.0, 8)  # compiled (or loaded from numba's cache) now
    except Exception as error:  # noqa: BLE001 — any failure of numba is numpy's turn, never the run's end
        _numba_failed(error)
        return None
    if counter.broken:
        return None
    if relocated:
        log.info("numba caches its machine code in %s (its default folders are not writable here)", relocated)
    return counter


_numba_said: list = []


def _numba_failed(error: BaseException) -> None:
    """The one line saying numpy counts instead of numba, and why (once per process)."""
    if _numba_said:
        return
    _numba_said.append(error)
    reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
    if isinstance(error, ImportError) and getattr(error, "name", None) in ("numba", "llvmlite"):
        log.warning("numba is not installed (%s): calibration histograms on the CPU are counted by numpy, the same "
                    "counts about 3× slower — pip install numba (Kaggle has it)", reason)
    else:
        log.warning("numba does not work here (%s): calibration histograms on the CPU are counted by numpy, the same "
                    "counts about 3× slower — reinstall it (pip install --force-reinstall numba llvmlite), or set "
                    "%s=numpy to silence this", reason, COUNTER_VARIABLE)


class _GuardedCounter:
    """histogram_numba's `count`, with numpy's count (the reference's bins, the same result) taking over for good
    when a numba call fails — a compile error, a cache that cannot be written — instead of ending the run."""

    def __init__(self, module):
        self.module = module
        self.broken = False

    def count(self, values: np.ndarray, scale: float, bins: int) -> tuple[np.ndarray, float, bool]:
        if not self.broken:
            try:
                return self.module.count(values, scale, bins)
            except Exception as error:  # noqa: BLE001 — numba's errors are many classes; numpy counts the same
                self.broken = True
                _numba_failed(error)
        return numpy_count(values, scale, bins)


def numpy_count(values: np.ndarray, scale: float, bins: int) -> tuple[np.ndarray, float, bool]:
    """What a counter's `count` returns, computed by numpy: (reference_bins, max |x|, finite)."""
    flat = np.asarray(values, np.float32).reshape(-1)
    top = float(np.abs(flat).max()) if flat.size else 0.0
    if not math.isfinite(top):
        return np.zeros(bins, np.int64), top, False
    return reference_bins(flat, scale, bins).astype(np.int64), top, True


def _ensure_numba_cache_dir() -> str | None:
    """Point numba's cache at a writable folder when none of its own is (numba.core.caching tries, in order,
    $NUMBA_CACHE_DIR, __pycache__ beside the module, the user cache folder, and raises "cannot cache function"
    when none can be written: a read-only install with a read-only HOME). The folder chosen is the workspace's
    default location's cache/numba, else one under the temporary folder; returns it (None when numba's own works)."""
    import tempfile

    own = [os.environ.get("NUMBA_CACHE_DIR") or None, os.path.join(os.path.dirname(__file__), "__pycache__"),
           os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "numba")]
    if any(folder and _writable_folder(folder) for folder in own):
        return None
    from trtlab.core.workspace import default_workspace

    candidates = [os.path.join(default_workspace()[0], "cache", "numba"),
                  os.path.join(tempfile.gettempdir(), f"trtlab-numba-{os.getuid() if hasattr(os, 'getuid') else 0}")]
    chosen = next((folder for folder in candidates if _writable_folder(folder)), None)
    if chosen is None:
        return None  # nowhere to write: numba raises "cannot cache", and numpy counts (said once)
    os.environ["NUMBA_CACHE_DIR"] = chosen
    import sys

    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba imported before (a notebook did): its config read the variable then
        config.CACHE_DIR = chosen
    return chosen


def _writable_folder(folder: str) -> bool:
    """Whether a file can be created in `folder` (made if missing) — numba's own test (caching.ensure_cache_path)."""
    import tempfile

    try:
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


def counter_label(counter) -> str:
    return "numpy" if counter is None or getattr(counter, "broken", False) else "numba"


# -- the specification -------------------------------------------------------------------------------------------------
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

    # -- the state machine every counter shares (numpy and numba here, torch in statistics_torch) --------------------
    def start(self, top: float) -> None:
        """Set the bin width from `top`, the max |x| of the values that set the range (statistics: the first
        calibration batch): width = top / bins, and the float32 multiplier that puts `top` itself in the last bin."""
        if not math.isfinite(top):
            raise _non_finite()
        if top <= 0:
            raise ValueError(f"a histogram range needs a max |x| > 0, not {top}")
        self.range = float(top)
        self.width = self.range / self.bins
        scale = np.float32(min(self.bins / self.range, float(np.finfo(np.float32).max)))
        while _bin_index(top, scale) >= self.bins:  # float32(top · s) rounded up onto the upper edge: one ulp lower
            scale = np.nextafter(scale, np.float32(0))
        self.scale = float(scale)

    def start_at_first_nonzero(self, row_tops) -> None:
        """Start the range from the first image whose max |x| (`row_tops`, one per image, in order) is not zero — the
        rule for a tensor that is zero on every image of the first calibration batch (an image is never split, so this
        does not depend on the grouping either); nothing when every image is zero."""
        tops = np.asarray(row_tops, np.float64)
        if not np.isfinite(tops).all():
            raise _non_finite()
        nonzero = np.flatnonzero(tops > 0)
        if len(nonzero):
            self.start(float(tops[nonzero[0]]))

    def plan(self, top: float) -> tuple[int, int]:
        """(pair merges, bins) after a batch whose max |x| is `top`: bins of the same width up to the bin `top` falls
        in (the float32 index every counter computes, so no finite value is clamped), merging neighbouring pairs while
        that is over `max_bins`."""
        scale, bins, merges = np.float32(self.scale), self.bins, 0
        needed = max(_bin_index(top, scale) + 1, bins)
        if needed == bins:
            return 0, bins
        while needed > self.max_bins:
            merges, scale, bins = merges + 1, scale / np.float32(2), (bins + 1) // 2
            needed = max(_bin_index(top, scale) + 1, bins)
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
        bin of the batch's max (`plan`), so no finite value's index is past the new upper edge (the clamp into the
        last bin below only keeps the arrays aligned)."""
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

    # -- the reference update (numpy), and the same update through a counter ------------------------------------------
    def update(self, values: np.ndarray, counter=_AUTO, padding_zeros: int = 0) -> None:
        """Add a batch of values (any shape; not modified). `counter` counts float32 values: 'auto' (cpu_counter(),
        numba where installed), a counter, or None for numpy, the reference (same counts). `padding_zeros`: how many
        of `values` are zeros that are not data (the padded channels of ONNX Runtime's blocked layout,
        exposure_ort): a zero is in bin 0 and never the max, so they are taken out of bin 0 after counting."""
        flat = np.asarray(values).reshape(-1)
        if flat.size == 0:
            return
        if not 0 <= padding_zeros <= flat.size:
            raise ValueError(f"padding_zeros={padding_zeros} is not within the {flat.size} values")
        if not self.scale:
            top = _abs_max(flat)
            if top == 0.0:  # nothing to set a width from yet: every value is in bin 0
                self.counts[0] += flat.size - padding_zeros
                self.values += flat.size - padding_zeros
                return
            self.start(top)
        if isinstance(counter, str):
            counter = cpu_counter()
        if counter is not None and flat.dtype == np.float32:
            self._update_with(counter, flat, padding_zeros)
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
        found[0] -= padding_zeros
        self.commit(found, top, flat.size - padding_zeros)

    def _update_with(self, counter, flat: np.ndarray, padding_zeros: int = 0) -> None:
        """One pass at the current multiplier and bins; when the batch's max needs more bins (or merges), the
        histogram grows first and the batch is counted again at the new multiplier (rare after the first batches)."""
        flat = np.ascontiguousarray(flat, np.float32)
        found, top, finite = counter.count(flat, self.scale, self.bins)
        if not finite:
            raise _non_finite()
        merges, bins = self.plan(top)
        if merges or bins != self.bins:
            self.merge(merges)
            self.grow(bins)
            found, _, _ = counter.count(flat, self.scale, self.bins)
        found[0] -= padding_zeros
        self.counts += found
        self.absmax = max(self.absmax, top)
        self.values += flat.size - padding_zeros

    def state(self) -> dict:
        """Everything that rebuilds this histogram (statistics_torch hands its device histograms back this way)."""
        return {"bins": self.bins, "counts": self.counts, "range": self.range, "absmax": self.absmax,
                "values": self.values, "max_bins": self.max_bins, "scale": self.scale, "width": self.width}

    @classmethod
    def from_state(cls, state: dict) -> "TensorHistogram":
        return cls(**state)


def start_ranges(histograms: dict, tops: dict) -> None:
    """Set each histogram's bin width from its tensor's max |x| over the first calibration batch (`tops`, by name;
    statistics.py says why); a tensor that is zero there is left unstarted (its first non-zero image starts it:
    TensorHistogram.start_at_first_nonzero). Histograms are TensorHistograms or objects keeping one in `.state`
    (statistics_torch.TorchHistogram)."""
    for name, top in tops.items():
        state = histograms[name]
        state = state if isinstance(state, TensorHistogram) else state.state
        if not state.scale and top != 0.0:  # NaN ≠ 0: start() refuses it
            state.start(float(top))


def reference_bins(values: np.ndarray, scale: float, bins: int) -> np.ndarray:
    """The reference formula for one batch at a fixed multiplier (TensorHistogram's numpy update without its
    chunking; the upper edge clamped into the last bin): what every counter's `count` must return."""
    product = np.multiply(np.abs(np.asarray(values, np.float32).reshape(-1)), np.float32(scale))
    return np.bincount(np.minimum(product, bins - 1).astype(np.intp), minlength=bins)


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


def _bin_index(value: float, scale) -> int:
    """The bin of |value| at float32 multiplier `scale`: trunc(float32(|value| · s)), as every counter computes it
    (past float32's range the float64 product: far more bins than `MAX_HISTOGRAM_BINS`, so the plan merges on)."""
    with np.errstate(over="ignore"):
        product = np.float32(abs(value)) * np.float32(scale)
    return int(product) if np.isfinite(product) else int(abs(value) * float(scale))


def _abs_max(flat: np.ndarray) -> float:
    top = max(float(flat.max()), -float(flat.min()))
    if not math.isfinite(top):
        raise _non_finite()
    return top


__all__ = ["COUNTERS", "COUNTER_VARIABLE", "HISTOGRAM_BINS", "MAX_HISTOGRAM_BINS", "NonFiniteActivation",
           "TensorHistogram", "counter_label", "counter_name", "cpu_counter", "merge_pairs", "reference_bins",
           "start_ranges"]
