"""The compiled histogram counter (trtlab/quantization/histogram_count.c): the same counts as numpy to the count —
on real activations, on growing/merging batches, on values sitting on bin edges — the lane flush, NaN/Inf, and
what happens without a compiler, with an unwritable cache or a counter that fails its self-test."""
from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from trtlab.quantization import native_counting
from trtlab.quantization.native_counting import NativeCounter, native_counter, numpy_bins
from trtlab.quantization.statistics import NonFiniteActivation, TensorHistogram

from test_calibration_speed import _assert_same, _batches


@pytest.fixture
def counter():
    found = native_counter()
    if found is None:
        pytest.skip("no C compiler here")
    return found


@pytest.fixture
def fresh_loader(monkeypatch, tmp_path):
    """native_counter() as on a machine where nothing was compiled yet, caching under tmp_path."""
    monkeypatch.setattr(native_counting, "_loaded", {})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(native_counting.ENV_SWITCH, raising=False)
    return tmp_path


def _light_resnet_activations():
    """Every Conv input of the onnx wheel's light ResNet-50 on a real photo (ReLU zeros, residual sums)."""
    import os

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


def test_counts_equal_numpy_on_real_activations(counter):
    activations = _light_resnet_activations()
    assert len(activations) > 40
    for values in activations:
        top = float(np.abs(values).max())
        for bins in (2048, 333):
            scale = float(np.float32(bins / top))
            counts, reported, finite = counter.count(values, scale, bins)
            assert finite and reported == top
            np.testing.assert_array_equal(counts, numpy_bins(values, scale, bins))


@pytest.mark.parametrize("bins,max_bins", [(2048, 32 * 2048), (64, 256), (100, 160)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_histograms_equal_numpy_through_growth_and_merges(counter, bins, max_bins, seed):
    batches = _batches(seed)
    batches[3][0, 0] = np.float32(np.abs(batches[1]).max())  # on the upper edge of an earlier range
    compiled, numpy = TensorHistogram(bins=bins, max_bins=max_bins), TensorHistogram(bins=bins, max_bins=max_bins)
    for batch in batches:
        compiled.update(batch)
        numpy.update(batch, native=False)
    _assert_same(compiled, numpy)


def test_values_on_bin_edges_subnormals_and_signed_zeros(counter):
    scale = float(np.float32(2048 / 3.0))
    edges = np.arange(2049, dtype=np.float32) / np.float32(scale)
    near = np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(np.inf))])
    values = np.concatenate([near, -near, [0.0, -0.0, 1e-45, -1e-40, 3.0, 3.0000002, 1e30]]).astype(np.float32)
    counts, top, finite = counter.count(values, scale, 2048)
    assert finite and top == np.float32(1e30)
    np.testing.assert_array_equal(counts, numpy_bins(values, scale, 2048))
    assert counts.sum() == values.size


def _build(tmp_path, *defines) -> NativeCounter:
    library = tmp_path / f"counter{'_'.join(d.strip('-D') for d in defines)}.so"
    subprocess.run([native_counting._compiler(), *native_counting.FLAGS, *defines, "-o", str(library),
                    str(native_counting.SOURCE)], check=True)
    return NativeCounter(library)


@pytest.mark.parametrize("defines", [("-DTRTLAB_LANE_FLUSH=1000",), ("-DTRTLAB_NO_AVX2",),
                                     ("-DTRTLAB_NO_AVX2", "-DTRTLAB_LANE_FLUSH=999")])
def test_every_build_of_the_loop_counts_the_same(counter, tmp_path, defines):
    """The uint32 lanes are emptied every 2^31 values (here: every ~1000, to test it); the portable loop (no AVX2:
    zeros are not dropped before counting) counts what the AVX2 one does — on ReLU-like data full of zeros, odd
    lengths (vector tails) and values on the cap."""
    rng = np.random.default_rng(3)
    values = np.maximum(rng.normal(0, 1, 123_457), 0).astype(np.float32)
    values[::7] = -values[::7]
    values[5] = np.abs(values).max()
    built = _build(tmp_path, *defines)
    for scale_bins in (2048, 100):
        scale = float(np.float32(scale_bins / np.abs(values).max()))
        for part in (values, values[:13], values[1:1003]):
            expected = numpy_bins(part, scale, scale_bins)
            np.testing.assert_array_equal(built.count(part, scale, scale_bins)[0], expected)
            np.testing.assert_array_equal(counter.count(part, scale, scale_bins)[0], expected)
    with_nan = values.copy()
    with_nan[100_000] = np.nan
    assert not built.count(with_nan, 1.0, 2048)[2] and not counter.count(with_nan, 1.0, 2048)[2]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused(counter, bad):
    hist = TensorHistogram()
    hist.update(np.ones(10, np.float32))
    before = hist.counts.copy()
    values = np.ones(5000, np.float32)
    values[4321] = bad
    with pytest.raises(NonFiniteActivation, match="NaN or Inf"):
        hist.update(values)
    np.testing.assert_array_equal(hist.counts, before)  # nothing of the refused batch is counted


