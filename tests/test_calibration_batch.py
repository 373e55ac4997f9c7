"""Calibration that depends on the recipe, not on memory (issue 37.1): the first calibration batch sets every
histogram's range whatever the memory budget, the sub-batch size or the device's free memory, so thresholds are
identical bit for bit across budgets — on the demo model's and a light ONNX ResNet-50's unbounded tensors (Conv, Add,
Relu outputs, whose range moves from image to image), on ONNX Runtime (CPU), on torch (CPU) and on CUDA (skipped
without a GPU). Before issue 37 the first *sub-batch* set the bin width: budgets of 8 and 64 MB moved most unbounded
tensors' entropy thresholds against 4096 MB."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from trtlab.quantization.histogram import HISTOGRAM_BINS, TensorHistogram, reference_bins
from trtlab.quantization.statistics import collect_statistics, sub_batch_size, _exposed_bytes_per_image
from trtlab.quantization.thresholds import compute_thresholds
from trtlab.quantization.variants import stats_tensors

BUDGETS_MB = (8, 64, 4096)
ALGORITHMS = ("entropy", "percentile", "minmax")
UNBOUNDED = ("Conv", "Add", "Sum", "Relu", "Mul", "Gemm", "MatMul")  # producers whose outputs have no fixed range
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


# -- helpers -----------------------------------------------------------------------------------------------------------
def _unbounded(model, tensors) -> list[str]:
    producer = {out: node.op_type for node in model.graph.node for out in node.output}
    return [t for t in tensors if producer.get(t) in UNBOUNDED]


def _sub_batches(model_path, tensors, budgets, batch=8) -> list[int]:
    model = onnx.load(str(model_path))
    inputs = {i.name for i in model.graph.input}
    per_image = _exposed_bytes_per_image(model, [t for t in tensors if t not in inputs])
    return [sub_batch_size(batch, per_image, b * 2**20) for b in budgets]


def _assert_identical(stats, reference, tensors):
    """Histograms equal to the count and to the bit (range, multiplier, max), hence every algorithm's thresholds."""
    for name in tensors:
        a, b = stats.tensors[name], reference.tensors[name]
        np.testing.assert_array_equal(a.counts, b.counts, err_msg=name)
        assert (a.range, a.scale, a.width, a.absmax, a.values) == (b.range, b.scale, b.width, b.absmax, b.values), name
    for algorithm in ALGORITHMS:
        mine, theirs = compute_thresholds(stats, algorithm), compute_thresholds(reference, algorithm)
        moved = [t for t in tensors if mine[t] != theirs[t]]
        assert not moved, f"{algorithm}: {len(moved)} of {len(tensors)} thresholds moved, e.g. {moved[:3]}"


