"""TensorRT backend: version dispatch and argument wiring of the builder (against the recording stand-in in
tests/fake_tensorrt, which builds nothing), graph precision checks and TF32, the shared timing cache, engine
sidecars, the runner, engine inspection of both JSON layouts, latency statistics, the build CLI — and, wherever
`import tensorrt` works, real builds compared with ONNX Runtime.

Graphs are the real variants: the demo model (FP32), its FP16 variant (trtlab.graph.precision via build_variant)
and Q/DQ graphs; nothing here converts a graph inside the backend."""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fake_tensorrt import FakeCuda, calls_named, make_fake_tensorrt

GPU = {"name": "NVIDIA Tesla T4", "compute_capability": "7.5"}
VERSIONS = ["10.9.0.34", "11.1.0.8"]
SAMPLES = Path(__file__).parent / "fake_tensorrt" / "inspector_samples"


@pytest.fixture(params=VERSIONS, ids=["trt10", "trt11"])
def fake_trt(request, monkeypatch):
    trt = make_fake_tensorrt(request.param)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    return trt


@pytest.fixture
def fake_trt10(monkeypatch):
    trt = make_fake_tensorrt(VERSIONS[0])
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    return trt


@pytest.fixture
def fake_trt11(monkeypatch):
    trt = make_fake_tensorrt(VERSIONS[1])
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    return trt


@pytest.fixture(scope="module")
def fp16_variants(demo_model, session_workspace):
    """The demo model's FP16 variants as build_variant makes them: plain, and with the first layer guarded FP32."""
    from trtlab.quantization.variants import Recipe, build_variant

    return {guards: build_variant(demo_model, Recipe(precision="fp16", guards=guards), workspace=session_workspace)
            for guards in ((), ("first_layer",))}


def _build(model, precision=None, tmp_path=None, **kw):
    from trtlab.backends.tensorrt.build import build_engine

    return build_engine(model, precision, workspace=tmp_path, gpu=GPU, progress=False, **kw)


def _flags(trt, call="IBuilderConfig.set_flag"):
    return [c[1] for c in calls_named(trt, call)]


def _strongly_typed_flags(trt) -> int:
    """create_network's flags for a strongly typed network: the STRONGLY_TYPED bit on 10.x, nothing on 11.x
    (always strongly typed; the flag is deprecated and ignored there)."""
    return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if trt.__version__.startswith("10.") else 0


