"""Guard search: guard the most sensitive layers one at a time (greedy on the sensitivity ranking), evaluating
the logits' fidelity to FP32 on the search images (the first half of the evaluation images) after each step, and
stop as soon as the target is met (debug.targets: top-1 agreement and/or an output-fidelity bound — logit cosine,
SQNR or softmax KL; by default mean logit cosine ≥ 0.99, which top-1 on a handful of photos cannot see); then
prune guards a later one made unnecessary. The result is a list of guards (trtlab.graph.guards.Guard values;
`str(guard)` is the `node:<name>` text) that a `Recipe`, notebook 03, the calibrate CLI and both TensorRT paths
accept; `GuardSearch.verify()` builds that recipe with `build_variant` and evaluates it with `evaluate_variant`
(trtlab's own pipeline and results store) on the other evaluation images: a guard set is judged on images it was
not chosen on. `calibrate_command()` is the same recipe as a `python -m trtlab calibrate` line to paste.

Recovery first (issue 39): when the recipe alone misses the target, the search tries it with recovery
(quantization.recovery; default DEFAULT_RECOVERY: adaptive rounding and bias correction — no layer leaves INT8, no
speed is lost) and guards only what recovery leaves below the target, on top of the recovered graph — or guards
alone where those keep fewer MACs out of INT8 (recovery cannot undo a clipped scale, and what it fits around one
can need more guards). The answer names what it chose, with the MACs the guards keep in FP16; the recipe, the
saved result and the calibrate command carry it."""
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
from trtlab.debug.targets import Target
from trtlab.graph.guards import Guard

log = logging.getLogger(__name__)

#: What the guard search tries before guarding any layer (bias correction and adaptive rounding; equalization is
#: for per-tensor weight scales, which a recipe asks for itself).
DEFAULT_RECOVERY = ("adaround", "bias_correction")


