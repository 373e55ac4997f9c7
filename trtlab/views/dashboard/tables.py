"""The dashboard's tables for people (views/formatting.py rules): the variant and McNemar tables (views/tables.py)
and one compared variant's per-class drift, flips and introduced confusions."""
from __future__ import annotations

from pathlib import Path

from trtlab.views.formatting import ALIAS_LIMIT, Table, percent, points
from trtlab.views.tables import significance_view, variant_view


def format_variant_table(table, results=None):
    """consistency_table → the variant table as text (a DataFrame of strings, one row per variant)."""
    return variant_view(table, results).shown


def format_significance(significance):
    """pairwise_significance → the McNemar table as text (a DataFrame of strings, one row per pair)."""
    return significance_view(significance).shown


def _column_name(variant: str) -> str:
    """What a variant is called in its own tables' headers and cells: its label, or "variant" when the label is
    too long to head a column (each table sits under a heading that names the variant in full)."""
    return variant if len(variant) <= ALIAS_LIMIT else "variant"


def flip_rows(flip_table, limit: int = 60):
    """The first `limit` flips: image name, label, both top-1 predictions with confidence, outcome; the columns
    name the reference and the variant."""
    import pandas as pd

    reference, variant = flip_table.attrs.get("reference", "reference"), flip_table.attrs.get("variant", "variant")
    variant = _column_name(variant)
    shown = flip_table.head(limit)
    return pd.DataFrame({
        "image": [Path(i).name for i in shown["image_id"]],
        "label": [name if label >= 0 else "—" for label, name in zip(shown["label"], shown["label_name"])],
        f"{reference} top-1": [f"{n} ({percent(c, 0)})" for n, c in zip(shown["reference_name"],
                                                                        shown["reference_confidence"])],
        f"{variant} top-1": [f"{n} ({percent(c, 0)})" for n, c in zip(shown["variant_name"],
                                                                      shown["variant_confidence"])],
        "outcome": [_OUTCOME.get(o, o).format(variant=variant) for o in shown["outcome"]],
    })


_OUTCOME = {"broken": "broken by {variant}", "fixed": "fixed by {variant}"}


def drift_rows(drift, top: int = 10):
    """The `top` classes that lose most, then the `top` that gain most, with both accuracies and the change."""
    import pandas as pd

    reference, variant = drift.attrs.get("reference", "reference"), drift.attrs.get("variant", "variant")
    variant = _column_name(variant)
    changed = pd.concat([drift[drift["delta"] < 0].head(top),
                         drift[drift["delta"] > 0].sort_values("delta", ascending=False, kind="stable").head(top)])
    return pd.DataFrame({
        "class": changed["name"], "images": changed["images"],
        f"{reference} top-1": [percent(v) for v in changed["reference_accuracy"]],
        f"{variant} top-1": [percent(v) for v in changed["variant_accuracy"]],
        "Δ": [points(v) for v in changed["delta"]],
    })


def confusion_rows(confusions, top: int = 20):
    """The confusions a variant introduces: true → predicted class, how often each variant makes it."""
    import pandas as pd

    reference, variant = confusions.attrs.get("reference", "reference"), confusions.attrs.get("variant", "variant")
    variant = _column_name(variant)
    shown = confusions.head(top)
    truth = "true class" if confusions.attrs.get("basis", "labels") == "labels" else f"{reference} top-1"
    return pd.DataFrame({
        truth: list(shown["true_name"]), f"{variant} predicts": list(shown["predicted_name"]),
        f"images ({reference})": shown["reference_count"].astype(int).to_numpy(),
        f"images ({variant})": shown["variant_count"].astype(int).to_numpy(),
        "introduced": shown["introduced"].astype(int).to_numpy(),
    })


def variant_table_views(tables: dict) -> dict[str, Table]:
    """Dashboard.variant_tables() (raw) → the same tables for people, each keeping its raw frame."""
    makers = {"per-class drift": drift_rows, "flips": flip_rows, "introduced confusions": confusion_rows}
    return {title: Table(makers[title](frame), frame) for title, frame in tables.items()}
