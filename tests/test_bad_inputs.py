"""Every bad input gets one clear line (issue 12): one test per finding, each checking the message's content and
that results stored before the mistake are intact. Small fixtures: a 3-op ONNX classifier and a few PNGs."""
from __future__ import annotations

import errno
import hashlib
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from trtlab.cli.main import main
from trtlab.core.errors import UserError

ERROR_LINE = re.compile(r"^error: .+ — .+$")


# -- fixtures ------------------------------------------------------------------------------------------------------
def save_classifier(path: Path, nodes, inits, name: str) -> Path:
    """An ImageNet-shaped classifier (input N×3×224×224 → logits N×1000) of `nodes` and `inits`, checked and saved."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                          ["N", 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def make_classifier(path: Path, classes: int = 1000, batch="N", head: str = "logits", declare_output_shape=True):
    """A real ONNX classifier: N×3×224×224 → GlobalAveragePool → (Flatten → Gemm | 1×1 Conv | Gemm → Reshape)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("GlobalAveragePool", ["input"], ["pooled"])]
    inits = []
    if head == "logits":
        out_shape = [batch, classes]
        nodes += [helper.make_node("Flatten", ["pooled"], ["flat"]), helper.make_node("Gemm", ["flat", "w", "b"],
                                                                                      ["logits"], transB=1)]
        inits += [numpy_helper.from_array(rng.normal(size=(classes, 3)).astype(np.float32), "w"),
                  numpy_helper.from_array(np.zeros(classes, np.float32), "b")]
    elif head == "map":  # [N, C, 1, 1]: a conv head without Flatten
        out_shape = [batch, classes, 1, 1]
        nodes += [helper.make_node("Conv", ["pooled", "w"], ["logits"])]
        inits += [numpy_helper.from_array(rng.normal(size=(classes, 3, 1, 1)).astype(np.float32), "w")]
    elif head == "detector":  # [N, 100, 6]: boxes, not logits
        out_shape = [batch, 100, 6]
        nodes += [helper.make_node("Flatten", ["pooled"], ["flat"]),
                  helper.make_node("Gemm", ["flat", "w", "b"], ["dets"], transB=1),
                  helper.make_node("Reshape", ["dets", "shape"], ["logits"])]
        inits += [numpy_helper.from_array(rng.normal(size=(600, 3)).astype(np.float32), "w"),
                  numpy_helper.from_array(np.zeros(600, np.float32), "b"),
                  numpy_helper.from_array(np.array([-1, 100, 6], np.int64), "shape")]
    output = (helper.make_tensor_value_info("logits", TensorProto.FLOAT, out_shape) if declare_output_shape
              else helper.make_tensor_value_info("logits", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                            [batch, 3, 224, 224])], [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if declare_output_shape:  # the checker insists on a shape field; ORT and shape inference do not
        onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def write_photos(root: Path, layout: dict[str, int]) -> Path:
    """`layout` = {relative folder: image count}; small random PNGs (decoded for real by the pipeline)."""
    import cv2

    rng = np.random.default_rng(1)
    for folder, count in layout.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            cv2.imwrite(str(root / folder / f"img{i}.png"), rng.integers(0, 255, (40, 48, 3), dtype=np.uint8))
    return root


@pytest.fixture
def model(tmp_path) -> Path:
    return make_classifier(tmp_path / "models" / "tiny.onnx")


@pytest.fixture
def photos(tmp_path) -> Path:
    return write_photos(tmp_path / "photos", {"n01440764": 3, "n01443537": 3})


@pytest.fixture
def ws(tmp_path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def evaluated(model, photos, ws, capsys):
    """An FP32 evaluation stored before the mistake: returns a function that asserts it is still intact."""
    assert main(["eval", "--model", str(model), "--data", str(photos), "--workspace", str(ws), "-q"]) == 0
    capsys.readouterr()
    before = snapshot(ws / "results")
    assert before

    def intact():
        assert snapshot(ws / "results") == before
        from trtlab.evaluation.results import ResultsStore

        for folder in (ws / "results").iterdir():
            assert ResultsStore(folder).load("fp32").top5_indices.shape == (6, 5)
    return intact


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()} if folder.exists() else {}


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    return code, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    assert ERROR_LINE.match(lines[0]), lines[0]
    assert "Traceback" not in err
    return lines[0]


# -- found: tracebacks for user errors in eval, calibrate, debug, demo, and the widgets ---------------------------
def test_every_command_prints_one_error_line_and_exits_2(model, photos, ws, tmp_path, capsys, evaluated,
                                                         monkeypatch):
    import sys
    import types

    from trtlab.cli.main import COMMANDS

    missing = tmp_path / "nope.onnx"
    cases = {"eval": ["--model", missing, "--data", photos, "--workspace", ws],
             "calibrate": ["--model", missing, "--data", photos, "--workspace", ws],
             "debug": ["--model", missing, "--data", photos, "--workspace", ws],
             "demo": ["--batch-size", "0", "--workspace", ws],
             "build": ["--model", missing, "--workspace", ws],
             "dashboard": ["--store", tmp_path / "no-store", "--workspace", ws],
             "prep": ["--root", tmp_path / "no-imagenet", "--workspace", ws],
             "doctor": ["--root"]}  # an option without its value: a usage error, one line too
    assert set(cases) == set(COMMANDS), "every command is held to the one-line contract"
    for command, argv in cases.items():
        if command == "build":  # past the TensorRT check (no TensorRT here): a module that imports is enough
            monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))
        code, err = run_cli(capsys, command, *argv)
        monkeypatch.delitem(sys.modules, "tensorrt", raising=False)
        assert code == 2, (command, err)
        line = one_error_line(err)
        assert len(err.strip().splitlines()) == 1, err  # nothing else on stderr: no usage block, no log line
        if "--model" in argv:
            assert "nope.onnx" in line and "--model" in line
    evaluated()


