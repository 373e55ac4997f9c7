"""Layer-wise debugging and guard search on the real demo model and photos: one layer's scale is broken on purpose
and the per-tensor comparison, the sensitivity ranking and the guard search must all find it."""
from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from trtlab.debug.debugger import LayerDebugger
from trtlab.debug.errors import ErrorSums
from trtlab.debug.graphs import compared_tensors, literal_session
from trtlab.cli.commands.debug import main as debug_main
from trtlab.quantization.variants import Recipe

REPO = Path(__file__).resolve().parents[1]
IMAGES = 4  # evaluation photos for the tensor comparison and the 2 × 50 sensitivity runs (one batch)
BROKEN_FACTOR = 1 / 50  # the broken layer's input scale ÷50: its activations clip at 1/50 of their range
TARGET = 0.995


def _broken_layer(debugger: LayerDebugger) -> str:
    """The first layer past the middle of the network whose input tensor is read by that layer only (so guarding
    the layer removes the broken Q/DQ entirely)."""
    from trtlab.quantization.placement import plan_quantization

    plan = plan_quantization(debugger.fp32, ())
    middle = len(debugger.layers) // 2
    candidates = [name for name in debugger.layers[middle:]
                  if len(plan.consumers.get(debugger.layer_input(name), [])) == 1]
    return candidates[0]


