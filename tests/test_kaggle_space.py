"""Kaggle's limits checked before work: the decode cache (images × crop × crop × 3 bytes) and the variants (the
model's size each) against the workspace's free space — /kaggle/working holds 20 GB — with one line, before any
image is decoded. The free space is mocked (shutil.disk_usage); the data, the model and the decode cache are real."""
from __future__ import annotations

import shutil

import pytest

from odd_models import one_error_line, run_cli
from trtlab.data.decode_cache import InsufficientDiskSpace
from trtlab.workflows.checks import check_free_space, decode_cache_pending

GB = 1000 ** 3


def _free(monkeypatch, free: int, total: int = 20 * GB) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(total, total - free, free))


def test_imagenet_val_does_not_fit_in_what_is_left_of_kaggles_20_gb(tmp_path, demo_model, monkeypatch):
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    (tmp_path / "kaggle" / "working").mkdir(parents=True)  # Kaggle is its variable and its folders
    monkeypatch.setenv("TRTLAB_KAGGLE_ROOT", str(tmp_path / "kaggle"))
    _free(monkeypatch, 5 * GB)
    model_bytes = demo_model.stat().st_size
    with pytest.raises(InsufficientDiskSpace) as refused:
        check_free_space(tmp_path, 50_000, 224, demo_model, variants=4)
    line = refused.value.line()
    assert "\n" not in line and line.startswith("error: this run needs about ") and " — free some space" in line
    assert "only 5.00 GB is free in" in line and "(20 GB on Kaggle)" in line
    assert "decode cache 50,000 images × 224×224×3 = 7.53 GB" in line and "4 variant(s) × " in line
    assert "--workspace or $TRTLAB_WORKSPACE" in refused.value.fix
    # With room to spare the same work passes, and the estimate is what was said.
    _free(monkeypatch, 15 * GB)
    assert check_free_space(tmp_path, 50_000, 224, demo_model, variants=4) == 50_000 * 224 * 224 * 3 + 4 * model_bytes


def test_off_kaggle_the_line_names_no_kaggle_quota(tmp_path, monkeypatch):
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    _free(monkeypatch, 10 ** 6)
    with pytest.raises(InsufficientDiskSpace, match=r"only 1.00 MB is free in \S+ \(decode cache 20 images") \
            as refused:
        check_free_space(tmp_path, 20, 224)
    assert "Kaggle" not in str(refused.value)


def test_an_existing_decode_cache_needs_no_space_again(demo_data, demo_cache, session_workspace, tmp_path,
                                                       monkeypatch):
    assert decode_cache_pending(demo_data, "tf-lite", session_workspace, progress=False) == 0
    assert decode_cache_pending(demo_data, "tf-lite", tmp_path, progress=False) == len(demo_data)
    _free(monkeypatch, 1000)  # a full disk: the decoded cache is already there, and nothing else is to be written
    assert check_free_space(session_workspace, 0, 224) == 0


def test_calibrate_refuses_before_decoding_when_the_disk_is_too_small(demo_model, photo_folder, tmp_path, capsys,
                                                                      monkeypatch):
    ws = tmp_path / "ws"
    _free(monkeypatch, 2 * 10 ** 6)  # 2 MB: the 21 photos' crops alone need 3.16 MB
    code, _, err = run_cli(capsys, "calibrate", "--model", demo_model, "--data", photo_folder, "--workspace", ws,
                           "--calibration-images", "3")
    line = one_error_line(err)
    assert code == 2 and "this run needs about" in line and "decode cache 21 images × 224×224×3" in line, line
    assert not (ws / "decode_cache").exists() or not any((ws / "decode_cache").iterdir())
