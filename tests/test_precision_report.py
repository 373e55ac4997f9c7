"""The precision report's rules (trtlab.graph.fusion) against TensorRT's documented Q/DQ processing, pattern by
pattern on graphs made here with onnx.helper, and on ModelOpt-style versions of the onnx wheel's light models made
without ModelOpt (FP16 weights + Q + DQ on weights and activations): no phantom unfused Q/DQ."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtlab.graph.fusion import precision_report
from trtlab.graph.roofline import FITTED, GPUS, kernel_seconds, kernels, speedup_estimate

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
C = 8  # channels of the hand-made graphs


class Graph:
    """A small NCHW graph built node by node: Q/DQ pairs, convolutions with quantized weights, any op."""

    def __init__(self):
        self.nodes, self.inits, self.inputs = [], [], []
        self.rng = np.random.default_rng(0)
        self.count = 0
        self.inits.append(numpy_helper.from_array(np.array(0, np.int8), "zp"))

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def input(self, name: str = "x", channels: int = C) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, channels, 16, 16]))
        return name

    def op(self, op_type: str, inputs: list, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{out}_node", **attrs))
        return out

    def scale(self, value: float = 0.05) -> str:
        name = self.name("scale")
        self.inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
        return name

    def q(self, tensor: str, scale: float = 0.05) -> str:
        s = self.scale(scale)
        return self.op("QuantizeLinear", [tensor, s, "zp"])

    def qdq(self, tensor: str, scale: float = 0.05, zero_point: str = "zp") -> str:
        """Q → DQ on `tensor`; `zero_point` an initializer ('zp': INT8 0; 'uzp': UINT8 128, as asymmetric quantizers
        write)."""
        s = self.scale(scale)
        return self.op("DequantizeLinear", [self.op("QuantizeLinear", [tensor, s, zero_point]), s, zero_point])

    def weight(self, cout: int = C, cin: int = C, k: int = 3, modelopt: bool = True) -> str:
        """A conv weight: FP16 values + Q + DQ (ModelOpt's form) or INT8 values + DQ (trtlab's)."""
        values = self.rng.normal(0, 0.1, (cout, cin, k, k)).astype(np.float32)
        scale = np.abs(values).reshape(cout, -1).max(1) / 127
        s, z = self.name("wscale"), self.name("wzp")
        self.inits += [numpy_helper.from_array(scale.astype(np.float32), s),
                       numpy_helper.from_array(np.zeros(cout, np.int8), z)]
        w = self.name("w")
        if modelopt:
            self.inits.append(numpy_helper.from_array(values.astype(np.float16), w))
            cast = self.op("Cast", [w], to=TensorProto.FLOAT)
            quantized = self.op("QuantizeLinear", [cast, s, z], axis=0)
        else:
            self.inits.append(numpy_helper.from_array(np.rint(values / scale[:, None, None, None]).astype(np.int8), w))
            quantized = w
        return self.op("DequantizeLinear", [quantized, s, z], axis=0)

    def conv(self, data: str, weight: str | None = None, cin: int = C) -> str:
        return self.op("Conv", [data, weight or self.weight(cin=cin)], pads=[1, 1, 1, 1])

    def model(self, *outputs: str):
        graph = helper.make_graph(self.nodes, "g", self.inputs, [], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.value_info}
        model.graph.output.extend(inferred[o] for o in outputs)  # outputs typed as shape inference types them
        onnx.checker.check_model(model)
        return model


def first(graph: Graph, op_type: str) -> str:
    """The name of the graph's first node of `op_type`."""
    return next(n.name for n in graph.nodes if n.op_type == op_type)


def layer_of(report, node_name: str):
    return next(layer for layer in report.layers if node_name in layer.nodes)


def assert_consistent(report):
    """No node claimed by two layers — except a Q after a Concat, which moves to each of its inputs (Q backward
    propagation) and fuses into each producer — and no folded weight Q among the unfused."""
    names = [n for layer in report.layers for n in layer.nodes]
    twice = {n for n in names if names.count(n) > 1}
    assert all(report.nodes.set_index("node").loc[n, "op"] == "QuantizeLinear" for n in twice), twice
    for item in report.unfused_qdq:
        assert "folded" not in item["why"]


# -- weights -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("modelopt", [True, False])
def test_a_quantized_weight_is_folded_at_build_time_never_unfused(modelopt):
    g = Graph()
    out = g.op("Relu", [g.conv(g.qdq(g.input()), g.weight(modelopt=modelopt))])
    report = precision_report(g.model(out))
    assert report.unfused_qdq == [] and report.summary()["weighted_layers"] == {"INT8": 1}
    assert len(report.folded_weight_quantizes) == (1 if modelopt else 0)
    conv = next(layer for layer in report.layers if layer.kind == "Conv")
    assert conv.computes_in == "INT8" and all(n in conv.nodes for n in report.folded_weight_quantizes)
    assert report.input_quantize  # the graph input's Q stays a layer of its own, listed apart


