"""Metrics computed from stored results only (nothing here runs inference): accuracy with Wilson intervals, agreement
and logit cosine, the variant tables, per-class drift, flips and introduced confusions. McNemar's test and the
pairwise comparisons are in evaluation/significance.py."""
from __future__ import annotations

import math

import numpy as np

from trtlab.evaluation.fidelity import (FIDELITY_METRICS, aligned_cosine, cosine_per_image,  # noqa: F401
                                        fidelity_per_image, shared_images)
from trtlab.evaluation.results import VariantResult
# compare_accuracy feeds consistency_table's McNemar column; pairwise_significance is re-exported for callers that
# still read it from here (tests/test_identity.py).
from trtlab.evaluation.significance import compare_accuracy, pairwise_significance  # noqa: F401


def wilson_interval(successes: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for a proportion; (nan, nan) when total is 0."""
    if total == 0:
        return (math.nan, math.nan)
    p = successes / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    # At 0 % or 100 % the bound on that side is exactly 0 or 1 (Wilson's formula gives it up to rounding, e.g.
    # 0.9999999999999999, which made a negative error bar); elsewhere clip rounding into [0, 1].
    low = 0.0 if successes == 0 else min(p, max(0.0, centre - half))
    high = 1.0 if successes == total else max(p, min(1.0, centre + half))
    return (low, high)


def accuracy(result: VariantResult) -> dict:
    """Top-1/top-5 accuracy over the labelled images with a prediction, each with its 95% Wilson interval;
    `non_finite` counts the images left out because their outputs were NaN/inf (evaluation.outputs)."""
    labelled = (result.labels >= 0) & result.valid
    n = int(labelled.sum())
    top1_hits = int((result.top1[labelled] == result.labels[labelled]).sum())
    top5_hits = int((result.top5_indices[labelled] == result.labels[labelled, None]).any(axis=1).sum())
    out = {"labelled": n, "non_finite": result.non_finite}
    for name, hits in (("top1", top1_hits), ("top5", top5_hits)):
        low, high = wilson_interval(hits, n)
        out.update({name: hits / n if n else math.nan, f"{name}_low": low, f"{name}_high": high,
                    f"{name}_correct": hits})
    return out


def agreement(result: VariantResult, reference: VariantResult) -> dict:
    """Top-1 agreement, mean top-5 overlap (|A∩B|/5) and logit cosine similarity against `reference`,
    over the images both results hold."""
    return dict(result.paired("agreement", reference, lambda: _agreement(result, reference)))


def _agreement(result: VariantResult, reference: VariantResult) -> dict:
    mine, theirs = result.align(reference)
    n = len(mine)
    if n == 0:
        return {"compared": 0, "top1_agreement": math.nan, "top5_overlap": math.nan,
                "cosine_mean": math.nan, "cosine_worst": math.nan}
    same_top1 = result.top1[mine] == reference.top1[theirs]
    a5, b5 = result.top5_indices[mine], reference.top5_indices[theirs]
    overlap = (a5[:, :, None] == b5[:, None, :]).any(axis=2).sum(axis=1) / a5.shape[1]
    cosine = aligned_cosine(result, reference)
    low, high = wilson_interval(int(same_top1.sum()), n)
    return {
        "compared": n,
        "top1_agreement": float(same_top1.mean()),
        "top1_agreement_low": low,
        "top1_agreement_high": high,
        "top5_overlap": float(overlap.mean()),
        "cosine_mean": float(cosine.mean()),
        "cosine_worst": float(cosine.min()),
        "cosine_p1": float(np.percentile(cosine, 1)),
    }


def per_class_accuracy(result: VariantResult):
    """pandas DataFrame: class, name, images, correct, accuracy — labelled images only."""
    import pandas as pd

    from trtlab.data.classes import class_name

    labelled = (result.labels >= 0) & result.valid  # images without a prediction (NaN/inf) are left out
    labels = result.labels[labelled]
    correct = result.top1[labelled] == labels
    classes, counts = np.unique(labels, return_counts=True)
    hits = np.array([int(correct[labels == c].sum()) for c in classes], np.int64)
    return pd.DataFrame({
        "class": classes.astype(int),
        "name": [class_name(int(c)) for c in classes],
        "images": counts.astype(int),
        "correct": hits,
        "accuracy": hits / np.maximum(counts, 1),
    })


def variant_table(results: dict[str, VariantResult], reference: str | None = None,
                  allow_mixed_backends: bool = False):
    """One row per variant: accuracy with intervals (when labelled), backend, and top-1 agreement, top-5 overlap
    and logit cosine (mean, worst) against `reference` (default: the first variant) — the compact view of
    consistency_table (which refuses results of different backends unless `allow_mixed_backends`)."""
    if not results:
        raise ValueError("no stored results to tabulate; evaluate at least one variant first")
    return compact_variant_table(consistency_table(results, reference or next(iter(results)), compare_with=(),
                                                   allow_mixed_backends=allow_mixed_backends), results)


def compact_variant_table(full, results: dict[str, VariantResult]):
    """consistency_table → the short A/B table (agreement columns named without the reference suffix); the backend
    column names what computed each result ('ort-cpu', 'torch-cuda', 'trt')."""
    from trtlab.evaluation.identity import backend_of

    reference = full.attrs["reference"]
    table = full.rename(columns={f"top1_agreement_vs_{reference}": "top1_agreement",
                                 f"top1_agreement_low_vs_{reference}": "top1_agreement_low",
                                 f"top1_agreement_high_vs_{reference}": "top1_agreement_high",
                                 f"top5_overlap_vs_{reference}": "top5_overlap",
                                 "delta_top1_vs_reference": "delta_top1", "mcnemar_p_vs_reference": "mcnemar_p"})
    table = table[["images", "labelled", "top1", "top1_low", "top1_high", "top5", "top5_low", "top5_high",
                   "top1_agreement", "top1_agreement_low", "top1_agreement_high", "top5_overlap", "cosine_mean",
                   "cosine_worst", "delta_top1", "mcnemar_p"]
                  # images without a prediction (NaN/inf outputs): shown only when a variant has some
                  + (["non_finite"] if full["non_finite"].any() else [])].copy()
    table.insert(1, "backend", [backend_of(results[name].record) for name in table.index])
    table.attrs.update({key: full.attrs[key] for key in ("reference", "notes", "backends") if key in full.attrs})
    return table


# --- Paired views of two variants (issue 7): per-class drift, flips, confusion pairs. Significance tests are in
# evaluation/significance.py. ---


def per_class_drift(result: VariantResult, reference: VariantResult):
    """pandas DataFrame, one row per labelled class: images, correct under reference and variant, both accuracies
    and delta = variant − reference, over the labelled images both hold; sorted biggest loss first."""
    import pandas as pd

    from trtlab.data.classes import class_name

    mine, theirs = result.align(reference)
    labels = reference.labels[theirs]
    labelled = labels >= 0
    labels = labels[labelled]
    variant_ok = result.top1[mine][labelled] == labels
    reference_ok = reference.top1[theirs][labelled] == labels
    classes, counts = np.unique(labels, return_counts=True)
    variant_hits = np.array([int(variant_ok[labels == k].sum()) for k in classes], np.int64)
    reference_hits = np.array([int(reference_ok[labels == k].sum()) for k in classes], np.int64)
    table = pd.DataFrame({
        "class": classes.astype(int),
        "name": [class_name(int(k)) for k in classes],
        "images": counts.astype(int),
        "reference_correct": reference_hits,
        "variant_correct": variant_hits,
        "reference_accuracy": reference_hits / np.maximum(counts, 1),
        "variant_accuracy": variant_hits / np.maximum(counts, 1),
    })
    table["delta"] = table["variant_accuracy"] - table["reference_accuracy"]
    table = table.sort_values(["delta", "images", "class"], ascending=[True, False, True], kind="stable")
    table = table.reset_index(drop=True)
    table.attrs.update({"variant": result.variant, "reference": reference.variant})
    return table


FLIP_OUTCOMES = ("broken", "fixed", "both wrong", "unlabelled")


def flips(result: VariantResult, reference: VariantResult):
    """pandas DataFrame of the images whose top-1 differs from the reference's: ids, label, both predictions with
    class names and confidences (top-1 softmax probability), and the outcome — 'broken' (reference right,
    variant wrong), 'fixed' (the reverse), 'both wrong' or 'unlabelled'. Broken first, most confident first."""
    import pandas as pd

    from trtlab.data.classes import class_name

    mine, theirs = result.align(reference)
    changed = result.top1[mine] != reference.top1[theirs]
    mine, theirs = mine[changed], theirs[changed]
    labels = reference.labels[theirs].astype(int)
    reference_top1 = reference.top1[theirs].astype(int)
    variant_top1 = result.top1[mine].astype(int)
    outcome = np.where(labels < 0, "unlabelled",
                       np.where(reference_top1 == labels, "broken",
                                np.where(variant_top1 == labels, "fixed", "both wrong")))
    table = pd.DataFrame({
        "image_id": [reference.image_ids[i] for i in theirs],
        "label": labels,
        "label_name": [class_name(int(k)) for k in labels],
        "reference_top1": reference_top1,
        "reference_name": [class_name(int(k)) for k in reference_top1],
        "reference_confidence": reference.top5_probs[theirs, 0].astype(float),
        "variant_top1": variant_top1,
        "variant_name": [class_name(int(k)) for k in variant_top1],
        "variant_confidence": result.top5_probs[mine, 0].astype(float),
        "outcome": pd.Categorical(outcome, categories=list(FLIP_OUTCOMES)),
    })
    table = table.sort_values(["outcome", "reference_confidence"], ascending=[True, False], kind="stable")
    table = table.reset_index(drop=True)
    table["outcome"] = table["outcome"].astype(str)
    table.attrs.update({"variant": result.variant, "reference": reference.variant, "compared": int(len(changed))})
    return table


def introduced_confusions(result: VariantResult, reference: VariantResult, top: int | None = None):
    """The confusions the variant adds over the reference, most added first.

    With labels: for every (true class → predicted class) error pair, how often the reference and the variant make
    it, and introduced = variant − reference (only pairs the variant makes more often are kept). Without labels:
    the reference's top-1 stands in for the truth, so the pairs are (reference top-1 → variant top-1) of the flips.
    `attrs['basis']` says which was used.
    """
    import pandas as pd

    from trtlab.data.classes import class_name

    mine, theirs = result.align(reference)
    labels = reference.labels[theirs]
    labelled = labels >= 0
    if labelled.any():
        truth = labels[labelled]
        variant_pred = result.top1[mine][labelled]
        reference_pred = reference.top1[theirs][labelled]
        basis = "labels"
    else:
        truth = reference.top1[theirs]
        variant_pred = result.top1[mine]
        reference_pred = truth
        basis = "reference top-1"
    counts: dict[tuple[int, int], list[int]] = {}
    for which, predicted in ((0, reference_pred), (1, variant_pred)):
        wrong = predicted != truth
        for t, p in zip(truth[wrong].tolist(), predicted[wrong].tolist()):
            counts.setdefault((int(t), int(p)), [0, 0])[which] += 1
    rows = [{"true_class": t, "true_name": class_name(t), "predicted_class": p, "predicted_name": class_name(p),
             "reference_count": r, "variant_count": v, "introduced": v - r}
            for (t, p), (r, v) in counts.items() if v > r]
    columns = ["true_class", "true_name", "predicted_class", "predicted_name", "reference_count", "variant_count",
               "introduced"]
    table = pd.DataFrame(rows, columns=columns)
    if len(table):
        table = table.sort_values(["introduced", "variant_count", "true_class", "predicted_class"],
                                  ascending=[False, False, True, True], kind="stable").reset_index(drop=True)
    if top is not None:
        table = table.head(top)
    table.attrs.update({"variant": result.variant, "reference": reference.variant, "basis": basis})
    return table


def consistency_table(results: dict[str, VariantResult], reference: str | None = None,
                      compare_with=("fp32", "fp16"), alpha: float = 0.05, allow_mixed_backends: bool = False):
    """The dashboard's variant table: per variant, top-1/top-5 with 95% Wilson intervals (NaN when unlabelled),
    top-1 agreement and top-5 overlap with `reference` and with each stored variant named in `compare_with`, logit
    cosine with `reference` (mean and 1st percentile), McNemar's p-value for the top-1 difference from
    `reference`, and non_finite: the images whose outputs were NaN/inf, left out of every score. Results of
    different backends are refused (identity.MixedBackendError) unless `allow_mixed_backends`; then
    attrs['backends'] names each one's and attrs['notes'] says so. attrs: reference, compared_with (and backends,
    notes when mixed)."""
    import pandas as pd

    from trtlab.evaluation.identity import check_one_backend, check_one_experiment, mixed_backends_note

    if not results:
        raise ValueError("no stored results to tabulate; evaluate at least one variant first")
    check_one_experiment(results)  # never put two models' or two data sets' numbers in one table
    mixed = check_one_backend(results, allow_mixed_backends)  # nor two implementations' numbers, unless asked
    reference = reference or ("fp32" if "fp32" in results else next(iter(results)))
    if reference not in results:
        raise KeyError(f"reference variant {reference!r} is not among the results ({', '.join(results)})")
    others = [name for name in dict.fromkeys([reference, *compare_with]) if name in results]
    rows = []
    for name, result in results.items():
        row = {"variant": name, "images": len(result)}
        acc = accuracy(result)
        row.update({k: acc[k] for k in ("labelled", "top1", "top1_low", "top1_high", "top5", "top5_low", "top5_high",
                                        "non_finite")})
        for other in others:
            agree = agreement(result, results[other])
            row[f"top1_agreement_vs_{other}"] = agree["top1_agreement"]
            row[f"top5_overlap_vs_{other}"] = agree["top5_overlap"]
        agree = agreement(result, results[reference])
        row[f"top1_agreement_low_vs_{reference}"] = agree.get("top1_agreement_low", math.nan)
        row[f"top1_agreement_high_vs_{reference}"] = agree.get("top1_agreement_high", math.nan)
        row["cosine_mean"] = agree["cosine_mean"]
        row["cosine_p1"] = agree.get("cosine_p1", math.nan)
        row["cosine_worst"] = agree["cosine_worst"]
        comparison = compare_accuracy(results[reference], result, alpha)
        row["delta_top1_vs_reference"] = comparison["delta_top1"]
        row["mcnemar_p_vs_reference"] = comparison["pvalue"] if name != reference else math.nan
        rows.append(row)
    table = pd.DataFrame(rows).set_index("variant")
    table.attrs.update({"reference": reference, "compared_with": others})
    if mixed:
        table.attrs.update({"backends": mixed, "notes": [mixed_backends_note(mixed)]})
    return table
