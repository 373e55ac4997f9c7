"""Issue 35: the journey through the notebooks holds together — one guard vocabulary (a guard names its precision; a
bare and a spelt-out guard are one recipe; byte-identical graphs are one variant), notebook 01 takes the user's own
photos with a labels.csv and later notebooks say loudly when it failed, the A/B's verdict is what notebooks 04 and 05
follow, and a UserError in a notebook cell is one line."""
from __future__ import annotations

import csv
import html
import json
import shutil
from pathlib import Path

import pytest


# -- one guard vocabulary ----------------------------------------------------------------------------------------------
def test_a_guard_names_its_precision_and_a_bare_guard_is_the_spelt_out_one():
    from trtlab import Recipe

    bare = Recipe(guards=("first_layer", "node:Conv_12", "softmax"))
    assert bare.guard_texts == ["first_layer=fp16", "node:Conv_12=fp16", "softmax=fp32"]  # FP16 float path
    assert bare == Recipe(guards=("first_layer=fp16", "node:Conv_12=fp16", "softmax=fp32"))
    assert bare.name == "int8-entropy@auto+first_layer-fp16+Conv_12-fp16+softmax-fp32"
    assert Recipe(high_precision="fp32", guards=("last_layer",)).guard_texts == ["last_layer=fp32"]
    assert Recipe(precision="fp16", guards=("node:Conv_12",)).guard_texts == ["node:Conv_12=fp32"]
    assert Recipe(guards=("last_layer=fp32",)).guard_texts == ["last_layer=fp32"]  # FP32 when asked


def test_recipes_with_byte_identical_graphs_are_one_variant(demo_model, demo_data, tmp_path):
    import trtlab
    from trtlab.data.demo import demo_split

    # The demo model ends in logits (no Softmax): a softmax guard changes nothing in its graph.
    result = trtlab.compare(demo_model, demo_data, [trtlab.Recipe(algorithm="minmax"),
                                                    trtlab.Recipe(algorithm="minmax", guards=("softmax",)),
                                                    trtlab.Recipe(algorithm="minmax", guards=("first_layer",)),
                                                    trtlab.Recipe(algorithm="minmax", guards=("first_layer=fp16",))],
                            split=demo_split(demo_data), workspace=tmp_path / "ws", progress=False)
    assert list(result.table.index) == ["fp32", "int8-minmax@6", "int8-minmax@6+first_layer-fp16"]
    assert result.same_graph == {"int8-minmax@6+softmax-fp32": "int8-minmax@6"}
    assert "int8-minmax@6+softmax-fp32 makes the same graph as int8-minmax@6 (byte-identical)" in repr(result)
    assert result.store.variants() == ["fp32", "int8-minmax@6", "int8-minmax@6+first_layer-fp16"]
    # Its name still reaches the variant it is: the verdict reads it through same_graph.
    assert result.verdict("int8-minmax@6+softmax-fp32", "int8-minmax@6+first_layer-fp16").first == "int8-minmax@6"


# -- the verdict is what notebooks 04 and 05 follow ------------------------------------------------------------------
@pytest.fixture(scope="module")
def ab(demo_model, demo_data, tmp_path_factory):
    import trtlab
    from trtlab.data.demo import demo_split

    workspace = tmp_path_factory.mktemp("journey")
    split = demo_split(demo_data)
    result = trtlab.compare(demo_model, demo_data, [trtlab.Recipe(algorithm=a) for a in ("minmax", "entropy")],
                            split=split, workspace=workspace, progress=False)
    return result, split, workspace


def test_the_answer_comes_first_and_is_kept_as_the_stores_verdict(ab):
    result, _, _ = ab
    answer = result.answer()
    assert answer.startswith("Ship int8-minmax@6 — this rests on logit fidelity over 20 images: ")
    assert repr(result).startswith(answer) and result._repr_html_().startswith(f"<p><b>{answer[:40]}")
    record = result.store.last_verdict()
    assert (record["first"], record["second"], record["ship"], record["closer"]) == \
        ("int8-minmax@6", "int8-entropy@6", "int8-minmax@6", "int8-minmax@6")
    assert record["sentence"] == answer
    assert result.recommended(guards=("first_layer",)).name == "int8-minmax@6+first_layer-fp16"


