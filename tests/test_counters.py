"""The CPU histogram counters against the reference (trtlab/quantization/histogram.py's numpy update): numba's loop
counts the same bins to the count — on real activations, through growing/merging batches, on values sitting on bin
edges — refuses NaN/Inf, and without numba numpy counts and says so once."""
from __future__ import annotations

import logging
import os
import sys

import numpy as np
import onnx
import pytest

from trtlab.quantization import histogram
from trtlab.quantization.histogram import NonFiniteActivation, TensorHistogram, cpu_counter, reference_bins

from test_calibration_speed import _assert_same, _batches


@pytest.fixture
def counter(monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.delenv(histogram.COUNTER_VARIABLE, raising=False)
    found = cpu_counter()
    assert found is not None, "numba imports but the counter did not load"
    return found


def _light_resnet_activations():
    """Every Conv input of the onnx wheel's light ResNet-50 on a real photo (ReLU zeros, residual sums)."""
    import onnx.backend.test
    import onnxruntime as ort

    from trtlab.graph.onnx_utils import with_outputs

    path = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "light", "light_resnet50.onnx")
    model = onnx.load(path)
    names = sorted({n.input[0] for n in model.graph.node if n.op_type == "Conv"} - {model.graph.input[0].name})
    session = ort.InferenceSession(with_outputs(model, names).SerializeToString(), providers=["CPUExecutionProvider"])
    from skimage import data

    photo = data.chelsea()[:224, :224].astype(np.float32) / 255.0
    image = ((photo - 0.45) / 0.225).transpose(2, 0, 1)[None].astype(np.float32)
    return session.run(names, {session.get_inputs()[0].name: image})


def test_counts_equal_the_reference_on_real_activations(counter):
    activations = _light_resnet_activations()
    assert len(activations) > 40
    for values in activations:
        top = float(np.abs(values).max())
        for bins in (2048, 333):
            scale = float(np.float32(bins / top))
            counts, reported, finite = counter.count(values, scale, bins)
            assert finite and reported == top
            np.testing.assert_array_equal(counts, reference_bins(values, scale, bins))
        # and through the streaming update: numba's histogram is numpy's, bin for bin
        with_numba, with_numpy = TensorHistogram(), TensorHistogram()
        for half in np.array_split(values.reshape(-1), 2):
            with_numba.update(half, counter)
            with_numpy.update(half, None)
        _assert_same(with_numba, with_numpy)


@pytest.mark.parametrize("bins,max_bins", [(2048, 32 * 2048), (64, 256), (100, 160)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_histograms_equal_the_reference_through_growth_and_merges(counter, bins, max_bins, seed):
    batches = _batches(seed)
    batches[3][0, 0] = np.float32(np.abs(batches[1]).max())  # on the upper edge of an earlier range
    compiled, numpy = TensorHistogram(bins=bins, max_bins=max_bins), TensorHistogram(bins=bins, max_bins=max_bins)
    for batch in batches:
        compiled.update(batch, counter)
        numpy.update(batch, None)
    _assert_same(compiled, numpy)


def test_values_on_bin_edges_subnormals_and_signed_zeros(counter):
    scale = float(np.float32(2048 / 3.0))
    edges = np.arange(2049, dtype=np.float32) / np.float32(scale)
    near = np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(np.inf))])
    values = np.concatenate([near, -near, [0.0, -0.0, 1e-45, -1e-40, 3.0, 3.0000002, 1e30]]).astype(np.float32)
    counts, top, finite = counter.count(values, scale, 2048)
    assert finite and top == np.float32(1e30)
    np.testing.assert_array_equal(counts, reference_bins(values, scale, 2048))
    assert counts.sum() == values.size
    for part in (values[:13], values[1:1003]):  # odd lengths: every lane of the loop
        np.testing.assert_array_equal(counter.count(part, scale, 100)[0], reference_bins(part, scale, 100))


def test_more_bins_than_a_uint16_holds_and_blocks_that_do_not_divide(counter):
    """Above 65,536 bins the counter's bin numbers are uint32; arrays longer than one block end in a partial one, and
    a NaN in the values lands in the last bin (reported as non-finite), never outside the histogram."""
    rng = np.random.default_rng(5)
    values = np.abs(rng.standard_normal(3 * (1 << 16) + 7)).astype(np.float32)
    for bins in (70_001, 65_536, 5):
        scale = float(np.float32(bins / values.max()))
        np.testing.assert_array_equal(counter.count(values, scale, bins)[0], reference_bins(values, scale, bins))
    values[-1] = np.nan
    counts, _, finite = counter.count(values, 1.0, 5)
    assert not finite and counts.sum() == values.size and counts[-1] >= 1


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused_and_nothing_is_counted(counter, bad):
    hist = TensorHistogram()
    hist.update(np.ones(10, np.float32), counter)
    before = hist.counts.copy()
    values = np.ones(5000, np.float32)
    values[4321] = bad
    assert not counter.count(values, 1.0, 2048)[2]
    with pytest.raises(NonFiniteActivation, match="NaN or Inf"):
        hist.update(values, counter)
    np.testing.assert_array_equal(hist.counts, before)


