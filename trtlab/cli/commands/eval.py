"""`python -m trtlab eval`: evaluate an ONNX classifier on a folder of images, report."""
from __future__ import annotations

from trtlab.cli.common import add_common


def _parser():
    import argparse

    parser = argparse.ArgumentParser(prog="python -m trtlab eval", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("--model", required=True, help="ONNX classifier with N×3×H×W input")
    parser.add_argument("--data", required=True, help="image folder (flat or one sub-folder per WNID/class index)")
    parser.add_argument("--labels", default=None, help="optional CSV file,label")
    parser.add_argument("--preset", default="tf-lite", help="preprocessing preset: tf-lite or torchvision")
    add_common(parser)
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from trtlab.workflows.job import print_summary, run_job
    from trtlab.workflows.checks import check_inputs

    # Everything that can be checked is checked before the data folder is decoded.
    _, _, dataset, sizes = check_inputs(model=args.model, data=args.data, labels=args.labels,
                                        workspace=args.workspace, batch_size=args.batch_size, backend=args.backend)
    job = run_job(args.model, dataset, args.preset, args.workspace, backend=args.backend,
                  batch_size=sizes.batch_size)
    print_summary(job)
    return 0
