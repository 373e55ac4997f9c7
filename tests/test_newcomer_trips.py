"""What trips a newcomer up (issue 36 item 10), each now one clear line: a read-only --out is told to change --out
(not --workspace); a folder of files that are not images is refused before anything is hashed, decoded or created;
scales moved into FP16's range are said once per model, with whether it matters for accuracy; a mistyped option or
command gets "did you mean". (install.sh's trips: tests/test_install_paths.py.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kaggle_env import read_only_wrapper as _read_only_wrapper

REPO = Path(__file__).resolve().parents[1]


def cli(capsys, *argv) -> tuple[int, list[str]]:
    from trtlab.cli.main import main

    status = main([str(a) for a in argv])
    return status, capsys.readouterr().err.strip().splitlines()


def test_a_read_only_out_folder_is_told_to_change_out(tmp_path):
    out = tmp_path / "report-here"
    out.mkdir()
    wrap = _read_only_wrapper(out)
    if not wrap:
        if os.geteuid() == 0:
            pytest.skip("no read-only bind mount here (unshare refused) and root writes through chmod")
        out.chmod(0o555)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([*wrap, sys.executable, "-m", "trtlab", "dashboard", "--out", str(out), "--workspace",
                           str(tmp_path / "ws")], capture_output=True, text=True, env=env, timeout=300)
    out.chmod(0o755)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    what, fix = errors[0].split(" — ")
    assert what.startswith(f"error: the output folder {out} is not writable"), what
    assert "--out" in fix and "--workspace" not in fix and "TRTLAB_WORKSPACE" not in fix, fix


@pytest.fixture
def not_images(tmp_path) -> Path:
    """Files named as photos that are not: text, an HTML error page, an empty placeholder."""
    folder = tmp_path / "photos"
    (folder / "n01440764").mkdir(parents=True)
    (folder / "n01440764" / "a.jpg").write_text("hello\n")
    (folder / "n01440764" / "b.png").write_text("<!DOCTYPE html><html>403 Forbidden</html>")
    (folder / "c.JPEG").write_bytes(b"")
    return folder


def test_a_folder_of_non_images_is_refused_first_and_creates_nothing(not_images, demo_model, tmp_path, capsys):
    workspace = tmp_path / "ws"
    status, err = cli(capsys, "eval", "--model", demo_model, "--data", not_images, "--workspace", workspace)
    assert status == 2 and len(err) == 1, err  # the error first: no decode-cache line, progress bar or listing
    assert err[0].startswith(f"error: none of the 3 file(s) in {not_images} is an image: none starts with a JPEG, "
                             f"PNG, BMP, TIFF or WebP header"), err
    assert "nothing was decoded or written" in err[0]
    assert sorted(p.name for p in workspace.iterdir()) == ["trtlab.log"]  # no decode_cache folder, nothing else


def test_one_real_photo_among_non_images_goes_on(not_images, demo_data):
    import shutil

    from trtlab.data.photo_types import first_image
    from trtlab.workflows.checks import check_dataset

    shutil.copy(demo_data.paths[0], not_images / "n01440764" / "z.jpg")  # a real JPEG
    dataset = check_dataset(not_images)
    assert len(dataset.paths) == 4 and dataset.paths[first_image(dataset.paths)].endswith("z.jpg")


def test_scales_moved_into_fp16_range_are_said_once_with_what_they_mean(demo_model, demo_cache, tmp_path, caplog):
    from trtlab.core.log import reset_warnings
    from trtlab.quantization.variants import Recipe, build_variant

    reset_warnings()
    with caplog.at_level("INFO", logger="trtlab"):
        for algorithm in ("minmax", "entropy", "percentile"):
            build_variant(demo_model, Recipe(algorithm=algorithm, calibration_images=2, calibration_batch=2),
                          demo_cache, demo_cache.valid_indices[:2], tmp_path, progress=False)
    said = [r.getMessage() for r in caplog.records if "scale(s) raised to FP16's smallest subnormal" in r.getMessage()
            and r.levelname == "INFO"]
    assert len(said) == 1, said  # the three variants share the model's weights: the same count, said once
    assert said[0].startswith("int8-minmax@2b2: ") and "harmless: their values all lie within ±7.6e-6" in said[0]
    assert "still represented to within 3e-8 with nothing clipped" in said[0]
    # The clause's numbers, on trtlab's own weight quantizer: a channel whose scale falls below 2⁻²⁴ (all |w| ≤
    # 127·2⁻²⁴ ≈ 7.6e-6) gets 2⁻²⁴, nothing clips, and every weight comes back within half a step, 2⁻²⁵ ≈ 3e-8.
    from trtlab.quantization.insertion import FP16_SMALLEST_SUBNORMAL, _quantize_weight

    rng = np.random.default_rng(0)
    weights = np.stack([rng.uniform(-0.5, 0.5, 64), rng.uniform(-7.5e-6, 7.5e-6, 64), np.full(64, 1e-9)]
                       ).astype(np.float32)
    q, scale, (raised, lowered) = _quantize_weight(weights, 0, np.float16)
    assert (raised, lowered) == (2, 0) and (scale[1:] == np.float32(FP16_SMALLEST_SUBNORMAL)).all()
    assert np.abs(q[1:]).max() <= 126  # nothing clipped at ±127
    assert np.abs(q[1:] * scale[1:, None] - weights[1:]).max() <= 2.0 ** -25
    assert 127 * FP16_SMALLEST_SUBNORMAL == pytest.approx(7.57e-6, rel=1e-3)


@pytest.mark.parametrize("argv, suggestion", [
    (["eval", "--model", "m.onnx", "--data", "photos", "--label", "labels.csv"],
     "unrecognized arguments: --label labels.csv (did you mean --labels?)"),
    (["calibrate", "--calibraton-images=5", "--algorithms", "minmax"], "(did you mean --calibration-images?)"),
    (["dashboard", "--ouut", "x", "--focuss", "a"], "(did you mean --out for --ouut, --focus for --focuss?)"),
    (["evl"], "invalid choice: 'evl'"),
], ids=["label", "with-value", "two", "command"])
def test_a_mistyped_option_or_command_gets_did_you_mean(argv, suggestion, capsys, tmp_path):
    status, err = cli(capsys, *argv, *(["--workspace", tmp_path] if argv[0] != "evl" else []))
    assert status == 2 and len(err) == 1 and suggestion in err[0], err
    if argv == ["evl"]:
        assert "(did you mean eval?)" in err[0]
        status, err = cli(capsys, "dashboard", "--zzzzzz", "--workspace", tmp_path)
        assert status == 2 and "did you mean" not in err[0], err  # nothing close: nothing suggested
