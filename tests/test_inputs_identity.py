"""Identity covers what a result depends on, data side (issue 18): an image is identified by its content, so a
same-size replacement that keeps its mtime (`cp -p`, `rsync -a`, unzip) is a new image — new dataset fingerprint,
new decode cache, no reused predictions — while a file only touched is the same one. Content hashes are read once
and remembered by stat. The decode cache verifies every row it reads: garbage of the right size in crops.u8 is
detected, named, set aside and rebuilt, and a damaged row is decoded again. Each test checks the message and that
inputs and earlier results are intact."""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from test_bad_inputs import make_classifier, run_cli, snapshot
from trtlab.data import file_hashes as fh
from trtlab.data.dataset import Dataset
from trtlab.data.decode_cache import DECODED, build_decode_cache, cache_folder
from trtlab.data.preprocess import decode_image, get_preprocess

SPEC = get_preprocess("tf-lite")


def _same_size_bmps(demo_data, folder: Path, count: int = 4) -> list[Path]:
    """Real photos as 96×96 BMPs: every file has the same size, so one can replace another byte for byte."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, source in enumerate(demo_data.paths[:count + 1]):
        image = cv2.resize(cv2.imread(source, cv2.IMREAD_COLOR), (96, 96), interpolation=cv2.INTER_AREA)
        path = folder / f"photo{n}.bmp" if n < count else folder.parent / f"{folder.name}-replacement.bmp"
        cv2.imwrite(str(path), image)
        paths.append(path)
    return paths


def _replace_keeping_size_mtime_inode(victim: Path, replacement: Path) -> None:
    """What `cp -p`, `rsync -a --inplace` or an unzip over the old file leave: other bytes, same size, same
    modification time (to the nanosecond), same inode."""
    before = victim.stat()
    data = replacement.read_bytes()
    assert len(data) == before.st_size
    with open(victim, "r+b") as out:  # in place: the inode stays
        out.write(data)
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = victim.stat()
    # The old identity (path, size, whole-second mtime) — and even (size, mtime_ns, inode) — cannot see this.
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


def test_a_same_size_replacement_keeping_its_mtime_is_a_new_image(demo_data, tmp_path):
    *photos, spare = _same_size_bmps(demo_data, tmp_path / "photos")
    dataset = Dataset.from_folder(tmp_path / "photos")
    first = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)
    fingerprint, old_crops = dataset.fingerprint(), np.asarray(first.crops).copy()

    _replace_keeping_size_mtime_inode(photos[1], spare)
    again = Dataset.from_folder(tmp_path / "photos")
    assert again.fingerprint() != fingerprint
    second = build_decode_cache(again, "tf-lite", tmp_path / "ws", progress=False)
    assert second.folder != first.folder and second.decoded_now == len(photos)  # stale crops are never reused
    assert np.array_equal(second.crops[1], decode_image(spare, SPEC))
    assert not np.array_equal(second.crops[1], old_crops[1])
    assert np.array_equal(np.asarray(first.crops), old_crops)  # the earlier cache is left as it was


def test_a_touched_or_copied_file_is_the_same_image(demo_data, tmp_path):
    photos = _same_size_bmps(demo_data, tmp_path / "photos")[:-1]
    dataset = Dataset.from_folder(tmp_path / "photos")
    first = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)
    os.utime(photos[0], (12345, 12345))
    shutil.copy2(photos[2], tmp_path / "copy.bmp")
    os.replace(tmp_path / "copy.bmp", photos[2])  # rsync -a: a new inode with the same bytes
    again = Dataset.from_folder(tmp_path / "photos")
    assert again.fingerprint() == dataset.fingerprint()
    second = build_decode_cache(again, "tf-lite", tmp_path / "ws", progress=False)
    assert second.folder == first.folder and second.decoded_now == 0


def test_a_replaced_photo_is_evaluated_again_and_earlier_results_stay(demo_data, tmp_path, capsys):
    *photos, spare = _same_size_bmps(demo_data, tmp_path / "photos" / "n01440764")
    model, ws = make_classifier(tmp_path / "models" / "tiny.onnx"), tmp_path / "ws"
    argv = ("eval", "--model", model, "--data", tmp_path / "photos", "--workspace", ws, "-q")
    assert run_cli(capsys, *argv)[0] == 0
    first_store = snapshot(ws / "results")
    _replace_keeping_size_mtime_inode(photos[0], spare)
    assert run_cli(capsys, *argv)[0] == 0
    stores = sorted((ws / "results").iterdir())
    assert len(stores) == 2  # a new experiment (new data fingerprint): nothing reused from the first
    assert {k: v for k, v in snapshot(ws / "results").items() if k in first_store} == first_store


def test_hashes_are_read_once_and_remembered_by_stat_across_processes(demo_data, tmp_path, monkeypatch):
    store = fh.FileHashes(tmp_path / "hashes.sqlite")
    paths = [str(p) for p in _same_size_bmps(demo_data, tmp_path / "photos")[:-1]]
    first = store.hashes(paths, progress=False)
    assert store.hashed == len(paths) and len(set(first)) == len(paths)
    assert first == [fh.content_hash(Path(p).read_bytes()) for p in paths]
    # Just written: a change in the same clock tick would leave the stat as it is, so the hash is taken again.
    assert store.hashes(paths, progress=False) == first and store.hashed == 2 * len(paths)
    monkeypatch.setattr(fh, "RACY_NS", 0)  # as if the files were older than the racy window
    store.hashes(paths, progress=False)
    store.forget()  # a new process: only the store on disk remembers
    fresh = fh.FileHashes(tmp_path / "hashes.sqlite")
    assert fresh.hashes(paths, progress=False) == first and fresh.hashed == 0
    os.utime(paths[0], (1, 1))  # a changed stat (ctime moves too): read again, same content, same hash
    assert fresh.hashes(paths, progress=False) == first and fresh.hashed == 1
    missing = fresh.hashes([str(tmp_path / "gone.jpg")], progress=False)
    assert missing == [fh.MISSING]


def test_a_damaged_hash_store_is_set_aside_and_costs_only_time(demo_data, tmp_path, caplog):
    store_path = tmp_path / "hashes.sqlite"
    store_path.write_bytes(b"this is not an sqlite file" * 100)
    paths = [str(p) for p in _same_size_bmps(demo_data, tmp_path / "photos")[:-1]]
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        hashes = fh.FileHashes(store_path).hashes(paths, progress=False)
    assert hashes == [fh.content_hash(Path(p).read_bytes()) for p in paths]
    assert str(store_path) in caplog.text and "set aside" in caplog.text


def test_garbage_of_the_right_size_in_crops_is_detected_set_aside_and_rebuilt(demo_data, tmp_path, caplog):
    dataset = demo_data.subset(np.arange(8), name="eight")
    first = build_decode_cache(dataset, "tf-lite", tmp_path, progress=False)
    clean = np.asarray(first.crops).copy()
    crops = first.folder / "crops.u8"
    crops.write_bytes(np.random.default_rng(0).integers(0, 256, crops.stat().st_size, np.uint8).tobytes())
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        again = build_decode_cache(dataset, "tf-lite", tmp_path, progress=False)
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert str(crops) in warning and "set aside" in warning and "do not match their checksums" in warning
    assert again.decoded_now == len(dataset) and (again.status == DECODED).all()
    np.testing.assert_array_equal(np.asarray(again.crops), clean)
    assert list(first.folder.glob("crops.u8.damaged-*"))


def test_a_row_damaged_while_open_is_caught_when_read_and_decoded_again(demo_data, tmp_path, caplog):
    dataset = demo_data.subset(np.arange(6), name="six")
    cache = build_decode_cache(dataset, "tf-lite", tmp_path, progress=False)
    clean = decode_image(dataset.paths[3], SPEC)
    row_bytes = clean.size
    with open(cache.folder / "crops.u8", "r+b") as out:  # another program scribbles over row 3
        out.seek(3 * row_bytes)
        out.write(bytes(row_bytes))
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        batch = np.asarray(cache.crops[np.array([2, 3, 4])])
    assert np.array_equal(batch[1], clean) and np.array_equal(batch[0], decode_image(dataset.paths[2], SPEC))
    assert "crops.u8: 1 row(s) do not match their checksums" in caplog.text and dataset.paths[3] in caplog.text
    caplog.clear()
    reopened = build_decode_cache(dataset, "tf-lite", tmp_path, progress=False)  # the repair was saved
    assert reopened.decoded_now == 0 and not caplog.text
    assert np.array_equal(reopened.crops[3], clean)


def _other_weights(path: Path) -> Path:
    """The same tiny classifier with other weights: another model, other predictions."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    weights = next(t for t in model.graph.initializer if t.name == "w")
    weights.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weights)[::-1].copy(), "w"))
    onnx.save(model, str(path))
    return path


