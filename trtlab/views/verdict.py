"""Head to head: the question the workbench exists for — which of two variants (typically INT8 minmax vs entropy)
to keep, and whether the difference between them is real.

`head_to_head(results, a, b)` reads stored results (and the variants' calibration caches) only: both variants'
accuracy and agreement with the reference with 95 % intervals, McNemar's test between the two (not each against
the reference), the classes each loses or gains against the reference side by side, the tensors whose calibration
thresholds differ most (named by the model's blocks), the paired per-image fidelity of both to the reference, and
one sentence (views.decision.decide) saying which to ship. Notebook 03's `result.verdict()`, the A/B widget, the
quickstart and the dashboard's `dash.compare()` all show a `HeadToHead`; `python -m trtlab calibrate` prints its
sentence. Labels longer than formatting.ALIAS_LIMIT head columns as A, B with a legend line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.evaluation.metrics import accuracy, agreement, consistency_table, per_class_drift
from trtlab.evaluation.results import VariantResult
from trtlab.evaluation.significance import PAIRED_INTERVAL_METHOD, compare_accuracy, compare_agreement
from trtlab.views.decision import ALPHA, PairError, Verdict, decide  # noqa: F401  (PairError: re-exported)
from trtlab.views.formatting import (MISSING, Table, alias_legend, aliases, cosine, nats, number, percent, points,
                                     pvalue, ratio, signed_nats)
from trtlab.views.scale_differences import (SCALE_ROWS, _graph_of,  # noqa: F401 (re-exported)
                                            calibration_cache_of, int8_algorithm, scale_differences)
from trtlab.views.tables import variant_view

DRIFT_ROWS = 15


# -- which two ------------------------------------------------------------------------------------------------------
def _rank_key(result: VariantResult, reference: VariantResult):
    """Best first: top-1 accuracy, then agreement with the reference, then mean logit cosine."""
    top1 = accuracy(result)["top1"]
    agree = agreement(result, reference)
    return (-(top1 if math.isfinite(top1) else -1), -agree["top1_agreement"], -agree["cosine_mean"])


def default_pair(results: dict[str, VariantResult], reference: str, preferred=None) -> tuple[str, str]:
    """The pair to compare when none is named: `preferred` (the pair the last stated verdict compared,
    ResultsStore.last_verdict) when both are stored; else minmax vs entropy when both are stored (the best of each,
    calibrated alike — same images and guards — and the unguarded pair before a guarded one: plain algorithm names
    never pair a guarded variant with an unguarded one); else, where a recovered variant (quantization.recovery)
    and the same recipe without recovery are both stored, the best such pair (plain, recovered); else the best two
    INT8 variants; else the best two variants other than the reference."""
    if preferred and all(name in results and name != reference for name in preferred) and \
            preferred[0] != preferred[1]:
        return tuple(preferred)
    ref = results[reference]
    others = [name for name in results if name != reference]
    ranked = sorted(others, key=lambda name: (_recipe_count(results[name]), _rank_key(results[name], ref)))
    algorithms = {name: int8_algorithm(results[name]) for name in ranked}
    twins = recovered_pairs(results, ranked)
    if twins:  # recovery asked for: recovered against plain, the question the user asked
        return twins[0]
    minmax = [n for n in ranked if algorithms[n] == "minmax"]
    entropy = [n for n in ranked if algorithms[n] == "entropy"]
    if minmax and entropy:
        alike = [(m, e) for m in minmax for e in entropy if _calibrated_alike(results[m], results[e])]
        return alike[0] if alike else (minmax[0], entropy[0])
    int8 = [n for n in ranked if algorithms[n]]
    pool = int8 if len(int8) >= 2 else ranked
    if len(pool) < 2:
        raise PairError(f"a head-to-head needs two variants besides the reference {reference!r}; stored: "
                        f"{', '.join(results)}; evaluate another (e.g. Recipe(algorithm='minmax') and 'entropy')")
    return pool[0], pool[1]


def recovered_pairs(results: dict[str, VariantResult], ranked: list[str]) -> list[tuple[str, str]]:
    """[(plain, recovered)] for each stored recovered variant (best first) whose recipe without recovery is stored."""
    def recipe(name):
        return dict((results[name].record.get("recipe") or {}))

    pairs = []
    for name in ranked:
        mine = recipe(name)
        if not mine.get("recovery"):
            continue
        plain = {k: v for k, v in mine.items() if k != "recovery"}
        twin = next((n for n in ranked if n != name and recipe(n) == plain), None)
        if twin is not None:
            pairs.append((twin, name))
    return pairs


def resolve_variant(results: dict[str, VariantResult], name: str | None, reference: str,
                    like: str | None = None) -> str | None:
    """A stored label, or an algorithm name ('minmax', 'entropy', 'percentile') for an INT8 variant calibrated with
    it — so notebooks need not spell calibration sizes ('int8-minmax@512'): the one calibrated alike with `like`
    (the other side of a pair) when there is one, else the plain one (no guards, then no recovery), else the best.
    Plain first, so that compare('minmax', 'percentile') never pits a guarded or recovered variant against a plain
    one when the plain pair is stored."""
    if name is None or name in results:
        return name
    ref = results[reference]
    matching = sorted((n for n in results if n != reference and int8_algorithm(results[n]) == name),
                      key=lambda n: (like is None or not _calibrated_alike(results[n], results[like]),
                                     _recipe_count(results[n]), _recipe_count(results[n], "recovery"),
                                     _rank_key(results[n], ref)))
    if not matching:
        raise PairError(f"{name!r} is neither a stored variant nor the algorithm of one; stored: {', '.join(results)}")
    return matching[0]


def _recipe_count(result: VariantResult, field: str = "guards") -> int:
    """How many guards (or recovery methods) the variant's recipe has: 0 for the plain recipe."""
    return len((result.record.get("recipe") or {}).get(field) or ())


