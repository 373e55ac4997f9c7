"""Reports from the results store: a table (CSV + Markdown) and a PNG. Reads stored results only."""
from __future__ import annotations

import logging
from pathlib import Path

from trtlab.core.workspace import atomic_path, atomic_write_text, read_only_workspace
from trtlab.evaluation.metrics import consistency_table
from trtlab.evaluation.results import ResultsStore
from trtlab.evaluation.stores import fp16_variant
from trtlab.views.figures import _figure, _short, draw_variant_summary, fit, summary_height
from trtlab.views.formatting import Table
from trtlab.views.tables import variant_view

log = logging.getLogger(__name__)
PHOTOS = 16  # photos in the report's grid
PHOTO_COLUMNS = 8
PHOTO_ROW_INCHES = 1.95  # a 1.55-inch photo and its caption


def report_tables(results, reference=None, allow_mixed_backends: bool = False) -> tuple[object, Table]:
    """(consistency_table, its Table for people whose `.raw` is the compact A/B table) of stored results; results of
    different backends are refused unless `allow_mixed_backends` (evaluation.identity.check_one_backend)."""
    reference = reference or ("fp32" if "fp32" in results else next(iter(results)))
    full = consistency_table(results, reference, compare_with=(reference, fp16_variant(results) or "fp16"),
                             allow_mixed_backends=allow_mixed_backends)
    return full, variant_view(full, results)


def plot_summary(store: ResultsStore, variants=None, reference=None, decode_cache=None):
    """Figure: accuracy with 95 % intervals, agreement and logit cosine per variant (the dashboard's summary
    panels); with a decode cache, also the reference variant's top-1 predictions on the first photos, captioned
    with whose predictions they are. Returns (figure, Table)."""
    results = store.load_all(variants)
    full, table = report_tables(results, reference)
    ref = full.attrs["reference"]
    show_photos = decode_cache is not None
    top_height = summary_height(len(full), list(full.index))
    photo_rows = -(-min(PHOTOS, len(results[ref])) // PHOTO_COLUMNS) if show_photos else 0
    fig = _figure(13.0, top_height + 0.5 + (PHOTO_ROW_INCHES * photo_rows + 0.5 if photo_rows else 0))
    experiment = store.experiment
    skipped = len({item.get("image") for r in results.values() for item in skipped_images(r.record)})
    fig.suptitle(fit("trtlab report — " + (experiment.short() if experiment else store.folder.name)
                     + (f" · {skipped} not decodable, not scored (named in report.md)" if skipped else ""), 12.5, 11),
                 fontsize=11)
    if photo_rows:
        top, bottom = fig.subfigures(2, 1, height_ratios=[top_height, PHOTO_ROW_INCHES * photo_rows + 0.5])
    else:
        # The panels in a subfigure of their own: their legend then sits under the title, not over it (a legend
        # "outside" the figure itself shares the top margin with the suptitle and overlaps it).
        top, bottom = fig.subfigures(1, 1), None
    draw_variant_summary(top.subplots(1, 3, sharey=True), full, ref, top)
    if bottom is not None:
        _draw_photos(bottom, results[ref], decode_cache, photo_rows)
    return fig, table


def _draw_photos(subfig, result, decode_cache, rows: int) -> None:
    """The reference's top-1 prediction and confidence on the first photos; wrong ones in red with the truth."""
    from trtlab.data.classes import class_name

    count = min(PHOTOS, len(result))
    subfig.suptitle(f"{result.variant}'s top-1 predictions on the first {count} evaluation photos (with confidence; "
                    f"red = wrong, the true class below)", fontsize=10)
    position = {image_id: i for i, image_id in enumerate(decode_cache.dataset.image_ids())}
    axes = subfig.subplots(rows, PHOTO_COLUMNS, squeeze=False).ravel()
    for k, ax in enumerate(axes):
        ax.axis("off")
        if k >= count:
            continue
        ax.imshow(decode_cache.crops[position[result.image_ids[k]]])
        label, predicted = int(result.labels[k]), int(result.top1[k])
        ok = label < 0 or predicted == label
        # 1.6-inch photos: a class name gets up to two lines (≈ 24 characters each at 7.5 points)
        title = f"{_two_lines(class_name(predicted))} {result.top5_probs[k, 0]:.0%}"
        if not ok:
            title += f"\ntrue: {_two_lines(class_name(label), 18)}"
        ax.set_title(title, fontsize=7.5, color="black" if ok else "#c0392b")


def _two_lines(name: str, first: int = 24) -> str:
    lines = fit(name, first * 7.5 * 0.62 / 72, 7.5).split("\n")
    return "\n".join(lines[:1] + [_short(" ".join(lines[1:]), 24)] if len(lines) > 1 else lines)


def write_report(store: ResultsStore, out_dir, variants=None, reference=None, decode_cache=None,
                 verdict: str | None = None) -> dict:
    """Write report.png, report.csv and report.md into out_dir (atomically); returns their paths, the numeric
    table ("table", the compact A/B table) and its formatted view ("view", a Table). `verdict`: the decision
    sentence (views.decision), written under the table in report.md."""
    out_dir = Path(out_dir)
    fig, view = plot_summary(store, variants, reference, decode_cache)
    png = out_dir / "report.png"
    if read_only_workspace(out_dir):  # a finished workspace attached read-only: its stored report, or none
        import matplotlib.pyplot as plt

        plt.close(fig)
        paths = {kind: out_dir / f"report.{kind}" for kind in ("png", "csv", "md")}
        stored = all(path.is_file() for path in paths.values())
        log.info("%s is in a read-only workspace: the report is not written%s", out_dir,
                    " (the one stored there is shown)" if stored else "")
        return {**(paths if stored else dict.fromkeys(paths)), "table": view.raw, "view": view}
    with atomic_path(png, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    csv = out_dir / "report.csv"
    atomic_write_text(csv, view.raw.to_csv(float_format="%.6g"))  # for code: the numbers, unformatted
    md = out_dir / "report.md"
    atomic_write_text(md, render_markdown(view, store) + (f"\n**Verdict:** {verdict}\n" if verdict else ""))
    return {"png": png, "csv": csv, "md": md, "table": view.raw, "view": view}


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


def render_markdown(view: Table, store: ResultsStore) -> str:
    reference = view.raw.attrs["reference"]
    lines = [f"# trtlab report — {store.folder.name}", "", f"Experiment: {store.describe()}.", ""]
    skipped = skipped_note(store.load_all(list(view.raw.index)), store.experiment)
    if skipped:
        lines += [f"**Skipped:** {skipped}", ""]
    return "\n".join(lines + [f"Reference for agreement: **{reference}**", "", view.markdown(), ""])
