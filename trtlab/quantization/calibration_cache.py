"""Calibration caches in TensorRT's text format, with trtlab's metadata beside them.

TensorRT's format (as written by its calibrators, e.g. `TRT-7202-EntropyCalibration2` / `data: 3c008912`): a header
line `TRT-<version>-<algorithm>`, then one `<tensor name>: <scale>` line per tensor, the scale being the big-endian
hex of its IEEE-754 float32 bits. TensorRT rejects a cache whose header names another algorithm (and, per user
reports, another version). trtlab writes the scales it computed (scale = threshold / 127) in that format so the same
file can be handed to a TensorRT 10 implicit build, and keeps the provenance that the format cannot hold in
`<cache>.json`: one sidecar schema, `CacheMetadata` (model sha256, algorithm, preprocessing, image count and ids hash,
TensorRT version and calibration batch when known), for trtlab's caches and TensorRT's calibrator alike, checked by
the one provenance check (trtlab.core.provenance) before a cache is reused.
"""
from __future__ import annotations

import math
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from trtlab.core.errors import UserError
from trtlab.core.provenance import check_provenance
from trtlab.core.workspace import atomic_write_json, atomic_write_text, read_json_checked

# An imported scale is plausible when its threshold (scale × 127) lies within this factor of the largest |x| the
# FP32 model produced on the calibration images: entropy/percentile thresholds sit below the max (clipping), a
# hand-edited or foreign cache can sit far off in either direction. Without statistics, thresholds must lie in
# (MIN_THRESHOLD, MAX_THRESHOLD): float32 activations of a classifier beyond 1e6 are not real.
PLAUSIBLE_FACTOR = 100.0
MIN_THRESHOLD, MAX_THRESHOLD = 1e-8, 1e6

# TensorRT's names for its calibration algorithms; percentile has no TensorRT calibrator of its own. Both entropy
# variants write EntropyCalibration2 caches (the sidecar JSON records which variant made the scales).
TRT_ALGORITHM_NAMES = {"entropy": "EntropyCalibration2", "entropy-gtc": "EntropyCalibration2",
                       "minmax": "MinMaxCalibration", "percentile": "trtlabPercentile"}


class StaleCacheError(UserError, ValueError):
    """A calibration cache made for another model, algorithm, preprocessing or TensorRT version."""


class BadCalibrationCache(UserError, ValueError):
    """A calibration cache that cannot be used: unreadable lines or impossible scales (names file and line)."""


class UnreadableCalibrationCache(BadCalibrationCache):
    """A cache file whose text is not a calibration cache at all (binary, no header, a line that is no scale): for
    a cache trtlab wrote itself, damage — set aside and calibrated again (tensorrt_calibrator)."""


class DamagedCalibrationCache(StaleCacheError):
    """A cache whose trtlab sidecar (`<cache>.json`) is damaged: it was set aside, so what the cache was made for
    is unknown."""


@dataclass(frozen=True)
class CacheMetadata:
    """What a calibration cache was made for — the sidecar `<cache>.json` of trtlab's caches and of TensorRT's
    calibrator. Reuse needs every field equal, except those in LENIENT_FIELDS when either side does not know them."""

    model_sha256: str
    algorithm: str  # trtlab's name: entropy, entropy-gtc, minmax, percentile
    preprocess: dict
    images: int
    percentile: float | None = None
    guards: tuple = ()
    tensorrt_version: str | None = None
    calibration_ids_hash: str | None = None
    batch_size: int | None = None  # TensorRT's calibrator: its calibration batch

    #: compared only when both the cache and this run know them (a cache made where TensorRT was absent, or a
    #: sidecar written before the field existed)
    LENIENT_FIELDS = ("tensorrt_version", "batch_size")

    def to_dict(self) -> dict:
        return asdict(self)

    def check(self, stored: dict | None, path) -> None:
        """StaleCacheError naming every field in which the sidecar `stored` differs from this metadata."""
        check_provenance(stored, self.to_dict(), what=f"calibration cache {path}",
                         fix="delete it or pass reuse_cache=False to recalibrate", lenient=self.LENIENT_FIELDS,
                         error=StaleCacheError)


