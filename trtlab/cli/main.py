"""`python -m trtlab <command>`: the dispatcher and the one place that prints errors.

Each command is a module under trtlab.cli.commands with `COMMAND` (its argument groups, trtlab.cli.args) and
`run(args) -> exit status`. Every command takes -q (warnings only, no progress bars) and -v (debug messages),
anywhere on the line. A user mistake (trtlab.core.errors.UserError, raised by the argument groups, the input checks
or the stages) propagates to here and is printed as one line `error: <what was wrong> — <what to do>`, exit 2;
Ctrl-C prints one line, exit 130; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import importlib
import re
import sys

from trtlab.cli.args import Parser, exit_status_help

# name → one line for the command list (each command's own --help says more)
COMMANDS = {
    "demo": "EfficientNet-Lite0 on the bundled demo photos, whole pipeline, report",
    "eval": "evaluate an ONNX classifier on a folder of images",
    "doctor": "GPU / CUDA / TensorRT / ONNX Runtime report",
    "prep": "prepare ImageNet val: labels, classes, split, decode cache",
    "calibrate": "calibrate + quantize INT8 variants and evaluate them",
    "build": "build TensorRT engines (needs TensorRT)",
    "dashboard": "write the accuracy/consistency HTML report",
    "debug": "per-layer error, sensitivity and automatic guard search",
}
EXIT_INTERRUPTED = 130
INTERRUPTED = ("what was finished is kept in the workspace (decode caches resume, stored results are reused); run the "
               "same command again to continue")


def interrupted_line(command: str | None) -> str:
    """The one Ctrl-C line: which command and which step were interrupted (the open progress bar, which is closed
    first so the line starts on its own line) and that finished work is kept."""
    from trtlab.core import progress

    doing = progress.close_open()
    where = f" `{command}`" if command else ""
    step = f" during {doing}" if doing else ""
    return f"interrupted{where}{step} — {INTERRUPTED}"


# Python keywords the stages name in their messages (the notebook API) → the flag a command-line user types, and
# the placeholder shown for `keyword=...`.
FLAGS = {"calibration_images": ("--calibration-images", "N"), "calibration_per_class": ("--calibration-per-class", "N"),
         "calibration_size": ("--calibration-size", "N"), "calibration_batch": ("--calibration-batch", "N"),
         "batch_size": ("--batch-size", "N"), "devkit": ("--devkit", "FOLDER"),
         "ground_truth": ("--ground-truth", "FILE"),
         "loc_solution": ("--loc-solution", "FILE"), "synset_mapping": ("--synset-mapping", "FILE"),
         "images": ("--data", "FOLDER"), "root": ("--root", "FOLDER"), "labels_csv": ("--labels", "CSV"),
         "labels": ("--label-source", "SOURCE"), "workspace": ("--workspace", "FOLDER")}
_KEYWORD_VALUE = re.compile(r"(?<![\w./-])(" + "|".join(FLAGS) + r")=(\.\.\.|'([^']*)'|(?=\d)(\S+))")
# Bare (without `=`), only the numeric keywords are renamed — they are named in bounds like `calibration_images ≤
# 10`; a bare `images`, `root` or `labels` in a message is an ordinary word.
_NUMERIC_KEYWORDS = [keyword for keyword, (_, placeholder) in FLAGS.items() if placeholder == "N"]
_BARE_KEYWORD = re.compile(r"(?<![\w./=-])(" + "|".join(_NUMERIC_KEYWORDS) + r")(?![\w=])")
_SAME_FLAG_TWICE = re.compile(r"(--[\w-]+)((?: [A-Z]+)?) / \1\b")


def as_flags(text: str) -> str:
    """`text` with the Python keywords of the notebook API (`calibration_images ≤ 10`, `devkit=...`,
    `labels='kaggle'`) named as the flags a command-line user types (`--calibration-images ≤ 10`, `--devkit FOLDER`,
    `--label-source kaggle`)."""
    def keyword_value(match: re.Match) -> str:
        flag, placeholder = FLAGS[match.group(1)]
        value = match.group(3) if match.group(3) is not None else match.group(4)
        return f"{flag} {placeholder if value is None else value}"

    text = _KEYWORD_VALUE.sub(keyword_value, text)
    text = _BARE_KEYWORD.sub(lambda m: FLAGS[m.group(1)][0], text)
    text = text.replace(", or --workspace FOLDER)", ")")  # "(--workspace / --out, or workspace=...)"
    return _SAME_FLAG_TWICE.sub(r"\1\2", text)


def report_cli_error(exc) -> int:
    """The one error line (trtlab.core.errors.report), its hints in the command line's words (`as_flags`)."""
    from trtlab.core import progress
    from trtlab.core.errors import UserError, report

    progress.close_open()  # the line starts on its own line, not inside a progress bar
    return report(UserError(as_flags(exc.what), as_flags(exc.fix)))


def command_module(name: str):
    return importlib.import_module(f"trtlab.cli.commands.{name}")


def command_main(name: str):
    """A command module's `main(argv)`: `python -m trtlab <name> ARGV` from Python — the same parsing, checks and
    one error printer. It lives here, beside the dispatcher it calls, so the argument groups (cli.args) never
    import the dispatcher that imports them."""
    def command(argv: list[str] | None = None) -> int:
        return main([name, *(argv or [])])

    command.__qualname__ = command.__name__ = "main"
    command.__doc__ = f"`python -m trtlab {name} ARGV` from Python (exit status)."
    return command


def build_parser() -> Parser:
    """The top-level parser: the command list, --version and the exit-status rule (each command parses its own
    options)."""
    from trtlab import __version__

    parser = Parser(prog="python -m trtlab", description="TensorRT INT8 workbench. Every command also takes -q "
                    "(warnings only, no progress bars) and -v (debug messages); `python -m trtlab <command> --help` "
                    "lists its options.", epilog=exit_status_help("debug: the guard search or its verification "
                                                                  "missed --target; build: "
                                                                  "TensorRT could not build an engine; doctor: no "
                                                                  "usable runtime, or --strict without TensorRT"))
    parser.add_argument("--version", action="version", version=f"trtlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    for name, help_text in COMMANDS.items():
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


def run_command(name: str, argv: list[str], verbosity: int = 0) -> int:
    """Parse `argv` with the command's argument groups (every value checked and typed), then run it."""
    module = command_module(name)
    try:
        args = module.COMMAND.parse(argv)
    except SystemExit as exc:  # --help: argparse printed it and exits 0 (its errors are UserErrors, see Parser)
        return exc.code if isinstance(exc.code, int) else 0
    args.verbosity = verbosity
    return module.run(args)


def main(argv: list[str] | None = None) -> int:
    from trtlab.core import log, progress
    from trtlab.core.errors import UserError

    argv = list(sys.argv[1:] if argv is None else argv)
    verbosity, argv = split_verbosity(argv)
    log.setup(verbosity)
    try:
        with progress.quiet(verbosity < 0):
            if argv and argv[0] in COMMANDS:
                return run_command(argv[0], argv[1:], verbosity)
            try:
                build_parser().parse_args(argv)  # --help / --version / no or an unknown command (a UserError)
            except SystemExit as exc:
                return exc.code if isinstance(exc.code, int) else 0
            return 2
    except UserError as exc:
        return report_cli_error(exc)
    except KeyboardInterrupt:
        print(interrupted_line(argv[0] if argv and argv[0] in COMMANDS else None), file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
