"""Find, repair and load TensorRT libraries; report what this machine can do (GPU, CUDA, cuDNN, TensorRT, ORT).

Four parts, each usable alone (the notebook ``00_env_setup`` and ``setup_kaggle_env.sh`` chain them):

* :func:`discover` lists every TensorRT candidate folder — pip installs (``site-packages/tensorrt*_libs``),
  tar trees under ``/kaggle/input`` (or any root), system library folders — with the version read from file
  names and from the ``tensorrt_version_*`` exported symbol, the components present and every broken file
  (0 bytes, dangling or looping links, Git LFS pointers, truncated ELF files, missing ``.so.MAJOR``/``.so``).
* :func:`repair` copies the real versioned libraries of the best candidate into a writable folder (default
  ``<workspace>/lib``, i.e. ``/kaggle/working/trtlab-runs/lib`` on Kaggle), creates real-file ``.so.MAJOR`` and
  ``.so`` copies, writes ``env.sh`` and installs the matching Python bindings wheel from the tree offline.
  Inputs are only ever opened for reading; every write is a temp file in the destination + ``os.replace``.
* :func:`load` preloads the libraries into the running process with ``ctypes`` (``RTLD_GLOBAL``, dependency
  order from each library's ``DT_NEEDED``), because ``LD_LIBRARY_PATH`` set inside a running kernel is never
  seen by that process's dynamic loader. It says whether ``import tensorrt`` now works, or what to restart.
* :func:`collect_report` / :func:`doctor_main` (``python -m trtlab doctor``) report GPU, driver, CUDA, cuDNN,
  TensorRT library and bindings, ONNX Runtime providers, and a verdict per feature.

Only the standard library is imported here; pandas is imported inside the functions that build tables, and
``tensorrt`` is never imported at module level (the report probes it in a subprocess).

Facts used below, with sources (looked up for this module; nothing here ran against a real TensorRT):

=====================================  ==================================================================
fact                                   source
=====================================  ==================================================================
TRT 10.0/10.1 runs on SM 7.0+          TensorRT 10.1.0 Support Matrix: "compiled to support all NVIDIA
                                       hardware with capability SM 7.0 or higher"; 10.0.1 release notes:
                                       Volta (7.0) deprecated starting with 10.0.
TRT 10.5+ drops Volta (SM 7.0)         TensorRT 10.5.0 release notes: "NVIDIA Volta support (GPUs with
                                       compute capability 7.0) has been removed starting with TensorRT 10.5"
                                       (10.4.0 notes: "will be removed in TensorRT 10.5").
TRT 10.16, 11.0-11.4 need Turing+      Prerequisites pages of 10.16.0, 11.0.0, 11.1.0, 11.2.1, 11.4.0:
                                       "NVIDIA GPU (Turing architecture or later)".
Pascal (SM 6.x) not in TRT 10/11       follows from the rows above (minimum SM 7.0, then 7.5).
Blackwell needs TRT >= 10.8            TensorRT 10.8.0 release notes: "This release supports NVIDIA
                                       Blackwell GPUs".
cuDNN optional in TRT 10               10.0.1 support matrix lists "NVIDIA cuDNN (Optional)"; 10.13
                                       prerequisites: only speeds up a few deprecated layers, not used by
                                       the lean/dispatch runtimes, not supported on Blackwell.
TRT 11 removed implicit INT8 + FP16    TensorRT 10.x->11.x Python API migration guide: BuilderFlag.FP16,
flag                                   BuilderFlag.INT8, IBuilderConfig.int8_calibrator removed ("strong
                                       typing with ModelOpt AutoCast" / "explicit quantization with Q/DQ");
                                       Support Policies page: IInt8Calibrator removed in 11.0.0.
pip layout                             NVIDIA/TensorRT python/packaging/libs_wheel: dist
                                       ``tensorrt-cuXX_libs`` installs package folder ``tensorrt_libs``
                                       (``<module>_libs``: tensorrt_lean_libs, tensorrt_dispatch_libs) with
                                       libraries copied ``--trim-version`` (e.g. ``libnvinfer.so.10``); its
                                       ``__init__`` ctypes-loads ``nvidia/cuda_runtime/lib`` then every
                                       ``*.so*`` of the folder. Bindings: dist ``tensorrt-cuXX_bindings``.
TRT 10 libraries                       libnvinfer.so.10, libnvinfer_plugin.so.10, libnvonnxparser.so.10,
                                       libnvinfer_lean/dispatch/vc_plugin.so.10 and
                                       libnvinfer_builder_resource.so.10.x.y (loaded by libnvinfer by that
                                       full-version name at builder creation: error texts in NVIDIA/TensorRT
                                       #3983 and TNTwise/REAL-Video-Enhancer#85). 10.16 debs split it per
                                       arch: libnvinfer_builder_resource_sm75.so.10.16.2 ... (OE4T
                                       meta-tegra#2240). ONNX Runtime's TRT EP dlopens the ``.so.10`` names
                                       (microsoft/onnxruntime#20557). In 10.3 libnvonnxparser no longer
                                       depends on libnvinfer_plugin (nvidia-holoscan/holohub#512).
TRT 11 libraries                       ``libnvinfer.so.11`` (seen in third-party code: apt installs under
                                       /usr/lib/x86_64-linux-gnu and pip ``tensorrt_libs``); tar renamed to
                                       ``TensorRT-Enterprise-11.x-Linux-x86_64-cuda-13.x-...tar.zst`` but
                                       still extracts to ``TensorRT-11.x.x.x`` (11.x install guide). Not
                                       confirmed from NVIDIA: the other 11.x file names; assumed to follow
                                       the 10.x pattern with major 11.
version symbol                         ``tensorrt_version_7_0_0_11`` seen in libnvinfer's export table
                                       (NVIDIA/TensorRT#816), i.e. ``tensorrt_version_MAJOR_MINOR_PATCH_BUILD``.
                                       Assumed unchanged in 10.x/11.x (not confirmed); file names are read
                                       too and disagreements are reported.
builder resource SONAME                TRT 8.x: ``ldconfig -p`` shows its SONAME as
                                       ``do_not_link_against_nvinfer_builder_resource`` (NVIDIA/TensorRT
                                       #2218), so it is only found by file name: repair keeps that name and
                                       never renames it after its SONAME.
=====================================  ==================================================================
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import errno
import glob
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# --------------------------------------------------------------------------------------------------------------
# Names and support table
# --------------------------------------------------------------------------------------------------------------

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

_LIB_NAME_RE = re.compile(r"^(?P<stem>lib(?:nvinfer|nvonnxparser|nvparsers)[A-Za-z0-9_]*)\.so(?:\.(?P<ver>\d+(?:\.\d+)*))?$")
_VERSION_SYMBOL_RE = re.compile(r"^tensorrt_version_(\d+)_(\d+)_(\d+)(?:_(\d+))?$")
_WHEEL_RE = re.compile(
    r"^tensorrt(?:[-_]cu\d+)?-(?P<ver>\d+(?:\.\d+)*)(?:\.post\d+)?-(?P<py>cp\d+|py3)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)
_LFS_POINTER_PREFIX = b"version https://git-lfs"

#: Minimum compute capability per TensorRT release range (see the module docstring for sources).
#: (first, last_verified, min_cc, source). Versions past ``last_verified`` of a major are assumed to follow the
#: last row of that major and the verdict says so.
GPU_SUPPORT = (
    ((10, 0), (10, 4), (7, 0), "TensorRT 10.0-10.4 support SM 7.0+ (10.1 support matrix; Volta deprecated in 10.0)"),
    ((10, 5), (10, 16), (7, 5), "TensorRT 10.5 removed Volta (SM 7.0); 10.16 prerequisites: Turing or later"),
    ((11, 0), (11, 4), (7, 5), "TensorRT 11.0-11.4 prerequisites: Turing (SM 7.5) or later"),
)
BLACKWELL_MIN_TRT = (10, 8)  # 10.8.0 release notes: first release supporting Blackwell GPUs.

#: GPU names → compute capability, only for drivers whose nvidia-smi lacks the compute_cap field.
_CC_BY_NAME = {
    "P100": (6, 0), "P40": (6, 1), "P4": (6, 1), "V100": (7, 0), "T4": (7, 5), "A100": (8, 0), "A10": (8, 6),
    "A10G": (8, 6), "L4": (8, 9), "L40": (8, 9), "H100": (9, 0), "H200": (9, 0), "B200": (10, 0),
}


def arch_name(cc: tuple[int, int] | None) -> str:
    """Architecture family of a compute capability, for messages ("sm_60 (Pascal)")."""
    if cc is None:
        return "unknown architecture"
    major, minor = cc
    names = {3: "Kepler", 5: "Maxwell", 6: "Pascal", 8: "Ampere", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}
    if major == 7:
        family = "Turing" if minor >= 5 else "Volta"
    elif (major, minor) == (8, 9):
        family = "Ada"
    else:
        family = names.get(major, "unknown architecture")
    return f"sm_{major}{minor} ({family})"


def workspace_dir() -> Path:
    """trtlab's writable workspace (trtlab.core.workspace's rule; that module needs only the standard library, so
    setup_kaggle_env.sh can use this file on a half-installed machine)."""
    from trtlab.core.workspace import workspace_dir as shared_workspace_dir

    return shared_workspace_dir()


def default_lib_dir() -> Path:
    """Where :func:`repair` puts the library copies: ``<workspace>/lib``."""
    return workspace_dir() / "lib"


def default_roots() -> list[Path]:
    """Folders searched for TensorRT tar trees when none are given: ``/kaggle/input`` when it exists."""
    from trtlab.core.workspace import kaggle_input

    return [p for p in (kaggle_input(),) if p.is_dir()]


def _version_tuple(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".")) if text else ()


def _version_str(parts) -> str:
    return ".".join(str(p) for p in parts)


# --------------------------------------------------------------------------------------------------------------
# ELF reading (pure Python: section headers, .dynamic and .dynsym only; large libraries are read by seeking)
# --------------------------------------------------------------------------------------------------------------

class ElfError(Exception):
    """The file is not a readable ELF shared object; ``kind`` is 'not_elf', 'lfs_pointer' or 'truncated'."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class ElfInfo:
    soname: str | None
    needed: list[str]
    version_symbols: list[str]       # defined tensorrt_version_* symbols
    version_refs: list[str]          # undefined tensorrt_version_* references (versions this file requires)


