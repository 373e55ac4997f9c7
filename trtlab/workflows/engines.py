"""A model's variants as TensorRT engines — or, without TensorRT, as the ONNX graphs ONNX Runtime runs.

Every engine is built from a variant (trtlab.quantization.variants.build_variant of a Recipe: fp32, fp16, int8
minmax / entropy / percentile …, the recipes notebook 03 compares), named by the variant's label and identity key.
The backend receives the graph the variant made and converts nothing. On TensorRT 10, TensorRT's own implicit
calibrators can be added (`tensorrt_calibrators=("entropy",)`); they calibrate on the very images trtlab's
calibration of the same recipe uses. Results of evaluating the engines go to the results store of the variants'
experiment (the source model on the evaluation images), labelled `trt-<variant>` and recorded with the backend.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from trtlab.core.identity import Identity
from trtlab.backends.tensorrt.latency import benchmark_engine, benchmark_runner, latency_table
from trtlab.quantization.variants import BuiltVariant, Recipe, variant_key
from trtlab.workflows.engine_reports import ORT_TIMING_NOTE, LatencyReport, NotedTable

log = logging.getLogger(__name__)

#: The recipes of notebook 03 (its compare() adds fp32; its widget adds fp16), so 02 builds the same variants.
DEFAULT_RECIPES = (Recipe(precision="fp32"), Recipe(precision="fp16"), Recipe(algorithm="minmax"),
                   Recipe(algorithm="entropy"), Recipe(algorithm="percentile"))



@dataclass
class EngineVariant:
    """One variant as the backend runs it: its label and identity, the graph it made, and its engine (TensorRT)."""

    label: str
    identity: Identity  # the variant's (what its results are keyed by)
    recipe: dict
    onnx: Path  # the graph the variant made: what TensorRT parses and ONNX Runtime runs
    precision: str  # what build_engine builds: fp32 / fp16 / int8 / int8-implicit
    source_model: Path
    built: BuiltVariant | None = None
    engine: object = None  # trtlab.backends.tensorrt.options.EngineBuild on TensorRT
    calibrator: object = None  # TensorRT's implicit calibrator (int8-implicit only)

    @property
    def key(self) -> str:
        """The variant's key apart from its graph's sha256, which the engine's own identity holds (model_sha256):
        engines built before the sha256 joined the variant's identity keep their names, and are not rebuilt."""
        return variant_key(self.identity.replace(model_sha256=None))

    @property
    def path(self) -> Path:
        return self.engine.engine_path if self.engine is not None else self.onnx

    def record(self) -> dict:
        return {"label": self.label, "key": self.key, "identity": self.identity}


def fusion_precision_report(onnx_path, label: str | None = None):
    """HOOK — the fusion-aware precision report (issue 17, built in trtlab.graph by another change): what TensorRT
    would fuse and in which precision each fused op computes, for the exact graph TensorRT receives. Returns that
    report, or None while trtlab.graph does not provide it (EngineSet.precision_report then shows the weighted
    ops' compute types, labelled as not fusion-aware)."""
    try:
        from trtlab.graph.fusion import precision_report  # the module the fusion-aware report lands in
    except ImportError:
        return None
    return precision_report(onnx_path, name=label)


