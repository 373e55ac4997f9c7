"""Decode cache: reuse, invalidation, bad files, disk estimate, parallel pools, interruption and resume."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from trtlab.data.dataset import Dataset
from trtlab.data.decode_cache import (DECODED, FAILED, InsufficientDiskSpace, build_decode_cache, cache_folder,
                                 estimate_cache_bytes)
from trtlab.data.preprocess import decode_image, get_preprocess

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def photo_variants(tmp_path_factory, demo_data) -> Dataset:
    """~230 distinct real-photo JPEGs: each demo photo cropped at 9 offsets (and mirrored) and re-encoded, so a
    crop written to the wrong row would show."""
    import cv2

    folder = tmp_path_factory.mktemp("variants")
    paths = []
    for n, source in enumerate(demo_data.paths):
        image = cv2.imread(source, cv2.IMREAD_COLOR)
        height, width = image.shape[:2]
        for k in range(9):
            top, left = (k // 3) * height // 10, (k % 3) * width // 10
            part = image[top : top + height * 7 // 10, left : left + width * 7 // 10]
            if k % 2:
                part = part[:, ::-1]
            path = folder / f"photo{n:02d}_v{k}.jpg"
            cv2.imwrite(str(path), np.ascontiguousarray(part), [cv2.IMWRITE_JPEG_QUALITY, 85])
            paths.append(str(path))
    return Dataset("variants", paths)


def test_second_build_reuses_cache_and_crops_match_decoder(demo_data, tmp_path):
    first = build_decode_cache(demo_data, "tf-lite", tmp_path, workers=2, progress=False)
    assert first.decoded_now == len(demo_data) and not first.failures
    second = build_decode_cache(demo_data, "tf-lite", tmp_path, workers=2, progress=False)
    assert second.decoded_now == 0
    assert second.folder == first.folder
    spec = get_preprocess("tf-lite")
    for index in (0, 7, len(demo_data) - 1):
        assert np.array_equal(second.crops[index], decode_image(demo_data.paths[index], spec))
    indices, batch = next(second.iter_batches(batch_size=5))
    assert batch.shape == (5, 224, 224, 3) and batch.dtype == np.uint8


def test_preprocessing_change_makes_a_new_cache(demo_data, tmp_path):
    base = build_decode_cache(demo_data, "tf-lite", tmp_path, progress=False)
    smaller = build_decode_cache(demo_data, {"resize_short": 219, "crop": 192}, tmp_path, progress=False)
    assert smaller.folder != base.folder
    assert smaller.decoded_now == len(demo_data)
    assert smaller.crops.shape == (len(demo_data), 192, 192, 3)
    # mean/std are applied per batch, so a preset differing only in them shares the crops
    assert build_decode_cache(demo_data, "torchvision", tmp_path, progress=False).decoded_now == 0


def test_changed_file_invalidates_cache(demo_data, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    paths = [shutil.copy(p, folder / Path(p).name) for p in demo_data.paths[:4]]
    dataset = Dataset("four", paths)
    first = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)
    shutil.copy(demo_data.paths[5], paths[2])  # same name, other photo
    changed = Dataset("four", paths)
    second = build_decode_cache(changed, "tf-lite", tmp_path / "ws", progress=False)
    assert second.folder != first.folder and second.decoded_now == 4
    assert not np.array_equal(second.crops[2], first.crops[2])


def test_truncated_empty_and_non_image_files_are_listed_and_skipped(demo_data, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    jpeg = Path(demo_data.paths[0]).read_bytes()
    (folder / "truncated.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "notes.jpg").write_text("this is a text file, not a photo\n")
    good = demo_data.paths[:3]
    dataset = Dataset("mixed", [good[0], str(folder / "truncated.jpg"), good[1], str(folder / "empty.jpg"),
                                str(folder / "notes.jpg"), good[2]])
    cache = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", workers=2, chunk_size=2, progress=False)
    assert list(cache.valid_indices) == [0, 2, 5]
    reasons = {Path(f["path"]).name: f["reason"] for f in cache.failure_list()}
    assert set(reasons) == {"truncated.jpg", "empty.jpg", "notes.jpg"}
    assert "truncated" in reasons["truncated.jpg"]
    assert "empty" in reasons["empty.jpg"]
    assert "not a decodable image" in reasons["notes.jpg"]
    assert (cache.status == FAILED).sum() == 3
    assert np.array_equal(cache.crops[2], decode_image(good[1], cache.preprocess))
    assert json.loads((cache.folder / "failures.json").read_text()).keys() == {"1", "3", "4"}
    again = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)
    assert again.decoded_now == 0 and len(again.failures) == 3  # failures are remembered, not retried


def test_threads_processes_and_inline_write_identical_caches(photo_variants, tmp_path):
    subset = photo_variants.subset(np.arange(0, len(photo_variants), 4), name="quarter")
    caches = {pool: build_decode_cache(subset, "tf-lite", tmp_path / pool, workers=2, pool=pool, chunk_size=7,
                                       progress=False) for pool in ("threads", "processes")}
    inline = build_decode_cache(subset, "tf-lite", tmp_path / "inline", workers=1, progress=False)
    reference = (inline.folder / "crops.u8").read_bytes()
    for pool, cache in caches.items():
        assert cache.decoded_now == len(subset), pool
        assert (cache.folder / "crops.u8").read_bytes() == reference, pool
    assert caches["processes"].pool == "processes" and caches["processes"].images_per_second > 0


def test_stop_after_then_resume_equals_uninterrupted(photo_variants, tmp_path):
    subset = photo_variants.subset(np.arange(60), name="sixty")
    partial = build_decode_cache(subset, "tf-lite", tmp_path / "a", workers=2, chunk_size=8, stop_after=3,
                                 progress=False)
    assert partial.decoded_now == 24 and (partial.status == DECODED).sum() == 24
    resumed = build_decode_cache(subset, "tf-lite", tmp_path / "a", workers=2, chunk_size=8, progress=False)
    assert resumed.decoded_now == 36
    whole = build_decode_cache(subset, "tf-lite", tmp_path / "b", workers=2, progress=False)
    assert (resumed.folder / "crops.u8").read_bytes() == (whole.folder / "crops.u8").read_bytes()
    assert np.array_equal(resumed.status, whole.status)


_CHILD = """
import json, sys
from trtlab.data.dataset import Dataset
from trtlab.data.decode_cache import build_decode_cache
paths = json.load(open(sys.argv[1]))
build_decode_cache(Dataset("variants", paths), "tf-lite", sys.argv[2], workers=2, pool=sys.argv[3], chunk_size=8,
                   progress=False)
