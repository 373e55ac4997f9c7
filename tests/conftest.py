"""Shared fixtures: one session workspace with the demo model exported once (≈10 s) and the demo photos."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def session_workspace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trtlab-ws")
    # Autouse: no test writes into the repository's ./runs. Notebooks executed by tests inherit this too, so they
    # reuse the exported model and caches.
    os.environ["TRTLAB_WORKSPACE"] = str(path)
    return path


@pytest.fixture(scope="session")
def demo_model(session_workspace) -> Path:
    from trtlab.demo import export_demo_model

    return export_demo_model("efficientnet-lite0", session_workspace)


@pytest.fixture(scope="session")
def demo_data():
    from trtlab.demo import demo_dataset

    return demo_dataset()


@pytest.fixture(scope="session")
def demo_cache(demo_data, session_workspace):
    from trtlab.decode_cache import build_decode_cache

    return build_decode_cache(demo_data, "tf-lite", session_workspace, progress=False)


@pytest.fixture
def photo_folder(tmp_path, demo_data) -> Path:
    """A writable copy of the labelled demo photos, one sub-folder per WNID."""
    from trtlab.classes import class_index

    root = tmp_path / "photos"
    for path, label in zip(demo_data.paths, demo_data.labels):
        if label < 0:
            continue
        folder = root / class_index()[int(label)][0]
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / Path(path).name)
    return root
