"""Figures of the layer debugger (matplotlib Figures made without pyplot: no global state, any backend) and the
notebook display of a sentence, a figure and a table."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from trtlab.core.workspace import atomic_path
from trtlab.graph.block_names import labelled
from trtlab.debug.errors import SQNR_CAP_DB


def plot_tensor_errors(errors):
    """SQNR and cosine of every tensor of a TensorErrors over depth (graph order), layer outputs dotted, the jump
    marked. Legends sit beside the axes and suspect scales are numbered markers explained in the legend, so no
    label covers a curve or another label."""
    from matplotlib.figure import Figure

    t = errors.table
    fig = Figure(figsize=(13, 6.5), constrained_layout=True)
    ax_sqnr, ax_cos = fig.subplots(2, 1, sharex=True)
    raw = t["sqnr_db"].to_numpy(float)
    qdq = t["qdq_sqnr_db"].to_numpy(float)
    finite = np.concatenate([raw[np.isfinite(raw)], qdq[np.isfinite(qdq)]])
    top = min(SQNR_CAP_DB, float(finite.max()) + 10.0) if len(finite) else SQNR_CAP_DB
    sqnr = np.minimum(raw, top)  # exact tensors (inf) sit on the top edge
    ax_sqnr.plot(t["depth"], sqnr, "-", color="tab:blue", lw=1.2,
                 label=f"SQNR (dB), every tensor (exact ones drawn at {top:.0f} dB)")
    is_layer = t["layer_output"].to_numpy(bool)
    ax_sqnr.plot(t["depth"][is_layer], sqnr[is_layer], "o", ms=3, color="tab:blue", label="layer outputs")
    has_qdq = np.isfinite(qdq)
    ax_sqnr.plot(t["depth"][has_qdq], np.minimum(qdq[has_qdq], top), "v", ms=4, color="0.55",
                 label="own Q/DQ SQNR of quantized tensors")
    for number, suspect in enumerate(errors.suspect_scales, 1):
        reader = suspect["read_by_blocks"][0] if suspect.get("read_by_blocks") else suspect["tensor"]
        ax_sqnr.plot([suspect["depth"]], [suspect["qdq_sqnr_db"]], "v", ms=8, color="tab:orange",
                     label=f"{number}: scale? {suspect['tensor']}, input of {reader}")
        ax_sqnr.annotate(str(number), (suspect["depth"], suspect["qdq_sqnr_db"]), xytext=(0, -14),
                         textcoords="offset points", color="tab:orange", fontsize=8, ha="center", va="top")
    ax_cos.plot(t["depth"], t["cosine"], "-", color="tab:green", lw=1.2, label="cosine (all images)")
    ax_cos.plot(t["depth"], t["cosine_worst"], ":", color="tab:olive", lw=1.0, label="worst image")
    if errors.jump:
        d = errors.jump["depth"]
        for ax in (ax_sqnr, ax_cos):
            ax.axvline(d, color="red", lw=1.0, ls="--",
                       label=(f"jump: {labelled(errors.jump['block'], errors.jump['node'])}, "
                              f"−{errors.jump['drop_db']:.1f} dB") if ax is ax_sqnr else None)
    low = float(np.nanmin(np.concatenate([sqnr[np.isfinite(sqnr)], np.minimum(qdq[has_qdq], top)])))
    ax_sqnr.set_ylim(min(0.0, low - 6), top + 2)  # room under the lowest marker for its number
    ax_sqnr.set_ylabel("SQNR vs FP32 (dB)")
    ax_sqnr.set_title(f"{errors.variant}: error per tensor over depth ({errors.images} images)")
    ax_cos.set_ylabel("cosine vs FP32")
    ax_cos.set_xlabel("tensor index in graph order")
    for ax in (ax_sqnr, ax_cos):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    return fig


def plot_sensitivity(sensitivity, top: int = 20):
    """Ranked bar chart of a Sensitivity: each layer's estimated share of the output noise (only-one and
    all-but-one), layers named by block and node."""
    from matplotlib.figure import Figure

    t = sensitivity.table.head(top)
    fig = Figure(figsize=(10, 0.3 * len(t) + 1.9), constrained_layout=True)
    ax = fig.subplots()
    y = np.arange(len(t))[::-1]
    ax.barh(y + 0.2, t["noise_share_only"] * 100, 0.4, label="only this layer INT8")
    ax.barh(y - 0.2, t["noise_share_all_but"] * 100, 0.4, label="all but this layer INT8")
    ax.set_yticks(y, [labelled(block, name) for name, block in zip(t.index, t["block"])], fontsize=8)
    ax.set_ylim(-0.7, len(t) - 0.3)
    ax.set_xlabel("share of the output noise of the all-INT8 variant (%)")
    all_metrics = sensitivity.baseline["all"]
    ax.set_title(f"Layer sensitivity, top {len(t)} of {len(sensitivity.table)}\nall INT8: logits SQNR "
                 f"{all_metrics['sqnr_db']:.1f} dB, top-1 agreement {all_metrics['top1_agreement']:.0%} on "
                 f"{sensitivity.images} images", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    return fig


def save_figure(fig, path: Path) -> Path:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return path


def display(text: str, fig=None, table=None) -> None:
    """Notebook display: a sentence, a figure as PNG (works with any matplotlib backend), a table (no index)."""
    from IPython.display import HTML, Image, Markdown, display as show

    from trtlab.views.figures import figure_png

    show(Markdown(escape_markdown(text)))
    if fig is not None:
        show(Image(data=figure_png(fig), format="png"))
    if table is not None:
        show(HTML(table.to_html(escape=True, index=False)))


def escape_markdown(text: str) -> str:
    """Plain text shown as Markdown: names such as `_blocks.3._project_conv` or `a*b` stay as written."""
    import re

    return re.sub(r"([\\`*_{}\[\]<>#|])", r"\\\1", text)
