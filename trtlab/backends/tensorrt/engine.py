"""TensorRT backend for TensorRT 10.x and 11.x: engine builds, engine files with sidecars, the runner, engine
inspection and latency benchmarks. `python -m trtlab build ...` is trtlab.cli.commands.build.

Written against NVIDIA's documentation; this module has NOT been run against a real TensorRT builder here
(TensorRT's libraries cannot be installed on trtlab's development and CI machines). tests/test_trt_real_bindings.py
checks it against the REAL TensorRT Python bindings of the oldest and newest supported 10.x and 11.x (names,
signatures, enum values, settable attributes, subclassing, the strongly typed rule), over recording builder and
runtime objects (tests/fake_tensorrt); the cuda-python parts ran for real on a GPU, and tests/test_trt_backend.py
runs the real thing wherever ``import tensorrt`` works.

Precision by TensorRT major version. The default on both is a strongly typed network (TensorRT 10.x: flag
NetworkDefinitionCreationFlag.STRONGLY_TYPED; 11.x: always, the flag is deprecated and ignored), so every layer
runs in the type its tensors have in the ONNX graph and guards are expressed in the graph: FP16 Casts around the
FP32-kept nodes (trtlab.graph.precision), and for INT8 guarded nodes simply carry no Q/DQ (trtlab's quantizer). TensorRT
forbids precision constraints on a strongly typed network ("Setting layer precision and layer output types is
not allowed", NetworkDefinitionCreationFlag docs), and deprecates BuilderFlag.FP16/INT8,
OBEY_PRECISION_CONSTRAINTS and ILayer.set_output_type since 10.12 and the implicit calibrators since 10.1; 11.x
removed them (10.x→11.x Python migration guide, "Removed Python APIs").

==================  ================================================  ==========================================
variant             TensorRT 10.x                                     TensorRT 11.x
==================  ================================================  ==========================================
fp32                strongly typed; TF32 cleared                      same (no STRONGLY_TYPED flag needed)
fp16                strongly typed FP16 graph (trtlab.graph.precision), guards   same
                    kept FP32 in the graph
int8 (Q/DQ ONNX)    strongly typed Q/DQ graph; guarded nodes carry    same
                    no Q/DQ ('=fp16' guards: FP16 Casts in the graph)
legacy 10.x         weakly_typed=True: BuilderFlag.FP16 / INT8 (+FP16  refused (removed in 11)
                    fallback), guards → layer.precision +
                    set_output_type + OBEY_PRECISION_CONSTRAINTS
int8-implicit       legacy, weakly typed: BuilderFlag.INT8 +            refused with the explicit path explained
                    int8_calibrator + set_calibration_profile
==================  ================================================  ==========================================
"""
from __future__ import annotations

import logging

import datetime as _dt
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from trtlab.backends.runner import Runner

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "fp16", "int8", "int8-implicit")
SIDECAR_FORMAT = 1


# ----------------------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------------------
class TensorRTUnavailable(RuntimeError):
    """`import tensorrt` does not work here."""


class ImplicitInt8Unsupported(RuntimeError):
    """TensorRT 11 has no implicit (calibrator-based) INT8."""


class OnnxParseError(RuntimeError):
    """TensorRT's ONNX parser rejected the model; the message names the ONNX nodes."""


class EngineBuildError(RuntimeError):
    """build_serialized_network returned nothing; the message carries TensorRT's errors."""


class EngineCompatibilityError(RuntimeError):
    """An engine file was built by another TensorRT version or on another GPU."""


# ----------------------------------------------------------------------------------------------------------------
# Version detection
# ----------------------------------------------------------------------------------------------------------------
def import_tensorrt():
    """The `tensorrt` module, or TensorRTUnavailable saying why and what to do."""
    try:
        import tensorrt as trt
    except Exception as exc:  # the PyPI stub package raises on import, not ImportError only
        raise TensorRTUnavailable(
            f"TensorRT does not import here ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            f"run notebook 00_env_setup / `python -m trtlab doctor` to find and load it, or use backend='ort'"
        ) from exc
    return trt


def tensorrt_version(trt) -> tuple[int, ...]:
    """(major, minor, patch, ...) of a tensorrt module, from its __version__."""
    parts = []
    for piece in str(trt.__version__).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise TensorRTUnavailable(f"cannot read the TensorRT version from {trt.__version__!r}")
    return tuple(parts)


def tensorrt_major(trt) -> int:
    major = tensorrt_version(trt)[0]
    if major not in (10, 11):
        raise TensorRTUnavailable(f"TensorRT {trt.__version__} found; trtlab supports TensorRT 10.x and 11.x "
                                  f"(install one of them, e.g. pip install 'tensorrt-cu12>=10,<12')")
    return major


# ----------------------------------------------------------------------------------------------------------------
# Build recipe
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class BuildOptions:
    """Everything that changes an engine; hashed into its file name and stored in its sidecar."""

    precision: str = "fp32"
    min_batch: int = 1
    opt_batch: int = 32
    max_batch: int = 64
    workspace_mb: int = 2048
    guards: tuple = ()
    #: Legacy weakly typed INT8 builds (TensorRT 10 only): also set BuilderFlag.FP16, so layers without Q/DQ (or
    #: calibration) may run FP16 rather than FP32. A strongly typed build runs them in the graph's type instead.
    fp16_fallback: bool = True
    #: TensorRT 10 only, legacy: a weakly typed network with BuilderFlag.FP16/INT8 and guards as layer precision
    #: + OBEY_PRECISION_CONSTRAINTS (deprecated since TensorRT 10.12, removed in 11). 'int8-implicit' implies it.
    weakly_typed: bool = False
    #: FP32 variants: TF32 tensor-core math is on by default in TensorRT; off here so FP32 means FP32.
    tf32: bool = False
    calibrator: str = "entropy"
    calibration_batch: int = 8
    calibration_images: int | None = 512

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if not (1 <= self.min_batch <= self.opt_batch <= self.max_batch):
            raise ValueError(f"batch profile needs 1 <= min_batch <= opt_batch <= max_batch, got "
                             f"{self.min_batch}/{self.opt_batch}/{self.max_batch}")
        self.guards = tuple(self.guards or ())
        if self.precision == "int8-implicit":
            self.weakly_typed = True  # TensorRT's calibrators need BuilderFlag.INT8, i.e. a weakly typed network

    def recipe(self) -> dict:
        recipe = asdict(self)
        recipe["guards"] = list(self.guards)
        if not (self.weakly_typed and self.precision in ("int8", "int8-implicit")):
            recipe.pop("fp16_fallback")  # only the legacy weakly typed INT8 path reads it
        if self.precision != "int8-implicit":  # calibration settings do not change other engines
            for key in ("calibrator", "calibration_batch", "calibration_images"):
                recipe.pop(key)
        return recipe


