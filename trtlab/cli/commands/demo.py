"""`python -m trtlab demo`: the bundled default, whole pipeline, report."""
from __future__ import annotations

from trtlab.cli.args import ArgGroup, BackendArgs, Command, WorkspaceArgs, check_choice
from trtlab.cli.main import command_main


class DemoArgs(ArgGroup):
    """demo: which bundled model"""

    # --model is an ONNX file in every other command; the demo picks one of its bundled models by name.
    renamed = {"--model": ("--demo-model", "use --demo-model NAME for a bundled model, or `python -m trtlab eval "
                                           "--model M.onnx --data FOLDER` for your own")}

    def add_options(self, group):
        group.add_argument("--demo-model", metavar="NAME", default="efficientnet-lite0",
                           help="efficientnet-lite0, -lite1 or -lite2 (default: efficientnet-lite0)")

    def parse(self, args):
        from trtlab.data.demo import DEMO_MODELS

        check_choice("--demo-model", args.demo_model, list(DEMO_MODELS), "a bundled demo model")


COMMAND = Command("demo", "EfficientNet-Lite0 on the bundled demo photos: whole pipeline (FP32, FP16, INT8 with "
                  "three calibrators), stored results, report", [DemoArgs(), WorkspaceArgs(), BackendArgs()])
main = command_main(COMMAND.name)


def run(args) -> int:
    from trtlab.workflows.checks import check_inputs
    from trtlab.workflows.job import print_summary, run_demo

    check_inputs(workspace=args.workspace, batch_size=args.batch_size, backend=args.backend)
    job = run_demo(args.workspace, model=args.demo_model, batch_size=args.batch_size, backend=args.backend)
    print_summary(job)
    return 0
