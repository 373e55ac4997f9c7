"""`python -m trtlab <command>`: demo, eval, doctor (and the commands later stages add).

Every command takes -q (warnings only) and -v (debug messages). A user mistake (a trtlab.core.errors.UserError: bad
file, impossible label or size, unwritable folder) prints one line `error: <what was wrong> — <what to do>` and
exits 2; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import argparse
import sys


# One module per command under trtlab.cli.commands, each parsing its own arguments: main(argv) -> exit code.
STAGE_COMMANDS = {
    "demo": "EfficientNet-Lite0 on the bundled demo photos, whole pipeline, report",
    "eval": "evaluate an ONNX classifier on a folder of images",
    "doctor": "GPU / CUDA / TensorRT / ONNX Runtime report",
    "prep": "prepare ImageNet val: labels, classes, split, decode cache",
    "calibrate": "calibrate + quantize INT8 variants and evaluate them",
    "build": "build TensorRT engines (needs TensorRT)",
    "dashboard": "write the accuracy/consistency HTML report",
    "debug": "per-layer error, sensitivity and automatic guard search",
}

# What each stage command's options mean for validation before the stage runs: option → check_inputs argument.
# (prep's --labels is a label *source* name, not a CSV, so it is not listed there; debug validates itself.)
STAGE_PRECHECKS = {
    "calibrate": {"--model": "model", "--data": "data", "--labels": "labels", "--workspace": "workspace",
                  "--calibration-images": "calibration_images", "--calibration-batch": "calibration_batch"},
    "dashboard": {"--workspace": "workspace", "--out": "out"},
    "build": {"--model": "model", "--workspace": "workspace"},
    "prep": {"--workspace": "workspace"},
}
_INT_OPTIONS = {"calibration_images", "calibration_batch", "batch_size", "images"}


def precheck_stage(name: str, argv: list[str]) -> None:
    """Validate a stage command's inputs (check_inputs order) before the stage decodes or computes anything.

    Values the stage's own parser would reject (not a number) are left to it, so its usage message wins."""
    options = STAGE_PRECHECKS.get(name)
    if not options or any(a in ("-h", "--help") for a in argv):
        return
    from trtlab.workflows.checks import check_inputs

    parser = argparse.ArgumentParser(add_help=False)
    for option, dest in options.items():
        parser.add_argument(option, dest=dest, default=None)
    known, _ = parser.parse_known_args(argv)
    values = vars(known)
    for key in _INT_OPTIONS & set(values):
        if values[key] is not None:
            try:
                values[key] = int(values[key])
            except ValueError:
                return
    if name == "dashboard" and values.get("out") is not None:
        from pathlib import Path

        out = Path(values["out"])  # dashboard's --out is the HTML file: its folder must be writable
        values["out"] = out if out.is_dir() else out.parent
    images = values.pop("images", None)
    out = values.pop("out", None)
    check_inputs(outputs=[out] if out is not None else (), **values)
    if images is not None and images < 1:
        from trtlab.core.errors import UserValueError

        raise UserValueError(f"--images {images} is not possible", "give a whole number ≥ 1 for --images")


def _run_stage_command(name: str, argv: list[str]) -> int:
    import importlib

    precheck_stage(name, argv)
    return importlib.import_module(f"trtlab.cli.commands.{name}").main(argv)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser (usage and the command list; each command parses its own options)."""
    parser = argparse.ArgumentParser(prog="python -m trtlab", description="TensorRT INT8 workbench. Every command "
                                     "also takes -q (warnings only) and -v (debug messages).")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in STAGE_COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def split_verbosity(argv: list[str]) -> tuple[int, list[str]]:
    """Take -q / -v / -vv out of argv (anywhere on the line, for every command); return (verbosity, rest)."""
    verbosity, rest = 0, []
    for arg in argv:
        if arg == "-q":
            verbosity = -1
        elif arg.startswith("-v") and set(arg[1:]) == {"v"}:
            verbosity = max(verbosity, 0) + len(arg) - 1
        else:
            rest.append(arg)
    return verbosity, rest


def main(argv: list[str] | None = None) -> int:
    from trtlab.core import log, progress
    from trtlab.core.errors import UserError, report

    argv = list(sys.argv[1:] if argv is None else argv)
    verbosity, argv = split_verbosity(argv)
    log.setup(verbosity)
    try:
        with progress.quiet(verbosity < 0):
            if argv and argv[0] in STAGE_COMMANDS:
                return _run_stage_command(argv[0], argv[1:])
            build_parser().parse_args(argv)  # usage / --help / an unknown command (argparse exits 2)
            return 2
    except UserError as exc:
        return report(exc)


if __name__ == "__main__":
    sys.exit(main())
