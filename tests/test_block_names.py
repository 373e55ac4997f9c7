"""Issue 26.4: one vocabulary — a tensor or node of an exported graph read by the model's own module path, the same
for the threshold tables, sensitivity and guard lists."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def test_demo_model_tensors_and_nodes_name_the_same_block(demo_model):
    from trtlab.graph.block_names import AFTER, block_index, block_name, block_names

    model = onnx.load(str(demo_model))
    index = block_index(model)
    clip = next(n for n in model.graph.node if n.op_type == "Clip")
    conv = model.graph.node[0]
    # The exporter's names say nothing about place; the block does, and tensor and node read alike.
    assert block_name(index, conv.name) == "_conv_stem"
    assert block_name(index, clip.output[0]) == block_name(index, clip.name) == f"_conv_stem{AFTER}Clip"
    assert block_name(str(demo_model), clip.output[0]) == f"_conv_stem{AFTER}Clip"  # a path works too
    assert block_name(block_names(model), clip.name) == f"_conv_stem{AFTER}Clip"
    assert block_name(index, model.graph.input[0].name) == f"input {model.graph.input[0].name}"
    assert block_name(index, "not-in-graph") == "not-in-graph"
    named = {block_name(index, n.name) for n in model.graph.node}
    assert not any(name.startswith(("node_", "hardtanh")) for name in named)


def test_quantized_weights_and_inserted_qdq_keep_the_block():
    """A Q/DQ graph: the Conv reads its weight through a DequantizeLinear and its activation through Q/DQ; both the
    Conv and the inserted nodes read as the module."""
    from trtlab.graph.block_names import block_index

    w = numpy_helper.from_array(np.ones((2, 1, 1, 1), np.int8), "features.0.conv.weight")
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"], name="q_x"),
             helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_dq"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["features.0.conv.weight", "s", "z"], ["w_dq"], name="dq_w"),
             helper.make_node("Conv", ["x_dq", "w_dq"], ["conv_out"], name="node_Conv_7"),
             helper.make_node("Relu", ["conv_out"], ["relu_3"], name="n1"),
             helper.make_node("QuantizeLinear", ["relu_3", "s", "z"], ["r_q"], name="q_r")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("r_q", TensorProto.INT8, [1, 2, 2, 2])],
                              [w, scale, zero])
    index = block_index(helper.make_model(graph))
    assert index.name("node_Conv_7") == "features.0.conv"
    assert index.name("relu_3") == "features.0.conv › Relu"
    assert index.name("r_q") == "features.0.conv › Relu"  # the Q after the Relu carries the Relu's block
    assert index.name("x_dq") == index.name("q_x") == "input x"  # Q/DQ on the graph input name the input
