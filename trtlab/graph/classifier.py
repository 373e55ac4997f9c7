"""ONNX classifier inspection: what the model file is, checked before any image is decoded.

The input must be N×3×H×W float32; every graph output is listed (which one holds the logits is chosen in
graph.classifier_view, with the labels at hand); the model's identity covers its external-data files; ops ONNX
Runtime cannot run (custom domains) and missing external-data files are refused here, naming the op or file; an
already-quantized graph (Q/DQ, QLinear ops, INT8 weights) and a Softmax at the end are recognised.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path

from trtlab.core.errors import UserError, UserFileNotFound
from trtlab.core.workspace import sha256_with_companions
from trtlab.graph.engine_file import read_engine_header
from trtlab.graph.onnx_versions import versions_problem
from trtlab.graph.onnx_utils import opset_of

ONNX_MAGIC_HINT = "export it again (torch.onnx.export / tf2onnx) or check that the download finished"
STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
#: Ops of an already-quantized graph (QDQ format, operator-oriented QLinear ops, integer ops).
QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
                 "ConvInteger", "MatMulInteger", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool",
                 "QLinearAveragePool", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QGemm")
#: Ops that pass a tensor's values through unchanged or rearranged (looked through when asking which op made an
#: output: Softmax → Reshape → output still ends in Softmax).
PASS_THROUGH_OPS = ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Cast", "Transpose")
INT8_WEIGHT_MIN_ELEMENTS = 16  # smaller int8 initializers are zero points, not weights


class ModelInputError(UserError, ValueError):
    """The ONNX model is not what an image classifier in trtlab must be (file, input or output)."""


class TensorRTEngineGiven(ModelInputError):
    """A TensorRT engine (.engine / .plan) was given where trtlab reads an ONNX classifier."""


@dataclass(frozen=True)
class ModelInfo:
    path: str
    sha256: str  # the file and its external-data files (core.workspace.sha256_with_companions)
    input_name: str
    input_shape: tuple  # symbolic dims are strings, e.g. ('batch', 3, 224, 224)
    input_dtype: str
    output_name: str | None  # the logits output: the only output, the only N×C one, or None until chosen
    output_shape: tuple
    opset: int
    outputs: tuple = ()  # every graph output, ((name, shape), ...), in graph order
    external_data: tuple = ()  # absolute paths of the external-data files the model names
    quantization: tuple = ()  # what makes the graph quantized: (("QuantizeLinear", 24), ("INT8 weights", 20)) …
    final_op: str | None = None  # 'Softmax' / 'LogSoftmax' when the logits output comes from one

    @property
    def image_size(self) -> tuple[int, int]:
        return int(self.input_shape[2]), int(self.input_shape[3])

    @property
    def dynamic_batch(self) -> bool:
        return not isinstance(self.input_shape[0], int)

    @property
    def fixed_batch(self) -> int | None:
        """The batch size the model was exported with, when it is a fixed number (None when dynamic)."""
        return None if self.dynamic_batch else int(self.input_shape[0])

    @property
    def num_classes(self) -> int | None:
        """C of the N×C output (None when the exporter left it symbolic, or no output is chosen yet)."""
        dim = self.output_shape[1] if len(self.output_shape) == 2 else None
        return dim if isinstance(dim, int) else None

    @property
    def quantized(self) -> bool:
        return bool(self.quantization)

    @property
    def outputs_probabilities(self) -> bool:
        """The logits output is a Softmax's (probabilities, not logits)."""
        return self.final_op == "Softmax"

    def describe_quantization(self) -> str:
        """'24 QuantizeLinear, 24 DequantizeLinear, 20 INT8 weights'."""
        return ", ".join(f"{count} {what}" for what, count in self.quantization)

    def with_output(self, name: str) -> "ModelInfo":
        """This info with `name` as the logits output (shape from the output list)."""
        shape = dict(self.outputs)[name]
        return replace(self, output_name=name, output_shape=shape)


def _dims(value_info) -> tuple:
    dims = []
    for dim in value_info.type.tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        else:
            dims.append(dim.dim_param or "?")
    return tuple(dims)