@dataclass
class EngineBuild:
    """A built (or reused) engine file and its sidecar."""

    engine_path: Path
    sidecar: dict
    reused: bool
    seconds: float

    @property
    def sidecar_path(self) -> Path:
        return sidecar_path(self.engine_path)

    @property
    def precision(self) -> str:
        return self.sidecar["recipe"]["precision"]


def sidecar_path(engine_path: str | os.PathLike) -> Path:
    return Path(str(engine_path) + ".json")


def rebuild_command(onnx_path, options: BuildOptions) -> str:
    parts = [f"python -m trtlab build --model {onnx_path} --precision {options.precision}",
             f"--min-batch {options.min_batch} --opt-batch {options.opt_batch} --max-batch {options.max_batch}"]
    parts += [f"--guard {g}" for g in options.guards]
    if options.weakly_typed and options.precision != "int8-implicit":
        parts.append("--weakly-typed")
    if options.precision == "int8-implicit":
        parts.append(f"--calibrator {options.calibrator} --calib-data <folder used for calibration>")
    return " ".join(parts + ["--force"])


def has_qdq(onnx_path) -> bool:
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)


# ----------------------------------------------------------------------------------------------------------------
# Logger and parser errors
# ----------------------------------------------------------------------------------------------------------------
def _make_logger(trt, verbose: bool = False):
    """A trt.ILogger that prints warnings (info too when verbose) and keeps errors for exception messages."""

    class CapturingLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)  # explicit base init, as the TensorRT Python docs require
            self.errors: list[str] = []

        def log(self, severity, msg):
            if severity in (trt.ILogger.Severity.INTERNAL_ERROR, trt.ILogger.Severity.ERROR):
                self.errors.append(str(msg))
                log.error(f"[TensorRT] {msg}")
            elif severity == trt.ILogger.Severity.WARNING or verbose:
                log.info(f"[TensorRT] {msg}")

    return CapturingLogger()


