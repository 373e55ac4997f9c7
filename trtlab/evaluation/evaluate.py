"""Evaluation: decode cache → Runner → results store. The one place that runs inference for the dashboards."""
from __future__ import annotations

import dataclasses
import logging

import os
import platform
import time
from pathlib import Path

import numpy as np

from trtlab.backends import announce_backend, default_batch_size, make_runner, options_for, resolve_backend
from trtlab.data.decode_cache import DecodeCache
from trtlab.graph.classifier import inspect_classifier
from trtlab.core.progress import progress_bar
from trtlab.data.batches import iter_batches
from trtlab.core.errors import UserValueError
from trtlab.evaluation.options import EvalTarget, RunOptions, with_shortcuts
from trtlab.core.identity import Identity
from trtlab.evaluation.outputs import describe_kind, interpret_outputs, report_non_finite
from trtlab.evaluation.checkpoint import EvaluationCheckpoint  # noqa: F401  (re-exported)
from trtlab.evaluation.results import ResultsStore, VariantResult
from trtlab.evaluation.reuse import find_stored, reusable_result  # noqa: F401  (re-exported)
from trtlab.core.workspace import hash_json

log = logging.getLogger(__name__)


def evaluate(model_path: str | os.PathLike, cache: DecodeCache, variant: str = "fp32", *,
             target: EvalTarget | None = None, run: RunOptions | None = None, workspace=None, on_images=None,
             **shortcuts) -> VariantResult:
    """Run `model_path` over every decoded image of `cache` and store per-image top-5 and logits as `variant`.

    `backend` ('auto', 'ort', 'torch'/'gpu', 'trt') is resolved first; 'auto' says in one line which backend runs
    and why. A runner that takes the decode cache's uint8 crops (the torch GPU backend) gets them as they are —
    uploaded through pinned memory and normalised on the device — while the next batch is read from the cache.
    `indices` restricts evaluation to those images of the cache (e.g. the evaluation half of a split). Results go
    to the store of `experiment` (default: this model on these images with this preprocessing; variants pass the
    experiment of their source model) under the label `variant`, made unique if another variant holds it.
    `identity` (default: the recipe) is the variant's full identity, to which the backend that computes it is
    added ('ort-cpu', 'torch-cuda', ...): a stored result with the same identity, model file and images is reused
    (force=True re-runs it); nothing with another identity — another backend included — is overwritten, and the
    same variant on a second backend is stored as `<label>@<backend>`. Logits are checkpointed every
    `checkpoint_every` images, so an interrupted evaluation (a Kaggle session timing out) resumes where it stopped
    on the next call with the same model, recipe and images. `on_images(count)` is called after every batch.

    What is evaluated and stored is `target` (EvalTarget: indices, recipe, identity, experiment, store,
    record_extra), how and where it runs is `run` (RunOptions: backend, batch_size, force, progress,
    runner_options, checkpoint_every); their fields are also taken as keywords (`evaluate(m, cache,
    backend="ort", indices=...)`).
    """
    return evaluate_together([prepare_evaluation(model_path, cache, variant, target=target, run=run,
                                                workspace=workspace, on_images=on_images, **shortcuts)])[0]


