"""Issue 38's measurements, run by bench/bench_ab.py in one child process pinned to `--cpus` cores (see there):

- `photo_files`: the images — the demo photos' 224×224 crops replicated with flips and shifts
  (bench_backends.replicated_crops), upscaled to 500×375 (ImageNet's typical size) and written as JPEG (quality 90),
  so decoding costs what an ImageNet JPEG costs; written with every core before the pinned child starts. There is
  no ImageNet on the GPU machine: accuracies mean nothing, times and agreement do.
- `GpuSampler`: NVML's utilisation of each visible GPU sampled every 50 ms (nvidia-ml-py); a window's busy share is
  the mean of its samples (NVML: "percent of time over the past sample period during which one or more kernels was
  executing on the GPU").
- `Stages`: wraps the functions compare() calls (decode cache, variant build = calibration, evaluation, report
  tables, verdict) to record each call's wall seconds, user CPU seconds (this process and its finished children)
  and the GPU busy share over it.
- `warmup`, `throughput`, `calibration`, `ab_run`: the first INT8 variant's one-time cost, img/s per variant
  (captured and eager side by side), calibration against a warm forward at the same batch, and the A/B through
  compare() with its defaults (cold: no decode cache; warm: the decode cache present, nothing else).
"""
from __future__ import annotations

import os
import resource
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

RECIPES = ("minmax", "entropy", "percentile")
PHOTO_SIZE = (500, 375)  # width × height: ImageNet validation's typical JPEG


def photo_files(base: np.ndarray, labels: np.ndarray, count: int, folder: Path, threads: int):
    """(Dataset of `count` JPEG files, seconds to write them): replicated crops upscaled to PHOTO_SIZE."""
    import cv2

    from bench_backends import replicated_crops
    from trtlab.data.dataset import Dataset

    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    paths = [str(folder / f"photo{k:06d}.jpg") for k in range(count)]

    def write(start: int) -> None:
        crops = replicated_crops(base, min(count, start + 1024) - start, start)  # this chunk only (was O(n²))
        for offset, crop in enumerate(crops):
            path = paths[start + offset]
            if not os.path.exists(path):
                big = cv2.resize(np.ascontiguousarray(crop[:, :, ::-1]), PHOTO_SIZE, interpolation=cv2.INTER_LINEAR)
                cv2.imwrite(path, big, [cv2.IMWRITE_JPEG_QUALITY, 90])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, range(0, count, 1024)))
    dataset = Dataset("bench-ab-jpeg", paths, np.asarray([labels[k % len(base)] for k in range(count)], np.int64),
                      root=str(folder))
    return dataset, time.perf_counter() - started