def test_a_float_layer_s_quantized_weight_is_folded_too():
    g = Graph()
    out = g.conv(g.op("Sin", [g.input()]))  # data not quantized: the conv runs float, its weight Q/DQ folds
    report = precision_report(g.model(out))
    assert report.unfused_qdq == [] and report.mac_share["FP32"] == 1.0
    assert len(report.folded_weight_quantizes) == 1


# -- pools around Q --------------------------------------------------------------------------------------------------
def test_maxpool_then_q_after_an_int8_conv_commutes_and_fuses():
    g = Graph()
    pooled = g.op("MaxPool", [g.op("Relu", [g.conv(g.qdq(g.input()))])], kernel_shape=[2, 2], strides=[2, 2])
    out = g.conv(g.qdq(pooled))
    report = precision_report(g.model(out))
    assert report.unfused_qdq == []
    assert layer_of(report, first(g, "MaxPool")).computes_in == "INT8"
    assert_consistent(report)


def test_dq_maxpool_q_modelopt_style_is_one_int8_layer_not_int8_plus_unfused():
    g = Graph()
    relu = g.op("Relu", [g.conv(g.qdq(g.input()))])
    pooled = g.op("MaxPool", [g.qdq(relu)], kernel_shape=[2, 2], strides=[2, 2])
    q_after = g.qdq(pooled)
    report = precision_report(g.model(g.conv(q_after)))
    pool = layer_of(report, first(g, "MaxPool"))
    assert pool.computes_in == "INT8" and pool.output == "INT8"
    assert report.unfused_qdq == []  # the Q after the MaxPool fuses with it (DQ forward, Q backward)
    assert_consistent(report)


def test_maxpool_on_float_data_then_q_is_float_with_one_unfused_q():
    g = Graph()
    pooled = g.op("MaxPool", [g.op("Sin", [g.input()])], kernel_shape=[2, 2], strides=[2, 2])
    report = precision_report(g.model(g.conv(g.qdq(pooled))))
    pool = layer_of(report, first(g, "MaxPool"))
    assert pool.computes_in == "FP32"  # either commuted and fused, or float with its Q unfused — never both
    assert [q["op"] for q in report.unfused_qdq] == ["Quantize"]


def test_dq_average_pool_q_is_the_documented_int8_pooling_layer():
    g = Graph()
    pooled = g.op("AveragePool", [g.qdq(g.op("Relu", [g.conv(g.qdq(g.input()))]))], kernel_shape=[2, 2],
                  strides=[2, 2])
    report = precision_report(g.model(g.conv(g.qdq(pooled))))
    layer = layer_of(report, first(g, "AveragePool"))
    assert (layer.computes_in, layer.output, layer.assumed) == ("INT8", "INT8", "")
    assert report.unfused_qdq == [] and report.assumptions == []


def _average(g: Graph, op: str, tensor: str) -> str:
    if op == "GlobalAveragePool":
        return g.op(op, [tensor])
    axes = g.name("axes")
    g.inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), axes))  # ReduceMean-18: axes as an input
    return g.op("ReduceMean", [tensor, axes], keepdims=1)


def test_global_average_pool_and_spatial_reduce_mean_are_one_reduce_layer_predicted_alike():
    """ONNX-TensorRT imports both as a Reduce (AVG) layer; the guide's quantizable pool is AveragePool (Pooling):
    before, GlobalAveragePool was reported as a documented INT8 pool while ReduceMean was 'assumed'."""
    reports, layers = {}, {}
    for op in ("GlobalAveragePool", "ReduceMean"):
        g = Graph()
        mean = _average(g, op, g.qdq(g.op("Relu", [g.conv(g.qdq(g.input()))])))
        reports[op] = report = precision_report(g.model(g.conv(g.qdq(mean))))
        layers[op] = layer = layer_of(report, first(g, op))
        assert (layer.computes_in, layer.output) == ("INT8", "INT8") and report.unfused_qdq == []
        assert f"imports {op} as a Reduce layer (AVG), not a Pooling layer" in layer.assumed
        assert "not documented" in layer.assumed
        assert report.assumptions == [{"layer": layer.name, "assumed": layer.assumed}]
        assert "undocumented / assumed" in report.headline() and "undocumented / assumed" in repr(report)
        assert report.table()["note"].str.contains("undocumented / assumed").any()
    # one rule, the op's name apart
    assert layers["GlobalAveragePool"].assumed.replace("GlobalAveragePool", "op") == \
        layers["ReduceMean"].assumed.replace("ReduceMean", "op")
    assert reports["GlobalAveragePool"].summary()["assumed"] == reports["ReduceMean"].summary()["assumed"] == 1


def test_average_pool_with_a_float_reader_leaves_its_dq_a_layer():
    g = Graph()
    pooled = g.op("GlobalAveragePool", [g.qdq(g.op("Relu", [g.conv(g.qdq(g.input()))]))])
    report = precision_report(g.model(g.op("Sin", [pooled])))
    assert [q["op"] for q in report.unfused_qdq] == ["Dequantize"]
    assert layer_of(report, first(g, "GlobalAveragePool")).computes_in == "FP32"


