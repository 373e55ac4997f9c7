"""trtlab.workflows.engines: a model's variants (built from recipes by build_variant) as TensorRT engines — over the
recording stand-in of tests/fake_tensorrt, which builds nothing — or, without TensorRT, as the ONNX graphs ONNX
Runtime runs; engine names and records, evaluation into the variants' results store, latency reports."""
from __future__ import annotations

import json
import os
import sys
import types

import pytest

from fake_tensorrt import FakeCuda, calls_named, make_fake_tensorrt

GPU = {"name": "NVIDIA Tesla T4", "compute_capability": "7.5"}
DEFAULT_LABELS = ["fp32", "fp16", "int8-minmax@6", "int8-entropy@6", "int8-percentile99.99@6"]  # 6 demo calib photos


@pytest.fixture(scope="module")
def demo_pair(demo_data):
    from trtlab.data.demo import demo_split

    return demo_data, demo_split(demo_data)


def test_without_tensorrt_the_variants_of_notebook_03_run_on_onnx_runtime(monkeypatch, demo_model, demo_pair,
                                                                           session_workspace, caplog):
    """The default recipes are notebook 03's (fp32, fp16, minmax / entropy / percentile), named by their labels;
    a newer Q/DQ file lying in the workspace is not picked up (no newest-file globbing)."""
    import shutil

    from trtlab.quantization.variants import Recipe, build_variant, variant_key
    from trtlab.workflows.engines import build_engines

    other = build_variant(demo_model, Recipe(algorithm="entropy", calibration_images=3),
                          _cache(demo_pair, session_workspace), demo_pair[1].calibration, session_workspace,
                          progress=False)
    decoy = other.model_path.parent.parent / "int8-zz-newest" / "model.onnx"
    decoy.parent.mkdir(exist_ok=True)
    shutil.copy(other.model_path, decoy)  # the newest int8*/model.onnx of this model in the workspace
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    caplog.set_level("INFO", logger="trtlab")
    engines = build_engines(demo_model, data=demo_pair, workspace=session_workspace, progress=False)
    assert caplog.text.count("continuing on ONNX Runtime") == 1
    assert engines.backend == "ort" and list(engines.variants) == DEFAULT_LABELS
    assert decoy not in engines.variants.values() and other.model_path not in engines.variants.values()
    assert engines.variants["fp32"] == demo_model
    for label in DEFAULT_LABELS[1:]:
        entry = engines.entries[label]
        assert entry.built.name == label and entry.path == entry.built.model_path
        # the variant's identity key, apart from the graph's sha256 (the engine's identity holds that itself)
        assert entry.key == variant_key(entry.built.identity.replace(model_sha256=None))
    counts = engines.inspection()
    assert counts.loc["fp32", "fp32_weighted_ops"] == 50 and counts.loc["fp16", "fp16_weighted_ops"] == 50
    assert (counts.loc[DEFAULT_LABELS[2:], "int8_weighted_ops"] == 50).all()
    assert engines.layers("int8-entropy@6")["computes in"].tolist() == ["INT8"] * 50
    shown = engines.table()
    assert shown.loc["fp32", "file"] == f"{demo_model.name} (the model)"
    assert shown.loc["fp16", "file"].startswith("variants/efficientnet-lite0-") and (shown["key"].str.len() == 16).all()


def _cache(demo_pair, workspace):
    from trtlab.data.decode_cache import build_decode_cache

    return build_decode_cache(demo_pair[0], "tf-lite", workspace, progress=False)


def test_precision_report_is_the_fusion_aware_hook(monkeypatch, demo_model, demo_pair, session_workspace):
    """EngineSet.precision_report shows trtlab.graph's fusion-aware report per variant once it exists; until then
    the weighted ops by compute type, labelled as not fusion-aware."""
    from trtlab.workflows.engines import build_engines

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    engines = build_engines(demo_model, ["fp32", "fp16"], demo_pair, workspace=session_workspace, progress=False)
    monkeypatch.setitem(sys.modules, "trtlab.graph.fusion", None)  # not there (yet)
    fallback = engines.precision_report()
    assert fallback.to_dict("index") == {"fp32": {"FP32 weighted ops": 50, "FP16 weighted ops": 0},
                                         "fp16": {"FP32 weighted ops": 0, "FP16 weighted ops": 50}}
    assert "Not fusion-aware" in fallback.note and "Not fusion-aware" in fallback._repr_html_()
    fusion = types.ModuleType("trtlab.graph.fusion")
    fusion.precision_report = lambda path, name=None: {"graph": os.fspath(path)}
    monkeypatch.setitem(sys.modules, "trtlab.graph.fusion", fusion)
    assert engines.precision_report() == {"fp32": {"graph": str(demo_model)},
                                          "fp16": {"graph": str(engines.variants["fp16"])}}



