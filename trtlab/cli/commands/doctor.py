"""`python -m trtlab doctor`: GPU / CUDA / TensorRT / ONNX Runtime report.

The report itself lives in trtlab.env, which also runs on its own (`python -m trtlab.env.trt_env doctor`, from
setup_kaggle_env.sh) with the standard library only; this module is its command line under the CLI's rules."""
from __future__ import annotations

import json
import sys

from trtlab.cli.args import ArgGroup, Command


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
main = COMMAND.main


def run(args) -> int:
    from trtlab.env.trt_env import collect_report

    report = collect_report(roots=args.root)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report.format_table())
        print()
        print(report.summary(color=sys.stdout.isatty()))
    if not report.ort_ready and not report.trt_ready:
        return 1
    return 1 if args.strict and not report.trt_ready else 0
