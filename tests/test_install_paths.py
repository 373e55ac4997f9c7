"""Installing from a read-only tree and running install.sh (issue 36 items 7 and 10).

* Every PEP 517 hook pip may call runs on a read-only copy of this tree (/kaggle/input/<dataset>) and writes
  nothing there: pip calls get_requires_for_build_wheel whenever it builds in an isolated environment — the
  default, with internet on — and setuptools runs `egg_info` in the tree for it ("could not create
  'trtlab.egg-info': Read-only file system"). The hooks are called as pip calls them (pyproject_hooks, the library
  pip vendors), with this interpreter's setuptools.
* install.sh without internet says in one line to install as README's way b, instead of pip's 13 lines ending in
  "setuptools>=64"; it says what each pip step does before it starts; and pip's dependency-conflict report never
  names foolbox's eagerpy and GitPython (foolbox is installed --no-deps on purpose).

Read-only: a read-only bind mount in a user namespace where `unshare` allows it, `chmod -R a-w` otherwise, and a
snapshot of every file either way (tests/test_kaggle_install.py); install.sh runs in a bare venv that reuses this
interpreter's packages, offline (PIP_NO_INDEX), so nothing is downloaded and nothing is installed here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kaggle_env import borrowing_venv as kaggle_venv
from kaggle_env import copy_tree as _copy_tree
from kaggle_env import environment as _environment
from kaggle_env import read_only_wrapper as _read_only_wrapper
from test_kaggle_install import _snapshot

HOOKS = ("get_requires_for_build_wheel", "get_requires_for_build_sdist", "get_requires_for_build_editable",
         "prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable", "build_wheel", "build_sdist",
         "build_editable")

CALL_HOOKS = r"""
import json, sys
try:
    from pyproject_hooks import BuildBackendHookCaller
except ImportError:
    from pip._vendor.pyproject_hooks import BuildBackendHookCaller
tree, out = sys.argv[1], sys.argv[2]
caller = BuildBackendHookCaller(tree, "trtlab_backend", backend_path=["build_backend"])
results = {}
for hook in sys.argv[3:]:
    try:
        result = getattr(caller, hook)() if hook.startswith("get_requires") else getattr(caller, hook)(out)
        results[hook] = {"ok": True, "result": result}
    except Exception as exc:
        results[hook] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
