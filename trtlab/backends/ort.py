"""ONNX Runtime backend: the reference that runs everywhere (CPU; CUDA EP when onnxruntime-gpu is installed)."""
from __future__ import annotations

import os

import numpy as np

from trtlab.backends.runner import Runner

from trtlab.core.ort_session import OPTIMIZATION_LEVELS as OPT_LEVELS


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
        from trtlab.core.ort_session import ort_session

        self.session = ort_session(self.model_path, optimization=self.graph_optimization,
                                   threads=self.intra_op_threads, qdq_fusion=not self.disable_quant_qdq,
                                   providers=self.requested_providers or default_providers())
        meta = self.session.get_inputs()[0]
        self.input_name = meta.name
        self.input_shape = tuple(d if isinstance(d, int) else str(d) for d in meta.shape)
        self.output_name = self.session.get_outputs()[0].name

    def infer_impl(self, batch: np.ndarray) -> np.ndarray:
        return self.session.run([self.output_name], {self.input_name: batch})[0]

    def deactivate_impl(self) -> None:
        self.session = None

    def identity(self) -> str:
        """'ort-cpu' (the literal reference), or 'ort-cuda' etc. when another execution provider runs first."""
        providers = self.session.get_providers() if self.session else (self.requested_providers or
                                                                       default_providers())
        first = providers[0] if providers else "CPUExecutionProvider"
        return f"ort-{first.removesuffix('ExecutionProvider').lower()}"

    def batch_dependent(self) -> bool:
        # The CPU provider computes each image alike at any batch (its GEMM blocks over K, never over the batch:
        # checked on the demo model, tests/test_backend_identity.py); other providers pick kernels per shape.
        return self.identity() != "ort-cpu"

    def describe(self) -> dict:
        import onnxruntime as ort

        return {
            "backend": self.backend,
            "runner": self.name,
            "onnxruntime": ort.__version__,
            "providers": self.session.get_providers() if self.session else self.requested_providers,
            "graph_optimization": self.graph_optimization,
            **({"disable_quant_qdq": True} if self.disable_quant_qdq else {}),
            "identity": self.identity(),
        }


def default_providers() -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available] or available
