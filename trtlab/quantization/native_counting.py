"""The calibration histogram's counting loop in C (histogram_count.c), compiled once per machine.

numpy needs five passes per value (max, min, |x|·s into an index array, bincount's own range check, its count
loop) and holds the GIL between them; the C loop makes one pass, about 4× faster per value, and ctypes releases the
GIL for the call, so counting threads use every core while ONNX Runtime computes the next sub-batch. It counts the
same bins as TensorHistogram's numpy update (trunc(float32(|x|·s)), the last bin taking values at or past the
upper edge); a self-test against numpy's formula runs before it is used.

Compiled with the system C compiler ($CC, else cc, gcc or clang; Kaggle's and Debian's images have gcc) into
$XDG_CACHE_HOME/trtlab/native/<hash of the source, compiler and machine>/ (else ~/.cache/..., else the temp
folder), written atomically, so concurrent processes are safe. Without a compiler numpy counts (the same
histograms, slower), said once in the log. TRTLAB_NATIVE_COUNTING=0 turns the C loop off.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("histogram_count.c")
FLAGS = ("-O3", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math")
ENV_SWITCH = "TRTLAB_NATIVE_COUNTING"
_lock = threading.Lock()
_loaded: dict = {}
_missing = object()


class NativeCounter:
    """`count(values, scale, bins)` → (counts[bins] int64, max |x|, finite) for float32 `values`."""

    def __init__(self, library_path: Path):
        self.path = library_path
        self._library = ctypes.CDLL(str(library_path))
        function = self._library.trtlab_histogram_count
        function.restype = ctypes.c_int
        function.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int64, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_float)]
        self._function = function

    def count(self, values: np.ndarray, scale: float, bins: int) -> tuple[np.ndarray, float, bool]:
        flat = np.ascontiguousarray(values, np.float32).reshape(-1)
        counts = np.zeros(int(bins), np.int64)
        top = ctypes.c_float()
        status = self._function(flat.ctypes.data, flat.size, float(scale), int(bins), counts.ctypes.data,
                                ctypes.byref(top))
        if status == 2:
            raise MemoryError(f"the histogram counter could not allocate {bins} bins")
        return counts, float(top.value), status == 0


def numpy_bins(values: np.ndarray, scale: float, bins: int) -> np.ndarray:
    """The reference formula (TensorHistogram's numpy update, without its chunking): what the C loop must count."""
    product = np.multiply(np.abs(np.asarray(values, np.float32).reshape(-1)), np.float32(scale))
    return np.bincount(np.minimum(product, bins - 1).astype(np.intp), minlength=bins)


def native_counter() -> NativeCounter | None:
    """The compiled counter, or None (switched off, no compiler, or it failed its self-test: logged once)."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    key = (os.environ.get("CC"), os.environ.get("PATH"))  # what decides the compiler; looked up once per value
    found = _loaded.get(key, _missing)
    if found is not _missing:
        return found
    with _lock:
        if key not in _loaded:
            _loaded[key] = _load(_compiler())
        return _loaded[key]


def _compiler() -> str | None:
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")):
        found = shutil.which(name)
        if found:
            return found
    return None


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trtlab" / "native"


def _load(compiler: str | None) -> NativeCounter | None:
    if compiler is None:
        log.warning("no C compiler (cc, gcc or clang) here: calibration histograms are counted by numpy, which "
                    "makes calibration on the CPU about 2× slower — install gcc (apt-get install gcc) or set CC")
        return None
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + "\0".join((compiler, platform.machine(), platform.system(), *FLAGS)).encode())
    name = f"histogram-{digest.hexdigest()[:16]}"
    for root in (_cache_root(), Path(tempfile.gettempdir()) / "trtlab-native"):
        library = root / name / "libtrtlab_histogram.so"
        try:
            # a damaged library would crash the process when loaded (a cut-short ELF is mapped past its end), so the
            # checksum written beside it is checked first; missing or different: build it again
            if not _intact(library):
                _compile(compiler, library)
            counter = NativeCounter(library)
        except (OSError, subprocess.SubprocessError, RuntimeError) as error:
            reason = str(error).strip().splitlines()
            log.debug("histogram counter not built in %s: %s", root, reason[-1] if reason else error)
            continue
        problem = _self_test(counter)
        if problem:
            log.warning("the compiled histogram counter (%s) %s: numpy counts instead — report this with the "
                        "compiler's version", library, problem)
            return None
        return counter
    log.warning("the calibration histogram counter did not compile with %s: numpy counts instead (calibration on "
                "the CPU about 2× slower) — check that `%s --version` works, or set CC to a working C compiler",
                compiler, compiler)
    return None


def _compile(compiler: str, library: Path) -> None:
    library.parent.mkdir(parents=True, exist_ok=True)
    tmp = library.with_name(f".{library.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    digest = tmp.with_suffix(".sha256")
    errors = ""
    try:
        # the AVX2 path needs x86 intrinsics and __builtin_cpu_supports: retry without it
        for extra in ((), ("-DTRTLAB_NO_AVX2",)):
            done = subprocess.run([compiler, *FLAGS, *extra, "-o", str(tmp), str(SOURCE)], capture_output=True,
                                  text=True, timeout=120)
            if done.returncode == 0:
                digest.write_text(hashlib.sha256(tmp.read_bytes()).hexdigest())
                os.replace(tmp, library)
                os.replace(digest, _checksum_path(library))
                log.info("compiled the calibration histogram counter (once per machine): %s", library)
                return
            errors = done.stderr
        raise RuntimeError(errors or f"{compiler} failed")
    finally:
        tmp.unlink(missing_ok=True)
        digest.unlink(missing_ok=True)


def _checksum_path(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def _intact(library: Path) -> bool:
    try:
        return hashlib.sha256(library.read_bytes()).hexdigest() == _checksum_path(library).read_text().strip()
    except OSError:
        return False


def _self_test(counter: NativeCounter) -> str | None:
    """None when the counter counts numpy's bins, else what differs."""
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 1, 5000), -rng.exponential(1, 3000), np.zeros(500), [-0.0, 3.0, -3.0]])
    values = values.astype(np.float32)
    scale = float(np.float32(2048 / 3.0))
    counts, top, finite = counter.count(values, scale, 2048)
    if not finite or top != float(np.abs(values).max()):
        return f"reported max {top} (finite={finite}), expected {float(np.abs(values).max())}"
    expected = numpy_bins(values, scale, 2048)
    if not np.array_equal(counts, expected):
        return f"counted {int((counts != expected).sum())} bin(s) differently from numpy"
    _, _, finite = counter.count(np.array([1.0, np.nan], np.float32), scale, 2048)
    return "did not see a NaN" if finite else None


__all__ = ["NativeCounter", "native_counter", "numpy_bins"]