def read_elf(path: str | os.PathLike) -> ElfInfo:
    """SONAME, DT_NEEDED and ``tensorrt_version_*`` symbols of an ELF shared object, without loading it."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        ident = f.read(16)
        if ident[:4] != b"\x7fELF":
            if (ident + f.read(len(_LFS_POINTER_PREFIX))).startswith(_LFS_POINTER_PREFIX):
                raise ElfError("lfs_pointer", "is a Git LFS pointer file, not the library")
            raise ElfError("not_elf", "is not an ELF shared library")
        is64 = ident[4] == 2
        end = "<" if ident[5] == 1 else ">"
        hdr_fmt = end + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH")
        hdr = f.read(struct.calcsize(hdr_fmt))
        if len(hdr) < struct.calcsize(hdr_fmt):
            raise ElfError("truncated", f"is truncated ({size} bytes, shorter than an ELF header)")
        (_, _, _, _, _, shoff, _, _, _, _, shentsize, shnum, _) = struct.unpack(hdr_fmt, hdr)
        sh_fmt = end + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII")
        if shoff == 0:
            raise ElfError("not_elf", "has no section headers (cannot read its SONAME or symbols)")
        if shnum == 0:  # extended numbering: the real count is in section 0's sh_size
            f.seek(shoff)
            shnum = struct.unpack(sh_fmt, f.read(shentsize))[5]
        if shoff + shnum * shentsize > size:
            raise ElfError("truncated", f"is truncated ({size} bytes; its ELF header needs at least "
                                        f"{shoff + shnum * shentsize})")
        f.seek(shoff)
        table = f.read(shnum * shentsize)
        sections = [struct.unpack_from(sh_fmt, table, i * shentsize) for i in range(shnum)]

        def read_section(index: int) -> bytes:
            _, _, _, _, offset, sec_size, *_ = sections[index]
            if offset + sec_size > size:
                raise ElfError("truncated", f"is truncated ({size} bytes; a section ends at {offset + sec_size})")
            f.seek(offset)
            return f.read(sec_size)

        def cstr(blob: bytes, offset: int) -> str:
            stop = blob.find(b"\0", offset)
            return blob[offset:stop if stop >= 0 else len(blob)].decode("utf-8", "replace")

        soname, needed, defined, refs = None, [], [], []
        for index, sec in enumerate(sections):
            sh_type, sh_link = sec[1], sec[6]
            if sh_type == 6:  # SHT_DYNAMIC
                strtab = read_section(sh_link)
                dyn_fmt = end + ("qQ" if is64 else "iI")
                for tag, val in struct.iter_unpack(dyn_fmt, read_section(index)):
                    if tag == 0:
                        break
                    if tag == 1:
                        needed.append(cstr(strtab, val))
                    elif tag == 14:
                        soname = cstr(strtab, val)
            elif sh_type == 11:  # SHT_DYNSYM
                strtab = read_section(sh_link)
                sym_fmt = end + ("IBBHQQ" if is64 else "IIIBBH")
                for entry in struct.iter_unpack(sym_fmt, read_section(index)):
                    name_off = entry[0]
                    if not strtab.startswith(b"tensorrt_version_", name_off):
                        continue
                    shndx = entry[3] if is64 else entry[5]
                    (defined if shndx != 0 else refs).append(cstr(strtab, name_off))
        return ElfInfo(soname, needed, sorted(set(defined)), sorted(set(refs)))


def version_from_symbol(symbol: str) -> str | None:
    """``tensorrt_version_10_3_0_26`` → ``10.3.0.26``."""
    m = _VERSION_SYMBOL_RE.match(symbol)
    return _version_str(g for g in m.groups() if g is not None) if m else None


# --------------------------------------------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------------------------------------------

@dataclass
class LibFile:
    """One directory entry that looks like a TensorRT library, and what it really is."""

    path: str
    name: str
    stem: str                      # libnvinfer, libnvinfer_builder_resource_sm75, ...
    file_version: str | None       # from the name: "10.3.0", "10" or None for "lib.so"
    kind: str                      # ok | link | zero | dangling | loop | not_elf | lfs_pointer | truncated | unreadable
    size: int = 0
    target: str | None = None      # what a symlink resolves to
    soname: str | None = None
    needed: list[str] = field(default_factory=list)
    symbol_version: str | None = None
    version_refs: list[str] = field(default_factory=list)
    problem: str | None = None     # a sentence naming the file, the folder and what is wrong

    @property
    def usable(self) -> bool:
        return self.kind in ("ok", "link")

    @property
    def real_path(self) -> str:
        return self.target if self.kind == "link" and self.target else self.path


def component_of(stem: str) -> str:
    """Component key of a library stem (per-arch builder resources share one component)."""
    return "libnvinfer_builder_resource" if stem.startswith("libnvinfer_builder_resource") else stem


def inspect_file(path: str | os.PathLike) -> LibFile | None:
    """Classify one entry (regular file or link); None when the name is not a TensorRT library name."""
    path = os.fspath(path)
    name = os.path.basename(path)
    m = _LIB_NAME_RE.match(name)
    if not m:
        return None
    folder = os.path.dirname(path)
    lib = LibFile(path=path, name=name, stem=m.group("stem"), file_version=m.group("ver"), kind="ok")
    real = path
    if os.path.islink(path):
        target = os.readlink(path)
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                lib.kind, lib.problem = "loop", f"{name} in {folder} is a symlink loop ({name} -> {target} -> ...)"
            else:
                lib.kind, lib.problem = "dangling", f"{name} in {folder} is a dangling link to {target}"
            lib.target = target
            return lib
        real = os.path.realpath(path)
        lib.kind, lib.target = "link", real
    try:
        lib.size = os.path.getsize(real)
    except OSError as exc:
        lib.kind, lib.problem = "unreadable", f"{name} in {folder} cannot be read ({exc.strerror})"
        return lib
    if lib.size == 0:
        via = f" (via link to {lib.target})" if lib.kind == "link" else ""
        lib.kind, lib.problem = "zero", f"{name} in {folder} is 0 bytes{via} (a broken dataset upload)"
        return lib
    try:
        info = read_elf(real)
    except ElfError as exc:
        lib.kind, lib.problem = exc.kind, f"{name} in {folder} {exc}"
        if exc.kind == "lfs_pointer":
            lib.problem += " (the dataset was uploaded from a git checkout without `git lfs pull`)"
        return lib
    except OSError as exc:
        lib.kind, lib.problem = "unreadable", f"{name} in {folder} cannot be read ({exc.strerror})"
        return lib
    lib.soname, lib.needed, lib.version_refs = info.soname, info.needed, info.version_refs
    versions = [v for v in (version_from_symbol(s) for s in info.version_symbols) if v]
    lib.symbol_version = max(versions, key=_version_tuple) if versions else None
    return lib


@dataclass
class Component:
    """All files of one component in one folder and the real library chosen among them."""

    key: str
    files: list[LibFile]
    best: LibFile | None = None                 # the real versioned library repair copies
    variants: list[LibFile] = field(default_factory=list)   # per-arch builder resources: all real ones
    version: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def major(self) -> int | None:
        v = _version_tuple(self.version)
        return v[0] if v else None


@dataclass
class Candidate:
    """A folder holding a TensorRT installation (or the remains of one)."""

    lib_dir: str
    source: str                                  # tar | pip | system
    components: dict[str, Component] = field(default_factory=dict)
    version: str | None = None                   # from libnvinfer: symbol first, then file name
    version_note: str | None = None              # disagreements between symbol and file names
    wheels: list[str] = field(default_factory=list)   # Python bindings wheels found in the tree
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        core = self.components.get("libnvinfer")
        return bool(core and core.best)

    @property
    def healthy(self) -> bool:
        """Loadable as is: a real libnvinfer and no problem on any name the loader or TensorRT looks up."""
        return self.usable and not self.problems

    @property
    def major(self) -> int | None:
        v = _version_tuple(self.version)
        return v[0] if v else None

    def missing_components(self) -> list[str]:
        return [c for c in NEEDED_COMPONENTS if not (self.components.get(c) and self.components[c].best)]

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["usable"], d["healthy"] = self.usable, self.healthy
        d["missing_components"] = self.missing_components()
        return d


def _choose_best(files: list[LibFile]) -> LibFile | None:
    """Prefer a regular file over a link, then the longest version in the name."""
    usable = [f for f in files if f.usable]
    if not usable:
        return None
    return max(usable, key=lambda f: (f.kind == "ok", len(_version_tuple(f.file_version)), _version_tuple(f.file_version)))


def _expected_names(comp: Component) -> dict[str, str]:
    """Names the loader or the linker look up for a component: {name: why}."""
    best = comp.best
    if best is None or comp.key == "libnvinfer_builder_resource":
        return {}  # builder resources are looked up by their full versioned file name only
    names = {}
    soname = best.soname or (f"{comp.key}.so.{comp.major}" if comp.major is not None else None)
    if soname:
        names[soname] = "the name the loader looks up"
    names[f"{comp.key}.so"] = f"the name the linker uses for -l{comp.key[3:]}"
    return names


def _analyse_folder(folder: str, files: list[LibFile], source: str) -> Candidate:
    cand = Candidate(lib_dir=folder, source=source)
    by_key: dict[str, list[LibFile]] = {}
    for f in files:
        by_key.setdefault(component_of(f.stem), []).append(f)
    for key, group in sorted(by_key.items(), key=lambda kv: _order_index(kv[0])):
        comp = Component(key=key, files=sorted(group, key=lambda f: f.name))
        if key == "libnvinfer_builder_resource":
            comp.variants = [f for f in group if f.usable]
        comp.best = best = _choose_best(group)
        if best:
            named = best.file_version if len(_version_tuple(best.file_version)) >= 2 else None
            comp.version = best.symbol_version or named or best.file_version
            real_versions = {f.file_version for f in group if f.usable and len(_version_tuple(f.file_version)) >= 3}
            if len(real_versions) > 1:
                comp.problems.append(f"{folder} holds {key} in several versions ({', '.join(sorted(real_versions))}); "
                                     f"repair uses {best.name}")
        present = {f.name: f for f in group}
        for f in group:
            if f.problem:
                fix = (f"; repair copies {best.name} instead" if best else
                       f"; no real {key} exists in this folder: re-upload the TensorRT tar (with its libraries) "
                       f"or pip install tensorrt-cu12")
                comp.problems.append(f.problem + fix)
        for name, why in _expected_names(comp).items():
            if name not in present:
                msg = f"{name} is missing in {folder} ({why}); repair creates it as a copy of {best.name}"
                if name.endswith(".so") and source != "tar":
                    cand.notes.append(msg)  # pip wheels and apt runtime packages ship no dev link; loading never needs it
                else:
                    comp.problems.append(msg)
        cand.components[key] = comp
        cand.problems.extend(comp.problems)

    core = cand.components.get("libnvinfer")
    if core and core.best:
        best = core.best
        cand.version = core.version
        if best.symbol_version and best.file_version:
            sym, named = _version_tuple(best.symbol_version), _version_tuple(best.file_version)
            if sym[: len(named)] != named:
                cand.version_note = (f"{best.name} is named {best.file_version} but exports "
                                     f"tensorrt_version_{best.symbol_version.replace('.', '_')}; trusting the symbol")
                cand.problems.append(f"{folder}: {cand.version_note}")
        elif not best.symbol_version:
            cand.notes.append(f"{best.name} exports no tensorrt_version_* symbol; version taken from the file name")
        versions = {k: c.version for k, c in cand.components.items() if c.best and c.version}
        majors_minors = {k: _version_tuple(v)[:2] for k, v in versions.items()}
        ref = _version_tuple(cand.version)[:2]
        odd = [f"{k} {versions[k]}" for k, mm in majors_minors.items() if mm and mm != ref[: len(mm)]]
        if odd:
            cand.problems.append(f"{folder} mixes TensorRT versions: libnvinfer {cand.version} but {', '.join(odd)}")
    else:
        broken = [f.name for f in (core.files if core else [])]
        what = f" ({', '.join(broken)} are broken)" if broken else ""
        cand.problems.append(f"no real libnvinfer found in {folder}{what}: add the TensorRT tar dataset to the "
                             f"notebook or pip install tensorrt-cu12")
    cand.wheels = _find_wheels(folder) if source == "tar" else []
    return cand


def _order_index(key: str) -> int:
    return COMPONENT_ORDER.index(key) if key in COMPONENT_ORDER else len(COMPONENT_ORDER)


def _find_wheels(lib_dir: str) -> list[str]:
    """Bindings wheels of a tar tree: ``<tree>/python/tensorrt-*.whl`` next to ``<tree>/lib``."""
    tree = os.path.dirname(lib_dir) if os.path.basename(lib_dir) in ("lib", "lib64") else lib_dir
    found = []
    for folder in (os.path.join(tree, "python"), tree, lib_dir):
        for path in sorted(glob.glob(os.path.join(folder, "*.whl"))):
            if _WHEEL_RE.match(os.path.basename(path)) and path not in found:
                found.append(path)
    return found


def _scan_folder(folder: str) -> list[LibFile]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    files = [inspect_file(os.path.join(folder, n)) for n in sorted(names) if _LIB_NAME_RE.match(n)]
    return [f for f in files if f is not None]


def _walk_for_lib_dirs(root: str, max_depth: int, budget: int) -> tuple[list[str], str | None]:
    """Breadth-first search for folders holding libnvinfer*/libnvonnxparser* files.

    Breadth first so the shallow TensorRT trees are found before a deep image dataset exhausts the entry budget
    (ImageNet under /kaggle/input has 1.3 M files). Symlinked folders are not followed (loops, double counts).
    """
    found, queue, seen = [], collections.deque([(root, 0)]), 0
    while queue:
        folder, depth = queue.popleft()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        seen += len(entries)
        if any(_LIB_NAME_RE.match(e.name) for e in entries):
            found.append(folder)
        if depth < max_depth:
            queue.extend((e.path, depth + 1) for e in entries if e.is_dir(follow_symlinks=False))
        if seen > budget:
            return found, (f"stopped searching {root} after {seen} entries (depth {depth}); if TensorRT is deeper, "
                           f"pass its folder as a root (--root PATH)")
    return found, None


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


def discover(roots: list[str | os.PathLike] | None = None, *, pip: bool = True, system: bool = True,
             max_depth: int = 8, budget: int = 200_000) -> list[Candidate]:
    """Every TensorRT candidate folder on this machine, best first (see :func:`best_candidate`).

    ``roots``: folders searched recursively for TensorRT tar trees (default: ``/kaggle/input`` when present).
    ``pip``: look in site-packages for ``tensorrt*_libs`` folders. ``system``: look in system library folders
    and ``$LD_LIBRARY_PATH`` (top level only).
    """
    roots = default_roots() if roots is None else [Path(r) for r in roots]
    found: list[Candidate] = []
    seen_dirs: set[str] = set()
    notes: list[str] = []

    def add(folder: str, source: str) -> None:
        real = os.path.realpath(folder)
        if real in seen_dirs:
            return
        files = _scan_folder(folder)
        if files:
            seen_dirs.add(real)
            found.append(_analyse_folder(folder, files, source))

    for root in roots:
        if not root.exists():
            notes.append(f"root {root} does not exist")
            continue
        folders, stopped = _walk_for_lib_dirs(str(root), max_depth, budget)
        for folder in folders:
            add(folder, "tar")
        if stopped:
            notes.append(stopped)
    if pip:
        for sp in site_package_dirs():
            for folder in sorted(glob.glob(os.path.join(sp, "tensorrt*_libs"))):
                add(folder, "pip")
    if system:
        for folder in system_lib_dirs():
            add(folder, "system")
    found.sort(key=_rank, reverse=True)
    for c in found[:1]:
        c.notes.extend(notes)
    LAST_SEARCH_NOTES[:] = notes
    return found


#: What the last :func:`discover` call could not search (missing roots, entry budget hit).
LAST_SEARCH_NOTES: list[str] = []
_SOURCE_RANK = {"tar": 2, "pip": 1, "system": 0}


def _rank(c: Candidate):
    # The user added a tar dataset on purpose, so it wins over a pip install of another version.
    return (c.usable, _SOURCE_RANK.get(c.source, 0), _version_tuple(c.version), not c.problems)


def best_candidate(candidates: list[Candidate]) -> Candidate | None:
    """The candidate repair and load use: usable first, then tar > pip > system, then the newest version."""
    usable = [c for c in candidates if c.usable]
    return max(usable, key=_rank) if usable else None


def no_tensorrt_message(candidates: list[Candidate], roots: list | None = None) -> str:
    """One line for a machine without a usable TensorRT, naming where we looked and what to do."""
    roots = [str(r) for r in (default_roots() if roots is None else roots)]
    where = ", ".join(roots + ["site-packages", "system library folders"])
    broken = [c.lib_dir for c in candidates if not c.usable]
    extra = f"; broken trees: {', '.join(broken)}" if broken else ""
    extra += "".join(f"; {n}" for n in LAST_SEARCH_NOTES)
    return (f"no real libnvinfer found in {where}{extra}: add the TensorRT tar dataset to the notebook or "
            f"pip install tensorrt-cu12")


def candidates_frame(candidates: list[Candidate]):
    """One row per component of every candidate, as a pandas DataFrame (for the notebook)."""
    import pandas as pd

    rows = []
    for c in candidates:
        for key, comp in c.components.items():
            rows.append({
                "folder": c.lib_dir, "source": c.source, "component": key, "role": COMPONENT_ROLE.get(key, ""),
                "library": comp.best.name if comp.best else "—", "version": comp.version or "—",
                "status": "broken" if comp.problems and not comp.best else ("fixable" if comp.problems else "ok"),
                "problems": " | ".join(comp.problems),
            })
    if not rows:
        rows.append({"folder": "—", "source": "—", "component": "libnvinfer", "role": COMPONENT_ROLE["libnvinfer"],
                     "library": "—", "version": "—", "status": "not found", "problems": no_tensorrt_message(candidates)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------------------------
# Repair
# --------------------------------------------------------------------------------------------------------------

MANIFEST = "trtlab_manifest.json"


@dataclass
class RepairResult:
    lib_dir: str | None
    env_sh: str | None
    candidate: Candidate | None
    actions: list[tuple[str, str]] = field(default_factory=list)   # (file name, copied|unchanged|removed)
    fixed: list[str] = field(default_factory=list)                 # problems of the input that the copy fixes
    bindings: str | None = None
    error: str | None = None
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.lib_dir is not None

    def summary(self) -> str:
        if self.error:
            return f"repair: {self.error}"
        if self.note:
            return f"repair: {self.note}" + (f"\n  shell: source {self.env_sh}" if self.env_sh else "")
        copied = sum(a == "copied" for _, a in self.actions)
        same = sum(a == "unchanged" for _, a in self.actions)
        lines = [f"repair: TensorRT {self.candidate.version} from {self.candidate.lib_dir} -> {self.lib_dir} "
                 f"({copied} copied, {same} already up to date)"]
        lines += [f"  fixed: {p}" for p in self.fixed]
        if self.bindings:
            lines.append(f"  bindings: {self.bindings}")
        if self.env_sh:
            lines.append(f"  shell: source {self.env_sh}")
        return "\n".join(lines)


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _same_file_content(src: str, dst: str) -> bool:
    """Cheap idempotency check: same size and the mtime we stamped on the copy."""
    try:
        s, d = os.stat(src), os.stat(dst, follow_symlinks=False)
    except OSError:
        return False
    return not os.path.islink(dst) and s.st_size == d.st_size and int(s.st_mtime) == int(d.st_mtime)


def atomic_copy(src: str, dst: str) -> bool:
    """Copy ``src`` (following links) to ``dst`` as a real file via a temp file in dst's folder + os.replace.

    Returns False when dst already holds the same content (idempotent re-runs copy nothing). Readers never see
    a half-written library: the name appears only once the data is complete.
    """
    if _same_file_content(src, dst):
        return False
    folder = os.path.dirname(dst)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dst)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, length=16 << 20)
            out.flush()
            os.fsync(out.fileno())
        st = os.stat(src)
        os.chmod(tmp, 0o755)
        os.utime(tmp, (st.st_atime, st.st_mtime))
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


def _plan_copies(cand: Candidate) -> list[tuple[str, str]]:
    """(destination name, source real path) for every file the repaired folder needs."""
    plan: dict[str, str] = {}
    for key, comp in cand.components.items():
        if not comp.best:
            continue
        if key == "libnvinfer_builder_resource":
            for f in comp.variants:  # one per arch in 10.16+; each keeps its versioned file name
                plan.setdefault(f.name, f.real_path)
            continue
        src = comp.best.real_path
        plan.setdefault(comp.best.name, src)
        for name in _expected_names(comp):
            plan.setdefault(name, src)
    return sorted(plan.items())


def _write_text_atomic(path: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_env_sh(lib_dir: str | os.PathLike, path: str | os.PathLike | None = None,
                 pythonpath: str | None = None) -> str:
    """Write ``env.sh`` (LD_LIBRARY_PATH with ``lib_dir`` first) next to ``lib_dir``; return its path."""
    lib_dir = os.path.abspath(lib_dir)
    path = os.fspath(path) if path else os.path.join(os.path.dirname(lib_dir), "env.sh")
    lines = [
        "# Written by trtlab.env.trt_env. Source it in a shell before starting Python or a TensorRT tool:",
        f"#   source {path}",
        "# (Inside a running notebook kernel LD_LIBRARY_PATH changes are not seen: use trtlab.env.trt_env.load().)",
        f'export TRTLAB_TRT_LIB_DIR="{lib_dir}"',
        f'export LD_LIBRARY_PATH="{lib_dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"',
    ]
    if pythonpath:
        lines.append(f'export PYTHONPATH="{pythonpath}${{PYTHONPATH:+:$PYTHONPATH}}"')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def pick_wheel(wheels: list[str], version: str | None = None, python_tag: str | None = None) -> str | None:
    """The bindings wheel for this interpreter (cpXY) and, when given, this TensorRT version."""
    python_tag = python_tag or f"cp{sys.version_info.major}{sys.version_info.minor}"
    want = _version_tuple(version)[:3] if version else None
    best = None
    for path in wheels:
        m = _WHEEL_RE.match(os.path.basename(path))
        if not m or m.group("py") not in (python_tag, "py3"):
            continue
        if want and _version_tuple(m.group("ver"))[: len(want)] != want[: len(_version_tuple(m.group("ver")))]:
            continue
        if not m.group("plat").startswith(("linux", "manylinux")):
            continue
        best = best or path
    return best


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
    try:
        from importlib import metadata
        for dist in ("tensorrt", "tensorrt-cu12-bindings", "tensorrt-cu13-bindings", "tensorrt-cu12", "tensorrt-cu13"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
    except ImportError:
        pass
    return None


def install_bindings(cand: Candidate, target: str | None = None, timeout: float = 600) -> str:
    """Install the tree's bindings wheel offline (``pip --no-index --no-deps``); return what happened."""
    wheel = pick_wheel(cand.wheels, cand.version)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if not wheel:
        if not cand.wheels:
            return (f"no bindings wheel in the tree of {cand.lib_dir}: pip install tensorrt-cu12=={cand.version} "
                    f"(needs internet) or add the tar's python/ folder")
        return (f"no bindings wheel for this Python ({tag}) and TensorRT {cand.version} among "
                f"{', '.join(os.path.basename(w) for w in cand.wheels)}")
    wheel_version = _WHEEL_RE.match(os.path.basename(wheel)).group("ver")
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


