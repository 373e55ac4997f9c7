"""The main job: model + photos → decode cache → variants → stored results → report."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtlab.data.dataset import Dataset
from trtlab.data.decode_cache import DecodeCache, build_decode_cache
from trtlab.evaluation.results import ResultsStore
from trtlab.evaluation.options import RunOptions
from trtlab.core.workspace import workspace_dir


@dataclass
class JobResult:
    model_path: Path
    cache: DecodeCache
    store: ResultsStore
    variants: list[str]
    report: dict = field(default_factory=dict)

    @property
    def table(self):
        """The variant table for people (percentages with intervals, readable headers); it keeps the numbers:
        `job.table.loc["fp32", "top1"]` is a float, `job.data` the numeric DataFrame."""
        return self.report.get("view")

    @property
    def data(self):
        """The numeric variant table (pandas DataFrame): what `table` shows, unformatted, for code."""
        return self.report.get("table")

    def answer(self):
        """The one-sentence answer: the verdict of the default head-to-head (which INT8 variant to ship and what
        that rests on, as notebook 03 and `calibrate` state it); with one variant besides the reference, how close
        it is; with one variant alone, its accuracy."""
        from trtlab.evaluation.metrics import accuracy
        from trtlab.views.formatting import Sentence, interval, percent
        from trtlab.views.verdict import PairError
        from trtlab.workflows.compare import one_variant_sentence

        try:
            return Sentence(self.verdict().sentence, answer=True)
        except PairError:
            pass
        reference, others = self.variants[0], self.variants[1:]
        if others:
            return Sentence(one_variant_sentence(self.store, others[0], reference), answer=True)
        acc = accuracy(self.store.load(reference))
        text = (f"{reference}: top-1 {percent(acc['top1'])} (95 % CI {interval(acc['top1_low'], acc['top1_high'])}) "
                f"on {acc['labelled']} labelled images." if acc["labelled"] else
                f"{reference}: evaluated on unlabelled images only, so no accuracy; the report holds its predictions.")
        return Sentence(text, answer=True)

    def verdict(self, first: str | None = None, second: str | None = None, reference: str = "fp32"):
        """Head to head of two of the job's variants (default: minmax vs entropy when both ran): see
        ABResult.verdict."""
        from trtlab.views.verdict import head_to_head

        return head_to_head(self.store.load_all(self.variants), first, second, reference)


def run_job(model_path, dataset: Dataset, preprocess="tf-lite", workspace=None, backend: str = "auto",
            batch_size: int | str = "auto", progress: bool = True, report_dir=None, output: str | None = None,
            background_class: str = "auto", crop: int | None = None, resize: int | None = None) -> JobResult:
    """Evaluate the model on `dataset` and write the report: FP32, or — for a model that is already quantized —
    as an int8 variant with the scales it carries ("provided"), run literally (Q/DQ not fused by ONNX Runtime).
    The model scored is the classifier the labels talk about (graph.classifier_view: `output`,
    `background_class`); the crop follows its input unless `crop`/`resize` (or a Preprocess) say otherwise."""
    from trtlab.backends import resolve_backend
    from trtlab.evaluation.identity import experiment_of
    from trtlab.evaluation.evaluate import evaluate
    from trtlab.graph.classifier_view import classifier_view, preprocess_for
    from trtlab.views.report import write_report

    workspace = workspace_dir(workspace)
    from trtlab.workflows.checks import check_backend, check_free_space, check_labels, decode_cache_pending

    # A wrong backend, model, output, numbering, labels or crop: refused before any decoding.
    check_backend(backend)
    view = classifier_view(model_path, dataset, output, background_class, workspace, announce=progress)
    check_labels(dataset, view.info)
    spec = preprocess_for(view.info, preprocess, crop, resize)
    check_free_space(workspace, decode_cache_pending(dataset, spec, workspace, progress), spec.crop)
    cache = build_decode_cache(dataset, spec, workspace, progress=progress)
    literal = view.info.quantized and resolve_backend(view.path, backend)[0] == "ort"
    run = RunOptions(backend=backend, batch_size=batch_size, progress=progress,
                     runner_options={"disable_quant_qdq": True} if literal else None)
    result = evaluate(view.path, cache, "int8" if view.info.quantized else "fp32", run=run, workspace=workspace)
    # The store of this model on this data: another model evaluated on the same folder has its own.
    store = ResultsStore.for_experiment(experiment_of(result.record), workspace)
    variants = [result.variant]
    report = write_report(store, Path(report_dir or workspace / "reports" / store.folder.name), variants,
                          reference=result.variant, decode_cache=cache)
    return JobResult(Path(view.path), cache, store, variants, report)


DEMO_ALGORITHMS = ("minmax", "entropy", "percentile")


def run_demo(workspace=None, model: str = "efficientnet-lite0", progress: bool = True, backend: str = "auto",
             batch_size: int | str = "auto", algorithms=DEMO_ALGORITHMS) -> JobResult:
    """The bundled default: EfficientNet-Lite0 on the demo photos, whole pipeline — decode cache, FP16 graph,
    calibration on the calibration photos with each algorithm, Q/DQ INT8 variants, evaluation of FP32, FP16 and INT8
    on the labelled evaluation photos, results store, report."""
    from trtlab.workflows.compare import compare
    from trtlab.data.demo import DEMO_PREPROCESS, demo_dataset, demo_split, export_demo_model
    from trtlab.views.report import write_report
    from trtlab.quantization.variants import Recipe

    workspace = workspace_dir(workspace)
    model_path = export_demo_model(model, workspace)
    dataset = demo_dataset()
    recipes = [Recipe(precision="fp16")] + [Recipe(precision="int8", algorithm=a) for a in algorithms]
    # The demo's report shows the literal A/B; TensorRT engines are notebook 03's and `calibrate`'s.
    result = compare(model_path, dataset, recipes, DEMO_PREPROCESS, split=demo_split(dataset), workspace=workspace,
                     run=RunOptions(backend=backend, batch_size=batch_size, progress=progress, engines=False))
    from trtlab.views.decision import verdict_line

    variants = list(result.table.index)
    line = verdict_line(result.verdict)  # the same sentence notebook 03, the dashboard and `calibrate` state
    report = write_report(result.store, workspace / "reports" / result.store.folder.name, variants,
                          reference="fp32", decode_cache=result.cache,
                          verdict=line.removeprefix("verdict: ") if line else None)
    return JobResult(Path(model_path), result.cache, result.store, variants, report)


def print_summary(job: JobResult) -> None:
    """The report as text: the variant table, a line per variant, where the report files are."""
    from trtlab.views.formatting import cosine, percent, percent_ci

    table = job.data
    print()
    print(job.table.text())
    print()
    reference = "fp32" if "fp32" in table.index else table.index[0]
    if table.loc[reference, "labelled"]:
        row = table.loc[reference]
        print(f"{reference.upper() if reference == 'fp32' else reference} top-1 on {int(row.labelled)} labelled "
              f"photos: {percent_ci(row.top1, row.top1_low, row.top1_high)}")
    for name, row in table.iterrows():
        if row.get("non_finite", 0):
            print(f"{name}: {int(row.non_finite)} of {int(row.images)} images gave NaN/inf outputs and are left out "
                  f"of its scores (named in the warning above and in its run record)")
    for name, row in table.drop(index=reference).iterrows():
        print(f"{name}: top-1 {percent(row.top1)}, top-1 agreement with {reference} {percent(row.top1_agreement)}, "
              f"mean logit cosine {cosine(row.cosine_mean)}")
    from trtlab.views.decision import verdict_line

    line = verdict_line(job.verdict) if len(job.variants) > 2 else None
    if line:
        print(line)
    if job.report.get("md") is not None:  # None: a read-only workspace without a stored report (said above)
        print(f"report: {job.report['png']}  {job.report['md']}  {job.report['csv']}")
