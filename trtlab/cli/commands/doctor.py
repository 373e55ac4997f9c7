"""`python -m trtlab doctor`: GPU / CUDA / TensorRT / ONNX Runtime report.

The report lives in trtlab.env, which also runs on its own (setup_kaggle_env.sh) with the standard library only."""
from __future__ import annotations


def main(argv=None) -> int:
    from trtlab.env.cli import doctor_main

    return doctor_main(argv)
