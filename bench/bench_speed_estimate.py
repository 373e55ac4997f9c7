"""The INT8-vs-FP16 speed estimate (trtlab.graph.roofline) for the demo model (EfficientNet-Lite0) and the onnx
wheel's light ResNet-50 on T4, L4, A100 and H100 at batch 1 and 32, beside the published TensorRT figures it is held
against (trtlab.graph.speed_reference). Every number printed is an ESTIMATE (with its band) unless it says published.

    python bench/bench_speed_estimate.py [--workspace DIR] [--fit]

--fit reruns the grid search that chose the model's constants (FITTED, ENSEMBLE) on the figures marked 'fit' and
prints them as code, with every figure's error — to refit when a published figure is added. CPU only, ~20 s
(--fit: ~2 min on 2 cores).
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # tests/reference_cnns.py: the architecture-only graphs

GRID = {"tensor": (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), "int8": (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
        "kernel": (0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4), "enqueue": (5, 5.5, 6, 6.5, 7), "l2": (0.5, 0.75, 0.9)}


def reports_for(names, workspace: Path) -> dict:
    from reference_cnns import qdq_graph

    from trtlab.data.demo import export_demo_model
    from trtlab.graph.fusion import precision_report

    demo = export_demo_model("efficientnet-lite0", workspace) if "efficientnet_lite0" in names else None
    return {name: precision_report(qdq_graph(name, workspace, demo), name) for name in names}


def estimate_table(reports: dict):
    """One row per (model, GPU, batch): the estimate and its band, with and without a CUDA graph."""
    import pandas as pd

    from trtlab.graph.roofline import GPUS, estimate

    rows = []
    for model, report in reports.items():
        for batch in (1, 32):
            for name, gpu in GPUS.items():
                e, without = estimate(report, gpu, batch, "cuda-graph"), estimate(report, gpu, batch, "enqueue")
                band = lambda low_high, digits: "–".join(f"{v:.{digits}f}" for v in low_high)  # noqa: E731
                rows.append({"model": model, "GPU": name, "batch": batch,
                             "FP16 ms (estimate)": f"{e['fp16_ms']:.3f} ({band(e['fp16_band'], 3)})",
                             "INT8 ms (estimate)": f"{e['int8_ms']:.3f} ({band(e['int8_band'], 3)})",
                             "speed-up (estimate)": f"{e['speedup']:.2f}× ({band(e['speedup_band'], 2)})",
                             "no CUDA graph (estimate)": f"{without['speedup']:.2f}×",
                             "kernels FP16/INT8": "/".join(map(str, e["kernels"]))})
    return pd.DataFrame(rows)


def fit(reports: dict) -> None:
    """Grid search over the free constants on the 'fit' figures; prints FITTED / ENSEMBLE as code and the errors."""
    from trtlab.graph import roofline as R
    from trtlab.graph.speed_reference import PUBLISHED

    figures = [f for f in PUBLISHED if f.precision != "ratio" and f.model in reports]
    engines = {(f.model, f.precision): R.kernels(reports[f.model], as_fp16=f.precision == "fp16") for f in figures}

    def errors(c, role):
        return [math.log(1e3 * R.engine_seconds(engines[f.model, f.precision], R.GPUS[f.gpu], f.batch, c, f.timing)
                         / f.value) for f in figures if f.role == role]

    scored = []
    for tensor, int8, kernel, enqueue, l2 in itertools.product(*GRID.values()):
        c = R.Constants(tensor, int8, 0.8, kernel, enqueue, l2)
        e = errors(c, "fit")
        scored.append((round(max(map(abs, e)), 2), math.sqrt(sum(x * x for x in e) / len(e)), c))
    scored.sort(key=lambda s: (s[0], s[1]))
    best_max, best_rms = scored[0][0], min(s[1] for s in scored)
    near = [s[2] for s in scored if s[1] <= best_rms + 0.02]
    members = []
    for name in ("tensor_fraction", "int8_relative", "kernel_us", "enqueue_us", "l2_share"):
        for member in (min(near, key=lambda c: getattr(c, name)), max(near, key=lambda c: getattr(c, name))):
            if member not in members:
                members.append(member)
    print(f"best largest |log error| {best_max:.2f}, best RMS {best_rms:.3f}; {len(near)} settings within 0.02 RMS")
    for m, rms, c in scored[:5]:
        print(f"  {m:.2f} rms {rms:.3f}  {c}")
    code = lambda c: f"_c({c.tensor_fraction}, {c.int8_relative}, {c.kernel_us}, {c.enqueue_us}, {c.l2_share})"  # noqa
    print("ENSEMBLE = (" + ", ".join(code(c) for c in members) + ", replace(FITTED, pointwise_quantize=False))")
    for role in ("fit", "held out", "proxy"):
        print(f"{role}: errors with FITTED", [f"{x:+.2f}" for x in errors(R.FITTED, role)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default=None, help="where the demo model is exported (default: a temp dir)")
    parser.add_argument("--fit", action="store_true", help="rerun the constants' grid search")
    args = parser.parse_args(argv)

    import pandas as pd

    from reference_cnns import BUILDERS

    from trtlab.graph.speed_reference import held_against

    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(args.workspace or scratch)
        reports = reports_for(["efficientnet_lite0", "resnet50", *BUILDERS], workspace)
        with pd.option_context("display.width", 250, "display.max_columns", 20, "display.max_colwidth", 40):
            print("ESTIMATE (trtlab.graph.roofline; not a measurement) — demo model and light ResNet-50, INT8 as "
                  "trtlab places Q/DQ, FP16 twin; band in parentheses")
            print(estimate_table({k: reports[k] for k in ("efficientnet_lite0", "resnet50")}).to_string(index=False))
            print("\nPUBLISHED TensorRT figures beside the ESTIMATE for the same architecture "
                  "(role: fit = chose the constants; held out; proxy = EfficientNet-Lite0 vs MobileNet-v2's figure)")
            print(held_against(reports).to_string(index=False))
        if args.fit:
            print()
            fit(reports)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
