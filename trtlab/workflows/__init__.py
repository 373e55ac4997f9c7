"""Stages put together: input checks, A/B comparison, the demo job, engine sets."""
