"""A recording stand-in for what lies beneath the `tensorrt` Python bindings, for testing trtlab's version
dispatch and argument wiring on machines without TensorRT's libraries. It is NOT TensorRT and never produces a
result anyone may quote: it builds no engine (the "serialized engine" is a JSON record of the calls it received)
and runs nothing.

It offers only names the REAL bindings of the same major version have, with the real enum values, and only the
attributes the real bindings let you set: tests/test_trt_real_bindings.py imports the real bindings wheels of
the oldest and newest supported 10.x and 11.x (stub libraries underneath) and fails when this module offers a
name, an enum value, a method parameter or a settable attribute that a real version lacks. Known differences it
reproduces: ILayer.type is read-only; ILayer.precision / set_output_type, ITensor.dtype (settable),
BuilderFlag.FP16/INT8/OBEY_PRECISION_CONSTRAINTS/REJECT_EMPTY_ALGORITHMS and the IInt8* calibrators exist on
10.x only; TensorRT 11 renumbered BuilderFlag and NetworkDefinitionCreationFlag.

``make_fake_tensorrt(version, real=module)`` keeps only the objects a builder returns (Builder, network,
layers, tensors, config, profile, timing cache, parser) and takes everything else — enums, DataType, Dims,
ILogger/Logger, the calibrator base classes, nptype — from the real bindings module, so trtlab runs its build
path against the real API surface and the fake only records what it was given.
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
    """An enum class; `members` is a {name: value} dict (the real values) or a sequence numbered from 0."""
    items = members.items() if isinstance(members, dict) else ((m, i) for i, m in enumerate(members))
    cls = type(name, (), {m: _EnumValue(name, m, v) for m, v in items})
    cls.__members__ = {m: getattr(cls, m) for m, _ in (members.items() if isinstance(members, dict)
                                                          else ((m, 0) for m in members))}
    return cls


# Real values (checked against the real bindings): members present in every pinned version of the major.
_BUILDER_FLAGS = {
    10: {"FP16": 0, "INT8": 1, "DEBUG": 2, "GPU_FALLBACK": 3, "REFIT": 4, "DISABLE_TIMING_CACHE": 5, "TF32": 6,
         "SPARSE_WEIGHTS": 7, "SAFETY_SCOPE": 8, "OBEY_PRECISION_CONSTRAINTS": 9, "PREFER_PRECISION_CONSTRAINTS": 10,
         "DIRECT_IO": 11, "REJECT_EMPTY_ALGORITHMS": 12, "VERSION_COMPATIBLE": 13, "EXCLUDE_LEAN_RUNTIME": 14,
         "FP8": 15, "BF16": 17, "STRIP_PLAN": 19, "REFIT_IDENTICAL": 20, "WEIGHT_STREAMING": 21},
    # TensorRT 11 removed the precision flags and renumbered what follows them.
    11: {"DEBUG": 2, "GPU_FALLBACK": 3, "REFIT": 4, "DISABLE_TIMING_CACHE": 5, "TF32": 6, "SPARSE_WEIGHTS": 7,
         "VERSION_COMPATIBLE": 12, "EXCLUDE_LEAN_RUNTIME": 13, "STRIP_PLAN": 18, "REFIT_IDENTICAL": 19,
         "WEIGHT_STREAMING": 20},
}
_NETWORK_FLAGS = {10: {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1}, 11: {"STRONGLY_TYPED": 0}}
#: What make_fake_tensorrt(version, real=...) takes from the real module instead of faking it.
REAL_NAMES = ("BuilderFlag", "NetworkDefinitionCreationFlag", "MemoryPoolType", "ProfilingVerbosity",
              "LayerInformationFormat", "TensorIOMode", "DataType", "float32", "float16", "int8", "int32", "nptype",
              "ILogger", "Logger", "Dims", "IInt8Calibrator", "IInt8EntropyCalibrator2", "IInt8MinMaxCalibrator",
              "__version__")


def make_fake_tensorrt(version: str, real: types.ModuleType | None = None) -> types.ModuleType:
    """A fresh fake `tensorrt` module of `version` ('10.x.y' or '11.x.y'); its `calls` list records every call.
    With `real` (the real bindings module), the REAL_NAMES are the real ones and only the builder side is fake."""
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

    trt.BuilderFlag = _enum("BuilderFlag", _BUILDER_FLAGS[major])
    trt.NetworkDefinitionCreationFlag = _enum("NetworkDefinitionCreationFlag", _NETWORK_FLAGS[major])
    trt.MemoryPoolType = _enum("MemoryPoolType", ("WORKSPACE", "DLA_MANAGED_SRAM", "DLA_LOCAL_DRAM",
                                                  "DLA_GLOBAL_DRAM", "TACTIC_DRAM", "TACTIC_SHARED_MEMORY"))
    trt.ProfilingVerbosity = _enum("ProfilingVerbosity", {"LAYER_NAMES_ONLY": 0, "NONE": 1, "DETAILED": 2})
    trt.LayerInformationFormat = _enum("LayerInformationFormat", ("ONELINE", "JSON"))
    trt.TensorIOMode = _enum("TensorIOMode", ("NONE", "INPUT", "OUTPUT"))
    DataType = _enum("DataType", ("FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8", "FP8", "BF16", "INT64", "INT4"))
    if real is not None:
        DataType = real.DataType  # tensors the fake parser makes carry the real dtype values
    trt.DataType = DataType
    trt.float32, trt.float16, trt.int8, trt.int32 = DataType.FLOAT, DataType.HALF, DataType.INT8, DataType.INT32
    trt.nptype = lambda dt: {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT8: np.int8,
                             DataType.INT32: np.int32}[dt]

    class ILogger:
        Severity = _enum("Severity", ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"))

        def __init__(self):
            record("ILogger.__init__", type(self).__name__)

    class Logger(ILogger):
        """The bindings' default logger: Logger(min_severity=Severity.WARNING), min_severity settable."""

        def __init__(self, min_severity=ILogger.Severity.WARNING):
            ILogger.__init__(self)
            self.min_severity = min_severity

    Logger.Severity = ILogger.Severity
    trt.ILogger, trt.Logger = ILogger, Logger

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
        # ITensor.dtype is settable on 10.x only (TensorRT 11 is strongly typed: read-only there)
        _allowed = frozenset({"name", "shape"} | ({"dtype"} if major == 10 else set()))

        def __init__(self, name, dtype=DataType.FLOAT, shape=()):
            object.__setattr__(self, "name", name)
            object.__setattr__(self, "_dtype", dtype)
            object.__setattr__(self, "shape", shape)

    def _dtype_get(self):
        return self._dtype

    def _dtype_set(self, value):
        record("ITensor.dtype=", value)
        object.__setattr__(self, "_dtype", value)

    ITensor.dtype = property(_dtype_get, _dtype_set if major == 10 else None)

    class ILayer(_Strict):
        _allowed = frozenset({"name"} | ({"precision"} if major == 10 else set()))  # `type` is read-only

        def __init__(self, name, op_type, outputs):
            object.__setattr__(self, "name", name)
            object.__setattr__(self, "_type", op_type)
            object.__setattr__(self, "_outputs", outputs)

        @property
        def type(self):
            return self._type

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
            record("OnnxParser", network, logger)
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
    trt.ITensor = ITensor
    trt.IOptimizationProfile, trt.ITimingCache, trt.IHostMemory = IOptimizationProfile, ITimingCache, IHostMemory

    if major == 10:
        class IInt8Calibrator:
            def __init__(self):
                record("IInt8Calibrator.__init__", type(self).__name__)

        trt.IInt8Calibrator = IInt8Calibrator
        trt.IInt8EntropyCalibrator2 = type("IInt8EntropyCalibrator2", (IInt8Calibrator,), {})
        trt.IInt8MinMaxCalibrator = type("IInt8MinMaxCalibrator", (IInt8Calibrator,), {})
    if real is not None:
        for name in REAL_NAMES:
            if hasattr(real, name):
                setattr(trt, name, getattr(real, name))
            elif hasattr(trt, name):
                delattr(trt, name)
        trt.__doc__ = f"real tensorrt {real.__version__} bindings API + FAKE builder objects (builds nothing)"
    return trt


def calls_named(trt, name: str) -> list[tuple]:
    """The recorded calls whose first element is `name`."""
    return [c for c in trt.calls if c[0] == name]