def _assert_readable(fig) -> None:
    """Every text of a figure lies inside it, and titles, annotations, legends and each axis's tick labels overlap
    none of each other (rendered with Agg, compared by their extents)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    bounds = fig.bbox.padded(1)
    labels = []  # (name, extent) of free-standing texts: titles, axis labels, annotations, legends
    for ax in fig.axes:
        labels += [(t.get_text(), t.get_window_extent(renderer)) for t in
                   (ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts) if t.get_visible() and t.get_text()]
        if ax.get_legend():
            labels.append(("legend", ax.get_legend().get_window_extent(renderer)))
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            ticks = [t.get_window_extent(renderer) for t, at in zip(axis.get_majorticklabels(), axis.get_majorticklocs())
                     if t.get_visible() and t.get_text() and low <= at <= high]  # labels beyond the limits are not drawn
            assert all(bounds.contains(b.x0, b.y0) and bounds.contains(b.x1, b.y1) for b in ticks), "tick label clipped"
            assert not any(a.overlaps(b) for i, a in enumerate(ticks) for b in ticks[i + 1:]), "tick labels overlap"
    for name, box in labels:
        assert bounds.contains(box.x0, box.y0) and bounds.contains(box.x1, box.y1), f"{name!r} is cut off"
    for i, (name, box) in enumerate(labels):
        for other, other_box in labels[i + 1:]:
            assert not box.overlaps(other_box), f"{name!r} overlaps {other!r}"


@pytest.fixture(scope="module")
def split(demo_data):
    from trtlab.data.demo import demo_split

    return demo_split(demo_data)


DEBUG_RECIPE = Recipe(algorithm="entropy", high_precision="fp32")


@pytest.fixture(scope="module")
def clean(demo_model, demo_cache, split, session_workspace):
    # The FP32 float path: every layer guarded is FP32 exactly, so each error measured is INT8's alone (on the FP16
    # path, the default, the debugger follows the recipe and FP16 rounding adds to every comparison).
    return LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, DEBUG_RECIPE,
                         images=IMAGES, batch_size=IMAGES, workspace=session_workspace, progress=False)


@pytest.fixture(scope="module")
def broken_layer(clean):
    return _broken_layer(clean)


@pytest.fixture(scope="module")
def broken(demo_model, demo_cache, split, session_workspace, broken_layer):
    return LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, DEBUG_RECIPE,
                         images=IMAGES, batch_size=IMAGES, scale_overrides={broken_layer: BROKEN_FACTOR},
                         workspace=session_workspace, progress=False)


@pytest.fixture(scope="module")
def broken_sensitivity(broken):
    return broken.sensitivity()


# -- math (synthetic tensors are the point here) --------------------------------------------------------------------
def test_error_sums_match_direct_formulas_across_batches():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(6, 3, 5, 5)).astype(np.float32)
    test = ref + rng.normal(scale=0.1, size=ref.shape).astype(np.float32)
    sums = ErrorSums()
    for start in (0, 2, 5):  # uneven batches
        stop = {0: 2, 2: 5, 5: 6}[start]
        sums.update(ref[start:stop], test[start:stop])
    r, t = ref.astype(np.float64).ravel(), test.astype(np.float64).ravel()
    assert sums.images == 6
    assert sums.sqnr_db == pytest.approx(10 * np.log10((r @ r) / ((t - r) @ (t - r))), rel=1e-9)
    assert sums.cosine == pytest.approx((r @ t) / np.sqrt((r @ r) * (t @ t)), rel=1e-9)
    assert sums.max_abs_error == pytest.approx(np.abs(t - r).max())
    per_image = [(a @ b) / np.sqrt((a @ a) * (b @ b)) for a, b in zip(ref.reshape(6, -1).astype(np.float64),
                                                                      test.reshape(6, -1).astype(np.float64))]
    assert sums.cosine_worst == pytest.approx(min(per_image), rel=1e-9)
    exact = ErrorSums()
    exact.update(ref, ref)
    assert math.isinf(exact.sqnr_db) and exact.cosine == pytest.approx(1.0)


def test_error_sums_round_trip_and_logits_agreement():
    ref = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0]], np.float32)
    test = np.array([[2.0, 2.5, 0.0], [0.0, 2.0, 1.5]], np.float32)  # first image's arg-max flips
    sums = ErrorSums()
    sums.update(ref, test, logits=True)
    assert sums.top1_agree == 1 and sums.metrics(logits=True)["top1_agreement"] == 0.5
    assert ErrorSums.from_dict(json.loads(json.dumps(sums.to_dict()))) == sums  # what the resume state stores
    assert math.isnan(ErrorSums().top1_agreement)
    with pytest.raises(ValueError, match="shape"):
        sums.update(ref, test[:1])


def _depth_table(drops, qdq=None):
    import pandas as pd

    n = len(drops)
    return pd.DataFrame({"depth": range(n), "tensor": [f"t{i}" for i in range(n)], "node": [f"n{i}" for i in range(n)],
                         "op_type": "Conv", "layer_output": True, "sqnr_db": 30.0, "drop_db": drops,
                         "qdq_sqnr_db": qdq if qdq is not None else [math.nan] * n, "scale": 0.1})


def test_jump_and_suspect_rules_pick_outliers_only():
    from trtlab.debug.tensor_errors import find_jump, find_suspect_scales

    steady = [2.0, 2.5, 1.5, 3.0, 2.0, 2.2, 1.8, 2.4]
    assert find_jump(_depth_table(steady)) is None  # gradual loss: no jump
    assert find_jump(_depth_table([5.0] * 8)) is None  # uniformly noisier, each step below the 6 dB floor
    two_outliers = _depth_table(steady[:5] + [19.0] + steady[5:] + [25.0])
    jump = find_jump(two_outliers)
    assert jump["depth"] == 5 and jump["drop_db"] == 19.0  # the first outlier, not the largest
    assert find_jump(two_outliers, jump_db=20.0)["depth"] == 9  # the floor is the caller's choice
    qdq = [38.0, 40.0, 39.0, 41.0, 12.0, 40.5, math.nan, 39.5]
    suspects = find_suspect_scales(_depth_table(steady, qdq))
    assert [s["tensor"] for s in suspects] == ["t4"] and suspects[0]["median_db"] == pytest.approx(39.5)
    assert find_suspect_scales(_depth_table(steady[:2], qdq[:2])) == []  # too few quantized tensors to judge


# -- the in-memory variants are the real ones -----------------------------------------------------------------------
def test_suffix_runs_equal_full_runs_bit_for_bit(clean):
    """Sensitivity runs start at the layer from a reference run's tensors; that must change nothing."""
    batch = next(clean.batches(clean.debug_indices))[1]
    names = compared_tensors(clean.fp32)
    reference_model = clean.quantized_model(())[0]
    reference_model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names
                                        if n != clean.output_name)
    tensors = dict(zip(names, literal_session(reference_model).run(names, {clean.input_name: batch})))
    tensors[clean.input_name] = batch
    for layer in (clean.layers[3], clean.layers[len(clean.layers) // 2], clean.layers[-1]):
        full, cut = clean.quantized_model([layer])
        assert cut == [clean.input_name]
        suffix, cut = clean.quantized_model([layer], start=clean.node_index[layer])
        assert clean.input_name not in cut and len(suffix.graph.node) < len(full.graph.node)
        expected = literal_session(full).run([clean.output_name], {clean.input_name: batch})[0]
        got = literal_session(suffix).run([clean.output_name], {t: tensors[t] for t in cut})[0]
        np.testing.assert_array_equal(got, expected)


def test_suffix_model_cuts_at_the_start_node(clean):
    from trtlab.debug.graphs import suffix_model

    nodes = list(clean.fp32.graph.node)
    start = clean.node_index[clean.layers[len(clean.layers) // 2]]
    suffix, cut = suffix_model(clean.fp32, start)
    assert [n.name for n in suffix.graph.node] == [n.name for n in nodes[start:]]
    produced_before = {o for n in nodes[:start] for o in n.output} | {clean.input_name}
    assert cut and set(cut) <= produced_before and [i.name for i in suffix.graph.input] == cut
    assert suffix_model(clean.fp32, len(nodes)) == (None, [])  # the output is made before the cut: no suffix


def test_layers_are_named_by_the_models_blocks(clean):
    from trtlab.graph.block_names import block_names, module_path

    weights = {n.name: n.input[1] for n in clean.fp32.graph.node if n.name in set(clean.all_layers)}
    blocks = [clean.block(name) for name in clean.all_layers]
    assert blocks[0] == "_conv_stem" and blocks[-1] == "_fc" and len(set(blocks)) == 50  # one module per layer
    assert all(weights[name] == f"{clean.block(name)}.weight" for name in clean.all_layers)
    assert all(name.startswith("node_") for name in clean.all_layers)  # guards keep the node names
    residual = next(n for n in clean.fp32.graph.node if n.op_type == "Add")
    assert clean.block(residual.name) == f"{clean.block(clean.all_layers[8])} › Add"  # after block 2's project conv
    assert module_path("_blocks.3._project_conv.weight") == "_blocks.3._project_conv"
    assert module_path("model/conv1/kernel:0") == "model/conv1"
    assert module_path("onnx::Conv_123") is None and module_path("W") is None  # not module paths: node names stay
    # A graph whose weights carry no module names keeps its node names (here: weights made by ConstantOfShape).
    light = onnx.load(str(Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"))
    names = block_names(light)
    assert names and all(block == node for node, block in names.items() if node)


def test_tables_for_people_have_no_raw_floats(clean):
    import pandas as pd

    from trtlab.debug.tables import cosine, db, pct, search_steps_table

    assert (pct(0.98949102), pct(1.0), pct(float("nan")), db(float("inf")), db(1.234, signed=True), cosine(0.98949102)) \
        == ("98.9 %", "100.0 %", "—", "exact", "+1.2", "0.9895")
    steps = pd.DataFrame([{"step": 0, "phase": "add", "guarded": "(recipe guards only)", "block": "", "guards": 0,
                           "top1_agreement": 0.9, "cosine_mean": 0.98949102901, "sqnr_db": 17.4567,
                           "kl_mean": 0.00885123, "int8_layers": 50},
                          {"step": 1, "phase": "add", "guarded": clean.layers[3], "block": clean.block(clean.layers[3]),
                           "guards": 1, "top1_agreement": 1.0, "cosine_mean": 0.99912345, "sqnr_db": 21.04,
                           "kl_mean": 0.36111, "int8_layers": 49}])
    table = search_steps_table(steps)
    assert list(table["top-1 agreement"]) == ["90.0 %", "100.0 %"] and list(table["logit SQNR (dB)"]) == ["17.5", "21.0"]
    assert not any(isinstance(v, float) for v in table.to_numpy().ravel())
    from trtlab.views.formatting import UNFORMATTED_FLOAT

    assert list(table["softmax KL"]) == ["0.0089", "0.3611"]  # issue 26's notebook check: no 0.00885 shown
    assert not UNFORMATTED_FLOAT.search(table.to_html())
    older = search_steps_table(steps.drop(columns="kl_mean"))  # steps saved before the KL was measured
    assert list(older["softmax KL"]) == ["—", "—"] and list(older["logit SQNR (dB)"]) == ["17.5", "21.0"]


def test_calibrate_command_names_the_recipe():
    from trtlab.debug.guard_search import calibrate_command

    recipe = Recipe(algorithm="percentile", percentile=99.9, calibration_images=64, calibration_batch=4,
                    guards=("node:node_Conv_840", "node:node_Conv_875=fp16"))
    assert calibrate_command(recipe) == ("python -m trtlab calibrate --algorithms percentile --percentile 99.9 "
                                         "--calibration-images 64 --calibration-batch 4 "
                                         "--guards node:node_Conv_840=fp16,node:node_Conv_875=fp16")
    line = calibrate_command(Recipe(algorithm="minmax", calibration_images=6), model="/my models/m.onnx",
                             data="/data", preset="torch", workspace=None)
    assert shlex.split(line)[4:] == ["--model", "/my models/m.onnx", "--data", "/data", "--preset", "torch",
                                     "--algorithms", "minmax", "--calibration-images", "6"]


# -- 1. per-tensor comparison ----------------------------------------------------------------------------------------
def test_tensor_errors_find_the_broken_layer_where_the_error_jumps(clean, broken, broken_layer):
    normal = clean.tensor_errors()
    table = normal.table
    assert table["tensor"].iloc[0] == clean.input_name and math.isinf(table["sqnr_db"].iloc[0])
    assert len(table) == 1 + len(compared_tensors(clean.fp32))  # graph input + every node output, graph order
    assert list(table["depth"]) == list(range(len(table)))
    logits = table[table["tensor"] == clean.output_name].iloc[0]
    assert 10 < logits["sqnr_db"] < 30 and 0.95 < logits["cosine"] < 0.9999  # real INT8: close, not identical
    assert table["layer_output"].sum() == 50
    assert normal.jump is None  # a healthy variant loses SQNR gradually
    damaged = broken.tensor_errors()
    assert damaged.jump is not None and damaged.jump["node"] == broken_layer
    assert damaged.jump["drop_db"] >= damaged.jump["threshold_db"] >= 6.0
    assert list(damaged.table.loc[damaged.table["flag"] == "JUMP", "node"]) == [broken_layer]
    broken_input = broken.layer_input(broken_layer)
    assert broken_input in {s["tensor"] for s in damaged.suspect_scales}
    assert broken_input not in {s["tensor"] for s in normal.suspect_scales}
    row = damaged.table.set_index("tensor").loc[broken_input]
    assert row["scale"] == pytest.approx(clean.scales[broken_input] * BROKEN_FACTOR)
    # upstream of the broken layer nothing changed; at its output the error is far worse than without the damage
    before = damaged.table["depth"] < damaged.jump["depth"]
    np.testing.assert_allclose(damaged.table["sqnr_db"][before], table["sqnr_db"][before])
    jump_tensor = damaged.jump["tensor"]
    assert (damaged.table.set_index("tensor").loc[jump_tensor, "sqnr_db"]
            < table.set_index("tensor").loc[jump_tensor, "sqnr_db"] - 10)
    fig = damaged.plot()
    assert any(line.get_xdata()[0] == damaged.jump["depth"] for line in fig.axes[0].lines
               if line.get_linestyle() == "--")
    _assert_readable(fig)  # the jump and the three suspect scales are labelled without covering each other
    _assert_readable(normal.plot())



def test_tensor_error_figure_says_where_exact_tensors_are_drawn(clean):
    """The legend said "exact: 59", read as 59 exact tensors; it is the height (dB) where exact ones are drawn."""
    errors = clean.tensor_errors()
    exact = int(np.isinf(errors.table["sqnr_db"]).sum())
    assert exact >= 1  # the graph input
    fig = errors.plot()
    curve = fig.axes[0].lines[0]
    drawn_at = float(curve.get_ydata()[np.isinf(errors.table["sqnr_db"].to_numpy(float))][0])
    assert curve.get_label() == f"SQNR (dB), every tensor (exact ones drawn at {drawn_at:.0f} dB)"

MEMORY_PROBE = """
import resource, sys
from trtlab.data.decode_cache import build_decode_cache
from trtlab.data.demo import demo_dataset, demo_split
from trtlab.debug.debugger import LayerDebugger
from trtlab.quantization.variants import Recipe
workspace, model, images = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = demo_dataset()
split = demo_split(data)
cache = build_decode_cache(data, "tf-lite", workspace, progress=False)
debugger = LayerDebugger(model, cache, split.calibration, split.evaluation, Recipe(algorithm="minmax"), images=images,
                         batch_size=2, workspace=workspace, progress=False)
errors = debugger.tensor_errors()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, errors.peak_batch_bytes, errors.images)
"""


def test_tensor_comparison_memory_is_bounded_by_the_batch(demo_model, session_workspace, clean):
    """Peak resident memory (ONNX Runtime's output buffers included) must not grow with the number of images."""
    measured = {}
    for images in (4, 12):
        probe = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(session_workspace), str(demo_model),
                                str(images)], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert probe.returncode == 0, probe.stderr[-2000:]
        rss, batch_bytes, compared = (int(v) for v in probe.stdout.split()[-3:])
        assert compared == images
        measured[images] = (rss, batch_bytes)
    batch_bytes = measured[4][1]  # every tensor of both models for one batch of 2
    holding_everything = (12 - 4) * batch_bytes / 2  # what keeping every image's tensors would add
    growth = measured[12][0] - measured[4][0]
    assert growth < 0.25 * holding_everything, f"peak RSS grew by {growth / 1e6:.0f} MB from 4 to 12 images"


# -- 2. sensitivity --------------------------------------------------------------------------------------------------
def test_broken_layer_ranks_first_in_sensitivity(broken, broken_sensitivity, broken_layer):
    table = broken_sensitivity.table
    assert len(table) == 50 and table.index[0] == broken_layer and list(table["rank"]) == list(range(1, 51))
    top = table.iloc[0]
    # both experiments single it out: alone it is the worst single layer, and guarding it helps most
    assert top["only_sqnr_db"] == table["only_sqnr_db"].min()
    assert top["all_but_gain_db"] == table["all_but_gain_db"].max()
    assert top["noise_share"] > 2 * table["noise_share"].iloc[1]
    assert broken_sensitivity.baseline["none"]["sqnr_db"] == math.inf  # every layer guarded = FP32 exactly
    _assert_readable(broken_sensitivity.plot(top=50))  # long block names, every layer
    fig = broken_sensitivity.plot(top=10)
    # named by the model's own block, with the node name a guard uses
    assert fig.axes[0].get_yticklabels()[0].get_text() == f"{broken.block(broken_layer)} ({broken_layer})"
    assert table.loc[broken_layer, "block"] == broken.block(broken_layer)


def test_sensitivity_resumes_after_an_interruption(broken, broken_sensitivity, broken_layer):
    state_path = broken.sensitivity_state_path()
    state = json.loads(state_path.read_text())
    assert len(state["runs"]) == 100
    # Simulate a run killed after most layers: drop three layers' results from the saved progress.
    lost = list(broken_sensitivity.table.index[-3:])
    for name in lost:
        for mode in ("only", "all_but"):
            del state["runs"][f"{mode}|{name}"]
    state_path.write_text(json.dumps(state))
    resumed = broken.sensitivity()
    assert resumed.resumed_runs == 94
    assert resumed.table.index[0] == broken_layer
    np.testing.assert_allclose(resumed.table.loc[lost, "noise_share"],
                               broken_sensitivity.table.loc[lost, "noise_share"], rtol=1e-9)


# -- 3. guard search -------------------------------------------------------------------------------------------------
# These test the guards alone (recovery=()); tests/test_recovery_ab.py tests the search's recovery-first step.
def test_guard_search_guards_the_broken_layer_first_and_stops_at_the_target(broken, broken_sensitivity,
                                                                             broken_layer):
    found = broken.search_guards(target=TARGET, sensitivity=broken_sensitivity, recovery=())
    assert found.reached and found.added[0] == broken_layer
    # Guarded layers keep the recipe's float path precision, spelt out (issue 35: one guard vocabulary).
    assert [str(g) for g in found.guards] == [f"node:{name}={broken.guard_precision}" for name in found.added]
    forward = found.steps[found.steps["phase"] == "add"]
    agreement = list(forward["top1_agreement"])
    assert agreement[0] < TARGET  # the broken variant needed guarding at all
    assert agreement[-1] >= TARGET and all(a < TARGET for a in agreement[:-1])  # stopped at the first success
    assert list(forward["guards"]) == list(range(len(forward)))
    assert list(forward["guarded"])[1:] == broken_sensitivity.ranking[: len(forward) - 1]  # greedy on the ranking
    # pruning only removes guards, and the final set still meets the target
    assert set(found.added) | set(found.pruned) == set(broken_sensitivity.ranking[: len(forward) - 1])
    assert found.metrics["top1_agreement"] >= TARGET
    assert found.int8_layers == 50 - len(found.added) and found.int8_fraction == pytest.approx(found.int8_layers / 50)

    # The guard list round-trips into a recipe that trtlab's own pipeline builds and evaluates.
    recipe = found.recipe()
    # The recipe names the calibration size the debugger really used (all 6 demo calibration photos).
    assert recipe == Recipe(algorithm="entropy", calibration_images=6, guards=tuple(found.guards),
                            high_precision="fp32")
    assert Recipe.from_dict(json.loads(json.dumps(recipe.to_dict()))) == recipe
    assert "node_node" not in recipe.name and recipe.name.endswith("".join(f"+{n}-fp32" for n in found.added))
    # Searched on the first half of the 20 evaluation photos, verified on the other half: disjoint, and said so.
    ids = broken.cache.dataset.image_ids()
    assert found.search_image_ids == [ids[i] for i in broken.evaluation_indices[:10]] and found.evaluation_images == 10
    verified = found.verify()
    assert verified["variant"] == recipe.name and verified["images"] == 10
    assert verified["image_ids"] == [ids[i] for i in broken.evaluation_indices[10:]]
    assert not set(verified["image_ids"]) & set(found.search_image_ids)
    # The verification is the built variant on the other images: what the in-memory variant gives there (FP32 there
    # is trtlab's stored FP32 result: at most one borderline photo may differ from the debugger's FP32), judged
    # against the target and said so — the guards chosen on 10 photos need not carry over to 10 others.
    in_memory = broken.evaluate_guards(found.added, indices=broken.verify_indices)
    assert in_memory["images"] == 10
    assert abs(verified["top1_agreement"] - in_memory["top1_agreement"]) <= 1 / 10 + 1e-9
    assert verified["meets_target"] == (verified["top1_agreement"] >= TARGET) and verified["target"] == {"top1": TARGET}
    assert "10 evaluation images the search did not use" in verified.summary()
    agreement = f"top-1 agreement {100 * verified['top1_agreement']:.1f}%"
    assert (f"meets the target on these 10 images ({agreement} ≥ 99.5%)" if verified["meets_target"] else
            f"MISSES the target on these 10 images ({agreement} < 99.5%)") in verified.summary()
    built = onnx.load(verified["model_path"])
    batch = next(broken.batches(broken.debug_indices))[1]
    np.testing.assert_array_equal(  # the searched in-memory variant is bit for bit the file build_variant wrote
        literal_session(built).run([broken.output_name], {broken.input_name: batch})[0],
        literal_session(broken.quantized_model(found.added)[0]).run([broken.output_name], {broken.input_name: batch})[0])
    producers = {o: n.op_type for n in built.graph.node for o in n.output}
    guarded = next(n for n in built.graph.node if n.name == broken_layer)
    assert producers.get(guarded.input[0]) != "DequantizeLinear" and guarded.input[1] not in producers

    # TensorRT 10 implicit builds resolve the same guards on the exported (unsanitized) ONNX.
    from trtlab.graph.guards import resolve_guards

    resolved = resolve_guards(onnx.load(str(broken.model_path), load_external_data=False), found.guards)
    assert [g.name for g in resolved][: len(found.added)] == sorted(found.added, key=broken.all_layers.index)


def test_guard_search_resumes_from_its_saved_evaluations(broken, broken_sensitivity, monkeypatch):
    from trtlab.debug import guard_search

    first = broken.search_guards(target=TARGET, sensitivity=broken_sensitivity, recovery=())

    def must_not_run(*args, **kwargs):
        raise AssertionError("a resumed search evaluated a guard set again")

    monkeypatch.setattr(guard_search, "evaluate_guards", must_not_run)
    again = broken.search_guards(target=TARGET, sensitivity=broken_sensitivity, recovery=())
    assert again.guards == first.guards and again.steps.equals(first.steps)
    with pytest.raises(AssertionError, match="evaluated a guard set again"):
        broken.search_guards(target=TARGET, sensitivity=broken_sensitivity, recovery=(), resume=False)
    detached = guard_search.GuardSearch(**{**vars(first), "debugger": None})
    with pytest.raises(RuntimeError, match="without its debugger"):
        detached.verify()


def test_guard_search_bar_totals_are_known_before_drawing(broken, broken_sensitivity, monkeypatch):
    """Issue 30: a bar whose total changed after it was drawn read "100 % 1/1" on an almost empty notebook bar."""
    import io

    from trtlab.core.progress import progress_bar

    bars = []

    def recording(total, desc, unit):  # drawn (into a string), so its counts are real
        bar = progress_bar(total, desc, unit, enabled=True, file=io.StringIO())
        bars.append((bar, total))
        return bar

    monkeypatch.setattr(broken, "progress_bar", recording)
    found = broken.search_guards(target=TARGET, sensitivity=broken_sensitivity, recovery=())  # resumed from the saved evaluations
    assert found.reached and bars
    assert all(bar.total == total for bar, total in bars)  # never changed after drawing
    search_bar, total = bars[0]
    assert total == 50 and search_bar.n == total  # stopped early at the target: the layers left were not needed
    bars.clear()
    broken.search_guards(target=TARGET, sensitivity=broken_sensitivity, recovery=(), max_guards=1, prune=False)
    assert [(bar.total, bar.n) for bar, _ in bars] == [(1, 1)]


def test_a_missed_target_says_so(broken, broken_sensitivity):
    found = broken.search_guards(target=TARGET, sensitivity=broken_sensitivity, recovery=(), max_guards=0)
    assert not found.reached and found.added == [] and "NOT reached" in found.summary()
    assert len(found.steps) == 1 and found.int8_layers == 50


def test_the_default_fidelity_target_finds_the_broken_layer_where_top1_is_blind(demo_model, demo_cache, split,
                                                                                session_workspace, clean):
    """Notebook 05's example (issue 26): layer 30 of 50 with its input scale ÷50. On the first 2 search photos the
    broken variant agrees with FP32 on every top-1, so a top-1 target adds no guard; the default target, mean logit
    cosine ≥ 0.99, sees its logits (cosine ≈ 0.85) and guards that layer first."""
    from trtlab.debug.targets import DEFAULT_TARGET, Target

    notebook_layer = clean.layers[29]
    blind = LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, DEBUG_RECIPE, images=IMAGES,
                          batch_size=IMAGES, scale_overrides={notebook_layer: BROKEN_FACTOR}, search_images=2,
                          workspace=session_workspace, progress=False)
    by_top1 = blind.search_guards(target=TARGET, recovery=())
    assert by_top1.reached and by_top1.added == [] and by_top1.steps["top1_agreement"].iloc[0] == 1.0
    assert by_top1.steps["cosine_mean"].iloc[0] < 0.9  # what top-1 cannot see
    assert "the recipe meets it as it is" in by_top1.summary()

    found = blind.search_guards(recovery=())  # the default target
    sensitivity = blind.sensitivity()
    assert sensitivity.ranking[0] == notebook_layer
    assert found.target == Target.of(DEFAULT_TARGET) == Target((("cosine", 0.99),))
    assert found.reached and found.added[0] == notebook_layer and found.metrics["cosine_mean"] >= 0.99
    forward = found.steps[found.steps["phase"] == "add"]
    assert all(c < 0.99 for c in forward["cosine_mean"].iloc[:-1]) and forward["cosine_mean"].iloc[-1] >= 0.99
    assert list(forward["guarded"])[1:] == sensitivity.ranking[: len(forward) - 1]
    assert "mean logit cosine ≥ 0.99 reached on 2 search images" in found.summary()
    assert f"--guards {','.join(map(str, found.guards))}" in found.calibrate_command() and found.guards
    saved = json.loads(found.save(session_workspace / "blind").read_text())
    assert saved["target"] == {"cosine": 0.99} and saved["steps"][0]["kl_mean"] > saved["steps"][-1]["kl_mean"]

    # The top-1 search added nothing; its verification on the other 18 photos misses and says why.
    verified = by_top1.verify()
    assert verified["images"] == 18 and not verified["meets_target"]
    text = verified.summary()
    assert "MISSES the target on these 18 images (top-1 agreement " in text and "< 99.5%)" in text
    assert "so the search added no guards" in text


def test_targets_bound_fidelity_and_refuse_nonsense():
    from trtlab.debug.targets import Target

    metrics = {"top1_agreement": 1.0, "cosine_mean": 0.985, "sqnr_db": 15.2, "kl_mean": 0.02}
    assert Target.of(0.995).met(metrics) and Target.of("0.995") == Target.of({"top1": 0.995})
    assert Target.of(None).missed(metrics) == ["mean logit cosine 0.9850 < 0.99"]
    both = Target.of("top1=0.995, sqnr=20")
    assert both.spelling() == "top1=0.995,sqnr=20" and both.missed(metrics) == ["logit SQNR 15.2 dB < 20 dB"]
    assert both.describe() == "top-1 agreement ≥ 99.5% and logit SQNR ≥ 20 dB"
    assert Target.of("kl=0.05").met(metrics)
    assert Target.of("kl=0.01").missed(metrics) == ["mean softmax KL 0.0200 > 0.01"]
    assert not Target.of("cosine=0.9").met({**metrics, "cosine_mean": math.nan})  # no measurement is a miss
    for bad, words in (("99.5", "(0, 1]"), ("cosine=1.5", "(0, 1]"), ("kl=-1", "≥ 0"), ("snr=20", "not a metric"),
                       ("cosine=x", "not a number"), ("", "names no bound")):
        with pytest.raises(ValueError, match=re.escape(words)):
            Target.of(bad)
    from trtlab.evaluation.fidelity import softmax_kl

    ref = np.array([[2.0, 1.0, 0.1], [0.0, 0.0, 0.0]])
    p = np.exp(ref[0]) / np.exp(ref[0]).sum()
    q = np.exp(ref[0] * 0.5) / np.exp(ref[0] * 0.5).sum()
    np.testing.assert_allclose(softmax_kl(ref, np.stack([ref[0] * 0.5, ref[1]])), [(p * np.log(p / q)).sum(), 0.0],
                               atol=1e-12)


def test_the_debugger_and_the_verdict_report_one_kl_for_the_same_logits():
    from trtlab.evaluation.fidelity import KL_PROBABILITY_FLOOR, kl_per_image
    from trtlab.evaluation.results import VariantResult, top5_from_logits

    rng = np.random.default_rng(3)
    ref = rng.normal(0, 3, (6, 10)).astype(np.float16).astype(np.float32)  # what the store keeps: float16
    test = (ref + rng.normal(0, 0.5, ref.shape)).astype(np.float16).astype(np.float32)
    ref[0, 0], test[0, 0] = 20.0, -40.0  # the variant all but rules out the reference's class: the floor decides
    sums = ErrorSums()
    sums.update(ref, test, logits=True)

    def stored(name, logits):
        indices, probs = top5_from_logits(logits)
        return VariantResult(name, [f"img{i}" for i in range(len(logits))], np.full(len(logits), -1, np.int64),
                             indices, probs, logits.astype(np.float16))

    variant, reference = stored("int8", test), stored("fp32", ref)
    verdict = kl_per_image(variant, reference, *variant.align(reference))
    assert sums.metrics(logits=True)["kl_mean"] == pytest.approx(verdict.mean(), rel=1e-12)
    q = np.exp(test[0].astype(np.float64) - test[0].max())
    assert q[0] / q.sum() < KL_PROBABILITY_FLOOR and verdict[0] > 10  # the floored row is in both, and counts


def test_fp16_guards_and_a_satisfied_target(clean):
    from trtlab.graph.guards import Guard

    found = clean.search_guards(target=0.5, precision="fp16")
    assert found.reached and found.added == [] and len(found.steps) == 1  # already met: nothing guarded
    assert found.guards == list(clean.recipe.guards) and all(isinstance(g, Guard) for g in found.guards)
    last = clean.layers[-1]
    one = clean.guard_strings([last], precision="fp16")
    assert all(isinstance(g, Guard) for g in one)  # Guard values (their str() is the text), not strings
    assert [str(g) for g in one] == [f"node:{last}=fp16"] and Recipe(guards=tuple(one)).guards == tuple(one)
    model, _ = clean.quantized_model([last], precision="fp16")
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    assert producers[next(n for n in model.graph.node if n.name == last).input[0]] == "Cast"
    metrics = clean.evaluate_guards(one, precision="fp16")
    assert metrics["images"] == 10 and 0.9 < metrics["cosine_mean"] < 1.0  # the search images


def test_bad_input_is_refused_with_the_fix(demo_model, demo_cache, split, session_workspace, clean):
    with pytest.raises(KeyError, match="no calibrated activation tensor or layer"):
        LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, images=2,
                      scale_overrides={"no_such_layer": 2.0}, workspace=session_workspace, progress=False)
    with pytest.raises(ValueError, match="finite and > 0"):
        LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, images=2,
                      scale_overrides={clean.layers[0]: 0.0}, workspace=session_workspace, progress=False)
    with pytest.raises(ValueError, match="INT8 recipe"):
        LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, Recipe(precision="fp32"),
                      workspace=session_workspace, progress=False)
    with pytest.raises(ValueError, match="target"):
        clean.search_guards(target=99.5)
    with pytest.raises(KeyError, match="not weighted layers"):
        clean.tensor_errors(extra_layers=["node:nope"])
    with pytest.raises(KeyError, match="not layers of this model"):
        clean.sensitivity(layers=["nope"])
    with pytest.raises(ValueError, match="guard precision"):
        clean.search_guards(precision="int4")
    with pytest.raises(ValueError, match="search_images=21"):
        LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, images=2, search_images=21,
                      workspace=session_workspace, progress=False)
    whole = LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, images=2, search_images=20,
                          workspace=session_workspace, progress=False)
    assert len(whole.verify_indices) == 0
    with pytest.raises(ValueError, match="no evaluation images are left to verify on"):
        whole.verify_recipe(whole.recipe)


