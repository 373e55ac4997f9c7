"""Checks of trtlab's TensorRT code against the REAL TensorRT Python bindings of one version.

Runs inside the subprocess that tests/trt_bindings.py prepares (real ``tensorrt`` module importable, stub
libraries underneath, no GPU, no TensorRT builder). tests/test_trt_real_bindings.py runs ``main()`` once per
pinned version and turns every check into one pytest result. Nothing here builds or runs an engine.

What is checked is what trtlab's code actually does, not what its source happens to name: trtlab's build, legacy,
calibrator, runner, inspector and benchmark paths run with ``sys.modules['tensorrt']`` = a recording proxy
(tests/fake_tensorrt/recording.py) of the real bindings' module, whose builder-side objects are the recording fakes
of tests/fake_tensorrt (themselves checked to offer nothing the real bindings lack). Every name read and every call
made through the module, and every call made on the objects it returned, is checked against the real bindings:
it exists, takes those arguments (pybind signatures), converts those values, is settable where trtlab sets it, and
is not deprecated on the default (strongly typed) paths. A function coverage check fails when any function of
trtlab's TensorRT modules never ran, so a split, a new module or a new branch cannot escape these checks.
"""
from __future__ import annotations

import json
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

from fake_tensorrt.real_api import _verify_calls, converts, deprecated, enum_member_doc, fits, signatures

REPO = Path(__file__).resolve().parents[1]
GPU = {"name": "NVIDIA Tesla T4", "compute_capability": "7.5"}  # FakeCuda's answer: there is no GPU here

#: Module attributes of the fake that are test plumbing, not API.
FAKE_PLUMBING = {"calls", "parser_failures", "build_returns_none", "device_memory"}
#: Classes user code constructs (the others come from factories): their constructors must match too.
CONSTRUCTED = {"Builder", "OnnxParser", "Logger", "Runtime"}
#: trtlab's TensorRT-facing source: every module of the backend package, and TensorRT's calibrator.
SOURCES = sorted(p for p in (REPO / "trtlab/backends/tensorrt").glob("*.py") if p.name != "__init__.py") + [
    REPO / "trtlab/quantization/tensorrt_calibrator.py"]
#: Modules only TensorRT 10 reaches (weakly typed networks, implicit INT8): TensorRT 11 removed what they use.
TENSORRT_10_ONLY = {"trtlab/backends/tensorrt/legacy.py", "trtlab/quantization/tensorrt_calibrator.py"}
#: Functions the checks need not run, with the reason (anything else that never runs fails the coverage check).
NOT_DRIVEN = {
    "benchmark_runner": "times any Runner by wall clock (ONNX Runtime); no TensorRT object",
}
NOT_DRIVEN_BY_MAJOR = {
    10: {"implicit_int8_unsupported": "only TensorRT 11 refuses implicit INT8"},
    11: {"calibration_identity": "implicit INT8 only, refused on TensorRT 11 before this runs"},
}
#: Uses every version's paths must record (a recording that misses them is not looking at trtlab's code).
ESSENTIAL_USES = {"trt.Builder", "trt.OnnxParser", "trt.Runtime", "trt.ILogger.__init__", "trt.BuilderFlag.TF32",
                  "trt.MemoryPoolType.WORKSPACE", "trt.ProfilingVerbosity.DETAILED", "trt.TensorIOMode.INPUT",
                  "trt.nptype", "trt.LayerInformationFormat.JSON"}
ESSENTIAL_USES_10 = {"trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED", "trt.BuilderFlag.FP16",
                     "trt.BuilderFlag.INT8", "trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS", "trt.float32",
                     "trt.IInt8EntropyCalibrator2.__init__", "trt.IInt8MinMaxCalibrator.__init__"}
_FORBIDDEN_WHEN_STRONGLY_TYPED = ("ILayer.precision=", "ILayer.set_output_type", "ITensor.dtype=")
_PRECISION_FLAGS = ("FP16", "BF16", "INT8", "FP8", "INT4", "FP4", "OBEY_PRECISION_CONSTRAINTS",
                    "PREFER_PRECISION_CONSTRAINTS")


# ----------------------------------------------------------------------------------------------------------------
# the checks
# ----------------------------------------------------------------------------------------------------------------
def check_version_dispatch(trt, pin, ctx):
    from trtlab.backends.tensorrt.loader import tensorrt_major, tensorrt_version

    assert trt.__version__ == pin, f"imported tensorrt {trt.__version__}, expected the pinned {pin}"
    assert tensorrt_version(trt)[:3] == tuple(int(p) for p in pin.split(".")[:3])
    major = tensorrt_major(trt)
    assert major == int(pin.split(".")[0])
    # the features that the dispatch switches on really differ by major version
    legacy = hasattr(trt, "IInt8EntropyCalibrator2") and hasattr(trt.BuilderFlag, "INT8") \
        and isinstance(getattr(trt.ILayer, "precision", None), property)
    assert legacy == (major == 10), f"TensorRT {pin}: legacy precision API present={legacy}, major {major}"
    # the stub's version function is what the real bindings report (major * 10000 + minor * 100 + patch)
    from trt_bindings import parser_version_number

    assert trt.get_nv_onnx_parser_version() == parser_version_number(pin)
    return {"major": major}


