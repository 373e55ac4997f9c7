"""ONNX classifier inspection: the input must be N×3×H×W float, the output N×classes logits."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from .workspace import sha256_file


class ModelInputError(ValueError):
    """The ONNX model's input is not what an image classifier in trtlab must take."""


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
        raise FileNotFoundError(f"ONNX model {path} does not exist")
    stat = path.stat()
    return _inspect_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _inspect_cached(path_text: str, size: int, mtime_ns: int) -> ModelInfo:
    import onnx

    path = Path(path_text)
    model = onnx.load(str(path), load_external_data=False)
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        names = ", ".join(f"{i.name!r}" for i in inputs)
        raise ModelInputError(f"{path.name} has {len(inputs)} inputs ({names}); trtlab classifiers take one image input")
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
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return ModelInfo(str(path), sha256_file(path), graph_input.name, shape, dtype, output.name, _dims(output), opset)
