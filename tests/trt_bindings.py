"""The real TensorRT Python bindings, importable without TensorRT's libraries.

TensorRT's builder libraries cannot be installed on trtlab's development and CI machines, but its Python
bindings are small wheels on PyPI (``tensorrt-cu12-bindings`` for 10.x, ``tensorrt-cu13-bindings`` for 11.x;
the ``tensorrt_bindings`` package inside). Their extension ``tensorrt_bindings/tensorrt*.so`` links against
``libnvinfer.so.N``, ``libnvonnxparser.so.N`` and ``libnvinfer_plugin.so.N`` but calls only a handful of
C functions from them directly (the factories ``create*_INTERNAL``, the plugin registries and
``getNvOnnxParserVersion``; everything else is a virtual call on an object a factory returned). So this module:

* ``install``: puts each pinned bindings wheel built for the RUNNING interpreter (cp311 in CI, cp312 on Kaggle and
  the GPU machine) into a PRIVATE folder ``.trt-bindings/<python tag>/<version>/`` with ``pip install --no-deps
  --target`` — never into site-packages, where it would shadow a real TensorRT (``install.sh`` runs ``python3
  tests/trt_bindings.py install``; the tests never download anything). ``--wheels DIR`` installs from wheels
  fetched earlier (``download --python 3.12`` puts them in the repository's ignored ``.whl/``), for a machine
  without PyPI;
* ``build_stubs``: compiles, with gcc, one stub library per TensorRT ``DT_NEEDED`` entry of the extension,
  defining exactly the extension's undefined symbols that the process cannot already resolve (``readelf``):
  factories return nullptr, version functions (``getNvOnnxParserVersion``; ``getInferLibVersion`` if a wheel
  ever imports it) return the version as the headers encode it (major * 10000 + minor * 100 + patch);
* ``run_with_bindings``: runs Python code in a subprocess where the stubs are loaded RTLD_GLOBAL, the
  extension is imported RTLD_LAZY | RTLD_GLOBAL, and ``sys.modules['tensorrt']`` is the real module (what the
  ``tensorrt`` meta package re-exports), so ``import tensorrt`` inside trtlab gets the real API surface.

What works there: every class, enum (with its real values), method signature (pybind's), property (settable or
read-only), argument conversion, and subclassing of the trampolined interfaces (ILogger, IInt8*Calibrator).
What does not: anything that needs a live library — ``trt.Builder(logger)`` raises "factory function returned
nullptr" — so nothing here is a TensorRT build, and nothing may be reported as one.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / ".trt-bindings"
WHEELS = REPO / ".whl"
#: The bindings are CPython extensions: one wheel per interpreter (cp311, cp312, ...).
PY_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"

#: The oldest and newest 10.x and 11.x bindings trtlab supports (exact pins: a test result names a version).
#: 10.x comes as tensorrt-cu12-bindings (cu13 builds start at 10.13.2), 11.x as tensorrt-cu13-bindings.
PINS = {
    "10.0.1": "tensorrt-cu12-bindings",
    "10.16.1.11": "tensorrt-cu12-bindings",
    "11.0.0.114": "tensorrt-cu13-bindings",
    "11.4.0.106": "tensorrt-cu13-bindings",
}

# Stub bodies by symbol: the factories and registries return nullptr (the bindings then raise cleanly),
# initLibNvInferPlugins returns false; anything else unknown gets a nullptr-returning body as well.
_TRT_LIBS = re.compile(r"^lib(nvinfer|nvonnxparser|nvinfer_plugin|nvinfer_dispatch|nvinfer_lean)\.so\.\d+$")


def bindings_dir(version: str, tag: str = PY_TAG) -> Path:
    return ROOT / tag / version


def extension_path(version: str) -> Path | None:
    found = sorted((bindings_dir(version) / "tensorrt_bindings").glob("tensorrt*.so"))
    return found[0] if found else None


def missing_reason(version: str) -> str:
    """'' when the bindings of `version` are installed and the stubs can be built; else why not and the fix."""
    if extension_path(version) is None:
        return (f"TensorRT {version} bindings for this Python ({PY_TAG}) are not installed in "
                f"{bindings_dir(version)}: run `bash install.sh --dev` (it runs "
                f"`python3 tests/trt_bindings.py install`; "
                f"offline: `python3 tests/trt_bindings.py install --wheels .whl`; the tests download nothing)")
    for tool in ("gcc", "readelf"):
        if shutil.which(tool) is None:
            return (f"`{tool}` is not on PATH, so the stub TensorRT libraries cannot be built: install gcc and "
                    f"binutils (apt-get install gcc; install.sh --dev does this as root)")
    return ""


# ----------------------------------------------------------------------------------------------------------------
# install
# ----------------------------------------------------------------------------------------------------------------
def install(versions=None, quiet: bool = True, wheels: Path | None = None) -> None:
    """pip-install each pinned bindings wheel for this interpreter (no dependencies) into its private folder,
    once; from the wheel folder `wheels` only (no index) when given."""
    for version in versions or PINS:
        target = bindings_dir(version)
        if extension_path(version) is not None:
            continue
        if target.exists():
            shutil.rmtree(target)  # a half-finished earlier install
        cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-deps", "--no-compile",
               "--only-binary=:all:", "--target", str(target), f"{PINS[version]}=={version}"]
        if wheels is not None:
            cmd += ["--no-index", "--find-links", str(wheels)]
        proc = subprocess.run(cmd + (["-q"] if quiet else []), capture_output=True, text=True)
        if proc.returncode != 0 or extension_path(version) is None:
            raise SystemExit(f"could not install {PINS[version]}=={version} for {PY_TAG} into {target}"
                             + (f" from {wheels} (fetch them with `python3 tests/trt_bindings.py download --python "
                                f"{sys.version_info.major}.{sys.version_info.minor}`)" if wheels else "")
                             + f":\n{proc.stdout}{proc.stderr}")
        print(f"TensorRT {version} Python bindings ({PY_TAG}) -> {target}")


def download(python: str, dest: Path = WHEELS, versions=None) -> list[Path]:
    """Fetch the pinned bindings wheels built for Python `python` ('3.12') into `dest` (default: the repository's
    ignored .whl/), for `install --wheels` on a machine that cannot reach PyPI."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for version in versions or PINS:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", "--python-version", python, "-d", str(dest), f"{PINS[version]}=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"could not download {PINS[version]}=={version} for Python {python}:\n{proc.stderr}")
    tag = "cp" + python.replace(".", "")
    found = sorted(p for p in dest.glob(f"tensorrt_cu1*_bindings-*-{tag}-*.whl"))
    print("\n".join(f"{p.name}" for p in found))
    return found


