"""Calibration statistics on a GPU at forward speed (issue 38 item 6): statistics_torch's pass, streamed.

The histograms, their range rule and their counts are statistics_torch's and histogram.TensorHistogram's, count for
count; what changes is how the work reaches the GPU:
- the exposing forward (normalisation, the FP32 graph, every exposed tensor's |x| and per-image max |x|) is one
  CUDA graph replay per forward of several calibration batches (statistics_torch.FORWARD_IMAGES) (backends.gpu.capture; checked bit for bit against the eager run), in two slots of
  their own outputs, so batch k+1 runs while batch k is counted;
- the counting is free of host synchronisation (a histogram's counts live in a fixed-capacity device store; its
  multiplier and last bin are device scalars the host updates only when a batch grows or merges the histogram;
  values are counted by `torch.histc` with its range fixed, where `bincount` would read the max back to the host
  twice per tensor), runs on a stream of its own beside the next forward, and is itself one replay per batch once
  captured (checked against the eager count of the same batch before it is kept);
- the host reads back only the per-image maxima (one small copy per batch), decides growth and merges on them as
  TensorHistogram decides, and queues the count.
A forward shorter than the others (the last one) is padded for the forward and counted eagerly on its real
rows. It runs where one forward holds the whole first calibration batch (statistics_torch picks it then); the CPU
runs it without streams or graphs (how the tests compare it with statistics_torch's own loop).

How a batch is added to the store, $TRTLAB_GPU_COUNT (the same counts every way, tests/test_gpu_count.py; the
times are bench/bench_gpu_count.py's on the H200, README):
- 'histc' (default): `torch.histc` (a per-block shared-memory histogram on CUDA, not one global atomic per value)
  over bins 1 … capacity-1 into a float64 store (exact below 2**53), zeros left out: bin 0 is worked out as the
  values counted (a device scalar) less the rest, only when the counts are merged or read. On CUDA the bins are
  int32 (histc's bin is then integer arithmetic, its counts exact below 2**31: one call per tensor, so histc sizes
  its grid for the whole tensor); elsewhere float32 in calls of fewer than 2**24 values. No clamp to the last bin:
  the batch's max |x| is the largest value and `prepare` grows the bins up to its bin (a value past them would be a
  bug: `to_numpy` refuses it). The count depends on the capacity (a power of two ≥ the bins, at least
  HISTC_MIN_CAPACITY): a captured count is captured again when it doubles (`capture_key`). Five kernels per tensor
  (|x| is the forward's, kept for its max);
- 'spread': every value's bin index, one `index_add_` of ones, a value whose bin is 0 added to one of
  `SPREAD_SLOTS` slots after the store's `max_bins` bins, picked by its position, so the exact zeros of ReLU/ReLU6
  outputs (often half a tensor) do not all hit one atomic counter; the slots are folded into bin 0 (`_fold`)
  before the counts are merged or read;
- 'index_add': every value's bin index, one `index_add_` of ones (one global atomic per value: 6.6× histc's time
  on the demo model's activations, 3.2× the whole calibration's).
"""
from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from trtlab.core.errors import UserValueError
from trtlab.quantization.histogram import MAX_HISTOGRAM_BINS, TensorHistogram, _non_finite, start_ranges