def _calibrated_alike(a: VariantResult, b: VariantResult) -> bool:
    ra, rb = a.record.get("recipe") or {}, b.record.get("recipe") or {}
    keys = ("calibration_images", "calibration_batch", "guards", "seed", "recovery")
    return all(ra.get(k) == rb.get(k) for k in keys)


# -- the result -----------------------------------------------------------------------------------------------------
@dataclass
class HeadToHead:
    """Two variants side by side against a reference. Numbers in `summary` (consistency_table rows), `accuracy_test`
    and `agreement_test` (McNemar, first vs second), `drift` (per-class accuracy of both, side by side) and
    `scales` (calibration thresholds), `decision` (views.decision.Verdict: which to ship, the paired fidelity and
    the sample size it rests on); `sentence` is the decision's."""

    first: str
    second: str
    reference: str
    summary: object
    accuracy_test: dict
    agreement_test: dict
    drift: object
    scales: object | None = None
    scale_notes: list = field(default_factory=list)
    decision: Verdict | None = None

    @property
    def sentence(self) -> str:
        return self.decision.sentence if self.decision is not None else ""

    @property
    def short(self) -> dict:
        """{label: what heads a column}: long labels become A, B (legend())."""
        return aliases([self.first, self.second])

    def legend(self) -> str:
        return alias_legend(self.short)

    # -- tables for people --------------------------------------------------------------------------------------
    def summary_table(self) -> Table:
        return variant_view(self.summary)

    def test_table(self) -> Table:
        """McNemar between the two, on correctness (labelled images) and on agreement with the reference: the
        columns name the variants, so the counts read the right way round."""
        import pandas as pd

        a, b = self.short[self.first], self.short[self.second]
        rows, index = [], []
        for label, test, total in (("top-1 right", self.accuracy_test, self.accuracy_test["labelled"]),
                                   (f"top-1 agrees with {self.reference}", self.agreement_test,
                                    self.agreement_test["images"])):
            if not total:
                continue
            index.append(f"{label} ({total} {'labelled ' if test is self.accuracy_test else ''}images)")
            rows.append({f"only {a}": test["b"], f"only {b}": test["c"],
                         "McNemar p": f"{pvalue(test['pvalue'])} ({'exact' if test['method'] == 'exact' else 'χ²'})",
                         "real difference? (5 %)": "yes" if test["significant"] else "no"})
        shown = pd.DataFrame(rows, index=pd.Index(index, name="outcome"))
        return Table(shown, shown, caption=f"Counts: images where only that variant is right (or agrees with "
                                           f"{self.reference}); McNemar's test between {a} and {b}."
                     + (f" {self.legend()}." if self.legend() else ""))

    def fidelity_table(self) -> Table | None:
        """Both variants' per-image fidelity to the reference (means over the same images) and the paired 95 %
        interval of each difference: the evidence the decision reads where top-1 cannot decide."""
        import pandas as pd

        if self.decision is None or not self.decision.fidelity["images"]:
            return None
        fidelity = self.decision.fidelity
        a, b = self.short[self.first], self.short[self.second]
        rows, index = [], []
        for metric, label, show, better in (
                ("cosine", "logit cosine (higher is closer)", cosine, 1),
                ("kl", "KL of the softmax, nats (lower is closer)", nats, -1),
                ("top1_flip", "top-1 flips (lower is closer)", percent, -1),
                ("top5_flip", "top-5 classes changed (lower is closer)", percent, -1)):
            row = fidelity[metric]
            low, high = row["low"], row["high"]
            if not (np.isfinite(low) and np.isfinite(high)):
                closer = MISSING
            elif low > 0 or high < 0:
                closer = a if (low > 0) == (better > 0) else b
            else:
                closer = "not distinguishable"
            spread = MISSING if not np.isfinite(low) else (
                f"{_signed(row['difference'], metric)} ({_signed(low, metric)} … {_signed(high, metric)})")
            rows.append({a: show(row["first"]), b: show(row["second"]), f"{a} − {b} (95 % CI)": spread,
                         "closer to " + self.reference: closer})
            index.append(label)
        shown = pd.DataFrame(rows, index=pd.Index(index, name=f"fidelity to {self.reference}"))
        caption = (f"Per image against {self.reference} on the {fidelity['images']} images all three hold; "
                   f"intervals: {PAIRED_INTERVAL_METHOD}.") + (f" {self.legend()}." if self.legend() else "")
        return Table(shown, fidelity, caption=caption)

    def drift_table(self) -> Table:
        """Classes either variant changes against the reference: both accuracies side by side, worst first."""
        import pandas as pd

        changed = self.drift[(self.drift["delta_first"] != 0) | (self.drift["delta_second"] != 0)].head(DRIFT_ROWS)
        shown = pd.DataFrame({
            "images": changed["images"].astype(int).to_numpy(),
            self.reference: [percent(v) for v in changed["reference_accuracy"]],
            self.short[self.first]: [_with_delta(v, d) for v, d in zip(changed["first_accuracy"],
                                                                        changed["delta_first"])],
            self.short[self.second]: [_with_delta(v, d) for v, d in zip(changed["second_accuracy"],
                                                                        changed["delta_second"])],
        }, index=pd.Index(list(changed["name"]), name="class"))
        more = int(((self.drift["delta_first"] != 0) | (self.drift["delta_second"] != 0)).sum()) - len(changed)
        return Table(shown, self.drift, caption=f"Per-class top-1 accuracy against {self.reference}"
                     + (f"; {more} more changed classes not shown." if more > 0 else "."))

    def scale_table(self) -> Table | None:
        if self.scales is None:
            return None
        import pandas as pd

        a, b = self.short[self.first], self.short[self.second]
        shown = pd.DataFrame({
            f"{a} threshold": [number(v) for v in self.scales["first_threshold"]],
            f"{b} threshold": [number(v) for v in self.scales["second_threshold"]],
            f"{a} / {b}": [ratio(v) for v in self.scales["ratio"]],
            "tensor": list(self.scales["tensor"]),
        }, index=pd.Index(list(self.scales["block"]), name="block"))
        return Table(shown, self.scales, caption=" ".join(self.scale_notes + ([f"{self.legend()}."] if self.legend()
                                                                              else [])))

    def losses(self) -> str:
        """Which classes each variant loses against the reference — and gains, where it does, so a variant whose
        top-1 equals the reference's does not read as only losing — in one line."""
        parts = []
        for name, column in ((self.first, "delta_first"), (self.second, "delta_second")):
            lost = self.drift[self.drift[column] < 0].sort_values(column, kind="stable")
            gained = self.drift[self.drift[column] > 0].sort_values(column, ascending=False, kind="stable")
            parts.append(f"{name} loses {_classes(len(lost))}{_named(lost)}"
                         + (f", gains {len(gained)}{_named(gained)}" if len(gained) else ""))
        return "; ".join(parts) + f" against {self.reference}."

    def figure(self):
        return plot_drift_side_by_side(self)

    # -- display --------------------------------------------------------------------------------------------------
    def _sections(self):
        """(heading, Table | text | figure) in display order."""
        a, b = self.short[self.first], self.short[self.second]
        sections = [(None, self.sentence), ("Accuracy and agreement", self.summary_table()),
                    (f"Is the top-1 difference real? McNemar's test between {a} and {b}", self.test_table())]
        fidelity = self.fidelity_table()
        if fidelity is not None:
            sections.append((f"Which is closer to {self.reference}? Paired per-image fidelity", fidelity))
        if self.accuracy_test["labelled"]:
            changed = bool(((self.drift["delta_first"] != 0) | (self.drift["delta_second"] != 0)).any())
            # Nothing changed: the losses line says so; a table and figure would be empty.
            sections += [("Classes each loses or gains", self.losses())] + ([(None, self.drift_table()), (None, "figure")]
                                                                   if changed else [])
        table = self.scale_table()
        # no table (identical thresholds, or none to compare): the notes stand under a heading that says so
        sections.append(("Calibration thresholds that differ most", table) if table is not None else
                        ("Calibration thresholds", " ".join(self.scale_notes)))
        return sections

    def _ipython_display_(self):
        from IPython.display import HTML, Image, Markdown, display

        from trtlab.views.figures import figure_png

        display(Markdown(f"### {self.headline()}" + (f"\n\n{self.legend()}" if self.legend() else "")))
        for heading, part in self._sections():
            if heading:
                display(Markdown(f"**{heading}**"))
            if part == "figure":
                display(Image(data=figure_png(self.figure()), format="png"))
            elif isinstance(part, Table):
                display(HTML(part.html()))
            else:
                display(Markdown(part))

    def headline(self) -> str:
        return f"Head to head: {self.short[self.first]} vs {self.short[self.second]} (reference {self.reference})"

    def html(self, figure_png_bytes: bytes | None = None) -> str:
        """The head-to-head as an HTML fragment (the dashboard's section)."""
        import base64
        import html as _html

        from trtlab.views.figures import figure_png

        parts = [f"<p><b>{_html.escape(self.sentence)}</b></p>"]
        if self.legend():
            parts.append(f"<p>{_html.escape(self.legend())}</p>")
        for heading, part in self._sections()[1:]:
            if heading:
                parts.append(f"<h3>{_html.escape(heading)}</h3>")
            if part == "figure":
                data = figure_png_bytes or figure_png(self.figure())
                parts.append(f'<img alt="per-class drift side by side" src="data:image/png;base64,'
                             f'{base64.b64encode(data).decode("ascii")}">')
            elif isinstance(part, Table):
                parts.append(part.html())
            else:
                parts.append(f"<p>{_html.escape(part)}</p>")
        return "\n".join(parts)

    def text(self) -> str:
        lines = [self.headline()] + ([self.legend()] if self.legend() else []) + [self.sentence, ""]
        for heading, part in self._sections()[1:]:
            if part == "figure":
                continue
            if heading:
                lines.append(f"{heading}:")
            lines += [part.text() if isinstance(part, Table) else part, ""]
        return "\n".join(lines).rstrip() + "\n"

    def __repr__(self) -> str:
        return self.text()


