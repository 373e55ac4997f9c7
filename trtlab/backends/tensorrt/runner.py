"""TrtRunner: a TensorRT engine behind trtlab's Runner interface (execute_async_v3 on one cuda-python stream)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from trtlab.backends.runner import Runner
from trtlab.backends.tensorrt.loader import EngineCompatibilityError, import_tensorrt, make_logger, tensorrt_major
from trtlab.backends.tensorrt.options import check_engine_compatible, sidecar_path
from trtlab.backends.tensorrt.readiness import create_or_explain, gpu_for_tensorrt


class TrtRunner(Runner):
    """Runs a TensorRT engine behind the common Runner interface.

    `model_path` is an engine file, or the ONNX graph of a variant: then `engine` names the engine built from it
    (checked to be built from that very graph), or, without it, the engine is built (or reused) by build_engine
    with `precision` (default: the graph's own) and `build_options`. Pinned host buffers and device buffers are
    sized for the profile's max batch once; each infer() copies the batch host→device, sets the input shape and
    tensor addresses, enqueues execute_async_v3 and copies the logits back, all on one cuda-python stream. The GPU
    time of the last execute (CUDA events) is kept in `last_gpu_ms`.
    """

    backend = "trt"

    def __init__(self, model_path, precision: str | None = None, name: str | None = None, workspace=None,
                 build_options: dict | None = None, engine=None, check_compatibility: bool = True, device: int = 0):
        model_path = Path(model_path)
        super().__init__(name or f"trt:{model_path.name}" + (f":{precision}" if precision else ""))
        self.model_path = model_path
        self.precision = precision
        self.workspace = workspace
        self.build_options = dict(build_options or {})
        self.engine = Path(engine) if engine is not None else None
        self.check_compatibility = check_compatibility
        self.device = device
        self.engine_path: Path | None = None
        self.sidecar: dict = {}
        self.last_gpu_ms: float | None = None
        self._trt = self._runtime = self._engine = self._context = None
        self._stream = self._start = self._end = None
        self._buffers: dict = {}

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def activate_impl(self) -> None:
        from trtlab.backends import cuda_runtime as cuda_rt

        trt = self._trt = import_tensorrt()
        tensorrt_major(trt)
        self.engine_path = self._engine_file()
        gpu = gpu_for_tensorrt(trt, self.device)  # no GPU, an old driver: one line before the engine is read
        if self.check_compatibility:
            self.sidecar = check_engine_compatible(self.engine_path, trt.__version__, gpu)
        elif sidecar_path(self.engine_path).is_file():
            from trtlab.core.workspace import read_json_checked

            self.sidecar = read_json_checked(sidecar_path(self.engine_path), set_aside_damaged=False) or {}
        self._check_built_from_model()
        self._logger = make_logger(trt)
        self._runtime = create_or_explain(trt, trt.Runtime, "runtime", self._logger)
        self._engine = self._runtime.deserialize_cuda_engine(self.engine_path.read_bytes())
        if self._engine is None:
            command = self.sidecar.get("rebuild_command", "python -m trtlab build --model <model.onnx> --force")
            raise EngineCompatibilityError(
                f"TensorRT {trt.__version__} could not deserialize {self.engine_path.name} "
                f"({'; '.join(self._logger.errors[-3:]) or 'no error text'}); rebuild it with:\n  {command}")
        self._context = self._engine.create_execution_context()
        self._discover_io()
        self._stream = cuda_rt.Stream()
        self._start, self._end = cuda_rt.Event(), cuda_rt.Event()
        self._allocate()

    def _engine_file(self) -> Path:
        if self.model_path.suffix != ".onnx":
            return self.model_path
        if self.engine is not None:
            return self.engine
        from trtlab.backends.tensorrt.build import build_engine

        return build_engine(self.model_path, self.precision, workspace=self.workspace,
                            **self.build_options).engine_path

    def _check_built_from_model(self) -> None:
        """An engine named for an ONNX graph must have been built from that graph (its sidecar says which)."""
        if self.model_path.suffix != ".onnx" or self.engine is None or not self.sidecar:
            return
        from trtlab.graph.classifier import inspect_classifier

        built_from, here = self.sidecar.get("onnx_sha256"), inspect_classifier(self.model_path).sha256
        if built_from != here:
            raise EngineCompatibilityError(
                f"engine {self.engine.name} was built from ONNX sha256 {str(built_from)[:12]}…, not from "
                f"{self.model_path.name} ({here[:12]}…); rebuild it from this graph with:\n  "
                f"{self.sidecar.get('rebuild_command', 'python -m trtlab build ... --force')}")

    def _discover_io(self) -> None:
        trt, engine = self._trt, self._engine
        inputs, outputs = [], []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(name)
        if len(inputs) != 1 or not outputs:
            raise ValueError(f"{self.engine_path.name}: expected one input and at least one output, got inputs "
                             f"{inputs} and outputs {outputs}")
        self.input_name, self.output_name = inputs[0], outputs[0]
        self._output_names = outputs
        shape = tuple(engine.get_tensor_shape(self.input_name))
        self._profile = [tuple(s) for s in engine.get_tensor_profile_shape(self.input_name, 0)]
        self.max_batch = int(self._profile[2][0])
        self.input_shape = ("batch", *shape[1:]) if shape[0] == -1 else shape
        self._dtypes = {n: np.dtype(trt.nptype(engine.get_tensor_dtype(n))) for n in inputs + outputs}

    def _allocate(self) -> None:
        from trtlab.backends.cuda_runtime import DeviceBuffer, PinnedBuffer

        context, name = self._context, self.input_name
        max_input = (self.max_batch, *self._profile[2][1:])
        context.set_input_shape(name, max_input)
        for tensor in [name, *self._output_names]:
            shape = tuple(context.get_tensor_shape(tensor))
            host = PinnedBuffer(shape, self._dtypes[tensor])
            device = DeviceBuffer(host.nbytes)
            self._buffers[tensor] = (host, device)
            context.set_tensor_address(tensor, device.ptr)

    def deactivate_impl(self) -> None:
        for host, device in self._buffers.values():
            host.free()
            device.free()
        self._buffers = {}
        for handle in (self._start, self._end, self._stream):
            if handle is not None:
                handle.close()
        self._start = self._end = self._stream = None
        self._context = self._engine = self._runtime = None

    # -- inference ---------------------------------------------------------------------------------------------
    def infer_impl(self, batch: np.ndarray) -> np.ndarray:
        chunks = [self._infer_chunk(batch[i: i + self.max_batch]) for i in range(0, len(batch), self.max_batch)]
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def _infer_chunk(self, batch: np.ndarray) -> np.ndarray:
        from trtlab.backends.cuda_runtime import Event

        n = len(batch)
        self._enqueue(batch)
        host_out, device_out = self._buffers[self.output_name]
        shape = tuple(self._context.get_tensor_shape(self.output_name))
        out = host_out.array.reshape(-1)[: int(np.prod(shape))].reshape(shape)
        device_out.copy_to_host(out, self._stream)
        self._stream.synchronize()
        self.last_gpu_ms = Event.elapsed_ms(self._start, self._end)
        return np.array(out[:n], dtype=np.float32, copy=True)

    def _enqueue(self, batch: np.ndarray) -> None:
        host_in, device_in = self._buffers[self.input_name]
        batch = batch.astype(self._dtypes[self.input_name], copy=False)
        staged = host_in.array.reshape(-1)[: batch.size].reshape(batch.shape)
        staged[...] = batch
        self._context.set_input_shape(self.input_name, tuple(batch.shape))
        device_in.copy_from_host(staged, self._stream)
        self._start.record(self._stream)
        if not self._context.execute_async_v3(self._stream.handle):
            raise RuntimeError(f"{self.name}: execute_async_v3 failed; see TensorRT's error above")
        self._end.record(self._stream)

    def time_execute(self, batch_size: int, iterations: int = 50, warmup: int = 10, seed: int = 0) -> list[float]:
        """GPU milliseconds of `iterations` executions at `batch_size` (CUDA events around execute_async_v3,
        copies excluded), after `warmup` untimed ones. Input values are random: this measures speed only."""
        from trtlab.backends.cuda_runtime import Event

        if not self.is_active:
            raise RuntimeError(f"runner {self.name} is not active; use `with runner:`")
        if batch_size > self.max_batch:
            raise ValueError(f"batch {batch_size} exceeds the engine's max batch {self.max_batch}; rebuild with "
                             f"max_batch >= {batch_size}")
        shape = (batch_size, *self.input_shape[1:])
        batch = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
        self._enqueue(batch)
        self._stream.synchronize()
        samples = []
        for i in range(warmup + iterations):
            self._start.record(self._stream)
            if not self._context.execute_async_v3(self._stream.handle):
                raise RuntimeError(f"{self.name}: execute_async_v3 failed")
            self._end.record(self._stream)
            ms = Event.elapsed_ms(self._start, self._end)
            if i >= warmup:
                samples.append(ms)
        return samples

    def describe(self) -> dict:
        """What ran: TensorRT version, engine, the precision the engine was built for (from its sidecar, so an
        FP16 or INT8 variant is recorded as such), its variant, recipe hash, TF32 decision and GPU."""
        sidecar = self.sidecar
        return {
            "backend": self.backend,
            "runner": self.name,
            "tensorrt": getattr(self._trt, "__version__", None),
            "engine": str(self.engine_path) if self.engine_path else None,
            "precision": sidecar.get("recipe", {}).get("precision", self.precision),
            "variant": (sidecar.get("variant") or {}).get("label"),
            "recipe_hash": sidecar.get("recipe_hash"),
            "network": sidecar.get("network"),
            "tf32": (sidecar.get("tf32") or {}).get("note"),
            "gpu": sidecar.get("gpu_name"),
        }
