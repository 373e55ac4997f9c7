"""Issue 11: results you can stand behind — experiment identity, variant identity and honest counts, prepared data
that later notebooks pick up, intervals at 0 %/100 %, dashboards that scale to many variants."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from trtlab.evaluation.identity import LegacyStoreError, MixedExperimentError
from trtlab.evaluation.results import ResultsStore, VariantResult, top5_from_logits
from trtlab.quantization.variants import CalibrationSizeError, Recipe


def _hand_result(name, labels, top1, classes=10, record=None):
    """A stored-looking result whose top-1 per image is `top1` (logits: that class 5, the others 0..)."""
    logits = np.tile(np.arange(classes, dtype=np.float32)[::-1] / classes, (len(top1), 1))
    for row, cls in enumerate(top1):
        logits[row, cls] = 5
    indices, probs = top5_from_logits(logits)
    return VariantResult(name, [f"img{i}" for i in range(len(top1))], np.asarray(labels, np.int64), indices, probs,
                         logits.astype(np.float16), dict(record or {"backend": {"backend": "hand"}}))


# ----------------------------------------------------------------------------------------------------------------
# Two models on one folder, one workspace
# ----------------------------------------------------------------------------------------------------------------

def test_two_models_on_one_folder_keep_both_results_and_are_never_mixed(demo_model, photo_folder, tmp_path,
                                                                        capsys):
    from test_dashboard import _weights_fake_quantized
    from trtlab.views import dashboard
    from trtlab.cli.main import main
    from trtlab.graph.classifier import inspect_classifier

    workspace = tmp_path / "ws"
    other = _weights_fake_quantized(demo_model, tmp_path / "lite0-w7.onnx", 63)
    for model in (demo_model, other):
        assert main(["eval", "--model", str(model), "--data", str(photo_folder), "--workspace", str(workspace)]) == 0
    capsys.readouterr()
    stores = dashboard.find_result_stores(workspace)
    assert len(stores) == 2, "the second model's evaluation must not overwrite the first's"
    by_model = {ResultsStore(s).experiment.model_sha256: ResultsStore(s) for s in stores}
    sha_a, sha_b = inspect_classifier(demo_model).sha256, inspect_classifier(other).sha256
    assert set(by_model) == {sha_a, sha_b}
    for sha, store in by_model.items():
        fp32 = store.load("fp32")
        assert fp32.record["model_sha256"] == sha and len(fp32) == 21
        report = (workspace / "reports" / store.folder.name / "report.md").read_text()
        assert f"sha256 {sha[:12]}" in report  # each report names its own model
    before = (by_model[sha_a].folder / "fp32.npz").read_bytes()

    with pytest.raises(MixedExperimentError) as err:
        dashboard.build_dashboard([by_model[sha_a], by_model[sha_b]])
    message = str(err.value)
    assert "efficientnet-lite0" in message and "lite0-w7" in message and "model" in message
    assert sha_a[:12] in message and sha_b[:12] in message
    assert main(["dashboard", "--workspace", str(workspace), "--store", str(by_model[sha_a].folder),
                 "--store", str(by_model[sha_b].folder)]) == 2
    assert "refusing to compare" in capsys.readouterr().err

    # Writing the other model's result into this store is refused too; what was stored is intact.
    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.evaluation.evaluate import evaluate

    cache = build_decode_cache(Dataset.from_folder(photo_folder), "tf-lite", workspace, progress=False)
    with pytest.raises(MixedExperimentError, match="each results store holds one experiment"):
        evaluate(other, cache, "fp32", store=by_model[sha_a], progress=False)
    assert (by_model[sha_a].folder / "fp32.npz").read_bytes() == before

    # Combining with itself is fine: the check is about identity, not about the number of stores.
    combined = dashboard.build_dashboard([by_model[sha_a]])
    assert combined.notes[0].startswith("Experiment: model efficientnet-lite0")
    assert any("other results store" in note for note in combined.notes)


def test_consistency_table_refuses_results_of_different_experiments(demo_model, demo_cache, tmp_path):
    from trtlab.evaluation import metrics
    from trtlab.evaluation.identity import Experiment
    from trtlab.graph.classifier import inspect_classifier

    experiment = Experiment.for_evaluation(inspect_classifier(demo_model), demo_cache, range(4))
    other = Experiment.for_evaluation(inspect_classifier(demo_model), demo_cache, range(1, 5))  # other images
    a = _hand_result("fp32", [0] * 4, [0] * 4, record={"experiment": experiment.to_dict()})
    b = _hand_result("int8", [0] * 4, [0] * 4, record={"experiment": other.to_dict()})
    with pytest.raises(MixedExperimentError, match="evaluation images"):
        metrics.consistency_table({"fp32": a, "int8": b})
    with pytest.raises(MixedExperimentError):
        metrics.pairwise_significance({"fp32": a, "int8": b})
    assert metrics.consistency_table({"fp32": a, "int8": _hand_result("int8", [0] * 4, [1] * 4, record={
        "experiment": experiment.to_dict()})}).loc["int8", "top1_agreement_vs_fp32"] == 0


# ----------------------------------------------------------------------------------------------------------------
# Variant identity: calibration size, labels that stay unique, honest counts
# ----------------------------------------------------------------------------------------------------------------

def test_two_calibration_sizes_give_two_stored_variants(demo_model, session_workspace):
    from trtlab.workflows.compare import ab_widgets, compare
    from trtlab.data.demo import demo_dataset, demo_split

    dataset = demo_dataset()
    split = demo_split(dataset)  # 6 calibration photos
    result = compare(demo_model, dataset, [Recipe(algorithm="minmax", calibration_images=3),
                                           Recipe(algorithm="minmax", calibration_images=5)],
                     split=split, workspace=session_workspace, progress=False)
    assert list(result.table.index) == ["fp32", "int8-minmax@3", "int8-minmax@5"]
    used = {name: result.store.load(name).record["calibration"] for name in ("int8-minmax@3", "int8-minmax@5")}
    assert used["int8-minmax@3"]["images"] == 3 and used["int8-minmax@5"]["images"] == 5
    assert used["int8-minmax@3"]["ids_hash"] != used["int8-minmax@5"]["ids_hash"]
    assert not np.array_equal(result.store.load("int8-minmax@3").logits, result.store.load("int8-minmax@5").logits)
    # A recipe that names no size uses what exists, and its label and record say how many.
    auto = compare(demo_model, dataset, [Recipe(algorithm="minmax")], split=split, workspace=session_workspace,
                   progress=False)
    assert "int8-minmax@6" in auto.table.index
    assert auto.store.load("int8-minmax@6").record["recipe"]["calibration_images"] == 6
    # More than exist: refused with the available number, before any work; nothing stored changes.
    stored = sorted(result.store.variants())
    with pytest.raises(CalibrationSizeError, match=r"has 6 — use calibration_images ≤ 6"):
        compare(demo_model, dataset, [Recipe(algorithm="entropy", calibration_images=25)], split=split,
                workspace=session_workspace, progress=False)
    assert sorted(result.store.variants()) == stored
    # The A/B slider offers only what exists.
    panel = ab_widgets(demo_model, dataset, workspace=session_workspace, split=split)
    slider = panel.children[0].children[1].children[0]
    assert slider.max == 6 and slider.value == 6


def test_a_label_held_by_another_variant_is_never_overwritten(tmp_path):
    store = ResultsStore(tmp_path / "store")
    first = _hand_result("int8-entropy@64", [0, 1], [0, 1], record={"variant_key": "aaaaaaaaaaaaaaaa"})
    store.save(first)
    second = _hand_result("int8-entropy@64", [0, 1], [1, 1], record={"variant_key": "bbbbbbbbbbbbbbbb"})
    with pytest.raises(ValueError, match="refusing to overwrite"):
        store.save(second)
    label = store.free_label("int8-entropy@64", "bbbbbbbbbbbbbbbb")
    assert label == "int8-entropy@64~bbbbbb"
    second.variant = label
    store.save(second)
    assert store.variants() == ["int8-entropy@64", "int8-entropy@64~bbbbbb"]
    assert store.load("int8-entropy@64").top1.tolist() == [0, 1]
    assert store.find("bbbbbbbbbbbbbbbb") == label and store.free_label("int8-entropy@64", "aaaaaaaaaaaaaaaa") == \
        "int8-entropy@64"


def test_imported_calibration_cache_is_part_of_the_variant_identity(demo_model, demo_cache, session_workspace,
                                                                    tmp_path):
    from trtlab.quantization.variants import build_variant

    calib = demo_cache.valid_indices[:6]
    cache_path = tmp_path / "lite0.cache"
    own = build_variant(demo_model, Recipe(algorithm="minmax"), demo_cache, calib, session_workspace,
                        progress=False, calibration_cache_path=cache_path)
    imported = build_variant(demo_model, Recipe(algorithm="minmax"), demo_cache, calib, session_workspace,
                             progress=False, calibration_cache_path=cache_path, reuse_cache=True)
    assert own.scales == {"source": "calibration"}
    assert imported.scales["source"] == "imported-cache" and len(imported.scales["cache_sha256"]) == 64
    assert imported.name == f"int8-minmax@6+cache-{imported.scales['cache_sha256'][:6]}"
    assert imported.folder != own.folder and imported.identity != own.identity
    # A later plain run never picks up the imported variant.
    plain = build_variant(demo_model, Recipe(algorithm="minmax"), demo_cache, calib, session_workspace,
                          progress=False)
    assert plain.folder == own.folder and plain.scales == {"source": "calibration"}


def test_variant_result_and_engine_identities_are_one_dataclass_hashed_one_way(demo_model, demo_cache, tmp_path,
                                                                               monkeypatch):
    import sys

    from fake_tensorrt import make_fake_tensorrt

    from trtlab.backends.tensorrt.build import build_engine
    from trtlab.core.identity import Identity
    from trtlab.core.workspace import hash_json, sha256_file
    from trtlab.evaluation.evaluate import evaluate_variant
    from trtlab.quantization.variants import build_variant, variant_key

    calib = demo_cache.valid_indices[:4]
    built = build_variant(demo_model, Recipe(algorithm="minmax"), demo_cache, calib, tmp_path, progress=False)
    # the variant's graph: its folder is named by its Identity's key, variant.json holds that Identity
    stored = json.loads((built.folder / "variant.json").read_text())["identity"]
    variant = Identity.of(stored)
    assert built.folder.name.endswith(variant.key) and variant.model_sha256 and variant.preprocess
    assert variant.calibration == built.calibration and variant.scales == {"source": "calibration"}
    # ... and the code that made it (issue 36): the graph's and the statistics' fingerprints
    assert set(variant.code) == {"graph", "statistics"} and variant.revision == 4
    # a result: the same dataclass (no preprocessing: the store's experiment), the sha256 of the graph that
    # computed it (the variant's model.onnx, not the experiment's model), plus the backend
    result = evaluate_variant(built, demo_cache, demo_cache.valid_indices[4:8], backend="ort", progress=False,
                              workspace=tmp_path)
    identity = Identity.of(result.record["identity"])
    assert identity == built.identity.replace(backend="ort-cpu")
    assert identity.model_sha256 == sha256_file(built.model_path) != variant.model_sha256
    assert result.record["variant_key"] == variant_key(identity) == hash_json(
        {"recipe": built.recipe.to_dict(), "calibration": built.calibration, "scales": built.scales,
         "model_sha256": identity.model_sha256, "backend": "ort-cpu"}, 16)
    # an engine: the same dataclass again, named by its digest (TensorRT faked: nothing is built)
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_tensorrt("10.9.0.34"))
    engine = build_engine(built.model_path, workspace=tmp_path, gpu={"name": "NVIDIA Tesla T4",
                                                                     "compute_capability": "7.5"},
                          progress=False, variant={"label": built.name, "key": variant_key(built.identity)})
    recipe_hash = engine.sidecar["recipe_hash"]
    assert recipe_hash == Identity(recipe=engine.sidecar["recipe"], model_sha256=engine.sidecar["onnx_sha256"],
                                   variant=engine.sidecar["variant"]).digest(12)
    assert recipe_hash in engine.engine_path.name
    # a field added later (None by default) changes no earlier key; unknown stored fields are refused
    assert Identity(recipe={"precision": "fp32"}).key == hash_json({"recipe": {"precision": "fp32"}}, 16)
    with pytest.raises(ValueError, match="not Identity's"):
        Identity.of({"recipe": {}, "onnx_sha256": "x"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        identity.backend = "torch-cuda"


def test_an_identitys_key_is_hashed_once_and_unchanged(monkeypatch):
    import pickle

    import trtlab.core.identity as identity_module
    from trtlab.core.identity import Identity

    calls = []
    real = identity_module.hash_json
    monkeypatch.setattr(identity_module, "hash_json", lambda value, length: calls.append(1) or real(value, length))
    identity = Identity(recipe={"precision": "fp32", "guards": ["first_layer"]}, revision=3)
    expected = real({"recipe": {"precision": "fp32", "guards": ["first_layer"]}, "revision": 3}, 16)
    assert identity.key == expected and identity.key == expected and hash(identity) == hash(expected)
    assert len(calls) == 1
    assert pickle.loads(pickle.dumps(identity)).key == expected and identity.replace(revision=4).key != expected


# ----------------------------------------------------------------------------------------------------------------
# Old stores, intervals, many variants
# ----------------------------------------------------------------------------------------------------------------

def test_a_store_from_trtlab_0_1_is_refused_with_the_command_that_rebuilds_it(tmp_path, capsys):
    from trtlab.views import dashboard
    from trtlab.cli.main import main

    workspace = tmp_path / "ws"
    old = workspace / "results" / "demo-photos-0123456789ab"
    result = _hand_result("fp32", [0, 1], [0, 1])
    ResultsStore(old).save(result)
    # As trtlab 0.1 wrote them: no store.json, records without schema or experiment.
    (old / "store.json").unlink()
    record = json.loads((old / "fp32.json").read_text())
    del record["schema"]
    (old / "fp32.json").write_text(json.dumps(record))
    assert ResultsStore(old).is_legacy() and dashboard.find_result_stores(workspace) == []
    with pytest.raises(LegacyStoreError, match=r"python -m trtlab demo.*rm -r"):
        dashboard.build_dashboard(old)
    with pytest.raises(LegacyStoreError):
        dashboard.build_dashboard(workspace=workspace)  # the newest store of the workspace is the old one
    assert main(["dashboard", "--workspace", str(workspace)]) == 2
    assert "written by trtlab 0.1" in capsys.readouterr().err
    assert main(["dashboard", "--workspace", str(workspace), "--list"]) == 0
    assert "refused" in capsys.readouterr().out
    assert (old / "fp32.npz").exists()  # refused, not deleted


def test_wilson_bounds_stay_in_range_and_a_perfect_score_renders(tmp_path):
    from trtlab.views.dashboard import build_dashboard
    from trtlab.evaluation.metrics import wilson_interval
    from trtlab.views.report import write_report

    for n in range(1, 1001):
        for hits in (0, n):
            low, high = wilson_interval(hits, n)
            p = hits / n
            assert 0.0 <= low <= p <= high <= 1.0, (hits, n, low, high)
        assert wilson_interval(n, n)[1] == 1.0 and wilson_interval(0, n)[0] == 0.0
    store = ResultsStore(tmp_path / "perfect")
    labels = [0, 1, 2, 3, 4, 5, 6]
    store.save(_hand_result("fp32", labels, labels))  # 100 %
    store.save(_hand_result("int8", labels, [9] * 7))  # 0 %
    report = write_report(store, tmp_path / "report", reference="fp32")
    assert report["png"].stat().st_size > 10_000
    assert "100.0 % (64.6–100.0)" in report["md"].read_text()
    dash = build_dashboard(store)
    assert dash.png("summary")[:8] == b"\x89PNG\r\n\x1a\n"


def test_dashboard_of_ten_variants_compares_each_with_the_reference(tmp_path):
    from trtlab.views.dashboard import build_dashboard

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 60)
    store = ResultsStore(tmp_path / "ten")
    store.save(_hand_result("fp32", labels, labels))
    for k in range(9):  # variant k gets k+1 images wrong
        wrong = labels.copy()
        wrong[: k + 1] = (wrong[: k + 1] + 1) % 10
        store.save(_hand_result(f"int8-percentile99.{k}@512+first_layer+last_layer", labels, wrong))
    dash = build_dashboard(store)
    assert len(dash.results) == 10
    assert len(dash.significance) == 9 and set(dash.significance["first"]) == {"fp32"}
    # Per-variant figures only for the two that agree least (8 and 9 images wrong), not 45 pairs and 46 figures.
    assert dash.focus == ["int8-percentile99.8@512+first_layer+last_layer", "int8-percentile99.7@512+first_layer+last_layer"]
    assert len(dash.figure_names()) == 1 + 2 * 5
    assert any("dash.show_variant" in note for note in dash.notes)
    summary = dash.make_figure("summary")
    acc = summary.axes[0]
    # Variant names read horizontally on the y axis (issue 20: slanted x labels overlapped each other and the legend).
    assert len(acc.get_yticklabels()) == 10 and all(t.get_rotation() == 0 for t in acc.get_yticklabels())
    assert len(build_dashboard(store, all_pairs=True).significance) == 45
    focused = build_dashboard(store, focus=["int8-percentile99.0@512+first_layer+last_layer"])
    assert focused.figure_names()[1:] == focused.variant_figure_names("int8-percentile99.0@512+first_layer+last_layer")
    with pytest.raises(KeyError, match="not compared"):
        build_dashboard(store, focus=["int4"])


# ----------------------------------------------------------------------------------------------------------------
# Prepared data: what notebook 01 leaves, notebooks 02-05 use
# ----------------------------------------------------------------------------------------------------------------

def test_prepared_data_is_what_later_notebooks_use(photo_folder, tmp_path, caplog):
    import logging
    import os

    import trtlab
    from trtlab.data.imagenet import ImageNetPrepError, prepare_imagenet

    caplog.set_level(logging.INFO, logger="trtlab")
    workspace = tmp_path / "ws"
    fallback = trtlab.prepared_data(workspace)
    assert fallback.source == "demo" and "no prepared dataset" in caplog.text
    prep = prepare_imagenet(images=photo_folder, workspace=workspace, calibration_per_class=None,
                            calibration_size=8, progress=False)
    caplog.clear()
    data = trtlab.prepared_data(workspace)
    printed = caplog.text
    assert data.source == "prepared" and "prepared by notebook 01" in printed and "calibration 8 / evaluation 13" \
        in printed
    dataset, split = data
    assert dataset.fingerprint() == prep.dataset.fingerprint()
    assert np.array_equal(split.calibration, prep.split.calibration)
    assert np.array_equal(split.evaluation, prep.split.evaluation)
    quick = trtlab.prepared_data(workspace, eval_per_class=1, announce=False)
    assert set(quick.split.evaluation) <= set(split.evaluation) and len(quick.split.evaluation) <= 13
    # Touched only (same bytes): still the prepared set. Images changed after preparation — here as `cp -p` leaves
    # a replacement (same size, old mtime) — are refused (with the fix), never silently replaced by the demo photos.
    victim = sorted(photo_folder.rglob("*.jpg"))[0]
    os.utime(victim, (1, 1))
    assert trtlab.prepared_data(workspace, announce=False).source == "prepared"
    content = bytearray(victim.read_bytes())
    content[len(content) // 2] ^= 0xFF
    victim.write_bytes(bytes(content))
    os.utime(victim, (1, 1))
    with pytest.raises(ImageNetPrepError, match="changed since preparation"):
        trtlab.prepared_data(workspace)


def test_ab_plot_displays_as_png(demo_model, session_workspace):
    from trtlab.workflows.compare import compare
    from trtlab.data.demo import demo_dataset, demo_split

    dataset = demo_dataset()
    result = compare(demo_model, dataset, [Recipe(algorithm="minmax")], split=demo_split(dataset),
                     workspace=session_workspace, progress=False)
    view = result.plot()
    png = view._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert "efficientnet-lite0" in view.figure._suptitle.get_text()
    record = json.loads((result.store.folder / "store.json").read_text())
    assert record["schema"] == 2 and record["experiment"]["evaluation_images"] == 20
    assert not math.isnan(result.table.loc["int8-minmax@6", "cosine_mean"])
