"""The layer debugger: what the analyses share — the sanitized FP32 graph, the calibrated scales, the images — and
the INT8 variants they run, built in memory by the quantizer (so they equal what build_variant writes).

`scale_overrides={tensor or layer name: factor}` multiplies calibrated activation scales: a debugging aid to break
one layer on purpose and watch the tools find it. Overrides never reach a Recipe or a built variant.

A recipe with recovery (quantization.recovery) is debugged as build_variant builds it: the INT8 variants are made
from the recovered float graph (`base`: equalized before calibration, then rounded and bias-corrected with the
recipe's guards), while FP32 stays the sanitized graph. Variants with extra guards keep that recovered graph (its
layers guarded run its float weights) — the guard search's approximation; verify() builds the real recipe.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from trtlab.core.identity import Identity
from trtlab.core.workspace import hash_json, workspace_dir
from trtlab.debug import guard_search as _guard_search
from trtlab.debug import sensitivity as _sensitivity
from trtlab.debug import tensor_errors as _tensor_errors
from trtlab.graph.block_names import block_names
from trtlab.graph.guards import Guard
from trtlab.debug.graphs import node_guard, plan_signature, suffix_model

log = logging.getLogger(__name__)
from trtlab.debug.guard_search import GuardSearch
from trtlab.debug.sensitivity import Sensitivity
from trtlab.debug.tensor_errors import JUMP_MIN_DB, TensorErrors


class LayerDebugger:
    """Everything the three tools share: the sanitized FP32 graph, calibrated scales, the images.

    model_path: the ONNX classifier (it is sanitized exactly as build_variant does, and the same cached calibration
    statistics are used, so an in-memory variant here equals what build_variant writes for the same recipe).
    cache: the decode cache; calibration_indices / evaluation_indices: e.g. a Split's two halves.
    recipe: the INT8 recipe to debug (its guards stay on throughout).
    images: evaluation images used for the per-tensor comparison and the sensitivity runs (the first `images`).
    search_images: evaluation images the guard search evaluates on (the first `search_images`; default: the first
    half); the rest verify the found recipe, so the verification is on images the search never saw.
    scale_overrides: {activation tensor or layer name: factor}; a debugging aid that multiplies calibrated scales.
    """

    def __init__(self, model_path, cache, calibration_indices, evaluation_indices, recipe=None, images: int = 8,
                 batch_size: int = 8, scale_overrides: dict | None = None, workspace=None, progress: bool = True,
                 search_images: int | None = None):
        from trtlab.quantization.recipe import Recipe, select_calibration_indices

        recipe = recipe or Recipe(algorithm="entropy")
        if recipe.precision != "int8":
            raise ValueError(f"layer debugging compares an INT8 recipe with FP32; got precision={recipe.precision!r}")
        if images < 1 or batch_size < 1:
            raise ValueError("images and batch_size must be ≥ 1")
        self.model_path = Path(model_path)
        self.cache = cache
        self.workspace = workspace
        self.progress = progress
        self.batch_size = int(batch_size)
        # The same selection build_variant makes, so the scales are the ones a built variant gets.
        self.recipe, self.calibration_indices = select_calibration_indices(
            cache, np.asarray(calibration_indices, np.int64), recipe)
        self.evaluation_indices = np.asarray(evaluation_indices, np.int64)
        self.evaluation_indices = self.evaluation_indices[np.isin(self.evaluation_indices, cache.valid_indices)]
        if len(self.calibration_indices) == 0:
            raise ValueError("no decodable calibration images; check the split and the decode cache failures")
        if len(self.evaluation_indices) == 0:
            raise ValueError("no decodable evaluation images; check the split and the decode cache failures")
        self.debug_indices = self.evaluation_indices[:images]
        self._split_search_and_verification(search_images)
        self._twins: dict = {}
        self._made_with = {"images": images, "batch_size": batch_size, "scale_overrides": scale_overrides,
                           "search_images": search_images}
        self._load_graph(recipe)
        self._calibrate(recipe, scale_overrides or {})
        self._recover()
        self.key = self._identity(recipe).key
        self.folder = (workspace_dir(workspace) / "debug" / f"{self.model_path.stem}-{self.model_sha256[:8]}"
                       / f"{recipe.name}-{self.key}")
        self.reference_logits: dict[bytes, np.ndarray] = {}  # FP32 logits per image set (guard_search.fp32_logits)
        self.recipe_reason = ""  # why this recipe is debugged (layer_debugger: notebook 03's recommendation, …)

    def _identity(self, recipe) -> Identity:
        """What the saved work under self.folder is made from: the model, recipe, calibration images and
        preprocessing, the scale overrides, and the code that makes the graphs and statistics it evaluates (a
        change to it starts the saved sensitivity and search over, as it rebuilds variants)."""
        from trtlab.quantization.statistics import statistics_code
        from trtlab.quantization.variants import VARIANT_REVISION, graph_code

        chosen = self.image_ids(self.calibration_indices)
        overrides = sorted(self.scale_overrides.items())
        return Identity(model_sha256=self.model_sha256, recipe=recipe.to_dict(),
                        preprocess=self.cache.preprocess.to_dict(),
                        calibration={"ids_hash": hash_json(chosen), "images": len(chosen)},
                        scales={"source": "calibration", "overrides": overrides} if overrides else None,
                        revision=VARIANT_REVISION, code={"graph": graph_code(), "statistics": statistics_code()})

    def _split_search_and_verification(self, search_images: int | None) -> None:
        """The guard search evaluates on the first `search_images` evaluation images, verification on the rest:
        a guard set chosen on some images is judged on others."""
        count = len(self.evaluation_indices)
        search = (count + 1) // 2 if search_images is None else int(search_images)
        if not 1 <= search <= count:
            raise ValueError(f"search_images={search_images}: the guard search needs 1 to {count} of the {count} "
                             f"decodable evaluation images (the rest verify what it finds)")
        self.search_indices = self.evaluation_indices[:search]
        self.verify_indices = self.evaluation_indices[search:]

    def image_ids(self, indices) -> list[str]:
        """The dataset's ids (paths relative to its root) of `indices`."""
        ids = self.cache.dataset.image_ids()
        return [ids[i] for i in indices]

    def _load_graph(self, recipe) -> None:
        """The sanitized FP32 graph (nodes named), its layers, and the layers the recipe leaves to guard."""
        import onnx

        from trtlab.graph.classifier import inspect_classifier
        from trtlab.graph.guards import resolve_guards, weighted_nodes_in_order
        from trtlab.graph.sanitize import sanitize_model

        self.info = inspect_classifier(self.model_path)
        crop = self.cache.preprocess.crop
        if self.info.image_size != (crop, crop):
            raise ValueError(f"{self.model_path.name} takes {self.info.image_size[0]}×{self.info.image_size[1]} "
                             f"images but the decode cache holds {crop}×{crop} crops; use a preprocessing with "
                             f"crop={self.info.image_size[0]}")
        self.model_sha256 = self.info.sha256
        self.sanitized_path = sanitize_model(self.model_path, self.workspace)
        self.fp32 = onnx.load(str(self.sanitized_path))  # sanitizing named every node, once
        self.input_name = self.fp32.graph.input[0].name
        self.output_name = self.fp32.graph.output[0].name
        self.node_index = {n.name: i for i, n in enumerate(self.fp32.graph.node)}
        self.blocks = block_names(self.fp32)  # {node name: the model's module path}, for people; guards use nodes
        # bare first_layer / last_layer take the recipe's float path, as build_variant resolves them
        self.base_guards = list(resolve_guards(self.fp32, recipe.guards, recipe.int8_float_path))
        base_names = {g.name for g in self.base_guards}
        self.all_layers = [n.name for n in weighted_nodes_in_order(self.fp32)]
        self.layers = [name for name in self.all_layers if name not in base_names]  # candidates for guarding
        if not self.layers:
            raise ValueError(f"recipe guards {list(recipe.guards)} already keep every weighted layer out of INT8; "
                             f"nothing to debug")

    def _calibrate(self, recipe, scale_overrides: dict) -> None:
        """Calibrated activation scales (the cached statistics build_variant uses), then the overrides."""
        from trtlab.quantization.thresholds import compute_thresholds, scales_from_thresholds
        from trtlab.quantization.variants import calibration_statistics

        self.base, source = self.fp32, self.sanitized_path
        self.unrecovered = self.base
        self.recovery = None
        if recipe.recovery:
            from trtlab.quantization.recovery.recover import RecoveryReport, equalize, write_equalized

            self.recovery = RecoveryReport(recipe.recovery)
            if "equalization" in recipe.recovery:  # calibrated on the equalized graph, as build_variant does
                self.base = self.unrecovered = equalize(self.fp32, self.recovery)
                source = write_equalized(self.base, self.sanitized_path, self.workspace)
        stats = calibration_statistics(source, self.cache, self.calibration_indices,
                                       recipe.calibration_batch, self.workspace, self.progress)
        self.scale_overrides = self._resolve_overrides(scale_overrides, set(stats.tensors))
        self.stats = stats
        self.thresholds = compute_thresholds(stats, recipe.algorithm, recipe.percentile)
        self.calibrated_scales = scales_from_thresholds(self.thresholds)
        self.scales = dict(self.calibrated_scales)
        for tensor, factor in self.scale_overrides.items():
            self.scales[tensor] *= factor

    def _recover(self) -> None:
        """Adaptive rounding and bias correction of the base graph with the recipe's guards (build_variant's)."""
        if not set(self.recipe.recovery) - {"equalization"}:
            return
        from trtlab.quantization.recovery.recover import calibration_images, recover_layers

        plan = self.plan(self.node_guards())
        self.base, _ = recover_layers(self.base, plan, self.plan_scales(plan), self.recipe,
                                      calibration_images(self.cache, self.calibration_indices),
                                      self.info.fixed_batch, self.recovery, self.progress)

    def with_recovery(self, recovery) -> "LayerDebugger":
        """This debugger's twin for the same recipe with `recovery` (method names): same images and settings, the
        FP32 logits computed here shared; made once per recovery."""
        import dataclasses

        key = tuple(recovery)
        if key in self._twins:
            return self._twins[key]
        twin = self._twins[key] = LayerDebugger(self.model_path, self.cache, self.calibration_indices, self.evaluation_indices,
                             dataclasses.replace(self.recipe, recovery=tuple(recovery)),
                             workspace=self.workspace, progress=self.progress, **self._made_with)
        twin.reference_logits = self.reference_logits
        twin.recipe_reason = self.recipe_reason
        return twin

    # -- guards and variants -------------------------------------------------------------------------------------
    def _resolve_overrides(self, overrides: dict, calibrated: set[str]) -> dict[str, float]:
        """{tensor or layer name: factor} → {activation tensor: factor}, checked."""
        resolved = {}
        by_layer = {n.name: n.input[0] for n in self.fp32.graph.node if n.name in set(self.all_layers)}
        for name, factor in overrides.items():
            tensor = by_layer.get(name, name)
            if tensor not in calibrated:
                raise KeyError(f"scale override {name!r}: no calibrated activation tensor or layer of that name; "
                               f"layers are e.g. {self.all_layers[:4]}, tensors e.g. {sorted(calibrated)[:4]}")
            factor = float(factor)
            if not (math.isfinite(factor) and factor > 0):
                raise ValueError(f"scale override {name!r}: factor must be finite and > 0, got {factor}")
            resolved[tensor] = resolved.get(tensor, 1.0) * factor
        return resolved

    def layer_names(self, layers) -> list[str]:
        """Layer names from names, node Guards or guard texts ('node:<name>[=fp16]', parsed here), checked."""
        from trtlab.graph.guards import Guard, parse_guard

        guards = [parse_guard(g) if isinstance(g, str) and g.startswith("node:") else g for g in layers]
        names = [g.target if isinstance(g, Guard) else g for g in guards]
        unknown = [n for n in names if n not in set(self.all_layers)]
        if unknown:
            raise KeyError(f"not weighted layers of this model: {unknown[:4]}; layers are e.g. {self.all_layers[:4]}")
        return names

    def block(self, node: str) -> str:
        """The readable block name of a node (`_blocks.3._project_conv`), or the node name when there is none."""
        return self.blocks.get(node, node)

    def layer_input(self, layer: str) -> str:
        """The activation tensor a layer quantizes (its data input)."""
        if layer not in self.node_index or layer not in set(self.all_layers):
            raise KeyError(f"{layer!r} is not a weighted layer; layers are e.g. {self.all_layers[:6]}")
        return self.fp32.graph.node[self.node_index[layer]].input[0]

    def guard_strings(self, extra_layers=(), precision: str | None = None) -> list[Guard]:
        """The recipe's guards followed by a node Guard (`node:<name>=fp16`, or '=fp32'; default: the recipe's float
        path, guard_precision) for each extra layer: Guard values, which a Recipe takes; their str() is what notebook
        03, `python -m trtlab calibrate --guards` and `build --guard` accept."""
        return list(self.recipe.guards) + [node_guard(name, precision or self.guard_precision)
                                           for name in extra_layers]

    def node_guards(self, extra_layers=(), precision: str | None = None) -> list[Guard]:
        """Recipe guards resolved to node names (with their precision), plus the extra layers."""
        return ([node_guard(g.name, g.precision) for g in self.base_guards]
                + [node_guard(n, precision or self.guard_precision) for n in extra_layers])

    def mac_share(self, extra_layers=(), precision: str | None = None) -> dict:
        """{'INT8', 'FP16', 'FP32': share of the weighted layers' MACs} of the variant with `extra_layers` guarded,
        as TensorRT would compute it (graph.fusion's fusion-aware prediction, the numbers notebook 02 shows)."""
        from trtlab.graph.fusion import precision_report

        model, _ = self.quantized_model(extra_layers, precision=precision)
        return dict(precision_report(model, name=self.recipe.name).mac_share)

    @property
    def guard_precision(self) -> str:
        """The precision a guarded layer runs in unless asked otherwise: the recipe's float path (FP16 on the
        default FP16 path), as a guard without '=…' means in a Recipe."""
        return "fp16" if self.recipe.high_precision == "fp16" else "fp32"

    def quantized_model(self, extra_layers=(), start: int | None = None, precision: str | None = None):
        """(ModelProto, cut inputs): the INT8 variant with `extra_layers` guarded, built in memory by the quantizer;
        with `start`, only the graph from node `start` on (cut tensors as inputs) when its Q/DQ plan provably
        equals the full graph's there, else the full graph (cut inputs = [the graph input])."""
        from trtlab.quantization.insertion import quantize_graph

        guards = self.node_guards(extra_layers, precision)
        full_plan = self.plan(guards)
        base = self.guarded_base(extra_layers)
        if start:
            suffix, cut = suffix_model(base, start)
            if suffix is not None:
                names = {n.name for n in suffix.graph.node}
                plan = self.plan([g for g in guards if g.target in names], suffix)
                if plan_signature(plan, names) == plan_signature(full_plan, names):
                    return quantize_graph(suffix, plan, self.plan_scales(plan), self.recipe.high_precision,
                                          check=False).model, cut
        return quantize_graph(base, full_plan, self.plan_scales(full_plan), self.recipe.high_precision,
                              check=False).model, [self.input_name]

    def guarded_base(self, extra_layers=()):
        """The float graph variants are made from, with `extra_layers` given back their weights and bias from
        before rounding and bias correction: a layer kept out of INT8 has no rounding to choose and no quantization
        error of its own to correct."""
        if self.base is self.unrecovered or not extra_layers:
            return self.base
        import onnx

        out = onnx.ModelProto()
        out.CopyFrom(self.base)
        before = {i.name: i for i in self.unrecovered.graph.initializer}
        inits = {i.name: i for i in out.graph.initializer}
        for node in out.graph.node:
            if node.name not in set(extra_layers):
                continue
            original = next(n for n in self.unrecovered.graph.node if n.name == node.name)
            del node.input[:]
            node.input.extend(original.input)
            for name in original.input[1:]:
                if name in before and name in inits:
                    inits[name].CopyFrom(before[name])
                elif name in before:
                    out.graph.initializer.append(before[name])
        return out

    def plan(self, guards, model=None):
        """The Q/DQ plan of `model` (default: the FP32 graph) with node `guards`, by the recipe's placement rules
        and float path (what build_variant plans)."""
        from trtlab.quantization.placement import plan_quantization

        return plan_quantization(self.base if model is None else model, guards, self.recipe.placement,
                                 int8_float_path=self.recipe.high_precision)

    def plan_scales(self, plan) -> dict[str, float]:
        """The scales of `plan`'s activations: calibrated (one per Concat group, as build_variant makes them), then
        the overrides."""
        from trtlab.quantization.thresholds import scales_from_thresholds
        from trtlab.quantization.variants import joint_thresholds

        scales = {t: self.scales[t] for t in plan.activations if t in self.scales}
        if plan.shared_scales:
            joint = joint_thresholds(self.stats, plan, self.recipe.algorithm, self.recipe.percentile,
                                     dict(self.thresholds))
            scales.update({t: s * self.scale_overrides.get(t, 1.0) for t, s in
                           scales_from_thresholds({t: joint[t] for t in joint if t in plan.consumers}).items()})
        return scales

    # -- data ----------------------------------------------------------------------------------------------------
    def batches(self, indices, batch_size: int | None = None):
        """(dataset indices, float32 N×3×H×W images) of `indices`, from the one batch source."""
        from trtlab.data.batches import iter_batches

        for batch in iter_batches(self.cache, indices, batch_size or self.batch_size):
            yield batch.indices, batch.images

    def progress_bar(self, total, desc, unit):
        from trtlab.core.progress import progress_bar

        return progress_bar(total=total, desc=desc, unit=unit, enabled=self.progress)

    # -- the analyses ----------------------------------------------------------------------------------------------
    def tensor_errors(self, extra_layers=(), indices=None, precision: str | None = None, batch_size: int | None = None,
                      jump_db: float = JUMP_MIN_DB) -> TensorErrors:
        """Every original tensor against FP32, in graph order, and where the error jumps (debug.tensor_errors)."""
        return _tensor_errors.compare_tensors(self, extra_layers, indices, precision, batch_size, jump_db)

    def sensitivity(self, layers=None, resume: bool = True) -> Sensitivity:
        """Logits error vs FP32 with only each layer INT8 and with all but each layer INT8, ranked
        (debug.sensitivity)."""
        return _sensitivity.layer_sensitivity(self, layers, resume)

    def sensitivity_state_path(self, layers=None) -> Path:
        """Where sensitivity() saves its progress for these layers, images and batch size."""
        return _sensitivity.state_path(self, layers)

    def evaluate_guards(self, extra_layers=(), precision: str | None = None, indices=None) -> dict:
        """Top-1 agreement / logit cosine with FP32 on the search images (or `indices`), INT8 variant built in
        memory."""
        return _guard_search.evaluate_guards(self, extra_layers, precision, indices)

    def search_guards(self, target=None, sensitivity: Sensitivity | None = None,
                      max_guards: int | None = None, precision: str | None = None, prune: bool = True,
                      resume: bool = True, recovery=_guard_search.DEFAULT_RECOVERY) -> GuardSearch:
        """Recovery first, then the fewest most-sensitive layers to guard for `target` (None: mean logit cosine ≥
        0.99 with FP32; a number: top-1 agreement; 'top1=0.995,sqnr=20': both; debug.targets) on the search images
        (debug.guard_search; `recovery=()` searches guards alone)."""
        return _guard_search.search_guards(self, target, sensitivity, max_guards, precision, prune, resume, recovery)

    def verify_recipe(self, recipe, backend: str = "ort", progress: bool | None = None, target=None,
                      indices=None):
        """Build `recipe` with build_variant, evaluate it and FP32 with evaluate_variant / evaluate on the
        verification images (or `indices`), compare."""
        return _guard_search.verify_recipe(self, recipe, backend, progress, target, indices)