def prepare_evaluation(model_path, cache: DecodeCache, variant: str = "fp32", *, target: EvalTarget | None = None,
                       run: RunOptions | None = None, workspace=None, on_images=None, **shortcuts):
    """evaluate()'s work up to the first image: the stored result when it can be reused, else an `Evaluation`
    to run (evaluate_together). `target.indices` may be a RowStream (rows still being decoded, data.decode_stream):
    its images are then the ones decoded by the end, as if the decode had finished first."""
    from trtlab.evaluation.identity import Experiment, variant_identity, variant_key
    from trtlab.graph.classifier_view import classifier_view

    target, run = with_shortcuts("evaluate", shortcuts, target=target or EvalTarget(), run=run or RunOptions())
    recipe, identity, indices, experiment, store = (target.recipe, target.identity, target.indices,
                                                    target.experiment, target.store)
    backend, batch_size, force, progress = run.backend, run.batch_size, run.force, run.progress
    runner_options, record_extra = run.runner_options, target.record_extra
    stream = indices if hasattr(indices, "batches") else None

    # The classifier the labels talk about (graph.classifier_view): its logits output, a 1001-class model's
    # background class dropped where the labels say so; the user's own file when nothing needs doing.
    given_sha256 = inspect_classifier(model_path).sha256  # the graph given: part of its results' identity
    view = classifier_view(model_path, cache.dataset, workspace=workspace, announce=progress)
    model_path, info = view.path, view.info
    if info.quantized and recipe is None:  # a quantized model given as it is: an int8 variant, its own scales
        recipe = {"precision": "int8", "scales": "provided"}
        variant = "int8" if variant == "fp32" else variant
        identity = identity or variant_identity(recipe, scales={"source": "provided"})
    batch_size = evaluation_batch_size(batch_size, model_path, resolve_backend(model_path, backend)[0], progress)
    batch_size = checked_batch_size(model_path, info, cache, batch_size, progress)
    recipe = dict(recipe or {"precision": "fp32"})
    requested = stream.requested if stream is not None else \
        np.arange(len(cache.dataset)) if indices is None else np.asarray(indices, np.int64)
    experiment = experiment or Experiment.for_evaluation(info, cache, requested)
    if store is None:
        store = ResultsStore.for_experiment(experiment, workspace)
    else:
        store.bind(experiment)
    if runner_options is None and str(model_path).endswith(".onnx") and backend in ("auto", "ort"):
        runner_options = _literal_options_for_fp16_qdq(model_path)  # ORT's fusions are not literal on FP16 Q/DQ
    runner, choice = backend_runner(model_path, backend, runner_options, announce=progress)
    base = Identity.of(identity or variant_identity(recipe))
    if base.model_sha256 is None:  # a graph given without its identity: the file's sha256 says which graph it is
        base = base.replace(model_sha256=given_sha256)
    identity = with_backend(base, runner, batch_size)
    key = variant_key(identity)
    ids = cache.dataset.image_ids()
    stored_label, replaces = find_stored(store, identity, key, runner.identity())
    if stream is not None and stored_label is not None:
        stream = None  # a stored result may be reused: known only from the images decoded in the end
    indices = stream if stream is not None else requested[np.isin(requested, stream_final(indices, cache))]
    known = requested if stream is not None else indices  # a stream's checkpoint: keyed by the images asked for
    reusable = None if force or stream is not None else \
        reusable_result(store, stored_label, info, [ids[i] for i in indices], progress)
    if reusable is not None:
        report_non_finite(stored_label, ~reusable.valid, reusable.image_ids, recipe.get("precision", "fp32"))
        return reusable
    variant = stored_label or store.label_for(variant, key, identity, runner.identity())
    if stream is None and len(indices) == 0:
        raise ValueError(f"no decodable images in dataset {cache.dataset.name!r}; see {cache.folder}/failures.json")
    options = options_for(choice["resolved"], runner_options)
    # the logits saved so far belong to this result (its identity), of this file (the classifier view), on these
    # images, with these runner options
    checkpoint = EvaluationCheckpoint(store.folder / ".partial" / variant,
                                      identity.replace(model_sha256=info.sha256, options=options or None,
                                                       data={"ids_hash": hash_json([ids[i] for i in known]),
                                                             "images": len(known)}),
                                      every=run.checkpoint_every)
    logits_chunks = [] if force else checkpoint.load()
    done = sum(len(c) for c in logits_chunks)
    if done and progress:
        log.info(f"{variant}: resuming an interrupted evaluation after {done} of {len(indices)} images")
    return Evaluation(model_path=model_path, info=info, cache=cache, variant=variant, indices=indices,
                      requested=requested, runner=runner, choice=choice, identity=identity, key=key, store=store,
                      stored_label=stored_label, replaces=replaces, checkpoint=checkpoint, chunks=logits_chunks,
                      done=done, batch_size=batch_size, recipe=recipe, experiment=experiment,
                      record_extra=record_extra, progress=progress, on_images=on_images)


def stream_final(indices, cache) -> np.ndarray:
    """The rows of `cache` decoded: for a stream of rows still being decoded, once the decode has finished."""
    if hasattr(indices, "final"):
        indices.final()
    return cache.valid_indices


