"""`python -m trtlab demo`: the bundled default, whole pipeline, report."""
from __future__ import annotations

from trtlab.cli.common import add_common


def _parser():
    import argparse

    parser = argparse.ArgumentParser(prog="python -m trtlab demo", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("--model", default="efficientnet-lite0")
    add_common(parser)
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from trtlab.workflows.job import print_summary, run_demo
    from trtlab.workflows.checks import check_inputs

    check_inputs(workspace=args.workspace, batch_size=args.batch_size, backend=args.backend)
    job = run_demo(args.workspace, model=args.model, batch_size=args.batch_size, backend=args.backend)
    print_summary(job)
    return 0
