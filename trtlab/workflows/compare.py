"""Calibration A/B: build and evaluate variants against FP32 on a saved calibration/evaluation split.

`compare(...)` is what notebook 03 and `python -m trtlab calibrate` call; `ab_widgets(...)` wraps it in
ipywidgets whose callbacks are the plain functions below (testable without a browser).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from trtlab.quantization.thresholds import ALGORITHMS
from trtlab.data.dataset import Dataset
from trtlab.data.decode_cache import DecodeCache, build_decode_cache
from trtlab.data.decode_stream import decode_in_background
from trtlab.evaluation.results import ResultsStore
from trtlab.data.split import CalibrationSizeError, Split, saved_split  # noqa: F401  (saved_split: re-exported)
from trtlab.evaluation.evaluate import evaluate_variant, evaluate_variants
from trtlab.evaluation.options import RunOptions, with_shortcuts
from trtlab.quantization.variants import BuiltVariant, Recipe, build_variant, default_calibration_pool
from trtlab.views.verdict import PairError
from trtlab.workflows.overlap import decode_first, import_report_modules_meanwhile

log = logging.getLogger(__name__)

GUARD_CHOICES = ("first_layer", "last_layer", "softmax")


@dataclass
class ABResult:
    """What compare() found. Its display opens with the answer (issue 35): the verdict between the two variants
    compared head to head (answer()), then which devices ran, the variant table and the engines."""

    table: object  # views.formatting.Table: the variant table for people (index: the stored labels); `.raw` = data
    store: ResultsStore
    cache: DecodeCache
    split: Split
    variants: dict[str, BuiltVariant] = field(default_factory=dict)  # stored label → built variant
    ran_on: str = ""  # which devices computed the literal results, in words
    engines: object = None  # workflows.ab_engines.EngineColumn where TensorRT engines were built, else None
    same_graph: dict = field(default_factory=dict)  # label → the label evaluated for it (a byte-identical graph)
    _default: object = field(default=None, repr=False)  # the default head-to-head, computed once

    @property
    def reference(self) -> str:
        return next(label for label, v in self.variants.items() if v.recipe.precision == "fp32")

    def answer(self) -> str:
        """The one-sentence answer: the verdict between the two variants compared head to head (default pair), or,
        with one variant besides the reference, how close it is to it."""
        from trtlab.views.verdict import PairError

        try:
            return self.verdict().sentence
        except PairError:
            others = [label for label in self.table.index if label != self.reference]
            return one_variant_sentence(self.store, others[0], self.reference) if others else \
                f"Only {self.reference} was evaluated: add a recipe to compare."

    def recommended(self, **changes) -> Recipe:
        """The recipe of the variant the answer recommends — the verdict's `Ship …`, else the one closer to the
        reference; with one variant besides the reference, that one — changed by `changes` (e.g.
        `result.recommended(guards=('first_layer', 'last_layer'))`)."""
        from trtlab.views.verdict import PairError

        try:
            label = self.verdict().decision.record()["closer"]
        except PairError:
            label = next(label for label in self.table.index if label != self.reference)
        return dataclasses.replace(self.variants[label].recipe, **changes)

    def notes(self) -> list[str]:
        return [f"{label} makes the same graph as {kept} (byte-identical): evaluated once, shown as {kept}."
                for label, kept in self.same_graph.items()]

    def __repr__(self) -> str:
        parts = [self.answer(), ""] + ([self.ran_on] if self.ran_on else [])
        parts.append(self.table.text())
        parts += self.notes()
        if self.engines is not None:
            parts.append(repr(self.engines))
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        from html import escape

        parts = [f"<p><b>{escape(self.answer())}</b></p>"]
        parts += [f"<p>{escape(self.ran_on)}</p>"] if self.ran_on else []
        parts.append(self.table.html())
        parts += [f"<p>{escape(note)}</p>" for note in self.notes()]
        if self.engines is not None:
            parts.append(self.engines._repr_html_())
        return "\n".join(parts)

    @property
    def data(self):
        """The numeric variant table (pandas DataFrame) that `table` shows formatted: for code."""
        return self.table.raw

    def plot(self):
        """The summary figure (accuracy with intervals; agreement and cosine with FP32), displayable anywhere."""
        from trtlab.views.figures import FigureView
        from trtlab.views.report import plot_summary

        fig, _ = plot_summary(self.store, list(self.table.index), reference="fp32")
        return FigureView(fig)

    def verdict(self, first: str | None = None, second: str | None = None, reference: str = "fp32"):
        """Head to head of two variants compared here (default: minmax vs entropy when both ran, calibrated alike,
        else the best two INT8 variants): accuracy and agreement with intervals, McNemar between the two, the
        classes each loses, the calibration thresholds that differ most, and one sentence saying whether the
        difference is real. The default one is kept as this results store's last verdict, which notebooks 04 and
        05 follow."""
        from trtlab.views.verdict import head_to_head

        default = first is None and second is None and reference == "fp32"
        if default and self._default is not None:
            return self._default
        first, second = (self.same_graph.get(name, name) if name else name for name in (first, second))
        # a label of this store beyond the table (another A/B on the same images, e.g. the plain recipe a recovered
        # one is compared with) can be named too
        stored = set(self.store.variants())
        named = [n for n in (first, second) if n and n not in self.table.index and n in stored]
        results = self.store.load_all(list(self.table.index) + named)
        caches = {name: built.calibration_cache for name, built in self.variants.items() if built.calibration_cache}
        latencies = self.engines.latencies() if self.engines is not None else None
        h2h = head_to_head(results, first, second, reference, caches=caches, latencies=latencies)
        if default:
            self._default = h2h
            if h2h.decision is not None:
                self.store.save_verdict(h2h.decision.record())
        return h2h


def one_variant_sentence(store: ResultsStore, label: str, reference: str) -> str:
    """'int8-entropy@43+… against fp32 over 20 images: logit cosine 0.9802 (worst 0.9664), top-1 agreement
    100.0 %; top-1 90.0 % vs 90.0 % on 20 labelled images.' — the answer of an A/B of one variant."""
    from trtlab.evaluation.metrics import accuracy, agreement
    from trtlab.views.formatting import cosine, percent

    result, ref = store.load(label), store.load(reference)
    agree = agreement(result, ref)
    text = (f"{label} against {reference} over {agree['compared']} images: logit cosine "
            f"{cosine(agree['cosine_mean'])} (worst {cosine(agree['cosine_worst'])}), top-1 agreement "
            f"{percent(agree['top1_agreement'])}")
    mine, theirs = accuracy(result), accuracy(ref)
    if mine["labelled"]:
        text += f"; top-1 {percent(mine['top1'])} vs {percent(theirs['top1'])} on {mine['labelled']} labelled images"
    return text + "."