def test_notebook_02_names_each_variant_by_its_label_and_shows_whole_file_names(monkeypatch, demo_model, demo_pair,
                                                                              session_workspace):
    """Notebook 02 led with "int8-minmax@6-<key>: TensorRT will compute …" above a table whose row is int8-minmax@6,
    and cut the file column at 50 characters, just before the part that tells the variants apart."""
    from trtlab.graph.fusion_report import precision_overview
    from trtlab.workflows.engines import build_engines

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    engines = build_engines(demo_model, ["fp32", {"precision": "int8", "algorithm": "minmax"}], demo_pair,
                            workspace=session_workspace, progress=False)
    label = "int8-minmax@6"
    reports = engines.precision_report()
    assert reports[label].model == label and engines.precision_report(label).model == label
    overview = precision_overview(reports)
    assert overview.sentence.startswith(f"{label}: ") and list(overview.table.index) == ["fp32", label]
    html = engines.table()._repr_html_()
    assert "..." not in html and str(engines.variants[label].relative_to(session_workspace)) in html

def test_onnx_runtime_latency_says_it_does_not_predict_tensorrt(monkeypatch, demo_model, demo_pair,
                                                                session_workspace):
    from trtlab.workflows.engines import ORT_TIMING_NOTE, build_engines  # the note comes from engine_reports

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    engines = build_engines(demo_model, ["fp32", "fp16"], demo_pair, workspace=session_workspace, progress=False)
    report = engines.benchmark(batch_sizes=(1,), iterations=10, warmup=1)
    table = report.table
    assert list(table.index) == [("fp32", 1), ("fp16", 1)] and (table["samples"] == 10).all()
    assert "p50_ms" in table and "p90_ms" not in table and "p99_ms" not in table  # 10 timings support p50 only
    assert (table["p50_ms"] > 0).all() and (table["timer"] == "host wall clock").all()
    html = report._repr_html_()
    assert ORT_TIMING_NOTE in html and "do not predict TensorRT" in html
    assert "10 timings per row: p50 (not p90, p99" in html and "p99 needs 500" in html
    assert "<th>÷ fp16 · batch 1</th>" in html and "<th>p50 ms</th>" in html  # ratio to FP16 at the same batch
    assert str(table.loc[("fp32", 1), "p50_ms"]) not in html  # the numbers shown are formatted, not raw floats


def test_engines_are_built_from_variants_named_by_label_and_key(monkeypatch, demo_model, demo_pair,
                                                                session_workspace, tmp_path):
    from trtlab.workflows.engines import build_engines

    trt = make_fake_tensorrt("10.9.0.34")
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    FakeCuda(trt, GPU).install(monkeypatch.setattr)
    engines = build_engines(demo_model, ["fp32", "fp16", {"precision": "int8", "algorithm": "minmax"}], demo_pair,
                            workspace=tmp_path, tensorrt_calibrators=("entropy",), progress=False,
                            timing_cache=False)
    assert engines.backend == "trt"
    assert list(engines.variants) == ["fp32", "fp16", "int8-minmax@6", "int8-implicit-entropy@6"]
    parsed = [c[1] for c in calls_named(trt, "OnnxParser.parse_from_file")]
    assert parsed == [str(engines.entries[label].onnx) for label in engines.variants]
    assert parsed[0] == parsed[3] == str(demo_model)  # TensorRT's calibrator calibrates the FP32 graph
    for label, entry in engines.entries.items():
        path = entry.engine.engine_path
        assert path.parent.name.startswith("efficientnet-lite0-") and path.name.startswith(f"{label}-{entry.key[:8]}.")
        sidecar = json.loads(entry.engine.sidecar_path.read_text())
        assert sidecar["variant"] == {"label": label, "key": entry.key}
        assert sidecar["recipe"]["precision"] == entry.precision == {"fp32": "fp32", "fp16": "fp16"}.get(
            label, "int8-implicit" if "implicit" in label else "int8")
        assert sidecar["rebuild_command"].startswith(f"python -m trtlab build --model {demo_model} --precision ")
    implicit = engines.entries["int8-implicit-entropy@6"]
    minmax = engines.entries["int8-minmax@6"]
    assert implicit.identity.calibration["calibration_ids_hash"] == minmax.built.calibration["ids_hash"]
    assert implicit.engine.sidecar["calibration"]["images"] == 6


