"""How numbers read in every table trtlab shows — notebooks, the HTML dashboard, report.md, the CLI — so the same
value is written the same way everywhere:

- proportions as percentages with one decimal, their 95 % interval in the same cell: `90.0 % (69.9–97.2)`;
- differences in percentage points: `-5.0 pts`; p-values with two significant digits (`0.50`, `0.031`, `< 0.001`);
- logit cosines with 4 decimals; milliseconds with 3 significant digits (`44.1 ms`, `0.512 ms`);
- headers say what a column is and against what: `top-1 (95 % CI)`, `top-1 agreement with fp32 (95 % CI)`.

`Table` is what notebooks get: it displays the formatted view and keeps the numbers (`.raw`) for code.
"""
from __future__ import annotations

import html
import math
import re

MISSING = "—"
CI = "95 % CI"

# A float printed without formatting (repr or pandas' default 6 decimals): what no table for people may contain.
UNFORMATTED_FLOAT = re.compile(r"\d\.\d{5,}")


def _missing(value) -> bool:
    try:
        return value is None or not math.isfinite(float(value))
    except (TypeError, ValueError):
        return True


def percent(value, digits: int = 1) -> str:
    """0.9 → '90.0 %'."""
    return MISSING if _missing(value) else f"{100 * float(value):.{digits}f} %"


def interval(low, high, digits: int = 1) -> str:
    """(0.699, 0.972) → '69.9–97.2' (percent, the unit said by the value before it)."""
    if _missing(low) or _missing(high):
        return MISSING
    return f"{100 * float(low):.{digits}f}–{100 * float(high):.{digits}f}"


def percent_ci(value, low, high, digits: int = 1) -> str:
    """A proportion with its 95 % interval in one cell: '90.0 % (69.9–97.2)'."""
    if _missing(value):
        return MISSING
    bounds = interval(low, high, digits)
    return percent(value, digits) + ("" if bounds == MISSING else f" ({bounds})")


def points(delta, digits: int = 1) -> str:
    """A difference of proportions in percentage points: -0.05 → '-5.0 pts'."""
    return MISSING if _missing(delta) else f"{100 * float(delta):+.{digits}f} pts"


def pvalue(p) -> str:
    """Two significant digits, never a false 0: 0.5 → '0.50', 0.0312 → '0.031', 1e-5 → '< 0.001'."""
    if _missing(p):
        return MISSING
    p = float(p)
    if p < 0.001:
        return "< 0.001"
    return f"{p:.2f}" if p >= 0.1 else f"{p:.2g}"


def cosine(value) -> str:
    """Logit cosine similarity: 4 decimals."""
    return MISSING if _missing(value) else f"{float(value):.4f}"


def nats(value) -> str:
    """A KL divergence in nats, 2 significant digits (small values are the usual case): 0.00952 → '0.0095',
    0.00041 → '4.1e-04'."""
    if _missing(value):
        return MISSING
    value = float(value)
    if value == 0 or value >= 10:
        return f"{value:.0f}"
    # '#': 0.020, not 0.02; from 0.001 down an exponent, so no value reads as an unformatted float (0.00041)
    return f"{value:#.2g}" if value >= 1e-3 else f"{value:.1e}"


def signed_nats(value) -> str:
    """A KL difference or interval bound with its sign: fixed decimals below 0.001, so the bounds of one interval read
    alike (never an exponent: -8.6e-04 → -0.0009)."""
    if _missing(value):
        return MISSING
    value = float(value)
    return ("+" if value >= 0 else "-") + (nats(abs(value)) if abs(value) >= 1e-3 else f"{abs(value):.4f}")


def milliseconds(value) -> str:
    """3 significant digits: 44.139 → '44.1 ms', 0.51234 → '0.512 ms', 1234.5 → '1235 ms'."""
    if _missing(value):
        return MISSING
    value = float(value)
    digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2 if abs(value) >= 1 else 3
    return f"{value:.{digits}f} ms"


def number(value, significant: int = 3) -> str:
    """A plain quantity (a threshold): `significant` digits; an exponent below 0.01 and from 1e6 (so it never
    reads as an unformatted float)."""
    if _missing(value):
        return MISSING
    value = float(value)
    if value != 0 and not 0.01 <= abs(value) < 1e6:
        return f"{value:.{significant - 1}e}"
    # '#' keeps trailing zeros, so a column of thresholds reads alike: 6.00, 36.0, 3.45.
    if value == 0 or abs(value) >= 10 ** (significant - 1) - 0.5:
        return f"{value:.0f}"
    return f"{value:#.{significant}g}"


def ratio(value) -> str:
    """A factor: 2.4132 → '2.41×'."""
    return MISSING if _missing(value) else f"{float(value):#.3g}×"


ALIAS_LIMIT = 24  # a variant label longer than this heads a column or repeats as a letter (A, B, …) with a legend


