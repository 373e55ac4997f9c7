"""Errors that come early and say what to do, data side (issue 18): a half-written prepared workspace (prep.json
present, the labels CSV, classes TSV or split missing or cut short) is one line naming the file and the command that
writes it again — and that command works; a full disk names the disk (mount point, device, free space) in every
data writer: decode cache, labels CSV, prep outputs, links, the file-hash store. Each test also checks that the
inputs and what was prepared or stored before are intact."""
from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import trtlab
from test_bad_inputs import snapshot
from trtlab.cli.main import main
from trtlab.core.errors import UserError
from trtlab.data.disk import DiskFull, describe_disk, mount_point
from trtlab.data.imagenet import ImageNetPrepError, prepare_imagenet


@pytest.fixture
def prepared(photo_folder, tmp_path):
    """The labelled demo photos prepared as ImageNet (WNID folders) in a workspace of their own."""
    workspace = tmp_path / "ws"
    prepare_imagenet(images=photo_folder, workspace=workspace, calibration_per_class=None, calibration_size=8,
                     progress=False)
    return workspace


def _one_line(exc: UserError) -> str:
    line = exc.line()
    assert "\n" not in line and line.startswith("error: ") and " — " in line
    return line


def _rebuild(line: str) -> list[str]:
    """The `python -m trtlab prep …` command the message names, as CLI arguments."""
    command = line.split("run `", 1)[1].split("`", 1)[0]
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "trtlab"]
    return words[3:]


@pytest.mark.parametrize("victim, damage, expected", [
    ("imagenet_val_labels.csv", "delete", "is missing"),
    ("imagenet_val_labels.csv", "cut", "is cut short"),
    ("imagenet_classes.tsv", "delete", "is missing"),
    ("imagenet_classes.tsv", "cut", "is cut short"),
    ("split.json", "delete", "is missing"),
    ("split.json", "cut", "is cut short or damaged"),
])
def test_a_half_written_preparation_names_the_file_and_the_command_that_rewrites_it(prepared, photo_folder, victim,
                                                                                    damage, expected, capsys):
    inputs = snapshot(photo_folder)
    good = trtlab.prepared_data(prepared, announce=False)
    path = prepared / "imagenet" / victim
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UserError) as err:
        trtlab.prepared_data(prepared)
    line = _one_line(err.value)
    assert str(path) in line and expected in line and "changed since preparation" not in line
    assert "python -m trtlab prep" in line and f"--workspace {prepared}" in line
    # The command the message names writes the file again, and the same data and split come back.
    assert main(_rebuild(line) + ["-q"]) == 0
    again = trtlab.prepared_data(prepared, announce=False)
    assert again.dataset.fingerprint() == good.dataset.fingerprint()
    assert np.array_equal(again.split.evaluation, good.split.evaluation)
    assert snapshot(photo_folder) == inputs


def test_an_edited_labels_file_is_named_not_blamed_on_the_images(prepared):
    path = prepared / "imagenet" / "imagenet_val_labels.csv"
    lines = path.read_text().splitlines()
    file, index, wnid = lines[1].split(",")
    lines[1] = f"{file},{(int(index) + 1) % 1000},{wnid}"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ImageNetPrepError) as err:
        trtlab.prepared_data(prepared)
    line = _one_line(err.value)
    assert str(path) in line and "was changed since prep wrote it" in line and "images" not in line.split(" — ")[0]


def test_the_rebuild_command_repeats_the_preparation_settings(photo_folder, tmp_path):
    from trtlab.data.imagenet.prep import rebuild_command

    workspace = tmp_path / "ws"
    prepare_imagenet(images=photo_folder, workspace=workspace, calibration_per_class=1, seed=3, progress=False)
    record = __import__("json").loads((workspace / "imagenet" / "prep.json").read_text())
    assert shlex.split(rebuild_command(record, workspace)) == [
        "python", "-m", "trtlab", "prep", "--data", str(photo_folder), "--calibration-per-class", "1", "--seed", "3",
        "--workspace", str(workspace)]


def _full_disk_for(monkeypatch, name: str):
    """os.fsync fails with ENOSPC for temporary files of `name` (atomic writes sync before they rename)."""
    real = os.fsync

    def fsync(fd):
        if name in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("name", ["imagenet_val_labels.csv", "imagenet_classes.tsv", "check_report.json",
                                  "prep.json"])
def test_a_full_disk_during_prep_names_the_file_and_the_disk_and_keeps_the_earlier_preparation(
        prepared, photo_folder, monkeypatch, name):
    before = snapshot(prepared / "imagenet")
    _full_disk_for(monkeypatch, name)
    with pytest.raises(DiskFull) as err:
        prepare_imagenet(images=photo_folder, workspace=prepared, calibration_per_class=None, calibration_size=6,
                         progress=False)
    line = _one_line(err.value)
    assert str(prepared / "imagenet" / name) in line and "the disk is full" in line
    # the disk named with its size (its free space may move between two reads on a shared machine)
    disk = describe_disk(prepared)
    assert disk.split(" has ")[0] in line and disk.split(" free of ")[1] in line and " free of " in line
    assert str(mount_point(prepared)) in line
    monkeypatch.undo()
    changed = {k for k, v in snapshot(prepared / "imagenet").items() if before.get(k) != v}
    # The failed run is recorded (issue 35: later notebooks say it out loud), naming the disk; nothing else is lost.
    assert "the disk is full" in json.loads((prepared / "imagenet" / "failed_attempt.json").read_text())["error"]
    changed.discard("failed_attempt.json")
    written_first = ["check_report.json", "imagenet_val_labels.csv", "imagenet_classes.tsv", "split.json"]
    assert changed <= set(written_first[:written_first.index(name)] if name in written_first else written_first)
    if name != "prep.json" or not changed:
        assert trtlab.prepared_data(prepared, announce=False).source == "prepared"


def test_a_full_disk_while_decoding_names_the_crops_file_and_the_disk(demo_data, tmp_path, monkeypatch):
    from trtlab.data.decode_cache import build_decode_cache

    dataset = demo_data.subset(np.arange(4), name="four")

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(DiskFull) as err:
        build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)
    line = _one_line(err.value)
    assert "crops.u8" in line and "the disk is full" in line and "free of" in line
    assert str(mount_point(tmp_path)) in line
    monkeypatch.undo()
    again = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)  # nothing half-written trusted
    assert again.decoded_now == 4 and not again.failures


def test_a_full_disk_for_links_names_the_disk(prepared, monkeypatch):
    from trtlab.data.imagenet import load_imagenet, organize

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "symlink", full)
    with pytest.raises(DiskFull) as err:
        organize(load_imagenet(prepared), "wnid", progress=False)
    assert "the disk is full" in _one_line(err.value) and "free of" in err.value.line()


def test_a_full_disk_for_the_hash_store_is_a_warning_naming_the_disk(demo_data, tmp_path, monkeypatch, caplog):
    from trtlab.data import file_hashes as fh

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(sqlite3, "connect", full)
    store = fh.FileHashes(tmp_path / "hashes.sqlite")
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        hashes = store.hashes(demo_data.paths[:3], progress=False)
    assert hashes == [fh.content_hash(Path(p).read_bytes()) for p in demo_data.paths[:3]]
    assert "database or disk is full" in caplog.text and "free of" in caplog.text and str(tmp_path) in caplog.text


def test_describe_disk_reads_like_df(tmp_path):
    text = describe_disk(tmp_path / "not" / "yet" / "made")
    mount = mount_point(tmp_path)
    usage = shutil.disk_usage(mount)
    assert text.startswith(str(mount)) and "free of" in text and usage.total > 0
