"""Variants: a recipe (trtlab.quantization.recipe) → a model file in its own variant folder.

Building a variant is deterministic and cached by the hash of everything that determines it (model sha256, recipe,
calibration image ids, preprocessing, scales' source, calibration and graph revisions, and the fingerprints of the
code that makes the graph and the statistics — GRAPH_SOURCES, STATISTICS_SOURCES): the folder
`variants/<model>-<sha>/<label>-<key>/` holds `model.onnx` (the graph every backend runs — ONNX Runtime, and
TensorRT, which builds from this file), `variant.json` (its identity, checked on reuse by the one provenance check)
and, for INT8, `calibration.cache`. This is the one place FP16 and INT8 graphs are cached, under one rule.
Calibration statistics are collected once per (model, calibration set, preprocessing) for the superset of tensors
any guard set can quantize, so every algorithm and guard combination is derived from one pass over the images.
"""
from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from trtlab.core.identity import Identity
from trtlab.core.errors import UserValueError, writing
from trtlab.core.workspace import atomic_path, atomic_write_json, hash_json, read_json_checked, workspace_dir
from trtlab.quantization.recipe import (DEFAULT_CALIBRATION_IMAGES, PRECISIONS,  # noqa: F401  (re-exported)
                                        CalibrationSizeError, Recipe, select_calibration_indices)
from trtlab.quantization.calibration_cache import read_imported_cache
from trtlab.quantization.recovery import MODULES as RECOVERY_MODULES, check_imported_scales
from trtlab.quantization.statistics import (CALIBRATION_REVISION, CalibrationStats, collect_statistics,
                                            first_batch_images, statistics_code)
from trtlab.quantization.thresholds import (compute_thresholds, joint_thresholds,  # noqa: F401 (re-exported)
                                           merge_histograms, scales_from_thresholds)

log = logging.getLogger(__name__)

#: Part of every variant's key and identity: bumped when the graph a recipe makes changes (2: nodes named once at
#: sanitize; '=fp16' guards by the one precision converter, without Cast pairs; 3: issue 17 — the FP16 float path by
#: default, placement rules, bare first_layer / last_layer guards following the float path; 4: an Add of two Convs
#: quantizes the shortcut, not the exporter's first input; one per-tensor weight scale for a grouped ConvTranspose and
#: a 1-D MatMul weight; a constant MatMul/Gemm first input quantized; 5: the opset imports no node uses dropped at
#: sanitize, and the first calibration batch sets every histogram's range whatever the memory budget, the variant
#: recording how many images that was), so old variant folders (a graph the recipe no
#: longer makes) are rebuilt, never reused. Since issue 36 a change to GRAPH_SOURCES needs no bump (their fingerprint
#: is in the identity too): bump it for what code cannot show, and to name a change for people.
VARIANT_REVISION = 5
#: The modules whose code makes a variant's files from the model, the recipe and the statistics: sanitizing, guards,
#: the precision converter, placement, insertion, thresholds, the recipe, the calibration cache and this module.
#: The fingerprint of their code (core.fingerprint, `graph_code()`) is part of every variant's identity, so editing
#: them rebuilds the variants (seconds each: statistics are kept, and results are keyed by the graph's sha256, so a
#: graph that comes out byte for byte the same keeps its results); tests/test_code_fingerprint.py fails when one of
#: them imports a trtlab module that is neither listed here nor named there as not deciding the graph.
GRAPH_SOURCES = ("trtlab.graph.sanitize", "trtlab.graph.onnx_utils", "trtlab.core.ort_session", "trtlab.graph.guards",
                 "trtlab.graph.precision", "trtlab.graph.precision_rewrite", "trtlab.quantization.placement",
                 "trtlab.quantization.insertion", "trtlab.quantization.thresholds", "trtlab.quantization.recipe",
                 "trtlab.quantization.calibration_cache", "trtlab.quantization.variants",
                 *RECOVERY_MODULES)


def graph_code() -> str:
    """The fingerprint of GRAPH_SOURCES' code (computed once per process)."""
    from trtlab.core.fingerprint import code_fingerprint

    return code_fingerprint(GRAPH_SOURCES)


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

    @functools.cached_property
    def graph_sha256(self) -> str:
        """sha256 of the graph every backend runs (with its external data): the source model for FP32."""
        from trtlab.graph.classifier import inspect_classifier

        return inspect_classifier(self.model_path).sha256

    @property
    def identity(self) -> Identity:
        """What its results are stored under (with the backend that computes them)."""
        return variant_identity(self.recipe.to_dict(), self.calibration, self.scales, self.graph_sha256)


