"""What a model's outputs are, checked before they become stored results.

- **Logits or probabilities.** A graph whose logits output comes from a Softmax (through reshapes), or whose rows
  are all non-negative and sum to 1, gives probabilities: they are stored and ranked as they are (no second
  softmax, so a stored confidence is the model's). A LogSoftmax gives log-probabilities (exp, no softmax).
  Anything else is logits (softmax once).
- **Non-finite rows.** An image whose output holds NaN or ±inf gets no prediction (top-5 indices −1, confidences
  NaN): metrics leave it out of every score (evaluation.results.VariantResult.valid) and count it; the evaluation
  names the images and suggests what to change (an FP32 guard, another scale or algorithm).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)
SUM_TOLERANCE = 1e-3  # rows summing to 1 within this (FP16 softmax included) are probabilities
FLOAT16_MAX = float(np.finfo(np.float16).max)
NO_PREDICTION = -1


@dataclass
class ModelOutputs:
    """One variant's outputs, interpreted: what is stored and how it was read."""

    stored: np.ndarray  # float16, N×C: the model's own values (logits or probabilities), for cosine and drift
    top5_indices: np.ndarray  # (N, k) int32; NO_PREDICTION for rows with non-finite outputs
    top5_probs: np.ndarray  # (N, k) float32; NaN for those rows
    kind: str  # 'logits', 'probabilities' or 'log-probabilities'
    why: str  # how the kind was recognised
    non_finite: np.ndarray  # bool, N: rows with NaN or ±inf

    def record(self, image_ids: list[str], shown: int = 20) -> dict:
        """The run record's account of the outputs: kind, why, and the images with non-finite outputs."""
        rows = np.flatnonzero(self.non_finite)
        return {"kind": self.kind, "why": self.why, "non_finite": int(len(rows)),
                "non_finite_images": [image_ids[i] for i in rows[:shown]]}


def output_kind(values: np.ndarray, final_op: str | None = None) -> tuple[str, str]:
    """('logits' | 'probabilities' | 'log-probabilities', why) for N×C outputs `values` of a graph whose logits
    output is made by `final_op` (graph.classifier.ModelInfo.final_op)."""
    if final_op == "Softmax":
        return "probabilities", "the graph ends in Softmax"
    if final_op == "LogSoftmax":
        return "log-probabilities", "the graph ends in LogSoftmax"
    finite = values[np.isfinite(values).all(axis=1)] if values.size else values
    if len(finite) and finite.shape[1] > 1 and (finite >= -1e-6).all() and \
            np.allclose(finite.astype(np.float64).sum(axis=1), 1.0, atol=SUM_TOLERANCE, rtol=0):
        return "probabilities", "every output row is non-negative and sums to 1"
    return "logits", "raw scores (softmax applied for confidences)"


def interpret_outputs(values: np.ndarray, final_op: str | None = None, k: int = 5,
                      kind: str | None = None) -> ModelOutputs:
    """Top-k classes and confidences of N×C model outputs, with non-finite rows marked (no prediction). `kind`
    forces the reading ('logits' …) instead of recognising it. Row by row, in chunks of rows on a few threads
    (evaluation.row_chunks): a 50,000-image A/B stores four such arrays."""
    from trtlab.evaluation.row_chunks import map_row_chunks

    values = np.asarray(values, np.float32)
    kind, why = (kind, "given") if kind else output_kind(values, final_op)
    k = min(k, values.shape[1]) if values.ndim == 2 and values.shape[1] else 0
    parts = map_row_chunks(len(values), lambda part: _interpret_rows(values[part], kind, k)) \
        if values.ndim == 2 and len(values) else [_interpret_rows(values, kind, k)]
    return ModelOutputs(np.concatenate([c.stored for c in parts]), np.concatenate([c.top5_indices for c in parts]),
                        np.concatenate([c.top5_probs for c in parts]), kind, why,
                        np.concatenate([c.non_finite for c in parts]))


def _interpret_rows(values: np.ndarray, kind: str, k: int) -> ModelOutputs:
    """interpret_outputs on some rows (every figure of a row depends on that row alone)."""
    non_finite = ~np.isfinite(values).all(axis=1) if values.size else np.zeros(len(values), bool)
    every = not non_finite.any()
    ok = slice(None) if every else ~non_finite  # all rows finite (the usual case): no masked copies
    rows = values[ok]
    probs = np.full(values.shape, np.nan, np.float32)
    if kind == "probabilities":
        probs[ok] = rows
    elif kind == "log-probabilities":
        probs[ok] = np.exp(rows)
    else:
        exp = np.exp(rows - rows.max(axis=1, keepdims=True))
        probs[ok] = exp / exp.sum(axis=1, keepdims=True)
    indices = np.full((len(values), k), NO_PREDICTION, np.int32)
    top = np.full((len(values), k), np.nan, np.float32)
    if k and len(rows):
        ranked_probs = probs[ok]
        ranked = np.argpartition(-ranked_probs, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(ranked_probs, ranked, axis=1), axis=1, kind="stable")
        chosen = np.take_along_axis(ranked, order, axis=1)
        indices[ok] = chosen
        top[ok] = np.take_along_axis(ranked_probs, chosen.astype(np.int64), axis=1)
    # Stored as float16: finite values beyond its range are clipped (not turned into inf); NaN/inf rows stay as the
    # model gave them, for inspection.
    clipped = np.clip(values, -FLOAT16_MAX, FLOAT16_MAX)
    stored = (clipped if every else np.where(np.isfinite(values), clipped, values)).astype(np.float16)
    return ModelOutputs(stored, indices, top, kind, "", non_finite)


def report_non_finite(variant: str, non_finite: np.ndarray, image_ids: list[str], precision: str = "fp32",
                      shown: int = 5) -> str | None:
    """Log (warning) and return the line naming the images of `variant` whose outputs were NaN/inf (`non_finite`,
    a bool per image), with what to change; None when every output was finite."""
    rows = np.flatnonzero(non_finite)
    if not len(rows):
        return None
    names = ", ".join(image_ids[i] for i in rows[:shown]) + (", …" if len(rows) > shown else "")
    if precision == "fp32":
        fix = ("the FP32 model itself overflows on them: check the preprocessing (--preset) and the model's export "
               "before quantizing it")
    elif precision == "fp16":
        fix = "keep the overflowing layers in FP32 with a guard (e.g. --guards last_layer; debug finds the layer)"
    else:
        fix = ("keep the overflowing layer in FP32 with a guard (e.g. --guards last_layer or op:Softmax; `python -m "
               "trtlab debug` finds the layer), or try another scale or algorithm (--algorithms minmax, "
               "--percentile 99.9)")
    line = (f"{variant}: {len(rows)} of {len(non_finite)} image(s) gave non-finite outputs (NaN/inf): {names}; they "
            f"have no prediction and are left out of every score — {fix}")
    log.warning(line)
    return line


def describe_kind(model_name: str, outputs: ModelOutputs) -> str | None:
    """The line saying a model's outputs are read as probabilities (None for plain logits)."""
    if outputs.kind == "logits":
        return None
    how = "as they are" if outputs.kind == "probabilities" else "after exp"
    return (f"{model_name} outputs {outputs.kind} ({outputs.why}): confidences are the model's own, taken {how} "
            f"(no second softmax)")