def test_without_numba_numpy_counts_and_says_so_once(monkeypatch, caplog):
    monkeypatch.delenv(histogram.COUNTER_VARIABLE, raising=False)
    monkeypatch.setattr(histogram, "_found", {})
    monkeypatch.setattr(histogram, "_numba_said", [])  # said once per process: this test's own process-wide state
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delitem(sys.modules, "trtlab.quantization.histogram_numba", raising=False)
    monkeypatch.delattr(sys.modules["trtlab.quantization"], "histogram_numba", raising=False)
    with caplog.at_level(logging.WARNING, logger="trtlab.quantization"):
        assert cpu_counter() is None and cpu_counter() is None
        hist = TensorHistogram()
        hist.update(np.arange(100, dtype=np.float32))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "numba is not installed" in warnings[0] and "pip install numba" in warnings[0]
    assert hist.values == 100 and hist.counts.sum() == 100


def test_the_counter_is_chosen_by_name_or_the_environment(monkeypatch):
    from trtlab.core.errors import UserValueError

    monkeypatch.setenv(histogram.COUNTER_VARIABLE, "numpy")
    assert cpu_counter() is None
    with pytest.raises(UserValueError, match="histogram counter 'c'"):
        cpu_counter("c")


def test_numba_and_numpy_give_the_same_statistics_on_the_demo_model(counter, demo_model, demo_cache, caplog):
    """The whole CPU calibration with each counter: the same histograms of the demo model's 60 tensors, hence the
    same thresholds of every algorithm."""
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.thresholds import compute_thresholds
    from trtlab.quantization.variants import stats_tensors

    tensors = stats_tensors(onnx.load(str(demo_model)))
    indices = np.tile(demo_cache.valid_indices, 2)[:24]
    stats = {}
    for name in ("numba", "numpy"):
        with caplog.at_level("INFO", logger="trtlab.quantization"):
            stats[name] = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=8, progress=False,
                                             device="cpu", counting=name)
        assert f"counting threads ({name}; bin widths from a first pass" in stats[name].counting  # 256 MB: 4 + 4
    for tensor in tensors:
        _assert_same(stats["numba"].tensors[tensor], stats["numpy"].tensors[tensor])
    for algorithm in ("minmax", "entropy", "percentile"):  # identical histograms: identical thresholds
        assert compute_thresholds(stats["numba"], algorithm) == compute_thresholds(stats["numpy"], algorithm)


@pytest.mark.parametrize("use_numba", [True, False])
def test_padding_zeros_are_left_out_exactly(counter, use_numba):
    """Values that carry k zeros which are not data (exposure_ort's padded channels) give the histogram of the values
    without them — also when the first batch is all zeros, and through growth."""
    rng = np.random.default_rng(11)
    batches = [np.zeros(300, np.float32), np.maximum(rng.normal(0, 1, 5000), 0).astype(np.float32),
               (rng.normal(0, 1, 4000) * 7).astype(np.float32)]
    padded, plain = TensorHistogram(bins=512), TensorHistogram(bins=512)
    chosen = counter if use_numba else None
    for k, batch in enumerate(batches):
        extra = 17 * (k + 1)
        padded.update(np.concatenate([batch, np.zeros(extra, np.float32)]), chosen, extra)
        plain.update(batch, chosen)
    _assert_same(padded, plain)
    with pytest.raises(ValueError, match="padding_zeros"):
        padded.update(np.ones(3, np.float32), chosen, 4)


def test_numpy_counts_while_numba_loads_and_the_counts_stay_the_same(counter, demo_model, demo_cache, monkeypatch):
    """numba's load (0.5-0.8 s) runs beside the first sub-batches, which numpy counts meanwhile: the histograms are
    those of an all-numba run, and `counting` says which sub-batches numpy took."""
    import threading

    from trtlab.quantization import exposure_ort, statistics_ort
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.variants import stats_tensors

    tensors = stats_tensors(onnx.load(str(demo_model)))
    indices = np.tile(demo_cache.valid_indices, 2)[:24]
    reference = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=4, progress=False,
                                   device="cpu", counting="numba")
    third_run, runs = threading.Event(), []
    original_run, original_ready = exposure_ort.ExposedRunner.__call__, statistics_ort._ready_counter

    def run(self, batch):
        runs.append(1)
        if len(runs) == 3:  # the first sub-batch is counted before the third run starts: numpy counts it
            third_run.set()
        return original_run(self, batch)

    def slow_ready(name):
        third_run.wait(60)
        return original_ready(name)

    monkeypatch.setattr(exposure_ort.ExposedRunner, "__call__", run)
    monkeypatch.setattr(statistics_ort, "_ready_counter", slow_ready)
    stats = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=4, progress=False, device="cpu",
                               counting="numba")
    assert "(numba; numpy counted the first" in stats.counting and "while numba loaded" in stats.counting
    for tensor in tensors:
        _assert_same(stats.tensors[tensor], reference.tensors[tensor])