@dataclass
class EngineSet:
    """The variants of one model, as engines (TensorRT) or ONNX graphs (ONNX Runtime fallback), by label."""

    backend: str
    model: Path
    entries: dict  # label → EngineVariant
    notes: list = field(default_factory=list)
    dataset: object = None
    split: object = None
    preprocess: str = "tf-lite"
    workspace: object = None
    source_data: object = None  # what build_engines was given as data (resolved by _data_of on first need)
    _cache: object = None
    _latency: object = None  # measured_latency(): the engines timed once

    @property
    def variants(self) -> dict:
        """label → engine file (TensorRT) or ONNX graph (ONNX Runtime)."""
        return {label: entry.path for label, entry in self.entries.items()}

    def table(self):
        """One row per variant: its precision, the graph or engine that runs it, and its identity key."""
        from trtlab.core.workspace import workspace_dir
        from trtlab.core.tables import full_text_frame

        root = workspace_dir(self.workspace)

        def shown(path: Path) -> str:
            if path == self.model:
                return f"{path.name} (the model)"
            return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)

        rows = [{"variant": label, "precision": entry.precision,
                 "runs as": "TensorRT engine" if entry.engine is not None else "ONNX graph (ONNX Runtime)",
                 "file": shown(entry.path), "key": entry.key} for label, entry in self.entries.items()]
        # whole file names: pandas cuts cells at 50 characters, just before the part that tells variants apart
        return full_text_frame(rows, ["variant", "precision", "runs as", "file", "key"]).set_index("variant")

    def _repr_html_(self) -> str:
        where = ("TensorRT engines" if self.backend == "trt" else
                 "ONNX graphs on ONNX Runtime (no TensorRT here: nothing was built for a GPU)")
        notes = "".join(f"<li>{note}</li>" for note in self.notes)
        return (f"<p><b>{len(self.entries)} variants of {self.model.name}</b> as {where}</p>"
                + (f"<ul>{notes}</ul>" if notes else "") + self.table().to_html())

    def decode_cache(self, progress: bool = True):
        if self._cache is None:
            _data_of(self)
            from trtlab.data.decode_cache import build_decode_cache
            from trtlab.data.preprocess import get_preprocess

            self._cache = build_decode_cache(self.dataset, get_preprocess(self.preprocess), self.workspace,
                                             progress=progress)
        return self._cache

    def _entry(self, label: str) -> EngineVariant:
        if label not in self.entries:
            from trtlab.core.errors import UserValueError

            raise UserValueError(f"no variant {label!r}", f"choose one of {', '.join(self.entries)}")
        return self.entries[label]

    def inspection(self):
        """Per variant, where it runs: TensorRT's engine inspector counts, or on ONNX Runtime the compute type of
        the graph's weighted ops (not fusion-aware; see precision_report)."""
        import pandas as pd

        rows = []
        for label, entry in self.entries.items():
            if self.backend == "trt":
                from trtlab.backends.tensorrt.inspection import inspect_engine

                rows.append({"variant": label, **inspect_engine(entry.path).counts})
            else:
                rows.append({"variant": label,
                             **{f"{k.lower()}_weighted_ops": v for k, v in _weighted_counts(entry.onnx).items()}})
        table = pd.DataFrame(rows).set_index("variant")
        counts = [c for c in table.columns if c.endswith(("_ops", "_layers", "_tensors"))]
        table[counts] = table[counts].fillna(0).astype(int)
        if self.backend == "trt":
            return table
        return NotedTable(table, "No TensorRT here, so no engine to inspect: the ONNX graphs' weighted ops by the "
                                 "type of their inputs (what TensorRT really runs shows only in an engine).")

    def layers(self, label: str):
        """Per-layer table of one variant: TensorRT's engine inspector (name, type, precision, formats, weights,
        tactic), or on ONNX Runtime the weighted ops of the graph with the type they compute in."""
        entry = self._entry(label)
        if self.backend == "trt":
            from trtlab.backends.tensorrt.inspection import inspect_engine

            return inspect_engine(entry.path).layers
        return _weighted_table(entry.onnx)

    def precision_report(self, label: str | None = None):
        """HOOK for the fusion-aware precision report of each variant (or of `label`): see fusion_precision_report.
        Until trtlab.graph provides it, the weighted ops by compute type, labelled as not fusion-aware."""
        import pandas as pd

        labels = [label] if label else list(self.entries)
        # named by the label, as in every table (the graph's folder name adds the identity key)
        reports = {name: fusion_precision_report(self._entry(name).onnx, name) for name in labels}
        if all(report is not None for report in reports.values()):
            return reports if label is None else reports[label]
        rows = [{"variant": name, **{f"{kind} weighted ops": count
                                     for kind, count in _weighted_counts(self._entry(name).onnx).items()}}
                for name in labels]
        table = pd.DataFrame(rows).set_index("variant").fillna(0).astype(int)
        return NotedTable(table, "Weighted ops (Conv, Gemm, MatMul) by the type of their inputs — INT8 where a "
                                 "DequantizeLinear feeds them. Not fusion-aware: the fusion-aware report of "
                                 "trtlab.graph replaces this table when it lands.")

    def benchmark(self, batch_sizes=None, iterations: int | None = None, warmup: int | None = None) -> LatencyReport:
        """Latency per variant and batch size, INT8 next to FP16. TensorRT: GPU time (CUDA events) at batch 1, 8
        and 32, 500 timings by default (p50, p90, p99); ONNX Runtime: host wall clock at batch 1, 10 timings by
        default (the median only: CPU timings do not predict TensorRT, so they are not worth minutes)."""
        on_trt = self.backend == "trt"
        batch_sizes = batch_sizes or ((1, 8, 32) if on_trt else (1,))
        iterations = iterations or (500 if on_trt else 10)
        warmup = warmup if warmup is not None else (20 if on_trt else 3)
        rows = []
        for label, entry in self.entries.items():
            if on_trt:
                rows += benchmark_engine(entry.path, batch_sizes, iterations, warmup, name=label)
            else:
                from trtlab.backends.ort import OrtRunner

                rows += benchmark_runner(OrtRunner(entry.onnx), batch_sizes, iterations, warmup, name=label)
        table = latency_table(rows)
        return LatencyReport(table, "TensorRT (GPU time, CUDA events)" if on_trt else "ONNX Runtime (CPU)",
                             iterations, "" if on_trt else ORT_TIMING_NOTE)

    def measured_latency(self):
        """What notebook 02 shows for speed: on TensorRT, benchmark() of the engines (timed once, then kept); without
        TensorRT a sentence saying there is no latency to compare (CPU timings of Q/DQ graphs are not one)."""
        from trtlab.views.formatting import Sentence

        if self.backend != "trt":
            return Sentence("No TensorRT engine here, so no latency comparison: the roofline estimate is the only speed "
                            "figure before a build (engines.benchmark() still times the ONNX graphs on this CPU, "
                            "labelled as such).")
        if self._latency is None:
            self._latency = self.benchmark()
        return self._latency

    def engine_accuracy(self, **options):
        """On TensorRT, evaluate() (every engine on the evaluation images, stored beside notebook 03's results);
        without TensorRT a sentence saying notebook 03 evaluates the same variants on ONNX Runtime."""
        from trtlab.views.formatting import Sentence

        if self.backend != "trt":
            return Sentence("No TensorRT here: notebook 03 evaluates these same variants on ONNX Runtime.")
        return self.evaluate(**options)

    def evaluate(self, batch_size: int = 32, force: bool = False, progress: bool = True):
        """Evaluate every variant on the split's evaluation images; results go to the store of the variants'
        experiment (the one notebooks 03/04 read), TensorRT results labelled `trt-<variant>` with the engine and
        TensorRT version recorded. Returns the comparison table (reference: the FP32 variant on this backend)."""
        from trtlab.evaluation.identity import Experiment
        from trtlab.evaluation.metrics import variant_table
        from trtlab.evaluation.options import RunOptions
        from trtlab.evaluation.results import ResultsStore
        from trtlab.graph.classifier import inspect_classifier

        cache = self.decode_cache(progress)
        experiment = Experiment.for_evaluation(inspect_classifier(self.model), cache, self.split.evaluation,
                                               self.split)
        store = ResultsStore.for_experiment(experiment, self.workspace)
        run = RunOptions(batch_size=batch_size, force=force, progress=progress)
        labels = [_evaluate_entry(entry, self.backend, cache, self.split, store, experiment=experiment, run=run)
                  for entry in self.entries.values()]
        reference = next((name for name, entry in zip(labels, self.entries.values()) if entry.precision == "fp32"),
                         labels[0])
        return variant_table(store.load_all(labels), reference=reference)