# ----------------------------------------------------------------------------------------------------------------
# stub libraries
# ----------------------------------------------------------------------------------------------------------------
def _readelf(args, path) -> str:
    return subprocess.run(["readelf", *args, str(path)], capture_output=True, text=True, check=True).stdout


def needed_libraries(extension: Path) -> list[str]:
    """The TensorRT libraries among the extension's DT_NEEDED entries (libc and friends excluded)."""
    names = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", _readelf(["-d", "-W"], extension))
    return [n for n in names if _TRT_LIBS.match(n)]


def undefined_symbols(extension: Path) -> list[str]:
    """Undefined, unversioned, non-weak dynamic symbols the running process cannot resolve: what TensorRT's
    libraries must provide. Versioned ones (GLIBC_*, GLIBCXX_*, CXXABI_*) come from the system libraries;
    Python's C API and libc come from the process itself."""
    process = ctypes.CDLL(None)
    symbols = []
    for line in _readelf(["--dyn-syms", "-W"], extension).splitlines():
        parts = line.split()
        if len(parts) < 8 or parts[6] != "UND" or parts[4] == "WEAK" or "@" in parts[7]:
            continue
        name = parts[7]
        if not hasattr(process, name):
            symbols.append(name)
    return sorted(set(symbols))


def parser_version_number(version: str) -> int:
    """The encoded version: NvOnnxParser.h NV_ONNX_PARSER_VERSION and NvInferRuntimeBase.h NV_TENSORRT_VERSION
    are both major * 10000 + minor * 100 + patch since TensorRT 10 (e.g. 10.16.1 → 101601)."""
    major, minor, patch = (int(p) for p in version.split(".")[:3])
    return major * 10000 + minor * 100 + patch


