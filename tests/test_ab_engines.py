"""The TensorRT column of the A/B (issue 25 item 3) over the recording stand-in of tests/fake_tensorrt, which builds
nothing real (its "engine" returns logits[i, k] = mean(input[i]) + k): compare() builds each variant's engine from
the variant's own graph with one timing cache, evaluates it on the same images into the same store under its own
backend, and reports top-1, agreement with the literal result and INT8 ÷ FP16 latency; a failed build is one line
and the literal results stand; the widget toggle and the CLI flag switch it off. Also: the options objects of
compare()/evaluate(), "which GPUs ran", and the batch size in the identity of batch-dependent backends.
(The same column over the REAL TensorRT bindings, whose builder cannot exist here: tests/real_trt_checks.py.)"""
from __future__ import annotations

import sys
import traceback

import numpy as np
import pytest

from fake_tensorrt import FakeCuda, calls_named, make_fake_tensorrt

GPU = {"name": "NVIDIA Tesla T4", "compute_capability": "7.5"}


@pytest.fixture
def fake_trt(monkeypatch):
    trt = make_fake_tensorrt("11.1.0.8")
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    FakeCuda(trt, GPU).install(monkeypatch.setattr)
    return trt


@pytest.fixture(scope="module")
def demo_pair(demo_data):
    from trtlab.data.demo import demo_split

    return demo_data, demo_split(demo_data)


def test_the_ab_builds_and_evaluates_each_variants_engine(fake_trt, demo_model, demo_pair, tmp_path, monkeypatch):
    import trtlab.graph.classifier as classifier
    from trtlab.evaluation.identity import backend_of
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.compare import compare

    hashed_by_column = []  # models hashed by the engine column's own code (not by what it calls)
    real_hash = classifier.sha256_with_companions

    def counted(path, *args):
        *_, caller, _inspect, _here = traceback.extract_stack()  # caller → inspect_classifier → this
        if caller.filename.replace("\\", "/").endswith("workflows/ab_engines.py"):
            hashed_by_column.append(str(path))
        return real_hash(path, *args)

    monkeypatch.setattr(classifier, "sha256_with_companions", counted)
    dataset, split = demo_pair
    result = compare(demo_model, dataset, [Recipe(algorithm="minmax")], split=split, workspace=tmp_path,
                     backend="ort", progress=False)  # engines='auto': TensorRT imports (the stand-in)
    assert hashed_by_column == [str(demo_model)]  # once per A/B, not once per engine (3 engines here)
    literal = list(result.table.index)
    assert literal == ["fp32", "int8-minmax@6"] and set(result.table["backend"]) == {"ort-cpu"}
    column = result.engines
    rows = {row.variant: row for row in column.rows}
    # the A/B's variants, and an FP16 engine for the INT8 ÷ FP16 latency (the A/B compared no FP16 variant)
    assert list(rows) == ["fp32", "int8-minmax@6", "fp16"] and not column.failed
    assert rows["fp16"].status.startswith("latency reference") and rows["fp16"].label is None
    parsed = [call[1] for call in calls_named(fake_trt, "OnnxParser.parse_from_file")]
    assert parsed == [str(demo_model), str(result.variants["int8-minmax@6"].model_path), parsed[2]]  # their graphs
    for label in literal:
        row = rows[label]
        assert row.status == "built" and row.label == f"trt-{label}"
        engine, mine = result.store.load(row.label), result.store.load(label)
        assert backend_of(engine.record) == "trt" and backend_of(mine.record) == "ort-cpu"  # each keeps its own
        assert engine.image_ids == mine.image_ids  # the same evaluation images
        # the stand-in's logits rise with the class index: every engine answers the last class
        assert (engine.top1 == engine.logits.shape[1] - 1).all()
        assert row.agreement == pytest.approx(float((mine.top1 == engine.top1).mean()))
        assert row.p50_ms > 0
    assert rows["int8-minmax@6"].p50_ms / rows["fp16"].p50_ms == pytest.approx(
        column.table.raw.loc["int8-minmax@6", "÷ fp16 engine"])
    # one timing cache for every build
    assert (tmp_path / "engines" / "timing.cache").is_file()
    headers = list(column.table.shown.columns)
    assert "top-1 (trt 11.1.0.8)" in headers and "top-1 agreement with the variant on ort-cpu" in headers
    assert any("(trt 11.1.0.8, GPU time)" in h for h in headers)
    assert "TensorRT 11.1.0.8 on NVIDIA Tesla T4" in column.summary() and "3 of 3" in column.summary()
    assert result.ran_on.startswith("ran on the CPU") and "ONNX Runtime" in result.ran_on
    html = result._repr_html_()
    assert html.index("top-1 (95 % CI)") < html.index("The same variants as TensorRT engines")


