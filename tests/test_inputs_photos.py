"""Every image a user would call a photo is read (issue 18): BMP, TIFF and WebP files, phone "motion photos" (a
JPEG with a video appended), class folders that are symbolic links (followed once, loops named), and a labels CSV
row that names a file existing in two folders is an error naming both. Real images: the demo photos re-encoded
with OpenCV. Each test also checks that the inputs (and results stored before) are untouched."""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from test_bad_inputs import evaluated, model, one_error_line, run_cli, snapshot, ws  # noqa: F401  (fixtures)
from trtlab.data.dataset import Dataset, LabelsCsvError
from trtlab.data.decode_cache import build_decode_cache
from trtlab.data.preprocess import decode_image, get_preprocess

SPEC = get_preprocess("tf-lite")
# The start of a phone video as Google/Samsung motion photos append it after the JPEG's end-of-image marker: an
# MP4 'ftyp' box, then media data whose bytes include 0xFFDA (a JPEG start-of-scan marker, if read as JPEG).
MP4_TAIL = (bytes.fromhex("00000018") + b"ftypmp42" + bytes(4) + b"isommp42" + bytes.fromhex("00001000") + b"mdat"
            + bytes(range(256)) * 8 + b"\xff\xda\x00\x0c" + bytes(range(200)))


def _jpeg(demo_data) -> str:
    return next(p for p in demo_data.paths if p.endswith(".jpg"))


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def photos(tmp_path) -> Path:  # the photos folder of test_bad_inputs' `evaluated` fixture
    from test_bad_inputs import write_photos

    return write_photos(tmp_path / "photos", {"n01440764": 3, "n01443537": 3})


def test_bmp_tiff_webp_and_a_motion_photo_decode_to_the_jpegs_pixels(demo_data, tmp_path):
    import cv2

    source = _jpeg(demo_data)
    pixels = cv2.imread(source, cv2.IMREAD_COLOR)
    folder = tmp_path / "formats"
    folder.mkdir()
    for name, params in (("photo.bmp", []), ("photo.tif", []), ("photo.TIFF", []),
                         ("photo.webp", [cv2.IMWRITE_WEBP_QUALITY, 101])):  # quality > 100: lossless WebP
        assert cv2.imwrite(str(folder / name), pixels, params), name
    motion = Path(source).read_bytes() + MP4_TAIL
    # What the old check looked at: the last start-of-scan marker comes after the last end-of-image marker.
    assert motion.rfind(b"\xff\xda") > motion.rfind(b"\xff\xd9")
    (folder / "PXL_20240101_MP.jpg").write_bytes(motion)
    shutil.copy(source, folder / "plain.jpg")
    before = _files(folder)

    dataset = Dataset.from_folder(folder)
    names = sorted(Path(p).name for p in dataset.paths)
    assert names == sorted(["photo.bmp", "photo.tif", "photo.TIFF", "photo.webp", "PXL_20240101_MP.jpg", "plain.jpg"])
    cache = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)
    assert cache.failures == {} and len(cache.valid_indices) == len(names)
    expected = decode_image(source, SPEC)
    for index, path in enumerate(dataset.paths):
        assert np.array_equal(cache.crops[index], expected), path
    assert _files(folder) == before


