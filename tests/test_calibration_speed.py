"""Calibration at forward-pass speed (issue 19): the histogram counts do not depend on where or how they are counted
— numpy in chunks, torch on the CPU (and CUDA: tests/test_gpu_calibration.py) give the same histograms to the count
on the same tensors (numba's CPU counter: tests/test_counters.py) — and the device choice. Timings are in bench/."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from trtlab.quantization import histogram, statistics
from trtlab.quantization.statistics import (CalibrationStats, TensorHistogram, calibration_device, collect_statistics,
                                            resolve_calibration_device)
from trtlab.quantization.thresholds import compute_thresholds
from trtlab.quantization.variants import stats_tensors


def _batches(seed: int, count: int = 7, size=(3, 5000), scales=(0.0, 0.5, 1.0, 4.0, 2.0, 300.0, 1.0, 9.0)):
    """Batches that grow, shrink, hold zeros, negative values, ReLU-like halves and a far outlier."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        x = (rng.normal(0, 1, size) * scales[k % len(scales)]).astype(np.float32)
        if k % 3 == 1:
            x = np.maximum(x, 0)
        out.append(x)
    return out


def _assert_same(a: TensorHistogram, b: TensorHistogram):
    assert a.bins == b.bins and a.values == b.values
    np.testing.assert_array_equal(a.counts, b.counts)
    assert (a.range, a.absmax, a.scale, a.width) == (b.range, b.absmax, b.scale, b.width)