@dataclasses.dataclass
class Evaluation:
    """One variant's evaluation between prepare_evaluation and its stored result: an inactive runner, the images
    (an array, or a RowStream still being decoded), the logits so far (resumed from its checkpoint)."""

    model_path: object
    info: object
    cache: DecodeCache
    variant: str
    indices: object
    requested: np.ndarray
    runner: object
    choice: dict
    identity: Identity
    key: str
    store: ResultsStore
    stored_label: str | None
    replaces: str | None
    checkpoint: "EvaluationCheckpoint"
    chunks: list
    done: int
    batch_size: int
    recipe: dict
    experiment: object
    record_extra: dict | None
    progress: bool
    on_images: object = None
    description: dict | None = None
    started: float = 0.0

    def steps(self):
        """Run the images through the active runner, one batch per step (a generator)."""
        self.started = time.time()
        self.description = self.runner.describe()
        if self.progress:
            versions = ", ".join(f"{k}={v}" for k, v in self.description.items()
                                 if k not in ("runner", "dtype_policy"))
            log.info(f"{self.variant}: running {Path(self.model_path).name} on {versions}")
        yield from infer_steps(self.runner, self.cache, self.indices[self.done:], self.batch_size, self.chunks,
                               desc=f"infer {self.variant}", progress=self.progress, on_batch=self.checkpoint.add,
                               fixed_batch=self.info.fixed_batch, on_images=self.on_images)

    def finish(self) -> VariantResult:
        """The logits interpreted, stored (the label chosen again under the store's lock) and returned."""
        from trtlab.graph.classifier_view import derived_from

        cache, info, variant, recipe, model_path = self.cache, self.info, self.variant, self.recipe, self.model_path
        indices = self.indices
        if hasattr(indices, "final"):
            indices = indices.final()
            if len(indices) == 0:
                raise ValueError(f"no decodable images in dataset {cache.dataset.name!r}; see "
                                 f"{cache.folder}/failures.json")
        raw = np.concatenate(self.chunks) if self.chunks else np.zeros((0, 0), np.float32)
        if raw.ndim != 2:
            raise ValueError(f"{Path(model_path).name} output has shape {list(raw.shape)}; expected N×classes logits")
        if len(raw) != len(indices):
            raise RuntimeError(f"{variant}: {len(raw)} logits rows for {len(indices)} images")
        # What the outputs are (evaluation.outputs): probabilities kept as the model's, NaN/inf rows without a
        # prediction.
        outputs = interpret_outputs(raw, info.final_op)
        ids = cache.dataset.image_ids()
        image_ids = [ids[i] for i in indices]
        if self.progress and (line := describe_kind(Path(model_path).name, outputs)):
            log.info(line)
        report_non_finite(variant, outputs.non_finite, image_ids, recipe.get("precision", "fp32"))
        result = VariantResult(
            variant=variant,
            image_ids=image_ids,
            labels=cache.dataset.labels[indices],
            top5_indices=outputs.top5_indices,
            top5_probs=outputs.top5_probs,
            logits=outputs.stored,
            record={**run_record(model_path, info, experiment=self.experiment, key=self.key, identity=self.identity,
                                 recipe=recipe, description=self.description, choice=self.choice, cache=cache,
                                 requested=self.requested, batch_size=self.batch_size, started=self.started,
                                 record_extra=self.record_extra),
                    "outputs": outputs.record(image_ids),
                    **({"derived_from": made} if (made := derived_from(model_path)) else {})},
        )
        _save(self.store, result, self.identity, self.key, self.runner.identity(), self.stored_label, self.replaces)
        self.checkpoint.clear()
        return result


def evaluate_together(jobs: list) -> list[VariantResult]:
    """Run prepared evaluations (prepare_evaluation; a reused result stays as it is) in lock-step: every runner
    active, each batch step taken by every variant in turn — over a RowStream, each chunk of decoded rows is
    evaluated by every variant while the decoders work on the next. Stored in the order given."""
    import contextlib

    live = [job for job in jobs if isinstance(job, Evaluation)]
    with contextlib.ExitStack() as stack:
        for job in live:
            stack.enter_context(job.runner)
        steps = [job.steps() for job in live]
        for step in steps:
            stack.callback(step.close)  # an error in one closes every bar
        while steps:
            steps = [step for step in steps if next(step, _DONE) is not _DONE]
    return [job.finish() if isinstance(job, Evaluation) else job for job in jobs]


