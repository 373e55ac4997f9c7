"""The GPU histogram count alone: statistics_stream.StoredHistogram.count as 'index_add' (the default) against
'spread' (bin-0 values spread over S store slots, folded back into bin 0) — does atomic contention on bin 0 explain
the streamed calibration's 15.4× a forward on the H200 (README, issue 38)?

    python bench/bench_gpu_count.py [--slots 1024[,256,4096]] [--repeats 20] [--cases all] [--model PATH|none]

Part 1, synthetic tensors, float32 on the GPU, each counted into one 2,048-bin histogram whose range is the tensor's
own max |x| (as the first calibration batch sets it): ReLU6-like clamps of normal values (~50 % and ~90 % exact
zeros, several EfficientNet-Lite0 shapes at batch 8), a signed tensor without zeros (the contention-free control) and
an all-zero tensor (an unstarted histogram: every value into bin 0). Part 2 (where the model exists, default the
prepared assets' .devcarry/bench_backends/fp32.onnx): the demo model's exposed tensors (stats_tensors) on its crops
at batch 8 — one calibration batch's whole count, every tensor in turn, as the streamed pass counts it — beside the
plain FP32 forward of that batch (eager, and replayed from trtlab's capture), and the tensors where index_add is
slowest.

Each count is timed with CUDA events over --repeats counts, eager (one count per call, as the last short batch) and
replayed from one captured CUDA graph (as every full batch is counted); ms are per count (per batch in part 2).
The speed-up is index_add's time / spread's time (> 1: spread faster). Every histogram's counts are checked after
timing against numpy's reference (histogram.reference_bins) times the number of counts made: 'counts ok'.
Without a CUDA GPU it says so in one line and exits 2; `--smoke` runs the script on the CPU instead (shapes cut to
one image, wall-clock timing, no graphs, labelled as such: it checks the script and the counts, not the speed).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BINS = 2048
# name → (shape, how): how the values are made (a seeded normal draw)
# name → (shape, how, shift): clamp(normal(0, 2) + shift, 0, 6) ('relu6'), normal(0, 2) ('signed') or zeros
CASES = {
    "relu6-half-zero": ((8, 32, 112, 112), "relu6", 0.0),
    "relu6-90%-zero": ((8, 32, 112, 112), "relu6", -2.563),  # P(2z - 2.563 < 0) = P(z < 1.28) = 0.9
    "relu6-half-zero-96ch": ((8, 96, 112, 112), "relu6", 0.0),
    "relu6-half-zero-56px": ((8, 144, 56, 56), "relu6", 0.0),
    "relu6-half-zero-7px": ((8, 1280, 7, 7), "relu6", 0.0),
    "signed-no-zero": ((8, 32, 112, 112), "signed", 0.0),
    "all-zero": ((8, 32, 112, 112), "zero", 0.0),
}


def make_case(shape, how: str, shift: float, device, generator):
    import torch

    if how == "zero":
        return torch.zeros(shape, dtype=torch.float32, device=device)
    x = torch.randn(shape, generator=generator, device=device, dtype=torch.float32).mul_(2.0).add_(shift)
    return x.clamp_(0.0, 6.0) if how == "relu6" else x


def new_histogram(device, mode: str, slots: int, values):
    """A StoredHistogram started at `values`' own max |x| (an all-zero tensor leaves it unstarted: multiplier 0)."""
    from trtlab.quantization.statistics_stream import StoredHistogram

    histogram = StoredHistogram(device, BINS, mode="histc" if mode == "histc-float" else mode, slots=slots)
    if mode == "histc-float":
        histogram.integer = False
    rows = values.reshape(len(values), -1)
    histogram.prepare(rows.numel(), float(rows.abs().max()))  # one read-back, before any timing
    return histogram


