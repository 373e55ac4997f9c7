"""Every notebook executes headless on the demo data (nbclient), in order."""
from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_notebooks_are_committed_without_outputs():
    import nbformat

    assert NOTEBOOKS, "no notebooks found"
    for path in NOTEBOOKS:
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has stored outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_headless(path, demo_model, session_workspace):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    # TRTLAB_WORKSPACE (set by the session_workspace fixture) is inherited by the kernel: the notebook reuses the
    # exported demo model and caches.
    prepared = (session_workspace / "imagenet" / "prep.json").exists()  # notebook 01 ran earlier in this session
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors
    if path.stem[:2] in ("03", "04", "05"):
        # Figures must render in the notebook, not as '<Figure size ...>' text.
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} shows no figure"
        assert not any("<Figure size" in o.get("data", {}).get("text/plain", "") for o in outputs)
    if path.stem[:2] in ("02", "03", "04", "05"):
        # The first thing each says is which data it works on: notebook 01's when it prepared some.
        # (after the one line naming the workspace, which each kernel prints once)
        lines = [line for o in outputs if o.output_type == "stream" for line in o.get("text", "").splitlines()]
        first = next(line for line in lines if not line.startswith("[trtlab] workspace: "))
        assert first.startswith("[trtlab] data: ")
        assert ("prepared by notebook 01" in first) if prepared else ("using the demo photos" in first)
