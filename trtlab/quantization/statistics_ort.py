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
from trtlab.quantization.histogram import (TensorHistogram, counter_label, counter_name, cpu_counter,
                                          start_ranges)

NUMPY_THREADS = 2  # numpy holds the GIL between its steps: a second thread overlaps them, more only contend


def collect_on_ort(job, threads, counting):
    """(histograms by name, peak bytes held, how they were counted) for the statistics pass `job`
    (statistics.CalibrationPass): `threads` ONNX Runtime intra-op threads, `counting` the counter's name
    (histogram.cpu_counter)."""
    from trtlab.data.batches import iter_batches
    from trtlab.quantization.exposure_ort import ExposedRunner

    wanted = counter_name(counting)
    numba_expected = wanted != "numpy" and importlib.util.find_spec("numba") is not None
    with ThreadPoolExecutor(1) as warming:
        # numba's import and cached-code load take 0.5-0.8 s of Python (measured): they run beside the session
        # building and the first sub-batches, which numpy counts meanwhile (the same counts), instead of in front
        loading = warming.submit(_ready_counter, wanted) if wanted != "numpy" else None
        run = ExposedRunner(job.model, job.input_name, job.requested, threads, job.fixed_batch or 0)
        histograms = {name: TensorHistogram(bins=job.bins) for name in job.names}
        first_runs = -(-job.first_images // job.sub_batch)
        if first_runs > 1:  # the first calibration batch spans several runs: their maxima first, nothing held
            start_ranges(histograms, _first_batch_tops(run, job))
        batches = iter_batches(job.cache, job.indices, job.sub_batch, fixed_batch=job.fixed_batch, prefetch=True)
        workers = cores() if numba_expected else max(1, min(NUMPY_THREADS, cores()))
        peak, by_numpy = _count_in_threads(run, histograms, job, batches, workers, loading)
        counter = loading.result() if loading is not None else None
    how = counter_label(counter)
    if counter is not None and by_numpy:
        first = "the first sub-batch" if by_numpy == 1 else f"the first {by_numpy} sub-batches"
        how += f"; numpy counted {first} while numba loaded"
    if first_runs > 1:
        how += f"; bin widths from a first pass over the first {job.first_images} images ({first_runs} runs)"
    return histograms, peak, f"{run.describe()}, {workers} counting threads ({how})"


def row_tops(values: np.ndarray) -> np.ndarray:
    """max |x| of each image (first dimension) of `values`, float64."""
    flat = values.reshape(len(values), -1)
    if flat.shape[1] == 0:
        return np.zeros(len(values))
    return np.maximum(flat.max(axis=1), -flat.min(axis=1)).astype(np.float64)


def _first_batch_tops(run, job) -> dict[str, float]:
    """Each tensor's max |x| over the first calibration batch, run in the sub-batches that fit the budget (only
    their maxima are kept): what sets the bin widths when one run cannot hold the whole first batch."""
    from trtlab.core.progress import progress_bar
    from trtlab.data.batches import iter_batches, read_ahead

    tops = dict.fromkeys(job.names, 0.0)
    first = job.indices[:job.first_images]
    bar = progress_bar(total=len(first), desc="calibrate (range of the first batch)", unit="img",
                       enabled=job.progress)
    for batch, outputs in read_ahead(iter_batches(job.cache, first, job.sub_batch, fixed_batch=job.fixed_batch,
                                                  prefetch=True), run):
        values = [v for v, _ in outputs] + [batch.images[:batch.count]] * len(job.input_tensors)
        for name, v in zip(job.names, values):
            tops[name] = float(np.max([tops[name], *row_tops(v)]))  # NaN stays NaN: refused at start
        bar.update(batch.count)
        del outputs, values, batch
    bar.close()
    return tops


def _ready_counter(name: str):
    """The counter, its machine code loaded (numba's first call in a process takes a few tenths of a second)."""
    counter = cpu_counter(name)
    if counter is not None:
        counter.count(np.zeros(4, np.float32), 1.0, 2)
    return counter


def _count_in_threads(run, stats: dict, job, batches, workers: int, loading) -> tuple[int, int]:
    """Histogram every batch's outputs while ONNX Runtime computes the next batch; returns (the peak bytes held, how
    many sub-batches numpy counted while `loading`, the future of numba's counter, was not ready).

    The next sub-batch runs in ONNX Runtime (which releases the GIL) while this one's histograms are updated by
    `workers` threads (numba's counter releases the GIL for a whole tensor; numpy's steps release it, the Python
    between them does not). Each output is dropped once counted, so the memory held falls as counting goes on.
    Histograms not started yet (the first calibration batch fits the first run) are started from the first
    `job.first_images` rows of the first run before anything is counted."""
    from trtlab.core.progress import progress_bar
    from trtlab.data.batches import read_ahead

    def first_top(outputs, k):
        values = outputs[k][0][:job.first_images]
        return float(row_tops(values).max()) if len(values) else 0.0

    def count(outputs, k, counter):
        values, padding_zeros = outputs[k]
        histogram = stats[names[k]]
        if not histogram.scale:  # zero on every image so far: the first image where it is not sets the range
            histogram.start_at_first_nonzero(row_tops(values))
        histogram.update(values, counter, padding_zeros)
        outputs[k] = None

    names = job.names  # graph inputs are counted from the batch, in the same pool
    per_tensor = job.per_tensor
    order = sorted(range(len(job.requested)), key=lambda k: -(per_tensor[k] if per_tensor else 0))
    order += range(len(job.requested), len(names))
    bar = progress_bar(total=len(job.indices), desc="calibrate (collect stats)", unit="img", enabled=job.progress)
    peak = by_numpy = 0
    started = job.sub_batch < job.first_images  # then _first_batch_tops has started them
    with ThreadPoolExecutor(workers) as counters:
        for batch, outputs in read_ahead(batches, run):
            peak = max(peak, 2 * (sum(o.nbytes for o, _ in outputs) + batch.images.nbytes))
            outputs += [(batch.images[:batch.count], 0)] * len(job.input_tensors)
            if not started:  # this run holds the whole first calibration batch: its maxima set the bin widths
                start_ranges(stats, dict(zip(names, counters.map(lambda k: first_top(outputs, k), range(len(names))))))
                started = True
            counter = loading.result() if loading is not None and loading.done() else None
            by_numpy += loading is not None and counter is None
            list(counters.map(lambda k: count(outputs, k, counter), order))  # largest tensors first: even load
            bar.update(batch.count)
            del outputs, batch
    bar.close()
    return peak, by_numpy


__all__ = ["collect_on_ort", "cores", "row_tops"]
