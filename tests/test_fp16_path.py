"""Issue 17's FP16 float path on real graphs: the FP32-path recipe makes the graph trtlab made before (structure
recorded from the pre-issue-17 quantizer), the FP16 path's boundary Casts and guard regions that share Casts, FP16
scale clamping counted, and the demo's default INT8 variants predicted free of FP32 compute outside guards."""
from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtlab.graph.fusion import precision_report
from trtlab.graph.precision import cast_round_trips
from trtlab.quantization.insertion import FP16_SMALLEST_SUBNORMAL, quantize_graph
from trtlab.quantization.placement import plan_quantization
from trtlab.quantization.recipe import Recipe

GOLDEN = Path(__file__).parent / "data" / "fp32path_structure.json"


@pytest.fixture(scope="module")
def demo_graph(demo_model, session_workspace):
    """The sanitized demo EfficientNet-Lite0 (nodes named, constants folded): what the quantizer reads."""
    from trtlab.graph.sanitize import sanitize_model

    return onnx.load(str(sanitize_model(demo_model, session_workspace)))


def _graph(model, recipe: Recipe, scale: float = 0.05):
    plan = plan_quantization(model, recipe.guards, recipe.placement, int8_float_path=recipe.high_precision)
    return quantize_graph(model, plan, {t: scale for t in plan.activations}, recipe.high_precision)


def structure(model) -> dict:
    """Nodes (op, name, inputs, outputs, attributes), initializers (name, type, dims) and opsets, hashed; op counts
    beside it to say what differs. The same function wrote tests/data/fp32path_structure.json from trtlab's
    quantizer before issue 17 (plan_quantization + insert_qdq of commit 10daa1e, every scale 0.05); issue 37 dropped
    the 8 unused opset imports at sanitize: re-recorded after checking that, with the old imports put back, the source
    and each graph hash as before (nodes and initializers unchanged)."""
    nodes = [[n.op_type, n.name, list(n.input), list(n.output),
              sorted((a.name, str(helper.get_attribute_value(a))) for a in n.attribute)] for n in model.graph.node]
    inits = sorted([i.name, i.data_type, list(i.dims)] for i in model.graph.initializer)
    opset = sorted([o.domain, o.version] for o in model.opset_import)
    text = json.dumps([nodes, inits, opset])
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(),
            "ops": dict(sorted(collections.Counter(n.op_type for n in model.graph.node).items())),
            "initializers": len(inits), "opset": opset}


@pytest.mark.parametrize("guards", ["", "first_layer,last_layer", "last_layer=fp16,softmax"])
def test_fp32_path_recipe_reproduces_the_graph_before_issue_17(demo_graph, guards):
    golden = json.loads(GOLDEN.read_text())
    recipe = Recipe(high_precision="fp32", guards=tuple(g for g in guards.split(",") if g))
    assert recipe.name.startswith("int8-entropy@auto+fp32path")
    got = structure(_graph(demo_graph, recipe).model)
    expected = golden["graphs"][guards]
    assert got["ops"] == expected["ops"] and got["initializers"] == expected["initializers"]
    assert got["opset"] == expected["opset"]
    if structure(demo_graph)["sha256"] == golden["source_sha256"]:  # the same export: node for node, name for name
        assert got["sha256"] == expected["sha256"]
    # the FP16 path is another graph (the comparison can fail)
    assert structure(_graph(demo_graph, Recipe(guards=recipe.guards)).model)["sha256"] != expected["sha256"]


def _float_type(model, tensor: str) -> int:
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info)
             + list(inferred.graph.input) + list(inferred.graph.output)}
    return types.get(tensor, 0)


