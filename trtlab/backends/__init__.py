"""Backends share one Runner interface; `make_runner` picks the best one available and says which."""
from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from trtlab.backends.runner import Runner

log = logging.getLogger(__name__)

BACKENDS = ("ort", "trt", "torch")
#: Other spellings of a backend name.
BACKEND_ALIASES = {"gpu": "torch"}
#: Options that only ONNX Runtime takes (the literal-reference settings): dropped when 'auto' picks the torch
#: backend, which is literal by construction.
ORT_ONLY_OPTIONS = ("providers", "graph_optimization", "intra_op_threads", "disable_quant_qdq")
_announced: set = set()


def tensorrt_available() -> bool:
    # find_spec alone is not enough: the PyPI stub package installs a `tensorrt` module that fails on import.
    if importlib.util.find_spec("tensorrt") is None:
        return False
    try:
        import tensorrt  # noqa: F401  (the import itself is the check)
    except Exception:
        return False
    return True


def torch_gpu_available() -> bool:
    """Whether the torch GPU backend has a CUDA GPU here (without importing torch where no NVIDIA driver is)."""
    from trtlab.backends.gpu.runner import torch_cuda_available

    return torch_cuda_available()


def available_backends() -> list[str]:
    return (["trt"] if tensorrt_available() else []) + (["torch"] if torch_gpu_available() else []) + ["ort"]


def resolve_backend(model_path, backend: str = "auto") -> tuple[str, str]:
    """(backend, why) for `backend` ('auto', 'ort', 'trt', 'torch' or 'gpu'). 'auto': TensorRT for .engine/.plan
    files; for ONNX files the torch GPU backend whenever a CUDA GPU is visible — whether or not TensorRT imports
    (TensorRT builds engines from the variants beside it; it never sends the literal A/B to the CPU) — else ONNX
    Runtime on the CPU (the literal reference)."""
    model_path = str(model_path)
    backend = BACKEND_ALIASES.get(backend, backend)
    if backend != "auto":
        return backend, f"backend={backend!r} requested"
    if model_path.endswith((".engine", ".plan")):
        return "trt", "a TensorRT engine file"
    if torch_gpu_available():
        also = " (TensorRT imports too: it builds each variant's engine beside)" if tensorrt_available() else ""
        return "torch", f"a CUDA GPU is visible to torch: the ONNX graph runs on the GPU with literal Q/DQ{also}"
    return "ort", "no CUDA GPU visible to torch: ONNX Runtime on the CPU, the literal reference"


def installed_tensorrt_version() -> str | None:
    """TensorRT's version where it really imports here, else None (for calibration cache headers: the one place
    outside backends/ and env/ that names a TensorRT version asks here instead of importing tensorrt)."""
    if not tensorrt_available():
        return None
    import tensorrt

    return getattr(tensorrt, "__version__", None)


def announce_backend(backend: str, why: str) -> None:
    """Log 'backend: <name> — <why>' once per process and choice (what 'auto' picked, for the user)."""
    if (backend, why) not in _announced:
        _announced.add((backend, why))
        log.info(f"backend: {backend} — {why}")


def default_batch_size(model_path, backend: str) -> tuple[int, str]:
    """(batch, why) for batch_size='auto' with the resolved `backend`: on the torch backend with a CUDA GPU as many
    images as a share of the free GPU memory holds, a power of two up to 256 (backends.gpu.memory); else 32."""
    from trtlab.backends.gpu.memory import CPU_BATCH

    if BACKEND_ALIASES.get(backend, backend) == "torch" and torch_gpu_available():
        from trtlab.backends.gpu.memory import cuda_batch

        return cuda_batch(model_path)
    return CPU_BATCH, f"batches of {CPU_BATCH} ({'the CPU' if backend == 'ort' else backend})"


def options_for(backend: str, options: dict | None) -> dict:
    """`options` without the ONNX Runtime-only ones (the literal-reference settings) unless `backend` is 'ort'."""
    options = dict(options or {})
    if BACKEND_ALIASES.get(backend, backend) != "ort":
        options = {k: v for k, v in options.items() if k not in ORT_ONLY_OPTIONS}
    return options


def make_runner(model_path, backend: str = "auto", verbose: bool = True, **options) -> Runner:
    """A Runner for `model_path` on `backend` ('auto', 'ort', 'trt', 'torch'/'gpu'); see `resolve_backend` for what
    'auto' picks. The choice is logged once per process (backend and why)."""
    model_path = str(model_path)
    requested = backend
    backend, why = resolve_backend(model_path, backend)
    if requested == "auto":
        if verbose:
            announce_backend(backend, why)
        if backend == "torch":
            options = options_for(backend, options)
    if backend == "torch":
        from trtlab.backends.gpu.runner import TorchRunner

        runner = TorchRunner(model_path, **options)
    elif backend == "ort":
        from trtlab.backends.ort import OrtRunner

        runner = OrtRunner(model_path, **options)
    elif backend == "trt":
        if not tensorrt_available():
            from trtlab.core.errors import UserError
            from trtlab.graph.engine_file import read_engine_header

            engine = read_engine_header(model_path)
            what = (f"{Path(model_path).name} is a TensorRT engine{', ' + engine.built_by() if engine.tensorrt else ''}"
                    f": running it needs TensorRT{' ' + engine.tensorrt if engine.tensorrt else ''} on a GPU, and "
                    f"TensorRT does not import here") if engine else "backend 'trt' needs TensorRT, which does not " \
                                                                   "import here"
            raise UserError(what, "run notebook 00_env_setup (or `python -m trtlab doctor`, setup_kaggle_env.sh) to "
                                  "find and load it" + ("" if engine else ", or use backend='ort'"))
        from trtlab.backends.tensorrt.runner import TrtRunner

        runner = TrtRunner(model_path, **options)
    else:
        from trtlab.core.errors import UserValueError

        raise UserValueError(f"unknown backend {requested!r}",
                             f"choose one of {', '.join(('auto',) + BACKENDS + tuple(BACKEND_ALIASES))}")
    return runner
