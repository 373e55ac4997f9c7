"""The A/B at the GPU's speed (issue 38), what runs on the CPU here and on CUDA where there is one (`test_cuda_*`,
skipped without; the lead runs them on a lent H200 with bench/bench_ab.py's prepared assets):

- Q/DQ one kernel each: the one-kernel formulas equal the plain ops bit for bit on every Q/DQ of the demo model's
  INT8 variants and of the light ResNet-50 / Inception graphs (the DequantizeLinear multiply runs on the CPU too;
  the QuantizeLinear kernel's steps as torch ops here, the Triton kernel itself on CUDA);
- calibration counted in device stores (statistics_stream) equals the numpy reference to the count, and the
  streamed pass equals statistics_torch's own loop;
- crops read straight into the runner's buffers, each row's checksum checked once per process and file state;
- the torch runner's batches streamed through its ring, padded on CUDA; batch_size='auto'; torch's CPU threads;
- a failed parallel worker loses nothing, said in one line;
- on CUDA: a CUDA graph replay per batch gives the eager run's logits bit for bit, the fused Q/DQ the plain ops'
  logits, the streamed calibration the loop's histograms.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

from trtlab.data.demo import DEMO_PREPROCESS, demo_split  # noqa: E402

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the lead runs it on a "
                                                                         "lent H200)")
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


# -- Q/DQ one kernel each ----------------------------------------------------------------------------------------
def _light_qdq(name: str, workspace: Path, float_path: str):
    """The light graph `name` quantized by trtlab's placement on `float_path`, each activation's scale its max |x|
    on a random image / 127 (so values spread over the whole int8 range, ties and saturation included)."""
    from trtlab.backends.gpu.graph_module import convert_onnx
    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.insertion import quantize_graph
    from trtlab.quantization.placement import DEFAULT_RULES, plan_quantization

    model = onnx.load(str(sanitize_model(LIGHT / f"{name}.onnx", workspace)))
    plan = plan_quantization(model, (), DEFAULT_RULES, int8_float_path=float_path)
    x = np.random.default_rng(3).normal(0, 1, (1, 3, 224, 224)).astype(np.float32)  # a fixed batch of one
    with torch.inference_mode():
        traced = convert_onnx(model).trace(torch.from_numpy(x))
    scales = {t: float(max(traced[t].abs().max().item(), 1e-6) / 127) if t in traced else 0.05
              for t in plan.activations}
    return quantize_graph(model, plan, scales, float_path).model, x


@pytest.fixture(scope="module")
def assets(request):
    """{'model': the demo FP32 model, 'demo-fp16path' / 'demo-fp32path': its INT8 variants (calibrated; the default
    FP16 float path and the FP32 one), 'cache': a decode cache of the demo photos}: from `python bench/bench_backends.py
    prepare`'s folder (.devcarry/bench_backends, or $TRTLAB_GPU_ASSETS) where it exists — the GPU machine has no demo
    packages —, else made here from the demo fixtures."""
    import json

    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import DECODED, DecodeCache
    from trtlab.data.preprocess import get_preprocess

    folder = Path(os.environ.get("TRTLAB_GPU_ASSETS") or Path(__file__).resolve().parents[1] / ".devcarry" /
                  "bench_backends")
    if (folder / "manifest.json").exists():
        manifest = json.loads((folder / "manifest.json").read_text())
        crops = np.load(folder / "crops.npy")
        cache = DecodeCache(folder, Dataset("demo-crops", [f"crop{k}.png" for k in range(len(crops))]),
                            get_preprocess(manifest["preprocess"]), crops, np.full(len(crops), DECODED, np.int8))
        return {"model": folder / "fp32.onnx", "demo-fp16path": folder / "int8-fp16path.onnx",
                "demo-fp32path": folder / "int8.onnx", "cache": cache}
    from trtlab.quantization.variants import Recipe, build_variant

    model, cache = request.getfixturevalue("demo_model"), request.getfixturevalue("demo_cache")
    workspace = request.getfixturevalue("session_workspace")
    split = demo_split(cache.dataset)
    out = {"model": model, "cache": cache}
    for label, recipe in (("demo-fp16path", Recipe(algorithm="minmax", calibration_images=6)),
                          ("demo-fp32path", Recipe(algorithm="entropy", calibration_images=6,
                                                   high_precision="fp32"))):
        out[label] = build_variant(model, recipe, cache, split.calibration, workspace, progress=False).model_path
    return out


@pytest.fixture(scope="module")
def qdq_graphs(assets, tmp_path_factory):
    """(name, Q/DQ model, float32 input) for the demo model's INT8 variants and light ResNet-50 (FP16 float path) /
    Inception v1 (FP32)."""
    from trtlab.data.preprocess import normalize_batch

    cache = assets["cache"]
    images = normalize_batch(np.asarray(cache.crops[cache.valid_indices[:4]]), cache.preprocess)
    graphs = [(label, onnx.load(str(assets[label])), images) for label in ("demo-fp16path", "demo-fp32path")]
    workspace = tmp_path_factory.mktemp("light-qdq")
    # Inception v1 on the FP32 float path: its FP16 LRN is a GPU-only op in torch (no FP16 pooling on the CPU)
    for name, float_path in (("light_resnet50", "fp16"), ("light_inception_v1", "fp32")):
        model, x = _light_qdq(name, workspace, float_path)
        graphs.append((name, model, x))
    return graphs


def _qdq_steps(module):
    return [s for s in module.steps if s.label.endswith(("(QuantizeLinear)", "(DequantizeLinear)"))]


def _plain_and_fused(model, x, device="cpu"):
    """(every tensor of the plain-ops module, the fused module's Q/DQ steps, the plain module's) on `x`."""
    from trtlab.backends.gpu.graph_module import convert_onnx

    plain, fused = convert_onnx(model, fused_qdq=False).to(device), convert_onnx(model, fused_qdq=True).to(device)
    with torch.inference_mode():
        env = plain.trace(torch.from_numpy(x).to(device))
    return env, plain, fused


def test_qdq_one_kernel_formulas_equal_the_plain_ops_on_every_qdq_of_demo_and_light_models(qdq_graphs):
    """Every QuantizeLinear: the Triton kernel's steps (qdq_kernel.quantize_formula) give the plain ops' integers
    bit for bit, given the plain graph's own input to that node; every DequantizeLinear: the fused module's one
    multiply gives the plain ops' floats bit for bit. Ties, saturation, FP16 scales, both float paths."""
    from trtlab.backends.gpu.ops_quant import INTEGER_RANGES
    from trtlab.backends.gpu.qdq_kernel import quantize_formula

    counted = {}
    for name, model, x in qdq_graphs:
        env, plain, fused = _plain_and_fused(model, x)
        nodes = {n.name: n for n in model.graph.node}
        quantize = dequantize = fp16 = 0
        for plain_step, fused_step in zip(_qdq_steps(plain), _qdq_steps(fused)):
            node = nodes[plain_step.label.split("'")[1]]
            args = [env[i] if i in env else plain.constant(i) for i in node.input]
            expected = env[node.output[0]]
            with torch.inference_mode():
                if node.op_type == "QuantizeLinear":
                    zero = args[2] if len(args) > 2 else None
                    offset = float(zero.reshape(-1)[0]) if zero is not None else 0.0
                    low, high = INTEGER_RANGES[3 if expected.dtype == torch.int8 else 2]
                    got = quantize_formula(args[0], args[1], offset, args[1].dtype, low, high, expected.dtype)
                    quantize += 1
                    fp16 += args[1].dtype == torch.float16
                else:
                    got = fused_step.fn(*args)
                    dequantize += 1
            assert got.dtype == expected.dtype and torch.equal(got, expected), (name, node.name)
        counted[name] = (quantize, dequantize, fp16)
    assert all(q >= 20 and d >= 20 for q, d, _ in counted.values()), counted
    assert counted["demo-fp16path"][2] >= 20 and counted["demo-fp32path"][2] == 0, counted