def format_parser_errors(parser, onnx_model) -> str:
    """One line per ONNX parser error, naming the ONNX node (name and op type) it happened in."""
    nodes = list(onnx_model.graph.node)
    lines = []
    for index in range(parser.num_errors):
        error = parser.get_error(index)
        node_index = error.node()
        where = "the graph"
        if 0 <= node_index < len(nodes):
            node = nodes[node_index]
            where = f"node {node.name or '#' + str(node_index)!r} ({node.op_type}, #{node_index})"
        lines.append(f"  - {where}: {error.desc()}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# Build
# ----------------------------------------------------------------------------------------------------------------
def build_engine(onnx_path, precision: str = "fp32", output: str | os.PathLike | None = None, *, workspace=None,
                 calibration=None, timing_cache: bool | str | os.PathLike = True, use_calibration_cache: bool = True,
                 force: bool = False, gpu: dict | None = None, verbose: bool = False, progress: bool = True,
                 **options) -> EngineBuild:
    """Build a TensorRT engine from `onnx_path` (or reuse the one already built with the same recipe).

    precision: 'fp32', 'fp16', 'int8' (a Q/DQ ONNX from trtlab's quantizer) or 'int8-implicit' (TensorRT 10
    only: TensorRT's own calibrator fed from `calibration`, a trtlab DecodeCache). Other `options` are
    BuildOptions fields (min/opt/max_batch, workspace_mb, guards, fp16_fallback, weakly_typed, tf32,
    calibrator, calibration_batch, calibration_images). Networks are strongly typed unless `weakly_typed=True`
    (TensorRT 10 legacy path, implied by 'int8-implicit'), and guards are expressed in the ONNX graph. The engine
    goes to `<workspace>/engines/` with a JSON sidecar (TensorRT version, GPU, compute capability, recipe hash, build time); the timing cache
    `<workspace>/engines/timing.cache` is read before and written after every build.
    """
    from trtlab.graph.classifier import inspect_classifier
    from trtlab.core.workspace import atomic_path, atomic_write_bytes, atomic_write_json, hash_json, workspace_dir

    trt = import_tensorrt()
    major = tensorrt_major(trt)
    opts = BuildOptions(precision=precision, **options)
    info = inspect_classifier(onnx_path)
    if not info.dynamic_batch:
        fixed = int(info.input_shape[0])  # a fixed-batch model admits one shape only, calibration included
        opts.min_batch = opts.opt_batch = opts.max_batch = opts.calibration_batch = fixed
    if opts.precision == "int8-implicit":
        if major >= 11:
            raise ImplicitInt8Unsupported(
                f"TensorRT {trt.__version__} has no implicit INT8: TensorRT 11 removed IInt8Calibrator, "
                f"IBuilderConfig.int8_calibrator and BuilderFlag.INT8. Use the explicit path instead: quantize the "
                f"model into a Q/DQ ONNX with trtlab (notebook 01 / `python -m trtlab calibrate`), then build that "
                f"file with precision='int8'. trtlab's calibrators (entropy, minmax, percentile) follow TensorRT's "
                f"own algorithms, so the A/B stays meaningful.")
        if calibration is None:
            raise ValueError("precision='int8-implicit' needs calibration=<DecodeCache> (e.g. "
                             "trtlab.build_decode_cache(calibration_split_dataset)) to feed TensorRT's calibrator")
    if opts.precision == "int8" and not has_qdq(onnx_path):
        raise ValueError(f"{Path(onnx_path).name} has no QuantizeLinear/DequantizeLinear nodes; precision='int8' builds "
                         f"a Q/DQ model made by trtlab's quantizer (notebook 01 / `python -m trtlab calibrate`)"
                         + ("; on TensorRT 10 you can also use precision='int8-implicit'" if major == 10 else ""))
    if opts.weakly_typed and major >= 11:
        raise ValueError(f"weakly_typed=True needs TensorRT 10: TensorRT {trt.__version__} builds strongly typed "
                         f"networks only (BuilderFlag.FP16/INT8 and layer precision constraints were removed in 11); "
                         f"drop weakly_typed, trtlab expresses precision and guards in the ONNX graph")

    gpu = dict(gpu) if gpu is not None else _device_info()
    recipe = opts.recipe()
    identity = {"onnx_sha256": info.sha256, "recipe": recipe}
    calib = None
    if opts.precision == "int8-implicit":
        from trtlab.backends.tensorrt.calibrator import cache_identity, calibration_indices

        indices = calibration_indices(calibration, opts.calibration_images, opts.calibration_batch)
        calib = {"indices": indices, "identity": cache_identity(info.sha256, opts.calibrator, calibration, indices,
                                                                opts.calibration_batch)}
        identity["calibration"] = calib["identity"]
    recipe_hash = hash_json(identity, 12)
    folder = workspace_dir(workspace) / "engines"
    engine_path = Path(output) if output is not None else folder / f"{Path(onnx_path).stem}.{opts.precision}.{recipe_hash}.engine"
    command = rebuild_command(onnx_path, opts)

    if engine_path.is_file() and sidecar_path(engine_path).is_file() and not force:
        try:
            sidecar = check_engine_compatible(engine_path, trt.__version__, gpu)
            if sidecar.get("recipe_hash") == recipe_hash:
                if progress:
                    log.info(f"{opts.precision}: reusing {engine_path} (same recipe, TensorRT and GPU)")
                return EngineBuild(engine_path, sidecar, True, 0.0)
        except EngineCompatibilityError as exc:
            if progress:
                log.info(f"{opts.precision}: rebuilding: {exc.args[0].splitlines()[0]}")

    source = Path(onnx_path)
    conversion = None
    if not opts.weakly_typed:
        # Strongly typed: the graph's types are the engine's types, so precision and guards live in the graph.
        source, conversion = _strongly_typed_source(onnx_path, opts, folder / f"{Path(onnx_path).stem}."
                                                    f"{opts.precision}.{recipe_hash}.onnx")
        if conversion is not None and progress:
            s = conversion.summary()
            log.info(f"{opts.precision}: strongly typed network, precision expressed in the graph: "
                  f"{s['fp16_nodes']} nodes FP16, {s['fp32_nodes']} FP32, {s['casts_inserted']} Cast(s) -> {source}")

    import onnx

    onnx_model = onnx.load(str(source), load_external_data=False)
    logger = _make_logger(trt, verbose)
    builder = trt.Builder(logger)
    network = builder.create_network(network_creation_flags(trt, major, opts))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(source)) or parser.num_errors:
        raise OnnxParseError(f"TensorRT {trt.__version__} could not parse {source.name}:\n"
                             f"{format_parser_errors(parser, onnx_model)}\n"
                             f"Check the ops against TensorRT's ONNX operator support list, or simplify the model "
                             f"(shape inference + constant folding) and try again.")
    if network.num_inputs != 1:
        raise ValueError(f"{source.name} has {network.num_inputs} inputs in TensorRT; trtlab builds single-input "
                         f"classifiers")

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(opts.workspace_mb) << 20)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # needed for per-layer engine inspection
    chw = tuple(int(d) for d in info.input_shape[1:])
    profile = builder.create_optimization_profile()
    profile.set_shape(info.input_name, (opts.min_batch, *chw), (opts.opt_batch, *chw), (opts.max_batch, *chw))
    config.add_optimization_profile(profile)

    cache_file = None
    if timing_cache:
        cache_file = Path(timing_cache) if not isinstance(timing_cache, bool) else folder / "timing.cache"
        previous = cache_file.read_bytes() if cache_file.is_file() else b""
        config.set_timing_cache(config.create_timing_cache(previous), False)

    calibrator = None
    if opts.weakly_typed:
        guard_nodes = []
        if opts.guards and opts.precision != "fp32":
            from trtlab.graph.precision import resolve_guard_nodes

            guard_nodes = resolve_guard_nodes(onnx_model, opts.guards)
        calibrator = _configure_weakly_typed_v10(trt, builder, config, network, onnx_model, opts, guard_nodes, info,
                                                 calibration, calib, folder, use_calibration_cache, progress)
    else:
        _configure_strongly_typed(trt, config, opts)

    if progress:
        log.info(f"{opts.precision}: building with TensorRT {trt.__version__} on {gpu.get('name')} "
              f"(batch {opts.min_batch}/{opts.opt_batch}/{opts.max_batch}) -> {engine_path}")
    started = time.time()
    try:
        serialized = builder.build_serialized_network(network, config)
    finally:
        if calibrator is not None:
            calibrator.free()
    seconds = time.time() - started
    if serialized is None:
        errors = "\n".join(f"  - {e}" for e in logger.errors[-10:]) or "  (TensorRT logged no error)"
        raise EngineBuildError(f"TensorRT {trt.__version__} could not build the {opts.precision} engine of "
                               f"{Path(onnx_path).name}:\n{errors}\nIf it ran out of memory, lower max_batch or "
                               f"workspace_mb; rerun with verbose=True for TensorRT's full log.")
    if cache_file is not None:
        atomic_write_bytes(cache_file, bytes(memoryview(config.get_timing_cache().serialize())))
    with atomic_path(engine_path, suffix=".engine") as tmp:
        with open(tmp, "wb") as fh:
            fh.write(memoryview(serialized))
    from trtlab.core.workspace import sha256_file

    sidecar = {
        "format": SIDECAR_FORMAT,
        "tensorrt_version": str(trt.__version__),
        "gpu_name": gpu.get("name"),
        "compute_capability": gpu.get("compute_capability"),
        "recipe": recipe,
        "recipe_hash": recipe_hash,
        "build_seconds": round(seconds, 2),
        "built_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "onnx": str(onnx_path),
        "onnx_sha256": info.sha256,
        "built_from": str(source),
        "input": {"name": info.input_name, "chw": list(chw),
                  "profile": [opts.min_batch, opts.opt_batch, opts.max_batch]},
        "engine_sha256": sha256_file(engine_path),
        "timing_cache": str(cache_file) if cache_file else None,
        "fp16_conversion": conversion.summary() if conversion else None,
        "calibration": calib["identity"] if calib else None,
        "rebuild_command": command,
    }
    atomic_write_json(sidecar_path(engine_path), sidecar)
    if progress:
        log.info(f"{opts.precision}: built in {seconds:.1f} s -> {engine_path}")
    return EngineBuild(engine_path, sidecar, False, seconds)


