"""The calibration-size figure: per algorithm, how much the thresholds move between resampled calibration sets
(left) and the logit cosine with FP32 of the variants they make (right), against calibration size."""
from __future__ import annotations

import math

import numpy as np

COLORS = {"minmax": "tab:blue", "entropy": "tab:orange", "percentile": "tab:green"}


def plot_calibration_size(study):
    """A two-panel Figure (no pyplot): threshold spread (log scale, the tolerance dashed) and logit cosine (mean,
    with the resamples' range) against calibration size (log 2 axis); one line per algorithm, legend below."""
    from matplotlib.figure import Figure

    table = study.table
    fidelity = not table["cosine_mean"].isna().all()
    fig = Figure(figsize=(11 if fidelity else 6, 4.2), constrained_layout=True)
    axes = fig.subplots(1, 2 if fidelity else 1, squeeze=False)[0]
    sizes = sorted(int(s) for s in set(table["size"]))
    for algorithm in study.algorithms:
        rows = table[table["algorithm"] == algorithm].sort_values("size")
        color = COLORS.get(algorithm)
        spread = np.maximum(rows["threshold_spread_p90"].to_numpy(float) * 100, 1e-2)  # log axis: no zeros
        axes[0].plot(rows["size"], spread, "o-", color=color, label=algorithm)
        if fidelity:
            axes[1].plot(rows["size"], rows["cosine_mean"], "o-", color=color, label=algorithm)
            axes[1].fill_between(rows["size"], rows["cosine_low"], rows["cosine_high"], color=color, alpha=0.15,
                                 lw=0)
    axes[0].axhline(100 * study.tolerance, color="0.4", ls="--", lw=1,
                    label=f"settled: spread ≤ {100 * study.tolerance:g} %")
    axes[0].set_yscale("log")
    low, high = axes[0].get_ylim()
    ticks = [v for v in (0.01, 0.1, 0.5, 1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 100, 200) if low <= v <= high]
    axes[0].set_yticks(ticks, [f"{v:g} %" for v in ticks])
    axes[0].minorticks_off()
    axes[0].set_ylabel("threshold spread between resamples (%)\nthe tenth of tensors that move most")
    axes[0].set_title("How much the thresholds move", fontsize=10)
    if fidelity:
        axes[1].set_ylabel(f"logit cosine with FP32\nmean over {study.evaluation_images} evaluation images")
        axes[1].set_title("What the variant keeps (band: resamples' range)", fontsize=10)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("calibration images (resampled with replacement from the pool)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=9, frameon=False)
    fig.suptitle(f"Calibration size: {study.pool} pool images, "
                 f"{int(table['resamples'].max())} resamples per size", fontsize=11)
    return fig


def show_calibration_size(study) -> None:
    """Notebook display: the sentence, the figure, the table (percentages and cosines formatted)."""
    from IPython.display import HTML, Image, Markdown, display

    from trtlab.views.figures import figure_png

    display(Markdown(study.summary()))
    display(Image(data=figure_png(study.plot()), format="png"))
    display(HTML(calibration_size_table(study).to_html(escape=True, index=False)))


def calibration_size_table(study):
    """The study's table for people."""
    import pandas as pd

    t = study.table

    def cos(v):
        return "—" if v is None or math.isnan(v) else f"{v:.4f}"

    return pd.DataFrame({
        "algorithm": t["algorithm"], "calibration images": t["size"].astype(int),
        "threshold spread, median tensor": t["threshold_spread"].map(lambda v: f"{100 * v:.1f} %"),
        "threshold spread, 90th pct tensor": t["threshold_spread_p90"].map(lambda v: f"{100 * v:.1f} %"),
        "from the pool's threshold, 90th pct": t["threshold_drift_p90"].map(lambda v: f"{100 * v:.1f} %"),
        "logit cosine (mean)": t["cosine_mean"].map(cos),
        "logit cosine (resamples' range)": [f"{cos(a)}–{cos(b)}" if not math.isnan(a) else "—"
                                            for a, b in zip(t["cosine_low"], t["cosine_high"])]})