def repair(candidates: Candidate | list[Candidate] | None = None, dest: str | os.PathLike | None = None, *,
           bindings: bool = True, bindings_target: str | None = None, force: bool = False) -> RepairResult:
    """Copy the best candidate's real libraries into ``dest`` (default :func:`default_lib_dir`) and write env.sh.

    Never writes into the input: files are only opened for reading, and ``dest`` inside the input (or under
    /kaggle/input) is refused. Re-running is cheap: copies whose size and mtime match are skipped, and files a
    previous repair wrote for another version are removed (tracked in ``trtlab_manifest.json``).
    A healthy pip or system install is left alone unless ``force``: ``import tensorrt`` already loads it.
    """
    if candidates is None:
        candidates = discover()
    cand = candidates if isinstance(candidates, Candidate) else best_candidate(candidates)
    if cand is None or not cand.usable:
        found = [] if cand is None else [cand]
        if isinstance(candidates, list):
            found = candidates
        return RepairResult(None, None, cand, error=no_tensorrt_message(found))
    if cand.healthy and cand.source in ("pip", "system") and not force:
        env = write_env_sh(cand.lib_dir, Path(dest).parent / "env.sh" if dest else workspace_dir() / "env.sh")
        return RepairResult(cand.lib_dir, env, cand, note=f"the {cand.source} install of TensorRT {cand.version} in "
                                                          f"{cand.lib_dir} is healthy; nothing copied")
    dest = os.path.abspath(dest or default_lib_dir())
    forbidden = [cand.lib_dir, "/kaggle/input"] + ([os.path.dirname(cand.lib_dir)] if cand.source == "tar" else [])
    for folder in forbidden:
        if _inside(dest, folder):
            return RepairResult(None, None, cand, error=f"destination {dest} is inside the input {folder}, which "
                                                        f"must stay untouched: pass a folder under /kaggle/working")
    plan = _plan_copies(cand)
    os.makedirs(dest, exist_ok=True)
    need = sum(os.path.getsize(src) for name, src in plan if not _same_file_content(src, os.path.join(dest, name)))
    free = shutil.disk_usage(dest).free
    if need > free:
        return RepairResult(None, None, cand, error=f"need {need / 1e9:.2f} GB in {dest} but only {free / 1e9:.2f} GB "
                                                    f"is free: delete old outputs or pass another dest")
    result = RepairResult(dest, None, cand)
    for name, src in plan:
        result.actions.append((name, "copied" if atomic_copy(src, os.path.join(dest, name)) else "unchanged"))
    manifest_path = os.path.join(dest, MANIFEST)
    previous = []
    if os.path.exists(manifest_path):
        try:
            previous = json.loads(Path(manifest_path).read_text()).get("files", [])
        except (ValueError, OSError):
            previous = []
    keep = {name for name, _ in plan}
    for name in previous:  # only files an earlier repair wrote, never anything else in dest
        if name not in keep and os.path.exists(os.path.join(dest, name)):
            os.unlink(os.path.join(dest, name))
            result.actions.append((name, "removed"))
    _write_text_atomic(manifest_path, json.dumps({"source": cand.lib_dir, "version": cand.version,
                                                  "files": sorted(keep)}, indent=1))
    result.fixed = list(cand.problems)
    if bindings:
        result.bindings = install_bindings(cand, target=bindings_target)
    result.env_sh = write_env_sh(dest, pythonpath=bindings_target)
    return result


