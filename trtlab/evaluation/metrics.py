"""Metrics computed from stored results only (nothing here runs inference)."""
from __future__ import annotations

import math

import numpy as np

from trtlab.evaluation.results import VariantResult


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
    """Top-1/top-5 accuracy over the labelled images, each with its 95% Wilson interval."""
    labelled = result.labels >= 0
    n = int(labelled.sum())
    top1_hits = int((result.top1[labelled] == result.labels[labelled]).sum())
    top5_hits = int((result.top5_indices[labelled] == result.labels[labelled, None]).any(axis=1).sum())
    out = {"labelled": n}
    for name, hits in (("top1", top1_hits), ("top5", top5_hits)):
        low, high = wilson_interval(hits, n)
        out.update({name: hits / n if n else math.nan, f"{name}_low": low, f"{name}_high": high,
                    f"{name}_correct": hits})
    return out


def cosine_per_image(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.where(norms > 0, (a * b).sum(axis=1) / np.where(norms > 0, norms, 1), 0.0)


def agreement(result: VariantResult, reference: VariantResult) -> dict:
    """Top-1 agreement, mean top-5 overlap (|A∩B|/5) and logit cosine similarity against `reference`,
    over the images both results hold."""
    mine, theirs = result.align(reference)
    n = len(mine)
    if n == 0:
        return {"compared": 0, "top1_agreement": math.nan, "top5_overlap": math.nan,
                "cosine_mean": math.nan, "cosine_worst": math.nan}
    same_top1 = result.top1[mine] == reference.top1[theirs]
    a5, b5 = result.top5_indices[mine], reference.top5_indices[theirs]
    overlap = (a5[:, :, None] == b5[:, None, :]).any(axis=2).sum(axis=1) / a5.shape[1]
    cosine = cosine_per_image(result.logits[mine], reference.logits[theirs])
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

    labelled = result.labels >= 0
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


def variant_table(results: dict[str, VariantResult], reference: str | None = None):
    """One row per variant: accuracy with intervals (when labelled), backend, and top-1 agreement, top-5 overlap
    and logit cosine (mean, worst) against `reference` (default: the first variant) — the compact view of
    consistency_table."""
    if not results:
        raise ValueError("no stored results to tabulate; evaluate at least one variant first")
    return compact_variant_table(consistency_table(results, reference or next(iter(results)), compare_with=()),
                                 results)


def compact_variant_table(full, results: dict[str, VariantResult]):
    """consistency_table → the short A/B table (agreement columns named without the reference suffix)."""
    reference = full.attrs["reference"]
    table = full.rename(columns={f"top1_agreement_vs_{reference}": "top1_agreement",
                                 f"top5_overlap_vs_{reference}": "top5_overlap"})
    table = table[["images", "labelled", "top1", "top1_low", "top1_high", "top5", "top5_low", "top5_high",
                   "top1_agreement", "top5_overlap", "cosine_mean", "cosine_worst"]].copy()
    table.insert(1, "backend", [results[name].record.get("backend", {}).get("backend") for name in table.index])
    table.attrs["reference"] = reference
    return table


# --- Paired comparisons between variants (issue 7): significance, per-class drift, flips, confusion pairs. ---

MCNEMAR_EXACT_MAX_DISCORDANT = 25  # MedCalc's rule: exact binomial up to 25 discordant pairs, chi-square above


def _binomial_two_sided_half(k: int, n: int) -> float:
    """Two-sided exact p-value of k successes in n trials at p = 1/2: min(1, 2·P(X ≤ min(k, n-k)))."""
    low = min(k, n - k)
    if n <= 4000:  # exact integer arithmetic: the p-values of small tables are reproducible to the last digit
        tail = sum(math.comb(n, i) for i in range(low + 1)) / 2 ** n
    else:
        log_terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(low + 1)]
        top = max(log_terms)
        tail = math.exp(top + math.log(sum(math.exp(t - top) for t in log_terms)) - n * math.log(2))
    return min(1.0, 2.0 * tail)


