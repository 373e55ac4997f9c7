"""TensorRT imports but cannot build or run here (issue 36 item 3): the real reason in one line, never cuda-python's
"pip install cuda-python" (installing it would not help) nor pybind11's "factory function returned nullptr", and
no caption claiming a GPU that is not there.

The machine is set for each test whatever this one has: `no_gpu` makes cuda-python absent and NVML / nvidia-smi
find nothing; TensorRT is tests/fake_tensorrt's stand-in. The same paths over the REAL bindings and their stub
libraries (the nullptr of a GPU machine whose libraries are stubs, the CUDA major read from the real wheel):
tests/real_trt_checks.py::check_cannot_run_here_is_one_line and the A/B check after it.
"""
from __future__ import annotations

import sys

import pytest

from fake_tensorrt import make_fake_tensorrt

NO_GPU = "TensorRT 11.1.0.8 imports here, but no NVIDIA GPU is visible"


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine with TensorRT (the stand-in) and no GPU: no cuda-python, NVML and nvidia-smi find none."""
    import trtlab.env.machine as machine
    from trtlab.backends import cuda_runtime

    def no_cuda_python(device=0):
        raise cuda_runtime.CudaUnavailable("cuda-python is not installed: pip install cuda-python")

    trt = make_fake_tensorrt("11.1.0.8")
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setattr(cuda_runtime, "device_info", no_cuda_python)
    monkeypatch.setattr(machine, "_FACTS", [machine.GpuFacts(tried=["nvidia-smi not on PATH"])])
    return trt


def test_the_ab_engine_rows_and_caption_say_there_is_no_gpu(no_gpu, demo_model, demo_data, tmp_path):
    from trtlab.data.demo import demo_split
    from trtlab.evaluation.options import RunOptions
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.compare import compare

    result = compare(demo_model, demo_data, [Recipe(algorithm="minmax", calibration_images=3)],
                     split=demo_split(demo_data), workspace=tmp_path, run=RunOptions(backend="ort", progress=False))
    statuses = {row.status for row in result.engines.rows}
    assert len(result.engines.rows) == 2 and len(statuses) == 1, statuses
    status = statuses.pop()
    assert status.startswith(f"build failed: {NO_GPU} (nvidia-smi not on PATH)"), status
    assert "cuda-python" not in status and "CudaUnavailable" not in status and "turn on a GPU accelerator" in status
    caption = result.engines.table.caption
    assert caption.startswith(f"No engine was built: {NO_GPU}") and "this GPU" not in caption, caption
    assert not no_gpu.calls  # nothing touched TensorRT's builder
    assert list(result.table.index) == ["fp32", "int8-minmax@3"]  # the literal A/B stands


@pytest.mark.parametrize("command", ["eval", "build"])
def test_eval_on_trt_and_build_are_one_line_before_any_work(no_gpu, command, demo_model, photo_folder, tmp_path,
                                                            capsys):
    from trtlab.cli.main import main

    argv = [command, "--model", str(demo_model), "--workspace", str(tmp_path / "ws")]
    argv += ["--data", str(photo_folder), "--backend", "trt"] if command == "eval" else []
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {NO_GPU}") and "Traceback" not in "\n".join(err), err
    assert not (tmp_path / "ws" / "decode-cache").exists() and not no_gpu.calls


def test_build_engines_auto_goes_on_with_onnx_runtime_and_says_why(no_gpu, demo_model, tmp_path, caplog):
    from trtlab.workflows.engines import build_engines

    with caplog.at_level("INFO", logger="trtlab"):
        engines = build_engines(demo_model, ["fp32"], workspace=tmp_path, progress=False)
    assert engines.backend == "ort" and list(engines.entries) == ["fp32"]
    said = [r.getMessage() for r in caplog.records if "continuing on ONNX Runtime" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(NO_GPU), said


class Logged:
    """What a TensorRT logger kept before the factory returned nullptr."""

    def __init__(self, *warnings):
        self.warnings, self.errors = list(warnings), []


def test_a_factory_failure_is_named_from_what_tensorrt_logged(monkeypatch):
    """NVIDIA/TensorRT#2913, #308: TensorRT warns "CUDA initialization failure with error: 35" (the driver is too
    old for its CUDA) or "error: 100" (no device), then the factory returns nullptr."""
    from trtlab.backends.tensorrt import readiness

    monkeypatch.setattr(readiness, "loaded_library", lambda prefix="libnvinfer.so": None)  # TensorRT's own, not a stub
    trt = make_fake_tensorrt("10.16.1.11")

    def nullptr(logger):
        raise TypeError("pybind11::init(): factory function returned nullptr")

    def line(*logged) -> str:
        with pytest.raises(readiness.TensorRTCannotRun) as caught:
            readiness.create_or_explain(trt, nullptr, "builder", Logged(*logged))
        return caught.value.line()

    url = "Please check your CUDA installation:  http://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html"
    old = line(f"CUDA initialization failure with error: 35. {url}")
    assert "the NVIDIA driver is too old for its CUDA" in old and "python -m trtlab doctor" in old, old
    assert "TensorRT 10.16.1.11 imports here, but no NVIDIA GPU is visible (TensorRT: CUDA initialization failure " \
           "with error: 100)" in line(f"CUDA initialization failure with error: 100. {url}")
    other = line("Unable to determine GPU memory usage")
    assert other.startswith("error: TensorRT 10.16.1.11 created no builder (Unable to determine GPU memory usage)")
    assert "nullptr" not in old + other
    with pytest.raises(TypeError, match="incompatible function arguments"):  # any other TypeError is not ours
        readiness.create_or_explain(trt, lambda logger: (_ for _ in ()).throw(TypeError("incompatible function "
                                                                                         "arguments")), "x", None)


def test_the_driver_is_judged_against_the_cuda_major_of_the_installed_build(monkeypatch):
    """tensorrt-cu13 needs r580+, tensorrt-cu12 r535+ (env.install, from TensorRT's prerequisites); a build whose
    distribution names no CUDA major (a tar's wheel) is not judged."""
    import trtlab.env.machine as machine
    from trtlab.backends.tensorrt import readiness

    trt = make_fake_tensorrt("11.4.0.106")
    t4 = machine.GpuInfo("Tesla T4", (7, 5), "570.86.15", "nvidia-smi")
    facts = machine.GpuFacts([t4], "570.86.15", "12.8", "nvidia-smi")
    for major, expected in ((13, "too old for TensorRT 11.4.0.106, a CUDA 13 build"), (12, None), (None, None)):
        monkeypatch.setattr(readiness, "tensorrt_cuda_major", lambda version, major=major: major)
        problem = readiness.driver_problem(trt, facts)
        assert (problem is None) if expected is None else (expected in problem.what), (major, problem)
    monkeypatch.setattr(readiness, "tensorrt_cuda_major", lambda version: 13)
    fix = readiness.driver_problem(trt, facts).fix
    assert fix == 'install the build this driver runs: pip install tensorrt-cu12 "cuda-python>=12,<13" (or update ' \
                  'the driver to r580+)', fix
