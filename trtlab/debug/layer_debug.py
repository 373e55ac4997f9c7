"""Layer-wise debugging of an INT8 variant and automatic guard search.

Three tools, from "INT8 lost 1% agreement" to "guard these layers", each on ONNX Runtime with graph optimizations
disabled (the literal Q/DQ reference semantics that TensorRT implements; see ort_check.ort_qdq_self_check):

1. **Per-tensor comparison** (`LayerDebugger.tensor_errors`): the INT8 variant and FP32 run on the same images with
   every original tensor exposed as an output (Polygraphy calls this "mark all"). The quantizer keeps all original
   tensor names (it only adds `<tensor>__q/__dq`, `<weight>__int8/__dq` and fp16 casts), so the node outputs of the
   sanitized FP32 graph name the tensors to compare. Each batch is reduced at once to running sums per tensor
   (Σref², Σerr², Σref·test, max|err|, worst per-image cosine): memory holds one batch of tensors per model,
   whatever the number of images.
2. **Per-layer sensitivity** (`LayerDebugger.sensitivity`): a layer is a weighted node (Conv/Gemm/MatMul) with its
   quantized input and weight; guarding it is the guard `node:<name>`. For every layer, the logits are compared
   with FP32 when *only that layer* is INT8 (every other layer guarded) and when *all but that layer* are INT8.
   Nodes before the layer compute exactly what a reference run computes (FP32 resp. the fully quantized variant),
   so each run starts at the layer from the reference's tensors (a graph suffix with the cut tensors as inputs);
   the suffix's Q/DQ plan is checked against the full graph's plan, and the full graph runs whenever they differ.
   Under additive quantization noise both experiments estimate the layer's share of the output noise:
   only-one: Σerr²(only L) / Σerr²(all); all-but-one: 1 − Σerr²(all but L) / Σerr²(all). Layers are ranked by the
   mean of the two (`noise_share`; the shares need not sum to 1: quantization noise compounds through the
   network). Progress is saved after every run; an interrupted call resumes where it stopped.
3. **Guard search** (`LayerDebugger.search_guards`): guard the most sensitive layers one at a time (greedy on the
   ranking), evaluating top-1 agreement with FP32 on the evaluation images after each step, and stop as soon as
   the target is met. The result is a guard list (`node:<name>` strings) that a `Recipe`, notebook 03, the
   calibrate CLI and both TensorRT paths accept; `GuardSearch.verify()` builds that recipe with `build_variant`
   and evaluates it with `evaluate_variant` (trtlab's own pipeline and results store).

`scale_overrides={tensor or layer name: factor}` multiplies calibrated activation scales: a debugging aid to break
one layer on purpose and watch the tools find it. Overrides never reach a Recipe or a built variant.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


from trtlab.core.workspace import atomic_path, atomic_write_json, hash_json, read_json_checked, workspace_dir

log = logging.getLogger(__name__)

SQNR_CAP_DB = 100.0  # plotted for tensors with no error at all (SQNR = inf in the tables)
JUMP_MIN_DB = 6.0  # a jump loses at least this much SQNR at once (6 dB ≈ noise power ×4)
# One INT8 step of a bell-shaped activation (7 bits + sign, clipped at a few standard deviations) leaves roughly
# 30–45 dB; an exact input is judged against this rather than against infinity.
EXACT_INPUT_REFERENCE_DB = 40.0


# ----------------------------------------------------------------------------------------------------------------
# Error sums: one batch at a time, O(1) memory per tensor
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class ErrorSums:
    """Running sums comparing a tensor (or the logits) of a variant with the reference, over images."""

    images: int = 0
    ref2: float = 0.0  # Σ ref²
    err2: float = 0.0  # Σ (test − ref)²
    dot: float = 0.0  # Σ ref·test
    test2: float = 0.0  # Σ test²
    max_abs_error: float = 0.0
    ref_absmax: float = 0.0
    cosine_sum: float = 0.0  # Σ per-image cosine
    cosine_worst: float = 1.0
    top1_agree: int = 0  # logits only

    def update(self, ref: np.ndarray, test: np.ndarray, logits: bool = False) -> None:
        if ref.shape != test.shape:
            raise ValueError(f"reference shape {ref.shape} differs from variant shape {test.shape}")
        n = ref.shape[0] if ref.ndim else 1
        ref2d = ref.reshape(n, -1)
        test2d = test.reshape(n, -1)
        for r, t in zip(ref2d, test2d):  # one image at a time in float64: bounded temporaries, exact sums
            r = r.astype(np.float64)
            t = t.astype(np.float64)
            diff = t - r
            rr, tt, rt, ee = float(r @ r), float(t @ t), float(r @ t), float(diff @ diff)
            self.ref2 += rr
            self.test2 += tt
            self.dot += rt
            self.err2 += ee
            if diff.size:
                self.max_abs_error = max(self.max_abs_error, float(np.abs(diff).max()))
                self.ref_absmax = max(self.ref_absmax, float(np.abs(r).max()))
            denom = math.sqrt(rr * tt)
            cosine = rt / denom if denom > 0 else (1.0 if rr == tt == 0 else 0.0)
            self.cosine_sum += cosine
            self.cosine_worst = min(self.cosine_worst, cosine)
        if logits:
            self.top1_agree += int((ref2d.argmax(axis=1) == test2d.argmax(axis=1)).sum())
        self.images += n

    @property
    def sqnr_db(self) -> float:
        """10·log10(Σref² / Σerr²); inf when the variant matches exactly."""
        if self.err2 == 0:
            return math.inf
        if self.ref2 == 0:
            return -math.inf
        return 10.0 * math.log10(self.ref2 / self.err2)

    @property
    def cosine(self) -> float:
        """Cosine similarity of the whole tensor (all images flattened together)."""
        denom = math.sqrt(self.ref2 * self.test2)
        return self.dot / denom if denom > 0 else (1.0 if self.ref2 == self.test2 == 0 else 0.0)

    def metrics(self, logits: bool = False) -> dict:
        out = {"sqnr_db": self.sqnr_db, "cosine": self.cosine,
               "cosine_mean": self.cosine_sum / self.images if self.images else math.nan,
               "cosine_worst": self.cosine_worst, "max_abs_error": self.max_abs_error}
        if logits:
            out["top1_agreement"] = self.top1_agree / self.images if self.images else math.nan
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ErrorSums":
        return cls(**data)


# ----------------------------------------------------------------------------------------------------------------
# ONNX helpers
# ----------------------------------------------------------------------------------------------------------------
def _session(model, threads: int | None = None):
    """ONNX Runtime CPU session with graph optimizations disabled (the literal semantics), from a ModelProto."""
    from trtlab.core.ort_session import ort_session

    return ort_session(model, optimization="disable", threads=threads)


from trtlab.graph.onnx_utils import with_outputs as _with_outputs  # noqa: E402


def compared_tensors(fp32_model, quantized_model=None) -> list[str]:
    """Original float tensors in graph order: node outputs of the FP32 graph (present in the quantized graph too)."""
    from onnx import TensorProto

    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(fp32_model.graph.value_info)
             + list(fp32_model.graph.output)}
    names = [o for node in fp32_model.graph.node for o in node.output if o]
    names = [n for n in names if types.get(n, TensorProto.FLOAT) == TensorProto.FLOAT]
    if quantized_model is not None:
        present = {o for node in quantized_model.graph.node for o in node.output}
        names = [n for n in names if n in present]
    return names


def _suffix_model(fp32, start: int):
    """The graph from node `start` on; tensors it reads from earlier nodes (or the graph input) become inputs.
    (None, []) when a graph output is produced before `start`."""
    from onnx import TensorProto, helper

    nodes = list(fp32.graph.node)
    initializers = {i.name: i for i in fp32.graph.initializer}
    produced_before = {i.name for i in fp32.graph.input} | {o for n in nodes[:start] for o in n.output}
    cut, used_inits = [], []
    for node in nodes[start:]:
        for name in node.input:
            if name in initializers:
                used_inits.append(name)
            elif name in produced_before and name not in cut:
                cut.append(name)
    produced_after = {o for n in nodes[start:] for o in n.output}
    if any(o.name not in produced_after for o in fp32.graph.output):
        return None, []
    infos = {vi.name: vi for vi in list(fp32.graph.value_info) + list(fp32.graph.input)}
    inputs = [infos[name] if name in infos else helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
              for name in cut]
    graph = helper.make_graph(nodes[start:], f"{fp32.graph.name}-from-{start}", inputs, list(fp32.graph.output),
                              [initializers[n] for n in dict.fromkeys(used_inits)])
    graph.value_info.extend(vi for vi in fp32.graph.value_info if vi.name in produced_after)
    model = helper.make_model(graph, opset_imports=list(fp32.opset_import))
    model.ir_version = fp32.ir_version
    return model, cut


def _is_float_only(model, fp32) -> bool:
    """True when a variant computes exactly what the FP32 graph computes: the quantizer added no node (no Q/DQ,
    no fp16 Cast)."""
    return len(model.graph.node) == len(fp32.graph.node)


def _guard(node_name: str, precision: str = "fp32") -> str:
    return f"node:{node_name}" + ("=fp16" if precision == "fp16" else "")


def _fake_quantize(values: np.ndarray, scale: float) -> np.ndarray:
    """DequantizeLinear(QuantizeLinear(x)) with int8, zero point 0: round half to even, saturate to [-128, 127]."""
    return (np.clip(np.rint(values / np.float32(scale)), -128, 127) * np.float32(scale)).astype(np.float32)


def _plan_signature(plan, nodes: set[str]) -> tuple:
    acts = sorted((t, n, i) for t, cs in plan.consumers.items() for n, i in cs if n in nodes)
    weights = sorted((w, n, a) for w, (n, a) in plan.weights.items() if n in nodes)
    guarded = sorted((g.name, g.precision) for g in plan.guarded if g.name in nodes)
    return acts, weights, guarded


# ----------------------------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class TensorErrors:
    """Per-tensor comparison of one INT8 variant with FP32, in graph order."""

    table: object  # pandas DataFrame, one row per tensor
    variant: str
    images: int
    peak_batch_bytes: int
    jump: dict | None = None  # the row where the error first jumps (see find_jump)
    output: str = ""  # the model output's tensor name (the logits row)
    suspect_scales: list = field(default_factory=list)  # quantized tensors whose own Q/DQ is unusually lossy

    def plot(self):
        return plot_tensor_errors(self)

    def summary(self) -> str:
        t = self.table
        worst = t.loc[t["sqnr_db"].idxmin()]
        out = t[t["tensor"] == self.output].iloc[0] if self.output in set(t["tensor"]) else t.iloc[-1]
        text = (f"{self.variant}: {len(t)} tensors compared on {self.images} images; output SQNR "
                f"{out['sqnr_db']:.1f} dB, cosine {out['cosine']:.4f}; lowest SQNR {worst['sqnr_db']:.1f} "
                f"dB at {worst['tensor']} ({worst['node']})")
        if self.jump:
            text += (f"; error first jumps at {self.jump['tensor']} (output of {self.jump['node']}, "
                     f"{self.jump['op_type']}): SQNR {self.jump['sqnr_db']:.1f} dB, "
                     f"{self.jump['drop_db']:.1f} dB below its inputs")
        else:
            text += "; no jump (the error grows gradually)"
        for suspect in self.suspect_scales:
            text += (f"; the Q/DQ of {suspect['tensor']} alone leaves {suspect['qdq_sqnr_db']:.1f} dB (median of the "
                     f"quantized tensors {suspect['median_db']:.1f} dB): check its scale (read by "
                     f"{', '.join(suspect['read_by'][:3])})")
        return text

    def save(self, folder) -> dict:
        folder = Path(folder)
        path = folder / "tensor_errors.csv"
        with atomic_path(path, suffix=".csv") as tmp:
            self.table.to_csv(tmp, index=False)
        meta = atomic_write_json(folder / "tensor_errors.json", {"variant": self.variant, "images": self.images,
                                                                  "peak_batch_bytes": self.peak_batch_bytes,
                                                                  "jump": self.jump, "output": self.output,
                                                                  "suspect_scales": self.suspect_scales})
        return {"csv": path, "json": meta}

    def worst(self, count: int = 10):
        """The `count` tensors with the lowest SQNR, plus the jump and suspect rows, in graph order."""
        t = self.table
        picked = set(t.nsmallest(count, "sqnr_db")["depth"])
        picked |= {self.jump["depth"]} if self.jump else set()
        picked |= {s["depth"] for s in self.suspect_scales}
        return t[t["depth"].isin(picked)]

    def show(self) -> None:
        """Summary, the plot and the worst tensors, in a notebook."""
        columns = ["depth", "tensor", "node", "op_type", "flag", "sqnr_db", "drop_db", "cosine", "cosine_worst",
                   "max_abs_error", "qdq_sqnr_db"]
        _display(self.summary(), self.plot(), self.worst()[columns].round(4))


@dataclass
class Sensitivity:
    """Per-layer sensitivity, most sensitive first."""

    table: object  # pandas DataFrame indexed by layer name
    baseline: dict  # logits metrics of the fully quantized variant and of the unquantized one
    images: int
    resumed_runs: int = 0  # runs (layer × mode) read back from an earlier, interrupted or identical call

    @property
    def ranking(self) -> list[str]:
        return list(self.table.index)

    def plot(self, top: int = 20):
        return plot_sensitivity(self, top)

    def save(self, folder) -> dict:
        folder = Path(folder)
        path = folder / "sensitivity.csv"
        with atomic_path(path, suffix=".csv") as tmp:
            self.table.to_csv(tmp)
        return {"csv": path}

    def summary(self) -> str:
        b = self.baseline["all"]
        top = self.table.iloc[0]
        return (f"{len(self.table)} layers on {self.images} images; all layers INT8: output SQNR "
                f"{b['sqnr_db']:.1f} dB, "
                f"top-1 agreement {b['top1_agreement']:.0%}. Most sensitive: {self.table.index[0]} ({top['op_type']}), "
                f"~{top['noise_share']:.0%} of the output noise (only it INT8: {top['only_sqnr_db']:.1f} dB; guarding "
                f"it alone: {top['all_but_gain_db']:+.1f} dB)")

    def show(self, top: int = 15) -> None:
        columns = ["rank", "op_type", "noise_share", "noise_share_only", "noise_share_all_but", "only_sqnr_db",
                   "all_but_gain_db", "only_top1_agreement", "all_but_top1_agreement"]
        _display(self.summary(), self.plot(top), self.table.head(top)[columns].round(4))


@dataclass
class GuardSearch:
    """Outcome of the greedy guard search."""

    guards: list[str]  # recipe guards + the layers the search guarded, as the Recipe takes them
    added: list[str]  # node names the search guarded (after pruning), most sensitive first
    steps: object  # pandas DataFrame, one row per evaluated guard set ('add' phase, then 'prune')
    target: float
    reached: bool
    layers: int  # weighted layers in the model
    int8_layers: int  # of those, still INT8 with `guards`
    recipe_template: dict
    evaluation_images: int
    metrics: dict = field(default_factory=dict)  # evaluation of the final guard set
    pruned: list[str] = field(default_factory=list)  # guarded on the way, then found unnecessary
    debugger: "LayerDebugger" = field(default=None, repr=False)
    verified: dict | None = None

    @property
    def int8_fraction(self) -> float:
        return self.int8_layers / self.layers if self.layers else math.nan

    def recipe(self):
        """The Recipe with the found guards (same algorithm and calibration as the debugged one)."""
        from trtlab.quantization.variants import Recipe

        data = dict(self.recipe_template)
        data["guards"] = list(self.guards)
        return Recipe.from_dict(data)

    def summary(self) -> str:
        state = "reached" if self.reached else "NOT reached"
        text = (f"target top-1 agreement ≥ {self.target:.2%} {state} with {len(self.added)} guarded layer(s) "
                f"{self.added}: agreement {self.metrics['top1_agreement']:.2%} on {self.evaluation_images} evaluation "
                f"images, {self.int8_layers}/{self.layers} layers ({self.int8_fraction:.0%}) stay INT8; "
                f"guards={self.guards}")
        if self.pruned:
            text += f" ({len(self.pruned)} guard(s) added on the way proved unnecessary: {self.pruned})"
        return text

    def verify(self, backend: str = "ort", progress: bool | None = None) -> dict:
        """Build the found recipe with build_variant, evaluate it and FP32 with trtlab's evaluation, and compare."""
        if self.debugger is None:
            raise RuntimeError("this search result was loaded without its debugger; rebuild it with "
                               "LayerDebugger(...).search_guards(...) to verify")
        self.verified = self.debugger.verify_recipe(self.recipe(), backend=backend, progress=progress,
                                                    target=self.target)
        return self.verified

    def save(self, folder) -> Path:
        return atomic_write_json(Path(folder) / "guard_search.json", {
            "guards": self.guards, "added": self.added, "target": self.target, "reached": self.reached,
            "layers": self.layers, "int8_layers": self.int8_layers, "int8_fraction": self.int8_fraction,
            "metrics": self.metrics, "pruned": self.pruned,
            "recipe": self.recipe().to_dict(), "evaluation_images": self.evaluation_images,
            "steps": json.loads(self.steps.to_json(orient="records")), "verified": self.verified})

    def show(self) -> None:
        _display(self.summary(), table=self.steps.round(4))