def check_fake_matches_real(trt, pin, ctx):
    """The fake offers nothing the real bindings lack: names, enum members and values, method parameters,
    settable attributes."""
    from fake_tensorrt import make_fake_tensorrt

    fake = make_fake_tensorrt(pin)
    problems = []
    for name, value in vars(fake).items():
        if name.startswith("_") or name in FAKE_PLUMBING:
            continue
        real = getattr(trt, name, None)
        if real is None:
            problems.append(f"tensorrt.{name} does not exist")
            continue
        if isinstance(value, type) and hasattr(value, "__members__") and hasattr(real, "__members__"):
            for member, ev in value.__members__.items():
                if member not in real.__members__:
                    problems.append(f"{name}.{member} does not exist")
                elif int(ev) != int(real.__members__[member]):
                    problems.append(f"{name}.{member} is {int(real.__members__[member])}, the fake says {int(ev)}")
            continue
        if not isinstance(value, type):
            continue
        classes = [(name, value, real)]
        if hasattr(value, "Severity"):
            classes.append((f"{name}.Severity", value.Severity, real.Severity))
        for cname, fcls, rcls in classes:
            if hasattr(fcls, "__members__") and hasattr(rcls, "__members__"):
                for member, ev in fcls.__members__.items():
                    if member not in rcls.__members__ or int(ev) != int(rcls.__members__[member]):
                        problems.append(f"{cname}.{member} differs")
                continue
            for attr, fobj in vars(fcls).items():
                if attr.startswith("_") or attr == "Severity":
                    continue
                robj = getattr(rcls, attr, None)
                if robj is None:
                    problems.append(f"{cname}.{attr} does not exist")
                elif hasattr(fobj, "__index__") and not isinstance(fobj, type):  # an enum-like constant
                    if int(fobj) != int(robj):
                        problems.append(f"{cname}.{attr} is {int(robj)}, the fake says {int(fobj)}")
                elif isinstance(fobj, property):
                    if fobj.fset is not None and not (isinstance(robj, property) and robj.fset is not None):
                        problems.append(f"{cname}.{attr} is read-only, the fake lets it be set")
                elif callable(fobj):
                    fparams = [p for p in fobj.__code__.co_varnames[1:fobj.__code__.co_argcount]]
                    sigs = signatures(robj)
                    if sigs and not any([p[0] for p in s][:len(fparams)] == fparams for s in sigs):
                        problems.append(f"{cname}.{attr}({', '.join(fparams)}) differs from the real "
                                        f"{[', '.join(p[0] for p in s) for s in sigs]}")
            if cname in CONSTRUCTED:  # classes trtlab constructs: the constructor's parameters must match
                code = fcls.__init__.__code__
                fparams = list(code.co_varnames[1:code.co_argcount])
                sigs = signatures(rcls.__init__)
                if sigs and not any([p[0] for p in s] == fparams for s in sigs):
                    problems.append(f"{cname}({', '.join(fparams)}): the real constructor is "
                                    f"{[cname + '(' + ', '.join(p[0] for p in s) + ')' for s in sigs]}")
            for attr in getattr(fcls, "_allowed", ()):  # attributes the fake lets trtlab set
                robj = getattr(rcls, attr, None)
                if not (isinstance(robj, property) and robj.fset is not None):
                    problems.append(f"{cname}.{attr} is not settable in tensorrt {pin}, the fake lets it be set")
    assert not problems, f"fake tensorrt {pin} offers what the real bindings do not:\n  " + "\n  ".join(problems)


def check_logger_subclasses_the_real_ilogger(trt, pin, ctx):
    from trtlab.backends.tensorrt.loader import make_logger

    logger = make_logger(trt)
    assert isinstance(logger, trt.ILogger), "trtlab's logger is not a tensorrt.ILogger"
    assert "log" in vars(trt.ILogger), "the real ILogger has no log() to override"
    assert [p[0] for p in signatures(trt.ILogger.log)[0]] == ["severity", "msg"]
    logger.log(trt.ILogger.Severity.ERROR, "parser said no")
    logger.log(trt.ILogger.Severity.INFO, "not kept")
    assert logger.errors == ["parser said no"]
    default = trt.Logger()  # the bindings' own logger: min_severity defaults to WARNING
    assert default.min_severity == trt.Logger.Severity.WARNING
    assert trt.Logger(trt.Logger.Severity.ERROR).min_severity == trt.ILogger.Severity.ERROR
    trt.Builder  # noqa: B018 - exists; constructing it needs the real library:
    try:
        trt.Builder(logger)
    except TypeError as exc:
        assert "nullptr" in str(exc), exc
    else:
        raise AssertionError("trt.Builder(logger) worked: a real TensorRT library is loaded, not the stubs")


