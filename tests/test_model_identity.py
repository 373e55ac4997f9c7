"""The model, checked for what it is before any work (issue 18): its identity covers its external-data files;
a missing external-data file or a custom-domain op is one line naming the file or op; any input size, the crop
following the model's input unless --crop/--resize say otherwise, for eval, calibrate, debug and the Python API.
Odd models are the demo EfficientNet-Lite0 edited with onnx.helper (tests/odd_models.py)."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import odd_models as om
from trtlab.evaluation.results import ResultsStore


@pytest.fixture
def ws(tmp_path):
    return tmp_path / "ws"


def stores(ws, name: str) -> list[ResultsStore]:
    return [ResultsStore(f) for f in sorted((ws / "results").iterdir()) if f"-{name}-" in f.name] \
        if (ws / "results").exists() else []


# -- external data -----------------------------------------------------------------------------------------------
def test_new_external_weights_are_a_new_model_not_a_reuse(demo_model, photo_folder, ws, tmp_path, capsys):
    from trtlab.core.workspace import sha256_file
    from trtlab.graph.classifier import inspect_classifier

    model = om.with_external_data(demo_model, tmp_path / "exported" / "model.onnx")
    retrained = om.with_external_data(demo_model, tmp_path / "retrained" / "model.onnx", scale_fc=0.5)
    assert model.read_bytes() == retrained.read_bytes()  # the graph file is byte for byte the same
    first = inspect_classifier(model)
    assert first.external_data == (str(model.parent / "model.onnx.data"),)
    assert first.sha256 != sha256_file(model)  # the weights are part of the identity
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--workspace", ws, "-q")
    assert code == 0, err
    (store,) = stores(ws, "model")
    before = store.load("fp32")
    assert before.record["model_sha256"] == first.sha256

    # new weights copied over the old ones, keeping the old file's times (cp -p, rsync -a, unzip)
    data = model.parent / "model.onnx.data"
    stat = data.stat()
    shutil.copyfile(retrained.parent / "model.onnx.data", data)
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    second = inspect_classifier(model)
    assert second.sha256 != first.sha256
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--workspace", ws)
    assert code == 0, err
    assert "reusing stored results" not in err
    by_model = {r.record["model_sha256"]: r for r in (store.load("fp32") for store in stores(ws, "model"))}
    assert set(by_model) == {first.sha256, second.sha256}  # its own experiment; the old one kept as it was
    old, new = by_model[first.sha256], by_model[second.sha256]
    np.testing.assert_array_equal(old.logits, before.logits)
    mine, theirs = new.align(old)
    np.testing.assert_allclose(new.logits[mine].astype(np.float32), 0.5 * before.logits[theirs].astype(np.float32),
                               rtol=0.02, atol=0.02)  # the new weights' results, not the old ones


def test_external_data_anywhere_the_model_names_it(demo_model, tmp_path):
    from trtlab.graph.classifier import inspect_classifier

    model = om.with_external_data(demo_model, tmp_path / "m" / "lite0.onnx", location="weights/lite0.bin")
    info = inspect_classifier(model)
    assert info.external_data == (str(tmp_path / "m" / "weights" / "lite0.bin"),)
    assert info.num_classes == 1000 and info.output_name == "logits"


def test_a_missing_external_data_file_is_one_line_before_any_decoding(demo_model, photo_folder, ws, tmp_path,
                                                                       capsys, monkeypatch):
    model = om.with_external_data(demo_model, tmp_path / "m" / "lite0.onnx", location="weights/lite0.bin")
    (tmp_path / "m" / "weights" / "lite0.bin").unlink()
    before = om.snapshot(model, photo_folder)
    om.forbid_decoding(monkeypatch)
    for command in ("eval", "calibrate", "debug"):
        code, _, err = om.run_cli(capsys, command, "--model", model, "--data", photo_folder, "--workspace", ws)
        line = om.one_error_line(err)
        assert code == 2 and "lite0.onnx keeps its weights in external data file(s) weights/lite0.bin" in line
        assert str(tmp_path / "m" / "weights" / "lite0.bin") in line and "beside the model" in line
    assert om.unchanged(before) and not (ws / "decode_cache").exists()


# -- ops ONNX Runtime cannot run -----------------------------------------------------------------------------------
def test_a_custom_domain_op_is_one_line_naming_it_before_any_decoding(demo_model, photo_folder, ws, tmp_path,
                                                                      capsys, monkeypatch):
    model = om.with_custom_op(demo_model, tmp_path / "models" / "custom.onnx")
    before = om.snapshot(model, photo_folder)
    om.forbid_decoding(monkeypatch)
    for command in ("eval", "calibrate"):
        code, _, err = om.run_cli(capsys, command, "--model", model, "--data", photo_folder, "--workspace", ws)
        line = om.one_error_line(err)
        assert code == 2 and "custom op 'FancyActivation' of domain 'com.example.vision'" in line
        assert "'fancy'" in line and "ONNX Runtime cannot run" in line and "standard ONNX ops" in line
    assert om.unchanged(before) and not (ws / "decode_cache").exists()


def test_ops_onnx_runtime_knows_are_not_custom(tmp_path):
    """Contrib ops ONNX Runtime runs (com.microsoft) and a model's own functions are not refused."""
    import onnx
    from onnx import TensorProto, helper

    from trtlab.graph.classifier import inspect_classifier

    nodes = [helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gelu", ["flat"], ["gelu"], domain="com.microsoft"),
             helper.make_node("Twice", ["gelu"], ["logits"], domain="local.fn")]
    twice = helper.make_function("local.fn", "Twice", ["x"], ["y"], [helper.make_node("Add", ["x", "x"], ["y"])],
                                 [helper.make_opsetid("", 17)])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(graph, functions=[twice], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1), helper.make_opsetid("local.fn", 1)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert inspect_classifier(tmp_path / "m.onnx").num_classes == 3