def cpu_seconds() -> float:
    """User CPU seconds of this process and its finished children (parallel workers)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime


class GpuSampler:
    """NVML utilisation samples (time, [percent per GPU]) every `period` seconds in a thread; `busy(t0, t1)` is the
    mean over [t0, t1] per GPU (None without NVML)."""

    def __init__(self, period: float = 0.05):
        self.samples: list = []
        self.names: list = []
        self.error = ""
        try:
            import pynvml

            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            indices = [int(v) for v in visible.split(",") if v.strip()] if visible else \
                list(range(pynvml.nvmlDeviceGetCount()))
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
            self.names = [pynvml.nvmlDeviceGetName(h) for h in self.handles]
            self.names = [n.decode() if isinstance(n, bytes) else n for n in self.names]
            self._nvml = pynvml
        except Exception as exc:  # noqa: BLE001 - no NVML: no utilisation column, said
            self.handles, self.error = [], f"{type(exc).__name__}: {exc}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)
        if self.handles:
            self._thread.start()

    def _run(self, period: float) -> None:
        while not self._stop.is_set():
            try:
                rates = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles]
                self.samples.append((time.perf_counter(), rates))
            except Exception as exc:  # noqa: BLE001
                self.error = str(exc)
                return
            self._stop.wait(period)

    def busy(self, start: float, end: float) -> list | None:
        inside = [rates for t, rates in list(self.samples) if start <= t <= end]
        if not inside:
            return None
        return [round(float(np.mean([r[k] for r in inside])), 1) for k in range(len(inside[0]))]

    def stop(self) -> None:
        self._stop.set()


class Stages:
    """Records (stage, label, wall seconds, user CPU seconds, GPU busy %) for each call of the wrapped functions."""

    def __init__(self, sampler: GpuSampler):
        self.sampler, self.rows, self._undo = sampler, [], []

    def wrap(self, owner, attribute: str, stage: str, label=lambda args, kwargs: "") -> None:
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            start, cpu = time.perf_counter(), cpu_seconds()
            try:
                return original(*args, **kwargs)
            finally:
                end = time.perf_counter()
                self.rows.append({"stage": stage, "label": label(args, kwargs), "seconds": end - start,
                                  "cpu": cpu_seconds() - cpu, "gpu_busy": self.sampler.busy(start, end)})
        setattr(owner, attribute, timed)
        self._undo.append((owner, attribute, original))

    def restore(self) -> None:
        for owner, attribute, original in reversed(self._undo):
            setattr(owner, attribute, original)
        self._undo = []

    def total(self, stage: str) -> float:
        return sum(r["seconds"] for r in self.rows if r["stage"] == stage)


def memory_cache(base: np.ndarray, preprocess: dict, count: int):
    """A DecodeCache over `count` replicated crops held in memory (the throughput and calibration measurements)."""
    from bench_backends import replicated_crops
    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import DECODED, DecodeCache
    from trtlab.data.preprocess import get_preprocess

    crops = replicated_crops(base, count)
    return DecodeCache(Path("/nonexistent/bench-crops"), Dataset("bench", [f"crop{k}.png" for k in range(count)]),
                       get_preprocess(preprocess), crops, np.full(count, DECODED, np.int8))


def warmup(model: str, cache) -> dict:
    """The first INT8 variant's one-time cost in this process, paid here before anything is timed: activation and
    the first batch of 8, then the same again warm."""
    from trtlab.backends.gpu.runner import TorchRunner

    times = []
    for _ in range(2):
        start = time.perf_counter()
        with TorchRunner(model) as runner:
            runner.infer_crops(np.asarray(cache.crops[:8]), cache.preprocess)
        times.append(time.perf_counter() - start)
    return {"first": times[0], "again": times[1]}


def throughput(variants: dict, cache, batches: list, sampler: GpuSampler, images: int) -> list:
    """img/s of each variant through the evaluation loop (infer_cached: ring, one batch in flight) at each batch,
    captured + one-kernel Q/DQ (the default), eager + one-kernel Q/DQ, eager + plain ops (before issue 38); one
    warm-up pass of 2 batches untimed; the logits of every mode compared bit for bit with the default's."""
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.evaluation.evaluate import infer_cached

    rows = []
    for name, path in variants.items():
        for batch in batches:
            count = min(images, len(cache.crops)) // batch * batch
            indices = np.arange(count)
            reference = None
            for capture, fused in ((True, True), (False, True), (False, False)):
                with TorchRunner(path, capture=capture, fused_qdq=fused) as runner:
                    infer_cached(runner, cache, indices[:2 * batch], batch, progress=False)
                    start, cpu = time.perf_counter(), cpu_seconds()
                    logits = np.concatenate(infer_cached(runner, cache, indices, batch, progress=False))
                    end = time.perf_counter()
                    execution = runner.execution()
                    kernel = runner.describe().get("quantize_kernel", "")
                reference = logits if reference is None else reference
                rows.append({"variant": name, "batch": batch, "capture": capture, "fused_qdq": fused,
                             "images": count, "img_s": count / (end - start), "seconds": end - start,
                             "cpu_per_s": (cpu_seconds() - cpu) / (end - start), "gpu_busy": sampler.busy(start, end),
                             "identical": bool(np.array_equal(logits, reference)), "execution": execution,
                             "quantize_kernel": kernel})
    return rows