def _signed(value, metric: str) -> str:
    """A difference with its sign: cosines and KL to 4 decimals (or 2 significant digits when smaller), flips in
    points."""
    if not np.isfinite(value):
        return MISSING
    if metric in ("top1_flip", "top5_flip"):
        return points(value)
    if metric == "kl":
        return signed_nats(value)
    return f"{value:+.4f}"


def _with_delta(value, delta) -> str:
    return percent(value) + ("" if not delta else f" ({points(delta, 0)})")


# -- computing it ---------------------------------------------------------------------------------------------------
def head_to_head(results: dict[str, VariantResult], first: str | None = None, second: str | None = None,
                 reference: str | None = None, caches: dict | None = None, alpha: float = ALPHA,
                 preferred=None, latencies: dict | None = None) -> HeadToHead:
    """The head-to-head of `first` and `second` (default: default_pair, which takes `preferred` — the pair of the
    last stated verdict — when both are stored) against `reference` (default fp32). Each is a stored label or an
    algorithm name ('minmax': the variant calibrated with minmax alike with the other side, else the unguarded
    one).

    caches: {variant: calibration cache path} where known (A/B results know theirs); otherwise each INT8 variant's
    cache is looked up beside the model its run record names. The verdict ends with the speed clause of the INT8
    variant it points to (speed_of): measured where `latencies` holds TensorRT engine timings, else estimated."""
    reference = reference or ("fp32" if "fp32" in results else next(iter(results)))
    if reference not in results:
        raise PairError(f"reference {reference!r} is not stored here; stored: {', '.join(results)}")
    named = [n for n in (first, second) if n is not None and n in results]
    like = named[0] if named else None
    first = resolve_variant(results, first, reference, like)
    second = resolve_variant(results, second, reference, like or first)
    if first is None or second is None:
        if first is None and second is None:
            first, second = default_pair(results, reference, preferred)
        else:
            given = first or second
            rest = {n: r for n, r in results.items() if n != given}
            alike = [n for n in rest if n != reference and _calibrated_alike(results[n], results[given])
                     and int8_algorithm(results[n]) and int8_algorithm(results[n]) != int8_algorithm(results[given])]
            partner = alike or ([n for n in default_pair(rest, reference) if n != given] if len(rest) > 2 else
                                [n for n in rest if n != reference])
            if not partner:
                raise PairError(f"no second variant to compare {given!r} with; stored: {', '.join(results)}")
            first, second = given, partner[0]
    if first == second:
        raise PairError(f"compare two different variants (both are {first!r})")
    ref, a, b = results[reference], results[first], results[second]
    summary = consistency_table({reference: ref, first: a, second: b}, reference, compare_with=(), alpha=alpha)
    acc_test = compare_accuracy(a, b, alpha)
    acc_test.pop("table")
    agree_test = compare_agreement(a, b, ref, alpha)
    drift = _drift_side_by_side(a, b, ref)
    caches = dict(caches or {})
    for name in (first, second):
        caches.setdefault(name, calibration_cache_of(results[name]))
    scales, notes = scale_differences(first, caches.get(first), second, caches.get(second),
                                      names=_graph_of(results[first]) or _graph_of(ref))
    decision = decide(results, first, second, reference, alpha, accuracy_test=acc_test, agreement_test=agree_test)
    decision = decision.with_speed(speed_of(results.get(decision.speed_variant), latencies))
    return HeadToHead(first, second, reference, summary, acc_test, agree_test, drift, scales, notes, decision)


