"""Plumbing every stage shares: errors, logging, progress bars, the workspace, atomic files, hashing."""
