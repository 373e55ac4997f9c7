"""Per-image fidelity of a variant to its reference (issue 26): logit cosine, KL of the softmax, top-1 and top-5
flips — what the paired verdict between two variants compares. Below metrics and significance, which both use it."""
from __future__ import annotations

import numpy as np

from trtlab.evaluation.results import VariantResult
from trtlab.evaluation.row_chunks import per_row


def as_float64(values: np.ndarray) -> np.ndarray:
    """float64 of any float array; float16 through float32 (exact both ways, and numpy's float16 → float64 cast is
    about 6× slower than the two casts together)."""
    values = np.asarray(values)
    return (values.astype(np.float32) if values.dtype == np.float16 else values).astype(np.float64, copy=False)


def cosine_per_image(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row pair, in float64, by chunks of rows (no 400 MB float64 copy of 50,000 × 1000 logits)."""
    def chunk(part: slice) -> np.ndarray:
        x, y = as_float64(a[part]), as_float64(b[part])
        norms = np.sqrt(np.einsum("ij,ij->i", x, x)) * np.sqrt(np.einsum("ij,ij->i", y, y))
        return np.where(norms > 0, np.einsum("ij,ij->i", x, y) / np.where(norms > 0, norms, 1), 0.0)

    return per_row(len(a), chunk)


def _rows(array: np.ndarray, index: np.ndarray) -> np.ndarray:
    """`array[index]`, without the copy when `index` is every row in order (the usual aligned case: a 50,000 × 1000
    logit copy each time otherwise)."""
    if len(index) == len(array) and (len(index) == 0 or (index[0] == 0 and index[-1] == len(array) - 1
                                                           and bool((np.diff(index) == 1).all()))):
        return array
    return array[index]


def aligned_cosine(result: VariantResult, reference: VariantResult) -> np.ndarray:
    """Logit cosine per image over result.align(reference), computed once per pair (read-only)."""
    def compute() -> np.ndarray:
        mine, theirs = result.align(reference)
        cosine = cosine_per_image(_rows(result.logits, mine), _rows(reference.logits, theirs))
        cosine.flags.writeable = False
        return cosine

    return result.paired("cosine", reference, compute)


FIDELITY_METRICS = ("cosine", "kl", "top1_flip", "top5_flip")
#: The variant's probabilities are floored here in every KL, so a class the FP16-stored variant rounds to 0 costs a
#: large, finite term rather than inf.
KL_PROBABILITY_FLOOR = 1e-12


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """Softmax of each row, float64 (shifted by the row's max: no overflow), each row summing to 1."""
    values = as_float64(logits)
    values = np.exp(values - values.max(axis=1, keepdims=True))
    return values / np.maximum(values.sum(axis=1, keepdims=True), 1e-300)


def probabilities(result: VariantResult, rows: np.ndarray) -> np.ndarray:
    """Class probabilities of the given rows, read the way the run record says the outputs are (logits: softmax;
    probabilities: as stored; log-probabilities: exp, which is their softmax), float64, each row summing to 1."""
    kind = ((result.record or {}).get("outputs") or {}).get("kind", "logits")
    if kind != "probabilities":
        return softmax_rows(result.logits[rows])
    values = np.clip(as_float64(result.logits[rows]), 0.0, None)
    return values / np.maximum(values.sum(axis=1, keepdims=True), 1e-300)


def kl_rows(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL(p ‖ q) per row of two probability arrays, in nats, q floored at KL_PROBABILITY_FLOOR: the one KL of
    trtlab (the verdict's per-image KL and the layer debugger's logits KL)."""
    terms = np.where(p > 0, p * (np.log(np.maximum(p, 1e-300)) - np.log(np.maximum(q, KL_PROBABILITY_FLOOR))), 0.0)
    return np.maximum(terms.sum(axis=1), 0.0)


def softmax_kl(ref_logits: np.ndarray, test_logits: np.ndarray) -> np.ndarray:
    """Per-row KL(softmax(ref) ‖ softmax(test)) of two logit arrays (N, classes), in nats (kl_rows)."""
    return kl_rows(softmax_rows(ref_logits), softmax_rows(test_logits))


def kl_per_image(result: VariantResult, reference: VariantResult, mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """KL(reference ‖ variant) of the class probabilities per aligned image, in nats (0 = the same distribution;
    kl_rows, the variant's probabilities floored at KL_PROBABILITY_FLOOR)."""
    return per_row(len(mine), lambda part: kl_rows(probabilities(reference, theirs[part]),
                                                     probabilities(result, mine[part])))


def fidelity_per_image(result: VariantResult, reference: VariantResult, image_ids=None) -> dict:
    """Per-image fidelity of `result` to `reference`: logit cosine, KL of the softmax (reference ‖ variant), top-1
    flip (1 when the top-1 differs) and top-5 flip (the share of the reference's top-5 classes missing from the
    variant's top-5: 0, 0.2, … 1). Over the images both hold with a prediction, or only `image_ids` (in that
    order) when given — so two variants are compared on the same images, image by image. Returns
    {"image_ids": [...], metric: array}."""
    if image_ids is None:
        return dict(result.paired("fidelity", reference, lambda: _read_only(_fidelity_per_image(result, reference,
                                                                                                 None))))
    return _fidelity_per_image(result, reference, image_ids)


def _read_only(figures: dict) -> dict:
    for value in figures.values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False  # memoized: shared by every caller
    return figures


def _fidelity_per_image(result: VariantResult, reference: VariantResult, image_ids) -> dict:
    mine, theirs = result.align(reference)
    if image_ids is not None:
        position = {reference.image_ids[t]: (m, t) for m, t in zip(mine, theirs)}
        pairs = [position[i] for i in image_ids]
        mine = np.asarray([m for m, _ in pairs], np.int64)
        theirs = np.asarray([t for _, t in pairs], np.int64)
    a5, b5 = result.top5_indices[mine], reference.top5_indices[theirs]
    shared = (b5[:, :, None] == a5[:, None, :]).any(axis=2).sum(axis=1) if len(mine) else np.zeros(0)
    return {"image_ids": [reference.image_ids[t] for t in theirs],
            "cosine": aligned_cosine(result, reference) if image_ids is None else
            cosine_per_image(result.logits[mine], reference.logits[theirs]),
            "kl": kl_per_image(result, reference, mine, theirs),
            "top1_flip": (result.top1[mine] != reference.top1[theirs]).astype(np.float64),
            "top5_flip": 1.0 - shared / max(1, b5.shape[1])}


def shared_images(results, reference: VariantResult) -> list[str]:
    """The image ids every result and the reference hold with a prediction, in the reference's order."""
    keep = None
    for result in results:
        _, theirs = result.align(reference)
        ids = {reference.image_ids[t] for t in theirs}
        keep = ids if keep is None else keep & ids
    return [i for i in reference.image_ids if keep is not None and i in keep]
