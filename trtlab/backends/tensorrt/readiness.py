"""Whether TensorRT can build and run engines on this machine, and the real reason when it cannot.

TensorRT's Python bindings are ordinary wheels: `import tensorrt` works on a machine without a GPU, over stub
libraries, or under a driver older than the CUDA the TensorRT build needs. Each of those fails later, at
`trt.Builder(logger)` / `trt.Runtime(logger)`, with pybind11's "factory function returned nullptr" — TensorRT having
logged "CUDA initialization failure with error: 35" (cudaErrorInsufficientDriver) or "error: 100"
(cudaErrorNoDevice) first (NVIDIA/TensorRT#2913, #308). Here each is one line naming the cause and the fix, said
before any work where it can be read beforehand (`gpu_for_tensorrt`), else when the factory fails
(`create_or_explain`):

* no NVIDIA GPU visible: cuda-python sees none, or is absent and NVML / nvidia-smi find none (trtlab.env.machine);
* a driver too old for the CUDA major of the TensorRT build: the CUDA 13 wheels need r580+, the CUDA 12 wheels
  r535+ (trtlab.env.install, from TensorRT's installation prerequisites); the CUDA major is read from the installed
  distribution's name (tensorrt-cu13 / tensorrt_cu13_bindings …);
* stub libraries: the libnvinfer this process loaded is a few kilobytes, where TensorRT's own holds its kernels
  (conda's libnvinfer 10.0.1.6 package is 638 MB compressed; even the lean runtime wheel tensorrt-lean-cu12-libs
  10.16 is 46 MB) — e.g. tests/trt_bindings.py's stubs on a GPU machine.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from trtlab.core.errors import UserError

#: A libnvinfer smaller than this is not TensorRT's (a stub): the real one is hundreds of MB.
STUB_MAX_BYTES = 8 << 20
#: CUDA runtime errors TensorRT names in "CUDA initialization failure with error: N" (cuda_runtime_api.h).
CUDA_NO_DEVICE, CUDA_INSUFFICIENT_DRIVER = 100, 35
ON_CPU = "or use ONNX Runtime on the CPU (backend='ort', --backend ort)"


class TensorRTCannotRun(UserError, RuntimeError):
    """TensorRT imports here but cannot build or run an engine: no GPU, a driver too old, or stub libraries."""


def gpu_for_tensorrt(trt, device: int = 0) -> dict:
    """The GPU TensorRT will build on and run on (cuda_runtime.device_info), after checking the driver runs this
    TensorRT's CUDA; TensorRTCannotRun naming the real reason otherwise."""
    from trtlab.backends import cuda_runtime as cuda_rt
    from trtlab.env.machine import gpu_facts

    try:
        gpu = cuda_rt.device_info(device)
    except cuda_rt.CudaUnavailable as exc:  # no cuda-python: is there a GPU at all?
        facts = gpu_facts()
        if not facts.gpus:
            raise no_gpu(trt, facts.tried) from exc
        raise (driver_problem(trt, facts) or TensorRTCannotRun(
            f"cuda-python is not installed, and trtlab moves TensorRT's inputs and outputs through it "
            f"({facts.gpu.name} is here)", f"{cuda_python_command(trt)}, then run this again")) from exc
    except cuda_rt.CudaError as exc:  # the runtime is there, the device or driver is not
        facts = gpu_facts()
        if not facts.gpus or "NoDevice" in str(exc):
            raise no_gpu(trt, [str(exc)]) from exc
        raise (driver_problem(trt, facts) or TensorRTCannotRun(f"CUDA cannot use the GPU here: {exc}",
                                                                f"run `python -m trtlab doctor`, {ON_CPU}")) from exc
    problem = driver_problem(trt, gpu_facts())
    if problem is not None:
        raise problem
    return gpu


def no_gpu(trt, tried) -> TensorRTCannotRun:
    looked = "; ".join(str(t) for t in tried if t) or "NVML, nvidia-smi and cuda-python found none"
    return TensorRTCannotRun(f"TensorRT {trt.__version__} imports here, but no NVIDIA GPU is visible ({looked}); "
                             f"TensorRT builds and runs engines only on a GPU",
                             f"turn on a GPU accelerator (on Kaggle: T4 or L4) and run this again, {ON_CPU}")


