"""What `trtlab.graph.fusion.precision_report` returns and how it reads: one predicted TensorRT layer (`Layer`), the
report (`PrecisionReport`: its answer in one sentence, the summary, the layer table) and `precision_overview` (one row
per variant, notebook 02's table).

The answer comes first: `PrecisionReport.sentence()` says what TensorRT will compute in INT8, FP16 and FP32 (shares of
the multiply-accumulates) and whether INT8 should beat FP16, with the per-GPU speed estimate and its band
(trtlab.graph.roofline) — an estimate from the graph, never a measurement; a TensorRT engine timed on the GPU
replaces it (trtlab.graph.speed). A prediction that rests on no documented TensorRT rule carries its assumption
(`Layer.assumed`) and is listed as such, not asserted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from trtlab.graph.fusion_rules import UINT8_FIX
from trtlab.graph.guards import WEIGHTED_OPS

LIMITS = ("Predicted from the graph: TensorRT's tactic choice, its reformat layers (layout/precision changes "
          "between layers), whether each allowed fusion is taken on a given GPU, and latency show only in a built "
          "engine (engine inspector / profiler).")
#: INT8 share of the MACs from which INT8 is expected to beat FP16 (below it, too much stays float for INT8's
#: 2× tensor-core rate to pay for its Q/DQ and reformat layers).
INT8_SHARE_TO_WIN = 0.8
#: The batch the one-sentence answer estimates at (notebook 02 shows batch 1 beside it).
SENTENCE_BATCH = 32


@dataclass
class Layer:
    """One predicted TensorRT layer: the ONNX nodes fused into it (main node first) and its precisions."""

    name: str
    kind: str  # the main node's op type, or 'Quantize' / 'Dequantize' / 'Cast' for layers of their own
    nodes: list
    computes_in: str  # 'INT8' | 'FP16' | 'FP32' | '-' (moves data only)
    output: str  # the precision it writes ('UINT8' for a UINT8 Quantize, which TensorRT does not support)
    macs: int = 0
    note: str = ""
    assumed: str = ""  # the undocumented assumption this prediction rests on ('' when a documented rule decides)
    elements: dict = field(default_factory=dict)  # per image: {'in': n, 'weights': n, 'out': n} (roofline bytes)


@dataclass
class PrecisionReport:
    """The prediction for one graph: layers, per-node rows, MAC shares and the lists the summary names."""

    model: str
    layers: list
    nodes: object  # pandas DataFrame, one row per ONNX node
    mac_share: dict  # {'INT8': share, 'FP16': share, 'FP32': share} of the weighted layers' MACs
    total_macs: int
    fp32_islands: list = field(default_factory=list)  # [{'nodes': [...], 'macs': n, 'guarded': bool}]
    unfused_qdq: list = field(default_factory=list)  # [{'node', 'op', 'why'}]
    input_quantize: list = field(default_factory=list)  # Q nodes quantizing the graph input
    boundaries: list = field(default_factory=list)  # [{'node', 'from', 'to', 'where'}]
    guarded_fp32: list = field(default_factory=list)  # nodes the precision converter kept FP32 by a guard
    folded_weight_quantizes: list = field(default_factory=list)  # weight Qs TensorRT applies at build time
    unsupported_qdq: list = field(default_factory=list)  # [{'node', 'op', 'why'}]: UINT8 Q/DQ TensorRT does not take

    @property
    def fp32_outside_guards(self) -> list:
        """FP32 compute nodes that no guard asked for."""
        return [n for island in self.fp32_islands for n in island["nodes"] if n not in set(self.guarded_fp32)]

    @property
    def assumptions(self) -> list:
        """[{'layer', 'assumed'}] for every prediction that rests on no documented TensorRT rule."""
        return [{"layer": layer.name, "assumed": layer.assumed} for layer in self.layers if layer.assumed]

    def table(self):
        """The predicted layers that compute (weighted, pooling, element-wise), plus unfused Q/DQ and Casts."""
        import pandas as pd

        rows = [{"layer": " + ".join(layer.nodes[:4]) + (f" + {len(layer.nodes) - 4} more" if len(layer.nodes) > 4
                                                           else ""), "type": layer.kind,
                 "computes in": layer.computes_in, "writes": layer.output, "MACs": layer.macs,
                 "note": layer.note + (f" [undocumented / assumed: {layer.assumed}]" if layer.assumed else "")}
                for layer in self.layers if layer.computes_in != "-"]
        return pd.DataFrame(rows, columns=["layer", "type", "computes in", "writes", "MACs", "note"])

    def summary(self) -> dict:
        counts: dict[str, int] = {}
        for layer in self.layers:
            if layer.kind in WEIGHTED_OPS:
                counts[layer.computes_in] = counts.get(layer.computes_in, 0) + 1
        return {"model": self.model, "mac_share": {k: round(v, 4) for k, v in self.mac_share.items()},
                "gmacs_per_image": round(self.total_macs / 1e9, 4), "weighted_layers": counts,
                "fp32_islands": len(self.fp32_islands), "fp32_outside_guards": len(self.fp32_outside_guards),
                "unfused_qdq": len(self.unfused_qdq), "input_quantize": len(self.input_quantize),
                "casts": len(self.boundaries), "folded_weight_quantizes": len(self.folded_weight_quantizes),
                "assumed": len(self.assumptions), "unsupported_qdq": len(self.unsupported_qdq)}

    def speedup_estimate(self, batch: int = 32, gpus=None, timing: str = "cuda-graph"):
        """Per GPU, the estimated FP16 and INT8 engine times and INT8's speed-up, each with its band
        (trtlab.graph.roofline: per predicted layer, kernel cost + compute or memory; before any build)."""
        from trtlab.graph.roofline import speedup_estimate

        return speedup_estimate(self, batch=batch, gpus=gpus, timing=timing)

    def sentence(self) -> str:
        """The answer in one sentence: MAC shares by precision and whether INT8 should beat FP16 (the speed
        estimate's range over the GPUs it knows, and its band)."""
        from trtlab.graph.speed import SHIP_THRESHOLD

        share = self.mac_share
        pct = lambda k: f"{100 * share.get(k, 0.0):.0f} %"  # noqa: E731
        if self.unsupported_qdq:  # the graph does not build: no share or estimate is a prediction of an engine
            return (f"TensorRT does not support this graph's {len(self.unsupported_qdq)} UINT8 Q/DQ node(s) "
                    f"(ONNX-TensorRT takes UINT8 only as a network input or output), so none of its "
                    f"{self.total_macs / 1e9:.2f} GMAC per image is INT8 on TensorRT: {UINT8_FIX}.")
        what = (f"TensorRT will compute {pct('INT8')} of this graph's {self.total_macs / 1e9:.2f} GMAC per image in "
                f"INT8, {pct('FP16')} in FP16 and {pct('FP32')} in FP32")
        if share.get("INT8", 0.0) == 0.0:
            return what + ": nothing runs in INT8 here, so there is no INT8-vs-FP16 question."
        estimate = self.speedup_estimate(batch=SENTENCE_BATCH)
        low, high = float(estimate["speed-up (estimate)"].min()), float(estimate["speed-up (estimate)"].max())
        ratio = f"{low:.1f}×" if round(low, 1) == round(high, 1) else f"{low:.1f}–{high:.1f}×"
        band_low = float(estimate["speed-up low"].min())
        band = f"{band_low:.1f}–{float(estimate['speed-up high'].max()):.1f}×"
        costs = [f"{n} {what_}" for n, what_ in ((len(self.unfused_qdq), "unfused Q/DQ"),
                                                 (len(self.fp32_outside_guards), "FP32 node(s) outside guards"))
                 if n]
        # "should" only when every GPU's estimate pays for quantizing and no GPU's band reaches below FP16
        wins = share["INT8"] >= INT8_SHARE_TO_WIN and low >= SHIP_THRESHOLD and band_low >= 1.0
        verdict = "so INT8 should beat FP16" if wins else "so INT8 may not beat FP16"
        # the batch next to the verdict: the speed clause under it speaks of batch 1, where the answer can differ
        return (f"{what}, {verdict} at batch {estimate.attrs['batch']} (estimate {ratio} faster than FP16 on "
                f"{', '.join(estimate.index)}, band {band}" + (f"; against it: {', '.join(costs)}" if costs else "")
                + ").")

    def headline(self) -> str:
        share = " · ".join(f"{k} {100 * v:.1f} %" for k, v in self.mac_share.items())
        s = self.summary()
        islands = (f"{s['fp32_islands']} FP32 island(s) ({s['fp32_outside_guards']} node(s) outside guards)"
                   if self.fp32_islands else "no FP32 island")
        weighted = ", ".join(f"{n} {k}" for k, n in sorted(s["weighted_layers"].items()))
        assumed = f" · {s['assumed']} prediction(s) undocumented / assumed" if s["assumed"] else ""
        unsupported = (f"{s['unsupported_qdq']} UINT8 Q/DQ unsupported by TensorRT (not INT8) · "
                       if s["unsupported_qdq"] else "")
        return (f"{unsupported}MACs: {share} of {self.total_macs / 1e9:.3f} GMAC per image · "
                f"weighted layers: {weighted} · "
                f"{islands} · {len(self.unfused_qdq)} unfused Q/DQ · {len(self.boundaries)} Cast(s){assumed}")

    def _lists(self, limit: int | None):
        cut = (lambda items: items[:limit]) if limit else (lambda items: items)  # noqa: E731
        return (("Unsupported by TensorRT", [f"{q['node']} ({q['why']})" for q in self.unsupported_qdq]),
                ("FP32 islands", [", ".join(cut(i["nodes"])) for i in self.fp32_islands]),
                ("Unfused Q/DQ", [f"{q['node']} ({q['why']})" for q in self.unfused_qdq]),
                ("Casts", [f"{b['node']}: {b['from']}→{b['to']} ({b['where']})" for b in self.boundaries]),
                ("Undocumented / assumed", [f"{a['layer']}: {a['assumed']}" for a in self.assumptions]))

    def __repr__(self) -> str:
        import pandas as pd

        lines = [self.sentence(), f"Precision report of {self.model} (TensorRT predicted from the graph, no GPU)",
                 self.headline()]
        for title, items in self._lists(6):
            if items:
                lines.append(f"{title}: " + "; ".join(items[:8]) + (" …" if len(items) > 8 else ""))
        with pd.option_context("display.max_rows", 400, "display.width", 200, "display.max_colwidth", None):
            lines.append(self._shown().to_string(index=False))
        lines.append(LIMITS)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        import pandas as pd

        with pd.option_context("display.max_colwidth", None):  # pandas cuts cells at 50 characters by default
            table = self._shown().to_html(index=False)
        items = [f"<li><b>{title}</b>: {html.escape('; '.join(entries) if entries else 'none')}</li>"
                 for title, entries in self._lists(None) if entries or title != "Unsupported by TensorRT"]
        return (f"<p><b>{html.escape(self.sentence())}</b></p><p>Precision report of {html.escape(self.model)} "
                f"(TensorRT predicted from the graph, no GPU)<br>{html.escape(self.headline())}</p>"
                f"<ul>{''.join(items)}</ul>" + table + f"<p><i>{html.escape(LIMITS)}</i></p>")

    def _shown(self):
        """The table as people read it: MACs with thousands separators (the data keeps the integers)."""
        shown = self.table()
        shown["MACs"] = [f"{int(m):,}" if m else "" for m in shown["MACs"]]
        return shown


class PrecisionOverview:
    """Notebook 02's answer: a TensorRT measurement first where one was made, then the one sentence of what TensorRT
    will compute in INT8 / FP16 / FP32 and whether INT8 should beat FP16, the speed clause (trtlab.graph.speed:
    measured, else estimated), the table of every variant, and — where no engine was timed — the per-GPU speed
    estimate. `.table` is the DataFrame (whose attributes it also answers: `.loc`, `.to_dict`…)."""

    def __init__(self, table, sentence: str, estimate=None, measured: str = "", speed=None):
        self.table, self.sentence, self.estimate, self.measured = table, sentence, estimate, measured
        self.speed = speed

    def __getattr__(self, name):
        # `table` not set yet (copy / unpickling): no recursion; dunders (__deepcopy__, …) are this object's own
        if name == "table" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.table, name)

    def __getitem__(self, key):
        return self.table[key]

    def __len__(self) -> int:
        return len(self.table)

    def lines(self) -> list:
        """The sentences, answer first: the measurement where a TensorRT engine was timed, then the prediction, then
        the speed clause."""
        return [line for line in (self.measured, self.sentence, str(self.speed or "")) if line]

    def __repr__(self) -> str:
        parts = self.lines() + [self.table.to_string()]
        if self.estimate is not None:
            parts += [f"INT8 vs FP16 per GPU, batch {self.estimate.attrs['batch']} — {self.estimate.attrs['note']}",
                      self.estimate.to_string()]
        return "\n".join(parts + [LIMITS])

    def _repr_html_(self) -> str:
        import html

        parts = [f"<p><b>{html.escape(line)}</b></p>" for line in self.lines()] + [self.table.to_html()]
        if self.estimate is not None:
            parts += [f"<p>INT8 vs FP16 per GPU, batch {self.estimate.attrs['batch']} — "
                      f"<i>{html.escape(self.estimate.attrs['note'])}</i></p>",
                      self.estimate.to_html()]
        return "".join(parts) + f"<p><i>{html.escape(LIMITS)}</i></p>"


