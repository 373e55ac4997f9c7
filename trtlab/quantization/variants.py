"""Variants: a recipe (precision, algorithm, calibration set, guards) → a model file → stored results.

Building a variant is deterministic and cached by the hash of everything that determines it (model sha256, recipe,
calibration image ids, preprocessing). Calibration statistics are collected once per (model, calibration set,
preprocessing) for the superset of tensors any guard set can quantize, so every algorithm and guard combination is
derived from one pass over the calibration images.
"""
from __future__ import annotations

import logging

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.quantization.calibrate import (ALGORITHMS, CALIBRATION_REVISION, CalibrationStats, collect_statistics, compute_thresholds,
                        scales_from_thresholds)
from trtlab.core.errors import UserValueError
from trtlab.graph.guards import parse_guard
from trtlab.core.workspace import atomic_path, atomic_write_json, hash_json, read_json_checked, sha256_file, workspace_dir

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "fp16", "int8")
# Calibration images when a recipe names no number: NVIDIA suggests about 500 for ImageNet classifiers; more costs
# time and rarely moves a threshold.
DEFAULT_CALIBRATION_IMAGES = 512


@dataclass(frozen=True)
class Recipe:
    """What a variant is. `calibration_images`/`calibration_batch`/`algorithm` apply to int8 only; fp16 converts
    the graph to float16 (guards keep nodes in float32)."""

    precision: str = "int8"
    algorithm: str = "entropy"
    percentile: float = 99.99
    calibration_images: int | None = None  # None: the split's calibration images, at most DEFAULT_CALIBRATION_IMAGES
    calibration_batch: int = 8
    guards: tuple = ()
    seed: int = 0

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.precision == "int8" and self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if (self.calibration_images is not None and self.calibration_images < 1) or self.calibration_batch < 1:
            raise ValueError("calibration_images and calibration_batch must be ≥ 1")
        object.__setattr__(self, "guards", tuple(self.guards))
        for guard in self.guards:
            parse_guard(guard)

    @property
    def name(self) -> str:
        """Readable variant name, e.g. 'int8-entropy@64+first_layer+last_layer-fp16' (@ calibration images)."""
        if self.precision == "fp32":
            return "fp32"
        if self.precision == "fp16":
            return re.sub(r"[^A-Za-z0-9_.+=-]", "_", "fp16" + "".join(f"+{_guard_label(g)}" for g in self.guards)
                          ).replace("=", "-")
        algo = f"percentile{self.percentile:g}" if self.algorithm == "percentile" else self.algorithm
        # Calibration size always; batch and seed when not the defaults (they rarely change, and rarely matter).
        algo += f"@{self.calibration_images or 'auto'}" \
            + (f"b{self.calibration_batch}" if self.calibration_batch != 8 else "") \
            + (f"s{self.seed}" if self.seed else "")
        name = f"int8-{algo}" + "".join(f"+{_guard_label(g)}" for g in self.guards)
        name = re.sub(r"[^A-Za-z0-9_.+=@-]", "_", name).replace("=", "-")
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


def _guard_label(guard: str) -> str:
    """A guard as a variant name shows it: a node guard by its node name alone (exporters already name nodes
    'node_Conv_875', so 'node:' would read 'node_node_Conv_875'); other guards as written."""
    return guard[len("node:"):] if guard.startswith("node:") else guard


@dataclass
class BuiltVariant:
    recipe: Recipe
    model_path: Path
    folder: Path | None = None
    plan: dict = field(default_factory=dict)
    calibration_cache: Path | None = None
    reused: bool = False
    source_model: Path | None = None  # the FP32 model the variant was made from (the experiment's model)
    calibration: dict = field(default_factory=dict)  # images actually used: {"images", "ids_hash", "batch", "seed"}
    scales: dict = field(default_factory=dict)  # {"source": "calibration"} or imported cache and its sha256

    @property
    def name(self) -> str:
        """Readable label; variants whose scales come from an imported cache say so (and which cache)."""
        if self.scales.get("source") == "imported-cache":
            return f"{self.recipe.name}+cache-{self.scales['cache_sha256'][:6]}"
        return self.recipe.name

    @property
    def identity(self) -> dict:
        return variant_identity(self.recipe.to_dict(), self.calibration, self.scales)


def variant_identity(recipe: dict, calibration: dict | None = None, scales: dict | None = None) -> dict:
    """Everything that makes a variant what it is: the full recipe, the calibration images actually used (ids hash
    and count) and where the scales came from."""
    identity = {"recipe": dict(recipe)}
    if calibration:
        identity["calibration"] = dict(calibration)
    if scales:
        identity["scales"] = dict(scales)
    return identity


def variant_key(identity: dict) -> str:
    return hash_json(identity, 16)