def check_calibration_sizes(recipes, split: Split, dataset: Dataset) -> None:
    """Refuse, before any work, recipes that ask for more calibration images than the split holds."""
    too_many = [r for r in recipes if r.precision == "int8" and (r.calibration_images or 0) > len(split.calibration)]
    if too_many:
        raise CalibrationSizeError(
            f"{', '.join(r.name for r in too_many)} ask(s) for {max(r.calibration_images for r in too_many)} "
            f"calibration images, but the calibration set of {dataset.name!r} has {len(split.calibration)}",
            f"use calibration_images ≤ {len(split.calibration)}, or a split with a larger calibration set")


@dataclass(frozen=True)
class InputOptions:
    """Which output of the model is the classifier and how images are cropped: `output` (default: the logits
    output), a 1001-class model's `background_class`, `crop`/`resize` (default: from the model's input)."""

    output: str | None = None
    background_class: str = "auto"
    crop: int | None = None
    resize: int | None = None


@dataclass(frozen=True)
class CalibrationOptions:
    """How the INT8 variants calibrate: on `calibration_images` images of the split (None: what the recipes name,
    else half the data up to DEFAULT_CALIBRATION_IMAGES), or with the scales of `import_cache` (a calibration
    cache file, trtlab's or TensorRT's own) instead of calibrating."""

    calibration_images: int | None = None
    import_cache: object = None


