"""The tables people read, made once for notebooks, the HTML dashboard, report.md and the CLI: the variant table
and the McNemar table (formatted by views/formatting.py; the numbers stay in `Table.raw`)."""
from __future__ import annotations

import numpy as np

from trtlab.views.formatting import CI, MISSING, Table, cosine, percent, percent_ci, points, pvalue


def _labelled(row) -> bool:
    return bool(row.get("labelled", 0)) and np.isfinite(row.get("top1", np.nan))


def _shared(values) -> object | None:
    """The one value every row has, else None."""
    values = list(values)
    return values[0] if values and all(v == values[0] for v in values) else None


def variant_view(full, results=None) -> Table:
    """consistency_table → the variant table for people: accuracy with intervals, Δ top-1 with McNemar's p,
    agreement with the reference (with interval) and with FP16/FP32 when stored, top-5 overlap, logit cosine. What
    every row shares (image count, backend) goes into the caption instead of a column.

    `raw` is `compact_variant_table(full, results)` when `results` is given (the A/B table code reads), else `full`.
    """
    import pandas as pd

    from trtlab.evaluation.metrics import compact_variant_table

    from trtlab.views.formatting import variant_order

    attrs = dict(full.attrs)
    full = full.loc[variant_order(list(full.index))]  # FP32, FP16, then INT8
    full.attrs.update(attrs)
    reference = full.attrs["reference"]
    others = [o for o in full.attrs.get("compared_with", [reference]) if o != reference]
    any_labelled = bool(len(full)) and bool(full["labelled"].max())
    backends = {name: (results[name].record.get("backend") or {}).get("backend", MISSING) for name in full.index} \
        if results else {}
    images, labelled, backend = _shared(full["images"]), _shared(full["labelled"]), _shared(backends.values())
    rows = []
    for name, row in full.iterrows():
        out = {}
        if images is None:
            out["images"] = int(row["images"])
        if labelled is None:
            out["labelled"] = int(row["labelled"])
        if backends and backend is None:
            out["backend"] = backends[name]
        if any_labelled:
            ok = _labelled(row)
            out[f"top-1 ({CI})"] = percent_ci(row["top1"], row["top1_low"], row["top1_high"]) if ok else MISSING
            out[f"top-5 ({CI})"] = percent_ci(row["top5"], row["top5_low"], row["top5_high"]) if ok else MISSING
            out[f"Δ top-1 vs {reference} (McNemar p)"] = (
                MISSING if name == reference or not ok or not np.isfinite(row["delta_top1_vs_reference"])
                else f"{points(row['delta_top1_vs_reference'])} (p = {pvalue(row['mcnemar_p_vs_reference'])})")
        out[f"top-1 agreement with {reference} ({CI})"] = percent_ci(
            row[f"top1_agreement_vs_{reference}"], row.get(f"top1_agreement_low_vs_{reference}"),
            row.get(f"top1_agreement_high_vs_{reference}"))
        for other in others:
            out[f"top-1 agreement with {other}"] = percent(row[f"top1_agreement_vs_{other}"])
        out[f"top-5 overlap with {reference}"] = percent(row[f"top5_overlap_vs_{reference}"])
        out[f"logit cosine with {reference}: mean / worst"] = f"{cosine(row['cosine_mean'])} / " \
                                                               f"{cosine(row['cosine_worst'])}"
        rows.append(out)
    shown = pd.DataFrame(rows, index=pd.Index([str(n) for n in full.index], name="variant"))
    caption = []
    if images is not None:
        caption.append(f"{int(images)} images" + ("" if labelled is None else " (all labelled)" if labelled == images
                                                  else " (none labelled: agreement and cosine only)" if not labelled
                                                  else f" ({int(labelled)} labelled)"))
    if backend is not None and backends:
        caption.append(f"backend {backend}")
    caption.append(f"intervals: 95 % Wilson; agreement, overlap and cosine against {reference}")
    raw = compact_variant_table(full, results) if results else full
    return Table(shown, raw, caption="; ".join(caption) + ".")