def mcnemar(table=None, *, b: int | None = None, c: int | None = None, method: str = "auto",
            correction: bool = True) -> dict:
    """McNemar's test for paired proportions, from a 2×2 table [[a, b], [c, d]] or the discordant counts b, c.

    For two variants on the same images: a = both correct, b = only the first correct, c = only the second
    correct, d = both wrong. method: "exact" (two-sided binomial on the discordant pairs, p = 1/2), "chi2"
    (chi-square, 1 dof, with the continuity correction (|b−c|−1)²/(b+c) unless correction=False), or "auto":
    exact when b + c ≤ 25, chi-square with continuity correction above.
    Returns b, c, discordant, method, statistic (min(b, c) for exact, the chi-square value otherwise), pvalue.
    """
    if table is not None:
        grid = np.asarray(table)
        if grid.shape != (2, 2):
            raise ValueError(f"McNemar needs a 2×2 contingency table, got shape {list(grid.shape)}")
        b, c = grid[0, 1], grid[1, 0]
    if b is None or c is None:
        raise ValueError("pass a 2×2 table or both discordant counts b= and c=")
    if float(b) != int(b) or float(c) != int(c) or b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative integers, got b={b}, c={c}")
    b, c = int(b), int(c)
    n = b + c
    if method == "auto":
        method = "exact" if n <= MCNEMAR_EXACT_MAX_DISCORDANT else "chi2"
    if method not in ("exact", "chi2"):
        raise ValueError(f"unknown McNemar method {method!r}; use 'auto', 'exact' or 'chi2'")
    if n == 0:
        # No discordant pair: the two are indistinguishable on these images.
        return {"b": 0, "c": 0, "discordant": 0, "method": method, "statistic": 0.0, "pvalue": 1.0}
    if method == "exact":
        statistic, pvalue = float(min(b, c)), _binomial_two_sided_half(b, n)
    else:
        # As R's mcnemar.test: no correction when b == c (the statistic is 0, not 1/(b+c)).
        shift = 1.0 if correction and b != c else 0.0
        statistic = (abs(b - c) - shift) ** 2 / n
        pvalue = math.erfc(math.sqrt(statistic / 2.0))  # chi-square survival function with 1 dof
    return {"b": b, "c": c, "discordant": n, "method": method, "statistic": statistic, "pvalue": pvalue}


def paired_correctness(first: VariantResult, second: VariantResult) -> np.ndarray:
    """2×2 table [[both correct, only first correct], [only second correct, both wrong]] of top-1 correctness
    over the labelled images both results hold."""
    mine, theirs = first.align(second)
    labels = first.labels[mine]
    labelled = labels >= 0
    first_ok = first.top1[mine][labelled] == labels[labelled]
    second_ok = second.top1[theirs][labelled] == labels[labelled]
    return np.array([[np.sum(first_ok & second_ok), np.sum(first_ok & ~second_ok)],
                     [np.sum(~first_ok & second_ok), np.sum(~first_ok & ~second_ok)]], np.int64)


def compare_accuracy(first: VariantResult, second: VariantResult, alpha: float = 0.05, method: str = "auto") -> dict:
    """Is `second` more or less accurate than `first` on the same labelled images? Top-1 of each, the
    difference, McNemar's test on the paired correctness, and a one-line verdict."""
    table = paired_correctness(first, second)
    n = int(table.sum())
    out = {"first": first.variant, "second": second.variant, "labelled": n, "table": table}
    if n == 0:
        out.update({"first_top1": math.nan, "second_top1": math.nan, "delta_top1": math.nan, "b": 0, "c": 0,
                    "discordant": 0, "method": None, "statistic": math.nan, "pvalue": math.nan,
                    "significant": None,
                    "verdict": f"{second.variant} vs {first.variant}: no labelled images in common, so accuracy "
                               f"cannot be compared; agreement and cosine still apply"})
        return out
    first_top1 = (table[0, 0] + table[0, 1]) / n
    second_top1 = (table[0, 0] + table[1, 0]) / n
    test = mcnemar(table, method=method)
    significant = test["pvalue"] < alpha
    delta = second_top1 - first_top1
    kind = "exact binomial" if test["method"] == "exact" else "chi-square (continuity-corrected)"
    verdict = (f"{second.variant} vs {first.variant}: {100 * delta:+.2f} points top-1 on {n} labelled images; "
               f"{test['c']} image(s) only {second.variant} gets right, {test['b']} only {first.variant}; "
               f"McNemar {kind} p = {test['pvalue']:.3g} → "
               + (f"a real difference at the {100 * alpha:g}% level" if significant else
                  f"not distinguishable from chance at the {100 * alpha:g}% level"))
    out.update({"first_top1": float(first_top1), "second_top1": float(second_top1), "delta_top1": float(delta),
                **test, "significant": bool(significant), "verdict": verdict})
    return out


