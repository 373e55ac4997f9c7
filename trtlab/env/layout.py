"""Names and places: TensorRT library names and roles, versions written as text, and where things live on a
machine (the workspace, Kaggle inputs, site-packages, system library folders, pip ``nvidia/*/lib`` folders).

Facts behind the names (looked up for this package; nothing here ran against a real TensorRT):

* TRT 10 libraries: libnvinfer.so.10, libnvinfer_plugin.so.10, libnvonnxparser.so.10,
  libnvinfer_lean/dispatch/vc_plugin.so.10 and libnvinfer_builder_resource.so.10.x.y (loaded by libnvinfer by
  that full-version name at builder creation: error texts in NVIDIA/TensorRT#3983 and
  TNTwise/REAL-Video-Enhancer#85). 10.16 debs split it per arch: libnvinfer_builder_resource_sm75.so.10.16.2 ...
  (OE4T meta-tegra#2240). ONNX Runtime's TRT EP dlopens the ``.so.10`` names (microsoft/onnxruntime#20557). In
  10.3 libnvonnxparser no longer depends on libnvinfer_plugin (nvidia-holoscan/holohub#512).
* TRT 11 libraries: ``libnvinfer.so.11`` (apt installs under /usr/lib/x86_64-linux-gnu and pip ``tensorrt_libs``);
  the tar is renamed ``TensorRT-Enterprise-11.x-Linux-x86_64-cuda-13.x-...tar.zst`` but still extracts to
  ``TensorRT-11.x.x.x`` (11.x install guide). Not confirmed from NVIDIA: the other 11.x file names; assumed to
  follow the 10.x pattern with major 11.
* pip layout (NVIDIA/TensorRT python/packaging/libs_wheel): dist ``tensorrt-cuXX_libs`` installs the package
  folder ``tensorrt_libs`` (``<module>_libs``: tensorrt_lean_libs, tensorrt_dispatch_libs) with libraries copied
  ``--trim-version`` (e.g. ``libnvinfer.so.10``); its ``__init__`` ctypes-loads ``nvidia/cuda_runtime/lib`` then
  every ``*.so*`` of the folder. Bindings: dist ``tensorrt-cuXX_bindings``.
* version symbol: ``tensorrt_version_7_0_0_11`` seen in libnvinfer's export table (NVIDIA/TensorRT#816), i.e.
  ``tensorrt_version_MAJOR_MINOR_PATCH_BUILD``. Assumed unchanged in 10.x/11.x (not confirmed); file names are
  read too and disagreements are reported.
* builder resource SONAME: TRT 8.x ``ldconfig -p`` shows ``do_not_link_against_nvinfer_builder_resource``
  (NVIDIA/TensorRT#2218), so it is only found by file name: repair keeps that name, never its SONAME.
"""
from __future__ import annotations

import glob
import os
import re
import sys
from pathlib import Path

#: Load order when DT_NEEDED does not decide (ties): the core first, parsers and plugins after it.
COMPONENT_ORDER = (
    "libnvinfer",
    "libnvinfer_builder_resource",
    "libnvinfer_plugin",
    "libnvonnxparser",
    "libnvparsers",
    "libnvinfer_lean",
    "libnvinfer_dispatch",
    "libnvinfer_vc_plugin",
)
#: What each component is for, shown in tables.
COMPONENT_ROLE = {
    "libnvinfer": "core runtime + builder",
    "libnvinfer_builder_resource": "builder kernels (needed to build engines)",
    "libnvinfer_plugin": "plugins",
    "libnvonnxparser": "ONNX parser",
    "libnvparsers": "legacy parsers (TRT <= 9)",
    "libnvinfer_lean": "lean runtime",
    "libnvinfer_dispatch": "dispatch runtime",
    "libnvinfer_vc_plugin": "version-compatible plugins",
}
#: Components the workbench needs: building engines from ONNX needs all three.
NEEDED_COMPONENTS = ("libnvinfer", "libnvonnxparser", "libnvinfer_builder_resource")

LIB_NAME_RE = re.compile(r"^(?P<stem>lib(?:nvinfer|nvonnxparser|nvparsers)[A-Za-z0-9_]*)\.so(?:\.(?P<ver>\d+(?:\.\d+)*))?$")
VERSION_SYMBOL_RE = re.compile(r"^tensorrt_version_(\d+)_(\d+)_(\d+)(?:_(\d+))?$")
WHEEL_RE = re.compile(
    r"^tensorrt(?:[-_]cu\d+)?-(?P<ver>\d+(?:\.\d+)*)(?:\.post\d+)?-(?P<py>cp\d+|py3)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)
LFS_POINTER_PREFIX = b"version https://git-lfs"

#: The repaired folder's record of what it holds (source, version, files, env.sh).
MANIFEST = "trtlab_manifest.json"


def version_tuple(text: str | None) -> tuple[int, ...]:
    """``"10.3.0.26"`` → ``(10, 3, 0, 26)``; ``"10.14.1.48.post1"`` → ``(10, 14, 1, 48)``; ``None``/``""`` → ``()``.

    The numeric release only: pip versions carry ``.postN``/``rcN`` tails that must not crash a report."""
    out = []
    for part in (text or "").split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group()))
        if m.end() != len(part):
            break
    return tuple(out)


def version_str(parts) -> str:
    return ".".join(str(p) for p in parts)


def component_of(stem: str) -> str:
    """Component key of a library stem (per-arch builder resources share one component)."""
    return "libnvinfer_builder_resource" if stem.startswith("libnvinfer_builder_resource") else stem


def order_index(key: str) -> int:
    return COMPONENT_ORDER.index(key) if key in COMPONENT_ORDER else len(COMPONENT_ORDER)


def workspace_dir() -> Path:
    """trtlab's writable workspace (trtlab.core.workspace's rule, standard library only)."""
    from trtlab.core.workspace import workspace_dir as shared_workspace_dir

    return shared_workspace_dir()


def default_lib_dir() -> Path:
    """Where repair puts the library copies when no folder is given: ``<workspace>/lib``."""
    return workspace_dir() / "lib"


def default_roots() -> list[Path]:
    """Folders searched for TensorRT tar trees when none are given: ``/kaggle/input`` when it exists."""
    from trtlab.core.workspace import kaggle_input

    return [p for p in (kaggle_input(),) if p.is_dir()]


def read_only_roots() -> tuple[str, ...]:
    """Folders nothing may be written under (Kaggle's inputs)."""
    from trtlab.core.workspace import read_only_roots as shared_read_only_roots

    return shared_read_only_roots()


def site_package_dirs() -> list[str]:
    """Folders Python imports from that may hold pip-installed packages."""
    dirs = []
    try:
        import site
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except Exception:  # site is reduced in some embedded interpreters; sys.path is enough then
        pass
    dirs += [p for p in sys.path if p and p.endswith(("site-packages", "dist-packages"))]
    out = []
    for d in dirs:
        if os.path.isdir(d) and os.path.realpath(d) not in {os.path.realpath(x) for x in out}:
            out.append(d)
    return out


def system_lib_dirs() -> list[str]:
    """Library folders the loader or CUDA installs use, plus $LD_LIBRARY_PATH."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib",
             "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/tensorrt/lib",
             "/opt/tensorrt/lib"]
    return [d for d in dirs if os.path.isdir(d)]


def cuda_dependency_dirs() -> list[str]:
    """Folders that hold CUDA libraries TensorRT needs but that the loader may not search (pip nvidia-*)."""
    dirs = []
    for sp in site_package_dirs():
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    dirs += [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib") if os.path.isdir(d)]
    return list(dict.fromkeys(dirs))
