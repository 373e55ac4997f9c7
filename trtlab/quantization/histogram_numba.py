"""The calibration histogram's CPU counter, compiled by numba (imported only where numba is installed: histogram.py).

It counts the reference's bins (histogram.reference_bins): bin = trunc(float32(|x| · s)), the product rounded once
in float32 (numba follows numpy's float32 arithmetic; fastmath is off, so nothing is fused or reordered), and a
product at or past `bins` (or NaN) in the last bin. `nogil`: the counting threads of statistics_ort use every core
while ONNX Runtime computes the next sub-batch.

Two passes per block of BLOCK values, because they want different things of the CPU:
- the bin of every value and the block's max |x|, a loop LLVM turns into SIMD code (contiguous slices, 32-bit
  lanes, no branch). The max is taken on the float bits with the sign cleared (as int32: they sort like the
  values, NaN and Inf above every finite value), so one integer max also answers "is anything non-finite".
- the increments, four values per step into four separate uint32 histograms: a run of equal bins (a ReLU's zeros
  are a third of the values) would otherwise make each increment wait for the previous one. Bins are unsigned
  (uint16 up to 65,536 bins, histogram.MAX_HISTOGRAM_BINS), so indexing needs no negative-index fix-up.
Measured on EfficientNet-Lite0's 60 real activations, one core (bench/bench_counting.py): 0.72 ns per value on the
2-core AMD EPYC development machine, 1.14 on the lent GPU host's Intel Xeon (Emerald Rapids), where reading the
activations from memory is most of it; the one-pass loop it replaces 1.37 and 2.08, numpy's reference update 3.2
and 3.7; the hand-written AVX2 C loop of older trtlab versions 0.80 (Xeon). numba caches the machine code beside
this module (or in its own user cache folder), so it is compiled once per machine.
"""
from __future__ import annotations

import numba
import numpy as np

BLOCK = 1 << 16
# A call counts at most this many values, so that no uint32 sub-histogram can overflow (count() splits larger arrays).
MAX_VALUES_PER_CALL = 1 << 32


@numba.njit(nogil=True, cache=True)
def _count_small(values: np.ndarray, bits: np.ndarray, scale: np.float32, bins: np.int64):
    """Up to 65,536 bins: uint16 bin numbers (half the scratch of uint32)."""
    return _count(values, bits, scale, bins, np.empty(BLOCK, np.uint16))


@numba.njit(nogil=True, cache=True)
def _count_large(values: np.ndarray, bits: np.ndarray, scale: np.float32, bins: np.int64):
    return _count(values, bits, scale, bins, np.empty(BLOCK, np.uint32))


@numba.njit(nogil=True, cache=True)
def _count(values: np.ndarray, bits: np.ndarray, scale: np.float32, bins: np.int64, index: np.ndarray):
    c0, c1 = np.zeros(bins, np.uint32), np.zeros(bins, np.uint32)
    c2, c3 = np.zeros(bins, np.uint32), np.zeros(bins, np.uint32)
    cap = np.float32(bins - 1)
    mask = np.int32(0x7FFFFFFF)
    top = np.int32(0)
    n = values.size
    for begin in range(0, n, BLOCK):
        m = min(BLOCK, n - begin)
        block, block_bits = values[begin:begin + m], bits[begin:begin + m]
        block_top = np.int32(0)
        for i in range(m):  # vectorized by LLVM: 32-bit lanes throughout (numba widens integer arithmetic to 64
            b = np.int32(block_bits[i] & mask)  # bits unless cast back; a 64-bit max halves the vector width)
            block_top = b if b > block_top else block_top
            p = abs(block[i]) * scale
            index[i] = p if p < cap else cap  # NaN compares false: it lands at cap, and top reports it
        top = block_top if block_top > top else top
        i = 0
        while i + 4 <= m:
            c0[index[i]] += 1
            c1[index[i + 1]] += 1
            c2[index[i + 2]] += 1
            c3[index[i + 3]] += 1
            i += 4
        while i < m:
            c0[index[i]] += 1
            i += 1
    return c0.astype(np.int64) + c1 + c2 + c3, top


def count(values: np.ndarray, scale: float, bins: int) -> tuple[np.ndarray, float, bool]:
    """(counts[bins] int64, max |x|, finite) of float32 `values` at multiplier `scale` (see the module docstring)."""
    flat = np.ascontiguousarray(values, np.float32).reshape(-1)
    kernel = _count_small if bins <= 1 << 16 else _count_large
    counts, top = np.zeros(bins, np.int64), 0
    for begin in range(0, max(flat.size, 1), MAX_VALUES_PER_CALL):
        part = flat[begin:begin + MAX_VALUES_PER_CALL]
        found, part_top = kernel(part, part.view(np.int32), np.float32(scale), np.int64(bins))
        counts += found
        top = max(top, int(part_top))
    top_value = float(np.int32(top).view(np.float32))
    return counts, top_value, bool(np.isfinite(top_value))


__all__ = ["count"]
