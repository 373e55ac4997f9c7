"""Model outputs checked for what they are (issue 18): NaN/inf rows counted, named and left out of every score; a
features output beside the logits; a Softmax at the end; TensorFlow's 1001 classes. Each odd model is the demo
EfficientNet-Lite0 edited with onnx.helper (tests/odd_models.py), evaluated on the demo photos; each test checks the
message and that the results stored before, the model and the photos are intact."""
from __future__ import annotations

import numpy as np
import pytest

import odd_models as om
from trtlab.evaluation.results import ResultsStore


@pytest.fixture
def ws(tmp_path):
    return tmp_path / "ws"


@pytest.fixture
def stored_before(demo_model, photo_folder, ws, capsys):
    """The demo model's FP32 results on the photos, stored before the odd model comes; returns (its results,
    a snapshot of those results, the model and the photos)."""
    code, _, _ = om.run_cli(capsys, "eval", "--model", demo_model, "--data", photo_folder, "--workspace", ws, "-q")
    assert code == 0
    (store,) = [ResultsStore(f) for f in (ws / "results").iterdir()]
    return store.load("fp32"), om.snapshot(ws / "results", demo_model, photo_folder)


def model_inputs(photo_folder, ws):
    """(image ids, float32 N×3×224×224 model inputs) of the photos, through the one batch source."""
    from trtlab.data.batches import iter_batches
    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import build_decode_cache

    cache = build_decode_cache(Dataset.from_folder(photo_folder), "tf-lite", ws, progress=False)
    ids = cache.dataset.image_ids()
    batches = list(iter_batches(cache, cache.valid_indices, 32))
    return [ids[i] for b in batches for i in b.indices], np.concatenate([b.images[:b.count] for b in batches])


def result_of(ws, model_stem: str, variant: str = "fp32"):
    stores = [ResultsStore(f) for f in (ws / "results").iterdir() if f"-{model_stem}" in f.name]
    assert len(stores) == 1, [s.folder.name for s in stores]
    return stores[0].load(variant)


def same_rows(result, reference):
    mine, theirs = result.align(reference)
    assert len(mine) == len(result.image_ids) == len(reference.image_ids)
    return mine, theirs


# -- NaN / inf outputs -----------------------------------------------------------------------------------------------
def test_non_finite_outputs_are_counted_named_and_left_out_of_every_score(demo_model, photo_folder, ws, tmp_path,
                                                                          capsys, stored_before):
    from trtlab.evaluation.metrics import accuracy, consistency_table

    reference, before = stored_before
    ids, images = model_inputs(photo_folder, ws)
    means = {image_id: float(image.mean()) for image_id, image in zip(ids, images)}
    ordered = sorted(means.values())
    threshold = (ordered[2] + ordered[3]) / 2  # the three darkest photos give NaN (log of a negative number)
    model = om.with_nan_rows(demo_model, tmp_path / "models" / "nan-head.onnx", threshold)
    code, out, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--workspace", ws)
    assert code == 0, err
    darkest = sorted(means, key=means.get)[:3]
    warning = next(line for line in err.splitlines() if "non-finite" in line)
    assert f"fp32: 3 of {len(ids)} image(s) gave non-finite outputs (NaN/inf)" in warning
    assert all(name in warning for name in darkest) and "left out of every score" in warning
    assert "the FP32 model itself" in warning  # what to check when FP32 already overflows
    assert "3 of" in out and "NaN/inf outputs and are left out" in out  # the summary says it too

    result = result_of(ws, "nan-head")
    assert result.record["outputs"]["non_finite"] == 3
    assert sorted(result.record["outputs"]["non_finite_images"]) == sorted(darkest)
    assert (~result.valid).sum() == 3 and (result.top5_indices[~result.valid] == -1).all()
    scores = accuracy(result)
    assert scores["labelled"] == len(ids) - 3 and scores["non_finite"] == 3
    # the other photos are scored as the demo model scores them (the NaN branch adds a constant per photo)
    mine, theirs = result.align(reference)
    assert len(mine) == len(ids) - 3
    np.testing.assert_array_equal(result.top1[mine], reference.top1[theirs])
    table = consistency_table({"fp32": result})
    assert table.loc["fp32", "non_finite"] == 3 and table.loc["fp32", "labelled"] == len(ids) - 3
    assert om.unchanged(before)


