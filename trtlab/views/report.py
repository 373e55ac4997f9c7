"""Reports from the results store: a table (CSV + Markdown) and a PNG. Reads stored results only."""
from __future__ import annotations

import math
from pathlib import Path

from trtlab.evaluation.metrics import compact_variant_table, consistency_table
from trtlab.views.figures import draw_variant_summary
from trtlab.evaluation.results import ResultsStore
from trtlab.core.workspace import atomic_path, atomic_write_text


def plot_summary(store: ResultsStore, variants=None, reference=None, decode_cache=None):
    """Figure: accuracy with 95% intervals and agreement/cosine per variant (the dashboard's summary panels); with
    a decode cache, also the photos with their stored top-1 predictions of the reference variant."""
    # A Figure made without pyplot: no global figure state, and the notebook's backend is left alone.
    from matplotlib.figure import Figure

    from trtlab.data.classes import class_name

    results = store.load_all(variants)
    full = consistency_table(results, reference or next(iter(results)), compare_with=())
    table = compact_variant_table(full, results)
    ref = table.attrs["reference"]
    show_photos = decode_cache is not None
    fig = Figure(figsize=(13, 9.5 if show_photos else 4.6), constrained_layout=True)
    grid = fig.add_gridspec(3 if show_photos else 1, 8, height_ratios=[1.3, 1, 1] if show_photos else None)
    draw_variant_summary(fig.add_subplot(grid[0, :4]), fig.add_subplot(grid[0, 4:]), full, ref)
    if show_photos:
        reference_result = results[ref]
        ids = decode_cache.dataset.image_ids()
        position = {image_id: i for i, image_id in enumerate(ids)}
        count = min(16, len(reference_result))
        for k in range(count):
            ax = fig.add_subplot(grid[1 + k // 8, k % 8])
            ax.imshow(decode_cache.crops[position[reference_result.image_ids[k]]])
            label = int(reference_result.labels[k])
            predicted = int(reference_result.top1[k])
            ok = label < 0 or predicted == label
            ax.set_title(f"{class_name(predicted)[:16]}\n{reference_result.top5_probs[k, 0]:.0%}"
                         + ("" if label < 0 else f" (true: {class_name(label)[:12]})" if not ok else ""),
                         fontsize=7, color="black" if ok else "red")
            ax.axis("off")
    experiment = store.experiment
    fig.suptitle("trtlab report — " + (experiment.short() if experiment else store.folder.name), fontsize=11)
    return fig, table


def write_report(store: ResultsStore, out_dir, variants=None, reference=None, decode_cache=None) -> dict:
    """Write report.png, report.csv and report.md into out_dir (atomically); returns their paths."""
    out_dir = Path(out_dir)
    fig, table = plot_summary(store, variants, reference, decode_cache)
    png = out_dir / "report.png"
    with atomic_path(png, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    csv = out_dir / "report.csv"
    atomic_write_text(csv, table.to_csv(float_format="%.6g"))
    md = out_dir / "report.md"
    atomic_write_text(md, render_markdown(table, store))
    return {"png": png, "csv": csv, "md": md, "table": table}


def _pct(value) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.2f}%"


def render_markdown(table, store: ResultsStore) -> str:
    lines = [f"# trtlab report — {store.folder.name}", "", f"Experiment: {store.describe()}.", "",
             f"Reference for agreement: **{table.attrs['reference']}**", "",
             "| variant | backend | images | top-1 (95% CI) | top-5 | top-1 agreement | top-5 overlap | cosine mean / worst |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in table.iterrows():
        acc = (f"{_pct(row.top1)} ({_pct(row.top1_low)}–{_pct(row.top1_high)})" if row.labelled else "unlabelled")
        lines.append(f"| {name} | {row.backend} | {row.images} | {acc} | {_pct(row.top5) if row.labelled else '—'} | "
                     f"{_pct(row.top1_agreement)} | {_pct(row.top5_overlap)} | "
                     f"{row.cosine_mean:.4f} / {row.cosine_worst:.4f} |")
    return "\n".join(lines) + "\n"
