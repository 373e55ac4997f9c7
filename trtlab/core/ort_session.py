"""The one ONNX Runtime session builder. Sanitizing, calibration, the runners, the literal-reference check and
layer debugging all open their sessions here, so an option (threads, spinning, Q/DQ fusion, optimization level)
has one spelling and one meaning.

onnxruntime is imported when a session is made, not when this module is.
"""
from __future__ import annotations

import errno
import os

OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")


def session_options(optimization: str = "all", threads: int | None = None, qdq_fusion: bool = True,
                    spinning: bool = True, optimized_model_path: str | os.PathLike | None = None):
    """onnxruntime.SessionOptions for trtlab.

    `qdq_fusion=False` sets `session.disable_quant_qdq`: Q/DQ pairs stay as they are (the literal fake-quantized
    semantics TensorRT implements) while other optimizations run. `spinning=False` stops idle intra-op threads from
    spinning (they would take the cores from work running beside ONNX Runtime, e.g. histogram counting).
    """
    import onnxruntime as ort

    if optimization not in OPTIMIZATION_LEVELS:
        raise ValueError(f"optimization must be one of {OPTIMIZATION_LEVELS}, got {optimization!r}")
    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[optimization]
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = int(threads)
    if not qdq_fusion:
        options.add_session_config_entry("session.disable_quant_qdq", "1")
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if optimized_model_path is not None:
        options.optimized_model_filepath = os.fspath(optimized_model_path)
    return options


def ort_session(model, optimization: str = "all", threads: int | None = None, qdq_fusion: bool = True,
                spinning: bool = True, providers: list[str] | None = None,
                optimized_model_path: str | os.PathLike | None = None):
    """An onnxruntime.InferenceSession for `model` (a path or an in-memory ModelProto), CPU unless `providers`."""
    import onnxruntime as ort

    options = session_options(optimization, threads, qdq_fusion, spinning, optimized_model_path)
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else model.SerializeToString()
    try:
        return ort.InferenceSession(source, options, providers=providers or ["CPUExecutionProvider"])
    except Exception as exc:
        if optimized_model_path is not None and "serialization failed" in str(exc).lower():
            # ONNX Runtime's only words when writing the optimized model fails (a full disk among the causes; it
            # gives no errno): an OSError naming the file, which the atomic writers turn into a one-line error
            # naming the disk and its free space (core.errors.write_error).
            target = os.fspath(optimized_model_path)
            code = errno.ENOSPC if _short_of_space(target, source) else errno.EIO
            raise OSError(code, "ONNX Runtime could not write the optimized model (\"Protobuf serialization "
                                "failed\")", target) from exc
        raise


def _short_of_space(target: str, source) -> bool:
    """Whether the file system of `target` has less free space than twice the model `source` (path or bytes)."""
    import shutil

    try:
        size = len(source) if isinstance(source, bytes) else os.path.getsize(source)
        return shutil.disk_usage(os.path.dirname(os.path.abspath(target))).free < 2 * size
    except OSError:
        return False