# --------------------------------------------------------------------------------------------------------------
# Loading into the running process
# --------------------------------------------------------------------------------------------------------------

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
    """Order libraries so each comes after the ones its DT_NEEDED names (ties: :data:`COMPONENT_ORDER`)."""
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

    for lib in sorted(libs, key=lambda f: (_order_index(component_of(f.stem)), f.name)):
        visit(lib)
    return ordered


def _extra_dependency_dirs() -> list[str]:
    """Folders that hold CUDA libraries TensorRT needs but that the loader may not search (pip nvidia-*)."""
    dirs = []
    for sp in site_package_dirs():
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    dirs += [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib") if os.path.isdir(d)]
    return dirs


def _libs_to_load(lib_dir: str, builder_resource: bool) -> list[LibFile]:
    """One file per library: the SONAME-named copy when present (what dependents look up), else the real one."""
    cand = _analyse_folder(lib_dir, _scan_folder(lib_dir), "repaired")
    chosen = []
    for key, comp in cand.components.items():
        if not comp.best:
            continue
        if key == "libnvinfer_builder_resource":
            if builder_resource:
                chosen += comp.variants
            continue
        by_name = {f.name: f for f in comp.files if f.usable}
        soname = comp.best.soname
        chosen.append(by_name.get(soname) or comp.best)
    return chosen


def preload(lib_dir: str | os.PathLike, *, builder_resource: bool = True) -> LoadResult:
    """dlopen every TensorRT library of ``lib_dir`` into this process (RTLD_GLOBAL, dependency order).

    Afterwards, anything that needs ``libnvinfer.so.10`` (the bindings, ONNX Runtime's TRT EP) finds the loaded
    copy by its SONAME without searching LD_LIBRARY_PATH. Missing CUDA dependencies found in pip ``nvidia/*/lib``
    folders are loaded first.
    """
    import ctypes

    lib_dir = os.path.abspath(lib_dir)
    res = LoadResult(lib_dir)
    libs = dependency_order(_libs_to_load(lib_dir, builder_resource))
    if not libs:
        res.message = f"no loadable TensorRT library in {lib_dir}: run repair() first"
        res.failed.append(("libnvinfer", res.message))
        return res
    mapped = {os.path.basename(p) for p in loaded_library_paths()}
    ours = {n for lib in libs for n in (lib.name, lib.soname) if n}
    extra_dirs = _extra_dependency_dirs()
    for lib in libs:
        for need in lib.needed:
            if need in ours or need in mapped:
                continue
            for folder in extra_dirs:
                path = os.path.join(folder, need)
                if os.path.exists(path):
                    try:
                        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                        res.loaded.append((need, path))
                        mapped.add(need)
                    except OSError:
                        pass
                    break
        try:
            ctypes.CDLL(lib.path, mode=ctypes.RTLD_GLOBAL)
            res.loaded.append((lib.name, lib.path))
        except OSError as exc:
            res.failed.append((lib.name, _explain_load_error(lib, str(exc))))
    names = ", ".join(n for n, _ in res.loaded)
    res.message = (f"loaded {names} from {lib_dir} into this process" if not res.failed else
                   "; ".join(m for _, m in res.failed))
    return res


def _explain_load_error(lib: LibFile, text: str) -> str:
    m = re.search(r"([\w.+-]+\.so[\w.]*): cannot open shared object file", text)
    if m and m.group(1) != lib.name:
        dep = m.group(1)
        hint = {"libcudart": "pip install nvidia-cuda-runtime-cu12", "libcublas": "pip install nvidia-cublas-cu12",
                "libcudnn": "pip install nvidia-cudnn-cu12", "libnvrtc": "pip install nvidia-cuda-nvrtc-cu12"}
        fix = next((v for k, v in hint.items() if dep.startswith(k)), f"install the package that provides {dep}")
        return (f"{lib.name} needs {dep}, which is not on this machine's library path: {fix}, then call load() "
                f"again (or add its folder to LD_LIBRARY_PATH in env.sh and restart the kernel)")
    return f"{lib.name} from {os.path.dirname(lib.path)} failed to load: {text}"


def _builder_resource_note(lib_dir: str) -> str | None:
    """libnvinfer opens the builder resource by file name; a preload satisfies that only if its SONAME matches."""
    for lib in _libs_to_load(lib_dir, True):
        if component_of(lib.stem) == "libnvinfer_builder_resource" and lib.soname and lib.soname != lib.name:
            return (f"{lib.name} has SONAME {lib.soname}, so libnvinfer will look for it by file name when it "
                    f"builds an engine: if building fails with 'Unable to load library: {lib.name}', start Python "
                    f"with LD_LIBRARY_PATH set (source {os.path.join(os.path.dirname(lib_dir), 'env.sh')}) or run "
                    f"the build as a script from a shell that sourced it")
    return None


def load(lib_dir: str | os.PathLike | None = None, *, candidates: list[Candidate] | None = None,
         import_tensorrt: bool = True) -> LoadResult:
    """Make TensorRT usable in this running kernel without a restart, and say whether it worked.

    ``lib_dir`` defaults to the repaired folder when a repair happened, else the best candidate's folder.
    With ``import_tensorrt`` the bindings are imported (inside a try) to prove it; the message names what to
    restart or source when that is impossible (e.g. another libnvinfer is already loaded in this process).
    """
    if lib_dir is None:
        repaired = default_lib_dir()
        if (repaired / MANIFEST).exists():
            lib_dir = repaired
        else:
            candidates = discover() if candidates is None else candidates
            cand = best_candidate(candidates)
            if cand is None:
                return LoadResult(None, failed=[("libnvinfer", "not found")],
                                  message=f"nothing to load: {no_tensorrt_message(candidates)}")
            lib_dir = cand.lib_dir
    lib_dir = os.path.abspath(lib_dir)
    others = [p for p in loaded_library_paths()
              if os.path.basename(p).startswith("libnvinfer.so") and os.path.dirname(p) != lib_dir]
    res = preload(lib_dir)
    notes = []
    if others:
        notes.append(f"another libnvinfer is already loaded in this process ({others[0]}): restart the kernel and "
                     f"call trtlab.env.trt_env.load() before importing tensorrt, torch_tensorrt or onnxruntime")
    note = _builder_resource_note(lib_dir)
    if note:
        notes.append(note)
    if res.ok and import_tensorrt:
        if importlib.util.find_spec("tensorrt") is None:
            notes.append("libraries loaded, but the tensorrt Python bindings are not installed: run repair() (it "
                         "installs the wheel from the tar's python/ folder) or pip install tensorrt-cu12")
        else:
            try:
                import importlib as _il
                trt = _il.import_module("tensorrt")
                res.tensorrt = getattr(trt, "__version__", "?")
                notes.insert(0, f"import tensorrt works in this kernel (TensorRT {res.tensorrt}), no restart needed")
            except Exception as exc:  # a broken bindings install raises anything; report it, never crash
                notes.append(f"import tensorrt failed after preloading ({type(exc).__name__}: {exc}): restart the "
                             f"kernel and run trtlab.env.trt_env.load() first, or in a shell: source "
                             f"{os.path.join(os.path.dirname(lib_dir), 'env.sh')}")
    res.message = "; ".join([res.message] + notes)
    return res


# --------------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------------

@dataclass
class GpuInfo:
    name: str
    compute_capability: tuple[int, int] | None
    driver: str | None
    source: str


def parse_nvidia_smi_query(text: str) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`` lines."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        cc_m = re.match(r"^(\d+)\.(\d+)$", parts[1])
        gpus.append(GpuInfo(parts[0], (int(cc_m.group(1)), int(cc_m.group(2))) if cc_m else None, parts[2],
                            "nvidia-smi"))
    return gpus


def _cc_from_name(name: str) -> tuple[int, int] | None:
    for key in sorted(_CC_BY_NAME, key=len, reverse=True):
        if re.search(rf"\b{re.escape(key)}\b", name):
            return _CC_BY_NAME[key]
    return None


def _run(cmd: list[str], timeout: float = 15) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def gpu_info() -> tuple[list[GpuInfo], str | None]:
    """GPUs and the CUDA version the driver supports; nvidia-smi first, cuda-python second."""
    cuda_driver = None
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"])
        gpus = parse_nvidia_smi_query(out) if out else []
        if not gpus:  # old drivers reject compute_cap
            out = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]) or ""
            gpus = [GpuInfo(n.strip(), _cc_from_name(n), d.strip(), "nvidia-smi + name table")
                    for n, d in (l.split(",", 1) for l in out.strip().splitlines() if "," in l)]
        m = re.search(r"CUDA Version:\s*([\d.]+)", _run(["nvidia-smi"]) or "")
        cuda_driver = m.group(1) if m else None
        if gpus:
            return gpus, cuda_driver
    rt = _cuda_python_runtime()
    if rt is not None:
        try:
            err, count = rt.cudaGetDeviceCount()
            gpus = []
            for i in range(count if int(err) == 0 else 0):
                err, prop = rt.cudaGetDeviceProperties(i)
                name = prop.name.decode() if isinstance(prop.name, bytes) else str(prop.name)
                gpus.append(GpuInfo(name.strip("\0 "), (prop.major, prop.minor), None, "cuda-python"))
            err, drv = rt.cudaDriverGetVersion()
            if int(err) == 0 and drv:
                cuda_driver = f"{drv // 1000}.{drv % 1000 // 10}"
            return gpus, cuda_driver
        except Exception:  # no driver, no device: cuda-python raises or returns errors; both mean "no GPU"
            pass
    return [], cuda_driver


