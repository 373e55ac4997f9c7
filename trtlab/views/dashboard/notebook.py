"""A Dashboard in a notebook: notes, tables and figures through IPython.display (figures as PNG, so any matplotlib
backend works)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trtlab.views.dashboard.build import Dashboard


def show(dash: Dashboard) -> None:
    """Notes, the variant table, the McNemar table, then every figure (per-variant ones under a heading)."""
    from IPython.display import HTML, Image, Markdown, display

    display(Markdown("\n".join(f"- {note}" for note in dash.notes)))
    display(HTML(dash.table_view().html()))
    if len(dash.significance):  # the McNemar tests in one sentence, their numbers in the table under it
        if dash.reference_summary:
            display(Markdown(dash.reference_summary))
        display(HTML(dash.significance_view().html()))
    elif dash.reference_tests:
        display(Markdown("\n".join(f"- {line}" for line in dash.reference_tests)))
    for name, part in dash.figure_parts():
        if name.endswith(tuple(f"-{v}" for v in dash.focus)) and name.startswith(("class_drift-", "flips-")) \
                and (name.startswith("class_drift-") or not dash.labelled):
            display(Markdown(f"**{name.partition('-')[2]} vs {dash.reference}**"))
        # A figure with nothing to show is one sentence, not empty axes.
        display(Image(data=part, format="png") if isinstance(part, bytes) else Markdown(part))


def show_significance(dash: Dashboard) -> None:
    """The pairwise McNemar table, or why there is none."""
    from IPython.display import HTML, Markdown, display

    if not len(dash.significance):
        display(Markdown(f"Only **{dash.reference}** is selected: a significance test needs two variants."))
    elif not int(dash.significance["labelled"].max()):
        display(Markdown("No labelled images: accuracy differences (and their significance) cannot be measured; "
                         "see agreement and cosine in the variant table."))
    else:
        display(HTML(dash.significance_view().html()))
    fidelity = dash.fidelity_view()
    if fidelity is not None:  # where top-1 cannot tell two variants apart, closeness to the reference can
        display(Markdown(f"**Which is closer to {dash.reference}?** Every pair, image by image:"))
        display(HTML(fidelity.html()))


def show_variant(dash: Dashboard, variant: str | None = None, figures: bool | None = None) -> None:
    """One compared variant's tables (and figures, by default when show() did not draw them), or why there are
    none."""
    from IPython.display import HTML, Image, Markdown, display

    from trtlab.views.dashboard.tables import variant_table_views

    if not dash.compared:
        display(Markdown(f"Only **{dash.reference}** is selected: evaluate or select a second variant to see "
                         f"its per-class drift, flips and introduced confusions."))
        return
    variant = variant or dash.most_changed()
    if variant not in dash.compared:
        raise KeyError(f"{variant!r} is not compared here; choose from {', '.join(dash.compared)}")
    for title, table in variant_table_views(dash.variant_tables(variant)).items():
        count = _count(title, len(table.raw), len(table.shown), int((table.raw["delta"] != 0).sum())
                       if title == "per-class drift" else 0)
        display(Markdown(f"**{variant} vs {dash.reference}: {title}** ({count})"))
        if len(table.shown):
            display(HTML(table.html()))
    if figures if figures is not None else variant not in dash.focus:
        for _, part in dash.figure_parts(dash.variant_figure_names(variant)):
            display(Image(data=part, format="png") if isinstance(part, bytes) else Markdown(part))


def _count(title: str, rows: int, shown: int, changed: int) -> str:
    if title == "per-class drift":
        classes = f"{rows} class{'es' if rows != 1 else ''}"
        return f"{classes}, {changed} changed" + (f", the {shown} that change most shown" if shown < changed else "")
    return f"{rows} row{'s' if rows != 1 else ''}" + (f", first {shown} shown" if shown < rows else "")