@dataclass
class GuardSearch:
    """Outcome of the greedy guard search."""

    guards: list[Guard]  # the recipe's guards + a node: Guard per layer the search guarded, as the Recipe takes them
    added: list[str]  # node names the search guarded (after pruning), most sensitive first
    steps: object  # pandas DataFrame, one row per evaluated guard set ('add' phase, then 'prune')
    target: Target
    reached: bool
    layers: int  # weighted layers in the model
    int8_layers: int  # of those, still INT8 with `guards`
    recipe_template: dict
    evaluation_images: int  # images the search evaluated on
    metrics: dict = field(default_factory=dict)  # evaluation of the final guard set
    pruned: list[str] = field(default_factory=list)  # guarded on the way, then found unnecessary
    debugger: object = field(default=None, repr=False)  # the LayerDebugger that searched (verify() needs it)
    verified: dict | None = None
    search_image_ids: list[str] = field(default_factory=list)  # which images the search evaluated on
    blocks: dict = field(default_factory=dict)  # {node name: block name} of the added and pruned layers
    precision: str = "fp16"  # the precision the guarded layers keep
    mac_share: dict = field(default_factory=dict)  # {'INT8', 'FP16', 'FP32': share of the MACs} with the guards
    recovery: tuple = ()  # the recovery methods the found recipe uses (the search's, or the recipe's own)
    asked: str = ""  # the label of the recipe the search was asked about (before the recovery it tried)
    instead: str = ""  # why the answer guards alone although recovery was tried (it needed more FP16 MACs)

    @property
    def int8_fraction(self) -> float:
        return self.int8_layers / self.layers if self.layers else math.nan

    def recipe(self):
        """The Recipe with the found guards (same algorithm and calibration as the debugged one)."""
        from trtlab.quantization.recipe import Recipe

        data = dict(self.recipe_template)
        data["guards"] = list(self.guards)
        return Recipe.from_dict(data)

    def answer(self):
        """The one-sentence answer (issue 35): which layers to keep in which precision, what they cost in MACs
        (fusion-aware, graph.fusion), and whether the target holds — on the search images, and on the verification
        images once verify() ran — with the figures."""
        from trtlab.graph.block_names import labelled
        from trtlab.views.formatting import Sentence

        debugger = self.debugger
        recipe = self.recipe_template.get("algorithm", "")
        name = self.asked or (debugger.recipe.name if debugger is not None else recipe)
        about = f"{name} ({debugger.recipe_reason})" if debugger is not None and \
            getattr(debugger, "recipe_reason", "") else name
        precision = self.precision.upper()
        named = [labelled(self.blocks.get(n, n), n) for n in self.added]
        cost = _share_text(self.mac_share, precision)
        search = f"on the {self.evaluation_images} search images ({self.target.compared(self.metrics)})"
        recover = f"recover with {' + '.join(self.recovery)}" if self.recovery else ""
        if not self.reached:
            text = (f"{about}: no guard set of up to {len(self.added)} layers reaches the target {search}"
                    + (f", even with recovery ({' + '.join(self.recovery)})" if self.recovery else "")
                    + "; raise max_guards, calibrate with another algorithm or more images, or loosen the target")
        elif not self.added:
            text = (f"{about}: {recover} — no layer needs to leave INT8, no speed lost — to meet the target {search}"
                    if recover else f"{about}: no layer needs to leave INT8 — it meets the target as it is {search}")
        else:
            text = (f"{about}: {recover + ' and ' if recover else ''}keep "
                    f"{'this layer' if len(named) == 1 else f'these {len(named)} layers'} in "
                    f"{precision} — {', '.join(named)}{cost} — to meet the target {search}")
        if self.instead and self.reached:
            text += f"; {self.instead}"
        verified = self.verified
        if verified is not None and "meets_target" in verified:
            target = Target.of(verified["target"])
            text += (f"; verified on the other {verified['images']} images ({target.compared(verified)})"
                     if verified["meets_target"] else
                     f"; but on the other {verified['images']} images (verification) it MISSES "
                     f"({target.compared(verified)}): debug with more evaluation images, or loosen the target")
        elif self.reached:
            text += "; not yet verified on the other evaluation images (found.verify())"
        return Sentence(text + ".", answer=True)

    def summary(self) -> str:
        from trtlab.graph.block_names import labelled
        from trtlab.debug.tables import image_list, pct

        state = "reached" if self.reached else "NOT reached"
        named = [labelled(self.blocks.get(n, n), n) for n in self.added]
        shown = self.target.values(self.metrics)
        if "top1" not in dict(self.target.bounds):
            shown += f", top-1 agreement {pct(self.metrics['top1_agreement'])}"
        text = (f"Target {self.target.describe()} {state} on {self.evaluation_images} search images "
                f"({image_list(self.search_image_ids)}): {shown} with "
                f"{len(self.added)} guarded layer(s){': ' + ', '.join(named) if named else ''}"
                f"{'' if self.added or not self.reached else ' (the recipe meets it as it is)'}; "
                f"{self.int8_layers}/{self.layers} layers ({self.int8_fraction:.0%}) stay INT8. "
                f"Guards: {','.join(map(str, self.guards)) or '(none)'}")
        if self.pruned:
            text += (f" ({len(self.pruned)} guard(s) added on the way proved unnecessary: "
                     f"{', '.join(labelled(self.blocks.get(n, n), n) for n in self.pruned)})")
        return text

    def verify(self, backend: str = "ort", progress: bool | None = None) -> "Verification":
        """Build the found recipe with build_variant, evaluate it and FP32 with trtlab's evaluation on the
        evaluation images the search did not use, and compare."""
        if self.debugger is None:
            raise RuntimeError("this search result was loaded without its debugger; rebuild it with "
                               "LayerDebugger(...).search_guards(...) to verify")
        self.verified = verify_recipe(self.debugger, self.recipe(), backend=backend, progress=progress,
                                      target=self.target)
        if not self.added:  # a miss with nothing added must say why nothing was added
            self.verified["search_added_none"] = self.reached
        return self.verified

    def calibrate_command(self, **where) -> str:
        """The found recipe as a `python -m trtlab calibrate` line: the debugger's model, data and preprocessing
        unless `where` (model=, data=, labels=, preset=, workspace=) says otherwise."""
        if self.debugger is not None:
            dataset = self.debugger.cache.dataset
            labels = dataset.label_source if str(dataset.label_source or "").lower().endswith(".csv") else None
            where = {"model": str(self.debugger.model_path), "data": dataset.root, "labels": labels,
                     "preset": self.debugger.cache.preprocess.name, **where}
        return calibrate_command(self.recipe(), **where)

    def save(self, folder) -> Path:
        return atomic_write_json(Path(folder) / "guard_search.json", {
            "guards": self.guards, "added": self.added, "blocks": self.blocks, "target": self.target.to_dict(),
            "reached": self.reached, "layers": self.layers, "int8_layers": self.int8_layers,
            "int8_fraction": self.int8_fraction, "metrics": self.metrics, "pruned": self.pruned,
            "recipe": self.recipe().to_dict(), "recovery": list(self.recovery), "instead": self.instead,
            "evaluation_images": self.evaluation_images,
            "search_images": self.search_image_ids,
            "steps": json.loads(self.steps.to_json(orient="records")),
            "verified": dict(self.verified) if self.verified is not None else None})

    def show(self) -> None:
        from trtlab.debug.plots import display
        from trtlab.debug.tables import search_steps_table

        display(self.summary(), table=search_steps_table(self.steps))

    def _repr_markdown_(self) -> str:
        return self.answer()._repr_markdown_()

    def __repr__(self) -> str:
        return str(self.answer())


