"""`python -m trtlab <command>`: the dispatcher and the one place that prints errors.

Each command is a module under trtlab.cli.commands with `COMMAND` (its argument groups, trtlab.cli.args) and
`run(args) -> exit status`. Every command takes -q (warnings only, no progress bars) and -v (debug messages),
anywhere on the line. A user mistake (trtlab.core.errors.UserError, raised by the argument groups, the input checks
or the stages) propagates to here and is printed as one line `error: <what was wrong> — <what to do>`, exit 2;
Ctrl-C prints one line, exit 130; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import importlib
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
INTERRUPTED = ("interrupted — what was finished is kept in the workspace (decode caches resume, stored results are "
               "reused); run the same command again to continue")


def command_module(name: str):
    return importlib.import_module(f"trtlab.cli.commands.{name}")


def build_parser() -> Parser:
    """The top-level parser: the command list, --version and the exit-status rule (each command parses its own
    options)."""
    from trtlab import __version__

    parser = Parser(prog="python -m trtlab", description="TensorRT INT8 workbench. Every command also takes -q "
                    "(warnings only, no progress bars) and -v (debug messages); `python -m trtlab <command> --help` "
                    "lists its options.", epilog=exit_status_help("debug: the guard search missed --target; build: "
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
    from trtlab.core.errors import UserError, report

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
        return report(exc)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