def test_an_ab_of_one_variant_answers_how_close_it_is(ab, demo_model, demo_data):
    import trtlab

    result, split, workspace = ab
    one = trtlab.compare(demo_model, demo_data, [result.recommended(guards=("last_layer",))], split=split,
                         workspace=workspace, progress=False)
    assert one.answer().startswith("int8-minmax@6+last_layer-fp16 against fp32 over 20 images: logit cosine 0.")
    assert "(worst 0." in one.answer() and "labelled images." in one.answer()
    assert one.store.last_verdict()["first"] == "int8-minmax@6"  # no pair here: the stored verdict stands


def test_the_dashboard_compares_the_verdicts_pair_and_answers_with_its_cost_per_class(ab, demo_model, demo_data):
    import trtlab

    result, split, workspace = ab
    # A guarded pair evaluated later (the widget's run) is stored too; plain names never mix guarded and unguarded.
    guarded = trtlab.compare(demo_model, demo_data, [trtlab.Recipe(algorithm="percentile", guards=("first_layer",))],
                             split=split, workspace=workspace, progress=False)
    assert guarded.store.folder == result.store.folder and guarded.store.last_verdict()["first"] == "int8-minmax@6"
    dash = trtlab.build_dashboard(result.store)
    assert dash.verdict_pair() == ("int8-minmax@6", "int8-entropy@6") and dash.focus == list(dash.verdict_pair())
    h2h = dash.compare()
    assert (h2h.first, h2h.second) == ("int8-minmax@6", "int8-entropy@6")
    # 'percentile' names the only percentile variant (guarded); 'minmax' then the one calibrated alike — there is
    # none, so the unguarded one, and the headline carries both full labels.
    pair = dash.compare("percentile", "minmax")
    assert (pair.first, pair.second) == ("int8-percentile99.99@6+first_layer-fp16", "int8-minmax@6")
    answer = str(dash.answer())
    # which classes change depends on the backend's numerics (ONNX Runtime here, torch on a GPU): either sentence
    assert answer.startswith("int8-minmax@6 (notebook 03's recommendation) changes top-1 ") and \
        ("worst: " in answer or "on none of the 19 labelled classes" in answer), answer
    assert f"<p><b>{html.escape(answer[:30])}" in dash.write_html(workspace / "d.html").read_text()


def test_the_layer_debugger_debugs_the_recommended_recipe_and_says_so(ab, demo_model, demo_data, caplog):
    import trtlab

    _, split, workspace = ab
    with caplog.at_level("INFO", logger="trtlab"):
        dbg = trtlab.layer_debugger(demo_model, demo_data, split=split, images=2, workspace=workspace, progress=False)
    assert dbg.recipe.name == "int8-minmax@6" and dbg.recipe_reason == "notebook 03's recommendation"
    assert "layer debugging int8-minmax@6: notebook 03's recommendation" in caplog.text
    other = trtlab.layer_debugger(demo_model, demo_data, split=split, images=2, workspace=workspace / "fresh",
                                  progress=False)
    assert other.recipe.algorithm == "entropy" and other.recipe_reason.startswith("the default recipe: no A/B verdict")


@pytest.mark.slow  # a guard search and a verification: about a minute on 2 cores
def test_the_guard_search_answer_names_layers_precision_cost_and_the_figures(ab, demo_model, demo_data):
    import trtlab

    _, split, workspace = ab
    dbg = trtlab.layer_debugger(demo_model, demo_data, split=split, images=2, workspace=workspace, progress=False,
                                recipe=trtlab.Recipe(algorithm="entropy"), scale_overrides=None)
    found = dbg.search_guards(max_guards=3)
    assert found.precision == "fp16" and all(str(g).endswith("=fp16") for g in found.guards)
    answer = str(found.answer())
    if found.added:
        count = "this layer" if len(found.added) == 1 else f"these {len(found.added)} layers"
        # recovery first (issue 39): the answer names what it tried beside the layers it keeps in FP16
        recover = f"recover with {' + '.join(found.recovery)} and " if found.recovery else ""
        assert answer.startswith(f"int8-entropy@6 (the recipe asked for): {recover}keep {count} in FP16 — ")
        assert f"% of the MACs in FP16, " in answer and found.mac_share["FP16"] > 0
    assert "(mean logit cosine 0." in answer and answer.endswith("(found.verify()).")
    found.verify(progress=False)
    answer = str(found.answer())
    assert ("; verified on the other 10 images (mean logit cosine 0." in answer) == found.verified["meets_target"]
    summary = found.verified.summary()
    assert (": meets the target on these 10 images (mean logit cosine 0." in summary) == \
        found.verified["meets_target"]


