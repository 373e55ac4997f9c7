"""Installing trtlab on Kaggle in one cell, the three ways README's "On Kaggle" names, each under an emulated
Kaggle layout: /kaggle/input read-only, /kaggle/working writable, a fresh Python process after the install,
trtlab imported with /kaggle/working as the current directory (where a Kaggle kernel starts).

a. internet on: `pip install git+<repository>` (here a git+file:// URL of a local repository of this tree);
b. the repository attached as a dataset: `pip install /kaggle/input/<dataset>`, the source mounted read-only (a
   read-only bind mount in a user namespace where `unshare` allows it, `chmod -R a-w` otherwise; nothing may be
   written into it either way);
c. a clone at /kaggle/working/trtlab, `pip install -e .` or `pip install .` inside it.

Quick and offline: each install goes into a bare venv whose site-packages reach this interpreter's packages through
a .pth (the dependencies are reused, never downloaded: pip runs with --no-index --no-deps --no-build-isolation),
without running this interpreter's own .pth files, so the editable trtlab of the checkout under test is not seen.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COPY_IGNORED = (".git", ".trt-bindings", ".whl", "runs", "build", "dist", "*.egg-info", "__pycache__", ".venv",
                ".pytest_cache")


def _snapshot(root: Path) -> dict:
    """Every file and folder under `root`, with mode and content hash: any write into the tree changes it."""
    return {str(p.relative_to(root)): ("dir", p.stat().st_mode) if p.is_dir() else
            (p.stat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(root.rglob("*"))}


def _copy_tree(destination: Path) -> Path:
    """This repository's files as a fresh clone has them (no workspace, build outputs or bindings)."""
    shutil.copytree(REPO, destination, ignore=shutil.ignore_patterns(*COPY_IGNORED), symlinks=True)
    return destination


def _environment(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRTLAB_", "PIP_", "KAGGLE_")) and k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1", PYTHONNOUSERSITE="1")
    env.update(extra)
    return env


def kaggle_venv(tmp_path: Path) -> dict:
    """An emulated /kaggle (input, working) under `tmp_path` and a bare venv that reuses this interpreter's
    packages (tests/test_notebooks.py runs the notebook chain in it too)."""
    root = tmp_path / "kaggle"
    (root / "input").mkdir(parents=True)
    (root / "working").mkdir()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # This interpreter's site-packages, seen through a folder of links to each entry but trtlab's own (its
    # editable install and its metadata: the venv must see no trtlab until one is installed into it), appended
    # after the venv's own site-packages as --system-site-packages would, without running the .pth files there.
    shared = tmp_path / "borrowed-site-packages"
    shared.mkdir()
    for folder in dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")):
        for entry in Path(folder).iterdir():
            if not entry.name.lower().replace("-", "_").startswith(("trtlab", "__editable__.trtlab", "__editable___trtlab")) \
                    and not (shared / entry.name).exists():
                (shared / entry.name).symlink_to(entry)
    (site / "zz_reuse_installed_packages.pth").write_text(f"{shared}\n")
    found = _run([python, "-c", "import importlib.util as u; s = u.find_spec('trtlab'); print(s and s.origin)"],
                 tmp_path, _environment())
    if found != "None":
        pytest.skip(f"a trtlab is installed as a regular package in {found}: it would shadow the one installed here")
    return {"root": root, "input": root / "input", "working": root / "working", "python": python, "site": site}


@pytest.fixture
def kaggle(tmp_path) -> dict:
    return kaggle_venv(tmp_path)


def install_from_read_only_dataset(kaggle) -> Path:
    """Way b: this tree copied as /kaggle/input/trtlab-source, read-only, and `pip install` of it; its folder."""
    dataset = _copy_tree(kaggle["input"] / "trtlab-source")
    subprocess.run(["chmod", "-R", "a-w", str(dataset)], check=True)
    try:
        _pip_install(kaggle, str(dataset), cwd=kaggle["working"], wrap=_read_only_wrapper(dataset))
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(dataset)], check=True)
    return dataset


