"""The TensorRT column of the A/B (issue 25 item 3): where TensorRT imports, compare() also builds each variant's
engine and evaluates it on the same evaluation images, so "minmax or entropy?" is answered on the engine the user
ships as well as on the literal graph.

Per variant: the engine's top-1, its top-1 agreement with the literal result of the same variant (the number the
A/B table shows, computed on the torch GPU backend or ONNX Runtime), and its GPU latency next to the FP16 engine's
(INT8 ÷ FP16, CUDA events; an FP16 engine is built for this when the A/B has no FP16 variant). Engines are built by
trtlab.backends.tensorrt.build_engine from the graph the variant made: strongly typed, so the Q/DQ graph decides
INT8 and the FP16 graph FP16 (TensorRT 11 always; 10.x by the STRONGLY_TYPED flag: the graph's own types), with
the one timing cache `<workspace>/engines/timing.cache` shared by every build. Engine results are stored beside the
literal ones as `trt-<variant>`, their identity naming TensorRT, so no number loses its backend.

An engine that cannot be built or run is one line in its row (`build failed: <reason>`); the literal results of
the A/B are computed before and stand whatever happens here.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from trtlab.backends.tensorrt.readiness import TensorRTCannotRun

log = logging.getLogger(__name__)

#: Latency timings per engine: enough for a stable median at a fraction of an evaluation's time.
LATENCY_ITERATIONS, LATENCY_WARMUP = 200, 20


@dataclass
class EngineRow:
    """One variant's engine: what happened to it and, where it ran, its numbers."""

    variant: str  # the literal result's stored label
    precision: str
    status: str  # 'built', 'reused', 'build failed: …', 'run failed: …', 'latency reference'
    label: str | None = None  # the engine's stored result (trt-<variant>)
    top1: float | None = None
    agreement: float | None = None  # top-1 agreement with the literal result of the same variant
    p50_ms: float | None = None

    @property
    def failed(self) -> bool:
        return self.status.startswith(("build failed", "run failed"))


