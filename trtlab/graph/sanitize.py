"""Sanitize an ONNX classifier before calibration and quantization: opset ≥ 13 (per-axis Q/DQ), constants folded
(weights computed by ConstantOfShape & co. become initializers), BatchNormalization folded into Conv, shapes
inferred, every node named, the opset imports no node uses dropped. Uses ONNX Runtime's *basic* graph optimizations,
which emit standard ONNX ops only.

Nodes are named here and only here (`name_nodes`): guards, the quantizer, the precision converter, layer debugging
and TensorRT builds all read the sanitized graph (or a variant made from it), so a node name found by one resolves
in every other. ModelOpt does the same in its `_preprocess_onnx` (name_onnx_nodes).
"""
from __future__ import annotations

from pathlib import Path

from trtlab.core.errors import UserValueError
from trtlab.core.workspace import atomic_path, set_aside, workspace_dir
from trtlab.graph.onnx_utils import drop_unused_opsets, names_read, opset_of

MIN_OPSET = 13
#: Part of the sanitized file's identity: bumped by hand only for a change the code fingerprint below cannot see
#: (2: nodes named; 3: no initializer among the graph inputs; 4: unused opset imports dropped), so copies made by
#: an older trtlab are not reused.
SANITIZE_REVISION = 4
#: The modules that make the sanitized copy: the fingerprint of their code (core.fingerprint) is part of its
#: identity, so a change to them makes a new copy without a bump (tests/test_code_fingerprint.py checks that what
#: they import is listed or is not part of what they compute).
SANITIZE_SOURCES = ("trtlab.graph.sanitize", "trtlab.graph.onnx_utils", "trtlab.core.ort_session")


def name_nodes(model) -> int:
    """Name every unnamed node, and every node whose name an earlier node already has, `<OpType>_<position>` (its
    index in the graph; `_<k>` appended in the rare case that name is taken). Named, unique nodes keep their
    names. Returns how many nodes were (re)named. Idempotent: a named graph is left as it is."""
    taken = {node.name for node in model.graph.node if node.name}
    seen: set[str] = set()
    renamed = 0
    for index, node in enumerate(model.graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        name, k = f"{node.op_type}_{index}", 1
        while name in taken or name in seen:
            name, k = f"{node.op_type}_{index}_{k}", k + 1
        node.name = name
        taken.add(name)
        seen.add(name)
        renamed += 1
    return renamed


def check_node_names(model, what: str = "the model") -> None:
    """Refuse a graph with unnamed or duplicate node names: guards and precision plans address nodes by name, and
    names are given once, by sanitizing (`name_nodes`), so that every stage sees the same ones."""
    seen: set[str] = set()
    for index, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            problem = "has no name" if not node.name else f"repeats the name {node.name!r}"
            raise UserValueError(f"{what}: node {index} ({node.op_type}) {problem}; guards and precision plans "
                                 f"address nodes by name", "pass the sanitized model (trtlab.sanitize_model names "
                                 "every node once), or a variant built from it")
        seen.add(node.name)


def sanitized_path(model_path: Path, sha: str, workspace=None) -> Path:
    """Where the sanitized copy of the model `sha` is kept: named by the model and the identity of the code that
    sanitizes (its revision and fingerprint)."""
    from trtlab.core.fingerprint import code_fingerprint
    from trtlab.core.identity import Identity

    made_by = Identity(model_sha256=sha, revision=SANITIZE_REVISION,
                       code={"sanitize": code_fingerprint(SANITIZE_SOURCES)})
    return workspace_dir(workspace) / "sanitized" / f"{Path(model_path).stem}-{sha[:12]}-{made_by.digest(12)}.onnx"


def sanitize_model(model_path, workspace=None, force: bool = False) -> Path:
    """Path of the sanitized copy (cached in the workspace by the source model's sha256, external data included)."""
    import onnx

    from trtlab.core.ort_session import ort_session
    from trtlab.graph.classifier import model_sha256

    model_path = Path(model_path)
    sha = model_sha256(model_path)  # the model with its external-data files: new weights, new copy
    target = sanitized_path(model_path, sha, workspace)
    if target.exists() and not force:
        try:
            onnx.checker.check_model(str(target))  # what trtlab wrote, unless hand-damaged or cut short
            return target
        except Exception as exc:  # damaged or truncated copy: set aside (named) and rebuilt below
            set_aside(target, f"{type(exc).__name__}: {str(exc)[:200]}")
    model = onnx.load(str(model_path))
    opset = opset_of(model)
    if opset < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception as exc:  # the converter names the op it cannot convert
            raise UserValueError(f"{model_path.name} uses opset {opset}; per-channel Q/DQ needs opset ≥ {MIN_OPSET} and "
                                 f"the ONNX version converter failed ({exc})", "re-export the model with opset ≥ 13") from exc
    # IR < 4 lists every initializer as a graph input too (and old exporters kept doing so). At IR ≥ 4 such an input
    # is one a caller may override: ONNX Runtime then treats it as no constant (no folding), and a weight that
    # quantization replaces by INT8 would leave a dangling required input. A classifier's weights are constants:
    # they are taken out of the inputs, and the model moves to IR 7 (opset 13's).
    initializers = {init.name for init in model.graph.initializer}
    for graph_input in [i for i in model.graph.input if i.name in initializers]:
        model.graph.input.remove(graph_input)
    model.ir_version = max(model.ir_version, 7)
    with atomic_path(target, suffix=".onnx") as tmp:
        ort_session(model, optimization="basic", optimized_model_path=tmp)  # writes the folded graph to tmp
        folded = onnx.load(str(tmp))
        # Drop graph inputs nothing reads any more (shape feeds of folded constants), so one image input remains.
        consumed = names_read(folded.graph)
        unused = [i for i in folded.graph.input if i.name not in consumed]
        for graph_input in unused:
            folded.graph.input.remove(graph_input)
        name_nodes(folded)  # after folding: ONNX Runtime keeps names but leaves unnamed nodes unnamed
        # ONNX Runtime's optimized model imports every domain ORT registers (com.microsoft.nchwc, org.pytorch.aten,
        # ai.onnx.training, …); only the domains the graph's nodes use stay, and every variant inherits them
        drop_unused_opsets(folded)
        folded = onnx.shape_inference.infer_shapes(folded)
        onnx.checker.check_model(folded)
        onnx.save(folded, str(tmp))
    return target