def calibration(model: str, cache, images: int, batch: int, sampler: GpuSampler, device: str = "cuda",
                loop: bool = True) -> dict:
    """Entropy calibration statistics (streamed, and statistics_torch's loop unless `loop` is False) against one warm
    FP32 forward of the same images at the calibration batch (`batch`, the bar's anchor) and at the images the
    calibration runs per forward (statistics_torch.FORWARD_IMAGES in whole batches, where that differs), on the GPU;
    each timed twice, the faster kept (the first pays conversion)."""
    import onnx

    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.evaluation.evaluate import infer_cached
    from trtlab.quantization import statistics_torch
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.variants import stats_tensors

    indices = np.arange(min(images, len(cache.crops)))
    tensors = stats_tensors(onnx.load(model))
    rows = statistics_torch.whole_batch_rows(batch, len(indices))
    out = {"images": len(indices), "batch": batch, "forward_rows": rows}
    with TorchRunner(model, device="cpu" if device == "torch-cpu" else device) as runner:
        runner.pads_batches = lambda: False  # the forward as calibration runs it: batches of `batch`, none padded
        for size, key in ((batch, "forward"), (rows, "forward_at_rows")) if rows != batch else ((batch, "forward"),):
            infer_cached(runner, cache, indices[:2 * size], size, progress=False)
            seconds = []
            for _ in range(2):
                start = time.perf_counter()
                infer_cached(runner, cache, indices, size, progress=False)
                seconds.append(time.perf_counter() - start)
            out[key] = min(seconds)
    for streamed in (True, False) if loop else (True,):
        statistics_torch.STREAMED = streamed
        seconds = []
        for _ in range(2):
            start = time.perf_counter()
            stats = collect_statistics(model, tensors, cache, indices, batch_size=batch, progress=False,
                                       device=device)
            seconds.append(time.perf_counter() - start)
            busy = sampler.busy(start, time.perf_counter())
        out["streamed" if streamed else "loop"] = {"seconds": min(seconds), "how": stats.counting, "gpu_busy": busy}
    statistics_torch.STREAMED = True
    return out


