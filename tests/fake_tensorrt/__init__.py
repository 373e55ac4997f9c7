"""A recording stand-in for the `tensorrt` Python module, for testing trtlab's version dispatch and argument
wiring on machines without TensorRT. It is NOT TensorRT and never produces a result anyone may quote: it builds
no engine (the "serialized engine" is a JSON record of the calls it received) and runs nothing.

Only API names documented for each version exist on it, so code that touches a name TensorRT removed fails here
the way it would fail there (AttributeError):

* TensorRT 10.x Python API: Builder/INetworkDefinition/IBuilderConfig/IOptimizationProfile/ITimingCache/
  OnnxParser/ParserError/ILogger, BuilderFlag (FP16, INT8, TF32, OBEY_PRECISION_CONSTRAINTS, ...),
  NetworkDefinitionCreationFlag (EXPLICIT_BATCH deprecated, STRONGLY_TYPED), IInt8EntropyCalibrator2,
  IInt8MinMaxCalibrator, IBuilderConfig.int8_calibrator / set_calibration_profile, ILayer.precision /
  set_output_type.
* TensorRT 11.x: the "Removed Python APIs" list of NVIDIA's 10.x→11.x migration guide is applied: no
  BuilderFlag.FP16/INT8/BF16/FP8/INT4/FP4/OBEY_/PREFER_PRECISION_CONSTRAINTS/DIRECT_IO, no int8_calibrator,
  set/get_calibration_profile, quantization flags or IInt8* calibrators, and (strong typing) no per-layer
  precision.
"""
from __future__ import annotations

import importlib.machinery
import json
import types

import numpy as np


class _EnumValue:
    def __init__(self, enum: str, name: str, value: int):
        self.enum, self.name, self.value = enum, name, value

    def __int__(self):
        return self.value

    def __index__(self):
        return self.value

    def __eq__(self, other):
        return isinstance(other, _EnumValue) and (self.enum, self.name) == (other.enum, other.name)

    def __hash__(self):
        return hash((self.enum, self.name))

    def __repr__(self):
        return f"{self.enum}.{self.name}"


def _enum(name: str, members) -> type:
    return type(name, (), {m: _EnumValue(name, m, i) for i, m in enumerate(members)})


_BUILDER_FLAGS_10 = ("FP16", "BF16", "INT8", "INT4", "FP8", "FP4", "DEBUG", "GPU_FALLBACK", "REFIT", "DISABLE_TIMING_CACHE",
                     "TF32", "SPARSE_WEIGHTS", "SAFETY_SCOPE", "OBEY_PRECISION_CONSTRAINTS",
                     "PREFER_PRECISION_CONSTRAINTS", "DIRECT_IO", "REJECT_EMPTY_ALGORITHMS", "VERSION_COMPATIBLE",
                     "EXCLUDE_LEAN_RUNTIME", "WEIGHT_STREAMING", "STRIP_PLAN", "REFIT_IDENTICAL")
_REMOVED_IN_11 = {"FP16", "BF16", "INT8", "INT4", "FP8", "FP4", "OBEY_PRECISION_CONSTRAINTS",
                  "PREFER_PRECISION_CONSTRAINTS", "DIRECT_IO"}


