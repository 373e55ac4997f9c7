"""ONNX Runtime's optimized INT8 kernels vs the literal Q/DQ graph: the self-check, its cause, the fast reference.

ONNX Runtime executes a Q/DQ model literally (QuantizeLinear → DequantizeLinear → float Conv: the semantics
TensorRT implements) only when it does not fuse the Q/DQ pairs into its own INT8 kernels. Its fused U8S8 kernels
on x86-64 CPUs with AVX2 (or AVX-512) but without VNNI use VPMADDUBSW, which adds pairs of uint8×int8 products
into *saturating int16* lanes; with full-range 8-bit weights the sums overflow and the result is wrong. ONNX
Runtime documents this ("When and why do I need to try U8U8?" in
https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html: on AVX2/AVX512 x86-64 the U8S8
path "might suffer from saturation issues"; try reduce_range (7-bit weights) or U8U8; no such issue on x64 with
VNNI or on ARM) and added `session.x64quantprecision` for some operators (microsoft/onnxruntime#12088, "x86/64
U8S8 Gemm Precision Fix"). Measured here (AVX2, no VNNI): holdout top-1 agreement 25–44 % with full-range
weights, 100 % (cosine 0.998) with 7-bit weights. TensorRT accumulates INT8 products in int32 and is unaffected.

FP16-path graphs (issue 17: everything not quantized in FP16, FP16 Q/DQ scales at opset 19) are another case: ONNX
Runtime's Q/DQ graph transformations — on at every level from "basic" unless `session.disable_quant_qdq` — do not
compute them literally at all (measured on the demo's FP16-path INT8 variants, this ORT 1.32 CPU: logit cosine
0.03 to the all-off run at basic, extended and all; a ModelOpt FP16 graph gave ≈ 0 as well), whatever the CPU. The
same graphs with `disable_quant_qdq` reproduce the all-off outputs exactly at "basic" and "extended" (and not at
"all", whose NCHWc float convs re-round activations). FP16 variants without Q/DQ are unaffected (6.8e-7 at "all").

`ort_qdq_self_check` runs one sample batch through the graph — all optimizations off (the literal reference), all
on (ORT's fused INT8 kernels), and the fast literal candidates (`FAST_CANDIDATES`: Q/DQ left unfused, "extended",
then "basic") until one reproduces the literal outputs — and returns the numbers, the cause and one message line;
FP32-path and FP16-path graphs alike (`qdq_float_type` says which). `reference_runner_options(check)` is what INT8
evaluation should use: the fast candidate that reproduced the literal outputs, else optimizations off.
"""
from __future__ import annotations

import functools
import logging
import math
import platform
from pathlib import Path

import numpy as np

from trtlab.core.log import info_once

log = logging.getLogger(__name__)