def _evaluate_entry(entry: EngineVariant, backend, cache, split, store, *, experiment, run) -> str:
    """Evaluate one variant (TensorRT: its engine, stored as trt-<variant> with the engine's facts in its
    identity; else its graph on ONNX Runtime); returns the stored label. `run`: RunOptions."""
    from trtlab.evaluation.evaluate import evaluate, evaluate_variant
    from trtlab.evaluation.options import EvalTarget

    if backend != "trt":
        return evaluate_variant(entry.built, cache, split.evaluation, store, split=split, experiment=experiment,
                                run=dataclasses.replace(run, backend="ort")).variant
    sidecar = entry.engine.sidecar
    engine = {"tensorrt": sidecar.get("tensorrt_version"), "recipe_hash": sidecar.get("recipe_hash"),
              "gpu": sidecar.get("gpu_name")}
    target = EvalTarget(indices=split.evaluation, recipe=entry.recipe, experiment=experiment, store=store,
                        identity=entry.identity.replace(backend={"name": "trt", **engine}),
                        record_extra={"engine": {**engine, "path": str(entry.engine.engine_path),
                                                 "tf32": (sidecar.get("tf32") or {}).get("note")},
                                      "variant_label": entry.label})
    runner = {"engine": str(entry.engine.engine_path), "precision": entry.precision}
    result = evaluate(entry.onnx, cache, f"trt-{entry.label}", target=target,
                      run=dataclasses.replace(run, backend="trt", runner_options=runner))
    return result.variant


