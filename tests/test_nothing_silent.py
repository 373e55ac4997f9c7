"""Nothing silent, round 3 (issue 29) and what the notebooks print (issue 30, its non-view items): each case of the
held-out battery answered by the one error rule or a clearly said choice, on real models and photos — numbered
album folders, NaN activations, a folder of undecodable files, an empty store, Ctrl-C, a header-less CSV — and what
the command line shows (guard help, hints in flags, doctor, the check order, prep's sentence, progress bars, the
prepared data as default), the run log's notebook name and the TensorRT advice said once."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from test_bad_inputs import (evaluated, make_classifier, model, one_error_line, photos, run_cli,  # noqa: F401
                             save_classifier, snapshot, write_photos, ws)
from trtlab.cli.main import as_flags, main
from trtlab.core.errors import UserError
from trtlab.data.dataset import Dataset


def nan_classifier(path: Path) -> Path:
    """A real ONNX classifier whose activations are NaN on any normalised photo: Sqrt(-x) before the Gemm."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Neg", ["input"], ["negated"]), helper.make_node("Sqrt", ["negated"], ["root"]),
             helper.make_node("GlobalAveragePool", ["root"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w", "b"], ["logits"], transB=1)]
    inits = [numpy_helper.from_array(rng.normal(size=(1000, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(1000, np.float32), "b")]
    return save_classifier(path, nodes, inits, "nan")


# -- item 1: every case answered ----------------------------------------------------------------------------------
def test_numbered_album_folders_are_said_to_be_read_as_class_indices(tmp_path, caplog):
    albums = write_photos(tmp_path / "holiday", {"01": 2, "02": 1})
    with caplog.at_level(logging.WARNING, logger="trtlab"):
        dataset = Dataset.from_folder(albums)
    assert dataset.labels.tolist() == [1, 1, 2] and dataset.label_kind == "index"
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and "01/ → class 1" in said[0] and "02/ → class 2" in said[0]
    assert "3 image(s)" in said[0] and "--unlabelled" in said[0] and "--labels CSV" in said[0]
    # how to say otherwise: the folders are then no labels at all
    unlabelled = Dataset.from_folder(albums, folder_labels=False)
    assert unlabelled.labelled_count == 0 and unlabelled.label_source is None
    # WNID folders are unambiguous: nothing to say
    caplog.clear()
    Dataset.from_folder(write_photos(tmp_path / "wnids", {"n01440764": 1}))
    assert not [r for r in caplog.records if "numbered" in r.getMessage() or "class index" in r.getMessage()]


def test_unlabelled_flag_scores_album_folders_by_agreement_only(model, tmp_path, capsys):
    albums = write_photos(tmp_path / "holiday", {"01": 2, "02": 2})
    ws = tmp_path / "ws"
    assert main(["eval", "--model", str(model), "--data", str(albums), "--workspace", str(ws), "--unlabelled",
                 "-q"]) == 0
    capsys.readouterr()
    from trtlab.evaluation.results import ResultsStore

    (store,) = list((ws / "results").iterdir())
    assert ResultsStore(store).load("fp32").labels.tolist() == [-1, -1, -1, -1]
    code, err = run_cli(capsys, "eval", "--model", model, "--data", albums, "--labels", tmp_path / "x.csv",
                        "--unlabelled", "--workspace", ws)
    assert code == 2 and "--unlabelled and --labels" in one_error_line(err)


def test_nan_activations_are_one_line_not_a_traceback(photos, tmp_path, capsys):
    nan = nan_classifier(tmp_path / "nan.onnx")
    code, err = run_cli(capsys, "calibrate", "--model", nan, "--data", photos, "--workspace", tmp_path / "ws",
                        "--algorithms", "minmax", "--calibration-images", "3")
    line = one_error_line(err)
    assert code == 2 and "NaN or Inf" in line and "--preset" in line and "NonFiniteActivation" not in err
    assert line == err.strip().splitlines()[-1]  # on its own line, after the closed progress bar


def test_a_folder_of_undecodable_files_is_one_line(model, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    for i in range(3):  # JPEGs cut off after their first marker (files that are no image at all: test_newcomer_trips)
        (bad / f"x{i}.jpg").write_bytes(b"\xff\xd8\xff\xe0" + f"not a jpeg {i}".encode())
    code, err = run_cli(capsys, "eval", "--model", model, "--data", bad, "--workspace", tmp_path / "ws")
    line = one_error_line(err)
    assert code == 2 and "none of the 3 image(s)" in line and "x0.jpg: truncated JPEG" in line
    assert "failures.json" in line and "ValueError" not in err


def test_a_dashboard_of_an_empty_store_is_a_user_error(tmp_path):
    from trtlab.views.dashboard import build_dashboard

    (tmp_path / "results" / "empty").mkdir(parents=True)
    for kwargs in ({"store": tmp_path / "results" / "empty"}, {"workspace": tmp_path / "nothing"}):
        with pytest.raises(UserError) as err:
            build_dashboard(**kwargs)
        assert isinstance(err.value, FileNotFoundError) and "no stored results" in err.value.what
        assert "evaluate" in err.value.fix


def test_ctrl_c_names_the_step_it_interrupted_on_its_own_line(model, photos, tmp_path, capsys, monkeypatch):
    import trtlab.workflows.job
    from trtlab.core.progress import progress_iter

    def interrupted_midway(*args, **kwargs):
        for i in progress_iter(range(600), desc="infer fp32", unit="img"):
            if i == 64:
                raise KeyboardInterrupt

    monkeypatch.setattr(trtlab.workflows.job, "run_job", interrupted_midway)
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--workspace", tmp_path / "ws")
    last = err.strip().splitlines()[-1]
    assert code == 130 and "Traceback" not in err
    assert last.startswith("interrupted `eval` during infer fp32 (64 of 600 img) — what was finished is kept")


def test_a_headerless_csv_is_read_as_data_and_a_class_name_says_so(photos, tmp_path, caplog):
    from trtlab.data.labels_csv import LabelsCsvError, parse_labels_csv

    indices = tmp_path / "indices.csv"
    indices.write_text("n01440764/img0.png,0\nn01443537/img1.png,1\n")
    with caplog.at_level(logging.INFO, logger="trtlab"):
        table = parse_labels_csv(indices)
    assert table.labels == {"n01440764/img0.png": 0, "n01443537/img1.png": 1}
    names = tmp_path / "names.csv"
    names.write_text("n01440764/img0.png,tench\nn01443537/img1.png,goldfish\n")
    with pytest.raises(LabelsCsvError) as err:
        parse_labels_csv(names)
    line = err.value.line()
    assert "names.csv:1" in line and "'tench'" in line and "class 0, n01440764" in line and "column I know" not in line
    assert "no header" in caplog.text or "has no header" in " ".join(r.getMessage() for r in caplog.records)
    # a real header is still a header
    header = tmp_path / "header.csv"
    header.write_text("file,label\nn01440764/img0.png,0\n")
    assert parse_labels_csv(header).labels == {"n01440764/img0.png": 0}


# -- item 2: what the command line shows --------------------------------------------------------------------------
def test_guard_help_says_the_real_defaults_and_a_typo_gets_one_fix(capsys):
    from trtlab.cli.commands import calibrate

    text = calibrate.COMMAND.parser().format_help()
    flat = " ".join(text.split())
    assert "default: the float path's precision, FP16; softmax: FP32" in flat
    assert "kept in FP32" not in flat
    code, err = run_cli(capsys, "calibrate", "--guards", "frist_layer")
    line = one_error_line(err)
    assert code == 2 and line.count(" — ") == 1 and "'frist_layer'" in line


@pytest.mark.parametrize("api,cli", [
    ("use calibration_images ≤ 10, or a split with a larger calibration set",
     "use --calibration-images ≤ 10, or a split with a larger calibration set"),
    ("pass devkit=... (the devkit folder)", "pass --devkit FOLDER (the devkit folder)"),
    ("labels='kaggle' needs LOC_val_solution.csv; pass loc_solution=...",
     "--label-source kaggle needs LOC_val_solution.csv; pass --loc-solution FILE"),
    ("pass root=... / --root (or images=... / --data)", "pass --root FOLDER (or --data FOLDER)"),
    ("calibration_per_class=10 leaves no image", "--calibration-per-class 10 leaves no image"),
    ("read /data/calibration_images/x.png", "read /data/calibration_images/x.png"),  # a path stays a path
    ("lower batch_size or calibration_batch", "lower --batch-size or --calibration-batch"),  # every numeric one
    ("the images under root have labels", "the images under root have labels"),  # bare words stay words
])
def test_hints_name_flags_as_the_user_types_them(api, cli):
    assert as_flags(api) == cli


def test_a_hint_from_the_stages_reaches_the_user_in_flags(model, photos, tmp_path, capsys):
    code, err = run_cli(capsys, "calibrate", "--model", model, "--data", photos, "--workspace", tmp_path / "ws",
                        "--calibration-images", "500", "--algorithms", "minmax")
    line = one_error_line(err)
    assert code == 2 and "--calibration-images" in line and "calibration_images" not in line


def test_doctor_says_the_cpu_runs_the_fp16_graph():
    from trtlab.env.support import feature_verdicts

    fp16 = next(v for v in feature_verdicts(None, None, gpu=False, ort_providers=["CPUExecutionProvider"])
                if v.feature == "FP16")
    text = " ".join(str(value) for value in vars(fp16).values())
    assert "FP32 only" not in text and "FP16 graph" in text


def test_calibrate_with_a_missing_folder_fails_before_exporting_the_demo_model(tmp_path, capsys, monkeypatch):
    import trtlab.data.demo

    def no_export(*args, **kwargs):
        raise AssertionError("the demo model was exported before --data was checked")

    monkeypatch.setattr(trtlab.data.demo, "export_demo_model", no_export)
    code, err = run_cli(capsys, "calibrate", "--data", tmp_path / "missing", "--workspace", tmp_path / "ws")
    assert code == 2 and "missing does not exist" in one_error_line(err)


def test_prep_says_in_one_sentence_why_the_stand_in_is_used(tmp_path, caplog, monkeypatch):
    from trtlab.data.imagenet import prep as prep_module

    monkeypatch.delenv("TRTLAB_IMAGENET", raising=False)
    monkeypatch.setattr(prep_module, "find_imagenet_root", lambda: None)
    with caplog.at_level(logging.INFO, logger="trtlab"):
        prep_module._use_standin(tmp_path / "ws", lambda text: logging.getLogger("trtlab.test").info(text))
    said = caplog.records[-1].getMessage()
    assert "no ImageNet val found: $TRTLAB_IMAGENET is not set and " in said
    assert "holds /kaggle" not in said and "does not exist, with" not in said
    assert "--root FOLDER" in said and "root=..." not in said


def test_dashboard_pngs_draw_one_bar(evaluated, ws, monkeypatch):
    from trtlab.core import progress
    from trtlab.views.dashboard import build as dashboard_build
    from trtlab.views.dashboard import build_dashboard

    bars = []
    real = progress.progress_iter

    def counted(items, *args, **kwargs):
        items = list(items)
        bars.append(len(items))
        return real(items, *args, **kwargs)

    monkeypatch.setattr(progress, "progress_iter", counted)
    dash = build_dashboard(workspace=ws)
    dash.pngs()
    dash.save_pngs(ws / "pngs")  # the CLI's --png after the HTML: the figures are drawn already
    assert bars[0] == len(dash.figure_names()) and bars[1:] == [0]
    assert dashboard_build is not None


def test_one_losing_class_is_singular():
    import pandas as pd

    from trtlab.views.dashboard.figures import plot_class_drift

    drift = pd.DataFrame({"name": ["tench", "goldfish"], "images": [5, 5], "delta": [-0.2, 0.0]})
    drift.attrs.update(variant="int8-minmax", reference="fp32")
    label = plot_class_drift(drift).axes[0].get_xlabel()
    assert "1 class loses" in label and "1 classes" not in label


# -- item 4: one experiment across notebooks and the CLI ----------------------------------------------------------
def test_the_cli_defaults_to_the_data_notebook_01_prepared(model, tmp_path):
    import trtlab
    from trtlab.workflows.checks import checked_inputs

    ws = tmp_path / "ws"
    prep = trtlab.prepare_imagenet(None, workspace=ws, progress=False)  # the demo stand-in: what 01 makes here
    inputs = checked_inputs(model=model, workspace=ws)
    prepared = trtlab.prepared_data(ws, announce=False)
    assert inputs.dataset.fingerprint() == prep.dataset.fingerprint() == prepared.dataset.fingerprint()
    assert inputs.split.calibration.tolist() == prepared.split.calibration.tolist()
    assert inputs.split.evaluation.tolist() == prepared.split.evaluation.tolist()
    # notebook 05's paste-able command names the prepared folder: the same images, labels and split, not a new split
    pasted = checked_inputs(model=model, data=prep.images_dir, workspace=ws)
    assert pasted.dataset.fingerprint() == prepared.dataset.fingerprint()
    assert pasted.split.evaluation.tolist() == prepared.split.evaluation.tolist()
    assert checked_inputs(model=model, data=prep.images_dir, workspace=ws, folder_labels=False).split is None


# -- issue 30: the run log, the advice, progress totals -----------------------------------------------------------
def test_the_run_log_names_the_notebook(tmp_path, monkeypatch):
    from trtlab.core import log

    monkeypatch.setenv("JPY_SESSION_NAME", "/kaggle/working/trtlab/notebooks/03_calibration_ab.ipynb")
    monkeypatch.setattr("sys.argv", ["/usr/lib/python3/site-packages/ipykernel_launcher.py", "-f",
                                     "/root/.local/share/jupyter/runtime/kernel-1d2c3b4a.json"])
    assert log.run_name() == "notebook /kaggle/working/trtlab/notebooks/03_calibration_ab.ipynb"
    log.setup(0)
    path = log.attach_run_log(tmp_path)
    logging.getLogger("trtlab.test").info("hello")
    text = Path(path).read_text()
    assert "03_calibration_ab.ipynb" in text and "kernel-1d2c3b4a.json" not in text
    monkeypatch.delenv("JPY_SESSION_NAME")
    assert "notebook path not given" in log.run_name()


def test_notebook_00_says_the_tensorrt_advice_once(tmp_path, monkeypatch):
    """00_env_setup's steps on a machine without TensorRT: the long advice in full once, then pointers to it."""
    import trtlab
    from trtlab.env.install import machine_install_advice

    advice = machine_install_advice()
    found = trtlab.discover_tensorrt(roots=[tmp_path])
    shown = [trtlab.tensorrt_candidates_frame(found).to_string(), trtlab.repair_tensorrt(found).summary(),
             trtlab.load_tensorrt(candidates=found).summary()]
    report = trtlab.environment_report(found)
    shown += [report.table() if hasattr(report, "table") else str(report.rows), report.summary(color=False)]
    text = "\n".join(shown)
    long_advice = advice.command or advice.reason
    assert text.count("no real libnvinfer found in") == 1
    if not advice.command:
        assert text.count(advice.reason) == 1
    else:  # a command is short and stays where it is the answer
        assert long_advice in text
    assert "said above" in text


def test_a_bar_finished_early_is_drawn_full_in_a_notebook():
    from tqdm.notebook import tqdm

    from trtlab.core.progress import finish

    bar = tqdm(total=51, desc="guard search")
    bar.update(1)
    finish(bar)
    widget = bar.container.children[1]
    assert bar.total == 1 and widget.max == 1 and widget.value == 1 and widget.bar_style == "success"


def test_notebook_01_shows_the_split_as_a_table_that_says_how_it_was_chosen(tmp_path):
    """Issue 30: 01 showed raw dicts (`calibration_per_class: None` while CALIBRATION_PER_CLASS = 10)."""
    import trtlab

    prep = trtlab.prepare_imagenet(None, calibration_per_class=10, workspace=tmp_path / "ws", progress=False)
    table = prep.split_table()
    assert list(table.index) == ["calibration", "evaluation"] and list(table.columns) == ["images", "classes",
                                                                                          "per class", "chosen"]
    assert "too few per class for a per-class quota" in table.loc["calibration", "chosen"]
    summary = prep.summary()
    assert "NOT ImageNet" in summary and "None" not in summary and "1–1 per class" not in summary
    assert "**split (seed 0):**" in prep._repr_markdown_()
    cache = prep.decode("tf-lite", progress=False)
    line = prep.evaluation_cache(cache).summary()
    assert line.startswith(f"demo-photos-standin-eval: {len(prep.split.evaluation)} of {len(prep.split.evaluation)} images "
                           f"decoded, none skipped; tf-lite 224×224")
