"""Where ONNX Runtime writes the calibration's exposed tensors: two slots (one sub-batch being counted while the next
is computed), each holding `rows` images of every tensor, in one memory mapping reused for every run — no
allocation per run, and the memory held is known up front (the sub-batch size is chosen from it).

The mapping asks for transparent huge pages (madvise; Linux's default THP mode honours it): ONNX Runtime writes each
exposed tensor by reordering its blocked NCHWc layout back to NCHW, one channel plane after another, and huge pages
spare those strided writes TLB misses. Measured on EfficientNet-Lite0 on 2 cores (28 MB exposed per image): a few
per cent of the exposed run (9.3 vs 9.8 ms/image); exposing the 60 tensors at all costs ~45 % of a forward pass
(6.4 ms/image), whatever memory receives them. The mapping is private and anonymous for threads of this process,
or a memfd shared with the counting processes (histogram_workers; shared memory gets huge pages only where the
kernel's shmem_enabled allows them).
"""
from __future__ import annotations

import mmap
import os

import numpy as np

SLOTS = 2
_ALIGN = 64


def advise_huge_pages(mapping: mmap.mmap) -> bool:
    """Ask the kernel for transparent huge pages behind `mapping`; False where it cannot (not Linux, THP off)."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None:
        return False
    try:
        mapping.madvise(advice)
    except (OSError, ValueError):
        return False
    return True


class ExposedSlots:
    """`layout`: (name, per-image shape) of every exposed tensor (float32); `fd`: a file descriptor to map (the
    caller sizes nothing: it is truncated to fit), else an anonymous mapping."""

    def __init__(self, layout: list[tuple[str, tuple]], rows: int, fd: int | None = None):
        self.layout, self.rows = [(name, tuple(shape)) for name, shape in layout], int(rows)
        self.offsets, offset = [], 0
        for _, shape in self.layout:
            self.offsets.append(offset)
            nbytes = 4 * self.rows * int(np.prod(shape, dtype=np.int64))
            offset += -(-nbytes // _ALIGN) * _ALIGN
        self.slot_bytes = max(offset, _ALIGN)
        self.size = SLOTS * self.slot_bytes
        if fd is None:  # private: Python's default anonymous mapping is shared memory, which THP leaves alone
            self.buffer = mmap.mmap(-1, self.size, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20))
        else:
            os.ftruncate(fd, self.size)
            self.buffer = mmap.mmap(fd, self.size)
        self.huge_pages = advise_huge_pages(self.buffer)

    def views(self, slot: int, rows: int) -> list[np.ndarray]:
        """The first `rows` rows of every tensor in `slot`, in layout order."""
        base = slot * self.slot_bytes
        return [np.ndarray((rows,) + shape, np.float32, buffer=self.buffer, offset=base + offset)
                for (_, shape), offset in zip(self.layout, self.offsets)]

    def close(self) -> None:
        if self.buffer is not None:
            try:
                self.buffer.close()
            except BufferError:  # a numpy view still points into it: the mapping goes with the last view
                pass
            self.buffer = None


def run_into(session, input_name: str, images: np.ndarray, names: list[str], outputs: list[np.ndarray],
             binding=None) -> None:
    """One ONNX Runtime run of `images` with output `names[k]` written into `outputs[k]` (IO binding; `binding`: an
    io_binding to reuse)."""
    binding = binding or session.io_binding()
    binding.bind_cpu_input(input_name, np.ascontiguousarray(images))
    for name, out in zip(names, outputs):
        binding.bind_output(name, "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
    if names:
        session.run_with_iobinding(binding)


__all__ = ["ExposedSlots", "SLOTS", "advise_huge_pages", "run_into"]
