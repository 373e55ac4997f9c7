"""The faster literal INT8 reference (ONNX Runtime's `session.disable_quant_qdq` with other optimizations on)
reproduces the literal Q/DQ outputs (all optimizations off) on the demo's INT8 variants, and the self-check says in
one line how ORT's fused kernels differ and why (issue 12)."""
from __future__ import annotations

import numpy as np
import pytest

from trtlab.backends.ort import OrtRunner
from trtlab.data.demo import demo_split
from trtlab.evaluation.literal_check import (FAST_LITERAL_OPTIONS, detail_message, FAST_REFERENCE_RTOL, LITERAL_OPTIONS,
                                            SELF_CHECK_IMAGES, SELF_CHECK_MIN_IMAGES, disagreement_upper_bound,
                                            literal_outputs_match, self_check_sample_size,
                              ort_qdq_self_check, reference_runner_options, u8s8_saturation_risk)
from trtlab.data.preprocess import normalize_batch
from trtlab.quantization.recipe import Recipe
from trtlab.quantization.variants import build_variant


@pytest.fixture(scope="module")
def demo_int8(demo_model, demo_data, demo_cache, session_workspace):
    split = demo_split(demo_data)
    variants = {a: build_variant(demo_model, Recipe(algorithm=a), demo_cache, split.calibration, session_workspace,
                                 progress=False) for a in ("minmax", "entropy", "percentile")}
    batch = normalize_batch(np.asarray(demo_cache.crops[split.evaluation]), demo_cache.preprocess)
    return variants, batch, split


def _logits(path, batch, **options):
    with OrtRunner(path, providers=["CPUExecutionProvider"], **options) as runner:
        return runner.infer(batch)


@pytest.mark.parametrize("algorithm", ["minmax", "entropy", "percentile"])
def test_fast_literal_reference_reproduces_the_literal_outputs(demo_int8, algorithm):
    variants, batch, _ = demo_int8
    path = variants[algorithm].model_path
    literal = _logits(path, batch, **LITERAL_OPTIONS)
    fast = _logits(path, batch, **FAST_LITERAL_OPTIONS)
    # top-1 identical on all 20 labelled photos, logits within 1e-4 of each image's logit range (measured 2–4e-7:
    # float32 rounding; one int8 step is 1/127 ≈ 8e-3 of a range, so any re-rounded activation would show)
    np.testing.assert_array_equal(literal.argmax(1), fast.argmax(1))
    match = literal_outputs_match(literal, fast)
    assert match["matches"] and match["max_relative_logit_error"] <= FAST_REFERENCE_RTOL
    # the check can fail: ORT's fused INT8 kernels are not literal (on AVX2 without VNNI they saturate)
    fused = literal_outputs_match(literal, _logits(path, batch, graph_optimization="all"))
    assert not fused["matches"]


def test_self_check_reports_k_of_n_and_chooses_the_fast_reference(demo_int8, demo_cache):
    variants, _, split = demo_int8
    check = ort_qdq_self_check(variants["entropy"].model_path, demo_cache, split.evaluation, variant="int8-entropy")
    # issue 19: up to 64 images bound the rate; issue 29: at most a share of the evaluation (the demo's 20 → 4)
    n = self_check_sample_size(len(split.evaluation))
    assert n == max(SELF_CHECK_MIN_IMAGES, min(SELF_CHECK_IMAGES, len(split.evaluation) // 16))
    assert check["images"] == n and check["fast_reference_matches"]
    assert check["disagreement_upper_bound"] == disagreement_upper_bound(check["disagree"], n)
    assert reference_runner_options(check) == FAST_LITERAL_OPTIONS
    message = check["message"]
    assert message.startswith("int8-entropy: ") and "\n" not in message
    detail = detail_message(check)  # the numbers and the full cause: the run log (debug)
    if not check["optimized_is_trustworthy"]:
        assert f"on {check['disagree']} of {n} sample images" in message and "unaffected" in message
        if check["qdq_float_type"] == "fp16":  # the FP16 float path (the default): ORT's Q/DQ fusions, any CPU
            assert "FP16" in message and "disable_quant_qdq" in detail and "TensorRT" in detail
        elif u8s8_saturation_risk():
            assert "without VNNI" in message and "saturating int16" in detail and "TensorRT" in detail
    assert "(95 % upper bound on the rate " in detail
    # the old record keys stay (run records, dashboards)
    assert {"top1_agreement_optimized_vs_reference", "worst_cosine_optimized_vs_reference",
            "optimized_is_trustworthy"} <= set(check)


def test_reference_falls_back_to_all_off_when_the_fast_path_differs(demo_int8, demo_cache, monkeypatch):
    variants, _, split = demo_int8
    real = OrtRunner.infer_impl

    def skewed_when_fast(self, batch):  # a fast path that re-rounds: must not be used as the reference
        logits = real(self, batch)
        return logits * 1.01 if self.disable_quant_qdq else logits

    monkeypatch.setattr(OrtRunner, "infer_impl", skewed_when_fast)
    check = ort_qdq_self_check(variants["minmax"].model_path, demo_cache, split.evaluation)
    assert not check["fast_reference_matches"] and reference_runner_options(check) == LITERAL_OPTIONS


def test_the_self_check_runs_once_per_graph_structure(demo_int8, demo_model, demo_cache, monkeypatch):
    """Issue 29: the self-check cost ~3× each INT8 variant's evaluation on the demo; minmax, entropy and percentile
    variants of one recipe differ only in scale values, so it runs once for them, on a share of the images."""
    from trtlab.evaluation import literal_check

    variants, _, split = demo_int8
    assert len({literal_check.graph_structure_key(v.model_path) for v in variants.values()}) == 1
    assert literal_check.graph_structure_key(demo_model) != literal_check.graph_structure_key(
        variants["minmax"].model_path)  # another structure: its own check
    calls = []
    real = literal_check.ort_qdq_self_check
    monkeypatch.setattr(literal_check, "ort_qdq_self_check", lambda *a, **k: calls.append(a) or real(*a, **k))
    checks = {name: literal_check.self_check_once(v.model_path, demo_cache, split.evaluation, variant=name)
              for name, v in variants.items()}
    assert len(calls) == 1 and "reused_from" not in checks["minmax"]
    assert checks["entropy"]["reused_from"] == "minmax" and checks["entropy"]["seconds"] == 0
    assert checks["percentile"]["message"].startswith("percentile: ")
    assert all(c["reference_options"] == checks["minmax"]["reference_options"] for c in checks.values())
    assert checks["minmax"]["images"] == self_check_sample_size(len(split.evaluation)) < len(split.evaluation)
