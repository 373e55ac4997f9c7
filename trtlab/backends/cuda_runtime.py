"""CUDA runtime helpers through cuda-python: device info, streams, events, device and pinned host buffers.

No TensorRT import here, so this module runs (and is tested) on any CUDA GPU, with or without TensorRT. The
TensorRT runner, the INT8 calibrator and the copy benchmark all move data through these classes.

cuda-python facts used (looked up, see the closing note of issue 4):

* Module layout: ``cuda.bindings.runtime`` since cuda-python 12.6.1; the old ``from cuda import cudart`` was
  deprecated in 12.9 and removed in 13.0 (cuda-bindings 13.0.0 release notes). Both are tried, new first.
* Every runtime call returns a tuple ``(cudaError_t, *values)``; ``cudaMallocHost(size) -> (err, ptr)``,
  ``cudaEventElapsedTime(start, end) -> (err, ms)``, ``cudaMemcpyAsync(dst, src, count, kind, stream) -> (err,)``.
* ``int(cuda_object)`` is deprecated in cuda-bindings 13 in favour of
  ``cuda.bindings.utils.get_cuda_native_handle``; both are supported below.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np


class CudaError(RuntimeError):
    """A CUDA runtime call failed; the message names the call, the CUDA error and what to do."""


class CudaUnavailable(RuntimeError):
    """cuda-python or a CUDA GPU is missing."""


@functools.lru_cache(maxsize=1)
def cudart():
    """The cuda-python runtime module, whichever layout is installed (13.x: cuda.bindings.runtime)."""
    try:
        from cuda.bindings import runtime  # cuda-python >= 12.6.1, the only layout in 13.x

        return runtime
    except ImportError:
        pass
    try:
        from cuda import cudart as runtime  # cuda-python < 12.6.1 (removed in 13.0)

        return runtime
    except ImportError as exc:
        raise CudaUnavailable(
            "cuda-python is not installed: pip install cuda-python (it provides cuda.bindings.runtime); "
            "trtlab moves TensorRT inputs and outputs through it") from exc


def _error_text(rt, err) -> str:
    try:
        name = rt.cudaGetErrorName(err)[1]
        text = rt.cudaGetErrorString(err)[1]
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        return f"{name}: {text}"
    except Exception:  # the error lookup itself must never hide the original error
        return str(err)


def check(result, call: str = "CUDA call"):
    """Unpack a cuda-python ``(err, *values)`` tuple: raise CudaError on failure, else return the value(s)."""
    rt = cudart()
    if not isinstance(result, tuple):
        result = (result,)
    err, values = result[0], result[1:]
    if err != rt.cudaError_t.cudaSuccess:
        hint = ""
        if err == getattr(rt.cudaError_t, "cudaErrorNoDevice", None) or err == getattr(
                rt.cudaError_t, "cudaErrorInsufficientDriver", None):
            hint = "; this machine has no usable NVIDIA GPU/driver — use backend='ort'"
        elif err == getattr(rt.cudaError_t, "cudaErrorMemoryAllocation", None):
            hint = "; the GPU is out of memory — use a smaller batch or max_batch, or free other GPU work"
        raise CudaError(f"{call} failed with {_error_text(rt, err)}{hint}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def native_handle(obj) -> int:
    """The integer address of a cuda-python object (stream, event), as TensorRT's execute_async_v3 wants it."""
    try:
        from cuda.bindings.utils import get_cuda_native_handle  # cuda-bindings >= 13.0

        return int(get_cuda_native_handle(obj))
    except ImportError:
        return int(obj)


def cuda_available() -> tuple[bool, str]:
    """(True, '') when cuda-python imports and sees at least one GPU, else (False, reason)."""
    try:
        rt = cudart()
    except CudaUnavailable as exc:
        return False, str(exc)
    try:
        err, count = rt.cudaGetDeviceCount()
    except Exception as exc:  # a missing libcuda surfaces as an exception in some versions
        return False, f"CUDA runtime could not start: {exc}"
    if err != rt.cudaError_t.cudaSuccess:
        return False, f"no CUDA GPU usable ({_error_text(rt, err)})"
    if count < 1:
        return False, "no CUDA GPU found"
    return True, ""