_DONE = object()


def checked_batch_size(model_path, info, cache, batch_size: int, progress: bool) -> int:
    """The batch to evaluate with (a model exported with a fixed batch: that one, said once); a model whose input
    size is not the decode cache's crop is refused."""
    if info.image_size != (cache.preprocess.crop, cache.preprocess.crop):
        raise UserValueError(f"{Path(model_path).name} takes {info.image_size[0]}×{info.image_size[1]} images but "
                             f"the decode cache holds {cache.preprocess.crop}×{cache.preprocess.crop} crops",
                             f"use a preprocessing with crop={info.image_size[0]} (graph.classifier_view."
                             f"preprocess_for makes it from the model; --crop on the command line)")
    if isinstance(info.input_shape[0], int) and info.input_shape[0] != batch_size:
        if progress:
            log.info(f"{Path(model_path).name} has a fixed batch of {info.input_shape[0]}; using batch_size="
                     f"{info.input_shape[0]} (re-export with a dynamic batch for faster evaluation)")
        return info.input_shape[0]
    return batch_size


_said: set = set()


def evaluation_batch_size(batch_size, model_path, backend: str, progress: bool = True) -> int:
    """`batch_size` as a number: 'auto' resolved for the resolved `backend` (backends.default_batch_size: on a CUDA
    GPU what its free memory holds, up to 256; else 32; said once), a number checked."""
    if batch_size == "auto":
        batch, why = default_batch_size(model_path, backend)
        if progress and why not in _said:
            _said.add(why)
            log.info(f"batch_size='auto': {why}")
        return batch
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise UserValueError(f"batch_size={batch_size!r} is neither a whole number ≥ 1 nor 'auto'",
                             "pass e.g. batch_size=64, or 'auto' (on a GPU: what its free memory holds, up to 256)")
    return int(batch_size)


def run_record(model_path, info, *, experiment, key, identity, recipe, description, choice, cache, requested,
               batch_size, started, record_extra) -> dict:
    """The run record stored beside a variant's results: what was evaluated, on what, how and how long."""
    return {
        "model": str(model_path),
        "model_sha256": info.sha256,  # the file evaluated; experiment.model_sha256 is its source model
        "experiment": experiment.to_dict(),
        "variant_key": key,
        "identity": identity.to_dict(),
        "recipe": recipe,
        "backend": description,
        "backend_choice": choice,
        # the evaluation images that could not be read (file and reason): the report names them
        "dataset": {"name": cache.dataset.name, "fingerprint": experiment.dataset_fingerprint,
                    "decode_cache": cache.key, "skipped_images": cache.skipped(requested)},
        "preprocess": cache.preprocess.to_dict(),
        "batch_size": batch_size,
        "seconds": round(time.time() - started, 3),
        "host": {"python": platform.python_version(), "machine": platform.machine(),
                 "numpy": np.__version__},
        **(record_extra or {}),
    }


def backend_runner(model_path, backend: str = "auto", runner_options: dict | None = None,
                   announce: bool = True):
    """(inactive runner, choice) for `model_path`: the backend resolved first ('auto': said in one line, once),
    ONNX Runtime-only options dropped for the other backends. choice: requested, resolved, why (the run record's
    `backend_choice`)."""
    resolved, why = resolve_backend(model_path, backend)
    if backend == "auto" and announce:
        announce_backend(resolved, why)
    runner = make_runner(model_path, backend=resolved, verbose=False, **options_for(resolved, runner_options))
    return runner, {"requested": backend, "resolved": resolved, "why": why}


def with_backend(identity, runner, batch_size: int | None = None) -> Identity:
    """The variant's identity with the backend that computes it (kept when the caller put one in: TensorRT
    engines name theirs with the engine's facts) and, where that backend's numbers change with the batch
    (Runner.batch_dependent: GPU kernels picked per shape; not ONNX Runtime on the CPU), the evaluation batch
    size: a result computed at batch 32 is not reused for batch 256, and both are kept."""
    identity = Identity.of(identity)
    if identity.backend is None:
        identity = identity.replace(backend=runner.identity())
    if batch_size is not None and runner.batch_dependent():
        identity = identity.replace(batch_size=int(batch_size))
    return identity


