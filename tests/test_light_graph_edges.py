"""Edge cases of graph surgery on the onnx wheel's real light graphs (sanitize, Q/DQ insertion): initializers that
IR 3 lists as graph inputs, and initializers read only from inside a subgraph."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from test_placement_rules import light
from trtlab.quantization.insertion import quantize_graph
from trtlab.quantization.placement import DEFAULT_RULES, plan_quantization


def _with_if_reading_outer_initializer(model):
    """`model` plus an If node whose branches read an initializer of the main graph only from inside (as exporters
    write data-dependent heads); its output becomes a second graph output."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    graph.initializer.extend([numpy_helper.from_array(np.array(True), "use_extra"),
                              numpy_helper.from_array(np.arange(4, dtype=np.float32), "only_in_branch")])

    def branch(name):
        return helper.make_graph([helper.make_node("Identity", ["only_in_branch"], [f"{name}_out"], name=f"{name}_id")],
                                 name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [4])])

    graph.node.append(helper.make_node("If", ["use_extra"], ["extra_out"], name="If_extra",
                                       then_branch=branch("then"), else_branch=branch("else")))
    graph.output.append(helper.make_tensor_value_info("extra_out", TensorProto.FLOAT, [4]))
    onnx.checker.check_model(out)
    return out


@pytest.mark.parametrize("high_precision", ["fp32", "fp16"])  # fp16: the precision rewrite prunes too
def test_qdq_insertion_keeps_initializers_read_only_by_a_subgraph(high_precision):
    model = _with_if_reading_outer_initializer(light("squeezenet"))
    plan = plan_quantization(model, (), DEFAULT_RULES)
    quantized = quantize_graph(model, plan, {t: 0.05 for t in plan.activations}, high_precision).model
    assert "only_in_branch" in {i.name for i in quantized.graph.initializer}
    onnx.checker.check_model(quantized, full_check=True)


def test_sanitize_leaves_no_initializer_among_the_graph_inputs():
    """IR 3 lists every initializer as a graph input; at IR ≥ 4 that makes it an input a caller may override, which
    ONNX Runtime then refuses to treat as a constant (no folding) — SqueezeNet kept 13 conv biases so."""
    model = light("squeezenet")
    initializers = {i.name for i in model.graph.initializer}
    assert [i.name for i in model.graph.input if i.name in initializers] == []
    assert [i.name for i in model.graph.input] == ["data_0"]


def test_a_graph_below_opset_13_is_converted_not_relabelled():
    """Per-axis Q/DQ needs opset 13. Writing 13 over an opset-12 graph's number changes what its ops mean (Squeeze-13
    reads its axes from an input, not an attribute); ONNX's version converter rewrites them."""
    out = onnx.ModelProto()
    out.CopyFrom(light("squeezenet"))
    for opset in out.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = 12
    flatten = next(n for n in out.graph.node if n.op_type == "Flatten")  # [N, 1000, 1, 1] → [N, 1000]
    squeeze = helper.make_node("Squeeze", list(flatten.input), list(flatten.output), name=flatten.name, axes=[2, 3])
    flatten.CopyFrom(squeeze)
    del out.graph.value_info[:]
    onnx.checker.check_model(out, full_check=True)
    plan = plan_quantization(out, (), DEFAULT_RULES)
    quantized = quantize_graph(out, plan, {t: 0.05 for t in plan.activations}, "fp32")
    assert quantized.opset >= 13
    assert [len(n.input) for n in quantized.model.graph.node if n.op_type == "Squeeze"] == [2]


def test_scales_for_another_graph_are_refused_in_one_error_line():
    from trtlab.core.errors import UserError

    model = light("squeezenet")
    plan = plan_quantization(model, (), DEFAULT_RULES)
    scales = {t: 0.05 for t in plan.activations[1:]}  # made for a plan without its first tensor
    with pytest.raises(UserError) as err:
        quantize_graph(model, plan, scales, "fp32")
    assert err.value.line().startswith(f"error: no calibrated scale for 1 tensor(s) ({plan.activations[0]})")
    assert " — recalibrate" in err.value.line() and "\n" not in err.value.line()
