"""Calibration statistics on the CPU: ONNX Runtime runs the FP32 graph with every tensor to quantize exposed as an
output, and the histograms are counted while it computes the next sub-batch.

Where the time goes (EfficientNet-Lite0, 60 tensors, 6.9 M values = 28 MB per image, 2 cores): the forward pass;
exposing the tensors (read in ONNX Runtime's own blocked layout, exposure_ort, which spares the reorder copies);
counting 6.9 M values per image, overlapped with the next sub-batch. Counting is numba's loop (histogram_numba, the
GIL released) in one thread per core; without numba, numpy in a few threads (it holds the GIL between its steps, so
more threads would not help) — the same counts either way, so numpy also counts the first sub-batches while numba
loads (0.5-0.8 s of Python on its first use in a process) instead of the run waiting for it.
"""
from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from trtlab.data.decode_cache import default_workers as cores
from trtlab.quantization.histogram import TensorHistogram, counter_label, counter_name, cpu_counter

NUMPY_THREADS = 2  # numpy holds the GIL between its steps: a second thread overlaps them, more only contend


def collect_on_ort(model, info, requested, input_tensors, per_tensor, cache, indices, sub_batch, threads, bins,
                   progress, counting):
    """(histograms by name, peak bytes held, how they were counted) for `requested` (exposed) and `input_tensors`
    (graph inputs, counted from the batches). `counting`: the counter's name (histogram.cpu_counter)."""
    from trtlab.data.batches import iter_batches
    from trtlab.quantization.exposure_ort import ExposedRunner

    wanted = counter_name(counting)
    numba_expected = wanted != "numpy" and importlib.util.find_spec("numba") is not None
    with ThreadPoolExecutor(1) as warming:
        # numba's import and cached-code load take 0.5-0.8 s of Python (measured): they run beside the session
        # building and the first sub-batches, which numpy counts meanwhile (the same counts), instead of in front
        loading = warming.submit(_ready_counter, wanted) if wanted != "numpy" else None
        run = ExposedRunner(model, info.input_name, requested, threads, info.fixed_batch or 0)
        batches = iter_batches(cache, indices, sub_batch, fixed_batch=info.fixed_batch, prefetch=True)
        histograms = {name: TensorHistogram(bins=bins) for name in requested + input_tensors}
        workers = cores() if numba_expected else max(1, min(NUMPY_THREADS, cores()))
        peak, by_numpy = _count_in_threads(run, histograms, requested, input_tensors, per_tensor, batches,
                                           len(indices), progress, workers, loading)
        counter = loading.result() if loading is not None else None
    how = counter_label(counter)
    if counter is not None and by_numpy:
        first = "the first sub-batch" if by_numpy == 1 else f"the first {by_numpy} sub-batches"
        how += f"; numpy counted {first} while numba loaded"
    return histograms, peak, f"{run.describe()}, {workers} counting threads ({how})"


def _ready_counter(name: str):
    """The counter, its machine code loaded (numba's first call in a process takes a few tenths of a second)."""
    counter = cpu_counter(name)
    if counter is not None:
        counter.count(np.zeros(4, np.float32), 1.0, 2)
    return counter


def _count_in_threads(run, stats: dict, requested: list[str], input_tensors: list[str], per_tensor, batches,
                      total: int, progress: bool, workers: int, loading) -> tuple[int, int]:
    """Histogram every batch's outputs while ONNX Runtime computes the next batch; returns (the peak bytes held, how
    many sub-batches numpy counted while `loading`, the future of numba's counter, was not ready).

    The next sub-batch runs in ONNX Runtime (which releases the GIL) while this one's histograms are updated by
    `workers` threads (numba's counter releases the GIL for a whole tensor; numpy's steps release it, the Python
    between them does not). Each output is dropped once counted, so the memory held falls as counting goes on."""
    from trtlab.core.progress import progress_bar
    from trtlab.data.batches import read_ahead

    def count(outputs, k, counter):
        values, padding_zeros = outputs[k]
        stats[names[k]].update(values, counter, padding_zeros)
        outputs[k] = None

    names = requested + input_tensors  # graph inputs are counted from the batch, in the same pool
    order = sorted(range(len(requested)), key=lambda k: -(per_tensor[k] if per_tensor else 0))
    order += range(len(requested), len(names))
    bar = progress_bar(total=total, desc="calibrate (collect stats)", unit="img", enabled=progress)
    peak = by_numpy = 0
    with ThreadPoolExecutor(workers) as counters:
        for batch, outputs in read_ahead(batches, run):
            peak = max(peak, 2 * (sum(o.nbytes for o, _ in outputs) + batch.images.nbytes))
            outputs += [(batch.images[:batch.count], 0)] * len(input_tensors)
            counter = loading.result() if loading is not None and loading.done() else None
            by_numpy += loading is not None and counter is None
            list(counters.map(lambda k: count(outputs, k, counter), order))  # largest tensors first: even load
            bar.update(batch.count)
            del outputs, batch
    bar.close()
    return peak, by_numpy


__all__ = ["collect_on_ort", "cores"]