def speed_of(result: VariantResult | None, latencies: dict | None = None, batch: int = 1):
    """The speed clause (graph.speed) of an INT8 variant's stored result: measured where TensorRT engines were timed
    (`latencies`: {label: median ms at one batch} holding this variant's and an FP16 variant's, e.g. the A/B's
    engine column), else the estimate of its graph (the run record names it) at `batch`; None for a variant that is
    not INT8 or whose graph is gone (then no speed is claimed)."""
    from trtlab.graph.fusion import precision_report
    from trtlab.graph.speed import speed_clause

    if result is None or int8_algorithm(result) is None:
        return None
    latencies = latencies or {}
    fp16 = next((ms for label, ms in latencies.items() if label == "fp16" or label.startswith("fp16+")), None)
    measured = {"fp16": fp16, "int8": latencies[result.variant]} if fp16 and latencies.get(result.variant) else None
    model = result.record.get("model")
    if not model or not Path(str(model)).is_file():
        return None
    return speed_clause(precision_report(str(model)), measured, batch=int(latencies.get("batch", batch)))


def _drift_side_by_side(a: VariantResult, b: VariantResult, ref: VariantResult):
    """One row per labelled class: images, reference accuracy, both variants' accuracies and changes; worst first."""
    first, second = per_class_drift(a, ref), per_class_drift(b, ref)
    columns = ["class", "name", "images", "reference_accuracy"]
    merged = first[columns + ["variant_accuracy", "delta"]].rename(
        columns={"variant_accuracy": "first_accuracy", "delta": "delta_first"}).merge(
        second[["class", "variant_accuracy", "delta"]].rename(
            columns={"variant_accuracy": "second_accuracy", "delta": "delta_second"}), on="class", how="outer")
    merged["worst"] = merged[["delta_first", "delta_second"]].min(axis=1)
    merged = merged.sort_values(["worst", "images", "class"], ascending=[True, False, True], kind="stable")
    return merged.drop(columns="worst").reset_index(drop=True)