def stats_tensors(model) -> list[str]:
    """Every tensor any guard set may quantize: the unguarded plan's tensors plus both inputs of every Add."""
    from trtlab.quantization.qdq import plan_quantization

    plan = plan_quantization(model, ())
    initializers = {i.name for i in model.graph.initializer}
    extra = [name for node in model.graph.node if node.op_type in ("Add", "Sum") for name in node.input
             if name and name not in initializers]
    return list(dict.fromkeys(plan.activations + extra))


def statistics_path(model_path, cache, indices, workspace=None) -> Path:
    """Where the calibration statistics of (model, these images, preprocessing) are kept."""
    from trtlab.graph.classifier import inspect_classifier

    sha = inspect_classifier(model_path).sha256
    ids = cache.dataset.image_ids()
    key = hash_json({"model": sha, "ids": [ids[i] for i in indices], "pre": cache.preprocess.to_dict(),
                     "files": cache.key, "calibrate": CALIBRATION_REVISION})
    return workspace_dir(workspace) / "calibration" / f"stats-{sha[:12]}-{key}.npz"


def stored_statistics(path) -> CalibrationStats | None:
    """The statistics at `path`, or None when absent or damaged (a damaged file is set aside, named)."""
    from trtlab.core.workspace import read_checked

    return read_checked(path, CalibrationStats.load) if Path(path).exists() else None


def calibration_statistics(model_path, cache, indices, batch_size: int, workspace=None,
                           progress: bool = True) -> CalibrationStats:
    """Collect (or reload, when model, images and preprocessing are identical) the calibration statistics."""
    import onnx

    path = statistics_path(model_path, cache, indices, workspace)
    stats = stored_statistics(path)
    if stats is not None:
        if progress:
            log.info(f"calibration statistics for these {stats.images} images reused from {path.name}")
        return stats
    tensors = stats_tensors(onnx.load(str(model_path), load_external_data=False))
    stats = collect_statistics(model_path, tensors, cache, indices, batch_size, progress)
    stats.save(path)
    return stats


def build_fp16_variant(model_path: Path, recipe: Recipe, workspace=None, force: bool = False) -> BuiltVariant:
    """The sanitized graph converted to float16 (inputs/outputs stay float32; guarded nodes stay float32) — what
    TensorRT 11's strongly typed FP16 builds take, and an FP16 reference on ONNX Runtime."""
    from trtlab.graph.precision import convert_to_fp16
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.graph.sanitize import sanitize_model

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


class CalibrationSizeError(UserValueError):
    """More calibration images were asked for than the calibration set has."""


def select_calibration_indices(cache, calibration_indices, recipe: Recipe) -> tuple[Recipe, np.ndarray]:
    """(recipe with its calibration size made explicit, the images it calibrates on): the decodable ones among
    `calibration_indices`, the first `recipe.calibration_images` of them (the split already shuffled them,
    seeded; None: all of them, at most DEFAULT_CALIBRATION_IMAGES). Asking for more than exist is refused with the
    available number: a run record must state what was really used."""
    indices = np.asarray(calibration_indices, np.int64)
    valid = indices[np.isin(indices, cache.valid_indices)]
    if len(valid) == 0:
        raise CalibrationSizeError(f"no decodable calibration images in {cache.dataset.name!r}",
                                   f"check the split and the decode cache failures ({cache.folder}/failures.json)")
    if recipe.calibration_images is None:
        recipe = dataclasses.replace(recipe, calibration_images=min(len(valid), DEFAULT_CALIBRATION_IMAGES))
    if recipe.calibration_images > len(valid):
        failed = len(indices) - len(valid)
        raise CalibrationSizeError(
            f"{recipe.name} asks for {recipe.calibration_images} calibration images, but the calibration set of "
            f"{cache.dataset.name!r} has {len(valid)} decodable images"
            + (f" ({failed} failed to decode)" if failed else ""),
            f"use calibration_images ≤ {len(valid)}, or a split with a larger calibration set")
    return recipe, valid[: recipe.calibration_images]