def make_fake_tensorrt(version: str) -> types.ModuleType:
    """A fresh fake `tensorrt` module of `version` ('10.x.y' or '11.x.y'); its `calls` list records every call."""
    major = int(version.split(".")[0])
    trt = types.ModuleType("tensorrt")
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    trt.__version__ = version
    trt.__doc__ = "FAKE tensorrt for trtlab's wiring tests: builds nothing, runs nothing."
    calls: list[tuple] = []
    trt.calls = calls
    trt.parser_failures = []  # [(onnx node index, description)] the fake parser reports
    trt.build_returns_none = False

    def record(*entry):
        calls.append(entry)

    flags = [f for f in _BUILDER_FLAGS_10 if major == 10 or f not in _REMOVED_IN_11]
    trt.BuilderFlag = _enum("BuilderFlag", flags)
    trt.NetworkDefinitionCreationFlag = _enum(
        "NetworkDefinitionCreationFlag", ("EXPLICIT_BATCH", "STRONGLY_TYPED") if major == 10 else ("STRONGLY_TYPED",))
    trt.MemoryPoolType = _enum("MemoryPoolType", ("WORKSPACE", "DLA_MANAGED_SRAM", "DLA_LOCAL_DRAM",
                                                  "DLA_GLOBAL_DRAM", "TACTIC_DRAM", "TACTIC_SHARED_MEMORY"))
    trt.ProfilingVerbosity = _enum("ProfilingVerbosity", ("LAYER_NAMES_ONLY", "NONE", "DETAILED"))
    trt.LayerInformationFormat = _enum("LayerInformationFormat", ("ONELINE", "JSON"))
    trt.TensorIOMode = _enum("TensorIOMode", ("NONE", "INPUT", "OUTPUT"))
    DataType = _enum("DataType", ("FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8", "FP8", "BF16", "INT64", "INT4"))
    trt.DataType = DataType
    trt.float32, trt.float16, trt.int8, trt.int32 = DataType.FLOAT, DataType.HALF, DataType.INT8, DataType.INT32
    trt.nptype = lambda dt: {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT8: np.int8,
                             DataType.INT32: np.int32}[dt]

    class ILogger:
        Severity = _enum("Severity", ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"))

        def __init__(self):
            record("ILogger.__init__", type(self).__name__)

    trt.ILogger = ILogger
    trt.Logger = type("Logger", (ILogger,), {})

    class _Strict:
        """Rejects attributes that are not part of the documented API of this version."""

        _allowed: frozenset = frozenset()

        def __setattr__(self, name, value):
            if not name.startswith("_") and name not in self._allowed:
                raise AttributeError(f"fake tensorrt {version}: {type(self).__name__} has no attribute {name!r}")
            if not name.startswith("_"):
                record(f"{type(self).__name__}.{name}=", value)
            object.__setattr__(self, name, value)

    class ITensor(_Strict):
        _allowed = frozenset({"name", "dtype", "shape"})

        def __init__(self, name, dtype=DataType.FLOAT, shape=()):
            object.__setattr__(self, "name", name)
            object.__setattr__(self, "dtype", dtype)
            object.__setattr__(self, "shape", shape)

    layer_attrs = {"name", "type"} | ({"precision"} if major == 10 else set())

    class ILayer(_Strict):
        _allowed = frozenset(layer_attrs)

        def __init__(self, name, op_type, outputs):
            object.__setattr__(self, "name", name)
            object.__setattr__(self, "type", op_type)
            object.__setattr__(self, "_outputs", outputs)

        @property
        def num_outputs(self):
            return len(self._outputs)

        def get_output(self, index):
            return self._outputs[index]

    if major == 10:
        def set_output_type(self, index, dtype):
            record("ILayer.set_output_type", self.name, index, dtype)

        ILayer.set_output_type = set_output_type

    class INetworkDefinition(_Strict):
        def __init__(self, flags):
            self._flags = flags
            self._layers: list = []
            self._inputs: list = []

        @property
        def num_layers(self):
            return len(self._layers)

        def get_layer(self, index):
            return self._layers[index]

        @property
        def num_inputs(self):
            return len(self._inputs)

        def get_input(self, index):
            return self._inputs[index]

    class IOptimizationProfile(_Strict):
        def set_shape(self, input, min, opt, max):  # noqa: A002 — the documented keyword names
            record("IOptimizationProfile.set_shape", input, tuple(min), tuple(opt), tuple(max))

    class IHostMemory(bytes):
        """Supports the buffer protocol like the real IHostMemory (bytes gives it that on Python 3.10+)."""

        @property
        def nbytes(self):
            return len(self)

    class ITimingCache:
        def __init__(self, data: bytes):
            self._data = bytes(data)

        def serialize(self):
            record("ITimingCache.serialize")
            return IHostMemory(self._data + b"|fake-timing-entries")

    config_attrs = {"profiling_verbosity", "builder_optimization_level", "max_aux_streams", "engine_capability",
                    "default_device_type", "progress_monitor", "avg_timing_iterations"}
    if major == 10:
        config_attrs.add("int8_calibrator")

    class IBuilderConfig(_Strict):
        _allowed = frozenset(config_attrs)

        def __init__(self):
            object.__setattr__(self, "_flags", set())
            object.__setattr__(self, "_cache", None)

        def set_memory_pool_limit(self, pool, pool_size):
            record("IBuilderConfig.set_memory_pool_limit", pool, pool_size)

        def set_flag(self, flag):
            record("IBuilderConfig.set_flag", flag)
            self._flags.add(flag)

        def clear_flag(self, flag):
            record("IBuilderConfig.clear_flag", flag)
            self._flags.discard(flag)

        def get_flag(self, flag):
            return flag in self._flags

        def add_optimization_profile(self, profile):
            record("IBuilderConfig.add_optimization_profile", profile)
            return 0

        def create_timing_cache(self, serialized_timing_cache):
            record("IBuilderConfig.create_timing_cache", bytes(serialized_timing_cache))
            return ITimingCache(serialized_timing_cache)

        def set_timing_cache(self, cache, ignore_mismatch):
            record("IBuilderConfig.set_timing_cache", cache, ignore_mismatch)
            object.__setattr__(self, "_cache", cache)
            return True

        def get_timing_cache(self):
            return self._cache

    if major == 10:
        def set_calibration_profile(self, profile):
            record("IBuilderConfig.set_calibration_profile", profile)
            return True

        IBuilderConfig.set_calibration_profile = set_calibration_profile

    class Builder:
        def __init__(self, logger):
            record("Builder", logger)

        def create_network(self, flags=0):
            record("Builder.create_network", flags)
            return INetworkDefinition(flags)

        def create_builder_config(self):
            return IBuilderConfig()

        def create_optimization_profile(self):
            return IOptimizationProfile()

        def build_serialized_network(self, network, config):
            record("Builder.build_serialized_network", network, config)
            if trt.build_returns_none:
                return None
            payload = {"FAKE": "not a TensorRT engine", "version": version,
                       "flags": sorted(f.name for f in config._flags), "layers": network.num_layers}
            return IHostMemory(json.dumps(payload).encode())

    class ParserError:
        def __init__(self, node, desc):
            self._node, self._desc = node, desc

        def node(self):
            return self._node

        def desc(self):
            return self._desc

        def code(self):
            return "UNSUPPORTED_NODE"

    class OnnxParser:
        def __init__(self, network, logger):
            self._network = network
            self._errors = []

        def parse_from_file(self, model):
            import onnx

            record("OnnxParser.parse_from_file", model)
            graph = onnx.load(model, load_external_data=False).graph
            if trt.parser_failures:
                self._errors = [ParserError(i, d) for i, d in trt.parser_failures]
                return False
            inits = {i.name for i in graph.initializer}
            self._network._inputs = [ITensor(i.name) for i in graph.input if i.name not in inits]
            for node in graph.node:  # the real parser names layers after ONNX nodes
                self._network._layers.append(ILayer(node.name, node.op_type, [ITensor(o) for o in node.output]))
            return True

        @property
        def num_errors(self):
            return len(self._errors)

        def get_error(self, index):
            return self._errors[index]

    trt.Builder, trt.OnnxParser, trt.ParserError = Builder, OnnxParser, ParserError
    trt.IBuilderConfig, trt.INetworkDefinition, trt.ILayer = IBuilderConfig, INetworkDefinition, ILayer
    trt.IOptimizationProfile, trt.ITimingCache, trt.IHostMemory = IOptimizationProfile, ITimingCache, IHostMemory

    if major == 10:
        class IInt8Calibrator:
            def __init__(self):
                record("IInt8Calibrator.__init__", type(self).__name__)

        trt.IInt8Calibrator = IInt8Calibrator
        trt.IInt8EntropyCalibrator2 = type("IInt8EntropyCalibrator2", (IInt8Calibrator,), {})
        trt.IInt8MinMaxCalibrator = type("IInt8MinMaxCalibrator", (IInt8Calibrator,), {})
    return trt


def calls_named(trt, name: str) -> list[tuple]:
    """The recorded calls whose first element is `name`."""
    return [c for c in trt.calls if c[0] == name]
