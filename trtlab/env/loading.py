"""Loading TensorRT into the running process: ``ctypes`` with ``RTLD_GLOBAL``, in dependency order (each library's
``DT_NEEDED``), because ``LD_LIBRARY_PATH`` set inside a running kernel is never seen by that process's dynamic
loader. Afterwards anything that needs ``libnvinfer.so.10`` (the bindings, ONNX Runtime's TRT EP) finds the
loaded copy by its SONAME.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from trtlab.env.candidates import LibFile, analyse_folder, scan_folder
from trtlab.env.discovery import best_candidate, discover, no_tensorrt_message
from trtlab.env.install import cuda_wheel_suffix, install_hint
from trtlab.env.layout import MANIFEST, component_of, cuda_dependency_dirs, default_lib_dir, order_index


@dataclass
class LoadResult:
    lib_dir: str | None
    loaded: list[tuple[str, str]] = field(default_factory=list)     # (name, path)
    failed: list[tuple[str, str]] = field(default_factory=list)     # (name, message)
    tensorrt: str | None = None        # "10.3.0" when `import tensorrt` worked in this process
    message: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.loaded) and not self.failed

    def summary(self) -> str:
        return self.message


def loaded_library_paths() -> list[str]:
    """Paths of every shared object mapped into this process (Linux /proc/self/maps)."""
    try:
        text = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return sorted({line.split(None, 5)[5].strip() for line in text.splitlines()
                   if len(line.split(None, 5)) == 6 and ".so" in line})


def dependency_order(libs: list[LibFile]) -> list[LibFile]:
    """Order libraries so each comes after the ones its DT_NEEDED names (ties: the component order)."""
    provides = {}
    for lib in libs:
        for name in {lib.name, lib.soname}:
            if name:
                provides[name] = lib
    ordered, state = [], {}

    def visit(lib: LibFile, stack: tuple = ()):
        if state.get(lib.path) == "done" or lib.path in stack:
            return  # a cycle cannot be ordered; load order then falls back to the tie order
        for need in lib.needed:
            dep = provides.get(need)
            if dep is not None and dep is not lib:
                visit(dep, stack + (lib.path,))
        if state.get(lib.path) != "done":
            state[lib.path] = "done"
            ordered.append(lib)

    for lib in sorted(libs, key=lambda f: (order_index(component_of(f.stem)), f.name)):
        visit(lib)
    return ordered


def libs_to_load(lib_dir: str, builder_resource: bool) -> list[LibFile]:
    """One file per library: the SONAME-named copy when present (what dependents look up), else the real one."""
    cand = analyse_folder(lib_dir, scan_folder(lib_dir), "repaired")
    chosen = []
    for key, comp in cand.components.items():
        if not comp.best:
            continue
        if key == "libnvinfer_builder_resource":
            if builder_resource:
                chosen += comp.variants
            continue
        by_name = {f.name: f for f in comp.files if f.usable}
        chosen.append(by_name.get(comp.best.soname) or comp.best)
    return chosen


def _load_missing_dependencies(ctypes, lib: LibFile, skip: set, extra_dirs: list[str], res: LoadResult) -> None:
    """dlopen the CUDA libraries ``lib`` needs from pip ``nvidia/*/lib`` folders the loader does not search."""
    for need in lib.needed:
        if need in skip:
            continue
        for folder in extra_dirs:
            path = os.path.join(folder, need)
            if os.path.exists(path):
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    res.loaded.append((need, path))
                    skip.add(need)
                except OSError:
                    pass
                break


def preload(lib_dir: str | os.PathLike, *, builder_resource: bool = True) -> LoadResult:
    """dlopen every TensorRT library of ``lib_dir`` into this process (RTLD_GLOBAL, dependency order).

    Missing CUDA dependencies found in pip ``nvidia/*/lib`` folders are loaded first.
    """
    import ctypes

    lib_dir = os.path.abspath(lib_dir)
    res = LoadResult(lib_dir)
    libs = dependency_order(libs_to_load(lib_dir, builder_resource))
    if not libs:
        res.message = f"no loadable TensorRT library in {lib_dir}: run repair() first"
        res.failed.append(("libnvinfer", res.message))
        return res
    skip = {os.path.basename(p) for p in loaded_library_paths()} | {n for lib in libs for n in (lib.name, lib.soname) if n}
    extra_dirs = cuda_dependency_dirs()
    for lib in libs:
        _load_missing_dependencies(ctypes, lib, skip, extra_dirs, res)
        try:
            ctypes.CDLL(lib.path, mode=ctypes.RTLD_GLOBAL)
            res.loaded.append((lib.name, lib.path))
        except OSError as exc:
            res.failed.append((lib.name, explain_load_error(lib, str(exc))))
    names = ", ".join(n for n, _ in res.loaded)
    res.message = (f"loaded {names} from {lib_dir} into this process" if not res.failed else
                   "; ".join(m for _, m in res.failed))
    return res


def _cuda_package(dep: str) -> str:
    """The pip package that provides a CUDA library, for the CUDA major the library name asks for."""
    m = re.match(r"^(libcudart|libcublasLt|libcublas|libnvrtc|libcudnn)\.so\.(\d+)", dep)
    if not m:
        return f"the package that provides {dep}"
    stem, major = m.group(1), m.group(2)
    if stem == "libcudnn":  # cuDNN's own major (9), not CUDA's: follow this machine's CUDA wheels
        return f"nvidia-cudnn-{cuda_wheel_suffix()}"
    package = {"libcudart": "nvidia-cuda-runtime", "libcublas": "nvidia-cublas", "libcublasLt": "nvidia-cublas",
               "libnvrtc": "nvidia-cuda-nvrtc"}[stem]
    # CUDA 12 wheels carry a -cu12 suffix; the CUDA 13 ones dropped it (nvidia-cuda-runtime 13.x on PyPI).
    return f"{package}-cu{major}" if major == "12" else f'"{package}>={major},<{int(major) + 1}"'


def explain_load_error(lib: LibFile, text: str) -> str:
    m = re.search(r"([\w.+-]+\.so[\w.]*): cannot open shared object file", text)
    if m and m.group(1) != lib.name:
        dep = m.group(1)
        return (f"{lib.name} needs {dep}, which is not on this machine's library path: pip install "
                f"{_cuda_package(dep)}, then call load() again (or add its folder to LD_LIBRARY_PATH in env.sh and "
                f"restart the kernel)")
    return f"{lib.name} from {os.path.dirname(lib.path)} failed to load: {text}"


def env_sh_of(lib_dir: str) -> str:
    """The env.sh a repair wrote for ``lib_dir`` (from its manifest), else where it would be."""
    try:
        recorded = json.loads(Path(lib_dir, MANIFEST).read_text()).get("env_sh")
    except (OSError, ValueError, AttributeError):
        recorded = None
    return recorded or os.path.join(lib_dir, "env.sh")


def _builder_resource_note(lib_dir: str) -> str | None:
    """libnvinfer opens the builder resource by file name; a preload satisfies that only if its SONAME matches."""
    for lib in libs_to_load(lib_dir, True):
        if component_of(lib.stem) == "libnvinfer_builder_resource" and lib.soname and lib.soname != lib.name:
            return (f"{lib.name} has SONAME {lib.soname}, so libnvinfer will look for it by file name when it "
                    f"builds an engine: if building fails with 'Unable to load library: {lib.name}', start Python "
                    f"with LD_LIBRARY_PATH set (source {env_sh_of(lib_dir)}) or run the build as a script from a "
                    f"shell that sourced it")
    return None


def _import_tensorrt(res: LoadResult, lib_dir: str, notes: list[str]) -> None:
    if importlib.util.find_spec("tensorrt") is None:
        notes.append("libraries loaded, but the tensorrt Python bindings are not installed: run repair() (it "
                     f"installs the wheel from the tar's python/ folder) or {install_hint()}")
        return
    try:
        trt = importlib.import_module("tensorrt")
        res.tensorrt = getattr(trt, "__version__", "?")
        notes.insert(0, f"import tensorrt works in this kernel (TensorRT {res.tensorrt}), no restart needed")
    except Exception as exc:  # a broken bindings install raises anything; report it, never crash
        notes.append(f"import tensorrt failed after preloading ({type(exc).__name__}: {exc}): restart the kernel and "
                     f"run trtlab.load_tensorrt() first, or in a shell: source {env_sh_of(lib_dir)}")


def _default_lib_dir(candidates) -> tuple[str | None, str | None]:
    """(folder to load, or None with the reason): the repaired folder, else the best candidate's."""
    repaired = default_lib_dir()
    if (repaired / MANIFEST).exists():
        return str(repaired), None
    candidates = discover() if candidates is None else candidates
    cand = best_candidate(candidates)
    if cand is None:
        return None, f"nothing to load: {no_tensorrt_message(candidates)}"
    return cand.lib_dir, None


