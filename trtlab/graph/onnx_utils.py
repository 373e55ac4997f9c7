"""Small ONNX graph helpers shared by the stages (read like onnx-graphsurgeon passes: find, edit, check)."""
from __future__ import annotations


def opset_of(model) -> int:
    """The default-domain opset the model imports."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def with_outputs(model, names) -> object:
    """A copy of `model` whose graph outputs also include the tensors `names` (intermediate activations exposed
    for calibration statistics or layer-by-layer comparison)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    existing = {o.name for o in out.graph.output}
    for name in names:
        if name not in existing:
            out.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            existing.add(name)
    return out
