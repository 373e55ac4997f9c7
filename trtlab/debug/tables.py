"""The debugger's tables as people read them: readable headers, percentages with one decimal, decibels with one,
cosines and percentages written by views.formatting (as the variant tables, the dashboard and report.md write them),
block names beside node names. The analyses keep their raw
tables (`.table`, `.steps`) for code; these are what notebooks and the CLI print."""
from __future__ import annotations

import math
import os

from trtlab.views.formatting import cosine, percent


def pct(value, digits: int = 1) -> str:
    return percent(value, digits)


def db(value, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "—"
    if math.isinf(value):
        return "exact" if value > 0 else "−∞"
    value = 0.0 if abs(value) < 0.05 else value  # no "-0.0"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def general(value) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:#.3g}".rstrip(".")


def tensor_errors_table(rows):
    """TensorErrors rows (e.g. `.worst()`), formatted."""
    import pandas as pd

    return pd.DataFrame({
        "depth": rows["depth"].astype(int), "tensor": rows["tensor"], "block": rows["block"], "node": rows["node"],
        "op": rows["op_type"], "flag": rows["flag"],
        "SQNR (dB)": rows["sqnr_db"].map(db), "lost here (dB)": rows["drop_db"].map(db),
        "cosine": rows["cosine"].map(cosine), "worst image cosine": rows["cosine_worst"].map(cosine),
        "max |error|": rows["max_abs_error"].map(general),
        "own Q/DQ SQNR (dB)": rows["qdq_sqnr_db"].map(db)}).reset_index(drop=True)


def sensitivity_table(table):
    """Sensitivity rows (most sensitive first), formatted; the node is what a guard names."""
    import pandas as pd

    return pd.DataFrame({
        "rank": table["rank"].astype(int), "block": table["block"], "node": table.index, "op": table["op_type"],
        "share of output noise": table["noise_share"].map(pct),
        "only it INT8": table["noise_share_only"].map(pct),
        "all but it INT8": table["noise_share_all_but"].map(pct),
        "SQNR, only it INT8 (dB)": table["only_sqnr_db"].map(db),
        "gain guarding it alone (dB)": table["all_but_gain_db"].map(lambda v: db(v, signed=True)),
        "top-1 agreement, only it INT8": table["only_top1_agreement"].map(pct),
        "top-1 agreement, all but it INT8": table["all_but_top1_agreement"].map(pct)}).reset_index(drop=True)


def search_steps_table(steps):
    """GuardSearch steps, formatted."""
    import pandas as pd

    # steps saved before the KL was measured have no kl_mean column: shown as "—" (a column of NaN)
    kl_mean = steps["kl_mean"] if "kl_mean" in steps else pd.Series(math.nan, index=steps.index, dtype=float)
    return pd.DataFrame({
        "step": steps["step"].astype(int), "phase": steps["phase"], "guarded block": steps["block"],
        "node": steps["guarded"], "guards": steps["guards"].astype(int),
        "top-1 agreement": steps["top1_agreement"].map(pct), "logit cosine": steps["cosine_mean"].map(cosine),
        "logit SQNR (dB)": steps["sqnr_db"].map(db),
        "softmax KL": kl_mean.map(kl),
        "INT8 layers": steps["int8_layers"].astype(int)})


def kl(value) -> str:
    """A softmax KL in nats, 4 decimals (values of interest run 0.001–1; more digits read as noise)."""
    return "—" if value is None or not math.isfinite(value) else f"{value:.4f}"


def image_list(ids, shown: int = 3) -> str:
    """'a.jpg, b.jpg, … z.jpg' (file names; the full list is saved with the results)."""
    names = [os.path.basename(i) for i in ids]
    if len(names) <= shown + 1:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f", … {names[-1]}"
