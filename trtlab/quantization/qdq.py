"""Explicit INT8 quantization in the ONNX graph = placement (trtlab.quantization.placement: where Q/DQ go, rule by
rule) + insertion (trtlab.quantization.insertion: the Q/DQ nodes, INT8 weights and '=fp16' guards). This module only
names both halves in one place; the code lives in those two modules."""
from __future__ import annotations

from trtlab.graph.sanitize import name_nodes as ensure_node_names  # noqa: F401  (the one namer; sanitize calls it)
from trtlab.quantization.insertion import (INT8_MAX, apply_guard_precisions, check_quantized_model,  # noqa: F401
                                           insert_qdq, quantize_weight)
from trtlab.quantization.placement import (RULES, QuantPlan, plan_quantization, residual_add_input,  # noqa: F401
                                           weight_axis, weighted_op_inputs)

__all__ = ["ensure_node_names", "INT8_MAX", "apply_guard_precisions", "check_quantized_model", "insert_qdq",
           "quantize_weight", "RULES", "QuantPlan", "plan_quantization", "residual_add_input", "weight_axis",
           "weighted_op_inputs"]