def _save(store, result, identity, key, backend, stored_label, replaces) -> None:
    """Save under the store's lock, re-choosing the label there: another process (a second GPU) may have taken it
    since this evaluation started."""
    with store.locked():
        if stored_label is None:
            result.variant = store.label_for(result.variant, key, identity, backend)
        store.save(result, replaces=replaces)


def infer_cached(runner, cache: DecodeCache, indices, batch_size: int = 32, desc: str = "infer",
                 progress: bool = True, on_batch=None, fixed_batch: int | None = None,
                 on_images=None) -> list[np.ndarray]:
    """Logits (float32, one array per batch) of an active runner over `indices` of the decode cache (infer_steps
    run to the end)."""
    chunks: list = []
    for _ in infer_steps(runner, cache, indices, batch_size, chunks, desc, progress, on_batch, fixed_batch,
                         on_images):
        pass
    return chunks


def infer_steps(runner, cache: DecodeCache, indices, batch_size: int, chunks: list, desc: str = "infer",
                progress: bool = True, on_batch=None, fixed_batch: int | None = None, on_images=None):
    """A generator: each step runs one batch of `indices` (an array or a RowStream) of the decode cache through an
    active runner and appends its float32 logits to `chunks`.

    A runner with `run_crop_batches` (the torch GPU backend) is fed the uint8 crops as they are: the batch reader
    reads them straight into the runner's host buffers (`host_buffer`: pinned ring slots on CUDA), the runner
    uploads them and normalises on the device, one batch in flight; where it `pads_batches` (CUDA) the last batch
    is padded to `batch_size`, so one captured shape serves the run. Others get float32 batches normalised here.
    Either way the next batch is read from the cache while the runner works on the current one. `on_batch` is
    called with each batch's logits (checkpointing), `on_images` with its image count.
    """
    bar = progress_bar(total=len(indices), desc=desc, unit="img", enabled=progress)
    if hasattr(runner, "run_crop_batches"):
        fixed = fixed_batch or (batch_size if runner.pads_batches() else None)
        source = iter_batches(cache, indices, batch_size, fixed_batch=fixed, prefetch=True, crops=True,
                              into=runner.host_buffer)
        batches = ((batch.count, logits) for batch, logits in runner.run_crop_batches(source, cache.preprocess))
    else:
        batches = ((batch.count, runner.infer(batch.images))
                   for batch in iter_batches(cache, indices, batch_size, fixed_batch=fixed_batch, prefetch=True))
    try:
        for count, logits in batches:
            chunks.append(logits[:count].astype(np.float32, copy=False))
            if on_batch is not None:
                on_batch(chunks[-1])
            if on_images is not None:
                on_images(count)
            bar.update(count)
            yield count
        if bar.total != bar.n:  # a stream's images that failed to decode: the bar ends complete
            bar.total = bar.n
    finally:
        bar.close()


def _literal_options_for_fp16_qdq(model_path) -> dict | None:
    """ONNX Runtime options for a Q/DQ graph with FP16 scales (the FP16 float path) evaluated without a self-check:
    all optimizations off. ORT's Q/DQ fusions do not compute such graphs literally at any level from 'basic' (a
    demo variant gave one class for every image); evaluate_variant picks the fastest literal setting instead."""
    from trtlab.evaluation.literal_check import LITERAL_OPTIONS, qdq_float_type

    return dict(LITERAL_OPTIONS) if qdq_float_type(model_path) == "fp16" else None


