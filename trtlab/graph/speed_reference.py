"""Published TensorRT latencies the speed estimate (trtlab.graph.roofline) is held against, each with its source and
what was measured, and `held_against(reports)`: the estimate beside each figure.

Five figures fit the estimate's free constants (role 'fit'); the others are held out ('held out'): they were not used
to choose anything. The graphs: the onnx wheel's light ResNet-50 (ResNet-50 v1, real shapes, constant weights);
MobileNet-v1/v2/v3-Large and EfficientNet-B0 built layer for layer with onnx.helper (tests/reference_cnns.py); the
demo model EfficientNet-Lite0 — no figure is published for it: its inverted-residual blocks without squeeze-excite
are closest to MobileNet-v2's (EfficientNet-B0 adds squeeze-excite and swish), so it is shown beside MobileNet-v2's
figure as a proxy, never used to fit. All INT8 graphs are Q/DQ graphs as trtlab's placement writes them, which is
not the Q/DQ placement NVIDIA's QAT toolkit wrote for its figures (e.g. B0's SE multiply is quantized there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

NVIDIA_MODEL_ZOO = ("https://docs.nvidia.com/deeplearning/tensorrt/tensorflow-quantization-toolkit/docs/docs/"
                    "model_zoo.html (NVIDIA/TensorRT tools/tensorflow-quantization/examples; A100, TensorRT 8.4, "
                    "trtexec --int8, batch 1, no CUDA graph)")
EMBEDL = ("https://docs.embedl.com/embedl-deploy/latest/guide/benchmarks.html (L4, TensorRT 10.9, trtexec "
          "--useCudaGraph --useSpinWait --noDataTransfers; ModelOpt INT8_DEFAULT_CFG)")
MLPERF_V05 = ("https://github.com/mlcommons/inference_results_v0.5 closed/NVIDIA/results/T4x8/{model}/Offline "
              "(8 T4, TensorRT 6, INT8; samples/s ÷ 8 GPUs; gpu_batch_size from measurements/T4x8/{model}/Offline/"
              "config.json)")
TRT_2197 = ("https://github.com/NVIDIA/TensorRT/issues/2197 (trtexec throughput: MobileNetV3 FP16 1286.08 qps, "
            "FP16+INT8 1279.64 qps, fully INT8; GPU and batch not stated)")


@dataclass(frozen=True)
class PublishedFigure:
    """One published TensorRT timing: `ms` for `batch` images (or, for a ratio, INT8 speed-up over FP16)."""

    model: str  # key of the graph it is held against
    gpu: str
    precision: str  # 'int8' | 'fp16' | 'ratio'
    batch: int
    value: float  # ms for the batch, or the INT8-over-FP16 speed-up
    timing: str  # 'enqueue' (no CUDA graph) | 'cuda-graph'
    role: str  # 'fit' | 'held out' | 'proxy'
    source: str
    note: str = ""


PUBLISHED = (
    PublishedFigure("resnet50", "L4", "fp16", 1, 0.267, "cuda-graph", "fit", EMBEDL, "ResNet-50 (torchvision v1.5)"),
    PublishedFigure("resnet50", "L4", "int8", 1, 0.222, "cuda-graph", "fit", EMBEDL, "ResNet-50, ModelOpt INT8"),
    PublishedFigure("resnet50", "A100", "int8", 1, 0.46, "enqueue", "fit", NVIDIA_MODEL_ZOO, "ResNet50-v1 PTQ"),
    PublishedFigure("mobilenet_v2", "A100", "int8", 1, 0.30, "enqueue", "fit", NVIDIA_MODEL_ZOO, "MobileNet-v2 PTQ"),
    # 44,977.8 samples/s on 8 T4 at gpu_batch_size 256 → 256 / 5,622 s⁻¹ = 45.5 ms per batch of 256
    PublishedFigure("resnet50", "T4", "int8", 256, 256 / (44977.8 / 8) * 1e3, "enqueue", "fit",
                    MLPERF_V05.format(model="resnet"), "ResNet-50 v1.5, MLPerf v0.5 Offline"),
    PublishedFigure("mobilenet_v1", "A100", "int8", 1, 0.16, "enqueue", "held out", NVIDIA_MODEL_ZOO,
                    "MobileNet-v1 PTQ"),
    PublishedFigure("efficientnet_b0", "A100", "int8", 1, 0.67, "enqueue", "held out", NVIDIA_MODEL_ZOO,
                    "EfficientNet-B0 PTQ (SE multiply and pooling quantized there, not in trtlab's placement)"),
    # 141,807 samples/s on 8 T4 at gpu_batch_size 128 (use_graphs: true) → 7.22 ms per batch of 128
    PublishedFigure("mobilenet_v1", "T4", "int8", 128, 128 / (141807 / 8) * 1e3, "cuda-graph", "held out",
                    MLPERF_V05.format(model="mobilenet"), "MobileNet-v1, MLPerf v0.5 Offline"),
    PublishedFigure("mobilenet_v3_large", "any", "ratio", 1, 1279.64 / 1286.08, "enqueue", "held out", TRT_2197,
                    "INT8 speed-up over FP16; compared at batch 1 on every GPU"),
    PublishedFigure("efficientnet_lite0", "A100", "int8", 1, 0.30, "enqueue", "proxy", NVIDIA_MODEL_ZOO,
                    "MobileNet-v2's figure: no figure exists for EfficientNet-Lite0 (the demo model)"),
)


def held_against(reports: dict, figures=PUBLISHED):
    """pandas DataFrame, one row per published figure whose model has a report in `reports` (model key →
    PrecisionReport of its INT8 graph): the estimate beside the figure, est/published and whether the figure lies
    in the estimate's band. Ratio figures are compared at batch 1 on every GPU (their GPU is not known)."""
    import pandas as pd

    from trtlab.graph.roofline import GPUS, estimate

    rows = []
    for figure in figures:
        report = reports.get(figure.model)
        if report is None:
            continue
        for gpu in (GPUS if figure.gpu == "any" else [figure.gpu]):
            e = estimate(report, GPUS[gpu], figure.batch, figure.timing)
            value, (low, high) = ((e["speedup"], e["speedup_band"]) if figure.precision == "ratio" else
                                  (e[f"{figure.precision}_ms"], e[f"{figure.precision}_band"]))
            rows.append({"model": figure.model, "GPU": gpu, "what": figure.precision, "batch": figure.batch,
                         "timing": figure.timing, "role": figure.role, "published": round(figure.value, 4),
                         "estimate": round(value, 4), "low": round(low, 4), "high": round(high, 4),
                         "estimate / published": round(value / figure.value, 2),
                         "in band": low <= figure.value <= high, "source": figure.source.split(" ")[0]})
    table = pd.DataFrame(rows)
    table.attrs["note"] = ("Estimates (trtlab.graph.roofline) beside published TensorRT figures; 'fit' figures chose "
                           "the model's constants, 'held out' ones did not, 'proxy' compares the demo model with the "
                           "closest published architecture.")
    return table


def log_error(table) -> float:
    """The largest |log(estimate / published)| of a held_against table (0.26 ≈ ±30 %)."""
    return max((abs(math.log(v)) for v in table["estimate / published"]), default=0.0)
