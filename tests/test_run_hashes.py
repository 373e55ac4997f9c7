"""One compare() run looks at its files' content once: every step used to take the dataset's content hashes again
(stat'ing each file each time: 50,000 files six times were 10-17 s of a cold A/B on the H200's 4 pinned cores).
The run's identities are the ones the files give without the hold, and a file changed during the run is still
caught by the decode cache, which checks each file's bytes against the hashes held."""
from __future__ import annotations

import numpy as np

from trtlab.data.dataset import Dataset
from trtlab.data.file_hashes import FileHashes


def test_compare_takes_the_content_hashes_once_and_its_identities_do_not_change(demo_model, demo_data, tmp_path,
                                                                                monkeypatch):
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.compare import compare

    looked = []
    real = FileHashes.hashes

    def counted(self, paths, *args, **kwargs):
        looked.append(len(paths))
        return real(self, paths, *args, **kwargs)

    monkeypatch.setattr(FileHashes, "hashes", counted)
    result = compare(demo_model, demo_data, [Recipe(algorithm="minmax", calibration_images=4)], workspace=tmp_path,
                     backend="ort", engines=False, parallel=False, progress=False)
    assert looked == [len(demo_data)], looked  # once, for the whole run
    looked.clear()
    fresh = Dataset(demo_data.name, list(demo_data.paths), np.asarray(demo_data.labels), root=demo_data.root)
    assert build_decode_cache(fresh, result.cache.preprocess, tmp_path, progress=False).key == result.cache.key
    assert fresh.fingerprint() == demo_data.fingerprint() == result.split.dataset_fingerprint
    assert len(looked) == 3  # without the hold every call looks at the files again


def test_a_held_copy_answers_its_hashes_and_the_original_still_looks(demo_data):
    held = demo_data.holding_hashes(progress=False)
    assert held is not demo_data and held.paths == demo_data.paths
    assert held.content_hashes() == demo_data.content_hashes() and held.fingerprint() == demo_data.fingerprint()
    assert "_held_hashes" not in demo_data.__dict__
    subset = held.subset([0, 1])  # a subset is a dataset of its own: it looks at its files
    assert "_held_hashes" not in subset.__dict__ and subset.content_hashes() == held.content_hashes()[:2]


def test_image_ids_are_the_paths_relative_to_the_root_made_once(tmp_path, monkeypatch):
    """Dataset.image_ids: os.path.relpath's ids for normalised paths under the root (cut), paths that are not
    (dot segments, doubled slashes, outside the root, relative) and a root given with a trailing slash; made once
    per paths list and made again when the list is replaced."""
    import os

    from trtlab.data.dataset import Dataset

    root = str(tmp_path / "val")
    paths = [f"{root}/n01440764/a.JPEG", f"{root}/n01/../n01440764/b.JPEG", f"{root}//c.JPEG",
             str(tmp_path / "elsewhere.JPEG"), "relative/d.JPEG", f"{root}/./e.JPEG"]
    for given_root in (root, root + "/"):
        dataset = Dataset("ids", paths, root=given_root)
        assert dataset.image_ids() == [os.path.relpath(p, given_root) for p in paths]
    dataset = Dataset("ids", paths, root=root)
    first = dataset.image_ids()
    first.append("changed by a caller")
    assert dataset.image_ids() == [os.path.relpath(p, root) for p in paths]  # a copy each time
    import trtlab.data.dataset as dataset_module

    made, real = [], dataset_module._relative_ids
    monkeypatch.setattr(dataset_module, "_relative_ids", lambda *a: made.append(1) or real(*a))
    dataset.image_ids()
    assert made == []  # made once: not again for the same paths list
    dataset.paths = paths[:2]
    assert dataset.image_ids() == ["n01440764/a.JPEG", "n01440764/b.JPEG"] and made == [1]
    assert Dataset("no root", paths).image_ids() == paths