def pairwise_significance(results: dict[str, VariantResult], alpha: float = 0.05, method: str = "auto",
                          reference: str | None = None):
    """pandas DataFrame, one row per pair of variants (first stored first) — or, given `reference`, one row per
    variant against the reference (what a dashboard of many variants shows) — with top-1 of each, difference,
    discordant counts, McNemar statistic and p-value, significant at `alpha`, verdict."""
    import pandas as pd

    from trtlab.evaluation.identity import check_one_experiment

    check_one_experiment(results)
    names = list(results)
    if reference is not None:
        pairs = [(reference, name) for name in names if name != reference]
    else:
        pairs = [(first, second) for i, first in enumerate(names) for second in names[i + 1:]]
    rows = []
    for first, second in pairs:
        row = compare_accuracy(results[first], results[second], alpha, method)
        row.pop("table")
        rows.append(row)
    columns = ["first", "second", "labelled", "first_top1", "second_top1", "delta_top1", "b", "c", "discordant",
               "method", "statistic", "pvalue", "significant", "verdict"]
    return pd.DataFrame(rows, columns=columns)


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
                      compare_with=("fp32", "fp16"), alpha: float = 0.05):
    """The dashboard's variant table: per variant, top-1/top-5 with 95% Wilson intervals (NaN when unlabelled),
    top-1 agreement and top-5 overlap with `reference` and with each stored variant named in `compare_with`, logit
    cosine with `reference` (mean and 1st percentile), and McNemar's p-value for the top-1 difference from
    `reference`. attrs: reference, compared_with."""
    import pandas as pd

    from trtlab.evaluation.identity import check_one_experiment

    if not results:
        raise ValueError("no stored results to tabulate; evaluate at least one variant first")
    check_one_experiment(results)  # never put two models' or two data sets' numbers in one table
    reference = reference or ("fp32" if "fp32" in results else next(iter(results)))
    if reference not in results:
        raise KeyError(f"reference variant {reference!r} is not among the results ({', '.join(results)})")
    others = [name for name in dict.fromkeys([reference, *compare_with]) if name in results]
    rows = []
    for name, result in results.items():
        row = {"variant": name, "images": len(result)}
        acc = accuracy(result)
        row.update({k: acc[k] for k in ("labelled", "top1", "top1_low", "top1_high", "top5", "top5_low", "top5_high")})
        for other in others:
            agree = agreement(result, results[other])
            row[f"top1_agreement_vs_{other}"] = agree["top1_agreement"]
            row[f"top5_overlap_vs_{other}"] = agree["top5_overlap"]
        agree = agreement(result, results[reference])
        row["cosine_mean"] = agree["cosine_mean"]
        row["cosine_p1"] = agree.get("cosine_p1", math.nan)
        row["cosine_worst"] = agree["cosine_worst"]
        comparison = compare_accuracy(results[reference], result, alpha)
        row["delta_top1_vs_reference"] = comparison["delta_top1"]
        row["mcnemar_p_vs_reference"] = comparison["pvalue"] if name != reference else math.nan
        rows.append(row)
    table = pd.DataFrame(rows).set_index("variant")
    table.attrs.update({"reference": reference, "compared_with": others})
    return table
