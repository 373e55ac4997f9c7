"""Each placement rule (trtlab.quantization.placement.RULES), switched on and off, on the real graphs of the onnx
wheel's backend/test/data/light (ResNet-50, SqueezeNet, DenseNet-121, Inception v1/v2, ShuffleNet, VGG-19: pools,
Concats, MaxPools, Reshapes, residual Sums), sanitized as the quantizer reads them."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from trtlab.quantization.placement import DEFAULT_RULES, LEGACY_RULES, RULES, is_average_pool, plan_quantization
from trtlab.quantization.recipe import Recipe

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
_graphs: dict = {}


def light(name: str):
    """The light graph `name` sanitized as the quantizer reads it (BatchNorm folded, nodes named); cached."""
    if name not in _graphs:
        import os

        from trtlab.graph.sanitize import sanitize_model

        workspace = Path(os.environ["TRTLAB_WORKSPACE"])  # the session workspace (tests/conftest.py, autouse)
        _graphs[name] = onnx.load(str(sanitize_model(LIGHT / f"light_{name}.onnx", workspace)))
    return _graphs[name]


def without(rule: str) -> tuple:
    return tuple(r for r in DEFAULT_RULES if r != rule)


def _readers(model, tensor: str) -> list:
    return [n for n in model.graph.node if tensor in n.input]


def _pools(model, plan_facts_model=None):
    from trtlab.quantization.placement import GraphFacts

    facts = GraphFacts.of(model, set())
    return [n for n in model.graph.node if is_average_pool(n, facts)]


def test_the_rule_table_has_a_switch_per_rule_and_labels_differences():
    assert set(DEFAULT_RULES) == {"weighted_op_inputs", "residual_add_input", "pool_input",
                                  "commute_through_copies", "concat_shared_scale"}
    assert set(LEGACY_RULES) < set(DEFAULT_RULES) and not {"exclude_gemv", "exclude_small_channels"} & set(DEFAULT_RULES)
    assert Recipe(placement={"pool_input": False}).name == "int8-entropy@auto+no-pool"
    assert Recipe(placement={"exclude_gemv": True}).name == "int8-entropy@auto+gemv"
    assert Recipe(high_precision="fp32").placement == LEGACY_RULES
    with pytest.raises(Exception, match="not trtlab's"):
        Recipe(placement=("no_such_rule",))


@pytest.mark.parametrize("name", ["resnet50", "squeezenet", "densenet121", "inception_v1", "inception_v2",
                                  "shufflenet"])
def test_pool_input_quantizes_average_pool_inputs_next_to_quantized_layers(name):
    model = light(name)
    on = plan_quantization(model, (), DEFAULT_RULES)
    off = plan_quantization(model, (), without("pool_input"))
    pools = _pools(model)
    assert pools
    placed = [p for p in pools if (p.name, 0) in on.consumers.get(p.input[0], [])]
    assert placed and all(on.placed_by[p.input[0]] in ("pool_input", "weighted_op_inputs", "residual_add_input",
                                                      "commute_through_copies") for p in placed)
    assert "pool_input" in on.describe()["activations_by_rule"]
    assert not any((p.name, 0) in off.consumers.get(p.input[0], []) for p in pools)
    assert "pool_input" not in off.describe()["activations_by_rule"]


@pytest.mark.parametrize("name", ["vgg19", "inception_v1", "shufflenet", "resnet50"])
def test_commute_through_copies_moves_qdq_before_maxpool_reshape_flatten(name):
    model = light(name)
    on = plan_quantization(model, (), DEFAULT_RULES)
    off = plan_quantization(model, (), without("commute_through_copies"))
    moved = [t for t, rule in on.placed_by.items() if rule == "commute_through_copies"]
    assert moved
    producers = {o: n for n in model.graph.node for o in n.output}
    for tensor in moved:  # the Q/DQ sits on the copy op's input; its output is read as is
        copies = [r for r in _readers(model, tensor) if r.op_type in ("MaxPool", "Reshape", "Flatten")
                  and (r.name, 0) in on.consumers[tensor]]
        assert copies
        for op in copies:
            assert op.output[0] not in on.consumers
    # without the rule the Q/DQ stays on the copies' outputs
    outputs = {n.output[0] for n in model.graph.node if n.op_type in ("MaxPool", "Reshape", "Flatten")}
    assert outputs & set(off.consumers) and not any(off.placed_by[t] == "commute_through_copies" for t in off.consumers)
    if name == "vgg19":  # every MaxPool feeds a Conv: all five move, one Q/DQ each
        assert len(moved) == 5 and all(producers[t].op_type == "Relu" for t in moved)


@pytest.mark.parametrize("name", ["inception_v1", "inception_v2"])
def test_concat_shared_scale_groups_a_concat_s_quantized_tensors(name):
    model = light(name)
    on = plan_quantization(model, (), DEFAULT_RULES)
    off = plan_quantization(model, (), without("concat_shared_scale"))
    assert on.shared_scales and not off.shared_scales
    concats = {n.output[0]: n for n in model.graph.node if n.op_type == "Concat"}
    for group in on.shared_scales:
        assert len(group.tensors) >= 2 and set(group.tensors) <= set(on.activations)
        assert group.pooled and all(p in concats for p in group.pooled)
        concat = concats[group.pooled[0]]
        assert set(group.tensors) <= {concat.output[0], *concat.input}


def test_concat_group_gets_one_threshold_from_the_pooled_histogram():
    """The joint threshold of a group is the Concat output's (its histogram holds every input's values)."""
    import numpy as np

    from trtlab.quantization.statistics import CalibrationStats, TensorHistogram
    from trtlab.quantization.variants import joint_thresholds

    model = light("inception_v1")
    plan = plan_quantization(model, (), DEFAULT_RULES)
    group = plan.shared_scales[0]
    plan.shared_scales = [group]  # statistics below are made for this group only
    rng = np.random.default_rng(0)
    tensors = {}
    for i, name in enumerate(dict.fromkeys(group.tensors + group.pooled)):
        hist = TensorHistogram()
        hist.update(np.abs(rng.normal(scale=1 + i, size=4096)).astype(np.float32))
        tensors[name] = hist
    stats = CalibrationStats(tensors, images=1, model_sha256="", preprocess={})
    own = {t: float(tensors[t].absmax) for t in tensors}
    joint = joint_thresholds(stats, plan, "minmax", 99.99, own)
    assert len({joint[t] for t in group.tensors}) == 1
    assert joint[group.tensors[0]] == pytest.approx(own[group.pooled[0]])


@pytest.mark.parametrize("name", ["resnet50", "shufflenet"])
def test_residual_add_input_quantizes_every_skip_input(name):
    model = light(name)
    on = plan_quantization(model, (), DEFAULT_RULES)
    off = plan_quantization(model, (), ("weighted_op_inputs",))
    sums = [n for n in model.graph.node if n.op_type in ("Sum", "Add") and len(n.input) == 2]
    read_quantized = [s for s in sums if any((s.name, i) in on.consumers.get(t, []) for i, t in enumerate(s.input))]
    assert len(read_quantized) == len([s for s in sums if any(
        r.op_type == "Conv" for t in s.input for r in _producer(model, t))])
    assert not any((s.name, i) in off.consumers.get(t, []) for s in sums for i, t in enumerate(s.input))


def _producer(model, tensor):
    return [n for n in model.graph.node if tensor in n.output]


def test_exclusions_leave_gemv_and_small_channel_layers_float():
    vgg, shufflenet = light("vgg19"), light("shufflenet")
    gemms = [n.name for n in vgg.graph.node if n.op_type == "Gemm"]
    plan = plan_quantization(vgg, (), DEFAULT_RULES + ("exclude_gemv",))
    assert sorted(plan.excluded) == sorted(gemms) and all("M=1" in why for why in plan.excluded.values())
    assert not any(plan.quantizes(g) for g in gemms)
    assert all(plan_quantization(vgg, (), DEFAULT_RULES).quantizes(g) for g in gemms)  # off by default
    small = plan_quantization(shufflenet, (), DEFAULT_RULES + ("exclude_small_channels",))
    assert small.excluded and all(why.startswith("exclude_small_channels") for why in small.excluded.values())
    assert not any(small.quantizes(n) for n in small.excluded)
    assert "exclude_small_channels" in RULES and not RULES["exclude_small_channels"].default


def test_residual_add_fuses_the_main_branch_whatever_the_input_order():
    """A downsampling block adds two Conv outputs: the main branch (three convs deep) fuses with the Add and the
    projection shortcut is quantized (ModelOpt: the input on the longer path to the common ancestor is the
    non-residual one) — also when the exporter wrote the shortcut first."""
    model = onnx.ModelProto()
    model.CopyFrom(light("resnet50"))
    producer = {out: node for node in model.graph.node for out in node.output}
    adds = [n for n in model.graph.node if n.op_type == "Sum" and all(producer[i].op_type == "Conv" for i in n.input)]
    assert len(adds) == 4
    shortcuts = {}
    for add in adds:
        main, shortcut = add.input
        assert producer[producer[main].input[0]].op_type == "Relu"  # conv after conv: the main branch
        shortcuts[add.name] = shortcut
        add.input[0], add.input[1] = shortcut, main  # the shortcut first
    plan = plan_quantization(model, (), DEFAULT_RULES)
    for add in adds:
        quantized = [t for i, t in enumerate(add.input) if (add.name, i) in plan.consumers.get(t, [])]
        assert quantized == [shortcuts[add.name]], add.name


def test_a_tensor_read_inside_an_if_body_keeps_its_float_reader():
    """Conv → MaxPool → Y, Y read by a Conv and by an If whose branches read Y by name: moving Y's Q/DQ before the
    MaxPool would hand the If body INT8-rounded values, so the Q/DQ stays on Y (it used to move: the If's read was
    not counted)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = lambda name, c_in: numpy_helper.from_array(rng.standard_normal((8, c_in, 3, 3)).astype(np.float32), name)
    branch = lambda name: helper.make_graph([helper.make_node("Identity", ["y"], [f"{name}_out"], name=f"{name}_id")],
                                            name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT,
                                                                                      None)])
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("MaxPool", ["r0"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["y", "w1"], ["out"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("If", ["flag"], ["side"], name="branch", then_branch=branch("then"),
                              else_branch=branch("else"))]
    graph = helper.make_graph(nodes, "if_reads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                                                  helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("side", TensorProto.FLOAT, None)],
                              [weight("w0", 3), weight("w1", 8)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    plan = plan_quantization(model, (), DEFAULT_RULES)
    assert "y" in plan.consumers and ("conv1", 0) in plan.consumers["y"]
    assert plan.placed_by.get("r0") != "commute_through_copies" and "r0" not in plan.consumers