def _image_tops(model, names, cache, indices) -> dict[str, np.ndarray]:
    """max |x| of each tensor in each image of `indices`, from a plain ONNX Runtime run (its NCHW outputs)."""
    import onnxruntime as ort

    from trtlab.data.batches import iter_batches
    from trtlab.graph.onnx_utils import with_outputs

    session = ort.InferenceSession(with_outputs(model, names).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    batch = next(iter_batches(cache, indices, len(indices)))
    values = session.run(names, {session.get_inputs()[0].name: batch.images})
    return {name: np.abs(v.reshape(len(v), -1)).max(axis=1) for name, v in zip(names, values)}


@pytest.fixture(scope="module")
def light_resnet(tmp_path_factory, session_workspace):
    """The onnx wheel's light ResNet-50 (real weights) with a dynamic batch — its Reshape to (1, 2048) made (-1, 2048)
    and the batch dimension of its input and output named, so sub-batches can differ — sanitized as variants are."""
    from trtlab.graph.sanitize import sanitize_model

    path = os.path.join(LIGHT, "light_resnet50.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not shipped by this onnx wheel")
    model = onnx.load(path)
    for value in list(model.graph.input[:1]) + list(model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    initializers = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Reshape":
            shape = numpy_helper.to_array(initializers[node.input[1]]).copy()
            shape[0] = -1
            initializers[node.input[1]].CopyFrom(numpy_helper.from_array(shape, node.input[1]))
    out = tmp_path_factory.mktemp("light") / "light_resnet50_dynamic.onnx"
    onnx.save(model, str(out))
    return sanitize_model(out, session_workspace)


@pytest.fixture(scope="module")
def torchvision_cache(demo_data, session_workspace):
    from trtlab.data.decode_cache import build_decode_cache

    return build_decode_cache(demo_data, "torchvision", session_workspace, progress=False)


def _elementwise_graph(path, cache, first: int):
    """A classifier-shaped graph of element-wise ops only (so every image's values are the same whatever the batch,
    on any backend): unbounded Mul/Add/Mul outputs of the photos, and `late` = Relu(x − c) with c the photos'
    element-wise max over the first `first` images — zero on the whole first calibration batch, not after; its
    output is the N×3 mean of their sum (a classifier's N×classes shape)."""
    from trtlab.data.batches import iter_batches

    crops = next(iter_batches(cache, cache.valid_indices[:first], first)).images
    ceiling = crops.max(axis=0, keepdims=True)
    gain = np.array([1.7, -2.3, 0.9], np.float32).reshape(1, 3, 1, 1)
    shift = np.array([0.25, 3.5, -1.0], np.float32).reshape(1, 3, 1, 1)
    nodes = [helper.make_node("Mul", ["input", "gain"], ["scaled"]),
             helper.make_node("Add", ["scaled", "shift"], ["shifted"]),
             helper.make_node("Mul", ["shifted", "input"], ["product"]),
             helper.make_node("Sub", ["input", "ceiling"], ["over"]),
             helper.make_node("Relu", ["over"], ["late"]),
             helper.make_node("Add", ["product", "late"], ["summed"]),
             helper.make_node("ReduceMean", ["summed"], ["logits"], axes=[2, 3], keepdims=0)]  # N×3 "logits"
    shape = ["N", 3, crops.shape[2], crops.shape[3]]
    graph = helper.make_graph(nodes, "elementwise", [helper.make_tensor_value_info("input", 1, shape)],
                              [helper.make_tensor_value_info("logits", 1, ["N", 3])],
                              [numpy_helper.from_array(a, n) for a, n in ((gain, "gain"), (shift, "shift"),
                                                                          (ceiling, "ceiling"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path, ["scaled", "shifted", "product", "late", "input"]


# -- the histogram: a value's bin depends on the value alone ---------------------------------------------------------
def test_a_values_bin_does_not_depend_on_the_batch_it_arrives_in():
    """Values just above the first range, on and around bin edges: counted one per batch (each batch growing the
    histogram to its own max), all in one batch, or in random groups — the same counts by the numpy reference, numba
    and torch. Before issue 37 the bins grown were ceil(max / width) in float64, one short of the float32 bin of
    the max at some edges, so a batch's max was clamped into its last bin there and counted one bin lower than in a
    batch with a larger max."""
    rng = np.random.default_rng(37)
    top = np.float32(2.718)
    first = (rng.random(5000) * top).astype(np.float32)
    first[0] = top
    probe = TensorHistogram()
    probe.start(float(top))
    edges = np.arange(HISTOGRAM_BINS + 1, 3 * HISTOGRAM_BINS, dtype=np.float32) / np.float32(probe.scale)
    later = np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(np.inf))])
    later = later[later > top]
    assert int(np.float32(top) * np.float32(probe.scale)) == HISTOGRAM_BINS - 1  # the first max: in the last bin
    counters = [None]
    try:
        from trtlab.quantization.histogram import cpu_counter

        counters.append(cpu_counter("numba"))
    except Exception:  # noqa: BLE001 - numba is optional: numpy is the reference
        pass
    groupings = {"one by one": [later[i:i + 1] for i in range(len(later))], "all at once": [later],
                 "random groups": np.array_split(rng.permutation(later), 37)}
    results = {}
    for counter in counters:
        for label, batches in groupings.items():
            hist = TensorHistogram()
            hist.update(first, counter)
            for batch in batches:
                hist.update(batch, counter)
            results[(label, counter is None)] = hist
    reference = results[("all at once", True)]
    np.testing.assert_array_equal(reference.counts[:HISTOGRAM_BINS], reference_bins(first, reference.scale,
                                                                                   HISTOGRAM_BINS))
    for key, hist in results.items():
        np.testing.assert_array_equal(hist.counts, reference.counts, err_msg=str(key))
        assert (hist.bins, hist.range, hist.absmax) == (reference.bins, reference.range, reference.absmax), key
    torch = pytest.importorskip("torch")
    from trtlab.quantization.statistics_torch import TorchHistogram

    on_torch = TorchHistogram("cpu", HISTOGRAM_BINS)
    on_torch.update(torch.from_numpy(first))
    for batch in groupings["one by one"]:
        on_torch.update(torch.from_numpy(batch))
    hist = on_torch.to_numpy()
    np.testing.assert_array_equal(hist.counts, reference.counts)


# -- ONNX Runtime (CPU) ----------------------------------------------------------------------------------------------
def _identical_across_budgets(path, cache, indices, budgets):
    """Statistics of the model at `path` under each memory budget, each identical to 4096 MB's, every unbounded
    tensor's bin width the first calibration batch's (8 images), not the first sub-batch's: (unbounded, stats,
    per-image tops of the first batch)."""
    model = onnx.load(str(path))
    tensors = stats_tensors(model)
    unbounded = _unbounded(model, tensors)
    stats = {b: collect_statistics(path, tensors, cache, indices, batch_size=8, progress=False,
                                   device="cpu", memory_budget_mb=b) for b in budgets}
    for budget in budgets:
        _assert_identical(stats[budget], stats[4096], tensors)
    tops = _image_tops(model, unbounded, cache, indices[:8])
    for name in unbounded:
        assert stats[8].tensors[name].width == tops[name].max() / HISTOGRAM_BINS, name
    return unbounded, stats, tops


def test_thresholds_do_not_depend_on_the_memory_budget_demo_model(demo_model, demo_cache):
    budgets = BUDGETS_MB + (160, 256)  # 256 MB: trtlab's default
    tensors = stats_tensors(onnx.load(str(demo_model)))
    assert _sub_batches(demo_model, tensors, budgets) == [1, 1, 8, 3, 4]  # 3: sub-batches of 3, 3, 2 images
    unbounded, stats, tops = _identical_across_budgets(demo_model, demo_cache, demo_cache.valid_indices[:20], budgets)
    assert len(unbounded) >= 20  # Conv outputs and Add outputs of EfficientNet-Lite0 (the Clip outputs stop at 6)
    assert sum(tops[t][0] < tops[t].max() for t in unbounded) >= len(unbounded) // 2  # one image would differ
    assert stats[8].range_images == 8 and "first pass over the first 8 images" in stats[8].counting
    assert "first pass" not in stats[4096].counting


def test_thresholds_do_not_depend_on_the_memory_budget_light_resnet50(light_resnet, torchvision_cache):
    sub_batches = _sub_batches(light_resnet, stats_tensors(onnx.load(str(light_resnet))), BUDGETS_MB)
    assert sub_batches[0] == 1 and sub_batches[-1] == 8 and len(set(sub_batches)) >= 2, sub_batches
    unbounded, _, _ = _identical_across_budgets(light_resnet, torchvision_cache,
                                                torchvision_cache.valid_indices[:12], BUDGETS_MB)
    assert len(unbounded) >= 40  # Relu outputs and residual sums of ResNet-50


def test_a_tensor_zero_on_the_first_batch_takes_its_range_from_the_first_image_where_it_is_not(demo_cache, tmp_path):
    path, tensors = _elementwise_graph(tmp_path / "elementwise.onnx", demo_cache, 8)
    indices = demo_cache.valid_indices[:20]
    stats = {b: collect_statistics(path, tensors, demo_cache, indices, batch_size=8, progress=False, device="cpu",
                                   memory_budget_mb=b) for b in (4, 16, 4096)}
    for budget in stats:
        _assert_identical(stats[budget], stats[4096], tensors)
    late = stats[4096].tensors["late"]
    tops = _image_tops(onnx.load(str(path)), ["late"], demo_cache, indices)["late"]
    assert tops[:8].max() == 0.0 and (tops[8:] > 0).sum() >= 2, tops  # zero on the first batch, not after
    first_nonzero = tops[np.flatnonzero(tops)[0]]
    assert late.width == first_nonzero / HISTOGRAM_BINS and late.absmax == tops.max()
    assert first_nonzero < tops.max()  # a later image's max would have given another width


def test_image_order_moves_entropy_thresholds_unless_the_first_batch_holds_every_image(demo_model, demo_cache):
    """What TensorRT's guide says of its own entropy calibrator: the calibration batch and the order of the images
    change the thresholds (the first batch sets the range). With one batch of all the images, the order cannot."""
    model = onnx.load(str(demo_model))
    tensors = stats_tensors(model)
    unbounded = _unbounded(model, tensors)
    indices = demo_cache.valid_indices[:16]
    run = {}
    for batch in (8, 16):
        for label, order in (("forward", indices), ("reversed", indices[::-1])):
            run[batch, label] = collect_statistics(demo_model, tensors, demo_cache, order, batch_size=batch,
                                                   progress=False, device="cpu")
    _assert_identical(run[16, "reversed"], run[16, "forward"], tensors)  # one batch: order-free, bit for bit
    forward, backward = (compute_thresholds(run[8, label], "entropy") for label in ("forward", "reversed"))
    moved = [t for t in unbounded if forward[t] != backward[t]]
    assert len(moved) >= len(unbounded) // 4, f"{len(moved)} of {len(unbounded)}"
    assert compute_thresholds(run[8, "forward"], "minmax") == compute_thresholds(run[8, "reversed"], "minmax")


def test_the_statistics_and_the_variant_record_the_first_batch(demo_model, demo_cache, session_workspace, tmp_path):
    from trtlab.quantization.recipe import Recipe
    from trtlab.quantization.statistics import CalibrationStats
    from trtlab.quantization.variants import _Int8Build, statistics_path

    indices = demo_cache.valid_indices[:6]
    paths = {batch: statistics_path(demo_model, demo_cache, indices, batch, session_workspace) for batch in (4, 8, 6)}
    assert paths[4] != paths[8] and paths[8] == paths[6]  # the batch is part of the key; 8 of 6 images is all 6
    stats = collect_statistics(demo_model, ["input"], demo_cache, indices, batch_size=4, progress=False, device="cpu")
    stats.save(tmp_path / "s.npz")
    assert stats.range_images == 4 and CalibrationStats.load(tmp_path / "s.npz").range_images == 4
    build = _Int8Build(demo_model, Recipe(calibration_batch=4), demo_cache, indices, session_workspace, None, False)
    assert build.calibration["range_images"] == 4 and build.calibration["batch"] == 4
    whole = _Int8Build(demo_model, Recipe(calibration_batch=32), demo_cache, indices, session_workspace, None, False)
    assert whole.calibration["range_images"] == 6 and whole.identity.key != build.identity.key


# -- torch (CPU here; the same code runs on CUDA) ---------------------------------------------------------------
def test_torch_path_thresholds_do_not_depend_on_the_memory_budget(demo_cache, tmp_path):
    """torch on the CPU runs the budget's sub-batches (1, 3 or 8 images per forward here); on an element-wise graph,
    whose values do not depend on the batch, the first-batch range pass and the counts are the ONNX Runtime path's."""
    pytest.importorskip("torch")
    path, tensors = _elementwise_graph(tmp_path / "elementwise.onnx", demo_cache, 8)
    indices = demo_cache.valid_indices[:20]
    budgets = (4, 16, 4096)
    assert _sub_batches(path, tensors, budgets) == [1, 3, 8]
    stats = {b: collect_statistics(path, tensors, demo_cache, indices, batch_size=8, progress=False,
                                   device="torch-cpu", memory_budget_mb=b) for b in budgets}
    for budget in budgets:
        _assert_identical(stats[budget], stats[4096], tensors)
    assert "first pass over the first 8 images" in stats[4].counting and "first pass" not in stats[4096].counting
    on_ort = collect_statistics(path, tensors, demo_cache, indices, batch_size=8, progress=False, device="cpu")
    _assert_identical(stats[4096], on_ort, tensors)


@pytest.mark.parametrize("mode", ["histc", "index_add"])
def test_several_calibration_batches_per_forward_give_the_histograms_of_one(demo_cache, tmp_path, monkeypatch, mode):
    """The streamed pass over forwards of 1, 2 and 5 calibration batches (4 images each; statistics_torch's GPU rule,
    here on the CPU): on an element-wise graph the histograms are bit for bit those of one batch per forward and of
    ONNX Runtime — growth and merges do not depend on the grouping, only the first batch sets the range."""
    torch = pytest.importorskip("torch")
    from trtlab.quantization import statistics_torch

    monkeypatch.setenv("TRTLAB_GPU_COUNT", mode)
    path, tensors = _elementwise_graph(tmp_path / "elementwise.onnx", demo_cache, 4)
    indices = demo_cache.valid_indices[:20]
    stats = {}
    for rows in (4, 8, 20):
        monkeypatch.setattr(statistics_torch, "_forward_rows", lambda device, job, rows=rows: rows)
        stats[rows] = collect_statistics(path, tensors, demo_cache, indices, batch_size=4, progress=False,
                                         device="torch-cpu")
        assert f"{rows} images per forward" in stats[rows].counting and "first pass" not in stats[rows].counting
        assert f"counted by '{mode}'" in stats[rows].counting and stats[rows].range_images == 4
    on_ort = collect_statistics(path, tensors, demo_cache, indices, batch_size=4, progress=False, device="cpu")
    for rows in (4, 8, 20):
        _assert_identical(stats[rows], on_ort, tensors)
    assert torch is not None


def test_gpu_forwards_hold_whole_calibration_batches_up_to_forward_images(monkeypatch):
    """statistics_torch's rule on a GPU (free memory planted): whole calibration batches up to FORWARD_IMAGES, no
    more than the images, as many as fit the share of free memory; fewer than one batch only where one does not fit."""
    torch = pytest.importorskip("torch")
    from trtlab.quantization import statistics_torch
    from trtlab.quantization.statistics import CalibrationPass

    def rows(batch, images, per_image, free):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
        job = CalibrationPass(None, "input", [], [], [per_image] if per_image else None, None,
                              np.arange(images), 1, min(batch, images))
        return statistics_torch._forward_rows(torch.device("cuda"), job)

    mb, gb = 2**20, 2**30
    assert statistics_torch.FORWARD_IMAGES == 64
    assert rows(8, 1000, 28 * mb, 40 * gb) == 64  # the demo model on a large GPU (the share is capped at 4 GiB)
    assert rows(12, 1000, 28 * mb, 40 * gb) == 60  # whole batches: five of 12
    assert rows(8, 20, 28 * mb, 40 * gb) == 24  # no more batches than the images make
    assert rows(8, 5, 28 * mb, 40 * gb) == 5  # fewer images than one batch: the batch is those images
    assert rows(8, 1000, 28 * mb, 2 * gb) == 16  # a quarter of 2 GiB holds 18 images: two batches
    assert rows(8, 1000, 28 * mb, 0.5 * gb) == 4  # not even one batch fits: smaller forwards (first-batch pass)
    assert rows(100, 1000, 28 * mb, 40 * gb) == 100  # a batch of more than FORWARD_IMAGES: one batch per forward
    assert rows(8, 1000, None, 40 * gb) == 64  # exposed sizes unknown to shape inference


def _cuda_visible() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not _cuda_visible(), reason="needs a CUDA GPU (the lead runs it on a lent H200)")


@requires_cuda
def test_cuda_thresholds_do_not_depend_on_the_memory_budget(demo_model, demo_cache):
    """On a GPU a forward holds whole calibration batches whatever the host budget: the demo
    model's thresholds are identical bit for bit across budgets, and the first batch sets the range."""
    model = onnx.load(str(demo_model))
    tensors = stats_tensors(model)
    indices = demo_cache.valid_indices[:20]
    stats = {b: collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=8, progress=False,
                                   device="cuda", memory_budget_mb=b) for b in BUDGETS_MB}
    assert all("24 images per forward" in s.counting for s in stats.values())  # the 20 images in whole batches
    for budget in BUDGETS_MB:
        _assert_identical(stats[budget], stats[4096], tensors)
    assert stats[8].range_images == 8


@requires_cuda
def test_cuda_first_batch_pass_when_a_batch_does_not_fit_the_gpu_share(demo_cache, tmp_path, monkeypatch):
    """Where one calibration batch's tensors do not fit the GPU share, smaller forwards run and a first pass takes
    the first batch's maxima: on an element-wise graph (values independent of the batch) the histograms are those of
    whole-batch forwards and of ONNX Runtime, bit for bit."""
    from trtlab.quantization import statistics_torch

    path, tensors = _elementwise_graph(tmp_path / "elementwise.onnx", demo_cache, 8)
    indices = demo_cache.valid_indices[:20]
    whole = collect_statistics(path, tensors, demo_cache, indices, batch_size=8, progress=False, device="cuda")
    exposed_per_image = 4 * 3 * 224 * 224 * 4  # the four exposed float32 tensors (the input comes from the batch)
    monkeypatch.setattr(statistics_torch, "GPU_MEMORY_CAP", int(3.5 * exposed_per_image))  # 3 images per forward
    small = collect_statistics(path, tensors, demo_cache, indices, batch_size=8, progress=False, device="cuda")
    assert "24 images per forward" in whole.counting and "3 images per forward" in small.counting
    assert "first pass over the first 8 images" in small.counting
    _assert_identical(small, whole, tensors)
    _assert_identical(whole, collect_statistics(path, tensors, demo_cache, indices, batch_size=8, progress=False,
                                                device="cpu"), tensors)
