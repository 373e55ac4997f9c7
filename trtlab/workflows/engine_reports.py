"""How notebook 02 shows engine sets: latency reports (formatted, with what the timings can say) and tables that
carry the sentence saying what they are."""
from __future__ import annotations

from dataclasses import dataclass

from trtlab.backends.tensorrt.latency import format_comparison, format_latency_table, samples_needed

ORT_TIMING_NOTE = ("ONNX Runtime on this CPU: host wall-clock timings of the literal graphs. They do not predict "
                   "TensorRT — a Q/DQ graph runs here as ONNX Runtime's CPU kernels or as fake-quantized float, "
                   "while TensorRT fuses Q/DQ into INT8 tensor-core kernels. Only an engine timed on the target "
                   "GPU says whether INT8 beats FP16.")


@dataclass
class LatencyReport:
    """Latency per variant and batch size: `table` (numbers), `side_by_side` (medians and ratios to FP16), and the
    formatted views a notebook shows, with what the timings can and cannot say."""

    table: object  # pandas.DataFrame from latency_table
    backend: str
    iterations: int
    note: str = ""

    @property
    def side_by_side(self):
        return self.table.attrs.get("side_by_side")

    def percentiles_note(self) -> str:
        shown = [c[:-3] for c in self.table.columns if c.startswith("p") and c.endswith("_ms")]
        hidden = [p for p in ("p50", "p90", "p99") if p not in shown]
        text = f"{self.iterations} timings per row: {', '.join(shown) or 'mean only'}"
        if hidden:
            text += (f" (not {', '.join(hidden)}: a percentile is shown when ≥5 timings lie above it, "
                     f"e.g. p99 needs {samples_needed(99)})")
        return text

    def _repr_html_(self) -> str:
        parts = [f"<p><b>{self.backend}</b> · {self.percentiles_note()}</p>"]
        if self.note:
            parts.append(f"<p><b>Note:</b> {self.note}</p>")
        parts.append(format_latency_table(self.table).to_html())
        parts.append(f"<p>{self.side_by_side_caption()}</p>")
        parts.append(format_comparison(self.table).to_html())
        return "\n".join(parts)

    def side_by_side_caption(self) -> str:
        if self.note:  # CPU wall clock of literal Q/DQ graphs: ratios of this CPU, never a latency comparison
            return "CPU wall-clock ratios of the literal graphs on this machine (not a TensorRT latency comparison)"
        return "Side by side (÷ fp16 below 1×: faster than FP16 at the same batch size)"

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        text = [f"{self.backend} · {self.percentiles_note()}"] + ([f"Note: {self.note}"] if self.note else [])
        text.append(format_latency_table(self.table).to_string())
        text += [self.side_by_side_caption(), format_comparison(self.table).to_string()]
        return "\n".join(text)


class NotedTable:
    """A table shown with the sentence that says what it is (and is not); `.table` is the DataFrame, whose
    attributes it also answers (`.loc`, `.to_dict`, …)."""

    def __init__(self, table, note: str):
        self.table, self.note = table, note

    def __getattr__(self, name):
        # `table` not set yet (copy / unpickling): no recursion; dunders (__deepcopy__, …) are this object's own
        if name == "table" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.table, name)

    def __getitem__(self, key):
        return self.table[key]

    def __len__(self) -> int:
        return len(self.table)

    def head(self, rows: int = 5) -> "NotedTable":
        return NotedTable(self.table.head(rows), self.note)

    def _repr_html_(self) -> str:
        return f"<p>{self.note}</p>" + self.table.to_html()

    def __repr__(self) -> str:
        return f"{self.note}\n{self.table.to_string()}"
