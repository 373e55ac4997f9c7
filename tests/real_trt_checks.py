"""Checks of trtlab's TensorRT code against the REAL TensorRT Python bindings of one version.

Runs inside the subprocess that tests/trt_bindings.py prepares (real ``tensorrt`` module importable, stub
libraries underneath, no GPU, no TensorRT builder). tests/test_trt_real_bindings.py runs ``main()`` once per
pinned version and turns every check into one pytest result. Each check raises AssertionError naming what
differs; nothing here builds or runs an engine.
"""
from __future__ import annotations

import ast
import json
import re
import sys
import tempfile
import traceback
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
GPU = {"name": "NVIDIA Tesla T4", "compute_capability": "7.5"}  # passed in: there is no GPU here

#: Variables in trtlab's TensorRT code that hold TensorRT objects, and their binding classes.
VAR_CLASS = {
    "builder": "Builder", "network": "INetworkDefinition", "parser": "OnnxParser", "config": "IBuilderConfig",
    "profile": "IOptimizationProfile", "calib_profile": "IOptimizationProfile", "layer": "ILayer",
    "error": "ParserError", "flag": "BuilderFlag", "self._runtime": "Runtime", "self._engine": "ICudaEngine",
    "engine": "ICudaEngine", "runner._engine": "ICudaEngine", "self._context": "IExecutionContext",
    "context": "IExecutionContext", "runner._context": "IExecutionContext", "inspector": "EngineInspector",
}
#: Functions where those names mean something else (engine-inspector JSON dictionaries, argparse).
NOT_TENSORRT = {"parse_engine_information", "_tensor_precision", "build_main"}
#: TensorRT 10 legacy code: only reached on 10.x (weakly typed, implicit INT8); TensorRT 11 may lack its names.
#: So may code in the body of an `if ... major == 10 ...:`; the build-path checks confirm 11 never gets there.
LEGACY_V10 = {"_configure_weakly_typed_v10", "apply_layer_guards"}
SOURCES = ("trtlab/backends/tensorrt/engine.py", "trtlab/backends/tensorrt/calibrator.py")
#: Module attributes of the fake that are test plumbing, not API.
FAKE_PLUMBING = {"calls", "parser_failures", "build_returns_none", "device_memory"}
#: Classes user code constructs (the others come from factories): their constructors must match too.
CONSTRUCTED = {"Builder", "OnnxParser", "Logger", "Runtime"}


# ----------------------------------------------------------------------------------------------------------------
# pybind signatures and docs
# ----------------------------------------------------------------------------------------------------------------
def signatures(func) -> list[list[tuple[str, str, bool]]]:
    """pybind11 overloads of `func` from its docstring: [[(param, annotation, has_default), ...], ...] without self."""
    doc = getattr(func, "__doc__", None) or ""
    name = getattr(func, "__name__", "")
    found = []
    for match in re.finditer(r"^(?:\d+\. )?%s\((.*)\) -> " % re.escape(name), doc, re.M):
        params = []
        for part in _split_params(match.group(1)):
            pname, _, rest = part.partition(":")
            annotation, _, default = rest.partition(" = ")
            params.append((pname.strip(), annotation.strip(), bool(default)))
        if params and params[0][0] == "self":
            params = params[1:]
        found.append(params)
    return found


