"""NNCF's post-training quantization beside trtlab's recovery (`bench_recovery.py --nncf`; issue 39).

For each model, on exactly the calibration and evaluation crops bench_recovery uses: `nncf.quantize` (ONNX
backend) on the same FP32 ONNX file — NNCF's defaults (preset PERFORMANCE for a CNN: symmetric; fast bias
correction on), the same with bias correction off, and preset MIXED (asymmetric activations) — with subset_size =
the calibration crop count, and the first two again closer to what TensorRT computes (activations per tensor:
NNCF gives each depthwise Conv's input per-channel scales; the first layer's weights on 8 bits, not NNCF's 7-bit
overflow fix) — fed trtlab's own normalised calibration crops (the decode cache's rows, batch 1).
Each NNCF graph is evaluated on the evaluation crops by trtlab's `evaluate` (the same decode cache, so the same
float32 batches bench_recovery's variants got) on ONNX Runtime's CPU provider with every graph optimization
disabled — the Q/DQ graph computed literally, no QDQ fusion — and compared with FP32 by bench_recovery's
`compare_to` (pooled and per-image logit SQNR, cosine, top-1 / top-5 agreement, paired 95 % intervals of the
difference to trtlab's plain variant). trtlab's precision report on each NNCF graph says what TensorRT would make
of it: NNCF writes UINT8 Q/DQ (its unsigned quantizers after ReLU6, asymmetric ones under MIXED), which
ONNX-TensorRT takes only at a network input or output.

NNCF is not a trtlab dependency (not in requirements.txt, pyproject or CI); it runs in a virtual environment of
its own — `VENV_RECIPE` below.
"""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

VENV_RECIPE = ("python3 -m venv --system-site-packages /work/venv-nncf && /work/venv-nncf/bin/pip install "
               "nncf==3.4.0, then run this bench with /work/venv-nncf/bin/python")


def missing_nncf() -> str | None:
    """The one-line error when nncf does not import, else None."""
    if importlib.util.find_spec("nncf") is None:
        return (f"error: --nncf needs nncf, which is not importable here (it is no trtlab dependency) — "
                f"make its own environment: {VENV_RECIPE}")
    return None


def settings() -> dict:
    """Label → keyword arguments of nncf.quantize, beyond the model, the data and subset_size."""
    import nncf
    from nncf.quantization.advanced_parameters import (AdvancedQuantizationParameters, OverflowFix,
                                                        QuantizationParameters)

    # closer to what TensorRT computes: activations per tensor (NNCF gives a depthwise Conv's input per-channel
    # scales), all weights on 8 bits (NNCF's overflow fix puts the first layer's on 7 for CPUs without VNNI)
    closer = {"activations_quantization_params": QuantizationParameters(per_channel=False),
              "overflow_fix": OverflowFix.DISABLE}
    return {
        "NNCF defaults (fast bias correction)": {},
        "NNCF, bias correction off": {
            "advanced_parameters": AdvancedQuantizationParameters(disable_bias_correction=True)},
        "NNCF preset MIXED (fast bias correction)": {"preset": nncf.QuantizationPreset.MIXED},
        "NNCF per-tensor activations, no overflow fix (fast bias correction)": {
            "advanced_parameters": AdvancedQuantizationParameters(**closer)},
        "NNCF per-tensor activations, no overflow fix, bias correction off": {
            "advanced_parameters": AdvancedQuantizationParameters(**closer, disable_bias_correction=True)},
    }


BIAS_CORRECTION_PAIRS = (  # (with NNCF's fast bias correction, the same without)
    ("NNCF defaults (fast bias correction)", "NNCF, bias correction off"),
    ("NNCF per-tensor activations, no overflow fix (fast bias correction)",
     "NNCF per-tensor activations, no overflow fix, bias correction off"))