def load(lib_dir: str | os.PathLike | None = None, *, candidates=None, import_tensorrt: bool = True) -> LoadResult:
    """Make TensorRT usable in this running kernel without a restart, and say whether it worked.

    ``lib_dir`` defaults to the repaired folder when a repair happened, else the best candidate's folder.
    With ``import_tensorrt`` the bindings are imported (inside a try) to prove it; the message names what to
    restart or source when that is impossible (e.g. another libnvinfer is already loaded in this process).
    """
    if lib_dir is None:
        lib_dir, why = _default_lib_dir(candidates)
        if lib_dir is None:
            return LoadResult(None, failed=[("libnvinfer", "not found")], message=why)
    lib_dir = os.path.abspath(lib_dir)
    others = [p for p in loaded_library_paths()
              if os.path.basename(p).startswith("libnvinfer.so") and os.path.dirname(p) != lib_dir]
    res = preload(lib_dir)
    notes = []
    if others:
        notes.append(f"another libnvinfer is already loaded in this process ({others[0]}): restart the kernel and "
                     f"call trtlab.load_tensorrt() before importing tensorrt, torch_tensorrt or onnxruntime")
    note = _builder_resource_note(lib_dir)
    if note:
        notes.append(note)
    if res.ok and import_tensorrt:
        _import_tensorrt(res, lib_dir, notes)
    res.message = "; ".join([res.message] + notes)
    return res
