"""What an engine really runs: TensorRT's engine inspector (ProfilingVerbosity.DETAILED) as a per-layer table.

Two JSON layouts (NVIDIA, "Migrating IEngineInspector Usage from TensorRT 10.x to 11.x"):

* TensorRT 10.x: every layer tensor carries one "Format/Datatype" string ("Row major linear FP32", "Channel major
  FP16 format where channel % 8 == 0", "Thirty-two wide channel vectorized row major Int8 format"); the engine's
  I/O is "Bindings", a flat list of names.
* TensorRT 11.x: "Format/Datatype" is split into "DataType" ("Float", "Half", "Int8", ...) and "Format"; "Bindings"
  is replaced by "I/O Tensors", a list of objects (Name, IOMode, DataType, Dimensions, Location, ...).

Both are parsed here, the data type read from "DataType" where it exists and from the format text otherwise.
tests/fake_tensorrt/inspector_samples/ holds samples of both layouts written from NVIDIA's documented formats.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

# TensorRT's DataType names (11.x "DataType"; also inside 10.x format strings), checked longest first.
_DATATYPE_NAMES = {"bfloat16": "BF16", "float": "FP32", "half": "FP16", "int8": "INT8", "int32": "INT32",
                   "int64": "INT64", "int4": "INT4", "uint8": "UINT8", "bool": "BOOL", "fp8": "FP8", "fp4": "FP4",
                   "fp16": "FP16", "fp32": "FP32", "bf16": "BF16", "double": "FP64"}
_COMPUTE_WORDS = ("convolution", "conv", "gemm", "matrixmultiply", "matmul", "fullyconnected")
TABLE_COLUMNS = ["name", "type", "kernel", "precision", "inputs", "outputs", "weights", "tactic"]


def _words(text: str) -> list[str]:
    return "".join(ch if ch.isalnum() else " " for ch in str(text).lower()).split()


def datatype_name(text) -> str:
    """'FP16' for 'Half', 'Channel major FP16 format where channel % 8 == 0', 'FP16'; '?' when no type word."""
    for word in _words(text):
        if word in _DATATYPE_NAMES:
            return _DATATYPE_NAMES[word]
    return "?"


def tensor_precision(tensor: dict) -> str:
    """Precision of one inspector tensor entry: TensorRT 11's "DataType" when present, else the data type word of
    10.x's "Format/Datatype" (or of a "Format" that carries one)."""
    if tensor.get("DataType") is not None:
        found = datatype_name(tensor["DataType"])
        if found != "?":
            return found
    return datatype_name(tensor.get("Format/Datatype") or tensor.get("Format") or "")


def io_tensors(data: dict) -> list[dict]:
    """The engine's inputs and outputs as {name, mode, precision} from either layout ("I/O Tensors" objects in
    11.x, "Bindings" names in 10.x, where mode and type are not given)."""
    if "I/O Tensors" in data:
        return [{"name": t.get("Name"), "mode": t.get("IOMode"), "precision": tensor_precision(t)}
                for t in data["I/O Tensors"] or []]
    return [{"name": name, "mode": None, "precision": None} for name in data.get("Bindings") or []]


@dataclass
class EngineInspection:
    """Per-layer table of an engine and the counts that explain INT8 speed."""

    engine_path: str
    layers: object  # pandas.DataFrame: TABLE_COLUMNS
    counts: dict = field(default_factory=dict)
    io: list = field(default_factory=list)
    layout: str = ""  # "10.x" or "11.x"


def _layer_row(layer: dict) -> dict:
    inputs = layer.get("Inputs", []) or []
    outputs = layer.get("Outputs", []) or []
    first = inputs[0] if inputs else (outputs[0] if outputs else {})
    weights = layer.get("Weights") if isinstance(layer.get("Weights"), dict) else {}
    return {
        "name": layer.get("Name", "?"),
        "type": layer.get("ParameterType") or layer.get("LayerType") or "?",
        "kernel": layer.get("LayerType", ""),
        "precision": tensor_precision(first) if first else "?",
        "inputs": ", ".join(tensor_precision(t) for t in inputs),
        "outputs": ", ".join(tensor_precision(t) for t in outputs),
        "weights": datatype_name(weights.get("Type", "")) if weights else "",
        "tactic": layer.get("TacticName", ""),
    }


def parse_engine_information(info) -> EngineInspection:
    """Turn IEngineInspector.get_engine_information(LayerInformationFormat.JSON) output (10.x or 11.x layout)
    into a table.

    A layer's precision is the precision of its first input (its first output when it has none), as NVIDIA's
    TREx does; 'INT8 compute layers' counts convolution/GEMM/matmul layers that really read INT8 — when that
    is low in an INT8 engine, Q/DQ placement left the heavy layers in FP16/FP32 and INT8 cannot be faster.
    """
    import pandas as pd

    data = json.loads(info) if isinstance(info, (str, bytes)) else info
    layers = data.get("Layers", [])
    if layers and not isinstance(layers[0], dict):
        raise ValueError("the engine holds layer names only: it was built without ProfilingVerbosity.DETAILED; "
                         "rebuild it with trtlab (`python -m trtlab build ... --force`), which sets it")
    table = pd.DataFrame([_layer_row(layer) for layer in layers], columns=TABLE_COLUMNS)
    if len(table):
        compute = table["type"].str.lower().str.replace(" ", "").apply(lambda t: any(w in t for w in _COMPUTE_WORDS))
    else:
        compute = table["type"].astype(bool)
    counts = {
        "layers": int(len(table)),
        "int8_layers": int((table["precision"] == "INT8").sum()),
        "fp16_layers": int((table["precision"] == "FP16").sum()),
        "fp32_layers": int((table["precision"] == "FP32").sum()),
        "compute_layers": int(compute.sum()),
        "int8_compute_layers": int((compute & (table["precision"] == "INT8")).sum()),
        "fp32_compute_layers": int((compute & (table["precision"] == "FP32")).sum()),
    }
    io = io_tensors(data)
    counts["io_tensors"] = len(io)
    layout = "11.x" if "I/O Tensors" in data or any("DataType" in t for layer in layers
                                                      for t in (layer.get("Inputs") or [])) else "10.x"
    return EngineInspection("", table, counts, io, layout)


def inspect_engine(engine_path, batch: int | None = None, check_compatibility: bool = True) -> EngineInspection:
    """Per-layer table (name, type, precision, formats, tactic) and INT8 counts of a built engine.

    The execution context is given the input shape (`batch`, default the profile's opt batch) so the inspector
    can report concrete formats for dynamic shapes.
    """
    from trtlab.backends.tensorrt.runner import TrtRunner

    runner = TrtRunner(engine_path, check_compatibility=check_compatibility)
    with runner:
        trt = runner._trt
        opt = runner._profile[1]
        runner._context.set_input_shape(runner.input_name, (batch or opt[0], *opt[1:]))
        inspector = runner._engine.create_engine_inspector()
        inspector.execution_context = runner._context
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    inspection = parse_engine_information(text)
    inspection.engine_path = str(engine_path)
    return inspection