def encode_scale(scale: float) -> str:
    return struct.pack(">f", float(scale)).hex()


def decode_scale(text: str) -> float:
    """The float32 whose big-endian bits `text` spells in hex. Writers that print the bits as an integer
    (`std::hex` in TensorRT's C++ samples, Python's hex()) drop leading zeros: up to 8 digits are accepted."""
    text = text.strip().lower().removeprefix("0x")
    if not 1 <= len(text) <= 8 or any(c not in "0123456789abcdef" for c in text):
        raise ValueError(f"{text!r} is not up to 8 hexadecimal digits")
    return struct.unpack(">f", int(text, 16).to_bytes(4, "big"))[0]


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
    atomic_write_json(path.with_name(path.name + ".json"), meta.to_dict())
    return path


def read_calibration_cache(path) -> tuple[str, dict[str, float]]:
    """(header, {tensor: scale}) from a TensorRT-format cache file; every scale finite and > 0.

    BadCalibrationCache names the file and line of anything else (not hex, not 4 bytes, NaN/inf/0/negative)."""
    try:
        text = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise UnreadableCalibrationCache(f"{path} is not a text TensorRT calibration cache (binary content)",
                                  "give the cache file written by a TensorRT calibrator or by trtlab") from None
    if not text or not text[0].startswith("TRT-"):
        raise UnreadableCalibrationCache(f"{path} is not a TensorRT calibration cache (first line should be "
                                  f"TRT-<version>-<algorithm>)", "give the cache file written by a calibrator")
    scales = {}
    for line_no, line in enumerate(text[1:], start=2):
        if not line.strip():
            continue
        name, sep, value = line.rpartition(":")
        if not sep:
            raise UnreadableCalibrationCache(f"{path}:{line_no}: expected '<tensor>: <hex scale>', got {line!r}",
                                      "fix or delete that line")
        try:
            scale = decode_scale(value)
        except (ValueError, struct.error):
            raise UnreadableCalibrationCache(f"{path}:{line_no}: scale {value.strip()!r} of tensor {name.strip()!r} is "
                                             f"not 8 hexadecimal digits (a big-endian float32)",
                                             "fix or delete that line") from None
        if not (math.isfinite(scale) and scale > 0):
            raise BadCalibrationCache(f"{path}:{line_no}: scale of tensor {name.strip()!r} is {scale!r}; a scale must "
                                      f"be finite and > 0", "recalibrate, or fix that line")
        scales[name.strip()] = scale
    return text[0], scales


def check_scales(path, scales: dict[str, float], observed_absmax: dict[str, float] | None = None,
                 factor: float = PLAUSIBLE_FACTOR) -> None:
    """Refuse implausible imported scales, naming the file, tensor and bound.

    threshold = scale × 127. With `observed_absmax` (largest |x| per tensor from this model's FP32 run on the
    calibration images), each threshold must lie within `factor` of it; without, within (MIN_THRESHOLD,
    MAX_THRESHOLD). Tensors never observed (or observed all-zero) are checked against the absolute bounds only."""
    problems = []
    for name, scale in scales.items():
        threshold = scale * 127.0
        seen = (observed_absmax or {}).get(name)
        if not (math.isfinite(threshold) and MIN_THRESHOLD < threshold < MAX_THRESHOLD):
            problems.append(f"{name}: threshold {threshold:.3g} is outside ({MIN_THRESHOLD:g}, {MAX_THRESHOLD:g})")
        elif seen and seen > 0 and not (seen / factor <= threshold <= seen * factor):
            problems.append(f"{name}: threshold {threshold:.3g} vs observed max |x| {seen:.3g} (more than "
                            f"{factor:g}× off)")
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise BadCalibrationCache(f"calibration cache {path} has implausible scales: " + "; ".join(problems[:3]) + more,
                                  "recalibrate (without reuse) or fix the cache; trtlab does not build a variant "
                                  "from it")