def install_from_git(kaggle, tmp_path: Path) -> Path:
    """Way a: `pip install "trtlab @ git+<repository>"` of a git repository of this tree; the repository."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed (pip needs it for git+ URLs)")
    repository = _copy_tree(tmp_path / "remote" / "trtlab")
    identity = ["-c", "user.name=trtlab-test", "-c", "user.email=test@trtlab.invalid", "-c", "init.defaultBranch=main"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        _run([git, *identity, *argv], repository, _environment())
    # README's line with the GitHub URL: pip install "trtlab @ git+https://github.com/<owner>/trtlab"
    # (localhost: the packaging pip vendors refuses a file URL with an empty host in a named requirement)
    _pip_install(kaggle, f"trtlab @ git+file://localhost{repository}", cwd=kaggle["working"])
    return repository


def install_clone(kaggle, editable: bool) -> Path:
    """Way c: a clone at /kaggle/working/trtlab, `pip install -e .` (or `pip install .`) inside it; the clone."""
    clone = _copy_tree(kaggle["working"] / "trtlab")
    _pip_install(kaggle, *(["-e"] if editable else []), ".", cwd=clone)
    return clone


def kernel_spec(kaggle) -> Path:
    """A Jupyter kernel `kaggle-venv` of the emulated kernel's Python; returns the folder for JUPYTER_PATH."""
    import json

    spec = kaggle["root"].parent / "jupyter" / "kernels" / "kaggle-venv"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(kaggle["python"]), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "emulated Kaggle kernel", "language": "python",
        "env": {"PYTHONPATH": "", "TRTLAB_WORKSPACE": "", "KAGGLE_KERNEL_RUN_TYPE": "Interactive",
                "TRTLAB_KAGGLE_ROOT": str(kaggle["root"]), "PIP_NO_INDEX": "1"}}))
    return spec.parent.parent


def _run(argv, cwd: Path, env: dict) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout.strip()


def _pip_install(kaggle, *args, cwd: Path, wrap=()) -> None:
    _run([*wrap, kaggle["python"], "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", *args], cwd,
         _environment())


def _fresh_kernel(kaggle, cwd: Path | None = None) -> tuple[Path, Path]:
    """(trtlab/__init__.py, default workspace) as a new kernel started in /kaggle/working sees them."""
    code = ("import trtlab, trtlab.cli.main\n"
            "from trtlab.core.workspace import default_workspace, on_kaggle\n"
            "assert callable(trtlab.run_demo) and on_kaggle()\n"
            "print(trtlab.__file__); print(default_workspace()[0])")
    env = _environment(TRTLAB_KAGGLE_ROOT=str(kaggle["root"]), KAGGLE_KERNEL_RUN_TYPE="Interactive")
    module, workspace = _run([kaggle["python"], "-c", code], cwd or kaggle["working"], env).splitlines()[-2:]
    assert Path(workspace) == kaggle["working"] / "trtlab-runs"
    return Path(module), Path(workspace)


