"""`python -m trtlab doctor`: GPU / CUDA / TensorRT / ONNX Runtime report.

The report itself lives in trtlab.env, which also runs on its own (`python -m trtlab.env doctor`, from
setup_kaggle_env.sh) with the standard library only; this module is its command line under the CLI's rules."""
from __future__ import annotations

from trtlab.cli.args import ArgGroup, Command
from trtlab.cli.main import command_main


class DoctorArgs(ArgGroup):
    """doctor: where to look and how to report"""

    def add_options(self, group):
        group.add_argument("--root", action="append", metavar="FOLDER", default=None,
                           help="folder to search for TensorRT (repeatable; default: the usual places and "
                                "/kaggle/input)")
        group.add_argument("--json", action="store_true", help="print JSON instead of the table")
        group.add_argument("--strict", action="store_true", help="exit 1 when TensorRT is not usable")


COMMAND = Command("doctor", "GPU / CUDA / TensorRT / ONNX Runtime report: what is installed, what loads, what to "
                  "do", [DoctorArgs()], check_failed="neither ONNX Runtime nor TensorRT is usable, or --strict and "
                                                     "TensorRT is not usable")
main = command_main(COMMAND.name)


def run(args) -> int:
    from trtlab.env.cli import doctor

    return doctor(args.root, args.json, args.strict)
