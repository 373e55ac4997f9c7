"""Issue 36 item 2: a damaged workspace file is named, set aside as `<name>.damaged-<time>` and rebuilt — never a
traceback that blocks the workspace, never trusted. One test per file the workspace reads back: a variant's
model.onnx and calibration cache, the decode cache's status.npy, the calibration statistics, an evaluation's logits
checkpoint, TensorRT's calibration cache and engines. Real files damaged the ways they get damaged: cut short (a
kernel killed while writing, a full disk), overwritten with other bytes (another trtlab file, junk)."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from test_bad_inputs import make_classifier, write_photos
from trtlab.cli.main import main


@pytest.fixture
def inputs(tmp_path) -> dict:
    return {"model": make_classifier(tmp_path / "models" / "tiny.onnx"),
            "photos": write_photos(tmp_path / "photos", {"n01440764": 4, "n01443537": 4}), "ws": tmp_path / "ws"}


def _cli(capsys, caplog, command: str, inputs: dict, *extra) -> tuple[int, str, str]:
    argv = [command, "--model", str(inputs["model"]), "--data", str(inputs["photos"]), "--workspace",
            str(inputs["ws"]), *extra]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        code = main(argv)
    out, err = capsys.readouterr()
    return code, out, " ".join(r.getMessage() for r in caplog.records)


def _cut_short(path: Path) -> bytes:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return data


def _calibrate(capsys, caplog, inputs) -> tuple[int, str, str]:
    return _cli(capsys, caplog, "calibrate", inputs, "--algorithms", "minmax", "--fp16", "--no-engines",
                "--calibration-images", "4")


def test_a_variant_model_cut_short_is_set_aside_and_built_again(inputs, capsys, caplog):
    code, first, _ = _calibrate(capsys, caplog, inputs)
    assert code == 0
    models = sorted((inputs["ws"] / "variants").glob("*/*/model.onnx"))
    assert len(models) == 2  # fp16 and int8-minmax
    originals = {path: _cut_short(path) for path in models}  # every later calibrate: protobuf DecodeError before
    code, again, warnings = _calibrate(capsys, caplog, inputs)
    assert code == 0
    for path, original in originals.items():
        assert str(path) in warnings and list(path.parent.glob("model.onnx.damaged-*"))
        assert path.read_bytes() == original  # rebuilt: the same graph, byte for byte
    assert "set aside" in warnings and again.split("verdict")[0] == first.split("verdict")[0]


def test_a_variant_calibration_cache_cut_short_is_not_trusted(inputs, capsys, caplog):
    assert _calibrate(capsys, caplog, inputs)[0] == 0
    cache = next((inputs["ws"] / "variants").glob("*/int8-*/calibration.cache"))
    original = _cut_short(cache)
    code, _, warnings = _calibrate(capsys, caplog, inputs)
    assert code == 0 and str(cache) in warnings and "recorded when it was written" in warnings
    assert cache.read_bytes() == original and list(cache.parent.glob("calibration.cache.damaged-*"))


@pytest.mark.parametrize("other", ["zip-header", "an-npz", "text"])
def test_a_status_npy_of_other_bytes_is_set_aside_and_decoded_again(other, inputs, capsys, caplog):
    """The regression: eval exited 1 with zipfile.BadZipFile (the free-space estimate read status.npy unchecked)."""
    assert _cli(capsys, caplog, "eval", inputs)[0] == 0
    status = next((inputs["ws"] / "decode_cache").glob("*/status.npy"))
    results = next((inputs["ws"] / "results").glob("*/fp32.npz"))
    status.write_bytes({"zip-header": b"PK\x03\x04 junk after a zip header", "an-npz": results.read_bytes(),
                        "text": b"hello, not numpy"}[other])
    code, out, warnings = _cli(capsys, caplog, "eval", inputs)
    assert code == 0 and "FP32 top-1 on 8 labelled photos" in out
    assert str(status) in warnings and "set aside" in warnings and list(status.parent.glob("status.npy.damaged-*"))
    from trtlab.core.workspace import load_npy
    from trtlab.data.decode_files import DECODED

    assert (load_npy(status) == DECODED).all()


def test_damaged_calibration_statistics_are_set_aside_and_collected_again(inputs, capsys, caplog):
    assert _calibrate(capsys, caplog, inputs)[0] == 0
    stats = next((inputs["ws"] / "calibration").glob("stats-*.npz"))
    from trtlab.quantization.statistics import CalibrationStats

    before = CalibrationStats.load(stats)
    stats.write_bytes(b"junk where the statistics were")
    for variant in (inputs["ws"] / "variants").glob("*/int8-*"):  # so that calibrating is needed again
        (variant / "model.onnx").unlink()
    code, _, warnings = _calibrate(capsys, caplog, inputs)
    assert code == 0 and str(stats) in warnings and "not an .npz file" in warnings
    after = CalibrationStats.load(stats)
    assert after.tensors.keys() == before.tensors.keys()
    for name in before.tensors:
        np.testing.assert_array_equal(after.tensors[name].counts, before.tensors[name].counts)


def test_a_logits_checkpoint_of_other_bytes_starts_the_evaluation_over(tmp_path, caplog):
    from trtlab.evaluation.evaluate import EvaluationCheckpoint

    checkpoint = EvaluationCheckpoint(tmp_path / "partial", {"variant": "fp32"}, every=2)
    for _ in range(2):
        checkpoint.add(np.ones((2, 10), np.float32))
    chunks = sorted((tmp_path / "partial").glob("chunk-*.npy"))
    assert len(chunks) == 2
    np.savez(chunks[1].with_suffix(".tmp.npz"), a=np.zeros(3))
    chunks[1].write_bytes(chunks[1].with_suffix(".tmp.npz").read_bytes())  # an .npz where an .npy belongs
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        resumed = EvaluationCheckpoint(tmp_path / "partial", {"variant": "fp32"}, every=2).load()
    assert resumed == [] and str(chunks[1]) in caplog.text and "not an .npy file" in caplog.text


# -- TensorRT's files (the recording stand-in of tests/fake_tensorrt: the files are real, the engine bytes fake) ---
@pytest.fixture
def fake_trt10(monkeypatch):
    from fake_tensorrt import make_fake_tensorrt

    trt = make_fake_tensorrt("10.9.0.34")
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    return trt


@pytest.mark.parametrize("damage", ["cache-cut", "sidecar-junk"])
def test_a_damaged_tensorrt_calibration_cache_is_set_aside_and_calibrated_again(damage, fake_trt10, demo_model,
                                                                               demo_cache, tmp_path, caplog):
    from test_trt_backend import _trt_calibrator

    indices = demo_cache.valid_indices[:8]
    calibrator, _ = _trt_calibrator(fake_trt10, demo_model, demo_cache, indices, tmp_path)
    calibrator.write_calibration_cache(memoryview(b"TRT-100900-EntropyCalibration2\ninput: 3c010a14\n"))
    victim = calibrator.cache_path if damage == "cache-cut" else Path(str(calibrator.cache_path) + ".json")
    victim.write_bytes(b"TRT-100900-Entropy\x00\xff\xfe" if damage == "cache-cut" else b"{not json")
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        again, _ = _trt_calibrator(fake_trt10, demo_model, demo_cache, indices, tmp_path)
    assert not again.reuses_cache and again.read_calibration_cache() is None  # TensorRT calibrates again
    assert str(victim) in caplog.text and "set aside" in caplog.text
    assert list(calibrator.cache_path.parent.glob("*.damaged-*"))


def test_an_engine_cut_short_is_set_aside_and_built_again(fake_trt10, demo_model, tmp_path, caplog):
    from fake_tensorrt import calls_named
    from test_trt_backend import _build

    first = _build(demo_model, "fp32", tmp_path)
    original = _cut_short(first.engine_path)
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        again = _build(demo_model, "fp32", tmp_path)
    assert not again.reused and again.engine_path.read_bytes() == original
    assert len(calls_named(fake_trt10, "Builder.build_serialized_network")) == 2
    assert str(first.engine_path) in caplog.text and list(first.engine_path.parent.glob("*.engine.damaged-*"))
    assert _build(demo_model, "fp32", tmp_path).reused


def test_a_damaged_engine_sidecar_is_set_aside_or_named(fake_trt10, demo_model, tmp_path, caplog):
    from test_trt_backend import GPU, _build
    from trtlab.backends.tensorrt.loader import EngineCompatibilityError
    from trtlab.backends.tensorrt.options import check_engine_compatible

    first = _build(demo_model, "fp32", tmp_path)
    first.sidecar_path.write_text("{cut sh")
    with pytest.raises(EngineCompatibilityError, match="sidecar .* is damaged"):  # a user's engine: named, kept
        check_engine_compatible(first.engine_path, "10.9.0.34", GPU)
    assert first.sidecar_path.read_text() == "{cut sh"
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        again = _build(demo_model, "fp32", tmp_path)  # trtlab's own: set aside, built again
    assert not again.reused and json.loads(again.sidecar_path.read_text())["engine_sha256"]
    assert list(first.sidecar_path.parent.glob(f"{first.sidecar_path.name}.damaged-*"))


def test_a_damaged_file_that_cannot_be_set_aside_is_named_and_not_used(tmp_path, monkeypatch, caplog):
    """In a read-only workspace the rename fails: the file is still never trusted, and one line says so (before,
    set_aside raised the OSError)."""
    import errno

    from trtlab.core import workspace

    path = tmp_path / "variant.json"
    path.write_text("{cut sh")

    def read_only(*args):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(workspace.os, "replace", read_only)
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        assert workspace.read_json_checked(path) is None
    assert path.read_text() == "{cut sh" and not list(tmp_path.glob("*.damaged-*"))
    assert f"{path} is damaged" in caplog.text and "cannot be set aside (Read-only file system)" in caplog.text


def test_stored_results_whose_arrays_disagree_are_set_aside_and_evaluated_again(inputs, capsys, caplog):
    """A results .npz that is a valid archive but not one variant's results (logits of fewer images than its ids —
    another run's file copied over it) is damaged, not a traceback in the metrics."""
    assert _cli(capsys, caplog, "eval", inputs)[0] == 0
    npz = next((inputs["ws"] / "results").glob("*/fp32.npz"))
    with np.load(npz) as data:
        arrays = {k: data[k] for k in data.files}
    good = arrays["logits"].copy()
    arrays["logits"] = arrays["logits"][:3]
    with open(npz, "wb") as fh:
        np.savez(fh, **arrays)
    code, out, warnings = _cli(capsys, caplog, "eval", inputs)
    assert code == 0 and "FP32 top-1 on 8 labelled photos" in out
    assert str(npz) in warnings and "different lengths" in warnings
    with np.load(npz) as data:
        np.testing.assert_array_equal(data["logits"], good)
