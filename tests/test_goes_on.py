"""Issue 36, "refused where it could go on": trtlab's own calibration cache imported without its .json sidecar, and
a finished workspace mounted read-only, are used — not refused. (A variant folder of an older revision is set aside
and rebuilt: tests/test_quantization_inputs.py.)"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_bad_inputs import save_classifier, write_photos
from trtlab.cli.main import main

REPO = Path(__file__).resolve().parents[1]


def conv_classifier(path: Path) -> Path:
    """input → Conv → Relu ('feat') → Conv → Relu → GlobalAveragePool → Flatten → Gemm: trtlab's placement
    quantizes the pool's output ahead of the Flatten (commute_through_copies), the legacy rules the Gemm's input."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["feat"]),
             helper.make_node("Conv", ["feat", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w", "b"], ["logits"], transB=1)]
    inits = [numpy_helper.from_array((rng.normal(size=(8, 3, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array(np.zeros(8, np.float32), "b1"),
             numpy_helper.from_array((rng.normal(size=(8, 8, 3, 3)) * 0.3).astype(np.float32), "w2"),
             numpy_helper.from_array(np.zeros(8, np.float32), "b2"),
             numpy_helper.from_array(rng.normal(size=(1000, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(1000, np.float32), "b")]
    return save_classifier(path, nodes, inits, "conv")


@pytest.fixture
def conv_inputs(tmp_path) -> dict:
    return {"model": conv_classifier(tmp_path / "models" / "conv.onnx"),
            "photos": write_photos(tmp_path / "photos", {"n01440764": 3, "n01443537": 3})}


def _calibrate(inputs, ws, *extra) -> int:
    return main(["calibrate", "--model", str(inputs["model"]), "--data", str(inputs["photos"]), "--workspace",
                 str(ws), "--no-engines", "-q", *extra])


@pytest.mark.parametrize("with_sidecar", [False, True])
def test_trtlabs_own_cache_is_imported_with_or_without_its_sidecar(with_sidecar, conv_inputs, tmp_path, capsys):
    """Before: refused with "has no scale for 1 of the 3 tensors … 'flat'": the check before the build planned by the
    legacy rules, not by the recipe's placement (which quantizes 'pooled' ahead of the Flatten)."""
    from trtlab.quantization.calibration_cache import read_calibration_cache

    assert _calibrate(conv_inputs, tmp_path / "ws", "--algorithms", "entropy") == 0
    made = next((tmp_path / "ws" / "variants").glob("*/int8-entropy*/calibration.cache"))
    _, scales = read_calibration_cache(made)
    assert "feat" in scales and "pooled" in scales and "flat" not in scales
    copy = tmp_path / "mine.cache"
    shutil.copy(made, copy)
    if with_sidecar:
        shutil.copy(str(made) + ".json", str(copy) + ".json")
    capsys.readouterr()
    assert _calibrate(conv_inputs, tmp_path / "ws2", "--import-cache", str(copy)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "+cache-" in out
    imported = next((tmp_path / "ws2" / "variants").glob("*/int8-entropy*/calibration.cache"))
    assert read_calibration_cache(imported)[1] == scales  # the same scales, for the same tensors


# -- a finished workspace mounted read-only ------------------------------------------------------------------------
def _read_only_mount_works() -> bool:
    if not shutil.which("unshare") or not shutil.which("mount"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs none /mnt && mount -o remount,ro /mnt"],
                           capture_output=True)
    return probe.returncode == 0


def _in_read_only_mount(folder: Path, command: str, env: dict) -> subprocess.CompletedProcess:
    """Run `command` with `folder` bind-mounted read-only over itself (a user and mount namespace: a real EROFS
    file system, as a Kaggle dataset attached under /kaggle/input is)."""
    script = f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && {command}'
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs unshare and mount (a user and mount namespace)")
def test_a_finished_workspace_mounted_read_only_shows_its_stored_results(conv_inputs, tmp_path, capsys):
    """Before: every command refused at once ("the workspace … is not writable"). Now stored results are read and
    shown (the table, the stored report, the dashboard), with one line saying the workspace is read-only; what is
    not stored fails at its first write in one line naming the file."""
    ws = tmp_path / "ws"
    base = ["--model", str(conv_inputs["model"]), "--data", str(conv_inputs["photos"]), "--workspace", str(ws)]
    assert main(["calibrate", *base, "--algorithms", "minmax", "--no-engines", "-q"]) == 0
    stored = capsys.readouterr().out
    table = stored[stored.index("variant"):stored.index("3 images")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRTLAB_WORKSPACE": str(tmp_path.parent / f"{tmp_path.name}-home")}
    python = f'"{sys.executable}" -m trtlab'
    quoted = " ".join(f'"{a}"' for a in base)

    shown = _in_read_only_mount(tmp_path, f"{python} calibrate {quoted} --algorithms minmax --no-engines", env)
    assert shown.returncode == 0, shown.stderr
    assert table in shown.stdout and "report: " in shown.stdout  # the stored report, named
    assert "Traceback" not in shown.stderr
    warnings = [line for line in shown.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"the workspace {ws} is read-only" in warnings[0]

    dashboard = _in_read_only_mount(tmp_path, f'{python} dashboard --workspace "{ws}" --out "{tmp_path}-dash"', env)
    assert dashboard.returncode == 0, dashboard.stderr
    assert Path(f"{tmp_path}-dash", "dashboard.html").is_file()

    more = _in_read_only_mount(tmp_path, f"{python} calibrate {quoted} --algorithms entropy --no-engines", env)
    assert more.returncode == 2 and "Traceback" not in more.stderr
    error = more.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: cannot write {ws / 'variants'}") and "read-only" in error
