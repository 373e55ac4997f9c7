"""Emulated Kaggle kernels for the install tests and the notebook chain: an emulated /kaggle (input read-only,
working writable; $TRTLAB_KAGGLE_ROOT points trtlab at it), a Python for the kernel, the repository as each of
README's three install ways has it, and notebook 00's install cell set up as its intro tells a user.

Two kinds of kernel Python:
- `borrowing_venv`: quick and offline. A bare venv that reuses this interpreter's packages through a .pth (all but
  trtlab's own, and any `hidden` ones), so pip installs nothing but trtlab. Enough to check where an install puts
  trtlab and what a fresh kernel imports; never enough to check what an install brings.
- `kaggle_image_venv`: only what a Kaggle image has (KAGGLE_IMAGE), installed by pip from its configured sources
  (torch==2.13.0 is a CPU wheel in the machines' find-links folder; the rest from PyPI). Nothing is borrowed, so a
  package the notebooks need and no install brings fails there as it fails on Kaggle. About 90-180 s.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COPY_IGNORED = (".git", ".trt-bindings", ".whl", "runs", "build", "dist", "*.egg-info", "__pycache__", ".venv",
                ".pytest_cache")
# What a Kaggle GPU image ships of what trtlab and its notebooks touch (Kaggle/docker-python builds on Colab's
# image: torch, numpy, pandas, matplotlib, scipy, scikit-image, numba, ipywidgets, Jupyter; kaggle_requirements.txt
# adds onnx), plus the setuptools and wheel every image has (the install cell builds trtlab with them).
KAGGLE_IMAGE = ("torch==2.13.0", "numpy", "pandas", "matplotlib", "ipywidgets", "scipy", "onnx", "numba",
                "scikit-image", "ipykernel", "nbclient", "setuptools>=64", "wheel")
SOURCE_PLACEHOLDER = '"git+https://github.com/<owner>/trtlab"'
WHEELS_PLACEHOLDER = "TRTLAB_WHEELS = None"


def copy_tree(destination: Path) -> Path:
    """This repository's files as a fresh clone has them (no workspace, build outputs or bindings)."""
    shutil.copytree(REPO, destination, ignore=shutil.ignore_patterns(*COPY_IGNORED), symlinks=True)
    return destination


def environment(offline: bool = True, **extra) -> dict:
    """This process's environment less trtlab's, pip's and Kaggle's variables (and PYTHONPATH, which points at the
    checkout under test); `offline`: pip may not reach an index."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRTLAB_", "PIP_", "KAGGLE_")) and k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    if offline:
        env.update(PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1")
    env.update(extra)
    return env


def kernel_environment(kaggle, offline: bool = True) -> dict:
    """What a process of the emulated kernel sees: Kaggle's variable, the emulated root."""
    return environment(offline, TRTLAB_KAGGLE_ROOT=str(kaggle["root"]), KAGGLE_KERNEL_RUN_TYPE="Interactive")


def run(argv, cwd: Path, env: dict, timeout: int = 600) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    return done.stdout.strip()


def _layout(tmp_path: Path) -> dict:
    root = tmp_path / "kaggle"
    (root / "input").mkdir(parents=True)
    (root / "working").mkdir()
    return {"root": root, "input": root / "input", "working": root / "working"}


def _site_packages(python: Path) -> Path:
    return Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], python.parent,
                    environment()))


def _hidden(entry: str, names) -> bool:
    """Whether a site-packages entry belongs to one of `names` (import names, '_' for '-'): its package or module,
    its metadata (name-version.dist-info), its .pth, an editable install's files."""
    entry = entry.lower()
    return any(entry == n or entry.startswith((f"{n}-", f"{n}.", f"__editable__.{n}-", f"__editable___{n}_"))
               for n in names)