class Verification(dict):
    """What verify_recipe found (a dict, saved as JSON) that reads as a sentence where it is shown."""

    def summary(self) -> str:
        from trtlab.debug.tables import cosine, db, image_list, pct

        text = (f"Verified on {self['images']} evaluation images the search did not use "
                f"({image_list(self['image_ids'])}): {self['variant']}, built by build_variant and evaluated by "
                f"evaluate_variant, agrees with FP32 on {pct(self['top1_agreement'])} of top-1 predictions "
                f"(logit cosine {cosine(self['cosine_mean'])}, logit SQNR {db(self.get('sqnr_db'))} dB)")
        if "meets_target" in self:
            target = Target.of(self["target"])
            if self["meets_target"]:
                text += f": meets the target on these {self['images']} images ({target.compared(self)})"
            else:
                text += (f": MISSES the target on these {self['images']} images ({target.compared(self)})")
                if self.get("search_added_none"):
                    text += (" — the recipe alone met it on the search images, so the search added no guards; these "
                             "images need more: debug with more evaluation images (the search then sees more), or "
                             "loosen the target")
                else:
                    text += (" — the guards found on the search images do not carry over to these; debug with more "
                             "evaluation images, or loosen the target")
        if self.get("note"):
            text += f". Note: {self['note']}"
        return text + "."

    def _repr_markdown_(self) -> str:
        from trtlab.debug.plots import escape_markdown

        return escape_markdown(self.summary())

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(self.summary())


def evaluate_guards(debugger, extra_layers=(), precision: str | None = None, indices=None) -> dict:
    """Top-1 agreement / logit cosine with FP32 on the search images (or `indices`), INT8 variant built in
    memory."""
    indices = debugger.search_indices if indices is None else np.asarray(indices, np.int64)
    reference = fp32_logits(debugger, indices)
    model, _ = debugger.quantized_model(debugger.layer_names(extra_layers), precision=precision)
    session = literal_session(model)
    del model
    sums = ErrorSums()
    position = 0
    for _, batch in debugger.batches(indices):
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


