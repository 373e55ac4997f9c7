"""Calibration reads the exposed tensors in ONNX Runtime's blocked layout (quantization/exposure_ort.py): the
histograms are those of the ordinary NCHW outputs to the count — with padded channels that are zeros (taken out of
bin 0) and with padded channels that are not (counted from an exact NCHW copy) — and wherever the layout cannot be
settled, the ordinary outputs are counted and the log says why."""
from __future__ import annotations

import logging
import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtlab.quantization import exposure_ort
from trtlab.quantization.exposure_ort import BLOCK_SIZES, Blocked, ExposedRunner, padding_view, to_nchw
from trtlab.quantization.histogram import TensorHistogram

from test_calibration_speed import _assert_same


class _Batch:
    def __init__(self, images):
        self.images, self.count = images, len(images)


def _to_blocked(values: np.ndarray, block: int) -> np.ndarray:
    """NCHW → ONNX Runtime's NCHWc (channels padded with zeros to a multiple of `block`), as an N×Cpad×H×W array."""
    n, c, h, w = values.shape
    padded = -(-c // block) * block
    full = np.zeros((n, padded, h, w), values.dtype)
    full[:, :c] = values
    return np.ascontiguousarray(full.reshape(n, padded // block, block, h, w).transpose(0, 1, 3, 4, 2)).reshape(
        n, padded, h, w)


@pytest.mark.parametrize("block", [8, 16])
@pytest.mark.parametrize("channels", [12, 16, 20, 40])
def test_the_blocked_layout_round_trips_and_its_padding_is_located(block, channels):
    values = np.random.default_rng(channels).standard_normal((3, channels, 5, 7)).astype(np.float32) + 10
    blocked = _to_blocked(values, block)
    layout = Blocked(channels, block)
    np.testing.assert_array_equal(to_nchw(blocked, layout), values)
    padding = padding_view(blocked, layout)
    padded = blocked.shape[1] - channels
    if padded == 0:
        assert padding is None
    else:  # exactly the zeros: every other value is ≥ 10 - a few
        assert padding.size == 3 * padded * 5 * 7 and not np.any(padding)
        assert np.count_nonzero(blocked) == values.size


def _photo_batch(size: int = 32) -> np.ndarray:
    from skimage import data, transform

    photos = [data.chelsea(), data.astronaut(), data.coffee()]
    crops = [transform.resize(p, (size, size), anti_aliasing=True).astype(np.float32) for p in photos]
    return ((np.stack(crops) - 0.45) / 0.225).transpose(0, 3, 1, 2).copy()


def _conv_chain(activation: str, widths=(12, 20, 20, 36)):
    """Conv → activation layers whose widths are not multiples of ONNX Runtime's block: padded channels."""
    rng = np.random.default_rng(3)
    nodes, initializers, previous, inputs = [], [], "x", 3
    for k, width in enumerate(widths):
        weight = (rng.standard_normal((width, inputs, 3, 3)) * 0.2).astype(np.float32)
        bias = (rng.standard_normal(width) * 0.1).astype(np.float32)
        initializers += [numpy_helper.from_array(weight, f"w{k}"), numpy_helper.from_array(bias, f"b{k}")]
        nodes += [helper.make_node("Conv", [previous, f"w{k}", f"b{k}"], [f"conv{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node(activation, [f"conv{k}"], [f"act{k}"])]
        previous, inputs = f"act{k}", width
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 32, 32])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _handed_over_blocked(model, names: list[str]) -> set[str]:
    """The exposed tensors that ONNX Runtime, on this CPU, computes blocked and copies to NCHW only to hand them over:
    in the graph it optimizes (written here by onnxruntime itself, not through trtlab) each is the output of a
    ReorderOutput (NCHWc → NCHW) that no node reads. Which tensors those are is ONNX Runtime's choice and differs by
    CPU: the block is 8 with AVX2 and 16 with AVX-512, a Conv whose input channels are not a multiple of it reads
    NCHW (so the tensor before it is reordered for that Conv, not only for the output), and where MLAS has no NCHWc
    kernels nothing is blocked. trtlab's exposure plan must take exactly these blocked, the others as NCHW."""
    import onnxruntime as ort

    from trtlab.graph.onnx_utils import with_outputs

    with tempfile.TemporaryDirectory(prefix="trtlab-test-ort-") as folder:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # its warning that the graph is for this machine only: that is the point
        options.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
        ort.InferenceSession(with_outputs(model, names).SerializeToString(), options,
                             providers=["CPUExecutionProvider"])
        graph = onnx.load(options.optimized_model_filepath).graph
    read = {name for node in graph.node for name in node.input}
    return {node.output[0] for node in graph.node
            if node.domain == "com.microsoft.nchwc" and node.op_type == "ReorderOutput"
            and node.output[0] in names and node.output[0] not in read
            and not any(a.name == "channels_last" and a.i for a in node.attribute)}


def _assert_plan_follows_onnx_runtime(runner: ExposedRunner, model, names: list[str]) -> set[str]:
    """The runner (after its first sub-batch) reads blocked exactly the tensors ONNX Runtime hands over blocked,
    with one block size it checked, and says so; the set is returned."""
    chosen = _handed_over_blocked(model, names)
    assert set(runner.layouts) == chosen, (sorted(runner.layouts), sorted(chosen))
    if not chosen:
        assert runner.describe() == "ONNX Runtime"
        return chosen
    blocks = {layout.block for layout in runner.layouts.values()}
    assert len(blocks) == 1 and blocks <= set(BLOCK_SIZES), blocks
    assert runner.describe() == f"ONNX Runtime, {len(chosen)} tensors read as NCHW{blocks.pop()}c"
    return chosen


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid"])
def test_blocked_outputs_give_the_histograms_of_the_nchw_outputs(activation, caplog):
    model = _conv_chain(activation)
    names = ["act0", "act1", "act2"]
    images = _photo_batch()
    with caplog.at_level(logging.INFO, logger="trtlab.quantization.exposure_ort"):
        runner = ExposedRunner(model, "x", names, threads=2)
        blocked = [runner(_Batch(images[:2]))[1], runner(_Batch(images[2:]))[1]]
    chosen = _assert_plan_follows_onnx_runtime(runner, model, names)
    assert ("no reorder copies" in caplog.text) == bool(chosen)
    plain = ExposedRunner(model, "x", names, threads=2)
    plain._give_up("the reference")
    expected = [plain(_Batch(images[:2]))[1], plain(_Batch(images[2:]))[1]]
    for name_index, name in enumerate(names):  # two sub-batches, so the second one counts at the first one's width
        through_blocked, through_nchw = TensorHistogram(bins=256), TensorHistogram(bins=256)
        for got, want in zip(blocked, expected):
            values, padding_zeros = got[name_index]
            through_blocked.update(values, None, padding_zeros)
            through_nchw.update(want[name_index][0], None)
        _assert_same(through_blocked, through_nchw)
    for name, (values, padding_zeros) in zip(names, blocked[0]):  # the first sub-batch: 2 images of 32 × 32
        channels = expected[0][names.index(name)][0].shape[1]
        layout = runner.layouts.get(name)
        padded = -(-channels // layout.block) * layout.block if layout else channels
        if activation == "Relu" and padded > channels:  # ReLU(0 · w + 0) = 0: the padded lanes, out of bin 0
            assert values.shape == (2, padded, 32, 32) and padding_zeros == 2 * (padded - channels) * 32 * 32
        else:  # NCHW: ONNX Runtime's own output, a blocked one with nothing padded, or one whose padded lanes are
            # not zeros (sigmoid(0) = 0.5) copied back exactly
            assert values.shape == (2, channels, 32, 32) and padding_zeros == 0


def test_where_no_block_size_fits_the_ordinary_outputs_are_counted_and_the_log_says_why(monkeypatch, caplog):
    monkeypatch.setattr(exposure_ort, "BLOCK_SIZES", (3,))
    model = _conv_chain("Relu")
    with caplog.at_level(logging.INFO, logger="trtlab.quantization.exposure_ort"):
        runner = ExposedRunner(model, "x", ["act0", "act1"], threads=2)
        _, outputs = runner(_Batch(_photo_batch()))
    assert runner.describe() == "ONNX Runtime"
    assert "no single NCHWc block size reproduces" in caplog.text
    assert [v.shape[1] for v, _ in outputs] == [12, 20] and [z for _, z in outputs] == [0, 0]


def test_the_demo_model_calibrates_to_the_same_statistics_either_way(demo_model, demo_cache, monkeypatch):
    """EfficientNet-Lite0's 60 tensors: blocked exposure and the ordinary NCHW outputs give the same histograms."""
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.variants import stats_tensors

    tensors = stats_tensors(onnx.load(str(demo_model)))
    indices = demo_cache.valid_indices[:10]
    blocked = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=4, progress=False,
                                 device="cpu")
    model = onnx.load(str(demo_model))
    chosen = _handed_over_blocked(model, [t for t in tensors if t not in {i.name for i in model.graph.input}])
    assert blocked.counting.startswith(f"ONNX Runtime, {len(chosen)} tensors read as NCHW" if chosen
                                       else "ONNX Runtime, "), (len(chosen), blocked.counting)
    monkeypatch.setattr(ExposedRunner, "_open_blocked", lambda self, optimized, threads: None)
    plain = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=4, progress=False, device="cpu")
    assert "read as" not in plain.counting
    for tensor in tensors:
        _assert_same(blocked.tensors[tensor], plain.tensors[tensor])


def _unreadable(monkeypatch):
    def broken(self, optimized, threads):
        raise onnx.checker.ValidationError("unreadable")

    monkeypatch.setattr(ExposedRunner, "_open_blocked", broken)
    return "ValidationError: unreadable"


def _unwritable(monkeypatch):
    from trtlab.core import ort_session as sessions

    real = sessions.ort_session

    def no_room(model, *args, optimized_model_path=None, **kwargs):
        if optimized_model_path is not None:
            raise OSError(28, "ONNX Runtime could not write the optimized model", optimized_model_path)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(sessions, "ort_session", no_room)
    return "could not be written"


@pytest.mark.parametrize("failure", [_unreadable, _unwritable])
def test_where_the_optimized_graph_cannot_be_written_or_read_the_ordinary_outputs_are_counted(failure, monkeypatch,
                                                                                              caplog):
    said = failure(monkeypatch)
    with caplog.at_level(logging.INFO, logger="trtlab.quantization.exposure_ort"):
        runner = ExposedRunner(_conv_chain("Relu"), "x", ["act1"], threads=2)
        _, outputs = runner(_Batch(_photo_batch()))
    assert runner.describe() == "ONNX Runtime" and said in caplog.text
    assert outputs[0][0].shape == (3, 20, 32, 32) and outputs[0][1] == 0


@pytest.mark.parametrize("name", ["resnet50", "inception_v1", "squeezenet", "shufflenet"])
def test_real_graphs_give_the_same_histograms_through_the_blocked_layout(name, tmp_path):
    """The onnx wheel's light models (pooling, concatenations, grouped convolutions, residual sums): every tensor
    calibration exposes has the same histogram read blocked as read from ONNX Runtime's NCHW outputs."""
    import os

    import onnx.backend.test

    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.variants import stats_tensors

    light = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "light", f"light_{name}.onnx")
    model = onnx.load(str(sanitize_model(light, tmp_path)))
    initializers = {i.name for i in model.graph.initializer}
    data_input = next(i for i in model.graph.input if i.name not in initializers)
    names = [t for t in stats_tensors(model) if t != data_input.name]
    fixed = data_input.type.tensor_type.shape.dim[0].dim_value  # 0 where the batch is free
    batch = _photo_batch(224)[:fixed or 2]
    blocked = ExposedRunner(model, data_input.name, names, threads=2, fixed_batch=fixed)
    plain = ExposedRunner(model, data_input.name, names, threads=2)
    plain._give_up("the reference")
    got, want = blocked(_Batch(batch))[1], plain(_Batch(batch))[1]
    _assert_plan_follows_onnx_runtime(blocked, model, names)  # shufflenet, on AVX-512: none blocked
    for (values, padding_zeros), (reference, _) in zip(got, want):
        through_blocked, through_nchw = TensorHistogram(), TensorHistogram()
        through_blocked.update(values, None, padding_zeros)
        through_nchw.update(reference, None)
        _assert_same(through_blocked, through_nchw)