# ----------------------------------------------------------------------------------------------------------------
# driving trtlab's TensorRT paths under the recording module
# ----------------------------------------------------------------------------------------------------------------
class Session:
    """One version's run: the recorded module uses, the fake objects' calls per driven path, function coverage."""

    def __init__(self, trt, pin: str, ctx: dict):
        from fake_tensorrt.recording import FunctionCoverage, Uses

        self.trt, self.pin, self.ctx = trt, pin, ctx
        self.major = int(pin.split(".")[0])
        self.uses = Uses()
        self.builds: dict = {}  # driven build path → hybrid module (calls, sidecar, engine_path) or the exception
        self.contexts: list = []
        self.coverage = FunctionCoverage(SOURCES, REPO)
        self.workspace = Path(tempfile.mkdtemp(prefix=f"trt-checks-{pin}-"))
        self._cache = None

    def hybrid(self):
        """Real enums/logger/calibrator bases/nptype/Dims + recording fake builder and runtime objects."""
        from fake_tensorrt import make_fake_tensorrt

        return make_fake_tensorrt(self.pin, real=self.trt)

    def run(self, context: str, hybrid, function):
        """Run `function()` with sys.modules['tensorrt'] = a recording proxy of `hybrid` and FakeCuda's numpy
        "device" memory, the module uses filed under `context`."""
        from fake_tensorrt import FakeCuda
        from fake_tensorrt.recording import RecordingModule

        from trtlab.backends import cuda_runtime as cuda_rt

        saved = {n: getattr(cuda_rt, n) for n in ("device_info", "Stream", "Event", "DeviceBuffer", "PinnedBuffer")}
        self.uses.context = context
        self.contexts.append(context)
        sys.modules["tensorrt"] = RecordingModule(hybrid, self.uses)
        FakeCuda(hybrid, GPU).install(setattr)
        try:
            return function()
        finally:
            sys.modules["tensorrt"] = self.trt
            for name, value in saved.items():
                setattr(cuda_rt, name, value)

    def decode_cache(self):
        if self._cache is None:
            from trtlab.data.decode_cache import build_decode_cache
            from trtlab.data.demo import demo_dataset

            self._cache = build_decode_cache(demo_dataset(), "tf-lite", self.ctx["workspace"], progress=False)
        return self._cache

    def calibrator(self, algorithm: str, images: int = 10, batch: int = 4):
        """TensorRT's calibrator as trtlab makes it (inside a recording context: its base class is looked up on
        the module being recorded)."""
        from trtlab.quantization.tensorrt_calibrator import tensorrt_calibrator
        from trtlab.quantization.variants import Recipe

        cache = self.decode_cache()
        recipe = Recipe(algorithm=algorithm, calibration_images=images, calibration_batch=batch)
        calibrator, _ = tensorrt_calibrator(sys.modules["tensorrt"], self.ctx["model"], recipe, cache,
                                            cache.valid_indices, self.workspace, progress=False)
        return calibrator


def is_default(context: str) -> bool:
    """The strongly typed paths (and the runtime): nothing deprecated may be used there."""
    return not context.startswith(("legacy", "int8-implicit", "calibrator")) and not context.endswith("on 11")


def build_paths(major: int) -> list:
    """(name, graph in ctx, precision, options) of every build path of this version."""
    paths = [("build fp32", "model", "fp32", {}), ("build fp32 again (reused)", "model", "fp32", {}),
             ("build fp16", "fp16", None, {}), ("build fp16 with an FP32 guard", "fp16_guarded", "fp16", {}),
             ("build fp16 tf32 allowed", "fp16_guarded", "fp16", {"tf32": True}), ("build int8", "qdq", "int8", {}),
             ("build parser failure", "model", "fp32", {"force": True}),
             ("build failure", "model", "fp32", {"force": True})]
    if major == 10:
        return paths + [
            ("legacy fp16+guard", "model", "fp16", {"guards": ("first_layer",), "weakly_typed": True}),
            ("legacy int8+guard", "qdq", "int8", {"guards": ("last_layer",), "weakly_typed": True}),
            ("int8-implicit entropy", "model", "int8-implicit", {"calibrator": "entropy", "guards": ("last_layer",)}),
            ("int8-implicit minmax", "model", "int8-implicit", {"calibrator": "minmax"})]
    return paths + [("weakly_typed on 11", "model", "fp16", {"weakly_typed": True}),
                    ("int8-implicit on 11", "model", "int8-implicit", {"calibrator": object()})]