@pytest.mark.parametrize("bins,max_bins", [(2048, 32 * 2048), (64, 256), (100, 160)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_torch_counts_equal_numpy_counts_to_the_count(bins, max_bins, seed):
    torch = pytest.importorskip("torch")
    from trtlab.quantization.statistics_torch import TorchHistogram

    batches = _batches(seed)
    # values exactly on a batch's upper edge: x · s lands on the bin count itself and goes to the last bin
    batches[3][0, 0] = np.float32(np.abs(batches[1]).max())
    reference = TensorHistogram(bins=bins, max_bins=max_bins)
    for batch in batches:
        reference.update(batch, None)  # the numpy reference
    # torch: all batches as rows of one tensor, updated as consecutive sub-batches (what a GPU forward does)
    rows = torch.from_numpy(np.concatenate(batches)).reshape(sum(len(b) for b in batches), -1)
    bounds, start = [], 0
    for batch in batches:
        bounds.append((start, start + len(batch)))
        start += len(batch)
    per_row = rows.abs().amax(dim=1).double().numpy()
    on_torch = TorchHistogram("cpu", bins, max_bins)
    on_torch.update_slices(rows, bounds, [float(per_row[a:b].max()) for a, b in bounds])
    _assert_same(reference, on_torch.to_numpy())
    # and one batch at a time through the single-batch entry
    one_by_one = TorchHistogram("cpu", bins, max_bins)
    for batch in batches:
        one_by_one.update(torch.from_numpy(batch))
    _assert_same(reference, one_by_one.to_numpy())


def test_counts_do_not_depend_on_chunking_even_when_a_batch_grows_and_merges(monkeypatch):
    rng = np.random.default_rng(5)
    first = rng.normal(0, 1, 50_000).astype(np.float32)
    # a large batch whose late chunks exceed the range 40×: growth past the cap, bins merged mid-batch
    second = np.concatenate([rng.normal(0, 1, 150_000), rng.normal(0, 40, 100_000)]).astype(np.float32)
    results = []
    for chunk in (1 << 16, 1000, 1 << 20):
        monkeypatch.setattr(histogram, "_CHUNK", chunk)
        hist = TensorHistogram(bins=256, max_bins=2048)
        hist.update(first, None)  # the numpy reference's own chunking
        hist.update(second, None)
        results.append(hist)
    first_width = float(np.abs(first).max()) / 256
    assert results[0].bins <= 2048 and results[0].width >= 2 * first_width * (1 - 1e-12)  # merged, bounded
    for other in results[1:]:
        _assert_same(results[0], other)
    # a merge is exact: counting at the halved multiplier gives the merged counts of the finer histogram
    fine = TensorHistogram(bins=256, max_bins=1 << 20)
    fine.update(first)
    fine.update(second)
    times = int(round(np.log2(results[0].width / fine.width)))
    np.testing.assert_array_equal(statistics.merge_pairs(fine.counts, times)[:results[0].bins], results[0].counts)


def test_nan_is_refused_by_every_counter():
    torch = pytest.importorskip("torch")
    from trtlab.quantization.statistics_torch import TorchHistogram

    bad = np.array([1.0, np.nan, 2.0], np.float32)
    with pytest.raises(ValueError, match="NaN or Inf"):
        TensorHistogram().update(bad)
    hist = TensorHistogram()
    hist.update(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="NaN or Inf"):
        hist.update(bad)
    with pytest.raises(ValueError, match="NaN or Inf"):
        TorchHistogram("cpu", 2048).update(torch.from_numpy(bad))


def test_statistics_save_and_load_keep_the_multiplier_and_the_device(tmp_path):
    hist = TensorHistogram()
    for batch in _batches(3):
        hist.update(batch)
    stats = CalibrationStats({"t": hist}, 3, "ab" * 32, {"crop": 224}, ["a"], 1.0, 10, "cuda", "torch on X")
    stats.save(tmp_path / "s.npz")
    loaded = CalibrationStats.load(tmp_path / "s.npz")
    _assert_same(hist, loaded.tensors["t"])
    assert (loaded.device, loaded.counting) == ("cuda", "torch on X")


def test_torch_path_groups_images_like_the_onnx_runtime_path(demo_model, demo_cache):
    pytest.importorskip("torch")
    tensors = stats_tensors(onnx.load(str(demo_model)))
    indices = demo_cache.valid_indices[:12]
    ort = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=4, progress=False, device="cpu")
    on_torch = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=4, progress=False,
                                  device="torch-cpu")
    assert on_torch.device == "torch-cpu" and "torch on cpu" in on_torch.counting
    for name in tensors:
        a, b = ort.tensors[name], on_torch.tensors[name]
        assert a.values == b.values  # every value of every image, padded rows never
        # the same images set the width (the first sub-batch of 4) and the same maxima: equal up to float
        # summation order, which the torch and ONNX Runtime convolutions do not share
        assert b.absmax == pytest.approx(a.absmax, rel=1e-4, abs=1e-6)
        assert b.width == pytest.approx(a.width, rel=1e-4, abs=1e-9)
    entropy_a, entropy_b = compute_thresholds(ort, "entropy"), compute_thresholds(on_torch, "entropy")
    close = sum(entropy_b[n] == pytest.approx(entropy_a[n], rel=1e-2) for n in tensors)
    assert close >= 0.9 * len(tensors)


def test_calibration_device_follows_the_block_then_the_environment(monkeypatch):
    monkeypatch.delenv("TRTLAB_CALIBRATION_DEVICE", raising=False)
    monkeypatch.setattr("trtlab.backends.torch_gpu_available", lambda: False)
    assert resolve_calibration_device() == "cpu"  # auto without a GPU
    monkeypatch.setattr("trtlab.backends.torch_gpu_available", lambda: True)
    assert resolve_calibration_device() == "cuda"  # auto with one
    with calibration_device("cpu"):  # compare() with backend='ort'
        assert resolve_calibration_device() == "cpu"
        assert resolve_calibration_device("torch-cpu") == "torch-cpu"  # a caller's own choice wins
    monkeypatch.setenv("TRTLAB_CALIBRATION_DEVICE", "cpu")
    assert resolve_calibration_device() == "cpu"
    from trtlab.core.errors import UserValueError

    with pytest.raises(UserValueError, match="calibration device 'tpu'"):
        resolve_calibration_device("tpu")