def search_guards(debugger, target=None, sensitivity=None, max_guards: int | None = None,
                  precision: str | None = None, prune: bool = True, resume: bool = True,
                  recovery=DEFAULT_RECOVERY) -> GuardSearch:
    """Guard the most sensitive layers one by one (in `precision`: 'fp16' or 'fp32'; default the recipe's float
    path, FP16 on the default path) until the logits on the search
    images meet `target` (debug.targets.Target.of: None = mean logit cosine ≥ 0.99; a number = a top-1 agreement
    fraction; 'top1=0.995,cosine=0.99' = both), stopping at the first guard set that does. Then, with `prune`, try
    removing each guard (least sensitive first) and keep every removal that still meets the target: greedy order
    can pick a layer that a later guard made unnecessary.

    `recovery` (method names; None or () for none): tried first when the recipe alone misses the target and has
    no recovery of its own. Where recovery alone misses it too, guards are searched on the recovered variant and,
    alone, on the plain one — the candidates either way the layers the plain variant is most sensitive to (or the
    given `sensitivity` ranking) — and the answer is the one that keeps fewer MACs out of INT8 (`instead` says
    why guards alone won, where they did)."""
    import pandas as pd

    from trtlab.quantization.recovery import resolve_methods

    target = Target.of(target)
    precision = precision or debugger.guard_precision
    if precision not in ("fp32", "fp16"):
        raise ValueError(f"guard precision must be 'fp32' or 'fp16', got {precision!r}")
    tried = resolve_methods(recovery)
    asked = debugger.recipe.name
    evaluate = _ResumableEvaluation(debugger, precision, resume)
    first = evaluate([])
    steps = [_step(debugger, 0, "add", "(recipe guards only)", [], first)]
    plain = None  # (debugger, evaluation) of the recipe without the recovery tried, when recovery was tried
    if not target.met(first) and tried and not debugger.recipe.recovery and (max_guards is None or max_guards >= 0):
        plain = (debugger, evaluate)
        debugger = debugger.with_recovery(tried)  # recovery first: no layer leaves INT8, no speed lost
        evaluate = _ResumableEvaluation(debugger, precision, resume)
        first = evaluate([])
        steps.append(_step(debugger, 0, "recover", f"(recovery: {' + '.join(tried)})", [], first))
    added, reached, final, pruned, instead = [], target.met(first), [], [], ""
    if not reached and (max_guards is None or max_guards > 0):
        # The ranking is needed only when the recipe alone misses the target: the plain recipe's sensitivity (the
        # layers quantization itself hurts most), also where guards go on top of recovery.
        ranking = (sensitivity or (plain[0] if plain else debugger).sensitivity(resume=resume)).ranking
        limit = len(ranking) if max_guards is None else min(int(max_guards), len(ranking))
        added, reached, final, pruned = _guard_phases(debugger, evaluate, target, ranking[:limit], steps, prune)
        if plain is not None:
            # Guards alone too: recovery fitted around damage it cannot undo (a clipped scale) can leave more
            # layers to guard than the plain recipe needs (05's broken layer: 7 guards after recovery, 1 without).
            # The answer is the one that keeps fewer MACs out of INT8; the other is said.
            alone = _guard_phases(*plain, target, ranking[:limit], steps, prune, " (no recovery)")
            ours, theirs = debugger.mac_share(final, precision), plain[0].mac_share(alone[2], precision)
            if alone[1] and (not reached or theirs.get("INT8", 0.0) > ours.get("INT8", 0.0)):
                instead = (f"guards alone: with recovery ({' + '.join(tried)}) first, "
                           + (f"{len(final)} layer(s) would leave INT8{_share_text(ours, precision.upper())}"
                              if reached else "these candidates would not reach the target"))
                debugger, evaluate = plain
                added, reached, final, pruned = alone
    if not reached and debugger.progress:
        log.warning(f"guard search: {'; '.join(target.missed(steps[-1]))} with {len(added)} guarded layer(s), the "
                    f"target {target.describe()} is not met; raise max_guards, use more calibration images or "
                    f"another algorithm (minmax/percentile), or loosen the target")
    return GuardSearch(debugger.guard_strings(final, precision), final, pd.DataFrame(steps), target, reached,
                       len(debugger.all_layers), len(debugger.layers) - len(final), debugger.recipe.to_dict(),
                       len(debugger.search_indices), evaluate(final), pruned, debugger,
                       search_image_ids=debugger.image_ids(debugger.search_indices),
                       blocks={name: debugger.block(name) for name in added}, precision=precision,
                       mac_share=debugger.mac_share(final, precision), recovery=tuple(debugger.recipe.recovery),
                       asked=asked, instead=instead)


