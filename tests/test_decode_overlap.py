"""Issue 38, the cold path: compare() decodes the calibration images first and the rest in the background while
every variant is evaluated in lock-step on the rows as they are committed. What it stores must be what decoding
everything first stores: same images, same order, same logits bit for bit, same identities — a damaged JPEG found
only while the evaluation runs included (named and skipped as before)."""
from __future__ import annotations

import functools
import logging
import threading
import time

import numpy as np
import pytest

COPIES = 3  # the demo photos re-encoded at three JPEG qualities: ~80 files, several decode chunks and batches


@pytest.fixture(scope="module")
def photo_set(demo_data, tmp_path_factory):
    """(Dataset of re-encoded demo photos plus one truncated JPEG, a Split that evaluates it in a shuffled order)."""
    import cv2

    from trtlab.data.dataset import Dataset
    from trtlab.data.split import Split

    folder = tmp_path_factory.mktemp("overlap-photos")
    paths, labels = [], []
    for copy, quality in enumerate((95, 85, 75)[:COPIES]):
        for k, (path, label) in enumerate(zip(demo_data.paths, demo_data.labels)):
            image = cv2.imread(path)
            target = folder / f"q{quality}_{k:02d}.jpg"
            cv2.imwrite(str(target), image, [cv2.IMWRITE_JPEG_QUALITY, quality])
            paths.append(str(target))
            labels.append(int(label))
    broken = folder / "broken.jpg"
    broken.write_bytes((folder / "q95_00.jpg").read_bytes()[:40])  # a truncated JPEG
    paths.insert(len(paths) // 2, str(broken))
    labels.insert(len(labels) // 2, labels[0])
    dataset = Dataset("overlap-photos", paths, np.asarray(labels, np.int64), root=str(folder))
    order = np.random.default_rng(0).permutation(len(paths))
    calibration = np.sort(order[:8][order[:8] != paths.index(str(broken))])
    evaluation = np.asarray([i for i in order if i not in set(calibration)], np.int64)  # shuffled, broken inside
    return dataset, Split(calibration, evaluation, seed=0, dataset_fingerprint=dataset.fingerprint(), method="test")


def _run(demo_model, dataset, split, workspace, overlap: bool, monkeypatch, watch: list | None = None,
         seconds_per_image: float = 0.02):
    """compare() cold in `workspace` with small decode chunks and batches (so both really interleave). With `watch`,
    the background decode waits until the evaluation asks for rows, then decodes slowly, and `watch` gets, per
    variant, whether the decode was still running when that variant's first batch came."""
    import trtlab.data.decode_workers as workers
    import trtlab.workflows.compare as compare_module
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.decode_stream import RowStream
    from trtlab.quantization.variants import Recipe

    gate = threading.Event() if watch is not None else None
    if watch is not None:
        real_batches = RowStream.batches

        def watched(self, rows):
            gate.set()
            for k, batch in enumerate(real_batches(self, rows)):
                if k == 0:
                    watch.append(self.decode._thread.is_alive())
                yield batch

        monkeypatch.setattr(RowStream, "batches", watched)

    # two decode workers on any machine: with one per core (16 on the lent GPU host) every chunk was in flight at
    # once, the background decode ended before the evaluation's second variant began, and no interruption could stop it
    monkeypatch.setattr(compare_module, "build_decode_cache", functools.partial(build_decode_cache, chunk_size=8,
                                                                                workers=2))
    if gate is not None:  # the rows decoded in the background: only once the evaluation asks for them, slowly
        real = workers.decode_rows

        def slow(items, *args):
            if threading.current_thread().name.startswith("trtlab-decode") and \
                    not any(item[0] in set(split.calibration) for item in items):
                gate.wait(60)
                time.sleep(seconds_per_image * len(items))
            return real(items, *args)

        monkeypatch.setattr(workers, "decode_rows", slow)
    try:
        return compare_module.compare(demo_model, dataset, [Recipe(algorithm="minmax", calibration_images=6)],
                                      split=split, workspace=workspace, backend="ort", batch_size=8, engines=False,
                                      parallel=False, overlap_decode=overlap, progress=True)
    finally:
        monkeypatch.undo()


def test_overlapped_decode_stores_what_decoding_first_stores(demo_model, photo_set, tmp_path, monkeypatch, caplog):
    dataset, split = photo_set
    first_batch_while_decoding = []
    with caplog.at_level(logging.INFO, logger="trtlab"):
        overlapped = _run(demo_model, dataset, split, tmp_path / "overlap", True, monkeypatch,
                          first_batch_while_decoding)
        said = caplog.text
        caplog.clear()
        sequential = _run(demo_model, dataset, split, tmp_path / "first", False, monkeypatch)
    assert "decoding overlaps evaluation" in said
    assert "decoding every image first, not overlapped with the evaluation: RunOptions(overlap_decode=False)" \
        in caplog.text
    # both variants streamed, each starting while the background decode was still running
    assert first_batch_while_decoding == [True, True]
    broken = dataset.paths.index(next(p for p in dataset.paths if p.endswith("broken.jpg")))
    for result in (overlapped, sequential):  # the damaged JPEG is named and skipped, in the decode cache and record
        assert [f["path"] for f in result.cache.failure_list()] == [dataset.paths[broken]]
        assert result.cache.describe()["decoded"] == len(dataset) - 1
    assert "broken.jpg" in said and "could not be decoded and are skipped" in said
    assert overlapped.cache.key == sequential.cache.key
    assert overlapped.cache.decoded_now == sequential.cache.decoded_now == len(dataset) - 1
    for name in ("status.npy", "checksums.npy", "failures.json", "crops.u8"):
        assert (overlapped.cache.folder / name).read_bytes() == (sequential.cache.folder / name).read_bytes(), name
    assert list(overlapped.table.index) == list(sequential.table.index) == ["fp32", "int8-minmax@6"]
    assert overlapped.store.folder.name == sequential.store.folder.name  # the experiment's identity
    for label in overlapped.table.index:
        a, b = overlapped.store.load(label), sequential.store.load(label)
        assert a.image_ids == b.image_ids and len(a.image_ids) == len(split.evaluation) - 1
        assert a.image_ids == [dataset.image_ids()[i] for i in split.evaluation if i != broken]  # the split's order
        for field in ("labels", "top5_indices", "top5_probs", "logits"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), (label, field)
            assert getattr(a, field).tobytes() == getattr(b, field).tobytes(), (label, field)
        for key in ("variant_key", "identity", "experiment", "model_sha256", "recipe"):
            assert a.record[key] == b.record[key], (label, key)
        assert a.record["dataset"] == b.record["dataset"]  # decode cache key, skipped images (named)
        assert [s["file"] for s in a.record["dataset"]["skipped_images"]] == [dataset.paths[broken]]


def test_an_interrupted_overlapped_decode_resumes(demo_model, photo_set, tmp_path, monkeypatch):
    """An error while the variants are evaluated stops the background decode; what it committed stays, and the
    next compare() decodes only the rest."""
    import trtlab.evaluation.evaluate as evaluate_module
    from trtlab.data.decode_cache import build_decode_cache

    dataset, split = photo_set
    real = evaluate_module.infer_steps

    def failing(*args, **kwargs):
        for k, step in enumerate(real(*args, **kwargs)):
            if k == 1:
                raise KeyboardInterrupt
            yield step

    monkeypatch.setattr(evaluate_module, "infer_steps", failing)
    with pytest.raises(KeyboardInterrupt):
        _run(demo_model, dataset, split, tmp_path, True, monkeypatch, [], seconds_per_image=0.5)
    cache = build_decode_cache(dataset, "tf-lite", tmp_path, progress=False, stop_after=0)  # looks, decodes nothing
    decoded = int((cache.status == 1).sum())
    assert 8 <= decoded < len(dataset) - 1  # the calibration rows and some more, not all
    result = _run(demo_model, dataset, split, tmp_path, True, monkeypatch)
    assert result.cache.decoded_now == len(dataset) - 1 - decoded
    assert result.cache.describe()["decoded"] == len(dataset) - 1


def test_the_report_modules_are_imported_beside_the_evaluation():
    """The cold A/B's report step paid pandas' and scipy.stats' first import (2.6 s against 1.0 s warm on the H200's
    pinned cores): compare() imports them in a thread while the variants are evaluated. In a fresh interpreter."""
    import subprocess
    import sys

    code = ("import sys, threading\n"
            "from trtlab.workflows.overlap import REPORT_MODULES, import_report_modules_meanwhile\n"
            "assert not any(m in sys.modules for m in REPORT_MODULES), [m for m in REPORT_MODULES if m in sys.modules]\n"
            "import_report_modules_meanwhile()\n"
            "[t.join(120) for t in threading.enumerate() if t.name == 'trtlab-import-report']\n"
            "print(all(m in sys.modules for m in REPORT_MODULES))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
