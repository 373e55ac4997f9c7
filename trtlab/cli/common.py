"""Options several commands share."""
from __future__ import annotations


def add_common(parser) -> None:
    parser.add_argument("--workspace", default=None, help="output folder (default: /kaggle/working/trtlab-runs on "
                                                          "Kaggle, else runs/ in the trtlab checkout)")
    parser.add_argument("--backend", default="auto", choices=["auto", "ort", "trt"])
    parser.add_argument("--batch-size", type=int, default=32)