def inspect_classifier(path: str | os.PathLike) -> ModelInfo:
    """Read the model's single image input and its outputs, check the input is N×3×H×W float32, that every
    external-data file it names is there and that ONNX Runtime knows its ops. Identity (sha256) covers the
    external-data files."""
    path = Path(path)
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise UserFileNotFound(f"ONNX model {path} {where}", "check the path given as --model / model_path")
    stat = path.stat()
    info = _inspect_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    _check_external_files(path, info.external_data)
    # Hashed outside the structural cache: new weights in model.onnx.data (same model.onnx) are a new identity.
    return replace(info, sha256=sha256_with_companions(path, info.external_data))


def model_sha256(path: str | os.PathLike) -> str:
    """The identity of a model file with its external-data files, without the classifier checks (for graphs that
    are not read as classifiers: the sanitizer's cache key)."""
    import onnx

    path = Path(path)
    external = _external_data_files(onnx.load(str(path), load_external_data=False), path)
    _check_external_files(path, external)
    return sha256_with_companions(path, external)


@functools.lru_cache(maxsize=64)
def _inspect_cached(path_text: str, size: int, mtime_ns: int, ctime_ns: int) -> ModelInfo:
    import onnx

    path = Path(path_text)
    model = _load_model(path, size)
    problem = versions_problem(model)  # an IR version or opset ONNX Runtime cannot open: now, not after decoding
    if problem is not None:
        raise ModelInputError(f"{path.name} {problem[0]}", problem[1])
    external = _external_data_files(model, path)
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        names = ", ".join(f"{i.name!r}" for i in inputs)
        raise ModelInputError(f"{path.name} has {len(inputs)} inputs ({names}); trtlab classifiers take one image input",
                              "export the model with a single N×3×H×W image input")
    graph_input = inputs[0]
    shape = _dims(graph_input)
    elem = graph_input.type.tensor_type.elem_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "unknown"
    spatial_ok = len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape[2:])
    if len(shape) != 4 or shape[1] != 3 or not spatial_ok:
        fix = "export the model with one N×3×H×W image input"
        if len(shape) == 4 and shape[-1] == 3:
            fix = "it looks channels-last (N×H×W×3): export the model with NCHW input or add a Transpose in front"
        elif len(shape) == 4 and not spatial_ok:
            fix = ("height and width must be fixed numbers: re-export with a fixed input size (only the batch may be "
                   "dynamic)")
        raise ModelInputError(f"{path.name}: input {graph_input.name!r} has shape {list(shape)}, but trtlab expects "
                              f"N×3×H×W (batch × RGB channels × height × width)", fix)
    if dtype != "float32":
        raise ModelInputError(f"{path.name}: input {graph_input.name!r} is {dtype}; trtlab feeds float32 N×3×H×W",
                              "export the model with a float32 input (normalisation happens in trtlab)")
    _check_ops_runnable(model, path)
    outputs = tuple((output.name, _output_shape(model, output)) for output in model.graph.output)
    for name, out_shape in outputs if len(outputs) == 1 else ():
        _check_output(path, name, out_shape)
    chosen = _logits_output_by_shape(outputs)
    opset = opset_of(model)
    return ModelInfo(str(path), "", graph_input.name, shape, dtype, chosen,
                     dict(outputs)[chosen] if chosen else (), opset, outputs, external, _quantization(model),
                     _final_op(model, chosen) if chosen else None)


def final_op_of(info: ModelInfo, output: str) -> str | None:
    """'Softmax' / 'LogSoftmax' when `output` of the model `info` describes comes from one (through reshapes)."""
    import onnx

    return _final_op(onnx.load(info.path, load_external_data=False), output)


def _load_model(path: Path, size: int):
    """onnx.load with a message that names the file: empty, not protobuf, truncated or not a model."""
    import onnx

    if size == 0:
        raise ModelInputError(f"{path} is empty (0 bytes), not an ONNX model", ONNX_MAGIC_HINT)
    engine = read_engine_header(path)
    if engine is not None:
        raise engine_given(path, engine)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, RuntimeError from onnx's C++ parser, UnicodeDecodeError ...
        raise ModelInputError(f"{path} is not a readable ONNX model ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else 'parse failed'}): the file is damaged, "
                              f"truncated or not ONNX", ONNX_MAGIC_HINT) from exc
    # Protobuf accepts many byte strings (text, random bytes) as a message with unknown fields: a model with no
    # graph nodes or no outputs is such a misparse, not a classifier.
    if not model.graph.node or not model.graph.output or not model.graph.input:
        raise ModelInputError(f"{path} is not an ONNX model (it parses to {len(model.graph.node)} nodes, "
                              f"{len(model.graph.input)} inputs, {len(model.graph.output)} outputs)", ONNX_MAGIC_HINT)
    return model


