"""Where CPU calibration spends its time, and which counting loop and thread layout make it fastest (issue 28).

Part 1, one core: ns per value of each candidate counting loop on EfficientNet-Lite0's 60 real activations (every
loop's counts checked against the reference, histogram.reference_bins, before it is timed): numba loops (F:
trtlab's histogram_numba, two passes per block; O: trtlab's loop before it, one pass, four values per step into
interleaved int64 lanes; A: one value per step; D: A with uint32
lanes, 32 KB for 2048 bins; Z: blocks with zeros dropped before the counters), numpy's reference update, and, with --base-tree, the hand-written C loop of an older trtlab.
Part 2, `--cores` cores (default 2, pinned), ONNX Runtime intra-op threads set: at N=--images, the FP32 forward pass,
the run with the 60 tensors exposed (nothing counted) as ONNX Runtime's NCHW outputs and as its blocked tensors
(exposure_ort), and trtlab's whole statistics pass (blocked exposure) in several thread layouts, with
the fastest numba loop of part 1 (and the C loop of --base-tree in the first two layouts):
  overlap     — ONNX Runtime computes sub-batch k+1 while `cores` counting threads count sub-batch k (trtlab's);
  overlap-low — the same, counting threads at the lowest priority (SCHED_IDLE): they take only the time ONNX
                Runtime's threads leave idle, and all of it once its run is done;
  split       — ONNX Runtime on cores-1 threads, counting on 1 thread, overlapped;
  sequential  — run, then count, on every core.

    python bench/bench_counting.py --workspace W [--images 1000] [--cores 2] [--base-tree ../trtlab-81abba5]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numba  # noqa: E402

LANES, BLOCK, FLUSH = 4, 512, 1 << 30


@numba.njit(nogil=True, cache=True)
def loop_d(values, bits, scale, bins):
    counts = np.zeros(bins, np.int64)
    lanes = np.zeros(LANES * bins, np.uint32)
    cap = np.float32(bins - 1)
    top = np.uint32(0)
    n = values.size
    for start in range(0, n, FLUSH):
        for i in range(start, min(start + FLUSH, n)):
            b = bits[i] & np.uint32(0x7FFFFFFF)
            top = b if b > top else top
            p = abs(values[i]) * scale
            p = p if p < cap else cap
            lanes[(i & 3) * bins + np.int64(p)] += np.uint32(1)
        for k in range(LANES):
            for j in range(bins):
                counts[j] += lanes[k * bins + j]
        lanes[:] = 0
    return counts, top


@numba.njit(nogil=True, cache=True)
def loop_z(values, bits, scale, bins):
    counts = np.zeros(bins, np.int64)
    lanes = np.zeros(LANES * bins, np.uint32)
    block = np.empty(BLOCK, np.int32)
    cap = np.float32(bins - 1)
    top = np.uint32(0)
    n = values.size
    since = zeros = 0
    for begin in range(0, n, BLOCK):
        m = min(BLOCK, n - begin)
        k = 0
        for i in range(m):
            b = bits[begin + i] & np.uint32(0x7FFFFFFF)
            top = b if b > top else top
            p = abs(values[begin + i]) * scale
            p = p if p < cap else cap
            block[k] = np.int32(p)
            k += 1 if b != 0 else 0
        zeros += m - k
        for i in range(k):
            lanes[(i & 3) * bins + block[i]] += np.uint32(1)
        since += m
        if since >= FLUSH or begin + m >= n:
            for q in range(LANES):
                for j in range(bins):
                    counts[j] += lanes[q * bins + j]
            lanes[:] = 0
            since = 0
    counts[0] += zeros
    return counts, top


@numba.njit(nogil=True, cache=True)
def loop_o(values, bits, scale, bins):
    """trtlab's loop before the two-pass one: one pass, four values per step into interleaved int64 lanes."""
    lanes = np.zeros(LANES * bins, np.int64)
    cap = np.float32(bins - 1)
    mask = np.uint32(0x7FFFFFFF)
    top = np.uint32(0)
    n = values.size
    i = 0
    while i + LANES <= n:
        b0, b1, b2, b3 = bits[i] & mask, bits[i + 1] & mask, bits[i + 2] & mask, bits[i + 3] & mask
        t01 = b0 if b0 > b1 else b1
        t23 = b2 if b2 > b3 else b3
        t = t01 if t01 > t23 else t23
        top = t if t > top else top
        p0, p1 = abs(values[i]) * scale, abs(values[i + 1]) * scale
        p2, p3 = abs(values[i + 2]) * scale, abs(values[i + 3]) * scale
        p0, p1 = (p0 if p0 < cap else cap), (p1 if p1 < cap else cap)
        p2, p3 = (p2 if p2 < cap else cap), (p3 if p3 < cap else cap)
        lanes[np.int64(p0) * LANES] += 1
        lanes[np.int64(p1) * LANES + 1] += 1
        lanes[np.int64(p2) * LANES + 2] += 1
        lanes[np.int64(p3) * LANES + 3] += 1
        i += LANES
    while i < n:
        b = bits[i] & mask
        top = b if b > top else top
        p = abs(values[i]) * scale
        p = p if p < cap else cap
        lanes[np.int64(p) * LANES] += 1
        i += 1
    return lanes.reshape(bins, LANES).sum(axis=1), top