@functools.lru_cache(maxsize=8)
def tensorrt_cuda_major(version: str) -> int | None:
    """The CUDA major the installed TensorRT `version` was built for, from its distribution's name
    (tensorrt-cu13, tensorrt_cu12_bindings, tensorrt-cu13-libs …); None where no name says (a tar's wheel)."""
    from importlib import metadata

    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("-", "_")
        match = re.fullmatch(r"tensorrt_cu(\d+)(_bindings|_libs)?", name)
        if match and dist.version == version:
            return int(match.group(1))
    return None


def cuda_python_command(trt) -> str:
    """The cuda-python that matches this TensorRT's CUDA major (an unbounded one resolves to 13.x)."""
    major = tensorrt_cuda_major(str(trt.__version__))
    return f'pip install "cuda-python>={major},<{major + 1}"' if major else "pip install cuda-python"


def driver_problem(trt, facts) -> TensorRTCannotRun | None:
    """TensorRTCannotRun when the driver (`facts`: env.machine.GpuFacts) is older than this TensorRT build's CUDA
    major needs; None when it is new enough or either side is unknown."""
    from trtlab.env.install import CUDA12_MIN_DRIVER, CUDA13_MIN_DRIVER, advice_for, driver_branch

    major = tensorrt_cuda_major(str(trt.__version__))
    needed = {12: CUDA12_MIN_DRIVER, 13: CUDA13_MIN_DRIVER}.get(major)
    branch = driver_branch(facts.driver)
    if needed is None or branch is None or branch >= needed:
        return None
    advice = advice_for(facts)
    return TensorRTCannotRun(f"the NVIDIA driver {facts.driver} is too old for TensorRT {trt.__version__}, a CUDA "
                             f"{major} build (CUDA {major} wheels need driver r{needed} or newer)",
                             f"install the build this driver runs: {advice.command} (or update the driver to "
                             f"r{needed}+)" if advice.command else advice.hint())


def loaded_library(prefix: str = "libnvinfer.so") -> Path | None:
    """The file of the first library named `prefix`* mapped into this process (/proc/self/maps), or None."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: nothing to tell
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
        if os.path.basename(path).startswith(prefix):
            return Path(path)
    return None


def create_or_explain(trt, factory, what: str, logger):
    """`factory(logger)` (trt.Builder, trt.Runtime); where it returns nullptr, TensorRTCannotRun with the cause."""
    try:
        return factory(logger)
    except TypeError as exc:
        if "nullptr" not in str(exc):
            raise
        raise factory_failure(trt, what, logger) from exc


def factory_failure(trt, what: str, logger) -> TensorRTCannotRun:
    """Why TensorRT created no `what` (its factory returned nullptr): stub libraries, no GPU, an old driver, or
    what TensorRT logged."""
    library = loaded_library()
    if library is not None and library.is_file() and library.stat().st_size < STUB_MAX_BYTES:
        size = library.stat().st_size
        return TensorRTCannotRun(
            f"TensorRT {trt.__version__} created no {what}: the libnvinfer this process loaded, {library} "
            f"({size / 1024:.0f} KB), is a stub, not TensorRT's library (hundreds of MB)",
            "install TensorRT's libraries (`python -m trtlab doctor` names the command for this driver) and make "
            f"sure they, not stubs, are found first, {ON_CPU}")
    logged = [str(m) for m in (*getattr(logger, "warnings", ()), *getattr(logger, "errors", ()))]
    failure = next((re.search(r"CUDA initialization failure with error:? ?(\d+)", m) for m in logged
                    if "CUDA initialization failure" in m), None)
    code = int(failure.group(1)) if failure else None
    if code == CUDA_NO_DEVICE:
        return no_gpu(trt, [f"TensorRT: {failure.group(0)}"])
    if code == CUDA_INSUFFICIENT_DRIVER:
        from trtlab.env.machine import gpu_facts

        return driver_problem(trt, gpu_facts()) or TensorRTCannotRun(
            f"TensorRT {trt.__version__} created no {what}: the NVIDIA driver is too old for its CUDA (TensorRT "
            f"logged {failure.group(0)!r})", "`python -m trtlab doctor` names the TensorRT build for this driver")
    said = "; ".join(logged[-2:]) or "it logged no reason"
    return TensorRTCannotRun(f"TensorRT {trt.__version__} created no {what} ({said})",
                             f"run `python -m trtlab doctor` for this machine's GPU, driver and TensorRT, {ON_CPU}")
