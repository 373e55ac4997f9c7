"""A TensorRT engine file recognised without TensorRT, from the header of its serialized plan.

A plan starts with the magic tag b"ftrt": TensorRT's deserializer checks it as `kPLAN_MAGIC_TAG` ("Serialization
assertion header.magicTag == rt::PlanMagicTag::kPLAN_MAGIC_TAG failed … (1953657968 != 1953657958)" —
1953657958 = 0x74727466 is b"ftrt" read little-endian; galaxy-oss/FCM#8), and torch-tensorrt's runtime tells a raw
engine from its base64 form by `startswith(b"ftrt")`. Bytes 24, 25 and 26 hold the major,
minor and patch of the TensorRT that built it (NVIDIA's answer in NVIDIA/TensorRT#3073, read so by autoware's
tensorrt_common `validateEngine`, TRT_MAJOR_IDX = 24); this is not documented, so a version outside 8.x–99.x is
not trusted and not said. Ultralytics' exporter puts [uint32 little-endian length][JSON metadata] before the plan;
that wrapping is recognised too.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

PLAN_MAGIC = b"ftrt"
VERSION_OFFSET = 24  # major, minor, patch bytes (NVIDIA/TensorRT#3073)
HEADER_BYTES = 64 << 10  # enough for an Ultralytics metadata prefix and the plan's first bytes


@dataclass(frozen=True)
class EngineHeader:
    """What an engine file's header says: where its plan starts and the TensorRT that built it (None: unreadable)."""

    plan_offset: int
    tensorrt: str | None

    def built_by(self) -> str:
        """'built by TensorRT 10.16.1' or '' when the header does not say."""
        return f"built by TensorRT {self.tensorrt}" if self.tensorrt else ""


def read_engine_header(path: str | os.PathLike) -> EngineHeader | None:
    """The header of the TensorRT engine at `path`, or None when the file is not a TensorRT plan."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEADER_BYTES)
    except OSError:
        return None
    offset = 0
    if not head.startswith(PLAN_MAGIC) and len(head) >= 8:
        (length,) = struct.unpack("<I", head[:4])  # an Ultralytics engine: its JSON metadata, then the plan
        if 0 < length < len(head) - 8 and head[4:5] == b"{" and head[4 + length:8 + length] == PLAN_MAGIC:
            offset = 4 + length
    if not head[offset:].startswith(PLAN_MAGIC):
        return None
    version = head[offset + VERSION_OFFSET:offset + VERSION_OFFSET + 3]
    readable = len(version) == 3 and 8 <= version[0] <= 99 and version[1] <= 99 and version[2] <= 99
    return EngineHeader(offset, ".".join(str(b) for b in version) if readable else None)