# -- any input size ---------------------------------------------------------------------------------------------------
def test_a_299_pixel_model_runs_from_the_cli_with_the_crop_from_its_input(demo_model, photo_folder, ws, tmp_path,
                                                                          capsys, monkeypatch):
    model = om.with_input_size(demo_model, tmp_path / "models" / "lite0-299.onnx", 299)
    code, _, err = om.run_cli(capsys, "eval", "--model", model, "--data", photo_folder, "--workspace", ws)
    assert code == 0, err
    (store,) = stores(ws, "lite0-299")
    result = store.load("fp32")
    assert result.record["preprocess"]["crop"] == 299 and result.record["preprocess"]["resize_short"] == 342
    assert (result.top1 == result.labels).mean() > 0.7  # the network at 299 px still sees the photos
    before = om.snapshot(ws / "results", model, photo_folder)
    om.forbid_decoding(monkeypatch)
    cases = {("eval", "--crop", "224"): "--crop 224 cannot feed lite0-299.onnx, which takes 299×299 images",
             ("calibrate", "--crop", "224"): "--crop 224 cannot feed lite0-299.onnx",
             ("debug", "--crop", "256"): "--crop 256 cannot feed lite0-299.onnx",
             ("eval", "--resize", "256"): "--resize 256 is smaller than the 299-pixel crop lite0-299.onnx takes",
             ("eval", "--crop", "299", "--resize", "200"): "--resize 200 is smaller than --crop 299"}
    for (command, *flags), message in cases.items():
        code, _, err = om.run_cli(capsys, command, "--model", model, "--data", photo_folder, *flags,
                                  "--workspace", ws)
        line = om.one_error_line(err)
        assert code == 2 and message in line, line
    assert om.unchanged(before)


def test_the_crop_follows_the_model_for_every_entry_point(demo_model, photo_folder, ws, tmp_path):
    from trtlab.data.preprocess import PRESETS, Preprocess
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.graph.classifier_view import preprocess_for
    from trtlab.workflows.checks import checked_inputs

    model = om.with_input_size(demo_model, tmp_path / "models" / "lite0-299.onnx", 299)
    info = inspect_classifier(model)
    # the CLI's inputs (eval, calibrate and debug pass their --crop/--resize here)
    inputs = checked_inputs(model=model, data=photo_folder, workspace=ws)
    assert (inputs.preset.crop, inputs.preset.resize_short, inputs.preset.name) == (299, 342, "tf-lite")
    assert checked_inputs(model=model, data=photo_folder, workspace=ws, resize=320).preset.resize_short == 320
    # the Python API: presets, dicts and Preprocess values
    assert preprocess_for(info, "torchvision").mean == PRESETS["torchvision"].mean
    assert preprocess_for(info, Preprocess(mean=(0, 0, 0), std=(1, 1, 1))).crop == 299
    assert preprocess_for(info, {"resize_short": 330}).resize_short == 330
    assert preprocess_for(info, "tf-lite", crop=299, resize=299).resize_short == 299
    with pytest.raises(Exception, match="crop=256 cannot feed lite0-299.onnx"):
        preprocess_for(info, Preprocess(crop=256))
    demo = inspect_classifier(demo_model)
    assert preprocess_for(demo, "tf-lite") == PRESETS["tf-lite"]  # 224 models keep the presets as they are


def test_the_python_api_evaluates_a_299_pixel_model(demo_model, demo_data, ws, tmp_path):
    """run_job (and compare, which shares the rule) take the crop from the model: nothing to pass."""
    from trtlab.workflows.job import run_job

    model = om.with_input_size(demo_model, tmp_path / "models" / "lite0-299.onnx", 299)
    job = run_job(model, demo_data.subset(np.flatnonzero(demo_data.labels >= 0)[:6]), workspace=ws, progress=False)
    result = job.store.load("fp32")
    assert job.cache.preprocess.crop == 299 and len(result) == 6