def engine_given(path: Path, engine) -> TensorRTEngineGiven:
    """A TensorRT engine where an ONNX model was expected: what it is, which TensorRT built it (where its header
    says), and the way on — its ONNX model, whose engine trtlab builds and runs with --backend trt."""
    built = f", {engine.built_by()}" if engine.tensorrt else ""
    needs = f"TensorRT {engine.tensorrt}" if engine.tensorrt else "the TensorRT version that built it"
    return TensorRTEngineGiven(
        f"{path.name} is a TensorRT engine{built}, not an ONNX model; trtlab reads ONNX classifiers and builds "
        f"their engines itself", f"pass the ONNX model it was built from (--backend trt builds and runs its engine "
                                  f"with this machine's TensorRT); this file itself runs only on {needs} on a GPU")


# -- external data -----------------------------------------------------------------------------------------------
def _external_data_files(model, path: Path) -> tuple:
    """Absolute paths of the files the model's external-data entries name (relative to the model's folder)."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    files = {}
    for tensor in _get_all_tensors(model):
        if uses_external_data(tensor):
            location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "")
            files.setdefault(os.path.normpath(os.path.join(path.parent, location)), []).append(tensor.name)
    return tuple(sorted(files))


def _check_external_files(path: Path, files) -> None:
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        shown = ", ".join(os.path.relpath(f, path.parent) for f in missing[:3])
        raise UserFileNotFound(
            f"{path.name} keeps its weights in external data file(s) {shown} (expected at "
            f"{missing[0]}{' …' if len(missing) > 1 else ''}), which {'is' if len(missing) == 1 else 'are'} not there",
            "put the file(s) beside the model as the model names them, or re-export it with the weights inside "
            "(onnx.save(model, path, save_as_external_data=False))")


# -- ops ONNX Runtime cannot run ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _onnxruntime_ops() -> frozenset:
    """(domain, op) pairs ONNX Runtime has kernels or schemas for (its contrib ops included)."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as C

        return frozenset((s.domain, s.name) for s in C.get_all_operator_schema())
    except Exception:  # an onnxruntime without the schema API: only the standard domains count as known
        return frozenset()


def _check_ops_runnable(model, path: Path) -> None:
    """A custom-domain op (one neither ONNX nor ONNX Runtime defines, and no local function of the model) is
    refused now, naming it: ONNX Runtime would fail on it at the first session, after the decoding."""
    local = {(f.domain, f.name) for f in model.functions}
    unknown: dict[tuple, list[str]] = {}
    for index, node in enumerate(_all_nodes(model.graph)):
        key = (node.domain, node.op_type)
        if node.domain in STANDARD_DOMAINS or key in local:
            continue
        if key not in _onnxruntime_ops():
            unknown.setdefault(key, []).append(node.name or f"#{index}")
    if unknown:
        (domain, op), nodes = next(iter(unknown.items()))
        more = f" (and {len(unknown) - 1} other custom op(s))" if len(unknown) > 1 else ""
        raise ModelInputError(
            f"{path.name} uses the custom op {op!r} of domain {domain!r} ({len(nodes)} node(s), e.g. "
            f"{nodes[0]!r}){more}, which ONNX Runtime cannot run (it has no kernel for it; trtlab loads no custom-op "
            f"libraries)", "export the model with standard ONNX ops only (no custom symbolic functions / custom "
                           "ops in the exporter)")


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _all_nodes(sub)


# -- quantized graphs and the op at the end ----------------------------------------------------------------------
def _quantization(model) -> tuple:
    """What makes `model` an already-quantized graph: quantization ops by type and INT8/UINT8 weights."""
    from collections import Counter

    from onnx import TensorProto

    ops = Counter(node.op_type for node in _all_nodes(model.graph) if node.op_type in QUANTIZED_OPS)
    integer = (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT4)
    weights = sum(1 for init in model.graph.initializer if init.data_type in integer
                  and _elements(init) >= INT8_WEIGHT_MIN_ELEMENTS)
    found = sorted(ops.items(), key=lambda item: (-item[1], item[0]))
    return tuple(found + ([("INT8 weights", weights)] if weights else []))