def network_creation_flags(trt, major: int, opts: BuildOptions) -> int:
    """create_network's flags: TensorRT 10 strongly typed unless the legacy weakly typed path was asked for;
    TensorRT 11 networks are always strongly typed (its STRONGLY_TYPED flag is deprecated and ignored).
    EXPLICIT_BATCH is never needed (deprecated and ignored since 10.0)."""
    if major == 10 and not opts.weakly_typed:
        return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return 0


def _strongly_typed_source(onnx_path, opts: BuildOptions, target: Path):
    """(ONNX file to parse, FP16Conversion or None) for a strongly typed build, with precision and guards
    expressed in the graph: FP16 variants become an FP16 graph with guarded nodes kept FP32; INT8 (Q/DQ) graphs
    keep their types, their guards must already be unquantized (the quantizer's guards), and '=fp16' guards get
    their node converted to FP16 with Casts. FP32 needs nothing: every node is FP32 already."""
    from trtlab.graph.precision import convert_to_fp16

    if opts.precision == "fp16":
        return target, convert_to_fp16(onnx_path, guards=opts.guards, output_path=target)
    if opts.precision != "int8" or not opts.guards:
        return Path(onnx_path), None
    import onnx

    from trtlab.graph.precision import resolve_guard_nodes

    model = onnx.load(str(onnx_path), load_external_data=False)
    guarded = resolve_guard_nodes(model, opts.guards)
    dequantized = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    quantized = [g.name for g in guarded if any(i in dequantized for n in model.graph.node if n.name == g.name
                                                for i in n.input)]
    if quantized:
        raise ValueError(f"guarded node(s) {quantized[:5]} are quantized (a DequantizeLinear feeds them) in "
                         f"{Path(onnx_path).name}; a strongly typed network runs them INT8 whatever the build says. "
                         f"Quantize with the same guards (notebook 01 / `python -m trtlab calibrate --guard ...`) so "
                         f"they get no Q/DQ, or on TensorRT 10 use weakly_typed=True (deprecated since 10.12)")
    fp16 = [g.name for g in guarded if g.precision == "fp16"]
    if not fp16:
        return Path(onnx_path), None  # fp32 guards: no Q/DQ means the node runs in the graph's FP32
    keep = [n.name for n in model.graph.node if n.name and n.name not in set(fp16)]
    return target, convert_to_fp16(model, guards=[f"node:{name}=fp16" for name in fp16], keep_fp32_nodes=keep,
                                   output_path=target)


def _configure_strongly_typed(trt, config, opts):
    """Strongly typed (TensorRT 10 default, TensorRT 11 always): types come from the graph, so the only precision
    knob left is TF32 for FP32 math. No BuilderFlag.FP16/INT8/OBEY_PRECISION_CONSTRAINTS: on a strongly typed
    network TensorRT forbids them (10.x) or no longer has them (11.x)."""
    if opts.precision == "fp32" and not opts.tf32:
        config.clear_flag(trt.BuilderFlag.TF32)


def _configure_weakly_typed_v10(trt, builder, config, network, onnx_model, opts, guard_nodes, info, calibration,
                                calib, folder, use_calibration_cache, progress):
    """TensorRT 10 legacy path (weakly_typed=True, int8-implicit): precision flags, guards as layer precision,
    the implicit INT8 calibrator. All deprecated since 10.12 (calibrators since 10.1) and removed in 11."""
    flag = trt.BuilderFlag
    calibrator = None
    if opts.precision == "fp32" and not opts.tf32:
        config.clear_flag(flag.TF32)
    elif opts.precision == "fp16":
        config.set_flag(flag.FP16)
    elif opts.precision == "int8":
        # Weakly typed explicit quantization: INT8 enables the Q/DQ-fused kernels, FP16 the fallback.
        config.set_flag(flag.INT8)
        if opts.fp16_fallback:
            config.set_flag(flag.FP16)
    elif opts.precision == "int8-implicit":
        from trtlab.backends.tensorrt.calibrator import check_calibration_cache, make_calibrator

        config.set_flag(flag.INT8)
        if opts.fp16_fallback:
            config.set_flag(flag.FP16)
        cache_path = folder / f"{Path(info.path).stem}.{opts.calibrator}.{calib['identity']['decode_cache']}.calib"
        if use_calibration_cache:
            check_calibration_cache(cache_path, calib["identity"])  # refuse a foreign cache before building
        calibrator = make_calibrator(trt, opts.calibrator, calibration, calib["indices"], opts.calibration_batch,
                                     cache_path, calib["identity"], use_cache=use_calibration_cache, progress=progress)
        config.int8_calibrator = calibrator
        # Calibration runs at one fixed shape: min=opt=max = the calibration batch.
        chw = tuple(int(d) for d in info.input_shape[1:])
        shape = (opts.calibration_batch, *chw)
        calib_profile = builder.create_optimization_profile()
        calib_profile.set_shape(info.input_name, shape, shape, shape)
        config.set_calibration_profile(calib_profile)
    if guard_nodes:
        matched = apply_layer_guards(trt, network, onnx_model, guard_nodes)
        config.set_flag(flag.OBEY_PRECISION_CONSTRAINTS)
        if progress:
            log.info(f"guards: {len(matched)} TensorRT layer(s) pinned "
                  f"({', '.join(sorted(matched)[:6])}{'…' if len(matched) > 6 else ''})")
    return calibrator


