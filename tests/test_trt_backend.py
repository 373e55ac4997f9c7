"""TensorRT backend: FP16 graph conversion (real model, real ONNX Runtime), version dispatch and argument wiring
(against the recording stand-in in tests/fake_tensorrt, which builds nothing), engine sidecars, inspection
parsing, latency statistics — and, wherever `import tensorrt` works, real builds compared with ONNX Runtime."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from fake_tensorrt import FakeCuda, calls_named, make_fake_tensorrt

GPU = {"name": "NVIDIA Tesla T4", "compute_capability": "7.5"}
VERSIONS = ["10.9.0.34", "11.1.0.8"]


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


def _build(model, precision="fp32", tmp_path=None, **kw):
    from trtlab.backends.tensorrt.engine import build_engine

    return build_engine(model, precision, workspace=tmp_path, gpu=GPU, progress=False, **kw)


# ---------------------------------------------------------------------------------------------------------------
# FP16 graph conversion (TensorRT 11's FP16 path), on the real demo model
# ---------------------------------------------------------------------------------------------------------------
def test_fp16_conversion_keeps_guarded_nodes_fp32_and_boundary_float32(demo_model, tmp_path):
    import onnx
    from onnx import TensorProto

    from trtlab.graph.precision import convert_to_fp16

    out = tmp_path / "lite0.fp16.onnx"
    result = convert_to_fp16(demo_model, guards=["first_layer", "last_layer"], output_path=out)
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)

    nodes = {n.name: n for n in model.graph.node}
    inits = {i.name: i for i in model.graph.initializer}
    first_conv, last_gemm = "node_Conv_881", "node_linear"
    assert set(result.fp32_nodes) == {first_conv, last_gemm}
    for name in (first_conv, last_gemm):  # guarded: weights stay float32
        assert inits[nodes[name].input[1]].data_type == TensorProto.FLOAT
    fp16_weights = [i for i in model.graph.initializer if i.data_type == TensorProto.FLOAT16]
    assert len(fp16_weights) >= 90 and result.fp16_nodes >= 90
    # the graph boundary stays float32 so every runner feeds/reads float32
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    assert len(casts) == result.casts_inserted == 2  # FP32 conv → FP16 body → FP32 gemm
    assert result.overflowed_values == 0


def test_fp16_model_agrees_with_fp32_on_the_demo_photos(demo_model, demo_cache, tmp_path):
    import onnxruntime as ort

    from trtlab.graph.precision import convert_to_fp16
    from trtlab.data.preprocess import normalize_batch

    out = tmp_path / "lite0.fp16.onnx"
    convert_to_fp16(demo_model, output_path=out)
    batch = normalize_batch(demo_cache.crops[demo_cache.valid_indices], demo_cache.preprocess)
    ref = ort.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"]).run(None, {"input": batch})[0]
    try:
        half = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"input": batch})[0]
    except Exception as exc:  # pragma: no cover - depends on the ORT build's FP16 CPU kernels
        pytest.skip(f"ONNX Runtime CPU cannot run the FP16 model here: {exc}")
    assert half.dtype == np.float32 and half.shape == ref.shape
    agreement = float((half.argmax(1) == ref.argmax(1)).mean())
    assert agreement >= 0.95, f"FP16 top-1 agreement with FP32 only {agreement:.2f} on {len(batch)} photos"


def test_fp16_conversion_rejects_unknown_guards_with_the_fix(demo_model):
    from trtlab.graph.precision import convert_to_fp16

    with pytest.raises(ValueError, match="no node named 'nope'"):
        convert_to_fp16(demo_model, guards=["node:nope"])
    with pytest.raises(ValueError, match="not understood"):
        convert_to_fp16(demo_model, guards=["first_conv_typo"])
    with pytest.raises(ValueError, match="names nodes the model does not have"):
        convert_to_fp16(demo_model, keep_fp32_nodes=["node_Conv_9999"])


# ---------------------------------------------------------------------------------------------------------------
# Version dispatch and wiring (fake TensorRT: records calls, builds nothing)
# ---------------------------------------------------------------------------------------------------------------
def test_fp32_build_sets_profile_workspace_verbosity_and_writes_sidecar(fake_trt, demo_model, tmp_path):
    build = _build(demo_model, "fp32", tmp_path, min_batch=2, opt_batch=16, max_batch=48, workspace_mb=512)
    assert calls_named(fake_trt, "IOptimizationProfile.set_shape") == [
        ("IOptimizationProfile.set_shape", "input", (2, 3, 224, 224), (16, 3, 224, 224), (48, 3, 224, 224))]
    (_, pool, size), = calls_named(fake_trt, "IBuilderConfig.set_memory_pool_limit")
    assert pool == fake_trt.MemoryPoolType.WORKSPACE and size == 512 << 20
    assert ("IBuilderConfig.profiling_verbosity=", fake_trt.ProfilingVerbosity.DETAILED) in fake_trt.calls
    assert ("IBuilderConfig.clear_flag", fake_trt.BuilderFlag.TF32) in fake_trt.calls  # FP32 means FP32
    assert not calls_named(fake_trt, "IBuilderConfig.set_flag")
    assert build.engine_path.is_file() and build.engine_path.parent == tmp_path / "engines"
    side = json.loads(build.sidecar_path.read_text())
    assert side["tensorrt_version"] == fake_trt.__version__
    assert side["gpu_name"] == GPU["name"] and side["compute_capability"] == "7.5"
    assert side["recipe"]["precision"] == "fp32" and side["recipe_hash"] in build.engine_path.name
    assert side["input"]["profile"] == [2, 16, 48] and "build_seconds" in side and "built_at" in side
    assert side["rebuild_command"].startswith("python -m trtlab build --model")


def test_timing_cache_is_read_before_and_written_after_each_build(fake_trt, demo_model, tmp_path):
    cache = tmp_path / "engines" / "timing.cache"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"previous-builds")
    first = _build(demo_model, "fp32", tmp_path)
    assert calls_named(fake_trt, "IBuilderConfig.create_timing_cache") == [
        ("IBuilderConfig.create_timing_cache", b"previous-builds")]
    (_, _, ignore_mismatch), = calls_named(fake_trt, "IBuilderConfig.set_timing_cache")
    assert ignore_mismatch is False
    assert cache.read_bytes() == b"previous-builds|fake-timing-entries"
    # same recipe, TensorRT and GPU: the engine is reused, nothing is built again
    again = _build(demo_model, "fp32", tmp_path)
    assert again.reused and again.engine_path == first.engine_path
    assert len(calls_named(fake_trt, "Builder.build_serialized_network")) == 1


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


def test_legacy_weakly_typed_fp16_on_trt10_sets_the_flag_and_pins_guarded_layers(fake_trt10, demo_model, tmp_path):
    trt = fake_trt10
    build = _build(demo_model, "fp16", tmp_path, guards=("first_layer",), weakly_typed=True)
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", 0)]
    flags = [c[1] for c in calls_named(trt, "IBuilderConfig.set_flag")]
    assert trt.BuilderFlag.FP16 in flags and trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS in flags
    pinned = [c for c in trt.calls if c[0] == "ILayer.precision="]
    assert pinned == [("ILayer.precision=", trt.float32)]
    assert calls_named(trt, "ILayer.set_output_type") == [("ILayer.set_output_type", "node_Conv_881", 0, trt.float32)]
    assert build.sidecar["recipe"]["weakly_typed"] is True and "--weakly-typed" in build.sidecar["rebuild_command"]


def test_fp16_builds_a_strongly_typed_fp16_graph_without_precision_flags(fake_trt, demo_model, tmp_path):
    import onnx
    from onnx import TensorProto

    trt = fake_trt
    build = _build(demo_model, "fp16", tmp_path, guards=("first_layer",))
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", _strongly_typed_flags(trt))]
    assert not calls_named(trt, "IBuilderConfig.set_flag") and not _precision_touches(trt)
    (_, parsed), = calls_named(trt, "OnnxParser.parse_from_file")
    assert parsed != str(demo_model) and parsed == build.sidecar["built_from"]
    graph = onnx.load(parsed).graph
    inits = {i.name: i.data_type for i in graph.initializer}
    assert inits["_conv_stem.weight"] == TensorProto.FLOAT  # guarded first conv stays FP32, in the graph
    assert inits["_fc.weight"] == TensorProto.FLOAT16
    assert build.sidecar["fp16_conversion"]["fp32_nodes"] == 1


def test_fp16_on_trt11_has_no_fp16_flag_to_set(fake_trt11, demo_model, tmp_path):
    assert not hasattr(fake_trt11.BuilderFlag, "FP16")  # removed in 11: touching it would raise
    with pytest.raises(ValueError, match="weakly_typed=True needs TensorRT 10"):
        _build(demo_model, "fp16", tmp_path, weakly_typed=True)
    assert not calls_named(fake_trt11, "Builder.create_network")


def test_int8_qdq_build_is_strongly_typed_per_version(fake_trt, qdq_model, tmp_path):
    trt = fake_trt
    build = _build(qdq_model, "int8", tmp_path)
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", _strongly_typed_flags(trt))]
    assert not calls_named(trt, "IBuilderConfig.set_flag") and not _precision_touches(trt)
    (_, parsed), = calls_named(trt, "OnnxParser.parse_from_file")
    assert parsed == str(qdq_model)  # no guards: the Q/DQ graph is built as it is
    assert build.sidecar["recipe"]["precision"] == "int8" and "fp16_fallback" not in build.sidecar["recipe"]


def test_int8_guards_are_expressed_in_the_graph(fake_trt, qdq_model, tmp_path):
    import onnx
    from onnx import TensorProto

    trt = fake_trt
    # the guarded node must carry no Q/DQ (the quantizer's guards do that); the first Conv here is quantized
    with pytest.raises(ValueError, match=r"guarded node\(s\) \['node_Conv_881'\] are quantized.*--guard"):
        _build(qdq_model, "int8", tmp_path, guards=("first_layer",))
    # an unquantized node guarded '=fp16' becomes FP16 in the graph, with Casts; no layer precision anywhere
    build = _build(qdq_model, "int8", tmp_path, guards=("last_layer=fp16",))
    assert not _precision_touches(trt)
    (_, parsed), = calls_named(trt, "OnnxParser.parse_from_file")
    graph = onnx.load(parsed).graph
    inits = {i.name: i.data_type for i in graph.initializer}
    assert inits["_fc.weight"] == TensorProto.FLOAT16 and inits["_conv_stem.weight"] == TensorProto.FLOAT
    assert build.sidecar["fp16_conversion"]["fp16_nodes"] == 1
    assert [n.op_type for n in graph.node].count("QuantizeLinear") == 1  # the Q/DQ pair is kept as it was


def test_legacy_weakly_typed_int8_qdq_on_trt10(fake_trt10, qdq_model, tmp_path):
    trt = fake_trt10
    build = _build(qdq_model, "int8", tmp_path, weakly_typed=True)
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", 0)]
    flags = [c[1] for c in calls_named(trt, "IBuilderConfig.set_flag")]
    assert flags == [trt.BuilderFlag.INT8, trt.BuilderFlag.FP16]  # weakly typed Q/DQ + FP16 fallback
    assert build.sidecar["recipe"]["fp16_fallback"] is True


def test_int8_of_a_model_without_qdq_is_refused(fake_trt, demo_model, tmp_path):
    with pytest.raises(ValueError, match="no QuantizeLinear/DequantizeLinear"):
        _build(demo_model, "int8", tmp_path)


def test_implicit_int8_on_trt11_explains_the_explicit_path(fake_trt11, demo_model, demo_cache, tmp_path):
    from trtlab.backends.tensorrt.engine import ImplicitInt8Unsupported

    with pytest.raises(ImplicitInt8Unsupported) as info:
        _build(demo_model, "int8-implicit", tmp_path, calibration=demo_cache)
    message = str(info.value)
    assert "TensorRT 11" in message and "Q/DQ" in message and "precision='int8'" in message
    assert not calls_named(fake_trt11, "Builder.build_serialized_network")


@pytest.mark.parametrize("algorithm,base", [("entropy", "IInt8EntropyCalibrator2"), ("minmax", "IInt8MinMaxCalibrator")])
def test_implicit_int8_on_trt10_wires_calibrator_and_calibration_profile(fake_trt10, demo_model, demo_cache,
                                                                         tmp_path, algorithm, base):
    trt = fake_trt10
    build = _build(demo_model, "int8-implicit", tmp_path, calibration=demo_cache, calibrator=algorithm,
                   calibration_batch=8, guards=("last_layer",))
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", 0)]  # legacy: weakly typed
    assert build.sidecar["recipe"]["weakly_typed"] is True
    (_, calibrator), = [c for c in trt.calls if c[0] == "IBuilderConfig.int8_calibrator="]
    assert isinstance(calibrator, getattr(trt, base))
    assert ("IInt8Calibrator.__init__", type(calibrator).__name__) in trt.calls  # base initialised explicitly
    assert calibrator.get_batch_size() == 8 and calibrator.read_calibration_cache() is None
    shapes = calls_named(trt, "IOptimizationProfile.set_shape")
    assert shapes[-1] == ("IOptimizationProfile.set_shape", "input", (8, 3, 224, 224), (8, 3, 224, 224),
                          (8, 3, 224, 224))
    assert len(calls_named(trt, "IBuilderConfig.set_calibration_profile")) == 1
    flags = [c[1] for c in calls_named(trt, "IBuilderConfig.set_flag")]
    assert trt.BuilderFlag.INT8 in flags and trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS in flags
    assert calls_named(trt, "ILayer.set_output_type") == [("ILayer.set_output_type", "node_linear", 0, trt.float32)]
    usable = (len(demo_cache.valid_indices) // 8) * 8  # whole batches only
    assert build.sidecar["calibration"]["images"] == usable and build.sidecar["calibration"]["algorithm"] == algorithm


def test_calibration_cache_roundtrip_and_foreign_cache_refused(fake_trt10, demo_model, demo_cache, tmp_path):
    from trtlab.backends.tensorrt.calibrator import (CalibrationCacheMismatch, cache_identity, calibration_indices,
                                                make_calibrator)

    indices = calibration_indices(demo_cache, None, 8)
    identity = cache_identity("a" * 64, "entropy", demo_cache, indices, 8)
    path = tmp_path / "lite0.entropy.calib"
    calibrator = make_calibrator(fake_trt10, "entropy", demo_cache, indices, 8, path, identity, progress=False)
    calibrator.write_calibration_cache(memoryview(b"TRT-8601-EntropyCalibration2\ninput: 3c010a14"))
    assert calibrator.read_calibration_cache() == b"TRT-8601-EntropyCalibration2\ninput: 3c010a14"
    other = make_calibrator(fake_trt10, "entropy", demo_cache, indices, 8, path, {**identity, "model_sha256": "b" * 64},
                            progress=False)
    with pytest.raises(CalibrationCacheMismatch, match="was made for model_sha256 aaaa.*delete it"):
        other.read_calibration_cache()
    # the builder checks before building, so TensorRT never sees a foreign cache
    cache_dir = tmp_path / "ws" / "engines"
    cache_dir.mkdir(parents=True)
    (cache_dir / f"{demo_model.stem}.entropy.{demo_cache.key}.calib").write_bytes(b"old")
    (cache_dir / f"{demo_model.stem}.entropy.{demo_cache.key}.calib.json").write_text(
        json.dumps(cache_identity("c" * 64, "entropy", demo_cache, indices, 8)))
    with pytest.raises(CalibrationCacheMismatch):
        _build(demo_model, "int8-implicit", tmp_path / "ws", calibration=demo_cache, calibration_batch=8)


def test_parser_errors_name_the_onnx_nodes(fake_trt, demo_model, tmp_path):
    from trtlab.backends.tensorrt.engine import OnnxParseError

    fake_trt.parser_failures = [(4, "Assertion failed: unsupported padding mode")]
    with pytest.raises(OnnxParseError) as info:
        _build(demo_model, "fp32", tmp_path)
    assert "node 'node_Conv_800' (Conv, #4): Assertion failed: unsupported padding mode" in str(info.value)


def test_failed_build_reports_and_writes_nothing(fake_trt, demo_model, tmp_path):
    from trtlab.backends.tensorrt.engine import EngineBuildError

    fake_trt.build_returns_none = True
    with pytest.raises(EngineBuildError, match="could not build the fp32 engine"):
        _build(demo_model, "fp32", tmp_path)
    assert not list((tmp_path / "engines").glob("*.engine"))


def test_engine_from_another_tensorrt_or_gpu_is_refused_with_the_rebuild_command(fake_trt10, demo_model, tmp_path):
    from trtlab.backends.tensorrt.engine import EngineCompatibilityError, check_engine_compatible

    build = _build(demo_model, "fp16", tmp_path, guards=("first_layer",))
    assert check_engine_compatible(build.engine_path, "10.9.0.34", GPU)["recipe_hash"]
    with pytest.raises(EngineCompatibilityError) as info:
        check_engine_compatible(build.engine_path, "11.1.0.8", GPU)
    message = str(info.value)
    assert "TensorRT version 10.9.0.34" in message and "11.1.0.8" in message
    assert "python -m trtlab build --model" in message and "--precision fp16" in message
    assert "--guard first_layer" in message
    with pytest.raises(EngineCompatibilityError, match="GPU compute capability 7.5.*8.6"):
        check_engine_compatible(build.engine_path, "10.9.0.34", {"name": "NVIDIA A10", "compute_capability": "8.6"})
    build.sidecar_path.unlink()
    with pytest.raises(EngineCompatibilityError, match="has no sidecar"):
        check_engine_compatible(build.engine_path, "10.9.0.34", GPU)


def test_engine_of_another_version_is_rebuilt_not_reused(demo_model, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_tensorrt(VERSIONS[0]))
    old = _build(demo_model, "fp32", tmp_path)
    newer = make_fake_tensorrt(VERSIONS[1])
    monkeypatch.setitem(sys.modules, "tensorrt", newer)
    new = _build(demo_model, "fp32", tmp_path)
    assert not new.reused and new.engine_path == old.engine_path
    assert json.loads(new.sidecar_path.read_text())["tensorrt_version"] == VERSIONS[1]


def test_runner_runs_an_engine_in_chunks_of_its_max_batch(fake_trt, demo_model, tmp_path, monkeypatch):
    from trtlab.backends.tensorrt.engine import TrtRunner

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


def test_runner_refuses_an_engine_tensorrt_cannot_deserialize(fake_trt, demo_model, tmp_path, monkeypatch):
    from trtlab.backends.tensorrt.engine import EngineCompatibilityError, TrtRunner

    FakeCuda(fake_trt, GPU).install(monkeypatch.setattr)
    build = _build(demo_model, "fp32", tmp_path)
    build.engine_path.write_bytes(b"not an engine")
    with pytest.raises(EngineCompatibilityError, match="(?s)could not deserialize.*python -m trtlab build"):
        TrtRunner(build.engine_path).activate()


def test_inspect_engine_goes_through_the_engine_inspector(fake_trt, demo_model, tmp_path, monkeypatch):
    from trtlab.backends.tensorrt.engine import inspect_engine

    trt = fake_trt
    FakeCuda(trt, GPU).install(monkeypatch.setattr)
    build = _build(demo_model, "fp32", tmp_path, opt_batch=8, max_batch=16)
    inspection = inspect_engine(build.engine_path)
    assert inspection.counts["layers"] == len(json.loads(build.engine_path.read_bytes())["layer_names"]) > 90
    assert calls_named(trt, "EngineInspector.get_engine_information") == [
        ("EngineInspector.get_engine_information", trt.LayerInformationFormat.JSON)]
    assert calls_named(trt, "IExecutionContext.set_input_shape")[-1][2] == (8, 3, 224, 224)  # the opt batch
    assert [c[0] for c in trt.calls].count("EngineInspector.execution_context=") == 1


# ---------------------------------------------------------------------------------------------------------------
# Engine inspection parsing, latency statistics, CLI and notebook entry points
# ---------------------------------------------------------------------------------------------------------------
def _layer(name, kind, inputs, outputs, v11=False):
    def tensor(fmt):
        if v11:  # TRT 11: DataType and Format are separate fields (10.x→11.x IEngineInspector migration guide)
            dtype = {"Int8": "Int8", "FP16": "Half", "FP32": "Float"}[fmt]
            return {"Name": "t", "Dimensions": [8, 32, 112, 112], "DataType": dtype, "Format": f"Channel major {fmt}"}
        return {"Name": "t", "Dimensions": [8, 32, 112, 112],
                "Format/Datatype": f"Channel major {fmt} format where channel % 32 == 0"}

    return {"Name": name, "LayerType": "CaskConvolution" if kind == "Convolution" else kind, "ParameterType": kind,
            "Inputs": [tensor(f) for f in inputs], "Outputs": [tensor(f) for f in outputs], "TacticName": "sm75_x"}


@pytest.mark.parametrize("v11", [False, True], ids=["trt10-schema", "trt11-schema"])
def test_engine_information_parsing_counts_layers_really_running_int8(v11):
    from trtlab.backends.tensorrt.engine import parse_engine_information

    info = {"Layers": [
        _layer("node_Conv_881", "Convolution", ["FP32"], ["FP16"], v11),
        _layer("node_Conv_882 + n4_2", "Convolution", ["Int8"], ["Int8"], v11),
        _layer("node_Conv_800", "Convolution", ["Int8"], ["FP16"], v11),
        _layer("reformat", "Reformat", ["FP16"], ["Int8"], v11),
        _layer("node_linear", "Gemm", ["FP16"], ["FP32"], v11),
    ]}
    info["I/O Tensors" if v11 else "Bindings"] = [{"Name": "input"}, {"Name": "logits"}] if v11 else ["input", "logits"]
    result = parse_engine_information(json.dumps(info))
    assert list(result.layers["precision"]) == ["FP32", "INT8", "INT8", "FP16", "FP16"]
    assert result.counts["int8_layers"] == 2 and result.counts["compute_layers"] == 4
    assert result.counts["int8_compute_layers"] == 2 and result.counts["io_tensors"] == 2


def test_engine_information_without_detailed_verbosity_says_how_to_fix():
    from trtlab.backends.tensorrt.engine import parse_engine_information

    with pytest.raises(ValueError, match="ProfilingVerbosity.DETAILED"):
        parse_engine_information({"Layers": ["node_Conv_881", "node_linear"]})


def test_latency_stats_and_int8_vs_fp16_table():
    from trtlab.backends.tensorrt.engine import latency_stats, latency_table

    stats = latency_stats(np.arange(1, 101, dtype=float), batch_size=8)
    assert stats["p50_ms"] == pytest.approx(50.5) and stats["p90_ms"] == pytest.approx(90.1)
    assert stats["p99_ms"] == pytest.approx(99.01) and stats["throughput_ips"] == pytest.approx(8 / 0.0505)
    rows = [{"variant": v, "backend": "trt", "timer": "cuda events", **latency_stats([ms] * 5, b)}
            for v, b, ms in (("fp16", 1, 2.0), ("fp16", 8, 4.0), ("int8", 1, 1.5), ("int8", 8, 5.0))]
    table = latency_table(rows)
    assert table.loc[("int8", 8), "p50_ms"] == 5.0
    assert table.attrs["ratio"].to_dict() == {1: 0.75, 8: 1.25}  # INT8 slower than FP16 at batch 8
    side = table.attrs["side_by_side"]
    assert list(side.columns) == ["fp16 p50 ms", "int8 p50 ms", "int8/fp16 p50"]
    assert side.loc[8].tolist() == [4.0, 5.0, 1.25]


def test_build_cli_without_tensorrt_says_so(monkeypatch, capsys):
    from trtlab.cli.commands.build import main as build_main

    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` raises ImportError
    assert build_main(["--precision", "fp16"]) == 2
    err = capsys.readouterr().err
    assert "build needs TensorRT" in err and "python -m trtlab doctor" in err


def test_build_cli_legacy_weakly_typed_flag_reaches_the_builder(fake_trt10, demo_model, tmp_path, monkeypatch,
                                                                capsys):
    from trtlab.cli.commands.build import main as build_main

    trt = fake_trt10
    FakeCuda(trt, GPU).install(monkeypatch.setattr)  # the CLI asks the (fake) GPU for its name
    args = ["--model", str(demo_model), "--precision", "fp16", "--workspace", str(tmp_path), "--no-timing-cache"]
    assert build_main(args + ["--weakly-typed"]) == 0
    assert calls_named(trt, "Builder.create_network") == [("Builder.create_network", 0)]
    assert trt.BuilderFlag.FP16 in [c[1] for c in calls_named(trt, "IBuilderConfig.set_flag")]
    assert build_main(args) == 0  # default: strongly typed, no precision flag
    assert calls_named(trt, "Builder.create_network")[-1] == ("Builder.create_network", _strongly_typed_flags(trt))
    assert "fp16: " in capsys.readouterr().out


def test_build_engines_falls_back_to_onnx_runtime_and_benchmarks(monkeypatch, demo_model, session_workspace, caplog):
    from trtlab.backends.tensorrt import engine as trt_backend

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    caplog.set_level("INFO", logger="trtlab")
    engines = trt_backend.build_engines(demo_model, ("fp32", "fp16", "int8"), workspace=session_workspace)
    out = caplog.text
    assert out.count("continuing on ONNX Runtime") == 1
    assert engines.backend == "ort" and set(engines.variants) in ({"fp32", "fp16"}, {"fp32", "fp16", "int8"})
    counts = engines.inspection()
    assert counts.loc["fp32", "fp32_nodes"] == 94 and counts.loc["fp16", "fp16_nodes"] == 94
    table = engines.benchmark(batch_sizes=(1,), iterations=3, warmup=1)
    assert set(table.index.get_level_values(0)) >= {"fp32", "fp16"}
    assert (table["p50_ms"] > 0).all() and (table["timer"] == "wall clock").all()


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
def test_real_tensorrt_variants_agree_with_onnx_runtime(demo_model, demo_cache, session_workspace):
    import tensorrt as trt

    from trtlab.backends import make_runner
    from trtlab.backends.tensorrt.engine import TrtRunner, build_engine, find_qdq_model, inspect_engine, tensorrt_major
    from trtlab.data.preprocess import normalize_batch

    batch = normalize_batch(demo_cache.crops[demo_cache.valid_indices], demo_cache.preprocess)
    with make_runner(demo_model, backend="ort") as ort_runner:
        reference = ort_runner.infer(batch).argmax(1)
    variants = {"fp32": (demo_model, "fp32", 0.95), "fp16": (demo_model, "fp16", 0.95)}
    if tensorrt_major(trt) == 10:
        variants["int8-implicit"] = (demo_model, "int8-implicit", 0.8)
    from trtlab.quantization.variants import Recipe, build_variant

    qdq = build_variant(demo_model, Recipe(calibration_images=24, calibration_batch=8), demo_cache,
                        demo_cache.valid_indices, workspace=session_workspace, progress=False).model_path
    assert find_qdq_model(demo_model, session_workspace) is not None
    variants["int8"] = (qdq, "int8", 0.8)
    for name, (model, precision, threshold) in variants.items():
        build = build_engine(model, precision, workspace=session_workspace, calibration=demo_cache, opt_batch=8,
                             max_batch=32, calibration_batch=8, progress=False)
        with TrtRunner(build.engine_path) as runner:
            top1 = runner.infer(batch).argmax(1)
            assert runner.last_gpu_ms and runner.last_gpu_ms > 0
        agreement = float((top1 == reference).mean())
        assert agreement >= threshold, f"{name}: top-1 agreement with ORT FP32 {agreement:.2f} < {threshold}"
        counts = inspect_engine(build.engine_path).counts
        assert counts["layers"] > 0
        if precision.startswith("int8"):
            assert counts["int8_layers"] > 0, f"{name}: no layer runs INT8"
