"""Issue 36 item 4: numpy counts the calibration histograms whenever numba does not work — its import raising
OSError (llvmlite's library missing), a half-removed numba without `njit`, a compile error, no writable cache folder
— said once in the log, with the same counts; and numba's cache goes to a writable folder when its own are not.

The broken numbas are real modules on sys.path in a fresh interpreter (a subprocess), the compile error a real numba
TypingError; the unwritable cache folders are real: paths under /proc (nothing can be created there) and a file
named __pycache__ where numba wants its in-tree folder."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trtlab.quantization import histogram
from trtlab.quantization.histogram import TensorHistogram, counter_label, cpu_counter, reference_bins

REPO = Path(__file__).resolve().parents[1]
# Counts real values through the chosen counter and checks them against the reference's bins; prints the counter.
PROBE = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
import numpy as np
from trtlab.quantization.histogram import counter_label, cpu_counter, reference_bins
values = np.random.default_rng(0).normal(size=100_000).astype(np.float32)
first = cpu_counter()
if first is not None:  # numba's counter: the reference's bins, max and finiteness
    counts, top, finite = first.count(values, 40.0, 256)
else:  # numpy counts through TensorHistogram's reference update
    counts, top, finite = reference_bins(values, 40.0, 256), float(np.abs(values).max()), True
assert (counts == reference_bins(values, 40.0, 256)).all() and finite and top == float(np.abs(values).max())
assert cpu_counter() is first  # asked again: the same answer, nothing said again
print(counter_label(first))
"""