def _weighted_counts(onnx_path) -> dict:
    import onnx

    from trtlab.backends.tensorrt.options import graph_facts

    kinds = list(graph_facts(onnx.load(str(onnx_path), load_external_data=False)).weighted.values())
    return {kind: kinds.count(kind) for kind in ("INT8", "FP16", "FP32", "BF16", "?") if kind in kinds}


def _weighted_table(onnx_path):
    import onnx
    import pandas as pd

    from trtlab.backends.tensorrt.options import graph_facts

    model = onnx.load(str(onnx_path), load_external_data=False)
    types = {n.name: n.op_type for n in model.graph.node}
    weighted = graph_facts(model).weighted
    table = pd.DataFrame([{"name": name, "type": types.get(name, name.split()[-1]), "computes in": kind}
                          for name, kind in weighted.items()], columns=["name", "type", "computes in"])
    return NotedTable(table, "The ONNX graph's weighted ops by the type of their inputs (not fusion-aware; no "
                             "TensorRT engine here).")


# ----------------------------------------------------------------------------------------------------------------
# Building the set
# ----------------------------------------------------------------------------------------------------------------
def build_engines(model=None, recipes=None, data=None, backend: str = "auto", workspace=None,
                  preprocess: str = "tf-lite", tensorrt_calibrators=(), calibration_images: int | None = None,
                  calibration_batch: int = 8, weakly_typed: bool = False, force: bool = False, progress: bool = True,
                  **build_options) -> EngineSet:
    """Build the variants of `model` (default: the demo EfficientNet-Lite0) from `recipes` (default: fp32, fp16 and
    INT8 minmax / entropy / percentile — notebook 03's) and, with TensorRT, their engines.

    `data`: what INT8 variants calibrate on and evaluate() evaluates — trtlab.prepared_data() (the default: notebook
    01's data, else the demo photos), a (dataset, split) pair, or a Dataset (its saved split is used). Recipes may
    be Recipe objects, dicts, or 'fp32' / 'fp16' / 'int8'. `tensorrt_calibrators` (TensorRT 10 only): also build
    TensorRT's own implicit INT8 ('entropy', 'minmax') on the same calibration images. `weakly_typed` (TensorRT 10
    only): the legacy weakly typed path, guards as layer precision. Other options go to build_engine (min/opt/
    max_batch, workspace_mb, tf32, timing_cache, verbose). Without TensorRT, says so once and keeps the ONNX
    variants, which ONNX Runtime runs.
    """
    model = _model_path(model, workspace)
    recipes = [_as_recipe(r) for r in (recipes if recipes is not None else DEFAULT_RECIPES)]
    use_trt = _use_tensorrt(backend, vouched_gpu=build_options.get("gpu") is not None)
    engines = EngineSet("trt" if use_trt else "ort", model, {}, [], preprocess=preprocess, workspace=workspace,
                        source_data=data)
    if use_trt and tensorrt_calibrators:
        _check_implicit_possible()  # refused on TensorRT 11 before any variant is built
    for recipe in recipes:
        entry = _variant_entry(engines, recipe, weakly_typed and use_trt, force, progress)
        engines.entries[entry.label] = entry
    if tensorrt_calibrators:
        _add_tensorrt_calibrators(engines, tensorrt_calibrators, calibration_images, calibration_batch, force,
                                  progress)
    if use_trt:
        from trtlab.backends.tensorrt.build import build_engine
        from trtlab.core.workspace import workspace_dir
        from trtlab.graph.classifier import inspect_classifier

        # <workspace>/engines/<model>-<sha8>/<variant label>-<variant key>.<precision>.<build hash>.engine
        folder = workspace_dir(workspace) / "engines" / f"{model.stem}-{inspect_classifier(model).sha256[:8]}"
        for entry in engines.entries.values():
            legacy = entry.identity.tensorrt == "weakly typed"  # guards become layer precision there
            entry.engine = build_engine(entry.onnx, entry.precision, workspace=workspace,
                                        name=f"{entry.label}-{entry.key[:8]}", folder=folder,
                                        variant=entry.record(), calibrator=entry.calibrator,
                                        rebuild_command=_rebuild_command(model, entry), force=force,
                                        progress=progress, weakly_typed=legacy,
                                        guards=tuple(entry.recipe.get("guards", ())) if legacy else (),
                                        **build_options)
    return engines


