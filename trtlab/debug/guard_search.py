"""Guard search: guard the most sensitive layers one at a time (greedy on the sensitivity ranking), evaluating
top-1 agreement with FP32 on the evaluation images after each step, and stop as soon as the target is met; then
prune guards a later one made unnecessary. The result is a guard list (`node:<name>` strings) that a `Recipe`,
notebook 03, the calibrate CLI and both TensorRT paths accept; `GuardSearch.verify()` builds that recipe with
`build_variant` and evaluates it with `evaluate_variant` (trtlab's own pipeline and results store)."""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.core.workspace import atomic_write_json, hash_json, read_json_checked
from trtlab.debug.errors import ErrorSums
from trtlab.debug.graphs import literal_session

log = logging.getLogger(__name__)


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
    debugger: object = field(default=None, repr=False)  # the LayerDebugger that searched (verify() needs it)
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
        self.verified = verify_recipe(self.debugger, self.recipe(), backend=backend, progress=progress,
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
        from trtlab.debug.plots import display

        display(self.summary(), table=self.steps.round(4))


def evaluate_guards(debugger, extra_layers=(), precision: str = "fp32") -> dict:
    """Top-1 agreement / logit cosine with FP32 on the evaluation images, INT8 variant built in memory."""
    reference = fp32_logits(debugger, debugger.evaluation_indices)
    model, _ = debugger.quantized_model(debugger.layer_names(extra_layers), precision=precision)
    session = literal_session(model)
    del model
    sums = ErrorSums()
    position = 0
    for _, batch in debugger.batches(debugger.evaluation_indices):
        logits = session.run([debugger.output_name], {debugger.input_name: batch})[0]
        sums.update(reference[position:position + len(batch)].astype(np.float32), logits, logits=True)
        position += len(batch)
    return {**sums.metrics(logits=True), "images": sums.images}


def fp32_logits(debugger, indices) -> np.ndarray:
    """FP32 logits of `indices` (float16, like the results store keeps them), computed once per debugger."""
    key = np.asarray(indices, np.int64).tobytes()
    cached = debugger.reference_logits
    if key not in cached:
        session = literal_session(debugger.fp32)
        chunks = [session.run([debugger.output_name], {debugger.input_name: batch})[0].astype(np.float16)
                  for _, batch in debugger.batches(indices)]
        cached[key] = np.concatenate(chunks)
    return cached[key]


def search_guards(debugger, target: float = 0.995, sensitivity=None, max_guards: int | None = None,
                  precision: str = "fp32", prune: bool = True, resume: bool = True) -> GuardSearch:
    """Guard the most sensitive layers one by one (in `precision`: 'fp32' or 'fp16') until top-1 agreement
    with FP32 on the evaluation images reaches `target`, stopping at the first guard set that does. Then, with
    `prune`, try removing each guard (least sensitive first) and keep every removal that still meets the
    target: greedy order can pick a layer that a later guard made unnecessary."""
    import pandas as pd

    if not 0 < target <= 1:
        raise ValueError(f"target is a top-1 agreement fraction in (0, 1], got {target}")
    if precision not in ("fp32", "fp16"):
        raise ValueError(f"guard precision must be 'fp32' or 'fp16', got {precision!r}")
    evaluate = _ResumableEvaluation(debugger, precision, resume)
    steps, added, reached = _add_phase(debugger, evaluate, target, sensitivity, max_guards, resume)
    final, pruned = list(added), []
    if reached and prune and len(added) > 1:
        final, pruned = _prune_phase(debugger, evaluate, target, added, steps)
    if not reached and debugger.progress:
        log.warning(f"guard search: top-1 agreement {steps[-1]['top1_agreement']:.2%} with {len(added)} guarded "
                    f"layer(s) is still below the target {target:.2%}; raise max_guards, use more calibration images "
                    f"or another algorithm (minmax/percentile), or lower the target")
    return GuardSearch(debugger.guard_strings(final, precision), final, pd.DataFrame(steps), float(target), reached,
                       len(debugger.all_layers), len(debugger.layers) - len(final), debugger.recipe.to_dict(),
                       len(debugger.evaluation_indices), evaluate(final), pruned, debugger)


class _ResumableEvaluation:
    """evaluate_guards for one guard set, each result saved at once: a repeated or interrupted search resumes."""

    def __init__(self, debugger, precision: str, resume: bool):
        ids = debugger.cache.dataset.image_ids()
        key = hash_json({"debugger": debugger.key, "eval": [ids[i] for i in debugger.evaluation_indices]})
        self.path = debugger.folder / f"search-{key}.json"
        self.evaluated = (read_json_checked(self.path) or {}) if resume else {}
        self.debugger, self.precision = debugger, precision

    def __call__(self, added: list[str]) -> dict:
        step_key = "|".join([self.precision] + added)
        if step_key not in self.evaluated:
            self.evaluated[step_key] = evaluate_guards(self.debugger, added, self.precision)
            atomic_write_json(self.path, self.evaluated)  # resume point
        return self.evaluated[step_key]


def _step(debugger, number: int, phase: str, guarded: str, guards: list[str], metrics: dict) -> dict:
    return {"step": number, "phase": phase, "guarded": guarded, "guards": len(guards),
            "top1_agreement": metrics["top1_agreement"], "cosine_mean": metrics["cosine_mean"],
            "sqnr_db": metrics["sqnr_db"], "int8_layers": len(debugger.layers) - len(guards)}


def _add_phase(debugger, evaluate, target: float, sensitivity, max_guards, resume: bool):
    """Guard one more layer of the ranking per step until the target is met: (steps, guarded layers, reached)."""
    steps, reached, ranking = [], False, []
    limit = len(debugger.layers) if max_guards is None else min(int(max_guards), len(debugger.layers))
    bar = debugger.progress_bar(limit + 1, f"guard search (target {target:.2%})", "step")
    k = 0
    while True:
        added = ranking[:k]
        metrics = evaluate(added)
        steps.append(_step(debugger, k, "add", added[-1] if added else "(recipe guards only)", added, metrics))
        bar.update(1)
        if metrics["top1_agreement"] >= target:
            reached = True
            break
        if k == 0:  # the ranking is needed only when the recipe alone misses the target
            ranking = (sensitivity or debugger.sensitivity(resume=resume)).ranking
            limit = min(limit, len(ranking))
        if k >= limit:
            break
        k += 1
    bar.close()
    return steps, added, reached


def _prune_phase(debugger, evaluate, target: float, added: list[str], steps: list[dict]):
    """Try removing each guard, least sensitive first; keep every removal that still meets the target."""
    final, pruned = list(added), []
    for name in reversed(added):
        trial = [other for other in final if other != name]
        metrics = evaluate(trial)
        steps.append(_step(debugger, len(steps), "prune", f"without {name}", trial, metrics))
        if metrics["top1_agreement"] >= target:
            final, pruned = trial, pruned + [name]
    return final, pruned


def verify_recipe(debugger, recipe, backend: str = "ort", progress: bool | None = None,
                  target: float | None = None) -> dict:
    """Build `recipe` with build_variant, evaluate it and FP32 with evaluate_variant / evaluate, compare."""
    from trtlab.evaluation.evaluate import evaluate, evaluate_variant
    from trtlab.evaluation.identity import experiment_of
    from trtlab.evaluation.metrics import agreement
    from trtlab.evaluation.results import ResultsStore
    from trtlab.quantization.variants import build_variant

    progress = debugger.progress if progress is None else progress
    reference = evaluate(debugger.model_path, debugger.cache, "fp32", recipe={"precision": "fp32"}, backend=backend,
                         progress=progress, indices=debugger.evaluation_indices, workspace=debugger.workspace)
    store = ResultsStore.for_experiment(experiment_of(reference.record), debugger.workspace)
    built = build_variant(debugger.model_path, recipe, debugger.cache, debugger.calibration_indices,
                          debugger.workspace, progress=progress)
    result = evaluate_variant(built, debugger.cache, debugger.evaluation_indices, store, backend=backend,
                              progress=progress, workspace=debugger.workspace)
    agree = agreement(result, reference)
    out = {"variant": built.name, "model_path": str(built.model_path), "guards": list(recipe.guards),
           "top1_agreement": agree["top1_agreement"], "cosine_mean": agree["cosine_mean"],
           "images": agree["compared"], "store": str(store.folder),
           "scale_overrides_applied": False}
    if target is not None:
        out["meets_target"] = bool(agree["top1_agreement"] >= target)
    if debugger.scale_overrides:
        out["note"] = ("scale overrides are a debugging aid and never reach a recipe: the verified variant uses "
                       "the calibrated scales")
    return out