# The fast literal reference (Q/DQ fusion off, "extended" optimizations, weights' DequantizeLinear constant-folded)
# must reproduce the all-off outputs: same top-1 on every sample image and max |Δlogit| ≤ FAST_REFERENCE_RTOL × the
# image's largest |logit|. Measured on the demo's minmax/entropy/percentile variants: 2–4e-7 (float32 rounding of
# the same sums). 1e-4 leaves room for that, yet is ~80× below one int8 step (1/127 of a tensor's range), so a
# configuration that rounds any activation to a different int8 value fails it: "all" (NCHWc-blocked float convs)
# + disable_quant_qdq does, at 2–3e-2 (it moves the demo's mean cosine-to-FP32 by up to 2e-4, visible in reports),
# and is therefore not used. Speed (bench/bench_int8_reference.py, 2 shared cores): "extended" + disable_quant_qdq
# ran at 1.00–1.39× the all-off speed — the NCHWc layout, not Q/DQ, is what separates FP32 "all" from it.
FAST_REFERENCE_RTOL = 1e-4
# The self-check's sample: with 0 disagreements in n images the one-sided 95 % upper bound on the disagreement rate
# is 1 − 0.05^(1/n) (Clopper–Pearson; ≈ 3/n, the rule of three): 4.6 % at n = 64. Eight images bounded it at only
# 31 %, and on a CPU with VNNI reported agreement while the fused kernels differed on 3.5 % of 256 images.
# Cost (issue 29): the check runs the sample three times (literal, fused, fast literal), and trtlab's numbers never
# come from the fused kernels, so its sample is also held to a share of the evaluation: at most 1/SELF_CHECK_SHARE
# of the evaluation images (at least SELF_CHECK_MIN_IMAGES, at most SELF_CHECK_IMAGES), i.e. ≤ 3/16 of one
# evaluation's inference, and it runs once per graph structure (`self_check_once`): minmax, entropy and percentile
# variants of one recipe differ only in scale values, which ONNX Runtime's graph transformations do not look at.
# Measured (demo EfficientNet-Lite0, 20 evaluation photos, FP16 Q/DQ, 2 shared cores, the function alone): before,
# 93.7 s for the three INT8 variants (27–39 s each, three runs of ~10 s) against ~30 s for their own inference;
# after, 5.5 s in all (4 images, once; mostly the three sessions' creation) against 19.6 s of inference.
SELF_CHECK_IMAGES = 64
SELF_CHECK_SHARE = 16
SELF_CHECK_MIN_IMAGES = 4
SELF_CHECK_CONFIDENCE = 0.95
_SELF_CHECK_CHUNK = 16  # images per ONNX Runtime run (optimizations off holds every activation of the batch)
LITERAL_OPTIONS = {"graph_optimization": "disable"}
FAST_LITERAL_OPTIONS = {"graph_optimization": "extended", "disable_quant_qdq": True}
#: The settings that may stand in for the literal reference, fastest first; each counts as literal on a graph only
#: where the self-check saw it reproduce the all-off outputs (FAST_REFERENCE_RTOL) on that graph's sample batch.
FAST_CANDIDATES = (FAST_LITERAL_OPTIONS, {"graph_optimization": "basic", "disable_quant_qdq": True})


@functools.lru_cache(maxsize=1)
def cpu_features() -> dict:
    """The CPU's ISA features that decide ORT's INT8 kernel path (x86-64: AVX2, AVX-512, VNNI; from /proc/cpuinfo)."""
    machine = platform.machine().lower()
    flags: set[str] = set()
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                elif key == "model name" and not model:
                    model = value.strip()
    except OSError:  # not Linux: unknown, reported as such
        pass
    x86 = machine in ("x86_64", "amd64", "i686", "x86")
    vnni = bool(flags & {"avx512_vnni", "avx_vnni", "avx512vnni", "avxvnni"})
    return {"machine": machine, "model": model, "x86": x86, "avx2": "avx2" in flags,
            "avx512": "avx512f" in flags, "vnni": vnni, "known": bool(flags)}


def u8s8_saturation_risk(features: dict | None = None) -> bool:
    """True on x86-64 with AVX2/AVX-512 but without VNNI: ORT's fused U8S8 kernels can saturate there."""
    f = features or cpu_features()
    return bool(f["x86"] and (f["avx2"] or f["avx512"]) and not f["vnni"])


def describe_cpu(features: dict | None = None) -> str:
    f = features or cpu_features()
    if not f["known"]:
        return f"{f['machine']} CPU (features unknown)"
    isa = [name for name, on in (("AVX2", f["avx2"]), ("AVX-512", f["avx512"])) if on] or ["no AVX2"]
    return f"{f['machine']} CPU with {'/'.join(isa)}, {'with' if f['vnni'] else 'without'} VNNI"


def qdq_float_type(model_path) -> str | None:
    """'fp16' when the graph's Q/DQ scales are float16 (the FP16 float path), 'fp32' when float32, None without
    Q/DQ."""
    import onnx
    from onnx import TensorProto

    model = onnx.load(str(model_path), load_external_data=False)
    inits = {i.name: i.data_type for i in model.graph.initializer}
    types = {inits.get(n.input[1]) for n in model.graph.node
             if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 1}
    if TensorProto.FLOAT16 in types:
        return "fp16"
    return "fp32" if types else None