def test_a_truncated_jpeg_is_still_named_and_a_cut_motion_photo_only_loses_its_video(demo_data, tmp_path):
    source = Path(_jpeg(demo_data)).read_bytes()
    folder = tmp_path / "cut"
    folder.mkdir()
    (folder / "cut.jpg").write_bytes(source[: len(source) * 2 // 3])
    (folder / "video_cut_MP.jpg").write_bytes(source + MP4_TAIL[:40])  # the video is cut, the photo is whole
    (folder / "trailer.jpg").write_bytes(source + b"\x00" * 64)  # some cameras pad after the image
    cache = build_decode_cache(Dataset.from_folder(folder), "tf-lite", tmp_path / "ws", progress=False)
    reasons = {Path(f["path"]).name: f["reason"] for f in cache.failure_list()}
    assert set(reasons) == {"cut.jpg"} and "truncated JPEG" in reasons["cut.jpg"]
    assert str(folder / "cut.jpg") in reasons["cut.jpg"]
    assert len(cache.valid_indices) == 2


def test_a_heic_photo_opencv_cannot_read_is_named_as_skipped_with_what_to_do(demo_data, tmp_path):
    folder = tmp_path / "phone"
    folder.mkdir()
    shutil.copy(_jpeg(demo_data), folder / "IMG_0001.jpg")
    # The first bytes of an iPhone HEIC file (an ISO-BMFF 'ftyp' box with brand heic); OpenCV has no HEIF reader.
    (folder / "IMG_0002.HEIC").write_bytes(bytes.fromhex("00000018") + b"ftypheic" + bytes(4) + b"mif1heic"
                                           + bytes(range(256)) * 4)
    (folder / "notes.txt").write_text("not a photo")
    dataset = Dataset.from_folder(folder)
    assert [Path(p).name for p in dataset.paths] == ["IMG_0001.jpg", "IMG_0002.HEIC"]
    cache = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)
    (skipped,) = cache.skipped()
    assert skipped["file"] == str(folder / "IMG_0002.HEIC") and skipped["image"] == "IMG_0002.HEIC"
    assert ".heic photos cannot be read by the installed OpenCV" in skipped["reason"]
    assert "convert it to JPEG or PNG" in skipped["reason"]


def _assembled(tmp_path: Path, demo_data) -> tuple[Path, Path]:
    """Class folders kept elsewhere and linked into a dataset folder, as datasets are often assembled."""
    store = tmp_path / "store"
    jpegs = [p for p in demo_data.paths if p.endswith(".jpg")]
    for name, chosen in (("tench", jpegs[:2]), ("goldfish", jpegs[2:5])):
        (store / name).mkdir(parents=True)
        for path in chosen:
            shutil.copy(path, store / name / Path(path).name)
    root = tmp_path / "assembled"
    root.mkdir()
    os.symlink(store / "tench", root / "n01440764")  # a linked class folder
    (root / "n01443537").mkdir()  # a real class folder ...
    for path in sorted((store / "goldfish").iterdir()):
        os.symlink(path, root / "n01443537" / path.name)  # ... of linked files
    os.symlink(root, root / "n01443537" / "again")  # a loop: a link back to the dataset folder
    return root, store


def test_linked_class_folders_are_read_and_a_loop_is_named_not_followed(demo_data, tmp_path, caplog):
    from trtlab.data.classes import wnid_to_index

    root, store = _assembled(tmp_path, demo_data)
    before = _files(store)
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        dataset = Dataset.from_folder(root)
    ids = dataset.image_ids()
    assert len(ids) == 5 and sum(i.startswith("n01440764/") for i in ids) == 2
    assert all("again" not in i for i in ids)
    wnids = wnid_to_index()
    assert sorted(dataset.labels.tolist()) == sorted([wnids["n01440764"]] * 2 + [wnids["n01443537"]] * 3)
    loop = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
    assert loop and "links back to the enclosing folder" in loop[0] and str(root) in loop[0]
    cache = build_decode_cache(dataset, "tf-lite", tmp_path / "ws", progress=False)
    assert len(cache.valid_indices) == 5
    assert _files(store) == before


def test_imagenet_prep_follows_linked_wnid_folders_once(demo_data, tmp_path):
    from trtlab.data.imagenet import prepare_imagenet

    root, _ = _assembled(tmp_path, demo_data)
    prep = prepare_imagenet(images=root, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)
    assert prep.source == "folders" and len(prep.dataset) == 5 and prep.report["classes"] == 2


def test_a_csv_row_matching_two_files_is_an_error_naming_both(model, photos, ws, tmp_path, capsys,  # noqa: F811
                                                               evaluated):
    day1, day2 = photos / "day1", photos / "day2"
    for folder in (day1, day2):
        folder.mkdir()
        shutil.copy(photos / "n01440764" / "img0.png", folder / "img.png")
    inputs = snapshot(photos)
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("file,label\nimg.png,243\n")
    with pytest.raises(LabelsCsvError) as err:
        Dataset.from_folder(photos, labels_csv=csv_path)
    line = err.value.line()
    assert "labels.csv" in line and "line 2" in line and "'img.png' matches day1/img.png, day2/img.png" in line
    assert "path relative to the data folder" in line and "'day1/img.png,243'" in line
    code, err_text = run_cli(capsys, "eval", "--model", model, "--data", photos, "--labels", csv_path,
                             "--workspace", ws)
    assert code == 2 and "day1/img.png, day2/img.png" in one_error_line(err_text)
    csv_path.write_text("file,label\nday1/img.png,243\nday2/img.png,7\n")  # the fix the message gives
    fixed = Dataset.from_folder(photos, labels_csv=csv_path)
    labels = dict(zip(fixed.image_ids(), fixed.labels.tolist()))
    assert labels["day1/img.png"] == 243 and labels["day2/img.png"] == 7
    assert snapshot(photos) == inputs
    evaluated()


def test_bgr_crops_are_normalised_with_each_channel_s_own_mean_and_std(demo_data):
    """mean/std are given per RGB channel; a BGR crop holds blue first, so it must meet blue's constants: the model
    input of a BGR preprocessing is the RGB one with its channels reversed."""
    from dataclasses import replace

    from trtlab.data.preprocess import normalize_batch

    rgb = get_preprocess("torchvision")
    bgr = replace(rgb, channel_order="BGR")
    path = _jpeg(demo_data)
    as_rgb = normalize_batch(decode_image(path, rgb)[None], rgb)
    as_bgr = normalize_batch(decode_image(path, bgr)[None], bgr)
    np.testing.assert_array_equal(as_bgr, as_rgb[:, ::-1])
    pytest.importorskip("torch")
    from trtlab.backends.gpu.feed import CropFeed  # the torch backend normalises on the device, the same way

    on_device = CropFeed("cpu").normalised(decode_image(path, bgr)[None], bgr)
    np.testing.assert_array_equal(on_device.numpy(), as_bgr)


def test_a_wnid_folder_labels_its_nested_images_and_other_folders_are_named_as_unlabelled(demo_data, tmp_path,
                                                                                          caplog):
    """Tiny-ImageNet and many copies of ImageNet train keep a class's photos one level down (n01443537/images/…):
    the WNID folder above labels them. A sub-folder that names no class leaves its photos unlabelled, said once."""
    source = _jpeg(demo_data)
    for rel in ("n01443537/images/a.jpg", "n01440764/b.jpg", "holiday/c.jpg"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, tmp_path / rel)
    caplog.set_level(logging.WARNING, logger="trtlab")
    dataset = Dataset.from_folder(tmp_path)
    labels = {Path(p).name: int(label) for p, label in zip(dataset.paths, dataset.labels)}
    assert labels == {"a.jpg": 1, "b.jpg": 0, "c.jpg": -1}
    assert any("holiday" in r.getMessage() and "unlabelled" in r.getMessage() for r in caplog.records)
