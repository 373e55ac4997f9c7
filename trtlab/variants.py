"""Variants: a recipe (precision, algorithm, calibration set, guards) → a model file → stored results.

Building a variant is deterministic and cached by the hash of everything that determines it (model sha256, recipe,
calibration image ids, preprocessing). Calibration statistics are collected once per (model, calibration set,
preprocessing) for the superset of tensors any guard set can quantize, so every algorithm and guard combination is
derived from one pass over the calibration images.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .calibrate import (ALGORITHMS, CALIBRATION_REVISION, CalibrationStats, collect_statistics, compute_thresholds,
                        scales_from_thresholds)
from .guards import parse_guard
from .workspace import atomic_path, atomic_write_json, hash_json, workspace_dir

PRECISIONS = ("fp32", "fp16", "int8")


@dataclass(frozen=True)
class Recipe:
    """What a variant is. `calibration_images`/`calibration_batch`/`algorithm` apply to int8 only; fp16 converts
    the graph to float16 (guards keep nodes in float32)."""

    precision: str = "int8"
    algorithm: str = "entropy"
    percentile: float = 99.99
    calibration_images: int = 64
    calibration_batch: int = 8
    guards: tuple = ()
    seed: int = 0

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.precision == "int8" and self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.calibration_images < 1 or self.calibration_batch < 1:
            raise ValueError("calibration_images and calibration_batch must be ≥ 1")
        object.__setattr__(self, "guards", tuple(self.guards))
        for guard in self.guards:
            parse_guard(guard)

    @property
    def name(self) -> str:
        """Readable variant name, e.g. 'int8-entropy+first_layer+last_layer=fp16'."""
        if self.precision == "fp32":
            return "fp32"
        if self.precision == "fp16":
            return re.sub(r"[^A-Za-z0-9_.+=-]", "_", "fp16" + "".join(f"+{g}" for g in self.guards)).replace("=", "-")
        algo = f"percentile{self.percentile:g}" if self.algorithm == "percentile" else self.algorithm
        name = f"int8-{algo}" + "".join(f"+{g}" for g in self.guards)
        name = re.sub(r"[^A-Za-z0-9_.+=-]", "_", name).replace("=", "-")
        return name if len(name) <= 80 else f"int8-{algo}+{len(self.guards)}guards-{hash_json(self.guards, 8)}"

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["guards"] = list(self.guards)
        if self.precision == "fp32":
            return {"precision": "fp32"}
        if self.precision == "fp16":
            return {"precision": "fp16", "guards": list(self.guards)}
        if self.algorithm != "percentile":
            data.pop("percentile")
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Recipe":
        return cls(**{k: (tuple(v) if k == "guards" else v) for k, v in data.items()})


@dataclass
class BuiltVariant:
    recipe: Recipe
    model_path: Path
    folder: Path | None = None
    plan: dict = field(default_factory=dict)
    calibration_cache: Path | None = None
    reused: bool = False

    @property
    def name(self) -> str:
        return self.recipe.name


def stats_tensors(model) -> list[str]:
    """Every tensor any guard set may quantize: the unguarded plan's tensors plus both inputs of every Add."""
    from .quantize import plan_quantization

    plan = plan_quantization(model, ())
    initializers = {i.name for i in model.graph.initializer}
    extra = [name for node in model.graph.node if node.op_type in ("Add", "Sum") for name in node.input
             if name and name not in initializers]
    return list(dict.fromkeys(plan.activations + extra))


def calibration_statistics(model_path, cache, indices, batch_size: int, workspace=None,
                           progress: bool = True) -> CalibrationStats:
    """Collect (or reload, when model, images and preprocessing are identical) the calibration statistics."""
    import onnx

    from .model import inspect_classifier

    sha = inspect_classifier(model_path).sha256
    ids = cache.dataset.image_ids()
    key = hash_json({"model": sha, "ids": [ids[i] for i in indices], "pre": cache.preprocess.to_dict(),
                     "files": cache.key, "calibrate": CALIBRATION_REVISION})
    path = workspace_dir(workspace) / "calibration" / f"stats-{sha[:12]}-{key}.npz"
    if path.exists():
        stats = CalibrationStats.load(path)
        if progress:
            print(f"[trtlab] calibration statistics for these {stats.images} images reused from {path.name}")
        return stats
    tensors = stats_tensors(onnx.load(str(model_path), load_external_data=False))
    stats = collect_statistics(model_path, tensors, cache, indices, batch_size, progress)
    stats.save(path)
    return stats


