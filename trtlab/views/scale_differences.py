"""Where two INT8 variants' calibrations differ: the tensors whose thresholds differ most, read from their
calibration caches (trtlab's TensorRT-format cache written beside each variant) and named by the model's blocks —
and which INT8 algorithm a stored result was calibrated with (`int8_algorithm`)."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from trtlab.evaluation.results import VariantResult
from trtlab.views.formatting import ratio

SCALE_ROWS = 10


def int8_algorithm(result: VariantResult) -> str | None:
    """'minmax', 'entropy', 'percentile', ... for an INT8 variant (from its recipe, else its label); None otherwise."""
    recipe = result.record.get("recipe") or {}
    if recipe.get("precision") == "int8":
        return recipe.get("algorithm") or "int8"
    match = re.match(r"int8-([a-z]+)", result.variant)
    return match.group(1) if match else None


def _graph_of(result: VariantResult):
    """The block names of the ONNX graph a result's run record names (graph.block_names), or None."""
    model = result.record.get("model")
    if not model or not Path(str(model)).is_file():
        return None
    from trtlab.graph.block_names import block_index

    try:
        return block_index(str(model))
    except Exception:  # noqa: BLE001 — an unreadable graph only costs the block names: tensors are named instead
        return None


def calibration_cache_of(result: VariantResult) -> Path | None:
    """The calibration cache written beside an INT8 variant's model (its run record names the model)."""
    model = result.record.get("model")
    if not model or int8_algorithm(result) is None:
        return None
    path = Path(str(model)).parent / "calibration.cache"
    return path if path.is_file() else None


def scale_differences(first: str, first_cache, second: str, second_cache, top: int = SCALE_ROWS, names=None):
    """(DataFrame of the `top` tensors whose thresholds differ most — block (graph.block_names.block_name of the
    tensor through `names`, a BlockIndex or model; the tensor name without one), tensor, both thresholds
    (= scale × 127), ratio — or None, notes saying what was compared or why nothing was)."""
    from trtlab.graph.block_names import block_name

    import pandas as pd

    from trtlab.quantization.calibration_cache import BadCalibrationCache, read_calibration_cache

    lacking = [name for name, cache in ((first, first_cache), (second, second_cache)) if not cache]
    if lacking:
        return None, [f"No calibration cache for {' and '.join(lacking)} (not an INT8 variant calibrated by trtlab, "
                      f"or its files were moved): thresholds not compared."]
    try:
        _, a = read_calibration_cache(first_cache)
        _, b = read_calibration_cache(second_cache)
    except (BadCalibrationCache, OSError) as exc:
        return None, [f"Calibration caches not compared: {exc}"]
    common = [t for t in a if t in b]
    if not common:
        return None, [f"The calibration caches of {first} and {second} share no tensor name (different graphs or "
                      f"guards): thresholds not compared."]
    frame = pd.DataFrame({"tensor": common, "first_threshold": [a[t] * 127.0 for t in common],
                          "second_threshold": [b[t] * 127.0 for t in common]})
    frame["ratio"] = frame["first_threshold"] / frame["second_threshold"]
    spread = np.abs(np.log(frame["ratio"].to_numpy(float)))
    differ = int((spread > math.log(1.1)).sum())
    if not spread.any():  # same calibration (e.g. plain vs recovered): a table of 1.00× rows would say nothing
        return None, [f"All {len(common)} activation thresholds of {first} and {second} are identical (the same "
                      f"calibration): they differ elsewhere (weights, biases or guards), not in their scales."]
    frame = frame.assign(spread=spread).sort_values("spread", ascending=False, kind="stable").head(top)
    frame.insert(0, "block", [block_name(names, t) if names is not None else t for t in frame["tensor"]])
    median = float(np.median([a[t] / b[t] for t in common]))
    notes = [f"{differ} of {len(common)} activation tensors have thresholds more than 10 % apart (median "
             f"{first} / {second}: {ratio(median)}); threshold = scale × 127, TensorRT's per-tensor symmetric INT8."]
    return frame.drop(columns="spread").reset_index(drop=True), notes