def test_global_max_pool_commutes_like_maxpool_but_as_a_reduce_layer_is_assumed():
    g = Graph()
    pooled = g.op("GlobalMaxPool", [g.qdq(g.op("Relu", [g.conv(g.qdq(g.input()))]))])
    report = precision_report(g.model(g.conv(g.qdq(pooled))))
    layer = layer_of(report, first(g, "GlobalMaxPool"))
    assert (layer.computes_in, layer.output) == ("INT8", "INT8") and report.unfused_qdq == []
    assert "imports GlobalMaxPool as a Reduce layer (MAX)" in layer.assumed and "MaxPool's" in layer.assumed


def test_a_maxpool_requantizes_only_when_its_scales_differ():
    """`_requantizes` compared a scale it could never read (None) with the DQ's: every DQ → MaxPool → Q was reported
    as requantizing, equal scales included (all the MaxPools of ModelOpt-style ResNet-50 / Inception; their FP16
    scales in test_light_models_have_no_phantom_unfused_qdq)."""
    notes = {}
    for after in (0.05, 0.1):
        g = Graph()
        relu = g.op("Relu", [g.conv(g.qdq(g.input()))])
        pooled = g.op("MaxPool", [g.qdq(relu, 0.05)], kernel_shape=[2, 2], strides=[2, 2])
        report = precision_report(g.model(g.conv(g.qdq(pooled, after))))
        pool = layer_of(report, first(g, "MaxPool"))
        assert (pool.computes_in, pool.output) == ("INT8", "INT8") and report.unfused_qdq == []
        notes[after] = pool.note
    assert "requantizes" not in notes[0.05] and notes[0.1].endswith("input and output scales differ: requantizes")


# -- UINT8 Q/DQ -------------------------------------------------------------------------------------------------------
def _uint8_graph():
    """Activations quantized UINT8 (zero point 128, as asymmetric quantizers write them), weights INT8 per channel."""
    g = Graph()
    g.inits.append(numpy_helper.from_array(np.array(128, np.uint8), "uzp"))
    hidden = g.op("Relu", [g.conv(g.qdq(g.input(), zero_point="uzp"), g.weight(modelopt=False))])
    return g, g.conv(g.qdq(hidden, zero_point="uzp"), g.weight(modelopt=False))


def test_uint8_qdq_is_reported_unsupported_by_tensorrt_not_int8():
    """ONNX-TensorRT takes UINT8 only as a network input or output: this graph was reported '100 % INT8, 0 unfused'."""
    g, out = _uint8_graph()
    report = precision_report(g.model(out))
    assert report.mac_share["INT8"] == 0.0 and report.summary()["weighted_layers"] == {"FP32": 2}
    activations = [n.name for n in g.nodes if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                   and "uzp" in n.input]
    assert len(activations) == 4
    assert [u["node"] for u in report.unsupported_qdq] == activations
    assert all("unsupported by TensorRT: a UINT8 Q/DQ" in u["why"] and "not INT8" in u["why"]
               for u in report.unsupported_qdq)
    assert report.summary()["unsupported_qdq"] == 4 and report.unfused_qdq == []
    sentence = report.sentence()
    assert sentence.startswith("TensorRT does not support this graph's 4 UINT8 Q/DQ node(s)") and "INT8" in sentence
    assert sentence.count(". ") == 0 and "100 %" not in sentence and "should beat" not in sentence
    assert report.headline().startswith("4 UINT8 Q/DQ unsupported by TensorRT (not INT8)")
    text = repr(report)
    assert text.splitlines()[0] == sentence and "Unsupported by TensorRT: " in text
    rows = report.table().set_index("layer")
    assert all(rows.loc[name, "note"].startswith("unsupported by TensorRT") for name in activations)
    assert "<b>Unsupported by TensorRT</b>" in report._repr_html_()
    from trtlab.graph.fusion import precision_overview

    assert precision_overview({"uint8": report}).loc["uint8", "unsupported Q/DQ"] == 4


def test_a_q_without_zero_point_is_int8_for_tensorrt():
    """ONNX's default quantized type is UINT8; TensorRT's parser makes a Q without zero point INT8 ("ONNX default is
    UINT8, TRT will default to INT8"), and the DQ of it likewise: not UINT8."""
    g = Graph()
    s = g.scale()
    x = g.op("DequantizeLinear", [g.op("QuantizeLinear", [g.input(), s]), s])
    report = precision_report(g.model(g.op("Relu", [g.conv(x)])))
    assert report.unsupported_qdq == [] and report.mac_share["INT8"] == 1.0


