"""Layer debugging: per-tensor error, per-layer sensitivity, guard search."""
