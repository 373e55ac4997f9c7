"""Model files trtlab cannot read as an ONNX classifier say what they are in one line, before any image is decoded
(issue 36 item 3): a TensorRT engine (.engine / .plan, recognised by its plan header without TensorRT, with the
TensorRT version that built it where the header says) and a model of an IR version or opset ONNX Runtime here does
not open (its own "model.cc" traceback before)."""
from __future__ import annotations

import struct

import pytest


def plan_bytes(version=(10, 16, 1), body: bytes = bytes(4096)) -> bytes:
    """The first bytes of a TensorRT plan as TensorRT writes them: the b"ftrt" magic tag, the building TensorRT's
    major, minor and patch at bytes 24-26 (NVIDIA/TensorRT#3073), then the serialized engine."""
    return b"ftrt" + bytes(20) + bytes(version) + bytes(5) + body


def run(argv, capsys) -> tuple[int, list[str]]:
    from trtlab.cli.main import main

    status = main(argv)
    return status, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("name, content, built", [
    ("resnet.engine", plan_bytes(), "TensorRT 10.16.1"),
    ("yolo.engine", None, "TensorRT 11.4.0"),  # Ultralytics: [uint32 length][JSON metadata] before the plan
    ("model.plan", plan_bytes((0, 0, 0)), None),  # a header whose version bytes are not a release: not said
    ("renamed.onnx", plan_bytes((8, 6, 1)), "TensorRT 8.6.1"),  # recognised by its bytes, not its name
], ids=["engine", "ultralytics-engine", "plan-version-unreadable", "engine-named-onnx"])
def test_an_engine_file_is_named_as_one(name, content, built, photo_folder, tmp_path, capsys):
    if content is None:
        metadata = b'{"task": "classify", "imgsz": [224, 224]}'
        content = struct.pack("<I", len(metadata)) + metadata + plan_bytes((11, 4, 0))
    engine = tmp_path / name
    engine.write_bytes(content)
    status, err = run(["eval", "--model", str(engine), "--data", str(photo_folder), "--workspace",
                       str(tmp_path / "ws")], capsys)
    assert status == 2 and len([line for line in err if line.startswith("error:")]) == 1, err
    line = err[-1]
    assert line.startswith(f"error: {name} is a TensorRT engine{', built by ' + built if built else ''}, not an "
                           f"ONNX model"), line
    assert "damaged" not in line and "not a readable ONNX model" not in line
    assert f"this file itself runs only on {built or 'the TensorRT version that built it'} on a GPU" in line, line
    assert "pass the ONNX model it was built from" in line
    assert not (tmp_path / "ws" / "decode-cache").exists()  # refused before any decoding


def test_an_engine_file_on_the_runner_without_tensorrt_names_its_version(tmp_path, monkeypatch):
    import sys

    from trtlab.backends import make_runner
    from trtlab.core.errors import UserError

    monkeypatch.setitem(sys.modules, "tensorrt", None)  # TensorRT does not import
    engine = tmp_path / "m.engine"
    engine.write_bytes(plan_bytes((10, 13, 3)))
    with pytest.raises(UserError, match=r"^m\.engine is a TensorRT engine, built by TensorRT 10\.13\.3: running it "
                                        r"needs TensorRT 10\.13\.3 on a GPU, and TensorRT does not import here"):
        make_runner(engine)  # auto: an engine file goes to TensorRT


def test_a_damaged_onnx_file_is_still_called_damaged(tmp_path, demo_model):
    from trtlab.graph.classifier import ModelInputError, TensorRTEngineGiven, inspect_classifier

    cut = tmp_path / "cut.onnx"
    cut.write_bytes(demo_model.read_bytes()[:5000])
    with pytest.raises(ModelInputError, match="the file is damaged, truncated or not ONNX") as caught:
        inspect_classifier(cut)
    assert not isinstance(caught.value, TensorRTEngineGiven)


def stamped(demo_model, tmp_path, ir=None, opset=None):
    import onnx

    model = onnx.load(str(demo_model))
    if ir is not None:
        model.ir_version = ir
    if opset is not None:
        next(o for o in model.opset_import if o.domain in ("", "ai.onnx")).version = opset
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"ir{ir}-opset{opset}.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("ir, opset, found, reads, fix", [
    (99, 99, "IR version 99 with ai.onnx opset 99", "IR versions up to {ir} and ai.onnx opsets 7 to {opset}",
     "export it again with a released opset (torch.onnx.export(..., opset_version=17))"),
    (None, 99, "IR version {demo_ir} with ai.onnx opset 99", "ai.onnx opsets 7 to {opset}", "onnx.version_converter.convert_version(model, 17)"),
    (99, None, "IR version 99 with ai.onnx opset", "IR versions up to {ir}",
     "save it with an IR version ONNX Runtime reads (model.ir_version = {ir}; onnx.save)"),
], ids=["ir99-opset99", "opset99", "ir99"])
def test_an_ir_version_or_opset_onnx_runtime_cannot_open_is_one_line(ir, opset, found, reads, fix, demo_model,
                                                                      photo_folder, tmp_path, capsys):
    import onnx
    import onnxruntime
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    # what this ONNX Runtime reads, asked of it independently: its newest ai.onnx schema, and the IR version it
    # names when refusing one it does not know
    newest_opset = max(s.since_version for s in C.get_all_operator_schema() if s.domain in ("", "ai.onnx"))
    try:
        onnxruntime.InferenceSession(stamped(demo_model, tmp_path / "probe", ir=999).read_bytes())
    except Exception as exc:  # noqa: BLE001
        newest_ir = int(str(exc).split("max supported IR version: ")[1].split()[0])
    try:  # where ONNX Runtime names its official support in its own refusal (1.30: opset 26, schemas up to 27)
        onnxruntime.InferenceSession(stamped(demo_model, tmp_path / "probe-opset", opset=999).read_bytes())
    except Exception as exc:  # noqa: BLE001
        said = str(exc).split("is till opset ")
        newest_opset = int(said[1].split()[0].strip(".,")) if len(said) > 1 else newest_opset
    model = stamped(demo_model, tmp_path, ir=ir, opset=opset)
    status, err = run(["eval", "--model", str(model), "--data", str(photo_folder), "--workspace",
                       str(tmp_path / "ws")], capsys)
    line = err[-1]
    assert status == 2 and "Traceback" not in "\n".join(err) and "model.cc" not in line, err
    demo_ir = onnx.load(str(demo_model), load_external_data=False).ir_version
    assert line.startswith(f"error: {model.name} is ONNX {found.format(demo_ir=demo_ir)}"), line
    assert f"ONNX Runtime {onnxruntime.__version__} here reads {reads.format(ir=newest_ir, opset=newest_opset)}" \
           in line, line
    assert fix.format(ir=newest_ir) in line, line
    assert not (tmp_path / "ws" / "decode-cache").exists()  # refused before any decoding