def test_the_triton_kernel_under_tritons_interpreter_equals_the_plain_ops(qdq_graphs, tmp_path):
    """The QuantizeLinear kernel itself (qdq_triton), run by Triton's interpreter on the CPU (numpy's IEEE division
    standing in for the GPU's div.rn), on every Q of the demo and light graphs: the plain ops' integers bit for bit.
    Needs Triton (Linux CUDA machines have it with torch); the GPU's own run: test_cuda_quantize_kernel_*."""
    pytest.importorskip("triton")
    import subprocess
    import sys

    from trtlab.backends.gpu.ops_quant import INTEGER_RANGES

    cases = []
    for name, model, x in qdq_graphs:
        env, plain, _ = _plain_and_fused(model, x)
        for node in (n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in env):
            scale = plain.constant(node.input[1])
            expected = env[node.output[0]]
            low, high = INTEGER_RANGES[3 if expected.dtype == torch.int8 else 2]
            cases.append((env[node.input[0]].contiguous(), scale, low, high, expected))
    torch.save(cases, tmp_path / "cases.pt")
    script = f"""
import torch
from trtlab.backends.gpu.qdq_triton import quantize_kernel
cases = torch.load({str(tmp_path / "cases.pt")!r})
bad = 0
for x, scale, low, high, expected in cases:
    out = torch.empty(x.shape, dtype=expected.dtype)
    half = scale.dtype == torch.float16
    quantize_kernel[(-(-x.numel() // 1024),)](x, scale.reshape(1), out, x.numel(), float(low), float(high), 0.0,
                                              HALF=half, X_TO_HALF=half and x.dtype == torch.float32, BLOCK=1024)
    bad += not torch.equal(out, expected)
print(len(cases), bad)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    checked, bad = map(int, done.stdout.split())
    assert checked >= 80 and bad == 0, (checked, bad)


# -- calibration counted in device stores -------------------------------------------------------------------------
def _batches(seed: int):
    """test_calibration_speed's batches: 8 of 3×4000, two all-zero first, ReLU-like halves, a far outlier."""
    from test_calibration_speed import _batches as batches

    return batches(seed, count=8, size=(3, 4000), scales=(0.0, 0.0, 0.5, 1.0, 4.0, 2.0, 300.0, 9.0))


