"""Calibration statistics on torch: the FP32 graph runs through the torch backend's converter (backends.gpu) on a
CUDA GPU — or on the CPU, which is how the tests check this path — and the histograms are counted on the device.

The histograms are histogram.TensorHistogram's: the same range rule (the first calibration batch's max |x|, from
per-image maxima — one device→host copy per forward for all tensors), the same growth and merge decisions (taken
on the host), the same float32 multiplier, truncation and upper-edge rule (torch: abs → × float32 s → int64 →
clamp to the batch's last bin → bincount). Given the same tensors, the counts equal numpy's to the count
(tests/test_calibration_speed.py); the tensors themselves differ from ONNX Runtime's by float summation order, as any
two implementations of the same graph do.

Images per forward: on a GPU whole calibration batches, as many as make up FORWARD_IMAGES (64; fewer where
the calibration set is smaller or their exposed tensors do not fit a share of the free GPU memory), because one
calibration batch (8 by default) leaves the GPU waiting on kernel launches (issue 38: at 8 images the demo model's
forward is 1 ms of launches for 61 tensors of counts). The histograms do not depend on that grouping: the range
is the first calibration batch's max |x| (per-image maxima), growth reaches the same last bin whatever the order,
and a count made before a merge equals one made after it (trunc(y/2) = trunc(trunc(y)/2), the multiplier halves
exactly). The activations do, by float summation order only (a convolution library may choose its algorithm by
batch size), as they do between devices — the statistics' key holds neither; `CalibrationStats.counting` says the
images per forward. Where not even one calibration batch fits, smaller forwards run (then the first batch's maxima
take a first pass, as on the CPU). On the CPU (device 'torch-cpu', the check of this path) the host budget's
sub-batch — there torch's convolutions do sum differently by batch size (demo model, 24 images, 1 vs 8 images per
forward: 16 of 61 entropy thresholds differ), so 'torch-cpu' statistics follow the budget through the
activations, never through the histogram.
"""
from __future__ import annotations

import math

import numpy as np

from trtlab.quantization.histogram import MAX_HISTOGRAM_BINS, TensorHistogram, _non_finite, start_ranges

# Where one forward holds the first calibration batch, the streamed pass (statistics_stream) runs; False: the loop
# below everywhere (what the bench compares it with; the histograms are the same).
STREAMED = True
# Exposed activations held on the GPU per forward (several sub-batches at once), at most this share of free memory.
GPU_MEMORY_SHARE = 0.25
GPU_MEMORY_CAP = 4 * 2**30
# Images per GPU forward the pass aims at, in whole calibration batches (module docstring).
FORWARD_IMAGES = 64