def load_if_valid(path, expected: CacheMetadata, observed_absmax: dict[str, float] | None = None) -> dict[str, float]:
    """The cached scales, or StaleCacheError naming every field that differs from `expected`, or
    BadCalibrationCache for unreadable or implausible scales (see check_scales; pass `observed_absmax` — e.g.
    `{t: h.absmax for t, h in stats.tensors.items()}` — to check them against this model's ranges)."""
    path = Path(path)
    meta_path = path.with_name(path.name + ".json")
    if not meta_path.exists():
        raise StaleCacheError(f"calibration cache {path} has no metadata file {meta_path.name}, so trtlab cannot tell "
                              f"what it was made for", "delete it or pass reuse_cache=False")
    stored = read_json_checked(meta_path)
    if stored is None:  # damaged: set aside (and named) by read_json_checked
        raise DamagedCalibrationCache(f"calibration cache metadata {meta_path} was damaged and set aside",
                                      "recalibrate (reuse_cache=False)")
    expected.check(stored, path)
    header, scales = read_calibration_cache(path)
    if not header.endswith(TRT_ALGORITHM_NAMES[expected.algorithm]):
        raise StaleCacheError(f"calibration cache {path} header {header!r} does not name {expected.algorithm}",
                              "use a cache made with that algorithm, or recalibrate")
    check_scales(path, scales, observed_absmax)
    return scales


# -- importing a cache (`calibrate --import-cache FILE`, build_variant(calibration_cache_path=…, reuse_cache=True)) --
#: TensorRT's calibrator names in cache headers → trtlab's algorithm. EntropyCalibration (the first entropy
#: calibrator) has no algorithm of its own in trtlab: its scales are imported under "entropy" and the header is kept
#: in the variant's identity.
HEADER_ALGORITHMS = {"EntropyCalibration2": "entropy", "EntropyCalibration": "entropy",
                     "MinMaxCalibration": "minmax", "trtlabPercentile": "percentile"}
TENSORRT_FORMAT = "TensorRT cache without sidecar"
TRTLAB_FORMAT = "trtlab cache with sidecar"
#: Sidecar fields an import must match: what the scales were computed for. The images, their ids, the calibration
#: batch and TensorRT's version describe how; an imported cache replaces calibrating, so they need not match.
IMPORT_FIELDS = ("model_sha256", "algorithm", "preprocess", "percentile")


@dataclass(frozen=True)
class ImportedCache:
    """A calibration cache given to be used instead of calibrating: its scales, header and provenance."""

    path: Path
    sha256: str
    header: str
    header_algorithm: str  # TensorRT's name, from the header
    algorithm: str  # trtlab's name
    scales: dict
    sidecar: dict | None  # trtlab's <cache>.json, None for TensorRT's own caches

    @property
    def format(self) -> str:
        return TRTLAB_FORMAT if self.sidecar is not None else TENSORRT_FORMAT

    @property
    def percentile(self) -> float | None:
        return (self.sidecar or {}).get("percentile")

    def identity(self) -> dict:
        """What the variant's identity records about its scales."""
        return {"source": "imported-cache", "cache_sha256": self.sha256, "format": self.format,
                "header": self.header}