def variant_identity(recipe: dict, calibration: dict | None = None, scales: dict | None = None,
                     graph_sha256: str | None = None) -> Identity:
    """What a variant's results are keyed by: the full recipe, the calibration images actually used (ids hash and
    count), where the scales came from and the sha256 of the graph that computes them (`model_sha256`: a graph
    the code now makes differently is another result, while a rebuilt graph that comes out the same keeps its
    results). The model, images and preprocessing are the results store's experiment. Empty parts are left out,
    as results stored before the Identity dataclass hashed them: their keys still match."""
    return Identity(recipe=dict(recipe), calibration=dict(calibration) if calibration else None,
                    scales=dict(scales) if scales else None, model_sha256=graph_sha256)


def variant_key(identity) -> str:
    """The key of an Identity (or of a stored dict of its fields)."""
    return Identity.of(identity).key


def stats_tensors(model) -> list[str]:
    """Every tensor any guard set and placement may quantize: the unguarded plans of the legacy and of all
    placement rules, both inputs of every Add, the input and output of every average pool (guards can make the
    pool rule quantize its output) and every Concat output (its histogram gives the Concat's shared scale)."""
    from trtlab.quantization.placement import LEGACY_RULES, RULES, GraphFacts, is_average_pool, plan_quantization

    everything = plan_quantization(model, (), rules=[n for n, r in RULES.items() if r.stage != "exclude"])
    legacy = plan_quantization(model, (), rules=LEGACY_RULES)
    initializers = {i.name for i in model.graph.initializer}
    facts = GraphFacts.of(model, set())
    extra = []
    for node in model.graph.node:
        if node.op_type in ("Add", "Sum"):
            extra += list(node.input)
        elif node.op_type == "Concat":
            extra.append(node.output[0])
        elif is_average_pool(node, facts):
            extra += [node.input[0], node.output[0]]
    extra = [name for name in extra if name and name not in initializers]
    return list(dict.fromkeys(legacy.activations + everything.activations + extra))


def statistics_path(model_path, cache, indices, batch_size: int, workspace=None) -> Path:
    """Where the calibration statistics of (model, these images in this order, preprocessing, calibration batch)
    are kept: the first calibration batch sets the histograms' range, so the batch is part of the key (the memory
    budget and the device are not: they change nothing)."""
    from trtlab.graph.classifier import inspect_classifier

    info = inspect_classifier(model_path)
    sha = info.sha256
    ids = cache.dataset.image_ids()
    chosen = [ids[i] for i in indices]
    made_from = Identity(model_sha256=sha, preprocess=cache.preprocess.to_dict(), revision=CALIBRATION_REVISION,
                         calibration={"ids_hash": hash_json(chosen), "images": len(chosen), "decode_cache": cache.key,
                                      "range_images": first_batch_images(batch_size, len(indices), info.fixed_batch)},
                         code={"statistics": statistics_code()})
    return workspace_dir(workspace) / "calibration" / f"stats-{sha[:12]}-{made_from.key}.npz"


def stored_statistics(path) -> CalibrationStats | None:
    """The statistics at `path`, or None when absent or damaged (a damaged file is set aside, named)."""
    from trtlab.core.workspace import read_checked

    return read_checked(path, CalibrationStats.load, _statistics_check) if Path(path).exists() else None


def _statistics_check(stats: CalibrationStats) -> str | None:
    """Histograms that can be what trtlab counted: 1-D non-negative counts, a finite max, a count of values."""
    import math

    for name, h in stats.tensors.items():
        if h.counts.ndim != 1 or (h.counts < 0).any() or not math.isfinite(h.absmax) or h.values < 0:
            return f"tensor {name!r}: counts {h.counts.shape}, max {h.absmax}, {h.values} values"
    return None