def build_fp16_variant(model_path: Path, recipe: Recipe, workspace=None, force: bool = False) -> BuiltVariant:
    """The sanitized graph converted to float16 (inputs/outputs stay float32; guarded nodes stay float32) — what
    TensorRT 11's strongly typed FP16 builds take, and an FP16 reference on ONNX Runtime."""
    from .fp16 import convert_to_fp16
    from .model import inspect_classifier
    from .sanitize import sanitize_model

    sha = inspect_classifier(model_path).sha256
    key = hash_json({"model": sha, "recipe": recipe.to_dict()})
    folder = workspace_dir(workspace) / "variants" / f"{model_path.stem}-{sha[:8]}" / f"{recipe.name}-{key}"
    out_path = folder / "model.onnx"
    if out_path.exists() and not force:
        return BuiltVariant(recipe, out_path, folder, reused=True)
    conversion = convert_to_fp16(sanitize_model(model_path, workspace), guards=recipe.guards, output_path=out_path)
    atomic_write_json(folder / "variant.json", {"recipe": recipe.to_dict(), "model": str(model_path),
                                                "model_sha256": sha, "conversion": conversion.summary()})
    return BuiltVariant(recipe, out_path, folder, conversion.summary())


def select_calibration_indices(cache, calibration_indices, recipe: Recipe) -> np.ndarray:
    """The images a recipe calibrates on: the decodable ones among `calibration_indices`, the first
    `recipe.calibration_images` of them (the split already shuffled them, seeded)."""
    indices = np.asarray(calibration_indices, np.int64)
    return indices[np.isin(indices, cache.valid_indices)][: recipe.calibration_images]


def build_variant(model_path, recipe: Recipe, cache=None, calibration_indices=None, workspace=None,
                  force: bool = False, progress: bool = True, calibration_cache_path=None,
                  reuse_cache: bool = False) -> BuiltVariant:
    """Make the ONNX file for `recipe`. INT8: calibrate on `calibration_indices` of `cache`, insert Q/DQ, check.

    `calibration_cache_path` + `reuse_cache=True` loads scales from an existing cache instead of calibrating; the
    cache is refused (StaleCacheError, naming the differing field) when made for another model, algorithm,
    preprocessing or image count.
    """
    import onnx

    from .calib_cache import CacheMetadata, load_if_valid, write_calibration_cache
    from .model import inspect_classifier
    from .quantize import check_quantized_model, insert_qdq, plan_quantization
    from .sanitize import sanitize_model

    model_path = Path(model_path)
    if recipe.precision == "fp32":
        return BuiltVariant(recipe, model_path)
    if recipe.precision == "fp16":
        return build_fp16_variant(model_path, recipe, workspace, force)
    if cache is None or calibration_indices is None:
        raise ValueError("an INT8 recipe needs a decode cache and calibration image indices")
    calibration_indices = select_calibration_indices(cache, calibration_indices, recipe)
    if len(calibration_indices) == 0:
        raise ValueError("no decodable calibration images; check the split and the decode cache failures")
    sha = inspect_classifier(model_path).sha256
    ids = cache.dataset.image_ids()
    calib_ids = [ids[i] for i in calibration_indices]
    key = hash_json({"model": sha, "recipe": recipe.to_dict(), "ids": calib_ids, "pre": cache.preprocess.to_dict(),
                     "calibrate": CALIBRATION_REVISION})
    folder = workspace_dir(workspace) / "variants" / f"{model_path.stem}-{sha[:8]}" / f"{recipe.name}-{key}"
    out_path = folder / "model.onnx"
    if out_path.exists() and not force:
        return BuiltVariant(recipe, out_path, folder, json.loads((folder / "variant.json").read_text())["plan"],
                            folder / "calibration.cache", reused=True)
    meta = CacheMetadata(model_sha256=sha, algorithm=recipe.algorithm, preprocess=cache.preprocess.to_dict(),
                         images=len(calibration_indices),
                         percentile=recipe.percentile if recipe.algorithm == "percentile" else None,
                         calibration_ids_hash=hash_json(calib_ids), tensorrt_version=_tensorrt_version())
    # Quantize the sanitized graph (constants and BatchNorm folded, opset ≥ 13): the weights TensorRT will see.
    source = sanitize_model(model_path, workspace)
    model = onnx.load(str(source))
    plan = plan_quantization(model, recipe.guards)
    if reuse_cache and calibration_cache_path and Path(calibration_cache_path).exists():
        scales = load_if_valid(calibration_cache_path, meta)
        if progress:
            print(f"[trtlab] {recipe.name}: scales reused from {calibration_cache_path}")
    else:
        stats = calibration_statistics(source, cache, calibration_indices, recipe.calibration_batch, workspace,
                                       progress)
        thresholds = compute_thresholds(stats, recipe.algorithm, recipe.percentile)
        scales = scales_from_thresholds({t: thresholds[t] for t in plan.activations})
    quantized = insert_qdq(model, plan, scales)
    check_quantized_model(quantized)
    folder.mkdir(parents=True, exist_ok=True)
    cache_file = write_calibration_cache(Path(calibration_cache_path) if calibration_cache_path and not reuse_cache
                                         else folder / "calibration.cache",
                                         {t: scales[t] for t in plan.activations}, meta)
    with atomic_path(out_path, suffix=".onnx") as tmp:
        onnx.save(quantized, str(tmp))
    atomic_write_json(folder / "variant.json", {"recipe": recipe.to_dict(), "model": str(model_path),
                                                "model_sha256": sha, "calibration_ids": calib_ids,
                                                "plan": plan.describe()})
    return BuiltVariant(recipe, out_path, folder, plan.describe(), cache_file)