# -- CLI -------------------------------------------------------------------------------------------------------------
# The whole debug pipeline on the FP16 float path (the CLI's recipe, so the module's FP32-path sensitivity runs are not
# reused): 100 sensitivity runs, the search and the verification, 35-145 s each on 2 cores. The steps are tested one by
# one above; these check the command's wiring and exit status: slow (README: `python3 -m pytest -m slow`, run by CI).
@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["minmax", "entropy"])
def test_debug_cli_finds_the_broken_layer_and_exits_by_its_verification(algorithm, session_workspace, demo_model,
                                                                        broken, broken_layer, tmp_path, capsys):
    """The default target (mean logit cosine ≥ 0.99) on the bundled photos: the search guards the broken layer
    first; exit 0 when the found recipe also meets the target on the held-out verification photos (minmax: ≈ 0.993
    there), 1 when it misses (entropy: ≈ 0.989 there), and the line before the command says which."""
    out = tmp_path / "debug"
    status = debug_main(["--workspace", str(session_workspace), "--images", str(IMAGES), "--batch-size", str(IMAGES),
                         "--algorithms", algorithm, "--scale-override", f"{broken_layer}={BROKEN_FACTOR:g}",
                         "--recovery", "none", "--out", str(out), "-q"])
    printed = capsys.readouterr().out
    assert "error first jumps at" in printed and broken_layer in printed and "built by build_variant" in printed
    assert broken.block(broken_layer) in printed  # layers named by the model's blocks too
    for name in ("tensor_errors.csv", "tensor_errors.png", "sensitivity.csv", "sensitivity.png", "guard_search.json"):
        assert (out / name).stat().st_size > 0
    saved = json.loads((out / "guard_search.json").read_text())
    assert saved["target"] == {"cosine": 0.99} and saved["reached"] and saved["added"][0] == broken_layer
    assert list(Recipe.from_dict(saved["recipe"]).guard_texts) == saved["guards"]
    verified = saved["verified"]
    assert verified["meets_target"] == (verified["cosine_mean"] >= 0.99)
    assert not set(verified["image_ids"]) & set(saved["search_images"])
    assert status == (0 if verified["meets_target"] else 1) == {"minmax": 0, "entropy": 1}[algorithm]
    lines = printed.strip().splitlines()
    assert lines[-3] == ("target mean logit cosine ≥ 0.99 met on the 10 search images and on the 10 verification "
                         "images" if status == 0 else "target mean logit cosine ≥ 0.99 reached on the 10 search "
                         "images but MISSED on the 10 verification images (exit status 1)")
    # The last line is a calibrate command with the found guards, not the recipe JSON, and pasting it works.
    command = lines[-1].strip()
    assert '"algorithm"' not in printed and command.startswith("python -m trtlab calibrate ")
    assert f"--algorithms {algorithm} --calibration-images 6 --guards {','.join(saved['guards'])}" in command
    if algorithm == "minmax":
        words = shlex.split(command)[4:]
        fresh = tmp_path / "workspace"  # the pasted run gets its own workspace: the shared one keeps its results
        words[words.index("--workspace") + 1] = str(fresh)
        from trtlab.cli.commands.calibrate import main as calibrate_main

        assert calibrate_main(words + ["--model", str(demo_model)]) == 0
        assert verified["variant"] in capsys.readouterr().out


@pytest.mark.slow
def test_debug_cli_exits_1_when_the_search_misses(session_workspace, broken_layer, tmp_path, capsys):
    status = debug_main(["--workspace", str(session_workspace), "--images", str(IMAGES), "--batch-size", str(IMAGES),
                         "--algorithms", "minmax", "--scale-override", f"{broken_layer}={BROKEN_FACTOR:g}",
                         "--target", "cosine=0.9999", "--max-guards", "1", "--out", str(tmp_path / "miss"), "-q"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert status == 1 and lines[-3] == ("target mean logit cosine ≥ 0.9999 NOT reached on the 10 search images "
                                         "(exit status 1)")
    assert f"--guards node:{broken_layer}" in lines[-1]  # the most guarded recipe tried carries its guard
    assert lines[-1].endswith("--recovery adaround,bias_correction")  # and the recovery tried before it (issue 39)
    assert lines[-2] == "the target was not reached; the most guarded recipe tried:"
