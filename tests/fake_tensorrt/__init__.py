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
            self._outputs: dict = {}  # name -> dims after the batch dimension

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
            self.__dict__.setdefault("_shapes", {})[input] = [list(min), list(opt), list(max)]

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
            entries = self._data.split(b"|") if self._data else []
            if b"fake-timing-entries" not in entries:
                entries.append(b"fake-timing-entries")
            return IHostMemory(b"|".join(entries))

        def combine(self, input_cache, ignore_mismatch):
            record("ITimingCache.combine", input_cache, ignore_mismatch)
            mine = self._data.split(b"|") if self._data else []
            self._data = b"|".join(mine + [e for e in input_cache._data.split(b"|") if e and e not in mine])
            return True

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
            self.__dict__.setdefault("_profiles", []).append(profile)
            return len(self._profiles) - 1

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
            profile = config.__dict__.get("_profiles", [None])[0]
            payload = {"FAKE": "not a TensorRT engine", "version": version,
                       "flags": sorted(f.name for f in config._flags), "layers": network.num_layers,
                       "graph_precision": getattr(network, "_graph_precision", None),
                       "layer_names": [layer.name for layer in network._layers],
                       "inputs": {t.name: (profile._shapes.get(t.name) if profile else None) for t in network._inputs},
                       "outputs": network._outputs}
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
            self._network._outputs = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim][1:]
                                      for o in graph.output}
            ops = {n.op_type for n in graph.node}
            half = any(i.data_type == 10 for i in graph.initializer)  # onnx.TensorProto.FLOAT16
            self._network._graph_precision = ("INT8" if "DequantizeLinear" in ops else "FP16" if half else None)
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
    _add_runtime(trt, record, major)

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


def _add_runtime(trt, record, major: int) -> None:
    """The runtime side: Runtime → ICudaEngine (from the fake builder's JSON "engine") → IExecutionContext, and
    EngineInspector. Device memory is `trt.device_memory` ({address: numpy uint8 array}, filled by
    FakeCuda below); executing writes logits[i, k] = mean(input[i]) + k, so a test can check what came back."""
    trt.device_memory = {}

    class ICudaEngine:
        def __init__(self, payload):
            self._payload = payload
            self._inputs = list(payload["inputs"])
            self._outputs = list(payload["outputs"])

        @property
        def num_io_tensors(self):
            return len(self._inputs) + len(self._outputs)

        def get_tensor_name(self, index):
            return (self._inputs + self._outputs)[index]

        def get_tensor_mode(self, name):
            return trt.TensorIOMode.INPUT if name in self._inputs else trt.TensorIOMode.OUTPUT

        def get_tensor_shape(self, name):
            if name in self._inputs:
                return (-1, *self._payload["inputs"][name][2][1:])
            return (-1, *self._payload["outputs"][name])

        def get_tensor_profile_shape(self, name, profile_index):
            record("ICudaEngine.get_tensor_profile_shape", name, profile_index)
            return [tuple(s) for s in self._payload["inputs"][name]]

        def get_tensor_dtype(self, name):
            return trt.DataType.FLOAT

        def create_execution_context(self):
            return IExecutionContext(self)

        def create_engine_inspector(self):
            return EngineInspector(self)

    class IExecutionContext:
        def __init__(self, engine):
            self._engine = engine
            self._shapes = {}
            self._addresses = {}

        def set_input_shape(self, name, shape):
            record("IExecutionContext.set_input_shape", name, shape)
            low, _, high = self._engine._payload["inputs"][name]
            if not all(lo <= s <= hi for lo, s, hi in zip(low, shape, high)):
                return False
            self._shapes[name] = tuple(shape)
            return True

        def get_tensor_shape(self, name):
            batch = next(iter(self._shapes.values()))[0]
            if name in self._engine._inputs:
                return self._shapes[name]
            return (batch, *self._engine._payload["outputs"][name])

        def set_tensor_address(self, name, memory):
            record("IExecutionContext.set_tensor_address", name, memory)
            self._addresses[name] = memory
            return True

        def execute_async_v3(self, stream_handle):
            record("IExecutionContext.execute_async_v3", stream_handle)
            (name, shape), = self._shapes.items()
            count = int(np.prod(shape))
            data = trt.device_memory[self._addresses[name]][: count * 4].view(np.float32).reshape(shape)
            for out in self._engine._outputs:
                classes = self._engine._payload["outputs"][out][-1]
                logits = data.mean(axis=tuple(range(1, data.ndim)))[:, None] + np.arange(classes, dtype=np.float32)
                raw = np.ascontiguousarray(logits, np.float32).view(np.uint8).reshape(-1)
                trt.device_memory[self._addresses[out]][: raw.size] = raw
            return True

    class EngineInspector:
        def __init__(self, engine):
            self._engine = engine
            self._context = None

        @property
        def execution_context(self):
            return self._context

        @execution_context.setter
        def execution_context(self, context):
            record("EngineInspector.execution_context=", context)
            self._context = context

        def get_engine_information(self, format):  # noqa: A002 — the real parameter name
            record("EngineInspector.get_engine_information", format)
            flags = self._engine._payload["flags"]
            precision = self._engine._payload.get("graph_precision") or ("FP16" if "FP16" in flags else "FP32")
            if major >= 11:  # 11.x: DataType and Format split; I/O Tensors objects instead of Bindings
                tensor = {"DataType": {"INT8": "Int8", "FP16": "Half", "FP32": "Float"}[precision],
                          "Format": "Row major linear"}
                io = [{"Name": n, "IOMode": "Input" if n in self._engine._inputs else "Output", "DataType": "Float"}
                      for n in self._engine._inputs + self._engine._outputs]
                key, value = "I/O Tensors", io
            else:
                tensor = {"Format/Datatype": f"Row major linear {precision}"}
                key, value = "Bindings", self._engine._inputs + self._engine._outputs
            layers = [{"Name": name, "LayerType": "FAKE", "ParameterType": "FAKE", "Inputs": [dict(tensor)],
                       "Outputs": []} for name in self._engine._payload["layer_names"]]
            return json.dumps({"Layers": layers, key: value})

    class Runtime:
        def __init__(self, logger):
            record("Runtime", logger)

        def deserialize_cuda_engine(self, serialized_engine):
            record("Runtime.deserialize_cuda_engine", serialized_engine)
            try:
                payload = json.loads(bytes(serialized_engine))
            except ValueError:
                return None
            return ICudaEngine(payload) if payload.get("FAKE") else None

    trt.Runtime, trt.ICudaEngine, trt.IExecutionContext, trt.EngineInspector = (Runtime, ICudaEngine,
                                                                                 IExecutionContext, EngineInspector)


