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
    skipped = len({item.get("image") for r in results.values() for item in skipped_images(r.record)})
    fig.suptitle("trtlab report — " + (experiment.short() if experiment else store.folder.name)
                 + (f" · {skipped} not decodable, not scored (named in report.md)" if skipped else ""), fontsize=11)
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


def skipped_images(record: dict) -> list[dict]:
    """The run record's skipped images (`dataset.skipped_images`: image, file, reason); [] for older records."""
    dataset = (record or {}).get("dataset")
    return list((dataset.get("skipped_images") if isinstance(dataset, dict) else None) or [])


def skipped_note(results, experiment=None, shown: int = 5) -> str | None:
    """The images the run records as skipped (not decodable), named, so that the header's evaluation-image count
    and the table's agree or the difference is stated: None when nothing was skipped."""
    skipped = {}
    for result in (results.values() if isinstance(results, dict) else results):
        for item in skipped_images(result.record):
            skipped.setdefault(item.get("image") or item.get("file"), item)
    if not skipped:
        return None
    total = f" of {experiment.evaluation_images}" if experiment is not None else ""
    named = [f"{item.get('file') or image} ({item.get('reason') or 'not decodable'})"
             for image, item in sorted(skipped.items())]
    more = f"; and {len(named) - shown} more (failures.json in the decode cache)" if len(named) > shown else ""
    return (f"{len(skipped)}{total} evaluation image(s) could not be decoded and are not in the table: "
            f"{'; '.join(named[:shown])}{more}.")


def _pct(value) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.2f}%"


def render_markdown(table, store: ResultsStore) -> str:
    lines = [f"# trtlab report — {store.folder.name}", "", f"Experiment: {store.describe()}.", ""]
    skipped = skipped_note(store.load_all(list(table.index)), store.experiment)
    if skipped:
        lines += [f"**Skipped:** {skipped}", ""]
    lines += [f"Reference for agreement: **{table.attrs['reference']}**", "",
              "| variant | backend | images | top-1 (95% CI) | top-5 | top-1 agreement | top-5 overlap | cosine mean / worst |",
              "|---|---|---|---|---|---|---|---|"]
    for name, row in table.iterrows():
        acc = (f"{_pct(row.top1)} ({_pct(row.top1_low)}–{_pct(row.top1_high)})" if row.labelled else "unlabelled")
        lines.append(f"| {name} | {row.backend} | {row.images} | {acc} | {_pct(row.top5) if row.labelled else '—'} | "
                     f"{_pct(row.top1_agreement)} | {_pct(row.top5_overlap)} | "
                     f"{row.cosine_mean:.4f} / {row.cosine_worst:.4f} |")
    return "\n".join(lines) + "\n"
