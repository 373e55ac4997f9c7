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
table.runs td{text-align:left;vertical-align:top}details summary{color:#666;font-size:0.9em;cursor:pointer}
details pre{text-align:left;font-size:0.85em;margin:2px 0}
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
             f"stored results; nothing was re-run.</p>", f"<p><b>{html.escape(str(dash.answer()))}</b></p>",
             "<ul class='notes'>" + "".join(f"<li>{html.escape(note).replace('**', '')}</li>" for note in dash.notes)
             + "</ul>", "<h2>Variants</h2>", dash.table_view().html()]
    if dash.reference_summary and len(dash.significance):  # the table in the significance section has the numbers
        parts.append(f"<p>{html.escape(dash.reference_summary)}</p>")
    elif dash.reference_tests:
        parts.append("<ul class='notes'>" + "".join(f"<li>{html.escape(line)}</li>" for line in dash.reference_tests)
                     + "</ul>")
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
    """How each variant was run, readable: when (UTC, to the minute), backend, model, the recipe in words and its
    raw JSON one click away (<details>)."""
    from trtlab.views.formatting import variant_order

    rows = []
    for name in variant_order(list(dash.results)):
        record = dash.results[name].record
        backend = record.get("backend") or {}
        raw = json.dumps(record.get("recipe", {}), sort_keys=True, indent=1)
        rows.append([name, human_time(record.get("date")), str(backend.get("identity") or backend.get("backend")
                                                                 or "—"),
                     "/".join(Path(str(record.get("model", "—"))).parts[-2:]),
                     html.escape(recipe_summary(record)) + f"<details><summary>raw recipe</summary><pre>"
                     f"{html.escape(raw)}</pre></details>"])
    if not rows:
        return []
    head = "".join(f"<th>{h}</th>" for h in ("variant", "run (UTC)", "backend", "model", "recipe"))
    body = "".join("<tr>" + "".join(f"<td>{cell if k == 4 else html.escape(cell)}</td>" for k, cell in enumerate(row))
                   + "</tr>" for row in rows)
    return ["<h3>Runs</h3>", f"<table class='runs'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"]


def human_time(stamp) -> str:
    """'2026-11-28T04:19:04+00:00' → '28 Nov 2026, 04:19 UTC'; what cannot be read stays as it is."""
    if not stamp:
        return "—"
    try:
        when = _dt.datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    if when.tzinfo is not None:
        when = when.astimezone(_dt.timezone.utc)
    return f"{when.day} {when:%b %Y, %H:%M} UTC"


def recipe_summary(record: dict) -> str:
    """A run's recipe in words: 'INT8 minmax, 6 calibration images (batch 8), guards: first_layer → fp16'."""
    recipe = record.get("recipe") or {}
    precision = str(recipe.get("precision") or "—").upper()
    if precision != "INT8":
        return precision
    algorithm = recipe.get("algorithm") or "provided scales"
    if algorithm == "percentile" and recipe.get("percentile"):
        algorithm = f"percentile {recipe['percentile']:g}"
    parts = [f"INT8 {algorithm}"]
    images = recipe.get("calibration_images") or (record.get("calibration") or {}).get("images")
    if images:
        batch = recipe.get("calibration_batch")
        parts.append(f"{images} calibration images" + (f" (batch {batch})" if batch else ""))
    guards = recipe.get("guards") or []
    parts.append("guards: " + ", ".join(_guard_words(g) for g in guards) if guards else "no guards")
    if recipe.get("high_precision"):
        parts.append(f"float path {recipe['high_precision']}")
    return ", ".join(parts)


def _guard_words(guard) -> str:
    if isinstance(guard, dict):
        name, precision = guard.get("name") or guard.get("node") or str(guard), guard.get("precision")
        return f"{name} → {precision}" if precision else str(name)
    return str(guard).replace("=", " → ")


def _significance_section(dash: Dashboard) -> list[str]:
    parts = ["<h2>Is the difference real? (McNemar's test on paired top-1 correctness)</h2>"]
    if not len(dash.significance):
        return parts + ["<p>Needs two variants.</p>"]
    parts.append(dash.significance_view().html())
    fidelity = dash.fidelity_view()
    if fidelity is not None:
        parts += [f"<h3>Which is closer to {html.escape(dash.reference)}? Paired per-image fidelity</h3>",
                  fidelity.html()]
    return parts


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
    return [f"<h2>{html.escape(h2h.headline())}</h2>",
            h2h.html(figure_png(figure) if h2h.accuracy_test["labelled"] else None)]


def _figures(dash: Dashboard, names: list[str]) -> list[str]:
    """The figures, or the one sentence that replaces a figure with nothing to show (Dashboard.figure_parts)."""
    return [_img(part, name.partition("-")[0].replace("_", " ")) if isinstance(part, bytes)
            else f"<p>{html.escape(part)}</p>" for name, part in dash.figure_parts(names)]


def _variant_section(dash: Dashboard, variant: str, pngs: dict[str, bytes]) -> list[str]:
    """One focused variant against the reference: drift (when labelled), flips, introduced confusions."""
    parts = [f"<h2>{html.escape(variant)} vs {html.escape(dash.reference)}</h2>"]
    if variant in dash.drift:
        parts += ["<h3>Per-class accuracy drift</h3>"] + _figures(
            dash, [f"{kind}-{variant}" for kind in ("class_drift", "class_scatter", "drift_histogram")])
        rows = drift_rows(dash.drift[variant])
        if len(rows):
            parts.append(_table_html(rows, index=False))
    flip_table = dash.flips[variant]
    parts += [f"<h3>Flips ({len(flip_table)} image{'s' if len(flip_table) != 1 else ''} changed top-1)</h3>",
              *_figures(dash, [f"flips-{variant}"])]
    if len(flip_table):
        parts.append(_table_html(flip_rows(flip_table), index=False))
    confusions = dash.confusions[variant]
    parts += ["<h3>Confusions introduced</h3>", *_figures(dash, [f"confusions-{variant}"])]
    if len(confusions):
        parts.append(_table_html(confusion_rows(confusions), index=False))
    return parts