def apply_layer_guards(trt, network, onnx_model, guard_nodes) -> dict[str, str]:
    """TensorRT 10 legacy weakly typed path only: pin the layers that came from guarded ONNX nodes to the guard's
    precision (never on a strongly typed network, where TensorRT forbids layer precision and output types).

    The ONNX parser names a layer after its ONNX node and gives its output tensors the ONNX tensor names, so a
    layer belongs to a node when the names match or when it produces one of the node's outputs. Returns
    {layer name: precision}; raises ValueError naming guards that matched no layer.
    """
    by_name = {n.name: n for n in onnx_model.graph.node}
    wanted = {}
    for guard in guard_nodes:
        node = by_name.get(guard.name)
        wanted[guard.name] = (set(node.output) if node is not None else set(), guard.precision)
    dtype = {"fp32": trt.float32, "fp16": trt.float16}
    matched: dict[str, str] = {}
    hit_guards = set()
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        outputs = {layer.get_output(j).name for j in range(layer.num_outputs)}
        for guard_name, (node_outputs, precision) in wanted.items():
            if layer.name == guard_name or outputs & node_outputs:
                layer.precision = dtype[precision]
                for j in range(layer.num_outputs):
                    if layer.get_output(j).dtype in (trt.float32, trt.float16):
                        layer.set_output_type(j, dtype[precision])
                matched[layer.name] = precision
                hit_guards.add(guard_name)
    missing = sorted(set(wanted) - hit_guards)
    if missing:
        raise ValueError(f"guarded ONNX node(s) {missing} match no TensorRT layer (by name or output tensor); "
                         f"check the names with trtlab.inspect_classifier / Netron")
    return matched


def _device_info() -> dict:
    from trtlab.backends.cuda_runtime import device_info

    return device_info()


# ----------------------------------------------------------------------------------------------------------------
# Engine files
# ----------------------------------------------------------------------------------------------------------------
def check_engine_compatible(engine_path, tensorrt_version: str, gpu: dict) -> dict:
    """The engine's sidecar, after checking it was built by this TensorRT version on this GPU.

    Raises EngineCompatibilityError naming the field that differs and the command that rebuilds the engine.
    """
    engine_path = Path(engine_path)
    side = sidecar_path(engine_path)
    if not side.is_file():
        raise EngineCompatibilityError(
            f"engine {engine_path.name} has no sidecar {side.name}, so trtlab cannot tell which TensorRT and GPU "
            f"built it (engines only load where they were built); rebuild it with `python -m trtlab build --model "
            f"<model.onnx> --precision <fp32|fp16|int8>` or pass check_compatibility=False if you know it matches")
    sidecar = json.loads(side.read_text())
    command = sidecar.get("rebuild_command", "python -m trtlab build --model <model.onnx> --force")
    checks = (
        ("TensorRT version", sidecar.get("tensorrt_version"), str(tensorrt_version),
         "engines only load on the TensorRT version that built them"),
        ("GPU compute capability", sidecar.get("compute_capability"), gpu.get("compute_capability"),
         "engine kernels are compiled for one GPU architecture"),
        ("GPU", sidecar.get("gpu_name"), gpu.get("name"), "TensorRT tunes kernels for the GPU model that built them"),
    )
    for field_name, built, here, why in checks:
        if here is not None and built != here:
            raise EngineCompatibilityError(
                f"engine {engine_path.name} was built for {field_name} {built}, but this machine has {here}; "
                f"{why}. Rebuild it here with:\n  {command}")
    return sidecar