def borrowing_venv(tmp_path: Path, hidden=()) -> dict:
    """The emulated /kaggle under `tmp_path` and a bare venv that reuses this interpreter's packages — all but
    trtlab's own (its editable install and metadata: the venv sees no trtlab until one is installed into it) and
    the `hidden` ones (import or distribution names, '_' for '-') — through a folder of links appended after the
    venv's own site-packages, as --system-site-packages would, without running the .pth files there."""
    kaggle = _layout(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = _site_packages(python)
    shared = tmp_path / "borrowed-site-packages"
    shared.mkdir()
    names = ("trtlab", *(n.lower().replace("-", "_") for n in hidden))
    for folder in dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")):
        for entry in Path(folder).iterdir():
            if not _hidden(entry.name, names) and not (shared / entry.name).exists():
                (shared / entry.name).symlink_to(entry)
    (site / "zz_reuse_installed_packages.pth").write_text(f"{shared}\n")
    # A venv made without pip has no pip command: `pip` there must still be this venv's, never the next on PATH.
    for name in ("pip", "pip3"):
        (venv / "bin" / name).write_text(f'#!/bin/sh\nexec "{python}" -m pip "$@"\n')
        (venv / "bin" / name).chmod(0o755)
    found = run([python, "-c", "import importlib.util as u; s = u.find_spec('trtlab'); print(s and s.origin)"],
                tmp_path, environment())
    assert found == "None", f"the borrowing venv sees a trtlab at {found}"
    return {**kaggle, "python": python, "site": site}


def kaggle_image_venv(tmp_path: Path) -> dict:
    """The emulated /kaggle under `tmp_path` and a venv with only KAGGLE_IMAGE in it (pip's configured sources;
    'seconds': how long the venv took)."""
    kaggle = _layout(tmp_path)
    venv = tmp_path / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", *KAGGLE_IMAGE], tmp_path, environment(offline=False), timeout=1800)
    return {**kaggle, "python": python, "site": _site_packages(python), "seconds": time.monotonic() - started}


def installed(kaggle) -> dict[str, str]:
    """{distribution: version} installed in the kernel's Python (pip's own listing)."""
    listing = run([kaggle["python"], "-m", "pip", "list", "--format=json"], kaggle["working"], environment())
    return {d["name"].lower(): d["version"] for d in json.loads(listing)}


def read_only_dataset(kaggle) -> Path:
    """Way b's source: this tree copied as /kaggle/input/trtlab-source, made read-only (chmod; root can still
    write, so callers compare snapshots)."""
    dataset = copy_tree(kaggle["input"] / "trtlab-source")
    subprocess.run(["chmod", "-R", "a-w", str(dataset)], check=True)
    return dataset


def read_only_wrapper(tree: Path) -> tuple:
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


def git_repository(tmp_path: Path) -> str:
    """Way a's source: a git repository of this tree; its URL as pip takes it (README's line with the GitHub URL:
    "trtlab @ git+https://github.com/<owner>/trtlab"; localhost: the packaging pip vendors refuses a file URL
    with an empty host in a named requirement)."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed (pip needs it for git+ URLs)")
    repository = copy_tree(tmp_path / "remote" / "trtlab")
    identity = ["-c", "user.name=trtlab-test", "-c", "user.email=test@trtlab.invalid", "-c", "init.defaultBranch=main"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        run([git, *identity, *argv], repository, environment())
    return f"git+file://localhost{repository}"


def pip_install(kaggle, *args, cwd: Path, wrap=()) -> None:
    """What README's shell lines run: pip install of trtlab alone (the borrowing venv has the rest)."""
    run([*wrap, kaggle["python"], "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", *args], cwd,
        environment())


def set_install_source(nb, source, wheels=None):
    """Notebook 00's first code cell, the install cell, with TRTLAB_SOURCE (and TRTLAB_WHEELS) set as its intro
    tells a user; returns the cell."""
    cell = next(c for c in nb.cells if c.cell_type == "code")
    assert SOURCE_PLACEHOLDER in cell.source and WHEELS_PLACEHOLDER in cell.source, cell.source
    cell.source = cell.source.replace(SOURCE_PLACEHOLDER, json.dumps(str(source))).replace(
        WHEELS_PLACEHOLDER, f"TRTLAB_WHEELS = {json.dumps(str(wheels)) if wheels else None}")
    return cell


def install_cell(source, wheels=None) -> str:
    """The source of notebook 00's install cell set up for `source` (and `wheels`)."""
    import nbformat

    nb = nbformat.read(str(REPO / "notebooks" / "00_env_setup.ipynb"), as_version=4)
    return set_install_source(nb, source, wheels).source


def kernel_spec(kaggle, offline: bool = True, read_only: bool = False) -> Path:
    """A Jupyter kernel `kaggle-venv` of the emulated kernel's Python; returns the folder for JUPYTER_PATH.
    `offline`: its pip may not reach an index; `read_only`: /kaggle/input is mounted read-only in the kernel (what
    it runs, pip included, cannot write there, root or not; where unshare cannot, it is as chmod left it)."""
    spec = kaggle["root"].parent / "jupyter" / "kernels" / "kaggle-venv"
    spec.mkdir(parents=True)
    # The venv's bin first on PATH, as a Kaggle kernel's own pip is: `!pip install …` in a cell installs into the
    # kernel's Python, never into the Python running these tests.
    env = {"PYTHONPATH": "", "TRTLAB_WORKSPACE": "", "KAGGLE_KERNEL_RUN_TYPE": "Interactive",
           "TRTLAB_KAGGLE_ROOT": str(kaggle["root"]),
           "PATH": os.pathsep.join([str(Path(kaggle["python"]).parent), os.environ.get("PATH", "")]),
           "VIRTUAL_ENV": str(Path(kaggle["python"]).parent.parent)}
    if offline:
        env["PIP_NO_INDEX"] = "1"
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [*(read_only_wrapper(kaggle["input"]) if read_only else ()), str(kaggle["python"]), "-m",
                 "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "emulated Kaggle kernel", "language": "python", "env": env}))
    return spec.parent.parent
