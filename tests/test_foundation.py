"""Foundation: demo model export, classifier input checks, evaluation into the results store, metrics, report."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from trtlab.evaluation.metrics import accuracy, agreement, variant_table, wilson_interval
from trtlab.graph.classifier import ModelInputError, inspect_classifier
from trtlab.evaluation.evaluate import evaluate
from trtlab.data.preprocess import normalize_batch
from trtlab.evaluation.results import ResultsStore


def test_exported_onnx_matches_pytorch_top1_on_demo_photos(demo_model, demo_cache):
    torch = pytest.importorskip("torch")
    from trtlab.backends.ort import OrtRunner
    from trtlab.data.demo import load_torch_model

    info = inspect_classifier(demo_model)
    assert info.input_shape[1:] == (3, 224, 224) and info.dynamic_batch and info.opset >= 17
    batch = normalize_batch(demo_cache.crops[demo_cache.valid_indices], demo_cache.preprocess)
    with torch.no_grad():
        torch_logits = load_torch_model().eval()(torch.from_numpy(batch)).numpy()
    with OrtRunner(demo_model) as runner:
        onnx_logits = runner.infer(batch)
    assert len(batch) == 26
    np.testing.assert_array_equal(onnx_logits.argmax(1), torch_logits.argmax(1))
    assert np.abs(onnx_logits - torch_logits).max() < 1e-3


def _model_with_input(shape, tmp_path, name="image"):
    node = helper.make_node("Identity", [name], ["out"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    return path


@pytest.mark.parametrize("shape, hint", [
    (["N", 224, 224, 3], "channels-last"),
    (["N", 3, 224], "N×3×H×W"),
    (["N", 1, 28, 28], "N×3×H×W"),
    (["N", 3, "H", "W"], "fixed numbers"),
])
def test_non_nchw_input_is_refused_naming_input_and_shape(tmp_path, shape, hint):
    path = _model_with_input(shape, tmp_path, name="pixels")
    with pytest.raises(ModelInputError) as err:
        inspect_classifier(path)
    message = str(err.value)
    assert "'pixels'" in message and str(shape).replace("'", "") in message.replace("'", "") and hint in message
    what, _, fix = err.value.line().partition(" — ")  # one line: error: <what> — <fix>
    assert what.startswith("error: ") and fix and "\n" not in message


def test_a_non_float_input_is_refused_with_what_to_do(tmp_path):
    node = helper.make_node("Cast", ["pixels"], ["out"], to=TensorProto.FLOAT)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("pixels", TensorProto.UINT8, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 8, 8])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(ModelInputError) as err:
        inspect_classifier(path)
    assert "is uint8" in err.value.what and err.value.fix


def test_evaluate_stores_results_and_reuses_them(demo_model, demo_cache, session_workspace, caplog):
    store = ResultsStore(session_workspace / "results-test-eval")
    # ONNX Runtime pinned: the record checked is its own ('auto' is torch on a GPU machine)
    first = evaluate(demo_model, demo_cache, "fp32", store=store, batch_size=8, backend="ort", progress=False)
    assert store.variants() == ["fp32"]
    record = json.loads((store.folder / "fp32.json").read_text())
    assert record["model_sha256"] == inspect_classifier(demo_model).sha256
    assert record["backend"]["backend"] == "ort" and record["backend"]["onnxruntime"]
    assert record["dataset"]["fingerprint"] == demo_cache.dataset.fingerprint()
    loaded = store.load("fp32")
    assert loaded.logits.dtype == np.float16 and loaded.top5_indices.shape == (26, 5)
    np.testing.assert_array_equal(loaded.top1, first.top1)
    # top-5 probabilities are sorted and come from the stored logits
    assert (np.diff(loaded.top5_probs, axis=1) <= 1e-6).all()
    np.testing.assert_array_equal(loaded.top1, loaded.logits.astype(np.float32).argmax(1))
    # The real model on the real photos: most labelled photos are right (FP32 reference is ~90%).
    acc = accuracy(loaded)
    assert acc["labelled"] == 21 and acc["top1"] > 0.75 and acc["top1_low"] < acc["top1"] < acc["top1_high"]
    caplog.set_level("INFO", logger="trtlab")
    again = evaluate(demo_model, demo_cache, "fp32", store=store, backend="ort", progress=True)
    assert "reusing stored results" in caplog.text
    np.testing.assert_array_equal(again.logits, loaded.logits)


def test_metrics_on_hand_made_results():
    from trtlab.evaluation.results import VariantResult

    logits_a = np.array([[3, 1, 0, 0, 0, 0], [0, 3, 1, 0, 0, 0], [0, 0, 3, 1, 0, 0], [1, 0, 0, 3, 0, 0]], np.float32)
    logits_b = logits_a.copy()
    logits_b[3] = [3, 0, 0, 1, 0, 0]  # image 3 flips from class 3 to class 0
    from trtlab.evaluation.results import top5_from_logits

    def result(name, logits):
        idx, prob = top5_from_logits(logits)
        return VariantResult(name, ["a", "b", "c", "d"], np.array([0, 1, 5, -1]), idx, prob, logits.astype(np.float16))

    a, b = result("a", logits_a), result("b", logits_b)
    acc = accuracy(a)
    assert acc["labelled"] == 3 and acc["top1"] == pytest.approx(2 / 3) and acc["top5"] == pytest.approx(2 / 3)
    agree = agreement(b, a)
    assert agree["top1_agreement"] == pytest.approx(0.75)
    cos_d = np.dot(logits_a[3], logits_b[3]) / (np.linalg.norm(logits_a[3]) * np.linalg.norm(logits_b[3]))
    assert agree["cosine_worst"] == pytest.approx(cos_d, abs=1e-3)
    table = variant_table({"a": a, "b": b}, reference="a")
    assert table.loc["b", "top1_agreement"] == pytest.approx(0.75)
    # Wilson interval, textbook value: 8/10 → (0.490, 0.943)
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)


def test_results_store_rejects_unsafe_variant_names(tmp_path):
    from trtlab.evaluation.results import VariantResult

    store = ResultsStore(tmp_path)
    bad = VariantResult("../escape", ["x"], np.array([0]), np.zeros((1, 5), np.int32), np.zeros((1, 5), np.float32),
                        np.zeros((1, 10), np.float16))
    with pytest.raises(ValueError, match="variant name"):
        store.save(bad)


def test_kaggle_input_is_never_a_write_target():
    from trtlab.core.workspace import atomic_write_text, workspace_dir

    with pytest.raises(PermissionError, match="read-only"):
        workspace_dir("/kaggle/input/my-dataset/out")
    with pytest.raises(PermissionError, match="/kaggle/working"):
        atomic_write_text("/kaggle/input/x/labels.csv", "nope")


def test_demo_job_writes_report(session_workspace, demo_model):
    from trtlab.workflows.job import run_demo

    job = run_demo(session_workspace, progress=False)
    assert job.report["png"].stat().st_size > 20_000
    table = job.table
    # evaluation = the 20 labelled foolbox ImageNet photos; the other 6 photos calibrate
    assert table.loc["fp32", "labelled"] == 20 and table.loc["fp32", "top1"] > 0.75
    assert list(table.index) == ["fp32", "fp16", "int8-minmax@6", "int8-entropy@6", "int8-percentile99.99@6"]
    assert table.loc["fp16", "cosine_mean"] > 0.9999 > table.loc["int8-minmax@6", "cosine_mean"]
    markdown = job.report["md"].read_text()
    assert all(name in markdown for name in table.index)


def test_eval_cli_on_a_wnid_folder_with_the_torchvision_preset(photo_folder, session_workspace, capsys):
    """A user's own ONNX classifier (here the ONNX test-suite ResNet-50 graph: fixed batch 1, opset 9, constant
    weights) on a folder with one sub-folder per WNID, with the torchvision preset."""
    from pathlib import Path

    from trtlab.cli.main import main
    from trtlab.data.dataset import Dataset

    resnet = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    if not resnet.exists():
        pytest.skip(f"{resnet} is not shipped by this onnx wheel")
    dataset = Dataset.from_folder(photo_folder)
    assert len(dataset) == 21 and dataset.labelled_count == 21  # labels come from the WNID folder names
    assert main(["eval", "--model", str(resnet), "--data", str(photo_folder), "--preset", "torchvision",
                 "--workspace", str(session_workspace)]) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err  # the fixed-batch note is a log message (stderr); the report path is output
    assert "fixed batch of 1" in out and "report:" in out
    from trtlab.views.dashboard import find_result_stores

    store = next(ResultsStore(p) for p in find_result_stores(session_workspace)
                 if ResultsStore(p).experiment.model_name == "light_resnet50")
    result = store.load("fp32")
    assert result.record["preprocess"]["name"] == "torchvision" and result.logits.shape == (21, 1000)


def test_interrupted_evaluation_resumes_where_it_stopped(demo_model, demo_cache, session_workspace, monkeypatch,
                                                         caplog):
    from trtlab.backends.ort import OrtRunner

    store = ResultsStore(session_workspace / "results-test-resume")
    # ONNX Runtime pinned: its runner is the one interrupted below ('auto' is torch on a GPU machine)
    reference = evaluate(demo_model, demo_cache, "uninterrupted", store=store, batch_size=4, backend="ort",
                         progress=False)
    real_infer, calls = OrtRunner.infer_impl, []

    def infer_then_die(self, batch):
        calls.append(len(batch))
        if len(calls) == 4:
            raise KeyboardInterrupt  # the user stops the cell / the session times out
        return real_infer(self, batch)

    monkeypatch.setattr(OrtRunner, "infer_impl", infer_then_die)
    # Another identity than the uninterrupted run (which would otherwise simply be reused).
    second = {"recipe": {"precision": "fp32"}, "scales": {"source": "resumed"}}
    with pytest.raises(KeyboardInterrupt):
        evaluate(demo_model, demo_cache, "resumed", store=store, batch_size=4, backend="ort", progress=False,
                 checkpoint_every=8, identity=second)
    assert "resumed" not in store  # nothing half-written is ever presented as a result
    calls.clear()
    caplog.set_level("INFO", logger="trtlab")
    monkeypatch.setattr(OrtRunner, "infer_impl", lambda self, batch: (calls.append(len(batch)), real_infer(self, batch))[1])
    resumed = evaluate(demo_model, demo_cache, "resumed", store=store, batch_size=4, backend="ort", progress=True,
                       checkpoint_every=8, identity=second)
    assert "resuming an interrupted evaluation after 8 of 26 images" in caplog.text
    assert sum(calls) == 26 - 8  # only the images not checkpointed ran again
    np.testing.assert_array_equal(resumed.logits, reference.logits)
    assert not (store.folder / ".partial" / "resumed").exists()