@pytest.mark.parametrize("bins,max_bins", [(2048, 32 * 2048), (64, 256), (100, 160)])
@pytest.mark.parametrize("seed", [0, 1])
def test_device_store_counts_equal_the_numpy_reference(bins, max_bins, seed):
    """Zero batches before the first non-zero one, growth, merges past the cap, a value on a batch's upper edge:
    prepare + count give TensorHistogram's numpy reference, state and counts."""
    from trtlab.quantization.histogram import TensorHistogram
    from trtlab.quantization.statistics_stream import StoredHistogram

    batches = _batches(seed)
    batches[4][0, 0] = np.float32(np.abs(batches[2]).max())
    reference = TensorHistogram(bins=bins, max_bins=max_bins)
    stored = StoredHistogram("cpu", bins, max_bins)
    for batch in batches:
        reference.update(batch, None)
        stored.prepare(batch.size, float(np.abs(batch).max()))
        stored.count(torch.from_numpy(batch))
    got = stored.to_numpy()
    assert (got.bins, got.values, got.range, got.absmax, got.scale, got.width) == \
        (reference.bins, reference.values, reference.range, reference.absmax, reference.scale, reference.width)
    np.testing.assert_array_equal(got.counts, reference.counts)
    assert reference.bins < max_bins or max_bins == 32 * 2048  # the small caps did merge


def test_streamed_calibration_equals_the_loop_on_the_demo_model(assets, monkeypatch):
    """torch on the CPU, one forward per calibration batch of 8: the streamed pass (device stores, the last short
    batch counted on its real rows) gives statistics_torch's loop's histograms to the count."""
    from trtlab.quantization import statistics_torch
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.variants import stats_tensors

    demo_model, demo_cache = assets["model"], assets["cache"]
    tensors = stats_tensors(onnx.load(str(demo_model)))
    indices = demo_cache.valid_indices[:20]
    run = {}
    for streamed in (True, False):
        monkeypatch.setattr(statistics_torch, "STREAMED", streamed)
        run[streamed] = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=8, progress=False,
                                           device="torch-cpu", memory_budget_mb=4096)
    assert "forwards by the eager interpreter" in run[True].counting and "eager" not in run[False].counting
    for name in tensors:
        a, b = run[True].tensors[name], run[False].tensors[name]
        assert (a.bins, a.values, a.absmax, a.scale) == (b.bins, b.values, b.absmax, b.scale), name
        np.testing.assert_array_equal(a.counts, b.counts)


