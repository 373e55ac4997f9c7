"""Q/DQ insertion: carry out a `QuantPlan` (trtlab.quantization.placement) with calibrated scales, on one of two
float paths.

Activation tensors get one QuantizeLinear/DequantizeLinear pair each (per-tensor scale, INT8 zero point 0), read by
every consumer the plan lists; weights become INT8 initializers with a per-output-channel DequantizeLinear.

- **FP16 float path** (`high_precision='fp16'`, a Recipe's default; ModelOpt's `high_precision_dtype="fp16"`):
  everything not quantized computes in FP16 — on strongly typed TensorRT networks (TensorRT 11, and trtlab's 10.x
  builds) every layer runs in the type the graph gives it, so an FP32 float path makes INT8 lose to FP16. Q/DQ
  scales are FP16, which ONNX allows from opset 19: the graph's opset is raised when lower (ONNX's version
  converter), and the one precision converter (trtlab.graph.precision: plan, then rewrite) converts the graph with
  guards in their precision; graph inputs and outputs stay FP32 through boundary Casts, and neighbouring nodes of
  one precision share tensors without Casts. Every scale is made representable in FP16 *before* the weights are
  rounded with it: a scale below FP16's smallest subnormal (2⁻²⁴ ≈ 6e-8: a dead or near-constant channel) is
  raised to it (ModelOpt's AutoCast does the same for tiny initializers), one above 65504 lowered; raised and lowered
  scales are counted apart (`QuantizedGraph.fp16_range`; `clamped_scales` is their sum by kind), and the INT8
  weights are computed with the scale the graph stores, so DequantizeLinear gives back exactly the weight the INT8
  values mean. An activation whose calibrated range (scale × 127) exceeds 65504 overflows FP16 wherever the graph
  holds it in FP16: such tensors are named (`fp16_range['activations_beyond_fp16']`) for a warning.
- **FP32 float path** (`high_precision='fp32'`): the graph as trtlab made it before issue 17 — FP32 everywhere not
  quantized, FP32 scales at the model's opset (raised to 13 by ONNX's version converter when lower); '=fp16' guards
  are carried out by the same precision converter (a plan in which only those nodes are FP16).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trtlab.core.errors import UserError, UserValueError
from trtlab.graph.precision import FP16_QDQ_OPSET  # Q/DQ take float16 scales from opset 19
from trtlab.graph.sanitize import MIN_OPSET as QDQ_OPSET  # Q/DQ take per-axis scales from opset 13
from trtlab.quantization.placement import QuantPlan

INT8_MAX = 127.0
ZERO_POINT = "trtlab_zero_point_int8"
HIGH_PRECISIONS = ("fp16", "fp32")
FP16_SMALLEST_SUBNORMAL = float(np.finfo(np.float16).smallest_subnormal)  # 2^-24
FP16_MAX = float(np.finfo(np.float16).max)


class MissingScales(UserError, KeyError):
    """Scales that lack a tensor the plan quantizes (still a KeyError for callers that catch that)."""

    __str__ = UserError.__str__  # KeyError's would quote the line


@dataclass
class QuantizedGraph:
    """The Q/DQ graph and what making it did."""

    model: object  # onnx.ModelProto
    high_precision: str
    clamped_scales: dict = field(default_factory=lambda: {"weights": 0, "activations": 0})
    opset: int = 0
    conversion: dict = field(default_factory=dict)  # the precision converter's summary (FP16 path, or =fp16 guards)
    # {'raised': {'weights': n, 'activations': n}, 'lowered': {...}, 'activations_beyond_fp16': [tensor, ...]}
    fp16_range: dict = field(default_factory=lambda: empty_fp16_range())

    def summary(self) -> dict:
        return {"high_precision": self.high_precision, "clamped_scales": sum(self.clamped_scales.values()),
                "clamped_scales_by_kind": dict(self.clamped_scales),
                "scales_raised_to_fp16_subnormal": sum(self.fp16_range["raised"].values()),
                "scales_lowered_to_fp16_max": sum(self.fp16_range["lowered"].values()),
                "fp16_range": self.fp16_range, "opset": self.opset, **self.conversion}


def empty_fp16_range() -> dict:
    return {"raised": {"weights": 0, "activations": 0}, "lowered": {"weights": 0, "activations": 0},
            "activations_beyond_fp16": []}


def clamp_directions(scales) -> tuple[int, int]:
    """How many scales fp16_representable raises (below FP16's smallest subnormal) and lowers (above 65504)."""
    scales = np.asarray(scales, np.float32)
    return int(np.count_nonzero(scales < FP16_SMALLEST_SUBNORMAL)), int(np.count_nonzero(scales > FP16_MAX))


def fp16_representable(scales: np.ndarray) -> tuple[np.ndarray, int]:
    """Scales (float32) moved into FP16's range — [2⁻²⁴, 65504] — and rounded to FP16 values (kept as float32), and
    how many had to be clamped (rounding alone is not counted)."""
    scales = np.asarray(scales, np.float32)
    clamped = np.clip(scales, FP16_SMALLEST_SUBNORMAL, FP16_MAX)
    count = int(np.count_nonzero(clamped != scales))
    return clamped.astype(np.float16).astype(np.float32), count


def quantize_weight(values: np.ndarray, axis: int | None, scale_dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric INT8: scale_c = max|w_c| / 127, zero point 0 (`axis` None: one scale, a 0-d
    array, for the whole tensor). With `scale_dtype=np.float16` the scale is first made FP16-representable
    (clamped into FP16's range; raised by one FP16 step where rounding made it too small for max|w_c| to fit in
    ±127), and the weights are rounded with that scale. Returns (int8 weights, scales as float32)."""
    q, scale, _ = _quantize_weight(values, axis, scale_dtype)
    return q, scale


def _quantize_weight(values: np.ndarray, axis: int | None, scale_dtype) -> tuple[np.ndarray, np.ndarray, tuple]:
    """quantize_weight, and how many scales had to be raised / lowered into FP16's range."""
    if axis is None:  # per-tensor: the same arithmetic on one "channel" holding every value
        q, scale, clamped = _quantize_weight(values.reshape(1, -1), 0, scale_dtype)
        return q.reshape(values.shape), scale.reshape(()), clamped
    moved = np.moveaxis(values.astype(np.float32), axis, 0).reshape(values.shape[axis], -1)
    amax = np.abs(moved).max(axis=1)
    scale = np.where(amax > 0, amax / INT8_MAX, 1.0).astype(np.float32)
    clamped = (0, 0)
    if scale_dtype == np.float16:
        clamped = clamp_directions(scale)
        scale, _ = fp16_representable(scale)
        too_small = amax / scale > INT8_MAX + 0.5  # rounded down past the largest weight: one FP16 step up
        if too_small.any():
            scale[too_small] = np.nextafter(scale[too_small].astype(np.float16), np.float16(np.inf)).astype(
                np.float32)
    shape = [1] * values.ndim
    shape[axis] = -1
    q = np.clip(np.rint(values / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale, clamped


def quantize_graph(model, plan: QuantPlan, scales: dict[str, float], high_precision: str = "fp32",
                   check: bool = True) -> QuantizedGraph:
    """A new ModelProto with Q/DQ inserted per `plan` and activation `scales` (tensor → scale) on the float path
    `high_precision` (module docstring); checked with onnx.checker and strict shape inference when `check`."""
    if high_precision not in HIGH_PRECISIONS:
        raise UserValueError(f"high_precision {high_precision!r} is not one of {', '.join(HIGH_PRECISIONS)}",
                             "use 'fp16' (everything not quantized in FP16, the default) or 'fp32'")
    _check_scales(plan, scales)
    model = raise_opset(model, QDQ_OPSET)  # converted, not relabelled: ops changed meaning at 13 (Squeeze, Split…)
    fp16 = high_precision == "fp16"
    clamped = {"weights": 0, "activations": 0}
    fp16_range = empty_fp16_range()
    if fp16:
        names = list(plan.activations)
        raw = np.asarray([scales[t] for t in names], np.float32)
        values, clamped["activations"] = fp16_representable(raw)
        fp16_range["raised"]["activations"], fp16_range["lowered"]["activations"] = clamp_directions(raw)
        # beyond FP16 as a tensor (its range, scale × 127, above 65504), whether or not its scale had to move
        fp16_range["activations_beyond_fp16"] = [t for t, s in zip(names, raw.tolist()) if s * INT8_MAX > FP16_MAX]
        scales = dict(zip(names, values.tolist()))
    out = _with_qdq(model, plan, scales, np.float16 if fp16 else np.float32, clamped, fp16_range)
    if fp16:
        out, conversion = _fp16_float_path(out, plan)
    else:
        out, conversion = apply_guard_precisions(out, plan, with_summary=True)
    if check:
        check_quantized_model(out)
    from trtlab.graph.onnx_utils import opset_of

    return QuantizedGraph(out, high_precision, clamped, opset_of(out), conversion, fp16_range)


def insert_qdq(model, plan: QuantPlan, scales: dict[str, float], high_precision: str = "fp32"):
    """quantize_graph(...).model: the Q/DQ graph (FP32 float path unless `high_precision='fp16'`)."""
    return quantize_graph(model, plan, scales, high_precision, check=False).model


def _with_qdq(model, plan: QuantPlan, scales: dict[str, float], scale_dtype, clamped: dict,
              fp16_range: dict | None = None):
    """The model with Q/DQ nodes and INT8 weights (float32 graph; scales FP16-representable when scale_dtype is
    float16)."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    node_index = {node.name: node for node in graph.node}
    order = {node.name: i for i, node in enumerate(graph.node)}
    new_inits = [numpy_helper.from_array(np.array(0, np.int8), ZERO_POINT)]
    before: dict[str, list] = {}  # consumer node name → Q/DQ nodes that must come before it
    for tensor in plan.activations:
        consumers = sorted(plan.consumers[tensor], key=lambda use: order[use[0]])  # the first reader comes first
        _activation_pair(tensor, scales[tensor], consumers, node_index, new_inits, before)
    initializers = {init.name: init for init in graph.initializer}
    for weight, (node_name, axis) in plan.weights.items():
        users = sorted(plan.weight_users.get(weight, [node_name]), key=order.__getitem__)
        raised, lowered = _weight_dequantize(weight, initializers[weight], axis, [node_index[n] for n in users],
                                             new_inits, before, scale_dtype)
        clamped["weights"] += raised + lowered
        if fp16_range is not None:
            fp16_range["raised"]["weights"] += raised
            fp16_range["lowered"]["weights"] += lowered
    rebuilt = []
    for node in graph.node:
        rebuilt.extend(before.get(node.name, []))
        rebuilt.append(node)
    from trtlab.graph.onnx_utils import names_read

    del graph.node[:]
    graph.node.extend(rebuilt)
    # Weights now stored as INT8 are dropped when nothing (a subgraph included) reads the float original any more.
    used = names_read(graph)
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept + [init for init in new_inits if init.name in used])
    return out


def _check_scales(plan: QuantPlan, scales: dict[str, float]) -> None:
    missing = [t for t in plan.activations if t not in scales]
    if missing:
        raise MissingScales(f"no calibrated scale for {len(missing)} tensor(s) ({', '.join(missing[:3])}"
                            f"{', …' if len(missing) > 3 else ''}): the scales were made for another graph or guard "
                            f"set", "recalibrate")
    bad = {t: s for t, s in scales.items() if t in plan.consumers and not (np.isfinite(s) and s > 0)}
    if bad:
        raise UserValueError(f"scales must be finite and > 0; got {dict(list(bad.items())[:3])}",
                             "recalibrate, or fix the imported scales")


def _activation_pair(tensor, scale, consumers, node_index, new_inits, before) -> None:
    """One Q/DQ pair on `tensor`, placed before its first quantized reader; every reader takes the DQ output."""
    from onnx import helper, numpy_helper

    scale_name = f"{tensor}__scale"
    new_inits.append(numpy_helper.from_array(np.array(scale, np.float32), scale_name))
    q_out, dq_out = f"{tensor}__q", f"{tensor}__dq"
    q = helper.make_node("QuantizeLinear", [tensor, scale_name, ZERO_POINT], [q_out], name=f"{tensor}__Q")
    dq = helper.make_node("DequantizeLinear", [q_out, scale_name, ZERO_POINT], [dq_out], name=f"{tensor}__DQ")
    before.setdefault(consumers[0][0], []).extend([q, dq])
    for node_name, index in consumers:
        node_index[node_name].input[index] = dq_out


def _weight_dequantize(weight, initializer, axis, nodes, new_inits, before, scale_dtype) -> tuple[int, int]:
    """The weight as INT8 + per-channel scales (`axis` None: one per-tensor scale), read by `nodes` (graph order)
    through one DequantizeLinear; returns how many of its scales were raised / lowered into FP16's range."""
    from onnx import helper, numpy_helper

    q, scale, clamped = _quantize_weight(numpy_helper.to_array(initializer), axis, scale_dtype)
    q_name, s_name, z_name, dq_out = int8_weight_name(weight), f"{weight}__scale", f"{weight}__zp", f"{weight}__dq"
    new_inits += [numpy_helper.from_array(q, q_name), numpy_helper.from_array(scale, s_name),
                  numpy_helper.from_array(np.zeros(scale.shape, np.int8), z_name)]
    per_axis = {} if axis is None else {"axis": axis}
    dq = helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [dq_out], name=f"{weight}__DQ", **per_axis)
    before.setdefault(nodes[0].name, []).append(dq)
    for node in nodes:
        for i, name in enumerate(node.input):
            if name == weight:
                node.input[i] = dq_out
    return clamped


def int8_weight_name(weight: str) -> str:
    """The INT8 initializer a quantized weight becomes (recovery's adaptive rounding writes its integers there)."""
    return f"{weight}__int8"


def _fp16_float_path(model, plan: QuantPlan):
    """The Q/DQ graph at opset ≥ 19 with every node not guarded FP32 in FP16, Q/DQ included (FP16 scales)."""
    from trtlab.graph.precision import convert_precisions, plan_precisions

    model = raise_opset(model, FP16_QDQ_OPSET)
    precisions = plan_precisions(model, default="fp16", keep_op_types=(), qdq_precision="fp16",
                                 guarded=plan.guarded)
    conversion = convert_precisions(model, precisions, check=True)
    return conversion.model, conversion.summary()


def raise_opset(model, opset: int):
    """`model` at default-domain opset ≥ `opset` (ONNX's version converter; nodes it adds are named as sanitize
    names them, existing names are kept)."""
    import onnx

    from trtlab.graph.onnx_utils import opset_of
    from trtlab.graph.sanitize import name_nodes

    current = opset_of(model)
    if current >= opset:
        return model
    names = [node.name for node in model.graph.node]
    try:
        converted = onnx.version_converter.convert_version(model, opset)
    except Exception as exc:  # the converter names the op it cannot convert
        need = "FP16 Q/DQ scales" if opset >= FP16_QDQ_OPSET else "per-channel Q/DQ"
        fix = "use Recipe(high_precision='fp32') for this model, or re-export it with opset ≥ 19" \
            if opset >= FP16_QDQ_OPSET else f"re-export the model with opset ≥ {opset}"
        raise UserValueError(f"the Q/DQ graph uses opset {current}; {need} need opset ≥ {opset} and ONNX's version "
                             f"converter failed ({exc})", fix) from exc
    converted.ir_version = max(converted.ir_version, model.ir_version)
    if [n.name for n in converted.graph.node] != names:
        name_nodes(converted)
    return converted


def apply_guard_precisions(model, plan: QuantPlan, with_summary: bool = False):
    """The FP32-path Q/DQ graph with its '=fp16' guarded nodes in FP16 (everything else as it is), by the one
    precision converter; unchanged when no guard asks for FP16."""
    from trtlab.graph.precision import convert_precisions, plan_precisions

    if not any(g.precision == "fp16" for g in plan.guarded):
        return (model, {}) if with_summary else model
    precisions = plan_precisions(model, default="fp32", guarded=plan.guarded)
    conversion = convert_precisions(model, precisions, check=False)
    return (conversion.model, conversion.summary()) if with_summary else conversion.model


def check_quantized_model(model) -> None:
    """onnx.checker + strict shape inference; raises with the checker's message."""
    import onnx

    onnx.checker.check_model(model, full_check=False)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