def _cuda_python_runtime():
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            if importlib.util.find_spec(name.split(".")[0]) and importlib.util.find_spec(name):
                import importlib as _il
                return _il.import_module(name)
        except Exception:  # a half-installed cuda-python must not break the report
            continue
    return None


def _dist_version(*names: str) -> str | None:
    from importlib import metadata
    for n in names:
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return None


def _find_libs(prefix: str) -> list[str]:
    """Files named ``prefix.so*`` in system, LD_LIBRARY_PATH and pip nvidia folders."""
    out = []
    for folder in system_lib_dirs() + _extra_dependency_dirs():
        out += glob.glob(os.path.join(folder, f"{prefix}.so*"))
    return sorted(set(out))


def _lib_versions(paths: list[str], prefix: str) -> list[str]:
    """Versions in the file names (links resolved, so libcudart.so.12 -> libcudart.so.12.4.127 gives 12.4.127)."""
    names = {os.path.basename(p) for p in paths} | {os.path.basename(os.path.realpath(p)) for p in paths}
    vs = {m.group(1) for n in names if (m := re.match(rf"^{re.escape(prefix)}\.so\.(\d+(?:\.\d+)*)$", n))}
    return sorted(vs, key=_version_tuple, reverse=True)


def cuda_runtime_version() -> tuple[str | None, str]:
    rt = _cuda_python_runtime()
    if rt is not None:
        try:
            err, v = rt.cudaRuntimeGetVersion()
            if int(err) == 0:
                return f"{v // 1000}.{v % 1000 // 10}", "cuda-python"
        except Exception:  # no driver: fall through to file names
            pass
    v = _dist_version("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime")
    if v:
        return v, "pip nvidia-cuda-runtime"
    vs = _lib_versions(_find_libs("libcudart"), "libcudart")
    return (vs[0], "libcudart file name") if vs else (None, "")


