"""Getting TensorRT: the lazy `import tensorrt`, its version, trtlab's errors, the logger and parser messages.

Nothing here imports TensorRT at module level: trtlab imports (and its ONNX Runtime path works) on machines
without it, and `import_tensorrt()` says why it does not import and what to do.
"""
from __future__ import annotations

import logging

from trtlab.core.errors import UserError, UserValueError

log = logging.getLogger("trtlab.backends.tensorrt")


class TensorRTUnavailable(UserError, RuntimeError):
    """`import tensorrt` does not work here."""


class ImplicitInt8Unsupported(UserValueError):
    """TensorRT 11 has no implicit (calibrator-based) INT8."""


class OnnxParseError(RuntimeError):
    """TensorRT's ONNX parser rejected the model; the message names the ONNX nodes."""


class EngineBuildError(RuntimeError):
    """build_serialized_network returned nothing; the message carries TensorRT's errors."""


class EngineCompatibilityError(RuntimeError):
    """An engine file was built by another TensorRT version or on another GPU."""


SUPPORTED_MAJORS = (10, 11)


def implicit_int8_unsupported(version: str) -> ImplicitInt8Unsupported:
    """The error for asking TensorRT 11 for implicit (calibrator-based) INT8, with the explicit path to take."""
    return ImplicitInt8Unsupported(
        f"TensorRT {version} has no implicit INT8: TensorRT 11 removed IInt8Calibrator, "
        f"IBuilderConfig.int8_calibrator and BuilderFlag.INT8",
        "use the explicit path: quantize the model into a Q/DQ ONNX with trtlab (notebook 03 / `python -m trtlab "
        "calibrate`), then build that variant (precision='int8'). trtlab's calibrators (entropy, minmax, "
        "percentile) follow TensorRT's own algorithms, so the A/B stays meaningful")


def import_tensorrt():
    """The `tensorrt` module, or TensorRTUnavailable saying why and what to do."""
    try:
        import tensorrt as trt
    except Exception as exc:  # the PyPI stub package raises on import, not ImportError only
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        raise TensorRTUnavailable(
            f"TensorRT does not import here ({type(exc).__name__}: {first_line})",
            "run notebook 00_env_setup / `python -m trtlab doctor` to find and load it, or use backend='ort'") \
            from exc
    return trt


def tensorrt_version(trt) -> tuple[int, ...]:
    """(major, minor, patch, ...) of a tensorrt module, from its __version__."""
    parts = []
    for piece in str(trt.__version__).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise TensorRTUnavailable(f"cannot read the TensorRT version from {trt.__version__!r}",
                                  "reinstall TensorRT (python -m trtlab doctor names the command)")
    return tuple(parts)


def tensorrt_major(trt) -> int:
    major = tensorrt_version(trt)[0]
    if major not in SUPPORTED_MAJORS:
        raise TensorRTUnavailable(f"TensorRT {trt.__version__} found; trtlab supports TensorRT 10.x and 11.x",
                                  "install one of them (python -m trtlab doctor names the command for this "
                                  "driver)")
    return major


def make_logger(trt, verbose: bool = False):
    """A trt.ILogger that passes warnings (info too when verbose) to trtlab's log and keeps errors and warnings
    for exception messages (TensorRT warns "CUDA initialization failure …" before a builder fails: readiness)."""

    class CapturingLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)  # explicit base init, as the TensorRT Python docs require
            self.errors: list[str] = []
            self.warnings: list[str] = []

        def log(self, severity, msg):
            if severity in (trt.ILogger.Severity.INTERNAL_ERROR, trt.ILogger.Severity.ERROR):
                self.errors.append(str(msg))
                log.error(f"[TensorRT] {msg}")
            elif severity == trt.ILogger.Severity.WARNING or verbose:
                if severity == trt.ILogger.Severity.WARNING:
                    self.warnings.append(str(msg))
                log.info(f"[TensorRT] {msg}")

    return CapturingLogger()


def format_parser_errors(parser, onnx_model) -> str:
    """One line per ONNX parser error, naming the ONNX node (name and op type) it happened in."""
    nodes = list(onnx_model.graph.node)
    lines = []
    for index in range(parser.num_errors):
        error = parser.get_error(index)
        node_index = error.node()
        where = "the graph"
        if 0 <= node_index < len(nodes):
            node = nodes[node_index]
            where = f"node {node.name or '#' + str(node_index)!r} ({node.op_type}, #{node_index})"
        lines.append(f"  - {where}: {error.desc()}")
    return "\n".join(lines)
