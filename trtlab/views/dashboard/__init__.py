"""Accuracy and consistency dashboards, read from the results store only (nothing here runs inference).

`build_dashboard(store)` gathers the numbers (variant table, pairwise McNemar tests, per-class drift, flips,
introduced confusions) into a `Dashboard` (build.py); its figures (figures.py, and views/figures.py for the
summary) are matplotlib `Figure`s made without pyplot (no global figure state to leak, Agg rendering anywhere);
`Dashboard.write_html()` writes one self-contained HTML file (html_report.py: PNG figures inlined as base64,
tables formatted by tables.py); `DashboardControls` (controls.py) puts variant/reference pickers and buttons in
front of the same functions; the flips gallery's photos come from thumbnails.py. Finding and opening result stores
is evaluation-level IO (trtlab.evaluation.stores). `python -m trtlab dashboard` is trtlab.cli.commands.dashboard.
"""
from __future__ import annotations

from trtlab.views.dashboard.build import DEFAULT_FOCUS, GALLERY_DPI, Dashboard, build_dashboard
from trtlab.views.dashboard.controls import DashboardControls, controls
from trtlab.views.dashboard.figures import (plot_class_drift, plot_class_scatter, plot_confusions, plot_drift_histogram,
                                            plot_flips_gallery)
from trtlab.views.dashboard.html_report import render_html
from trtlab.views.dashboard.tables import (confusion_rows, drift_rows, flip_rows, format_significance,
                                           format_variant_table)
from trtlab.views.dashboard.thumbnails import Thumbnails

# Store discovery lives in trtlab.evaluation.stores; these names stay reachable here for callers written against
# the one-module dashboard (tests/test_identity.py, tests/test_foundation.py use dashboard.find_result_stores).
from trtlab.evaluation.stores import (fp16_variant, find_result_stores, load_results, open_store,
                                      resolve_selection)

__all__ = ["DEFAULT_FOCUS", "GALLERY_DPI", "Dashboard", "DashboardControls", "Thumbnails", "build_dashboard",
           "confusion_rows", "controls", "drift_rows", "flip_rows", "find_result_stores", "format_significance", "format_variant_table", "fp16_variant",
           "load_results", "open_store", "plot_class_drift", "plot_class_scatter", "plot_confusions",
           "plot_drift_histogram", "plot_flips_gallery", "render_html", "resolve_selection"]
