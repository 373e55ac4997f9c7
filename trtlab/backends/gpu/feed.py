"""Host arrays onto the torch device, and logits back (the torch backend's feed).

- `HostRing`: a few reusable host buffers (pinned on CUDA) that the batch reader fills directly from the decode
  cache in its own thread (`take(shape)` → a numpy view to fill), each guarded by the event of its last copy to the
  device, so a buffer is refilled only once the GPU has read it. A batch read into a slot reaches the GPU with one
  asynchronous copy: no second host copy into a staging buffer.
- `CropFeed`: uploads (a ring slot as it is; any other array through one pinned staging buffer per dtype), the
  on-device normalisation of uint8 NHWC crops with the exact float32 arithmetic of
  `data.preprocess.normalize_batch`, and alternating pinned output buffers for logits copied back asynchronously.
On the CPU the same objects hand the arrays through as they are.
"""
from __future__ import annotations

import threading

import numpy as np

RING_SLOTS = 3  # one being filled by the reader, one being copied to the GPU, one spare: the reader rarely waits


class _Slot:
    def __init__(self):
        self.tensor = None  # host torch tensor (pinned on CUDA), flat uint8 storage
        self.array = None  # its numpy view, shaped as last taken
        self.event = None  # the last copy out of it (CUDA)


class HostRing:
    """`slots` reusable host buffers for batches of one shape; `take(shape)` (any thread) returns the next buffer as
    a writable uint8 numpy array of that shape once the device has finished reading it."""

    def __init__(self, device, slots: int = RING_SLOTS):
        import torch

        self.device = torch.device(device)
        self.slots = [_Slot() for _ in range(max(2, slots))]
        self.next = 0
        self._lock = threading.Lock()
        self._by_address: dict[int, _Slot] = {}

    def take(self, shape: tuple, dtype=np.uint8) -> np.ndarray:
        import torch

        with self._lock:
            slot = self.slots[self.next]
            self.next = (self.next + 1) % len(self.slots)
        if slot.event is not None:
            slot.event.synchronize()  # the GPU has read what was there
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if slot.tensor is None or slot.tensor.numel() < size:
            pinned = self.device.type == "cuda"
            slot.tensor = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
            slot.event = torch.cuda.Event() if pinned else None
            with self._lock:
                self._by_address = {s.tensor.data_ptr(): s for s in self.slots if s.tensor is not None}
        slot.array = slot.tensor.numpy()[:size].view(dtype).reshape(shape)
        return slot.array

    def slot_of(self, array: np.ndarray) -> _Slot | None:
        """The slot whose buffer `array` is (its start and shape as taken), else None."""
        slot = self._by_address.get(array.__array_interface__["data"][0]) if isinstance(array, np.ndarray) else None
        return slot if slot is not None and slot.array is not None and slot.array.shape == array.shape else None


class CropFeed:
    """Host arrays onto `device` and logits back. On CUDA: a ring slot is copied as it is, other arrays through one
    pinned staging buffer per dtype (reused, grown when needed; the previous copy out of it finished before it is
    overwritten), both with non-blocking copies; logits come back into alternating pinned buffers. On the CPU the
    arrays are used as they are. `normalised` turns the decode cache's uint8 NHWC crops into the float32 NCHW model
    input on the device with the exact float32 arithmetic of `data.preprocess.normalize_batch` (a quarter of the
    bytes cross PCIe)."""

    def __init__(self, device):
        import torch

        self.device = torch.device(device)
        self.ring = HostRing(self.device)
        self._staging: dict = {}
        self._constants: dict = {}
        self._outputs: list = [None, None]
        self._output_turn = 0
        self._copied = torch.cuda.Event() if self.device.type == "cuda" else None

    @property
    def on_cuda(self) -> bool:
        return self.device.type == "cuda"

    def host_tensor(self, array: np.ndarray):
        """`array` as a host torch tensor ready for an asynchronous copy: its ring slot's memory when it is one
        (then `mark_read` records when the device has read it), else a copy into the pinned staging buffer (CUDA)
        or the array itself (CPU)."""
        import torch

        slot = self.ring.slot_of(array) if self.on_cuda else None
        if slot is not None:
            return torch.from_numpy(array)  # shares the pinned slot's memory
        source = torch.from_numpy(np.ascontiguousarray(array))
        if not self.on_cuda:
            return source
        staging = self._staging.get(source.dtype)
        if staging is None or staging.numel() < source.numel():
            staging = torch.empty(source.numel(), dtype=source.dtype, pin_memory=True)
            self._staging[source.dtype] = staging
        self._copied.synchronize()  # the previous copy out of the buffer is done before it is overwritten
        view = staging[: source.numel()].view(source.shape)
        view.copy_(source)
        return view

    def mark_read(self, array: np.ndarray) -> None:
        """Record, on the current stream, that the work using `array` (a ring slot or the staging buffer) has been
        queued: the slot or buffer is refilled only once that work has run."""
        if not self.on_cuda:
            return
        slot = self.ring.slot_of(array)
        (slot.event if slot is not None else self._copied).record()

    def upload(self, array: np.ndarray):
        """`array` on the device (asynchronous on CUDA; the host buffer is guarded until the copy has run)."""
        host = self.host_tensor(array)
        if not self.on_cuda:
            return host
        on_device = host.to(self.device, non_blocking=True)
        self.mark_read(array)
        return on_device

    def normalise_on_device(self, pixels, preprocess):
        """uint8 N×H×W×3 device tensor → float32 N×3×H×W: (x - mean) then × float32(1/std), as normalize_batch."""
        import torch

        mean, inverse_std = self._normalisation(preprocess)
        return pixels.permute(0, 3, 1, 2).to(torch.float32).sub_(mean).mul_(inverse_std).contiguous()

    def normalised(self, crops: np.ndarray, preprocess):
        """uint8 N×H×W×3 host crops → float32 N×3×H×W on the device (uploaded, then normalised there)."""
        return self.normalise_on_device(self.upload(crops), preprocess)

    def _normalisation(self, preprocess):
        """(mean, 1/std) as float32 1×3×1×1 device tensors, made once per preprocessing."""
        import torch

        key = mean, std = preprocess.channel_constants()  # in the crops' channel order (BGR reverses them)
        if key not in self._constants:
            values = [[np.float32(m) for m in mean], [np.float32(1.0 / s) for s in std]]
            self._constants[key] = tuple(torch.tensor(v, dtype=torch.float32).view(1, 3, 1, 1).to(self.device)
                                         for v in values)
        return self._constants[key]

    def download(self, tensor):
        """(host tensor, event) for `tensor`: on CUDA an asynchronous copy into one of two alternating pinned
        buffers (read it after `event.synchronize()`, before the download after next), on the CPU the tensor."""
        import torch

        if not self.on_cuda:
            return tensor, None
        turn = self._output_turn
        self._output_turn = 1 - turn
        buffer = self._outputs[turn]
        if buffer is None or buffer.numel() < tensor.numel() or buffer.dtype != tensor.dtype:
            buffer = torch.empty(tensor.numel(), dtype=tensor.dtype, pin_memory=True)
            self._outputs[turn] = buffer
        host = buffer[: tensor.numel()].view(tensor.shape)
        host.copy_(tensor, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return host, event

    def close(self) -> None:
        if self._copied is not None:
            self._copied.synchronize()
            for slot in self.ring.slots:
                if slot.event is not None:
                    slot.event.synchronize()
        self._staging.clear()
        self._constants.clear()
        self._outputs = [None, None]
