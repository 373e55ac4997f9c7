"""The graph stage: guards parsed once into values, nodes named once (at sanitize) so a name resolves in every stage,
sanitizing that keeps the model's outputs, and the one precision converter (plan, then rewrite) — on the demo
model, the demo photos and the onnx wheel's real light ResNet-50 with its node names stripped."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from trtlab.core.errors import UserValueError
from trtlab.graph.guards import ACCEPTED_FORMS, Guard, parse_guard, parse_guards, resolve_guards
from trtlab.graph.precision import cast_round_trips, convert_to_fp16, plan_precisions
from trtlab.graph.sanitize import name_nodes, sanitize_model
from trtlab.quantization.insertion import insert_qdq
from trtlab.quantization.placement import plan_quantization
from trtlab.quantization.recipe import Recipe

LIGHT_RESNET50 = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"


def _one_line(exc: UserValueError) -> str:
    line = exc.line()
    assert line.startswith("error: ") and "\n" not in line and " — " in line
    return line


def _logits(model, batch: np.ndarray) -> np.ndarray:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: batch})[0]


def _photos(cache, count: int | None = None) -> np.ndarray:
    from trtlab.data.preprocess import normalize_batch

    indices = cache.valid_indices[:count]
    return normalize_batch(np.asarray(cache.crops[indices]), cache.preprocess)


# -- guards: one value, parsed once ---------------------------------------------------------------------------------
def test_parse_guard_returns_a_value_and_refuses_bad_text_in_one_line():
    guard = parse_guard(" last_layer=fp16 ")
    assert isinstance(guard, Guard) and (guard.kind, guard.target, guard.precision) == ("last_layer", "", "fp16")
    assert str(guard) == "last_layer=fp16" and parse_guard(guard) is guard
    assert guard != "last_layer=fp16" and not isinstance(guard, str)  # a value, not a text that travels as one
    node = parse_guard("node:node_Conv_875")
    assert (node.kind, node.target, node.precision, node.selector) == ("node", "node_Conv_875", "fp32",
                                                                      "node:node_Conv_875")
    assert str(parse_guard("op:Softmax=fp32")) == "op:Softmax"  # the default precision is not spelled out
    assert parse_guard("op:Softmax=fp32") == parse_guard("op:Softmax") == Guard("op", "Softmax")  # one value
    assert {parse_guard("softmax"), Guard("softmax")} == {Guard("softmax")}  # hashed by value
    assert parse_guards("first_layer,last_layer=fp16") == (Guard("first_layer"), Guard("last_layer", precision="fp16"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        guard.precision = "fp32"
    assert json.loads(json.dumps([guard], default=lambda g: g.to_json())) == ["last_layer=fp16"]
    for bad, named in [("middle_layer", "'middle_layer'"), ("last_layer=int4", "'int4'"), ("node:", "'node:'"),
                       ("op:", "'op:'"), ("layer:Conv_1", "'layer:Conv_1'")]:
        with pytest.raises(UserValueError) as err:
            parse_guard(bad)
        line = _one_line(err.value)
        assert named in line and ACCEPTED_FORMS in line


def test_recipe_holds_guards_labels_them_once_and_refuses_bad_values_in_one_line():
    recipe = Recipe(guards=("node:node_Conv_875", "last_layer=fp16"), calibration_images=6)
    assert all(isinstance(g, Guard) for g in recipe.guards)
    assert recipe.name == "int8-entropy@6+node_Conv_875+last_layer-fp16"  # no doubled 'node_node_' prefix
    assert recipe.to_dict()["guards"] == ["node:node_Conv_875", "last_layer=fp16"]
    assert Recipe.from_dict(recipe.to_dict()) == recipe
    assert Recipe(precision="fp16", guards=("op:Softmax",)).name == "fp16+op_Softmax"
    for kwargs, named in [({"precision": "int4"}, "'int4'"), ({"algorithm": "kl"}, "'kl'"),
                          ({"algorithm": "percentile", "percentile": 0}, "percentile 0"),
                          ({"percentile": 100.5}, "percentile 100.5"), ({"calibration_images": 0}, "calibration_images"),
                          ({"calibration_batch": 0}, "calibration_batch"), ({"guards": ("middle_layer",)}, "middle_layer")]:
        with pytest.raises(UserValueError) as err:
            Recipe(**kwargs)
        assert named in _one_line(err.value), kwargs
    assert Recipe(algorithm="percentile", percentile=100).percentile == 100  # (0, 100] includes 100


def test_guards_resolve_to_nodes_and_a_guard_that_selects_nothing_says_what_exists(demo_model):
    model = onnx.load(str(demo_model))
    resolved = resolve_guards(model, parse_guards(["first_layer", "last_layer=fp16", "softmax"]))  # no Softmax: fine
    assert [(g.op_type, g.precision) for g in resolved] == [("Conv", "fp32"), ("Gemm", "fp16")]
    assert resolved[1].guard == Guard("last_layer", precision="fp16")
    with pytest.raises(UserValueError) as err:
        resolve_guards(model, [parse_guard("node:nope")])
    assert "no node named 'nope'" in _one_line(err.value) and "node_Conv_881" in err.value.line()
    with pytest.raises(UserValueError) as err:
        resolve_guards(model, [parse_guard("op:LSTM")])
    assert "selects no node" in _one_line(err.value) and "Conv" in err.value.line()
    # internal functions take Guard values: a text that skipped the parse at the edge is refused, naming the parser
    with pytest.raises(UserValueError) as err:
        resolve_guards(model, ["first_layer"])
    assert "not Guard values" in _one_line(err.value) and "parse_guards" in err.value.line()


def test_guards_of_recipes_are_checked_on_the_sanitized_model_before_any_work(demo_model, demo_data, tmp_path):
    from trtlab.data.demo import demo_split
    from trtlab.workflows.compare import compare
    from trtlab.workflows.checks import check_guards

    assert [g.name for g in check_guards(demo_model, ["node:node_Conv_877=fp16", "softmax"], tmp_path / "ws")] \
        == ["node_Conv_877"]
    with pytest.raises(UserValueError) as err:
        compare(demo_model, demo_data, [Recipe(algorithm="minmax"), Recipe(precision="fp16", guards="node:nope")],
                split=demo_split(demo_data), workspace=tmp_path / "ws", progress=False)
    assert "no node named 'nope'" in _one_line(err.value)
    assert not (tmp_path / "ws" / "decode_cache").exists()  # refused before any image was decoded


# -- nodes named once -----------------------------------------------------------------------------------------------
def test_name_nodes_names_unnamed_and_duplicate_nodes_once():
    from onnx import helper

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="Relu_0"),
             helper.make_node("Relu", ["b"], ["c"], name="Relu_0"), helper.make_node("Neg", ["c"], ["y"], name="")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph)
    assert name_nodes(model) == 3
    # position 0 would be Relu_0, taken by the node at position 1: a suffix; the duplicate at 2 is renamed
    assert [n.name for n in model.graph.node] == ["Relu_0_1", "Relu_0", "Relu_2", "Neg_3"]
    assert name_nodes(model) == 0  # idempotent


@pytest.fixture(scope="module")
def unnamed_resnet50(tmp_path_factory, session_workspace):
    """The light ResNet-50 (a real graph: 53 Convs, BatchNorms, 16 residual Sums) with every node name removed,
    sanitized as every stage sees it."""
    if not LIGHT_RESNET50.exists():
        pytest.skip(f"{LIGHT_RESNET50} not shipped by this onnx wheel")
    model = onnx.load(str(LIGHT_RESNET50))
    for node in model.graph.node:
        node.name = ""
    raw = tmp_path_factory.mktemp("unnamed") / "resnet50_unnamed.onnx"
    onnx.save(model, str(raw))
    return raw, sanitize_model(raw, session_workspace)


def test_unnamed_nodes_are_named_at_sanitize_and_a_name_resolves_in_every_stage(unnamed_resnet50):
    raw, sanitized_path = unnamed_resnet50
    sanitized = onnx.load(str(sanitized_path))
    names = [n.name for n in sanitized.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert all(re.fullmatch(rf"{n.op_type}_\d+(_\d+)?", n.name) for n in sanitized.graph.node)
    convs = [n.name for n in sanitized.graph.node if n.op_type == "Conv"]
    assert len(convs) == 53
    # the stages refuse a graph whose nodes were never named (the raw file), with the fix
    with pytest.raises(UserValueError) as err:
        plan_quantization(onnx.load(str(raw)))
    assert "has no name" in _one_line(err.value) and "sanitize" in err.value.line()
    # a guard naming a sanitized node resolves in the quantizer and in the precision converter alike
    middle = convs[len(convs) // 2]
    guard = f"node:{middle}=fp16"
    plan = plan_quantization(sanitized, [parse_guard(guard)])
    assert plan.skipped_nodes == [middle] and [g.name for g in plan.guarded] == [middle]
    precisions = plan_precisions(sanitized, [guard], default="fp32")
    assert precisions.names("fp16") == [middle] and precisions.reasons[middle] == f"guard {guard}"
    fp16 = convert_to_fp16(sanitized, guards=[f"node:{middle}"])
    assert fp16.fp32_nodes == [middle]
    # and in the quantized graph the same node is the guarded one, in FP16, unquantized
    quantized = insert_qdq(sanitized, plan, {t: 0.05 for t in plan.activations})
    node = next(n for n in quantized.graph.node if n.name == middle)
    inits = {i.name: i for i in quantized.graph.initializer}
    assert inits[node.input[1]].data_type == TensorProto.FLOAT16
    # sanitizing is cached: the same names next time
    assert [n.name for n in onnx.load(str(sanitize_model(raw))).graph.node] == names


def test_sanitizing_drops_the_opset_imports_no_node_uses_and_every_int8_graph_inherits_it(unnamed_resnet50):
    """ONNX Runtime's optimized model imports every domain ORT registers (com.microsoft.nchwc, org.pytorch.aten,
    ai.onnx.training, …): 9 imports for a graph of default-domain ops, carried into every INT8 variant."""
    from trtlab.quantization.insertion import quantize_graph
    from trtlab.quantization.placement import DEFAULT_RULES

    _, sanitized_path = unnamed_resnet50
    sanitized = onnx.load(str(sanitized_path))
    assert [o.domain for o in sanitized.opset_import] == [""]
    plan = plan_quantization(sanitized, (), DEFAULT_RULES, int8_float_path="fp16")
    int8 = quantize_graph(sanitized, plan, {t: 0.05 for t in plan.activations}, "fp16").model
    assert [(o.domain, o.version) for o in int8.opset_import] == [("", 19)]  # FP16 Q/DQ scales: opset 19
    for model in (sanitized, int8):
        onnx.checker.check_model(model, full_check=True)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        np.testing.assert_equal(_logits(model, np.zeros((1, 3, 224, 224), np.float32)).shape, (1, 1000))


def test_an_opset_used_only_inside_a_subgraph_or_a_function_is_kept():
    from onnx import helper

    from trtlab.graph.onnx_utils import drop_unused_opsets

    body = helper.make_graph([helper.make_node("Foo", ["x"], ["y"], domain="custom.body")], "body", [],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    branch = helper.make_node("If", ["c"], ["out"], then_branch=body, else_branch=body)
    call = helper.make_node("Bar", ["x"], ["z"], domain="custom.local")
    function = helper.make_function("custom.local", "Bar", ["x"], ["z"],
                                    [helper.make_node("Baz", ["x"], ["z"], domain="custom.function")],
                                    [helper.make_opsetid("custom.function", 1)])
    graph = helper.make_graph([branch, call], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                                    helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1])])
    domains = ["", "custom.body", "custom.local", "custom.function", "com.microsoft.nchwc", "ai.onnx.ml"]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, 1) for d in domains], functions=[function])
    assert drop_unused_opsets(model) == ["com.microsoft.nchwc", "ai.onnx.ml"]
    assert [o.domain for o in model.opset_import] == domains[:4]
    assert drop_unused_opsets(model) == []  # idempotent


def test_sanitizing_preserves_the_models_outputs_on_real_photos(demo_model, demo_cache, session_workspace,
                                                                tmp_path):
    batch = _photos(demo_cache)
    reference = _logits(onnx.load(str(demo_model)), batch)
    sanitized = sanitize_model(demo_model, session_workspace)
    folded = _logits(onnx.load(str(sanitized)), batch)
    # folding BatchNorm/constants reorders float32 arithmetic only: within 1e-4 of each image's logit range
    spread = reference.max(axis=1) - reference.min(axis=1)
    assert (np.abs(folded - reference).max(axis=1) <= 1e-4 * spread).all()
    np.testing.assert_array_equal(folded.argmax(1), reference.argmax(1))
    # the same model with its node names stripped: named by sanitize, same outputs
    model = onnx.load(str(demo_model))
    for node in model.graph.node:
        node.name = ""
    unnamed = tmp_path / "lite0_unnamed.onnx"
    onnx.save(model, str(unnamed))
    renamed = onnx.load(str(sanitize_model(unnamed, session_workspace)))
    assert all(n.name for n in renamed.graph.node)
    np.testing.assert_allclose(_logits(renamed, batch), folded, rtol=0, atol=1e-5)


# -- the one precision converter -------------------------------------------------------------------------------------
def _adjacent_convs(model) -> tuple[str, str]:
    """Two Convs where the first one's output is read by the second one only (a project conv feeding the next
    block's expand conv)."""
    readers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    for node in model.graph.node:
        following = readers.get(node.output[0], [])
        if node.op_type == "Conv" and len(following) == 1 and following[0].op_type == "Conv":
            return node.name, following[0].name
    raise AssertionError("no Conv → Conv pair in the demo model")