def _split_params(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "[(<":
            depth += 1
        elif ch in "])>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def fits(params, npos: int, keywords=()) -> bool:
    names = [p[0] for p in params]
    if npos > len(params) or any(k not in names[npos:] for k in keywords):
        return False
    return all(p[2] or i < npos or p[0] in keywords for i, p in enumerate(params))


def deprecated(doc: str) -> bool:
    """A '[DEPRECATED]' note about the thing itself; one in parentheses is about something it mentions (e.g.
    MemoryPoolType.WORKSPACE's doc mentions the deprecated IAlgorithmSelector)."""
    return re.search(r"(?<!\()\[DEPRECATED\]", doc or "") is not None


def enum_member_doc(enum_type, member: str) -> str:
    doc = enum_type.__doc__ or ""
    match = re.search(r"^\s+%s : (.*?)(?=^\s+[A-Z][A-Z0-9_]* : |\Z)" % re.escape(member), doc, re.S | re.M)
    return " ".join(match.group(1).split()) if match else ""


def real_class(trt, name: str):
    obj = getattr(trt, name, None)
    assert obj is not None, f"tensorrt {trt.__version__} has no class {name}"
    return obj


def _resolve(trt, annotation: str):
    path = annotation.split(".")
    if "tensorrt" not in path:
        return None
    obj = trt
    for piece in path[path.index("tensorrt") + 1:]:
        obj = getattr(obj, piece, None)
        if obj is None:
            return None
    return obj


def converts(trt, value, annotation: str) -> bool:
    """Whether `value` (what trtlab passed) is accepted for a pybind parameter typed `annotation`."""
    a = annotation
    if a in ("int", "typing.SupportsInt"):
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if a == "bool":
        return isinstance(value, bool)
    if a == "str":
        return isinstance(value, str)
    if a in ("tuple", "list"):
        return isinstance(value, {"tuple": tuple, "list": list}[a])
    if a in ("buffer", "typing_extensions.Buffer", "collections.abc.Buffer"):
        try:
            memoryview(value)
            return True
        except TypeError:
            return False
    target = _resolve(trt, a)
    if target is None:
        return True  # a type this check does not model (List[...], object): not judged here
    if target is getattr(trt, "Dims", None):
        return isinstance(value, trt.Dims) or tuple(trt.Dims(tuple(value))) == tuple(value)
    if isinstance(value, target):
        return True
    # a fake builder object stands for the real class of the same name (its surface is checked separately)
    return type(value).__module__ != type(trt).__module__ and type(value).__name__ == target.__name__ \
        and "fake_tensorrt" in type(value).__module__


# ----------------------------------------------------------------------------------------------------------------
# the checks
# ----------------------------------------------------------------------------------------------------------------
def check_version_dispatch(trt, pin, ctx):
    from trtlab.backends.tensorrt.engine import tensorrt_major, tensorrt_version

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


def _uses(major: int):
    """(function, expression, attribute, kind, npos, keywords) of every TensorRT use in trtlab's TensorRT code:
    `trt.X.Y` chains and attributes of the variables in VAR_CLASS."""
    uses = []
    for rel in SOURCES:
        tree = ast.parse((REPO / rel).read_text())
        parents = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node

        def function_of(node):
            while node in parents:
                node = parents[node]
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in ("CapturingLogger",
                                                                                             "TrtlabCalibrator"):
                    return node.name
            return "<module>"

        def in_v10_branch(node):
            """Inside the body of an `if ... major == 10 ...:` (a TensorRT 10-only branch)."""
            child = node
            while child in parents:
                parent = parents[child]
                if isinstance(parent, ast.If) and "major == 10" in ast.unparse(parent.test) and child in parent.body:
                    return True
                child = parent
            return False

        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            func = function_of(node)
            if func in NOT_TENSORRT:
                continue
            base = ast.unparse(node.value)
            parent = parents.get(node)
            call = parent if isinstance(parent, ast.Call) and parent.func is node else None
            kind = "call" if call else "store" if isinstance(node.ctx, ast.Store) else "load"
            npos = len(call.args) if call else 0
            kws = tuple(k.arg for k in call.keywords) if call else ()
            legacy = func in LEGACY_V10 or rel.endswith("calibrator.py") or in_v10_branch(node)
            if base == "trt" or base.startswith("trt."):
                if isinstance(parent, ast.Attribute):
                    continue  # the longest chain is recorded once
                uses.append((rel, func, legacy, f"{base}.{node.attr}", None, kind, npos, kws))
            elif base in VAR_CLASS:
                uses.append((rel, func, legacy, base, node.attr, kind, npos, kws))
    return uses


def check_trtlab_names_exist(trt, pin, ctx):
    """Every trt.* name and TensorRT-object attribute trtlab's code uses on this version's path exists, methods
    accept trtlab's argument count and keywords, and attributes trtlab assigns are settable."""
    from trtlab.backends.tensorrt.calibrator import ALGORITHMS

    major = int(pin.split(".")[0])
    problems, checked = [], set()
    for rel, func, legacy, expr, attr, kind, npos, kws in _uses(major):
        if legacy and major >= 11:
            continue
        where = f"{rel}:{func}"
        if attr is None:  # trt.X.Y...
            obj = trt
            for piece in expr.split(".")[1:]:
                obj = getattr(obj, piece, None)
                if obj is None:
                    problems.append(f"{where}: {expr} does not exist")
                    break
            else:
                *_, owner_name, member = ["trt"] + expr.split(".")
                owner = eval(expr.rsplit(".", 1)[0], {"trt": trt}) if expr.count(".") > 1 else None
                doc = enum_member_doc(owner, member) if hasattr(owner, "__members__") else getattr(obj, "__doc__", "")
                if not legacy and deprecated(doc):
                    problems.append(f"{where}: {expr} is deprecated in tensorrt {pin}: {doc[:120]}")
                if kind == "call":
                    sigs = signatures(obj.__init__) if isinstance(obj, type) else signatures(obj)
                    if expr.endswith(".__init__"):
                        npos -= 1  # Base.__init__(self): self is passed explicitly
                    if sigs and not any(fits(s, npos, kws) for s in sigs):
                        problems.append(f"{where}: {expr}() called with {npos} args {kws}, real: {sigs}")
            checked.add(expr)
            continue
        cls = real_class(trt, VAR_CLASS[expr]) if hasattr(trt, VAR_CLASS[expr]) else None
        if cls is None:
            problems.append(f"{where}: tensorrt.{VAR_CLASS[expr]} does not exist")
            continue
        robj = getattr(cls, attr, None)
        name = f"{VAR_CLASS[expr]}.{attr}"
        checked.add(name)
        if robj is None:
            problems.append(f"{where}: {name} does not exist")
            continue
        doc = enum_member_doc(cls, attr) if hasattr(cls, "__members__") else getattr(robj, "__doc__", "")
        if not legacy and deprecated(doc):
            problems.append(f"{where}: {name} is deprecated in tensorrt {pin}: {' '.join(doc.split())[:120]}")
        if kind == "store" and not (isinstance(robj, property) and robj.fset is not None):
            problems.append(f"{where}: trtlab sets {name}, which is read-only")
        elif kind == "call":
            sigs = signatures(robj)
            if not sigs:
                problems.append(f"{where}: {name} is not a method")
            elif not any(fits(s, npos, kws) for s in sigs):
                problems.append(f"{where}: {name} called with {npos} positional args {list(kws)}, the real "
                                f"signature is {[[p[0] for p in s] for s in sigs]}")
    if major == 10:  # make_calibrator picks its base class by name: getattr(trt, ALGORITHMS[...])
        for base in ALGORITHMS.values():
            checked.add(base)
            if not hasattr(trt, base):
                problems.append(f"trt_calibrator.ALGORITHMS: tensorrt.{base} does not exist")
    assert len(checked) > 40, f"only {len(checked)} uses found: the source scan is broken"
    assert not problems, f"tensorrt {pin}:\n  " + "\n  ".join(problems)
    return {"uses_checked": len(checked)}


def check_logger_subclasses_the_real_ilogger(trt, pin, ctx):
    from trtlab.backends.tensorrt.engine import _make_logger

    logger = _make_logger(trt)
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


def _calibration_stub():
    return types.SimpleNamespace(valid_indices=np.arange(16), key="decode-cache-key", preprocess=None)


def check_calibrators_subclass_the_real_bases(trt, pin, ctx):
    from trtlab.backends.tensorrt.calibrator import ALGORITHMS, _CalibratorMixin, make_calibrator

    if int(pin.split(".")[0]) >= 11:
        assert not any(hasattr(trt, b) for b in ALGORITHMS.values()), "TensorRT 11 still has IInt8 calibrators"
        return {"calibrators": "absent (removed in 11)"}
    for algorithm, base_name in ALGORITHMS.items():
        base = getattr(trt, base_name)
        calibrator = make_calibrator(trt, algorithm, _calibration_stub(), np.arange(8), 8, None, {}, progress=False)
        assert isinstance(calibrator, base) and isinstance(calibrator, trt.IInt8Calibrator)
        # every callback trtlab implements overrides a method of the real base (a misspelt one is never called)
        callbacks = {n for n in vars(_CalibratorMixin) if not n.startswith("_") and n != "free"}
        missing = {n for n in callbacks if not hasattr(base, n)}
        assert not missing, f"{base_name} has no {sorted(missing)}: TensorRT would never call trtlab's"
        assert {"get_batch", "get_batch_size", "read_calibration_cache", "write_calibration_cache"} <= callbacks
        assert [p[0] for p in signatures(base.get_batch)[0]] == ["names"]
        assert calibrator.get_batch_size() == 8 and calibrator.read_calibration_cache() is None
        assert calibrator.get_algorithm() == getattr(trt.CalibrationAlgoType,
                                                     {"entropy": "ENTROPY_CALIBRATION_2",
                                                      "minmax": "MINMAX_CALIBRATION"}[algorithm])


def _record_builds(trt, pin, ctx, paths):
    """Run trtlab's build_engine for each (name, precision, options) with the real API surface over fake builder
    objects; returns {name: fake module (its .calls) or the exception raised}."""
    from fake_tensorrt import make_fake_tensorrt

    import trtlab.backends.tensorrt.engine as backend  # imports `tensorrt` at call time, so it gets the hybrid below

    cache = ctx.setdefault("_builds", {})  # both build checks share the recorded builds
    results = {}
    for name, precision, model, options in paths:
        if name in cache:
            results[name] = cache[name]
            continue
        hybrid = make_fake_tensorrt(pin, real=trt)
        sys.modules["tensorrt"] = hybrid
        try:
            workspace = Path(tempfile.mkdtemp(prefix=f"ws-{name}-"))
            build = backend.build_engine(ctx[model], precision, workspace=workspace, gpu=GPU, progress=False,
                                         **options)
            hybrid.sidecar = json.loads(build.sidecar_path.read_text())
            hybrid.engine_path = build.engine_path
            results[name] = hybrid
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            results[name] = exc
        finally:
            sys.modules["tensorrt"] = trt
        cache[name] = results[name]
    return results


_FORBIDDEN_WHEN_STRONGLY_TYPED = ("ILayer.precision=", "ILayer.set_output_type", "ITensor.dtype=")
_PRECISION_FLAGS = ("FP16", "BF16", "INT8", "FP8", "INT4", "FP4", "OBEY_PRECISION_CONSTRAINTS",
                    "PREFER_PRECISION_CONSTRAINTS")


def _default_paths(major):
    paths = [("fp32", "fp32", "model", {}),
             ("fp16+guard", "fp16", "model", {"guards": ("first_layer",)}),
             ("int8", "int8", "qdq", {}),
             ("int8+fp16-guard", "int8", "qdq", {"guards": ("last_layer=fp16",)})]
    return paths


def _verify_calls(trt, hybrid, problems, name, default_path: bool):
    """Every call trtlab made on the fake builder objects exists on the real class with a fitting signature, and
    its argument values convert to the real parameter types."""
    for entry in hybrid.calls:
        what, args = entry[0], list(entry[1:])
        if what.endswith("="):
            cls_name, attr = what[:-1].split(".")
            prop = getattr(getattr(trt, cls_name, None), attr, None)
            if not (isinstance(prop, property) and prop.fset is not None):
                problems.append(f"{name}: sets {cls_name}.{attr}, not settable in the real bindings")
            if attr == "int8_calibrator" and not isinstance(args[0], trt.IInt8Calibrator):
                problems.append(f"{name}: int8_calibrator is not a real IInt8Calibrator")
            if attr in ("profiling_verbosity", "precision") and type(args[0]).__module__ != type(trt.DataType.FLOAT).__module__:
                problems.append(f"{name}: {what} got {args[0]!r}, not a real enum value")
            continue
        if what in ("ILogger.__init__", "IInt8Calibrator.__init__"):
            continue
        cls_name, _, method = what.partition(".")
        cls = getattr(trt, cls_name, None)
        func = getattr(cls, method, None) if method else getattr(cls, "__init__", None)
        if func is None:
            problems.append(f"{name}: {what} does not exist in the real bindings")
            continue
        if what == "ILayer.set_output_type":
            args = args[1:]  # the fake records the layer's name first
        sigs = signatures(func)
        ok = [s for s in sigs if fits(s, len(args))]
        if not ok:
            problems.append(f"{name}: {what} with {len(args)} args; real {[[p[0] for p in s] for s in sigs]}")
        elif not any(all(converts(trt, v, p[1]) for v, p in zip(args, s)) for s in ok):
            problems.append(f"{name}: {what}{tuple(args)!r} does not convert to the real "
                            f"{[[f'{p[0]}: {p[1]}' for p in s] for s in ok]}")
        if deprecated(func.__doc__) and default_path:
            problems.append(f"{name}: calls {what}, deprecated in tensorrt {trt.__version__}")
        for value in args:
            enum_type = type(value)
            if hasattr(enum_type, "__members__") and default_path:
                member = getattr(value, "name", "")
                if deprecated(enum_member_doc(enum_type, member)):
                    problems.append(f"{name}: uses {enum_type.__name__}.{member}, deprecated in "
                                    f"tensorrt {trt.__version__}")


def check_build_paths_against_the_real_api(trt, pin, ctx):
    """trtlab's build_engine on every path of this version, with the real enums/logger/calibrator classes and
    recording builder objects: every call exists, fits the real signature, its values convert; the default
    (strongly typed) paths use nothing deprecated; sidecars name the real version."""
    major = int(pin.split(".")[0])
    paths = _default_paths(major)
    default_names = {p[0] for p in paths}
    if major == 10:
        legacy = [("legacy fp16+guard", "fp16", "model", {"guards": ("first_layer",), "weakly_typed": True}),
                  ("legacy int8+guard", "int8", "qdq", {"guards": ("last_layer",), "weakly_typed": True}),
                  ("int8-implicit entropy", "int8-implicit", "model",
                   {"calibration": _calibration_stub(), "calibration_batch": 8, "guards": ("last_layer",)}),
                  ("int8-implicit minmax", "int8-implicit", "model",
                   {"calibration": _calibration_stub(), "calibration_batch": 8, "calibrator": "minmax"})]
    else:
        legacy = [("weakly_typed on 11", "fp16", "model", {"weakly_typed": True}),
                  ("int8-implicit on 11", "int8-implicit", "model", {"calibration": _calibration_stub()})]
    results = _record_builds(trt, pin, ctx, paths + legacy)
    problems = []
    for name, result in results.items():
        if major >= 11 and name.endswith("on 11"):
            from trtlab.backends.tensorrt.engine import ImplicitInt8Unsupported

            expected = ImplicitInt8Unsupported if "implicit" in name else ValueError
            if not isinstance(result, expected):
                problems.append(f"{name}: expected {expected.__name__} before any builder call, got {result!r}")
            continue
        if isinstance(result, Exception):
            problems.append(f"{name}: build_engine raised {''.join(traceback.format_exception_only(result)).strip()}")
            continue
        _verify_calls(trt, result, problems, name, name in default_names)
        if result.sidecar["tensorrt_version"] != trt.__version__:
            problems.append(f"{name}: sidecar names TensorRT {result.sidecar['tensorrt_version']}")
        json.dumps(result.sidecar)  # plain JSON: no enum object in the sidecar
    assert not problems, f"tensorrt {pin}:\n  " + "\n  ".join(problems)
    return {"paths": sorted(results)}


def check_strongly_typed_rule(trt, pin, ctx):
    """The guard-path rule, as the real bindings document it: on a strongly typed network "Setting layer
    precision and layer output types is not allowed" (10.x), and TensorRT 11 has no weakly typed networks.
    Asserts what trtlab SETS on its default paths: the network creation flags (the real STRONGLY_TYPED value)
    and no layer precision, output type or precision builder flag; the legacy 10.x path is the only place for
    them, and it creates a weakly typed network."""
    major = int(pin.split(".")[0])
    flag_doc = enum_member_doc(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    if major == 10:
        assert "Setting layer precision and layer output types is not allowed" in flag_doc, flag_doc
        expected_flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    else:
        assert "always enabled" in flag_doc and not hasattr(trt.ILayer, "precision"), flag_doc
        expected_flags = 0  # STRONGLY_TYPED is deprecated and ignored in 11: pass nothing
    paths = _default_paths(major)
    if major == 10:
        paths.append(("legacy fp16+guard", "fp16", "model", {"guards": ("first_layer",), "weakly_typed": True}))
    results = _record_builds(trt, pin, ctx, paths)
    problems = []
    for name, hybrid in results.items():
        if isinstance(hybrid, Exception):
            problems.append(f"{name}: {hybrid!r}")
            continue
        created = [c[1] for c in hybrid.calls if c[0] == "Builder.create_network"]
        touched = [c[0] for c in hybrid.calls if c[0] in _FORBIDDEN_WHEN_STRONGLY_TYPED]
        flags = [c[1].name for c in hybrid.calls if c[0] == "IBuilderConfig.set_flag"]
        if name.startswith("legacy"):
            if created != [0] or "OBEY_PRECISION_CONSTRAINTS" not in flags or "ILayer.precision=" not in touched:
                problems.append(f"{name}: legacy path should be weakly typed with layer precision constraints; "
                                f"created {created}, flags {flags}, touched {touched}")
            continue
        if created != [expected_flags]:
            problems.append(f"{name}: create_network({created}) — expected {expected_flags} (strongly typed)")
        if touched or set(flags) & set(_PRECISION_FLAGS):
            problems.append(f"{name}: strongly typed network but trtlab set {touched + flags}: "
                            f"\"{flag_doc[:90]}...\"")
    assert not problems, f"tensorrt {pin}:\n  " + "\n  ".join(problems)
    return {"create_network_flags": expected_flags}


def check_runner_and_inspector_against_the_real_api(trt, pin, ctx):
    """TrtRunner and inspect_engine with the real enums, nptype, ILogger and Dims over the fake runtime objects
    and numpy "device" memory: every runtime call exists, fits the real signature and its values convert."""
    from fake_tensorrt import FakeCuda, make_fake_tensorrt

    from trtlab.backends import cuda_runtime as cuda_rt
    from trtlab.backends.tensorrt.engine import TrtRunner, inspect_engine

    built = _record_builds(trt, pin, ctx, _default_paths(int(pin.split(".")[0]))[:1])["fp32"]
    assert not isinstance(built, Exception), built
    hybrid = make_fake_tensorrt(pin, real=trt)
    saved = {name: getattr(cuda_rt, name) for name in ("device_info", "Stream", "Event", "DeviceBuffer",
                                                       "PinnedBuffer")}
    sys.modules["tensorrt"] = hybrid
    try:
        FakeCuda(hybrid, GPU).install(setattr)
        batch = np.random.default_rng(0).standard_normal((3, 3, 224, 224), dtype=np.float32)
        with TrtRunner(built.engine_path) as runner:
            logits = runner.infer(batch)
            assert runner._dtypes[runner.input_name] == np.float32  # real nptype(real DataType.FLOAT)
        np.testing.assert_allclose(logits[:, :3], batch.mean(axis=(1, 2, 3))[:, None] + np.arange(3), rtol=1e-5)
        assert inspect_engine(built.engine_path).counts["layers"] > 0
    finally:
        sys.modules["tensorrt"] = trt
        for name, value in saved.items():
            setattr(cuda_rt, name, value)
    problems = []
    _verify_calls(trt, hybrid, problems, "runner", True)
    runtime_calls = {c[0] for c in hybrid.calls}
    for needed in ("Runtime", "Runtime.deserialize_cuda_engine", "IExecutionContext.set_input_shape",
                   "IExecutionContext.set_tensor_address", "IExecutionContext.execute_async_v3",
                   "EngineInspector.get_engine_information"):
        if needed not in runtime_calls:
            problems.append(f"the runner never called {needed}: the check is not looking at the runtime path")
    assert not problems, f"tensorrt {pin}:\n  " + "\n  ".join(problems)
    return {"runtime_calls": len(hybrid.calls)}


CHECKS = [check_version_dispatch, check_fake_matches_real, check_trtlab_names_exist,
          check_logger_subclasses_the_real_ilogger, check_calibrators_subclass_the_real_bases,
          check_build_paths_against_the_real_api, check_strongly_typed_rule,
          check_runner_and_inspector_against_the_real_api]


def main(pin: str, ctx: dict) -> None:
    import warnings

    import tensorrt as trt

    warnings.simplefilter("ignore", DeprecationWarning)
    results = {}
    for check in CHECKS:
        try:
            info = check(trt, pin, ctx)
            results[check.__name__] = {"ok": True, "info": info}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to pytest with its traceback
            results[check.__name__] = {"ok": False, "error": "".join(traceback.format_exception(exc))[-6000:]}
    print("TRTLAB-RESULTS " + json.dumps(results, default=str))