# -- crops read once, checked once -------------------------------------------------------------------------------
def test_crops_are_read_into_given_buffers_and_each_row_checked_once_per_file_state(demo_data, tmp_path,
                                                                                     monkeypatch):
    from trtlab.data import decode_files
    from trtlab.data.batches import iter_batches
    from trtlab.data.decode_cache import build_decode_cache

    cache = build_decode_cache(demo_data, "tf-lite", tmp_path, progress=False)
    reference = np.asarray(cache.crops.base[cache.valid_indices]).copy()
    checked = []
    real = decode_files.row_checksum
    monkeypatch.setattr(decode_files, "row_checksum", lambda row: checked.append(1) or real(row))

    def read_all(opened):
        buffers = []

        def into(shape):
            buffers.append(np.zeros(shape, np.uint8))
            return buffers[-1]
        batches = list(iter_batches(opened, None, 8, fixed_batch=8, crops=True, into=into))
        assert all(batch.images is buffer for batch, buffer in zip(batches, buffers))  # read where asked
        return np.concatenate([b.images[:b.count] for b in batches]), batches

    images, batches = read_all(cache)
    np.testing.assert_array_equal(images, reference)
    last = batches[-1]
    assert last.images.shape[0] == 8 and (last.images[last.count:] == last.images[last.count - 1]).all()
    # decoded by this process just now, yet checked on their first read (another program may have written the file
    # since), and only then: a second read of the same file state checks nothing
    assert len(checked) >= len(reference)
    checked.clear()
    read_all(cache)
    assert not checked
    fresh = tmp_path / "copy"
    import shutil

    shutil.copytree(cache.folder.parent.parent, fresh)  # another file: its rows are checked on first read, once
    copied = build_decode_cache(demo_data, "tf-lite", fresh, progress=False)
    checked.clear()
    read_all(copied)
    first = len(checked)
    assert first >= len(reference)
    checked.clear()
    read_all(copied)
    read_all(build_decode_cache(demo_data, "tf-lite", fresh, progress=False))  # opened again, file unchanged
    assert len(checked) <= decode_files.SAMPLE_ROWS  # only the opening's sample
    # a row damaged on disk (the file changes): found where it is read into the buffer, decoded again
    row = int(copied.valid_indices[3])
    with open(copied.folder / "crops.u8", "r+b") as fh:
        fh.seek(row * reference[0].size)
        fh.write(bytes(64))
    images, _ = read_all(build_decode_cache(demo_data, "tf-lite", fresh, progress=False))
    np.testing.assert_array_equal(images, reference)
    assert copied.verify(progress=False) == len(reference)


# -- the runner's stream, padding, threads, batch ------------------------------------------------------------------
def test_runner_streams_batches_through_its_ring_and_pads_where_asked(demo_model, demo_cache, monkeypatch):
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.data.batches import iter_batches
    from trtlab.evaluation.evaluate import infer_cached

    indices = demo_cache.valid_indices[:20]
    with TorchRunner(demo_model, device="cpu") as runner:
        streamed = np.concatenate(infer_cached(runner, demo_cache, indices, 8, progress=False))
        one_by_one = np.concatenate([runner.infer_crops(b.images, demo_cache.preprocess)
                                     for b in iter_batches(demo_cache, indices, 8, crops=True)])
        np.testing.assert_array_equal(streamed, one_by_one)
        seen = []
        original = runner._launch
        monkeypatch.setattr(runner, "_launch", lambda entry, array: seen.append(array.shape) or original(entry,
                                                                                                         array))
        monkeypatch.setattr(runner, "pads_batches", lambda: True)  # as on CUDA
        padded = infer_cached(runner, demo_cache, indices, 8, progress=False)
    assert [len(c) for c in padded] == [8, 8, 4] and {s[0] for s in seen} == {8}
    assert runner.batches_run["eager"] >= 3 and runner.batches_run["graph"] == 0  # the CPU: no CUDA graphs


def test_host_threads_are_held_and_restored(caplog):
    from trtlab.backends.gpu import runner

    before = torch.get_num_threads()
    runner._said.discard("threads")
    with caplog.at_level(logging.INFO, logger="trtlab"):
        previous = runner.hold_host_threads(1)
        assert torch.get_num_threads() == 1 and previous == before
        torch.set_num_threads(previous)
    assert before == 1 or "torch's CPU threads: 1 while the GPU computes" in caplog.text


