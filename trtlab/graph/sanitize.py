"""Sanitize an ONNX classifier before calibration and quantization: opset ≥ 13 (per-axis Q/DQ), constants folded
(weights computed by ConstantOfShape & co. become initializers), BatchNormalization folded into Conv, shapes
inferred. Uses ONNX Runtime's *basic* graph optimizations, which emit standard ONNX ops only."""
from __future__ import annotations

from pathlib import Path

from trtlab.core.errors import UserValueError
from trtlab.core.workspace import atomic_path, set_aside, sha256_file, workspace_dir

MIN_OPSET = 13


def sanitize_model(model_path, workspace=None, force: bool = False) -> Path:
    """Path of the sanitized copy (cached in the workspace by the source file's sha256)."""
    import onnx

    from trtlab.core.ort_session import ort_session

    model_path = Path(model_path)
    sha = sha256_file(model_path)
    target = workspace_dir(workspace) / "sanitized" / f"{model_path.stem}-{sha[:12]}.onnx"
    if target.exists() and not force:
        from trtlab.graph.classifier import ModelInputError, inspect_classifier

        try:
            inspect_classifier(target)  # parses, one image input, N×C output: what trtlab wrote
            return target
        except ModelInputError as exc:  # hand-damaged or truncated copy: set aside (named) and rebuilt below
            set_aside(target, exc.what)
    model = onnx.load(str(model_path))
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception as exc:  # the converter names the op it cannot convert
            raise UserValueError(f"{model_path.name} uses opset {opset}; per-channel Q/DQ needs opset ≥ {MIN_OPSET} and "
                                 f"the ONNX version converter failed ({exc})", "re-export the model with opset ≥ 13") from exc
    with atomic_path(target, suffix=".onnx") as tmp:
        ort_session(model, optimization="basic", optimized_model_path=tmp)  # writes the folded graph to tmp
        folded = onnx.load(str(tmp))
        # IR < 4 demands every initializer be a graph input too; folding adds initializers, so move to IR 7 (opset 13's).
        folded.ir_version = max(folded.ir_version, 7)
        # Drop graph inputs nothing reads any more (shape feeds of folded constants), so one image input remains.
        consumed = {name for node in folded.graph.node for name in node.input}
        unused = [i for i in folded.graph.input if i.name not in consumed]
        for graph_input in unused:
            folded.graph.input.remove(graph_input)
        folded = onnx.shape_inference.infer_shapes(folded)
        onnx.checker.check_model(folded)
        onnx.save(folded, str(tmp))
    return target