def _read_only_wrapper(tree: Path) -> tuple:
    """argv prefix that runs a command with `tree` mounted read-only (for root too), or () where unshare cannot."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    wrap = (unshare, "-rm", "sh", "-c", script, str(tree))
    # Where user namespaces or mounts are not allowed (some containers), chmod and the snapshot check remain.
    writes = 'touch "$0/.probe" 2>/dev/null && rm "$0/.probe" && exit 1 || exit 0'
    probe = subprocess.run([*wrap, "sh", "-c", writes, str(tree)], capture_output=True)
    return wrap if probe.returncode == 0 else ()


def test_a_pip_install_from_the_git_repository(kaggle, tmp_path):
    install_from_git(kaggle, tmp_path)
    module, _ = _fresh_kernel(kaggle)
    assert module == kaggle["site"] / "trtlab" / "__init__.py"


def test_b_pip_install_from_a_read_only_dataset(kaggle):
    dataset = _copy_tree(kaggle["input"] / "trtlab-source")
    wrap = _read_only_wrapper(dataset)
    for current, _, _ in os.walk(dataset):
        os.chmod(current, 0o555)
    subprocess.run(["chmod", "-R", "a-w", str(dataset)], check=True)
    before = _snapshot(dataset)
    try:
        _pip_install(kaggle, str(dataset), cwd=kaggle["working"], wrap=wrap)
        assert _snapshot(dataset) == before, "the build wrote into the read-only dataset"
        module, _ = _fresh_kernel(kaggle)
        assert module == kaggle["site"] / "trtlab" / "__init__.py"
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(dataset)], check=True)


@pytest.mark.parametrize("editable", [True, False], ids=["pip-install-e", "pip-install"])
def test_c_a_clone_named_trtlab_in_the_working_directory(kaggle, editable):
    clone = install_clone(kaggle, editable)
    installed = clone / "trtlab" / "__init__.py" if editable else kaggle["site"] / "trtlab" / "__init__.py"
    # From /kaggle/working the clone folder `trtlab/` is on the path first, as an empty namespace package.
    for cwd in (kaggle["working"], kaggle["root"]):
        module, _ = _fresh_kernel(kaggle, cwd)
        assert module == installed, f"from {cwd}: {module}"
    # Inside the clone its own package folder comes first on the path: the real package too, the same files.
    module, _ = _fresh_kernel(kaggle, clone)
    assert module == clone / "trtlab" / "__init__.py"


def _install_cell() -> str:
    """The first code cell of notebook 00_env_setup: the one-cell install."""
    import nbformat

    nb = nbformat.read(str(REPO / "notebooks" / "00_env_setup.ipynb"), as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code")
    assert 'TRTLAB_SOURCE = "git+https://github.com/' in cell and cell.rstrip().endswith("import trtlab")
    return cell


@pytest.mark.slow  # pip resolves every dependency once (all present, nothing downloaded): 10-30 s
def test_notebook_00_installs_once_and_never_again(kaggle):
    # A kernel without trtlab, started in /kaggle/working beside a clone folder named trtlab (not the package):
    # the cell installs from the attached dataset; in the next kernel it finds trtlab and runs no pip at all (the
    # source is then a path that does not exist, so any pip run would fail).
    dataset = _copy_tree(kaggle["input"] / "trtlab-source")
    (kaggle["working"] / "trtlab").mkdir()
    cell = _install_cell()
    env = _environment(TRTLAB_KAGGLE_ROOT=str(kaggle["root"]), KAGGLE_KERNEL_RUN_TYPE="Interactive")
    check = "\nprint(trtlab.__file__)"
    first = cell.replace("git+https://github.com/<owner>/trtlab", str(dataset))
    assert _run([kaggle["python"], "-c", first + check], kaggle["working"], env).splitlines()[-1] == \
        str(kaggle["site"] / "trtlab" / "__init__.py")
    again = cell.replace("git+https://github.com/<owner>/trtlab", str(kaggle["input"] / "no-such-dataset"))
    assert _run([kaggle["python"], "-c", again + check], kaggle["working"], env) == \
        str(kaggle["site"] / "trtlab" / "__init__.py")


@pytest.mark.slow  # a Jupyter kernel and notebook 00's TensorRT search: 10-30 s
def test_notebook_00_runs_in_a_fresh_kernel_after_installing_from_a_read_only_dataset(kaggle, monkeypatch):
    # Install b, then notebook 00 in a new Jupyter kernel of that environment started in /kaggle/working: its
    # install cell finds trtlab and does nothing, and every cell runs.
    import nbformat
    from nbclient import NotebookClient

    install_from_read_only_dataset(kaggle)
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_spec(kaggle)))
    nb = nbformat.read(str(REPO / "notebooks" / "00_env_setup.ipynb"), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("print(trtlab.__file__)"))
    NotebookClient(nb, timeout=600, kernel_name="kaggle-venv",
                   resources={"metadata": {"path": str(kaggle["working"])}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.outputs == []  # nothing installed again, not a line printed
    assert nb.cells[-1].outputs[0]["text"].strip() == str(kaggle["site"] / "trtlab" / "__init__.py")


def test_install_sh_refuses_a_python_that_is_not_a_virtual_environment(tmp_path):
    # Outside CI and Kaggle, install.sh never changes a system Python: one line names the venv step, nothing runs.
    python = Path(sys.base_prefix) / "bin" / "python3"
    if not python.exists():
        pytest.skip(f"no base interpreter at {python}")
    env = {k: v for k, v in _environment(PYTHON=str(python)).items()
           if k not in ("CI", "VIRTUAL_ENV", "CONDA_PREFIX")}
    done = subprocess.run(["bash", str(REPO / "install.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: install.sh: ") and " — make one first: " in line
    assert "python3 -m venv .venv && . .venv/bin/activate && bash install.sh" in line