def test_fp16_path_is_fp16_everywhere_with_fp16_scales_and_two_boundary_casts(demo_graph):
    graph = _graph(demo_graph, Recipe())
    model = graph.model
    assert graph.opset >= 19 and graph.high_precision == "fp16"
    inits = {i.name: i for i in model.graph.initializer}
    # 51 activation Q/DQ pairs (50 weighted-op inputs + the head pool's input) and 50 weight DQs
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert len(qdq) == 2 * 51 + 50 and all(inits[n.input[1]].data_type == TensorProto.FLOAT16 for n in qdq)
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    graph_input, graph_output = model.graph.input[0].name, model.graph.output[0].name
    assert sorted((c.input[0] == graph_input, c.output[0] == graph_output) for c in casts) == [(False, True),
                                                                                              (True, False)]
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    convs = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    assert all(_float_type(model, n.output[0]) == TensorProto.FLOAT16 for n in convs[:3] + convs[-2:])
    assert cast_round_trips(model) == []


def _chain(model, count: int) -> list[str]:
    """The first `count` nodes of the graph's main chain from its input (each the only reader of the last)."""
    readers = collections.defaultdict(list)
    for node in model.graph.node:
        for name in node.input:
            readers[name].append(node)
    names, tensor = [], model.graph.input[0].name
    while len(names) < count:
        (node,) = readers[tensor]
        names.append(node.name)
        tensor = node.output[0]
    return names


def _casts_between(model) -> list:
    graph_io = {model.graph.input[0].name, model.graph.output[0].name}
    return [n for n in model.graph.node if n.op_type == "Cast" and not {n.input[0], n.output[0]} & graph_io]


@pytest.mark.parametrize("float_path,precision", [("fp16", "fp32"), ("fp32", "fp16")])
def test_adjacent_guards_of_one_precision_share_casts(demo_graph, float_path, precision):
    """Conv → Clip → depthwise Conv → Clip guarded node by node in the other precision: one region, one Cast into
    it and one out, none between its nodes, no back-to-back Cast pair (issue 17: two adjacent '=fp16' guards left a
    Cast(FP16→FP32) → Cast(FP32→FP16) pair between them)."""
    names = _chain(demo_graph, 4)
    ops = {n.name: n.op_type for n in demo_graph.graph.node}
    assert [ops[n] for n in names] == ["Conv", "Clip", "Conv", "Clip"]
    recipe = Recipe(high_precision=float_path, guards=tuple(f"node:{n}={precision}" for n in names))
    model = _graph(demo_graph, recipe).model
    assert cast_round_trips(model) == []
    by_name = {n.name: n for n in model.graph.node}
    producers = {o: n for n in model.graph.node for o in n.output}
    # inside the region the guarded nodes read each other directly
    for before, after in zip(names, names[1:]):
        assert by_name[before].output[0] in by_name[after].input
    wanted = TensorProto.FLOAT16 if precision == "fp16" else TensorProto.FLOAT
    assert _float_type(model, by_name[names[-1]].output[0]) == wanted
    casts = [c for c in model.graph.node if c.op_type == "Cast"]
    assert not any(producers.get(c.input[0]) is not None and producers[c.input[0]].op_type == "Cast" for c in casts)
    if float_path == "fp16":  # FP32 region at the input: the graph input feeds it as is; one Cast back to FP16
        assert len(_casts_between(model)) == 1 and len(casts) == 2  # + the graph output's
        assert _casts_between(model)[0].input[0] == by_name[names[-1]].output[0]
    else:  # FP16 region in an FP32 graph: one Cast in (the graph input), one out
        assert len(casts) == 2 and {c.input[0] for c in casts} == {model.graph.input[0].name,
                                                                   by_name[names[-1]].output[0]}


