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
    display(HTML(dash.display_table().to_html(escape=True)))
    if len(dash.significance):
        display(HTML(dash.display_significance().to_html(escape=True, index=False)))
    for name, data in dash.pngs().items():
        if name.endswith(tuple(f"-{v}" for v in dash.focus)) and name.startswith(("class_drift-", "flips-")) \
                and (name.startswith("class_drift-") or not dash.labelled):
            display(Markdown(f"**{name.partition('-')[2]} vs {dash.reference}**"))
        display(Image(data=data, format="png"))


def show_significance(dash: Dashboard) -> None:
    """The pairwise McNemar table, or why there is none."""
    from IPython.display import HTML, Markdown, display

    if not len(dash.significance):
        display(Markdown(f"Only **{dash.reference}** is selected: a significance test needs two variants."))
    elif not int(dash.significance["labelled"].max()):
        display(Markdown("No labelled images: accuracy differences (and their significance) cannot be measured; "
                         "see agreement and cosine in the variant table."))
    else:
        display(HTML(dash.display_significance().to_html(escape=True, index=False)))


def show_variant(dash: Dashboard, variant: str | None = None, figures: bool | None = None) -> None:
    """One compared variant's tables (and figures, by default when show() did not draw them), or why there are
    none."""
    from IPython.display import Image, Markdown, display

    if not dash.compared:
        display(Markdown(f"Only **{dash.reference}** is selected: evaluate or select a second variant to see "
                         f"its per-class drift, flips and introduced confusions."))
        return
    variant = variant or dash.most_changed()
    for title, table in dash.variant_tables(variant).items():
        display(Markdown(f"**{variant} vs {dash.reference}: {title}** ({len(table)} rows)"))
        if len(table):
            display(table.head(25))
    if variant not in dash.compared:
        raise KeyError(f"{variant!r} is not compared here; choose from {', '.join(dash.compared)}")
    if figures if figures is not None else variant not in dash.focus:
        for name in dash.variant_figure_names(variant):
            display(Image(data=dash.png(name), format="png"))
