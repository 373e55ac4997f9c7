"""Engine builds for TensorRT 10.x and 11.x from an ONNX graph a variant already made.

The default network is strongly typed (TensorRT 10.x: NetworkDefinitionCreationFlag.STRONGLY_TYPED; 11.x: always,
the flag is deprecated and ignored), so every layer runs in the type its tensors have in the graph: the FP32
model builds an FP32 engine, the FP16 variant's graph (trtlab.graph.precision, guards already in it) an FP16 one,
a Q/DQ variant an INT8 one. Nothing here converts a graph; a precision the graph does not carry is refused.
TensorRT forbids precision constraints on a strongly typed network ("Setting layer precision and layer output
types is not allowed", NetworkDefinitionCreationFlag docs); the only precision knob left is TF32, which trtlab
clears unless asked (so FP32 compute — an FP32 variant, guard or float path — is FP32). The legacy weakly typed
path (TensorRT 10 only) lives in trtlab.backends.tensorrt.legacy.

==================  ================================================  ==========================================
engine              TensorRT 10.x                                     TensorRT 11.x
==================  ================================================  ==========================================
fp32 / fp16 / int8  strongly typed: the variant's FP32 / FP16 / Q/DQ  same (no STRONGLY_TYPED flag needed)
                    graph; TF32 cleared unless tf32=True
legacy 10.x         weakly_typed=True: BuilderFlag.FP16 / INT8 (+FP16  refused (removed in 11)
                    fallback), guards → layer.precision +
                    set_output_type + OBEY_PRECISION_CONSTRAINTS
int8-implicit       weakly typed: BuilderFlag.INT8 + the calibrator    refused with the explicit path explained
                    passed in + set_calibration_profile
==================  ================================================  ==========================================

Written against NVIDIA's documentation; not run against a real TensorRT builder on trtlab's development machines.
tests/test_trt_real_bindings.py runs these paths against the REAL bindings' API of the oldest and newest supported
10.x and 11.x (recording every name and call), over recording builder objects (tests/fake_tensorrt).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import time
from dataclasses import dataclass
from pathlib import Path

from trtlab.backends.tensorrt.loader import (EngineBuildError, EngineCompatibilityError, OnnxParseError,
                                             format_parser_errors, implicit_int8_unsupported, import_tensorrt,
                                             log, make_logger, tensorrt_major)
from trtlab.backends.tensorrt.options import (SIDECAR_FORMAT, BuildOptions, EngineBuild, EngineTarget,
                                              check_engine_compatible,
                                              check_graph_precision, default_rebuild_command, graph_facts,
                                              sidecar_path)
from trtlab.backends.tensorrt.readiness import create_or_explain, gpu_for_tensorrt
from trtlab.core.errors import UserValueError


@dataclass
class _Plan:
    """One build, decided before TensorRT is touched: options, graph facts, identity and where the engine goes."""

    source: Path
    opts: BuildOptions
    info: object  # trtlab.graph.classifier.ModelInfo
    facts: object  # options.GraphFacts
    onnx_model: object
    recipe_hash: str
    identity: object  # core.identity.Identity: graph sha256, build options, variant, calibration
    engine_path: Path
    engines_root: Path  # <workspace>/engines: the shared timing cache lives there


def build_engine(onnx_path, precision: str | None = None, output: str | os.PathLike | None = None, *,
                 target: EngineTarget | None = None, options: BuildOptions | None = None, workspace=None,
                 calibrator=None, timing_cache: bool | str | os.PathLike = True, force: bool = False,
                 gpu: dict | None = None, verbose: bool = False, progress: bool = True, **shortcuts) -> EngineBuild:
    """Build a TensorRT engine from the ONNX graph `onnx_path` (or reuse the one built with the same recipe).

    precision: None (the graph's own: 'int8' for a Q/DQ graph, 'fp16' for an FP16 graph, else 'fp32'), or one of
    'fp32', 'fp16', 'int8' (checked against the graph), or 'int8-implicit' (TensorRT 10 only: the FP32 graph
    calibrated by `calibrator`, from trtlab.quantization.tensorrt_calibrator). `target` (EngineTarget: output,
    name, folder, variant, rebuild_command) says where the engine goes and what graph it is; `options`
    (BuildOptions: min/opt/max_batch, workspace_mb, guards (legacy only), fp16_fallback, weakly_typed, tf32) what
    changes the engine. The fields of both are also taken as keywords (`build_engine(path, max_batch=8,
    name="x")`); each field is merged once (merge_build_arguments): keyword > the object's field > default, so
    options=BuildOptions(precision='fp32') asks for FP32 as precision='fp32' does. The engine gets a JSON sidecar;
    the timing cache `<workspace>/engines/timing.cache` is read before and merged back after every build, under a
    file lock (two kernels may build at once).
    """
    target, build_fields = merge_build_arguments(precision, output, target, options, shortcuts)
    precision = build_fields.pop("precision")
    trt = import_tensorrt()
    major = tensorrt_major(trt)
    gpu = dict(gpu) if gpu is not None else gpu_for_tensorrt(trt)  # no GPU, an old driver: one line, now
    plan = plan_build(trt, major, onnx_path, precision, target=target, workspace=workspace, calibrator=calibrator,
                      options=build_fields)
    command = target.rebuild_command or default_rebuild_command(onnx_path, plan.opts)
    if not force:
        reused = _reusable(plan, trt, gpu, progress)
        if reused is not None:
            return reused
    logger = make_logger(trt, verbose)
    builder = create_or_explain(trt, trt.Builder, "builder", logger)  # stub libraries: one line, not nullptr
    network, parser = _parse(trt, major, builder, logger, plan)
    config, cache_file, cache_read = _configure(trt, builder, network, plan, calibrator, timing_cache, progress)
    if progress:
        log.info(f"{plan.engine_path.stem}: building with TensorRT {trt.__version__} on {gpu.get('name')} "
                 f"(batch {plan.opts.min_batch}/{plan.opts.opt_batch}/{plan.opts.max_batch})")
    started = time.time()
    try:
        serialized = builder.build_serialized_network(network, config)
    finally:
        if calibrator is not None and hasattr(calibrator, "free"):
            calibrator.free()
    seconds = time.time() - started
    if serialized is None:
        errors = "\n".join(f"  - {e}" for e in logger.errors[-10:]) or "  (TensorRT logged no error)"
        raise EngineBuildError(f"TensorRT {trt.__version__} could not build the {plan.opts.precision} engine of "
                               f"{plan.source.name}:\n{errors}\nIf it ran out of memory, lower max_batch or "
                               f"workspace_mb; rerun with verbose=True for TensorRT's full log.")
    if cache_file is not None:
        from trtlab.backends.tensorrt.timing_cache import save_timing_cache

        save_timing_cache(config, cache_file, cache_read)
    sidecar = _write_engine(plan, serialized, trt, gpu, seconds, cache_file, command, calibrator)
    if progress:
        log.info(f"{plan.engine_path.stem}: built in {seconds:.1f} s -> {plan.engine_path}")
    return EngineBuild(plan.engine_path, sidecar, False, seconds)


def merge_build_arguments(precision, output, target: EngineTarget | None, options: BuildOptions | None,
                          shortcuts: dict) -> tuple[EngineTarget, dict]:
    """build_engine's arguments → (EngineTarget, the BuildOptions fields), by one rule for every field: a keyword
    given to build_engine (`precision`, `output` or a field's name) > that field of `target` / `options` > the
    field's default. precision None (BuildOptions' default) means the graph's own; 'fp32' is a choice like any
    other, checked against the graph."""
    target_fields = [f.name for f in dataclasses.fields(EngineTarget)]
    option_fields = [f.name for f in dataclasses.fields(BuildOptions)]
    unknown = sorted(set(shortcuts) - set(target_fields) - set(option_fields))
    if unknown:
        raise UserValueError(f"build_engine got unknown keyword(s) {', '.join(unknown)}",
                             f"use the fields of EngineTarget ({', '.join(target_fields)}) or BuildOptions "
                             f"({', '.join(option_fields)})")
    given = {**shortcuts, **{k: v for k, v in (("precision", precision), ("output", output)) if v is not None}}
    target = target if target is not None else EngineTarget()
    options = options if options is not None else BuildOptions()
    # getattr, not dataclasses.asdict: asdict would turn the parsed Guard values into plain dicts
    merged_target = {name: given.get(name, getattr(target, name)) for name in target_fields}
    merged_options = {name: given.get(name, getattr(options, name)) for name in option_fields}
    return EngineTarget(**merged_target), merged_options


def plan_build(trt, major, onnx_path, precision, *, target: EngineTarget, workspace, calibrator,
               options: dict) -> _Plan:
    """Every check that needs no builder: precision against the graph and the TensorRT version, the identity
    (graph sha256, options, variant, calibration) and the engine's file name."""
    import onnx

    from trtlab.core.identity import Identity
    from trtlab.core.workspace import workspace_dir
    from trtlab.graph.classifier import inspect_classifier

    source = Path(onnx_path)
    info = inspect_classifier(source)
    onnx_model = onnx.load(str(source), load_external_data=False)
    facts = graph_facts(onnx_model)
    opts = BuildOptions(precision=precision or facts.precision, **options)
    if not info.dynamic_batch:
        fixed = int(info.input_shape[0])  # a fixed-batch model admits one shape only
        opts.min_batch = opts.opt_batch = opts.max_batch = fixed
    _check_version_path(trt, major, opts, calibrator)
    check_graph_precision(source, facts, opts, major)
    variant, output = target.variant, target.output
    implicit = calibrator is not None and opts.precision == "int8-implicit"
    identity = Identity(model_sha256=info.sha256, recipe=opts.recipe(),
                        variant={"label": variant.get("label"), "key": variant.get("key")} if variant else None,
                        calibration=calibration_identity(calibrator, info.sha256) if implicit else None)
    recipe_hash = identity.digest(12)
    engines_root = workspace_dir(workspace) / "engines"
    folder = Path(target.folder) if target.folder is not None else engines_root
    stem = target.name or (variant or {}).get("label") or source.stem
    engine_path = Path(output) if output is not None else folder / f"{stem}.{opts.precision}.{recipe_hash}.engine"
    return _Plan(source, opts, info, facts, onnx_model, recipe_hash, identity, engine_path, engines_root)


def _check_version_path(trt, major, opts: BuildOptions, calibrator) -> None:
    if opts.precision == "int8-implicit" and major >= 11:
        raise implicit_int8_unsupported(trt.__version__)
    if opts.weakly_typed and major >= 11:
        raise UserValueError(f"weakly_typed=True needs TensorRT 10: TensorRT {trt.__version__} builds strongly typed "
                             f"networks only (BuilderFlag.FP16/INT8 and layer precision constraints were removed)",
                             "drop weakly_typed; trtlab expresses precision and guards in the variant's graph")
    if opts.guards and not opts.weakly_typed:
        raise UserValueError(f"guards {list(opts.guards)} given to a strongly typed build, where the graph's types "
                             f"are the engine's types",
                             "build the variant with those guards (Recipe(guards=...)) and pass its graph; guards "
                             "as layer precision exist only on TensorRT 10's weakly_typed=True path")
    if opts.precision == "int8-implicit" and calibrator is None:
        raise UserValueError("precision='int8-implicit' needs a TensorRT calibrator",
                             "pass calibrator=trtlab.quantization.tensorrt_calibrator.tensorrt_calibrator(...) "
                             "(trtlab.build_engines does this)")


def calibration_identity(calibrator, model_sha256: str) -> dict:
    """What the implicit calibration depends on (the calibrator's cache metadata), after checking it was made
    for this graph."""
    identity = dict(getattr(calibrator, "identity", None) or {})
    if identity.get("model_sha256") not in (None, model_sha256):
        raise UserValueError(f"the calibrator was made for model sha256 {str(identity['model_sha256'])[:12]}…, not "
                             f"{model_sha256[:12]}…", "make the calibrator for the graph being built")
    return identity


def _reusable(plan: _Plan, trt, gpu, progress) -> EngineBuild | None:
    from trtlab.core.workspace import files_differ, read_json_checked, set_aside

    if not (plan.engine_path.is_file() and sidecar_path(plan.engine_path).is_file()):
        return None
    # trtlab's own engine and sidecar: a damaged sidecar, or engine bytes other than those it recorded (cut short
    # by a killed kernel or a full disk), are set aside (named) and the engine is built again.
    recorded = read_json_checked(sidecar_path(plan.engine_path))
    if recorded is None:
        return None
    if recorded.get("engine_sha256"):
        changed = files_differ(plan.engine_path.parent, {plan.engine_path.name: recorded["engine_sha256"]})
        if changed:
            set_aside(plan.engine_path, changed[plan.engine_path.name])
            return None
    try:
        sidecar = check_engine_compatible(plan.engine_path, trt.__version__, gpu)
    except EngineCompatibilityError as exc:
        if progress:
            log.info(f"{plan.engine_path.stem}: rebuilding: {exc.args[0].splitlines()[0]}")
        return None
    if sidecar.get("recipe_hash") != plan.recipe_hash:
        return None
    if progress:
        log.info(f"{plan.engine_path.stem}: reusing {plan.engine_path} (same graph, recipe, TensorRT and GPU)")
    return EngineBuild(plan.engine_path, sidecar, True, 0.0)


def network_creation_flags(trt, major: int, opts: BuildOptions) -> int:
    """create_network's flags: TensorRT 10 strongly typed unless the legacy weakly typed path was asked for;
    TensorRT 11 networks are always strongly typed (its STRONGLY_TYPED flag is deprecated and ignored).
    EXPLICIT_BATCH is never needed (deprecated and ignored since 10.0)."""
    if major == 10 and not opts.weakly_typed:
        return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return 0


def _parse(trt, major, builder, logger, plan: _Plan):
    network = builder.create_network(network_creation_flags(trt, major, plan.opts))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(plan.source)) or parser.num_errors:
        raise OnnxParseError(f"TensorRT {trt.__version__} could not parse {plan.source.name}:\n"
                             f"{format_parser_errors(parser, plan.onnx_model)}\n"
                             f"Check the ops against TensorRT's ONNX operator support list, or simplify the model "
                             f"(shape inference + constant folding) and try again.")
    if network.num_inputs != 1:
        raise UserValueError(f"{plan.source.name} has {network.num_inputs} inputs in TensorRT",
                             "trtlab builds single-input classifiers")
    return network, parser  # the parser owns state the network refers to: keep it alive until the build