def _probe(tmp_path, extra_path=(), prelude: str = "", **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", histogram.COUNTER_VARIABLE)}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), str(REPO)])
    env["TRTLAB_WORKSPACE"] = str(tmp_path / "ws")
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", prelude + PROBE], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def _fake_numba(tmp_path, init: str) -> Path:
    folder = tmp_path / "fake"
    (folder / "numba").mkdir(parents=True)
    (folder / "numba" / "__init__.py").write_text(init)
    return folder


def _said_once(done: subprocess.CompletedProcess, *words) -> str:
    lines = [line for line in done.stderr.splitlines() if "counted by numpy" in line]
    assert len(lines) == 1, done.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert "Traceback" not in done.stderr
    return lines[0]


def test_a_numba_whose_import_raises_oserror_is_numpys_turn_said_once(tmp_path):
    fake = _fake_numba(tmp_path, "raise OSError(\"Could not find/load shared object file 'libllvmlite.so'\")\n")
    done = _probe(tmp_path, [fake])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["numpy"]
    _said_once(done, "OSError", "libllvmlite.so", "numba does not work here", "pip install --force-reinstall numba")


def test_a_half_removed_numba_without_njit_is_numpys_turn_said_once(tmp_path):
    fake = _fake_numba(tmp_path, "# what is left of numba after an interrupted uninstall\n")
    done = _probe(tmp_path, [fake])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["numpy"]
    _said_once(done, "AttributeError", "njit")


def test_numba_missing_says_pip_install_numba(tmp_path):
    fake = _fake_numba(tmp_path, "raise ModuleNotFoundError(\"No module named 'numba'\", name='numba')\n")
    done = _probe(tmp_path, [fake])
    assert done.returncode == 0, done.stderr
    _said_once(done, "numba is not installed", "pip install numba")


def _unwritable_numba_cache(tmp_path) -> tuple[Path, dict]:
    """A copy of trtlab whose histogram_numba.py has a *file* named __pycache__ beside it, and $NUMBA_CACHE_DIR,
    HOME and $XDG_CACHE_HOME under /proc: every folder numba's cache locators try is unwritable, so numba raises
    "cannot cache function '_count_small'" when histogram_numba is imported."""
    pytest.importorskip("numba")
    copy = tmp_path / "src"
    shutil.copytree(REPO / "trtlab", copy / "trtlab", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "trtlab" / "quantization" / "__pycache__").write_text("not a folder")
    return copy, {"NUMBA_CACHE_DIR": "/proc/trtlab-nowhere/numba", "HOME": "/proc/trtlab-nowhere",
                  "XDG_CACHE_HOME": "/proc/trtlab-nowhere/cache", "PYTHONDONTWRITEBYTECODE": "1"}


def test_unwritable_numba_cache_folders_send_the_cache_to_the_workspace(tmp_path):
    copy, env = _unwritable_numba_cache(tmp_path)
    done = _probe(tmp_path, [copy], **env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["numba"], done.stderr
    where = tmp_path / "ws" / "cache" / "numba"
    assert f"numba caches its machine code in {where}" in done.stderr
    assert list(where.rglob("*.nbi")), "numba's cache index was not written to the workspace's cache folder"
    assert "cannot cache" not in done.stderr and "counted by numpy" not in done.stderr


def test_no_writable_folder_at_all_is_numpys_turn_said_once(tmp_path):
    copy, env = _unwritable_numba_cache(tmp_path)
    env.update(TRTLAB_WORKSPACE="/proc/trtlab-nowhere/ws")
    # the temporary folder unwritable too (tempfile.gettempdir() would otherwise find /tmp)
    done = _probe(tmp_path, [copy], "import tempfile; tempfile.tempdir = '/proc/trtlab-nowhere/tmp'\n", **env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["numpy"]
    _said_once(done, "cannot cache function '_count_small'")


def test_a_compile_error_is_numpys_turn_with_the_same_counts(monkeypatch, caplog):
    numba = pytest.importorskip("numba")
    from trtlab.quantization import histogram_numba

    @numba.njit
    def does_not_compile(values, bits, scale, bins):
        return values.no_such_attribute  # a real TypingError, raised by numba at the first call

    monkeypatch.delenv(histogram.COUNTER_VARIABLE, raising=False)
    monkeypatch.setattr(histogram, "_found", {})
    monkeypatch.setattr(histogram, "_numba_said", [])
    monkeypatch.setattr(histogram_numba, "_count_small", does_not_compile)
    values = np.random.default_rng(1).normal(size=50_000).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger="trtlab.quantization"):
        counter = cpu_counter()
        hist, reference = TensorHistogram(), TensorHistogram()
        hist.update(values, counter)
        reference.update(values, None)
    assert counter is None and counter_label(counter) == "numpy"
    np.testing.assert_array_equal(hist.counts, reference.counts)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "TypingError" in warnings[0] and "counted by numpy" in warnings[0]


def test_a_numba_failure_mid_run_hands_over_to_numpy_without_losing_counts(monkeypatch, caplog):
    """A counter that worked, then fails (numba recompiling for a new signature, a cache write failing): numpy
    counts that batch and every later one; the histogram is the reference's."""
    pytest.importorskip("numba")
    monkeypatch.delenv(histogram.COUNTER_VARIABLE, raising=False)
    monkeypatch.setattr(histogram, "_found", {})
    monkeypatch.setattr(histogram, "_numba_said", [])
    counter = cpu_counter()
    assert counter is not None and counter_label(counter) == "numba"
    batches = [np.random.default_rng(seed).normal(size=20_000).astype(np.float32) * (seed + 1) for seed in range(3)]
    hist, reference = TensorHistogram(), TensorHistogram()
    hist.update(batches[0], counter)

    def fails(*args):
        raise RuntimeError("cannot cache function '_count_small': no locator available")

    monkeypatch.setattr(counter.module, "count", fails)
    with caplog.at_level(logging.WARNING, logger="trtlab.quantization"):
        for batch in batches[1:]:
            hist.update(batch, counter)
    for batch in batches:
        reference.update(batch, None)
    np.testing.assert_array_equal(hist.counts, reference.counts)
    assert hist.absmax == reference.absmax and counter_label(counter) == "numpy"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot cache function" in warnings[0]