#: Version functions a bindings build may import, and what each returns (the pinned wheels import only
#: getNvOnnxParserVersion; the others are here so a future wheel that imports them still gets the right number).
def _version_functions(version: str) -> dict:
    major, minor, patch = (int(p) for p in version.split(".")[:3])
    number = parser_version_number(version)
    return {"getNvOnnxParserVersion": number, "getInferLibVersion": number, "getInferLibMajorVersion": major,
            "getInferLibMinorVersion": minor, "getInferLibPatchVersion": patch}


def _library_for(symbol: str, libraries: list[str]) -> str:
    wanted = "nvonnxparser" if "OnnxParser" in symbol else "nvinfer_plugin" if "Plugins" in symbol else "nvinfer"
    for lib in libraries:
        if lib.startswith(f"lib{wanted}.so."):
            return lib
    return libraries[0]


def build_stubs(version: str, out_dir: Path) -> dict:
    """Compile the stub libraries for the bindings of `version` into `out_dir`; returns
    {"libraries": {soname: [symbols]}, "dir": str}. Raises RuntimeError with gcc's message when it fails."""
    extension = extension_path(version)
    if extension is None:
        raise RuntimeError(missing_reason(version))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    libraries = needed_libraries(extension)
    if not libraries:
        raise RuntimeError(f"{extension} names no TensorRT library in DT_NEEDED; the stub recipe needs updating")
    by_lib: dict[str, list[str]] = {lib: [] for lib in libraries}
    for symbol in undefined_symbols(extension):
        by_lib[_library_for(symbol, libraries)].append(symbol)
    for lib, symbols in by_lib.items():
        lines = ["/* trtlab test stub: NOT TensorRT. Factories return nullptr; nothing here computes. */"]
        versions = _version_functions(version)
        for symbol in symbols:
            if symbol in versions:
                lines.append(f"int {symbol}(void) {{ return {versions[symbol]}; }}")
            elif symbol == "initLibNvInferPlugins":
                lines.append(f"int {symbol}(void* logger, const char* ns) {{ return 0; }}")
            else:
                lines.append(f"void* {symbol}(void) {{ return 0; }}")
        source = out_dir / f"{lib}.c"
        source.write_text("\n".join(lines) + "\n")
        proc = subprocess.run(["gcc", "-shared", "-fPIC", "-O0", f"-Wl,-soname,{lib}", "-o", str(out_dir / lib),
                               str(source)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"gcc could not build the stub {lib} for TensorRT {version}:\n{proc.stderr}")
    return {"dir": str(out_dir), "libraries": by_lib}


# ----------------------------------------------------------------------------------------------------------------
# running code against the real module
# ----------------------------------------------------------------------------------------------------------------
_PRELUDE = r"""
import ctypes, json, os, sys
_stubs = json.loads(os.environ["TRTLAB_STUBS"])
for _lib in _stubs["libraries"]:
    ctypes.CDLL(os.path.join(_stubs["dir"], _lib), mode=ctypes.RTLD_GLOBAL)
sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
sys.path.insert(0, os.environ["TRTLAB_BINDINGS"])
import tensorrt_bindings
sys.modules["tensorrt"] = tensorrt_bindings  # what `import tensorrt` gives with the tensorrt meta package
"""


def run_with_bindings(version: str, stubs: dict, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python with the real bindings of `version` imported as `tensorrt`."""
    env = dict(os.environ)
    env["TRTLAB_STUBS"] = json.dumps(stubs)
    env["TRTLAB_BINDINGS"] = str(bindings_dir(version))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([sys.executable, "-c", _PRELUDE + code], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=str(REPO))


def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python3 tests/trt_bindings.py",
                                     description="the real TensorRT bindings wheels for the tests")
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help=f"install the pinned bindings for this Python ({PY_TAG})")
    inst.add_argument("--wheels", type=Path, default=None, help="install from this wheel folder only (no PyPI)")
    down = sub.add_parser("download", help="fetch the pinned wheels of another Python version into .whl/")
    down.add_argument("--python", required=True, help="e.g. 3.12")
    down.add_argument("--dest", type=Path, default=WHEELS)
    args = parser.parse_args(argv)
    if args.command == "install":
        install(wheels=args.wheels)
    else:
        download(args.python, args.dest)


if __name__ == "__main__":
    main()