print("HOOKS " + json.dumps(results))
"""


def read_only(tree: Path) -> tuple:
    """`tree` made read-only (chmod, and a read-only bind mount where allowed); the argv prefix for the latter."""
    wrap = _read_only_wrapper(tree)
    subprocess.run(["chmod", "-R", "a-w", str(tree)], check=True)
    return wrap


def test_every_build_hook_runs_on_a_read_only_tree_and_writes_nothing_there(tmp_path):
    tree = _copy_tree(tmp_path / "input" / "trtlab-source")
    out = tmp_path / "out"
    out.mkdir()
    wrap = read_only(tree)
    before = _snapshot(tree)
    try:
        done = subprocess.run([*wrap, sys.executable, "-c", CALL_HOOKS, str(tree), str(out), *HOOKS], cwd=tmp_path,
                              env=_environment(), capture_output=True, text=True, timeout=600)
        after = _snapshot(tree)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(tree)], check=True)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("HOOKS ")), None)
    assert line, done.stdout[-2000:] + done.stderr[-4000:]
    results = json.loads(line[len("HOOKS "):])
    failed = {hook: r["error"] for hook, r in results.items() if not r["ok"]}
    assert not failed, f"hooks failed on the read-only tree:\n{json.dumps(failed, indent=1)}\n{done.stderr[-3000:]}"
    assert after == before, "a hook wrote into the read-only tree"
    wheel = out / results["build_wheel"]["result"]
    assert "trtlab/__init__.py" in zipfile.ZipFile(wheel).namelist()
    editable = zipfile.ZipFile(out / results["build_editable"]["result"])
    pth = [name for name in editable.namelist() if name.endswith(".pth")]
    # an editable install points at the tree itself, never at a temporary copy of it
    assert pth and editable.read(pth[0]).decode().strip() == str(tree)


def test_the_backend_wraps_every_setuptools_hook_that_writes_into_the_tree():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "build_backend"))
    try:
        import trtlab_backend
        from setuptools import build_meta
    finally:
        sys.path.pop(0)
    hooks = {name for name in build_meta.__all__ if callable(getattr(build_meta, name)) and name[0].islower()}
    assert set(HOOKS) <= hooks
    wrapped = {name for name in hooks if getattr(trtlab_backend, name).__module__ == "trtlab_backend"}
    # build_editable writes nothing into the tree (setuptools builds it in a temporary folder) and must point there
    assert wrapped == hooks - {"build_editable"}, sorted(hooks - wrapped)


def install_sh(kaggle, tree: Path, wrap=(), **env) -> subprocess.CompletedProcess:
    environment = _environment(PYTHON=str(kaggle["python"]), **env)
    environment.pop("CI", None)
    return subprocess.run([*wrap, "bash", str(tree / "install.sh")], cwd=tree, env=environment, capture_output=True,
                          text=True, timeout=900)


def test_install_sh_without_internet_is_one_line_naming_readmes_way_b(tmp_path):
    kaggle = kaggle_venv(tmp_path)
    tree = _copy_tree(kaggle["input"] / "trtlab-source")
    wrap = read_only(tree)
    before = _snapshot(tree)
    try:
        done = install_sh(kaggle, tree, wrap)  # PIP_NO_INDEX=1: pip reaches no index, as on Kaggle without internet
        after = _snapshot(tree)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(tree)], check=True)
    errors = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(errors) == 1, done.stdout + done.stderr
    line = errors[0]
    assert line.startswith("error: install.sh: pip could not fetch setuptools>=64 (no internet or no package index "
                           "here)"), line
    assert "README's \"On Kaggle\" way b" in line and f"pip install --no-build-isolation --no-index --find-links " \
                                                      f"<a folder of the wheels it needs> {tree}" in line, line
    assert after == before


def _dummy_wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel of `name` `version` holding only its metadata (nothing importable)."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: trtlab-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{dist}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


def test_install_sh_says_each_step_and_pip_names_no_foolbox_conflict(tmp_path):
    """A real pip conflict report: the venv holds scipy "0.1" (metadata only), so installing trtlab (scipy>=1.10)
    installs scipy "99.0" from a local wheel; foolbox (visible, without eagerpy and GitPython) requires scipy, so
    pip's check reports foolbox's missing two — which install.sh leaves out, and nothing else changes."""
    kaggle = kaggle_venv(tmp_path)
    python = str(kaggle["python"])
    probe = ("import importlib.metadata as m, importlib.util as u; print(m.version('foolbox'), "
             "u.find_spec('eagerpy') is None, u.find_spec('git') is None)")
    seen = subprocess.run([python, "-c", probe], env=_environment(), capture_output=True, text=True)
    if seen.returncode != 0 or not seen.stdout.strip().endswith("True True"):
        pytest.skip(f"needs foolbox installed without eagerpy and GitPython, as install.sh leaves it: {seen.stdout}")
    old = kaggle["site"] / "scipy-0.1.dist-info"
    old.mkdir()
    (old / "METADATA").write_text("Metadata-Version: 2.1\nName: scipy\nVersion: 0.1\n")
    (old / "INSTALLER").write_text("pip\n")
    (old / "RECORD").write_text("".join(f"scipy-0.1.dist-info/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD")))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _dummy_wheel(wheels, "scipy", "99.0")
    tree = _copy_tree(tmp_path / "clone")
    # offline: the wheel folder only, and no build isolation (it would ask the index for setuptools)
    done = install_sh(kaggle, tree, PIP_FIND_LINKS=str(wheels), PIP_NO_BUILD_ISOLATION="0")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert (kaggle["site"] / "scipy-99.0.dist-info").is_dir()  # scipy was installed: pip checked foolbox's needs
    assert "foolbox" not in done.stderr and "eagerpy" not in output.lower() and "gitpython" not in output.lower()
    said = [line for line in done.stdout.splitlines() if line.startswith("install.sh: installing ")]
    assert [line.split(" (")[0] for line in said] == [
        "install.sh: installing trtlab", "install.sh: installing the demo's exporter and image reader",
        "install.sh: installing the demo model's weights and photos"], said
    assert "trtlab installed" in done.stdout
