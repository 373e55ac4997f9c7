"""The dashboard's tables for people: percentages with intervals, p-values, signed differences, as text."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _pct(value, digits: int = 2) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{100 * value:.{digits}f}%"


def _interval(row, metric: str) -> str:
    if not row["labelled"] or not np.isfinite(row[metric]):
        return "—"
    return f"{_pct(row[metric])} ({_pct(row[f'{metric}_low'], 1)}–{_pct(row[f'{metric}_high'], 1)})"


def format_variant_table(table):
    """The variant table with percentages, intervals and p-values as text, one row per variant."""
    import pandas as pd

    reference = table.attrs["reference"]
    rows = []
    for name, row in table.iterrows():
        out = {"images": int(row["images"]), "labelled": int(row["labelled"]),
               "top-1 (95% CI)": _interval(row, "top1"), "top-5 (95% CI)": _interval(row, "top5"),
               f"Δ top-1 vs {reference}": "—" if name == reference or not np.isfinite(row["delta_top1_vs_reference"])
               else f"{100 * row['delta_top1_vs_reference']:+.2f} pts",
               f"McNemar p vs {reference}": "—" if not np.isfinite(row["mcnemar_p_vs_reference"])
               else f"{row['mcnemar_p_vs_reference']:.3g}"}
        for other in table.attrs["compared_with"]:
            out[f"top-1 agreement vs {other}"] = _pct(row[f"top1_agreement_vs_{other}"])
            out[f"top-5 overlap vs {other}"] = _pct(row[f"top5_overlap_vs_{other}"])
        out[f"logit cosine vs {reference}: mean"] = f"{row['cosine_mean']:.5f}"
        out["1st percentile"] = f"{row['cosine_p1']:.5f}"
        rows.append(out)
    return pd.DataFrame(rows, index=pd.Index(list(table.index), name="variant"))


def format_significance(significance):
    """The pairwise McNemar table (pairwise_significance) as text, one row per pair."""
    import pandas as pd

    rows = []
    for row in significance.itertuples():
        if not row.labelled:
            rows.append({"pair": f"{row.second} vs {row.first}", "labelled": 0, "top-1": "—", "Δ top-1": "—",
                         "only second right / only first right": "—", "test": "—", "p": "—",
                         "significant (5%)": "needs labels"})
            continue
        rows.append({
            "pair": f"{row.second} vs {row.first}", "labelled": int(row.labelled),
            "top-1": f"{_pct(row.second_top1)} vs {_pct(row.first_top1)}",
            "Δ top-1": f"{100 * row.delta_top1:+.2f} pts",
            "only second right / only first right": f"{row.c} / {row.b}",
            "test": "exact binomial" if row.method == "exact" else "χ² (continuity-corrected)",
            "p": f"{row.pvalue:.3g}", "significant (5%)": "yes" if row.significant else "no"})
    return pd.DataFrame(rows)


def flip_rows(flip_table, limit: int = 60):
    """The first `limit` flips: image name, label, both top-1 predictions with confidence, outcome."""
    import pandas as pd

    shown = flip_table.head(limit)
    return pd.DataFrame({
        "image": [Path(i).name for i in shown["image_id"]],
        "label": [name if label >= 0 else "—" for label, name in zip(shown["label"], shown["label_name"])],
        "reference top-1": [f"{n} ({c:.0%})" for n, c in zip(shown["reference_name"], shown["reference_confidence"])],
        "variant top-1": [f"{n} ({c:.0%})" for n, c in zip(shown["variant_name"], shown["variant_confidence"])],
        "outcome": shown["outcome"],
    })


def drift_rows(drift, top: int = 10):
    """The `top` classes that lose most, then the `top` that gain most, with both accuracies and the change."""
    import pandas as pd

    changed = pd.concat([drift[drift["delta"] < 0].head(top),
                         drift[drift["delta"] > 0].sort_values("delta", ascending=False, kind="stable").head(top)])
    return pd.DataFrame({
        "class": changed["class"], "name": changed["name"], "images": changed["images"],
        "reference": [_pct(v, 1) for v in changed["reference_accuracy"]],
        "variant": [_pct(v, 1) for v in changed["variant_accuracy"]],
        "Δ": [f"{100 * v:+.1f} pts" for v in changed["delta"]],
    })
