"""The dashboard as one self-contained HTML document: PNG figures inlined as base64, tables as HTML."""
from __future__ import annotations

import base64
import datetime as _dt
import html
import json
from pathlib import Path
from typing import TYPE_CHECKING

from trtlab.views.dashboard.tables import confusion_rows, drift_rows, flip_rows

if TYPE_CHECKING:
    from trtlab.views.dashboard.build import Dashboard

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}h3{margin-top:1.2em}
table{border-collapse:collapse;font-size:0.85em;margin:8px 0}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%;margin:6px 0}
.notes li{margin:3px 0}.meta{color:#666;font-size:0.85em}
"""


def _img(data: bytes, alt: str) -> str:
    return (f'<img alt="{html.escape(alt)}" src="data:image/png;base64,'
            f'{base64.b64encode(data).decode("ascii")}">')


def _table_html(frame, index: bool = True) -> str:
    return frame.to_html(escape=True, index=index, na_rep="—", border=0)


def render_html(dash: Dashboard) -> str:
    """The dashboard as one HTML document with no external resources."""
    pngs = dash.pngs()
    experiment = dash.store.experiment
    title = f"trtlab accuracy dashboard — {experiment.short() if experiment else dash.store.folder.name}"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
             f"<p class='meta'>written {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from "
             f"stored results; nothing was re-run.</p>",
             "<ul class='notes'>" + "".join(f"<li>{html.escape(note).replace('**', '')}</li>" for note in dash.notes)
             + "</ul>", "<h2>Variants</h2>", dash.table_view().html()]
    parts += _runs_section(dash) + _significance_section(dash)
    parts += ["<h2>Overview</h2>", _img(pngs["summary"], "summary")]
    parts += _head_to_head_section(dash)
    rest = [v for v in dash.compared if v not in dash.focus]
    if rest:
        parts.append(f"<p class='meta'>Per-variant sections below: {html.escape(', '.join(dash.focus))}; not drawn: "
                     f"{html.escape(', '.join(rest))} — export with focus=[...] (CLI: --focus) to see them.</p>")
    for variant in dash.focus:
        parts += _variant_section(dash, variant, pngs)
    parts.append("</body></html>")
    return "\n".join(parts)


def _runs_section(dash: Dashboard) -> list[str]:
    """How each variant was run: date, backend, model, calibration, scales, recipe (from the run records)."""
    import pandas as pd

    runs = []
    for name, result in dash.results.items():
        record = result.record
        backend = record.get("backend") or {}
        runs.append({"variant": name, "date": record.get("date", "—"),
                     "backend": ", ".join(f"{k}={v}" for k, v in backend.items()) or "—",
                     "model": "/".join(Path(str(record.get("model", "—"))).parts[-2:]),
                     "calibration images": (record.get("calibration") or {}).get("images", "—"),
                     "scales": (record.get("scales") or {}).get("source", "—"),
                     "recipe": json.dumps(record.get("recipe", {}), sort_keys=True)})
    return ["<h3>Runs</h3>", _table_html(pd.DataFrame(runs), index=False)] if runs else []


def _significance_section(dash: Dashboard) -> list[str]:
    parts = ["<h2>Is the difference real? (McNemar's test on paired top-1 correctness)</h2>"]
    if not len(dash.significance):
        return parts + ["<p>Needs two variants.</p>"]
    return parts + [dash.significance_view().html()]


def _head_to_head_section(dash: Dashboard) -> list[str]:
    """The two variants the dashboard focuses on (or minmax vs entropy), side by side, with the verdict."""
    from trtlab.views.figures import figure_png, stamp

    pair = dash.head_to_head_pair()
    if pair is None:
        return []
    h2h = dash.compare(*pair)
    figure = h2h.figure()
    experiment = dash.store.experiment
    stamp(figure, experiment.short() if experiment else "")
    return [f"<h2>Head to head: {html.escape(pair[0])} vs {html.escape(pair[1])}</h2>",
            h2h.html(figure_png(figure) if h2h.accuracy_test["labelled"] else None)]


def _variant_section(dash: Dashboard, variant: str, pngs: dict[str, bytes]) -> list[str]:
    """One focused variant against the reference: drift (when labelled), flips, introduced confusions."""
    parts = [f"<h2>{html.escape(variant)} vs {html.escape(dash.reference)}</h2>"]
    if variant in dash.drift:
        parts += ["<h3>Per-class accuracy drift</h3>", _img(pngs[f"class_drift-{variant}"], "class drift"),
                  _img(pngs[f"class_scatter-{variant}"], "class scatter"),
                  _img(pngs[f"drift_histogram-{variant}"], "drift histogram")]
        rows = drift_rows(dash.drift[variant])
        parts.append(_table_html(rows, index=False) if len(rows) else "<p>No class changed its accuracy.</p>")
    flip_table = dash.flips[variant]
    parts += [f"<h3>Flips ({len(flip_table)} images changed top-1)</h3>", _img(pngs[f"flips-{variant}"], "flips")]
    if len(flip_table):
        parts.append(_table_html(flip_rows(flip_table), index=False))
    confusions = dash.confusions[variant]
    parts += ["<h3>Confusions introduced</h3>", _img(pngs[f"confusions-{variant}"], "confusions")]
    if len(confusions):
        parts.append(_table_html(confusion_rows(confusions), index=False))
    return parts