def compare(model_path, dataset: Dataset, recipes, preprocess="tf-lite", *, split: Split | None = None,
            workspace=None, inputs: InputOptions | None = None, calibration: CalibrationOptions | None = None,
            run: RunOptions | None = None, **shortcuts) -> ABResult:
    """Build each recipe's variant (calibrating on the split's calibration images), evaluate it and FP32 on the
    evaluation images, and return the comparison table (read back from the results store of this model and
    these evaluation images).

    Options come as three small objects, or as keywords naming their fields (`compare(model, data, recipes,
    split=split, backend="ort", batch_size=64)`): `inputs` (InputOptions: output, background_class, crop, resize),
    `calibration` (CalibrationOptions: calibration_images, import_cache), `run` (RunOptions: backend, batch_size,
    parallel, engines, force, progress).

    The model scored is the classifier the labels talk about (graph.classifier_view: the logits `output`, a
    1001-class model's `background_class`); the crop follows its input unless `crop`/`resize` (or a Preprocess)
    say otherwise. `import_cache` gives the INT8 scales instead of calibrating. Everything is checked before any
    image is decoded.

    Backend 'auto' runs the literal graphs on the torch GPU backend whenever a CUDA GPU is visible (else ONNX
    Runtime on the CPU); calibration runs where the backend has a GPU. `parallel`: 'auto' evaluates the variants
    in one process per GPU when more than one GPU is visible and the backend runs on the GPU (torch or TensorRT) —
    the stored results are those of one GPU (workflows.parallel); False evaluates here; N spreads over N worker
    processes. `engines`: 'auto' (where TensorRT imports) also builds each variant's TensorRT engine and evaluates
    it on the same images (`result.engines`, workflows.ab_engines); a failed engine is one line there and the
    literal results stand. `result.ran_on` says which devices ran."""
    inputs, calibration, run = with_shortcuts("compare", shortcuts, inputs=inputs or InputOptions(),
                                              calibration=calibration or CalibrationOptions(), run=run or RunOptions())
    from trtlab.backends import resolve_backend
    from trtlab.evaluation.identity import Experiment
    from trtlab.graph.classifier import check_float_model
    from trtlab.graph.classifier_view import classifier_view, preprocess_for
    from trtlab.quantization.statistics import calibration_device
    from trtlab.views.report import report_tables
    from trtlab.workflows.parallel import SharedEvaluation, evaluate_in_parallel, parallel_devices

    from trtlab.quantization.recipe import recipes_of
    from trtlab.workflows.checks import (check_backend, check_calibration_cache, check_free_space, check_guards,
                                         check_labels, decode_cache_pending)

    recipes = list(dict.fromkeys(recipes_of(recipes)))  # a recipe asked for twice is one variant
    if not any(r.precision == "fp32" for r in recipes):
        recipes = [Recipe(precision="fp32")] + recipes
    check_backend(run.backend)
    progress, import_cache = run.progress, calibration.import_cache

    # A wrong model, output or numbering fails here, before any image is decoded.
    view = classifier_view(model_path, dataset, output=inputs.output, background_class=inputs.background_class,
                           workspace=workspace, announce=progress)
    model_path, info = view.path, view.info
    if any(r.precision != "fp32" for r in recipes):
        check_float_model(view.source)  # an already-quantized model: evaluate it as it is instead
    check_labels(dataset, info)  # labels outside the model's classes too
    check_guards(model_path, [g for r in recipes if r.precision != "fp32" for g in r.guards], workspace, "guards")
    resolved, _ = resolve_backend(model_path, run.backend)
    devices = parallel_devices(run.parallel, resolved)  # a bad `parallel` is refused before any work
    with_engines = engines_wanted(run.engines)  # a bad `engines` too
    spec = preprocess_for(info, preprocess, inputs.crop, inputs.resize)
    if import_cache is not None:
        check_calibration_cache(import_cache, model_path, recipes, spec, workspace, "import_cache",
                                Path(view.source.path).name)
    dataset = dataset.holding_hashes(progress)  # the files' content hashes once for the whole run, not per step
    if split is None:
        wanted = calibration.calibration_images or max(
            (r.calibration_images or 0 for r in recipes if r.precision == "int8"), default=0) or \
            default_calibration_pool(dataset)
        split = saved_split(dataset, wanted, workspace=workspace)
    check_calibration_sizes(recipes, split, dataset)
    pending = decode_cache_pending(dataset, spec, workspace, progress)
    check_free_space(workspace, pending, spec.crop, model_path, sum(r.precision != "fp32" for r in recipes))
    first = decode_first(pending, run, devices, split, progress)  # None: everything first (said why)
    cache = build_decode_cache(dataset, spec, workspace, progress=progress, first=first)
    background = decode_in_background(cache, split.evaluation) if first is not None else None
    experiment = Experiment.for_evaluation(info, cache, split.evaluation, split)
    store = ResultsStore.for_experiment(experiment, workspace)
    with background or contextlib.nullcontext():  # an error stops the background decode (resumable)
        with calibration_device("cpu" if resolved == "ort" else None):  # the GPU when the backend has one
            variants = [build_variant(model_path, recipe, cache, split.calibration, workspace=workspace,
                                      force=run.force, progress=progress, calibration_cache_path=import_cache,
                                      reuse_cache=import_cache is not None) for recipe in recipes]
        variants, same_graph = one_per_graph(variants)
        import_report_modules_meanwhile()  # beside the evaluation, not the calibration
        from trtlab.evaluation.evaluate import evaluation_batch_size

        # one evaluation batch for every variant and worker ('auto': from this GPU's free memory, said once)
        run = dataclasses.replace(run, batch_size=evaluation_batch_size(run.batch_size, model_path, resolved,
                                                                        progress))
        if devices:
            shared = SharedEvaluation(dataset=dataset, preprocess=spec, split=split, experiment=experiment,
                                      store_folder=store.folder, workspace=workspace,
                                      run=dataclasses.replace(run, backend=resolved))
            labels = evaluate_in_parallel(variants, devices, shared)
        elif background is not None:  # every variant in lock-step on the rows as they are decoded
            labels = [r.variant for r in evaluate_variants(variants, cache, background.rows(split.evaluation), store,
                                                           split=split, experiment=experiment, run=run)]
            background.finish()
        else:
            labels = [evaluate_variant(variant, cache, split.evaluation, store, split=split, experiment=experiment,
                                       run=run).variant for variant in variants]
    built: dict[str, BuiltVariant] = dict(zip(labels, variants))  # recipes that named no size now name the one used
    reference = next(label for label, v in zip(labels, variants) if v.recipe.precision == "fp32")
    _, table = report_tables(store.load_all(list(built)), reference=reference)
    result = ABResult(table, store, cache, split, variants=built, ran_on=ran_on(resolved, devices),
                      same_graph={twin.name: built_name(kept, built) for twin, kept in same_graph})
    if progress:
        log.info(result.ran_on)
    if with_engines:  # after the literal results are stored: whatever happens here, they stand
        from trtlab.workflows.ab_engines import engine_column

        result.engines = engine_column(result, model_path, experiment=experiment, workspace=workspace, run=run)
    try:
        result.verdict()  # the answer (with the engines' latencies, where timed), kept as this store's last verdict
    except PairError:
        pass
    return result


