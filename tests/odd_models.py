"""Unusual classifiers a new user really has, made from the demo EfficientNet-Lite0 with onnx.helper (issue 18):
a features output beside the logits, a Softmax at the end, TensorFlow's 1001 classes (a background class first),
NaN outputs for some photos, a 299-pixel input, a custom-domain op, weights in an external-data file.

The demo graph ends `… ReduceMean → Reshape [-1, 1280] ('view', the features) → Gemm ('logits', N×1000)`."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def load(path):
    import onnx

    return onnx.load(str(path))


def save(model, path: Path) -> Path:
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _output(name: str, classes, batch="batch"):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, classes])


def _set_outputs(model, outputs) -> None:
    del model.graph.output[:]
    model.graph.output.extend(outputs)


def with_features_output(source, path: Path, features_first: bool = True) -> Path:
    """Two outputs: the 1280 features ('view') and the logits — features first, as the issue's model had it."""
    model = load(source)
    outputs = [_output("view", 1280), _output("logits", 1000)]
    _set_outputs(model, outputs if features_first else outputs[::-1])
    return save(model, path)


def with_softmax(source, path: Path) -> Path:
    """The logits through a Softmax, then a Reshape (an exporter's habit): the model outputs probabilities."""
    from onnx import helper, numpy_helper

    model = load(source)
    model.graph.initializer.append(numpy_helper.from_array(np.array([-1, 1000], np.int64), "probs_shape"))
    model.graph.node.extend([helper.make_node("Softmax", ["logits"], ["softmax_out"], axis=1, name="final_softmax"),
                             helper.make_node("Reshape", ["softmax_out", "probs_shape"], ["probabilities"],
                                              name="final_reshape")])
    _set_outputs(model, [_output("probabilities", 1000)])
    return save(model, path)


def with_background_class(source, path: Path) -> Path:
    """TensorFlow's numbering: a background logit first (always the lowest), then the 1000 ImageNet classes."""
    from onnx import helper, numpy_helper

    model = load(source)
    model.graph.initializer.extend([numpy_helper.from_array(np.array(10.0, np.float32), "background_margin"),
                                    numpy_helper.from_array(np.array([1], np.int64), "class_axis")])
    model.graph.node.extend([
        helper.make_node("ReduceMin", ["logits", "class_axis"], ["lowest"], keepdims=1, name="bg_min"),
        helper.make_node("Sub", ["lowest", "background_margin"], ["background"], name="bg_sub"),
        helper.make_node("Concat", ["background", "logits"], ["logits_1001"], axis=1, name="bg_concat")])
    _set_outputs(model, [_output("logits_1001", 1001)])
    return save(model, path)


def with_nan_rows(source, path: Path, threshold: float) -> Path:
    """logits + log(mean(input) − threshold): NaN for every photo whose mean normalised pixel is below
    `threshold` (−inf at equality), the logits shifted by a constant otherwise (same ranking)."""
    from onnx import helper, numpy_helper

    model = load(source)
    model.graph.initializer.extend([numpy_helper.from_array(np.array(threshold, np.float32), "nan_threshold"),
                                    numpy_helper.from_array(np.array([1, 2, 3], np.int64), "chw_axes")])
    model.graph.node.extend([
        helper.make_node("ReduceMean", ["input", "chw_axes"], ["image_mean"], keepdims=0, name="nan_mean"),
        helper.make_node("Sub", ["image_mean", "nan_threshold"], ["shifted_mean"], name="nan_sub"),
        helper.make_node("Log", ["shifted_mean"], ["log_mean"], name="nan_log"),
        helper.make_node("Unsqueeze", ["log_mean", "class_axis_1"], ["log_column"], name="nan_unsqueeze"),
        helper.make_node("Add", ["logits", "log_column"], ["logits_or_nan"], name="nan_add")])
    model.graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "class_axis_1"))
    _set_outputs(model, [_output("logits_or_nan", 1000)])
    return save(model, path)


def with_input_size(source, path: Path, size: int) -> Path:
    """The same network at `size`×`size` (convolutions and a global pool: any size runs)."""
    model = load(source)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value = dims[3].dim_value = size
    del model.graph.value_info[:]
    return save(model, path)


def with_custom_op(source, path: Path, domain: str = "com.example.vision", op: str = "FancyActivation") -> Path:
    """A custom-domain op after the logits (as a custom symbolic function exports it)."""
    from onnx import helper

    model = load(source)
    model.opset_import.append(helper.make_opsetid(domain, 1))
    model.graph.node.append(helper.make_node(op, ["logits"], ["fancy_logits"], domain=domain, name="fancy"))
    _set_outputs(model, [_output("fancy_logits", 1000)])
    return save(model, path)


def with_external_data(source, path: Path, location: str | None = None, scale_fc: float = 1.0) -> Path:
    """`path` + its weights in one external-data file (`location`, relative to `path`'s folder; default
    `<name>.data`); `scale_fc` multiplies the classifier's weight and bias, so the logits scale by it (new weights,
    same graph file)."""
    import onnx
    from onnx import numpy_helper

    model = load(source)
    if scale_fc != 1.0:
        for i, init in enumerate(model.graph.initializer):
            if init.name in ("_fc.weight", "_fc.bias"):
                model.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * scale_fc,
                                                                            init.name))
    path.parent.mkdir(parents=True, exist_ok=True)
    location = location or f"{path.name}.data"
    (path.parent / location).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location,
              size_threshold=1024)
    return path


def ort_outputs(model_path, batch: np.ndarray) -> np.ndarray:
    """The model's first output on a float32 batch, straight from ONNX Runtime."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: batch})[0]


# -- what the tests of issue 18's model families share ------------------------------------------------------------
ERROR_LINE_PATTERN = r"^error: .+ — .+$"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m trtlab ARGV`, in this process."""
    from trtlab.cli.main import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    """The one `error: <what> — <fix>` line of `err` (no traceback)."""
    import re

    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    assert re.match(ERROR_LINE_PATTERN, lines[0]), lines[0]
    assert "Traceback" not in err
    return lines[0]


def snapshot(*folders) -> dict:
    """sha256 of every file under `folders` (or of the files themselves)."""
    import hashlib

    found = {}
    for folder in map(Path, folders):
        files = [folder] if folder.is_file() else sorted(folder.rglob("*")) if folder.exists() else []
        found.update({str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()})
    return found


def unchanged(before: dict) -> bool:
    """Every file of `before` (a snapshot) still there with the same content (new files may have been added)."""
    after = snapshot(*before)
    return all(after.get(path) == digest for path, digest in before.items())


def forbid_decoding(monkeypatch) -> None:
    """Make decoding any image an AssertionError: what must be refused before any work."""
    import trtlab.workflows.compare
    import trtlab.workflows.job

    def decoding(*args, **kwargs):
        raise AssertionError("images were decoded before the mistake was found")

    for module in (trtlab.workflows.job, trtlab.workflows.compare):
        monkeypatch.setattr(module, "build_decode_cache", decoding)


def labels_csv(folder: Path, path: Path, offset: int = 0) -> Path:
    """A labels CSV (file,index) for the WNID sub-folders of `folder`, indices shifted by `offset`."""
    from trtlab.data.classes import wnid_to_index

    rows = ["file,label"] + [f"{p.relative_to(folder).as_posix()},{wnid_to_index()[p.parent.name] + offset}"
                             for p in sorted(folder.rglob("*")) if p.is_file()]
    path.write_text("\n".join(rows) + "\n")
    return path