def drive_builds(session: Session) -> dict:
    """trtlab's build_engine on every path of this version (once per session)."""
    if session.builds:
        return session.builds
    from trtlab.backends.tensorrt.build import build_engine

    for name, graph, precision, options in build_paths(session.major):
        hybrid = session.hybrid()
        hybrid.parser_failures = [(0, "unsupported (driven failure)")] if name == "build parser failure" else []
        hybrid.build_returns_none = name == "build failure"

        def build(options=dict(options)):
            if isinstance(options.get("calibrator"), str):
                options["calibrator"] = session.calibrator(options["calibrator"])
            result = build_engine(session.ctx[graph], precision, workspace=session.workspace, progress=False,
                                  **options)
            hybrid.sidecar, hybrid.engine_path, hybrid.reused = result.sidecar, result.engine_path, result.reused
            assert result.sidecar_path.is_file() and result.precision == result.sidecar["recipe"]["precision"]
            return hybrid

        try:
            session.builds[name] = session.run(name, hybrid, build)
        except Exception as exc:  # noqa: BLE001 - judged by the checks
            session.builds[name] = exc
    return session.builds


EXPECTED_FAILURES = {"build parser failure": "OnnxParseError", "build failure": "EngineBuildError",
                     "weakly_typed on 11": "UserValueError", "int8-implicit on 11": "ImplicitInt8Unsupported"}


def check_build_paths_against_the_real_api(trt, pin, ctx):
    """trtlab's build_engine on every path of this version: every call on the builder objects exists, fits the
    real signature, its values convert; the default (strongly typed) paths use nothing deprecated; sidecars name
    the real version; the paths that must fail fail as they should, before building."""
    builds = drive_builds(SESSION)
    problems = []
    for name, result in builds.items():
        expected = EXPECTED_FAILURES.get(name)
        if expected:
            if type(result).__name__ != expected:
                problems.append(f"{name}: expected {expected}, got {result!r}")
            elif name.endswith("on 11") and any(c[0].startswith("Builder") for c in getattr(result, "calls", [])):
                problems.append(f"{name}: the builder was touched before the refusal")
            continue
        if isinstance(result, Exception):
            problems.append(f"{name}: build_engine raised {''.join(traceback.format_exception_only(result)).strip()}")
            continue
        _verify_calls(trt, result, problems, name, is_default(name))
        if result.sidecar["tensorrt_version"] != trt.__version__:
            problems.append(f"{name}: sidecar names TensorRT {result.sidecar['tensorrt_version']}")
        json.dumps(result.sidecar)  # plain JSON: no enum object in the sidecar
    if builds["build fp32 again (reused)"].reused is not True:
        problems.append("the second fp32 build was not reused")
    assert not problems, f"tensorrt {pin}:\n  " + "\n  ".join(problems)
    return {"paths": sorted(builds)}


