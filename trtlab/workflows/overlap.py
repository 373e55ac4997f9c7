"""compare()'s cold path (issue 38): decode the calibration images first, then the rest in the background while the
variants are evaluated, so that a cold A/B takes about max(decode, evaluation) rather than their sum.

`decode_first` decides (and says in one line) whether the decode overlaps the evaluation; data.decode_stream decodes
the rest and hands the rows over; evaluation.evaluate.evaluate_variants evaluates every variant in lock-step on
them. The stored results are those of decoding everything first, bit for bit (tests/test_decode_overlap.py).
`import_report_modules_meanwhile` (cold and warm alike) loads what the report imports while the GPU evaluates.
"""
from __future__ import annotations

import logging
import os

import numpy as np

log = logging.getLogger(__name__)
OVERLAP_ENV = "TRTLAB_OVERLAP_DECODE"  # '0': decode everything first (as RunOptions(overlap_decode=False))


def decode_first(pending: int, run, devices, split, progress: bool = True):
    """The rows to decode before calibrating — the calibration images and the evaluation images the ONNX Runtime
    self-check samples — or None: decode everything first (why: said in one line, where anything is pending)."""
    if not pending:
        return None
    why = None
    if not run.overlap_decode:
        why = "RunOptions(overlap_decode=False)"
    elif os.environ.get(OVERLAP_ENV, "1").strip() in ("0", "false", "no", "off"):
        why = f"{OVERLAP_ENV}={os.environ[OVERLAP_ENV]}"
    elif devices:
        why = "the variants are evaluated in worker processes (parallel), which read the finished decode cache"
    if why is not None:
        if progress:
            log.info(f"decoding every image first, not overlapped with the evaluation: {why}")
        return None
    from trtlab.evaluation.literal_check import self_check_sample_size

    evaluation = np.asarray(split.evaluation, np.int64)
    sample = evaluation[:self_check_sample_size(len(evaluation))]
    if progress:
        log.info(f"decoding overlaps evaluation: the {len(split.calibration):,} calibration image(s) are decoded "
                 f"first, the others while the variants are evaluated (RunOptions(overlap_decode=False) decodes "
                 f"everything first)")
    return np.concatenate([np.asarray(split.calibration, np.int64), sample])


#: What the A/B's report and verdict import on their first use (1.6 s on the H200 host's pinned cores: the cold
#: 50,000-image A/B's report step took 2.6 s against 1.0 s warm, issue 38).
REPORT_MODULES = ("pandas", "scipy.stats")


def import_report_modules_meanwhile() -> None:
    """Import REPORT_MODULES in a background thread while the variants are evaluated (the GPU works, the main thread
    mostly waits on it), so the report after the evaluation does not pay for them. Nothing is lost if it fails: the
    report imports them itself."""
    import sys
    import threading

    missing = [name for name in REPORT_MODULES if name not in sys.modules]
    if not missing:
        return

    def load() -> None:
        import importlib

        for name in missing:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 — the report's own import says what is wrong, where it is needed
                return

    threading.Thread(target=load, name="trtlab-import-report", daemon=True).start()

