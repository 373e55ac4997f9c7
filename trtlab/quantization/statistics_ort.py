"""Calibration statistics on the CPU: ONNX Runtime runs the FP32 graph with every tensor to quantize exposed as an
output, and the histograms are counted while it computes the next sub-batch.

Where the time goes (EfficientNet-Lite0, 60 tensors, 6.9 M values = 28 MB per image, 2 cores): the forward pass
(5.9 ms/image); exposing the tensors (ONNX Runtime reorders each out of its blocked NCHWc layout: 8.3 ms/image in
all); counting 6.9 M values per image, overlapped with the next sub-batch (11.3 ms/image in all). Counting is the
compiled loop (native_counting: one pass, GIL released) in one thread per core; without a C compiler numpy counts,
in worker processes for large calibrations (histogram_workers), since numpy holds the GIL between its steps.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from trtlab.data.decode_cache import default_workers as cores
from trtlab.quantization.exposed_slots import ExposedSlots, run_into
from trtlab.quantization.native_counting import native_counter
from trtlab.quantization.statistics import TensorHistogram

log = logging.getLogger(__name__)

COUNTING = ("auto", "processes", "threads")
# Below this many activation values in all (images × values per image) worker processes cost more to start than
# they save; EfficientNet-Lite0 exposes 6.9 M values per image, so from ~70 images on. (numpy counting only.)
PROCESS_COUNTING_MIN_VALUES = 500_000_000


def counting_mode(counting: str | None, shapes, values: int) -> str:
    """'processes' or 'threads' (see collect_statistics). With the compiled counter threads count without the GIL
    and 'auto' is threads; numpy holds the GIL between its steps, so large numpy calibrations count in processes."""
    requested = counting or os.environ.get("TRTLAB_CALIBRATION_COUNTING") or "auto"
    if requested not in COUNTING:
        from trtlab.core.errors import UserValueError

        raise UserValueError(f"counting={requested!r} is not one of {', '.join(COUNTING)}",
                             "use 'processes' (every core), 'threads' or 'auto'")
    from trtlab.quantization.histogram_workers import processes_available

    possible = shapes is not None and processes_available()
    if requested == "processes" and not possible:
        log.info("histogram counting in threads: %s", "exposed tensor shapes unknown" if shapes is None else
                 "no anonymous shared memory (os.memfd_create) here")
    if requested == "auto":
        if native_counter() is not None:
            return "threads"
        return "processes" if possible and cores() > 1 and values >= PROCESS_COUNTING_MIN_VALUES else "threads"
    return "processes" if requested == "processes" and possible else "threads"


def collect_on_ort(model, info, requested, input_tensors, shapes, per_tensor, cache, indices, sub_batch, threads,
                   bins, progress, counting):
    """(histograms by name, peak bytes held, how they were counted) for `requested` (exposed) and `input_tensors`
    (graph inputs, counted from the batches)."""
    from trtlab.core.ort_session import ort_session
    from trtlab.data.batches import iter_batches
    from trtlab.graph.onnx_utils import with_outputs

    existing_outputs = {o.name for o in model.graph.output}
    # ONNX Runtime's idle intra-op threads spin by default; here they would take the cores from the histogram
    # counting that runs while the next sub-batch is computed.
    session = ort_session(with_outputs(model, [n for n in requested if n not in existing_outputs]), threads=threads,
                          spinning=False)
    per_image_values = (sum(per_tensor) // 4 if per_tensor else 0) + int(np.prod(info.input_shape[1:]))
    mode = counting_mode(counting, shapes, len(indices) * per_image_values)
    native = native_counter() is not None
    batches = iter_batches(cache, indices, sub_batch, fixed_batch=info.fixed_batch, prefetch=True)
    histograms = {name: TensorHistogram(bins=bins) for name in requested + input_tensors}
    workers = cores()
    if mode == "processes":
        from trtlab.quantization.histogram_workers import count_in_processes

        peak = count_in_processes(session, info.input_name, requested, shapes, input_tensors, histograms, batches,
                                  sub_batch, len(indices), progress, workers)
        return histograms, peak, f"ONNX Runtime, {workers} counting processes (numpy)"
    workers = workers if native else max(1, min(4, workers))
    runner = SubBatchRunner(session, info.input_name, requested, shapes, max(sub_batch, info.fixed_batch or 0))
    try:
        peak = _count_in_threads(runner, histograms, requested, input_tensors, per_tensor, batches, len(indices),
                                 progress, workers)
    finally:
        runner.close()
    return histograms, peak, f"ONNX Runtime, {workers} counting threads ({'compiled counter' if native else 'numpy'})"


class SubBatchRunner:
    """One ONNX Runtime run of a batch; only the real rows (`batch.count`) of each output are kept.

    Where the exposed shapes are known, the outputs are written into the two slots of an ExposedSlots in turn (IO
    binding): one is counted while the next run fills the other."""

    def __init__(self, session, input_name: str, requested: list[str], shapes: list[tuple] | None = None,
                 rows: int = 0):
        self.session, self.input_name, self.requested = session, input_name, requested
        self.turn = 0
        self.slots = ExposedSlots(list(zip(requested, shapes)), rows) if shapes is not None and requested else None

    def __call__(self, batch):
        if not self.requested:
            return batch, []
        if self.slots is None:
            outputs = self.session.run(self.requested, {self.input_name: batch.images})
        else:
            outputs = self.slots.views(self.turn, len(batch.images))
            self.turn = 1 - self.turn
            run_into(self.session, self.input_name, batch.images, self.requested, outputs)
        return batch, [o[:batch.count] for o in outputs]

    def close(self) -> None:
        if self.slots is not None:
            self.slots.close()


def _count_in_threads(run, stats: dict, requested: list[str], input_tensors: list[str], per_tensor, batches,
                      total: int, progress: bool, workers: int) -> int:
    """Histogram every batch's outputs while ONNX Runtime computes the next batch; returns the peak bytes held.

    The next sub-batch runs in ONNX Runtime (which releases the GIL) while this one's histograms are updated by
    `workers` threads (the compiled counter releases the GIL for a whole tensor; numpy's steps release it, the
    Python between them does not)."""
    from trtlab.core.progress import progress_bar
    from trtlab.data.batches import read_ahead

    def count(outputs, k):
        stats[requested[k]].update(outputs[k])
        outputs[k] = None  # drop the view once counted: fresh arrays (no slots) are freed as they go

    order = sorted(range(len(requested)), key=lambda k: -(per_tensor[k] if per_tensor else 0))
    bar = progress_bar(total=total, desc="calibrate (collect stats)", unit="img", enabled=progress)
    peak = 0
    with ThreadPoolExecutor(workers) as counters:
        for batch, outputs in read_ahead(batches, run):
            peak = max(peak, 2 * (sum(o.nbytes for o in outputs) + batch.images.nbytes))
            list(counters.map(lambda k: count(outputs, k), order))  # largest tensors first: even load
            for name in input_tensors:
                stats[name].update(batch.images[:batch.count])
            bar.update(batch.count)
            del outputs, batch
    bar.close()
    return peak


__all__ = ["COUNTING", "SubBatchRunner", "collect_on_ort", "counting_mode", "cores"]
