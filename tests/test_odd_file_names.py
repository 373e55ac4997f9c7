"""Issue 36 item 5: photos a user really has — file names whose bytes are not UTF-8 (a Latin-1 camera folder, a
Windows archive unpacked on Linux) are evaluated, and named as `\\xNN` wherever trtlab writes or prints them; a
small PNG whose header claims 100000×100000 pixels is named as skipped, with the reason. Real PNGs, real file
names made from bytes (os.fsencode's inverse), the real CLI."""
from __future__ import annotations

import logging
import os
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from test_bad_inputs import make_classifier, write_photos
from trtlab.cli.main import main


def _non_utf8_copy(source: Path, folder: Path, name: bytes) -> Path:
    """A copy of `source` under a file name made of raw bytes; skips where the file system refuses such names."""
    target = os.path.join(os.fsencode(folder), name)
    try:
        shutil.copyfile(os.fsencode(source), target)
    except OSError as exc:  # e.g. a file system that insists on UTF-8 names
        pytest.skip(f"this file system refuses non-UTF-8 file names ({exc})")
    return Path(os.fsdecode(target))


def test_non_utf8_file_names_are_evaluated_and_named_as_escaped_bytes(tmp_path, capsys, caplog, monkeypatch):
    monkeypatch.setenv("TRTLAB_WORKSPACE", str(tmp_path / "default-ws"))  # the file-hash store lives there
    model = make_classifier(tmp_path / "tiny.onnx")
    photos = write_photos(tmp_path / "photos", {"n01440764": 3})
    folder = photos / "n01440764"
    good = _non_utf8_copy(folder / "img0.png", folder, b"caf\xe9-latin1.png")
    broken = _non_utf8_copy(folder / "img1.png", folder, b"bro\xefken.png")
    Path(broken).write_bytes(Path(broken).read_bytes()[:60])  # cut short: a decode failure that names its file
    assert "\udce9" in str(good)  # Python holds the byte as a surrogate escape (PEP 383)
    ws = tmp_path / "ws"
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        code = main(["eval", "--model", str(model), "--data", str(photos), "--workspace", str(ws)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err and "Logging error" not in err
    assert "FP32 top-1 on 4 labelled photos" in out  # 3 photos + the Latin-1 one; the cut one is skipped
    skipped = [r.getMessage() for r in caplog.records if "could not be decoded" in r.getMessage()]
    assert len(skipped) == 1 and str(broken) in skipped[0]  # the record keeps the path; the line shows its bytes
    assert "bro\\xefken.png" in err
    report = next((ws / "reports").glob("*/report.md")).read_text(encoding="utf-8")
    assert "bro\\xefken.png" in report
    assert "bro\\xefken.png" in (ws / "trtlab.log").read_text(encoding="utf-8")
    # The content hashes were stored, under the name's \xNN text (a hash taken within seconds of a file's change
    # is taken again by design, data.file_hashes.RACY_NS: the store's rows are what a later run would use).
    import sqlite3

    from trtlab.data.file_hashes import file_hashes

    with sqlite3.connect(file_hashes().store) as db:
        stored = {row[0] for row in db.execute("SELECT path FROM files")}
    assert str(good).replace("\udce9", "\\xe9") in stored


def _png_claiming(source: Path, target: Path, width: int, height: int) -> Path:
    """A copy of a real PNG whose IHDR claims width × height (its CRC fixed, so only the size is wrong)."""
    data = source.read_bytes()
    assert data[12:16] == b"IHDR"
    header = struct.pack(">II", width, height) + data[24:29]
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + header) & 0xFFFFFFFF)
    target.write_bytes(data[:16] + header + crc + data[33:])
    return target


def test_a_png_claiming_100000_by_100000_pixels_is_named_as_skipped_with_its_reason(tmp_path, capsys, caplog):
    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import FAILED, build_decode_cache

    photos = write_photos(tmp_path / "photos", {"n01440764": 3})
    huge = _png_claiming(photos / "n01440764" / "img0.png", photos / "n01440764" / "huge.png", 100_000, 100_000)
    assert huge.stat().st_size < 10_000
    cache = build_decode_cache(Dataset.from_folder(photos), "tf-lite", tmp_path / "ws", progress=False)
    row = [str(p) for p in cache.dataset.paths].index(str(huge))
    assert cache.status[row] == FAILED
    reason = cache.failures[row]
    assert str(huge) in reason and "claims 100000×100000 pixels" in reason and "skipped" in reason
    assert "OPENCV_IO_MAX_IMAGE_PIXELS" in reason
    # The CLI names it in its warning and in the report; the other photos are evaluated.
    model = make_classifier(tmp_path / "tiny.onnx")
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        code = main(["eval", "--model", str(model), "--data", str(photos), "--workspace", str(tmp_path / "ws2")])
    out, err = capsys.readouterr()
    assert code == 0 and "FP32 top-1 on 3 labelled photos" in out
    assert "huge.png: its header claims 100000×100000 pixels" in err
    report = next((tmp_path / "ws2" / "reports").glob("*/report.md")).read_text(encoding="utf-8")
    assert "huge.png (its header claims 100000×100000" in report


def test_a_claimed_size_within_limits_still_decodes(tmp_path):
    """The header check reads sizes, it does not refuse ordinary photos: a real PNG and a real JPEG pass."""
    import cv2

    from trtlab.data.preprocess import claimed_size, decode_image, get_preprocess

    image = np.random.default_rng(0).integers(0, 255, (37, 53, 3), dtype=np.uint8)
    for suffix in (".png", ".jpg"):
        path = tmp_path / f"photo{suffix}"
        cv2.imwrite(str(path), image)
        assert claimed_size(path.read_bytes()) == (53, 37)
        assert decode_image(path, get_preprocess("tf-lite")).shape == (224, 224, 3)
