"""Facts about this machine: GPUs, driver, CUDA, cuDNN, ONNX Runtime, and whether ``import tensorrt`` works.

GPU facts come from the first source that answers: NVML through ``nvidia-ml-py`` (module ``pynvml``, optional),
then ``nvidia-smi``, then cuda-python. Each is asked inside a try: a machine without a driver, a half-installed
package or an old ``nvidia-smi`` never stops the report. Facts are read once per process (a GPU and its driver do
not change under a running kernel); :func:`forget_gpu_facts` reads them again.
"""
from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from trtlab.env.layout import cuda_dependency_dirs, system_lib_dirs, version_tuple

#: GPU names → compute capability, for sources that give no compute capability (old nvidia-smi, NVML errors).
CC_BY_NAME = {
    "P100": (6, 0), "P40": (6, 1), "P4": (6, 1), "V100": (7, 0), "T4": (7, 5), "A100": (8, 0), "A10": (8, 6),
    "A10G": (8, 6), "L4": (8, 9), "L40": (8, 9), "H100": (9, 0), "H200": (9, 0), "B200": (10, 0),
}


@dataclass
class GpuInfo:
    name: str
    compute_capability: tuple[int, int] | None
    driver: str | None
    source: str


@dataclass
class GpuFacts:
    """What the first answering source said: GPUs, the driver version and the newest CUDA the driver runs."""

    gpus: list[GpuInfo] = field(default_factory=list)
    driver: str | None = None          # "570.86.15"
    cuda_driver: str | None = None     # "12.8": the highest CUDA version this driver supports
    source: str = ""                   # NVML | nvidia-smi | cuda-python | "" (none answered)
    tried: list[str] = field(default_factory=list)   # sources that did not answer, and why

    @property
    def gpu(self) -> GpuInfo | None:
        return self.gpus[0] if self.gpus else None


def arch_name(cc: tuple[int, int] | None) -> str:
    """Architecture family of a compute capability, for messages ("sm_60 (Pascal)")."""
    if cc is None:
        return "unknown architecture"
    major, minor = cc
    names = {3: "Kepler", 5: "Maxwell", 6: "Pascal", 8: "Ampere", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}
    if major == 7:
        family = "Turing" if minor >= 5 else "Volta"
    elif (major, minor) == (8, 9):
        family = "Ada"
    else:
        family = names.get(major, "unknown architecture")
    return f"sm_{major}{minor} ({family})"


def cc_from_name(name: str) -> tuple[int, int] | None:
    for key in sorted(CC_BY_NAME, key=len, reverse=True):
        if re.search(rf"\b{re.escape(key)}\b", name):
            return CC_BY_NAME[key]
    return None


def _text(value) -> str:
    return (value.decode(errors="replace") if isinstance(value, bytes) else str(value)).strip("\0 ")


def _cuda_version_text(value: int) -> str:
    """CUDA's integer encoding (12040) as text ("12.4")."""
    return f"{value // 1000}.{value % 1000 // 10}"


def parse_nvidia_smi_query(text: str) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`` lines."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        cc_m = re.match(r"^(\d+)\.(\d+)$", parts[1])
        gpus.append(GpuInfo(parts[0], (int(cc_m.group(1)), int(cc_m.group(2))) if cc_m else cc_from_name(parts[0]),
                            parts[2], "nvidia-smi"))
    return gpus


def _run(cmd: list[str], timeout: float = 15) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def from_nvml() -> GpuFacts | str:
    """GPU facts through NVML (``pip install nvidia-ml-py``), or why NVML did not answer."""
    try:
        nvml = importlib.import_module("pynvml")
    except Exception:  # not installed (the usual case) or broken: the next source answers
        return "nvidia-ml-py (pynvml) not installed"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded: no driver here
        return f"NVML did not start ({type(exc).__name__}: {exc})"
    try:
        facts = GpuFacts(driver=_text(nvml.nvmlSystemGetDriverVersion()), source="NVML")
        try:
            facts.cuda_driver = _cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion()))
        except Exception:  # older NVML: the CUDA version is optional
            pass
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            try:
                cc = tuple(int(x) for x in nvml.nvmlDeviceGetCudaComputeCapability(handle))
            except Exception:  # an NVML without the call: fall back to the name table
                cc = cc_from_name(name)
            facts.gpus.append(GpuInfo(name, cc, facts.driver, "NVML"))
        return facts
    except Exception as exc:  # any NVML error mid-way: let nvidia-smi answer instead
        return f"NVML failed ({type(exc).__name__}: {exc})"
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # shutting down a half-started NVML is best effort
            pass


def from_nvidia_smi() -> GpuFacts | str:
    """GPU facts from ``nvidia-smi`` (its query, then the header's "CUDA Version"), or why it did not answer."""
    if not shutil.which("nvidia-smi"):
        return "nvidia-smi not on PATH"
    out = _run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"])
    gpus = parse_nvidia_smi_query(out) if out else []
    if not gpus:  # old drivers reject compute_cap
        out = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]) or ""
        gpus = [GpuInfo(n.strip(), cc_from_name(n), d.strip(), "nvidia-smi + name table")
                for n, d in (line.split(",", 1) for line in out.strip().splitlines() if "," in line)]
    if not gpus:
        return "nvidia-smi found no GPU"
    m = re.search(r"CUDA Version:\s*([\d.]+)", _run(["nvidia-smi"]) or "")
    return GpuFacts(gpus, gpus[0].driver, m.group(1) if m else None, "nvidia-smi")