def test_fp16_scales_below_the_smallest_subnormal_are_clamped_and_counted(demo_graph):
    model = onnx.ModelProto()
    model.CopyFrom(demo_graph)
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    weight = next(i for i in model.graph.initializer if i.name == conv.input[1])
    values = numpy_helper.to_array(weight).copy()
    channel = int(np.abs(values).reshape(len(values), -1).max(1).argmax())  # its scale is far above 2^-24
    values[channel] = np.sign(values[channel]) * 1e-9  # now a near-dead channel: scale 8e-12, below FP16's 2^-24
    weight.CopyFrom(numpy_helper.from_array(values.astype(np.float32), weight.name))
    plan = plan_quantization(model, (), Recipe().placement, int8_float_path="fp16")
    scales = {t: 0.05 for t in plan.activations}
    # the trained demo weights already have near-dead channels (max |w| / 127 below 2^-24): counted as they are
    before = quantize_graph(demo_graph, plan, scales, "fp16").clamped_scales
    assert before["activations"] == 0 and before["weights"] > 0
    tiny = plan.activations[3]
    scales[tiny] = 1e-10
    graph = quantize_graph(model, plan, scales, "fp16")
    assert graph.clamped_scales == {"weights": before["weights"] + 1, "activations": 1}
    assert graph.summary()["clamped_scales"] == before["weights"] + 2
    inits = {i.name: numpy_helper.to_array(i) for i in graph.model.graph.initializer}
    assert float(inits[f"{weight.name}__scale"][channel]) == FP16_SMALLEST_SUBNORMAL
    assert float(inits[f"{tiny}__scale"]) == FP16_SMALLEST_SUBNORMAL
    # the INT8 weights are rounded with the scale the graph stores: DequantizeLinear gives the weight they mean
    np.testing.assert_array_equal(inits[f"{weight.name}__int8"][channel],
                                  np.clip(np.rint(values[channel] / FP16_SMALLEST_SUBNORMAL), -127, 127))
    # the FP32 path keeps those scales as they are: nothing clamped
    assert quantize_graph(model, plan, scales, "fp32").clamped_scales == {"weights": 0, "activations": 0}


# -- the demo's default INT8 variants, predicted ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_variants(demo_model, demo_data, demo_cache, session_workspace):
    from trtlab.data.demo import demo_split
    from trtlab.quantization.variants import build_variant

    split = demo_split(demo_data)
    recipes = {"int8": Recipe(algorithm="minmax"),
               "int8+guards": Recipe(algorithm="minmax", guards=("first_layer", "last_layer", "softmax")),
               "int8+fp32path": Recipe(algorithm="minmax", high_precision="fp32")}
    return {k: build_variant(demo_model, r, demo_cache, split.calibration, session_workspace, progress=False)
            for k, r in recipes.items()}


def test_demo_default_int8_variants_have_no_fp32_compute_outside_guards(demo_variants):
    report = precision_report(demo_variants["int8"].model_path)
    assert report.fp32_outside_guards == [] and report.fp32_islands == [] and report.unfused_qdq == []
    assert report.mac_share == {"INT8": 1.0, "FP16": 0.0, "FP32": 0.0}
    assert 0.3 < report.total_macs / 1e9 < 0.5  # EfficientNet-Lite0: ≈ 0.39 GMAC per image
    assert "INT8 100.0 %" in report.headline()
    guarded = precision_report(demo_variants["int8+guards"].model_path)
    assert guarded.fp32_outside_guards == [] and guarded.mac_share["FP32"] == 0.0
    assert 0 < guarded.mac_share["FP16"] < 0.1 and guarded.summary()["weighted_layers"] == {"INT8": 48, "FP16": 2}
    # the FP32 path's twin has what the FP16 path removes: an FP32 island (the head's pooling) and an unfused Q
    twin = precision_report(demo_variants["int8+fp32path"].model_path)
    assert twin.fp32_outside_guards and twin.unfused_qdq
    record = json.loads((demo_variants["int8"].folder / "variant.json").read_text())
    assert record["plan"]["high_precision"] == "fp16" and record["plan"]["clamped_scales"] > 0  # dead channels
    # raised (dead channels) and lowered scales counted apart in the plan
    assert record["plan"]["scales_raised_to_fp16_subnormal"] == record["plan"]["clamped_scales"]
    assert record["plan"]["fp16_range"]["lowered"] == {"weights": 0, "activations": 0}
    assert demo_variants["int8+fp32path"].name.endswith("+fp32path")