def test_a_failed_engine_is_one_line_and_the_literal_results_stand(fake_trt, demo_model, demo_pair, tmp_path):
    from trtlab.evaluation.options import RunOptions
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.compare import compare

    dataset, split = demo_pair
    fake_trt.build_returns_none = True  # TensorRT returns no engine for every build
    result = compare(demo_model, dataset, [Recipe(algorithm="minmax")], split=split, workspace=tmp_path,
                     run=RunOptions(backend="ort", progress=False))
    assert list(result.table.index) == ["fp32", "int8-minmax@6"]
    assert np.isfinite(result.table.raw["top1"]).all()
    statuses = [row.status for row in result.engines.rows]
    assert len(statuses) == 2 and all(s.startswith("build failed: EngineBuildError: TensorRT 11.1.0.8 could not "
                                                   "build") and "\n" not in s for s in statuses)
    assert statuses[0].endswith("efficientnet-lite0.onnx: (TensorRT logged no error)")  # its reason, same line
    assert result.engines.summary().endswith("— the A/B results on ort-cpu stand")
    assert not any(label.startswith("trt-") for label in result.store.variants())
    shown = result.engines.table.shown
    assert (shown["top-1 (trt 11.1.0.8)"] == "—").all()


def test_engines_off_by_option_and_when_tensorrt_does_not_import(monkeypatch, demo_model, demo_pair, tmp_path):
    from trtlab.core.errors import UserValueError
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.compare import compare

    dataset, split = demo_pair
    trt = make_fake_tensorrt("10.9.0.34")
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    common = dict(split=split, workspace=tmp_path, backend="ort", progress=False)
    assert compare(demo_model, dataset, [Recipe(algorithm="minmax")], engines=False, **common).engines is None
    assert not trt.calls  # nothing built
    with pytest.raises(UserValueError, match="engines='yes' is not 'auto', True or False"):
        compare(demo_model, dataset, [], engines="yes", **common)
    with pytest.raises(UserValueError, match="compare\\(\\) takes no option 'batchsize'"):
        compare(demo_model, dataset, [], batchsize=8, **common)
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # TensorRT does not import: 'auto' means off
    assert compare(demo_model, dataset, [], **common).engines is None


def test_widget_toggle_follows_tensorrt_and_switches_the_column_off(monkeypatch, demo_model, demo_pair, tmp_path):
    pytest.importorskip("ipywidgets", reason="ipywidgets not installed (the lent GPU machine has none)")
    from trtlab.workflows import compare as compare_module

    dataset, split = demo_pair
    seen = []
    real = compare_module.compare
    monkeypatch.setattr(compare_module, "compare", lambda *a, **k: seen.append(k["run"].engines) or real(*a, **k))
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_tensorrt("10.9.0.34"))
    panel = compare_module.ab_widgets(demo_model, dataset, workspace=tmp_path, split=split)
    assert panel.engines_toggle.value is True  # on by default where TensorRT imports
    panel.engines_toggle.value = False
    panel.children[0].children[0].value = ("minmax",)
    result = panel.run_callback()
    assert seen == [False] and result is not None and result.engines is None
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    assert compare_module.ab_widgets(demo_model, dataset, workspace=tmp_path, split=split).engines_toggle.value is False


def test_calibrate_flag_reaches_compare(monkeypatch, demo_model, tmp_path, capsys):
    from trtlab.cli.commands import calibrate

    seen = {}

    class Reached(Exception):
        pass

    def fake_compare(*args, **kwargs):
        seen.update(kwargs)
        raise Reached

    monkeypatch.setattr("trtlab.workflows.compare.compare", fake_compare)
    for flag, expected in (([], "auto"), (["--no-engines"], False), (["--engines"], True)):
        seen.clear()
        with pytest.raises(Reached):
            # the session's demo model: a new workspace without --model would export it once more (≈10 s)
            calibrate.main(["--model", str(demo_model), "--workspace", str(tmp_path), "--algorithms", "minmax",
                            "--backend", "ort"] + flag)
        assert seen["run"].engines == expected and seen["run"].backend == "ort"