COUNT_VARIABLE = "TRTLAB_GPU_COUNT"
COUNT_MODES = ("histc", "spread", "index_add")  # the first is the default
# histc's smallest capacity: 8,191 float32 counters (32 KB of shared memory per block) hold most histograms whole,
# so a count is rarely captured again (from 2,048, nine captures in a 1,000-image pass on the H200)
HISTC_MIN_CAPACITY = 8192
# float32 counts are exact below 2**24: histc is called on parts of fewer values
HISTC_PART = (1 << 24) - 1
# int32 bins (CUDA): exact counts below 2**31 per call, so a whole tensor per call — and histc sizes its grid by the
# values per call (ATen's CUDA_tensor_histogram: about √(8·N/bins) blocks below one per SM), so 16.7 M-value parts
# ran on ~130 blocks of an H200's 132 SMs, 40 G values/s (issue 38)
HISTC_INT_PART = (1 << 31) - 1
# 'auto': int32 bins where torch.histc takes them (CUDA: ATen computes an integer input's bin in integer arithmetic,
# (k − 1)·(c − 1) / (c − 1) = k − 1 exactly); False: float32 bins everywhere (the CPU's only way; the bench's
# comparison)
HISTC_INTEGER = "auto"
# Whether a slot's whole count is captured as a CUDA graph (False: counted by eager launches; the bench compares)
CAPTURE_COUNT = True
# Slots bin 0 is spread over: a warp's 32 neighbouring zeros hit 32 counters; 8 KB of int64 per histogram.
SPREAD_SLOTS = 1024


def count_mode(name: str | None = None) -> str:
    """The store count `name` asks for (None: $TRTLAB_GPU_COUNT, else 'histc'), checked before any work: an
    unknown name is one line."""
    requested = (name or os.environ.get(COUNT_VARIABLE) or COUNT_MODES[0]).strip().lower()
    if requested not in COUNT_MODES:
        raise UserValueError(f"GPU histogram count {requested!r} ({COUNT_VARIABLE}) is not one of "
                             f"{', '.join(COUNT_MODES)}", f"set {COUNT_VARIABLE} to 'histc' (the default), "
                             f"'spread' or 'index_add', or unset it")
    return requested


