"""Fake TensorRT trees for the env tests: real tiny shared libraries built with the C compiler.

The libraries imitate TensorRT's: versioned file names, SONAMEs with the major version, a
``tensorrt_version_MAJOR_MINOR_PATCH_BUILD`` export, and libnvonnxparser / libnvinfer_plugin linked against
libnvinfer.so.MAJOR. Nothing here needs a GPU or TensorRT. Used by tests/test_trt_env.py and tests/test_env_*.py.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CC = shutil.which("gcc") or shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (gcc/cc) on PATH: cannot build the test libraries")
PY_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
VERSION = "10.3.0"


def compile_lib(out: Path, source: str, soname: str, *link: str) -> None:
    src = out.parent / (out.name.split(".so")[0] + ".c")
    src.write_text(source)
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(out), str(src), f"-Wl,-soname,{soname}", *link],
                   check=True, capture_output=True)
    src.unlink()


def fake_wheel(path: Path, version: str) -> None:
    """A minimal bindings wheel: package `tensorrt` with __version__, installable by pip offline."""
    dist = f"tensorrt-{version}.dist-info"
    files = {
        "tensorrt/__init__.py": f'__version__ = "{version}"\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: tensorrt\nVersion: {version}\n",
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: trtlab-test\nRoot-Is-Purelib: false\nTag: {PY_TAG}-none-linux_x86_64\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


def build_release(folder: Path, version: str = VERSION, build: str = "26") -> Path:
    """libnvinfer (exporting tensorrt_version_*), libnvinfer_plugin and libnvonnxparser (both linked against
    libnvinfer.so.MAJOR) and a builder resource, all of one release, in ``folder``."""
    major = version.split(".")[0]
    symbol = "tensorrt_version_" + "_".join(version.split(".") + [build])
    folder.mkdir(parents=True, exist_ok=True)
    compile_lib(folder / f"libnvinfer.so.{version}", f"int {symbol} = 1;\nint trt_answer(void) {{ return 42; }}\n",
                f"libnvinfer.so.{major}")
    (folder / "libnvinfer.so").symlink_to(f"libnvinfer.so.{version}")  # for -lnvinfer; NEEDED records the SONAME
    compile_lib(folder / f"libnvonnxparser.so.{version}",
                "int trt_answer(void);\nint parser_answer(void) { return trt_answer() + 1; }\n",
                f"libnvonnxparser.so.{major}", f"-L{folder}", "-lnvinfer")
    compile_lib(folder / f"libnvinfer_plugin.so.{version}",
                "int trt_answer(void);\nint plugin_answer(void) { return trt_answer() + 2; }\n",
                f"libnvinfer_plugin.so.{major}", f"-L{folder}", "-lnvinfer")
    compile_lib(folder / f"libnvinfer_builder_resource.so.{version}", "int builder_resource_marker = 7;\n",
                f"libnvinfer_builder_resource.so.{version}")
    return folder


def make_read_only(root: Path) -> None:
    """Read-only like /kaggle/input (root ignores it: the tests compare fingerprints)."""
    for path in sorted(root.rglob("*"), reverse=True):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    root.chmod(0o555)


def make_broken_input(built: Path, root: Path) -> Path:
    """A read-only dataset as Kaggle mounts it, broken the usual ways, under ``root``. Returns ``root``."""
    lib = root / "tensorrt-tar" / "TensorRT-10.3.0.26" / "lib"
    lib.mkdir(parents=True)
    for name in (f"libnvinfer.so.{VERSION}", f"libnvonnxparser.so.{VERSION}", f"libnvinfer_plugin.so.{VERSION}",
                 f"libnvinfer_builder_resource.so.{VERSION}"):
        shutil.copy2(built / name, lib / name)
    (lib / "libnvinfer.so.10").write_bytes(b"")                       # 0-byte upload of the SONAME file
    (lib / "libnvinfer.so").symlink_to("libnvinfer.so.10.3.0.orig")    # dangling link
    (lib / "libnvinfer_plugin.so.10").symlink_to("libnvinfer_plugin.so")   # link loop
    (lib / "libnvinfer_plugin.so").symlink_to("libnvinfer_plugin.so.10")
    # libnvonnxparser.so.10 and libnvonnxparser.so are missing altogether
    python = lib.parent / "python"
    python.mkdir()
    fake_wheel(python / f"tensorrt-{VERSION}-{PY_TAG}-none-linux_x86_64.whl", VERSION)
    fake_wheel(python / f"tensorrt-{VERSION}-cp36-none-linux_x86_64.whl", VERSION)  # another Python: ignored
    # A second tree that is beyond repair: an LFS pointer and a truncated library.
    bad = root / "trt-from-git" / "lib"
    bad.mkdir(parents=True)
    (bad / f"libnvinfer.so.{VERSION}").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\n")
    (bad / f"libnvonnxparser.so.{VERSION}").write_bytes((built / f"libnvonnxparser.so.{VERSION}").read_bytes()[:200])
    make_read_only(root)
    return root


def fingerprint(root: Path) -> dict:
    """Every entry under root: type, link target or content hash, mode and mtime (links not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[p] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[p] = ("dir", st.st_mode, st.st_mtime_ns, tuple(sorted(os.listdir(p))))
            else:
                out[p] = ("file", hashlib.sha256(Path(p).read_bytes()).hexdigest(), st.st_mode, st.st_mtime_ns)
    out[str(root)] = ("root", os.lstat(root).st_mode, os.lstat(root).st_mtime_ns, tuple(sorted(os.listdir(root))))
    return out


def python_env(**extra: str) -> dict:
    """Environment for a subprocess that imports this checkout's trtlab (no LD_LIBRARY_PATH)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Healthy build outputs of one release (10.3.0)."""
    if CC is None:
        pytest.skip("no C compiler (gcc/cc) on PATH: cannot build the test libraries")
    return build_release(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def broken_input(built, tmp_path_factory) -> Path:
    return make_broken_input(built, tmp_path_factory.mktemp("kaggle-input"))
