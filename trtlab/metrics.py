"""Metrics computed from stored results only (nothing here runs inference)."""
from __future__ import annotations

import math

import numpy as np

from .results import VariantResult


def wilson_interval(successes: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for a proportion; (nan, nan) when total is 0."""
    if total == 0:
        return (math.nan, math.nan)
    p = successes / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


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

    from .classes import class_name

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
    """One row per variant: accuracy with intervals (when labelled) and agreement with `reference`."""
    import pandas as pd

    if not results:
        raise ValueError("no stored results to tabulate; evaluate at least one variant first")
    reference = reference or next(iter(results))
    if reference not in results:
        raise KeyError(f"reference variant {reference!r} is not among the results ({', '.join(results)})")
    rows = []
    for name, result in results.items():
        row = {"variant": name, "images": len(result), "backend": result.record.get("backend", {}).get("backend")}
        acc = accuracy(result)
        row.update({k: acc[k] for k in ("labelled", "top1", "top1_low", "top1_high", "top5", "top5_low", "top5_high")})
        agree = agreement(result, results[reference])
        row.update({k: agree.get(k) for k in ("top1_agreement", "top5_overlap", "cosine_mean", "cosine_worst")})
        rows.append(row)
    table = pd.DataFrame(rows).set_index("variant")
    table.attrs["reference"] = reference
    return table