# -- notebook 01 with the user's own photos ------------------------------------------------------------------------
def _own_photos(root: Path, demo_data, labelled_every: int = 4) -> Path:
    """The demo photos renamed img_XX.* in one folder, a labels.csv beside them labelling every 4th."""
    root.mkdir(parents=True)
    rows = []
    for i, (path, label) in enumerate(zip(demo_data.paths, demo_data.labels)):
        name = f"img_{i:02d}{Path(path).suffix}"
        shutil.copy(path, root / name)
        if label >= 0 and i % labelled_every == 0:
            rows.append((name, int(label)))
    with open(root / "labels.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("file", "label"), *rows])
    return root


def test_notebook_01_prepares_photos_with_a_labels_csv_beside_them(tmp_path, demo_data):
    import trtlab

    photos = _own_photos(tmp_path / "photos", demo_data)
    prep = trtlab.prepare_imagenet(photos, workspace=tmp_path / "ws", progress=False)
    labelled = int((prep.dataset.labels >= 0).sum())
    assert (prep.source, len(prep.dataset), labelled) == ("csv", len(demo_data), 6)
    assert prep.dataset.name == "photos-photos" and prep.what.startswith(f"your photos in {photos}")
    assert len(prep.split.calibration) == len(demo_data) // 2  # a few per class: half of them calibrate
    report = json.loads((tmp_path / "ws" / "imagenet" / "check_report.json").read_text())
    assert any(p["kind"] == "images_without_labels" and "kept unlabelled" in p["message"] for p in report["problems"])
    # What notebooks 02-05 get back, unlabelled photos included; and the CSV named instead of found.
    data = trtlab.prepared_data(workspace=tmp_path / "ws", announce=False)
    assert len(data.dataset) == len(demo_data) and int((data.dataset.labels >= 0).sum()) == 6
    named = trtlab.prepare_imagenet(photos / "labels.csv", workspace=tmp_path / "ws2", progress=False)
    assert named.source == "csv" and len(named.dataset) == len(demo_data)


def test_a_failed_notebook_01_makes_later_notebooks_say_loudly_they_run_on_the_demo_photos(tmp_path, caplog):
    import trtlab

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(trtlab.UserError) as failure:
        trtlab.prepare_imagenet(empty, workspace=tmp_path / "ws", progress=False)
    assert failure.value.line().startswith("error: no images")
    with caplog.at_level("INFO", logger="trtlab"):
        data = trtlab.prepared_data(workspace=tmp_path / "ws")
    assert data.source == "demo"
    loud = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(loud) == 1 and loud[0].getMessage().startswith("notebook 01 did not prepare your data — its last run "
                                                              "failed: no images")
    assert "NOT your data" in loud[0].getMessage()


def test_no_labels_at_all_is_one_line_naming_the_labels_csv(tmp_path, demo_data):
    import trtlab

    photos = _own_photos(tmp_path / "photos", demo_data)
    (photos / "labels.csv").unlink()
    with pytest.raises(trtlab.UserError) as failure:
        trtlab.prepare_imagenet(photos, workspace=tmp_path / "ws", progress=False)
    line = failure.value.line()
    assert line.count("\n") == 0 and "labels.csv" in line.split(" — ")[1], line


# -- a UserError in a notebook cell -----------------------------------------------------------------------------------
def test_a_user_error_in_a_notebook_cell_is_one_line_and_info_follows_the_result(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[
        new_code_cell("import logging, trtlab\nlogging.getLogger('trtlab.x').info('how it ran')\n'the answer'"),
        new_code_cell("trtlab.compare('no-such-model.onnx', trtlab.demo_dataset(), [trtlab.Recipe()])"),
        new_code_cell("%tb")])
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    first, mistake, traceback = (cell.outputs for cell in nb.cells)
    assert [o.output_type for o in first] == ["execute_result", "stream"]  # the answer, then how it ran
    assert first[1].text == "[trtlab] how it ran\n"
    shown = [o for o in mistake if o.output_type == "stream" and o.name == "stderr"]
    assert [o for o in mistake if o.output_type == "error"] == []  # no traceback
    lines = shown[-1].text.splitlines()
    assert lines[0].startswith("error: ") and "no-such-model.onnx" in lines[0] and " — " in lines[0]
    assert lines[1].startswith("(the full traceback: run %tb in a new cell")
    assert traceback[0].output_type == "error" and "no-such-model.onnx" in traceback[0].evalue
