"""What calibration is made from, checked one way: the provenance check (stored identity vs expected) used by
calibration caches, saved splits and variant folders; the one split store; the one calibration-image rule."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from trtlab.core.errors import UserError
from trtlab.core.provenance import ProvenanceMismatch, check_provenance, differences
from trtlab.data.dataset import Dataset
from trtlab.data.split import (DEFAULT_CALIBRATION_IMAGES, CalibrationSizeError, Split, saved_split,
                               select_calibration_images)


def test_provenance_names_the_field_both_values_and_the_fix():
    stored = {"model_sha256": "ab" * 32, "algorithm": "minmax", "preprocess": {"crop": 224, "resize": 256},
              "images": (1, 2), "tensorrt_version": None, "extra_old_field": 1}
    expected = {"model_sha256": "ab" * 32, "algorithm": "minmax", "preprocess": {"crop": 224, "resize": 256},
                "images": [1, 2], "tensorrt_version": "10.3.0"}
    assert differences(stored, expected, lenient=("tensorrt_version",)) == []  # tuples = lists; unknown TRT: lenient
    with pytest.raises(ProvenanceMismatch) as err:
        check_provenance(stored, expected, what="cache c.cache", fix="delete it")
    line = err.value.line()
    assert line == ("error: cache c.cache was made for another tensorrt_version: it has None, this run needs 10.3.0 "
                    "— delete it")
    expected.update(algorithm="entropy", preprocess={"crop": 256, "resize": 256}, model_sha256="cd" * 32)
    with pytest.raises(UserError) as err:
        check_provenance(stored, expected, what="cache c.cache", fix="delete it", lenient=("tensorrt_version",))
    line = err.value.line()
    assert "\n" not in line and "model_sha256: it has abababababab…, this run needs cdcdcdcdcdcd…" in line
    assert "algorithm: it has minmax, this run needs entropy" in line and "preprocess.crop: it has 224" in line
    assert line.endswith(" — delete it") and "resize" not in line


def test_the_calibration_cache_sidecar_is_one_schema_checked_by_the_provenance_check(tmp_path):
    from trtlab.quantization.calibration_cache import CacheMetadata, StaleCacheError, load_if_valid, \
        write_calibration_cache

    meta = CacheMetadata("ab" * 32, "entropy", {"crop": 224}, 10, tensorrt_version="10.3.0", batch_size=8)
    path = write_calibration_cache(tmp_path / "c.cache", {"x": 0.1}, meta)
    stored = json.loads((tmp_path / "c.cache.json").read_text())
    assert set(stored) == set(CacheMetadata.__dataclass_fields__)
    # TensorRT version and batch are compared only when both sides know them
    assert load_if_valid(path, CacheMetadata("ab" * 32, "entropy", {"crop": 224}, 10))["x"] == pytest.approx(0.1)
    with pytest.raises(StaleCacheError) as err:
        load_if_valid(path, CacheMetadata("ab" * 32, "entropy", {"crop": 224}, 10, batch_size=16))
    assert "another batch_size: it has 8, this run needs 16 — delete it or pass reuse_cache=False" in err.value.line()


def _toy(n_classes=10, per_class=20, name="toy"):
    labels = np.repeat(np.arange(n_classes), per_class)
    return Dataset(name, [f"/nowhere/{name}/{i}.jpg" for i in range(len(labels))], labels)


def test_one_split_store_for_compare_and_imagenet_remakes_a_split_made_for_other_settings(tmp_path, caplog):
    dataset = _toy()
    path = tmp_path / "split.json"
    per_class = saved_split(dataset, calibration_per_class=3, seed=1, path=path)
    assert set(np.bincount(dataset.labels[per_class.calibration])) == {3}
    mtime = path.stat().st_mtime_ns
    assert np.array_equal(saved_split(dataset, calibration_per_class=3, seed=1, path=path).calibration,
                          per_class.calibration) and path.stat().st_mtime_ns == mtime  # reused, not rewritten
    with caplog.at_level(logging.INFO, logger="trtlab"):
        total = saved_split(dataset, 50, seed=1, path=path)
    assert len(total.calibration) == 50
    assert "params.calibration_size: it has None, this run needs 50; making a new one" in caplog.text
    assert Split.load(path).params["calibration_size"] == 50
    # another dataset version: the split refuses to be used for it, naming the field
    with pytest.raises(UserError) as err:
        total.calibration_set(_toy(name="other"))
    assert "another dataset_fingerprint" in err.value.line() and "saved_split" in err.value.line()
    with pytest.raises(CalibrationSizeError, match="leaves no image"):
        saved_split(_toy(per_class=1), calibration_per_class=1, path=tmp_path / "s2.json")
    with pytest.raises(CalibrationSizeError, match="use calibration_images ≤ 199"):
        saved_split(dataset, 200, workspace=tmp_path)
    # the old import path still answers (notebooks use trtlab.saved_split, layer debugging workflows.compare)
    from trtlab.workflows.compare import saved_split as compare_saved_split

    assert compare_saved_split is saved_split


class _Cache:
    """The parts of a DecodeCache the calibration-image rule reads."""

    def __init__(self, valid, name="photos"):
        self.valid_indices = np.asarray(valid, np.int64)
        self.dataset = type("D", (), {"name": name})()
        self.folder = "/cache"


def test_one_calibration_image_rule_for_trtlab_and_tensorrts_calibrator(demo_cache):
    from trtlab.quantization.recipe import Recipe
    from trtlab.quantization.variants import select_calibration_indices

    cache = _Cache(valid=[0, 1, 2, 4, 5, 7, 8, 9])  # 3 and 6 failed to decode
    calibration = np.array([9, 3, 6, 1, 7, 0])  # the split's calibration set, in its seeded order
    np.testing.assert_array_equal(select_calibration_images(cache, calibration, 3), [9, 1, 7])
    np.testing.assert_array_equal(select_calibration_images(cache, calibration), [9, 1, 7, 0])
    with pytest.raises(CalibrationSizeError) as err:
        select_calibration_images(cache, calibration, 5)
    assert "has 4 decodable images (2 failed to decode)" in err.value.line() and "≤ 4" in err.value.line()
    recipe, indices = select_calibration_indices(cache, calibration, Recipe(algorithm="minmax"))
    assert recipe.calibration_images == 4 and list(indices) == [9, 1, 7, 0]  # the recipe form: the same rule
    with pytest.raises(CalibrationSizeError, match=r"int8-minmax@9: 9 calibration images asked for"):
        select_calibration_indices(cache, calibration, Recipe(algorithm="minmax", calibration_images=9))
    many = _Cache(valid=np.arange(2000))
    assert len(select_calibration_images(many, np.arange(2000))) == DEFAULT_CALIBRATION_IMAGES
    real = select_calibration_images(demo_cache, demo_cache.valid_indices[::-1], 6)
    np.testing.assert_array_equal(real, demo_cache.valid_indices[::-1][:6])


@pytest.mark.parametrize("edit", ["guards", "revision"])
def test_a_variant_folder_made_for_another_identity_is_set_aside_and_rebuilt(edit, demo_model, demo_cache,
                                                                             session_workspace, caplog):
    """Issue 36: a folder whose record names another identity (an older trtlab revision's folder under this name, a
    copied or hand-edited one) is set aside whole as `<folder>.stale-<time>`, named with the field that differs,
    and the variant is built again — never refused, never overwritten, never reused."""
    import logging

    from trtlab.quantization.recipe import Recipe
    from trtlab.quantization.variants import VARIANT_REVISION, build_variant

    recipe = Recipe(precision="fp16", guards=("softmax",))
    built = build_variant(demo_model, recipe, workspace=session_workspace, progress=False)
    record_path = built.folder / "variant.json"
    record = json.loads(record_path.read_text())
    assert record["identity"]["recipe"] == recipe.to_dict()
    expected = json.loads(json.dumps(record["identity"]))  # what this trtlab makes
    if edit == "guards":
        record["identity"]["recipe"]["guards"] = ["first_layer"]  # a hand-edited record
        field, said = "recipe.guards", "it has ['first_layer']"
    else:
        record["identity"]["revision"] = VARIANT_REVISION - 1  # what an older trtlab wrote
        field, said = "revision", f"it has {VARIANT_REVISION - 1}, this run needs {VARIANT_REVISION}"
    record_path.write_text(json.dumps(record))
    earlier = set(built.folder.parent.glob(f"{built.folder.name}.stale-*"))  # the session workspace's, if any
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        rebuilt = build_variant(demo_model, recipe, workspace=session_workspace, progress=False)
    assert not rebuilt.reused and rebuilt.folder == built.folder
    assert json.loads(record_path.read_text())["identity"] == expected
    stale = list(set(built.folder.parent.glob(f"{built.folder.name}.stale-*")) - earlier)
    assert len(stale) == 1 and json.loads((stale[0] / "variant.json").read_text()) == record  # kept as it was
    warning = next(r.getMessage() for r in caplog.records if ".stale-" in r.getMessage())
    assert str(built.folder) in warning and field in warning and said in warning and "rebuilt" in warning
    again = build_variant(demo_model, recipe, workspace=session_workspace, progress=False)
    assert again.reused