def _model_path(model, workspace) -> Path:
    if model is None:
        from trtlab.data.demo import export_demo_model

        return export_demo_model("efficientnet-lite0", workspace)
    path = Path(model)
    if not path.is_file():
        from trtlab.core.errors import UserFileNotFound

        raise UserFileNotFound(f"model {path}: no such file", "give the path of an ONNX classifier")
    return path


def _as_recipe(recipe) -> Recipe:
    if isinstance(recipe, Recipe):
        return recipe
    if isinstance(recipe, str):
        return Recipe(precision=recipe)  # 'int8' → the default INT8 recipe (entropy)
    return Recipe.from_dict(dict(recipe))


def _use_tensorrt(backend: str, vouched_gpu: bool = False) -> bool:
    """Whether engines are built: 'trt' (TensorRT must import and have a GPU: else one line), 'auto' where TensorRT
    imports and can run (else said once, and the ONNX variants go on ONNX Runtime); `vouched_gpu`: the caller
    passed the GPU build_engine builds for (its checks are the caller's)."""
    from trtlab.backends import BACKENDS, tensorrt_available

    if backend not in ("auto", *BACKENDS):
        from trtlab.core.errors import UserValueError

        raise UserValueError(f"unknown backend {backend!r}", "choose auto, ort or trt")
    from trtlab.backends.tensorrt.loader import import_tensorrt
    from trtlab.backends.tensorrt.readiness import TensorRTCannotRun, gpu_for_tensorrt

    reason = "backend='ort' requested"
    if backend == "trt" or (backend == "auto" and tensorrt_available()):
        trt = import_tensorrt()  # 'trt' without TensorRT: raises with the reason and the fix
        try:
            if not vouched_gpu:
                gpu_for_tensorrt(trt)  # no GPU, a driver too old: before any variant is built
            return True
        except TensorRTCannotRun as exc:
            if backend == "trt":
                raise
            reason = exc.what
    elif backend == "auto":
        reason = "TensorRT does not import here"
    log.info(f"{reason}: no engines to build; continuing on ONNX Runtime with the ONNX variants.")
    return False


def _data_of(engines: EngineSet):
    """(dataset, split) the INT8 variants calibrate on and evaluate() uses, resolved on first need."""
    if engines.dataset is None:
        data = engines.source_data
        if data is None:
            from trtlab.data.prepared import prepared_data

            data = prepared_data(engines.workspace)
        if hasattr(data, "split") and hasattr(data, "dataset"):
            engines.dataset, engines.split = data.dataset, data.split
        elif isinstance(data, tuple):
            engines.dataset, engines.split = data
        else:
            from trtlab.data.split import saved_split
            from trtlab.quantization.variants import default_calibration_pool

            engines.dataset = data
            engines.split = saved_split(data, default_calibration_pool(data), workspace=engines.workspace)
    return engines.dataset, engines.split


