"""`python -m trtlab <command>`: demo, eval, doctor (and the commands later stages add)."""
from __future__ import annotations

import argparse
import sys


def _cmd_demo(args) -> int:
    from .job import print_summary, run_demo

    job = run_demo(args.workspace, model=args.model, batch_size=args.batch_size, backend=args.backend)
    print_summary(job)
    return 0


def _cmd_eval(args) -> int:
    from .dataset import Dataset
    from .job import print_summary, run_job

    dataset = Dataset.from_folder(args.data, labels_csv=args.labels)
    job = run_job(args.model, dataset, args.preset, args.workspace, backend=args.backend,
                  batch_size=args.batch_size)
    print_summary(job)
    return 0


# Stage commands live beside their stage and parse their own arguments: (module, function(argv) -> exit code).
STAGE_COMMANDS = {
    "doctor": ("trtlab.trt_env", "doctor_main", "GPU / CUDA / TensorRT / ONNX Runtime report"),
    "prep": ("trtlab.imagenet", "prep_main", "prepare ImageNet val: labels, classes, split, decode cache"),
    "calibrate": ("trtlab.ab", "calibrate_main", "calibrate + quantize INT8 variants and evaluate them"),
    "build": ("trtlab.backends.trt", "build_main", "build TensorRT engines (needs TensorRT)"),
    "dashboard": ("trtlab.dashboard", "dashboard_main", "write the accuracy/consistency HTML report"),
    "debug": ("trtlab.layer_debug", "debug_main", "per-layer error, sensitivity and automatic guard search"),
}


def _run_stage_command(name: str, argv: list[str]) -> int:
    import importlib

    module, function, _ = STAGE_COMMANDS[name]
    return getattr(importlib.import_module(module), function)(argv)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trtlab", description="TensorRT INT8 workbench")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--workspace", default=None, help="output folder (default: /kaggle/working/trtlab or ./runs)")
        p.add_argument("--backend", default="auto", choices=["auto", "ort", "trt"])
        p.add_argument("--batch-size", type=int, default=32)

    demo = sub.add_parser("demo", help="EfficientNet-Lite0 on the bundled demo photos, whole pipeline, report")
    demo.add_argument("--model", default="efficientnet-lite0")
    common(demo)
    ev = sub.add_parser("eval", help="evaluate an ONNX classifier on a folder of images")
    ev.add_argument("--model", required=True, help="ONNX classifier with N×3×H×W input")
    ev.add_argument("--data", required=True, help="image folder (flat or one sub-folder per WNID/class index)")
    ev.add_argument("--labels", default=None, help="optional CSV file,label")
    ev.add_argument("--preset", default="tf-lite", help="preprocessing preset: tf-lite or torchvision")
    common(ev)
    for name, (_, _, help_text) in STAGE_COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in STAGE_COMMANDS:
        return _run_stage_command(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    return {"demo": _cmd_demo, "eval": _cmd_eval}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