def cudnn_version() -> tuple[str | None, str]:
    v = _dist_version("nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "nvidia-cudnn-cu11")
    if v:
        return v, "pip nvidia-cudnn"
    vs = _lib_versions(_find_libs("libcudnn"), "libcudnn")
    return (vs[0], "libcudnn file name") if vs else (None, "")


def ort_info() -> tuple[str | None, list[str], str | None]:
    """(version, providers, error) of onnxruntime, imported inside a try."""
    if importlib.util.find_spec("onnxruntime") is None:
        return None, [], "onnxruntime is not installed: pip install onnxruntime"
    try:
        import onnxruntime as ort
        return ort.__version__, list(ort.get_available_providers()), None
    except Exception as exc:  # a broken onnxruntime-gpu install raises at import; the report must go on
        return None, [], f"import onnxruntime failed: {exc}"


def probe_tensorrt_import(lib_dir: str | None, timeout: float = 120) -> tuple[str | None, str | None]:
    """Try ``import tensorrt`` in a fresh Python whose LD_LIBRARY_PATH starts with ``lib_dir``."""
    if importlib.util.find_spec("tensorrt") is None:
        return None, "not installed"
    env = dict(os.environ)
    if lib_dir:
        env["LD_LIBRARY_PATH"] = lib_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    try:
        proc = subprocess.run([sys.executable, "-c", "import tensorrt; print(tensorrt.__version__)"],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"import tensorrt took more than {timeout:.0f} s"
    if proc.returncode == 0:
        return proc.stdout.strip().splitlines()[-1], None
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return None, tail


def gpu_support(trt_version: str | None, cc: tuple[int, int] | None) -> tuple[bool | None, str]:
    """Does this TensorRT version support this GPU? (verdict, reason). None = cannot tell."""
    v = _version_tuple(trt_version)
    if not v:
        return None, "TensorRT version unknown"
    if cc is None:
        return None, "GPU compute capability unknown"
    if v[0] < 10:
        return False, f"TensorRT {trt_version} is older than 10, which trtlab needs (explicit Q/DQ + the TRT 10 API)"
    rows = [r for r in GPU_SUPPORT if r[0][0] == v[0]]
    caveat = ""
    if not rows:
        rows = [GPU_SUPPORT[-1]]
        caveat = f" (the support matrix of TensorRT {v[0]}.x is not in trtlab's table; assumed as for 11.4)"
    row = next((r for r in rows if r[0] <= v[:2] <= r[1]), None) if len(v) >= 2 else None
    if row is None and len(v) < 2:
        row = rows[-1]
        caveat = caveat or f" (only the major version {v[0]} is known; assumed the newest {v[0]}.x rule)"
    if row is None:
        row = rows[-1]
        caveat = caveat or (f" (TensorRT {trt_version} is newer than the last release trtlab checked, "
                            f"{_version_str(row[1])}; assumed unchanged)")
    first, last, min_cc, source = row
    if cc < min_cc:
        return False, (f"TensorRT {trt_version} needs compute capability {_version_str(min_cc)} or newer; this GPU is "
                       f"{arch_name(cc)} [{source}]{caveat}")
    if cc[0] >= 10 and v[:2] < BLACKWELL_MIN_TRT:
        return False, (f"{arch_name(cc)} needs TensorRT {_version_str(BLACKWELL_MIN_TRT)} or newer; found "
                       f"{trt_version} [10.8.0 release notes]")
    return True, f"{arch_name(cc)} is supported by TensorRT {trt_version} [{source}]{caveat}"


@dataclass
class FeatureVerdict:
    feature: str
    tensorrt: str         # yes | no | unknown
    reason: str
    onnxruntime: str      # what the workbench falls back to


def feature_verdicts(trt_version: str | None, cc: tuple[int, int] | None, *, gpu: bool = True,
                     bindings: bool = True, ort_providers: list[str] | None = None) -> list[FeatureVerdict]:
    """A verdict per feature (FP16, INT8 explicit Q/DQ, INT8 implicit calibrators) with the reason when not."""
    providers = ort_providers or []
    ort_gpu = "CUDAExecutionProvider" in providers
    ort_cpu = "CPUExecutionProvider" in providers
    fallback_int8 = ("ONNX Runtime CUDA EP runs the Q/DQ model" if ort_gpu else
                     "ONNX Runtime CPU runs the Q/DQ model" if ort_cpu else "no ONNX Runtime either")
    fallback_fp16 = ("ONNX Runtime CUDA EP" if ort_gpu else "ONNX Runtime CPU runs FP32 only (FP16 not measured)"
                     if ort_cpu else "no ONNX Runtime either")
    fallback_impl = "trtlab's own calibrator (minmax/entropy/percentile) writes Q/DQ scales instead"
    features = [("FP16", fallback_fp16), ("INT8 explicit (Q/DQ)", fallback_int8),
                ("INT8 implicit calibrators", fallback_impl)]
    v = _version_tuple(trt_version)
    blocker = None
    if not v:
        blocker = "no TensorRT found"
    elif not gpu:
        blocker = "no NVIDIA GPU visible (nvidia-smi / cuda-python found none)"
    elif not bindings:
        blocker = f"TensorRT {trt_version} libraries found but the Python bindings are missing: run repair()"
    out = []
    if blocker:
        return [FeatureVerdict(f, "no", blocker, fb) for f, fb in features]
    supported, why = gpu_support(trt_version, cc)
    if supported is False:
        return [FeatureVerdict(f, "no", why, fb) for f, fb in features]
    state = "yes" if supported else "unknown"
    major = v[0]
    for feature, fb in features:
        if feature == "FP16":
            reason = ("BuilderFlag.FP16" if major < 11 else
                      "no BuilderFlag.FP16 in TensorRT 11: build from an FP16/mixed ONNX (strong typing)")
            out.append(FeatureVerdict(feature, state, f"{reason}; {why}", fb))
        elif feature == "INT8 explicit (Q/DQ)":
            out.append(FeatureVerdict(feature, state, f"Q/DQ ONNX from trtlab's calibrator; {why}", fb))
        elif major >= 11:
            out.append(FeatureVerdict(feature, "no", "TensorRT 11 removed implicit INT8 (IInt8Calibrator, "
                                                     "BuilderFlag.INT8): explicit Q/DQ only", fb))
        else:
            out.append(FeatureVerdict(feature, state, f"IInt8EntropyCalibrator2 / IInt8MinMaxCalibrator (deprecated in "
                                                      f"TensorRT 10, removed in 11); {why}", fb))
    return out


@dataclass
class ReportRow:
    item: str
    value: str
    status: str       # ok | warn | fail | info
    detail: str = ""


@dataclass
class EnvReport:
    rows: list[ReportRow]
    features: list[FeatureVerdict]
    trt_line: str
    trt_ready: bool
    ort_ready: bool
    candidates: list[Candidate] = field(default_factory=list)

    def to_frame(self):
        """The report as a pandas DataFrame: environment rows, then one row per feature."""
        import pandas as pd

        rows = [dataclasses.asdict(r) for r in self.rows]
        rows += [{"item": f"feature: {f.feature}", "value": f.tensorrt,
                  "status": {"yes": "ok", "no": "fail"}.get(f.tensorrt, "warn"),
                  "detail": f"{f.reason} | without TensorRT: {f.onnxruntime}"} for f in self.features]
        return pd.DataFrame(rows, columns=["item", "value", "status", "detail"])

    def to_dict(self) -> dict:
        return {"rows": [dataclasses.asdict(r) for r in self.rows],
                "features": [dataclasses.asdict(f) for f in self.features],
                "tensorrt": self.trt_line, "tensorrt_ready": self.trt_ready, "onnxruntime_ready": self.ort_ready,
                "summary": self.summary(color=False)}

    def format_table(self) -> str:
        rows = [(r.item, r.value, r.status, r.detail) for r in self.rows]
        rows += [(f"feature: {f.feature}", f.tensorrt, {"yes": "ok", "no": "fail"}.get(f.tensorrt, "warn"),
                  f.reason) for f in self.features]
        w0 = max(len(r[0]) for r in rows)
        w1 = min(max(len(r[1]) for r in rows), 40)
        return "\n".join(f"{a:<{w0}}  {b[:w1]:<{w1}}  {c:<4}  {d}" for a, b, c, d in rows)

    def summary(self, color: bool = True) -> str:
        """Green/red summary: TensorRT line and what the workbench runs on."""
        green, red, reset = ("\033[32m", "\033[31m", "\033[0m") if color else ("", "", "")
        lines = []
        if self.trt_ready:
            ok = [f.feature for f in self.features if f.tensorrt == "yes"]
            lines.append(f"{green}🟢 GREEN  TensorRT ready: {self.trt_line}; features: {', '.join(ok)}{reset}")
        else:
            lines.append(f"{red}🔴 RED    TensorRT not usable here: {self.trt_line}{reset}")
            if self.ort_ready:
                lines.append(f"{green}🟢 GREEN  the workbench runs on ONNX Runtime "
                             f"({self.row('onnxruntime').value}){reset}")
            else:
                lines.append(f"{red}🔴 RED    no ONNX Runtime either: pip install onnxruntime{reset}")
        return "\n".join(lines)

    def row(self, item: str) -> ReportRow:
        return next(r for r in self.rows if r.item == item)


def collect_report(candidates: list[Candidate] | None = None, roots: list | None = None, *,
                   probe_import: bool = True) -> EnvReport:
    """Everything the workbench needs to know about this machine, with a verdict per feature."""
    if candidates is None:
        candidates = discover(roots)
    rows: list[ReportRow] = []
    gpus, cuda_driver = gpu_info()
    gpu = gpus[0] if gpus else None
    if gpu:
        more = f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else ""
        rows.append(ReportRow("GPU", f"{gpu.name}{more}", "ok", f"via {gpu.source}"))
        rows.append(ReportRow("compute capability", _version_str(gpu.compute_capability or ()) or "unknown",
                              "ok" if gpu.compute_capability else "warn", arch_name(gpu.compute_capability)))
        rows.append(ReportRow("driver", gpu.driver or "unknown", "ok" if gpu.driver else "warn",
                              f"supports CUDA up to {cuda_driver}" if cuda_driver else ""))
    else:
        rows.append(ReportRow("GPU", "no GPU", "warn", "nvidia-smi and cuda-python found no NVIDIA GPU"))
    cuda_rt, cuda_src = cuda_runtime_version()
    rows.append(ReportRow("CUDA runtime", cuda_rt or "not found", "ok" if cuda_rt else ("fail" if gpu else "info"),
                          cuda_src or "no cuda-python, pip nvidia-cuda-runtime or libcudart found"))
    cudnn, cudnn_src = cudnn_version()
    rows.append(ReportRow("cuDNN", cudnn or "not found", "ok" if cudnn else "info",
                          (cudnn_src + "; " if cudnn_src else "") + "optional for TensorRT 10+ (a few deprecated layers)"))

    cand = best_candidate(candidates)
    if cand:
        status = "ok" if cand.healthy else "warn"
        detail = f"{cand.source}: {cand.lib_dir}"
        if cand.problems:
            detail += f"; {len(cand.problems)} problem(s), repair() fixes them: {cand.problems[0]}"
        missing = cand.missing_components()
        if missing:
            status, detail = "warn", detail + f"; missing {', '.join(missing)}"
        rows.append(ReportRow("TensorRT library", cand.version or "unknown version", status, detail))
        if cand.version_note:
            rows.append(ReportRow("TensorRT version check", "disagreement", "warn", cand.version_note))
        others = [f"{c.version or '?'} ({c.source}: {c.lib_dir})" for c in candidates if c is not cand]
        if others:
            rows.append(ReportRow("other TensorRT candidates", str(len(others)), "info", "; ".join(others)))
        trt_line = f"TensorRT {cand.version} ({cand.source}: {cand.lib_dir})"
    else:
        trt_line = no_tensorrt_message(candidates, roots)
        rows.append(ReportRow("TensorRT library", "not found", "fail", trt_line))

    bindings_version = installed_bindings_version()
    in_kernel = sys.modules.get("tensorrt")
    bindings_ok = False
    if in_kernel is not None:
        bindings_ok = True
        rows.append(ReportRow("TensorRT bindings", getattr(in_kernel, "__version__", "?"), "ok",
                              "already imported in this process"))
    elif bindings_version:
        lib_dir = (str(default_lib_dir()) if (default_lib_dir() / MANIFEST).exists() else
                   cand.lib_dir if cand else None)
        imported, err = probe_tensorrt_import(lib_dir) if probe_import else (bindings_version, None)
        bindings_ok = imported is not None
        mismatch = cand and cand.version and _version_tuple(bindings_version)[:2] != _version_tuple(cand.version)[:2]
        detail = "import works in a fresh Python" if bindings_ok else f"import tensorrt fails: {err}"
        if mismatch:
            detail += f"; bindings {bindings_version} do not match library {cand.version}: run repair()"
        rows.append(ReportRow("TensorRT bindings", bindings_version, "ok" if bindings_ok and not mismatch else "warn",
                              detail))
    else:
        rows.append(ReportRow("TensorRT bindings", "not installed", "fail" if cand else "info",
                              "repair() installs the wheel from the TensorRT tar" if cand else
                              "pip install tensorrt-cu12 on a GPU machine"))

    ort_version, providers, ort_err = ort_info()
    rows.append(ReportRow("onnxruntime", ort_version or "not usable", "ok" if ort_version else "fail",
                          ", ".join(providers) if ort_version else ort_err))
    cc = gpu.compute_capability if gpu else None
    features = feature_verdicts(cand.version if cand else None, cc, gpu=gpu is not None,
                                bindings=bindings_ok, ort_providers=providers)
    trt_ready = any(f.tensorrt == "yes" for f in features)
    if cand and not trt_ready:
        trt_line = f"{trt_line}: {features[0].reason}"
    if ort_version:
        rows[-1].value = f"{ort_version} ({', '.join(p.replace('ExecutionProvider', '') for p in providers)})"
    return EnvReport(rows, features, trt_line, trt_ready, ort_version is not None, candidates)


# --------------------------------------------------------------------------------------------------------------
# Command line: python -m trtlab doctor / python -m trtlab.env.trt_env {discover,repair,load,doctor,setup}
# --------------------------------------------------------------------------------------------------------------


def doctor_main(argv: list[str] | None = None) -> int:
    """``python -m trtlab doctor [--root PATH ...] [--json] [--strict]``: print the environment report.

    Exit status 0 even without TensorRT (the workbench runs on ONNX Runtime); with ``--strict``, 1 when
    TensorRT is not usable. 2 for a usage error (argparse).
    """
    parser = argparse.ArgumentParser(prog="python -m trtlab doctor", description="GPU / CUDA / TensorRT / ORT report")
    parser.add_argument("--root", action="append", default=None, help="folder to search for TensorRT (repeatable)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--strict", action="store_true", help="exit 1 when TensorRT is not usable")
    args = parser.parse_args(argv)
    report = collect_report(roots=args.root)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report.format_table())
        print()
        print(report.summary(color=sys.stdout.isatty()))
    if not report.ort_ready and not report.trt_ready:
        return 1
    return 1 if args.strict and not report.trt_ready else 0


def _print_candidates(cands: list[Candidate]) -> None:
    if not cands:
        print(no_tensorrt_message(cands))
    for c in cands:
        state = "healthy" if c.healthy else ("fixable" if c.usable else "broken")
        print(f"{c.source:6} {c.version or '?':12} {state:8} {c.lib_dir}")
        for key, comp in c.components.items():
            print(f"         {key:30} {comp.best.name if comp.best else '—'}")
        for p in c.problems:
            print(f"         problem: {p}")
        for n in c.notes:
            print(f"         note: {n}")
        for w in c.wheels:
            print(f"         wheel: {w}")


def _check_in_fresh_process(lib_dir: str) -> str:
    """Preload ``lib_dir`` in a new interpreter without LD_LIBRARY_PATH: proves the copies load on their own."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "load", "--lib-dir", lib_dir, "--no-import"],
                              capture_output=True, text=True, timeout=300, env=env)
    except subprocess.SubprocessError as exc:
        return f"could not run the check ({exc})"
    return (proc.stdout.strip() or proc.stderr.strip() or "(no output)").splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "doctor":
        return doctor_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m trtlab.env.trt_env",
                                     description="find, repair and load TensorRT libraries")
    sub = parser.add_subparsers(dest="command", required=True)

    def roots(p):
        p.add_argument("--root", action="append", default=None, help="folder to search (default /kaggle/input)")
        p.add_argument("--json", action="store_true")

    roots(sub.add_parser("discover", help="list TensorRT candidates and their problems"))
    for name in ("repair", "setup"):
        p = sub.add_parser(name, help="discover, copy the libraries into DEST, write env.sh, install bindings")
        roots(p)
        p.add_argument("--dest", default=None, help="writable folder (default <workspace>/lib)")
        p.add_argument("--no-bindings", action="store_true", help="do not pip install the bindings wheel")
        p.add_argument("--bindings-target", default=None, help="pip --target folder for the bindings")
        p.add_argument("--force", action="store_true", help="copy even a healthy pip/system install")
    p = sub.add_parser("load", help="preload a library folder into this process (a check in a fresh Python)")
    p.add_argument("--lib-dir", required=True)
    p.add_argument("--no-import", action="store_true")
    p.add_argument("--json", action="store_true")
    sub.add_parser("doctor", help="environment report (see python -m trtlab doctor --help)")
    args = parser.parse_args(argv)

    if args.command == "discover":
        cands = discover(args.root)
        if args.json:
            print(json.dumps([c.to_dict() for c in cands], indent=1))
        else:
            _print_candidates(cands)
        return 0 if best_candidate(cands) else 1
    if args.command in ("repair", "setup"):
        cands = discover(args.root)
        if not args.json and cands:
            _print_candidates(cands)
        result = repair(cands, args.dest, bindings=not args.no_bindings, bindings_target=args.bindings_target,
                        force=args.force)
        if args.json:
            d = {"ok": result.ok, "lib_dir": result.lib_dir, "env_sh": result.env_sh, "error": result.error,
                 "actions": result.actions, "fixed": result.fixed, "bindings": result.bindings}
            print(json.dumps(d, indent=1))
        else:
            print(result.summary())
        if result.ok and args.command == "setup" and not args.json:
            print(f"check in a fresh Python (no LD_LIBRARY_PATH): {_check_in_fresh_process(result.lib_dir)}")
            print(f"\nNow run:  source {result.env_sh}")
        return 0 if result.ok else 1
    if args.command == "load":
        res = load(args.lib_dir, import_tensorrt=not args.no_import)
        if args.json:
            print(json.dumps({"ok": res.ok, "loaded": res.loaded, "failed": res.failed,
                              "tensorrt": res.tensorrt, "message": res.message}, indent=1))
        else:
            print(res.message)
        return 0 if res.ok else 1
    return doctor_main([])


if __name__ == "__main__":
    sys.exit(main())