def measured_sentence(latency) -> str:
    """The INT8-vs-FP16 ratio of a TensorRT latency report (trtlab.workflows: its `backend` names TensorRT and its
    table's attrs['ratio'] is INT8 / FP16 median latency per batch size), or '' for anything else — CPU timings of
    Q/DQ graphs are never a latency comparison."""
    table = getattr(latency, "table", None)
    ratio = getattr(table, "attrs", {}).get("ratio")
    if latency is None or not str(getattr(latency, "backend", "")).startswith("TensorRT") or ratio is None \
            or not len(ratio):
        return ""
    faster = ", ".join(f"{1 / float(r):.2f}× at batch {b}" for b, r in ratio.items())
    variant, reference = str(ratio.name).split("/")
    return (f"Measured on TensorRT (GPU time): {variant} runs {faster} as fast as {reference} — what the engines do, "
            f"ahead of any prediction below.")


def precision_overview(reports: dict, latency=None):
    """One row per report (label → PrecisionReport): MAC shares, weighted layers by precision, FP32 islands,
    unfused Q/DQ, Casts and the predictions resting on assumptions — notebook 02's table of every variant — led by
    the first INT8 variant's one-sentence answer and its speed clause at batch 1 (trtlab.graph.speed), followed by
    its per-GPU speed estimate. `latency`: a latency report of TensorRT engines (EngineSet.benchmark() on
    TensorRT), whose INT8-vs-FP16 ratio then comes first and replaces the estimate (clause and table); any other
    report is left out (CPU timings are not a latency comparison)."""
    from trtlab.graph.speed import speed_clause

    import pandas as pd

    rows = []
    for label, report in reports.items():
        s = report.summary()
        rows.append({"variant": label, **{f"{k} MACs %": round(100 * v, 2) for k, v in report.mac_share.items()},
                     **{f"{k} weighted": n for k, n in s["weighted_layers"].items()},
                     "FP32 islands": s["fp32_islands"], "FP32 outside guards": s["fp32_outside_guards"],
                     "unfused Q/DQ": s["unfused_qdq"], "Casts": s["casts"], "assumed": s["assumed"],
                     "unsupported Q/DQ": s["unsupported_qdq"]})
    table = pd.DataFrame(rows).set_index("variant").fillna(0)
    counts = [c for c in table.columns if "MACs" not in c]
    table[counts] = table[counts].astype(int)
    table.attrs["note"] = LIMITS
    int8 = next((r for r in reports.values() if r.mac_share.get("INT8", 0.0) > 0), None)
    first = int8 or next(iter(reports.values()), None)
    sentence = f"{first.model}: {first.sentence()}" if first is not None else "no variant to report on"
    measured = measured_sentence(latency)
    speed = speed_clause(int8, latency if measured else None, batch=1) if int8 is not None else None
    estimate = int8.speedup_estimate() if int8 is not None and not measured else None
    return PrecisionOverview(table, sentence, estimate, measured, speed)