# -- figure ---------------------------------------------------------------------------------------------------------
def plot_drift_side_by_side(h: HeadToHead, top: int = DRIFT_ROWS):
    """Per-class top-1 change against the reference of both variants, side by side on one class axis."""
    from trtlab.views.figures import _figure, _panel_inches, _short, fit

    changed = h.drift[(h.drift["delta_first"] != 0) | (h.drift["delta_second"] != 0)].head(top)
    fig = _figure(11.0, max(2.6, 0.3 * len(changed) + 2.0))
    axes = fig.subplots(1, 2, sharey=True)
    fig.suptitle(f"Per-class top-1 change against {h.reference}, side by side (red: the class loses, green: gains)",
                 fontsize=11)
    if not len(changed):
        for ax in axes:
            ax.text(0.5, 0.5, "no class changed", ha="center", va="center", transform=ax.transAxes)
            ax.set_yticks([])
    else:
        y = np.arange(len(changed))[::-1]
        span = max(1.0, float(np.nanmax(np.abs(changed[["delta_first", "delta_second"]].to_numpy(float)))) * 100)
        for ax, column in zip(axes, ("delta_first", "delta_second")):
            values = changed[column].fillna(0).to_numpy(float) * 100
            ax.barh(y, values, color=["#c0392b" if v < 0 else "#27ae60" for v in values])
            ax.axvline(0, color="black", linewidth=0.8)
            ax.set_xlim(-span * 1.08, span * 1.08)
            ax.grid(axis="x", color="#dddddd", linewidth=0.6)
            ax.set_axisbelow(True)
        axes[0].set_yticks(y, [f"{_short(n, 24)} (n={int(i)})" for n, i in zip(changed["name"], changed["images"])],
                           fontsize=8)
    for ax, name, column in zip(axes, (h.short[h.first], h.short[h.second]), ("delta_first", "delta_second")):
        lost, gained = int((h.drift[column] < 0).sum()), int((h.drift[column] > 0).sum())
        ax.set_title(fit(f"{name}: loses {_classes(lost)}" + (f", gains {gained}" if gained else ""),
                         _panel_inches(ax), 10), fontsize=10)
        ax.set_xlabel(f"Δ top-1 vs {h.reference} (percentage points)")
    axes[1].tick_params(labelleft=False)
    return fig


def _classes(count: int) -> str:
    return f"{count} class{'es' if count != 1 else ''}"


def _named(classes) -> str:
    """' (a, b, c)' — the first five class names of a drift frame, with how many more; '' for none."""
    if not len(classes):
        return ""
    return " (" + ", ".join(classes["name"].head(5)) + (f" and {len(classes) - 5} more" if len(classes) > 5
                                                          else "") + ")"