def build_variant(model_path, recipe: Recipe, cache=None, calibration_indices=None, workspace=None,
                  force: bool = False, progress: bool = True, calibration_cache_path=None,
                  reuse_cache: bool = False) -> BuiltVariant:
    """Make the ONNX file for `recipe`. INT8: calibrate on `calibration_indices` of `cache`, insert Q/DQ, check.

    `calibration_cache_path` + `reuse_cache=True` loads scales from an existing cache instead of calibrating; the
    cache is refused (StaleCacheError, naming the differing field) when made for another model, algorithm,
    preprocessing or image count.
    """
    import onnx

    from trtlab.quantization.calibration_cache import CacheMetadata, load_if_valid, write_calibration_cache
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.quantization.qdq import check_quantized_model, insert_qdq, plan_quantization
    from trtlab.graph.sanitize import sanitize_model

    model_path = Path(model_path)
    if recipe.precision == "fp32":
        return BuiltVariant(recipe, model_path, source_model=model_path)
    if recipe.precision == "fp16":
        built = build_fp16_variant(model_path, recipe, workspace, force)
        built.source_model = model_path
        return built
    if cache is None or calibration_indices is None:
        raise ValueError("an INT8 recipe needs a decode cache and calibration image indices")
    recipe, calibration_indices = select_calibration_indices(cache, calibration_indices, recipe)
    sha = inspect_classifier(model_path).sha256
    ids = cache.dataset.image_ids()
    calib_ids = [ids[i] for i in calibration_indices]
    # The calibration code's revision is part of what a variant is: a changed algorithm never reuses old scales.
    calibration = {"images": len(calib_ids), "ids_hash": hash_json(calib_ids), "batch": recipe.calibration_batch,
                   "seed": recipe.seed, "revision": CALIBRATION_REVISION}
    imported = bool(reuse_cache and calibration_cache_path and Path(calibration_cache_path).exists())
    scales_source = ({"source": "imported-cache", "cache_sha256": sha256_file(calibration_cache_path)} if imported
                     else {"source": "calibration"})
    # The scales' source is part of the key: a variant built from an imported cache is never reused by a plain run.
    key = hash_json({"model": sha, "recipe": recipe.to_dict(), "ids": calib_ids, "pre": cache.preprocess.to_dict(),
                     "scales": scales_source, "calibrate": CALIBRATION_REVISION})
    folder = workspace_dir(workspace) / "variants" / f"{model_path.stem}-{sha[:8]}" / f"{recipe.name}-{key}"
    out_path = folder / "model.onnx"
    described = dict(source_model=model_path, calibration=calibration, scales=scales_source)
    built_info = read_json_checked(folder / "variant.json") if out_path.exists() and not force else None
    if built_info is not None and "plan" in built_info:  # a damaged variant.json is set aside and rebuilt
        if calibration_cache_path and not imported:  # the user asked for the cache there: give it, even on reuse
            export_calibration_cache(folder / "calibration.cache", calibration_cache_path)
        return BuiltVariant(recipe, out_path, folder, built_info["plan"], folder / "calibration.cache", reused=True,
                            **described)
    meta = CacheMetadata(model_sha256=sha, algorithm=recipe.algorithm, preprocess=cache.preprocess.to_dict(),
                         images=len(calibration_indices),
                         percentile=recipe.percentile if recipe.algorithm == "percentile" else None,
                         calibration_ids_hash=hash_json(calib_ids), tensorrt_version=_tensorrt_version())
    # Quantize the sanitized graph (constants and BatchNorm folded, opset ≥ 13): the weights TensorRT will see.
    source = sanitize_model(model_path, workspace)
    model = onnx.load(str(source))
    plan = plan_quantization(model, recipe.guards)
    if imported:
        # Scales must be plausible for the tensor: checked against the observed ranges when this model's statistics
        # for these images exist (an imported cache is used to skip calibrating, so none are collected for it).
        observed = stored_statistics(statistics_path(source, cache, calibration_indices, workspace))
        scales = load_if_valid(calibration_cache_path, meta, observed_absmax=None if observed is None else
                               {name: h.absmax for name, h in observed.tensors.items()})
        if progress:
            log.info(f"{recipe.name}: scales reused from {calibration_cache_path}")
    else:
        stats = calibration_statistics(source, cache, calibration_indices, recipe.calibration_batch, workspace,
                                       progress)
        thresholds = compute_thresholds(stats, recipe.algorithm, recipe.percentile)
        scales = scales_from_thresholds({t: thresholds[t] for t in plan.activations})
    quantized = insert_qdq(model, plan, scales)
    check_quantized_model(quantized)
    folder.mkdir(parents=True, exist_ok=True)
    # The cache always lives with the variant; a requested path gets a copy (export_calibration_cache).
    cache_file = write_calibration_cache(folder / "calibration.cache", {t: scales[t] for t in plan.activations}, meta)
    with atomic_path(out_path, suffix=".onnx") as tmp:
        onnx.save(quantized, str(tmp))
    atomic_write_json(folder / "variant.json", {"recipe": recipe.to_dict(), "model": str(model_path),
                                                "model_sha256": sha, "calibration_ids": calib_ids,
                                                "calibration": calibration, "scales": scales_source,
                                                "plan": plan.describe()})
    if calibration_cache_path and not imported:
        export_calibration_cache(cache_file, calibration_cache_path)
    return BuiltVariant(recipe, out_path, folder, plan.describe(), cache_file, **described)


def export_calibration_cache(cache_file: Path, target) -> Path:
    """Copy a variant's calibration cache (and its .json provenance) to `target`, atomically."""
    from trtlab.core.workspace import atomic_write_bytes

    for suffix in ("", ".json"):
        source = Path(str(cache_file) + suffix)
        if source.exists():
            atomic_write_bytes(str(target) + suffix, source.read_bytes())
    return Path(target)


def _tensorrt_version() -> str | None:
    """TensorRT's version for the cache header, when TensorRT really imports here."""
    from trtlab.backends import tensorrt_available

    if not tensorrt_available():
        return None
    import tensorrt

    return getattr(tensorrt, "__version__", None)