@numba.njit(nogil=True, cache=True)
def loop_a(values, bits, scale, bins):
    counts = np.zeros(LANES * bins, np.int64)
    cap = np.float32(bins - 1)
    top = np.uint32(0)
    for i in range(values.size):
        b = bits[i] & np.uint32(0x7FFFFFFF)
        top = b if b > top else top
        p = abs(values[i]) * scale
        p = p if p < cap else cap
        counts[(i & (LANES - 1)) * bins + np.int64(p)] += 1
    return counts.reshape(LANES, bins).sum(axis=0), top


class Loop:
    """A numba loop with histogram_numba's `count` interface."""

    def __init__(self, name, function):
        self.name, self.function = name, function

    def count(self, values, scale, bins):
        flat = np.ascontiguousarray(values, np.float32).reshape(-1)
        counts, top = self.function(flat, flat.view(np.uint32), np.float32(scale), np.int64(bins))
        top = float(np.uint32(top).view(np.float32))
        return counts, top, bool(np.isfinite(top))


def candidates(base_tree: str | None) -> dict:
    from trtlab.quantization import histogram_numba

    found = {"F (trtlab)": histogram_numba, "O (trtlab before)": Loop("O", loop_o), "A": Loop("A", loop_a), "D": Loop("D", loop_d), "Z": Loop("Z", loop_z)}
    if base_tree:
        path = Path(base_tree) / "trtlab" / "quantization" / "native_counting.py"
        spec = importlib.util.spec_from_file_location("base_native_counting", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        compiled = module.native_counter()
        if compiled is not None:
            found["C (base)"] = compiled
    return found


def activations(model_path: str, crops: np.ndarray, names: list[str], threads: int) -> list[np.ndarray]:
    from trtlab.core.ort_session import ort_session
    from trtlab.graph.onnx_utils import with_outputs
    import onnx

    session = ort_session(with_outputs(onnx.load(model_path), names), threads=threads)
    images = ((crops.astype(np.float32) - 127) / 128).transpose(0, 3, 1, 2).copy()
    return [o.reshape(-1) for o in session.run(names, {session.get_inputs()[0].name: images})]


def part1(loops: dict, outputs: list[np.ndarray]) -> dict:
    from trtlab.quantization.histogram import TensorHistogram, reference_bins

    total = sum(o.size for o in outputs)
    scales = [float(np.float32(2048 / np.abs(o).max())) for o in outputs]
    for name, loop in loops.items():
        for o, s in zip(outputs, scales):
            counts, top, finite = loop.count(o, s, 2048)
            assert finite and (counts == reference_bins(o, s, 2048)).all(), f"{name} differs from the reference"
    timings = {name: [] for name in loops} | {"numpy (reference update)": []}
    for _ in range(5):
        for name, loop in loops.items():
            start = time.perf_counter()
            for o, s in zip(outputs, scales):
                loop.count(o, s, 2048)
            timings[name].append(time.perf_counter() - start)
    for _ in range(2):
        start = time.perf_counter()
        for o in outputs:
            TensorHistogram().update(o, None)
        timings["numpy (reference update)"].append(time.perf_counter() - start)
    zeros = sum(int((o == 0).sum()) for o in outputs) / total
    print(f"part 1, one core: {len(outputs)} tensors, {total / 1e6:.1f} M values ({100 * zeros:.0f} % zeros), best of "
          f"5 (numpy 2); every loop's counts equal the reference's")
    found = {name: 1e9 * min(t) / total for name, t in timings.items()}
    for name, ns in found.items():
        print(f"  {name:26s} {ns:5.2f} ns/value")
    return found


def idle_priority() -> None:
    """This thread runs only when no normal thread wants the core (Linux SCHED_IDLE)."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def statistics_pass(model, cache, names, per_tensor, sub_batch, threads, workers, counter, layout) -> float:
    """trtlab's statistics pass (exposure_ort's blocked outputs, TensorHistogram updates) in one thread layout."""
    from trtlab.data.batches import iter_batches
    from trtlab.quantization.exposure_ort import ExposedRunner
    from trtlab.quantization.histogram import TensorHistogram

    start = time.perf_counter()
    runner = ExposedRunner(model, model.graph.input[0].name, names, threads)
    histograms = {name: TensorHistogram() for name in names}
    order = sorted(range(len(names)), key=lambda k: -per_tensor[k])
    batches = iter_batches(cache, None, sub_batch, prefetch=True)

    def run(batch):
        return runner(batch)[1]

    def count(outputs, k):
        values, padding_zeros = outputs[k]
        histograms[names[k]].update(values, counter, padding_zeros)
        outputs[k] = None

    initializer = idle_priority if layout == "overlap-low" else None
    with ThreadPoolExecutor(1) as pool, ThreadPoolExecutor(workers, initializer=initializer) as counters:
        if layout == "sequential":
            for batch in batches:
                outputs = run(batch)
                list(counters.map(lambda k: count(outputs, k), order))
        else:
            first = next(batches, None)
            pending = pool.submit(run, first)
            while pending is not None:
                outputs = pending.result()
                following = next(batches, None)
                pending = pool.submit(run, following) if following is not None else None
                list(counters.map(lambda k: count(outputs, k), order))
    return time.perf_counter() - start


def part2(args, workspace: Path, counter, counter_name: str, compiled=None) -> None:
    import onnx

    import bench_calibration as calibration
    from trtlab.core.ort_session import ort_session
    from trtlab.data.batches import iter_batches
    from trtlab.graph.onnx_utils import with_outputs
    from trtlab.quantization.statistics import MEMORY_BUDGET_MB, _exposed_shapes, sub_batch_size
    from trtlab.quantization.variants import stats_tensors

    path = workspace / f"crops-{args.images}.u8"
    if not path.exists():
        calibration.prepare_images(workspace, args.images)
    cache = calibration.load_images(path)
    model_path = str(workspace / "models" / "efficientnet-lite0.onnx")
    model = onnx.load(model_path)
    names = [t for t in stats_tensors(model) if t not in {i.name for i in model.graph.input}]
    per_tensor = [4 * int(np.prod(s)) for s in _exposed_shapes(model, names)]
    sub = sub_batch_size(args.batch, sum(per_tensor), MEMORY_BUDGET_MB * 2**20)
    cores = args.cores
    print(f"part 2, {cores} cores, N={args.images}, calibration batch {args.batch} in sub-batches of {sub} "
          f"(memory budget {MEMORY_BUDGET_MB} MB), counting loop {counter_name}")
    from trtlab.quantization.exposure_ort import ExposedRunner

    forward = ort_session(model_path, threads=cores)
    exposed = ort_session(with_outputs(model, names), threads=cores, spinning=False)
    blocked = ExposedRunner(model, model.graph.input[0].name, names, cores)
    times = {}
    for label, run, rows in (
            ("FP32 forward", lambda images: forward.run(None, {forward.get_inputs()[0].name: images}), args.batch),
            ("exposed as NCHW outputs, nothing counted",
             lambda images: exposed.run(names, {exposed.get_inputs()[0].name: images}), sub),
            ("exposed blocked (exposure_ort), nothing counted",
             lambda images: blocked(SimpleNamespace(images=images, count=len(images))), sub)):
        start = time.perf_counter()
        for batch in iter_batches(cache, None, rows, prefetch=True):
            run(batch.images)
        times[label] = time.perf_counter() - start
    print("  exposure_ort:", blocked.describe())
    del exposed, blocked
    layouts = {"overlap": (cores, cores), "overlap-low": (cores, cores), "split": (max(1, cores - 1), 1),
               "sequential": (cores, cores)}
    for layout, (threads, workers) in layouts.items():
        times[f"statistics, {layout} (ORT {threads} + {workers} counting)"] = statistics_pass(
            model, cache, names, per_tensor, sub, threads, workers, counter, layout)
    if compiled is not None:  # the older trtlab's C loop in the same layouts, for comparison
        for layout in ("overlap", "overlap-low"):
            threads, workers = layouts[layout]
            times[f"statistics, {layout}, C loop (base)"] = statistics_pass(
                model, cache, names, per_tensor, sub, threads, workers, compiled, layout)
    base = times["FP32 forward"]
    for label, seconds in times.items():
        print(f"  {label:48s} {seconds:6.1f} s  {1000 * seconds / args.images:5.1f} ms/image  "
              f"{seconds / base:4.2f}x the forward pass")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--base-tree")
    args = parser.parse_args()
    import bench_calibration as calibration

    calibration.pin_cores(args.cores)
    print("machine:", calibration.machine(), "| numba", numba.__version__)
    workspace = Path(args.workspace)
    loops = candidates(args.base_tree)
    from trtlab.quantization.variants import stats_tensors
    import onnx

    model_path = str(workspace / "models" / "efficientnet-lite0.onnx")
    model = onnx.load(model_path)
    names = [t for t in stats_tensors(model) if t not in {i.name for i in model.graph.input}]
    crops, _ = calibration.demo_photos(workspace)
    found = part1(loops, activations(model_path, crops[:4], names, args.cores))
    numba_loops = {k: v for k, v in found.items() if k[0] in "ADZFO"}
    best = min(numba_loops, key=numba_loops.get)
    part2(args, workspace, loops[best], best, loops.get("C (base)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