class FakeCuda:
    """Stand-ins for trtlab.backends.cuda_runtime (device_info, Stream, Event, DeviceBuffer, PinnedBuffer) whose
    "device" memory is numpy arrays registered in `trt.device_memory`, so TrtRunner runs without a GPU.
    `install(setattr)` patches them in (pass monkeypatch.setattr, or a plain setattr)."""

    def __init__(self, trt, gpu: dict):
        self.trt, self.gpu = trt, dict(gpu)
        self.next_address = 0x10000

    def install(self, set_attribute) -> None:
        from trtlab.backends import cuda_runtime as cuda_rt

        fake = self

        class Stream:
            def __init__(self):
                self.handle = 0xC0DA

            def synchronize(self):
                pass

            def close(self):
                pass

        class Event:
            clock = [0.0]

            def __init__(self):
                self.t = None

            def record(self, stream):
                Event.clock[0] += 0.25
                self.t = Event.clock[0]

            @staticmethod
            def elapsed_ms(start, end):
                return end.t - start.t

            def close(self):
                pass

        class DeviceBuffer:
            def __init__(self, nbytes):
                self.nbytes = int(nbytes)
                self.ptr = fake.next_address
                fake.next_address += max(self.nbytes, 1) + 256
                fake.trt.device_memory[self.ptr] = np.zeros(max(self.nbytes, 1), np.uint8)

            def copy_from_host(self, host, stream=None):
                raw = np.ascontiguousarray(host).view(np.uint8).reshape(-1)
                fake.trt.device_memory[self.ptr][: raw.size] = raw

            def copy_to_host(self, host, stream=None):
                host[...] = fake.trt.device_memory[self.ptr][: host.nbytes].view(host.dtype).reshape(host.shape)

            def free(self):
                fake.trt.device_memory.pop(self.ptr, None)

        class PinnedBuffer:
            def __init__(self, shape, dtype=np.float32):
                self.array = np.zeros(tuple(int(d) for d in shape), dtype)
                self.nbytes = self.array.nbytes

            def free(self):
                self.array = None

        set_attribute(cuda_rt, "device_info", lambda device=0: dict(fake.gpu))
        for cls in (Stream, Event, DeviceBuffer, PinnedBuffer):
            set_attribute(cuda_rt, cls.__name__, cls)


def calls_named(trt, name: str) -> list[tuple]:
    """The recorded calls whose first element is `name`."""
    return [c for c in trt.calls if c[0] == name]