def calibration_statistics(model_path, cache, indices, batch_size: int, workspace=None,
                           progress: bool = True) -> CalibrationStats:
    """Collect (or reload, when model, images and preprocessing are identical) the calibration statistics."""
    import onnx

    path = statistics_path(model_path, cache, indices, batch_size, workspace)
    stats = stored_statistics(path)
    tensors = stats_tensors(onnx.load(str(model_path), load_external_data=False))
    if stats is not None and set(tensors) <= set(stats.tensors):
        if progress:
            log.info(f"calibration statistics for these {stats.images} images reused from {path.name}")
        return stats
    if stats is not None:  # collected by a trtlab that quantized fewer tensors: collected again, for all of them
        log.info(f"{path.name} lacks {len(set(tensors) - set(stats.tensors))} tensor(s) placement may quantize; "
                 f"collecting the statistics again")
    stats = collect_statistics(model_path, tensors, cache, indices, batch_size, progress)
    stats.save(path)
    return stats


# -- the variant folder: one cache rule for every graph a recipe makes ------------------------------------------------
def variant_folder(model_path: Path, sha: str, recipe: Recipe, key: str, workspace=None) -> Path:
    return workspace_dir(workspace) / "variants" / f"{model_path.stem}-{sha[:8]}" / f"{recipe.name}-{key}"


def reusable_record(folder: Path, identity: Identity) -> dict | None:
    """The variant.json of `folder` when its files are whole and it was made for `identity`; None when there is
    nothing to reuse, and the caller builds the variant again:
    - absent, or its variant.json damaged (set aside, named);
    - a file the record vouches for (model.onnx, calibration.cache and its .json, by their sha256 when written)
      missing or changed since — cut short by a killed kernel or a full disk —, or, for a record that names no
      sha256 (written by an older trtlab), a model.onnx onnx.checker refuses: that file is set aside as
      `<name>.damaged-<time>`;
    - made for another identity (an older trtlab revision's folder under this name, a copied or hand-edited
      one): the whole folder is set aside as `<folder>.stale-<time>`, named with the fields that differ — never
      overwritten, never reused."""
    from trtlab.core.provenance import differences
    from trtlab.core.workspace import files_differ, set_aside, stored_model_ok

    if not (folder / "model.onnx").exists():
        return None
    record = read_json_checked(folder / "variant.json")
    if record is None or "identity" not in record:  # damaged, or written before identities were recorded
        return None
    changed = differences(record["identity"], identity.to_dict())
    if changed:
        set_aside(folder, "made for another " + "; ".join(d.describe() for d in changed), kind="stale")
        return None
    recorded = record.get("files")
    if not isinstance(recorded, dict):  # an older record: the graph is checked instead
        return record if stored_model_ok(folder / "model.onnx") else None
    damaged = files_differ(folder, recorded)
    for name, reason in damaged.items():
        if reason != "missing":
            set_aside(folder / name, reason)
    return None if damaged else record


def vouched_files(folder: Path, names=("model.onnx", "calibration.cache", "calibration.cache.json")) -> dict:
    """{name: sha256} of the files of a variant folder that exist — what its variant.json vouches for."""
    from trtlab.core.workspace import sha256_file

    return {name: sha256_file(folder / name) for name in names if (folder / name).is_file()}


def write_model(model, path: Path) -> Path:
    import onnx

    with atomic_path(path, suffix=".onnx") as tmp:
        onnx.save(model, str(tmp))
    return path


def build_fp16_variant(model_path: Path, recipe: Recipe, workspace=None, force: bool = False) -> BuiltVariant:
    """The sanitized graph converted to float16 (inputs/outputs stay float32; guarded nodes keep their precision)
    — what TensorRT 11's strongly typed FP16 builds take, and an FP16 reference on ONNX Runtime."""
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.graph.precision import convert_to_fp16
    from trtlab.graph.sanitize import sanitize_model

    sha = inspect_classifier(model_path).sha256
    identity = Identity(model_sha256=sha, recipe=recipe.to_dict(), revision=VARIANT_REVISION,
                        code={"graph": graph_code()})
    folder = variant_folder(model_path, sha, recipe, identity.key, workspace)
    record = None if force else reusable_record(folder, identity)
    if record is not None:
        return BuiltVariant(recipe, folder / "model.onnx", folder, record.get("conversion", {}), reused=True)
    conversion = convert_to_fp16(sanitize_model(model_path, workspace), guards=recipe.guards,
                                 output_path=folder / "model.onnx")
    atomic_write_json(folder / "variant.json", {"identity": identity.to_dict(), "recipe": recipe.to_dict(),
                                                "model": str(model_path), "model_sha256": sha,
                                                "conversion": conversion.summary(), "files": vouched_files(folder)})
    return BuiltVariant(recipe, folder / "model.onnx", folder, conversion.summary())


