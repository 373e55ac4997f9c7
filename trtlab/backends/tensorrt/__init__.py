"""TensorRT 10.x / 11.x backend, one module per concern; `import tensorrt` happens only when a function needs it.

- loader: import_tensorrt, version detection, trtlab's TensorRT errors, the logger, parser messages
- options: BuildOptions, the ONNX graph's facts (precision it carries, FP32 compute), engine files and sidecars
- build: build_engine (strongly typed: the graph's types are the engine's), network flags, TF32
- legacy: TensorRT 10's weakly typed path (precision flags, layer-precision guards, implicit INT8 calibrator)
- timing_cache: the shared timing cache file, locked while read and written
- runner: TrtRunner (execute_async_v3 on a cuda-python stream)
- inspection: engine inspector JSON of 10.x and 11.x → per-layer table
- latency: latency statistics, benchmarks, tables

Engines of a model's variants (fp32, fp16, int8 …) are built by trtlab.workflows.engines.build_engines; the
implicit INT8 calibrator is made by trtlab.quantization.tensorrt_calibrator.
"""
from __future__ import annotations

import importlib

_NAMES = {
    "build_engine": "build", "network_creation_flags": "build",
    "BuildOptions": "options", "EngineBuild": "options", "EngineTarget": "options", "PRECISIONS": "options",
    "graph_facts": "options",
    "check_engine_compatible": "options", "sidecar_path": "options",
    "import_tensorrt": "loader", "tensorrt_major": "loader", "tensorrt_version": "loader",
    "TensorRTUnavailable": "loader", "ImplicitInt8Unsupported": "loader", "OnnxParseError": "loader",
    "EngineBuildError": "loader", "EngineCompatibilityError": "loader",
    "TrtRunner": "runner",
    "inspect_engine": "inspection", "parse_engine_information": "inspection", "EngineInspection": "inspection",
    "latency_stats": "latency", "latency_table": "latency", "benchmark_engine": "latency",
    "benchmark_runner": "latency",
}


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_NAMES))
