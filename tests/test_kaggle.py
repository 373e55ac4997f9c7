"""Kaggle's layout: the kernel's working directory is /kaggle/working, the workspace lives there, inputs are
read-only. Emulated under a temporary folder through $TRTLAB_KAGGLE_ROOT, with $KAGGLE_KERNEL_RUN_TYPE set as Kaggle
sets it in every kernel."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, cwd: Path, env: dict) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def kaggle(tmp_path) -> dict:
    root = tmp_path / "kaggle"
    (root / "working").mkdir(parents=True)
    (root / "input").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TRTLAB_WORKSPACE"}
    env["TRTLAB_KAGGLE_ROOT"] = str(root)
    env["KAGGLE_KERNEL_RUN_TYPE"] = "Interactive"
    return {"root": root, "working": root / "working", "env": env}


def test_kaggle_workspace_never_shadows_the_package(kaggle):
    working, env = kaggle["working"], kaggle["env"]
    workspace = _python("import trtlab; print(trtlab.workspace_dir())", working, env)
    assert Path(workspace).parent == working and Path(workspace).is_dir()
    assert Path(workspace).name != "trtlab", "a workspace named like the package shadows it from /kaggle/working"
    # With the workspace in the kernel's working directory, `import trtlab` is still the package, whole.
    found = _python("import trtlab; print(trtlab.__file__); print(callable(trtlab.run_demo))", working, env)
    assert found.splitlines() == [str(REPO / "trtlab" / "__init__.py"), "True"]


def test_a_folder_named_trtlab_in_the_working_directory_does_not_shadow_the_package(kaggle):
    # A clone at /kaggle/working/trtlab (or any folder of that name) is not an empty namespace package to Python.
    (kaggle["working"] / "trtlab" / "runs").mkdir(parents=True)
    found = _python("import trtlab; print(trtlab.__file__)", kaggle["working"], kaggle["env"])
    assert found == str(REPO / "trtlab" / "__init__.py")


def test_workspace_does_not_depend_on_the_current_directory(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRTLAB_WORKSPACE", "TRTLAB_KAGGLE_ROOT", "KAGGLE_KERNEL_RUN_TYPE")}
    env["TRTLAB_KAGGLE_ROOT"] = str(tmp_path / "no-kaggle-here")
    code = "from trtlab.core.workspace import default_workspace; print(default_workspace()[0])"
    first = _python(code, REPO / "notebooks", env)
    second = _python(code, tmp_path, env)
    assert first == second == str(REPO / "runs")


def test_kaggle_is_recognised_by_its_kernel_variable_not_by_a_folder(kaggle):
    # Kaggle's folders without Kaggle's variable: some other machine (a container, a copied layout), not Kaggle.
    env = {k: v for k, v in kaggle["env"].items() if k != "KAGGLE_KERNEL_RUN_TYPE"}
    code = "from trtlab.core.workspace import default_workspace, on_kaggle; print(on_kaggle(), default_workspace()[0])"
    assert _python(code, kaggle["working"], env) == f"False {REPO / 'runs'}"
    for run_type in ("Interactive", "Batch"):  # an interactive session, a committed (batch) run
        env["KAGGLE_KERNEL_RUN_TYPE"] = run_type
        assert _python(code, REPO, env) == f"True {kaggle['working'] / 'trtlab-runs'}"


def _attach_photo_dataset(kaggle_root: Path, demo_data, layout: str = "wnid") -> Path:
    """A Kaggle dataset of the labelled demo photos under <kaggle>/input/my-photos: one folder per WNID, or flat."""
    import shutil

    from trtlab.data.classes import class_index

    dataset = kaggle_root / "input" / "my-photos" / "val"
    for path, label in zip(demo_data.paths, demo_data.labels):
        if label < 0:
            continue
        folder = dataset / (class_index()[int(label)][0] if layout == "wnid" else "")
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / Path(path).name)
    return dataset


def test_an_attached_wnid_photo_dataset_is_found_and_a_flat_one_is_named(kaggle, demo_data, monkeypatch):
    from trtlab.data.imagenet import describe_attached, find_imagenet_root

    monkeypatch.setenv("TRTLAB_KAGGLE_ROOT", str(kaggle["root"]))
    monkeypatch.delenv("TRTLAB_IMAGENET", raising=False)
    assert find_imagenet_root() is None
    flat = _attach_photo_dataset(kaggle["root"], demo_data, layout="flat")
    assert find_imagenet_root() is None  # photos without ImageNet labels are not taken as ImageNet ...
    assert describe_attached() == "my-photos (21 images)"  # ... but the message says what is there
    import shutil

    shutil.rmtree(flat.parent)
    wnid = _attach_photo_dataset(kaggle["root"], demo_data)
    assert find_imagenet_root() == wnid


def test_the_kernel_variable_without_kaggles_folders_is_one_line_and_nothing_created(tmp_path):
    """Issue 36: a machine that merely carries $KAGGLE_KERNEL_RUN_TYPE (no /kaggle/working) is not Kaggle: one line
    says so, the workspace is the usual one, and nothing is created under the (absent) Kaggle root."""
    root = tmp_path / "no-kaggle-here"
    env = {k: v for k, v in os.environ.items() if k != "TRTLAB_WORKSPACE"}
    env.update(TRTLAB_KAGGLE_ROOT=str(root), KAGGLE_KERNEL_RUN_TYPE="Interactive")
    code = ("import logging; logging.basicConfig(level=logging.INFO, format='%(message)s')\n"
            "import trtlab\nfrom trtlab.core.workspace import on_kaggle\n"
            "print(on_kaggle(), on_kaggle(), trtlab.workspace_dir())")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", str(REPO / "runs")]
    said = [line for line in done.stderr.splitlines() if "KAGGLE_KERNEL_RUN_TYPE" in line]
    assert len(said) == 1 and str(root / "working") in said[0] and "not a Kaggle kernel" in said[0]
    assert not root.exists()