def one_per_graph(variants: list[BuiltVariant]) -> tuple[list[BuiltVariant], list]:
    """(the variants with one per distinct graph file, [(left-out variant, the variant kept for it)]): two recipes
    whose graphs are byte-identical are one variant — evaluated once, shown under the first one's label."""
    import hashlib

    kept, twins, digests = [], [], {}
    for variant in variants:
        path = Path(variant.model_path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else str(path)
        if digest in digests and digests[digest].recipe.precision == variant.recipe.precision:
            twins.append((variant, digests[digest]))
            log.info(f"{variant.name} makes the same graph as {digests[digest].name} (byte-identical): evaluated "
                     f"once, shown as {digests[digest].name}")
            continue
        digests.setdefault(digest, variant)
        kept.append(variant)
    return kept, twins


def built_name(variant: BuiltVariant, built: dict) -> str:
    """The stored label of a built variant (recipes that named no calibration size are stored under the size
    they used)."""
    return next((label for label, v in built.items() if v is variant), variant.name)


def engines_wanted(engines) -> bool:
    """compare()'s `engines`: 'auto' → whether TensorRT imports here; True/False as given."""
    if engines == "auto":
        from trtlab.backends import tensorrt_available

        return tensorrt_available()
    if isinstance(engines, bool):
        return engines
    from trtlab.core.errors import UserValueError

    raise UserValueError(f"engines={engines!r} is not 'auto', True or False",
                         "use engines='auto' (TensorRT engines where TensorRT imports), True or False")


def ran_on(backend: str, devices: list[str] | None) -> str:
    """Which devices computed the A/B, in words: 'ran on 2× Tesla T4 (one process each), torch backend'."""
    if backend == "ort":
        return f"ran on the CPU ({os.cpu_count()} cores visible), ONNX Runtime backend"
    names = gpu_names()
    if devices:
        gpus = [d for d in devices if d.startswith("cuda:")]
        if not gpus:
            return f"ran in {len(devices)} worker processes on the CPU, {backend} backend"
        ids = [d.split(":", 1)[1] for d in gpus]
        shown = [names.get(i, f"GPU {i}") for i in ids]
        if len(set(ids)) < len(ids):
            return f"ran on {len(set(ids))} GPU(s) ({', '.join(sorted(set(shown)))}) in {len(devices)} processes, " \
                   f"{backend} backend"
        return f"ran on {_count(shown)} (one process each), {backend} backend"
    first = next(iter(names.values()), None)
    return f"ran on 1× {first}, {backend} backend" if first else f"ran on the CPU, {backend} backend"


def _count(names: list[str]) -> str:
    """['Tesla T4', 'Tesla T4'] → '2× Tesla T4'; mixed models listed."""
    groups: dict = {}
    for name in names:
        groups[name] = groups.get(name, 0) + 1
    return " + ".join(f"{n}× {name}" for name, n in groups.items())


def gpu_names() -> dict:
    """CUDA device id (as CUDA_VISIBLE_DEVICES names it) → GPU name, for the GPUs torch sees here."""
    from trtlab.workflows.parallel import visible_gpus

    ids = visible_gpus()
    if not ids:
        return {}
    import torch

    return {gpu: torch.cuda.get_device_name(k) for k, gpu in enumerate(ids)}


# -- widget callbacks (plain functions) -------------------------------------------------------------------------
def recipes_from_selection(algorithms, calibration_images: int, calibration_batch: int, guards=(),
                           node_guards: str = "", guard_precision: str | None = None, percentile: float = 99.99,
                           include_fp16: bool = False, recovery=()):
    """Widget state → recipes: one INT8 recipe per chosen algorithm, all with the same guards — in
    `guard_precision` when given, else each guard's own (the float path's, FP16; softmax FP32) — and an FP16
    variant first when asked, to see INT8 against FP16 as well as FP32. With `recovery` (method names,
    quantization.recovery), each algorithm's recipe comes plain and recovered, so the verdict compares the two."""
    from trtlab.core.errors import UserValueError

    if not algorithms:
        raise UserValueError("no calibration algorithm is selected", "choose at least one of minmax, entropy, percentile")
    try:
        percentile = float(percentile)
    except (TypeError, ValueError):
        raise UserValueError(f"percentile {percentile!r} is not a number", "type e.g. 99.99") from None
    from trtlab.graph.guards import parse_guards

    guard_list = parse_guards(list(guards) + [f"node:{n.strip()}" for n in node_guards.split(",") if n.strip()])
    if guard_precision:
        guard_list = [g.with_precision(guard_precision) for g in guard_list]
    fp16 = [Recipe(precision="fp16")] if include_fp16 else []
    from trtlab.quantization.recovery import resolve_methods

    recovery = resolve_methods(recovery)
    return fp16 + [Recipe(precision="int8", algorithm=a, calibration_images=_whole(calibration_images),
                          calibration_batch=_whole(calibration_batch), guards=tuple(guard_list),
                          percentile=percentile, recovery=methods)
                   for a in algorithms for methods in ([(), recovery] if recovery else [()])]


def _whole(value):
    """A widget's count as an int when it is one (64.0 from a FloatText); anything else left for Recipe to refuse."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def ab_widgets(model_path, dataset: Dataset, preprocess="tf-lite", workspace=None, split: Split | None = None,
               max_calibration_images: int | None = None):
    """ipywidgets panel: algorithms, calibration size, batch size, guards, recovery (each algorithm then plain and
    recovered, the verdict between them), 'also as TensorRT engines' (on where TensorRT imports), Run → which GPUs
    ran, the A/B table, the engines' table, plot and the head-to-head verdict."""
    from trtlab.core.packages import widget_modules

    w, ipython_display = widget_modules()
    Markdown, display = ipython_display.Markdown, ipython_display.display

    # Labels at their full width ('calibration images', not 'calib ima…'): ipywidgets' default cuts them at ~80 px.
    full = {"style": {"description_width": "initial"}}
    # The slider offers only what exists: the split's calibration images (or, without a split, all but one image).
    available = len(split.calibration) if split is not None else max(1, len(dataset) - 1)
    limit = min(max_calibration_images or available, available)
    algorithms = w.SelectMultiple(options=list(ALGORITHMS), value=("minmax", "entropy"), rows=len(ALGORITHMS),
                                  description="algorithms", **full)
    size = w.IntSlider(value=min(64, limit), min=1, max=limit, description="calibration images",
                       tooltip=f"at most {limit}: the calibration images that exist", **full)
    batch = w.Dropdown(options=[1, 4, 8, 16, 32], value=8, description="calibration batch", **full)
    percentile = w.FloatText(value=99.99, description="percentile algorithm keeps (%)", **full)
    guard_boxes = [w.Checkbox(value=False, description=g, indent=False, **full) for g in GUARD_CHOICES]
    nodes = w.Text(value="", description="node guards", placeholder="node names, comma separated", **full)
    # One vocabulary (issue 35): guarded layers run in the float path's precision, FP16, unless FP32 is asked for.
    precision = w.ToggleButtons(options=[("FP16 (the float path)", "fp16"), ("FP32", "fp32")], value="fp16",
                                description="guarded layers run in", **full)
    with_fp16 = w.Checkbox(value=True, description="also an FP16 variant", indent=False, **full)
    from trtlab.quantization.recovery import METHODS

    # Recovery (issue 39): INT8 accuracy won back in INT8 — each algorithm's variant is then built plain and
    # recovered; the precision report and speed estimate are the plain variant's by construction.
    recovery_boxes = [w.Checkbox(value=False, description=name, indent=False, tooltip=method.what, **full)
                      for name, method in METHODS.items()]
    from trtlab.backends import tensorrt_available

    # On where TensorRT imports: each variant's engine too (top-1, agreement with the literal graph, latency).
    engines = w.Checkbox(value=tensorrt_available(), description="also as TensorRT engines", indent=False,
                         tooltip="build each variant's TensorRT engine and evaluate it on the same images", **full)
    run = w.Button(description="Run A/B", button_style="primary")
    out = w.Output()

    def on_run(_=None):
        from trtlab.core.errors import shown_in

        out.clear_output()
        result = None
        with out, shown_in(out):  # a user mistake shows as one `error: … — …` line, not a traceback
            recipes = recipes_from_selection(algorithms.value, size.value, batch.value,
                                             [b.description for b in guard_boxes if b.value], nodes.value,
                                             precision.value, percentile.value, with_fp16.value,
                                             [b.description for b in recovery_boxes if b.value])
            result = compare(model_path, dataset, recipes, preprocess, split=split, workspace=workspace,
                             calibration=CalibrationOptions(calibration_images=size.value),
                             run=RunOptions(engines=engines.value))
            panel.last_result = result
            display(Markdown(result.ran_on))
            display(result.table)
            if result.engines is not None:
                display(result.engines)
            display(result.plot())  # a FigureView: rendered as PNG in JupyterLab and in executed notebooks
            show_verdict(result)
        return result

    run.on_click(on_run)
    panel = w.VBox([w.HBox([algorithms, w.VBox([size, batch, percentile])]),
                    w.HBox([w.Label("guards:")] + guard_boxes),
                    w.HBox([nodes, precision]), with_fp16, w.HBox([w.Label("recovery:")] + recovery_boxes), engines,
                    run, out])
    panel.run_callback = on_run  # lets tests and scripts press "Run" without a browser
    panel.last_result = None
    panel.engines_toggle = engines
    panel.recovery_toggles = {b.description: b for b in recovery_boxes}
    return panel


def show_verdict(result: ABResult) -> None:
    """The head-to-head of the A/B run's chosen algorithms, or what it needs."""
    from IPython.display import Markdown, display

    from trtlab.views.verdict import PairError

    try:
        display(result.verdict())
    except PairError:
        display(Markdown("Choose two calibration algorithms (e.g. minmax and entropy) to get a head-to-head verdict "
                         "between them."))