def build_variant(model_path, recipe: Recipe, cache=None, calibration_indices=None, workspace=None,
                  force: bool = False, progress: bool = True, calibration_cache_path=None,
                  reuse_cache: bool = False) -> BuiltVariant:
    """Make the ONNX file for `recipe`. INT8: calibrate on `calibration_indices` of `cache`, insert Q/DQ, check.

    `calibration_cache_path` + `reuse_cache=True` loads scales from an existing cache instead of calibrating; the
    cache is refused (StaleCacheError, naming the differing field) when made for another model, algorithm,
    preprocessing or image count.
    """
    model_path = Path(model_path)
    if recipe.precision == "fp32":
        return BuiltVariant(recipe, model_path, source_model=model_path)
    if recipe.precision == "fp16":
        built = build_fp16_variant(model_path, recipe, workspace, force)
        built.source_model = model_path
        return built
    if cache is None or calibration_indices is None:
        raise UserValueError("an INT8 recipe needs a decode cache and calibration image indices",
                             "pass cache= and calibration_indices= (e.g. split.calibration)")
    job = _Int8Build(model_path, recipe, cache, calibration_indices, workspace, calibration_cache_path, reuse_cache)
    return job.run(force, progress)


class _Int8Build:
    """One INT8 variant build: the images and identity first (so a reusable folder is found before any work), then
    sanitized graph → placement → scales (calibrated, or imported from a checked cache) → Q/DQ → files."""

    def __init__(self, model_path: Path, recipe: Recipe, cache, calibration_indices, workspace,
                 calibration_cache_path, reuse_cache: bool):
        from trtlab.graph.classifier import inspect_classifier

        self.recipe, self.indices = select_calibration_indices(cache, calibration_indices, recipe)
        self.model_path, self.cache, self.workspace = model_path, cache, workspace
        self.cache_path = calibration_cache_path
        info = inspect_classifier(model_path)
        self.sha = info.sha256
        ids = cache.dataset.image_ids()
        self.calib_ids = [ids[i] for i in self.indices]
        # The calibration code's revision is part of what a variant is: a changed algorithm never reuses old scales.
        # range_images: the first calibration images (in calib_ids' order) whose max |x| set every histogram's range.
        self.calibration = {"images": len(self.calib_ids), "ids_hash": hash_json(self.calib_ids),
                            "batch": self.recipe.calibration_batch, "seed": self.recipe.seed,
                            "revision": CALIBRATION_REVISION,
                            "range_images": first_batch_images(self.recipe.calibration_batch, len(self.calib_ids),
                                                               info.fixed_batch)}
        self.imported = bool(reuse_cache and calibration_cache_path and Path(calibration_cache_path).exists())
        check_imported_scales(self.recipe, self.imported)
        self.fixed_batch = info.fixed_batch
        # An imported cache is read (and its header checked) now; its sha256, format (trtlab's with sidecar, or
        # TensorRT's own without) and header are part of the variant's identity.
        self.imported_cache = read_imported_cache(calibration_cache_path, "calibration_cache_path") \
            if self.imported else None
        self.scales_source = self.imported_cache.identity() if self.imported else {"source": "calibration"}
        # The scales' source is part of the key: a variant built from an imported cache is never reused by a plain run.
        # The folder is named by the identity's key (the identity is checked again on reuse).
        # The code that makes the graph and (for calibrated scales) the statistics is part of it too: an edit to
        # either is a new folder, never a stale one reused (GRAPH_SOURCES, STATISTICS_SOURCES).
        code = {"graph": graph_code()} if self.imported else {"graph": graph_code(), "statistics": statistics_code()}
        self.identity = Identity(model_sha256=self.sha, recipe=self.recipe.to_dict(), calibration=self.calibration,
                                 scales=self.scales_source, preprocess=cache.preprocess.to_dict(),
                                 revision=VARIANT_REVISION, code=code)
        self.folder = variant_folder(model_path, self.sha, self.recipe, self.identity.key, workspace)

    def built(self, plan: dict, cache_file: Path, reused: bool = False) -> BuiltVariant:
        return BuiltVariant(self.recipe, self.folder / "model.onnx", self.folder, plan, cache_file, reused=reused,
                            source_model=self.model_path, calibration=self.calibration, scales=self.scales_source)

    def run(self, force: bool, progress: bool) -> BuiltVariant:
        import onnx

        from trtlab.graph.sanitize import sanitize_model
        from trtlab.quantization.calibration_cache import write_calibration_cache
        from trtlab.quantization.insertion import quantize_graph
        from trtlab.quantization.placement import plan_for_recipe
        from trtlab.quantization.recovery.recover import BuildRecovery

        record = None if force else reusable_record(self.folder, self.identity)
        if record is not None:
            if self.cache_path and not self.imported:  # the user asked for the cache there: give it, even on reuse
                export_calibration_cache(self.folder / "calibration.cache", self.cache_path)
            return self.built(record["plan"], self.folder / "calibration.cache", reused=True)
        # Quantize the sanitized graph (constants and BatchNorm folded, opset ≥ 13, nodes named): what TensorRT sees.
        source = sanitize_model(self.model_path, self.workspace)
        model = onnx.load(str(source))
        recipe = self.recipe
        recovery = BuildRecovery(recipe, self.workspace)  # a recipe without recovery passes through it unchanged
        model, source = recovery.before_calibration(model, source)  # equalization: the graph calibration sees
        plan = plan_for_recipe(model, recipe)
        began = time.perf_counter()
        scales = self.imported_scales(source, model, plan, progress) if self.imported else \
            self.calibrated_scales(source, plan, progress)
        model = recovery.after_calibration(model, plan, scales, time.perf_counter() - began, self.cache, self.indices,
                                           self.fixed_batch, progress)  # adaptive rounding, bias correction
        graph = quantize_graph(model, plan, scales, recipe.high_precision)  # checked: onnx.checker + shapes
        quantized = graph.model
        described = {**plan.describe(), **graph.summary(), **recovery.describe()}
        report_fp16_range(recipe.name, graph.fp16_range, self.sha)
        with writing(self.folder):  # a read-only workspace: one line naming the folder
            self.folder.mkdir(parents=True, exist_ok=True)
        # The cache always lives with the variant; a requested path gets a copy (export_calibration_cache).
        cache_file = write_calibration_cache(self.folder / "calibration.cache",
                                             {t: scales[t] for t in plan.activations}, self.cache_metadata())
        write_model(quantized, self.folder / "model.onnx")
        atomic_write_json(self.folder / "variant.json", {
            "identity": self.identity.to_dict(), "recipe": self.recipe.to_dict(), "model": str(self.model_path),
            "model_sha256": self.sha, "calibration_ids": self.calib_ids, "calibration": self.calibration,
            "scales": self.scales_source, "plan": described, "files": vouched_files(self.folder)})
        if self.cache_path and not self.imported:
            export_calibration_cache(cache_file, self.cache_path)
        return self.built(described, cache_file)

    def cache_metadata(self):
        # TensorRT's version comes from trtlab.backends: only backends/ and env/ import tensorrt
        from trtlab.backends import installed_tensorrt_version
        from trtlab.quantization.calibration_cache import CacheMetadata

        recipe = self.recipe
        return CacheMetadata(model_sha256=self.sha, algorithm=recipe.algorithm,
                             preprocess=self.cache.preprocess.to_dict(), images=len(self.indices),
                             percentile=recipe.percentile if recipe.algorithm == "percentile" else None,
                             calibration_ids_hash=self.calibration["ids_hash"],
                             tensorrt_version=installed_tensorrt_version())

    def calibrated_scales(self, source: Path, plan, progress: bool) -> dict[str, float]:
        stats = calibration_statistics(source, self.cache, self.indices, self.recipe.calibration_batch,
                                       self.workspace, progress)
        thresholds = compute_thresholds(stats, self.recipe.algorithm, self.recipe.percentile)
        thresholds.update(joint_thresholds(stats, plan, self.recipe.algorithm, self.recipe.percentile, thresholds))
        return scales_from_thresholds({t: thresholds[t] for t in plan.activations})

    def imported_scales(self, source: Path, model, plan, progress: bool) -> dict[str, float]:
        """Scales from the user's cache for the tensors this plan quantizes, checked (calibration_cache.
        check_imported): what it was made for, every needed tensor present, and, when this model's statistics for
        these images exist, plausible against the observed ranges (an imported cache is used to skip calibrating,
        so none are collected for it)."""
        from trtlab.quantization.calibration_cache import check_imported

        observed = stored_statistics(statistics_path(source, self.cache, self.indices, self.recipe.calibration_batch,
                                                     self.workspace))
        scales = check_imported(self.imported_cache, self.sha, self.recipe.algorithm, self.cache.preprocess.to_dict(),
                                self.recipe.percentile, plan.activations, tensor_names(model),
                                observed_absmax=None if observed is None else
                                {name: h.absmax for name, h in observed.tensors.items()},
                                model_name=self.model_path.name)
        if progress:
            log.info(f"{self.recipe.name}: scales imported from {self.cache_path} ({self.imported_cache.format}, "
                     f"{self.imported_cache.header})")
        return scales