def _precision_touches(trt) -> list:
    """Everything TensorRT forbids (10.x) or no longer has (11.x) on a strongly typed network."""
    return ([c for c in trt.calls if c[0] in ("ILayer.precision=", "ILayer.set_output_type", "ITensor.dtype=",
                                             "IBuilderConfig.int8_calibrator=", "IBuilderConfig.set_calibration_profile")]
            + [c for c in calls_named(trt, "IBuilderConfig.set_flag")
               if c[1].name in ("FP16", "BF16", "INT8", "FP8", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS")])


# ---------------------------------------------------------------------------------------------------------------
# Strongly typed builds: the graph's types are the engine's types
# ---------------------------------------------------------------------------------------------------------------
def test_fp32_build_sets_profile_workspace_verbosity_tf32_and_writes_sidecar(fake_trt, demo_model, tmp_path):
    build = _build(demo_model, "fp32", tmp_path, min_batch=2, opt_batch=16, max_batch=48, workspace_mb=512)
    assert calls_named(fake_trt, "IOptimizationProfile.set_shape") == [
        ("IOptimizationProfile.set_shape", "input", (2, 3, 224, 224), (16, 3, 224, 224), (48, 3, 224, 224))]
    (_, pool, size), = calls_named(fake_trt, "IBuilderConfig.set_memory_pool_limit")
    assert pool == fake_trt.MemoryPoolType.WORKSPACE and size == 512 << 20
    assert ("IBuilderConfig.profiling_verbosity=", fake_trt.ProfilingVerbosity.DETAILED) in fake_trt.calls
    assert _flags(fake_trt, "IBuilderConfig.clear_flag") == [fake_trt.BuilderFlag.TF32]  # FP32 means FP32
    assert not calls_named(fake_trt, "IBuilderConfig.set_flag")
    assert calls_named(fake_trt, "Builder.create_network") == [("Builder.create_network", _strongly_typed_flags(fake_trt))]
    assert build.engine_path.is_file() and build.engine_path.parent == tmp_path / "engines"
    side = json.loads(build.sidecar_path.read_text())
    assert side["tensorrt_version"] == fake_trt.__version__ and side["network"] == "strongly typed"
    assert side["gpu_name"] == GPU["name"] and side["compute_capability"] == "7.5"
    assert side["recipe"]["precision"] == "fp32" and side["recipe_hash"] in build.engine_path.name
    assert side["graph"]["precision"] == "fp32" and side["graph"]["weighted_ops"] == {"FP32": 50}
    assert side["tf32"] == {"allowed": False, "fp32_compute_nodes": 50,
                            "note": "TF32 cleared: the 50 FP32 convolution/GEMM node(s) compute in true FP32"}
    assert side["input"]["profile"] == [2, 16, 48] and "build_seconds" in side and "built_at" in side
    assert "build_engine(" in side["rebuild_command"] and str(demo_model) in side["rebuild_command"]


def test_precision_defaults_to_the_graphs_own_and_a_wrong_one_is_refused(fake_trt, demo_model, qdq_model,
                                                                         fp16_variants, tmp_path):
    from trtlab.core.errors import UserValueError

    assert _build(qdq_model, None, tmp_path).precision == "int8"
    assert _build(fp16_variants[()].model_path, None, tmp_path).precision == "fp16"
    assert _build(demo_model, None, tmp_path).precision == "fp32"
    with pytest.raises(UserValueError, match=r"is a FP32 graph, but precision='fp16'.*Recipe\(precision='fp16'\)"):
        _build(demo_model, "fp16", tmp_path)  # the backend converts nothing: the FP16 variant makes the graph
    with pytest.raises(UserValueError, match="is a INT8 graph, but precision='fp32'"):
        _build(qdq_model, "fp32", tmp_path)  # a Q/DQ graph is never recorded as an FP32 engine
    with pytest.raises(UserValueError, match="is a FP32 graph, but precision='int8'"):
        _build(demo_model, "int8", tmp_path)
    assert len(calls_named(fake_trt, "Builder.build_serialized_network")) == 3  # the refusals built nothing


def test_build_arguments_merge_once_keyword_over_object_over_default_and_fp32_is_a_choice(tmp_path):
    from trtlab.backends.tensorrt.build import merge_build_arguments
    from trtlab.backends.tensorrt.options import BuildOptions, EngineTarget
    from trtlab.core.errors import UserValueError
    from trtlab.graph.guards import Guard

    options = BuildOptions(precision="fp32", max_batch=48, guards=("first_layer=fp32",), weakly_typed=True)
    target, fields = merge_build_arguments(None, None, EngineTarget(name="a", folder=tmp_path), options, {})
    assert fields["precision"] == "fp32"  # an options object's fp32 is honoured, not taken for "unset"
    assert fields["max_batch"] == 48 and fields["opt_batch"] == 32 and target.name == "a"
    assert all(isinstance(g, Guard) for g in fields["guards"])  # still Guards (dataclasses.asdict made them dicts)
    target, fields = merge_build_arguments("int8", tmp_path / "x.engine", EngineTarget(name="a", output="y"),
                                           options, {"max_batch": 40, "name": "b"})
    assert (fields["precision"], fields["max_batch"], target.name, target.output) == ("int8", 40, "b",
                                                                                     tmp_path / "x.engine")
    assert merge_build_arguments(None, None, None, None, {})[1]["precision"] is None  # the graph's own
    with pytest.raises(UserValueError, match="unknown keyword.*max_bach"):
        merge_build_arguments(None, None, None, None, {"max_bach": 8})


def test_an_options_object_naming_fp32_is_honoured_and_checked_against_the_graph(fake_trt, demo_model, qdq_model,
                                                                                 tmp_path):
    from trtlab.backends.tensorrt.options import BuildOptions
    from trtlab.core.errors import UserValueError

    assert _build(demo_model, None, tmp_path, options=BuildOptions(precision="fp32")).precision == "fp32"
    with pytest.raises(UserValueError, match="is a INT8 graph, but precision='fp32'"):
        _build(qdq_model, None, tmp_path, options=BuildOptions(precision="fp32"))  # once silently the graph's int8
    assert _build(qdq_model, None, tmp_path, options=BuildOptions(max_batch=48)).precision == "int8"


def test_fp16_variant_builds_strongly_typed_without_precision_flags(fake_trt, fp16_variants, tmp_path):
    import onnx
    from onnx import TensorProto

    trt = fake_trt
    variant = fp16_variants[()]
    build = _build(variant.model_path, "fp16", tmp_path)
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", _strongly_typed_flags(trt))]
    assert not calls_named(trt, "IBuilderConfig.set_flag") and not _precision_touches(trt)
    (_, parsed), = calls_named(trt, "OnnxParser.parse_from_file")
    assert parsed == str(variant.model_path) == build.sidecar["onnx"]  # parsed as the variant made it
    inits = {i.name: i.data_type for i in onnx.load(parsed).graph.initializer}
    assert inits["_conv_stem.weight"] == inits["_fc.weight"] == TensorProto.FLOAT16
    assert build.sidecar["graph"]["weighted_ops"] == {"FP16": 50}


def test_an_fp32_guard_means_fp32_not_tf32_on_both_versions(fake_trt, fp16_variants, tmp_path):
    """A guarded FP32 region in an FP16 graph: TF32 is cleared (TensorRT 10 and 11 keep BuilderFlag.TF32, on by
    default, on strongly typed networks) and the sidecar says so; tf32=True allows it and says that instead."""
    trt = fake_trt
    guarded = fp16_variants[("first_layer",)]
    build = _build(guarded.model_path, "fp16", tmp_path)
    assert _flags(trt, "IBuilderConfig.clear_flag") == [trt.BuilderFlag.TF32]
    assert build.sidecar["graph"]["weighted_ops"] == {"FP32": 1, "FP16": 49}
    assert build.sidecar["graph"]["fp32_compute_examples"] == ["node_Conv_881"]  # the guarded first conv
    assert build.sidecar["tf32"]["note"] == "TF32 cleared: the 1 FP32 convolution/GEMM node(s) compute in true FP32"
    allowed = _build(guarded.model_path, "fp16", tmp_path, tf32=True)
    assert len(calls_named(trt, "IBuilderConfig.clear_flag")) == 1  # not cleared a second time
    assert allowed.engine_path != build.engine_path and allowed.sidecar["tf32"]["allowed"] is True
    assert "may compute in TF32" in allowed.sidecar["tf32"]["note"]


def test_int8_qdq_build_is_strongly_typed_per_version(fake_trt, qdq_model, tmp_path):
    trt = fake_trt
    build = _build(qdq_model, "int8", tmp_path)
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", _strongly_typed_flags(trt))]
    assert not calls_named(trt, "IBuilderConfig.set_flag") and not _precision_touches(trt)
    (_, parsed), = calls_named(trt, "OnnxParser.parse_from_file")
    assert parsed == str(qdq_model)  # the Q/DQ graph is built as it is
    assert build.sidecar["recipe"]["precision"] == "int8" and "fp16_fallback" not in build.sidecar["recipe"]
    # the fixture quantizes the first conv only: the other 49 weighted ops compute FP32, so TF32 is cleared
    assert build.sidecar["graph"]["weighted_ops"] == {"INT8": 1, "FP32": 49}
    assert _flags(trt, "IBuilderConfig.clear_flag") == [trt.BuilderFlag.TF32]


def test_guards_on_a_strongly_typed_build_belong_to_the_variant(fake_trt, qdq_model, tmp_path):
    from trtlab.core.errors import UserValueError

    with pytest.raises(UserValueError, match=r"(?s)strongly typed build.*Recipe\(guards=...\)"):
        _build(qdq_model, "int8", tmp_path, guards=("last_layer",))
    assert not calls_named(fake_trt, "Builder")


def test_int8_of_a_model_without_qdq_is_refused(fake_trt, demo_model, tmp_path):
    from trtlab.core.errors import UserValueError

    with pytest.raises(UserValueError, match="is a FP32 graph") as info:
        _build(demo_model, "int8", tmp_path)
    assert ("int8-implicit" in str(info.value)) == fake_trt.__version__.startswith("10.")


# ---------------------------------------------------------------------------------------------------------------
# TensorRT 10 legacy weakly typed path and implicit INT8
# ---------------------------------------------------------------------------------------------------------------
def test_legacy_weakly_typed_fp16_on_trt10_sets_the_flag_and_pins_guarded_layers(fake_trt10, demo_model, tmp_path):
    trt = fake_trt10
    build = _build(demo_model, "fp16", tmp_path, guards=("first_layer",), weakly_typed=True)
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", 0)]
    assert _flags(trt) == [trt.BuilderFlag.FP16, trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS]
    assert [c for c in trt.calls if c[0] == "ILayer.precision="] == [("ILayer.precision=", trt.float32)]
    assert calls_named(trt, "ILayer.set_output_type") == [("ILayer.set_output_type", "node_Conv_881", 0, trt.float32)]
    assert build.sidecar["recipe"]["weakly_typed"] is True and build.sidecar["network"].startswith("weakly typed")
    assert _flags(trt, "IBuilderConfig.clear_flag") == [trt.BuilderFlag.TF32]  # the FP32-pinned layer: no TF32


def test_weakly_typed_on_trt11_is_refused_before_any_builder_call(fake_trt11, demo_model, tmp_path):
    from trtlab.core.errors import UserValueError

    assert not hasattr(fake_trt11.BuilderFlag, "FP16")  # removed in 11: touching it would raise
    with pytest.raises(UserValueError, match="weakly_typed=True needs TensorRT 10"):
        _build(demo_model, "fp16", tmp_path, weakly_typed=True)
    assert not calls_named(fake_trt11, "Builder")


def test_legacy_weakly_typed_int8_qdq_on_trt10(fake_trt10, qdq_model, tmp_path):
    trt = fake_trt10
    build = _build(qdq_model, "int8", tmp_path, weakly_typed=True)
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", 0)]
    assert _flags(trt) == [trt.BuilderFlag.INT8, trt.BuilderFlag.FP16]  # weakly typed Q/DQ + FP16 fallback
    assert build.sidecar["recipe"]["fp16_fallback"] is True


def test_implicit_int8_on_trt11_explains_the_explicit_path(fake_trt11, demo_model, tmp_path):
    from trtlab.backends.tensorrt.loader import ImplicitInt8Unsupported

    with pytest.raises(ImplicitInt8Unsupported) as info:
        _build(demo_model, "int8-implicit", tmp_path, calibrator=object())
    message = str(info.value)
    assert "TensorRT 11" in message and "Q/DQ" in message and "precision='int8'" in message
    assert not calls_named(fake_trt11, "Builder")


def _trt_calibrator(trt, model, cache, split_calibration, workspace, algorithm="entropy", images=None, batch=8):
    from trtlab.quantization.tensorrt_calibrator import tensorrt_calibrator
    from trtlab.quantization.variants import Recipe

    recipe = Recipe(algorithm=algorithm, calibration_images=images, calibration_batch=batch)
    return tensorrt_calibrator(trt, model, recipe, cache, split_calibration, workspace, progress=False)


@pytest.mark.parametrize("algorithm,base", [("entropy", "IInt8EntropyCalibrator2"), ("minmax", "IInt8MinMaxCalibrator")])
def test_implicit_int8_on_trt10_wires_the_calibrator_it_is_given(fake_trt10, demo_model, demo_cache, tmp_path,
                                                                 algorithm, base):
    trt = fake_trt10
    indices = demo_cache.valid_indices[:10]
    calibrator, recipe = _trt_calibrator(trt, demo_model, demo_cache, indices, tmp_path, algorithm, batch=4)
    build = _build(demo_model, "int8-implicit", tmp_path, calibrator=calibrator, guards=("last_layer",))
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", 0)]  # legacy: weakly typed
    assert build.sidecar["recipe"]["weakly_typed"] is True
    (_, given), = [c for c in trt.calls if c[0] == "IBuilderConfig.int8_calibrator="]
    assert given is calibrator and isinstance(given, getattr(trt, base))
    assert ("IInt8Calibrator.__init__", type(given).__name__) in trt.calls  # base initialised explicitly
    assert given.get_batch_size() == 4 and given.read_calibration_cache() is None
    assert calls_named(trt, "IOptimizationProfile.set_shape")[-1] == (
        "IOptimizationProfile.set_shape", "input", (4, 3, 224, 224), (4, 3, 224, 224), (4, 3, 224, 224))
    assert len(calls_named(trt, "IBuilderConfig.set_calibration_profile")) == 1
    assert _flags(trt) == [trt.BuilderFlag.INT8, trt.BuilderFlag.FP16, trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS]
    assert calls_named(trt, "ILayer.set_output_type") == [("ILayer.set_output_type", "node_linear", 0, trt.float32)]
    calibration = build.sidecar["calibration"]
    assert calibration["images"] == recipe.calibration_images == 10 and calibration["algorithm"] == algorithm
    assert calibration["batch"] == 4 and calibration["padded_rows"] == 2  # 10 images in batches of 4: 2 copies


def test_tensorrt_and_trtlab_calibrate_on_the_same_images(fake_trt10, demo_model, demo_cache, session_workspace):
    """One calibration-image rule: TensorRT's calibrator gets exactly the images trtlab's variant of the same
    recipe calibrated on (select_calibration_indices), and feeds them in that order."""
    from trtlab.quantization.variants import Recipe, build_variant

    split_calibration = demo_cache.valid_indices[::-1][:9]  # a shuffled calibration set, as splits give
    calibrator, recipe = _trt_calibrator(fake_trt10, demo_model, demo_cache, split_calibration, session_workspace,
                                         images=7, batch=4)
    variant = build_variant(demo_model, Recipe(algorithm="entropy", calibration_images=7, calibration_batch=4),
                            demo_cache, split_calibration, session_workspace, progress=False)
    assert calibrator.identity["calibration_ids_hash"] == variant.calibration["ids_hash"]
    assert calibrator.identity["images"] == variant.calibration["images"] == 7
    assert list(calibrator.indices) == list(split_calibration[:7])


def test_calibration_cache_uses_the_one_sidecar_schema_and_refuses_foreign_caches(fake_trt10, demo_model, demo_cache,
                                                                                  tmp_path):
    from dataclasses import fields

    from trtlab.quantization.calibration_cache import CacheMetadata, StaleCacheError

    indices = demo_cache.valid_indices[:8]
    calibrator, _ = _trt_calibrator(fake_trt10, demo_model, demo_cache, indices, tmp_path)
    text = b"TRT-100900-EntropyCalibration2\ninput: 3c010a14\n"
    calibrator.write_calibration_cache(memoryview(text))
    sidecar = json.loads(Path(str(calibrator.cache_path) + ".json").read_text())
    assert set(sidecar) == {f.name for f in fields(CacheMetadata)}  # trtlab's calibration-cache schema
    assert sidecar["tensorrt_version"] == "10.9.0.34" and sidecar["images"] == 8
    again, _ = _trt_calibrator(fake_trt10, demo_model, demo_cache, indices, tmp_path)
    assert again.cache_path == calibrator.cache_path and again.read_calibration_cache() == text
    sidecar["model_sha256"] = "b" * 64  # a cache made for another model sits where this one's would
    Path(str(calibrator.cache_path) + ".json").write_text(json.dumps(sidecar))
    with pytest.raises(StaleCacheError, match="model_sha256: it has bbbb"):
        _trt_calibrator(fake_trt10, demo_model, demo_cache, indices, tmp_path)  # refused before any build


# ---------------------------------------------------------------------------------------------------------------
# Failures, engine files, timing cache
# ---------------------------------------------------------------------------------------------------------------
def test_parser_errors_name_the_onnx_nodes(fake_trt, demo_model, tmp_path):
    from trtlab.backends.tensorrt.loader import OnnxParseError

    fake_trt.parser_failures = [(4, "Assertion failed: unsupported padding mode")]
    with pytest.raises(OnnxParseError) as info:
        _build(demo_model, "fp32", tmp_path)
    assert "node 'node_Conv_800' (Conv, #4): Assertion failed: unsupported padding mode" in str(info.value)


def test_failed_build_reports_and_writes_nothing(fake_trt, demo_model, tmp_path):
    from trtlab.backends.tensorrt.loader import EngineBuildError

    fake_trt.build_returns_none = True
    with pytest.raises(EngineBuildError, match="could not build the fp32 engine"):
        _build(demo_model, "fp32", tmp_path)
    assert not list((tmp_path / "engines").glob("*.engine"))


def test_engine_from_another_tensorrt_or_gpu_is_refused_with_the_rebuild_command(fake_trt10, fp16_variants, tmp_path):
    from trtlab.backends.tensorrt.loader import EngineCompatibilityError
    from trtlab.backends.tensorrt.options import check_engine_compatible

    command = "python -m trtlab build --model m.onnx --precision fp16 --guard first_layer --force"
    build = _build(fp16_variants[("first_layer",)].model_path, "fp16", tmp_path, rebuild_command=command)
    assert check_engine_compatible(build.engine_path, "10.9.0.34", GPU)["recipe_hash"]
    with pytest.raises(EngineCompatibilityError) as info:
        check_engine_compatible(build.engine_path, "11.1.0.8", GPU)
    message = str(info.value)
    assert "TensorRT version 10.9.0.34" in message and "11.1.0.8" in message and command in message
    with pytest.raises(EngineCompatibilityError, match="GPU compute capability 7.5.*8.6"):
        check_engine_compatible(build.engine_path, "10.9.0.34", {"name": "NVIDIA A10", "compute_capability": "8.6"})
    build.sidecar_path.unlink()
    with pytest.raises(EngineCompatibilityError, match="has no sidecar"):
        check_engine_compatible(build.engine_path, "10.9.0.34", GPU)


def test_engine_of_another_version_is_rebuilt_not_reused(demo_model, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_tensorrt(VERSIONS[0]))
    old = _build(demo_model, "fp32", tmp_path)
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_tensorrt(VERSIONS[1]))
    new = _build(demo_model, "fp32", tmp_path)
    assert not new.reused and new.engine_path == old.engine_path
    assert json.loads(new.sidecar_path.read_text())["tensorrt_version"] == VERSIONS[1]


def test_timing_cache_is_read_before_and_merged_after_each_build(fake_trt, demo_model, tmp_path):
    cache = tmp_path / "engines" / "timing.cache"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"previous-builds")
    first = _build(demo_model, "fp32", tmp_path)
    assert calls_named(fake_trt, "IBuilderConfig.create_timing_cache") == [
        ("IBuilderConfig.create_timing_cache", b"previous-builds")]
    (_, _, ignore_mismatch), = calls_named(fake_trt, "IBuilderConfig.set_timing_cache")
    assert ignore_mismatch is False
    assert cache.read_bytes() == b"previous-builds|fake-timing-entries"
    assert not calls_named(fake_trt, "ITimingCache.combine")  # nobody wrote in between: nothing to merge
    again = _build(demo_model, "fp32", tmp_path)  # same recipe, TensorRT and GPU: reused, nothing built again
    assert again.reused and again.engine_path == first.engine_path
    assert len(calls_named(fake_trt, "Builder.build_serialized_network")) == 1


def test_timing_cache_written_meanwhile_by_another_kernel_is_merged_under_the_lock(fake_trt, tmp_path):
    """Two kernels building at once: the second writer merges the first one's entries instead of dropping them,
    and waits while the other holds the lock."""
    from filelock import FileLock

    from trtlab.backends.tensorrt.timing_cache import load_timing_cache, save_timing_cache

    path = tmp_path / "timing.cache"
    path.write_bytes(b"shared")
    config = fake_trt.Builder(None).create_builder_config()
    read = load_timing_cache(config, path)
    path.write_bytes(b"shared|other-kernel")  # another kernel finished its build meanwhile
    held = threading.Event()

    def other_kernel_writing():
        with FileLock(str(path) + ".lock"):
            held.set()
            time.sleep(0.5)

    writer = threading.Thread(target=other_kernel_writing)
    writer.start()
    held.wait(10)
    started = time.monotonic()
    save_timing_cache(config, path, read)
    writer.join()
    assert time.monotonic() - started >= 0.4  # waited for the other writer's lock
    (_, merged, ignore_mismatch), = calls_named(fake_trt, "ITimingCache.combine")
    assert merged._data == b"shared|other-kernel" and ignore_mismatch is False
    assert path.read_bytes() == b"shared|other-kernel|fake-timing-entries"


# ---------------------------------------------------------------------------------------------------------------
# Runner and inspection
# ---------------------------------------------------------------------------------------------------------------
def test_runner_runs_an_engine_in_chunks_of_its_max_batch(fake_trt, demo_model, tmp_path, monkeypatch):
    from trtlab.backends.tensorrt.runner import TrtRunner

    trt = fake_trt
    FakeCuda(trt, GPU).install(monkeypatch.setattr)  # numpy "device" memory: the runner's logic, not CUDA's
    build = _build(demo_model, "fp32", tmp_path, min_batch=1, opt_batch=2, max_batch=4)
    batch = np.random.default_rng(0).standard_normal((6, 3, 224, 224), dtype=np.float32)
    with TrtRunner(build.engine_path) as runner:
        logits = runner.infer(batch)
        assert (runner.input_name, runner.max_batch, runner.input_shape) == ("input", 4, ("batch", 3, 224, 224))
        assert runner.last_gpu_ms and runner.last_gpu_ms > 0
        assert runner.describe()["tensorrt"] == trt.__version__
    # the fake engine writes logits[i, k] = mean(input[i]) + k: every image came back in its own row
    expected = batch.mean(axis=(1, 2, 3))[:, None] + np.arange(1000, dtype=np.float32)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    shapes = [c[2] for c in calls_named(trt, "IExecutionContext.set_input_shape")]
    assert shapes == [(4, 3, 224, 224), (4, 3, 224, 224), (2, 3, 224, 224)]  # buffers at max, then 4 + 2
    assert not trt.device_memory  # every device buffer released on exit


def test_runner_on_a_variant_graph_records_the_graphs_precision(fake_trt, qdq_model, demo_model, tmp_path,
                                                                 monkeypatch):
    """make_runner(<INT8 variant's graph>, backend='trt') builds an INT8 engine and says so in the record (it used
    to build and record every ONNX file as 'fp32'); an engine named for a graph must be built from it."""
    from trtlab.backends import make_runner
    from trtlab.backends.tensorrt.loader import EngineCompatibilityError
    from trtlab.backends.tensorrt.runner import TrtRunner

    FakeCuda(fake_trt, GPU).install(monkeypatch.setattr)
    with make_runner(qdq_model, backend="trt", workspace=tmp_path) as runner:
        assert runner.describe()["precision"] == "int8" and runner.sidecar["graph"]["precision"] == "int8"
        engine = runner.engine_path
    with TrtRunner(qdq_model, engine=engine) as runner:
        assert runner.describe()["precision"] == "int8"
    with pytest.raises(EngineCompatibilityError, match=f"was built from ONNX sha256 .* not from {demo_model.name}"):
        TrtRunner(demo_model, engine=engine).activate()


def test_runner_refuses_an_engine_tensorrt_cannot_deserialize(fake_trt, demo_model, tmp_path, monkeypatch):
    from trtlab.backends.tensorrt.loader import EngineCompatibilityError
    from trtlab.backends.tensorrt.runner import TrtRunner

    FakeCuda(fake_trt, GPU).install(monkeypatch.setattr)
    build = _build(demo_model, "fp32", tmp_path)
    build.engine_path.write_bytes(b"not an engine")
    with pytest.raises(EngineCompatibilityError, match="(?s)could not deserialize.*build_engine"):
        TrtRunner(build.engine_path).activate()


def test_inspect_engine_goes_through_the_engine_inspector(fake_trt, qdq_model, tmp_path, monkeypatch):
    from trtlab.backends.tensorrt.inspection import inspect_engine

    trt = fake_trt
    FakeCuda(trt, GPU).install(monkeypatch.setattr)
    build = _build(qdq_model, "int8", tmp_path, opt_batch=8, max_batch=16)
    inspection = inspect_engine(build.engine_path)
    layers = len(json.loads(build.engine_path.read_bytes())["layer_names"])
    assert inspection.counts["layers"] == inspection.counts["int8_layers"] == layers > 90
    assert inspection.layout == ("10.x" if trt.__version__.startswith("10.") else "11.x")  # the fake writes both
    assert [t["name"] for t in inspection.io] == ["input", "logits"]
    assert calls_named(trt, "EngineInspector.get_engine_information") == [
        ("EngineInspector.get_engine_information", trt.LayerInformationFormat.JSON)]
    assert calls_named(trt, "IExecutionContext.set_input_shape")[-1][2] == (8, 3, 224, 224)  # the opt batch
    assert [c[0] for c in trt.calls].count("EngineInspector.execution_context=") == 1


@pytest.mark.parametrize("layout", ["10.x", "11.x"])
def test_engine_inspector_json_of_both_layouts_parses_to_the_same_table(layout):
    """Recorded samples of TensorRT 10.x's ("Format/Datatype", "Bindings") and 11.x's ("DataType" + "Format",
    "I/O Tensors") layouts of one INT8 engine give the same per-layer precisions and counts."""
    from trtlab.backends.tensorrt.inspection import parse_engine_information

    result = parse_engine_information((SAMPLES / f"tensorrt-{layout}.json").read_text())
    assert result.layout == layout
    assert list(result.layers["precision"]) == ["FP32", "FP16", "INT8", "INT8", "INT8", "INT8", "FP32"]
    assert list(result.layers["weights"]) == ["", "FP16", "INT8", "INT8", "INT8", "", ""]
    assert result.layers.loc[4, "inputs"] == "INT8, INT8"  # the residual Add fused into the conv reads INT8 too
    assert result.counts == {"layers": 7, "int8_layers": 4, "fp16_layers": 1, "fp32_layers": 2, "compute_layers": 5,
                             "int8_compute_layers": 3, "fp32_compute_layers": 1, "io_tensors": 2}
    modes = [t["mode"] for t in result.io]
    assert modes == (["Input", "Output"] if layout == "11.x" else [None, None])  # 10.x's Bindings are names only


def test_tensor_precision_prefers_the_11x_datatype_field():
    from trtlab.backends.tensorrt.inspection import tensor_precision

    assert tensor_precision({"DataType": "Half", "Format": "Row major linear FP32 format (kLINEAR)"}) == "FP16"
    assert tensor_precision({"DataType": "BFloat16", "Format": "Channel major format"}) == "BF16"
    assert tensor_precision({"Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}) == "FP16"
    assert tensor_precision({"Format/Datatype": "Row major linear UInt8 format"}) == "UINT8"
    assert tensor_precision({"Format": "Unknown format"}) == "?"


def test_engine_information_without_detailed_verbosity_says_how_to_fix():
    from trtlab.backends.tensorrt.inspection import parse_engine_information

    with pytest.raises(ValueError, match="ProfilingVerbosity.DETAILED"):
        parse_engine_information({"Layers": ["node_Conv_881", "node_linear"]})


# ---------------------------------------------------------------------------------------------------------------
# Latency statistics
# ---------------------------------------------------------------------------------------------------------------
def test_latency_stats_report_only_the_percentiles_the_sample_supports():
    from trtlab.backends.tensorrt.latency import latency_stats, samples_needed

    assert [samples_needed(p) for p in (50, 90, 99)] == [10, 50, 500]
    few = latency_stats([4.0, 5.0, 6.0, 7.0, 8.0], batch_size=8)
    assert "p50_ms" not in few and "p99_ms" not in few  # 5 samples: no percentile at all, the mean only
    assert few["mean_ms"] == 6.0 and few["throughput_ips"] == pytest.approx(8 / 0.006)
    hundred = latency_stats(np.arange(1, 101, dtype=float), batch_size=8)
    assert hundred["p50_ms"] == pytest.approx(50.5) and hundred["p90_ms"] == pytest.approx(90.1)
    assert "p99_ms" not in hundred and hundred["throughput_ips"] == pytest.approx(8 / 0.0505)
    assert latency_stats(np.arange(1, 501, dtype=float), 1)["p99_ms"] == pytest.approx(495.01)


def test_latency_table_puts_int8_next_to_fp16_and_formats_milliseconds():
    from trtlab.backends.tensorrt.latency import (format_comparison, format_latency_table, format_ms,
                                                  latency_stats, latency_table)

    rows = [{"variant": v, "backend": "trt", "timer": "GPU (CUDA events)", **latency_stats([ms] * 60, b)}
            for v, b, ms in (("fp16", 1, 2.0), ("fp16", 8, 4.0), ("int8-entropy@6", 1, 1.5),
                             ("int8-entropy@6", 8, 5.0))]
    table = latency_table(rows)
    assert list(table.columns) == ["backend", "timer", "samples", "p50_ms", "p90_ms", "mean_ms", "throughput_ips"]
    assert table.loc[("int8-entropy@6", 8), "p50_ms"] == 5.0
    assert table.attrs["ratio"].to_dict() == {1: 0.75, 8: 1.25}  # INT8 slower than FP16 at batch 8
    side = table.attrs["side_by_side"]
    assert list(side.columns) == ["fp16 p50 ms", "int8-entropy@6 p50 ms", "int8-entropy@6/fp16"]
    assert side.loc[8].tolist() == [4.0, 5.0, 1.25]
    assert [format_ms(v) for v in (0.41234, 4.1234, 41.234, 412.34, 4123.4)] == ["0.412", "4.12", "41.2", "412",
                                                                                "4,123"]
    shown = format_latency_table(table)
    assert list(shown.columns) == ["backend", "timer", "timings", "p50 ms", "p90 ms", "mean ms", "images/s"]
    assert shown.loc[("fp16", 8)].tolist()[2:] == ["60", "4.00", "4.00", "4.00", "2,000"]
    comparison = format_comparison(table)
    assert list(comparison.columns) == ["p50 ms · batch 1", "÷ fp16 · batch 1", "p50 ms · batch 8", "÷ fp16 · batch 8"]
    assert comparison.loc["int8-entropy@6"].tolist() == ["1.50", "0.75×", "5.00", "1.25×"]
    assert comparison.loc["fp16"].tolist() == ["2.00", "1.00×", "4.00", "1.00×"]


# ---------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------
def test_build_cli_without_tensorrt_says_so(monkeypatch, capsys):
    from trtlab.cli.commands.build import main as build_main

    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` raises ImportError
    assert build_main(["--precision", "fp16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: build needs TensorRT: TensorRT does not import here (ModuleNotFoundError")
    assert "python -m trtlab doctor" in err and err.count("\n") == 1  # one line, whatever logging is set up


def test_build_cli_legacy_weakly_typed_flag_reaches_the_builder(fake_trt10, demo_model, tmp_path, monkeypatch,
                                                                capsys):
    from trtlab.cli.commands.build import main as build_main

    trt = fake_trt10
    FakeCuda(trt, GPU).install(monkeypatch.setattr)  # the CLI asks the (fake) GPU for its name
    args = ["--model", str(demo_model), "--precision", "fp16", "--workspace", str(tmp_path), "--no-timing-cache"]
    assert build_main(args + ["--weakly-typed"]) == 0
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", 0)]
    assert trt.BuilderFlag.FP16 in _flags(trt)
    (_, parsed), = calls_named(trt, "OnnxParser.parse_from_file")
    assert parsed == str(demo_model)  # legacy FP16: the FP32 graph with BuilderFlag.FP16
    assert build_main(args) == 0  # default: the FP16 variant's graph, strongly typed, no precision flag
    assert calls_named(trt, "Builder.create_network")[-1] == ("Builder.create_network", _strongly_typed_flags(trt))
    assert calls_named(trt, "OnnxParser.parse_from_file")[-1][1] != str(demo_model)
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["fp16+weakly-typed", "fp16"]


# ---------------------------------------------------------------------------------------------------------------
# Real TensorRT (runs wherever `import tensorrt` works; skipped with the reason elsewhere)
# ---------------------------------------------------------------------------------------------------------------
def _tensorrt_reason() -> str:
    try:
        import tensorrt  # noqa: F401
    except Exception as exc:
        return f"TensorRT does not import here ({type(exc).__name__}); real-TensorRT tests need a GPU with TensorRT 10/11"
    from trtlab.backends.cuda_runtime import cuda_available

    ok, why = cuda_available()
    return "" if ok else f"TensorRT imports but CUDA is not usable: {why}"


_REAL_TRT_SKIP = _tensorrt_reason()


@pytest.mark.skipif(bool(_REAL_TRT_SKIP), reason=_REAL_TRT_SKIP or "n/a")
def test_real_tensorrt_variants_agree_with_onnx_runtime(demo_model, demo_data, demo_cache, session_workspace):
    import tensorrt as trt

    from trtlab.backends import make_runner
    from trtlab.backends.tensorrt.inspection import inspect_engine
    from trtlab.backends.tensorrt.loader import tensorrt_major
    from trtlab.backends.tensorrt.runner import TrtRunner
    from trtlab.data.demo import demo_split
    from trtlab.data.preprocess import normalize_batch
    from trtlab.workflows.engines import build_engines

    batch = normalize_batch(demo_cache.crops[demo_cache.valid_indices], demo_cache.preprocess)
    with make_runner(demo_model, backend="ort") as ort_runner:
        reference = ort_runner.infer(batch).argmax(1)
    calibrators = ("entropy",) if tensorrt_major(trt) == 10 else ()
    engines = build_engines(demo_model, ["fp32", "fp16", "int8"], (demo_data, demo_split(demo_data)), "trt",
                            session_workspace, tensorrt_calibrators=calibrators, opt_batch=8, max_batch=32,
                            progress=False)
    thresholds = {"fp32": 0.95, "fp16": 0.95}
    for label, entry in engines.entries.items():
        with TrtRunner(entry.path) as runner:
            top1 = runner.infer(batch).argmax(1)
            assert runner.last_gpu_ms and runner.last_gpu_ms > 0
        agreement = float((top1 == reference).mean())
        assert agreement >= thresholds.get(label, 0.8), f"{label}: top-1 agreement with ORT FP32 {agreement:.2f}"
        counts = inspect_engine(entry.path).counts
        assert counts["layers"] > 0
        if entry.precision.startswith("int8"):
            assert counts["int8_layers"] > 0, f"{label}: no layer runs INT8"