def test_the_library_is_compiled_once_into_the_cache(fresh_loader, caplog):
    with caplog.at_level(logging.INFO, logger="trtlab.quantization.native_counting"):
        first = native_counter()
    if first is None:
        pytest.skip("no C compiler here")
    assert first.path.is_relative_to(fresh_loader / "cache" / "trtlab" / "native")
    assert "compiled the calibration histogram counter" in caplog.text
    native_counting._loaded.clear()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="trtlab.quantization.native_counting"):
        again = native_counter()
    assert again.path == first.path and "compiled" not in caplog.text  # found, not rebuilt
    assert sorted(p.name for p in first.path.parent.iterdir()) == [first.path.name, first.path.name + ".sha256"]


def test_a_damaged_library_in_the_cache_is_built_again(fresh_loader):
    import os
    import sys

    first = native_counter()
    if first is None:
        pytest.skip("no C compiler here")
    size = first.path.stat().st_size
    damaged = first.path.with_name("damaged")
    damaged.write_bytes(first.path.read_bytes()[:1000])  # cut short (a new file: this process maps the old one)
    damaged.replace(first.path)
    # a fresh process (this one already has the library loaded under that name)
    check = ("import numpy as np; from trtlab.quantization.native_counting import native_counter, numpy_bins; "
             "c = native_counter(); v = np.arange(10, dtype=np.float32); "
             "assert (c.count(v, 1.0, 16)[0] == numpy_bins(v, 1.0, 16)).all(); print(c.path)")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(first.path) and first.path.stat().st_size == size


def test_an_unwritable_cache_falls_back_to_the_temp_folder(fresh_loader, monkeypatch):
    if native_counting._compiler() is None:
        pytest.skip("no C compiler here")
    blocker = fresh_loader / "cache"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setattr(native_counting.tempfile, "gettempdir", lambda: str(fresh_loader / "tmp"))
    counter = native_counter()
    assert counter is not None and counter.path.is_relative_to(fresh_loader / "tmp")


def test_without_a_compiler_numpy_counts_and_says_so_once(fresh_loader, monkeypatch, caplog):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", str(fresh_loader))  # no cc, gcc or clang on it
    with caplog.at_level(logging.WARNING, logger="trtlab.quantization"):
        assert native_counter() is None
        assert native_counter() is None
        hist = TensorHistogram()
        hist.update(np.arange(100, dtype=np.float32))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no C compiler" in warnings[0] and "install gcc" in warnings[0]
    assert hist.values == 100 and hist.counts.sum() == 100


def test_a_counter_that_fails_its_self_test_is_not_used(fresh_loader, monkeypatch, caplog):
    if native_counting._compiler() is None:
        pytest.skip("no C compiler here")

    class OffByOne(NativeCounter):
        def count(self, values, scale, bins):
            counts, top, finite = super().count(values, scale, bins)
            return np.roll(counts, 1), top, finite

    monkeypatch.setattr(native_counting, "NativeCounter", OffByOne)
    with caplog.at_level(logging.WARNING, logger="trtlab.quantization.native_counting"):
        assert native_counter() is None
    assert "counted" in caplog.text and "numpy counts instead" in caplog.text


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv(native_counting.ENV_SWITCH, "0")
    assert native_counter() is None


def test_exposed_slots_do_not_overlap_and_ask_for_huge_pages():
    from trtlab.quantization.exposed_slots import ExposedSlots

    slots = ExposedSlots([("a", (3, 5, 5)), ("b", (7,)), ("c", (2, 2))], rows=4)
    try:
        views = slots.views(0, 4) + slots.views(1, 3)
        for k, view in enumerate(views):
            view[...] = k
        for k, view in enumerate(views):
            assert (view == k).all()
        assert views[0].ctypes.data % 64 == 0 and views[1].ctypes.data % 64 == 0
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
        if thp.exists() and "[never]" not in thp.read_text():
            assert slots.huge_pages
    finally:
        del views
        slots.close()