def test_engine_results_go_to_the_variants_store_with_backend_and_precision(monkeypatch, demo_model, demo_pair,
                                                                            session_workspace, tmp_path):
    """evaluate() stores TensorRT results in the store of the variants' experiment (the one compare() and the
    dashboard read), labelled trt-<variant>, each recorded with its real precision and TensorRT version; the
    evaluation's own path (evaluate_variant with backend='trt') records an INT8 variant as INT8, not fp32."""
    from trtlab.evaluation.evaluate import evaluate_variant
    from trtlab.evaluation.identity import Experiment
    from trtlab.evaluation.results import ResultsStore
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.workflows.engines import build_engines

    trt = make_fake_tensorrt("11.1.0.8")
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    FakeCuda(trt, GPU).install(monkeypatch.setattr)
    dataset, split = demo_pair
    engines = build_engines(demo_model, ["fp32", "fp16", "int8"], demo_pair, workspace=tmp_path, progress=False)
    table = engines.evaluate(batch_size=8, progress=False)
    assert list(table.index) == ["trt-fp32", "trt-fp16", "trt-int8-entropy@6"]
    assert table.attrs["reference"] == "trt-fp32" and (table["backend"] == "trt").all()
    cache = engines.decode_cache()
    experiment = Experiment.for_evaluation(inspect_classifier(demo_model), cache, split.evaluation, split)
    store = ResultsStore.for_experiment(experiment, tmp_path)
    assert set(store.variants()) == set(table.index)
    for label, entry in engines.entries.items():
        record = store.record(f"trt-{label}")
        assert record["backend"]["precision"] == entry.precision and record["backend"]["tensorrt"] == "11.1.0.8"
        assert record["backend"]["variant"] == label and record["engine"]["recipe_hash"] == entry.engine.sidecar[
            "recipe_hash"]
        assert record["identity"]["backend"]["name"] == "trt" and record["variant_label"] == label
    int8 = engines.entries["int8-entropy@6"].built
    result = evaluate_variant(int8, cache, split.evaluation, store, backend="trt", batch_size=8, progress=False,
                              experiment=experiment, workspace=tmp_path, force=True)
    assert result.record["backend"]["precision"] == "int8"  # was recorded as an fp32 engine


def test_tensorrt_calibrators_on_tensorrt_11_are_refused_before_any_variant_is_built(monkeypatch, demo_model,
                                                                                    demo_pair, tmp_path):
    from trtlab.backends.tensorrt.loader import ImplicitInt8Unsupported
    from trtlab.workflows.engines import build_engines

    trt = make_fake_tensorrt("11.1.0.8")
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    with pytest.raises(ImplicitInt8Unsupported, match="TensorRT 11 removed IInt8Calibrator"):
        build_engines(demo_model, ["fp32"], demo_pair, workspace=tmp_path, tensorrt_calibrators=("entropy",),
                      gpu=GPU)
    assert not trt.calls and not (tmp_path / "variants").exists()


def test_a_noted_table_copies_and_pickles_like_its_table():
    """copy/pickle build the object without calling __init__: `.table` is not set yet, and forwarding attributes to
    it must not recurse (graph.fusion_report's table guards the same way)."""
    import copy
    import pickle

    import pandas as pd

    from trtlab.workflows.engine_reports import NotedTable

    noted = NotedTable(pd.DataFrame({"latency_ms": [1.5, 2.0]}), "measured on no GPU")
    for again in (copy.copy(noted), copy.deepcopy(noted), pickle.loads(pickle.dumps(noted))):
        assert again.note == noted.note and again.table.equals(noted.table) and len(again) == 2