class TorchHistogram:
    """A TensorHistogram whose counts live on a torch device. `state` carries the scalar state (bins, width,
    multiplier, range, absmax, values) and is updated by TensorHistogram's own methods; its numpy counts stay zero
    and only keep the bin count in step (merges and growth are applied to both)."""

    def __init__(self, device, bins: int, max_bins: int = MAX_HISTOGRAM_BINS):
        import torch

        self.state = TensorHistogram(bins=bins, max_bins=max_bins)
        self.counts = torch.zeros(bins, dtype=torch.int64, device=device)
        self.device = device

    def update(self, values) -> None:
        """One batch: a tensor of any shape whose first dimension is images."""
        values = values.reshape(len(values), -1) if values.dim() > 1 else values.reshape(1, -1)
        tops = values.abs().amax(dim=1).double().cpu().numpy()
        self.update_slices(values, [(0, len(values))], [float(tops.max())])

    def update_slices(self, rows, bounds: list[tuple[int, int]], tops: list[float]) -> None:
        """Update with rows[start:stop] for each (start, stop) in `bounds`, in order, as separate batches whose
        max |x| are `tops` (rows: images × values)."""
        state = self.state
        group, caps = [], []  # consecutive batches counted at one multiplier: one set of kernels
        for (start, stop), top in zip(bounds, tops):
            if stop <= start:
                continue
            if not math.isfinite(top):
                raise _non_finite()
            size = (stop - start) * rows.shape[1]
            if not state.scale:
                if top == 0.0:
                    self.counts[0] += size
                    state.values += size
                    continue
                state.start(top)
            merges, bins = state.plan(top)
            if merges:
                self._count(rows, group, caps)
                group, caps = [], []
                self._merge(merges)
            self._grow(bins)
            group.append((start, stop))
            caps.append(bins - 1)  # an index at or past this batch's upper edge goes to its last bin
            state.absmax = max(state.absmax, float(top))
            state.values += size
        self._count(rows, group, caps)

    def _count(self, rows, group, caps) -> None:
        import torch

        if not group:
            return
        start, stop = group[0][0], group[-1][1]
        scale = torch.tensor(np.float32(self.state.scale), dtype=torch.float32, device=rows.device)
        index = rows[start:stop].abs().mul_(scale).to(torch.int64)
        if len(set(caps)) == 1:
            index.clamp_(max=caps[0])
        else:
            per_row = np.repeat(np.asarray(caps, np.int64), [b - a for a, b in group])
            index = torch.minimum(index, torch.from_numpy(per_row).to(rows.device)[:, None])
        self.counts += torch.bincount(index.reshape(-1), minlength=len(self.counts))[:len(self.counts)]

    def _merge(self, times: int) -> None:
        import torch

        for _ in range(times):
            counts = self.counts
            if len(counts) % 2:
                counts = torch.cat([counts, counts.new_zeros(1)])
            self.counts = counts.view(-1, 2).sum(dim=1)
        self.state.merge(times)

    def _grow(self, bins: int) -> None:
        import torch

        if bins > len(self.counts):
            self.counts = torch.cat([self.counts, self.counts.new_zeros(bins - len(self.counts))])
        self.state.grow(bins)

    def to_numpy(self) -> TensorHistogram:
        state = self.state.state()
        state["counts"] = self.counts.cpu().numpy().astype(np.int64)
        return TensorHistogram.from_state(state)


