"""Shared fixtures: one session workspace with the demo model exported once (≈10 s) and the demo photos."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def session_workspace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trtlab-ws")
    # Autouse: no test writes into the repository's ./runs. Notebooks executed by tests inherit this too, so they
    # reuse the exported model and caches.
    os.environ["TRTLAB_WORKSPACE"] = str(path)
    return path


DEMO_EXPORT = "from trtlab.core import log; log.setup(0); import trtlab; trtlab.export_demo_model()"


@pytest.fixture(scope="session")
def demo_export(tmp_path_factory) -> subprocess.CompletedProcess:
    """The session's one export of the demo model, run as a user's first run is: a fresh Python with trtlab's
    logging at its default verbosity, into an empty workspace (test_logging checks that it printed nothing but
    trtlab's lines; the suite exports the model once, not twice). `.workspace`: where it wrote the model."""
    workspace = tmp_path_factory.mktemp("trtlab-export")
    done = subprocess.run([sys.executable, "-c", DEMO_EXPORT], env=dict(os.environ, TRTLAB_WORKSPACE=str(workspace)),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"the demo model's export failed:\n{done.stderr[-4000:]}"
    done.workspace = workspace
    return done


@pytest.fixture(scope="session")
def demo_model(demo_export, session_workspace) -> Path:
    """The exported demo model, in the session workspace's models folder: where every stage run there without a
    model (the CLI, the debugger) looks for it, so nothing exports it again."""
    from trtlab.core.workspace import atomic_path
    from trtlab.data.demo import export_demo_model

    exported = export_demo_model("efficientnet-lite0", demo_export.workspace)  # found there: not exported again
    target = session_workspace / "models" / exported.name
    if not target.is_file():
        with atomic_path(target, suffix=".onnx") as tmp:
            shutil.copyfile(exported, tmp)
    return export_demo_model("efficientnet-lite0", session_workspace)


@pytest.fixture(scope="session")
def demo_data():
    from trtlab.data.demo import demo_dataset

    return demo_dataset()


@pytest.fixture(scope="session")
def demo_cache(demo_data, session_workspace):
    from trtlab.data.decode_cache import build_decode_cache

    return build_decode_cache(demo_data, "tf-lite", session_workspace, progress=False)


@pytest.fixture
def photo_folder(tmp_path, demo_data) -> Path:
    """A writable copy of the labelled demo photos, one sub-folder per WNID."""
    from trtlab.data.classes import class_index

    root = tmp_path / "photos"
    for path, label in zip(demo_data.paths, demo_data.labels):
        if label < 0:
            continue
        folder = root / class_index()[int(label)][0]
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / Path(path).name)
    return root


@pytest.fixture(scope="session")
def torch_label() -> str:
    """The backend label trtlab's torch backend must give its results on this machine, asked of torch itself (not
    of trtlab): 'torch-cuda' where torch sees a CUDA GPU — with a GPU visible the torch backend never runs on the
    CPU — else 'torch-cpu'. Tests of results on the torch backend expect this, so they pass on CPU and GPU alike."""
    torch = pytest.importorskip("torch")
    return "torch-cuda" if torch.cuda.is_available() else "torch-cpu"


@pytest.fixture(scope="session")
def ort_workspace(session_workspace, tmp_path_factory) -> Path:
    """The workspace for A/Bs pinned to ONNX Runtime (backend='ort') that check labels or ONNX Runtime's numbers:
    the session workspace where 'auto' answers ONNX Runtime anyway (no GPU: nothing is calibrated twice), else one of
    their own. Where 'auto' is the torch GPU backend, the session workspace's results store holds the torch results
    of the 'auto' A/Bs under the plain labels ('fp32', 'int8-minmax@6'), and a result of the same variant on another
    backend is stored beside them as 'fp32@ort-cpu' (and the other way round, whichever comes first)."""
    from trtlab.backends import resolve_backend

    if resolve_backend("model.onnx")[0] == "ort":
        return session_workspace
    return tmp_path_factory.mktemp("trtlab-ws-ort")


@pytest.fixture(scope="session")
def qdq_model(demo_model, tmp_path_factory):
    """The demo model with a QuantizeLinear/DequantizeLinear pair on the first Conv's input: enough for the
    builder's Q/DQ detection (the scales are not calibrated; quantization quality is the quantizer's job)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(demo_model))
    conv = model.graph.node[0]
    model.graph.initializer.extend([numpy_helper.from_array(np.array(1 / 64, np.float32), "qdq_scale"),
                                    numpy_helper.from_array(np.array(0, np.int8), "qdq_zero")])
    q = helper.make_node("QuantizeLinear", [conv.input[0], "qdq_scale", "qdq_zero"], ["x_q"], name="q0")
    dq = helper.make_node("DequantizeLinear", ["x_q", "qdq_scale", "qdq_zero"], ["x_dq"], name="dq0")
    conv.input[0] = "x_dq"
    nodes = [q, dq] + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model)
    path = tmp_path_factory.mktemp("qdq") / "efficientnet-lite0.int8.onnx"
    onnx.save(model, str(path))
    return path


@pytest.fixture(autouse=True)
def advice_said_afresh():
    """Each test starts as a fresh kernel would: no TensorRT advice given yet (trtlab.env.install.say_once), no
    self-check made yet (trtlab.evaluation.literal_check.self_check_once), no notebook cell holding trtlab's info
    lines (core.log: a test of the notebook setup starts a cell that no IPython ends)."""
    from trtlab.core import log
    from trtlab.env.install import forget_said
    from trtlab.evaluation.literal_check import forget_self_checks

    forget_said()
    forget_self_checks()  # and no ONNX Runtime self-check reused from another test's graph
    log._cell_notes.flush()  # a cell left open would hold every later info line back from the screen
    yield