def _elements(tensor) -> int:
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count


def _final_op(model, output: str) -> str | None:
    """'Softmax' or 'LogSoftmax' when the tensor `output` is made by one, looking through PASS_THROUGH_OPS."""
    producers = {name: node for node in model.graph.node for name in node.output}
    name, seen = output, set()
    while name in producers and name not in seen:
        seen.add(name)
        node = producers[name]
        if node.op_type in ("Softmax", "LogSoftmax"):
            return node.op_type
        if node.op_type not in PASS_THROUGH_OPS or not node.input:
            return None
        name = node.input[0]
    return None


# -- outputs -----------------------------------------------------------------------------------------------------
def _output_shape(model, output) -> tuple:
    """An output's shape, from the graph or, when the exporter left it out, from ONNX shape inference."""
    shape = _dims(output)
    if output.type.tensor_type.HasField("shape") and all(d != "?" for d in shape):
        return shape
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # inference is a best effort: custom ops or external data can defeat it
        return shape
    for candidate in inferred.graph.output:
        if candidate.name == output.name and candidate.type.tensor_type.HasField("shape"):
            return _dims(candidate)
    return shape


def is_logits_shape(shape: tuple) -> bool:
    """N×C with C ≥ 2 (or C symbolic): what a classifier's logits output looks like."""
    return len(shape) == 2 and (not isinstance(shape[1], int) or shape[1] >= 2)


def _logits_output_by_shape(outputs) -> str | None:
    """The logits output when the shapes alone say it: the only output, or the only N×C one; else None."""
    if len(outputs) == 1:
        return outputs[0][0]
    candidates = [name for name, shape in outputs if is_logits_shape(shape)]
    return candidates[0] if len(candidates) == 1 else None


def show_shape(shape: tuple) -> str:
    """[N, 100, 6]: symbolic dims (the exporter's 'batch', inference's 'unk__0') shown as N for the batch, ? after."""
    return "[" + ", ".join(str(d) if isinstance(d, int) else ("N" if i == 0 else "?") for i, d in enumerate(shape)) + "]"


_show = show_shape


def check_output(path, name: str, shape: tuple) -> None:
    """The output must be N×C logits: a detector's [N,100,6] or a conv head's [N,1000,1,1] are refused before any
    image is decoded or inferred."""
    _check_output(Path(path), name, shape)


def _check_output(path: Path, name: str, shape: tuple) -> None:
    if not shape:  # unknown rank: checked again on the first batch's output
        return
    classes = shape[1] if len(shape) >= 2 else None
    if len(shape) == 4 and shape[2:] == (1, 1):
        raise ModelInputError(
            f"{path.name}: output {name!r} has shape {_show(shape)}, a {classes}-channel map, not N×classes logits",
            "add a Flatten (or Reshape to [N, C]) after the last layer and export again")
    if len(shape) != 2:
        raise ModelInputError(
            f"{path.name}: output {name!r} has shape {_show(shape)}; trtlab evaluates classifiers whose first "
            f"output is N×classes logits (a detector or segmenter output is not supported)",
            "export the classification head's logits as the first output")
    if isinstance(classes, int) and classes < 2:
        raise ModelInputError(f"{path.name}: output {name!r} has shape {_show(shape)}: {classes} class",
                              "export a classifier with at least 2 classes")


def check_float_model(info: ModelInfo, what: str = "calibrate") -> None:
    """Refuse to calibrate a graph that is already quantized (Q/DQ, QLinear ops or INT8 weights), in one line that
    offers what works: evaluating it as it is, as an int8 variant with the scales it carries."""
    if not info.quantized:
        return
    name = Path(info.path).name
    raise ModelInputError(
        f"{name} is already quantized ({info.describe_quantization()}); {what} makes INT8 variants from an FP32 model",
        f"evaluate it as it is: `python -m trtlab eval --model {info.path} --data FOLDER` (trtlab.run_job) records "
        f"it as an int8 variant with the scales it carries; or give the FP32 model it was made from")