def layer_debugger(model_path, dataset, split=None, recipe=None, preprocess="tf-lite", images: int = 8,
                   batch_size: int = 8, scale_overrides: dict | None = None, workspace=None,
                   progress: bool = True, search_images: int | None = None) -> LayerDebugger:
    """A LayerDebugger for `model_path` on `dataset`: decode cache and split as `trtlab.compare` makes them."""
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.preprocess import get_preprocess
    from trtlab.quantization.recipe import Recipe
    from trtlab.data.split import saved_split
    from trtlab.quantization.variants import default_calibration_pool

    from trtlab.graph.classifier_view import preprocess_for
    from trtlab.workflows.checks import check_guards, check_model

    asked = Recipe.of(recipe) if recipe is not None else None
    # A wrong model, recipe, guard or preprocessing: refused before any image is decoded.
    spec = preprocess_for(check_model(model_path), get_preprocess(preprocess))
    if asked is not None:
        check_guards(model_path, asked.guards, workspace, "recipe guards")
    cache = build_decode_cache(dataset, spec, workspace, progress=progress)
    split = split or saved_split(dataset, (asked.calibration_images if asked else None)
                                 or default_calibration_pool(dataset), workspace=workspace)
    reason = "the recipe asked for"
    if asked is None:  # what notebook 03's verdict recommends for this model and data (issue 35)
        asked, reason = recommended_recipe(model_path, dataset, cache, split, workspace)
        log.info(f"layer debugging {asked.name}: {reason} (recipe=… debugs another"
                 + ("; run notebook 03 or python -m trtlab calibrate first to debug its recommendation)"
                    if reason.startswith("the default") else ")"))
    debugger = LayerDebugger(model_path, cache, split.calibration, split.evaluation, asked, images=images,
                             batch_size=batch_size, scale_overrides=scale_overrides, workspace=workspace,
                             progress=progress, search_images=search_images)
    debugger.recipe_reason = reason
    return debugger


def recommended_recipe(model_path, dataset, cache, split, workspace=None):
    """(Recipe, why): the INT8 recipe the last verdict stated on this model's results for these evaluation images
    recommends — notebook 03's `Ship …`, or the variant closer to FP32 where it could not decide — else the default
    recipe, saying that no verdict is stored."""
    from trtlab.evaluation.identity import Experiment
    from trtlab.evaluation.results import ResultsStore
    from trtlab.graph.classifier_view import classifier_view
    from trtlab.quantization.recipe import Recipe

    view = classifier_view(model_path, dataset, workspace=workspace, announce=False)
    store = ResultsStore(ResultsStore.folder_for(Experiment.for_evaluation(view.info, cache, split.evaluation, split),
                                                 workspace))
    record = store.last_verdict() if store.folder.is_dir() else None
    stored = (store.record(record["closer"]).get("recipe") or {}) if record else {}
    if stored.get("precision") != "int8":
        return Recipe(), "the default recipe: no A/B verdict is stored for this model and these evaluation images"
    label = record["closer"]
    why = ("notebook 03's recommendation" if record.get("ship") == label else
           f"the closer to {record['reference']} of the two notebook 03's verdict could not decide between")
    return Recipe.from_dict(stored), why