class StoredHistogram:
    """A TensorHistogram whose counts live in a device store of `max_bins` counters (its first `state.bins` are the
    histogram; int64, float64 for 'histc'), counted at the device scalars `scale` (float32) and `cap` (the last bin;
    'histc' needs none). `mode` (None: $TRTLAB_GPU_COUNT): how `count` adds a batch (module docstring); 'spread'
    appends `slots` int64 to the store, extra counts of bin 0 until `_fold`; 'histc' keeps `seen`, the values
    counted, for bin 0."""

    def __init__(self, device, bins: int, max_bins: int = MAX_HISTOGRAM_BINS, mode: str | None = None,
                 slots: int = SPREAD_SLOTS):
        import torch

        self.mode = count_mode(mode)
        self.slots = slots if self.mode == "spread" else 0
        self.state = TensorHistogram(bins=bins, max_bins=max_bins)
        histc = self.mode == "histc"
        self.store = torch.zeros(max_bins + self.slots, dtype=torch.float64 if histc else torch.int64, device=device)
        self.seen = torch.zeros((), dtype=torch.float64, device=device)  # histc: values counted (bin 0 = the rest)
        self.scale = torch.zeros((), dtype=torch.float32, device=device)
        self.cap = torch.full((), bins - 1, dtype=torch.int64, device=device)
        self.one = torch.ones(1, dtype=torch.int64, device=device)
        # each slot's index in the store (the cap keeps every real bin below max_bins, so they never meet)
        self.slot_index = torch.arange(max_bins, max_bins + self.slots, dtype=torch.int64, device=device)
        self._scale_value, self._cap_value = 0.0, bins - 1
        self.integer = histc and _histc_takes_integers(self.store.device)  # CUDA: int32 bins

    def prepare(self, size: int, top: float) -> None:
        """TensorHistogram's decisions for one batch of `size` values whose max |x| is `top` (start, merges, growth,
        max, count of values), applied to the device scalars and store; `count` then counts the batch. A histogram
        not started (zero so far) counts at multiplier 0: every value (all zero) into bin 0, as TensorHistogram."""
        state = self.state
        if not math.isfinite(top):
            raise _non_finite()
        if not state.scale:
            if top == 0.0:
                state.values += size
                return
            state.start(top)
        merges, bins = state.plan(top)
        if merges:
            self._merge(merges)
        if bins > state.bins:
            state.grow(bins)
        state.absmax = max(state.absmax, float(top))
        state.values += size
        self.sync()

    def sync(self) -> None:
        """The device scalars from the state (after start_ranges / start_at_first_nonzero / prepare)."""
        if self.state.scale != self._scale_value:
            self._scale_value = self.state.scale
            self.scale.fill_(float(np.float32(self.state.scale)))
        if self.state.bins - 1 != self._cap_value:
            self._cap_value = self.state.bins - 1
            self.cap.fill_(self._cap_value)

    def capture_key(self):
        """What a captured count of this histogram depends on besides its device scalars: histc's capacity, the
        power of two ≥ the bins, at least HISTC_MIN_CAPACITY (a histogram grows many times, its capacity seldom)."""
        if self.mode != "histc":
            return None
        return min(max(HISTC_MIN_CAPACITY, 1 << (self.state.bins - 1).bit_length()), self.state.max_bins)

    def count(self, values, magnitudes: bool = False) -> None:
        """Add `values` (images × values, float32; `magnitudes`: already |x|, as the streamed forward hands them
        over) at the current multiplier: trunc(float32(|x| · s)), at most the last bin — the reference's bins
        (histogram.reference_bins). `values` are not modified."""
        import torch

        scaled = values.mul(self.scale) if magnitudes else values.abs().mul_(self.scale)
        if self.mode == "spread":
            self._count_spread(scaled)
            return
        if self.mode == "histc":
            self._count_histc(scaled)
            return
        index = torch.minimum(scaled.to(torch.int64), self.cap).reshape(-1)
        self.store.index_add_(0, index, self.one.expand(index.numel()))

    def _count_spread(self, scaled) -> None:
        """`count` with each bin-0 value moved to slot (position mod slots). The index is made in place: at most a
        float32 and an int64 per value at once, then an int64 and a bool (index_add: two int64 at its `minimum`);
        shapes depend on `values`' shape alone and nothing is read back, so the count stays capturable."""
        import torch

        index = scaled.to(torch.int64).reshape(-1)
        torch.minimum(index, self.cap, out=index)
        size, slots = index.numel(), self.slots
        whole = size - size % slots
        if whole:  # rows of `slots` values: column k goes to slot k, the slot indices broadcast (no arange of size)
            block = index[:whole].view(-1, slots)
            torch.where(block == 0, self.slot_index, block, out=block)
        if size > whole:
            tail = index[whole:]
            torch.where(tail == 0, self.slot_index[:size - whole], tail, out=tail)
        self.store.index_add_(0, index, self.one.expand(size))

    def _count_histc(self, scaled) -> None:
        """`count` by torch.histc; the zeros (k = 0, often half a ReLU6 output) fall below its range and touch no
        counter (bin 0 is `_fold`'s). On CUDA (`integer`): k = int32(|x| · s) (truncation), histc over [1, capacity]
        in capacity-1 bins: bin k-1 of the store's slice 1 … capacity-1, in integer arithmetic, one call per tensor.
        Elsewhere: k = trunc(float32(|x| · s)) in place (integers far below 2**24, so exact), histc over
        [0.5, capacity - 0.5] so k sits mid-bin whatever histc's float rounding, in calls of fewer than 2**24 values
        so its float32 counts stay exact."""
        import torch

        capacity = self.capture_key()
        if self.integer:
            index = scaled.to(torch.int32).reshape(-1)
            edges = {"min": 1, "max": capacity}
            part_size = HISTC_INT_PART
        else:
            index = scaled.trunc_().reshape(-1)
            edges = {"min": 0.5, "max": capacity - 0.5}
            part_size = HISTC_PART
        for start in range(0, index.numel(), part_size):
            self.store[1:capacity] += torch.histc(index[start:start + part_size], bins=capacity - 1, **edges)
        self.seen += index.numel()

    def counters(self) -> tuple:
        """Copies of what `count` changes on the device (the store, the values counted): a count captured as a graph
        is checked against the eager count from the same counters."""
        return self.store.clone(), self.seen.clone()

    def set_counters(self, saved: tuple) -> None:
        self.store.copy_(saved[0])
        self.seen.copy_(saved[1])

    def _fold(self) -> None:
        """Make store[:bins] whole (device ops, no host sync), before the counts are merged or read: 'histc' sets
        bin 0 to the values counted less every other bin; 'spread' moves the slots' counts into bin 0 (before a merge
        only to keep store[:bins] whole: bin 0 merges into bin 0, so the slots would stay right anyway)."""
        if self.mode == "histc":
            self.store[0] = self.seen - self.store[1:self.state.bins].sum()
        if self.slots:
            spread = self.store[-self.slots:]
            self.store[:1] += spread.sum()
            spread.zero_()

    def _merge(self, times: int) -> None:
        import torch

        self._fold()
        for _ in range(times):
            bins = self.state.bins
            counts = self.store[:bins]
            if bins % 2:
                counts = torch.cat([counts, counts.new_zeros(1)])
            merged = counts.view(-1, 2).sum(dim=1)
            self.store[:len(merged)] = merged
            self.store[len(merged):bins] = 0
            self.state.merge(1)

    def to_numpy(self) -> TensorHistogram:
        self._fold()
        state = self.state.state()
        store = self.store[:self.store.numel() - self.slots].cpu().numpy()
        if store[state["bins"]:].any():  # prepare grows the bins up to the largest value's: never past them
            raise RuntimeError(f"internal error: {int(store[state['bins']:].sum())} value(s) counted past the "
                               f"histogram's {state['bins']} bins — please report it with the model")
        state["counts"] = store[:state["bins"]].astype(np.int64)
        return TensorHistogram.from_state(state)