def tensor_names(model) -> set[str]:
    """Every tensor name of the graph (inputs, node inputs and outputs)."""
    names = {i.name for i in model.graph.input}
    for node in model.graph.node:
        names.update(n for n in (*node.input, *node.output) if n)
    return names


def export_calibration_cache(cache_file: Path, target) -> Path:
    """Copy a variant's calibration cache (and its .json provenance) to `target`, atomically."""
    from trtlab.core.workspace import atomic_write_bytes

    for suffix in ("", ".json"):
        source = Path(str(cache_file) + suffix)
        if source.exists():
            atomic_write_bytes(str(target) + suffix, source.read_bytes())
    return Path(target)


#: What a scale moved into FP16's range means for accuracy (quantization.insertion.fp16_representable). Raised: the
#: scale was below 2⁻²⁴, so every value of its channel or tensor lies within 127 · 2⁻²⁴ ≈ 7.6e-6 (a dead or
#: near-constant channel); with 2⁻²⁴ they still fit in ±127 steps — nothing clips — and round to within half a step,
#: 3e-8. Lowered: the scale was above 65504, a range beyond 127 · 65504 ≈ 8.3e6, which now clips.
FP16_RANGE_EFFECT = {
    "raised": ("FP16's smallest subnormal (2⁻²⁴)", "harmless: their values all lie within ±7.6e-6 (dead or "
               "near-constant channels), still represented to within 3e-8 with nothing clipped"),
    "lowered": ("FP16's largest value (65504)", "values beyond ±8.3e6 in those channels now clip: check the model's "
                "outputs against FP32"),
}


