"""cuda-python runtime layer (no TensorRT needed): runs for real on a CUDA GPU, skipped with the reason elsewhere.

Real data: a batch of the demo photos from the decode cache, normalised exactly as inference feeds it.
"""
from __future__ import annotations

import numpy as np
import pytest


def _cuda_reason() -> str:
    from trtlab.backends.cuda_runtime import cuda_available

    ok, why = cuda_available()
    return "" if ok else f"no CUDA here: {why}"


_SKIP = _cuda_reason()
pytestmark = pytest.mark.skipif(bool(_SKIP), reason=_SKIP or "n/a")


@pytest.fixture(scope="module")
def photo_batch(demo_cache):
    from trtlab.data.preprocess import normalize_batch

    # C-contiguous, as Runner.check_input hands batches to a backend (normalize_batch returns a transposed view)
    return np.ascontiguousarray(normalize_batch(demo_cache.crops[demo_cache.valid_indices], demo_cache.preprocess))


def test_device_info_names_the_gpu():
    from trtlab.backends.cuda_runtime import device_info

    info = device_info()
    major, minor = (int(x) for x in info["compute_capability"].split("."))
    assert info["name"] and major >= 3 and minor >= 0
    assert info["total_memory_bytes"] > 1 << 30 and info["runtime_version"].count(".") == 1


def test_real_batch_roundtrips_through_pinned_and_device_buffers_on_a_stream(photo_batch):
    from trtlab.backends.cuda_runtime import DeviceBuffer, Event, PinnedBuffer, Stream

    with Stream() as stream, DeviceBuffer(photo_batch.nbytes) as device, \
            PinnedBuffer(photo_batch.shape) as pinned_in, PinnedBuffer(photo_batch.shape) as pinned_out:
        assert stream.handle != 0 and device.ptr != 0
        pinned_in.array[...] = photo_batch
        start, end = Event(), Event()
        start.record(stream)
        device.copy_from_host(pinned_in.array, stream)
        device.copy_to_host(pinned_out.array, stream)
        end.record(stream)
        stream.synchronize()
        assert np.array_equal(pinned_out.array, photo_batch)
        assert Event.elapsed_ms(start, end) > 0
        start.close()
        end.close()


def test_pageable_copies_work_too_and_sync_copies_without_stream(photo_batch):
    from trtlab.backends.cuda_runtime import DeviceBuffer

    back = np.empty_like(photo_batch)
    with DeviceBuffer(photo_batch.nbytes) as device:
        device.copy_from_host(photo_batch)
        device.copy_to_host(back)
    assert np.array_equal(back, photo_batch)


def test_copy_timing_reports_both_memory_kinds(photo_batch):
    from trtlab.backends.cuda_runtime import time_copies

    result = time_copies(photo_batch, repeats=5, warmup=1)
    assert result["roundtrip_ok"]
    kinds = {(t.memory, t.direction) for t in result["timings"]}
    assert kinds == {("pinned", "H2D"), ("pinned", "D2H"), ("pageable", "H2D"), ("pageable", "D2H")}
    assert all(t.ms_median > 0 and t.gb_per_s > 0 for t in result["timings"])


def test_oversized_or_strided_copies_are_refused_with_the_fix():
    from trtlab.backends.cuda_runtime import DeviceBuffer

    with DeviceBuffer(16) as device, pytest.raises(ValueError, match="32 bytes does not fit the 16-byte"):
        device.copy_from_host(np.zeros(8, np.float32))
    strided = np.zeros((2, 4), np.float32).T  # an async copy of a temporary contiguous copy could outlive it
    with DeviceBuffer(32) as device, pytest.raises(ValueError, match="np.ascontiguousarray"):
        device.copy_from_host(strided)


def test_calibrator_get_batch_returns_device_pointers_holding_the_batch(demo_cache):
    """TensorRT 10's calibrator contract, checked on the GPU without TensorRT: get_batch returns device
    pointers (not host ones) to the normalised batch, then None when the data runs out."""
    import types

    from trtlab.backends.cuda_runtime import check, cudart
    from trtlab.data.batches import pad_batch
    from trtlab.data.preprocess import normalize_batch
    from trtlab.quantization.tensorrt_calibrator import calibration_metadata, make_calibrator

    class _Base:  # stands in for trt.IInt8EntropyCalibrator2, whose only duty here is the explicit __init__
        def __init__(self):
            pass

    fake_trt = types.SimpleNamespace(IInt8EntropyCalibrator2=_Base)
    indices = demo_cache.valid_indices[:12]  # 8 + 4: the last batch is padded with copies of its last image
    meta = calibration_metadata("0" * 64, "entropy", demo_cache, indices, None)
    calibrator = make_calibrator(fake_trt, "entropy", demo_cache, indices, 8, None, meta, progress=False)
    rt = cudart()
    served = 0
    while True:
        pointers = calibrator.get_batch(["input"])
        if pointers is None:
            break
        (ptr,) = pointers
        attributes = check(rt.cudaPointerGetAttributes(ptr), "cudaPointerGetAttributes")
        assert attributes.type == rt.cudaMemoryType.cudaMemoryTypeDevice
        expected = pad_batch(normalize_batch(demo_cache.crops[indices[served: served + 8]], demo_cache.preprocess), 8)
        back = np.empty(expected.shape, expected.dtype)  # C order, as the calibrator staged it
        check(rt.cudaMemcpy(back.ctypes.data, ptr, back.nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost), "memcpy")
        assert np.array_equal(back, expected)
        served += 8
    assert served == 16 and calibrator.padded_rows == 4 and calibrator._device is None  # buffers freed at the end