def _share_text(share: dict, precision: str) -> str:
    """' (3.4 % of the MACs in FP16, the rest INT8)' from a precision report's MAC shares."""
    if not share:
        return ""
    kept = share.get(precision, 0.0)
    rest = " ".join(f"{100 * v:.1f} % {k}" for k, v in share.items() if k not in (precision, "INT8") and v > 0)
    return (f" ({100 * kept:.1f} % of the MACs in {precision}" + (f", {rest}" if rest else "")
            + f", {100 * share.get('INT8', 0.0):.1f} % INT8)")


class _ResumableEvaluation:
    """evaluate_guards for one guard set, each result saved at once: a repeated or interrupted search resumes."""

    def __init__(self, debugger, precision: str, resume: bool):
        from trtlab.core.identity import Identity

        images = debugger.image_ids(debugger.search_indices)
        # revision 2: softmax KL among the saved metrics (older saved evaluations lack it)
        made_from = Identity(variant={"debugger": debugger.key}, revision=2,
                             data={"ids_hash": hash_json(images), "images": len(images)})
        self.path = debugger.folder / f"search-{made_from.key}.json"
        self.evaluated = (read_json_checked(self.path) or {}) if resume else {}
        self.debugger, self.precision = debugger, precision

    def __call__(self, added: list[str]) -> dict:
        step_key = "|".join([self.precision] + added)
        if step_key not in self.evaluated:
            self.evaluated[step_key] = evaluate_guards(self.debugger, added, self.precision)
            atomic_write_json(self.path, self.evaluated)  # resume point
        return self.evaluated[step_key]


def _step(debugger, number: int, phase: str, guarded: str, guards: list[str], metrics: dict,
          layer: str | None = None) -> dict:
    return {"step": number, "phase": phase, "guarded": guarded, "block": debugger.block(layer) if layer else "",
            "guards": len(guards),
            "top1_agreement": metrics["top1_agreement"], "cosine_mean": metrics["cosine_mean"],
            "sqnr_db": metrics["sqnr_db"], "kl_mean": metrics["kl_mean"],
            "int8_layers": len(debugger.layers) - len(guards)}


def _guard_phases(debugger, evaluate, target: Target, candidates: list[str], steps: list[dict], prune: bool,
                  suffix: str = ""):
    """The add phase, then (where it reached the target with more than one guard and `prune`) the prune phase:
    (added, reached, final guards, pruned); step phases carry `suffix`."""
    mine: list[dict] = []
    added, reached = _add_phase(debugger, evaluate, target, candidates, mine)
    final, pruned = list(added), []
    if reached and prune and len(added) > 1:
        final, pruned = _prune_phase(debugger, evaluate, target, added, mine, first_step=len(steps))
    steps += [{**step, "phase": step["phase"] + suffix} for step in mine]
    return added, reached, final, pruned


def _add_phase(debugger, evaluate, target: Target, candidates: list[str], steps: list[dict]):
    """Guard one more layer of `candidates` (the ranking, cut at max_guards) per step until the target is met:
    (guarded layers, reached). The bar's total, the candidates, is known before it is drawn; once the target is
    met the layers left are not needed and the bar ends full (issue 30: a total changed after drawing left a
    notebook bar reading 100 % on an almost empty bar)."""
    bar = debugger.progress_bar(len(candidates), f"guard search ({target.spelling()})", "layer")
    added, reached = [], False
    for k, name in enumerate(candidates, start=1):
        added = candidates[:k]
        metrics = evaluate(added)
        steps.append(_step(debugger, k, "add", name, added, metrics, name))
        bar.update(1)
        if target.met(metrics):
            reached = True
            if k < len(candidates):
                bar.set_postfix_str(f"met with {k} guard(s); the other {len(candidates) - k} not needed",
                                    refresh=False)
                bar.update(len(candidates) - k)
            break
    bar.close()
    return added, reached


def _prune_phase(debugger, evaluate, target: Target, added: list[str], steps: list[dict], first_step: int = 0):
    """Try removing each guard, least sensitive first; keep every removal that still meets the target."""
    final, pruned = list(added), []
    bar = debugger.progress_bar(len(added), "guard search: pruning", "guard")
    for name in reversed(added):
        trial = [other for other in final if other != name]
        metrics = evaluate(trial)
        steps.append(_step(debugger, first_step + len(steps), "prune", f"without {name}", trial, metrics, name))
        if target.met(metrics):
            final, pruned = trial, pruned + [name]
        bar.update(1)
    bar.close()
    return final, pruned