def report_fp16_range(name: str, fp16_range: dict, model_key: str = "") -> None:
    """One line per direction scales moved into FP16's range, with what it means for accuracy — once per model and
    direction in a process (an A/B's variants share the model's weights, so the same count recurs; each variant's
    own counts are in its variant.json, plan.fp16_range) — and a warning naming the activations beyond FP16."""
    from trtlab.core.log import info_once

    for direction, (bound, effect) in FP16_RANGE_EFFECT.items():
        counts = fp16_range[direction]
        if sum(counts.values()):
            info_once(log, ("fp16-range", model_key, direction),
                      f"{name}: {sum(counts.values())} scale(s) {direction} to {bound} ({counts['weights']} weight, "
                      f"{counts['activations']} activation) — {effect}")
    beyond = fp16_range["activations_beyond_fp16"]
    if beyond:
        shown = ", ".join(beyond[:5]) + (f" and {len(beyond) - 5} more" if len(beyond) > 5 else "")
        log.warning(f"{name}: {len(beyond)} activation(s) range beyond FP16's 65504 ({shown}): on the FP16 float "
                    f"path they overflow (±inf) wherever the graph holds them in FP16 — build this model on the FP32 "
                    f"float path: Recipe(high_precision='fp32')")


def default_calibration_pool(dataset) -> int:
    """Calibration images of a split made for recipes that name no number: half the data, at most
    DEFAULT_CALIBRATION_IMAGES (the rest evaluates)."""
    return max(1, min(DEFAULT_CALIBRATION_IMAGES, len(dataset) // 2))


__all__ = ["BuiltVariant", "Recipe", "CalibrationSizeError", "DEFAULT_CALIBRATION_IMAGES", "PRECISIONS",
           "build_variant", "build_fp16_variant", "select_calibration_indices", "variant_identity", "variant_key",
           "stats_tensors", "statistics_path", "stored_statistics", "calibration_statistics",
           "export_calibration_cache", "joint_thresholds", "merge_histograms", "tensor_names",
           "report_fp16_range", "default_calibration_pool", "VARIANT_REVISION", "GRAPH_SOURCES", "graph_code"]