def significance_view(significance) -> Table:
    """pairwise_significance → the McNemar table for people. Rows read "A vs B" in the order of the columns:
    against one reference (every row's first), the variant is the row and the columns are `only <reference> right`
    / `only variant right`; for arbitrary pairs, columns A and B name the variants and `only A right` / `only B
    right` count the images only that one gets right."""
    import pandas as pd

    firsts = set(significance["first"]) if len(significance) else set()
    against_one = len(firsts) == 1
    reference = next(iter(firsts)) if against_one else None
    rows = []
    for row in significance.itertuples():
        if against_one:
            out = {"variant": row.second}
            names, only = (reference, "variant"), (f"only {reference} right", "only variant right")
        else:
            out = {"A": row.first, "B": row.second}
            names, only = ("A", "B"), ("only A right", "only B right")
        out["labelled images"] = int(row.labelled)
        if not row.labelled:
            out.update({f"top-1: {names[0]} → {names[1]}": MISSING, only[0]: MISSING, only[1]: MISSING,
                        "McNemar p": MISSING, "real difference? (5 %)": "needs labels"})
        else:
            out.update({f"top-1: {names[0]} → {names[1]}": f"{percent(row.first_top1)} → {percent(row.second_top1)} "
                                                            f"({points(row.delta_top1)})",
                        only[0]: int(row.b), only[1]: int(row.c),
                        "McNemar p": f"{pvalue(row.pvalue)} ({'exact' if row.method == 'exact' else 'χ²'})",
                        "real difference? (5 %)": "yes" if row.significant else "no"})
        rows.append(out)
    key = "variant" if against_one else None
    shown = pd.DataFrame(rows)
    if key and len(shown):
        shown = shown.set_index(key)
    caption = ("McNemar's test on the images exactly one of the two gets right: exact binomial up to 25 such images, "
               "χ² with continuity correction above.")
    return Table(shown, significance, caption=caption)


def fidelity_pairs_view(fidelity, reference: str) -> Table:
    """significance.pairwise_fidelity → one row per pair of variants: each one's mean logit cosine with the
    reference, the paired difference with its 95 % interval, the KL difference, and which is closer (where the
    cosine interval excludes 0). Long labels read as A, B, … (legend in the caption)."""
    import pandas as pd

    from trtlab.views.formatting import alias_legend, aliases, signed_nats as signed

    names = list(dict.fromkeys(list(fidelity["first"]) + list(fidelity["second"])))
    short = aliases(names)
    rows, index = [], []
    for (first, second), group in fidelity.groupby(["first", "second"], sort=False):
        by = {row.metric: row for row in group.itertuples()}
        cos, kl = by["cosine"], by["kl"]
        decided = np.isfinite(cos.low) and (cos.low > 0 or cos.high < 0)
        index.append(f"{short[first]} vs {short[second]}")
        rows.append({
            f"logit cosine with {reference}": f"{cosine(cos.first_mean)} vs {cosine(cos.second_mean)}",
            "cosine difference (95 % CI)": MISSING if not np.isfinite(cos.low) else
            f"{cos.difference:+.4f} ({cos.low:+.4f} … {cos.high:+.4f})",
            "KL difference, nats (95 % CI)": MISSING if not np.isfinite(kl.low) else
            f"{signed(kl.difference)} ({signed(kl.low)} … {signed(kl.high)})",
            f"closer to {reference}": (short[first] if cos.low > 0 else short[second]) if decided
            else "not distinguishable",
        })
    shown = pd.DataFrame(rows, index=pd.Index(index, name="pair"))
    images = int(fidelity["n"].max()) if len(fidelity) else 0
    legend = alias_legend(short)
    caption = (f"Paired per-image fidelity to {reference} on the {images} images every variant holds; intervals: "
               f"paired t-interval on the per-image differences (first − second)." + (f" {legend}." if legend else ""))
    return Table(shown, fidelity, caption=caption)


def per_class_accuracy(result) -> Table:
    """Per-class top-1 of one stored variant on its labelled images, worst first, each with its 95 % interval;
    `.raw` is evaluation.metrics.per_class_accuracy (sorted by class)."""
    import pandas as pd

    from trtlab.evaluation.metrics import per_class_accuracy as numbers, wilson_interval

    raw = numbers(result)
    order = raw.sort_values(["accuracy", "images", "class"], ascending=[True, False, True], kind="stable")
    shown = pd.DataFrame({
        "images": order["images"].to_numpy(), "correct": order["correct"].to_numpy(),
        f"top-1 ({CI})": [percent_ci(c / n, *wilson_interval(int(c), int(n))) for c, n in
                          zip(order["correct"], order["images"])],
    }, index=pd.Index(list(order["name"]), name="class"))
    classes = f"{len(raw)} class{'es' if len(raw) != 1 else ''}"
    return Table(shown, raw, caption=f"{result.variant} on {int(raw['images'].sum())} labelled images of "
                                     f"{classes}, worst first; intervals: 95 % Wilson.")