# ----------------------------------------------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------------------------------------------
class TrtRunner(Runner):
    """Runs a TensorRT engine (or builds one from an ONNX file first) behind the common Runner interface.

    Pinned host buffers and device buffers are sized for the profile's max batch once; each infer() copies the
    batch host→device, sets the input shape and tensor addresses, enqueues execute_async_v3 and copies the
    logits back, all on one cuda-python stream. The GPU time of the last execute (CUDA events) is kept in
    `last_gpu_ms`.
    """

    backend = "trt"

    def __init__(self, model_path, precision: str = "fp32", name: str | None = None, workspace=None,
                 calibration=None, build_options: dict | None = None, check_compatibility: bool = True,
                 device: int = 0):
        model_path = Path(model_path)
        super().__init__(name or f"trt:{model_path.name}" + (f":{precision}" if model_path.suffix == ".onnx" else ""))
        self.model_path = model_path
        self.precision = precision
        self.workspace = workspace
        self.calibration = calibration
        self.build_options = dict(build_options or {})
        self.check_compatibility = check_compatibility
        self.device = device
        self.engine_path: Path | None = None
        self.sidecar: dict = {}
        self.last_gpu_ms: float | None = None
        self._trt = self._runtime = self._engine = self._context = None
        self._stream = self._start = self._end = None
        self._buffers: dict = {}

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def activate_impl(self) -> None:
        from trtlab.backends import cuda_runtime as cuda_rt

        trt = self._trt = import_tensorrt()
        tensorrt_major(trt)
        if self.model_path.suffix == ".onnx":
            build = build_engine(self.model_path, self.precision, workspace=self.workspace,
                                 calibration=self.calibration, **self.build_options)
            self.engine_path = build.engine_path
        else:
            self.engine_path = self.model_path
        gpu = cuda_rt.device_info(self.device)
        if self.check_compatibility:
            self.sidecar = check_engine_compatible(self.engine_path, trt.__version__, gpu)
        elif sidecar_path(self.engine_path).is_file():
            self.sidecar = json.loads(sidecar_path(self.engine_path).read_text())
        self._logger = _make_logger(trt)
        self._runtime = trt.Runtime(self._logger)
        self._engine = self._runtime.deserialize_cuda_engine(self.engine_path.read_bytes())
        if self._engine is None:
            command = self.sidecar.get("rebuild_command", "python -m trtlab build --model <model.onnx> --force")
            raise EngineCompatibilityError(
                f"TensorRT {trt.__version__} could not deserialize {self.engine_path.name} "
                f"({'; '.join(self._logger.errors[-3:]) or 'no error text'}); rebuild it with:\n  {command}")
        self._context = self._engine.create_execution_context()
        self._discover_io()
        self._stream = cuda_rt.Stream()
        self._start, self._end = cuda_rt.Event(), cuda_rt.Event()
        self._allocate()

    def _discover_io(self) -> None:
        trt, engine = self._trt, self._engine
        inputs, outputs = [], []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(name)
        if len(inputs) != 1 or not outputs:
            raise ValueError(f"{self.engine_path.name}: expected one input and at least one output, got inputs "
                             f"{inputs} and outputs {outputs}")
        self.input_name, self.output_name = inputs[0], outputs[0]
        self._output_names = outputs
        shape = tuple(engine.get_tensor_shape(self.input_name))
        self._profile = [tuple(s) for s in engine.get_tensor_profile_shape(self.input_name, 0)]
        self.max_batch = int(self._profile[2][0])
        self.input_shape = ("batch", *shape[1:]) if shape[0] == -1 else shape
        self._dtypes = {n: np.dtype(trt.nptype(engine.get_tensor_dtype(n))) for n in inputs + outputs}

    def _allocate(self) -> None:
        from trtlab.backends.cuda_runtime import DeviceBuffer, PinnedBuffer

        context, name = self._context, self.input_name
        max_input = (self.max_batch, *self._profile[2][1:])
        context.set_input_shape(name, max_input)
        for tensor in [name, *self._output_names]:
            shape = tuple(context.get_tensor_shape(tensor))
            host = PinnedBuffer(shape, self._dtypes[tensor])
            device = DeviceBuffer(host.nbytes)
            self._buffers[tensor] = (host, device)
            context.set_tensor_address(tensor, device.ptr)

    def deactivate_impl(self) -> None:
        for host, device in self._buffers.values():
            host.free()
            device.free()
        self._buffers = {}
        for handle in (self._start, self._end, self._stream):
            if handle is not None:
                handle.close()
        self._start = self._end = self._stream = None
        self._context = self._engine = self._runtime = None

    # -- inference ---------------------------------------------------------------------------------------------
    def infer_impl(self, batch: np.ndarray) -> np.ndarray:
        chunks = [self._infer_chunk(batch[i: i + self.max_batch]) for i in range(0, len(batch), self.max_batch)]
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def _infer_chunk(self, batch: np.ndarray) -> np.ndarray:
        from trtlab.backends.cuda_runtime import Event

        n = len(batch)
        self._enqueue(batch)
        host_out, device_out = self._buffers[self.output_name]
        shape = tuple(self._context.get_tensor_shape(self.output_name))
        out = host_out.array.reshape(-1)[: int(np.prod(shape))].reshape(shape)
        device_out.copy_to_host(out, self._stream)
        self._stream.synchronize()
        self.last_gpu_ms = Event.elapsed_ms(self._start, self._end)
        return np.array(out[:n], dtype=np.float32, copy=True)

    def _enqueue(self, batch: np.ndarray) -> None:
        host_in, device_in = self._buffers[self.input_name]
        batch = batch.astype(self._dtypes[self.input_name], copy=False)
        staged = host_in.array.reshape(-1)[: batch.size].reshape(batch.shape)
        staged[...] = batch
        self._context.set_input_shape(self.input_name, tuple(batch.shape))
        device_in.copy_from_host(staged, self._stream)
        self._start.record(self._stream)
        if not self._context.execute_async_v3(self._stream.handle):
            raise RuntimeError(f"{self.name}: execute_async_v3 failed; see TensorRT's error above")
        self._end.record(self._stream)

    def time_execute(self, batch_size: int, iterations: int = 50, warmup: int = 10, seed: int = 0) -> list[float]:
        """GPU milliseconds of `iterations` executions at `batch_size` (CUDA events around execute_async_v3,
        copies excluded), after `warmup` untimed ones. Input values are random: this measures speed only."""
        from trtlab.backends.cuda_runtime import Event

        if not self.is_active:
            raise RuntimeError(f"runner {self.name} is not active; use `with runner:`")
        if batch_size > self.max_batch:
            raise ValueError(f"batch {batch_size} exceeds the engine's max batch {self.max_batch}; rebuild with "
                             f"max_batch >= {batch_size}")
        shape = (batch_size, *self.input_shape[1:])
        batch = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
        self._enqueue(batch)
        self._stream.synchronize()
        samples = []
        for i in range(warmup + iterations):
            self._start.record(self._stream)
            if not self._context.execute_async_v3(self._stream.handle):
                raise RuntimeError(f"{self.name}: execute_async_v3 failed")
            self._end.record(self._stream)
            ms = Event.elapsed_ms(self._start, self._end)
            if i >= warmup:
                samples.append(ms)
        return samples

    def describe(self) -> dict:
        trt = self._trt
        return {
            "backend": self.backend,
            "runner": self.name,
            "tensorrt": getattr(trt, "__version__", None),
            "engine": str(self.engine_path) if self.engine_path else None,
            "precision": self.sidecar.get("recipe", {}).get("precision", self.precision),
            "recipe_hash": self.sidecar.get("recipe_hash"),
            "gpu": self.sidecar.get("gpu_name"),
        }


# ----------------------------------------------------------------------------------------------------------------
# Engine inspection
# ----------------------------------------------------------------------------------------------------------------
_PRECISION_WORDS = (("int8", "INT8"), ("fp16", "FP16"), ("half", "FP16"), ("fp32", "FP32"), ("float", "FP32"),
                    ("int32", "INT32"), ("int64", "INT64"), ("bool", "BOOL"), ("fp8", "FP8"), ("bfloat16", "BF16"))
_COMPUTE_WORDS = ("convolution", "conv", "gemm", "matrixmultiply", "matmul", "fullyconnected")


def _tensor_precision(tensor: dict) -> str:
    """Precision of one inspector tensor entry: TRT <= 10 writes 'Format/Datatype' ("Row major linear FP32"),
    TRT 11 separate 'DataType' ("Float") and 'Format' fields."""
    text = " ".join(str(tensor.get(k, "")) for k in ("DataType", "Format/Datatype", "Format")).lower()
    text = text.replace("bfloat16", "bf16 ")
    for word, name in (("bf16", "BF16"),) + _PRECISION_WORDS:
        if word in text:
            return name
    return "?"


@dataclass
class EngineInspection:
    """Per-layer table of an engine and the counts that explain INT8 speed."""

    engine_path: str
    layers: object  # pandas.DataFrame: name, type, precision, inputs, outputs, tactic
    counts: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return dict(self.counts)


