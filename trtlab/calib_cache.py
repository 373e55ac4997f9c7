"""Calibration caches in TensorRT's text format, with trtlab's metadata beside them.

TensorRT's format (as written by its calibrators, e.g. `TRT-7202-EntropyCalibration2` / `data: 3c008912`): a header
line `TRT-<version>-<algorithm>`, then one `<tensor name>: <scale>` line per tensor, the scale being the big-endian
hex of its IEEE-754 float32 bits. TensorRT rejects a cache whose header names another algorithm (and, per user
reports, another version). trtlab writes the scales it computed (scale = threshold / 127) in that format so the same
file can be handed to a TensorRT 10 implicit build, and keeps the provenance that the format cannot hold in
`<cache>.json`: model sha256, algorithm, preprocessing, image count, TensorRT version when known.
"""
from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from .workspace import atomic_write_json, atomic_write_text

# TensorRT's names for its calibration algorithms; percentile has no TensorRT calibrator of its own. Both entropy
# variants write EntropyCalibration2 caches (the sidecar JSON records which variant made the scales).
TRT_ALGORITHM_NAMES = {"entropy": "EntropyCalibration2", "entropy-gtc": "EntropyCalibration2",
                       "minmax": "MinMaxCalibration", "percentile": "trtlabPercentile"}


class StaleCacheError(ValueError):
    """A calibration cache made for another model, algorithm, preprocessing or TensorRT version."""


@dataclass(frozen=True)
class CacheMetadata:
    model_sha256: str
    algorithm: str
    preprocess: dict
    images: int
    percentile: float | None = None
    guards: tuple = ()
    tensorrt_version: str | None = None
    calibration_ids_hash: str | None = None


def encode_scale(scale: float) -> str:
    return struct.pack(">f", float(scale)).hex()


def decode_scale(text: str) -> float:
    return struct.unpack(">f", bytes.fromhex(text.strip()))[0]


def trt_version_number(version: str | None) -> int:
    """'10.3.0' → 100300 and '8.6.1' → 8601, the NV_TENSORRT_VERSION numbering seen in cache headers (TensorRT ≥ 10
    uses two digits per minor/patch field); 0 when unknown."""
    if not version:
        return 0
    parts = [int(p) for p in version.split(".")[:3] if p.isdigit()] + [0, 0, 0]
    major, minor, patch = parts[:3]
    return major * 10000 + minor * 100 + patch if major >= 10 else major * 1000 + minor * 100 + patch


def write_calibration_cache(path, scales: dict[str, float], meta: CacheMetadata) -> Path:
    path = Path(path)
    header = f"TRT-{trt_version_number(meta.tensorrt_version)}-{TRT_ALGORITHM_NAMES[meta.algorithm]}"
    lines = [header] + [f"{name}: {encode_scale(scale)}" for name, scale in scales.items()]
    atomic_write_text(path, "\n".join(lines) + "\n")
    atomic_write_json(path.with_name(path.name + ".json"), asdict(meta))
    return path


def read_calibration_cache(path) -> tuple[str, dict[str, float]]:
    """(header, {tensor: scale}) from a TensorRT-format cache file."""
    text = Path(path).read_text().splitlines()
    if not text or not text[0].startswith("TRT-"):
        raise ValueError(f"{path} is not a TensorRT calibration cache (first line should be TRT-<version>-<algorithm>)")
    scales = {}
    for line_no, line in enumerate(text[1:], start=2):
        if not line.strip():
            continue
        name, sep, value = line.rpartition(":")
        if not sep:
            raise ValueError(f"{path}:{line_no}: expected '<tensor>: <hex scale>', got {line!r}")
        scales[name.strip()] = decode_scale(value)
    return text[0], scales


def load_if_valid(path, expected: CacheMetadata) -> dict[str, float]:
    """The cached scales, or StaleCacheError naming every field that differs from `expected`."""
    path = Path(path)
    meta_path = path.with_name(path.name + ".json")
    if not meta_path.exists():
        raise StaleCacheError(f"calibration cache {path} has no metadata file {meta_path.name}, so trtlab cannot tell "
                              f"what it was made for; delete it or pass reuse_cache=False")
    stored = json.loads(meta_path.read_text())
    wanted = json.loads(json.dumps(asdict(expected)))  # tuples → lists, as stored
    differences = []
    for field, value in wanted.items():
        have = stored.get(field)
        if field == "tensorrt_version" and (value is None or have is None):
            continue
        if have != value:
            differences.append(f"{field}: cache has {_short(have)}, this run needs {_short(value)}")
    if differences:
        raise StaleCacheError(f"calibration cache {path} was made for something else — " + "; ".join(differences)
                              + ". Delete it or pass reuse_cache=False to recalibrate.")
    header, scales = read_calibration_cache(path)
    if not header.endswith(TRT_ALGORITHM_NAMES[expected.algorithm]):
        raise StaleCacheError(f"calibration cache {path} header {header!r} does not name {expected.algorithm}")
    return scales


def _short(value) -> str:
    text = str(value)
    return text[:12] + "…" if len(text) > 16 and all(c in "0123456789abcdef" for c in text) else text
