"""Backends share one Runner interface; `make_runner` picks the best one available and says which."""
from __future__ import annotations

import importlib.util

from trtlab.backends.runner import Runner

BACKENDS = ("ort", "trt")


def tensorrt_available() -> bool:
    # find_spec alone is not enough: the PyPI stub package installs a `tensorrt` module that fails on import.
    if importlib.util.find_spec("tensorrt") is None:
        return False
    try:
        import tensorrt  # noqa: F401  (the import itself is the check)
    except Exception:
        return False
    return True


def available_backends() -> list[str]:
    return ["trt", "ort"] if tensorrt_available() else ["ort"]


def make_runner(model_path, backend: str = "auto", verbose: bool = True, **options) -> Runner:
    """A Runner for `model_path` on `backend` ('auto', 'ort' or 'trt'). 'auto' prefers ONNX Runtime for
    ONNX files (the reference) and TensorRT for .engine files."""
    model_path = str(model_path)
    if backend == "auto":
        backend = "trt" if model_path.endswith((".engine", ".plan")) else "ort"
    if backend == "ort":
        from trtlab.backends.ort import OrtRunner

        runner = OrtRunner(model_path, **options)
    elif backend == "trt":
        if not tensorrt_available():
            from trtlab.core.errors import UserError

            raise UserError("backend 'trt' needs TensorRT, which does not import here",
                            "run notebook 00_env_setup (or `python -m trtlab doctor`, setup_kaggle_env.sh) to find "
                            "and load it, or use backend='ort'")
        from trtlab.backends.tensorrt.runner import TrtRunner

        runner = TrtRunner(model_path, **options)
    else:
        from trtlab.core.errors import UserValueError

        raise UserValueError(f"unknown backend {backend!r}", f"choose one of {', '.join(('auto',) + BACKENDS)}")
    return runner