@dataclass
class EngineColumn:
    """The engines of one A/B: a row per variant, the literal backend they are compared with, where they ran."""

    rows: list = field(default_factory=list)
    literal_backend: str = ""
    latency_batch: int = 1
    tensorrt: str = ""
    gpu: str = ""

    @property
    def failed(self) -> list:
        return [row for row in self.rows if row.failed]

    def latencies(self) -> dict:
        """{variant label: median ms} of the engines timed here, and 'batch': what the verdict's speed clause reads
        (views.verdict.speed_of) — measured on TensorRT, so it replaces the estimate."""
        timed = {row.variant: row.p50_ms for row in self.rows if row.p50_ms and not row.failed}
        return {**timed, "batch": self.latency_batch} if timed else {}

    def summary(self) -> str:
        """One line: what was built where, or why nothing was."""
        ran = [row for row in self.rows if not row.failed]
        if not self.rows:
            return "TensorRT engines: none (no variant)"
        if not ran:
            reasons = sorted({row.status for row in self.rows})
            return (f"TensorRT engines: {reasons[0]}" + (f" (and {len(reasons) - 1} other reason(s))"
                                                         if len(reasons) > 1 else "")
                    + f" — the A/B results on {self.literal_backend} stand")
        return (f"TensorRT engines: {len(ran)} of {len(self.rows)} built and evaluated with TensorRT "
                f"{self.tensorrt} on {self.gpu or 'the GPU'}" +
                (f"; {len(self.failed)} failed (see the table)" if self.failed else ""))

    @property
    def table(self):
        """views.formatting.Table: variant, engine status, top-1 on TensorRT, agreement with the literal result,
        latency and INT8 ÷ FP16 — each header naming its backend."""
        import pandas as pd

        from trtlab.views.formatting import MISSING, Table, milliseconds, percent, ratio

        fp16 = next((row.p50_ms for row in self.rows if row.precision == "fp16" and row.p50_ms), None)
        trt = f"trt {self.tensorrt}".strip()
        columns = ["variant", "engine", f"top-1 ({trt})", f"top-1 agreement with the variant on {self.literal_backend}",
                   f"p50 latency, batch {self.latency_batch} ({trt}, GPU time)", "÷ fp16 engine"]
        raw, shown = [], []
        for row in self.rows:
            versus = row.p50_ms / fp16 if fp16 and row.p50_ms else None
            raw.append([row.variant, row.status, row.top1, row.agreement, row.p50_ms, versus])
            shown.append([row.variant, row.status, percent(row.top1), percent(row.agreement),
                          milliseconds(row.p50_ms), ratio(versus) if versus else MISSING])
        if any(not row.failed for row in self.rows):
            caption = (f"Engines built by TensorRT {self.tensorrt} on {self.gpu or 'the GPU'} from each variant's "
                       f"graph (strongly typed); results stored as trt-<variant>. The A/B table's numbers are the "
                       f"literal graphs on {self.literal_backend}, unchanged by this table.")
        else:  # nothing was built: no GPU is claimed, the reason is said (once, when every row shares it)
            reasons = sorted({row.status.removeprefix("build failed: ") for row in self.rows})
            why = f": {reasons[0]}" if len(reasons) == 1 else " (each row says why)"
            caption = f"No engine was built{why}. The A/B table's numbers are the literal graphs on " \
                      f"{self.literal_backend}."
        return Table(pd.DataFrame(shown, columns=columns).set_index("variant"),
                     pd.DataFrame(raw, columns=columns).set_index("variant"), caption=caption,
                     title="The same variants as TensorRT engines")

    def _repr_html_(self) -> str:
        from html import escape

        return f"<p>{escape(self.summary())}</p>" + self.table.html()

    def __repr__(self) -> str:
        return self.summary() + "\n" + self.table.text()


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and first line — with the line after it where the first ends in ':'
    (TensorRT's first logged error under "could not build …:") — else its type."""
    from trtlab.core.errors import UserError

    if isinstance(exc, UserError):  # written for people already: what was wrong and the fix, no class name
        return exc.line(prefix="")
    text = [line.strip().removeprefix("- ") for line in str(exc).strip().splitlines() if line.strip()]
    if not text:
        return type(exc).__name__
    first = text[0] + (f" {text[1]}" if text[0].endswith(":") and len(text) > 1 else "")
    return f"{type(exc).__name__}: {first}"


def engine_column(ab, model_path, experiment, workspace=None, run=None) -> EngineColumn:
    """Build and evaluate the engine of every variant of `ab` (an ABResult: its store, decode cache, split and
    variants), on the split's evaluation images; `run` (RunOptions): batch size, force, progress. Every failure
    is a row's status, never an exception: the literal results in `ab` stand."""
    from trtlab.evaluation.options import RunOptions

    run = run or RunOptions()
    column = EngineColumn(literal_backend=_literal_backend(ab), latency_batch=min(run.batch_size, 32) if isinstance(run.batch_size, int) else 32)
    try:
        from trtlab.backends.tensorrt.loader import import_tensorrt
        from trtlab.backends.tensorrt.readiness import gpu_for_tensorrt

        trt = import_tensorrt()
        column.tensorrt = str(trt.__version__)
        column.gpu = str(gpu_for_tensorrt(trt).get("name", ""))  # no GPU, an old driver: said once, for every row
        folder = _engines_folder(model_path, workspace)  # the model hashed once per A/B, not once per build
    except Exception as exc:  # noqa: BLE001 - reported as the row of every variant
        column.rows = [EngineRow(label, built.recipe.precision, f"build failed: {one_line(exc)}")
                       for label, built in ab.variants.items()]
        log.info(column.summary())
        return column
    engines, blocked = {}, None
    for label, built in ab.variants.items():
        if blocked is not None:  # TensorRT could create no builder (stub libraries …): the same for every row
            column.rows.append(EngineRow(label, built.recipe.precision, blocked))
            continue
        try:
            row, engine = _build(label, built, model_path, folder, workspace, run)
        except TensorRTCannotRun as exc:
            blocked = f"build failed: {one_line(exc)}"
            column.rows.append(EngineRow(label, built.recipe.precision, blocked))
            continue
        column.rows.append(row)
        if engine is not None:
            engines[label] = engine
            _evaluate(row, built, engine, ab, experiment, run)
    if engines and not any(row.precision == "fp16" and row.variant in engines for row in column.rows):
        _fp16_reference(column, engines, model_path, folder, workspace, run)  # the INT8 ÷ FP16 latency needs one
    for row in column.rows:
        if row.variant in engines and not row.failed:
            _time(row, engines[row.variant], column.latency_batch)
    summary = column.summary()
    log.info(summary)
    for row in column.failed:
        if row.status not in summary:  # one reason shared by every row is said once, in the summary
            log.info(f"{row.variant}: engine {row.status}")
    return column


def _literal_backend(ab) -> str:
    from trtlab.evaluation.identity import backend_of

    records = [ab.store.record(label) for label in ab.variants if label in ab.store]
    return next((backend_of(r) for r in records if backend_of(r)), "") or "the literal backend"


def _engines_folder(model_path, workspace) -> Path:
    """Where the A/B's engines go: <workspace>/engines/<model stem>-<model sha256[:8]>."""
    from trtlab.core.workspace import workspace_dir
    from trtlab.graph.classifier import inspect_classifier

    return workspace_dir(workspace) / "engines" / f"{Path(model_path).stem}-{inspect_classifier(model_path).sha256[:8]}"


def _build(label: str, built, model_path, folder: Path, workspace, run):
    """(row, EngineVariant with its engine, or None when the build failed); `folder` from _engines_folder."""
    from trtlab.backends.tensorrt.build import build_engine
    from trtlab.backends.tensorrt.options import EngineTarget
    from trtlab.workflows.engines import EngineVariant, _rebuild_command

    precision = built.recipe.precision
    entry = EngineVariant(label, built.identity, built.recipe.to_dict(), Path(built.model_path), precision,
                          Path(model_path), built)
    try:
        # One timing cache (<workspace>/engines/timing.cache) for every build: timing_cache=True.
        target = EngineTarget(name=f"{label}-{entry.key[:8]}", folder=folder, variant=entry.record(),
                              rebuild_command=_rebuild_command(Path(model_path), entry))
        # precision None: the graph's own, strongly typed (TensorRT 11 always; 10.x by STRONGLY_TYPED)
        entry.engine = build_engine(entry.onnx, None, target=target, workspace=workspace, timing_cache=True,
                                    force=run.force, progress=run.progress)
    except TensorRTCannotRun:
        raise  # no engine can be built here at all: engine_column says so for every row
    except Exception as exc:  # noqa: BLE001 - one line in the row; the literal results stand
        return EngineRow(label, precision, f"build failed: {one_line(exc)}"), None
    return EngineRow(label, precision, "reused" if entry.engine.reused else "built"), entry


def _evaluate(row: EngineRow, built, entry, ab, experiment, run) -> None:
    from trtlab.workflows.engines import _evaluate_entry

    try:
        row.label = _evaluate_entry(entry, "trt", ab.cache, ab.split, ab.store, experiment=experiment, run=run)
        engine, literal = ab.store.load(row.label), ab.store.load(row.variant)
    except Exception as exc:  # noqa: BLE001 - one line in the row; the literal results stand
        row.status = f"run failed: {one_line(exc)}"
        return
    from trtlab.evaluation.metrics import accuracy, agreement

    row.top1 = accuracy(engine).get("top1")
    agree = agreement(engine, literal)
    row.agreement = agree["top1_agreement"] if agree["compared"] else None


def _fp16_reference(column: EngineColumn, engines: dict, model_path, folder: Path, workspace, run) -> None:
    """An FP16 engine for the INT8 ÷ FP16 latency when the A/B compared no FP16 variant (latency only)."""
    from trtlab.quantization.variants import Recipe, build_variant

    try:
        built = build_variant(model_path, Recipe(precision="fp16"), workspace=workspace, progress=run.progress)
    except Exception as exc:  # noqa: BLE001
        column.rows.append(EngineRow("fp16", "fp16", f"build failed: {one_line(exc)}"))
        return
    try:
        row, engine = _build(built.name, built, model_path, folder, workspace, run)
    except TensorRTCannotRun as exc:
        row, engine = EngineRow(built.name, "fp16", f"build failed: {one_line(exc)}"), None
    if engine is not None:
        row.status = "latency reference (not in the A/B)"
        engines[row.variant] = engine
    column.rows.append(row)


def _time(row: EngineRow, entry, batch: int) -> None:
    from trtlab.backends.tensorrt.latency import benchmark_engine

    try:
        rows = benchmark_engine(entry.engine.engine_path, (batch,), LATENCY_ITERATIONS, LATENCY_WARMUP,
                                name=row.variant)
        row.p50_ms = rows[0]["p50_ms"] if rows else None
    except Exception as exc:  # noqa: BLE001 - the top-1 stands; the latency says why it is missing
        row.status += f"; timing failed: {one_line(exc)}"


__all__ = ["EngineColumn", "EngineRow", "engine_column"]