def verify_recipe(debugger, recipe, backend: str = "ort", progress: bool | None = None,
                  target: float | None = None, indices=None) -> Verification:
    """Build `recipe` with build_variant, evaluate it and FP32 with evaluate_variant / evaluate on the
    verification images (or `indices`), compare."""
    from trtlab.evaluation.evaluate import evaluate, evaluate_variant
    from trtlab.evaluation.identity import experiment_of
    from trtlab.evaluation.metrics import agreement
    from trtlab.evaluation.results import ResultsStore
    from trtlab.quantization.variants import build_variant

    indices = debugger.verify_indices if indices is None else np.asarray(indices, np.int64)
    if len(indices) == 0:
        raise ValueError(f"no evaluation images are left to verify on: the search uses all "
                         f"{len(debugger.search_indices)}; make the debugger with search_images < "
                         f"{len(debugger.evaluation_indices)} (or a split with more evaluation images)")
    progress = debugger.progress if progress is None else progress
    reference = evaluate(debugger.model_path, debugger.cache, "fp32", recipe={"precision": "fp32"}, backend=backend,
                         progress=progress, indices=indices, workspace=debugger.workspace)
    store = ResultsStore.for_experiment(experiment_of(reference.record), debugger.workspace)
    built = build_variant(debugger.model_path, recipe, debugger.cache, debugger.calibration_indices,
                          debugger.workspace, progress=progress)
    result = evaluate_variant(built, debugger.cache, indices, store, backend=backend, progress=progress,
                              workspace=debugger.workspace)
    agree = agreement(result, reference)
    mine, theirs = result.align(reference)
    sums = ErrorSums()  # SQNR and softmax KL of the same aligned logits (the target may bound them)
    sums.update(reference.logits[theirs].astype(np.float32), result.logits[mine].astype(np.float32), logits=True)
    fidelity = sums.metrics(logits=True)
    out = Verification(variant=built.name, model_path=str(built.model_path), guards=list(recipe.guards),
                       top1_agreement=agree["top1_agreement"], cosine_mean=agree["cosine_mean"],
                       sqnr_db=fidelity["sqnr_db"], kl_mean=fidelity["kl_mean"],
                       images=agree["compared"], image_ids=debugger.image_ids(indices), store=str(store.folder),
                       scale_overrides_applied=False)
    if target is not None:
        target = Target.of(target)
        out["target"] = target.to_dict()
        out["missed"] = target.missed(out)
        out["meets_target"] = not out["missed"]
    if debugger.scale_overrides:
        out["note"] = ("scale overrides are a debugging aid and never reach a recipe: the verified variant uses "
                       "the calibrated scales")
    return out


def calibrate_command(recipe, model=None, data=None, labels=None, preset=None, workspace=None) -> str:
    """`recipe` as a `python -m trtlab calibrate` command line to paste (options left out take the CLI's
    defaults: the demo model, the demo photos, tf-lite preprocessing, the default workspace)."""
    import shlex

    words = ["python", "-m", "trtlab", "calibrate"]
    for option, value in (("--model", model), ("--data", data), ("--labels", labels), ("--workspace", workspace)):
        if value:
            words += [option, str(value)]
    if preset and preset != "tf-lite":
        words += ["--preset", preset]
    words += ["--algorithms", recipe.algorithm]
    if recipe.algorithm == "percentile":
        words += ["--percentile", f"{recipe.percentile:g}"]
    if recipe.calibration_images is not None:
        words += ["--calibration-images", str(recipe.calibration_images)]
    if recipe.calibration_batch != 8:
        words += ["--calibration-batch", str(recipe.calibration_batch)]
    if recipe.guards:
        words += ["--guards", ",".join(recipe.guard_texts)]
    if recipe.recovery:
        words += ["--recovery", ",".join(recipe.recovery)]
    return " ".join(shlex.quote(word) for word in words)
