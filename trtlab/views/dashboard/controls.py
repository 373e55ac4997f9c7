"""The dashboard's ipywidgets panel: variant and reference pickers in front of build_dashboard and write_html."""
from __future__ import annotations

import html
from pathlib import Path

from trtlab.core.errors import UserFileNotFound
from trtlab.evaluation.stores import open_store, resolve_selection
from trtlab.views.dashboard.build import Dashboard, build_dashboard
from trtlab.views.formatting import variant_order


class DashboardControls:
    """Pick variants (SelectMultiple) and the reference (Dropdown); "Show" redraws the dashboard below, "Export
    HTML" writes the report. The buttons call update() and export(), plain methods usable without a browser."""

    def __init__(self, store=None, decode_cache=None, image_root=None, workspace=None):
        from trtlab.core.packages import widget_modules

        widgets, _ = widget_modules()

        self.store = open_store(store, workspace)
        self.decode_cache, self.image_root, self.workspace = decode_cache, image_root, workspace
        # reading order (FP32, FP16, INT8), as every table shows them, not the order they were stored in
        available = variant_order(self.store.variants())
        if not available:
            raise UserFileNotFound(f"no stored results in {self.store.folder}", "evaluate a variant first")
        _, default_reference = resolve_selection(available)
        full = {"style": {"description_width": "initial"}}  # labels at full width, never cut to "refer…"
        longest = max(len(name) for name in available)
        self.variants = widgets.SelectMultiple(options=available, value=tuple(available), description="variants",
                                               rows=min(10, len(available)), **full,
                                               layout=widgets.Layout(width=f"{min(60, longest + 14)}ch"))
        self.reference = widgets.Dropdown(options=available, value=default_reference, description="reference",
                                          **full, layout=widgets.Layout(width=f"{min(60, longest + 14)}ch"))
        self.show_button = widgets.Button(description="Show", button_style="primary")
        self.export_button = widgets.Button(description="Export HTML",
                                            tooltip="writes dashboard.html for every variant, or a file named by "
                                                    "the selection")
        self.status = widgets.HTML()
        self.output = widgets.Output()
        self.show_button.on_click(lambda _: self.update())
        self.export_button.on_click(lambda _: self.export())
        self.widget = widgets.VBox([
            widgets.HBox([self.variants, widgets.VBox([self.reference, self.show_button, self.export_button])]),
            self.status, self.output])
        self.dashboard: Dashboard | None = None
        self.exported: Path | None = None

    def build(self) -> Dashboard:
        """The dashboard for the current selection (no display)."""
        self.dashboard = build_dashboard(self.store, list(self.variants.value), self.reference.value,
                                         self.decode_cache, self.image_root, self.workspace)
        return self.dashboard

    def update(self) -> Dashboard | None:
        """Rebuild for the current selection and show it in the output area; errors are shown, not raised."""
        from IPython.display import clear_output

        with self.output:
            clear_output(wait=True)
            try:
                self.build().show()
                self.status.value = ""
            except (KeyError, ValueError, FileNotFoundError) as exc:
                self.status.value = f"<b style='color:#c0392b'>{html.escape(str(exc))}</b>"
                return None
        return self.dashboard

    def export(self) -> Path | None:
        """Write the HTML report for the current selection; the path is shown and returned."""
        try:
            dash = self.dashboard if self._current() else self.build()
            self.exported = dash.write_html()
        except (KeyError, ValueError, FileNotFoundError) as exc:
            self.status.value = f"<b style='color:#c0392b'>{html.escape(str(exc))}</b>"
            return None
        self.status.value = f"HTML report written: <code>{html.escape(str(self.exported))}</code> — " \
                            + html.escape(describe_selection(dash))
        return self.exported

    def _current(self) -> bool:
        if self.dashboard is None:
            return False
        names, reference = resolve_selection(self.store.variants(), list(self.variants.value), self.reference.value)
        return list(self.dashboard.results) == names and self.dashboard.reference == reference

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)


def describe_selection(dash: Dashboard) -> str:
    """What an exported dashboard holds, and where the full one is when this one is partial."""
    stored = dash.store.variants()
    shown = f"{len(dash.results)} of {len(stored)} stored variants ({', '.join(dash.results)}), reference " \
            f"{dash.reference}"
    if dash.html_name() == "dashboard.html":
        return f"every stored variant, reference {dash.reference}."
    return f"{shown}: a partial dashboard, so dashboard.html (every variant) was left as it was."


def controls(store=None, decode_cache=None, image_root=None, workspace=None) -> DashboardControls:
    """Widgets to pick variants and reference over a results store (display the returned object)."""
    return DashboardControls(store, decode_cache, image_root, workspace)
