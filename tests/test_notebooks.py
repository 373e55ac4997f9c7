"""Every notebook, executed headless in order 00 → 05 as a Kaggle user runs them: fresh kernels whose working
directory is an emulated /kaggle/working, with a photo dataset attached read-only under /kaggle/input
($TRTLAB_KAGGLE_ROOT points trtlab at the emulated /kaggle; no $TRTLAB_WORKSPACE, so the Kaggle default applies)."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_notebooks_are_committed_without_outputs():
    import nbformat

    assert NOTEBOOKS, "no notebooks found"
    for path in NOTEBOOKS:
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has stored outputs"


def _attach_dataset(root: Path, demo_data) -> Path:
    """my-photos/val/<wnid>/: each labelled demo photo plus a mirrored and a cropped copy (3 per class, so a
    per-class calibration quota leaves images to evaluate), made read-only as Kaggle mounts it."""
    import cv2

    from trtlab.data.classes import class_index

    val = root / "my-photos" / "val"
    for path, label in zip(demo_data.paths, demo_data.labels):
        if label < 0:
            continue
        folder = val / class_index()[int(label)][0]
        folder.mkdir(parents=True, exist_ok=True)
        image = cv2.imread(path, cv2.IMREAD_COLOR)
        stem = Path(path).stem
        shutil.copy(path, folder / Path(path).name)
        cv2.imwrite(str(folder / f"{stem}_mirror.jpg"), image[:, ::-1])
        h, w = image.shape[:2]
        cv2.imwrite(str(folder / f"{stem}_crop.jpg"), image[h // 10: h - h // 10, w // 10: w - w // 10])
    for current, dirs, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(current, name), stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        os.chmod(current, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return val


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def kaggle_run(tmp_path_factory, demo_data):
    """Execute every notebook in order in fresh kernels under the emulated Kaggle layout; return
    {stem: executed notebook} plus the layout."""
    import nbformat
    from nbclient import NotebookClient

    root = tmp_path_factory.mktemp("kaggle")
    working, inputs = root / "working", root / "input"
    working.mkdir()
    inputs.mkdir()
    _attach_dataset(inputs, demo_data)
    before = _snapshot(inputs)
    saved = {k: os.environ.get(k) for k in ("TRTLAB_KAGGLE_ROOT", "TRTLAB_WORKSPACE", "TRTLAB_IMAGENET")}
    os.environ["TRTLAB_KAGGLE_ROOT"] = str(root)
    os.environ.pop("TRTLAB_WORKSPACE", None)
    os.environ.pop("TRTLAB_IMAGENET", None)
    executed = {}
    try:
        for path in NOTEBOOKS:
            nb = nbformat.read(str(path), as_version=4)
            # A fresh kernel per notebook, started in /kaggle/working (what Kaggle does).
            NotebookClient(nb, timeout=900, kernel_name="python3",
                           resources={"metadata": {"path": str(working)}}).execute()
            executed[path.stem] = nb
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for current, dirs, files in os.walk(inputs):
            os.chmod(current, 0o755)
    return {"notebooks": executed, "root": root, "working": working, "inputs": inputs, "before": before}


def _outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


@pytest.mark.slow
@pytest.mark.parametrize("stem", [p.stem for p in NOTEBOOKS])
def test_notebook_runs_on_kaggle_in_order(stem, kaggle_run):
    nb = kaggle_run["notebooks"][stem]
    outputs = _outputs(nb)
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert not errors, errors
    if stem[:2] in ("03", "04", "05"):
        # Figures must render in the notebook, not as '<Figure size ...>' text.
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{stem} shows no figure"
        assert not any("<Figure size" in o.get("data", {}).get("text/plain", "") for o in outputs)
    if stem[:2] in ("02", "03", "04", "05"):
        # The first thing each says (after the workspace line each kernel prints once) is which data it uses:
        # notebook 01 prepared the attached photo dataset.
        lines = [line for o in outputs if o.output_type == "stream" for line in o.get("text", "").splitlines()]
        first = next(line for line in lines if not line.startswith("[trtlab] workspace: "))
        assert first.startswith("[trtlab] data: ") and "prepared by notebook 01" in first, first


@pytest.mark.slow
def test_kaggle_run_writes_only_its_workspace_and_never_the_inputs(kaggle_run):
    working = kaggle_run["working"]
    assert sorted(p.name for p in working.iterdir()) == ["trtlab-runs"]
    assert _snapshot(kaggle_run["inputs"]) == kaggle_run["before"]
    # notebook 01 found the attached photos (one folder per WNID) and prepared them, not the demo stand-in
    prep = (working / "trtlab-runs" / "imagenet" / "prep.json").read_text()
    assert '"standin": false' in prep and "my-photos" in prep
    assert (working / "trtlab-runs" / "trtlab.log").stat().st_size > 0