def test_adjacent_fp16_guards_in_an_int8_graph_share_their_tensor_without_cast_pairs(demo_model, demo_cache,
                                                                                       session_workspace):
    model = onnx.load(str(sanitize_model(demo_model, session_workspace)))
    first, second = _adjacent_convs(model)
    guards = [f"node:{first}=fp16", f"node:{second}=fp16"]
    plan = plan_quantization(model, parse_guards(guards))
    quantized = insert_qdq(model, plan, {t: 0.05 for t in plan.activations})
    onnx.checker.check_model(quantized)
    onnx.shape_inference.infer_shapes(quantized, check_type=True, strict_mode=True)
    assert cast_round_trips(quantized) == []
    nodes = {n.name: n for n in quantized.graph.node}
    producers = {o: n for n in quantized.graph.node for o in n.output}
    assert nodes[second].input[0] == nodes[first].output[0]  # FP16 straight from one guarded node to the next
    assert producers[nodes[first].input[0]].op_type == "Cast"  # one Cast into the FP16 region ...
    casts = [n for n in quantized.graph.node if n.op_type == "Cast"]
    assert len(casts) == 2  # ... and one out of it
    inits = {i.name: i for i in quantized.graph.initializer}
    assert {inits[nodes[name].input[1]].data_type for name in (first, second)} == {TensorProto.FLOAT16}
    # it runs, and agrees with the same guards kept FP32 on the photos
    batch = _photos(demo_cache, 8)
    fp32_guarded = insert_qdq(model, plan_quantization(model, parse_guards([g.split("=")[0] for g in guards])),
                              {t: 0.05 for t in plan.activations})
    half, full = _logits(quantized, batch), _logits(fp32_guarded, batch)
    cosine = (half * full).sum(1) / np.linalg.norm(half, axis=1) / np.linalg.norm(full, axis=1)
    assert cosine.min() > 0.995  # measured 0.9986: FP16 rounding in two convs of an INT8 graph


