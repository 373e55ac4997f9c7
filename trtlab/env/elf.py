"""A small ELF reader: SONAME, DT_NEEDED and ``tensorrt_version_*`` symbols of a shared object, without loading it.

Hand-written on purpose (``struct`` only): env runs from ``setup_kaggle_env.sh`` on a half-installed machine with
the standard library alone. Only the section headers, ``.dynamic`` and ``.dynsym`` are read, by seeking, so a
1 GB libnvinfer_builder_resource costs a few reads.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from trtlab.env.layout import LFS_POINTER_PREFIX, VERSION_SYMBOL_RE, version_str

_SHT_DYNAMIC, _SHT_DYNSYM = 6, 11
_DT_NULL, _DT_NEEDED, _DT_SONAME = 0, 1, 14


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


def _cstr(blob: bytes, offset: int) -> str:
    stop = blob.find(b"\0", offset)
    return blob[offset:stop if stop >= 0 else len(blob)].decode("utf-8", "replace")


class _Reader:
    """Section table of an open ELF file and reads of whole sections, bounds-checked against the file size."""

    def __init__(self, f, size: int):
        self.f, self.size = f, size
        ident = f.read(16)
        if ident[:4] != b"\x7fELF":
            if (ident + f.read(len(LFS_POINTER_PREFIX))).startswith(LFS_POINTER_PREFIX):
                raise ElfError("lfs_pointer", "is a Git LFS pointer file, not the library")
            raise ElfError("not_elf", "is not an ELF shared library")
        self.is64 = ident[4] == 2
        self.end = "<" if ident[5] == 1 else ">"
        hdr_fmt = self.end + ("HHIQQQIHHHHHH" if self.is64 else "HHIIIIIHHHHHH")
        hdr = f.read(struct.calcsize(hdr_fmt))
        if len(hdr) < struct.calcsize(hdr_fmt):
            raise ElfError("truncated", f"is truncated ({size} bytes, shorter than an ELF header)")
        (_, _, _, _, _, shoff, _, _, _, _, shentsize, shnum, _) = struct.unpack(hdr_fmt, hdr)
        sh_fmt = self.end + ("IIQQQQIIQQ" if self.is64 else "IIIIIIIIII")
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
        self.sections = [struct.unpack_from(sh_fmt, table, i * shentsize) for i in range(shnum)]

    def section(self, index: int) -> bytes:
        _, _, _, _, offset, sec_size, *_ = self.sections[index]
        if offset + sec_size > self.size:
            raise ElfError("truncated", f"is truncated ({self.size} bytes; a section ends at {offset + sec_size})")
        self.f.seek(offset)
        return self.f.read(sec_size)

    def dynamic(self, index: int, link: int) -> tuple[str | None, list[str]]:
        strtab, soname, needed = self.section(link), None, []
        for tag, val in struct.iter_unpack(self.end + ("qQ" if self.is64 else "iI"), self.section(index)):
            if tag == _DT_NULL:
                break
            if tag == _DT_NEEDED:
                needed.append(_cstr(strtab, val))
            elif tag == _DT_SONAME:
                soname = _cstr(strtab, val)
        return soname, needed

    def version_symbols(self, index: int, link: int) -> tuple[list[str], list[str]]:
        """(defined, undefined) ``tensorrt_version_*`` names of a symbol table."""
        strtab, defined, refs = self.section(link), [], []
        for entry in struct.iter_unpack(self.end + ("IBBHQQ" if self.is64 else "IIIBBH"), self.section(index)):
            name_off = entry[0]
            if not strtab.startswith(b"tensorrt_version_", name_off):
                continue
            shndx = entry[3] if self.is64 else entry[5]
            (defined if shndx != 0 else refs).append(_cstr(strtab, name_off))
        return defined, refs


def read_elf(path: str | os.PathLike) -> ElfInfo:
    """SONAME, DT_NEEDED and ``tensorrt_version_*`` symbols of an ELF shared object, without loading it."""
    with open(path, "rb") as f:
        reader = _Reader(f, os.fstat(f.fileno()).st_size)
        soname, needed, defined, refs = None, [], [], []
        for index, sec in enumerate(reader.sections):
            sh_type, sh_link = sec[1], sec[6]
            if sh_type == _SHT_DYNAMIC:
                soname, needed = reader.dynamic(index, sh_link)
            elif sh_type == _SHT_DYNSYM:
                d, r = reader.version_symbols(index, sh_link)
                defined += d
                refs += r
        return ElfInfo(soname, needed, sorted(set(defined)), sorted(set(refs)))


def version_from_symbol(symbol: str) -> str | None:
    """``tensorrt_version_10_3_0_26`` → ``10.3.0.26``."""
    m = VERSION_SYMBOL_RE.match(symbol)
    return version_str(g for g in m.groups() if g is not None) if m else None
