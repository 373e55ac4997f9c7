"""The calibration histogram's CPU counter, compiled by numba (imported only where numba is installed: histogram.py).

It counts the reference's bins (histogram.reference_bins): bin = trunc(float32(|x| · s)), the product rounded once
in float32 (numba follows numpy's float32 arithmetic; fastmath is off, so nothing is fused or reordered), and a
product at or past `bins` in the last bin. One pass per value instead of numpy's five, and `nogil`: the counting
threads of statistics_ort use every core while ONNX Runtime computes the next sub-batch.

The max |x| is taken on the float bits (for non-negative floats the bits sort like the values, NaN and Inf above
every finite value, so one integer max also answers "is anything non-finite"); the counters are spread over LANES
sub-histograms, since a run of equal values (a ReLU's zeros) would make each increment wait for the previous one.
Measured on EfficientNet-Lite0's 60 activations: about as fast per value as the hand-written C loop it replaces
(1.9 vs 1.7 ns on one core, shared machine), 5-8× faster than numpy. numba caches the machine code beside this
module (or in its own user cache folder), so it is compiled once per machine.
"""
from __future__ import annotations

import numba
import numpy as np

LANES = 4


@numba.njit(nogil=True, cache=True)
def _count(values: np.ndarray, bits: np.ndarray, scale: np.float32, bins: np.int64):
    counts = np.zeros(LANES * bins, np.int64)
    cap = np.float32(bins - 1)
    top = np.uint32(0)
    for i in range(values.size):
        magnitude_bits = bits[i] & np.uint32(0x7FFFFFFF)
        top = magnitude_bits if magnitude_bits > top else top
        product = abs(values[i]) * scale
        product = product if product < cap else cap  # NaN compares false: it lands at cap, and top reports it
        counts[(i & (LANES - 1)) * bins + np.int64(product)] += 1
    return counts.reshape(LANES, bins).sum(axis=0), top


def count(values: np.ndarray, scale: float, bins: int) -> tuple[np.ndarray, float, bool]:
    """(counts[bins] int64, max |x|, finite) of float32 `values` at multiplier `scale` (see the module docstring)."""
    flat = np.ascontiguousarray(values, np.float32).reshape(-1)
    counts, top = _count(flat, flat.view(np.uint32), np.float32(scale), np.int64(bins))
    top_value = float(np.uint32(top).view(np.float32))
    return counts, top_value, bool(np.isfinite(top_value))


__all__ = ["count"]