def test_the_next_model_on_a_damaged_cache_sees_the_real_photos(demo_data, tmp_path, capsys):
    """The reported failure: after garbage in crops.u8 the next model "predicted one class for every photo"."""
    from trtlab.evaluation.results import ResultsStore

    photos = tmp_path / "photos" / "n01440764"
    for path in demo_data.paths[:6]:
        photos.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, photos / Path(path).name)
    first, second = make_classifier(tmp_path / "m" / "a.onnx"), _other_weights(make_classifier(tmp_path / "m" / "b.onnx"))
    ws, clean_ws = tmp_path / "ws", tmp_path / "clean"
    assert run_cli(capsys, "eval", "--model", first, "--data", tmp_path / "photos", "--workspace", ws, "-q")[0] == 0
    earlier = snapshot(ws / "results")
    (crops,) = list((ws / "decode_cache").glob("*/crops.u8"))
    crops.write_bytes(bytes(crops.stat().st_size))  # all zeros: a grey image for every photo
    assert run_cli(capsys, "eval", "--model", second, "--data", tmp_path / "photos", "--workspace", ws, "-q")[0] == 0
    assert run_cli(capsys, "eval", "--model", second, "--data", tmp_path / "photos", "--workspace", clean_ws,
                   "-q")[0] == 0

    def top5(workspace):
        (folder,) = [f for f in (workspace / "results").iterdir() if f.name.startswith("photos-b-")]
        return ResultsStore(folder).load("fp32").top5_indices

    np.testing.assert_array_equal(top5(ws), top5(clean_ws))
    assert {k: v for k, v in snapshot(ws / "results").items() if k in earlier} == earlier


