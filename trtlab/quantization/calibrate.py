"""Calibration = activation statistics (trtlab.quantization.statistics: streaming histograms, one pass over the
images) + thresholds (trtlab.quantization.thresholds: minmax, entropy, entropy-gtc, percentile). This module only
names both halves in one place for callers that want "calibration"; the code lives in those two modules."""
from __future__ import annotations

from trtlab.quantization.statistics import (CALIBRATION_REVISION, HISTOGRAM_BINS, MAX_HISTOGRAM_BINS,  # noqa: F401
                                            MEMORY_BUDGET_MB, CalibrationStats, TensorHistogram, collect_statistics,
                                            sub_batch_size)
from trtlab.quantization.thresholds import (ALGORITHMS, ENTROPY_LEVELS, ENTROPY_START_BIN,  # noqa: F401
                                            compute_thresholds, scales_from_thresholds, threshold_entropy,
                                            threshold_entropy_gtc, threshold_minmax, threshold_percentile)

__all__ = ["CALIBRATION_REVISION", "HISTOGRAM_BINS", "MAX_HISTOGRAM_BINS", "MEMORY_BUDGET_MB", "CalibrationStats",
           "TensorHistogram", "collect_statistics", "sub_batch_size", "ALGORITHMS", "ENTROPY_LEVELS",
           "ENTROPY_START_BIN", "compute_thresholds", "scales_from_thresholds", "threshold_entropy",
           "threshold_entropy_gtc", "threshold_minmax", "threshold_percentile"]