def test_build_without_tensorrt_is_one_line_naming_doctor(ws, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` raises ImportError
    code, err = run_cli(capsys, "build", "--precision", "fp16", "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and "build needs TensorRT" in line and "python -m trtlab doctor" in line


def test_internal_bugs_keep_their_traceback(model, photos, ws, monkeypatch):
    import trtlab.workflows.job

    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug in trtlab")

    monkeypatch.setattr(trtlab.workflows.job, "run_job", bug)
    with pytest.raises(ZeroDivisionError):
        main(["eval", "--model", str(model), "--data", str(photos), "--workspace", str(ws)])


def test_ab_widget_shows_a_user_mistake_as_one_line(model, photos, ws):
    pytest.importorskip("ipywidgets")
    from trtlab.workflows.compare import ab_widgets
    from trtlab.data.dataset import Dataset

    panel = ab_widgets(model, Dataset.from_folder(photos), workspace=ws)
    algorithms = panel.children[0].children[0]
    algorithms.value = ()  # Run A/B with no algorithm selected
    out = panel.children[-1]
    assert panel.run_callback() is None
    text = "".join(o.get("text", "") for o in out.outputs)
    assert ERROR_LINE.match(text.strip()) and "no calibration algorithm" in text and "minmax" in text


# -- found: bad model files ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("content", ["text", "random", "truncated", "empty"])
def test_unreadable_model_files_are_named(content, model, photos, ws, tmp_path, capsys, evaluated):
    bad = tmp_path / f"bad-{content}.onnx"
    data = {"text": b"this is not an onnx model\n" * 20, "random": np.random.default_rng(2).bytes(4096),
            "truncated": model.read_bytes()[: len(model.read_bytes()) // 3], "empty": b""}[content]
    bad.write_bytes(data)
    code, err = run_cli(capsys, "eval", "--model", bad, "--data", photos, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and str(bad) in line
    assert ("0 bytes" in line) if content == "empty" else ("not" in line and "ONNX" in line)
    evaluated()


@pytest.mark.parametrize("head,shape", [("detector", "[N, 100, 6]"), ("map", "[N, 1000, 1, 1]")])
def test_non_classifier_outputs_are_refused_before_inference(head, shape, photos, ws, tmp_path, capsys, evaluated,
                                                              monkeypatch):
    import trtlab.evaluation.evaluate

    # the output shape is not declared in the graph: shape inference must find it
    bad = make_classifier(tmp_path / f"{head}.onnx", head=head, declare_output_shape=False)
    caches = snapshot(ws / "decode_cache")
    monkeypatch.setattr(trtlab.evaluation.evaluate, "infer_steps", lambda *a, **k: pytest.fail("inference ran"))
    code, err = run_cli(capsys, "eval", "--model", bad, "--data", photos, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and f"{head}.onnx" in line and f"has shape {shape}" in line
    assert ("Flatten" in line) if head == "map" else ("N×classes" in line)
    assert snapshot(ws / "decode_cache") == caches  # nothing decoded
    evaluated()


def test_a_mistyped_model_is_noticed_before_the_data_is_decoded(photos, ws, tmp_path, capsys, monkeypatch):
    import trtlab.data.decode_cache

    monkeypatch.setattr(trtlab.data.decode_cache, "build_decode_cache", lambda *a, **k: pytest.fail("decoded"))
    code, err = run_cli(capsys, "eval", "--model", tmp_path / "modle.onnx", "--data", photos, "--workspace", ws)
    assert code == 2 and "modle.onnx does not exist" in one_error_line(err)
    assert not (ws / "decode_cache").exists()


# -- found: labels never range-checked, CSV problems ---------------------------------------------------------------
def test_a_numbered_folder_beyond_the_classes_is_refused(model, ws, tmp_path, capsys, evaluated):
    data = write_photos(tmp_path / "years", {"2023": 2, "0": 1})
    code, err = run_cli(capsys, "eval", "--model", model, "--data", data, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and "'2023'" in line and "1000 classes" in line and "0..999" in line
    evaluated()


def test_a_csv_label_beyond_the_classes_is_refused(model, photos, ws, tmp_path, capsys, evaluated):
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("file,label\nn01440764/img0.png,1000\nn01440764/img1.png,3\n")  # each row names one image
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--labels", csv_path, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and "labels.csv" in line and "1000" in line and "0..999" in line
    evaluated()


def test_imagenet_labels_against_a_10_class_model_are_flagged(photos, ws, tmp_path, capsys, evaluated):
    ten = make_classifier(tmp_path / "ten.onnx", classes=10)
    code, err = run_cli(capsys, "eval", "--model", ten, "--data", photos, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and "WNID" in line and "10 classes" in line and "0..9" in line
    evaluated()


def test_a_csv_that_matches_no_file_is_an_error(model, photos, ws, tmp_path, capsys, evaluated):
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("file,label\nother_a.jpg,1\nother_b.jpg,2\n")
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--labels", csv_path, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and "labels none of the 6 images" in line and "other_a.jpg" in line
    evaluated()


def test_rows_for_missing_files_are_reported(photos, tmp_path, caplog):
    from trtlab.data.dataset import Dataset

    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("file,label\nn01440764/img0.png,0\nn01440764/img1.png,1\nghost.png,5\nphantom.jpg,6\n")
    with caplog.at_level(logging.INFO, logger="trtlab"):
        dataset = Dataset.from_folder(photos, labels_csv=csv_path)
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "2 row(s)" in warning and "'ghost.png' (line 4)" in warning and "'phantom.jpg' (line 5)" in warning
    labels = dict(zip(dataset.image_ids(), dataset.labels))
    assert labels["n01440764/img0.png"] == 0 and labels["n01440764/img1.png"] == 1
    assert labels["n01443537/img2.png"] == -1
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="trtlab"):
        Dataset.from_folder(photos, labels_csv=csv_path)  # the same cause: said once per process
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_conflicting_duplicate_rows_are_an_error_naming_them(model, photos, ws, tmp_path, capsys, evaluated):
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("file,label\nimg0.png,3\nimg1.png,4\nimg0.png,3\nimg1.png,7\n")
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--labels", csv_path, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and "'img1.png' is 4 on line 3 and 7 on line 5" in line and "img0.png" not in line
    evaluated()


def test_excel_csv_other_headers_and_swapped_columns_are_read(photos, tmp_path):
    from trtlab.data.dataset import Dataset, parse_labels_csv

    variants = {
        "excel.csv": "\ufefffile,label\r\nimg0.png,n01440764\r\nimg1.png,1\r\n".encode("utf-8"),
        "semicolon.csv": "Image Name;Class\nimg0.png;n01440764\nimg1.png;1\n".encode("utf-8"),
        "reordered.csv": "class_index,filename\nn01440764,img0.png\n1,img1.png\n".encode("utf-8"),
        "swapped.csv": "n01440764,img0.png\n1,img1.png\n".encode("utf-8"),
    }
    for name, data in variants.items():
        (tmp_path / name).write_bytes(data)
        assert parse_labels_csv(tmp_path / name).labels == {"img0.png": 0, "img1.png": 1}, name
    with pytest.raises(UserError) as err:  # 'img0.png' names a file in both folders: an error, not two labels
        Dataset.from_folder(photos, labels_csv=tmp_path / "excel.csv")
    assert "n01440764/img0.png" in err.value.line() and "n01443537/img0.png" in err.value.line()
    (tmp_path / "odd.csv").write_text("picture,kind\nimg0.png,1\n")
    with pytest.raises(UserError) as err:
        parse_labels_csv(tmp_path / "odd.csv")
    line = err.value.line()
    assert "odd.csv:1" in line and "filename" in line and "class_index" in line and "wnid" in line


def test_a_kaggle_loc_solution_given_as_labels_points_to_prep(model, photos, ws, tmp_path, capsys, evaluated):
    loc = tmp_path / "LOC_val_solution.csv"
    loc.write_text("ImageId,PredictionString\nILSVRC2012_val_00008726,n02119789 255 142 454 329 n02119789 44 21 "
                   "322 295 \n")
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--labels", loc, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and "python -m trtlab prep --loc-solution" in line and "LOC_val_solution.csv" in line
    evaluated()


# -- found: fixed batch 1 cannot be calibrated; batch 0 / negative ----------------------------------------------------
def test_a_fixed_batch_1_model_calibrates_and_evaluates(photos, ws, tmp_path, capsys, caplog):
    fixed = make_classifier(tmp_path / "fixed1.onnx", batch=1)
    with caplog.at_level(logging.INFO, logger="trtlab"):
        code = main(["calibrate", "--model", str(fixed), "--data", str(photos), "--algorithms", "minmax",
                     "--calibration-images", "3", "--calibration-batch", "2", "--workspace", str(ws)])
    out = capsys.readouterr().out
    assert code == 0 and "int8-minmax" in out and "fp32" in out


@pytest.mark.parametrize("flag,value", [("--batch-size", "0"), ("--batch-size", "-4"),
                                        ("--calibration-batch", "0"), ("--calibration-images", "-1")])
def test_impossible_sizes_are_refused(flag, value, model, photos, ws, capsys, evaluated):
    command = "eval" if flag == "--batch-size" else "calibrate"
    code, err = run_cli(capsys, command, "--model", model, "--data", photos, flag, value, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and f"{flag} {value} is not possible" in line and "≥ 1" in line
    evaluated()


# -- found: a workspace inside the data folder ------------------------------------------------------------------------
def test_a_workspace_inside_the_data_folder_is_refused(model, photos, capsys):
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--workspace", photos / "runs")
    line = one_error_line(err)
    assert code == 2 and "inside the data folder" in line and "--workspace" in line
    assert not (photos / "runs" / "decode_cache").exists()


# -- found: disk full, read-only workspace, outputs under /kaggle/input -------------------------------------------
def test_disk_full_while_writing_names_the_path_and_keeps_the_old_file(tmp_path, monkeypatch):
    from trtlab.core import workspace

    target = tmp_path / "record.json"
    workspace.atomic_write_json(target, {"version": 1})

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(workspace.os, "fsync", full)
    with pytest.raises(UserError) as err:
        workspace.atomic_write_json(target, {"version": 2})
    assert str(target) in err.value.line() and "disk is full" in err.value.line()
    assert target.read_text().count('"version": 1') == 1
    assert not list(tmp_path.glob(".record.json.*"))  # no temporary left behind


def test_disk_full_during_decoding_names_the_crops_file(model, photos, ws, tmp_path, capsys, evaluated, monkeypatch):
    import trtlab.data.decode_cache as dc

    more = write_photos(tmp_path / "more", {"n01440764": 2})

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dc.os, "pwrite", full)
    code, err = run_cli(capsys, "eval", "--model", model, "--data", more, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and "crops.u8" in line and "disk is full" in line
    evaluated()


def test_the_disk_precheck_names_only_flags_that_exist(model, photos, tmp_path, capsys, monkeypatch):
    from collections import namedtuple

    import trtlab.data.decode_cache as dc

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(dc.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 100, 100))
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--workspace", tmp_path / "ws2")
    line = one_error_line(err)
    assert code == 2 and "free in" in line
    eval_flags = {"--model", "--data", "--labels", "--preset", "--workspace", "--backend", "--batch-size"}
    # flags of another command are only named inside a `python -m trtlab prep …` / `prep …` quote
    outside = re.sub(r"`(?:python -m trtlab )?prep [^`]*`", "", line)
    assert "--ignore-disk-check" not in outside  # prep's flag, never offered to eval
    assert set(re.findall(r"(?<![\w-])--[a-z-]+", outside)) <= eval_flags


def test_a_read_only_workspace_is_refused_before_any_work(model, photos, tmp_path, capsys, monkeypatch):
    import trtlab.workflows.checks as validate

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(validate.tempfile, "mkstemp", read_only)
    ws = tmp_path / "ro-ws"
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2 and f"workspace {ws}" in line and "read-only" in line
    assert not (ws / "decode_cache").exists()


@pytest.mark.parametrize("command", ["debug", "dashboard"])
def test_outputs_under_kaggle_input_are_refused_before_computing(command, model, photos, ws, tmp_path, capsys,
                                                                  evaluated, monkeypatch):

    kaggle_input = tmp_path / "kaggle" / "input"
    kaggle_input.mkdir(parents=True)
    monkeypatch.setenv("TRTLAB_KAGGLE_ROOT", str(kaggle_input.parent))
    out = kaggle_input / "mydata" / ("dbg" if command == "debug" else "dash")  # --out is a folder everywhere
    argv = [command, "--workspace", ws, "--out", out]
    if command == "debug":
        argv += ["--model", model, "--data", photos, "--calibration-images", "3"]
    code, err = run_cli(capsys, *argv)
    line = one_error_line(err)
    assert code == 2 and str(kaggle_input) in line and "read-only inputs" in line
    assert not (ws / "debug").exists() and not list((ws / "results").rglob("*.damaged-*"))
    assert not (kaggle_input / "mydata").exists()
    evaluated()


# -- found: hand-damaged workspace files ---------------------------------------------------------------------------
@pytest.mark.parametrize("victim", ["crops.u8", "status.npy", "failures.json", "meta.json"])
def test_damaged_decode_cache_files_are_set_aside_and_rebuilt(victim, photos, ws, caplog):
    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import DECODED, build_decode_cache

    dataset = Dataset.from_folder(photos)
    first = build_decode_cache(dataset, "tf-lite", ws, progress=False)
    crops = np.asarray(first.crops).copy()
    (first.folder / "failures.json").write_text("{}")  # exists in every cache in this test
    path = first.folder / victim
    path.write_bytes(path.read_bytes()[: 1000] if victim == "crops.u8" else b"\x93NUMPY garbage{{")
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        again = build_decode_cache(dataset, "tf-lite", ws, progress=False)
    assert (again.status == DECODED).all()
    np.testing.assert_array_equal(np.asarray(again.crops), crops)
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert str(path) in warnings and "set aside" in warnings
    assert list(first.folder.glob(f"{victim}.damaged-*"))


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_damaged_stored_results_are_set_aside_and_evaluated_again(suffix, model, photos, ws, capsys, caplog):
    assert main(["eval", "--model", str(model), "--data", str(photos), "--workspace", str(ws), "-q"]) == 0
    store = next((ws / "results").iterdir())
    good = np.load(store / "fp32.npz")["logits"]
    (store / f"fp32{suffix}").write_bytes(b"garbage, not what trtlab wrote")
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        assert main(["eval", "--model", str(model), "--data", str(photos), "--workspace", str(ws)]) == 0
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert str(store / f"fp32{suffix}") in warnings and "set aside" in warnings
    np.testing.assert_array_equal(np.load(store / "fp32.npz")["logits"], good)
    assert list(store.glob(f"fp32{suffix}.damaged-*"))


# -- found: imported calibration caches ------------------------------------------------------------------------------
def _cache(tmp_path, lines):
    from dataclasses import asdict

    from trtlab.quantization.calibration_cache import CacheMetadata
    from trtlab.core.workspace import atomic_write_json

    meta = CacheMetadata(model_sha256="ab" * 32, algorithm="entropy", preprocess={"crop": 224}, images=4)
    path = tmp_path / "imported.cache"
    path.write_text("\n".join(["TRT-100300-EntropyCalibration2"] + lines) + "\n")
    atomic_write_json(path.with_name(path.name + ".json"), asdict(meta))
    return path, meta


def test_an_absurd_imported_scale_is_refused(tmp_path):
    from trtlab.quantization.calibration_cache import encode_scale, load_if_valid

    path, meta = _cache(tmp_path, [f"input: {encode_scale(0.02)}", f"conv_out: {encode_scale(1.7e38)}"])
    with pytest.raises(UserError) as err:
        load_if_valid(path, meta)
    line = err.value.line()
    assert "imported.cache" in line and "conv_out" in line and "implausible" in line
    # plausible against the absolute bounds, but 1000× the range this model produced
    path, meta = _cache(tmp_path, [f"conv_out: {encode_scale(50.0)}"])
    assert load_if_valid(path, meta)["conv_out"] == pytest.approx(50.0)
    with pytest.raises(UserError, match=r"conv_out: threshold 6.35e\+03 vs observed max \|x\| 6\.2"):
        load_if_valid(path, meta, observed_absmax={"conv_out": 6.2})
    for bad in ("nan", "inf", "0", "-1"):
        path, meta = _cache(tmp_path, [f"t: {encode_scale(float(bad))}"])
        with pytest.raises(UserError, match="imported.cache:2: scale of tensor 't'"):
            load_if_valid(path, meta)


def test_bad_hex_in_a_cache_names_file_and_line(tmp_path):
    from trtlab.quantization.calibration_cache import encode_scale, read_calibration_cache

    path, _ = _cache(tmp_path, [f"a: {encode_scale(0.1)}", "b: 3c00zz12"])
    with pytest.raises(UserError) as err:
        read_calibration_cache(path)
    assert "imported.cache:3" in err.value.line() and "'b'" in err.value.line() and "hexadecimal" in err.value.line()


# -- found: eval --backend trt without TensorRT --------------------------------------------------------------------
def test_backend_trt_without_tensorrt_is_an_error_not_cached_ort_results(model, photos, ws, capsys, evaluated):
    from trtlab.backends import tensorrt_available

    if tensorrt_available():
        pytest.skip("TensorRT imports here")
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--workspace", ws, "--backend", "trt")
    line = one_error_line(err)
    assert code == 2 and "TensorRT does not import" in line and "doctor" in line
    evaluated()


# -- found: print everywhere; the self-check warning repeats and miscounts -----------------------------------------
def test_messages_go_through_logging_and_q_silences_them(model, photos, ws, capsys):
    assert main(["eval", "--model", str(model), "--data", str(photos), "--workspace", str(ws), "-q"]) == 0
    quiet = capsys.readouterr()
    assert "decode cache for" not in quiet.err and "decoded" not in quiet.err
    assert "img/s" not in quiet.err  # no progress bars under -q either
    assert "FP32 top-1" in quiet.out  # the product's output stays on stdout
    other = ws.parent / "ws-verbose"
    assert main(["eval", "--model", str(model), "--data", str(photos), "--workspace", str(other)]) == 0
    loud = capsys.readouterr().err
    assert "[trtlab] decode cache for" in loud and "[trtlab] decoded 6 image(s)" in loud


def test_self_check_line_counts_k_of_n_names_the_cause_and_is_said_once(caplog):
    """Issue 29: one short INFO line that says what it means for the user (not a 600-character warning), once per
    cause; the numbers (bound, cosine, full cause) at debug level for the run log."""
    from trtlab.core import log
    from trtlab.evaluation import literal_check as ort_check

    log.reset_warnings()
    check = {"images": 8, "disagree": 5, "worst_cosine_optimized_vs_reference": 0.61, "optimized_is_trustworthy": False,
             "cause": ort_check.disagreement_cause({"machine": "x86_64", "model": "", "x86": True, "avx2": True,
                                                    "avx512": False, "vnni": False, "known": True})}
    check["message"] = ort_check.self_check_message(check, "int8-entropy")
    with caplog.at_level(logging.DEBUG, logger="trtlab"):
        for _ in range(3):  # three runs of the same variant build
            ort_check.report_self_check(check, key="variants/int8-entropy-abc")
    shown = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(shown) == 1 and shown[0].levelno == logging.INFO and "\n" not in shown[0].getMessage()
    line = shown[0].getMessage()
    assert "on 5 of 8 sample images" in line and "AVX2 without VNNI" in line and "unaffected" in line
    assert "trtlab's numbers come from the literal graph" in line and len(line) < 260
    details = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and "detail" in r.getMessage()]
    assert details and "TensorRT accumulates in int32" in details[0] and "95 % upper bound" in details[0]


def test_a_damaged_sanitized_model_is_set_aside_and_rebuilt(model, ws, caplog):
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.graph.sanitize import sanitize_model

    first = sanitize_model(model, ws)
    good = inspect_classifier(first)
    first.write_bytes(first.read_bytes()[:40])  # truncated by hand
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        again = sanitize_model(model, ws)
    assert again == first and inspect_classifier(again).output_shape == good.output_shape
    assert str(first) in caplog.text and list(first.parent.glob(f"{first.name}.damaged-*"))


def test_notebooks_show_info_and_v_shows_debug(monkeypatch):
    import io
    import sys
    import types

    from trtlab.core import log

    logger = logging.getLogger("trtlab")
    saved = (list(logger.handlers), logger.level)
    try:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        fake = types.ModuleType("IPython")
        fake.get_ipython = lambda: object()  # "inside a kernel"
        monkeypatch.setitem(sys.modules, "IPython", fake)
        log.setup_for_notebook()  # info on stdout, warnings on stderr
        assert logger.level == logging.INFO and len(logger.handlers) == 2
        stream = io.StringIO()
        log.setup(1, stream=stream)  # -v
        logging.getLogger("trtlab.data.decode_cache").debug("a debug note")
        log.setup(-1, stream=stream)  # -q
        logging.getLogger("trtlab.data.decode_cache").info("an info note")
        assert stream.getvalue() == "[trtlab] a debug note\n" and len(logger.handlers) == 1
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        for handler in saved[0]:
            logger.addHandler(handler)
        logger.setLevel(saved[1])