def test_a_variant_with_nan_rows_is_compared_on_the_finite_rows_only():
    from trtlab.evaluation.metrics import agreement, compact_variant_table, consistency_table, flips
    from trtlab.evaluation.outputs import interpret_outputs, report_non_finite
    from trtlab.evaluation.results import VariantResult

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 10)).astype(np.float32)
    broken = logits.copy()
    broken[1:, 3] = np.nan  # 3 of 4 rows NaN, as in the report
    labels = logits.argmax(1)
    ids = [f"img{i}.jpg" for i in range(4)]

    def result(name, values):
        outputs = interpret_outputs(values)
        return VariantResult(name, ids, labels, outputs.top5_indices, outputs.top5_probs, outputs.stored)

    fp32, int8 = result("fp32", logits), result("int8-entropy@6", broken)
    assert int8.non_finite == 3 and np.isnan(int8.top5_probs[1:]).all()
    compared = agreement(int8, fp32)
    assert compared["compared"] == 1 and compared["top1_agreement"] == 1.0 and np.isfinite(compared["cosine_mean"])
    table = consistency_table({"fp32": fp32, "int8-entropy@6": int8})
    assert table.loc["int8-entropy@6", "top1"] == 1.0 and table.loc["int8-entropy@6", "labelled"] == 1
    assert table.loc["int8-entropy@6", "non_finite"] == 3 and table.loc["fp32", "non_finite"] == 0
    assert "non_finite" in compact_variant_table(table, {"fp32": fp32, "int8-entropy@6": int8}).columns
    assert len(flips(int8, fp32)) == 0  # a row without a prediction is no flip
    line = report_non_finite("int8-entropy@6", ~int8.valid, ids, "int8")
    assert "3 of 4 image(s)" in line and "img1.jpg, img2.jpg, img3.jpg" in line
    assert "--guards" in line and "--algorithms minmax" in line  # an FP32 guard, or another scale/algorithm
    clean = compact_variant_table(consistency_table({"fp32": fp32}), {"fp32": fp32})
    assert "non_finite" not in clean.columns  # the column appears only where there is something to count


def test_stored_logits_beyond_float16_stay_finite():
    from trtlab.evaluation.outputs import interpret_outputs

    values = np.array([[7e4 - 3, 7e4, 0.5], [0.1, 0.2, np.inf]], np.float32)
    outputs = interpret_outputs(values, k=2)
    assert np.isfinite(outputs.stored[0]).all() and outputs.stored[0, 1] == np.finfo(np.float16).max
    assert outputs.non_finite.tolist() == [False, True] and outputs.top5_indices[0].tolist() == [1, 0]


# -- several outputs -------------------------------------------------------------------------------------------------
def test_a_features_output_first_is_not_scored(demo_model, photo_folder, ws, tmp_path, capsys, stored_before,
                                               monkeypatch):
    reference, before = stored_before
    model = om.with_features_output(demo_model, tmp_path / "models" / "two-heads.onnx")
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--workspace", ws)
    assert code == 0, err
    assert ("two-heads.onnx has 2 outputs (view [N, 1280], logits [N, 1000]): scoring 'logits', the only N×C output "
            "whose classes fit ImageNet classes (sub-folder names)") in err
    result = result_of(ws, "two-heads")
    mine, theirs = same_rows(result, reference)
    np.testing.assert_array_equal(result.top5_indices[mine], reference.top5_indices[theirs])
    assert result.logits.shape[1] == 1000 and result.record["derived_from"]["output"] == "logits"

    # index labels fit both the 1280 features and the 1000 logits: the user must say, before any decoding
    csv = om.labels_csv(photo_folder, tmp_path / "labels.csv")
    om.forbid_decoding(monkeypatch)
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--labels", csv,
                              "--workspace", ws)
    line = om.one_error_line(err)
    assert code == 2 and "2 outputs (view [N, 1280], logits [N, 1000])" in line and "--output" in line
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--output", "scores",
                              "--workspace", ws)
    line = om.one_error_line(err)
    assert code == 2 and "'scores' is not an output of two-heads.onnx" in line and "view [N, 1280]" in line
    monkeypatch.undo()
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--labels", csv,
                              "--output", "logits", "--workspace", ws)
    assert code == 0 and "scoring 'logits', named by --output" in err
    assert om.unchanged(before)