# ----------------------------------------------------------------------------------------------------------------
# The debugger
# ----------------------------------------------------------------------------------------------------------------
class LayerDebugger:
    """Everything the three tools share: the sanitized FP32 graph, calibrated scales, the images.

    model_path: the ONNX classifier (it is sanitized exactly as build_variant does, and the same cached calibration
    statistics are used, so an in-memory variant here equals what build_variant writes for the same recipe).
    cache: the decode cache; calibration_indices / evaluation_indices: e.g. a Split's two halves.
    recipe: the INT8 recipe to debug (its guards stay on throughout).
    images: evaluation images used for the per-tensor comparison and the sensitivity runs (the first `images`).
    scale_overrides: {activation tensor or layer name: factor}; a debugging aid that multiplies calibrated scales.
    """

    def __init__(self, model_path, cache, calibration_indices, evaluation_indices, recipe=None, images: int = 8,
                 batch_size: int = 8, scale_overrides: dict | None = None, workspace=None, progress: bool = True):
        import onnx

        from trtlab.graph.guards import resolve_guards, weighted_nodes_in_order
        from trtlab.graph.classifier import inspect_classifier
        from trtlab.quantization.qdq import ensure_node_names
        from trtlab.graph.sanitize import sanitize_model
        from trtlab.quantization.variants import Recipe, calibration_statistics, select_calibration_indices

        recipe = recipe or Recipe(algorithm="entropy")
        if recipe.precision != "int8":
            raise ValueError(f"layer debugging compares an INT8 recipe with FP32; got precision={recipe.precision!r}")
        if images < 1 or batch_size < 1:
            raise ValueError("images and batch_size must be ≥ 1")
        self.model_path = Path(model_path)
        self.cache = cache
        self.recipe = recipe
        self.workspace = workspace
        self.progress = progress
        self.batch_size = int(batch_size)
        valid = cache.valid_indices
        calibration = np.asarray(calibration_indices, np.int64)
        # The same selection build_variant makes, so the scales are the ones a built variant gets.
        self.recipe, self.calibration_indices = select_calibration_indices(cache, calibration, recipe)
        self.evaluation_indices = np.asarray(evaluation_indices, np.int64)
        self.evaluation_indices = self.evaluation_indices[np.isin(self.evaluation_indices, valid)]
        if len(self.calibration_indices) == 0:
            raise ValueError("no decodable calibration images; check the split and the decode cache failures")
        if len(self.evaluation_indices) == 0:
            raise ValueError("no decodable evaluation images; check the split and the decode cache failures")
        self.debug_indices = self.evaluation_indices[:images]
        self.info = inspect_classifier(self.model_path)
        if self.info.image_size != (cache.preprocess.crop, cache.preprocess.crop):
            raise ValueError(f"{self.model_path.name} takes {self.info.image_size[0]}×{self.info.image_size[1]} "
                             f"images but the decode cache holds {cache.preprocess.crop}×{cache.preprocess.crop} "
                             f"crops; use a preprocessing with crop={self.info.image_size[0]}")
        self.sanitized_path = sanitize_model(self.model_path, workspace)
        self.fp32 = onnx.load(str(self.sanitized_path))
        ensure_node_names(self.fp32)
        self.input_name = self.fp32.graph.input[0].name
        self.output_name = self.fp32.graph.output[0].name
        self.node_index = {n.name: i for i, n in enumerate(self.fp32.graph.node)}
        self.base_guards = [g for g in resolve_guards(self.fp32, recipe.guards)]
        base_names = {g.name for g in self.base_guards}
        self.all_layers = [n.name for n in weighted_nodes_in_order(self.fp32)]
        self.layers = [name for name in self.all_layers if name not in base_names]  # candidates for guarding
        if not self.layers:
            raise ValueError(f"recipe guards {list(recipe.guards)} already keep every weighted layer out of INT8; "
                             f"nothing to debug")
        stats = calibration_statistics(self.sanitized_path, cache, self.calibration_indices,
                                       recipe.calibration_batch, workspace, progress)
        self.scale_overrides = self._resolve_overrides(scale_overrides or {}, set(stats.tensors))
        from trtlab.quantization.calibrate import compute_thresholds, scales_from_thresholds

        self.calibrated_scales = scales_from_thresholds(compute_thresholds(stats, recipe.algorithm,
                                                                           recipe.percentile))
        self.scales = dict(self.calibrated_scales)
        for tensor, factor in self.scale_overrides.items():
            self.scales[tensor] *= factor
        self.model_sha256 = self.info.sha256
        ids = cache.dataset.image_ids()
        self.key = hash_json({"model": self.model_sha256, "recipe": recipe.to_dict(),
                              "calibration": [ids[i] for i in self.calibration_indices],
                              "pre": cache.preprocess.to_dict(), "overrides": sorted(self.scale_overrides.items())})
        self.folder = (workspace_dir(workspace) / "debug" / f"{self.model_path.stem}-{self.model_sha256[:8]}"
                       / f"{recipe.name}-{self.key}")
        self._fp32_eval = None

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

    def _layer_names(self, layers) -> list[str]:
        """Layer names from names or guard strings ('node:<name>[=fp16]'), checked."""
        names = [g[5:].partition("=")[0] if g.startswith("node:") else g for g in layers]
        unknown = [n for n in names if n not in set(self.all_layers)]
        if unknown:
            raise KeyError(f"not weighted layers of this model: {unknown[:4]}; layers are e.g. {self.all_layers[:4]}")
        return names

    def layer_input(self, layer: str) -> str:
        """The activation tensor a layer quantizes (its data input)."""
        if layer not in self.node_index or layer not in set(self.all_layers):
            raise KeyError(f"{layer!r} is not a weighted layer; layers are e.g. {self.all_layers[:6]}")
        return self.fp32.graph.node[self.node_index[layer]].input[0]

    def guard_strings(self, extra_layers=(), precision: str = "fp32") -> list[str]:
        """The recipe's guards followed by `node:<name>` (with '=fp16' for precision='fp16') for each extra layer:
        the list a Recipe, notebook 03, `python -m trtlab calibrate --guards` and `build --guard` accept."""
        return list(self.recipe.guards) + [_guard(name, precision) for name in extra_layers]

    def _node_guards(self, extra_layers=(), precision: str = "fp32") -> list[str]:
        """Recipe guards resolved to node names (with their precision), plus the extra layers."""
        return [_guard(g.name, g.precision) for g in self.base_guards] + [_guard(n, precision) for n in extra_layers]

    def quantized_model(self, extra_layers=(), start: int | None = None, precision: str = "fp32"):
        """(ModelProto, cut inputs): the INT8 variant with `extra_layers` guarded, built in memory by the quantizer;
        with `start`, only the graph from node `start` on (cut tensors as inputs) when its Q/DQ plan provably
        equals the full graph's there, else the full graph (cut inputs = [the graph input])."""
        from trtlab.quantization.qdq import insert_qdq, plan_quantization

        guards = self._node_guards(extra_layers, precision)
        full_plan = plan_quantization(self.fp32, guards)
        if start:
            suffix, cut = _suffix_model(self.fp32, start)
            if suffix is not None:
                names = {n.name for n in suffix.graph.node}
                plan = plan_quantization(suffix, [g for g in guards if g[5:].split("=")[0] in names])
                if _plan_signature(plan, names) == _plan_signature(full_plan, names):
                    return insert_qdq(suffix, plan, {t: self.scales[t] for t in plan.activations}), cut
        return insert_qdq(self.fp32, full_plan, {t: self.scales[t] for t in full_plan.activations}), [self.input_name]

    # -- data ----------------------------------------------------------------------------------------------------
    def _batches(self, indices, batch_size: int | None = None):
        from trtlab.data.batches import iter_batches

        for batch in iter_batches(self.cache, indices, batch_size or self.batch_size):
            yield batch.indices, batch.images

    def _bar(self, total, desc, unit):
        from trtlab.core.progress import progress_bar

        return progress_bar(total=total, desc=desc, unit=unit, enabled=self.progress)

    # -- 1. per-tensor comparison --------------------------------------------------------------------------------
    def tensor_errors(self, extra_layers=(), indices=None, precision: str = "fp32", batch_size: int | None = None,
                      jump_db: float = JUMP_MIN_DB) -> TensorErrors:
        """Compare every original tensor of the INT8 variant (with `extra_layers` guarded in `precision`) with
        FP32, in graph order, on the debug images (or `indices`). `qdq_sqnr_db` is the SQNR of a quantized
        tensor's own Q/DQ (its INT8 rounding and clipping on the variant's values): low means a bad scale."""
        import pandas as pd

        from trtlab.quantization.qdq import plan_quantization

        extra_layers = self._layer_names(extra_layers)
        quantized, _ = self.quantized_model(extra_layers, precision=precision)
        plan = plan_quantization(self.fp32, self._node_guards(extra_layers, precision))
        quantized_tensors = set(plan.activations)
        names = compared_tensors(self.fp32, quantized)
        fp32_session = _session(_with_outputs(self.fp32, names))
        int8_session = _session(_with_outputs(quantized, names))
        del quantized
        rows_in_order = [self.input_name] + names
        sums = {name: ErrorSums() for name in rows_in_order}
        qdq = {name: ErrorSums() for name in rows_in_order if name in quantized_tensors}
        indices = self.debug_indices if indices is None else np.asarray(indices, np.int64)
        peak = 0
        bar = self._bar(len(indices), "compare tensors", "img")
        for _, batch in self._batches(indices, batch_size):
            reference = fp32_session.run(names, {self.input_name: batch})
            test = int8_session.run(names, {self.input_name: batch})
            peak = max(peak, sum(a.nbytes for a in reference) + sum(a.nbytes for a in test) + batch.nbytes)
            for name, ref, out in zip([self.input_name] + names, [batch] + reference, [batch] + test):
                sums[name].update(ref, out, logits=(name == self.output_name))
                if name in qdq:
                    qdq[name].update(out, _fake_quantize(out, self.scales[name]))
            del reference, test
            bar.update(len(batch))
        bar.close()
        producer = {o: n for n in self.fp32.graph.node for o in n.output}
        layers = set(self.all_layers)
        rows = []
        for depth, name in enumerate(rows_in_order):
            node = producer.get(name)
            row = {"depth": depth, "tensor": name, "node": node.name if node is not None else "(graph input)",
                   "op_type": node.op_type if node is not None else "input",
                   "layer_output": node is not None and node.name in layers}
            row.update(sums[name].metrics())
            row["ref_absmax"] = sums[name].ref_absmax
            row["qdq_sqnr_db"] = qdq[name].sqnr_db if name in qdq else math.nan
            row["scale"] = self.scales[name] if name in qdq else math.nan
            rows.append(row)
        table = pd.DataFrame(rows)
        table["drop_db"] = _local_drops(self.fp32, table)
        variant = self.recipe.name + ("" if not extra_layers else f"+{len(extra_layers)}guarded")
        if self.scale_overrides:
            variant += f" (scale overrides on {len(self.scale_overrides)} tensor(s))"
        jump = find_jump(table, jump_db)
        suspects = find_suspect_scales(table)
        table["flag"] = ""
        for suspect in suspects:
            suspect["read_by"] = [node for node, _ in plan.consumers.get(suspect["tensor"], [])]
            table.loc[table["depth"] == suspect["depth"], "flag"] = "scale?"
        if jump:
            table.loc[table["depth"] == jump["depth"], "flag"] = "JUMP"
        return TensorErrors(table, variant, len(indices), int(peak), jump, output=self.output_name,
                            suspect_scales=suspects)

    # -- 2. per-layer sensitivity --------------------------------------------------------------------------------
    def sensitivity(self, layers=None, resume: bool = True) -> Sensitivity:
        """Logits error vs FP32 with only each layer INT8 and with all but each layer INT8, ranked."""
        import pandas as pd

        layers = list(self.layers if layers is None else layers)
        unknown = [name for name in layers if name not in set(self.layers)]
        if unknown:
            raise KeyError(f"not layers of this model (or already guarded by the recipe): {unknown[:4]}; "
                           f"layers are e.g. {self.layers[:4]}")
        state_path = self.sensitivity_state_path(layers)
        state = {"runs": {}, "baseline": {}}
        if resume:  # a damaged state file is set aside (named) and the runs are redone
            state = read_json_checked(state_path) or state
        resumed = sum(1 for v in state["runs"].values() if v["batches"] >= self._batch_count())
        names = compared_tensors(self.fp32)
        # 'only' runs start from the unquantized variant's tensors, 'all_but' runs from the fully quantized one's.
        references = {"only": self.quantized_model(self.layers)[0], "all_but": self.quantized_model(())[0]}
        none_is_fp32 = _is_float_only(references["only"], self.fp32)
        bar = self._bar(2 * len(layers) * self._batch_count(), "layer sensitivity", "run")
        bar.update(sum(min(v["batches"], self._batch_count()) for v in state["runs"].values()))
        for b, (_, batch) in enumerate(self._batches(self.debug_indices)):
            fp32_logits = None
            for mode in ("only", "all_but"):
                todo = [name for name in layers if state["runs"].get(f"{mode}|{name}", {}).get("batches", 0) <= b]
                if not todo and state["baseline"].get(mode, {}).get("batches", 0) > b:
                    continue
                # One batch of every tensor of the reference variant: the most this loop ever holds.
                outputs = dict(zip(names, _session(_with_outputs(references[mode], names)).run(
                    names, {self.input_name: batch})))
                outputs[self.input_name] = batch
                if fp32_logits is None:
                    fp32_logits = (outputs[self.output_name] if mode == "only" and none_is_fp32 else
                                   _session(self.fp32).run([self.output_name], {self.input_name: batch})[0])
                if state["baseline"].get(mode, {}).get("batches", 0) <= b:
                    sums = ErrorSums.from_dict(state["baseline"].get(mode, {}).get("sums", ErrorSums().to_dict()))
                    sums.update(fp32_logits, outputs[self.output_name], logits=True)
                    state["baseline"][mode] = {"batches": b + 1, "sums": sums.to_dict()}
                for name in todo:
                    extra = [other for other in self.layers if other != name] if mode == "only" else [name]
                    model, cut = self.quantized_model(extra, start=self.node_index[name])
                    session = _session(model)
                    del model
                    logits = session.run([self.output_name], {t: outputs[t] for t in cut})[0]
                    del session
                    entry = state["runs"].get(f"{mode}|{name}", {"batches": 0, "sums": ErrorSums().to_dict()})
                    sums = ErrorSums.from_dict(entry["sums"])
                    sums.update(fp32_logits, logits, logits=True)
                    state["runs"][f"{mode}|{name}"] = {"batches": b + 1, "sums": sums.to_dict()}
                    atomic_write_json(state_path, state)  # resume point after every run
                    bar.update(1)
                del outputs
        bar.close()
        atomic_write_json(state_path, state)
        all_sums = ErrorSums.from_dict(state["baseline"]["all_but"]["sums"])
        none_sums = ErrorSums.from_dict(state["baseline"]["only"]["sums"])
        rows = []
        for name in layers:
            only = ErrorSums.from_dict(state["runs"][f"only|{name}"]["sums"])
            all_but = ErrorSums.from_dict(state["runs"][f"all_but|{name}"]["sums"])
            node = self.fp32.graph.node[self.node_index[name]]
            share_only = only.err2 / all_sums.err2 if all_sums.err2 > 0 else 0.0
            share_all_but = max(0.0, 1.0 - all_but.err2 / all_sums.err2) if all_sums.err2 > 0 else 0.0
            rows.append({"layer": name, "op_type": node.op_type, "depth": self.all_layers.index(name),
                         "input": node.input[0],
                         "only_sqnr_db": only.sqnr_db, "only_top1_agreement": only.top1_agree / only.images,
                         "only_cosine": only.cosine,
                         "all_but_sqnr_db": all_but.sqnr_db,
                         "all_but_top1_agreement": all_but.top1_agree / all_but.images,
                         "all_but_gain_db": all_but.sqnr_db - all_sums.sqnr_db,
                         "noise_share_only": share_only, "noise_share_all_but": share_all_but,
                         "noise_share": 0.5 * (share_only + share_all_but)})
        table = pd.DataFrame(rows).set_index("layer")
        table = table.sort_values(["noise_share", "only_sqnr_db"], ascending=[False, True], kind="stable")
        table.insert(0, "rank", np.arange(1, len(table) + 1))
        baseline = {"all": all_sums.metrics(logits=True), "none": none_sums.metrics(logits=True)}
        return Sensitivity(table, baseline, len(self.debug_indices), resumed)

    def sensitivity_state_path(self, layers=None) -> Path:
        """Where sensitivity() saves its progress for these layers, images and batch size."""
        ids = self.cache.dataset.image_ids()
        key = hash_json({"debugger": self.key, "images": [ids[i] for i in self.debug_indices],
                         "batch": self.batch_size, "layers": list(self.layers if layers is None else layers)})
        return self.folder / f"sensitivity-{key}.json"

    def _batch_count(self) -> int:
        return -(-len(self.debug_indices) // self.batch_size)

    # -- 3. guard search -----------------------------------------------------------------------------------------
    def evaluate_guards(self, extra_layers=(), precision: str = "fp32") -> dict:
        """Top-1 agreement / logit cosine with FP32 on the evaluation images, INT8 variant built in memory."""
        reference = self._fp32_evaluation()
        model, _ = self.quantized_model(self._layer_names(extra_layers), precision=precision)
        session = _session(model)
        del model
        sums = ErrorSums()
        position = 0
        for _, batch in self._batches(self.evaluation_indices):
            logits = session.run([self.output_name], {self.input_name: batch})[0]
            sums.update(reference[position:position + len(batch)].astype(np.float32), logits, logits=True)
            position += len(batch)
        return {**sums.metrics(logits=True), "images": sums.images}

    def _fp32_evaluation(self) -> np.ndarray:
        """FP32 logits of the evaluation images (float16, like the results store keeps them)."""
        if self._fp32_eval is None:
            session = _session(self.fp32)
            chunks = [session.run([self.output_name], {self.input_name: batch})[0].astype(np.float16)
                      for _, batch in self._batches(self.evaluation_indices)]
            self._fp32_eval = np.concatenate(chunks)
        return self._fp32_eval

    def search_guards(self, target: float = 0.995, sensitivity: Sensitivity | None = None,
                      max_guards: int | None = None, precision: str = "fp32", prune: bool = True,
                      resume: bool = True) -> GuardSearch:
        """Guard the most sensitive layers one by one (in `precision`: 'fp32' or 'fp16') until top-1 agreement
        with FP32 on the evaluation images reaches `target`, stopping at the first guard set that does. Then, with
        `prune`, try removing each guard (least sensitive first) and keep every removal that still meets the
        target: greedy order can pick a layer that a later guard made unnecessary."""
        import pandas as pd

        if not 0 < target <= 1:
            raise ValueError(f"target is a top-1 agreement fraction in (0, 1], got {target}")
        if precision not in ("fp32", "fp16"):
            raise ValueError(f"guard precision must be 'fp32' or 'fp16', got {precision!r}")
        ids = self.cache.dataset.image_ids()
        key = hash_json({"debugger": self.key, "eval": [ids[i] for i in self.evaluation_indices]})
        state_path = self.folder / f"search-{key}.json"
        evaluated = (read_json_checked(state_path) or {}) if resume else {}

        def evaluate(added: list[str]) -> dict:
            step_key = "|".join([precision] + added)
            if step_key not in evaluated:
                evaluated[step_key] = self.evaluate_guards(added, precision)
                atomic_write_json(state_path, evaluated)  # resume point
            return evaluated[step_key]

        steps, reached, ranking = [], False, []
        limit = len(self.layers) if max_guards is None else min(int(max_guards), len(self.layers))
        bar = self._bar(limit + 1, f"guard search (target {target:.2%})", "step")
        k = 0
        while True:
            added = ranking[:k]
            metrics = evaluate(added)
            steps.append({"step": k, "phase": "add", "guarded": added[-1] if added else "(recipe guards only)",
                          "guards": len(added), "top1_agreement": metrics["top1_agreement"],
                          "cosine_mean": metrics["cosine_mean"], "sqnr_db": metrics["sqnr_db"],
                          "int8_layers": len(self.layers) - k})
            bar.update(1)
            if metrics["top1_agreement"] >= target:
                reached = True
                break
            if k == 0:  # the ranking is needed only when the recipe alone misses the target
                ranking = (sensitivity or self.sensitivity(resume=resume)).ranking
                limit = min(limit, len(ranking))
            if k >= limit:
                break
            k += 1
        bar.close()
        final, pruned = list(added), []
        if reached and prune and len(added) > 1:
            for name in reversed(added):
                trial = [other for other in final if other != name]
                metrics = evaluate(trial)
                kept = metrics["top1_agreement"] < target
                steps.append({"step": len(steps), "phase": "prune", "guarded": f"without {name}",
                              "guards": len(trial), "top1_agreement": metrics["top1_agreement"],
                              "cosine_mean": metrics["cosine_mean"], "sqnr_db": metrics["sqnr_db"],
                              "int8_layers": len(self.layers) - len(trial)})
                if not kept:
                    final, pruned = trial, pruned + [name]
        if not reached and self.progress:
            log.warning(f"guard search: top-1 agreement {steps[-1]['top1_agreement']:.2%} with {k} guarded "
                  f"layer(s) is still below the target {target:.2%}; raise max_guards, use more calibration images or "
                  f"another algorithm (minmax/percentile), or lower the target")
        return GuardSearch(self.guard_strings(final, precision), final, pd.DataFrame(steps), float(target), reached,
                           len(self.all_layers), len(self.layers) - len(final), self.recipe.to_dict(),
                           len(self.evaluation_indices), evaluate(final), pruned, self)

    def verify_recipe(self, recipe, backend: str = "ort", progress: bool | None = None, target: float | None = None):
        """Build `recipe` with build_variant, evaluate it and FP32 with evaluate_variant / evaluate, compare."""
        from trtlab.evaluation.identity import experiment_of
        from trtlab.evaluation.metrics import agreement
        from trtlab.evaluation.evaluate import evaluate
        from trtlab.evaluation.results import ResultsStore
        from trtlab.quantization.variants import build_variant
        from trtlab.evaluation.evaluate import evaluate_variant

        progress = self.progress if progress is None else progress
        reference = evaluate(self.model_path, self.cache, "fp32", recipe={"precision": "fp32"}, backend=backend,
                             progress=progress, indices=self.evaluation_indices, workspace=self.workspace)
        store = ResultsStore.for_experiment(experiment_of(reference.record), self.workspace)
        built = build_variant(self.model_path, recipe, self.cache, self.calibration_indices, self.workspace,
                              progress=progress)
        result = evaluate_variant(built, self.cache, self.evaluation_indices, store, backend=backend,
                                  progress=progress, workspace=self.workspace)
        agree = agreement(result, reference)
        out = {"variant": built.name, "model_path": str(built.model_path), "guards": list(recipe.guards),
               "top1_agreement": agree["top1_agreement"], "cosine_mean": agree["cosine_mean"],
               "images": agree["compared"], "store": str(store.folder),
               "scale_overrides_applied": False}
        if target is not None:
            out["meets_target"] = bool(agree["top1_agreement"] >= target)
        if self.scale_overrides:
            out["note"] = ("scale overrides are a debugging aid and never reach a recipe: the verified variant uses "
                           "the calibrated scales")
        return out


# ----------------------------------------------------------------------------------------------------------------
# Jump detection
# ----------------------------------------------------------------------------------------------------------------
def _local_drops(fp32, table) -> list[float]:
    """SQNR each node loses: the lowest SQNR among its compared inputs minus its output's SQNR (both capped at
    SQNR_CAP_DB). An exact input (the graph input, or a tensor nothing upstream has quantized yet) counts as
    EXACT_INPUT_REFERENCE_DB: what one well-calibrated INT8 step typically leaves, so a first quantized layer is
    judged against a normal INT8 step rather than against infinity."""
    sqnr = dict(zip(table["tensor"], table["sqnr_db"]))
    producer = {o: n for n in fp32.graph.node for o in n.output}
    drops = []
    for name in table["tensor"]:
        node = producer.get(name)
        if node is None:  # the graph input row
            drops.append(0.0)
            continue
        inputs = [min(sqnr[i], SQNR_CAP_DB) for i in node.input if i in sqnr]
        inputs = [EXACT_INPUT_REFERENCE_DB if value >= SQNR_CAP_DB else value for value in inputs]
        reference = min(inputs) if inputs else EXACT_INPUT_REFERENCE_DB
        drops.append(reference - min(sqnr[name], SQNR_CAP_DB))
    return drops


def find_jump(table, jump_db: float = JUMP_MIN_DB) -> dict | None:
    """The first tensor (graph order) whose node loses far more SQNR than a quantized layer typically does.

    Quantizing a layer normally costs a few dB (`drop_db`, see _local_drops); the jump is the first node whose loss
    is at least `jump_db` and above the median loss of the layer outputs plus 4 scaled median absolute deviations
    (a robust outlier rule: a uniformly noisier variant has no jump, one broken layer stands out).
    """
    drops = table["drop_db"].to_numpy(float)
    layer_drops = drops[table["layer_output"].to_numpy(bool) & np.isfinite(drops)]
    if len(layer_drops) == 0:
        return None
    median = float(np.median(layer_drops))
    mad = float(np.median(np.abs(layer_drops - median)))
    threshold = max(jump_db, median + 4 * 1.4826 * mad)
    for i, drop in enumerate(drops):
        if drop >= threshold:
            row = table.iloc[i]
            return {"depth": int(row["depth"]), "tensor": row["tensor"], "node": row["node"],
                    "op_type": row["op_type"], "sqnr_db": float(row["sqnr_db"]), "drop_db": float(drop),
                    "threshold_db": threshold}
    return None


def find_suspect_scales(table, min_gap_db: float = 10.0) -> list[dict]:
    """Quantized tensors whose own Q/DQ (`qdq_sqnr_db`) is far lossier than the others': at least `min_gap_db` and
    4 scaled median absolute deviations below the median. Such a tensor is clipped too hard or rounded too
    coarsely — a scale problem rather than accumulated error."""
    values = table["qdq_sqnr_db"].to_numpy(float)
    finite = values[np.isfinite(values)]
    if len(finite) < 3:
        return []
    median = float(np.median(finite))
    mad = float(np.median(np.abs(finite - median)))
    threshold = median - max(min_gap_db, 4 * 1.4826 * mad)
    return [{"tensor": row["tensor"], "depth": int(row["depth"]), "qdq_sqnr_db": float(row["qdq_sqnr_db"]),
             "median_db": median, "threshold_db": threshold, "scale": float(row["scale"])}
            for _, row in table.iterrows() if np.isfinite(row["qdq_sqnr_db"]) and row["qdq_sqnr_db"] < threshold]


# ----------------------------------------------------------------------------------------------------------------
# Plots
# ----------------------------------------------------------------------------------------------------------------
def plot_tensor_errors(errors: TensorErrors):
    """SQNR and cosine of every tensor over depth (graph order), layer outputs dotted, the jump marked.
    A matplotlib Figure made without pyplot (no global figure state; any backend)."""
    from matplotlib.figure import Figure

    t = errors.table
    fig = Figure(figsize=(12, 6), constrained_layout=True)
    ax_sqnr, ax_cos = fig.subplots(2, 1, sharex=True)
    raw = t["sqnr_db"].to_numpy(float)
    qdq = t["qdq_sqnr_db"].to_numpy(float)
    finite = np.concatenate([raw[np.isfinite(raw)], qdq[np.isfinite(qdq)]])
    top = min(SQNR_CAP_DB, float(finite.max()) + 10.0) if len(finite) else SQNR_CAP_DB
    sqnr = np.minimum(raw, top)  # exact tensors (inf) sit on the top edge
    ax_sqnr.plot(t["depth"], sqnr, "-", color="tab:blue", lw=1.2, label=f"SQNR (dB), every tensor (exact: {top:.0f})")
    is_layer = t["layer_output"].to_numpy(bool)
    ax_sqnr.plot(t["depth"][is_layer], sqnr[is_layer], "o", ms=3, color="tab:blue", label="layer outputs")
    has_qdq = np.isfinite(qdq)
    ax_sqnr.plot(t["depth"][has_qdq], np.minimum(qdq[has_qdq], top), "v", ms=4, color="0.55",
                 label="own Q/DQ SQNR of quantized tensors")
    for suspect in errors.suspect_scales:
        ax_sqnr.plot([suspect["depth"]], [suspect["qdq_sqnr_db"]], "v", ms=7, color="tab:orange")
        right = suspect["depth"] > 0.8 * len(t)  # keep the label inside the axes
        ax_sqnr.annotate(f"scale? {suspect['tensor']}", (suspect["depth"], suspect["qdq_sqnr_db"]),
                         xytext=(-6 if right else 6, -12), textcoords="offset points", color="tab:orange",
                         fontsize=8, ha="right" if right else "left")
    ax_cos.plot(t["depth"], t["cosine"], "-", color="tab:green", lw=1.2, label="cosine (all images)")
    ax_cos.plot(t["depth"], t["cosine_worst"], ":", color="tab:olive", lw=1.0, label="worst image")
    if errors.jump:
        d = errors.jump["depth"]
        for ax in (ax_sqnr, ax_cos):
            ax.axvline(d, color="red", lw=1.0, ls="--")
        ax_sqnr.annotate(f"jump: {errors.jump['node']} (−{errors.jump['drop_db']:.1f} dB)", (d, top),
                         xytext=(6, -14), textcoords="offset points", color="red", fontsize=8)
    ax_sqnr.set_ylim(top=top + 2)
    ax_sqnr.set_ylabel("SQNR vs FP32 (dB)")
    ax_sqnr.legend(loc="upper right", fontsize=8)
    ax_sqnr.set_title(f"{errors.variant}: error per tensor over depth ({errors.images} images)")
    ax_cos.set_ylabel("cosine vs FP32")
    ax_cos.set_xlabel("tensor index in graph order")
    ax_cos.legend(loc="lower left", fontsize=8)
    return fig


def plot_sensitivity(sensitivity: Sensitivity, top: int = 20):
    """Ranked bar chart: each layer's estimated share of the output noise (only-one and all-but-one)."""
    from matplotlib.figure import Figure

    t = sensitivity.table.head(top)
    fig = Figure(figsize=(10, 0.3 * len(t) + 1.5), constrained_layout=True)
    ax = fig.subplots()
    y = np.arange(len(t))[::-1]
    ax.barh(y + 0.2, t["noise_share_only"] * 100, 0.4, label="only this layer INT8")
    ax.barh(y - 0.2, t["noise_share_all_but"] * 100, 0.4, label="all but this layer INT8")
    ax.set_yticks(y, [f"{name} ({op})" for name, op in zip(t.index, t["op_type"])], fontsize=8)
    ax.set_xlabel("share of the output noise of the all-INT8 variant (%)")
    all_metrics = sensitivity.baseline["all"]
    ax.set_title(f"Layer sensitivity, top {len(t)} (all INT8: logits SQNR {all_metrics['sqnr_db']:.1f} dB, "
                 f"top-1 agreement {all_metrics['top1_agreement']:.0%} on {sensitivity.images} images)")
    ax.legend(loc="lower right", fontsize=8)
    return fig


# ----------------------------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------------------------
def layer_debugger(model_path, dataset, split=None, recipe=None, preprocess="tf-lite", images: int = 8,
                   batch_size: int = 8, scale_overrides: dict | None = None, workspace=None,
                   progress: bool = True) -> LayerDebugger:
    """A LayerDebugger for `model_path` on `dataset`: decode cache and split as `trtlab.compare` makes them."""
    from trtlab.workflows.compare import default_calibration_pool, saved_split
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.preprocess import get_preprocess
    from trtlab.quantization.variants import Recipe

    recipe = recipe or Recipe(algorithm="entropy")
    if isinstance(recipe, dict):
        recipe = Recipe.from_dict(recipe)
    cache = build_decode_cache(dataset, get_preprocess(preprocess), workspace, progress=progress)
    split = split or saved_split(dataset, recipe.calibration_images or default_calibration_pool(dataset),
                                 workspace=workspace)
    return LayerDebugger(model_path, cache, split.calibration, split.evaluation, recipe, images=images,
                         batch_size=batch_size, scale_overrides=scale_overrides, workspace=workspace,
                         progress=progress)


def _save_figure(fig, path: Path) -> Path:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return path


def _png(fig) -> bytes:
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _display(markdown: str, fig=None, table=None) -> None:
    """Notebook display: a sentence, a figure as PNG (works with any matplotlib backend), a table."""
    from IPython.display import HTML, Image, Markdown, display

    display(Markdown(markdown))
    if fig is not None:
        display(Image(data=_png(fig), format="png"))
    if table is not None:
        display(HTML(table.to_html(escape=True)))