def _configure(trt, builder, network, plan: _Plan, calibrator, timing_cache, progress):
    """The builder config: memory pool, DETAILED profiling (for the inspector), the batch profile, the timing
    cache, TF32, and on the legacy path its flags, calibrator and layer guards."""
    opts, info = plan.opts, plan.info
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(opts.workspace_mb) << 20)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # needed for per-layer engine inspection
    chw = tuple(int(d) for d in info.input_shape[1:])
    profile = builder.create_optimization_profile()
    profile.set_shape(info.input_name, (opts.min_batch, *chw), (opts.opt_batch, *chw), (opts.max_batch, *chw))
    config.add_optimization_profile(profile)
    cache_file, cache_read = None, b""
    if timing_cache:
        from trtlab.backends.tensorrt.timing_cache import load_timing_cache

        cache_file = Path(timing_cache) if not isinstance(timing_cache, bool) else plan.engines_root / "timing.cache"
        cache_read = load_timing_cache(config, cache_file)
    if not opts.tf32:
        # TF32 is on by default on 10.x and 11.x and applies to FP32 inner products: cleared, FP32 means FP32.
        config.clear_flag(trt.BuilderFlag.TF32)
    if opts.weakly_typed:
        from trtlab.backends.tensorrt.legacy import configure_weakly_typed

        configure_weakly_typed(trt, builder, config, network, plan.onnx_model, opts, info, calibrator, progress)
    return config, cache_file, cache_read