def _variant_entry(engines: EngineSet, recipe: Recipe, weakly_typed: bool, force: bool, progress: bool):
    from trtlab.quantization.variants import build_variant

    cache = split = None
    if recipe.precision == "int8":
        _, split = _data_of(engines)
        cache = engines.decode_cache(progress)
    built = build_variant(engines.model, recipe, cache, None if split is None else split.calibration,
                          engines.workspace, force=force, progress=progress)
    precision = built.recipe.precision
    if not weakly_typed:
        return EngineVariant(built.name, built.identity, built.recipe.to_dict(), Path(built.model_path), precision,
                             engines.model, built)
    # TensorRT 10 legacy: FP16 from the FP32 graph through BuilderFlag.FP16; INT8 from the Q/DQ graph; guards as
    # layer precision. A different engine from the strongly typed one, so its label and identity say so.
    onnx = engines.model if precision == "fp16" else Path(built.model_path)
    return EngineVariant(f"{built.name}+weakly-typed", built.identity.replace(tensorrt="weakly typed"),
                         built.recipe.to_dict(), onnx, precision, engines.model, built)


def _check_implicit_possible() -> None:
    from trtlab.backends.tensorrt.loader import implicit_int8_unsupported, import_tensorrt, tensorrt_major

    trt = import_tensorrt()
    if tensorrt_major(trt) >= 11:
        raise implicit_int8_unsupported(trt.__version__)


def _add_tensorrt_calibrators(engines: EngineSet, algorithms, calibration_images, calibration_batch, force,
                              progress) -> None:
    """TensorRT 10's implicit INT8 of the FP32 model, one per algorithm, calibrated on the images trtlab's
    calibration of the same recipe uses."""
    if engines.backend != "trt":
        engines.notes.append(f"TensorRT's own calibrators ({', '.join(algorithms)}) need TensorRT 10; skipped on "
                             f"ONNX Runtime")
        log.info(engines.notes[-1])
        return
    from trtlab.backends.tensorrt.loader import import_tensorrt
    from trtlab.quantization.tensorrt_calibrator import tensorrt_calibrator

    trt = import_tensorrt()
    _, split = _data_of(engines)
    cache = engines.decode_cache(progress)
    for algorithm in algorithms:
        recipe = Recipe(precision="int8", algorithm=algorithm, calibration_images=calibration_images,
                        calibration_batch=calibration_batch)
        calibrator, recipe = tensorrt_calibrator(trt, engines.model, recipe, cache, split.calibration,
                                                 engines.workspace, use_cache=not force, progress=progress)
        recipe_dict = {**recipe.to_dict(), "precision": "int8-implicit"}
        label = "int8-implicit-" + recipe.name[len("int8-"):]
        identity = Identity(recipe=recipe_dict, calibration=calibrator.identity,
                            scales={"source": "tensorrt-calibrator"})
        engines.entries[label] = EngineVariant(label, identity, recipe_dict, engines.model, "int8-implicit",
                                               engines.model, calibrator=calibrator)


def _rebuild_command(model: Path, entry: EngineVariant) -> str:
    """The `python -m trtlab build` line that makes this variant's engine again."""
    recipe = entry.recipe
    parts = [f"python -m trtlab build --model {model} --precision {entry.precision}"]
    if entry.precision in ("int8", "int8-implicit"):
        parts.append(f"--calibrator {recipe.get('algorithm')} --calib-images {recipe.get('calibration_images')} "
                     f"--calib-batch {recipe.get('calibration_batch')} --calib-data <the calibration data>")
    parts += [f"--guard {g}" for g in recipe.get("guards", [])]
    if entry.identity.tensorrt == "weakly typed":
        parts.append("--weakly-typed")
    return " ".join(parts + ["--force"])
