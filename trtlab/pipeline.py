"""Evaluation: decode cache → Runner → results store. The one place that runs inference for the dashboards."""
from __future__ import annotations

import os
import platform
from concurrent.futures import ThreadPoolExecutor
import time
from pathlib import Path

import numpy as np

from .backends import make_runner
from .decode_cache import DecodeCache
from .model import inspect_classifier
from .preprocess import normalize_batch
from .results import ResultsStore, VariantResult, top5_from_logits


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
) -> VariantResult:
    """Run `model_path` over every decoded image of `cache` and store per-image top-5 and logits as `variant`.

    `indices` restricts evaluation to those images of the cache (e.g. the evaluation half of a split). A variant
    already stored for the same model file, recipe and images is reused (force=True re-runs it).
    """

    info = inspect_classifier(model_path)
    if info.image_size != (cache.preprocess.crop, cache.preprocess.crop):
        raise ValueError(f"{Path(model_path).name} takes {info.image_size[0]}×{info.image_size[1]} images but the "
                         f"decode cache holds {cache.preprocess.crop}×{cache.preprocess.crop} crops; "
                         f"use a preprocessing with crop={info.image_size[0]}")
    if isinstance(info.input_shape[0], int) and info.input_shape[0] != batch_size:
        if progress:
            print(f"[trtlab] {Path(model_path).name} has a fixed batch of {info.input_shape[0]}; using batch_size="
                  f"{info.input_shape[0]} (re-export with a dynamic batch for faster evaluation)")
        batch_size = info.input_shape[0]
    store = store or ResultsStore.for_eval_set(cache.dataset, cache.preprocess, workspace)
    recipe = dict(recipe or {"precision": "fp32"})
    valid = cache.valid_indices
    indices = valid if indices is None else np.asarray(indices, np.int64)[np.isin(indices, valid)]
    ids = cache.dataset.image_ids()
    if not force and variant in store:
        stored = store.load(variant)
        if (stored.record.get("model_sha256") == info.sha256 and stored.record.get("recipe") == recipe
                and stored.image_ids == [ids[i] for i in indices]):
            if progress:
                print(f"[trtlab] {variant}: reusing stored results ({len(stored)} images) from {store.folder}")
            return stored
    if len(indices) == 0:
        raise ValueError(f"no decodable images in dataset {cache.dataset.name!r}; see {cache.folder}/failures.json")
    runner = make_runner(model_path, backend=backend, **(runner_options or {}))

    started = time.time()
    with runner:
        description = runner.describe()
        if progress:
            versions = ", ".join(f"{k}={v}" for k, v in description.items() if k not in ("runner",))
            print(f"[trtlab] {variant}: running {Path(model_path).name} on {versions}")
        logits_chunks = infer_cached(runner, cache, indices, batch_size, desc=f"infer {variant}", progress=progress)
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
            "model_sha256": info.sha256,
            "recipe": recipe,
            "backend": description,
            "dataset": {"name": cache.dataset.name, "fingerprint": cache.dataset.fingerprint(),
                        "decode_cache": cache.key, "skipped_images": cache.failure_list()},
            "preprocess": cache.preprocess.to_dict(),
            "batch_size": batch_size,
            "seconds": round(time.time() - started, 3),
            "host": {"python": platform.python_version(), "machine": platform.machine(),
                     "numpy": np.__version__},
            **(record_extra or {}),
        },
    )
    store.save(result)
    return result


def infer_cached(runner, cache: DecodeCache, indices, batch_size: int = 32, desc: str = "infer",
                 progress: bool = True) -> list[np.ndarray]:
    """Logits (float32, one array per batch) of an active runner over `indices` of the decode cache.

    The next batch is read from the cache and normalised while the runner works on the current one.
    """
    from tqdm.auto import tqdm

    chunks = []
    bar = tqdm(total=len(indices), desc=desc, unit="img", disable=not progress)
    with ThreadPoolExecutor(1) as pool:
        batches = (normalize_batch(crops, cache.preprocess) for _, crops in cache.iter_batches(indices, batch_size))
        pending = pool.submit(next, batches, None)
        while (batch := pending.result()) is not None:
            pending = pool.submit(next, batches, None)
            chunks.append(runner.infer(batch).astype(np.float32, copy=False))
            bar.update(len(batch))
    bar.close()
    return chunks