def disagreement_cause(features: dict | None = None, float_type: str | None = None) -> str:
    f = features or cpu_features()
    if float_type == "fp16":
        return ("the graph's Q/DQ scales are FP16 (the FP16 float path): ONNX Runtime's Q/DQ graph fusions (on from "
                "'basic' unless session.disable_quant_qdq) do not compute such graphs literally, on any CPU; "
                "TensorRT implements the literal Q/DQ semantics and is not affected")
    if u8s8_saturation_risk(f):
        return (f"this {describe_cpu(f)}: ONNX Runtime's fused U8S8 INT8 kernels add uint8×int8 products in "
                f"saturating int16 on AVX2 without VNNI (documented by ONNX Runtime); TensorRT accumulates in int32 "
                f"and is not affected")
    return (f"not the known AVX2-without-VNNI saturation ({describe_cpu(f)}); the fused kernels may not support "
            f"this graph exactly — inspect the variant with `python -m trtlab debug`")


def _infer(model_path, batch: np.ndarray, **options) -> np.ndarray:
    from trtlab.backends.ort import OrtRunner

    with OrtRunner(model_path, providers=["CPUExecutionProvider"], **options) as runner:
        fixed = runner.input_shape[0] if isinstance(runner.input_shape[0], int) else _SELF_CHECK_CHUNK
        # A fixed-batch model takes its own batch size only (the runner pads a short last batch).
        return np.concatenate([runner.infer(batch[i:i + fixed]) for i in range(0, len(batch), fixed)])


def literal_outputs_match(reference: np.ndarray, candidate: np.ndarray, rtol: float = FAST_REFERENCE_RTOL) -> dict:
    """Same top-1 on every image and max |Δlogit| ≤ rtol × max |logit| per image."""
    scale = np.abs(reference).max(axis=1)
    worst = float((np.abs(reference - candidate).max(axis=1) / np.maximum(scale, 1e-12)).max())
    same_top1 = bool((reference.argmax(1) == candidate.argmax(1)).all())
    return {"same_top1": same_top1, "max_relative_logit_error": worst, "matches": same_top1 and worst <= rtol}


def disagreement_upper_bound(k: int, n: int, confidence: float = SELF_CHECK_CONFIDENCE) -> float:
    """One-sided Clopper–Pearson upper bound on a rate seen k times in n: the p with P(X ≤ k | n, p) = 1 −
    confidence (1 − (1 − confidence)^(1/n) for k = 0); 1.0 when k = n."""
    if n <= 0 or k >= n:
        return 1.0
    alpha = 1.0 - confidence

    def cdf(p: float) -> float:
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))

    low, high = k / n, 1.0
    for _ in range(100):  # bisection: cdf falls from ≥ 1/2 at p = k/n to 0 at p = 1
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) > alpha else (low, middle)
    return high