def test_which_gpus_ran_is_said(monkeypatch):
    from trtlab.workflows import compare as compare_module

    monkeypatch.setattr(compare_module, "gpu_names", lambda: {"0": "Tesla T4", "1": "Tesla T4"})
    assert compare_module.ran_on("torch", ["cuda:0", "cuda:1"]) == \
        "ran on 2× Tesla T4 (one process each), torch backend"
    assert compare_module.ran_on("torch", None) == "ran on 1× Tesla T4, torch backend"
    assert compare_module.ran_on("ort", None).startswith("ran on the CPU (")


def test_options_objects_and_keywords_are_one_api(demo_model, demo_cache, tmp_path):
    """evaluate() takes EvalTarget + RunOptions, or their fields as keywords: the same result either way."""
    from trtlab.evaluation.evaluate import evaluate
    from trtlab.evaluation.options import EvalTarget, RunOptions

    images = demo_cache.valid_indices[:4]
    by_objects = evaluate(demo_model, demo_cache, "fp32", target=EvalTarget(indices=images),
                          run=RunOptions(backend="ort", batch_size=2, progress=False), workspace=tmp_path)
    by_keywords = evaluate(demo_model, demo_cache, "fp32", indices=images, backend="ort", batch_size=2,
                           progress=False, workspace=tmp_path)
    assert by_keywords.record["date"] == by_objects.record["date"]  # the same stored result, reused
    with pytest.raises(Exception, match="evaluate\\(\\) takes no option 'batch'"):
        evaluate(demo_model, demo_cache, "fp32", batch=2, workspace=tmp_path)


def test_batch_size_is_in_the_identity_where_the_backend_depends_on_it(demo_model, demo_cache, tmp_path,
                                                                       monkeypatch, torch_label):
    """ONNX Runtime on the CPU gives every image the same logits at any batch (checked): a stored result is reused
    across batch sizes. The torch backend sums in another order at another batch (checked, also on the CPU): the
    batch size is in its results' identity, so batch 4 is not reused for batch 3 and both are kept."""
    pytest.importorskip("torch")
    from trtlab.evaluation.evaluate import evaluate

    images = demo_cache.valid_indices[:6]
    common = dict(indices=images, workspace=tmp_path, progress=False)
    ort4 = evaluate(demo_model, demo_cache, "fp32", backend="ort", batch_size=4, **common)
    ort3 = evaluate(demo_model, demo_cache, "fp32", backend="ort", batch_size=3, **common)
    assert "batch_size" not in ort4.record["identity"] and ort3.record["date"] == ort4.record["date"]  # reused
    forced = evaluate(demo_model, demo_cache, "fp32", backend="ort", batch_size=3, force=True, **common)
    np.testing.assert_array_equal(forced.logits, ort4.logits)  # why reuse is right there
    torch4 = evaluate(demo_model, demo_cache, "fp32", backend="torch", batch_size=4, **common)
    torch3 = evaluate(demo_model, demo_cache, "fp32", backend="torch", batch_size=3, **common)
    assert torch4.record["identity"]["batch_size"] == 4 and torch3.record["identity"]["batch_size"] == 3
    assert torch4.variant == f"fp32@{torch_label}" and torch3.variant.startswith(f"fp32@{torch_label}~")  # both kept
    assert torch3.record["variant_key"] != torch4.record["variant_key"]
    again = evaluate(demo_model, demo_cache, "fp32", backend="torch", batch_size=4, **common)
    assert again.variant == torch4.variant and again.record["date"] == torch4.record["date"]  # its own is reused


def test_a_panel_without_ipywidgets_is_one_line(monkeypatch, demo_model, demo_pair, tmp_path):
    from trtlab.core.packages import MissingPackages
    from trtlab.workflows import compare as compare_module

    dataset, split = demo_pair
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets raises ImportError
    with pytest.raises(MissingPackages) as raised:
        compare_module.ab_widgets(demo_model, dataset, workspace=tmp_path, split=split)
    line = raised.value.line()
    assert line.startswith("error: the interactive panel needs ipywidgets and IPython (ipywidgets does not import)")
    assert "pip install ipywidgets" in line and "trtlab.compare(...)" in line and "\n" not in line
    assert not any(tmp_path.iterdir())  # refused before any work
