"""`python -m trtlab eval`: evaluate an ONNX classifier on a folder of images, report."""
from __future__ import annotations

from trtlab.cli.args import BackendArgs, Command, ModelDataArgs, WorkspaceArgs
from trtlab.cli.main import command_main

COMMAND = Command("eval", "evaluate an ONNX classifier on a folder of images (FP32), stored results and report",
                  [ModelDataArgs(required=True), WorkspaceArgs(), BackendArgs()])
main = command_main(COMMAND.name)


def run(args) -> int:
    from trtlab.workflows.checks import checked_inputs
    from trtlab.workflows.job import print_summary, run_job

    # Everything that can be checked is checked before the data folder is decoded.
    inputs = checked_inputs(model=args.model, data=args.data, labels=args.labels, preset=args.preset,
                            workspace=args.workspace, batch_size=args.batch_size, backend=args.backend,
                            **args.model_options)
    job = run_job(inputs.model, inputs.dataset, inputs.preset, args.workspace, backend=args.backend,
                  batch_size=inputs.sizes.batch_size)
    print_summary(job)
    return 0