def aliases(names, limit: int = ALIAS_LIMIT) -> dict[str, str]:
    """{label: what to print}: labels up to `limit` characters stay as they are; longer ones
    (`int8-percentile99.99@10+first_layer-fp16+last_layer-fp16`) get A, B, C… in order, skipping letters that
    are labels themselves."""
    names = list(dict.fromkeys(str(n) for n in names))
    taken = set(names)
    letters = (chr(ord("A") + k) for k in range(26))
    out = {}
    for name in names:
        if len(name) <= limit:
            out[name] = name
            continue
        letter = next((c for c in letters if c not in taken), None)
        out[name] = letter or name[:limit - 1] + "…"
    return out


def alias_legend(mapping: dict[str, str]) -> str:
    """'A = int8-…; B = …' for the labels `aliases` shortened; '' when none was."""
    return "; ".join(f"{short} = {name}" for name, short in mapping.items() if short != name)


_PRECISION_ORDER = {"fp32": 0, "fp16": 1, "int8": 2}


def variant_order(names) -> list:
    """Variants in reading order: FP32, then FP16, then INT8 (others last), stored order within each."""
    def rank(item):
        k, name = item
        head = str(name).lower().split("-")[0].split("+")[0].split("@")[0]
        return (_PRECISION_ORDER.get(head, 3), k)

    return [name for _, name in sorted(enumerate(names), key=rank)]


def count_of(part: int, whole: int) -> str:
    return f"{int(part)} of {int(whole)}"


class Table:
    """A table for people that keeps its numbers.

    Displaying it (notebook HTML, `print`, `str`) shows `shown`, a DataFrame of formatted text with readable
    headers, and `caption`, a line under it for what every row shares (image count, backend). `raw` is the numeric
    DataFrame the view was made from; indexing and DataFrame attributes read it, so code written against the raw
    table keeps working: `table.loc["fp32", "top1"]` is a float, `list(table.index)` the variants.
    """

    def __init__(self, shown, raw=None, caption: str = "", title: str = "", max_rows: int | None = 40):
        self.shown, self.raw, self.caption, self.title = shown, shown if raw is None else raw, caption, title
        self.max_rows = max_rows  # displayed rows (first and last halves); markdown and `shown` keep them all

    # -- the people's view --------------------------------------------------------------------------------------
    def text(self) -> str:
        flat = self._flat()
        if len(flat.columns) and self.shown.index.name is not None:  # the row names read left-aligned
            first = flat.columns[0]
            width = max([len(str(first))] + [len(str(v)) for v in flat[first]])
            flat = flat.rename(columns={first: f"{first!s:<{width}}"})
            flat[flat.columns[0]] = [f"{v!s:<{width}}" for v in flat[flat.columns[0]]]
        body = flat.to_string(index=False, max_rows=self.max_rows)
        return "\n".join(part for part in (self.title, body, self.caption) if part)

    def html(self) -> str:
        parts = [f"<p><b>{html.escape(self.title)}</b></p>"] if self.title else []
        parts.append(self._flat().to_html(escape=True, index=False, na_rep=MISSING, border=0, classes="trtlab-table",
                                          max_rows=self.max_rows))
        if self.caption:
            parts.append(f"<p style='font-size:0.85em;color:#555;margin-top:2px'>{html.escape(self.caption)}</p>")
        return "\n".join(parts)

    def markdown(self) -> str:
        return frame_markdown(self._flat(), index=False) + (f"\n\n{self.caption}" if self.caption else "")

    def _flat(self):
        """`shown` with a named index as its first column: one header row (pandas writes the index name on a
        second one)."""
        return self.shown.reset_index() if self.shown.index.name is not None else self.shown

    def _repr_html_(self) -> str:
        return self.html()

    def __repr__(self) -> str:
        return self.text()

    __str__ = __repr__

    # -- the numbers ------------------------------------------------------------------------------------------------
    def __getattr__(self, name):
        if name.startswith("__") or name in ("shown", "raw", "caption", "title", "max_rows"):
            raise AttributeError(name)
        return getattr(self.raw, name)

    def __getitem__(self, key):
        return self.raw[key]

    def __len__(self) -> int:
        return len(self.raw)

    def __iter__(self):
        return iter(self.raw)

    def __contains__(self, key) -> bool:
        return key in self.raw


def frame_markdown(frame, index: bool = True) -> str:
    """A DataFrame of text as a Markdown table (pipes in cells escaped); no dependency on `tabulate`."""
    def cell(value) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    headers = ([frame.index.name or ""] if index else []) + [cell(c) for c in frame.columns]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for label, row in frame.iterrows():
        values = ([cell(label)] if index else []) + [cell(v) for v in row.tolist()]
        lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines)


class Sentence(str):
    """A sentence for people — an answer or a note — that a notebook shows as text (bold when it is an answer),
    never as a quoted Python string. It is a str, so code can read it as one."""

    def __new__(cls, text: str, answer: bool = False):
        sentence = super().__new__(cls, text)
        sentence.answer = answer
        return sentence

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        text = str(self).replace("*", r"\*").replace("_", r"\_")
        return f"**{text}**" if self.answer else text