def device_info(device: int = 0) -> dict:
    """Name, compute capability, memory and driver/runtime versions of `device` (stored in engine sidecars)."""
    rt = cudart()
    check(rt.cudaSetDevice(device), "cudaSetDevice")
    props = check(rt.cudaGetDeviceProperties(device), "cudaGetDeviceProperties")
    name = props.name
    name = name.decode(errors="replace").rstrip("\x00") if isinstance(name, (bytes, bytearray)) else str(name)
    attr = rt.cudaDeviceAttr
    major = check(rt.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute")
    minor = check(rt.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute")
    driver = check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion")
    runtime = check(rt.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion")
    return {
        "device": device,
        "name": name,
        "compute_capability": f"{major}.{minor}",
        "total_memory_bytes": int(props.totalGlobalMem),
        "driver_version": _version_text(driver),
        "runtime_version": _version_text(runtime),
    }


def _version_text(code: int) -> str:
    code = int(code)
    return f"{code // 1000}.{(code % 1000) // 10}"


class Stream:
    """A CUDA stream; `handle` is the int TensorRT's execute_async_v3 takes."""

    def __init__(self):
        self._stream = check(cudart().cudaStreamCreate(), "cudaStreamCreate")
        self.handle = native_handle(self._stream)

    @property
    def raw(self):
        return self._stream

    def synchronize(self) -> None:
        check(cudart().cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")

    def close(self) -> None:
        if self._stream is not None:
            check(cudart().cudaStreamDestroy(self._stream), "cudaStreamDestroy")
            self._stream = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Event:
    """A CUDA event for GPU-side timing: record on a stream, then `elapsed_ms(start, end)`."""

    def __init__(self):
        self._event = check(cudart().cudaEventCreate(), "cudaEventCreate")

    def record(self, stream: Stream) -> None:
        check(cudart().cudaEventRecord(self._event, stream.raw), "cudaEventRecord")

    def synchronize(self) -> None:
        check(cudart().cudaEventSynchronize(self._event), "cudaEventSynchronize")

    @staticmethod
    def elapsed_ms(start: "Event", end: "Event") -> float:
        end.synchronize()
        return float(check(cudart().cudaEventElapsedTime(start._event, end._event), "cudaEventElapsedTime"))

    def close(self) -> None:
        if self._event is not None:
            check(cudart().cudaEventDestroy(self._event), "cudaEventDestroy")
            self._event = None


class _ReleasedOnExit:
    """`with buffer:` frees it on exit, even when the cell fails."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


class DeviceBuffer(_ReleasedOnExit):
    """`nbytes` of GPU memory at the int address `ptr` (what TensorRT's set_tensor_address and a calibrator's
    get_batch need)."""

    def __init__(self, nbytes: int):
        self.nbytes = int(nbytes)
        self.ptr = int(check(cudart().cudaMalloc(max(self.nbytes, 1)), f"cudaMalloc({self.nbytes} bytes)"))

    def copy_from_host(self, host: np.ndarray, stream: Stream | None = None) -> None:
        """Host → device copy of `host` (C-contiguous); asynchronous on `stream`, else synchronous."""
        self._copy(self.ptr, _host_ptr(host), host.nbytes, "cudaMemcpyHostToDevice", stream)

    def copy_to_host(self, host: np.ndarray, stream: Stream | None = None) -> None:
        """Device → host copy into `host` (C-contiguous, writable)."""
        self._copy(_host_ptr(host, writable=True), self.ptr, host.nbytes, "cudaMemcpyDeviceToHost", stream)

    def _copy(self, dst: int, src: int, nbytes: int, kind: str, stream: Stream | None) -> None:
        if nbytes > self.nbytes:
            raise ValueError(f"copy of {nbytes} bytes does not fit the {self.nbytes}-byte device buffer")
        rt = cudart()
        kind_value = getattr(rt.cudaMemcpyKind, kind)
        if stream is None:
            check(rt.cudaMemcpy(dst, src, nbytes, kind_value), "cudaMemcpy")
        else:
            check(rt.cudaMemcpyAsync(dst, src, nbytes, kind_value, stream.raw), "cudaMemcpyAsync")

    def free(self) -> None:
        if self.ptr:
            check(cudart().cudaFree(self.ptr), "cudaFree")
            self.ptr = 0



class PinnedBuffer(_ReleasedOnExit):
    """Page-locked host memory (cudaMallocHost) viewed as a numpy array, so async copies really overlap."""

    def __init__(self, shape, dtype=np.float32):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = int(check(cudart().cudaMallocHost(max(self.nbytes, 1)), f"cudaMallocHost({self.nbytes} bytes)"))
        raw = (ctypes.c_byte * max(self.nbytes, 1)).from_address(self.ptr)
        self.array = np.frombuffer(raw, dtype=np.uint8, count=self.nbytes).view(self.dtype).reshape(self.shape)

    def view(self, count: int) -> np.ndarray:
        """The first `count` rows (batch entries) of the buffer."""
        return self.array[:count]

    def free(self) -> None:
        if self.ptr:
            self.array = None
            check(cudart().cudaFreeHost(self.ptr), "cudaFreeHost")
            self.ptr = 0



def _host_ptr(array: np.ndarray, writable: bool = False) -> int:
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("host array must be C-contiguous for a CUDA copy; pass np.ascontiguousarray(x)")
    if writable and not array.flags["WRITEABLE"]:
        raise ValueError("destination host array is read-only")
    return int(array.ctypes.data)


@dataclass
class CopyTiming:
    """One direction of one host memory kind, timed with CUDA events over `repeats` copies."""

    memory: str  # 'pinned' or 'pageable'
    direction: str  # 'H2D' or 'D2H'
    nbytes: int
    ms_median: float
    ms_min: float

    @property
    def gb_per_s(self) -> float:
        return self.nbytes / (self.ms_median / 1000) / 1e9 if self.ms_median > 0 else float("nan")


def time_copies(batch: np.ndarray, repeats: int = 20, warmup: int = 3) -> dict:
    """Copy `batch` host→device→host through pageable and pinned host memory on one stream, time every copy
    with CUDA events, and check the round trip returns the same bytes.

    Returns {'timings': [CopyTiming...], 'roundtrip_ok': bool, 'pinned_speedup_h2d': x, 'pinned_speedup_d2h': x}.
    """
    batch = np.ascontiguousarray(batch)
    timings: list[CopyTiming] = []
    roundtrip_ok = True
    stream = Stream()
    start, end = Event(), Event()
    device = DeviceBuffer(batch.nbytes)
    pinned_in, pinned_out = PinnedBuffer(batch.shape, batch.dtype), PinnedBuffer(batch.shape, batch.dtype)
    try:
        pinned_in.array[...] = batch
        pageable_out = np.empty_like(batch)
        cases = {
            "pageable": (batch, pageable_out),
            "pinned": (pinned_in.array, pinned_out.array),
        }
        for memory, (src, dst) in cases.items():
            for direction in ("H2D", "D2H"):
                samples = []
                for i in range(warmup + repeats):
                    start.record(stream)
                    if direction == "H2D":
                        device.copy_from_host(src, stream)
                    else:
                        device.copy_to_host(dst, stream)
                    end.record(stream)
                    ms = Event.elapsed_ms(start, end)
                    if i >= warmup:
                        samples.append(ms)
                timings.append(CopyTiming(memory, direction, batch.nbytes, float(np.median(samples)),
                                          float(np.min(samples))))
            stream.synchronize()
            roundtrip_ok &= bool(np.array_equal(dst, batch))
    finally:
        pinned_in.free()
        pinned_out.free()
        device.free()
        start.close()
        end.close()
        stream.close()
    by_key = {(t.memory, t.direction): t for t in timings}
    return {
        "timings": timings,
        "roundtrip_ok": roundtrip_ok,
        "pinned_speedup_h2d": by_key[("pageable", "H2D")].ms_median / by_key[("pinned", "H2D")].ms_median,
        "pinned_speedup_d2h": by_key[("pageable", "D2H")].ms_median / by_key[("pinned", "D2H")].ms_median,
    }