def prepare_variant(built, cache, eval_indices, store=None, *, split=None, experiment=None, workspace=None,
                     run: RunOptions | None = None, on_images=None, **shortcuts):
    """evaluate_variant's work up to the first image (prepare_evaluation: an Evaluation, or the stored result
    reused); `eval_indices` may be a RowStream (data.decode_stream).

    evaluate_variant: evaluate a built variant on the evaluation images and store its results (under the experiment of its source
    model and these images; label: the variant's name, made unique when another variant holds it). A caller that
    evaluates several variants passes their common `experiment` (its dataset fingerprint stats every file once).

    The backend is resolved first. On ONNX Runtime an INT8 variant gets the fused-kernel self-check
    (evaluation.literal_check), which picks ONNX Runtime's literal settings; other backends are literal by
    construction (the torch backend) or are what is being measured (TensorRT), so the check is skipped there."""
    from trtlab.evaluation.identity import Experiment, MixedExperimentError, variant_key
    from trtlab.evaluation.literal_check import (reference_runner_options, report_self_check, self_check_once,
                                                 self_check_sample_size)

    run = with_shortcuts("evaluate_variant", shortcuts, run=run or RunOptions())
    backend, progress, force = run.backend, run.progress, run.force
    options = {}
    recipe = built.recipe.to_dict()
    source = inspect_classifier(built.source_model or built.model_path)
    requested = getattr(eval_indices, "requested", eval_indices)  # a RowStream's images
    if experiment is None:
        experiment = Experiment.for_evaluation(source, cache, requested, split)
    elif experiment.model_sha256 != source.sha256:
        raise MixedExperimentError(f"{built.name} was made from {source.path} (sha256 {source.sha256[:12]}), not from "
                                   f"the experiment's model ({experiment.describe()})",
                                   "evaluate it under its own model's experiment (leave experiment=None)")
    store = store or ResultsStore.for_experiment(experiment, workspace)
    extra = {"calibration": built.calibration, "scales": built.scales} if built.calibration else {}
    if isinstance(built.plan, dict) and built.plan.get("fp16_range"):  # scales raised / lowered, counted apart
        extra["fp16_range"] = built.plan["fp16_range"]
    runner, choice = backend_runner(built.model_path, backend, announce=progress)
    run = dataclasses.replace(run, batch_size=evaluation_batch_size(run.batch_size, built.model_path,
                                                                    choice["resolved"], progress))
    identity = with_backend(built.identity, runner, run.batch_size)
    stored = not force and find_stored(store, identity, variant_key(identity), runner.identity())[0] is not None
    if built.recipe.precision == "int8" and choice["resolved"] == "ort" and not stored:
        # stored results are reused as they are: no second self-check, no repeated warning
        if requested is not eval_indices:  # the sample's rows, decoded before the rest (compare's `first`)
            eval_indices.decode.wait_for(requested[:self_check_sample_size(len(requested))])
        check = self_check_once(built.model_path, cache, requested, variant=built.name)  # once per structure
        extra["ort_qdq_check"] = check
        # The literal Q/DQ semantics (what TensorRT computes), by the fastest ONNX Runtime setting that reproduces
        # them on the sample batch.
        options = reference_runner_options(check)
        report_self_check(check, key=str(built.folder))
    target = EvalTarget(indices=eval_indices, recipe=recipe, identity=built.identity, experiment=experiment,
                        store=store, record_extra=extra)
    return prepare_evaluation(built.model_path, cache, built.name, target=target,
                              run=dataclasses.replace(run, runner_options=options), workspace=workspace,
                              on_images=on_images)


def evaluate_variant(built, cache, eval_indices, store=None, *, split=None, experiment=None, workspace=None,
                     run: RunOptions | None = None, on_images=None, **shortcuts):
    """Evaluate a built variant on the evaluation images and store its results (prepare_variant says how)."""
    return evaluate_together([prepare_variant(built, cache, eval_indices, store, split=split, experiment=experiment,
                                              workspace=workspace, run=run, on_images=on_images, **shortcuts)])[0]


def evaluate_variants(builts, cache, eval_indices, store, *, split=None, experiment=None, workspace=None,
                      run: RunOptions | None = None) -> list[VariantResult]:
    """Built variants evaluated in lock-step on the same images (evaluate_together), stored in the order given:
    with a RowStream, each chunk of rows decoded is evaluated by every variant while the rest is decoded."""
    if len({built.name for built in builts}) < len(builts):  # a shared label is chosen as each is stored: in turn
        return [evaluate_variant(built, cache, eval_indices, store, split=split, experiment=experiment,
                                 workspace=workspace, run=run) for built in builts]
    return evaluate_together([prepare_variant(built, cache, eval_indices, store, split=split, experiment=experiment,
                                              workspace=workspace, run=run) for built in builts])
