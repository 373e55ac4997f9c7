"""trtlab's TensorRT code against the REAL TensorRT Python bindings of the oldest and newest supported 10.x and
11.x (tests/trt_bindings.PINS), imported in one subprocess per version over gcc-built stub libraries.

Nothing here runs a TensorRT builder or engine (none can be installed here): the bindings give the real API
surface — classes, enum values, pybind signatures, read-only vs settable attributes, argument conversion,
subclassing of ILogger / IInt8*Calibrator, documentation strings — and `trt.Builder(...)` fails cleanly
("factory function returned nullptr"). trtlab's build, runner, inspector, benchmark and calibrator paths run with a
recording proxy of the real module (tests/fake_tensorrt/recording.py); builder objects come from tests/fake_tensorrt,
whose surface is checked against each real version here; every recorded name and call is checked against the real
bindings, and a coverage check fails when a function of trtlab's TensorRT modules never ran (tests/real_trt_checks.py).
The wheels are the ones for the running interpreter (cp311, cp312, …): install.sh puts them in
.trt-bindings/<python tag>/<version>/ (never site-packages); these tests download nothing.
"""
from __future__ import annotations

import json
import shutil
import sys

import pytest

import trt_bindings
from real_trt_checks import CHECKS

PINS = list(trt_bindings.PINS)


_RESULTS: dict = {}


@pytest.fixture(scope="module")
def fp16_graphs(demo_model, session_workspace):
    """The FP16 variant's graphs (plain, first layer guarded FP32), as build_variant makes them."""
    from trtlab.quantization.variants import Recipe, build_variant

    return {key: str(build_variant(demo_model, Recipe(precision="fp16", guards=guards),
                                   workspace=session_workspace).model_path)
            for key, guards in (("fp16", ()), ("fp16_guarded", ("first_layer",)))}


@pytest.fixture(scope="module")
def real_results(demo_model, qdq_model, fp16_graphs, demo_cache, session_workspace, tmp_path_factory):
    """{pin: {check name: result}} — one subprocess per pinned version, run on first use."""

    def get(pin: str) -> dict:
        if pin not in _RESULTS:
            reason = trt_bindings.missing_reason(pin)
            if reason:
                # gcc/readelf missing is the only legitimate skip; missing wheels mean install.sh did not run
                if shutil.which("gcc") is None or shutil.which("readelf") is None:
                    pytest.skip(f"REAL-BINDINGS TESTS NOT RUN: {reason}")
                pytest.fail(reason)
            stubs = trt_bindings.build_stubs(pin, tmp_path_factory.mktemp(f"stubs-{pin}"))
            ctx = {"model": str(demo_model), "qdq": str(qdq_model), "workspace": str(session_workspace),
                   **fp16_graphs}  # demo_cache: the decode cache the calibrator checks reuse is built
            code = ("import json, sys\nfrom real_trt_checks import main\n"
                    f"main({pin!r}, json.loads({json.dumps(json.dumps(ctx))}))\n")
            proc = trt_bindings.run_with_bindings(pin, stubs, code, timeout=300)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("TRTLAB-RESULTS ")]
            assert proc.returncode == 0 and lines, (
                f"the real TensorRT {pin} bindings subprocess failed (rc {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
            _RESULTS[pin] = {"stubs": stubs, **json.loads(lines[-1][len("TRTLAB-RESULTS "):])}
        return _RESULTS[pin]

    return get


@pytest.mark.parametrize("check", [c.__name__ for c in CHECKS])
@pytest.mark.parametrize("pin", PINS)
def test_against_real_bindings(real_results, pin, check):
    result = real_results(pin)[check]
    assert result["ok"], f"{check} against the real TensorRT {pin} bindings:\n{result['error']}"


@pytest.mark.parametrize("pin", PINS)
def test_stubs_define_exactly_what_the_extension_imports(real_results, pin):
    stubs = real_results(pin)["stubs"]
    extension = trt_bindings.extension_path(pin)
    major = pin.split(".")[0]
    assert set(stubs["libraries"]) == {f"libnvinfer.so.{major}", f"libnvonnxparser.so.{major}",
                                       f"libnvinfer_plugin.so.{major}"}
    defined = sorted(s for symbols in stubs["libraries"].values() for s in symbols)
    assert defined == trt_bindings.undefined_symbols(extension)
    # the factories the bindings call are among them: a stub that misses one fails the import, not this test
    assert {"createInferBuilder_INTERNAL", "createInferRuntime_INTERNAL", "createNvOnnxParser_INTERNAL",
            "getNvOnnxParserVersion"} <= set(defined)


def test_parser_version_encoding():
    # NvOnnxParser.h: NV_ONNX_PARSER_VERSION = major * 10000 + minor * 100 + patch
    assert trt_bindings.parser_version_number("10.16.1.11") == 101601
    assert trt_bindings.parser_version_number("11.0.0.114") == 110000


def test_bindings_live_in_private_folders_not_site_packages():
    import importlib.util
    import site

    for pin in PINS:
        folder = trt_bindings.bindings_dir(pin).resolve()
        assert folder.parent.parent.name == ".trt-bindings" and folder.name == pin
        assert folder.parent.name == f"cp{sys.version_info.major}{sys.version_info.minor}"  # this interpreter's
        assert not any(str(folder).startswith(str(p)) for p in site.getsitepackages() if p)
    # nothing this set-up installs is importable as `tensorrt` / `tensorrt_bindings` from the test process
    spec = importlib.util.find_spec("tensorrt_bindings")
    assert spec is None or ".trt-bindings" not in str(spec.origin), spec
    gitignore = (trt_bindings.REPO / ".gitignore").read_text().splitlines()
    # "/.trt-bindings" (no slash) also ignores a helper worktree's link to the folder
    assert {"/.trt-bindings", "/.trt-bindings/"} & set(gitignore) and "/.whl/" in gitignore


def test_the_extension_is_built_for_the_running_interpreter():
    """The wheels are picked by the interpreter's tag: a cp311 extension cannot load in Python 3.12."""
    import sysconfig

    for pin in PINS:
        extension = trt_bindings.extension_path(pin)
        if extension is None:
            pytest.skip(trt_bindings.missing_reason(pin))
        wheel_tag = next((trt_bindings.bindings_dir(pin)).glob("*.dist-info/WHEEL")).read_text()
        assert f"Tag: {trt_bindings.PY_TAG}-" in wheel_tag, wheel_tag
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        assert extension.name.endswith(suffix) or extension.name == "tensorrt.so", extension.name
