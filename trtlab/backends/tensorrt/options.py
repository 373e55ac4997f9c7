"""What an engine is: the build options, the facts of the ONNX graph it is built from, its file and sidecar.

The graph decides the precision on a strongly typed network (TensorRT 11 always, trtlab's 10.x default): an FP32
graph builds an FP32 engine, the FP16 variant's graph an FP16 one, a Q/DQ graph an INT8 one. The facts read here
(`graph_facts`) let the builder refuse a precision the graph does not have, and clear TF32 where FP32 compute
remains (an FP32 guard means FP32, not TF32).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trtlab.backends.tensorrt.loader import EngineCompatibilityError
from trtlab.core.errors import UserValueError

PRECISIONS = ("fp32", "fp16", "int8", "int8-implicit")
SIDECAR_FORMAT = 2  # 2: variant label/key, graph precision and the TF32 decision recorded
WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")  # the ops TF32 (and INT8) tensor-core math applies to


@dataclass
class BuildOptions:
    """Everything besides the ONNX graph that changes an engine; hashed into its file name, kept in its sidecar."""

    #: None: the graph's own (build_engine resolves it: 'int8' for a Q/DQ graph, 'fp16' for an FP16 graph, else
    #: 'fp32'); a named precision is checked against the graph.
    precision: str | None = None
    min_batch: int = 1
    opt_batch: int = 32
    max_batch: int = 64
    workspace_mb: int = 2048
    #: TensorRT 10 legacy weakly typed path only: guards as layer precision + OBEY_PRECISION_CONSTRAINTS. On a
    #: strongly typed network guards live in the graph (the variant's recipe), so they are refused here.
    guards: tuple = ()
    #: Legacy weakly typed INT8 builds (TensorRT 10 only): also set BuilderFlag.FP16, so layers without Q/DQ (or
    #: calibration) may run FP16 rather than FP32. A strongly typed build runs them in the graph's type instead.
    fp16_fallback: bool = True
    #: TensorRT 10 only, legacy: a weakly typed network with BuilderFlag.FP16/INT8 (deprecated since TensorRT 10.12,
    #: removed in 11). 'int8-implicit' implies it.
    weakly_typed: bool = False
    #: TF32 tensor-core math for FP32 layers is on by default in TensorRT 10 and 11; trtlab clears it so FP32 (an
    #: FP32 variant, an FP32 guard, an FP32 float path) means FP32. tf32=True allows it, and the sidecar says so.
    tf32: bool = False

    def __post_init__(self):
        if self.precision is not None and self.precision not in PRECISIONS:
            raise UserValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}",
                                 "choose one of them")
        if not (1 <= self.min_batch <= self.opt_batch <= self.max_batch):
            raise UserValueError(f"batch profile {self.min_batch}/{self.opt_batch}/{self.max_batch} is impossible",
                                 "use 1 <= min_batch <= opt_batch <= max_batch")
        from trtlab.graph.guards import parse_guards

        self.guards = parse_guards(self.guards)  # build_engine(guards=...) is an edge: texts are parsed here, once
        if self.precision == "int8-implicit":
            self.weakly_typed = True  # TensorRT's calibrators need BuilderFlag.INT8, i.e. a weakly typed network

    def recipe(self) -> dict:
        recipe = asdict(self)
        recipe["guards"] = [str(g) for g in self.guards]
        if not (self.weakly_typed and self.precision in ("int8", "int8-implicit")):
            recipe.pop("fp16_fallback")  # only the legacy weakly typed INT8 path reads it
        return recipe


@dataclass(frozen=True)
class EngineTarget:
    """Where an engine goes and what it is: `output` (an explicit file), else `folder` (default
    `<workspace>/engines/`) and `name` (default: the variant's label, else the graph's stem); `variant` ({"label",
    "key", "identity"}) names the graph (into the engine's identity and sidecar); `rebuild_command` goes into the
    sidecar (default: a build_engine call)."""

    output: object = None
    name: str | None = None
    folder: object = None
    variant: dict | None = None
    rebuild_command: str | None = None


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


# ----------------------------------------------------------------------------------------------------------------
# Facts of the ONNX graph
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class GraphFacts:
    """What the builder needs to know about an ONNX graph: the precision it carries and how its weighted ops
    compute (INT8 when an input is dequantized, else the float type of their data input)."""

    precision: str  # 'int8' (has Q/DQ), 'fp16' (FP16 weights or Casts to FP16), else 'fp32'
    weighted: dict = field(default_factory=dict)  # weighted node name → 'INT8' | 'FP16' | 'FP32' | '?'

    @property
    def fp32_compute_nodes(self) -> list[str]:
        """Weighted nodes computing in FP32: on a strongly typed network they run FP32 (or TF32 unless cleared)."""
        return [name for name, kind in self.weighted.items() if kind == "FP32"]

    def describe(self) -> dict:
        fp32 = self.fp32_compute_nodes
        counts = {kind: list(self.weighted.values()).count(kind) for kind in dict.fromkeys(self.weighted.values())}
        return {"precision": self.precision, "weighted_ops": counts, "fp32_compute_nodes": len(fp32),
                "fp32_compute_examples": fp32[:5]}


def graph_facts(onnx_model) -> GraphFacts:
    """The precision an ONNX graph carries and the compute type of each weighted op (Conv, ConvTranspose, Gemm,
    MatMul): INT8 when one of its inputs comes from a DequantizeLinear, else its data input's float type."""
    import onnx
    from onnx import TensorProto

    nodes = list(onnx_model.graph.node)
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in nodes):
        precision = "int8"
    elif any(i.data_type == TensorProto.FLOAT16 for i in onnx_model.graph.initializer) or any(
            n.op_type == "Cast" and any(a.name == "to" and a.i == TensorProto.FLOAT16 for a in n.attribute)
            for n in nodes):
        precision = "fp16"
    else:
        precision = "fp32"
    types = {i.name: i.data_type for i in onnx_model.graph.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(onnx_model)
    except Exception:  # noqa: BLE001 - a graph shape inference cannot type still builds; fall back to initializers
        inferred = onnx_model
    for value in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        types.setdefault(value.name, value.type.tensor_type.elem_type)
    dequantized = {o for n in nodes if n.op_type == "DequantizeLinear" for o in n.output}
    names = {TensorProto.FLOAT: "FP32", TensorProto.FLOAT16: "FP16", TensorProto.BFLOAT16: "BF16"}
    weighted = {}
    for index, node in enumerate(nodes):
        if node.op_type not in WEIGHTED_OPS:
            continue
        key = node.name or f"#{index} {node.op_type}"
        if any(i in dequantized for i in node.input):
            weighted[key] = "INT8"
            continue
        data_type = types.get(node.input[0]) or (types.get(node.input[1]) if len(node.input) > 1 else None)
        weighted[key] = names.get(data_type, "?")
    return GraphFacts(precision, weighted)


def check_graph_precision(path, facts: GraphFacts, opts: BuildOptions, major: int) -> None:
    """Refuse a precision the graph does not carry, before anything is built (strongly typed networks run the
    graph's types; the legacy weakly typed path takes an FP32 graph for fp16/int8-implicit and a Q/DQ graph for
    int8)."""
    name = Path(path).name
    wanted = {"fp32": "fp32", "fp16": "fp32" if opts.weakly_typed else "fp16", "int8": "int8",
              "int8-implicit": "fp32"}[opts.precision]
    if facts.precision == wanted:
        return
    made_by = {"fp16": "the FP16 variant: trtlab.build_variant(model, Recipe(precision='fp16'))",
               "int8": "an INT8 variant: trtlab.build_variant(model, Recipe(algorithm=...), ...) (notebook 03 / "
                       "`python -m trtlab calibrate`)",
               "fp32": "the FP32 model itself"}
    extra = "; on TensorRT 10 precision='int8-implicit' calibrates the FP32 model with TensorRT's own calibrator" \
        if opts.precision == "int8" and major == 10 else ""
    raise UserValueError(
        f"{name} is a {facts.precision.upper()} graph, but precision={opts.precision!r} "
        f"{'(weakly typed) ' if opts.weakly_typed else ''}builds {made_by[wanted]}",
        f"pass that graph, or precision={facts.precision!r} for this one (or precision=None: the graph's own)"
        + extra)


# ----------------------------------------------------------------------------------------------------------------
# Engine files
# ----------------------------------------------------------------------------------------------------------------
def default_rebuild_command(onnx_path, options: BuildOptions) -> str:
    """How to rebuild an engine built straight from an ONNX file (variants built by trtlab.build_engines pass the
    `python -m trtlab build` line of their recipe instead)."""
    extra = "".join(f", {k}={v!r}" for k, v in (("min_batch", options.min_batch), ("opt_batch", options.opt_batch),
                                                  ("max_batch", options.max_batch)))
    if options.weakly_typed and options.precision != "int8-implicit":
        extra += ", weakly_typed=True"
    return (f"python -c \"from trtlab.backends.tensorrt import build_engine; build_engine('{onnx_path}', "
            f"'{options.precision}'{extra}, force=True)\"")


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
    from trtlab.core.workspace import read_json_checked

    sidecar = read_json_checked(side, set_aside_damaged=False)  # only looks: the engine may be the user's
    if sidecar is None:
        raise EngineCompatibilityError(
            f"engine {engine_path.name}'s sidecar {side.name} is damaged (not the JSON trtlab writes), so trtlab "
            f"cannot tell which TensorRT and GPU built it; rebuild the engine with `python -m trtlab build --model "
            f"<model.onnx> --precision <fp32|fp16|int8> --force`")
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