"""trtlab.env runs on the standard library alone: ``python -m trtlab.env`` in a Python where importing numpy,
onnx, onnxruntime or pandas raises (a sitecustomize installs a sys.meta_path finder that refuses them and writes
every attempt to a log). That is how setup_kaggle_env.sh meets a half-installed machine.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from env_trees import PY_TAG, VERSION, built, broken_input, fingerprint, needs_cc, python_env  # noqa: F401

BLOCKED = ("numpy", "onnx", "onnxruntime", "pandas")
_SITECUSTOMIZE = '''
import os, sys
_BLOCKED = {blocked!r}
_LOG = os.environ["TRTLAB_BLOCKED_IMPORT_LOG"]


class _RefuseThirdParty:
    """Refuses the blocked packages and logs each attempt (a finder that raises stops the whole import)."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            with open(_LOG, "a") as fh:
                fh.write(name + "\\n")
            raise ImportError(f"{{name}} is blocked: trtlab.env must run on the standard library")
        return None


sys.meta_path.insert(0, _RefuseThirdParty())
'''


@pytest.fixture()
def stdlib_env(tmp_path):
    """(environment, log path) for a subprocess in which the blocked packages cannot be imported."""
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(blocked=set(BLOCKED)))
    log = tmp_path / "blocked-imports.log"
    env = python_env(TRTLAB_BLOCKED_IMPORT_LOG=str(log), TRTLAB_WORKSPACE=str(tmp_path / "ws"))
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    # The blocker works (else every assertion below would pass for nothing).
    for name in BLOCKED:
        probe = subprocess.run([sys.executable, "-c", f"import {name}"], env=env, capture_output=True, text=True)
        assert probe.returncode == 1 and "is blocked: trtlab.env must run on the standard library" in probe.stderr
    log.unlink()
    return env, log


def _attempts(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


@needs_cc
def test_discover_runs_on_the_standard_library(stdlib_env, broken_input):
    env, log = stdlib_env
    proc = subprocess.run([sys.executable, "-m", "trtlab.env", "discover", "--json", "--root", str(broken_input)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    tar = next(c for c in found if "TensorRT-10.3.0.26" in c["lib_dir"])
    assert tar["usable"] and tar["version"] == "10.3.0.26" and len(tar["problems"]) >= 4
    assert _attempts(log) == []  # not even tried


@needs_cc
def test_setup_repairs_loads_and_installs_bindings_on_the_standard_library(stdlib_env, broken_input, tmp_path):
    env, log = stdlib_env
    before = fingerprint(broken_input)
    dest, pylib = tmp_path / "working" / "lib", tmp_path / "pylib"
    proc = subprocess.run([sys.executable, "-m", "trtlab.env", "setup", "--root", str(broken_input), "--dest", str(dest),
                           "--bindings-target", str(pylib)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The fresh-process check (also blocked: it inherits the environment) loaded the copies on their own.
    assert "check in a fresh Python (no LD_LIBRARY_PATH): loaded libnvinfer.so.10" in proc.stdout
    assert f"installed tensorrt-{VERSION}-{PY_TAG}" in proc.stdout and (pylib / "tensorrt" / "__init__.py").is_file()
    assert (dest / "libnvonnxparser.so.10").is_file() and f"source {dest / 'env.sh'}" in proc.stdout
    assert fingerprint(broken_input) == before
    assert _attempts(log) == []


def test_doctor_reports_a_blocked_onnxruntime_instead_of_failing(stdlib_env, tmp_path):
    env, log = stdlib_env
    proc = subprocess.run([sys.executable, "-m", "trtlab", "doctor", "--json", "--root", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    data = json.loads(proc.stdout)
    # Without ONNX Runtime: exit 1 unless a working TensorRT is installed here (the documented doctor rule).
    assert proc.returncode == (0 if data["tensorrt_ready"] else 1), proc.stderr
    ort = next(r for r in data["rows"] if r["item"] == "onnxruntime")
    assert ort["value"] == "not usable" and "is blocked" in ort["detail"]
    assert set(_attempts(log)) <= {"onnxruntime"}  # the report asks for ONNX Runtime, and only for it