def parse_engine_information(info) -> EngineInspection:
    """Turn IEngineInspector.get_engine_information(LayerInformationFormat.JSON) output into a table.

    A layer's precision is the precision of its first input (its first output when it has none), as NVIDIA's
    TREx does; 'INT8 compute layers' counts convolution/GEMM/matmul layers that really read INT8 — when that
    is low in an INT8 engine, Q/DQ placement left the heavy layers in FP16/FP32 and INT8 cannot be faster.
    """
    import pandas as pd

    data = json.loads(info) if isinstance(info, (str, bytes)) else info
    layers = data.get("Layers", [])
    if layers and not isinstance(layers[0], dict):
        raise ValueError("the engine holds layer names only: it was built without ProfilingVerbosity.DETAILED; "
                         "rebuild it with trtlab (`python -m trtlab build ... --force`), which sets it")
    rows = []
    for layer in layers:
        inputs = layer.get("Inputs", []) or []
        outputs = layer.get("Outputs", []) or []
        first = inputs[0] if inputs else (outputs[0] if outputs else {})
        layer_type = layer.get("ParameterType") or layer.get("LayerType") or "?"
        rows.append({
            "name": layer.get("Name", "?"),
            "type": layer_type,
            "kernel": layer.get("LayerType", ""),
            "precision": _tensor_precision(first) if first else "?",
            "inputs": ", ".join(_tensor_precision(t) for t in inputs),
            "outputs": ", ".join(_tensor_precision(t) for t in outputs),
            "tactic": layer.get("TacticName", ""),
        })
    table = pd.DataFrame(rows, columns=["name", "type", "kernel", "precision", "inputs", "outputs", "tactic"])
    compute = table["type"].str.lower().str.replace(" ", "").apply(
        lambda t: any(w in t for w in _COMPUTE_WORDS)) if len(table) else table["type"]
    counts = {
        "layers": int(len(table)),
        "int8_layers": int((table["precision"] == "INT8").sum()) if len(table) else 0,
        "fp16_layers": int((table["precision"] == "FP16").sum()) if len(table) else 0,
        "fp32_layers": int((table["precision"] == "FP32").sum()) if len(table) else 0,
        "compute_layers": int(compute.sum()) if len(table) else 0,
        "int8_compute_layers": int((compute & (table["precision"] == "INT8")).sum()) if len(table) else 0,
    }
    io = data.get("I/O Tensors") or data.get("Bindings")
    if io is not None:
        counts["io_tensors"] = len(io)
    return EngineInspection("", table, counts)


def inspect_engine(engine_path, batch: int | None = None, check_compatibility: bool = True) -> EngineInspection:
    """Per-layer table (name, type, precision, formats, tactic) and INT8 counts of a built engine.

    The execution context is given the input shape (`batch`, default the profile's opt batch) so the inspector
    can report concrete formats for dynamic shapes.
    """
    runner = TrtRunner(engine_path, check_compatibility=check_compatibility)
    with runner:
        trt = runner._trt
        opt = runner._profile[1]
        runner._context.set_input_shape(runner.input_name, (batch or opt[0], *opt[1:]))
        inspector = runner._engine.create_engine_inspector()
        inspector.execution_context = runner._context
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    inspection = parse_engine_information(text)
    inspection.engine_path = str(engine_path)
    return inspection


# ----------------------------------------------------------------------------------------------------------------
# Benchmark
# ----------------------------------------------------------------------------------------------------------------
def latency_stats(samples_ms, batch_size: int) -> dict:
    """p50/p90/p99/mean latency (ms) and throughput (images/s at the p50 latency) of timing samples."""
    samples = np.asarray(list(samples_ms), dtype=np.float64)
    if samples.size == 0:
        raise ValueError("no timing samples")
    p50, p90, p99 = np.percentile(samples, [50, 90, 99])
    return {"batch": int(batch_size), "p50_ms": float(p50), "p90_ms": float(p90), "p99_ms": float(p99),
            "mean_ms": float(samples.mean()), "throughput_ips": float(batch_size / (p50 / 1000)) if p50 > 0 else np.nan,
            "samples": int(samples.size)}


def benchmark_engine(engine_path, batch_sizes=(1, 8, 32), iterations: int = 50, warmup: int = 10,
                     name: str | None = None) -> list[dict]:
    """GPU latency of an engine per batch size (CUDA events, copies excluded); batches above the engine's max
    batch are skipped with a note."""
    from trtlab.core.progress import progress_iter

    rows = []
    with TrtRunner(engine_path) as runner:
        variant = name or runner.sidecar.get("recipe", {}).get("precision", Path(engine_path).stem)
        for batch in progress_iter(list(batch_sizes), desc=f"benchmark {variant}", unit="batch"):
            if batch > runner.max_batch:
                log.info(f"{variant}: skipping batch {batch} (engine max batch {runner.max_batch})")
                continue
            stats = latency_stats(runner.time_execute(batch, iterations, warmup), batch)
            rows.append({"variant": variant, "backend": "trt", "timer": "cuda events", **stats})
    return rows


def benchmark_runner(runner: Runner, batch_sizes=(1, 8), iterations: int = 20, warmup: int = 3,
                     name: str | None = None, seed: int = 0) -> list[dict]:
    """Host wall-clock latency of any Runner's infer() per batch size (for backends without CUDA events,
    e.g. ONNX Runtime on CPU). Input values are random: this measures speed only."""
    from trtlab.core.progress import progress_iter

    rows = []
    rng = np.random.default_rng(seed)
    with runner:
        shape = tuple(d for d in runner.input_shape[1:])
        for batch in progress_iter(list(batch_sizes), desc=f"benchmark {name or runner.name}", unit="batch"):
            data = rng.standard_normal((batch, *shape), dtype=np.float32)
            samples = []
            for i in range(warmup + iterations):
                start = time.perf_counter()
                runner.infer(data)
                if i >= warmup:
                    samples.append((time.perf_counter() - start) * 1000)
            rows.append({"variant": name or runner.name, "backend": runner.backend, "timer": "wall clock",
                         **latency_stats(samples, batch)})
    return rows


def latency_table(rows, reference: str = "fp16", compare: str = "int8"):
    """Benchmark rows → one row per (variant, batch) with p50/p90/p99 and throughput. `table.attrs` holds
    'side_by_side' (batch × variant p50, plus the `compare`/`reference` p50 ratio when both variants exist; below
    1: `compare` is faster) and that ratio alone as 'ratio'."""
    import pandas as pd

    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = table.set_index(["variant", "batch"])[["backend", "timer", "p50_ms", "p90_ms", "p99_ms", "mean_ms",
                                                    "throughput_ips"]]
    variants = table.index.get_level_values(0)
    side_by_side = table["p50_ms"].unstack(0)[list(dict.fromkeys(variants))]  # batch × variant p50 (ms)
    side_by_side.columns = [f"{v} p50 ms" for v in side_by_side.columns]
    if reference in variants and compare in variants:
        ratio = (table.loc[compare, "p50_ms"] / table.loc[reference, "p50_ms"]).rename(f"{compare}/{reference} p50")
        table.attrs["ratio"] = ratio.dropna()
        side_by_side[ratio.name] = ratio
    table.attrs["side_by_side"] = side_by_side
    return table