def test_cache_folder_follows_content_not_stat(demo_data, tmp_path):
    *photos, spare = _same_size_bmps(demo_data, tmp_path / "photos")
    dataset = Dataset.from_folder(tmp_path / "photos")
    before = cache_folder(dataset, "tf-lite", tmp_path / "ws")
    os.utime(photos[0], (5, 5))
    assert cache_folder(dataset, "tf-lite", tmp_path / "ws") == before
    _replace_keeping_size_mtime_inode(photos[0], spare)
    assert cache_folder(dataset, "tf-lite", tmp_path / "ws") != before


@pytest.mark.parametrize("subset", [False, True])
def test_the_experiment_key_changes_with_content(demo_data, tmp_path, subset):
    from trtlab.evaluation.identity import Experiment
    from trtlab.graph.classifier import inspect_classifier

    *photos, spare = _same_size_bmps(demo_data, tmp_path / "photos")
    model = inspect_classifier(make_classifier(tmp_path / "tiny.onnx"))

    def key():
        cache = build_decode_cache(Dataset.from_folder(tmp_path / "photos"), "tf-lite", tmp_path / "ws",
                                   progress=False)
        cache = cache.subset([0, 1, 2], name="three") if subset else cache
        return Experiment.for_evaluation(model, cache, np.arange(3)).key

    before = key()
    _replace_keeping_size_mtime_inode(photos[1], spare)
    assert key() != before


def test_views_read_a_cache_by_folder_verified(demo_data, tmp_path):
    from trtlab.data.decode_cache import UnreadableCache, open_decode_cache

    dataset = demo_data.subset(np.arange(4), name="four")
    cache = build_decode_cache(dataset, "tf-lite", tmp_path, progress=False)
    stored = open_decode_cache(cache.key, tmp_path, fingerprint=dataset.fingerprint())
    assert (stored.status == DECODED).all() and stored.meta["fingerprint"] == dataset.fingerprint()
    assert np.array_equal(stored.crops[2], np.asarray(cache.crops[2]))
    row_bytes = int(np.prod(stored.crops.shape[1:]))
    with open(cache.folder / "crops.u8", "r+b") as out:
        out.seek(row_bytes)
        out.write(b"\xff" * 100)
    stored = open_decode_cache(cache.key, tmp_path)
    with pytest.raises(UnreadableCache, match="rows \\[1\\] of crops.u8 do not match their checksums"):
        stored.crops[1]
    with pytest.raises(UnreadableCache, match="FileNotFoundError"):
        open_decode_cache(cache.key, tmp_path / "nothing-here")