def tf32_record(plan: _Plan) -> dict:
    """What the sidecar says about TF32: cleared (FP32 compute is FP32) or allowed, and how much FP32 compute the
    graph keeps (an FP32 variant, FP32 guards, an FP32 float path)."""
    count = len(plan.facts.fp32_compute_nodes)
    if plan.opts.tf32:
        note = (f"TF32 allowed (tf32=True): the {count} FP32 convolution/GEMM node(s) may compute in TF32 "
                f"(10-bit mantissa inputs) on Ampere and newer") if count else "TF32 allowed; no FP32 weighted node"
    else:
        note = (f"TF32 cleared: the {count} FP32 convolution/GEMM node(s) compute in true FP32") if count \
            else "TF32 cleared; no FP32 weighted node in the graph"
    return {"allowed": bool(plan.opts.tf32), "fp32_compute_nodes": count, "note": note}


def _write_engine(plan: _Plan, serialized, trt, gpu, seconds, cache_file, command, calibrator) -> dict:
    from trtlab.core.workspace import atomic_path, atomic_write_json, sha256_file

    with atomic_path(plan.engine_path, suffix=".engine") as tmp:
        with open(tmp, "wb") as fh:
            fh.write(memoryview(serialized))
    opts = plan.opts
    sidecar = {
        "format": SIDECAR_FORMAT,
        "tensorrt_version": str(trt.__version__),
        "gpu_name": gpu.get("name"),
        "compute_capability": gpu.get("compute_capability"),
        "recipe": opts.recipe(),
        "recipe_hash": plan.recipe_hash,
        "variant": plan.identity.variant,
        "build_seconds": round(seconds, 2),
        "built_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "onnx": str(plan.source),
        "onnx_sha256": plan.info.sha256,
        "graph": plan.facts.describe(),
        "network": "weakly typed (legacy TensorRT 10)" if opts.weakly_typed else "strongly typed",
        "tf32": tf32_record(plan),
        "input": {"name": plan.info.input_name, "chw": [int(d) for d in plan.info.input_shape[1:]],
                  "profile": [opts.min_batch, opts.opt_batch, opts.max_batch]},
        "engine_sha256": sha256_file(plan.engine_path),
        "timing_cache": str(cache_file) if cache_file else None,
        "calibration": plan.identity.calibration,
        "calibration_batches": getattr(calibrator, "batches_served", None) if calibrator is not None else None,
        "rebuild_command": command,
    }
    atomic_write_json(sidecar_path(plan.engine_path), sidecar)
    return sidecar