def whole_batch_rows(batch: int, images: int) -> int:
    """Images per GPU forward before the memory check: whole calibration batches of `batch` up to FORWARD_IMAGES,
    no more batches than `images` make, at least one."""
    return batch * max(1, min(FORWARD_IMAGES // batch, -(-images // batch)))


def _forward_rows(device, job) -> int:
    """Images per forward (module docstring): the fixed batch; on the CPU one sub-batch; on a GPU whole calibration
    batches up to FORWARD_IMAGES (no more than the images), as many as fit a share of the free GPU memory — fewer
    images than one calibration batch only where not even that fits."""
    import torch

    if job.fixed_batch:
        return job.fixed_batch
    if device.type != "cuda":
        return job.sub_batch
    batch = job.first_images
    wanted = whole_batch_rows(batch, len(job.indices))
    if not job.per_image:
        return wanted
    free, _ = torch.cuda.mem_get_info(device)
    fit = int(min(GPU_MEMORY_SHARE * free, GPU_MEMORY_CAP) // job.per_image)
    if fit >= batch:
        return min(wanted, fit - fit % batch)
    return max(1, fit)


def collect_on_torch(job, device: str):
    """(name → TensorHistogram, peak bytes of exposed activations per forward, how) for the statistics pass `job`
    (statistics.CalibrationPass) on torch `device` — see the module docstring."""
    import torch

    from trtlab.backends.gpu.feed import CropFeed
    from trtlab.backends.gpu.runner import device_name, pin_numerics, restore_numerics
    from trtlab.core.progress import progress_bar
    from trtlab.data.batches import iter_batches

    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        from trtlab.core.errors import UserError

        raise UserError(f"calibration on {device} was asked for but torch sees no CUDA GPU",
                        "calibrate on the CPU (device='cpu' or TRTLAB_CALIBRATION_DEVICE=cpu)")
    module = _exposing_module(job).to(device).eval()
    rows = _forward_rows(device, job)
    # One forward holds the first calibration batch: streamed (issue 38). With nothing to count there is nothing to
    # stream either (a pass for the images' count alone).
    if STREAMED and job.names and -(-job.first_images // rows) == 1:
        return _collect_streamed(job, device, module, rows)
    histograms = {name: TorchHistogram(device, job.bins) for name in job.names}
    feed = CropFeed(device)
    saved = pin_numerics()

    def forwards(indices, desc):
        """(real rows, [images × values per tensor], per-image max |x| per tensor (host)) per forward."""
        bar = progress_bar(total=len(indices), desc=desc, unit="img", enabled=job.progress)
        for batch in iter_batches(job.cache, indices, rows, fixed_batch=job.fixed_batch, prefetch=True, crops=True):
            count = batch.count
            images = feed.normalised(batch.images, job.cache.preprocess)
            outputs = module(images)
            tensors = [outputs[p][:count].reshape(count, -1) for p in module.exposed_positions]
            tensors += [images[:count].reshape(count, -1)] * len(job.input_tensors)
            tops = torch.stack([t.abs().amax(dim=1) for t in tensors]).double().cpu().numpy() if tensors else []
            del outputs, images
            yield count, tensors, tops
            bar.update(count)
        bar.close()

    first_forwards = -(-job.first_images // rows)
    range_from_first_forward = first_forwards == 1
    try:
        with torch.inference_mode():
            if first_forwards > 1:  # the first calibration batch spans several forwards: their maxima first
                tops = dict.fromkeys(job.names, 0.0)
                for _, tensors, per_image in forwards(job.indices[:job.first_images],
                                                      "calibrate (range of the first batch)"):
                    for name, image_tops in zip(job.names, per_image):
                        tops[name] = float(np.max([tops[name], *image_tops]))  # NaN stays NaN: refused at start
                    del tensors
                start_ranges(histograms, tops)
            for count, tensors, per_image in forwards(job.indices, "calibrate (collect stats)"):
                if range_from_first_forward:  # this forward holds the whole first calibration batch
                    start_ranges(histograms, {name: float(np.max(image_tops[:job.first_images]))
                                              for name, image_tops in zip(job.names, per_image)})
                    range_from_first_forward = False
                for name, values, image_tops in zip(job.names, tensors, per_image):
                    histogram = histograms[name]
                    if not histogram.state.scale:  # zero on every image so far: the first non-zero one starts it
                        histogram.state.start_at_first_nonzero(image_tops)
                    histogram.update_slices(values, [(0, count)], [float(np.max(image_tops))])
                del tensors
    finally:
        restore_numerics(saved)
        feed.close()
        del module
        if device.type == "cuda":
            torch.cuda.empty_cache()  # give the memory back to the evaluation that follows (other processes too)
    how = f"torch on {device_name(device)}, {rows} images per forward"
    if first_forwards > 1:
        how += f"; bin widths from a first pass over the first {job.first_images} images"
    peak = rows * job.per_image if job.per_image else 0
    return {name: h.to_numpy() for name, h in histograms.items()}, peak, how


def _collect_streamed(job, device, module, rows: int):
    """statistics_stream's pass (forwards captured and counted beside the next one), numerics pinned and torch's
    CPU threads held on CUDA as for an evaluation."""
    import torch

    from trtlab.backends.gpu.runner import GPU_HOST_THREADS, device_name, hold_host_threads, pin_numerics, \
        restore_numerics
    from trtlab.quantization.statistics_stream import collect_streamed

    saved = pin_numerics()
    threads = hold_host_threads(GPU_HOST_THREADS) if device.type == "cuda" else None
    try:
        histograms, how = collect_streamed(job, device, module, rows)
    finally:
        restore_numerics(saved)
        if threads is not None:
            torch.set_num_threads(threads)
        del module
        if device.type == "cuda":
            torch.cuda.empty_cache()  # give the memory back to the evaluation that follows (other processes too)
    peak = rows * job.per_image if job.per_image else 0
    return (dict(zip(job.names, histograms)), peak,
            f"torch on {device_name(device)}, {rows} images per forward; {how}")


def _exposing_module(job):
    """The FP32 graph as a torch module with every requested tensor an output (`exposed_positions`: where each one
    is among the module's outputs)."""
    from trtlab.backends.gpu.graph_module import convert_onnx
    from trtlab.graph.onnx_utils import with_outputs

    existing = {o.name for o in job.model.graph.output}
    module = convert_onnx(with_outputs(job.model, [n for n in job.requested if n not in existing]))
    module.exposed_positions = [module.output_names.index(name) for name in job.requested]
    return module