def test_batch_size_auto_follows_free_gpu_memory(demo_model, monkeypatch):
    import trtlab.backends as backends
    from trtlab.backends.gpu import memory
    from trtlab.evaluation.evaluate import evaluation_batch_size
    from trtlab.evaluation.options import RunOptions

    assert RunOptions().batch_size == "auto"
    assert evaluation_batch_size("auto", demo_model, "ort", False) == 32
    per_image = memory.activation_bytes_per_image(onnx.load(str(demo_model)))
    assert 2 * 2**20 < per_image < 64 * 2**20  # EfficientNet-Lite0: a few MB of live activations per image
    monkeypatch.setattr(backends, "torch_gpu_available", lambda: True)
    for free, expected in ((80 * 2**30, 256), (15 * 2**30, 256), (2 * 2**30, None)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None, f=free: (f, 16 * 2**30))
        batch = evaluation_batch_size("auto", demo_model, "torch", False)
        fit = int(memory.MEMORY_SHARE * free // (memory.HEADROOM * per_image))
        assert batch & (batch - 1) == 0 and batch <= min(256, fit) < 2 * batch or batch == 256
        assert expected is None or batch == expected
    assert evaluation_batch_size(64, demo_model, "torch", False) == 64
    from trtlab.core.errors import UserValueError

    with pytest.raises(UserValueError, match="batch_size='big'"):
        evaluation_batch_size("big", demo_model, "torch", False)


# -- a failed worker loses nothing -------------------------------------------------------------------------------
def test_a_failed_worker_loses_nothing_and_says_so_in_one_line(demo_model, demo_data, tmp_path, monkeypatch,
                                                             caplog):
    import sys

    from trtlab.quantization.variants import Recipe
    from trtlab.workflows import parallel
    from trtlab.workflows.compare import compare

    split = demo_split(demo_data)
    recipes = [Recipe(algorithm="entropy")]
    single = compare(demo_model, demo_data, recipes, DEMO_PREPROCESS, split=split, workspace=tmp_path / "one",
                     backend="torch", progress=False, parallel=False)
    calls = []
    real = parallel.worker_command

    def second_crashes(job):
        calls.append(job)
        return [sys.executable, "-c", "import os; os._exit(9)"] if len(calls) == 2 else real(job)
    monkeypatch.setattr(parallel, "worker_command", second_crashes)
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        spread = compare(demo_model, demo_data, recipes, DEMO_PREPROCESS, split=split, workspace=tmp_path / "two",
                         backend="torch", progress=False, parallel=2)
    lines = [r.getMessage() for r in caplog.records if "evaluation worker on" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and "exit status 9" in lines[0], lines
    assert "evaluated in this process" in lines[0] and os.path.exists(lines[0].split("its log: ")[1].split(")")[0])
    assert list(single.table.index) == list(spread.table.index)
    for label in single.table.index:
        np.testing.assert_array_equal(single.store.load(label).logits, spread.store.load(label).logits)


# -- on CUDA --------------------------------------------------------------------------------------------------------
from test_gpu_backend import demo_variants, gpu_variants  # noqa: E402,F401  (fixtures: the GPU variants)


@requires_cuda
@pytest.mark.parametrize("variant", ["fp32", "fp16", "int8-entropy", "int8-guarded", "int8-fp16-path"])
def test_cuda_graph_replays_give_the_eager_logits_bit_for_bit(gpu_variants, variant):
    """Every variant, batches of 8 padded (the last one too), replayed vs eager, fused vs plain Q/DQ."""
    from trtlab.backends.gpu.runner import TorchRunner

    paths, _, crops, preprocess = gpu_variants
    crops = np.concatenate([crops] * 2)[:43]
    logits = {}
    for capture, fused in ((True, True), (False, True), (False, False)):
        with TorchRunner(paths[variant], capture=capture, fused_qdq=fused) as runner:
            batches = [runner.infer_crops(_padded(crops[k:k + 8]), preprocess)[:len(crops[k:k + 8])]
                       for k in range(0, len(crops), 8)]
            logits[capture, fused] = np.concatenate(batches)
            how = runner.execution()
            threads = torch.get_num_threads()
        assert threads == 1
        print(f"\n{variant} capture={capture} fused_qdq={fused}: {how}; {runner.describe().get('quantize_kernel')}")
        if capture:
            assert runner.batches_run["eager"] == 0, how
    np.testing.assert_array_equal(logits[True, True], logits[False, True])
    np.testing.assert_array_equal(logits[False, True], logits[False, False])


def _padded(crops, rows=8):
    from trtlab.data.batches import pad_batch

    return pad_batch(crops, rows)


@requires_cuda
def test_cuda_quantize_kernel_equals_the_plain_ops_on_every_q_node(qdq_graphs):
    """The Triton QuantizeLinear on every Q of the demo and light graphs, given the plain graph's inputs on the GPU."""
    from trtlab.backends.gpu import qdq_kernel

    for name, model, x in qdq_graphs:
        env, plain, fused = _plain_and_fused(model, x, "cuda")
        nodes = {n.name: n for n in model.graph.node}
        for plain_step, fused_step in zip(_qdq_steps(plain), _qdq_steps(fused)):
            node = nodes[plain_step.label.split("'")[1]]
            args = [env[i] if i in env else plain.constant(i) for i in node.input]
            with torch.inference_mode():
                got = fused_step.fn(*args)
            assert torch.equal(got, env[node.output[0]]), (name, node.name)
    print(f"\nQuantizeLinear on CUDA: {qdq_kernel.status()}")
    assert "differs" not in qdq_kernel.status()


def _streamed_and_loop(assets, monkeypatch, mode: str):
    from trtlab.quantization import statistics_torch
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.statistics_stream import COUNT_VARIABLE
    from trtlab.quantization.variants import stats_tensors

    demo_model, demo_cache = assets["model"], assets["cache"]
    tensors = stats_tensors(onnx.load(str(demo_model)))
    # 200 images: three whole forwards of 64 (statistics_torch.FORWARD_IMAGES) and a padded one of 8
    indices = np.concatenate([demo_cache.valid_indices] * 8)[:200]
    monkeypatch.setenv(COUNT_VARIABLE, mode)
    run = {}
    for streamed in (True, False):
        monkeypatch.setattr(statistics_torch, "STREAMED", streamed)
        run[streamed] = collect_statistics(demo_model, tensors, demo_cache, indices, batch_size=8, progress=False,
                                           device="cuda")
    for name in tensors:
        a, b = run[True].tensors[name], run[False].tensors[name]
        assert (a.bins, a.values, a.absmax, a.scale) == (b.bins, b.values, b.absmax, b.scale), name
        np.testing.assert_array_equal(a.counts, b.counts, err_msg=name)
    return run[True].counting


@requires_cuda
@pytest.mark.parametrize("mode", ["index_add", "spread", "histc"])
def test_cuda_streamed_calibration_equals_the_loop(assets, monkeypatch, mode):
    """On the GPU: forwards replayed in two slots, counted beside the next one — the loop's histograms, with every
    way of counting ($TRTLAB_GPU_COUNT)."""
    counting = _streamed_and_loop(assets, monkeypatch, mode)
    print(f"\nstreamed ({mode}): {counting}")
    assert "CUDA graph replays in two slots" in counting and "counts as graph replays" in counting
    assert "failed" not in counting and "differed" not in counting


@requires_cuda
def test_cuda_a_count_whose_capture_fails_is_counted_once(assets, monkeypatch):
    """A count capture that raises (planted) leaves the batch counted once, eagerly: the loop's histograms."""
    from trtlab.quantization.statistics_stream import StoredHistogram

    real = StoredHistogram.count

    def failing_in_capture(self, values, *args, **kwargs):
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("planted: capture refused")
        return real(self, values, *args, **kwargs)

    monkeypatch.setattr(StoredHistogram, "count", failing_in_capture)
    counting = _streamed_and_loop(assets, monkeypatch, "index_add")
    assert "count capture failed (RuntimeError)" in counting and "(0 counts as graph replays" in counting


@requires_cuda
def test_cuda_evaluation_streams_padded_batches_and_fills_the_gpu(gpu_variants, assets):
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.evaluation.evaluate import evaluation_batch_size, infer_cached

    paths, demo_cache = gpu_variants[0], assets["cache"]
    assert evaluation_batch_size("auto", paths["fp32"], "torch", False) == 256  # an H100/H200's free memory
    indices = np.concatenate([demo_cache.valid_indices] * 3)
    with TorchRunner(paths["int8-fp16-path"]) as runner:
        streamed = np.concatenate(infer_cached(runner, demo_cache, indices, 16, progress=False))
        one_by_one = np.concatenate([runner.infer_crops(_padded(np.asarray(demo_cache.crops[indices[k:k + 16]]), 16),
                                                        demo_cache.preprocess)[:len(indices[k:k + 16])]
                                     for k in range(0, len(indices), 16)])
    np.testing.assert_array_equal(streamed, one_by_one)
    assert runner.batches_run["eager"] == 0