def self_check_sample_size(evaluation_images: int, images: int = SELF_CHECK_IMAGES) -> int:
    """How many evaluation images the self-check runs: 1/SELF_CHECK_SHARE of them, within [SELF_CHECK_MIN_IMAGES,
    `images`], never more than there are."""
    share = max(SELF_CHECK_MIN_IMAGES, evaluation_images // SELF_CHECK_SHARE)
    return int(max(0, min(evaluation_images, images, share)))


def graph_structure_key(model_path) -> str:
    """A hash of what ONNX Runtime's graph transformations see: nodes (op, domain, inputs, outputs, attributes),
    graph inputs/outputs and each initializer's name, type and shape — not the initializers' values (the scales),
    which is all that separates the minmax, entropy and percentile variants of one recipe."""
    import hashlib

    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    digest = hashlib.sha256()
    for node in model.graph.node:
        digest.update(repr((node.op_type, node.domain, list(node.input), list(node.output),
                            sorted((a.name, onnx.helper.get_attribute_value(a).__repr__()) for a in node.attribute
                                   if a.type != onnx.AttributeProto.TENSOR))).encode())
    for tensor in model.graph.initializer:
        digest.update(repr((tensor.name, tensor.data_type, list(tensor.dims))).encode())
    digest.update(repr([(v.name, str(v.type)) for v in (*model.graph.input, *model.graph.output)]).encode())
    digest.update(repr([(o.domain, o.version) for o in model.opset_import]).encode())
    return digest.hexdigest()[:16]


# graph structure (+ CPU, ONNX Runtime version) → the check made for it in this process (`self_check_once`)
_checks_by_structure: dict[tuple, dict] = {}


def self_check_once(model_path, cache, indices, variant: str | None = None) -> dict:
    """`ort_qdq_self_check` once per graph structure in this process: a variant whose structure was checked gets
    that check (its `reference_options` hold for the same transformations) with `reused_from` naming the variant it
    was made on and `seconds` 0."""
    import onnxruntime

    key = (graph_structure_key(model_path), describe_cpu(), onnxruntime.__version__)
    variant = variant or Path(str(model_path)).parent.name
    first = _checks_by_structure.get(key)
    if first is None:
        check = ort_qdq_self_check(model_path, cache, indices, variant=variant)
        _checks_by_structure[key] = {**check, "variant": variant}
        return check
    check = {**first, "reused_from": first["variant"], "seconds": 0.0}
    check.pop("variant", None)
    check["message"] = self_check_message(check, variant)
    return check


def forget_self_checks() -> None:
    """Check every graph again (tests; after an ONNX Runtime upgrade in a running kernel)."""
    _checks_by_structure.clear()


def ort_qdq_self_check(model_path, cache, indices, images: int = SELF_CHECK_IMAGES, variant: str | None = None,
                       batch_size: int | None = None) -> dict:
    """A sample of the evaluation images (`self_check_sample_size`: a share of them, at most `images`) of a Q/DQ
    model through ONNX Runtime literally, fused, and fast-literal (`batch_size` is the old name of `images`).

    Returns a dict (stored in the run record as `ort_qdq_check`) with `images` (n), `disagree` (k, top-1 differs
    between fused and literal), `disagreement_upper_bound` (one-sided 95 % Clopper–Pearson), agreement, worst
    cosine, `optimized_is_trustworthy`, the CPU, the cause, whether the fast literal reference matched,
    `reference_options` for OrtRunner, `seconds`, and `message` (one line).
    """
    import time

    from trtlab.data.batches import iter_batches
    from trtlab.evaluation.fidelity import cosine_per_image

    started = time.perf_counter()
    indices = np.asarray(indices, np.int64)
    chunk = indices[:self_check_sample_size(len(indices), batch_size or images)]
    batch = np.concatenate([b.images for b in iter_batches(cache, chunk, _SELF_CHECK_CHUNK)])
    reference = _infer(model_path, batch, **LITERAL_OPTIONS)
    optimized = _infer(model_path, batch, graph_optimization="all")
    fast_options, fast_match = fast_literal_reference(model_path, batch, reference)
    disagree = int((reference.argmax(1) != optimized.argmax(1)).sum())
    cosine = float(cosine_per_image(reference, optimized).min())
    features = cpu_features()
    float_type = qdq_float_type(model_path)
    check = {
        "images": int(len(chunk)),
        "disagree": disagree,
        "disagreement_upper_bound": disagreement_upper_bound(disagree, len(chunk)),
        "confidence": SELF_CHECK_CONFIDENCE,
        "top1_agreement_optimized_vs_reference": float(1 - disagree / max(1, len(chunk))),
        "worst_cosine_optimized_vs_reference": cosine,
        "optimized_is_trustworthy": disagree == 0 and cosine > 0.995,
        "cpu": describe_cpu(features),
        "u8s8_saturation_risk": u8s8_saturation_risk(features),
        "fast_reference_matches": fast_match["matches"],
        "fast_reference_max_relative_logit_error": fast_match["max_relative_logit_error"],
        "fast_candidates_tried": fast_match["tried"],
        "qdq_float_type": float_type,
        "reference_options": dict(fast_options if fast_match["matches"] else LITERAL_OPTIONS),
    }
    check["cause"] = None if check["optimized_is_trustworthy"] else disagreement_cause(features, float_type)
    check["seconds"] = round(time.perf_counter() - started, 3)
    check["message"] = self_check_message(check, variant or Path(str(model_path)).parent.name)
    return check


def fast_literal_reference(model_path, batch: np.ndarray, reference: np.ndarray) -> tuple[dict, dict]:
    """The first of FAST_CANDIDATES that reproduces `reference` (the all-off outputs of `batch`) and its match
    (literal_outputs_match plus `tried`: each candidate's max relative logit error); the last candidate tried and
    its failed match when none does."""
    tried = []
    for options in FAST_CANDIDATES:
        match = literal_outputs_match(reference, _infer(model_path, batch, **options))
        tried.append({**options, "max_relative_logit_error": match["max_relative_logit_error"]})
        if match["matches"]:
            break
    return dict(options), {**match, "tried": tried}


def short_cause(check: dict) -> str:
    """The cause in a few words, for the one line users read (the full cause is in the run record)."""
    if check.get("qdq_float_type") == "fp16" or "FP16 float path" in (check.get("cause") or ""):
        return "FP16 Q/DQ scales, which its fusions do not compute literally"
    if check.get("u8s8_saturation_risk") or "saturating int16" in (check.get("cause") or ""):
        return "AVX2 without VNNI: they saturate"
    return "cause unknown"


def self_check_message(check: dict, variant: str) -> str:
    """One short line that says what the self-check means for the user: ONNX Runtime's own fused INT8 kernels
    (not used by trtlab) agree or not with the literal Q/DQ graph on k of n sample images, why in a few words, and
    that trtlab's numbers come from the literal graph, so they are unaffected. The details (95 % bound, worst
    cosine, the full cause) are in the run record and the debug log (`detail_message`)."""
    n, k = check["images"], check["disagree"]
    if check["optimized_is_trustworthy"]:
        return (f"{variant}: ONNX Runtime's fused INT8 kernels agree with the literal Q/DQ graph on all {n} sample "
                f"images")
    return (f"{variant}: ONNX Runtime's own fused INT8 kernels differ from the literal Q/DQ graph on {k} of {n} sample "
            f"images ({short_cause(check)}); trtlab's numbers come from the literal graph, so they are unaffected")


def detail_message(check: dict) -> str:
    """The self-check's numbers for the run log: the 95 % upper bound on the disagreement rate, the worst logit
    cosine, the full cause, the cost."""
    n, k = check["images"], check["disagree"]
    bound = check.get("disagreement_upper_bound", disagreement_upper_bound(k, n))
    reused = f"; reused the check of {check['reused_from']} (same graph structure)" if check.get("reused_from") else ""
    return (f"self-check detail: {k} of {n} disagree (95 % upper bound on the rate {100 * bound:.1f} %), worst logit "
            f"cosine {check.get('worst_cosine_optimized_vs_reference', float('nan')):.4f}, cause: "
            f"{check.get('cause')}; {check.get('seconds', 0):.1f} s{reused}")


def report_self_check(check: dict, key=None) -> None:
    """Log the self-check's line at INFO — once per cause per process (the CPU does not change between variants;
    each variant's own numbers stay in its run record and the run log, at debug level) — and debug when the fused
    kernels agree. Call it when a variant is built, not when stored results are reused. `key` is accepted for
    callers that name the variant; the cause decides repetition."""
    log.debug(detail_message(check))
    if check["optimized_is_trustworthy"]:
        log.debug(check["message"])
    else:  # a repeated cause is logged at debug level by info_once
        info_once(log, ("ort_qdq_check", check.get("cause")), check["message"])


def reference_runner_options(check: dict | None) -> dict:
    """OrtRunner options for evaluating a Q/DQ variant literally: the fast literal reference when the self-check
    saw it reproduce the all-off outputs, else all optimizations off."""
    return dict((check or {}).get("reference_options") or LITERAL_OPTIONS)
