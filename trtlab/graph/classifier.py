"""ONNX classifier inspection: the input must be N×3×H×W float, the output N×classes logits."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from trtlab.core.errors import UserError, UserFileNotFound
from trtlab.core.workspace import sha256_file

ONNX_MAGIC_HINT = "export it again (torch.onnx.export / tf2onnx) or check that the download finished"


class ModelInputError(UserError, ValueError):
    """The ONNX model is not what an image classifier in trtlab must be (file, input or output)."""


@dataclass(frozen=True)
class ModelInfo:
    path: str
    sha256: str
    input_name: str
    input_shape: tuple  # symbolic dims are strings, e.g. ('batch', 3, 224, 224)
    input_dtype: str
    output_name: str
    output_shape: tuple
    opset: int

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
        """C of the N×C output (None when the exporter left it symbolic)."""
        dim = self.output_shape[1] if len(self.output_shape) == 2 else None
        return dim if isinstance(dim, int) else None


def _dims(value_info) -> tuple:
    dims = []
    for dim in value_info.type.tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        else:
            dims.append(dim.dim_param or "?")
    return tuple(dims)


def inspect_classifier(path: str | os.PathLike) -> ModelInfo:
    """Read the model's single image input and first output, and check the input is N×3×H×W float32."""
    path = Path(path)
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise UserFileNotFound(f"ONNX model {path} {where}", "check the path given as --model / model_path")
    stat = path.stat()
    return _inspect_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _inspect_cached(path_text: str, size: int, mtime_ns: int) -> ModelInfo:
    import onnx

    path = Path(path_text)
    model = _load_model(path, size)
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
        hint = ""
        if len(shape) == 4 and shape[-1] == 3:
            hint = " It looks channels-last (N×H×W×3): export the model with NCHW input or add a Transpose in front."
        elif len(shape) == 4 and not spatial_ok:
            hint = " Height and width must be fixed numbers: re-export with a fixed input size (only the batch may be dynamic)."
        raise ModelInputError(
            f"{path.name}: input {graph_input.name!r} has shape {list(shape)}, but trtlab expects N×3×H×W "
            f"(batch × RGB channels × height × width).{hint}"
        )
    if dtype != "float32":
        raise ModelInputError(f"{path.name}: input {graph_input.name!r} is {dtype}; trtlab feeds float32 N×3×H×W")
    output = model.graph.output[0]
    out_shape = _output_shape(model, output)
    _check_output(path, output.name, out_shape)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return ModelInfo(str(path), sha256_file(path), graph_input.name, shape, dtype, output.name, out_shape, opset)


def _load_model(path: Path, size: int):
    """onnx.load with a message that names the file: empty, not protobuf, truncated or not a model."""
    import onnx

    if size == 0:
        raise ModelInputError(f"{path} is empty (0 bytes), not an ONNX model", ONNX_MAGIC_HINT)
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


def _output_shape(model, output) -> tuple:
    """The first output's shape, from the graph or, when the exporter left it out, from ONNX shape inference."""
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


def _show(shape: tuple) -> str:
    """[N, 100, 6]: symbolic dims (the exporter's 'batch', inference's 'unk__0') shown as N for the batch, ? after."""
    return "[" + ", ".join(str(d) if isinstance(d, int) else ("N" if i == 0 else "?") for i, d in enumerate(shape)) + "]"


def _check_output(path: Path, name: str, shape: tuple) -> None:
    """The output must be N×C logits: a detector's [N,100,6] or a conv head's [N,1000,1,1] are refused before any
    image is decoded or inferred."""
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