def qdq_types(model) -> dict:
    """Counts of QuantizeLinear / DequantizeLinear by the integer type they write or read ('Quantize INT8',
    'Dequantize UINT8', ...) and of activation Quantizes with a per-channel scale ('Quantize per-channel
    activation': TensorRT takes per-channel scales for weights only)."""
    from onnx import TensorProto, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    constants = {n.output[0]: n.attribute[0].t for n in model.graph.node
                 if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    counts: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        name = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if name is None:  # no zero point: UINT8 by the ONNX default
            kind = "UINT8"
        else:
            tensor = inits.get(name) or constants.get(name)
            if tensor is None:
                kind = "?"
            else:
                kind = TensorProto.DataType.Name(numpy_helper.from_array(numpy_helper.to_array(tensor)).data_type)
        key = f"{node.op_type.removesuffix('Linear')} {kind}"
        counts[key] = counts.get(key, 0) + 1
        scale = inits.get(node.input[1]) or constants.get(node.input[1])
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits and scale is not None \
                and numpy_helper.to_array(scale).size > 1:  # TensorRT quantizes activations per tensor only
            counts["Quantize per-channel activation"] = counts.get("Quantize per-channel activation", 0) + 1
    return counts


def slug(label: str) -> str:
    """A label as a file and results-store name ('NNCF, bias correction off' → 'nncf-bias-correction-off')."""
    return "-".join("".join(c if c.isalnum() else " " for c in label.lower()).split())


def quantize(model_path: Path, cache, split, workspace: Path, label: str, kwargs: dict) -> tuple[Path, float]:
    """NNCF's quantized graph of `model_path` (written under workspace/nncf) and the seconds nncf.quantize took."""
    import nncf
    import onnx

    from trtlab.data.batches import iter_batches

    model = onnx.load(str(model_path))
    name = model.graph.input[0].name
    # trtlab's normalised float32 calibration crops, one per item: subset_size counts crops
    items = [batch.images for batch in iter_batches(cache, split.calibration, batch_size=1)]
    data = nncf.Dataset(items, lambda x: {name: x})
    began = time.perf_counter()
    quantized = nncf.quantize(model, data, subset_size=len(items), **kwargs)
    seconds = time.perf_counter() - began
    path = workspace / "nncf" / f"{Path(model_path).stem}-{slug(label)}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(quantized, str(path))
    return path, seconds


def evaluate_literal(path: Path, cache, split, workspace: Path, label: str):
    """The graph at `path` on the evaluation crops: trtlab's evaluate, ONNX Runtime CPU, all optimizations off."""
    from trtlab.evaluation.evaluate import evaluate
    from trtlab.evaluation.literal_check import LITERAL_OPTIONS
    from trtlab.evaluation.options import EvalTarget, RunOptions

    run = RunOptions(backend="ort", runner_options=dict(LITERAL_OPTIONS), progress=False)
    return evaluate(path, cache, slug(label), target=EvalTarget(indices=split.evaluation), run=run,
                    workspace=workspace / "nncf-results")


def run_nncf(model_path: Path, cache, split, plain, reference, workspace: Path, compare_to) -> dict:
    """Per NNCF setting: the bench's comparison to FP32 (against trtlab's `plain`), nncf.quantize's seconds, the
    Q/DQ types and trtlab's precision report summary. `compare_to`: bench_recovery's."""
    import nncf
    import onnx
    import onnxruntime

    from trtlab.graph.fusion import precision_report

    out = {"nncf": nncf.__version__, "onnxruntime": onnxruntime.__version__,
           "backend": "ONNX Runtime CPUExecutionProvider, graph optimizations disabled (literal Q/DQ)",
           "calibration_crops": len(split.calibration), "evaluation_crops": len(split.evaluation), "variants": {}}
    results = {}
    for label, kwargs in settings().items():
        path, seconds = quantize(model_path, cache, split, workspace, label, kwargs)
        result = results[label] = evaluate_literal(path, cache, split, workspace, label)
        entry = compare_to(result, plain, reference)
        report = precision_report(path)
        entry.update(quantize_seconds=seconds, model=str(path), qdq=qdq_types(onnx.load(str(path))),
                     precision=report.summary(), sentence=report.sentence())
        out["variants"][label] = entry
    # what NNCF's fast bias correction gains: on against off, the same paired intervals
    out["bias_correction_gain"] = {on: {**compare_to(results[on], results[off], reference), "against": off}
                                   for on, off in BIAS_CORRECTION_PAIRS}
    return out


def print_nncf(result: dict) -> None:
    """The NNCF rows in bench_recovery's table form, with quantize seconds and TensorRT legality."""
    info = result["nncf"]
    print(f"\n### {result['model']} — NNCF {info['nncf']} (onnxruntime {info['onnxruntime']}, {info['backend']}; "
          f"{info['calibration_crops']} calibration / {info['evaluation_crops']} evaluation crops); "
          f"trtlab's calibration itself {result['calibration_seconds']:.1f} s")
    print("| variant | logit SQNR dB, pooled (Δ vs trtlab plain) | per-image mean (Δ, 95 % paired) | cosine (Δ) "
          "| top-1 agreement (Δ) | top-5 agreement (Δ) | quantize s | Q/DQ: UINT8 of all | per-channel activation Q "
          "| TensorRT |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, e in info["variants"].items():
        pooled = e["sqnr_pooled_db"]
        cells = [f"{pooled['value']:.2f} ({pooled['difference']:+.2f})"]
        for metric, digits in (("sqnr_db", 2), ("cosine", 4), ("top1_agreement", 3), ("top5_agreement", 3)):
            m = e[metric]
            cells.append(f"{m['value']:.{digits}f} ({m['difference']:+.{digits}f} "
                         f"[{m['low']:+.{digits}f}, {m['high']:+.{digits}f}])")
        total = sum(v for k, v in e["qdq"].items() if k.endswith("INT8"))
        uint8 = sum(v for k, v in e["qdq"].items() if k.endswith("UINT8"))
        channels = e["qdq"].get("Quantize per-channel activation", 0)
        legal = "legal" if not e["precision"]["unsupported_qdq"] else \
            f"not legal: {e['precision']['unsupported_qdq']} UINT8 Q/DQ unsupported"
        print(f"| {label} | " + " | ".join(cells) + f" | {e['quantize_seconds']:.1f} | {uint8} of {total} "
              f"| {channels} | {legal} |")
    for label, e in info["bias_correction_gain"].items():
        parts = [f"pooled SQNR {e['sqnr_pooled_db']['difference']:+.2f} dB"]
        for metric, digits in (("sqnr_db", 2), ("cosine", 4), ("top1_agreement", 3), ("top5_agreement", 3)):
            m = e[metric]
            parts.append(f"{metric} {m['difference']:+.{digits}f} [{m['low']:+.{digits}f}, {m['high']:+.{digits}f}]")
        print(f"- NNCF's bias correction, {label} against {e['against']}: " + ", ".join(parts))
    for label, e in info["variants"].items():
        print(f"- {label}: {e['qdq']}; precision report: {e['sentence']}")
