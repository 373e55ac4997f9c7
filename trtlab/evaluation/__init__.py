"""Experiment identity, the results store, evaluation, the literal-reference check, metrics."""