def _tensorrt_version() -> str | None:
    """TensorRT's version for the cache header, when TensorRT really imports here."""
    from .backends import tensorrt_available

    if not tensorrt_available():
        return None
    import tensorrt

    return getattr(tensorrt, "__version__", None)


def ort_qdq_self_check(model_path, cache, indices, batch_size: int = 8) -> dict:
    """Run one batch of a Q/DQ model through ONNX Runtime with all graph optimizations and with none.

    With none, ONNX Runtime executes QuantizeLinear/DequantizeLinear/Conv literally (the reference semantics that
    TensorRT implements); with all, it fuses them into its own INT8 kernels, which on some CPUs and graphs give
    different — even wrong — answers. trtlab evaluates Q/DQ variants unoptimized and reports the difference.
    """
    from .backends.ort import OrtRunner
    from .metrics import cosine_per_image
    from .preprocess import normalize_batch

    chunk = np.asarray(indices, np.int64)[:batch_size]
    batch = normalize_batch(np.asarray(cache.crops[chunk]), cache.preprocess)
    with OrtRunner(model_path, graph_optimization="disable") as runner:
        reference = runner.infer(batch)
    with OrtRunner(model_path, graph_optimization="all") as runner:
        optimized = runner.infer(batch)
    agreement = float((reference.argmax(1) == optimized.argmax(1)).mean())
    cosine = float(cosine_per_image(reference, optimized).min())
    return {"images": len(chunk), "top1_agreement_optimized_vs_reference": agreement,
            "worst_cosine_optimized_vs_reference": cosine, "optimized_is_trustworthy": agreement == 1.0 and cosine > 0.995}


def evaluate_variant(built: BuiltVariant, cache, eval_indices, store, backend: str = "auto", batch_size: int = 32,
                     progress: bool = True, force: bool = False):
    """Evaluate a built variant on the evaluation images and store its results under the variant's name."""
    from .pipeline import evaluate

    options = {}
    recipe = built.recipe.to_dict()
    extra = {}
    if built.recipe.precision == "int8" and backend in ("auto", "ort") and not str(built.model_path).endswith(".engine"):
        check = ort_qdq_self_check(built.model_path, cache, eval_indices)
        extra["ort_qdq_check"] = check
        options = {"graph_optimization": "disable"}
        if not check["optimized_is_trustworthy"] and progress:
            print(f"[trtlab] warning: {built.name}: ONNX Runtime's optimized INT8 kernels disagree with the Q/DQ "
                  f"reference on {check['images']} images (top-1 agreement "
                  f"{check['top1_agreement_optimized_vs_reference']:.0%}, worst cosine "
                  f"{check['worst_cosine_optimized_vs_reference']:.4f}); trtlab evaluates the unoptimized reference.")
    return evaluate(built.model_path, cache, built.name, recipe=recipe, backend=backend, batch_size=batch_size,
                    store=store, progress=progress, force=force, runner_options=options, indices=eval_indices,
                    record_extra=extra)