def timed(fn, repeats: int) -> float:
    """ms per call of `fn` (GPU work), CUDA events around `repeats` calls after two warm-up calls (--smoke: the
    CPU's wall clock)."""
    import torch

    for _ in range(2):
        fn()
    if not torch.cuda.is_available():  # --smoke
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - start) * 1e3 / repeats
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def graph_of(fn):
    """`fn` captured as one CUDA graph (warmed on a side stream first, as torch's docs ask), or the error."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except Exception as exc:  # noqa: BLE001 - said in the table
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return graph, ""


def measure(histograms, tensors, repeats: int, use_graph: bool) -> dict:
    """Eager and graph ms per count of every (histogram, tensor) pair in turn, and whether the counts are right."""
    import torch

    from trtlab.quantization.histogram import reference_bins

    calls = {"n": 0}

    def count_all():
        for histogram, values in zip(histograms, tensors):
            histogram.count(values)
        calls["n"] += 1

    out = {"eager": timed(count_all, repeats)}
    if use_graph:
        counted = calls["n"]
        graph, error = graph_of(count_all)
        calls["n"] = counted + 1  # the side-stream warm-up counted; the capture itself ran nothing
        if graph is None:
            out["graph"], out["graph_error"] = None, error
        else:
            def replay():
                graph.replay()
                calls["n"] += 1
            out["graph"] = timed(replay, repeats)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    ok = True
    for histogram, values in zip(histograms, tensors):
        expected = reference_bins(values.float().cpu().numpy(), histogram.state.scale, histogram.state.bins)
        ok &= bool(np.array_equal(histogram.to_numpy().counts, expected.astype(np.int64) * calls["n"]))
    out["ok"] = ok
    return out


def shares(values, scale: float) -> tuple[float, float]:
    """(share of exact zeros, share of the busiest bin) of `values` at multiplier `scale`."""
    import torch

    index = (values.abs() * scale).to(torch.int64).clamp_(max=BINS - 1).reshape(-1)
    counts = torch.bincount(index, minlength=BINS)
    return float((values == 0).float().mean()), float(counts.max()) / index.numel()


def modes(slot_counts):
    """(count, slots) rows: 'histc-float' is histc with float32 bins in parts below 2**24 values (the CPU's way; on
    CUDA 'histc' counts int32 bins, one call per tensor)."""
    return [("index_add", 0)] + [("spread", s) for s in slot_counts] + [("histc-float", 0), ("histc", 0)]


def row_label(mode: str, slots: int) -> str:
    return f"spread S={slots}" if mode == "spread" else mode


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'case':<21} {'shape (float32)':<17} {'count':<14} {'zeros':>6} {'top bin':>7} {'eager ms':>9} "
          f"{'speed-up':>8} {'graph ms':>9} {'speed-up':>8}  counts")
    base = {}
    for r in rows:
        if r["mode"] == "index_add":
            base[r["case"]] = r
        b = base[r["case"]]
        eager_x = b["eager"] / r["eager"]
        graph = f"{r['graph']:9.3f}" if r.get("graph") is not None else \
            f"{'failed' if 'graph_error' in r else 'not run':>9}"
        graph_x = f"{b['graph'] / r['graph']:7.2f}×" if r.get("graph") and b.get("graph") else f"{'—':>8}"
        zeros, top = (f"{r['zeros']:6.1%}", f"{r['top']:7.1%}") if r["zeros"] is not None else ("—".rjust(6),
                                                                                                   "—".rjust(7))
        print(f"{r['case']:<21} {r['shape']:<17} {r['label']:<14} {zeros} {top} {r['eager']:9.3f} "
              f"{eager_x:7.2f}× {graph} {graph_x}  {'ok' if r['ok'] else 'DIFFER'}"
              + (f"  (capture: {r['graph_error']})" if r.get("graph_error") else ""))


def synthetic(args, slot_counts, device) -> list[dict]:
    import torch

    names = list(CASES) if args.cases == "all" else [c.strip() for c in args.cases.split(",")]
    rows = []
    for name in names:
        shape, how, shift = CASES[name]
        shape = (1,) + shape[1:] if args.smoke else shape
        generator = torch.Generator(device=device).manual_seed(args.seed)
        values = make_case(shape, how, shift, device, generator).reshape(shape[0], -1)
        for mode, slots in modes(slot_counts):
            histogram = new_histogram(device, mode, slots or 1024, values)
            zeros, top = shares(values, histogram.state.scale)
            with torch.inference_mode():
                result = measure([histogram], [values], args.repeats, not args.no_graph)
            rows.append({"case": name, "shape": "x".join(map(str, shape)), "mode": mode,
                         "label": row_label(mode, slots), "zeros": zeros, "top": top, **result})
        del values
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def real_model(args, slot_counts, device) -> list[dict]:
    """Part 2: one calibration batch of the demo model's exposed tensors, counted tensor after tensor."""
    import onnx
    import torch

    from trtlab.backends.gpu.graph_module import convert_onnx
    from trtlab.data.preprocess import get_preprocess, normalize_batch
    from trtlab.quantization.variants import stats_tensors

    path = Path(args.model)
    manifest = json.loads((path.parent / "manifest.json").read_text())
    crops = np.load(path.parent / "crops.npy")
    batch = args.count_batch
    crops = np.concatenate([crops] * -(-batch // len(crops)))[:batch]
    images = torch.from_numpy(normalize_batch(crops, get_preprocess(manifest["preprocess"]))).to(device)
    model = onnx.load(str(path))
    module = convert_onnx(model).to(device).eval()
    with torch.inference_mode():
        env = module.trace(images)
        names = [n for n in stats_tensors(model) if n in env]
        tensors = [env[n].reshape(batch, -1).float().contiguous() for n in names]
        del env
        forward = forward_ms(module, images, args)
    values = sum(t.numel() for t in tensors)
    print(f"\npart 2: {path.name}, {len(names)} exposed tensors (stats_tensors), batch {batch} of "
          f"{len(crops)} demo crops ({crops.shape[1]}×{crops.shape[2]}, {manifest['preprocess']['name']}); "
          f"{values:,} values per batch, {sum(int((t == 0).sum()) for t in tensors) / values:.1%} exact zeros")
    rows, per_tensor = [], {}
    for mode, slots in modes(slot_counts):
        histograms = [new_histogram(device, mode, slots or 1024, t) for t in tensors]
        with torch.inference_mode():
            result = measure(histograms, tensors, args.repeats, not args.no_graph)
            label = row_label(mode, slots)
            per_tensor[label] = [measure([new_histogram(device, mode, slots or 1024, t)], [t],
                                         max(3, args.repeats // 4), False)["eager"] for t in tensors]
        rows.append({"case": f"all {len(names)} tensors", "shape": f"batch {batch}", "mode": mode,
                     "label": label, "zeros": None, "top": None, **result})
    print_table("one batch's whole count, every tensor in turn (ms per batch)", rows)
    print(f"the FP32 forward of the same batch (the module alone: no normalisation, no max |x|, nothing exposed): "
          f"{forward}")
    plain = per_tensor["index_add"]
    print("\nthe 8 tensors where index_add is slowest (eager ms per count; zeros share; speed-up of each spread)")
    for k in sorted(range(len(names)), key=lambda k: -plain[k])[:8]:
        zeros = float((tensors[k] == 0).float().mean())
        others = "  ".join(f"{label}: {plain[k] / ms[k]:.2f}×" for label, ms in per_tensor.items()
                           if label != "index_add")
        print(f"  {names[k][:48]:<48} {tuple(tensors[k].shape)} {zeros:6.1%} {plain[k]:8.3f} ms  {others}")
    return rows


def forward_ms(module, images, args) -> str:
    """The plain forward's ms per batch, eager and replayed from trtlab's capture (backends.gpu.capture), in words:
    what the count is to be compared with."""
    import torch

    eager = timed(lambda: module(images), args.repeats)
    if args.no_graph or not torch.cuda.is_available():
        return f"eager {eager:.3f} ms"
    from trtlab.backends.gpu.capture import capture

    made = capture(lambda x: module(x), (images,))
    if made.call is None:
        return f"eager {eager:.3f} ms; graph: {made.reason}"
    return f"eager {eager:.3f} ms, CUDA graph replay {timed(lambda: made.call(images), args.repeats):.3f} ms"


def calibration_per_mode(args) -> None:
    """Part 3: the whole streamed calibration pass (statistics_stream, as compare() runs it on CUDA) with each count
    against a warm forward of the same images at the same batch (ab_stages.calibration, the full bench's figure).
    With two image counts N1 < N2 also the cost per 1,000 more images (t(N2) − t(N1)) / (N2 − N1): the pass without
    what it pays once (the exposing module's conversion, its captures, shape inference), against the forward's.
    `--profile FILE`: one more pass of the first count at the largest N under cProfile, its top functions printed."""
    import cProfile
    import os
    import pstats

    sys.path.insert(0, str(ROOT / "bench"))
    from ab_stages import GpuSampler, calibration, memory_cache

    from trtlab.quantization import statistics_stream
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.statistics_stream import COUNT_MODES, COUNT_VARIABLE

    assets = Path(args.model).parent
    manifest = json.loads((assets / "manifest.json").read_text())
    sizes = sorted(int(n) for n in str(args.calibration).split(","))
    cache = memory_cache(np.load(assets / "crops.npy"), manifest["preprocess"], sizes[-1])
    sampler = GpuSampler()
    every = COUNT_MODES[:1] + ("histc-float", "histc-eager") + COUNT_MODES[1:]
    chosen = [m for m in every if m in args.modes.split(",")] if args.modes else list(every)
    print(f"\npart 3: the streamed calibration pass (entropy statistics of {Path(args.model).name}), N="
          f"{', '.join(map(str, sizes))} batch {args.batch}, each count in turn (${COUNT_VARIABLE}); the faster of two "
          f"runs")
    saved = os.environ.get(COUNT_VARIABLE)

    def use(mode):
        """histc-float: float32 bins; histc-eager: the count launched eagerly, not captured (CAPTURE_COUNT)."""
        os.environ[COUNT_VARIABLE] = "histc" if mode.startswith("histc") else mode
        statistics_stream.HISTC_INTEGER = False if mode == "histc-float" else "auto"
        statistics_stream.CAPTURE_COUNT = mode != "histc-eager"

    try:
        for mode in chosen:
            use(mode)
            results = {}
            for n in sizes:
                result = results[n] = calibration(str(args.model), cache, n, args.batch, sampler, "cuda", loop=False)
                streamed = result["streamed"]
                at_rows = ""
                if "forward_at_rows" in result:
                    at_rows = (f", {streamed['seconds'] / result['forward_at_rows']:5.2f}× one at batch "
                               f"{result['forward_rows']} ({result['forward_at_rows']:.3f} s)")
                print(f"  {mode:<11} N={n:<5} {streamed['seconds']:6.2f} s = "
                      f"{streamed['seconds'] / result['forward']:5.2f}× a warm forward at batch {args.batch} "
                      f"({result['forward']:.3f} s){at_rows}, GPU busy {streamed['gpu_busy']}% — {streamed['how']}",
                      flush=True)
            if len(sizes) > 1:
                low, high = results[sizes[0]], results[sizes[-1]]
                more = (sizes[-1] - sizes[0]) / 1000
                extra = (high["streamed"]["seconds"] - low["streamed"]["seconds"]) / more
                forward = (high["forward"] - low["forward"]) / more
                line = (f"  {mode:<11} per 1,000 more images: {extra:.3f} s = {extra / forward:.2f}× the forward's "
                        f"at batch {args.batch} ({forward:.3f} s)")
                if "forward_at_rows" in high:
                    rows = (high["forward_at_rows"] - low["forward_at_rows"]) / more
                    line += f", {extra / rows:.2f}× at batch {high['forward_rows']} ({rows:.3f} s)"
                once = low["streamed"]["seconds"] - extra * sizes[0] / 1000
                print(line + f"; paid once per pass: {once:.3f} s", flush=True)
        if args.profile:
            use(chosen[0])
            import onnx

            from trtlab.quantization.variants import stats_tensors

            tensors = stats_tensors(onnx.load(str(args.model)))
            profile = cProfile.Profile()
            profile.enable()
            collect_statistics(str(args.model), tensors, cache, np.arange(sizes[-1]), batch_size=args.batch,
                               progress=False, device="cuda")
            profile.disable()
            profile.dump_stats(args.profile)
            print(f"\n  cProfile of one pass ({chosen[0]}, N={sizes[-1]}), top 28 by cumulative time:")
            stats = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats(28)
    finally:
        statistics_stream.HISTC_INTEGER, statistics_stream.CAPTURE_COUNT = "auto", True
        sampler.stop()
        if saved is None:
            os.environ.pop(COUNT_VARIABLE, None)
        else:
            os.environ[COUNT_VARIABLE] = saved


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", default="1024", help="spread's slot counts, comma-separated (trtlab's: 1024)")
    parser.add_argument("--repeats", type=int, default=20, help="counts per timing")
    parser.add_argument("--cases", default="all", help=f"comma-separated among: {', '.join(CASES)}")
    parser.add_argument("--model", default=str(ROOT / ".devcarry" / "bench_backends" / "fp32.onnx"),
                        help="part 2's model (beside its manifest.json and crops.npy); 'none' skips part 2")
    parser.add_argument("--batch", type=int, default=8, help="part 3: images per calibration batch")
    parser.add_argument("--count-batch", type=int, default=64, help="part 2: images per forward (the calibration "
                        "pass's on a GPU: statistics_torch.FORWARD_IMAGES)")
    parser.add_argument("--calibration", default="0",
                        help="part 3: N images (or N1,N2: also the cost per 1,000 more) through the streamed "
                             "calibration with each count (0: skipped)")
    parser.add_argument("--modes", default="", help="part 3: the counts to run, comma-separated (index_add, "
                        "histc-float, histc-eager, spread, histc; default all)")
    parser.add_argument("--parts", default="1,2,3", help="which parts to run, comma-separated")
    parser.add_argument("--profile", default="", help="part 3: FILE for a cProfile of one more pass")
    parser.add_argument("--no-graph", action="store_true", help="eager counts only (no CUDA graph capture)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="on the CPU: checks the script, not the speed")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("bench_gpu_count: needs torch with a CUDA GPU (torch is not installed); nothing was run")
        return 2
    if not torch.cuda.is_available() and not args.smoke:
        print(f"bench_gpu_count: needs a CUDA GPU (torch {torch.__version__} sees none); nothing was run")
        return 2
    if args.smoke:
        device, args.no_graph, args.batch, args.count_batch, args.repeats = torch.device("cpu"), True, 1, 1, 2
        if torch.cuda.is_available():
            print("bench_gpu_count: --smoke is for machines without a CUDA GPU; run it without --smoke here")
            return 2
        where = "SMOKE RUN ON THE CPU (one image per tensor, wall clock, no graphs): the timings mean nothing"
    else:
        device = torch.device("cuda")
        where = f"{torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}"
    from trtlab.quantization.histogram import MAX_HISTOGRAM_BINS

    slot_counts = [int(s) for s in args.slots.split(",") if s.strip()]
    print(f"GPU histogram count: {where}, torch {torch.__version__}; StoredHistogram.count = |x|·s (float32) → "
          f"index_add / spread: int64 → min(last bin) [spread: bin 0 → slot (position mod S)] → index_add_ of ones "
          f"into {BINS} of {MAX_HISTOGRAM_BINS:,} int64 bins [+ S slots]; histc: int32 (histc-float: trunc, float32 "
          f"parts < 2**24) → torch.histc over bins 1 … capacity-1 (≥ 8,192) into a float64 store, bin 0 the rest; "
          f"{args.repeats} counts per timing, "
          f"eager{'' if args.no_graph else ' and one CUDA graph replayed'}; seed {args.seed}")
    parts = {p.strip() for p in args.parts.split(",")}
    if "1" in parts:
        print_table("part 1: synthetic float32 tensors (ms per count; speed-up = index_add ms / this row's ms)",
                    synthetic(args, slot_counts, device))
    if args.model != "none" and "2" in parts:
        if Path(args.model).is_file():
            real_model(args, slot_counts, device)
        else:
            print(f"\npart 2 skipped: {args.model} does not exist (python bench/bench_backends.py prepare makes it)")
    if args.calibration != "0" and "3" in parts and not args.smoke and Path(args.model).is_file():
        calibration_per_mode(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
