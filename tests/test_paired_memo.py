"""Issue 38: a 50,000-image A/B's report and verdict were 17 s of 63 on the H200 — the same paired figures
recomputed ~20 times, float16 logits cast straight to float64, and every variant's outputs interpreted on one
thread. These tests hold the faster paths to the figures of the plain ones: a stored result loaded again is the same
object only while its files are unchanged, paired figures are computed once per pair and never handed to another
pair, and the chunked output interpretation equals the row-by-row one (real logits of the demo model)."""
from __future__ import annotations

import numpy as np
import pytest

from trtlab.evaluation import row_chunks
from trtlab.evaluation.fidelity import cosine_per_image, fidelity_per_image
from trtlab.evaluation.metrics import agreement
from trtlab.evaluation.outputs import _interpret_rows, interpret_outputs
from trtlab.evaluation.results import ResultsStore, VariantResult


@pytest.fixture(scope="module")
def demo_logits(demo_model, demo_cache) -> np.ndarray:
    """The demo model's FP32 logits on the demo photos (ONNX Runtime)."""
    import onnxruntime as ort

    from trtlab.data.preprocess import normalize_batch

    session = ort.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"])
    images = normalize_batch(np.asarray(demo_cache.crops[demo_cache.valid_indices]), demo_cache.preprocess)
    return session.run(None, {session.get_inputs()[0].name: images})[0].astype(np.float32)


def _result(name: str, logits: np.ndarray) -> VariantResult:
    outputs = interpret_outputs(logits, kind="logits")
    return VariantResult(name, [f"photo{k}" for k in range(len(logits))], np.full(len(logits), -1, np.int64),
                         outputs.top5_indices, outputs.top5_probs, outputs.stored, {"backend": {"backend": "ort-cpu"}})


def test_chunked_interpretation_equals_row_by_row(demo_logits, monkeypatch):
    # Chunks of 7 rows on up to 4 threads, NaN/inf planted across chunk edges, against each row on its own.
    monkeypatch.setattr(row_chunks, "ROWS_PER_CHUNK", 7)
    logits = np.concatenate([demo_logits, demo_logits[::-1] * 3.0])
    logits[6, 10] = np.nan
    logits[7, :] = np.inf
    logits[20, 3] = 1e6  # beyond float16: clipped in the stored copy
    whole = interpret_outputs(logits, kind="logits")
    for row in range(len(logits)):
        alone = _interpret_rows(logits[row:row + 1], "logits", 5)
        assert np.array_equal(whole.stored[row], alone.stored[0], equal_nan=True)
        assert np.array_equal(whole.top5_indices[row], alone.top5_indices[0])
        assert np.array_equal(whole.top5_probs[row], alone.top5_probs[0], equal_nan=True)
    assert whole.non_finite.tolist() == [r in (6, 7) for r in range(len(logits))]
    assert (whole.top5_indices[6] == -1).all() and np.isfinite(whole.stored[20]).all()
    # the top-1 of a finite row is its largest logit
    finite = ~whole.non_finite
    assert np.array_equal(whole.top5_indices[finite, 0], logits[finite].argmax(axis=1))


def test_cosine_by_chunks_equals_the_whole_array_formula(demo_logits, monkeypatch):
    monkeypatch.setattr(row_chunks, "ROWS_PER_CHUNK", 5)
    a = demo_logits.astype(np.float16)
    b = (demo_logits * 0.9 + 0.3).astype(np.float16)
    x, y = a.astype(np.float64), b.astype(np.float64)
    plain = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    np.testing.assert_allclose(cosine_per_image(a, b), plain, rtol=0, atol=1e-14)


def test_a_reloaded_result_is_the_same_object_until_its_files_change(tmp_path, demo_logits):
    store = ResultsStore(tmp_path / "store")
    store.save(_result("fp32", demo_logits))
    store.save(_result("int8", demo_logits * 0.95 + 0.1))
    first, again = store.load_all(), store.load_all()
    assert first["fp32"] is again["fp32"] and first["int8"] is again["int8"]
    assert not first["int8"].logits.flags.writeable  # shared: nobody may change it in place
    before = agreement(first["int8"], first["fp32"])
    assert agreement(again["int8"], again["fp32"]) == before  # the memo, same figures
    # The variant is evaluated again (another result under the same label): a new object with its own figures.
    store.save(_result("int8", demo_logits[:, ::-1].copy()), replaces="int8")
    changed = store.load("int8")
    assert changed is not first["int8"]
    after = agreement(changed, store.load("fp32"))
    assert after["cosine_mean"] < before["cosine_mean"] - 0.1
    assert after["top1_agreement"] < before["top1_agreement"]


def test_paired_figures_are_kept_per_pair(demo_logits):
    fp32 = _result("fp32", demo_logits)
    near = _result("near", demo_logits * 0.99)
    far = _result("far", demo_logits[:, ::-1].copy())
    close = fidelity_per_image(near, fp32)
    distant = fidelity_per_image(near, far)
    assert close["cosine"].mean() > distant["cosine"].mean()
    assert fidelity_per_image(near, fp32)["cosine"] is close["cosine"]  # computed once
    with pytest.raises(ValueError):
        close["cosine"][0] = 0.0  # the memo's arrays are read-only
    # a pair asked with only some images is computed for those, not taken from the memo
    some = fidelity_per_image(near, fp32, image_ids=["photo3", "photo1"])
    assert some["image_ids"] == ["photo3", "photo1"]
    assert some["cosine"].tolist() == [close["cosine"][3], close["cosine"][1]]
