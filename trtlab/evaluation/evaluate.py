"""Evaluation: decode cache → Runner → results store. The one place that runs inference for the dashboards."""
from __future__ import annotations

import logging

import os
import platform
import time
from pathlib import Path

import numpy as np

from trtlab.backends import make_runner
from trtlab.data.decode_cache import DecodeCache
from trtlab.graph.classifier import inspect_classifier
from trtlab.core.progress import progress_bar
from trtlab.data.batches import iter_batches
from trtlab.evaluation.results import ResultsStore, VariantResult, top5_from_logits
from trtlab.core.workspace import atomic_path, atomic_write_json, hash_json, read_checked, read_json_checked

log = logging.getLogger(__name__)


def evaluate(
    model_path: str | os.PathLike,
    cache: DecodeCache,
    variant: str = "fp32",
    recipe: dict | None = None,
    backend: str = "auto",
    batch_size: int = 32,
    store: ResultsStore | None = None,
    workspace=None,
    force: bool = False,
    progress: bool = True,
    runner_options: dict | None = None,
    indices=None,
    record_extra: dict | None = None,
    checkpoint_every: int = 2048,
    experiment=None,
    identity: dict | None = None,
) -> VariantResult:
    """Run `model_path` over every decoded image of `cache` and store per-image top-5 and logits as `variant`.

    `indices` restricts evaluation to those images of the cache (e.g. the evaluation half of a split). Results go
    to the store of `experiment` (default: this model on these images with this preprocessing; variants pass the
    experiment of their source model) under the label `variant`, made unique if another variant holds it.
    `identity` (default: the recipe) is the variant's full identity: a stored result with the same identity, model
    file and images is reused (force=True re-runs it); nothing with another identity is overwritten. Logits are
    checkpointed every `checkpoint_every` images, so an interrupted evaluation (a Kaggle session timing out)
    resumes where it stopped on the next call with the same model, recipe and images.
    """
    from trtlab.evaluation.identity import Experiment, variant_identity, variant_key

    info = inspect_classifier(model_path)
    if info.image_size != (cache.preprocess.crop, cache.preprocess.crop):
        raise ValueError(f"{Path(model_path).name} takes {info.image_size[0]}×{info.image_size[1]} images but the "
                         f"decode cache holds {cache.preprocess.crop}×{cache.preprocess.crop} crops; "
                         f"use a preprocessing with crop={info.image_size[0]}")
    if isinstance(info.input_shape[0], int) and info.input_shape[0] != batch_size:
        if progress:
            log.info(f"{Path(model_path).name} has a fixed batch of {info.input_shape[0]}; using batch_size="
                  f"{info.input_shape[0]} (re-export with a dynamic batch for faster evaluation)")
        batch_size = info.input_shape[0]
    recipe = dict(recipe or {"precision": "fp32"})
    requested = np.arange(len(cache.dataset)) if indices is None else np.asarray(indices, np.int64)
    experiment = experiment or Experiment.for_evaluation(info, cache, requested)
    if store is None:
        store = ResultsStore.for_experiment(experiment, workspace)
    else:
        store.bind(experiment)
    identity = identity or variant_identity(recipe)
    key = variant_key(identity)
    valid = cache.valid_indices
    indices = requested[np.isin(requested, valid)]
    ids = cache.dataset.image_ids()
    stored_label = store.find(key)
    if not force and stored_label is not None:
        stored = store.load(stored_label)
        if stored.record.get("model_sha256") == info.sha256 and stored.image_ids == [ids[i] for i in indices]:
            if progress:
                log.info(f"{stored_label}: reusing stored results ({len(stored)} images) from {store.folder}")
            return stored
    variant = stored_label or store.free_label(variant, key)
    if len(indices) == 0:
        raise ValueError(f"no decodable images in dataset {cache.dataset.name!r}; see {cache.folder}/failures.json")
    if runner_options is None and str(model_path).endswith(".onnx") and backend in ("auto", "ort"):
        runner_options = _literal_options_for_fp16_qdq(model_path)
    runner = make_runner(model_path, backend=backend, **(runner_options or {}))
    checkpoint = EvaluationCheckpoint(store.folder / ".partial" / variant,
                                      {"model": info.sha256, "recipe": recipe, "ids": hash_json([ids[i] for i in indices]),
                                       "backend": runner.backend, "options": runner_options or {}},
                                      every=checkpoint_every)
    logits_chunks = [] if force else checkpoint.load()
    done = sum(len(c) for c in logits_chunks)
    if done and progress:
        log.info(f"{variant}: resuming an interrupted evaluation after {done} of {len(indices)} images")

    started = time.time()
    with runner:
        description = runner.describe()
        if progress:
            versions = ", ".join(f"{k}={v}" for k, v in description.items() if k not in ("runner",))
            log.info(f"{variant}: running {Path(model_path).name} on {versions}")
        logits_chunks += infer_cached(runner, cache, indices[done:], batch_size, desc=f"infer {variant}",
                                      progress=progress, on_batch=checkpoint.add, fixed_batch=info.fixed_batch)
    logits = np.concatenate(logits_chunks) if logits_chunks else np.zeros((0, 0), np.float32)
    if logits.ndim != 2:
        raise ValueError(f"{Path(model_path).name} output has shape {list(logits.shape)}; expected N×classes logits")
    top5_indices, top5_probs = top5_from_logits(logits)
    result = VariantResult(
        variant=variant,
        image_ids=[ids[i] for i in indices],
        labels=cache.dataset.labels[indices],
        top5_indices=top5_indices,
        top5_probs=top5_probs,
        logits=logits.astype(np.float16),
        record={
            "model": str(model_path),
            "model_sha256": info.sha256,  # the file evaluated; experiment.model_sha256 is its source model
            "experiment": experiment.to_dict(),
            "variant_key": key,
            "identity": identity,
            "recipe": recipe,
            "backend": description,
            # the evaluation images that could not be read (file and reason): the report names them
            "dataset": {"name": cache.dataset.name, "fingerprint": experiment.dataset_fingerprint,
                        "decode_cache": cache.key, "skipped_images": cache.skipped(requested)},
            "preprocess": cache.preprocess.to_dict(),
            "batch_size": batch_size,
            "seconds": round(time.time() - started, 3),
            "host": {"python": platform.python_version(), "machine": platform.machine(),
                     "numpy": np.__version__},
            **(record_extra or {}),
        },
    )
    store.save(result)
    checkpoint.clear()
    return result