_HISTC_INTEGERS: dict = {}


def _histc_takes_integers(device) -> bool:
    """Whether torch.histc counts int32 values on `device` (HISTC_INTEGER; tried once per device type: CUDA does,
    the CPU does not)."""
    import torch

    if HISTC_INTEGER != "auto":
        return bool(HISTC_INTEGER)
    if device.type not in _HISTC_INTEGERS:
        try:
            probe = torch.histc(torch.tensor([1, 2, 2], dtype=torch.int32, device=device), bins=2, min=1, max=3)
            _HISTC_INTEGERS[device.type] = probe.tolist() == [1, 2]
        except (RuntimeError, NotImplementedError):
            _HISTC_INTEGERS[device.type] = False
    return _HISTC_INTEGERS[device.type]


def collect_streamed(job, device, module, rows: int, capture: bool = True):
    """name → TensorHistogram for the statistics pass `job` on torch `device` (module docstring): `module` is the
    exposing module on the device, `rows` images per forward (≥ the first calibration batch). Returns (histograms,
    how the forwards and counts ran, in words)."""
    import torch

    from trtlab.backends.gpu.capture import capture as capture_call
    from trtlab.backends.gpu.feed import CropFeed
    from trtlab.core.progress import progress_bar
    from trtlab.data.batches import iter_batches

    cuda = device.type == "cuda"
    feed = CropFeed(device)
    mode = count_mode()  # an unknown $TRTLAB_GPU_COUNT stops here, before any forward
    histograms = [StoredHistogram(device, job.bins, mode=mode) for _ in job.names]
    inputs = len(job.input_tensors)

    def forward(pixels):
        """|x| of every exposed tensor (images × values; the count's input, made once for the max as well) and
        their per-image max |x| (tensors × images, float64). Each output is dropped once its |x| exists, so the
        forward holds about one copy of the exposed tensors, not two."""
        images = feed.normalise_on_device(pixels, job.cache.preprocess)
        outputs = list(module(images))
        count = len(images)
        magnitudes = {}
        for p in module.exposed_positions:
            if p not in magnitudes:
                magnitudes[p] = outputs[p].reshape(count, -1).abs()
                outputs[p] = None
        tensors = [magnitudes[p] for p in module.exposed_positions]
        tensors += [images.reshape(count, -1).abs()] * inputs
        return tuple(tensors) + (torch.stack([t.amax(dim=1) for t in tensors]).to(torch.float64),)

    slots = _Slots(forward, capture and cuda, capture_call)
    counting = torch.cuda.Stream(device) if cuda else None
    first = {"range": True}
    bar = progress_bar(total=len(job.indices), desc="calibrate (collect stats)", unit="img", enabled=job.progress)

    def count(pending) -> None:
        batch, slot, outputs, tops_host, tops_ready, forward_done = pending
        if tops_ready is not None:
            tops_ready.synchronize()
        tops = tops_host.numpy()[:, :batch.count].copy()
        if first["range"]:  # the first forward holds the whole first calibration batch: it sets every range
            start_ranges({k: h for k, h in enumerate(histograms)},
                         {k: float(np.max(t[:job.first_images])) for k, t in enumerate(tops)})
            first["range"] = False
        stream = counting if slots.graphs and counting is not None else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if stream is not None:
                stream.wait_event(forward_done)
                for tensor in slots.made_elsewhere(slot, outputs):  # read here: not reused before this stream is done
                    tensor.record_stream(stream)
            for histogram, values, image_tops in zip(histograms, outputs, tops):
                if not histogram.state.scale:  # zero on every image so far: the first non-zero one starts it
                    histogram.state.start_at_first_nonzero(image_tops)
                histogram.prepare(batch.count * int(values.shape[1]), float(np.max(image_tops)))
            slots.count(slot, histograms, outputs, batch.count, rows)
            if stream is not None:
                slots.counted(slot, stream)
        bar.update(batch.count)

    pending = None
    try:
        with torch.inference_mode():
            source = iter_batches(job.cache, job.indices, rows, fixed_batch=job.fixed_batch or (rows if cuda else
                                                                                               None),
                                  prefetch=True, crops=True, into=feed.ring.take)
            for batch in source:
                slot, outputs = slots.forward(feed, batch)
                tops_host, tops_ready = feed.download(outputs[-1])
                forward_done = torch.cuda.Event() if cuda else None
                if forward_done is not None:
                    forward_done.record()
                if pending is not None:
                    count(pending)
                pending = (batch, slot, outputs, tops_host, tops_ready, forward_done)
            if pending is not None:
                count(pending)
        if cuda:
            torch.cuda.synchronize(device)
    finally:
        bar.close()
        feed.close()
    detail = {"spread": f" ({SPREAD_SLOTS} slots for bin 0)",
              "histc": " (int32 bins)" if histograms and histograms[0].integer else " (float32 bins)"}
    how = slots.describe() + f"; histograms counted by '{mode}'" + detail.get(mode, "")
    return [h.to_numpy() for h in histograms], how