def test_precision_plan_decides_each_node_with_its_rule(demo_model):
    model = onnx.load(str(demo_model))
    plan = plan_precisions(model, ["first_layer", "last_layer=fp16"], default="fp16")
    first_conv = next(n.name for n in model.graph.node if n.op_type == "Conv")
    assert plan.precisions[first_conv] == "fp32" and plan.reasons[first_conv] == "guard first_layer"
    assert plan.precisions["node_linear"] == "fp16"
    assert set(plan.names("fp32")) == {first_conv} and plan.reasons["node_Conv_877"] == "default"
    with pytest.raises(UserValueError, match="keep_fp32_nodes names nodes the model does not have"):
        plan_precisions(model, keep_fp32_nodes=["nope"])


def test_fp16_variant_is_the_one_converter_and_cached_in_its_variant_folder(demo_model, session_workspace):
    from trtlab.quantization.variants import build_variant

    recipe = Recipe(precision="fp16", guards=("first_layer", "last_layer"))
    built = build_variant(demo_model, recipe, workspace=session_workspace, progress=False)
    model = onnx.load(str(built.model_path))
    assert built.folder.parent.parent.name == "variants" and built.model_path.parent == built.folder
    assert cast_round_trips(model) == [] and built.plan["casts_inserted"] == 2
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    again = build_variant(demo_model, recipe, workspace=session_workspace, progress=False)
    assert again.reused and again.model_path == built.model_path