def _with_global_average_pool_head(model):
    """A copy whose head pools with GlobalAveragePool (as most torchvision / timm exports do) instead of
    ReduceMean over H and W."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    mean = next(n for n in copy.graph.node if n.op_type == "ReduceMean")
    pool = helper.make_node("GlobalAveragePool", [mean.input[0]], list(mean.output), name="head_pool")
    mean.CopyFrom(pool)
    del copy.graph.value_info[:]
    onnx.checker.check_model(copy)
    return copy


def test_global_average_pool_head_conv_is_predicted_int8(demo_model, demo_cache, demo_data, session_workspace,
                                                         tmp_path):
    from trtlab.data.demo import demo_split
    from trtlab.quantization.variants import build_variant

    path = tmp_path / "efficientnet-lite0-gap.onnx"
    onnx.save(_with_global_average_pool_head(onnx.load(str(demo_model))), str(path))
    calibration = demo_split(demo_data).calibration
    outputs = {}
    for rules in (None, {"pool_input": False}):
        built = build_variant(path, Recipe(algorithm="minmax", placement=rules), demo_cache, calibration,
                              session_workspace, progress=False)
        model = onnx.load(str(built.model_path))
        assert any(n.op_type == "GlobalAveragePool" for n in model.graph.node)
        head = [n for n in model.graph.node if n.op_type == "Conv"][-1]
        report = precision_report(model)
        layer = next(layer for layer in report.layers if layer.name == head.name)
        outputs[rules is None] = (layer.computes_in, layer.output)
        assert report.fp32_outside_guards == []
    assert outputs[True] == ("INT8", "INT8")  # the pool's input is quantized: the head conv writes INT8
    assert outputs[False] == ("INT8", "FP16")  # without the rule it writes FP16 for the float pool


def test_light_resnet50_report_names_no_unfused_qdq(demo_cache, session_workspace):
    from trtlab.quantization.variants import build_variant

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    built = build_variant(path, Recipe(algorithm="minmax", calibration_images=2), demo_cache,
                          demo_cache.valid_indices[:2], session_workspace, progress=False)
    report = precision_report(built.model_path)
    assert report.unfused_qdq == [] and report.fp32_outside_guards == []
    assert report.summary()["weighted_layers"] == {"INT8": 54}  # 53 Conv + the Gemm
    assert report.mac_share["INT8"] == 1.0 and 3.5 < report.total_macs / 1e9 < 4.5  # ResNet-50: ≈ 4.1 GMAC


def test_layer_debugger_debugs_the_fp16_path_graph_build_variant_writes(demo_model, demo_data, demo_cache,
                                                                        demo_variants, session_workspace):
    """The debugger quantizes by its recipe's float path and placement rules: its in-memory default variant is the
    graph build_variant wrote, node for node and output for output."""
    from trtlab.data.demo import demo_split
    from trtlab.debug.debugger import LayerDebugger
    from trtlab.debug.graphs import literal_session

    split = demo_split(demo_data)
    debugger = LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, Recipe(algorithm="minmax"),
                             images=4, batch_size=4, workspace=session_workspace, progress=False)
    in_memory = debugger.quantized_model(())[0]
    written = onnx.load(str(demo_variants["int8"].model_path))
    assert [(n.op_type, list(n.input)) for n in in_memory.graph.node] == \
        [(n.op_type, list(n.input)) for n in written.graph.node]
    batch = next(debugger.batches(debugger.debug_indices))[1]
    feed = {debugger.input_name: batch}
    np.testing.assert_array_equal(literal_session(in_memory).run([debugger.output_name], feed)[0],
                                  literal_session(written).run([debugger.output_name], feed)[0])
