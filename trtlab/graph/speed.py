"""The speed clause of a verdict: is INT8 worth shipping for speed? Measured where TensorRT engines were timed, else
estimated (trtlab.graph.roofline) with its band and the word that only a build can tell.

ModelOpt's Q/DQ Autotune keeps a quantization scheme only when TensorRT measures it faster than the baseline by its
`performance_threshold`, 1.02 by default ("Min speedup (1.02 = 2%)", NVIDIA/Model-Optimizer
docs/source/guides/9_qdq_placement.rst); below it the FP16 model is the one to ship. Users do see INT8 engines no
faster than FP16 (NVIDIA/TensorRT#2197: MobileNetV3 fully INT8 at 1279.64 qps against FP16's 1286.08).

`speed_clause(report, latency)` returns plain data (`SpeedClause`) and its sentence; the verdict decides where it
goes. `latency` is what was timed on TensorRT: a latency report of trtlab's engines (trtlab.workflows:
EngineSet.benchmark() — its backend names TensorRT, its table holds the median per variant and batch) or plain
numbers, {'fp16': ms, 'int8': ms} at `batch`. Anything else (CPU timings of Q/DQ graphs) is not a measurement of
TensorRT and is refused.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trtlab.core.errors import UserValueError

SHIP_THRESHOLD = 1.02  # ModelOpt Autotune's default performance_threshold


@dataclass(frozen=True)
class SpeedClause:
    """INT8's speed-up over FP16 (FP16 time / INT8 time), where it comes from, and what it means for shipping."""

    source: str  # 'measured' (TensorRT engines timed) | 'estimate' (no engine: trtlab.graph.roofline)
    speedup: float  # measured ratio, or the lowest estimate over the GPUs estimated
    low: float  # band (a measurement: the speed-up itself)
    high: float
    batch: int
    gpu: str  # the GPU measured on ('this GPU' when not named), or the GPUs estimated
    threshold: float
    ship: str | None  # 'int8' | 'fp16' from a measurement; None from an estimate (only a build can confirm)
    text: str
    per_gpu: dict = field(default_factory=dict)  # estimate: GPU → {'speedup', 'low', 'high', 'without_graph'}

    def __str__(self) -> str:
        return self.text


def speed_clause(report, latency=None, batch: int = 1, gpu: str | None = None,
                 threshold: float = SHIP_THRESHOLD) -> SpeedClause:
    """The speed clause for the INT8 graph of `report` (a PrecisionReport): from `latency` when TensorRT engines
    were timed (module docstring), else the estimate at `batch` on `gpu` (a name in trtlab.graph.gpus.GPUS) or on
    every GPU the estimate knows."""
    if not threshold > 0:
        raise UserValueError(f"threshold {threshold!r} is not a speed-up", "pass a ratio such as 1.02 (INT8 at "
                                                                          "least 2 % faster than FP16)")
    measured = _measured(latency, batch)
    if measured is not None:
        return _from_measurement(*measured, gpu or "this GPU", threshold)
    return _from_estimate(report, batch, gpu, threshold)


def _measured(latency, batch: int):
    """(FP16 ms, INT8 ms, batch) from a TensorRT latency report or {'fp16': ms, 'int8': ms}; None without one."""
    if latency is None:
        return None
    if isinstance(latency, Mapping):
        missing = [k for k in ("fp16", "int8") if not _positive(latency.get(k))]
        if missing:
            raise UserValueError(f"measured latencies {dict(latency)!r} lack a positive {' and '.join(missing)} time",
                                 "pass {'fp16': ms, 'int8': ms} timed on TensorRT at the same batch")
        return float(latency["fp16"]), float(latency["int8"]), batch
    backend = str(getattr(latency, "backend", ""))
    table = getattr(latency, "table", None)
    if not backend.startswith("TensorRT") or table is None:
        raise UserValueError(f"latency from {backend or type(latency).__name__} is not a TensorRT measurement",
                             "pass EngineSet.benchmark() run on TensorRT, or None for the estimate (CPU timings of "
                             "Q/DQ graphs say nothing about TensorRT)")
    typical = table.attrs.get("typical", "p50_ms")
    ratio = table.attrs.get("ratio")
    if ratio is None or not len(ratio):
        raise UserValueError("the latency report holds no INT8 and FP16 engines timed side by side",
                             "benchmark an INT8 variant together with the FP16 one (EngineSet.benchmark())")
    variant, reference = str(ratio.name).split("/")
    timed = batch if batch in ratio.index else min(ratio.index)
    return (float(table.loc[(reference, timed), typical]), float(table.loc[(variant, timed), typical]), int(timed))


def _positive(value) -> bool:
    try:
        return float(value) > 0
    except (TypeError, ValueError):
        return False


def _from_measurement(fp16_ms: float, int8_ms: float, batch: int, gpu: str, threshold: float) -> SpeedClause:
    speedup = fp16_ms / int8_ms
    timed = f"{int8_ms:.3g} ms against FP16's {fp16_ms:.3g} ms at batch {batch}, measured on TensorRT on {gpu}"
    if speedup < threshold:
        text = (f"ship FP16: INT8 is not faster on this GPU ({speedup:.3f}×, {timed}; below the {threshold:.2f}× "
                f"that pays for quantizing).")
        ship = "fp16"
    else:
        text = f"INT8 is {speedup:.3f}× faster than FP16 on this GPU ({timed}): the speed supports shipping INT8."
        ship = "int8"
    return SpeedClause("measured", speedup, speedup, speedup, batch, gpu, threshold, ship, text)


def _from_estimate(report, batch: int, gpu: str | None, threshold: float) -> SpeedClause:
    from trtlab.graph.roofline import GPUS, central_speedup, estimate

    if gpu is not None and gpu not in GPUS:
        raise UserValueError(f"no speed estimate for GPU {gpu!r}", f"choose one of {', '.join(GPUS)}, or None "
                                                                   f"for all of them")
    names = [gpu] if gpu else list(GPUS)
    per_gpu = {}
    for name in names:
        e = estimate(report, GPUS[name], batch, "cuda-graph")
        without = central_speedup(report, GPUS[name], batch, "enqueue")
        per_gpu[name] = {"speedup": e["speedup"], "low": e["speedup_band"][0], "high": e["speedup_band"][1],
                         "without_graph": without}
    central = [v["speedup"] for v in per_gpu.values()]
    low, high = min(v["low"] for v in per_gpu.values()), max(v["high"] for v in per_gpu.values())
    spread = f"{min(central):.2f}×" if round(min(central), 2) == round(max(central), 2) else \
        f"{min(central):.2f}–{max(central):.2f}×"
    pays = f"the {threshold:.2f}× speed-up that pays for quantizing"
    lean = (f"INT8 is not expected to reach {pays}" if high < threshold else
            f"INT8 is expected to be faster, past {pays}" if low >= threshold else
            f"the band straddles {pays}, so whether INT8 pays off in speed is open")
    without = [v["without_graph"] for v in per_gpu.values()]
    host = (f"; without a CUDA graph, as trtlab's benchmark runs, the host's kernel launches hold it to "
            f"{min(without):.2f}–{max(without):.2f}×" if min(without) < min(central) - 0.05 else "")
    text = (f"INT8 vs FP16, estimate (no TensorRT engine timed): {spread} at batch {batch} on {', '.join(names)} "
            f"(band {low:.2f}–{high:.2f}×{host}) — {lean}; only a TensorRT build timed on the target GPU can "
            f"confirm.")
    return SpeedClause("estimate", min(central), low, high, batch, ", ".join(names), threshold, None, text, per_gpu)
