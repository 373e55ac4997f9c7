"""Calibration statistics, thresholds, Q/DQ placement and insertion, recipes and variants."""