def check_strongly_typed_rule(trt, pin, ctx):
    """The guard-path rule, as the real bindings document it: on a strongly typed network "Setting layer
    precision and layer output types is not allowed" (10.x), and TensorRT 11 has no weakly typed networks.
    Asserts what trtlab SETS: the network creation flags (the real STRONGLY_TYPED value), no layer precision,
    output type or precision builder flag on the default paths, TF32 cleared unless tf32=True; the legacy 10.x
    path is the only place for precision flags, and it creates a weakly typed network."""
    major = int(pin.split(".")[0])
    flag_doc = enum_member_doc(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    if major == 10:
        assert "Setting layer precision and layer output types is not allowed" in flag_doc, flag_doc
        expected_flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    else:
        assert "always enabled" in flag_doc and not hasattr(trt.ILayer, "precision"), flag_doc
        expected_flags = 0  # STRONGLY_TYPED is deprecated and ignored in 11: pass nothing
    assert not deprecated(enum_member_doc(trt.BuilderFlag, "TF32")), "BuilderFlag.TF32 is deprecated here"
    problems = []
    for name, hybrid in drive_builds(SESSION).items():
        if isinstance(hybrid, Exception) or not hybrid.calls or getattr(hybrid, "reused", False):
            continue
        created = [c[1] for c in hybrid.calls if c[0] == "Builder.create_network"]
        touched = [c[0] for c in hybrid.calls if c[0] in _FORBIDDEN_WHEN_STRONGLY_TYPED]
        flags = [c[1].name for c in hybrid.calls if c[0] == "IBuilderConfig.set_flag"]
        cleared = [c[1].name for c in hybrid.calls if c[0] == "IBuilderConfig.clear_flag"]
        if cleared != ([] if "tf32 allowed" in name else ["TF32"]) and created:
            problems.append(f"{name}: cleared {cleared}; TF32 must be cleared unless tf32=True")
        if name.startswith("legacy"):
            if created != [0] or "OBEY_PRECISION_CONSTRAINTS" not in flags or "ILayer.precision=" not in touched:
                problems.append(f"{name}: legacy path should be weakly typed with layer precision constraints; "
                                f"created {created}, flags {flags}, touched {touched}")
            continue
        if name.startswith("int8-implicit"):
            continue
        if created and created != [expected_flags]:
            problems.append(f"{name}: create_network({created}) — expected {expected_flags} (strongly typed)")
        if touched or set(flags) & set(_PRECISION_FLAGS):
            problems.append(f"{name}: strongly typed network but trtlab set {touched + flags}: "
                            f"\"{flag_doc[:90]}...\"")
    assert not problems, f"tensorrt {pin}:\n  " + "\n  ".join(problems)
    return {"create_network_flags": expected_flags}


def check_runner_inspector_and_benchmark_against_the_real_api(trt, pin, ctx):
    """TrtRunner (engine file; ONNX graph with its engine; ONNX graph built on demand), inspect_engine and
    benchmark_engine with the real enums, nptype, ILogger and Dims over the fake runtime objects and numpy
    "device" memory: every runtime call exists, fits the real signature and its values convert."""
    from trtlab.backends.tensorrt.inspection import inspect_engine
    from trtlab.backends.tensorrt.latency import (benchmark_engine, format_comparison, format_latency_table,
                                                  latency_table)
    from trtlab.backends.tensorrt.runner import TrtRunner

    built = drive_builds(SESSION)["build fp32"]
    assert not isinstance(built, Exception), built
    hybrid = SESSION.hybrid()
    batch = np.random.default_rng(0).standard_normal((3, 3, 224, 224), dtype=np.float32)

    def runtime():
        with TrtRunner(built.engine_path) as runner:
            logits = runner.infer(batch)
            assert runner._dtypes[runner.input_name] == np.float32  # real nptype(real DataType.FLOAT)
            assert runner.describe()["precision"] == "fp32"
        np.testing.assert_allclose(logits[:, :3], batch.mean(axis=(1, 2, 3))[:, None] + np.arange(3), rtol=1e-5)
        with TrtRunner(ctx["model"], engine=built.engine_path) as runner:
            runner.infer(batch[:1])
        with TrtRunner(ctx["model"], "fp32", workspace=SESSION.workspace, build_options={"progress": False}):
            pass
        assert inspect_engine(built.engine_path).counts["layers"] > 0
        table = latency_table(benchmark_engine(built.engine_path, (1, 2), iterations=12, warmup=1, name="fp32"))
        format_latency_table(table), format_comparison(table, reference="fp32")

    SESSION.run("runtime", hybrid, runtime)
    problems = []
    _verify_calls(trt, hybrid, problems, "runtime", True)
    runtime_calls = {c[0] for c in hybrid.calls}
    for needed in ("Runtime", "Runtime.deserialize_cuda_engine", "IExecutionContext.set_input_shape",
                   "IExecutionContext.set_tensor_address", "IExecutionContext.execute_async_v3",
                   "EngineInspector.get_engine_information"):
        if needed not in runtime_calls:
            problems.append(f"the runner never called {needed}: the check is not looking at the runtime path")
    assert not problems, f"tensorrt {pin}:\n  " + "\n  ".join(problems)
    return {"runtime_calls": len(hybrid.calls)}


def check_calibrators_subclass_the_real_bases(trt, pin, ctx):
    """TensorRT 10: trtlab's calibrators are real IInt8EntropyCalibrator2 / IInt8MinMaxCalibrator subclasses
    whose callbacks override the real ones, and get_batch / the cache callbacks run (numpy "device" memory)."""
    from trtlab.quantization.tensorrt_calibrator import ALGORITHMS, _CalibratorMixin

    if SESSION.major >= 11:
        assert not any(hasattr(trt, b) for b in ALGORITHMS.values()), "TensorRT 11 still has IInt8 calibrators"
        return {"calibrators": "absent (removed in 11)"}
    served = {}
    for algorithm, base_name in ALGORITHMS.items():
        base = getattr(trt, base_name)

        def drive(algorithm=algorithm):
            calibrator = SESSION.calibrator(algorithm)
            batches = 0
            while calibrator.get_batch(["input"]) is not None:
                batches += 1
            header = {"entropy": "EntropyCalibration2", "minmax": "MinMaxCalibration"}[algorithm]
            text = f"TRT-100001-{header}\ninput: 3c010a14\n".encode()
            calibrator.write_calibration_cache(memoryview(text))
            assert SESSION.calibrator(algorithm).read_calibration_cache() == text  # reused, its sidecar checked
            return calibrator, batches

        calibrator, served[algorithm] = SESSION.run(f"calibrator {algorithm}", SESSION.hybrid(), drive)
        assert isinstance(calibrator, base) and isinstance(calibrator, trt.IInt8Calibrator)
        callbacks = {n for n in vars(_CalibratorMixin) if not n.startswith("_") and n != "free"
                     and callable(vars(_CalibratorMixin)[n])}
        missing = {n for n in callbacks if not hasattr(base, n)}
        assert not missing, f"{base_name} has no {sorted(missing)}: TensorRT would never call trtlab's"
        assert {"get_batch", "get_batch_size", "read_calibration_cache", "write_calibration_cache"} <= callbacks
        assert [p[0] for p in signatures(base.get_batch)[0]] == ["names"]
        assert calibrator.get_batch_size() == 4 and served[algorithm] == 3  # 10 images: 4 + 4 + 2 (+2 copies)
        assert calibrator.get_algorithm() == getattr(trt.CalibrationAlgoType,
                                                     {"entropy": "ENTROPY_CALIBRATION_2",
                                                      "minmax": "MINMAX_CALIBRATION"}[algorithm])
    return {"batches": served}


def _lookup(trt, path: str):
    """(owner, value) of 'trt.A.B' on the real module; value None when it does not exist."""
    owner, value = None, trt
    for piece in path.split(".")[1:]:
        owner, value = value, getattr(value, piece, None)
        if value is None:
            return owner, None
    return owner, value


def check_recorded_module_uses_exist(trt, pin, ctx):
    """Every name trtlab read from the `tensorrt` module while the other checks drove its paths, and every call it
    made through it, exists in the real bindings with a fitting signature and convertible values; nothing
    deprecated on the default paths. Every driven path recorded uses (none went around the module)."""
    problems, checked = [], set()
    for use in SESSION.uses:
        where = f"[{use.context}] {use.path}"
        owner, value = _lookup(trt, use.path)
        if value is None:
            problems.append(f"{where} does not exist in tensorrt {pin}")
            continue
        checked.add(use.path)
        member = use.path.rsplit(".", 1)[-1]
        doc = enum_member_doc(owner, member) if hasattr(owner, "__members__") else getattr(value, "__doc__", "")
        if hasattr(value, "__members__"):
            doc = ""  # an enum type's doc lists its members' notes; the members used are checked one by one
        if is_default(use.context) and deprecated(doc):
            problems.append(f"{where} is deprecated in tensorrt {pin}: {' '.join((doc or '').split())[:120]}")
        if use.kind != "call":
            continue
        args = list(use.args[1:] if use.path.endswith(".__init__") else use.args)  # Base.__init__(self)
        sigs = signatures(value.__init__) if isinstance(value, type) else signatures(value)
        fitting = [s for s in sigs if fits(s, len(args), tuple(use.kwargs))]
        if sigs and not fitting:
            problems.append(f"{where}() called with {len(args)} args {sorted(use.kwargs)}, real: "
                            f"{[[p[0] for p in s] for s in sigs]}")
        elif fitting and not any(all(converts(trt, v, p[1]) for v, p in zip(args, s)) for s in fitting):
            problems.append(f"{where}{tuple(args)!r} does not convert to the real {fitting}")
    silent = [c for c in dict.fromkeys(SESSION.contexts) if not any(u.context == c for u in SESSION.uses)]
    if silent:
        problems.append(f"paths that read nothing from the tensorrt module (did they bypass it?): {silent}")
    essential = ESSENTIAL_USES | (ESSENTIAL_USES_10 if SESSION.major == 10 else set())
    assert essential <= checked, f"uses never recorded (did the paths bypass the module?): {essential - checked}"
    assert not problems, f"tensorrt {pin}:\n  " + "\n  ".join(problems)
    return {"module_uses_checked": len(checked)}


def check_cannot_run_here_is_one_line(trt, pin, ctx):
    """TensorRT imports (the real bindings) but cannot build or run: each cause is one line naming itself and the
    fix, never cuda-python's or pybind11's words. The machine is set for each case, whatever this one has: no GPU
    (cuda-python absent, NVML / nvidia-smi find none) → build_engine and TrtRunner refuse before touching TensorRT;
    a T4 under driver r580 without cuda-python → the cuda-python of this build's CUDA major (read from the real
    wheel's name); under r535 → the driver where this build is CUDA 13, else that cuda-python; the same T4 with CUDA working (FakeCuda) → the driver (CUDA 13)
    or on to the real trt.Builder, whose nullptr over the stub libraries is named as stub libraries; r580 → the
    stubs on every version."""
    import trtlab.env.machine as machine
    from fake_tensorrt import FakeCuda

    from trtlab.backends import cuda_runtime as cuda_rt
    from trtlab.backends.tensorrt.build import build_engine
    from trtlab.backends.tensorrt.readiness import TensorRTCannotRun, tensorrt_cuda_major
    from trtlab.backends.tensorrt.runner import TrtRunner

    major = tensorrt_cuda_major(pin)
    assert major == (13 if pin.startswith("11.") else 12), major  # tensorrt_cu13_bindings / tensorrt_cu12_bindings

    def refused(function) -> str:
        try:
            function()
        except TensorRTCannotRun as exc:
            line = exc.line()
            assert "\n" not in line and "nullptr" not in line and "pip install cuda-python (" not in line, line
            return line
        raise AssertionError(f"{function} was not refused")

    def build():
        build_engine(ctx["model"], "fp32", workspace=SESSION.workspace, progress=False, force=True)

    def no_cuda_python(device=0):
        raise cuda_rt.CudaUnavailable("cuda-python is not installed: pip install cuda-python")

    def machine_with(driver):
        gpus = [machine.GpuInfo("Tesla T4", (7, 5), driver, "nvidia-smi")] if driver else []
        machine._FACTS[:] = [machine.GpuFacts(gpus, driver, None, "nvidia-smi" if driver else "",
                                              [] if driver else ["nvidia-smi found no GPU"])]

    lines = {}
    saved_facts = machine._FACTS[:]
    saved = {n: getattr(cuda_rt, n) for n in ("device_info", "Stream", "Event", "DeviceBuffer", "PinnedBuffer")}
    try:
        cuda_rt.device_info = no_cuda_python
        machine_with(None)
        lines["no GPU"] = refused(build)
        lines["no GPU, runner"] = refused(lambda: TrtRunner(ctx["model"], "fp32").activate())
        machine_with("580.65.06")
        lines["r580, no cuda-python"] = refused(build)
        machine_with("535.104.05")
        lines["r535, no cuda-python"] = refused(build)
        FakeCuda(trt, GPU).install(setattr)
        lines["r535"] = refused(build)
        machine_with("580.65.06")
        lines["r580"] = refused(build)
    finally:
        machine._FACTS[:] = saved_facts
        for name, value in saved.items():
            setattr(cuda_rt, name, value)
    assert f"TensorRT {pin} imports here, but no NVIDIA GPU is visible (nvidia-smi found no GPU)" \
           in lines["no GPU"], lines
    assert "turn on a GPU accelerator" in lines["no GPU"] and lines["no GPU, runner"] == lines["no GPU"], lines
    stubs = (f"TensorRT {pin} created no builder: the libnvinfer this process loaded", "KB), is a stub")
    assert "cuda-python is not installed" in lines["r580, no cuda-python"], lines  # this CUDA major's cuda-python
    assert f'pip install "cuda-python>={major},<{major + 1}"' in lines["r580, no cuda-python"], lines
    if major == 13:  # r535 runs the CUDA 12 wheels only; cuda-python would not help
        assert "driver 535.104.05 is too old for TensorRT" in lines["r535"] and "r580" in lines["r535"], lines
        assert "pip install tensorrt-cu12" in lines["r535"] and lines["r535, no cuda-python"] == lines["r535"]
    else:
        assert 'cuda-python is not installed' in lines["r535, no cuda-python"], lines
        assert 'pip install "cuda-python>=12,<13"' in lines["r535, no cuda-python"], lines
        assert all(part in lines["r535"] for part in stubs), lines
    assert all(part in lines["r580"] for part in stubs), lines
    return lines


def check_every_tensorrt_function_ran(trt, pin, ctx):
    """Every function of trtlab's TensorRT modules ran in the checks above (TensorRT 10-only modules on 10.x),
    so nothing that touches TensorRT escapes them; the exceptions are listed in NOT_DRIVEN with their reason."""
    allowed = {**NOT_DRIVEN, **NOT_DRIVEN_BY_MAJOR[SESSION.major]}
    missed = [f for f in SESSION.coverage.missed()
              if f.qualname.rsplit(".", 1)[-1] not in allowed
              and not (SESSION.major >= 11 and f.file in TENSORRT_10_ONLY)]
    assert not missed, (f"tensorrt {pin}: functions of trtlab's TensorRT code that no check ran — drive them in "
                        f"tests/real_trt_checks.py (or list them in NOT_DRIVEN with the reason):\n  " +
                        "\n  ".join(f"{f.file}:{f.def_line} {f.qualname}" for f in missed))
    return {"functions": len(SESSION.coverage.called)}


def check_ab_engine_column_is_one_line_when_the_builder_cannot_exist(trt, pin, ctx):
    """compare() with the REAL bindings importable (as after notebook 00) over the stub libraries: the A/B's
    TensorRT column is on by default, every engine fails to build — trt.Builder's factory returns nullptr over the
    stub libnvinfer — and the column says so in one line naming the stub, while the literal A/B results stand. CUDA
    is FakeCuda's answer (a T4, driver r580, whatever this machine has), so the failure is TensorRT's own, as on a
    GPU machine whose TensorRT libraries are stubs; the caption claims no GPU."""
    import trtlab.env.machine as machine
    from fake_tensorrt import FakeCuda

    from trtlab.backends import cuda_runtime as cuda_rt
    from trtlab.backends import tensorrt_available
    from trtlab.data.demo import demo_dataset, demo_split
    from trtlab.evaluation.options import RunOptions
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.compare import compare

    assert sys.modules["tensorrt"] is trt and tensorrt_available()
    saved = {n: getattr(cuda_rt, n) for n in ("device_info", "Stream", "Event", "DeviceBuffer", "PinnedBuffer")}
    saved_facts = machine._FACTS[:]
    machine._FACTS[:] = [machine.GpuFacts([machine.GpuInfo("Tesla T4", (7, 5), "580.65.06", "nvidia-smi")],
                                          "580.65.06", "13.0", "nvidia-smi")]
    FakeCuda(trt, GPU).install(setattr)
    try:
        dataset = demo_dataset()
        # a workspace of its own: on a GPU machine the shared one holds 'auto' (torch) results under the plain
        # labels, and this ONNX Runtime A/B would be stored beside them as 'fp32@ort-cpu' (found on the lent H200)
        result = compare(ctx["model"], dataset, [Recipe(algorithm="minmax", calibration_images=3)],
                         split=demo_split(dataset), workspace=Path(ctx["workspace"]) / "ort-ab",
                         run=RunOptions(backend="ort", progress=False))
    finally:
        machine._FACTS[:] = saved_facts
        for name, value in saved.items():
            setattr(cuda_rt, name, value)
    assert list(result.table.index) == ["fp32", "int8-minmax@3"], list(result.table.index)
    assert np.isfinite(result.table.raw["top1"]).all() and set(result.table.raw["backend"]) == {"ort-cpu"}
    statuses = [row.status for row in result.engines.rows]
    assert len(statuses) == 2 and len(set(statuses)) == 1, statuses
    assert statuses[0].startswith(f"build failed: TensorRT {pin} created no builder: the libnvinfer this process "
                                  f"loaded") and "is a stub" in statuses[0] and "\n" not in statuses[0], statuses
    assert "nullptr" not in statuses[0] and "TypeError" not in statuses[0], statuses
    summary = result.engines.summary()
    assert summary.endswith("the A/B results on ort-cpu stand") and "is a stub" in summary, summary
    caption = result.engines.table.caption
    assert caption.startswith("No engine was built: TensorRT") and "GPU" not in caption.split(" — ")[0], caption
    assert not any(label.startswith("trt-") for label in result.store.variants())
    return {"summary": summary, "row": statuses[0]}


CHECKS = [check_version_dispatch, check_fake_matches_real, check_logger_subclasses_the_real_ilogger,
          check_build_paths_against_the_real_api, check_strongly_typed_rule,
          check_runner_inspector_and_benchmark_against_the_real_api, check_calibrators_subclass_the_real_bases,
          check_recorded_module_uses_exist, check_cannot_run_here_is_one_line,
          check_every_tensorrt_function_ran,
          check_ab_engine_column_is_one_line_when_the_builder_cannot_exist]  # last: drives no new TensorRT call
SESSION: Session | None = None


def main(pin: str, ctx: dict) -> None:
    import warnings

    import tensorrt as trt

    global SESSION
    warnings.simplefilter("ignore", DeprecationWarning)
    SESSION = Session(trt, pin, ctx)
    results = {}
    SESSION.coverage.start()
    try:
        for check in CHECKS:
            try:
                info = check(trt, pin, ctx)
                results[check.__name__] = {"ok": True, "info": info}
            except Exception as exc:  # noqa: BLE001 - every failure goes back to pytest with its traceback
                results[check.__name__] = {"ok": False, "error": "".join(traceback.format_exception(exc))[-6000:]}
    finally:
        SESSION.coverage.stop()
    print("TRTLAB-RESULTS " + json.dumps(results, default=str))