def test_the_output_choice_rules():
    from trtlab.graph.classifier import ModelInfo
    from trtlab.graph.classifier_view import LabelSpace, OutputChoiceError, choose_output

    def info(*outputs):
        return ModelInfo("m.onnx", "", "input", ("N", 3, 224, 224), "float32", None, (), 17, tuple(outputs))

    imagenet, index = LabelSpace("imagenet", 990, False), LabelSpace("index", 990, False)
    features, logits, boxes = ("feat", ("N", 1280)), ("logits", ("N", 1000)), ("boxes", ("N", 100, 4))
    assert choose_output(info(boxes, logits), None or LabelSpace(None))[0] == "logits"  # the only N×C output
    assert choose_output(info(features, logits), imagenet) == (
        "logits", "the only N×C output whose classes fit ImageNet classes (the labels)")
    with pytest.raises(OutputChoiceError, match="--output logits"):
        choose_output(info(features, logits), index)  # both fit class indices up to 990
    with pytest.raises(OutputChoiceError, match="no labels"):
        choose_output(info(features, logits), LabelSpace(None))
    assert choose_output(info(features, logits), LabelSpace(None), "feat")[0] == "feat"
    with pytest.raises(OutputChoiceError, match="none is N×classes"):
        choose_output(info(boxes, ("map", ("N", 1000, 1, 1))), imagenet)


# -- a Softmax at the end ---------------------------------------------------------------------------------------------
def test_a_softmax_model_keeps_its_own_probabilities(demo_model, photo_folder, ws, tmp_path, capsys, stored_before):
    reference, before = stored_before
    model = om.with_softmax(demo_model, tmp_path / "models" / "with-softmax.onnx")
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--workspace", ws)
    assert code == 0, err
    assert "with-softmax.onnx outputs probabilities (the graph ends in Softmax)" in err and "no second softmax" in err
    result = result_of(ws, "with-softmax")
    assert result.record["outputs"]["kind"] == "probabilities"
    ids, images = model_inputs(photo_folder, ws)
    probabilities = om.ort_outputs(model, images)
    rows = [ids.index(i) for i in result.image_ids]
    expected = np.take_along_axis(probabilities[rows], result.top5_indices.astype(np.int64), axis=1)
    np.testing.assert_allclose(result.top5_probs, expected, rtol=1e-5, atol=1e-7)  # the model's, not softmax²
    assert result.top5_probs[:, 0].max() > 0.5  # a second softmax would flatten them to ≈ 1/1000
    mine, theirs = same_rows(result, reference)
    np.testing.assert_array_equal(result.top5_indices[mine], reference.top5_indices[theirs])
    np.testing.assert_allclose(result.top5_probs[mine], reference.top5_probs[theirs], atol=1e-5)
    assert om.unchanged(before)


def test_outputs_summing_to_one_are_read_as_probabilities_without_the_graph():
    from trtlab.evaluation.outputs import interpret_outputs, output_kind

    rng = np.random.default_rng(1)
    logits = rng.normal(size=(6, 20)).astype(np.float32) * 3
    probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert output_kind(logits) == ("logits", "raw scores (softmax applied for confidences)")
    kind, why = output_kind(probabilities.astype(np.float16).astype(np.float32))  # an FP16 softmax rounds
    assert kind == "probabilities" and "sums to 1" in why
    outputs = interpret_outputs(probabilities)
    np.testing.assert_allclose(outputs.top5_probs[:, 0], probabilities.max(1), rtol=1e-6)
    log_outputs = interpret_outputs(np.log(probabilities), final_op="LogSoftmax")
    np.testing.assert_allclose(log_outputs.top5_probs, outputs.top5_probs, rtol=1e-5)