def cuda_python_runtime():
    """cuda-python's runtime module (``cuda.bindings.runtime`` or the older ``cuda.cudart``), or None."""
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            if importlib.util.find_spec(name.split(".")[0]) and importlib.util.find_spec(name):
                return importlib.import_module(name)
        except Exception:  # a half-installed cuda-python must not break the report
            continue
    return None


def from_cuda_python() -> GpuFacts | str:
    rt = cuda_python_runtime()
    if rt is None:
        return "cuda-python not installed"
    try:
        err, count = rt.cudaGetDeviceCount()
        facts = GpuFacts(source="cuda-python")
        for i in range(count if int(err) == 0 else 0):
            err, prop = rt.cudaGetDeviceProperties(i)
            facts.gpus.append(GpuInfo(_text(prop.name), (prop.major, prop.minor), None, "cuda-python"))
        err, drv = rt.cudaDriverGetVersion()
        if int(err) == 0 and drv:
            facts.cuda_driver = _cuda_version_text(drv)
        return facts if facts.gpus else "cuda-python found no GPU"
    except Exception as exc:  # no driver, no device: cuda-python raises or returns errors; both mean "no GPU"
        return f"cuda-python found no GPU ({type(exc).__name__})"


_FACTS: list[GpuFacts] = []


def gpu_facts() -> GpuFacts:
    """GPUs and driver from the first source that answers (NVML, nvidia-smi, cuda-python); read once."""
    if _FACTS:
        return _FACTS[0]
    tried = []
    facts = None
    for source in (from_nvml, from_nvidia_smi, from_cuda_python):
        answer = source()
        if isinstance(answer, GpuFacts):
            facts = answer
            break
        tried.append(answer)
    facts = facts or GpuFacts()
    facts.tried = tried
    _FACTS[:] = [facts]
    return facts


def forget_gpu_facts() -> None:
    """Read the GPU facts again next time (tests; a driver installed under a running process)."""
    _FACTS.clear()


def dist_version(*names: str) -> str | None:
    from importlib import metadata
    for n in names:
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return None


def find_libs(prefix: str) -> list[str]:
    """Files named ``prefix.so*`` in system, LD_LIBRARY_PATH and pip nvidia folders."""
    out = []
    for folder in system_lib_dirs() + cuda_dependency_dirs():
        out += glob.glob(os.path.join(folder, f"{prefix}.so*"))
    return sorted(set(out))


def lib_versions(paths: list[str], prefix: str) -> list[str]:
    """Versions in the file names (links resolved, so libcudart.so.12 -> libcudart.so.12.4.127 gives 12.4.127)."""
    names = {os.path.basename(p) for p in paths} | {os.path.basename(os.path.realpath(p)) for p in paths}
    vs = {m.group(1) for n in names if (m := re.match(rf"^{re.escape(prefix)}\.so\.(\d+(?:\.\d+)*)$", n))}
    return sorted(vs, key=version_tuple, reverse=True)


def cuda_runtime_version() -> tuple[str | None, str]:
    """(version, where it was read) of the CUDA runtime Python code would use."""
    rt = cuda_python_runtime()
    if rt is not None:
        try:
            err, v = rt.cudaRuntimeGetVersion()
            if int(err) == 0:
                return _cuda_version_text(v), "cuda-python"
        except Exception:  # no driver: fall through to file names
            pass
    v = dist_version("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13")
    if v and version_tuple(v)[:1] != (0,):  # nvidia-cuda-runtime-cu13 0.0.1 is an empty placeholder
        return v, "pip nvidia-cuda-runtime"
    vs = lib_versions(find_libs("libcudart"), "libcudart")
    return (vs[0], "libcudart file name") if vs else (None, "")


def cudnn_version() -> tuple[str | None, str]:
    v = dist_version("nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "nvidia-cudnn-cu11")
    if v:
        return v, "pip nvidia-cudnn"
    vs = lib_versions(find_libs("libcudnn"), "libcudnn")
    return (vs[0], "libcudnn file name") if vs else (None, "")


def ort_info() -> tuple[str | None, list[str], str | None]:
    """(version, providers, error) of onnxruntime, imported inside a try."""
    try:
        if importlib.util.find_spec("onnxruntime") is None:
            return None, [], "onnxruntime is not installed: pip install onnxruntime"
        import onnxruntime as ort
        return ort.__version__, list(ort.get_available_providers()), None
    except Exception as exc:  # a broken onnxruntime-gpu install raises at import; the report must go on
        return None, [], f"import onnxruntime failed: {exc}"


def probe_tensorrt_import(lib_dir: str | None, timeout: float = 120) -> tuple[str | None, str | None]:
    """Try ``import tensorrt`` in a fresh Python whose LD_LIBRARY_PATH starts with ``lib_dir``."""
    if importlib.util.find_spec("tensorrt") is None:
        return None, "not installed"
    env = dict(os.environ)
    if lib_dir:
        env["LD_LIBRARY_PATH"] = lib_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    try:
        proc = subprocess.run([sys.executable, "-c", "import tensorrt; print(tensorrt.__version__)"],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"import tensorrt took more than {timeout:.0f} s"
    if proc.returncode == 0:
        return proc.stdout.strip().splitlines()[-1], None
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return None, tail