# -- residual Adds ---------------------------------------------------------------------------------------------------
def test_residual_add_with_one_conv_producer_fuses_into_it():
    g = Graph()
    x = g.qdq(g.input())
    added = g.op("Add", [g.conv(x), g.qdq(g.op("Relu", [g.conv(x)]))])
    report = precision_report(g.model(g.conv(g.qdq(g.op("Relu", [added])))))
    add = first(g, "Add")
    layer = layer_of(report, add)
    assert layer.kind == "Conv" and (layer.computes_in, layer.output) == ("INT8", "INT8")
    assert "residual" in layer.note and report.unfused_qdq == []
    assert_consistent(report)


def test_residual_add_with_two_conv_producers_fuses_into_one_only():
    g = Graph()
    x = g.qdq(g.input())
    a, b = g.conv(x), g.conv(x)
    added = g.op("Add", [a, b])
    report = precision_report(g.model(g.op("Relu", [added])))
    add = first(g, "Add")
    owners = [layer for layer in report.layers if add in layer.nodes]
    assert len(owners) == 1 and owners[0].kind == "Conv"
    convs = [layer for layer in report.layers if layer.kind == "Conv"]
    other = next(layer for layer in convs if layer is not owners[0])
    assert add not in other.nodes and other.output == "FP32"  # its output is the residual input, read as float
    assert "float residual" in owners[0].note
    assert_consistent(report)


# -- Concat --------------------------------------------------------------------------------------------------------
def test_dq_into_a_concat_with_float_inputs_is_a_boundary_not_unfused():
    g = Graph()
    x = g.input()
    joined = g.op("Concat", [g.qdq(g.op("Relu", [g.conv(g.qdq(x))])), g.op("Sin", [x])], axis=1)
    report = precision_report(g.model(g.op("Relu", [joined])))
    assert report.unfused_qdq == []
    concat = next(n for n in g.nodes if n.op_type == "Concat")
    dq = layer_of(report, next(n.name for n in g.nodes if n.output[0] == concat.input[0]))
    assert dq.kind == "Dequantize" and "Concat" in dq.note and dq.assumed
    assert layer_of(report, concat.name).computes_in != "INT8"


@pytest.mark.parametrize("scale", [0.05, 0.1])
def test_a_dq_into_a_concat_whose_other_producers_write_int8_meets_the_moved_q(scale):
    """ModelOpt's Inception (n37, n80): a Concat of a convolution's output (no Q/DQ of its own) and a dequantized
    tensor, quantized after. The Q moves back to each input: the convolution writes INT8, and the DQ meets the Q — one
    scale cancels, two requantize. It was listed as an INT8 → float boundary into a float Concat."""
    g = Graph()
    x = g.qdq(g.input())
    joined = g.op("Concat", [g.op("Relu", [g.conv(x)]), g.qdq(g.op("Relu", [g.conv(x)]), scale)], axis=1)
    report = precision_report(g.model(g.conv(g.qdq(joined, 0.05), cin=2 * C)))
    concat = next(n for n in g.nodes if n.op_type == "Concat")
    dq = layer_of(report, next(n.name for n in g.nodes if n.output[0] == concat.input[1]))
    assert dq.kind == "Dequantize" and (dq.computes_in, dq.output) == ("-", "INT8")
    assert f"DQ → Q through {concat.name}" in dq.note and "boundary" not in dq.note
    assert ("one scale, cancels" if scale == 0.05 else "scales differ: requantizes") in dq.note
    assert dq.assumed.startswith("a DQ → Q pair")
    assert layer_of(report, concat.name).output == "INT8"
    assert [l.output for l in report.layers if l.kind == "Conv"][:2] == ["INT8", "INT8"]
    assert report.unfused_qdq == [] and report.mac_share["INT8"] == 1.0
    assert_consistent(report)


def test_a_float_producer_into_a_quantized_concat_keeps_the_moved_q_as_a_kernel():
    """The same Q backward propagation with a float producer (Sin): its copy of the Q is an unfused Quantize on that
    input alone (it was absorbed, unseen, into the convolution)."""
    g = Graph()
    x = g.input()
    joined = g.op("Concat", [g.op("Relu", [g.conv(g.qdq(x))]), g.op("Sin", [x])], axis=1)
    out = g.conv(g.qdq(joined), cin=2 * C)
    report = precision_report(g.model(out))
    q = next(n for n in g.nodes if n.op_type == "QuantizeLinear" and n.input[0] == joined)
    sin = first(g, "Sin")
    assert [(u["node"], u["op"]) for u in report.unfused_qdq] == [(q.name, "Quantize")]
    assert f"moved before {first(g, 'Concat')}" in report.unfused_qdq[0]["why"] and "(Sin)" in \
        report.unfused_qdq[0]["why"]
    moved = next(l for l in report.layers if l.note.startswith("unfused"))
    assert moved.elements == {"in": C * 16 * 16, "out": C * 16 * 16, "weights": 0}  # that input, not the Concat
    assert layer_of(report, sin).computes_in == "FP32"
    assert_consistent(report)