def read_imported_cache(path, flag: str = "--import-cache") -> ImportedCache:
    """The cache at `path`, readable and with a header trtlab knows; one-line errors naming the file otherwise.
    Its trtlab sidecar (`<cache>.json`) is read when present; TensorRT's own caches have none."""
    from trtlab.core.errors import UserFileNotFound
    from trtlab.core.workspace import sha256_file

    path = Path(path)
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise UserFileNotFound(f"{flag} {path} {where}", "give the calibration cache file (TensorRT's text format, "
                                                         "as a calibrator or trtlab writes it)")
    header, scales = read_calibration_cache(path)
    parts = header.strip().split("-", 2)
    algorithm = HEADER_ALGORITHMS.get(parts[2] if len(parts) == 3 else "")
    if algorithm is None or not parts[1].isdigit():
        raise BadCalibrationCache(f"{path}:1: header {header.strip()!r} does not name a calibrator trtlab can import "
                                  f"(TRT-<version>-<calibrator>, calibrator one of {', '.join(HEADER_ALGORITHMS)})",
                                  "give a cache written by one of those calibrators")
    if not scales:
        raise BadCalibrationCache(f"{path} holds no scales (only its header)", "give the cache of a finished "
                                                                               "calibration")
    sidecar_path = path.with_name(path.name + ".json")
    sidecar = read_json_checked(sidecar_path) if sidecar_path.exists() else None
    return ImportedCache(path, sha256_file(path), header.strip(), parts[2], algorithm, scales, sidecar)


def check_imported(imported: ImportedCache, model_sha256: str, algorithm: str, preprocess: dict,
                   percentile: float | None, needed, known=(), observed_absmax: dict | None = None,
                   model_name: str = "this model") -> dict[str, float]:
    """The scales of `needed` (the activations this variant quantizes) from `imported`, checked: its sidecar (when
    it has one) made for this model, algorithm and preprocessing; its header's calibrator the recipe's; every
    needed tensor in it (the missing ones named); not a cache of another model (none of its tensors in `known`, the
    model's tensor names); plausible scales (check_scales, against `observed_absmax` when statistics exist)."""
    import logging

    path = imported.path
    if imported.sidecar is not None:
        stored = {k: imported.sidecar.get(k) for k in IMPORT_FIELDS}
        expected = {"model_sha256": model_sha256, "algorithm": algorithm, "preprocess": preprocess,
                    "percentile": percentile if algorithm == "percentile" else None}
        check_provenance(stored, expected, what=f"calibration cache {path}", error=StaleCacheError,
                         fix="import a cache made for this model and preprocessing, or calibrate (drop the import)")
    elif imported.algorithm != algorithm:
        raise StaleCacheError(f"calibration cache {path} was written by TensorRT's {imported.header_algorithm} "
                              f"({imported.header}), not by {algorithm}",
                              f"import it as {imported.algorithm} (--algorithms {imported.algorithm}), or give a "
                              f"cache made with {algorithm}")
    internal = [name for name in imported.scales if name.startswith("(Unnamed Layer")]
    named = [name for name in imported.scales if name not in internal]
    known = set(known)
    if known and named and not any(name in known for name in named):
        raise StaleCacheError(f"calibration cache {path} names none of {model_name}'s tensors (it names e.g. "
                              f"{', '.join(repr(n) for n in named[:3])}): it was made for another model",
                              "import the cache made for this model, or calibrate")
    missing = [name for name in needed if name not in imported.scales]
    if missing:
        shown = ", ".join(repr(n) for n in missing[:5]) + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
        raise StaleCacheError(f"calibration cache {path} has no scale for {len(missing)} of the {len(needed)} tensors "
                              f"this variant quantizes in {model_name}: {shown}",
                              "import a cache made for this model (and these guards), or calibrate")
    unused = [name for name in named if name not in set(needed)]
    if unused:
        logging.getLogger(__name__).info(
            "%s: %d of its %d scales are for tensors this variant does not quantize (e.g. %s) and are not used%s",
            path.name, len(unused), len(imported.scales), ", ".join(unused[:3]),
            f"; {len(internal)} more name TensorRT's own layers" if internal else "")
    scales = {name: imported.scales[name] for name in needed}
    check_scales(path, scales, observed_absmax)
    return scales
