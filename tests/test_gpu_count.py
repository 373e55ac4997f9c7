"""The GPU histogram count's variants (statistics_stream, $TRTLAB_GPU_COUNT) give the same counts: 'histc' (the
default) and 'spread' (bin-0 values added to extra store slots, folded back into bin 0) equal 'index_add' and
TensorHistogram's numpy reference to the count, on the demo model's real activations (ReLU6 outputs: many exact
zeros) through growth and merges, and through the whole streamed statistics pass. Run on the CPU here; which variant
is faster is for a GPU to say (bench/bench_gpu_count.py; the CUDA runs are in tests/test_gpu_speed.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

from trtlab.quantization.histogram import TensorHistogram  # noqa: E402
from trtlab.quantization.statistics_stream import COUNT_VARIABLE, StoredHistogram  # noqa: E402

# Per-batch factors on the real activations: a zero batch first (an unstarted histogram counts at multiplier 0),
# then batches that shrink and grow past the range (growth; merges where the cap is small).
FACTORS = (0.0, 1.0, 0.5, 3.0, 1.0, 40.0, 0.25, 9.0)


@pytest.fixture(scope="module")
def activations(demo_model, demo_cache):
    """name → (8 images × values) float32 of a few of the demo model's exposed tensors on 8 real crops: the four with
    the largest share of exact zeros (ReLU6 outputs) and two signed ones (no zeros to speak of)."""
    from trtlab.backends.gpu.graph_module import convert_onnx
    from trtlab.data.preprocess import normalize_batch
    from trtlab.quantization.variants import stats_tensors

    model = onnx.load(str(demo_model))
    images = normalize_batch(np.asarray(demo_cache.crops[demo_cache.valid_indices[:8]]), demo_cache.preprocess)
    with torch.inference_mode():
        env = convert_onnx(model).trace(torch.from_numpy(images))
    tensors = {n: env[n].reshape(8, -1).numpy().astype(np.float32) for n in stats_tensors(model) if n in env}
    zeros = {n: float((v == 0).mean()) for n, v in tensors.items()}
    ranked = sorted(tensors, key=lambda n: zeros[n])
    chosen = ranked[-4:] + [n for n in ranked if (tensors[n] < 0).any()][:2]
    assert zeros[ranked[-1]] > 0.3, "the demo model's ReLU6 outputs should hold many exact zeros"
    return {n: tensors[n] for n in chosen}


def _count(histogram, batches):
    for batch in batches:
        histogram.prepare(batch.size, float(np.abs(batch).max()))
        histogram.count(torch.from_numpy(batch.copy()))  # count's abs is out of place; a copy all the same


@pytest.mark.parametrize("slots", [1024, 1000])  # 1000: most tensors leave a tail shorter than the slots
@pytest.mark.parametrize("bins,max_bins", [(2048, 32 * 2048), (64, 256), (100, 160)])
def test_spread_count_equals_index_add_and_the_reference_on_real_activations(activations, bins, max_bins, slots):
    grew = merged = 0
    for name, rows in activations.items():
        batches = [rows[[k, (k + 1) % 8]] * np.float32(f) for k, f in enumerate(FACTORS)]  # pairs of images
        reference = TensorHistogram(bins=bins, max_bins=max_bins)
        for batch in batches:
            reference.update(batch, None)  # the numpy reference
        plain = StoredHistogram("cpu", bins, max_bins, mode="index_add")
        spread = StoredHistogram("cpu", bins, max_bins, mode="spread", slots=slots)
        _count(plain, batches)
        _count(spread, batches)
        assert plain.store.numel() == max_bins and spread.store.numel() == max_bins + slots
        in_slots = int(spread.store[max_bins:].sum())
        # the slots hold bin 0's counts until folded: without the fold, bin 0 would come out short
        assert in_slots > 0 and int(spread.store[0]) + in_slots == int(reference.counts[0]), name
        for got in (plain.to_numpy(), spread.to_numpy()):
            assert (got.bins, got.values, got.range, got.absmax, got.scale, got.width) == \
                (reference.bins, reference.values, reference.range, reference.absmax, reference.scale,
                 reference.width), name
            np.testing.assert_array_equal(got.counts, reference.counts, err_msg=name)
        assert int(spread.store[max_bins:].sum()) == 0  # folded: a second read gives the same counts
        np.testing.assert_array_equal(spread.to_numpy().counts, reference.counts)
        first_width = float(np.abs(batches[1]).max()) / bins
        grew += reference.bins > bins
        merged += reference.width > 1.5 * first_width
    assert grew == len(activations)  # the batches ×40 grew every histogram
    assert merged == len(activations) or max_bins == 32 * 2048  # the small caps merged every one


@pytest.mark.parametrize("bins,max_bins", [(2048, 32 * 2048), (64, 256), (100, 160)])
def test_histc_count_equals_the_reference_on_real_activations(activations, bins, max_bins, monkeypatch):
    """'histc' (torch.histc over bins 1 … capacity-1, bin 0 as the rest, in parts below 2**24 values) gives the numpy
    reference's counts through growth and merges; with parts cut to 1,000 values the parts' counts add up the same."""
    from trtlab.quantization import statistics_stream

    for part in ((1 << 24) - 1, 1000):
        monkeypatch.setattr(statistics_stream, "HISTC_PART", part)
        for name, rows in activations.items():
            batches = [rows[[k, (k + 1) % 8]] * np.float32(f) for k, f in enumerate(FACTORS)]
            reference = TensorHistogram(bins=bins, max_bins=max_bins)
            for batch in batches:
                reference.update(batch, None)
            histc = StoredHistogram("cpu", bins, max_bins, mode="histc")
            keys = set()
            for batch in batches:
                histc.prepare(batch.size, float(np.abs(batch).max()))
                key = histc.capture_key()
                assert histc.state.bins <= key <= max_bins and (key == max_bins or key & (key - 1) == 0)
                assert key == max_bins or key >= 8192  # HISTC_MIN_CAPACITY
                keys.add(key)
                histc.count(torch.from_numpy(batch.copy()))
            got = histc.to_numpy()
            assert (got.bins, got.values, got.range, got.absmax, got.scale, got.width) == \
                (reference.bins, reference.values, reference.range, reference.absmax, reference.scale,
                 reference.width), name
            np.testing.assert_array_equal(got.counts, reference.counts, err_msg=f"{name}, parts of {part}")
            # the capacity doubles as the histogram grows past 8,192 bins (captured again then), not at every growth
            assert len(keys) == 1 if max_bins < 8192 else len(keys) <= 4, keys


def test_a_merge_folds_the_spread_slots_into_bin_0_first(activations):
    """After a merge the store's bins alone are the histogram (the slots folded in before the pairs are summed;
    bin 0 merges into bin 0, so this keeps the store readable rather than the counts right)."""
    from trtlab.quantization.histogram import merge_pairs

    rows = next(iter(activations.values()))
    spread = StoredHistogram("cpu", 64, 128, mode="spread")
    reference = TensorHistogram(bins=64, max_bins=128)
    first, second = rows[:4], rows[4:] * np.float32(50.0)
    reference.update(first, None)
    _count(spread, [first])
    assert int(spread.store[128:].sum()) > 0
    spread.prepare(second.size, float(np.abs(second).max()))  # merges before the second batch is counted
    merges = int(round(np.log2(spread.state.width / reference.width)))
    assert merges >= 1 and int(spread.store[128:].sum()) == 0
    expected = merge_pairs(reference.counts, merges)
    np.testing.assert_array_equal(spread.store[:len(expected)].numpy(), expected)
    assert not spread.store[len(expected):128].any()


def test_the_streamed_pass_counts_the_same_with_spread(demo_model, demo_cache, monkeypatch):
    """torch on the CPU, 20 images in batches of 8 (the last one short, counted eagerly on its real rows): the
    streamed pass with $TRTLAB_GPU_COUNT=spread gives index_add's histograms and statistics_torch's loop's, and
    says how it counted."""
    from trtlab.quantization import statistics_torch
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.variants import stats_tensors

    tensors = stats_tensors(onnx.load(str(demo_model)))
    indices = demo_cache.valid_indices[:20]
    run = {}
    for label, mode, streamed in (("spread", "spread", True), ("index_add", "index_add", True),
                                  ("loop", "spread", False), ("histc", "", True)):  # '': the default, histc
        monkeypatch.setenv(COUNT_VARIABLE, mode)
        monkeypatch.setattr(statistics_torch, "STREAMED", streamed)
        run[label] = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=8, progress=False,
                                        device="torch-cpu", memory_budget_mb=4096)
    assert "counted by 'spread' (1024 slots for bin 0)" in run["spread"].counting
    assert run["histc"].counting.endswith("counted by 'histc' (float32 bins)")  # the CPU's histc
    assert run["index_add"].counting.endswith("counted by 'index_add'") and "eager interpreter" in \
        run["index_add"].counting
    assert "spread" not in run["loop"].counting  # the loop has no store: the variable does not concern it
    zeros = 0
    for name in tensors:
        a = run["spread"].tensors[name]
        for other in ("index_add", "loop", "histc"):
            b = run[other].tensors[name]
            assert (a.bins, a.values, a.range, a.absmax, a.scale, a.width) == \
                (b.bins, b.values, b.range, b.absmax, b.scale, b.width), (name, other)
            np.testing.assert_array_equal(a.counts, b.counts, err_msg=f"{name} vs {other}")
        zeros += a.counts[0] > a.values // 4
    assert zeros >= 10  # many tensors with a quarter of their values in bin 0: the fold is exercised


def test_an_unknown_count_is_one_line(monkeypatch):
    from trtlab.core.errors import UserValueError
    from trtlab.quantization.statistics_stream import count_mode

    monkeypatch.delenv(COUNT_VARIABLE, raising=False)
    assert count_mode() == "histc" and StoredHistogram("cpu", 8, 16).store.numel() == 16
    monkeypatch.setenv(COUNT_VARIABLE, " Spread ")
    assert count_mode() == "spread" and StoredHistogram("cpu", 8, 16).store.numel() == 16 + 1024
    monkeypatch.setenv(COUNT_VARIABLE, "HISTC")
    assert count_mode() == "histc" and StoredHistogram("cpu", 8, 16).capture_key() == 16
    monkeypatch.setenv(COUNT_VARIABLE, "atomic")
    with pytest.raises(UserValueError) as raised:
        StoredHistogram("cpu", 8, 16)
    line = raised.value.line()
    assert line.startswith("error: GPU histogram count 'atomic' (TRTLAB_GPU_COUNT) is not one of histc, spread, "
                           "index_add")
    assert " — set TRTLAB_GPU_COUNT to 'histc' (the default)" in line and "\n" not in line


def test_the_bench_needs_a_gpu_and_its_smoke_run_checks_the_counts():
    """bench/bench_gpu_count.py with no GPU visible: one line, exit 2; --smoke on the CPU: labelled, counts ok."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "bench_gpu_count.py"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and done.stdout.strip().count("\n") == 0, done.stdout + done.stderr
    assert "needs a CUDA GPU" in done.stdout and "nothing was run" in done.stdout
    done = subprocess.run([sys.executable, str(script), "--smoke", "--cases", "all-zero,relu6-half-zero-7px",
                           "--model", "none"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SMOKE RUN ON THE CPU" in done.stdout and "1x1280x7x7" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith(("all-zero", "relu6-half-zero-7px"))]
    assert len(rows) == 8 and all(line.endswith("ok") for line in rows), done.stdout  # 4 counts × 2 cases


@pytest.mark.parametrize("magnitudes", [False, True])
def test_histc_counts_magnitudes_and_refuses_values_past_its_bins(activations, magnitudes):
    """The streamed forward hands over |x| (`magnitudes`): the same counts as the values; the input is never
    modified. 'histc' does not clamp to the last bin (prepare grows the bins up to the batch's max): values counted
    past the bins — a batch counted without its `prepare` — are refused when read, not folded into bin 0 unseen."""
    rows = next(iter(activations.values()))
    reference = TensorHistogram(bins=2048)
    reference.update(rows, None)
    histc = StoredHistogram("cpu", 2048, mode="histc")
    histc.prepare(rows.size, float(np.abs(rows).max()))
    given = torch.from_numpy(np.abs(rows) if magnitudes else rows.copy())
    kept = given.clone()
    histc.count(given, magnitudes=magnitudes)
    assert torch.equal(given, kept)
    np.testing.assert_array_equal(histc.to_numpy().counts, reference.counts)
    histc.count(given * 3, magnitudes=magnitudes)  # three times the range, no prepare: past the 2,048 bins
    with pytest.raises(RuntimeError, match="counted past the histogram's 2048 bins"):
        histc.to_numpy()


def test_histc_integer_bins_count_as_cudas_integer_histc_would(activations, monkeypatch):
    """On CUDA 'histc' counts int32 bins (torch.histc on the CPU refuses integers): with CUDA's integer formula
    emulated here — ATen's getBin, bin = (k − min)·bins / (max − min) in int64 arithmetic, the top edge into the last
    bin, values outside [min, max] left out — the arguments 'histc' passes give the numpy reference's counts
    through growth and merges. tests/test_gpu_speed.py runs the real kernel on CUDA."""
    from trtlab.quantization import statistics_stream

    real, calls = torch.histc, []

    def cuda_like(values, bins, min, max):
        if values.dtype.is_floating_point:
            return real(values, bins=bins, min=min, max=max)
        k = values.numpy().astype(np.int64)
        k = k[(k >= min) & (k <= max)]
        found = (k - min) * bins // (max - min)
        found[found == bins] = bins - 1
        calls.append(len(values))
        return torch.from_numpy(np.bincount(found, minlength=bins).astype(np.int32))

    monkeypatch.setattr(torch, "histc", cuda_like)
    monkeypatch.setattr(statistics_stream, "HISTC_INTEGER", True)
    for name, rows in activations.items():
        batches = [rows[[k, (k + 1) % 8]] * np.float32(f) for k, f in enumerate(FACTORS)]
        reference = TensorHistogram(bins=2048, max_bins=4096)
        for batch in batches:
            reference.update(batch, None)
        histc = StoredHistogram("cpu", 2048, 4096, mode="histc")
        assert histc.integer
        _count(histc, batches)
        np.testing.assert_array_equal(histc.to_numpy().counts, reference.counts, err_msg=name)
    assert calls and len(calls) == len(activations) * len(FACTORS)  # one call per count: no parts below 2**31