def test_concat_of_int8_inputs_then_q_is_int8():
    g = Graph()
    x = g.qdq(g.input())
    joined = g.op("Concat", [g.qdq(g.op("Relu", [g.conv(x)])), g.qdq(g.op("Relu", [g.conv(x)]))], axis=1)
    report = precision_report(g.model(g.conv(g.qdq(joined), cin=2 * C)))
    assert report.unfused_qdq == [] and report.mac_share["INT8"] == 1.0


# -- the light models, trtlab's graph and a ModelOpt-style one --------------------------------------------------------
def _light_qdq(name: str):
    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.insertion import quantize_graph
    from trtlab.quantization.placement import DEFAULT_RULES, plan_quantization

    model = onnx.load(str(sanitize_model(LIGHT / f"light_{name}.onnx", Path(os.environ["TRTLAB_WORKSPACE"]))))
    plan = plan_quantization(model, (), DEFAULT_RULES, int8_float_path="fp16")
    return quantize_graph(model, plan, {t: 0.05 for t in plan.activations}, "fp16").model


def modelopt_style(model):
    """What ModelOpt writes for INT8 (made here without it): each INT8 weight back to FP16 values read through
    QuantizeLinear → DequantizeLinear, and a Q/DQ pair after every MaxPool on dequantized data (its output quantized
    again for the convolutions reading it)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    nodes, scale = [], "modelopt_style_scale"
    graph.initializer.append(numpy_helper.from_array(np.array(0.05, np.float16), scale))
    for node in graph.node:
        source = inits.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if source is not None and source.data_type == TensorProto.INT8 and source.dims:
            values = numpy_helper.to_array(source).astype(np.float32)
            scales = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            shape = [1] * values.ndim
            shape[axis] = -1
            weight = f"{source.name}__fp16"
            graph.initializer.append(numpy_helper.from_array((values * scales.reshape(shape)).astype(np.float16),
                                                             weight))
            nodes.append(helper.make_node("QuantizeLinear", [weight, node.input[1], node.input[2]],
                                          [f"{weight}__q"], name=f"{weight}__Q", axis=axis))
            node.input[0] = f"{weight}__q"
        nodes.append(node)
        if node.op_type == "MaxPool" and producer.get(node.input[0]) is not None \
                and producer[node.input[0]].op_type == "DequantizeLinear":
            out = node.output[0]
            node.output[0] = f"{out}__pre_q"
            nodes += [helper.make_node("QuantizeLinear", [node.output[0], scale, "trtlab_zero_point_int8"],
                                       [f"{out}__mq"], name=f"{out}__mQ"),
                      helper.make_node("DequantizeLinear", [f"{out}__mq", scale, "trtlab_zero_point_int8"], [out],
                                       name=f"{out}__mDQ")]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del graph.value_info[:]
    onnx.checker.check_model(copy)
    return copy


@pytest.fixture(scope="module", params=["resnet50", "inception_v1"])
def light_pair(request):
    model = _light_qdq(request.param)
    return request.param, model, modelopt_style(model)


def assert_every_unfused_is_real(report, model):
    """Each unfused Q quantizes what a float layer computed (not a weight, not INT8 data); each unfused DQ has a
    float reader."""
    nodes = {n.name: n for n in model.graph.node}
    producer = {o: n for n in model.graph.node for o in n.output}
    layer = {name: lay for lay in report.layers for name in lay.nodes}
    for item in report.unfused_qdq:
        node = nodes[item["node"]]
        if node.op_type == "QuantizeLinear":
            source = producer[node.input[0]]
            assert source.op_type not in ("DequantizeLinear", "Constant") and layer[source.name].computes_in \
                in ("FP16", "FP32"), item
        else:
            readers = [n for n in model.graph.node if node.output[0] in n.input]
            assert any(layer[r.name].computes_in != "INT8" for r in readers), item


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_more_light_models_name_only_real_unfused_qdq(name):
    trtlab_graph = _light_qdq(name)
    for model in (trtlab_graph, modelopt_style(trtlab_graph)):
        report = precision_report(model, name)
        assert_consistent(report)
        assert_every_unfused_is_real(report, model)
        assert report.mac_share["INT8"] == 1.0
    # ShuffleNet's DQs into Concats with float inputs are boundaries, marked assumed, not unfused
    assumed = [a for a in report.assumptions if "Concat" in a["assumed"]]
    assert (len(assumed) > 0) == (name == "shufflenet")


def test_a_light_model_quantized_with_uint8_activations_by_onnx_runtime_is_unsupported_not_int8(tmp_path):
    """A real quantizer's UINT8 output (ONNX Runtime's quantize_static, QUInt8 activations, INT8 per-channel weights,
    as asymmetric quantizers like NNCF write them): every activation Q/DQ is unsupported, no MAC is INT8."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from trtlab.graph.sanitize import sanitize_model

    source = sanitize_model(LIGHT / "light_squeezenet.onnx", Path(os.environ["TRTLAB_WORKSPACE"]))
    graph_input = onnx.load(str(source)).graph.input[0]
    shape = [d.dim_value or 1 for d in graph_input.type.tensor_type.shape.dim]

    class Images(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{graph_input.name: rng.random(shape, dtype=np.float32)} for _ in range(2)])

        def get_next(self):
            return next(self.batches, None)

    target = tmp_path / "squeezenet-quint8.onnx"
    quantize_static(str(source), str(target), Images(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    model = onnx.load(str(target))
    quantizes = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    report = precision_report(model, "squeezenet-quint8")
    assert report.mac_share["INT8"] == 0.0 and report.unfused_qdq == []
    unsupported = {u["node"] for u in report.unsupported_qdq}
    assert {q.name for q in quantizes} <= unsupported and len(unsupported) == 2 * len(quantizes)
    assert report.sentence().startswith(f"TensorRT does not support this graph's {len(unsupported)} UINT8 Q/DQ")


def test_light_models_have_no_phantom_unfused_qdq(light_pair):
    name, trtlab_graph, modelopt_graph = light_pair
    assert any(n.op_type == "QuantizeLinear" and n.input[0].endswith("__fp16") for n in modelopt_graph.graph.node)
    reports = {kind: precision_report(model, f"{name}-{kind}")
               for kind, model in (("trtlab", trtlab_graph), ("modelopt", modelopt_graph))}
    for kind, report in reports.items():
        assert_consistent(report)
        assert report.mac_share["INT8"] == 1.0 and report.fp32_outside_guards == []
        by_name = {n.name: n for n in (trtlab_graph if kind == "trtlab" else modelopt_graph).graph.node}
        # the only unfused Q/DQ left are Qs after a layer TensorRT has no INT8 kernel for (Inception's LRN)
        assert {by_name[q["node"]].op_type for q in report.unfused_qdq} <= {"QuantizeLinear"}
        assert all("(LRN)" in q["why"] for q in report.unfused_qdq)
        assert len(report.unfused_qdq) == (2 if name == "inception_v1" else 0)
        assert_every_unfused_is_real(report, trtlab_graph if kind == "trtlab" else modelopt_graph)
    weight_qs = {n.name for n in modelopt_graph.graph.node if n.op_type == "QuantizeLinear"
                 and n.input[0].endswith("__fp16")}  # one per weight (a weight read by two convs: one Q)
    assert set(reports["modelopt"].folded_weight_quantizes) == weight_qs  # every one folded, none unfused
    assert reports["trtlab"].folded_weight_quantizes == []
    if name == "resnet50":  # the ModelOpt-style MaxPool: DQ → MaxPool → Q, one INT8 layer
        pool = next(l for l in reports["modelopt"].layers if l.kind == "MaxPool")
        assert pool.computes_in == "INT8" and any(n.endswith("__mQ") for n in pool.nodes)


def test_modelopt_style_maxpools_with_one_fp16_scale_do_not_requantize(light_pair):
    """Every DQ → MaxPool → Q of the ModelOpt-style graphs (FP16 scales, 0.05 before and after) was reported as
    'input and output scales differ: requantizes'; with the Q's scale moved to 0.1, every one does requantize."""
    name, _, modelopt_graph = light_pair
    inits = {i.name: i for i in modelopt_graph.graph.initializer}
    assert inits["modelopt_style_scale"].data_type == TensorProto.FLOAT16
    def fused_pools(model):  # DQ → MaxPool → Q (the Q modelopt_style put after it) as one layer
        return [l for l in precision_report(model, name).layers if any(n.endswith("__mQ") for n in l.nodes)]

    pools = fused_pools(modelopt_graph)
    assert len(pools) == {"resnet50": 1, "inception_v1": 9}[name] and {l.kind for l in pools} == {"MaxPool"}
    assert all(l.computes_in == "INT8" and "requantizes" not in l.note for l in pools)
    moved = onnx.ModelProto()
    moved.CopyFrom(modelopt_graph)
    scale = next(i for i in moved.graph.initializer if i.name == "modelopt_style_scale")
    scale.CopyFrom(numpy_helper.from_array(np.array(0.1, np.float16), scale.name))
    pools = fused_pools(moved)
    assert len(pools) == {"resnet50": 1, "inception_v1": 9}[name]
    assert all(l.note.endswith("input and output scales differ: requantizes") for l in pools)


def test_the_report_leads_with_one_sentence_and_a_per_gpu_estimate(light_pair):
    name, _, modelopt_graph = light_pair
    report = precision_report(modelopt_graph, name)
    sentence = report.sentence()
    assert repr(report).splitlines()[0] == sentence and sentence.count(". ") == 0
    assert sentence.startswith("TensorRT will compute 100 % of this graph's") and "estimate" in sentence
    assert "band" in sentence
    if name == "resnet50":
        assert "INT8 should beat FP16" in sentence
    else:  # FP16 LRNs between the INT8 layers, and their 2 unfused Qs: the band reaches below FP16
        assert "INT8 may not beat FP16" in sentence and "against it: 2 unfused Q/DQ" in sentence
    estimate = report.speedup_estimate(batch=8)
    assert list(estimate.index) == list(GPUS) and estimate.attrs["batch"] == 8
    assert "Estimate, not a measurement" in estimate.attrs["note"]
    speedup = estimate["speed-up (estimate)"]
    assert ((speedup > 1.0) & (speedup < 2.0)).all()  # the INT8 rate reached is below the 2× of the peaks
    assert ((estimate["speed-up low"] <= speedup) & (speedup <= estimate["speed-up high"])).all()


def test_the_speed_estimate_sees_float_graphs_gain_nothing_and_prices_int8_layers_and_their_quantize():
    g = Graph()
    x = g.input()
    float_report = precision_report(g.model(g.conv(g.op("Sin", [x]))))
    # nothing INT8: the two engines are one
    assert (speedup_estimate(float_report)["speed-up (estimate)"] == 1.0).all()
    assert "nothing runs in INT8" in float_report.sentence()
    # a wide 3×3 conv at batch 256 is compute-bound: its INT8 compute runs at the INT8 tensor-core rate reached
    # (twice the peak, times int8_relative); the graph input's Quantize, a memory-bound kernel of its own, costs
    # what the FP16 twin does not have
    g = Graph()
    big = g.conv(g.qdq(g.input(channels=256)), g.weight(cout=256, cin=256), cin=256)
    report = precision_report(g.model(big))
    conv = next(k for k in kernels(report) if k.kind == "Conv")
    twin = next(k for k in kernels(report, as_fp16=True) if k.kind == "Conv")
    t4, fixed = GPUS["T4"], FITTED.kernel_us * 1e-6
    assert (kernel_seconds(twin, t4, 256) - fixed) == pytest.approx(
        2 * FITTED.int8_relative * (kernel_seconds(conv, t4, 256) - fixed), rel=0.02)
    assert [k.kind for k in kernels(report)].count("Quantize") == 1
    assert "Quantize" not in [k.kind for k in kernels(report, as_fp16=True)]
    estimate = speedup_estimate(report, batch=256, gpus=["T4"])
    assert 1.0 < float(estimate.loc["T4", "speed-up (estimate)"]) < 2.0


# -- FP16 range: raised and lowered scales counted apart ------------------------------------------------------------
def test_fp16_range_counts_raised_and_lowered_scales_apart_and_warns_on_activations_beyond_fp16(caplog):
    import logging

    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.insertion import FP16_MAX, FP16_SMALLEST_SUBNORMAL, quantize_graph
    from trtlab.quantization.placement import DEFAULT_RULES, plan_quantization
    from trtlab.quantization.variants import report_fp16_range

    model = onnx.load(str(sanitize_model(LIGHT / "light_squeezenet.onnx", Path(os.environ["TRTLAB_WORKSPACE"]))))
    plan = plan_quantization(model, (), DEFAULT_RULES, int8_float_path="fp16")
    tiny, huge, wide = plan.activations[1], plan.activations[2], plan.activations[3]
    scales = {t: 0.05 for t in plan.activations}
    scales.update({tiny: 1e-10, huge: 1e6, wide: 600.0})  # raised; lowered; a range (600 × 127) beyond 65504
    graph = quantize_graph(model, plan, scales, "fp16")
    fp16_range = graph.fp16_range
    assert fp16_range["raised"]["activations"] == 1 and fp16_range["lowered"]["activations"] == 1
    assert fp16_range["activations_beyond_fp16"] == [t for t in plan.activations if t in (huge, wide)]
    summary = graph.summary()
    assert summary["scales_lowered_to_fp16_max"] == 1
    assert summary["scales_raised_to_fp16_subnormal"] == 1 + fp16_range["raised"]["weights"]
    assert summary["clamped_scales"] == summary["scales_raised_to_fp16_subnormal"] + 1  # the sum, as before
    inits = {i.name: float(numpy_helper.to_array(i)) for i in graph.model.graph.initializer if i.name in
             (f"{tiny}__scale", f"{huge}__scale")}
    assert inits == {f"{tiny}__scale": FP16_SMALLEST_SUBNORMAL, f"{huge}__scale": FP16_MAX}
    with caplog.at_level(logging.INFO, logger="trtlab.quantization.variants"):
        report_fp16_range("int8-x", fp16_range)
    lines = [r.getMessage() for r in caplog.records]
    assert any("raised to FP16's smallest subnormal" in line and "1 activation" in line for line in lines)
    assert any("lowered to FP16's largest value (65504)" in line and "1 activation" in line for line in lines)
    assert not any("lowered" in line and "subnormal" in line for line in lines)
    warning = next(r for r in caplog.records if r.levelno == logging.WARNING).getMessage()
    assert huge in warning and wide in warning and "Recipe(high_precision='fp32')" in warning
    # the FP32 float path moves nothing
    assert quantize_graph(model, plan, scales, "fp32").fp16_range["lowered"] == {"weights": 0, "activations": 0}


def test_overview_leads_with_a_tensorrt_measurement_and_ignores_cpu_timings(light_pair):
    from trtlab.backends.tensorrt.latency import latency_stats, latency_table
    from trtlab.graph.fusion import precision_overview
    from trtlab.workflows.engine_reports import ORT_TIMING_NOTE, LatencyReport

    from trtlab.graph.sanitize import sanitize_model

    name, _, modelopt_graph = light_pair
    float_graph = sanitize_model(LIGHT / f"light_{name}.onnx", Path(os.environ["TRTLAB_WORKSPACE"]))
    reports = {"fp32": precision_report(float_graph, "fp32"), "int8-minmax": precision_report(modelopt_graph, name)}
    assert reports["fp32"].mac_share["FP32"] == 1.0 and "nothing runs in INT8" in reports["fp32"].sentence()
    timings = {"fp16": [2.0] * 20, "int8-minmax": [1.25] * 20}  # ms per batch of 8
    rows = [{"variant": v, "backend": b, "timer": "t", **latency_stats(ms, 8)} for v, ms in timings.items()
            for b in ["trt"]]
    on_gpu = LatencyReport(latency_table(rows), "TensorRT (GPU time, CUDA events)", 20)
    overview = precision_overview(reports, latency=on_gpu)
    lines = repr(overview).splitlines()
    assert lines[0].startswith("Measured on TensorRT") and "int8-minmax runs 1.60× at batch 8 as fast as fp16" in \
        lines[0]
    assert lines[1].startswith(f"{name}: TensorRT will compute 100 %")  # the prediction right after
    # the measurement replaces the estimate: the speed clause is the measured one, no per-GPU estimate table
    assert lines[2].startswith("INT8 is 1.600× faster than FP16 on this GPU") and overview.speed.source == "measured"
    assert overview.estimate is None and "INT8 vs FP16 per GPU" not in repr(overview)
    assert overview.loc["int8-minmax", "unfused Q/DQ"] == len(reports["int8-minmax"].unfused_qdq)
    html = overview._repr_html_()
    assert html.index("Measured on TensorRT") < html.index("TensorRT will compute") < html.index("<table")
    report_html = reports["int8-minmax"]._repr_html_()
    assert report_html.startswith("<p><b>TensorRT will compute") and "Undocumented / assumed" in report_html
    on_cpu = LatencyReport(latency_table(rows), "ONNX Runtime (CPU)", 20, ORT_TIMING_NOTE)
    estimated = precision_overview(reports, latency=on_cpu)  # never a comparison: the estimate stays
    assert estimated.lines()[0] == overview.sentence and estimated.speed.source == "estimate"
    assert "only a TensorRT build" in estimated.lines()[1] and list(estimated.estimate.index) == list(GPUS)
    assert "not a TensorRT latency comparison" in str(on_cpu) and "not a TensorRT" not in str(on_gpu)


def test_maxpool_on_int8_data_with_a_float_reader_and_a_q_reader_never_reports_the_q_unfused():
    g = Graph()
    pooled = g.op("MaxPool", [g.qdq(g.op("Relu", [g.conv(g.qdq(g.input()))]))], kernel_shape=[2, 2],
                  strides=[2, 2])
    report = precision_report(g.model(g.conv(g.qdq(pooled)), g.op("Sin", [pooled])))
    assert layer_of(report, first(g, "MaxPool")).computes_in == "INT8"  # the DQ moved after it
    assert [q["op"] for q in report.unfused_qdq] == ["Dequantize"]  # for the float reader (Sin), a real kernel
    requantize = next(layer for layer in report.layers if layer.kind == "Quantize" and "DQ → Q" in layer.note)
    assert "cancels" in requantize.note and requantize.assumed  # one scale: the pair goes, marked as assumed


def test_a_precision_overview_deep_copies_as_itself():
    """deepcopy looks up __deepcopy__ on the object: forwarded to the DataFrame, it answered a bare DataFrame."""
    import copy

    import pandas as pd

    from trtlab.graph.fusion_report import PrecisionOverview

    overview = PrecisionOverview(pd.DataFrame({"variant": ["fp16"]}), "FP16 throughout.")
    again = copy.deepcopy(overview)
    assert isinstance(again, PrecisionOverview) and again.sentence == overview.sentence
    assert again.table.equals(overview.table)


def test_the_report_shows_whole_layer_names_and_readable_macs(light_pair):
    """Notebook 02's per-layer table: pandas cut fused layer names at 50 characters and MACs read 10838016."""
    name, _, modelopt_graph = light_pair
    report = precision_report(modelopt_graph, name)
    table = report.table()
    longest = max(table["layer"], key=len)
    assert len(longest) > 50 and longest in repr(report) and longest in report._repr_html_()
    biggest = int(table["MACs"].max())
    assert f"{biggest:,}" in repr(report) and f"{biggest:,}" in report._repr_html_()
    assert table["MACs"].dtype.kind == "i"  # the data keeps integers