# -- TensorFlow's 1001 classes ----------------------------------------------------------------------------------------
def test_a_1001_class_model_is_scored_with_the_background_offset(demo_model, photo_folder, ws, tmp_path, capsys,
                                                                 stored_before, monkeypatch):
    reference, before = stored_before
    model = om.with_background_class(demo_model, tmp_path / "models" / "tf-1001.onnx")
    # WNID folders number the classes as ImageNet does: output 0 (background) is dropped, output k+1 is class k
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--workspace", ws)
    assert code == 0, err
    assert "tf-1001.onnx: output 0 of 1001 is taken as a background class and dropped" in err
    result = result_of(ws, "tf-1001.no-background")
    mine, theirs = same_rows(result, reference)
    np.testing.assert_array_equal(result.top1[mine], reference.top1[theirs])  # not label + 1, not 0 %
    assert (result.top1[mine] == result.labels[mine]).mean() == (reference.top1 == reference.labels).mean()

    # class indices 22..990 fit both numberings: asked for, in one line, before any decoding
    csv = om.labels_csv(photo_folder, tmp_path / "labels.csv")
    with monkeypatch.context() as patched:
        om.forbid_decoding(patched)
        code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--labels", csv,
                                  "--workspace", ws)
    line = om.one_error_line(err)
    assert code == 2 and "1001 classes" in line and "--background-class first" in line and \
        "--background-class none" in line and "off by one" in line
    # said: the same index labels with the offset
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--labels", csv,
                              "--background-class", "first", "--workspace", ws)
    assert code == 0, err
    # labels in the model's own numbering (ImageNet index + 1): no offset
    shifted = om.labels_csv(photo_folder, tmp_path / "labels-tf.csv", offset=1)
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--labels", shifted,
                              "--background-class", "none", "--workspace", ws)
    assert code == 0, err
    own = result_of(ws, "tf-1001.own-numbering")
    mine, theirs = same_rows(own, reference)
    np.testing.assert_array_equal(own.top1[mine], reference.top1[theirs] + 1)
    assert (own.top1 == own.labels).mean() == (reference.top1 == reference.labels).mean()
    assert om.unchanged(before)


@pytest.mark.parametrize("kind, labels, choice, dropped", [
    ("wnid", [22, 990], "auto", True),  # WNID folders or a WNID CSV
    (None, [22, 990], "auto", True),  # trtlab's own labels (demo photos, ImageNet preparation): ImageNet indices
    ("index", [0, 5, 990], "auto", True),  # class 0 is the background in the model's numbering: ImageNet's
    ("index", [1, 1000], "auto", False),  # class 1000 exists only in the model's numbering
    ("index", [22, 990], "first", True),
    ("index", [22, 990], "none", False),
    (None, [-1, -1], "auto", True),  # no labels: TensorFlow's numbering, said
])
def test_the_background_rules_for_every_label_path(kind, labels, choice, dropped):
    from trtlab.data.dataset import Dataset
    from trtlab.graph.classifier_view import LabelSpace, decide_background

    dataset = Dataset("d", [f"{i}.jpg" for i in range(len(labels))], np.array(labels), label_kind=kind,
                      label_source="folders" if kind == "wnid" else "labels.csv" if kind == "index" else None)
    assert decide_background(1001, LabelSpace.of(dataset), choice, "m.onnx")[0] is dropped
    assert decide_background(1000, LabelSpace.of(dataset), "auto", "m.onnx") == (False, "")


def test_ambiguous_index_labels_for_1001_classes_ask_for_the_option():
    from trtlab.data.dataset import Dataset
    from trtlab.graph.classifier_view import LabelSpace, OutputChoiceError, decide_background

    dataset = Dataset("d", ["a.jpg", "b.jpg"], np.array([22, 990]), label_kind="index", label_source="labels.csv")
    with pytest.raises(OutputChoiceError) as err:
        decide_background(1001, LabelSpace.of(dataset), "auto", "m.onnx")
    assert "labels CSV labels.csv are class indices 1..990" in err.value.line()
    assert "background_class= in Python" in err.value.line()