class _Slots:
    """The forward in two slots of captured outputs (batch k in slot k % 2), or the eager forward; and the captured
    count of each slot."""

    def __init__(self, forward, capture: bool, capture_call):
        self.forward_fn, self.capture, self.capture_call = forward, capture, capture_call
        self.calls: list = []
        self.counts: dict = {}
        self.count_done: dict = {}
        self.reason = ""
        self.batches = 0
        self.counted_by_graph = 0
        self.recaptures = 0

    @property
    def graphs(self) -> bool:
        return len(self.calls) == 2

    def forward(self, feed, batch):
        import torch

        slot = self.batches % 2
        self.batches += 1
        if slot in self.count_done:  # the slot's outputs are read by its last count: it must be done
            torch.cuda.current_stream().wait_event(self.count_done[slot])
        host = feed.host_tensor(batch.images)
        if self.graphs:
            outputs = self.calls[slot](host)
        else:
            pixels = host.to(feed.device, non_blocking=True) if feed.on_cuda else host
            if self.capture and not self.reason and len(self.calls) == slot:
                made = self.capture_call(self.forward_fn, (pixels,))
                if made.call is None:
                    self.reason, self.calls = made.reason, []
                else:
                    self.calls.append(made.call)
                outputs = made.outputs
            else:
                outputs = self.forward_fn(pixels)
        feed.mark_read(batch.images)
        return slot, outputs

    def count(self, slot, histograms, outputs, real: int, rows: int) -> None:
        """Count the real rows of `outputs` (the slot's captured count when it is whole and captured). A captured
        count is kept with the histograms' capture keys (histc's capacity); when they change it is captured again
        (the old graph dropped) — at most a few times per pass, when a histogram's capacity doubles."""
        tensors = outputs[:-1]
        whole = real == rows and self.graphs and outputs is self.calls[slot].static_outputs
        key = tuple(h.capture_key() for h in histograms)
        kept = self.counts.get(slot) if whole else None
        if kept is not None and kept[0] == key and kept[1] is not None:
            kept[1].replay()
            self.counted_by_graph += 1
            return
        if whole and CAPTURE_COUNT and (kept is None or kept[0] != key) and not self.reason:
            self.counts.pop(slot, None)
            graph = self._capture_count(histograms, tensors)  # counts this batch, by the graph or eagerly
            self.counts[slot] = (key, graph)
            if graph is not None:
                self.recaptures += kept is not None
                self.counted_by_graph += 1
            return
        for histogram, values in zip(histograms, tensors):
            histogram.count(values[:real] if real < len(values) else values, magnitudes=True)

    def made_elsewhere(self, slot, outputs) -> tuple:
        """The tensors of `outputs` that are not a slot's captured outputs (the eager outputs of a capture's batch)."""
        if slot < len(self.calls) and outputs is self.calls[slot].static_outputs:
            return ()
        return tuple({id(t): t for t in outputs}.values())

    def _capture_count(self, histograms, tensors):
        """The count of this slot's outputs as one graph, kept when its replay adds what the eager count adds (the
        batch is counted once either way); None (eager counts) otherwise."""
        import torch

        stream = torch.cuda.current_stream()
        before = [h.counters() for h in histograms]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                for histogram, values in zip(histograms, tensors):
                    histogram.count(values, magnitudes=True)
            graph.replay()
            replayed = [h.counters() for h in histograms]
            for histogram, saved in zip(histograms, before):
                histogram.set_counters(saved)
            for histogram, values in zip(histograms, tensors):
                histogram.count(values, magnitudes=True)
            same = all(all(torch.equal(a, b) for a, b in zip(kept, h.counters()))
                       for kept, h in zip(replayed, histograms))
        except Exception as exc:  # noqa: BLE001 - counted eagerly, said in the description
            for histogram, saved in zip(histograms, before):
                histogram.set_counters(saved)
            for histogram, values in zip(histograms, tensors):
                histogram.count(values, magnitudes=True)
            self.reason = f"count capture failed ({type(exc).__name__})"
            return None
        if not same:
            self.reason = "the captured count differed from the eager count"
            return None
        return graph

    def counted(self, slot, stream) -> None:
        import torch

        event = torch.cuda.Event()
        event.record(stream)
        self.count_done[slot] = event

    def describe(self) -> str:
        if self.graphs:
            text = (f"{self.batches} forwards as CUDA graph replays in two slots, counted beside the next forward on "
                    f"a stream of its own ({self.counted_by_graph} counts as graph replays"
                    + (f", the count captured again {self.recaptures}× as histograms grew" if self.recaptures else "")
                    + ")")
        else:
            text = f"{self.batches} forwards by the eager interpreter"
        return text + (f"; {self.reason}" if self.reason else "")
