"""Latency statistics, benchmarks and tables: GPU time of TensorRT engines, wall clock of any other Runner.

A percentile is reported only when the sample supports it: at least TAIL_SAMPLES timings must lie at or above
it (p50 from 10 samples, p90 from 50, p99 from 500). A p99 read off 5 samples is the maximum of 5 samples, not a
99th percentile, so it is left out rather than shown.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from trtlab.backends.runner import Runner
from trtlab.backends.tensorrt.loader import log

PERCENTILES = (50, 90, 99)
TAIL_SAMPLES = 5


def samples_needed(percentile: float) -> int:
    """The fewest timings that put TAIL_SAMPLES of them at or above `percentile`."""
    return int(np.ceil(TAIL_SAMPLES / (1 - percentile / 100) - 1e-9))


def supported_percentiles(count: int) -> tuple[int, ...]:
    return tuple(p for p in PERCENTILES if count >= samples_needed(p))


def latency_stats(samples_ms, batch_size: int) -> dict:
    """p50/p90/p99 (those the sample size supports), mean and min latency (ms), and throughput (images/s at the
    median, or at the mean when there are too few samples for a median)."""
    samples = np.asarray(list(samples_ms), dtype=np.float64)
    if samples.size == 0:
        raise ValueError("no timing samples")
    stats = {"batch": int(batch_size), "samples": int(samples.size)}
    for p in supported_percentiles(samples.size):
        stats[f"p{p}_ms"] = float(np.percentile(samples, p))
    stats["mean_ms"] = float(samples.mean())
    stats["min_ms"] = float(samples.min())
    typical = stats.get("p50_ms", stats["mean_ms"])
    stats["throughput_ips"] = float(batch_size / (typical / 1000)) if typical > 0 else float("nan")
    return stats


def benchmark_engine(engine_path, batch_sizes=(1, 8, 32), iterations: int = 500, warmup: int = 20,
                     name: str | None = None) -> list[dict]:
    """GPU latency of an engine per batch size (CUDA events around execute_async_v3, copies excluded); batches
    above the engine's max batch are skipped with a note. 500 iterations support p99."""
    from trtlab.backends.tensorrt.runner import TrtRunner
    from trtlab.core.progress import progress_iter

    rows = []
    with TrtRunner(engine_path) as runner:
        variant = name or (runner.sidecar.get("variant") or {}).get("label") or Path(engine_path).stem
        for batch in progress_iter(list(batch_sizes), desc=f"benchmark {variant}", unit="batch"):
            if batch > runner.max_batch:
                log.info(f"{variant}: skipping batch {batch} (engine max batch {runner.max_batch})")
                continue
            stats = latency_stats(runner.time_execute(batch, iterations, warmup), batch)
            rows.append({"variant": variant, "backend": "trt", "timer": "GPU (CUDA events)", **stats})
    return rows


def benchmark_runner(runner: Runner, batch_sizes=(1, 8), iterations: int = 20, warmup: int = 3,
                     name: str | None = None, seed: int = 0) -> list[dict]:
    """Host wall-clock latency of any Runner's infer() per batch size (for backends without CUDA events,
    e.g. ONNX Runtime on CPU). Input values are random: this measures speed only."""
    from trtlab.core.progress import progress_iter

    rows = []
    rng = np.random.default_rng(seed)
    with runner:
        shape = tuple(d for d in runner.input_shape[1:])
        for batch in progress_iter(list(batch_sizes), desc=f"benchmark {name or runner.name}", unit="batch"):
            data = rng.standard_normal((batch, *shape), dtype=np.float32)
            samples = []
            for i in range(warmup + iterations):
                start = time.perf_counter()
                runner.infer(data)
                if i >= warmup:
                    samples.append((time.perf_counter() - start) * 1000)
            rows.append({"variant": name or runner.name, "backend": runner.backend, "timer": "host wall clock",
                         **latency_stats(samples, batch)})
    return rows


def latency_table(rows, reference: str = "fp16", compare: str | None = None):
    """Benchmark rows → one row per (variant, batch): the percentiles every row supports, mean, throughput.

    `table.attrs['side_by_side']` is batch × variant median (or mean) latency, with each other variant's ratio to
    `reference` at the same batch size (below 1: faster than `reference`); `table.attrs['ratio']` is the ratio of
    `compare` (default: the first INT8 variant) to `reference` alone. format_comparison shows it per variant."""
    import pandas as pd

    table = pd.DataFrame(rows)
    if table.empty:
        return table
    shown = [f"p{p}_ms" for p in PERCENTILES if f"p{p}_ms" in table and table[f"p{p}_ms"].notna().all()]
    table = table.set_index(["variant", "batch"])[["backend", "timer", "samples", *shown, "mean_ms",
                                                    "throughput_ips"]]
    typical = shown[0] if shown and shown[0] == "p50_ms" else "mean_ms"
    variants = list(dict.fromkeys(table.index.get_level_values(0)))
    side_by_side = table[typical].unstack(0)[variants]
    side_by_side.columns = [f"{v} {typical[:-3]} ms" for v in variants]
    if reference in variants:
        for variant in variants:
            if variant != reference:
                ratio = table.loc[variant, typical] / table.loc[reference, typical]
                side_by_side[f"{variant}/{reference}"] = ratio
        compare = compare or next((v for v in variants if v.startswith("int8")), None)
        if compare in variants and compare != reference:
            table.attrs["ratio"] = side_by_side[f"{compare}/{reference}"].dropna().rename(f"{compare}/{reference}")
    table.attrs["side_by_side"] = side_by_side
    table.attrs["typical"] = typical
    return table


def format_ms(value) -> str:
    """Milliseconds with three significant digits, no exponent: '0.412', '4.12', '41.2', '412'."""
    if value is None or not np.isfinite(value):
        return "—"
    value = float(value)
    digits = 3 if value < 1 else 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:,.{digits}f}"


def format_latency_table(table):
    """The latency table with readable headers and formatted numbers (strings), for display."""
    import pandas as pd

    if table.empty:
        return table
    names = {"samples": "timings", "p50_ms": "p50 ms", "p90_ms": "p90 ms", "p99_ms": "p99 ms",
             "mean_ms": "mean ms", "throughput_ips": "images/s"}
    shown = pd.DataFrame(index=table.index)
    for column in table.columns:
        values = table[column]
        if column.endswith("_ms"):
            shown[names[column]] = values.map(format_ms)
        elif column == "throughput_ips":
            shown[names[column]] = values.map(lambda v: f"{v:,.0f}" if np.isfinite(v) else "—")
        elif column == "samples":
            shown[names[column]] = values.map(lambda v: f"{int(v):,}")
        else:
            shown[column] = values
    return shown


def format_comparison(table, reference: str = "fp16"):
    """One row per variant, per batch size its median (or mean) latency and its ratio to `reference` at that
    batch ('0.62×': faster), formatted — the side-by-side view, readable however many variants there are."""
    import pandas as pd

    typical = table.attrs.get("typical", "p50_ms")
    values = table[typical].unstack("batch")
    variants = list(dict.fromkeys(table.index.get_level_values(0)))
    shown = pd.DataFrame(index=pd.Index(variants, name="variant"))
    for batch in values.columns:
        column = values[batch].reindex(variants)
        shown[f"{typical[:-3]} ms · batch {batch}"] = column.map(format_ms)
        if reference in variants:
            ratio = column / column[reference]
            shown[f"÷ {reference} · batch {batch}"] = ratio.map(lambda v: f"{v:.2f}×" if np.isfinite(v) else "—")
    return shown
