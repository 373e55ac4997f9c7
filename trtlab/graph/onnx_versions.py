"""Whether ONNX Runtime here opens a model's IR version and opsets — asked of ONNX Runtime itself, before any work.

ONNX Runtime refuses a model whose IR version or ai.onnx opset it does not know only when a session is made, with
its own source lines ("core/graph/model.cc:256 … Unsupported model IR version: 99, max supported IR version: 14";
"model_load_utils.h:46 … Opset 99 is under development … Current official support for domain ai.onnx is till opset
28"), and supports opsets from 7 on ("All versions of ONNX Runtime support ONNX opsets from ONNX v1.2.1+ (opset
version 7 and higher)", onnxruntime.ai/docs/reference/compatibility.html). Its limits are not a Python attribute,
so a one-node model with the model's IR version and standard-domain opsets is opened once per (IR, opsets) —
milliseconds — and a refusal becomes one line: what the model has, what this ONNX Runtime reads, and the fix.
"""
from __future__ import annotations

import functools
import re

#: The oldest ai.onnx opset every ONNX Runtime supports (its compatibility page), and an IR version every one reads.
OLDEST_OPSET = 7
OLDEST_IR = 7
#: The opset a re-export is pointed at: released long ago, run by every supported ONNX Runtime and TensorRT 10/11.
EXPORT_OPSET = 17
STANDARD = ("", "ai.onnx", "ai.onnx.ml")


def versions_problem(model) -> tuple[str, str] | None:
    """(what, fix) when ONNX Runtime here cannot open a model of `model`'s IR version and opsets, else None."""
    opsets = tuple(sorted((o.domain, int(o.version)) for o in model.opset_import if o.domain in STANDARD))
    refusal = _refusal(int(model.ir_version), opsets)
    if not refusal:
        return None
    import onnxruntime

    opset = dict(opsets).get("", dict(opsets).get("ai.onnx"))
    newest_ir = re.search(r"max supported IR version: (\d+)", refusal)
    newest_opset = _newest_opset(refusal)
    reads = ([f"IR versions up to {newest_ir.group(1)}"] if newest_ir else []) + \
            [f"ai.onnx opsets {OLDEST_OPSET} to {newest_opset}"]
    what = (f"is ONNX IR version {model.ir_version} with ai.onnx opset {opset}; ONNX Runtime "
            f"{onnxruntime.__version__} here reads {' and '.join(reads)}")
    if not newest_ir and opset is not None and OLDEST_OPSET <= opset <= newest_opset:
        what += f" (it said: {refusal.splitlines()[0][:200]})"  # refused for another reason: its own words
    opset_known = opset is None or not isinstance(newest_opset, int) or OLDEST_OPSET <= opset <= newest_opset
    if opset is not None and opset < OLDEST_OPSET:
        fix = (f"convert it to a newer opset: onnx.version_converter.convert_version(model, {EXPORT_OPSET}), then "
               f"onnx.save it")
    elif newest_ir and opset_known:  # only the IR version is too new
        fix = (f"save it with an IR version ONNX Runtime reads (model.ir_version = {newest_ir.group(1)}; onnx.save), "
               f"export it again with a released exporter, or install a newer onnxruntime")
    else:
        fix = (f"export it again with a released opset (torch.onnx.export(..., opset_version={EXPORT_OPSET})) or "
               f"convert it (onnx.version_converter.convert_version(model, {EXPORT_OPSET})), or install a newer "
               f"onnxruntime")
    return what, fix


@functools.lru_cache(maxsize=32)
def _refusal(ir_version: int, opsets: tuple) -> str:
    """'' when ONNX Runtime opens a one-node model of this IR version and these opsets, else what it said."""
    from onnx import TensorProto, helper

    from trtlab.core.ort_session import ort_session

    default = dict(opsets).get("", dict(opsets).get("ai.onnx"))
    if default is None:  # no ai.onnx opset to build the probe's node in: nothing to ask
        return ""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "version_probe", [x], [y])
    probe = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                              ir_version=ir_version)
    try:
        ort_session(probe, optimization="disable")
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime's refusal is the answer
        text = str(exc)
        return text.split(" failed:", 1)[-1].strip() or type(exc).__name__
    return ""


@functools.lru_cache(maxsize=1)
def _schema_newest_opset() -> int | None:
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as C

        return max(s.since_version for s in C.get_all_operator_schema() if s.domain in ("", "ai.onnx"))
    except Exception:  # noqa: BLE001 - an onnxruntime without the schema API: the refusal's own number is used
        return None


def _newest_opset(refusal: str) -> int | str:
    """The newest ai.onnx opset ONNX Runtime says it supports: in its refusal, else (a refusal of the IR version
    names no opset) in its refusal of an opset-999 model of an IR version it reads — its official statement
    (1.30: "till opset 26", while its schemas reach 27) — else its newest schema."""
    pattern = r"support for domain ai\.onnx is till opset (\d+)"
    said = re.search(pattern, refusal) or re.search(pattern, _refusal(OLDEST_IR, (("", 999),)))
    return int(said.group(1)) if said else (_schema_newest_opset() or "?")