def ab_run(model: str, dataset, workspace: Path, calibration_images: int, sampler: GpuSampler, parallel="auto",
           on_worker=None, overlap: bool = True) -> dict:
    """compare() with its defaults (backend, batch size, engines) on FP32 + INT8 minmax/entropy/percentile, timed per
    stage; `parallel` as compare() takes it. `on_worker(pids)` is called from a thread once worker processes run.
    `overlap`: RunOptions.overlap_decode — on a cold run the 'decode' stage is then the calibration images only
    and 'evaluate+decode' the lock-step evaluation of every variant while the rest is decoded (issue 38)."""
    import logging

    import trtlab.views.report as report
    import trtlab.workflows.compare as compare_module
    import trtlab.workflows.parallel as parallel_module
    from trtlab.core.progress import quiet
    from trtlab.quantization.variants import Recipe

    stages = Stages(sampler)
    stages.wrap(compare_module, "build_decode_cache", "decode",
                lambda a, k: "calibration images first" if k.get("first") is not None else "every image")
    stages.wrap(compare_module, "build_variant", "calibrate+build", lambda a, k: a[1].name)
    stages.wrap(compare_module, "evaluate_variant", "evaluate", lambda a, k: a[0].name)
    stages.wrap(compare_module, "evaluate_variants", "evaluate+decode", lambda a, k: "every variant in lock-step, "
                "the rest decoded meanwhile")
    stages.wrap(parallel_module, "evaluate_in_parallel", "evaluate (workers)")
    stages.wrap(report, "report_tables", "report tables")
    stages.wrap(compare_module.ABResult, "verdict", "verdict")
    # The rest of compare(), named so that 'other' is what none of these is (a cold run's 'other' was 13 s on the
    # H200 against 2 s warm, unexplained): the files' content hashes, the split, the decode plan and free-space
    # check, the evaluation batch, the wait for the background decode's end, the engine column.
    import trtlab.data.decode_stream as decode_stream
    import trtlab.evaluation.evaluate as evaluate_module
    import trtlab.workflows.ab_engines as ab_engines
    import trtlab.workflows.checks as checks
    from trtlab.data.dataset import Dataset

    stages.wrap(Dataset, "holding_hashes", "hash files")
    stages.wrap(compare_module, "saved_split", "split")
    stages.wrap(checks, "decode_cache_pending", "decode plan")
    stages.wrap(checks, "check_free_space", "free space")
    stages.wrap(evaluate_module, "evaluation_batch_size", "batch size")
    stages.wrap(decode_stream.BackgroundDecode, "finish", "decode finish")
    stages.wrap(ab_engines, "engine_column", "engines")
    warnings = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("trtlab").addHandler(handler)
    watcher = _WorkerWatcher(on_worker) if on_worker else None
    recipes = [Recipe(algorithm=name, calibration_images=calibration_images) for name in RECIPES]
    start, cpu = time.perf_counter(), cpu_seconds()
    try:
        with quiet():
            result = compare_module.compare(model, dataset, recipes, "tf-lite", workspace=workspace,
                                            progress=False, parallel=parallel, overlap_decode=overlap)
    finally:
        seconds, cpu_used = time.perf_counter() - start, cpu_seconds() - cpu
        stages.restore()
        logging.getLogger("trtlab").removeHandler(handler)
        if watcher:
            watcher.stop()
    evaluation = [r for r in stages.rows if r["stage"].startswith("evaluate")]
    overlapped = any(r["stage"] == "evaluate+decode" for r in stages.rows)
    eval_seconds = sum(r["seconds"] for r in evaluation)
    eval_busy = [r["gpu_busy"] for r in evaluation if r["gpu_busy"]]
    return {"seconds": seconds, "cpu": cpu_used, "stages": stages.rows, "ran_on": result.ran_on,
            "overlap": "decode overlapped with evaluation" if overlapped else "decode first" if
            result.cache.decoded_now else "nothing to decode",
            "table": result.table.raw.to_string(), "store": str(result.store.folder), "warnings": warnings,
            "labels": list(result.table.index), "decode": dict(result.cache.describe(), workers=result.cache.workers,
                                                                seconds=result.cache.decode_seconds),
            "evaluation": {"seconds": eval_seconds, "cpu_per_s": sum(r["cpu"] for r in evaluation) / eval_seconds
                           if eval_seconds else None,
                           "gpu_busy": [round(float(np.mean([b[k] for b in eval_busy])), 1)
                                        for k in range(len(eval_busy[0]))] if eval_busy else None}}


def only_decode_cache(workspace: Path) -> None:
    """The workspace as a user's second A/B finds it: the decode cache kept, everything else (split, variants,
    calibration statistics, results) gone."""
    for entry in workspace.iterdir():
        if entry.name != "decode_cache":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def stored_logits_equal(first: str, second: str, labels: list) -> bool:
    from trtlab.evaluation.results import ResultsStore

    a, b = ResultsStore(Path(first)), ResultsStore(Path(second))
    return all(np.array_equal(a.load(label).logits, b.load(label).logits) for label in labels)


class _WorkerWatcher:
    """Calls `on_worker(pids)` (in a thread) once this process has evaluation worker processes."""

    def __init__(self, on_worker):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(on_worker,), daemon=True)
        self._thread.start()

    def _watch(self, on_worker) -> None:
        while not self._stop.wait(0.2):
            pids = worker_pids()
            if len(pids) >= 2:
                on_worker(pids)
                return

    def stop(self) -> None:
        self._stop.set()


def worker_pids() -> list[int]:
    """This process's children that serve trtlab's parallel evaluation (read from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and b"parallel import serve" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return sorted(pids)
