"""The command line's contract (issue 16): one spelling per option in every command that takes it, old spellings
refused by name, values checked into typed values before any decoding, abbreviations off, commas == repeats,
--version, one exit-status rule, one error printer, Ctrl-C as one line."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from test_bad_inputs import make_classifier, one_error_line, run_cli, write_photos
from trtlab.cli.main import COMMANDS, command_module, main

REPO = Path(__file__).resolve().parents[1]
SHARED_GROUPS = {"ModelDataArgs", "CalibrationArgs", "GuardArgs", "WorkspaceArgs", "OutputArgs", "BackendArgs",
                 "GlobalArgs", "RecoveryArgs"}
# Options in several commands outside the shared groups, with the same meaning everywhere:
#   --force  "rebuild even if cached" (calibrate, build);  --root  "the folder searched" (prep: ImageNet, doctor:
#   TensorRT) — plus argparse's own -h/--help.
SAME_MEANING_OUTSIDE_GROUPS = {"-h", "--help", "--force", "--root"}
# concept (argparse dest) → its one spelling and the commands that take it
SPELLINGS = {
    "model": ("--model", {"eval", "calibrate", "debug", "build"}),
    "data": ("--data", {"eval", "calibrate", "debug", "build", "prep"}),
    "labels": ("--labels", {"eval", "calibrate", "debug"}),
    "preset": ("--preset", {"eval", "calibrate", "debug", "build", "prep"}),
    "algorithms": ("--algorithms", {"calibrate", "debug", "build"}),
    "percentile": ("--percentile", {"build", "calibrate", "debug"}),
    "calibration_images": ("--calibration-images", {"calibrate", "debug", "build"}),
    "calibration_batch": ("--calibration-batch", {"calibrate", "debug", "build"}),
    "guards": ("--guards", {"calibrate", "debug", "build"}),
    "workspace": ("--workspace", set(COMMANDS) - {"doctor"}),
    "out": ("--out", {"debug", "dashboard"}),
    "backend": ("--backend", {"eval", "demo", "calibrate"}),
    "batch_size": ("--batch-size", {"eval", "demo", "debug", "calibrate"}),
    "quiet": ("-q", set(COMMANDS)),
    "verbose": ("-v", set(COMMANDS)),
}
# old spelling → the one spelling it became (refused, naming it; never a silent alias)
OLD_SPELLINGS = {"--guard": "--guards", "--calib-images": "--calibration-images",
                 "--calib-batch": "--calibration-batch", "--algorithm": "--algorithms", "--calibrator": "--algorithms",
                 "--calib-data": "--data", "--quiet": "-q", "--verbose": "-v"}


def parsers() -> dict[str, argparse.ArgumentParser]:
    return {name: command_module(name).COMMAND.parser() for name in COMMANDS}


def visible_options(parser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings}


@pytest.fixture
def model(tmp_path) -> Path:
    return make_classifier(tmp_path / "models" / "tiny.onnx")


@pytest.fixture
def named_model(tmp_path) -> Path:
    """The tiny classifier with named nodes (pool → flatten → fc), as an exporter writes them."""
    import onnx

    path = make_classifier(tmp_path / "models" / "tiny.onnx")
    graph = onnx.load(str(path))
    for node, name in zip(graph.graph.node, ("pool", "flatten", "fc")):
        node.name = name
    onnx.save(graph, str(tmp_path / "models" / "named.onnx"))
    return tmp_path / "models" / "named.onnx"


@pytest.fixture
def photos(tmp_path) -> Path:
    return write_photos(tmp_path / "photos", {"n01440764": 3, "n01443537": 3})


# -- one spelling ------------------------------------------------------------------------------------------------
def test_each_option_has_one_spelling_in_every_command():
    by_string: dict[str, set] = {}
    by_dest: dict[str, set] = {}
    users: dict[str, set] = {}
    for name, parser in parsers().items():
        for string, action in visible_options(parser).items():
            by_string.setdefault(string, set()).add((action.dest, getattr(action, "trtlab_group", None)))
            by_dest.setdefault(action.dest, set()).add(tuple(action.option_strings))
            users.setdefault(action.dest, set()).add(name)
    for string, owners in by_string.items():
        commands = [n for n, p in parsers().items() if string in visible_options(p)]
        if len(commands) > 1 and string not in SAME_MEANING_OUTSIDE_GROUPS:
            assert len(owners) == 1 and next(iter(owners))[1] in SHARED_GROUPS, \
                f"{string} in {commands} must come from one shared argument group: {owners}"
    for dest, spellings in by_dest.items():
        assert len(spellings) == 1, f"{dest} is spelled {spellings}"
    for dest, (spelling, commands) in SPELLINGS.items():
        assert by_dest[dest] == {(spelling,)}, (dest, by_dest[dest])
        assert users[dest] == commands, (dest, users[dest])
    accepted = set(by_string)
    assert not accepted & set(OLD_SPELLINGS), accepted & set(OLD_SPELLINGS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_shows_the_one_spellings_and_the_exit_status_rule(command, capsys):
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    for dest, (spelling, commands) in SPELLINGS.items():
        assert (re.search(rf"(?<![\w-]){re.escape(spelling)}(?![\w-])", text) is not None) == (command in commands), \
            (command, spelling)
    for old in OLD_SPELLINGS:
        assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", text), (command, old)
    assert "exit status:" in text and "0    done" in text and "2    a user error" in text and "130" in text
    assert re.search(r"^  1    the command ran but its check failed", text, re.M)
    specific = {"debug": "--target", "doctor": "--strict", "build": "engine"}
    if command in specific:
        assert specific[command] in re.search(r"^  1 .*$", text, re.M).group(0)


def test_top_level_help_has_the_exit_status_rule(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "exit status:" in text and "a bug in trtlab keeps its traceback" in text
    assert all(name in text for name in COMMANDS) and "--version" in text


@pytest.mark.parametrize("old,new", sorted(OLD_SPELLINGS.items()))
def test_old_spellings_are_refused_naming_the_new_one(old, new, capsys):
    commands = [n for n, p in parsers().items() if new in visible_options(p)]
    assert commands
    for command in commands:
        code, err = run_cli(capsys, command, old, "x")
        line = one_error_line(err)
        assert code == 2 and f"{old} is spelled {new} now" in line, (command, line)


def test_command_specific_renames_say_where_the_meaning_went(capsys):
    for argv, new in ((["prep", "--images", "val/"], "--data"), (["prep", "--labels", "kaggle"], "--label-source"),
                      (["demo", "--model", "m.onnx"], "--demo-model")):
        code, err = run_cli(capsys, *argv)
        assert code == 2 and f"is spelled {new} now" in one_error_line(err)


# -- abbreviations off, commas == repeats -------------------------------------------------------------------------
def test_abbreviations_are_refused(model, photos, tmp_path, capsys):
    assert all(parser.allow_abbrev is False for parser in parsers().values())
    for argv, given in ((["calibrate", "--calibration-im", "3"], "--calibration-im"),
                        (["eval", "--model", model, "--data", photos, "--batch", "4"], "--batch"),
                        (["debug", "--guard-prec", "fp16"], "--guard-prec"),
                        (["--vers", "eval"], "--vers")):
        code, err = run_cli(capsys, *argv)
        line = one_error_line(err)
        assert code == 2 and "unrecognized arguments" in line and given in line, line
    assert not (tmp_path / "ws").exists()


def test_commas_and_repeats_are_the_same_and_a_repeat_never_replaces():
    from trtlab.graph.guards import parse_guards

    def parse(command, *argv):
        return command_module(command).COMMAND.parse(list(argv))

    repeated = parse("calibrate", "--guards", "first_layer", "--guards", "last_layer=fp16,softmax",
                     "--algorithms", "minmax", "--algorithms", "entropy")
    commas = parse("calibrate", "--guards", "first_layer,last_layer=fp16,softmax", "--algorithms", "minmax,entropy")
    assert repeated.guards == commas.guards == parse_guards(("first_layer", "last_layer=fp16", "softmax"))  # parsed once
    assert repeated.algorithms == commas.algorithms == ("minmax", "entropy")
    assert list(map(str, parse("build", "--guards", "first_layer", "--guards", "last_layer").guards)) == \
        ["first_layer", "last_layer"]
    build = parse("build", "--precision", "fp32", "--precision", "fp16,int8", "--bench", "1", "--bench", "8,32")
    assert build.precision == ("fp32", "fp16", "int8") and build.bench == (1, 8, 32)
    dash = parse("dashboard", "--variants", "fp32", "int8-a", "--variants", "int8-b,fp16", "--focus", "int8-a,int8-b")
    assert dash.variants == ["fp32", "int8-a", "int8-b", "fp16"] and dash.focus == ["int8-a", "int8-b"]
    debug = parse("debug", "--scale-override", "a=2", "--scale-override", "b=0.5,c=4")
    assert debug.scale_overrides == {"a": 2.0, "b": 0.5, "c": 4.0}


def test_groups_give_typed_values_and_defaults():
    args = command_module("calibrate").COMMAND.parse(["--percentile", "99.9", "--calibration-images", "64"])
    assert args.algorithms == ("minmax", "entropy", "percentile") and args.percentile == 99.9
    assert args.calibration_images == 64 and args.calibration_batch == 8 and args.guards == ()
    assert args.preset == "tf-lite" and not args.preset_given and args.model is None
    debug = command_module("debug").COMMAND.parse(["--model", "m.onnx", "--out", "dbg"])
    assert debug.algorithms == ("entropy",) and debug.batch_size == 8 and debug.out == Path("dbg")
    assert isinstance(debug.model, Path)
    assert command_module("eval").COMMAND.parse(["--model", "m", "--data", "d"]).backend == "auto"


# -- value errors: one line, exit 2, before any decoding ----------------------------------------------------------
VALUE_ERRORS = [
    (["calibrate", "--algorithms", "kl"], ["'kl'", "entropy", "minmax"]),
    (["calibrate", "--algorithms", "minmax,bogus"], ["'bogus'"]),
    (["debug", "--algorithms", "minmax,entropy"], ["takes one algorithm"]),
    (["build", "--precision", "int8-implicit", "--algorithms", "percentile"],
     ["percentile has no TensorRT calibrator", "entropy, minmax"]),
    (["calibrate", "--guards", "middle_layer"], ["'middle_layer'", "node:<node name>"]),
    (["calibrate", "--guards", "last_layer=int8"], ["last_layer=int8", "=fp16"]),
    (["calibrate", "--guards", "node:nope"], ["'nope'", "tiny.onnx"]),
    (["debug", "--guards", "first_layer,node:nope"], ["'nope'", "tiny.onnx"]),
    (["build", "--guards", "node:nope"], ["'nope'", "tiny.onnx"]),
    (["calibrate", "--guards", "op:Relu"], ["op:Relu", "Gemm"]),
    (["eval", "--preset", "foo"], ["'foo'", "tf-lite", "torchvision"]),
    (["calibrate", "--percentile", "0"], ["--percentile 0", "(0, 100]"]),
    (["calibrate", "--percentile", "101"], ["--percentile 101", "(0, 100]"]),
    (["calibrate", "--percentile", "nan"], ["--percentile nan"]),
    (["calibrate", "--percentile", "0.9999"], ["a percent, not a fraction", "did you mean 99.99"]),
    (["calibrate", "--percentile", "99.9", "--algorithms", "entropy"], ["does not use it"]),
    (["calibrate", "--calibration-images", "0"], ["--calibration-images 0 is not possible", "≥ 1"]),
    (["debug", "--images", "0"], ["--images 0 is not possible"]),
    (["debug", "--target", "99.5"], ["--target 99.5", "(0, 1]"]),
    (["debug", "--guard-precision", "int8"], ["'int8'", "fp32, fp16"]),
    (["build", "--precision", "int4"], ["'int4'", "int8-implicit"]),
    (["build", "--min-batch", "8", "--opt-batch", "4"], ["not in order"]),
    (["build", "--bench", "1,x"], ["--bench 'x'"]),
    (["build", "--data", "{photos}"], ["int8-implicit only"]),
    (["eval", "--backend", "tensorrt"], ["'tensorrt'", "ort", "trt"]),
    (["eval", "--batch-size", "x"], ["invalid int value: 'x'"]),
    (["dashboard", "--out", "{tmp}/dash.html"], ["looks like a file name", "--out is a folder"]),
    (["prep", "--decode", "some"], ["'some'", "calibration"]),
    (["demo", "--demo-model", "efficientnet-lite9"], ["'efficientnet-lite9'", "efficientnet-lite0"]),
]
TAKES_MODEL_AND_DATA = {"eval", "calibrate", "debug"}


@pytest.mark.parametrize("argv,expected", VALUE_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_value_errors_are_one_line_before_any_decoding(argv, expected, model, photos, tmp_path, capsys, monkeypatch):
    ws = tmp_path / "ws"
    argv = [a.format(photos=photos, tmp=tmp_path) for a in argv]
    if argv[0] in TAKES_MODEL_AND_DATA:
        argv += ["--model", model, "--data", photos]
    if argv[0] == "build":  # past the TensorRT check (no TensorRT here): a module that imports is enough
        monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))
        argv += ["--model", model]
    code, err = run_cli(capsys, *argv, "--workspace", ws)
    line = one_error_line(err)
    assert code == 2, err
    for text in expected:
        assert text in line, (text, line)
    assert not (ws / "decode_cache").exists(), "decoded before the value was checked"
    assert not (ws / "results").exists()


def test_a_guard_naming_a_real_node_passes_and_reaches_the_variant(named_model, photos, tmp_path, capsys):
    from trtlab.workflows.checks import check_guards

    chosen = check_guards(named_model, ["node:fc=fp16", "op:GlobalAveragePool"], tmp_path / "ws")
    assert [(g.name, g.precision) for g in chosen] == [("pool", "fp32"), ("fc", "fp16")]
    code = main(["calibrate", "--model", str(named_model), "--data", str(photos), "--algorithms", "minmax",
                 "--guards", "node:fc", "--calibration-images", "3", "--workspace", str(tmp_path / "ws"), "-q"])
    out = capsys.readouterr().out
    assert code == 0 and "int8-minmax@3+fc" in out


def test_calibrate_prints_the_formatted_table_the_verdict_and_the_report(model, photos, tmp_path, capsys):
    """Issue 29.2: what notebook 03 shows — the formatted table (no raw `top1_low` columns or NaN), the verdict
    sentence of views.decision — and where the report was written."""
    from trtlab.views.formatting import UNFORMATTED_FLOAT

    # On this tiny model minmax and entropy make the same graph (one variant, said); percentile 90 clips.
    code = main(["calibrate", "--model", str(model), "--data", str(photos), "--algorithms",
                 "minmax,entropy,percentile", "--percentile", "90", "--calibration-images", "3", "--workspace",
                 str(tmp_path / "ws"), "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "top-1 (95 % CI)" in out and "top1_low" not in out and "NaN" not in out
    assert not UNFORMATTED_FLOAT.search(out)
    assert "int8-entropy@3 makes the same graph as int8-minmax@3 (byte-identical): evaluated once" in out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict: "))
    assert "int8-minmax@3" in verdict and "int8-percentile90@3" in verdict and "McNemar p" in verdict
    report = next(line for line in out.splitlines() if line.startswith("report: ")).split()[1]
    assert Path(report).is_file() and verdict.removeprefix("verdict: ") in Path(report).read_text()


def test_a_preset_for_the_demo_model_is_refused_not_ignored(tmp_path, capsys):
    code, err = run_cli(capsys, "calibrate", "--preset", "torchvision", "--workspace", tmp_path / "ws")
    line = one_error_line(err)
    assert code == 2 and "--preset torchvision applies to --model" in line and "tf-lite" in line
    assert not (tmp_path / "ws").exists()  # refused before the workspace is touched


def test_labels_without_data_are_refused(tmp_path, capsys):
    code, err = run_cli(capsys, "debug", "--labels", tmp_path / "labels.csv", "--workspace", tmp_path / "ws")
    assert code == 2 and "--labels" in one_error_line(err) and "--data" in one_error_line(err)


# -- the entry point: --version, one printer, Ctrl-C ----------------------------------------------------------------
def _python_m_trtlab(*argv) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "trtlab", *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def test_version_and_exit_status_of_the_real_entry_point():
    import trtlab

    done = _python_m_trtlab("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"trtlab {trtlab.__version__}"
    done = _python_m_trtlab("calibrate", "--algorithms", "kl")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: --algorithms 'kl'")


def test_commands_leave_error_printing_to_main():
    for path in sorted((REPO / "trtlab" / "cli" / "commands").glob("*.py")):
        source = path.read_text()
        assert "error: " not in source and "sys.stderr" not in source, f"{path.name} prints errors itself"


def test_ctrl_c_is_one_line_and_exit_130(model, photos, tmp_path, capsys, monkeypatch):
    import trtlab.workflows.job

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(trtlab.workflows.job, "run_job", interrupted)
    code, err = run_cli(capsys, "eval", "--model", model, "--data", photos, "--workspace", tmp_path / "ws")
    assert code == 130 and "Traceback" not in err
    assert err.strip().splitlines() == [err.strip()] and err.startswith("interrupted `eval` — ")


def test_a_failed_check_is_exit_1_not_an_error(monkeypatch, capsys):
    """doctor --strict without TensorRT: the command ran, its check failed → 1 (not 2, no `error:` line)."""
    import trtlab.env.cli as env_cli

    report = types.SimpleNamespace(ort_ready=True, trt_ready=False, to_dict=lambda: {"trt_ready": False})
    monkeypatch.setattr(env_cli, "collect_report", lambda roots=None: report)
    assert main(["doctor", "--json", "--strict"]) == 1
    assert main(["doctor", "--json"]) == 0
    assert "error:" not in capsys.readouterr().err
