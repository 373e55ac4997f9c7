"""ONNX Runtime backend: the reference that runs everywhere (CPU; CUDA EP when onnxruntime-gpu is installed)."""
from __future__ import annotations

import os

import numpy as np

from trtlab.backends.runner import Runner

OPT_LEVELS = ("disable", "basic", "extended", "all")


class OrtRunner(Runner):
    backend = "ort"

    def __init__(self, model_path: str | os.PathLike, providers: list[str] | None = None,
                 graph_optimization: str = "all", intra_op_threads: int | None = None, name: str | None = None,
                 disable_quant_qdq: bool = False):
        """`disable_quant_qdq=True` sets ONNX Runtime's session option `session.disable_quant_qdq`: graph
        optimizations stay on but QuantizeLinear/DequantizeLinear pairs are not fused into ORT's own INT8 kernels,
        so a Q/DQ model computes its literal semantics (fake-quantized float ops) at near-FP32 speed — the
        faster literal INT8 reference (tests/test_literal_reference.py checks it against optimizations off)."""
        super().__init__(name or f"ort:{os.path.basename(os.fspath(model_path))}")
        if graph_optimization not in OPT_LEVELS:
            raise ValueError(f"graph_optimization must be one of {OPT_LEVELS}, got {graph_optimization!r}")
        self.model_path = os.fspath(model_path)
        self.requested_providers = providers
        self.graph_optimization = graph_optimization
        self.intra_op_threads = intra_op_threads
        self.disable_quant_qdq = bool(disable_quant_qdq)
        self.session = None

    def activate_impl(self) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[self.graph_optimization]
        if self.intra_op_threads:
            options.intra_op_num_threads = self.intra_op_threads
        options.log_severity_level = 3
        if self.disable_quant_qdq:
            options.add_session_config_entry("session.disable_quant_qdq", "1")
        providers = self.requested_providers or default_providers()
        self.session = ort.InferenceSession(self.model_path, options, providers=providers)
        meta = self.session.get_inputs()[0]
        self.input_name = meta.name
        self.input_shape = tuple(d if isinstance(d, int) else str(d) for d in meta.shape)
        self.output_name = self.session.get_outputs()[0].name

    def infer_impl(self, batch: np.ndarray) -> np.ndarray:
        return self.session.run([self.output_name], {self.input_name: batch})[0]

    def deactivate_impl(self) -> None:
        self.session = None

    def describe(self) -> dict:
        import onnxruntime as ort

        return {
            "backend": self.backend,
            "runner": self.name,
            "onnxruntime": ort.__version__,
            "providers": self.session.get_providers() if self.session else self.requested_providers,
            "graph_optimization": self.graph_optimization,
            **({"disable_quant_qdq": True} if self.disable_quant_qdq else {}),
        }


def default_providers() -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available] or available