# ----------------------------------------------------------------------------------------------------------------
# Notebook entry point: build the variants on the best backend available
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class EngineSet:
    """The variants of one model, as engines (TensorRT) or ONNX files (ONNX Runtime fallback)."""

    backend: str
    model: Path
    variants: dict  # name -> path (engine or ONNX)
    notes: list = field(default_factory=list)

    def inspection(self):
        """Per-variant layer-precision counts: TensorRT's engine inspector, or the ONNX graph on ONNX Runtime."""
        import pandas as pd

        rows = []
        for name, path in self.variants.items():
            if self.backend == "trt":
                rows.append({"variant": name, **inspect_engine(path).counts})
            else:
                from trtlab.graph.precision import precision_summary

                counts = precision_summary(path)
                rows.append({"variant": name, "source": "ONNX graph (no TensorRT here)",
                             **{f"{k}_nodes": v for k, v in sorted(counts.items())}})
        table = pd.DataFrame(rows).set_index("variant")
        counts = [c for c in table.columns if c.endswith(("_nodes", "_layers"))]
        table[counts] = table[counts].fillna(0).astype(int)
        return table

    def layers(self, variant: str):
        """Per-layer table of one variant: TensorRT's engine inspector (name, type, precision, formats, tactic),
        or, on ONNX Runtime, the ONNX graph's nodes with their precision."""
        if variant not in self.variants:
            raise KeyError(f"no variant {variant!r}; built: {', '.join(self.variants)}")
        if self.backend == "trt":
            return inspect_engine(self.variants[variant]).layers
        from trtlab.graph.precision import node_precision_table

        return node_precision_table(self.variants[variant])

    def benchmark(self, batch_sizes=(1, 8), iterations: int = 20, warmup: int = 3):
        """Latency p50/p90/p99 and throughput per variant and batch size, INT8 next to FP16."""
        rows = []
        for name, path in self.variants.items():
            if self.backend == "trt":
                rows += benchmark_engine(path, batch_sizes, iterations, warmup, name=name)
            else:
                from trtlab.backends.ort import OrtRunner

                rows += benchmark_runner(OrtRunner(path), batch_sizes, iterations, warmup, name=name)
        return latency_table(rows)


def find_qdq_model(model_path, workspace=None) -> Path | None:
    """The newest Q/DQ ONNX of `model_path` made by trtlab's quantizer: `<workspace>/variants/<stem>-*/int8*/
    model.onnx` (trtlab.quantization.variants.build_variant), or `<stem>*.onnx` with Q/DQ beside the model."""
    from trtlab.core.workspace import workspace_dir

    stem = Path(model_path).stem
    root = workspace_dir(workspace)
    found = list((root / "variants").glob(f"{stem}-*/int8*/model.onnx"))
    found += [p for folder in {Path(model_path).parent, root / "models"} if folder.is_dir()
              for p in folder.glob(f"{stem}*.onnx") if p.resolve() != Path(model_path).resolve()]
    found = [p for p in sorted(found, key=lambda p: p.stat().st_mtime, reverse=True) if has_qdq(p)]
    return found[0] if found else None


def build_engines(model=None, precisions=("fp32", "fp16", "int8"), int8_model=None, backend: str = "auto",
                  workspace=None, calibration=None, **options) -> EngineSet:
    """Build `precisions` of `model` (default: the demo EfficientNet-Lite0) on the best backend available.

    With TensorRT: one engine per precision ('int8' from `int8_model` or the newest Q/DQ ONNX of the model in
    the workspace; 'int8-implicit' on TensorRT 10 with `calibration`). Without it, says so in one line and
    returns the ONNX variants ONNX Runtime runs instead (FP16 converted in the graph by trtlab.graph.precision).
    """
    from trtlab.backends import tensorrt_available
    from trtlab.core.workspace import workspace_dir

    if model is None:
        from trtlab.data.demo import export_demo_model

        model = export_demo_model("efficientnet-lite0", workspace)
    model = Path(model)
    use_trt = backend == "trt" or (backend == "auto" and tensorrt_available())
    notes = []
    if backend == "trt" and not tensorrt_available():
        import_tensorrt()  # raises with the reason and the fix
    if not use_trt:
        reason = "TensorRT does not import here" if backend == "auto" else "backend='ort' requested"
        log.info(f"{reason}: no engines to build; continuing on ONNX Runtime with the ONNX variants.")
    variants: dict[str, Path] = {}
    for precision in precisions:
        if precision == "int8":
            source = Path(int8_model) if int8_model else find_qdq_model(model, workspace)
            if source is None:
                notes.append(f"int8: no Q/DQ ONNX of {model.name} found in {workspace_dir(workspace) / 'models'}; "
                             f"run notebook 01 (calibrate + quantize) first")
                log.info(f"{notes[-1]}")
                continue
        else:
            source = model
        if use_trt:
            if precision == "int8-implicit" and calibration is None:
                notes.append("int8-implicit: skipped, pass calibration=<DecodeCache> to calibrate with TensorRT")
                log.info(f"{notes[-1]}")
                continue
            variants[precision] = build_engine(source, precision, workspace=workspace, calibration=calibration,
                                               **options).engine_path
        elif precision == "fp16":
            from trtlab.graph.precision import convert_to_fp16

            target = workspace_dir(workspace) / "models" / f"{model.stem}.fp16.onnx"
            if not target.is_file() or target.stat().st_mtime < model.stat().st_mtime:
                convert_to_fp16(model, guards=options.get("guards", ()), output_path=target)
            variants[precision] = target
        elif precision == "int8-implicit":
            notes.append("int8-implicit: needs TensorRT 10 (TensorRT's own calibrator); skipped on ONNX Runtime")
        else:
            variants[precision] = source
    return EngineSet("trt" if use_trt else "ort", model, variants, notes)
