"""What one folder of TensorRT libraries really holds: each file classified (real library, link, 0 bytes, dangling
or looping link, Git LFS pointer, truncated ELF), grouped per component, versions read from names and symbols,
and every problem named as a sentence with the file, the folder and what repair does about it.
"""
from __future__ import annotations

import dataclasses
import errno
import glob
import os
from dataclasses import dataclass, field

from trtlab.env.elf import ElfError, read_elf, version_from_symbol
from trtlab.env.install import install_hint
from trtlab.env.layout import (LIB_NAME_RE, NEEDED_COMPONENTS, WHEEL_RE, component_of, order_index, version_tuple)


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


def _follow_link(lib: LibFile) -> str | None:
    """Resolve a symlink entry; None (and ``lib.kind``/``problem`` set) when it is dangling or loops."""
    folder, name = os.path.dirname(lib.path), lib.name
    target = os.readlink(lib.path)
    try:
        os.stat(lib.path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            lib.kind, lib.problem = "loop", f"{name} in {folder} is a symlink loop ({name} -> {target} -> ...)"
        else:
            lib.kind, lib.problem = "dangling", f"{name} in {folder} is a dangling link to {target}"
        lib.target = target
        return None
    lib.kind, lib.target = "link", os.path.realpath(lib.path)
    return lib.target


def inspect_file(path: str | os.PathLike) -> LibFile | None:
    """Classify one entry (regular file or link); None when the name is not a TensorRT library name."""
    path = os.fspath(path)
    name = os.path.basename(path)
    m = LIB_NAME_RE.match(name)
    if not m:
        return None
    folder = os.path.dirname(path)
    lib = LibFile(path=path, name=name, stem=m.group("stem"), file_version=m.group("ver"), kind="ok")
    real = _follow_link(lib) if os.path.islink(path) else path
    if real is None:
        return lib
    try:
        lib.size = os.path.getsize(real)
        if lib.size == 0:
            via = f" (via link to {lib.target})" if lib.kind == "link" else ""
            lib.kind, lib.problem = "zero", f"{name} in {folder} is 0 bytes{via} (a broken dataset upload)"
            return lib
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
    lib.symbol_version = max(versions, key=version_tuple) if versions else None
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
        v = version_tuple(self.version)
        return v[0] if v else None


@dataclass
class Candidate:
    """A folder holding a TensorRT installation (or the remains of one)."""

    lib_dir: str
    source: str                                  # tar | pip | system
    components: dict[str, Component] = field(default_factory=dict)
    version: str | None = None                   # from libnvinfer: symbol first, then file name
    version_note: str | None = None              # disagreements between symbol and file names
    version_mix: str | None = None               # components of other releases than libnvinfer's: cannot load
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
        v = version_tuple(self.version)
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
    return max(usable, key=lambda f: (f.kind == "ok", len(version_tuple(f.file_version)), version_tuple(f.file_version)))


def expected_names(comp: Component) -> dict[str, str]:
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


def _analyse_component(folder: str, key: str, group: list[LibFile], source: str, notes: list[str]) -> Component:
    comp = Component(key=key, files=sorted(group, key=lambda f: f.name))
    if key == "libnvinfer_builder_resource":
        comp.variants = [f for f in group if f.usable]
    comp.best = best = _choose_best(group)
    if best:
        named = best.file_version if len(version_tuple(best.file_version)) >= 2 else None
        comp.version = best.symbol_version or named or best.file_version
        real_versions = {f.file_version for f in group if f.usable and len(version_tuple(f.file_version)) >= 3}
        if len(real_versions) > 1:
            comp.problems.append(f"{folder} holds {key} in several versions ({', '.join(sorted(real_versions))}); "
                                 f"repair uses {best.name}")
    present = {f.name for f in group}
    for f in group:
        if f.problem:
            fix = (f"; repair copies {best.name} instead" if best else
                   f"; no real {key} exists in this folder: re-upload the TensorRT tar (with its libraries) or "
                   f"{install_hint()}")
            comp.problems.append(f.problem + fix)
    for name, why in expected_names(comp).items():
        if name not in present:
            msg = f"{name} is missing in {folder} ({why}); repair creates it as a copy of {best.name}"
            if name.endswith(".so") and source != "tar":
                notes.append(msg)  # pip wheels and apt runtime packages ship no dev link; loading never needs it
            else:
                comp.problems.append(msg)
    return comp


def find_version_mix(cand: Candidate) -> str | None:
    """Components whose release differs from libnvinfer's (by name/symbol, or by the version they link against).

    TensorRT loads only a set of one release: a parser or plugin of another release fails at dlopen or at its
    first call, so repair refuses such a set instead of copying it.
    """
    core = cand.components.get("libnvinfer")
    if not (core and core.best and cand.version):
        return None
    ref = version_tuple(cand.version)
    odd = []
    for key, comp in cand.components.items():
        if key == "libnvinfer" or not (comp.best and comp.version):
            continue
        mm = version_tuple(comp.version)[:2]
        if mm and mm != ref[: len(mm)]:
            odd.append(f"{key} {comp.version} ({comp.best.name})")
            continue
        wants = {v for v in (version_from_symbol(s) for s in comp.best.version_refs) if v}
        wrong = sorted(v for v in wants if version_tuple(v)[:2] != ref[:2])
        if wrong:
            odd.append(f"{key} built against TensorRT {', '.join(wrong)} ({comp.best.name})")
    if not odd:
        return None
    return f"{cand.lib_dir} mixes TensorRT releases: libnvinfer {cand.version} ({core.best.name}) but {', '.join(odd)}"


def _check_core(cand: Candidate, folder: str) -> None:
    """Version of the set (libnvinfer: symbol first, then name) and the disagreements about it."""
    core = cand.components.get("libnvinfer")
    if not (core and core.best):
        broken = [f.name for f in (core.files if core else [])]
        what = f" ({', '.join(broken)} are broken)" if broken else ""
        cand.problems.append(f"no real libnvinfer found in {folder}{what}: add the TensorRT tar dataset to the "
                             f"notebook or {install_hint()}")
        return
    best = core.best
    cand.version = core.version
    if best.symbol_version and best.file_version:
        sym, named = version_tuple(best.symbol_version), version_tuple(best.file_version)
        if sym[: len(named)] != named:
            cand.version_note = (f"{best.name} is named {best.file_version} but exports "
                                 f"tensorrt_version_{best.symbol_version.replace('.', '_')}; trusting the symbol")
            cand.problems.append(f"{folder}: {cand.version_note}")
    elif not best.symbol_version:
        cand.notes.append(f"{best.name} exports no tensorrt_version_* symbol; version taken from the file name")
    cand.version_mix = find_version_mix(cand)
    if cand.version_mix:
        cand.problems.append(cand.version_mix)


def analyse_folder(folder: str, files: list[LibFile], source: str) -> Candidate:
    """A :class:`Candidate` from the TensorRT library entries of one folder."""
    cand = Candidate(lib_dir=folder, source=source)
    by_key: dict[str, list[LibFile]] = {}
    for f in files:
        by_key.setdefault(component_of(f.stem), []).append(f)
    for key, group in sorted(by_key.items(), key=lambda kv: order_index(kv[0])):
        comp = _analyse_component(folder, key, group, source, cand.notes)
        cand.components[key] = comp
        cand.problems.extend(comp.problems)
    _check_core(cand, folder)
    cand.wheels = find_wheels(folder) if source == "tar" else []
    return cand


def find_wheels(lib_dir: str) -> list[str]:
    """Bindings wheels of a tar tree: ``<tree>/python/tensorrt-*.whl`` next to ``<tree>/lib``."""
    tree = os.path.dirname(lib_dir) if os.path.basename(lib_dir) in ("lib", "lib64") else lib_dir
    found = []
    for folder in (os.path.join(tree, "python"), tree, lib_dir):
        for path in sorted(glob.glob(os.path.join(folder, "*.whl"))):
            if WHEEL_RE.match(os.path.basename(path)) and path not in found:
                found.append(path)
    return found


def scan_folder(folder: str) -> list[LibFile]:
    """Every TensorRT library entry of one folder (not recursive), classified."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    files = [inspect_file(os.path.join(folder, n)) for n in sorted(names) if LIB_NAME_RE.match(n)]
    return [f for f in files if f is not None]
