"""Calibration A/B: build and evaluate variants against FP32 on a saved calibration/evaluation split.

`compare(...)` is what notebook 03 and `python -m trtlab calibrate` call; `ab_widgets(...)` wraps it in
ipywidgets whose callbacks are the plain functions below (testable without a browser).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtlab.quantization.thresholds import ALGORITHMS
from trtlab.data.dataset import Dataset
from trtlab.data.decode_cache import DecodeCache, build_decode_cache
from trtlab.evaluation.results import ResultsStore
from trtlab.data.split import CalibrationSizeError, Split, saved_split  # noqa: F401  (saved_split: re-exported)
from trtlab.evaluation.evaluate import evaluate_variant
from trtlab.quantization.variants import BuiltVariant, Recipe, build_variant

GUARD_CHOICES = ("first_layer", "last_layer", "softmax")


@dataclass
class ABResult:
    table: object  # views.formatting.Table: the variant table for people (index: the stored labels); `.raw` = data
    store: ResultsStore
    cache: DecodeCache
    split: Split
    variants: dict[str, BuiltVariant] = field(default_factory=dict)  # stored label → built variant

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
        """Head to head of two variants compared here (default: minmax vs entropy when both ran, else the best two
        INT8 variants): accuracy and agreement with intervals, McNemar between the two, the classes each loses, the
        calibration thresholds that differ most, and one sentence saying whether the difference is real."""
        from trtlab.views.verdict import head_to_head

        results = self.store.load_all(list(self.table.index))
        caches = {name: built.calibration_cache for name, built in self.variants.items() if built.calibration_cache}
        return head_to_head(results, first, second, reference, caches=caches)


def default_calibration_pool(dataset: Dataset) -> int:
    """Calibration images of a split made for recipes that name no number: half the data, at most
    DEFAULT_CALIBRATION_IMAGES (the rest evaluates)."""
    from trtlab.quantization.variants import DEFAULT_CALIBRATION_IMAGES

    return max(1, min(DEFAULT_CALIBRATION_IMAGES, len(dataset) // 2))


def check_calibration_sizes(recipes, split: Split, dataset: Dataset) -> None:
    """Refuse, before any work, recipes that ask for more calibration images than the split holds."""
    too_many = [r for r in recipes if r.precision == "int8" and (r.calibration_images or 0) > len(split.calibration)]
    if too_many:
        raise CalibrationSizeError(
            f"{', '.join(r.name for r in too_many)} ask(s) for {max(r.calibration_images for r in too_many)} "
            f"calibration images, but the calibration set of {dataset.name!r} has {len(split.calibration)}",
            f"use calibration_images ≤ {len(split.calibration)}, or a split with a larger calibration set")


def compare(model_path, dataset: Dataset, recipes, preprocess="tf-lite", split: Split | None = None,
            calibration_images: int | None = None, workspace=None, backend: str = "auto", batch_size: int = 32,
            progress: bool = True, force: bool = False, parallel="auto", output: str | None = None,
            background_class: str = "auto", crop: int | None = None, resize: int | None = None,
            import_cache=None) -> ABResult:
    """Build each recipe's variant (calibrating on the split's calibration images), evaluate it and FP32 on the
    evaluation images, and return the comparison table (read back from the results store of this model and
    these evaluation images).

    The model scored is the classifier the labels talk about (graph.classifier_view: the logits `output`, a
    1001-class model's `background_class`); the crop follows its input unless `crop`/`resize` (or a Preprocess)
    say otherwise. `import_cache` (a calibration cache file, trtlab's or TensorRT's own) gives the INT8 scales
    instead of calibrating. Everything is checked before any image is decoded.

    Calibration runs where the backend has a GPU (ONNX Runtime asked for: on the CPU). `parallel`: 'auto'
    evaluates the variants in one process per GPU when more than one GPU is visible and the backend runs on the
    GPU (torch or TensorRT) — the stored results are those of one GPU (workflows.parallel); False evaluates here,
    one variant after another; N spreads over N worker processes."""
    from trtlab.backends import resolve_backend
    from trtlab.evaluation.identity import Experiment
    from trtlab.graph.classifier import check_float_model
    from trtlab.graph.classifier_view import classifier_view, preprocess_for
    from trtlab.quantization.statistics import calibration_device
    from trtlab.views.report import report_tables
    from trtlab.workflows.parallel import evaluate_in_parallel, parallel_devices

    from trtlab.quantization.recipe import recipes_of
    from trtlab.workflows.checks import check_backend, check_calibration_cache, check_guards, check_labels

    recipes = recipes_of(recipes)
    if not any(r.precision == "fp32" for r in recipes):
        recipes = [Recipe(precision="fp32")] + recipes
    check_backend(backend)

    # A wrong model, output or numbering fails here, before any image is decoded.
    view = classifier_view(model_path, dataset, output, background_class, workspace, announce=progress)
    model_path, info = view.path, view.info
    if any(r.precision != "fp32" for r in recipes):
        check_float_model(view.source)  # an already-quantized model: evaluate it as it is instead
    check_labels(dataset, info)  # labels outside the model's classes too
    check_guards(model_path, [g for r in recipes if r.precision != "fp32" for g in r.guards], workspace, "guards")
    resolved, _ = resolve_backend(model_path, backend)
    devices = parallel_devices(parallel, resolved)  # a bad `parallel` is refused before any work
    spec = preprocess_for(info, preprocess, crop, resize)
    if import_cache is not None:
        check_calibration_cache(import_cache, model_path, recipes, spec, workspace, "import_cache",
                                Path(view.source.path).name)
    if split is None:
        wanted = calibration_images or max((r.calibration_images or 0 for r in recipes if r.precision == "int8"),
                                           default=0) or default_calibration_pool(dataset)
        split = saved_split(dataset, wanted, workspace=workspace)
    check_calibration_sizes(recipes, split, dataset)
    cache = build_decode_cache(dataset, spec, workspace, progress=progress)
    experiment = Experiment.for_evaluation(info, cache, split.evaluation, split)
    store = ResultsStore.for_experiment(experiment, workspace)
    with calibration_device("cpu" if resolved == "ort" else None):  # the GPU when the backend has one
        variants = [build_variant(model_path, recipe, cache, split.calibration, workspace, force=force,
                                  progress=progress, calibration_cache_path=import_cache,
                                  reuse_cache=import_cache is not None) for recipe in recipes]
    if devices:
        labels = evaluate_in_parallel(variants, devices, dataset, spec, workspace, split, experiment, store.folder,
                                      resolved, batch_size, force, progress)
    else:
        labels = [evaluate_variant(variant, cache, split.evaluation, store, backend=backend, batch_size=batch_size,
                                   progress=progress, force=force, split=split, experiment=experiment).variant
                  for variant in variants]
    built: dict[str, BuiltVariant] = dict(zip(labels, variants))  # recipes that named no size now name the one used
    reference = next(label for label, v in zip(labels, variants) if v.recipe.precision == "fp32")
    _, table = report_tables(store.load_all(list(built)), reference=reference)
    return ABResult(table, store, cache, split, built)


# -- widget callbacks (plain functions) -------------------------------------------------------------------------
def recipes_from_selection(algorithms, calibration_images: int, calibration_batch: int, guards=(),
                           node_guards: str = "", guard_precision: str = "fp32", percentile: float = 99.99,
                           include_fp16: bool = False):
    """Widget state → recipes: one INT8 recipe per chosen algorithm, all with the same guards (and an FP16 variant
    first when asked, to see INT8 against FP16 as well as FP32)."""
    from trtlab.core.errors import UserValueError

    if not algorithms:
        raise UserValueError("no calibration algorithm is selected", "choose at least one of minmax, entropy, percentile")
    try:
        percentile = float(percentile)
    except (TypeError, ValueError):
        raise UserValueError(f"percentile {percentile!r} is not a number", "type e.g. 99.99") from None
    from trtlab.graph.guards import parse_guards

    guard_list = parse_guards(list(guards) + [f"node:{n.strip()}" for n in node_guards.split(",") if n.strip()])
    if guard_precision == "fp16":
        guard_list = [g.with_precision("fp16") for g in guard_list]
    fp16 = [Recipe(precision="fp16")] if include_fp16 else []
    return fp16 + [Recipe(precision="int8", algorithm=a, calibration_images=_whole(calibration_images),
                          calibration_batch=_whole(calibration_batch), guards=tuple(guard_list),
                          percentile=percentile) for a in algorithms]


def _whole(value):
    """A widget's count as an int when it is one (64.0 from a FloatText); anything else left for Recipe to refuse."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def ab_widgets(model_path, dataset: Dataset, preprocess="tf-lite", workspace=None, split: Split | None = None,
               max_calibration_images: int | None = None):
    """ipywidgets panel: algorithms, calibration size, batch size, guards, Run → A/B table, plot and the
    head-to-head verdict of the chosen algorithms."""
    import ipywidgets as w
    from IPython.display import display

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
    percentile = w.FloatText(value=99.99, description="percentile (for percentile)", **full)
    guard_boxes = [w.Checkbox(value=False, description=g, indent=False, **full) for g in GUARD_CHOICES]
    nodes = w.Text(value="", description="node guards", placeholder="node names, comma separated", **full)
    precision = w.ToggleButtons(options=["fp32", "fp16"], value="fp32", description="guarded layers run in", **full)
    with_fp16 = w.Checkbox(value=True, description="also an FP16 variant", indent=False, **full)
    run = w.Button(description="Run A/B", button_style="primary")
    out = w.Output()

    def on_run(_=None):
        from trtlab.core.errors import shown_in

        out.clear_output()
        result = None
        with out, shown_in(out):  # a user mistake shows as one `error: … — …` line, not a traceback
            recipes = recipes_from_selection(algorithms.value, size.value, batch.value,
                                             [b.description for b in guard_boxes if b.value], nodes.value,
                                             precision.value, percentile.value, with_fp16.value)
            result = compare(model_path, dataset, recipes, preprocess, split=split, workspace=workspace,
                             calibration_images=size.value)
            panel.last_result = result
            display(result.table)
            display(result.plot())  # a FigureView: rendered as PNG in JupyterLab and in executed notebooks
            show_verdict(result)
        return result

    run.on_click(on_run)
    panel = w.VBox([w.HBox([algorithms, w.VBox([size, batch, percentile])]),
                    w.HBox([w.Label("guards:")] + guard_boxes),
                    w.HBox([nodes, precision]), with_fp16, run, out])
    panel.run_callback = on_run  # lets tests and scripts press "Run" without a browser
    panel.last_result = None
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
