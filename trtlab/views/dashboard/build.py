"""The Dashboard: every table a dashboard shows, computed once from stored results, with its figures made on demand
(`build_dashboard` gathers it; figures.py draws, tables.py formats, html_report.py writes the HTML)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtlab.core.errors import UserFileNotFound
from trtlab.core.workspace import atomic_path, atomic_write_text, check_writable_location, workspace_dir
from trtlab.evaluation.metrics import consistency_table, flips, introduced_confusions, per_class_drift
from trtlab.evaluation.results import ResultsStore, VariantResult
from trtlab.evaluation.significance import pairwise_fidelity, pairwise_significance
from trtlab.evaluation.stores import fp16_variant, load_results, resolve_selection, sibling_stores
from trtlab.views.dashboard.figures import (nothing_to_show, plot_class_drift, plot_class_scatter, plot_confusions,
                                            plot_drift_histogram, plot_flips_gallery)
from trtlab.views.dashboard import notebook
from trtlab.views.dashboard.html_report import render_html
from trtlab.views.dashboard.thumbnails import Thumbnails
from trtlab.views.figures import FIGURE_DPI, figure_png, plot_variant_summary, stamp
from trtlab.views.formatting import Table, variant_order
from trtlab.views.tables import fidelity_pairs_view, significance_view, variant_view
from trtlab.views.verdict import PairError, default_pair, head_to_head, int8_algorithm, resolve_variant

GALLERY_DPI = 80  # galleries are photos, which compress poorly as PNG; a lower dpi keeps the HTML report small
DEFAULT_FOCUS = 2  # per-variant figures by default: every compared variant up to this many, else minmax and entropy
# (the head-to-head pair) when both are stored, else the least agreeing


@dataclass
class Dashboard:
    """Everything the dashboard shows, computed from stored results. Figures are made on demand and cached."""

    store: ResultsStore
    results: dict[str, VariantResult]
    reference: str
    table: object  # pandas DataFrame: consistency_table
    significance: object  # pandas DataFrame: pairwise_significance
    drift: dict = field(default_factory=dict)  # variant → per_class_drift
    flips: dict = field(default_factory=dict)  # variant → flips
    confusions: dict = field(default_factory=dict)  # variant → introduced_confusions
    notes: list = field(default_factory=list)
    reference_tests: list = field(default_factory=list)  # one McNemar sentence per variant against the reference
    reference_summary: str = ""  # the same tests in one sentence, where the McNemar table shows their numbers
    focus: list = field(default_factory=list)  # compared variants whose per-variant figures are drawn
    decode_cache: object = None
    image_root: str | None = None
    workspace: object = None
    _pngs: dict = field(default_factory=dict, repr=False)
    _fidelity: object = field(default=None, repr=False)  # significance.pairwise_fidelity, computed once

    @property
    def compared(self) -> list[str]:
        """The variants compared with the reference."""
        return [name for name in self.results if name != self.reference]

    @property
    def labelled(self) -> int:
        return int(self.table.loc[self.reference, "labelled"])

    def figure_names(self, variants=None) -> list[str]:
        """The summary, then the per-variant figures of `variants` (default: the focused ones)."""
        names = ["summary"]
        for variant in (self.focus if variants is None else variants):
            names += self.variant_figure_names(variant)
        return names

    def variant_figure_names(self, variant: str) -> list[str]:
        names = [f"class_drift-{variant}", f"class_scatter-{variant}", f"drift_histogram-{variant}"] \
            if self.labelled else []
        return names + [f"flips-{variant}", f"confusions-{variant}"]

    def least_agreeing(self, count: int) -> list[str]:
        """The `count` compared variants that agree least with the reference (top-1 agreement, then cosine)."""
        rows = self.table.loc[self.compared]
        order = rows.sort_values([f"top1_agreement_vs_{self.reference}", "cosine_mean"], kind="stable")
        return [str(name) for name in order.index[:count]]

    def make_figure(self, name: str):
        """A fresh matplotlib Figure by name (see figure_names()), stamped with the experiment it shows."""
        figure = self._make_figure(name)
        experiment = self.store.experiment
        stamp(figure, experiment.short() if experiment else "")
        return figure

    def _make_figure(self, name: str):
        if name == "summary":
            return plot_variant_summary(self.table, self.reference)
        kind, _, variant = name.partition("-")
        if variant not in self.results or variant == self.reference:
            raise KeyError(f"no figure {name!r}; available: {', '.join(self.figure_names(self.compared))}")
        if kind == "class_drift":
            return plot_class_drift(self.drift[variant])
        if kind == "class_scatter":
            return plot_class_scatter(self.drift[variant])
        if kind == "drift_histogram":
            return plot_drift_histogram(self.drift[variant])
        if kind == "flips":
            thumbs = Thumbnails(self.results[self.reference], self.store.folder, self.decode_cache, self.image_root)
            return plot_flips_gallery(self.flips[variant], thumbs)
        if kind == "confusions":
            return plot_confusions(self.confusions[variant])
        raise KeyError(f"no figure {name!r}; available: {', '.join(self.figure_names())}")

    def figure_sentence(self, name: str) -> str | None:
        """The sentence shown instead of figure `name` when it has nothing to show (figures.nothing_to_show)."""
        kind, _, variant = name.partition("-")
        tables = {"class_drift": self.drift, "class_scatter": self.drift, "drift_histogram": self.drift,
                  "flips": self.flips, "confusions": self.confusions}.get(kind)
        if tables is None or variant not in tables:
            return None
        return nothing_to_show(kind, tables[variant])

    def figure_parts(self, names=None) -> list[tuple[str, bytes | str]]:
        """(name, PNG bytes or the sentence that replaces the figure) in display order, each sentence said once:
        "no class changed" stands for the scatter and histogram of that variant too."""
        pngs = self.pngs() if names is None else {n: self.png(n) for n in names if self.figure_sentence(n) is None}
        parts, said = [], set()
        for name in (self.figure_names() if names is None else names):
            if name in pngs:
                parts.append((name, pngs[name]))
                continue
            variant = name.partition("-")[2]
            sentence = self.figure_sentence(name)
            if (variant, sentence) in said or (name.startswith(("class_scatter-", "drift_histogram-"))
                                               and self.figure_sentence(f"class_drift-{variant}")):
                continue
            said.add((variant, sentence))
            parts.append((name, sentence))
        return parts

    def png(self, name: str) -> bytes:
        if name not in self._pngs:
            dpi = GALLERY_DPI if name.startswith("flips-") else FIGURE_DPI
            self._pngs[name] = figure_png(self.make_figure(name), dpi)
        return self._pngs[name]

    def pngs(self) -> dict[str, bytes]:
        """Every figure with something to show as PNG bytes, rendered once (with a progress bar: galleries decode
        thumbnails); the others are a sentence (figure_sentence)."""
        from trtlab.core.progress import progress_iter

        names = [name for name in self.figure_names() if self.figure_sentence(name) is None]
        todo = [name for name in names if name not in self._pngs]  # a second call draws nothing: no second bar
        for name in progress_iter(todo, desc="dashboard figures", unit="fig", enabled=len(todo) >= 4):
            self.png(name)
        return {name: self._pngs[name] for name in names}

    def table_view(self) -> Table:
        """The variant table for people (with its caption); `.raw` is `self.table`."""
        return variant_view(self.table, self.results)

    def significance_view(self) -> Table:
        """The McNemar table for people; `.raw` is `self.significance`."""
        return significance_view(self.significance)

    def fidelity_view(self) -> Table | None:
        """Every pair of compared variants: which is closer to the reference, image by image (paired intervals of
        the logit cosine and KL differences) — the evidence McNemar's top-1 test lacks on few images. None with
        fewer than two compared variants."""
        if len(self.compared) < 2:
            return None
        if self._fidelity is None:  # computed once: KL reads every logit
            self._fidelity = pairwise_fidelity(self.results, self.reference)
        return fidelity_pairs_view(self._fidelity, self.reference)

    def display_table(self):
        """The variant table as text (a DataFrame of strings)."""
        return self.table_view().shown

    def display_significance(self):
        return self.significance_view().shown

    def compare(self, first: str | None = None, second: str | None = None):
        """Head to head of two stored variants (labels, or algorithm names: 'minmax' is the variant calibrated
        with minmax alike with the other side, else the unguarded one) against the reference (default: the pair
        the last stated verdict compared — notebook 03's — else minmax vs entropy when both are here, else the best
        two INT8 variants): accuracy and agreement with intervals, McNemar between the two, the
        classes each loses side by side, the calibration thresholds that differ most, and whether the difference
        is real. Displays itself in a notebook; `.sentence`, `.summary`, `.drift`, `.scales` hold the parts."""
        return head_to_head(self.results, first, second, self.reference, preferred=self.verdict_pair())

    def verdict_pair(self) -> tuple[str, str] | None:
        """The pair the last verdict stated on this store compared (notebook 03's), when both are shown here."""
        record = self.store.last_verdict()
        if record and record["reference"] == self.reference and record["first"] in self.results \
                and record["second"] in self.results:
            return record["first"], record["second"]
        return None

    def head_to_head_pair(self) -> tuple[str, str] | None:
        """The pair the HTML report compares head to head: the focus when it is two variants, else the pair of the
        last stated verdict, else the default."""
        if len(self.focus) == 2:
            return self.focus[0], self.focus[1]
        try:
            return default_pair(self.results, self.reference, self.verdict_pair())
        except PairError:
            return None

    def answered_variant(self) -> tuple[str | None, str]:
        """(the variant the answer is about, why): the last verdict's choice (notebook 03's recommendation, or the
        one closer to the reference where it could not decide), else the INT8 variant closest to the reference."""
        record = self.store.last_verdict()
        if record and record.get("closer") in self.compared and record["reference"] == self.reference:
            chosen = record["closer"]
            return chosen, ("notebook 03's recommendation" if record.get("ship") == chosen else
                            f"closer to {self.reference} of the pair the last verdict could not decide")
        int8 = [n for n in self.compared if int8_algorithm(self.results[n])] or self.compared
        if not int8:
            return None, ""
        rows = self.table.loc[int8]
        return str(rows.sort_values("cosine_mean", ascending=False, kind="stable").index[0]), \
            f"the INT8 variant closest to {self.reference}"

    def answer(self):
        """The dashboard's answer in one sentence (views.dashboard.answer): what the variant to ship costs per
        class against the reference — 'int8-minmax@43 (notebook 03's recommendation) changes top-1 on 2 of 20
        classes; worst: tench, −50 points (2 → 1 of 2 images)' — or, without labels, per image."""
        from trtlab.views.dashboard.answer import dashboard_answer

        return dashboard_answer(self)

    def show_significance(self) -> None:
        """Display the pairwise McNemar table in a notebook, or say why there is none."""
        notebook.show_significance(self)

    def show(self) -> None:
        """Notes, tables and figures in a notebook (figures as PNG, so any matplotlib backend works)."""
        notebook.show(self)

    def most_changed(self) -> str | None:
        """The compared variant that agrees least with the reference (top-1 agreement, then mean cosine)."""
        return (self.least_agreeing(1) or [None])[0]

    def variant_tables(self, variant: str | None = None) -> dict:
        """Per-class drift, flips and introduced confusions of one compared variant (default: most_changed())."""
        if not self.compared:
            raise ValueError(f"only {self.reference} is selected: per-variant tables need a second variant")
        variant = variant or self.most_changed()
        if variant not in self.flips:
            raise KeyError(f"{variant!r} is not compared here; choose from {', '.join(self.compared)}")
        tables = {"flips": self.flips[variant], "introduced confusions": self.confusions[variant]}
        if variant in self.drift:
            tables = {"per-class drift": self.drift[variant], **tables}
        return tables

    def show_variant(self, variant: str | None = None, figures: bool | None = None) -> None:
        """Display variant_tables() of one variant in a notebook (and its figures, by default when show() did not
        already draw them), or say why there is nothing to show."""
        notebook.show_variant(self, variant, figures)

    def save_pngs(self, folder=None) -> list[Path]:
        """Every figure as `<name>.png` in `folder` (default: the report folder), written atomically."""
        folder = Path(folder) if folder else self.report_dir()
        paths = []
        for name, data in self.pngs().items():
            path = folder / f"{name}.png"
            with atomic_path(path, suffix=".png") as tmp:
                tmp.write_bytes(data)
            paths.append(path)
        return paths

    def report_dir(self) -> Path:
        """<workspace>/reports/<store name>: the store's own workspace when it is writable, else the default one."""
        workspace = self.workspace
        if workspace is None and self.store.folder.parent.name == "results":
            candidate = self.store.folder.parent.parent
            try:
                check_writable_location(candidate)
                workspace = candidate
            except PermissionError:
                workspace = None  # results attached read-only (e.g. /kaggle/input): report into the workspace
        return workspace_dir(workspace) / "reports" / self.store.folder.name

    def html_name(self) -> str:
        """`dashboard.html` for every stored variant against the default reference; otherwise a name that says
        the selection, so a partial dashboard never replaces the full one."""
        stored = self.store.variants()
        _, default_reference = resolve_selection(stored)
        if sorted(self.results) == sorted(stored) and self.reference == default_reference:
            return "dashboard.html"
        import re

        from trtlab.core.workspace import hash_json

        names = [self.reference] + [n for n in self.results if n != self.reference]
        label = "+".join(names)
        if len(label) > 80:
            label = f"{self.reference}+{len(names) - 1}-variants-{hash_json(sorted(names), 6)}"
        return "dashboard-" + re.sub(r"[^A-Za-z0-9_.+@-]", "_", label) + ".html"

    def write_html(self, path=None) -> Path:
        """One self-contained HTML file (figures inlined as base64 PNG), written atomically; returns its path.
        Default: html_name() in the report folder."""
        path = Path(path) if path else self.report_dir() / self.html_name()
        atomic_write_text(path, render_html(self))
        return path


def build_dashboard(store=None, variants=None, reference=None, decode_cache=None, image_root=None, workspace=None,
                    alpha: float = 0.05, focus=None, all_pairs: bool = False,
                    allow_mixed_backends: bool = False) -> Dashboard:
    """Load the chosen variants (default: all stored) from a results store and compute every dashboard table.

    store: a ResultsStore, its folder, a list of them (which must hold one experiment — different models or data
    are refused), or None for the most recently updated store in the workspace. reference: what the others are
    compared with (default fp32 when stored). Significance is each variant against the reference (`all_pairs=True`:
    every pair). Variants evaluated on different backends are refused unless `allow_mixed_backends` (then a note
    says so). `focus`: the variants whose per-variant figures (drift, flips, confusions) are drawn — default all
    when there are at most two, else the two that agree least with the reference. decode_cache (optional) supplies
    thumbnails; without it the evaluation's own cache or the original files are used.
    """
    store, stored = load_results(store, workspace)
    available = list(stored)
    if not available:
        raise UserFileNotFound(f"no stored results in {store.folder}", "evaluate a variant first (python -m "
                               "trtlab demo or calibrate, or trtlab.evaluate(...) / trtlab.compare(...))")
    names, reference = resolve_selection(available, variants, reference)
    results = {name: stored[name] for name in variant_order(names)}  # FP32, FP16, then INT8 in every table
    table = consistency_table(results, reference, compare_with=("fp32", fp16_variant(results) or "fp16"), alpha=alpha,
                              allow_mixed_backends=allow_mixed_backends)
    significance = pairwise_significance(results, alpha=alpha, reference=None if all_pairs else reference,
                                         allow_mixed_backends=allow_mixed_backends)
    dash = Dashboard(store, results, reference, table, significance,
                     decode_cache=decode_cache, image_root=image_root, workspace=workspace)
    ref = results[reference]
    labelled = bool((ref.labels >= 0).any())
    for variant in dash.compared:
        if labelled:
            dash.drift[variant] = per_class_drift(results[variant], ref)
        dash.flips[variant] = flips(results[variant], ref)
        dash.confusions[variant] = introduced_confusions(results[variant], ref)
    if focus is None:
        focus = dash.compared if len(dash.compared) <= DEFAULT_FOCUS else _default_focus(dash)
    else:  # labels, or algorithm names ('minmax') for the best variant calibrated with each
        focus = [_resolved(results, name, reference) for name in focus]
    unknown = [name for name in focus if name not in dash.compared]
    if unknown:
        raise KeyError(f"focus variant(s) {', '.join(map(repr, unknown))} are not compared here; choose from "
                       f"{', '.join(dash.compared) or 'none'}")
    dash.focus = list(focus)
    dash.notes = _notes(dash, stored_count=len(available), alpha=alpha) + list(table.attrs.get("notes", []))
    # Shown below the variant table (issue 35): the evidence comes after the answer and the table.
    rows = [row for row in dash.significance.itertuples() if row.labelled and row.first == reference]
    dash.reference_tests = [_against_reference(row, alpha) for row in rows]
    dash.reference_summary = _reference_summary(rows, reference, alpha)
    return dash


def _resolved(results, name: str, reference: str) -> str:
    try:
        return resolve_variant(results, name, reference)
    except PairError:
        return name  # reported with the other unknown focus names


def _default_focus(dash: Dashboard) -> list[str]:
    """The pair the last stated verdict compared (notebook 03's); else minmax and entropy (the head-to-head the
    workbench exists for) when both are compared; else the two that agree least with the reference."""
    pair = dash.verdict_pair()
    if pair is not None:
        return list(pair)
    algorithms = {int8_algorithm(dash.results[name]) for name in dash.compared}
    if {"minmax", "entropy"} <= algorithms:
        return list(default_pair(dash.results, dash.reference))
    return dash.least_agreeing(DEFAULT_FOCUS)


def _notes(dash: Dashboard, stored_count: int, alpha: float = 0.05) -> list[str]:
    """What the dashboard shows and what it cannot: experiment, store, labels, image counts, verdicts, focus."""
    store, reference, ref = dash.store, dash.reference, dash.results[dash.reference]
    labelled = int((ref.labels >= 0).sum())
    experiment = store.experiment
    notes = [f"Experiment: {experiment.describe() if experiment else store.folder}.",
             f"Results store {store.folder}; reference **{reference}**; variants: {', '.join(dash.results)}."]
    from trtlab.views.report import skipped_note

    if skipped := skipped_note(dash.results, experiment):  # the header's image count vs the tables', explained
        notes.insert(1, f"Skipped: {skipped}")
    # Stores beside this one (same workspace): other models or data, which are never mixed in — say they exist.
    others = sibling_stores(store)
    if others:
        notes.append(f"{len(others)} other results store(s) in this workspace hold other models or data; they are "
                     f"never mixed in — `python -m trtlab dashboard --list` shows them, `--store` opens one.")
    if not dash.compared:
        notes.append(f"Only {reference} is {'stored' if stored_count == 1 else 'selected'}: agreement, "
                     f"significance, per-class drift and flips need a second variant"
                     + (" — evaluate an INT8 or FP16 variant (e.g. python -m trtlab calibrate) and re-run."
                        if stored_count == 1 else " — select another variant."))
    if labelled == 0:
        notes.append(f"None of the {len(ref)} images is labelled: showing consistency only (top-1 agreement, top-5 "
                     f"overlap, logit cosine, flips); accuracy, significance tests and per-class drift need labels.")
    elif labelled < len(ref):
        notes.append(f"{labelled} of {len(ref)} images are labelled: accuracy, significance and per-class drift use "
                     f"those; agreement, cosine and flips use all {len(ref)}.")
    for variant in dash.compared:
        result = dash.results[variant]
        common = len(result.align(ref)[0])
        if common < max(len(result), len(ref)):
            notes.append(f"{variant} holds {len(result)} images and {reference} {len(ref)}: compared on the "
                         f"{common} they share.")
    if len(dash.focus) < len(dash.compared):
        why = ("the pair the last verdict compared" if dash.verdict_pair() == tuple(dash.focus) else
               "minmax and entropy" if {int8_algorithm(dash.results[n]) for n in dash.focus} == {"minmax", "entropy"}
               else f"the least agreeing with {reference}")
        notes.append(f"Per-variant figures for {', '.join(dash.focus)} ({why}); `dash.show_variant(name)` or "
                     f"`focus=[...]` for the others, `dash.compare(a, b)` for any two side by side.")
    return notes


def _reference_summary(rows, reference: str, alpha: float) -> str:
    """The per-variant McNemar tests against the reference in one sentence (the table under it has the numbers)."""
    from trtlab.views.formatting import points

    if not rows:
        return ""
    level, labelled = f"{100 * alpha:g} %", max(row.labelled for row in rows)
    real = [f"{row.second} ({points(row.delta_top1)})" for row in rows if row.significant]
    if not real:
        return (f"McNemar's test against {reference} (table below): no variant's top-1 differs from {reference}'s "
                f"at the {level} level on {labelled} labelled images.")
    rest = "; not for the others" if len(real) < len(rows) else ""
    return (f"McNemar's test against {reference} (table below): a real top-1 difference at the {level} level for "
            f"{', '.join(real)}{rest}.")


def _against_reference(row, alpha: float) -> str:
    """One McNemar row (reference first) as a sentence that names who gets which images right."""
    from trtlab.views.formatting import points, pvalue

    verdict = "a real difference" if row.significant else "not a real difference"
    return (f"{row.second} vs {row.first}: {points(row.delta_top1)} top-1 on {row.labelled} labelled images; "
            f"only {row.first} right on {row.b}, only {row.second} on {row.c} (McNemar "
            f"{'exact' if row.method == 'exact' else 'χ²'} p = {pvalue(row.pvalue)}): {verdict} at the {100 * alpha:g} % "
            f"level.")
