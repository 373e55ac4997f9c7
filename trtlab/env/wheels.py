"""The TensorRT Python bindings: which wheel of a tar tree fits this interpreter, whether one is installed, and an
offline install (``pip --no-index --no-deps``) of the tree's wheel."""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from trtlab.env.candidates import Candidate
from trtlab.env.install import bindings_command
from trtlab.env.layout import WHEEL_RE, version_tuple


def interpreter_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def pick_wheel(wheels: list[str], version: str | None = None, python_tag: str | None = None) -> str | None:
    """The bindings wheel for this interpreter (cpXY) and, when given, this TensorRT version."""
    python_tag = python_tag or interpreter_tag()
    want = version_tuple(version)[:3] if version else None
    for path in wheels:
        m = WHEEL_RE.match(os.path.basename(path))
        if not m or m.group("py") not in (python_tag, "py3"):
            continue
        have = version_tuple(m.group("ver"))
        if want and have[: len(want)] != want[: len(have)]:
            continue
        if m.group("plat").startswith(("linux", "manylinux")):
            return path
    return None


def installed_bindings_version() -> str | None:
    """Version of the installed ``tensorrt`` Python package, read from its files (never imported here)."""
    for module in ("tensorrt", "tensorrt_bindings"):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec and spec.origin and os.path.isfile(spec.origin):
            text = Path(spec.origin).read_text(errors="replace")
            m = re.search(r"""__version__\s*=\s*["']([^"'#]+)["']""", text)
            if m:
                return m.group(1)
    from importlib import metadata
    for dist in ("tensorrt", "tensorrt-cu12-bindings", "tensorrt-cu13-bindings", "tensorrt-cu12", "tensorrt-cu13"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def install_bindings(cand: Candidate, target: str | None = None, timeout: float = 600) -> str:
    """Install the tree's bindings wheel offline (``pip --no-index --no-deps``); return what happened."""
    wheel = pick_wheel(cand.wheels, cand.version)
    if not wheel:
        if not cand.wheels:
            return (f"no bindings wheel in the tree of {cand.lib_dir}: {bindings_command(cand.version, cand.lib_dir)} (needs internet) "
                    f"or add the tar's python/ folder")
        return (f"no bindings wheel for this Python ({interpreter_tag()}) and TensorRT {cand.version} among "
                f"{', '.join(os.path.basename(w) for w in cand.wheels)}")
    wheel_version = WHEEL_RE.match(os.path.basename(wheel)).group("ver")
    if target is None and installed_bindings_version() == wheel_version:
        return f"tensorrt {wheel_version} bindings already installed"
    if target and glob.glob(os.path.join(target, f"tensorrt-{wheel_version}.dist-info")):
        return f"tensorrt {wheel_version} bindings already installed in {target}"
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check", "-q"]
    if target:
        cmd += ["--target", target, "--upgrade"]
    cmd.append(wheel)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return f"pip could not install {os.path.basename(wheel)}: {tail[0]}"
    return f"installed {os.path.basename(wheel)}" + (f" into {target}" if target else "")
