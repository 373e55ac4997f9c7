"""One rule for errors (issue 18): a mistake made in the Python API or the A/B widget is one UserError line before any
image is decoded; Ctrl-C ends with one line and nothing half-written; an already-quantized model is refused by
`calibrate` and evaluated as it is by `eval`. Each test checks the message and that earlier results and inputs are
intact. The model is the demo EfficientNet-Lite0, the photos the demo photos (tests/conftest.py)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import odd_models as om
from trtlab.core.errors import UserError


@pytest.fixture
def evaluated(demo_model, photo_folder, tmp_path, capsys):
    """A workspace holding an FP32 evaluation of the demo model on the photos, and a snapshot of everything a
    mistake must leave alone (stored results, model, photos)."""
    ws = tmp_path / "ws"
    code, _, err = om.run_cli(capsys, "eval", "--model", demo_model, "--data", photo_folder, "--workspace", ws, "-q")
    assert code == 0, err
    return ws, om.snapshot(ws / "results", ws / "decode_cache", demo_model, photo_folder)


def forbid_all_decoding(monkeypatch):
    """Decoding anywhere (compare, run_job, layer_debugger) is an AssertionError."""
    import trtlab.data.decode_cache

    om.forbid_decoding(monkeypatch)

    def decoding(*args, **kwargs):
        raise AssertionError("images were decoded before the mistake was found")

    monkeypatch.setattr(trtlab.data.decode_cache, "build_decode_cache", decoding)


def test_python_api_mistakes_are_one_line_before_decoding(demo_model, photo_folder, evaluated, monkeypatch):
    import trtlab
    from trtlab.workflows.compare import recipes_from_selection

    ws, before = evaluated
    data = trtlab.Dataset.from_folder(photo_folder)
    forbid_all_decoding(monkeypatch)
    cases = {
        "recipe field(s) 'algoritm' do not exist — use only precision, algorithm":
            lambda: trtlab.compare(demo_model, data, [{"algoritm": "minmax"}], workspace=ws),
        "recipe 'int8-minmax' is not a Recipe or a dict of its fields":
            lambda: trtlab.compare(demo_model, data, ["int8-minmax"], workspace=ws),
        "no recipes given": lambda: trtlab.compare(demo_model, data, None, workspace=ws),
        "calibration algorithm 'kl' is not one of":
            lambda: trtlab.compare(demo_model, data, [trtlab.Recipe(algorithm="percentile"), {"algorithm": "kl"}],
                                   workspace=ws),
        "percentile '99.9' is not a number":
            lambda: trtlab.compare(demo_model, data, [{"algorithm": "percentile", "percentile": "99.9"}], workspace=ws),
        "percentile 200 is outside (0, 100]":
            lambda: trtlab.compare(demo_model, data, [{"algorithm": "percentile", "percentile": 200}], workspace=ws),
        "guard 'firstlayer' is not understood":
            lambda: trtlab.compare(demo_model, data, [{"guards": ["firstlayer"]}], workspace=ws),
        "guards: guard 'node:nope=fp16': no node named 'nope'":
            lambda: trtlab.compare(demo_model, data, [{"guards": ["node:nope"]}], workspace=ws),
        "unknown preprocessing preset 'tflite'":
            lambda: trtlab.compare(demo_model, data, [{}], preprocess="tflite", workspace=ws),
        "unknown backend 'trt9' — choose one of auto, ort, trt, torch, gpu":
            lambda: trtlab.compare(demo_model, data, [{}], backend="trt9", workspace=ws),
        "--output 'features' is not an output of efficientnet-lite0.onnx":
            lambda: trtlab.compare(demo_model, data, [{}], output="features", workspace=ws),
        "unknown backend 'tensorrt'": lambda: trtlab.run_job(demo_model, data, backend="tensorrt", workspace=ws),
        "preprocessing field(s) 'size' do not exist — use only name, resize_short, crop":
            lambda: trtlab.run_job(demo_model, data, preprocess={"size": 224}, workspace=ws),
        "Preprocess std=(0, 1, 1) is not three finite numbers (none zero)":
            lambda: trtlab.run_job(demo_model, data, preprocess=trtlab.Preprocess(std=(0, 1, 1)), workspace=ws),
        "Preprocess crop=-3 is not possible": lambda: trtlab.Preprocess(crop=-3),
        "Preprocess channel_order='rgb' is not RGB or BGR": lambda: trtlab.Preprocess(channel_order="rgb"),
        "percentile 'abc' is not a number — type e.g. 99.99":
            lambda: recipes_from_selection(["percentile"], 8, 8, percentile="abc"),
        "recipe guards: guard 'node:nope=fp16': no node named 'nope'":
            lambda: trtlab.layer_debugger(demo_model, data, recipe={"guards": ["node:nope"]}, workspace=ws),
        "recipe field(s) 'guard' do not exist":
            lambda: trtlab.layer_debugger(demo_model, data, recipe={"guard": "last_layer"}, workspace=ws),
        "crop=256 cannot feed efficientnet-lite0.onnx":
            lambda: trtlab.layer_debugger(demo_model, data, preprocess={"crop": 256}, workspace=ws),
    }
    for message, call in cases.items():
        with pytest.raises(UserError) as caught:
            call()
        line = caught.value.line()
        assert message in line and re.match(om.ERROR_LINE_PATTERN, line) and "\n" not in line, line
    assert om.unchanged(before)
    assert len(trtlab.Recipe.of({"algorithm": "minmax", "guards": ["last_layer"]}).guards) == 1  # right ones pass


def test_a_widget_mistake_is_one_line_in_the_panel_before_decoding(demo_model, photo_folder, evaluated,
                                                                   monkeypatch):
    pytest.importorskip("ipywidgets")
    import trtlab

    ws, before = evaluated
    panel = trtlab.ab_widgets(demo_model, trtlab.Dataset.from_folder(photo_folder), workspace=ws)
    forbid_all_decoding(monkeypatch)
    nodes = panel.children[2].children[0]
    nodes.value = "Conv_1, nope"  # node guards typed by hand
    assert panel.run_callback() is None
    text = "".join(o.get("text", "") for o in panel.children[-1].outputs).strip()
    assert text.count("\n") == 0 and text.startswith("error: guards: guard 'node:Conv_1=fp16'"), text
    assert "name a node of efficientnet-lite0.onnx's graph, e.g. node:" in text
    assert panel.last_result is None and om.unchanged(before)


def test_ctrl_c_mid_evaluation_is_one_line_and_nothing_half_written(demo_model, photo_folder, evaluated, capsys,
                                                                     monkeypatch):
    import trtlab.evaluation.evaluate as evaluation

    ws, before = evaluated
    real_batches, seen = evaluation.iter_batches, []

    def interrupted_after_two(*args, **kwargs):
        for batch in real_batches(*args, **kwargs):
            if len(seen) == 2:
                raise KeyboardInterrupt  # the user presses Ctrl-C while the third batch runs
            seen.append(batch.count)
            yield batch

    monkeypatch.setattr(evaluation, "iter_batches", interrupted_after_two)
    argv = ("eval", "--model", demo_model, "--data", photo_folder, "--resize", "240", "--batch-size", "4",
            "--workspace", ws, "-q")
    code, out, err = om.run_cli(capsys, *argv)
    assert code == 130 and seen == [4, 4] and "Traceback" not in err
    assert [line for line in err.splitlines() if line.strip()] == [err.strip()] and err.startswith("interrupted `eval`")
    assert om.unchanged(before)  # the earlier results, model and photos as they were
    assert not [p for p in ws.rglob("*") if p.name.endswith(".tmp")]  # no half-written file left behind

    monkeypatch.setattr(evaluation, "iter_batches", real_batches)
    code, out, err = om.run_cli(capsys, *argv)  # the same command again finishes the work
    assert code == 0, err
    assert om.unchanged(before)


def test_an_already_quantized_model_is_refused_by_calibrate_and_evaluated_as_it_is(demo_model, photo_folder,
                                                                                     evaluated, tmp_path, capsys,
                                                                                     monkeypatch):
    import onnx

    from trtlab.quantization.insertion import insert_qdq
    from trtlab.quantization.placement import plan_quantization

    ws, before = evaluated
    fp32 = onnx.load(str(demo_model))
    plan = plan_quantization(fp32)
    quantized = om.save(insert_qdq(fp32, plan, {t: 0.05 for t in plan.activations}),
                        tmp_path / "models" / "lite0-qdq.onnx")
    before.update(om.snapshot(quantized))
    with monkeypatch.context() as patched:
        forbid_all_decoding(patched)
        code, _, err = om.run_cli(capsys, "calibrate", "--model", quantized, "--data", photo_folder,
                                  "--workspace", ws)
    line = om.one_error_line(err)
    assert code == 2 and "lite0-qdq.onnx is already quantized" in line
    assert "evaluate it as it is: `python -m trtlab eval --model" in line and "the FP32 model" in line
    assert om.unchanged(before)

    code, _, err = om.run_cli(capsys, "eval", "--model", quantized, "--data", photo_folder, "--workspace", ws, "-q")
    assert code == 0, err
    from trtlab.evaluation.results import ResultsStore

    (store,) = [ResultsStore(f) for f in (ws / "results").iterdir() if "lite0-qdq" in f.name]
    result = store.load("int8")
    assert len(result) == len([p for p in photo_folder.rglob("*") if p.is_file()])
    assert np.isfinite(result.logits.astype(np.float32)).all()
    assert om.unchanged(before)