class EvaluationCheckpoint:
    """Logits of a running evaluation, saved in chunk files every `every` images (each written atomically) under
    a key; a later evaluation with the same key continues after the saved images."""

    def __init__(self, folder: Path, key: dict, every: int = 2048):
        self.folder, self.key, self.every = Path(folder), hash_json(key), max(1, every)
        self.pending: list[np.ndarray] = []
        self.saved_chunks = 0

    def load(self) -> list[np.ndarray]:
        if (read_json_checked(self.folder / "key.json") or {}).get("key") != self.key:
            self.clear()
            return []
        chunks = [read_checked(path, np.load) for path in sorted(self.folder.glob("chunk-*.npy"))]
        if any(chunk is None for chunk in chunks):  # a damaged chunk (set aside): start this evaluation over
            self.clear()
            return []
        self.saved_chunks = len(chunks)
        return chunks

    def add(self, logits: np.ndarray) -> None:
        self.pending.append(logits)
        if sum(len(p) for p in self.pending) >= self.every:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        if self.saved_chunks == 0:
            atomic_write_json(self.folder / "key.json", {"key": self.key})
        with atomic_path(self.folder / f"chunk-{self.saved_chunks:06d}.npy", suffix=".npy") as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, np.concatenate(self.pending))
        self.saved_chunks += 1
        self.pending = []

    def clear(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)
        self.saved_chunks = 0
        self.pending = []


def infer_cached(runner, cache: DecodeCache, indices, batch_size: int = 32, desc: str = "infer",
                 progress: bool = True, on_batch=None, fixed_batch: int | None = None) -> list[np.ndarray]:
    """Logits (float32, one array per batch) of an active runner over `indices` of the decode cache.

    The next batch is read from the cache and normalised while the runner works on the current one. `on_batch`
    is called with each batch's logits (checkpointing).
    """
    chunks = []
    bar = progress_bar(total=len(indices), desc=desc, unit="img", enabled=progress)
    for batch in iter_batches(cache, indices, batch_size, fixed_batch=fixed_batch, prefetch=True):
        chunks.append(runner.infer(batch.images)[:batch.count].astype(np.float32, copy=False))
        if on_batch is not None:
            on_batch(chunks[-1])
        bar.update(batch.count)
    bar.close()
    return chunks


def _literal_options_for_fp16_qdq(model_path) -> dict | None:
    """ONNX Runtime options for a Q/DQ graph with FP16 scales (the FP16 float path) evaluated without a self-check:
    all optimizations off. ORT's Q/DQ fusions do not compute such graphs literally at any level from 'basic' (a
    demo variant gave one class for every image); evaluate_variant picks the fastest literal setting instead."""
    from trtlab.evaluation.literal_check import LITERAL_OPTIONS, qdq_float_type

    return dict(LITERAL_OPTIONS) if qdq_float_type(model_path) == "fp16" else None


def evaluate_variant(built, cache, eval_indices, store=None, backend: str = "auto",
                     batch_size: int = 32, progress: bool = True, force: bool = False, split=None, workspace=None,
                     experiment=None):
    """Evaluate a built variant on the evaluation images and store its results (under the experiment of its source
    model and these images; label: the variant's name, made unique when another variant holds it). A caller that
    evaluates several variants passes their common `experiment` (its dataset fingerprint stats every file once)."""
    from trtlab.evaluation.identity import Experiment, MixedExperimentError, variant_key
    from trtlab.evaluation.literal_check import ort_qdq_self_check, reference_runner_options, report_self_check

    options = {}
    recipe = built.recipe.to_dict()
    source = inspect_classifier(built.source_model or built.model_path)
    if experiment is None:
        experiment = Experiment.for_evaluation(source, cache, eval_indices, split)
    elif experiment.model_sha256 != source.sha256:
        raise MixedExperimentError(f"{built.name} was made from {source.path} (sha256 {source.sha256[:12]}), not from "
                                   f"the experiment's model ({experiment.describe()})",
                                   "evaluate it under its own model's experiment (leave experiment=None)")
    store = store or ResultsStore.for_experiment(experiment, workspace)
    extra = {"calibration": built.calibration, "scales": built.scales} if built.calibration else {}
    stored = not force and store.find(variant_key(built.identity)) is not None
    if built.recipe.precision == "int8" and backend in ("auto", "ort") and not str(built.model_path).endswith(".engine") \
            and not stored:  # stored results are reused as they are: no second self-check, no repeated warning
        check = ort_qdq_self_check(built.model_path, cache, eval_indices, variant=built.name)
        extra["ort_qdq_check"] = check
        # The literal Q/DQ semantics (what TensorRT computes), by the fastest ONNX Runtime setting that reproduces
        # them on the sample batch.
        options = reference_runner_options(check)
        report_self_check(check, key=str(built.folder))
    return evaluate(built.model_path, cache, built.name, recipe=recipe, backend=backend, batch_size=batch_size,
                    store=store, progress=progress, force=force, runner_options=options, indices=eval_indices,
                    record_extra=extra, experiment=experiment, identity=built.identity, workspace=workspace)