"""


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_sigkill_mid_decode_then_resume_is_byte_identical(photo_variants, tmp_path, pool):
    paths_json = tmp_path / "paths.json"
    paths_json.write_text(json.dumps(photo_variants.paths))
    workspace = tmp_path / "killed"
    status_path = cache_folder(photo_variants, "tf-lite", workspace) / "status.npy"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # Own session: the kill reaches the child and its worker processes, like a killed notebook kernel.
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(paths_json), str(workspace), pool], env=env,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not status_path.exists():
            assert child.poll() is None, "the decoding child exited before it could be killed"
            assert time.monotonic() < deadline, "the decoding child made no progress"
            time.sleep(0.005)
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    decoded_at_kill = int((np.load(status_path) == DECODED).sum())
    assert 0 < decoded_at_kill < len(photo_variants), "the kill should land mid-way"

    resumed = build_decode_cache(photo_variants, "tf-lite", workspace, workers=2, pool=pool, chunk_size=8,
                                 progress=False)
    assert resumed.decoded_now == len(photo_variants) - decoded_at_kill
    whole = build_decode_cache(photo_variants, "tf-lite", tmp_path / "whole", workers=2, progress=False)
    assert (resumed.folder / "crops.u8").read_bytes() == (whole.folder / "crops.u8").read_bytes()
    assert (resumed.status == DECODED).all()


def test_status_without_failure_reason_is_decoded_again(demo_data, tmp_path):
    dataset = demo_data.subset(np.arange(6), name="six")
    cache = build_decode_cache(dataset, "tf-lite", tmp_path, progress=False)
    status = cache.status.copy()
    status[4] = FAILED  # as if killed after saving status.npy but before failures.json
    np.save(cache.folder / "status.npy", status)
    again = build_decode_cache(dataset, "tf-lite", tmp_path, progress=False)
    assert again.decoded_now == 1 and (again.status == DECODED).all()


def test_disk_estimate_refuses_when_cache_does_not_fit(demo_data, tmp_path, monkeypatch, caplog):
    assert estimate_cache_bytes(50_000, "tf-lite") == 50_000 * 224 * 224 * 3  # ≈ 7.5 GB
    real = shutil.disk_usage(tmp_path)
    monkeypatch.setattr("trtlab.data.decode_cache.shutil.disk_usage",
                        lambda path: real._replace(free=1_000_000))  # 1 MB free; the demo cache needs 3.9 MB
    with pytest.raises(InsufficientDiskSpace, match=r"needs 3\.91 MB more but only 1\.00 MB is free.*check_disk=False"):
        build_decode_cache(demo_data, "tf-lite", tmp_path, progress=False)
    assert not (cache_folder(demo_data, "tf-lite", tmp_path) / "crops.u8").exists()
    with caplog.at_level("INFO", logger="trtlab"):  # progress notes are log messages since issue 12
        cache = build_decode_cache(demo_data, "tf-lite", tmp_path, check_disk=False, progress=True)
    assert cache.decoded_now == len(demo_data)
    out = caplog.text
    assert "26 images × 150,528 bytes = 3.91 MB" in out and "images/s" in out


def test_subset_view_reads_parent_cache_without_decoding(demo_cache, demo_data):
    indices = np.array([3, 0, 20, 21])
    view = demo_cache.subset(indices, name="four")
    assert view.crops.shape == (4, 224, 224, 3) and len(view.dataset) == 4
    assert np.array_equal(np.asarray(view.crops), np.asarray(demo_cache.crops)[indices])
    assert np.array_equal(view.crops[2], demo_cache.crops[20])
    batches = list(view.iter_batches(batch_size=3))
    assert [list(i) for i, _ in batches] == [[0, 1, 2], [3]]
    assert view.dataset.paths == [demo_data.paths[i] for i in indices]


def test_skipped_images_are_named_with_file_and_reason_and_counts_agree(demo_data, tmp_path):
    """What the run record and the report print: the evaluated images that could not be read, each with its id,
    file and reason; decoded + skipped = the images asked for, in a subset's view too."""
    folder = tmp_path / "set"
    folder.mkdir()
    for path in demo_data.paths[:5]:
        shutil.copy(path, folder / Path(path).name)
    jpeg = Path(demo_data.paths[0]).read_bytes()
    (folder / "zz_cut.jpg").write_bytes(jpeg[: len(jpeg) // 3])
    (folder / "aa_empty.png").write_bytes(b"")
    dataset = Dataset.from_folder(folder)
    cache = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)
    skipped = cache.skipped()
    assert [s["image"] for s in skipped] == ["aa_empty.png", "zz_cut.jpg"]
    assert skipped[0] == {"image": "aa_empty.png", "file": str(folder / "aa_empty.png"), "reason": "empty file"}
    assert skipped[1]["reason"].startswith("truncated JPEG") and str(folder) not in skipped[1]["reason"]
    asked = np.arange(len(dataset))
    assert len(np.intersect1d(asked, cache.valid_indices)) + len(cache.skipped(asked)) == len(asked)
    half = cache.subset(np.arange(0, len(dataset), 2), name="half")  # rows 0, 2, 4, 6 of the full set
    assert [s["image"] for s in half.skipped()] == [s["image"] for s in skipped if dataset.image_ids().index(
        s["image"]) % 2 == 0]
    assert len(half.valid_indices) + len(half.skipped()) == len(half.dataset)
    assert cache.skipped([1, 2, 3]) == [] and cache.describe()["skipped"] == skipped
