"""An interrupted evaluation's logits, checkpointed: a Kaggle session that times out resumes where it stopped."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from trtlab.core.identity import Identity
from trtlab.core.workspace import atomic_path, atomic_write_json, load_npy, read_checked, read_json_checked


class EvaluationCheckpoint:
    """Logits of a running evaluation, saved in chunk files every `every` images (each written atomically) under
    a key; a later evaluation with the same key continues after the saved images."""

    def __init__(self, folder: Path, identity: Identity, every: int = 2048):
        self.folder, self.key, self.every = Path(folder), Identity.of(identity).key, max(1, every)
        self.pending: list[np.ndarray] = []
        self.saved_chunks = 0

    def load(self) -> list[np.ndarray]:
        if (read_json_checked(self.folder / "key.json") or {}).get("key") != self.key:
            self.clear()
            return []
        chunks = [read_checked(path, load_npy, _logits_check) for path in sorted(self.folder.glob("chunk-*.npy"))]
        if len({chunk.shape[1] for chunk in chunks if chunk is not None}) > 1:  # chunks of other runs mixed in
            chunks.append(None)
        if any(chunk is None for chunk in chunks):  # a damaged chunk (set aside): start this evaluation over
            self.clear()
            return []
        self.saved_chunks = len(chunks)
        return chunks

    def add(self, logits: np.ndarray) -> None:
        self.pending.append(logits)
        if sum(len(p) for p in self.pending) >= self.every:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        if self.saved_chunks == 0:
            atomic_write_json(self.folder / "key.json", {"key": self.key})
        with atomic_path(self.folder / f"chunk-{self.saved_chunks:06d}.npy", suffix=".npy") as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, np.concatenate(self.pending))
        self.saved_chunks += 1
        self.pending = []

    def clear(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)
        self.saved_chunks = 0
        self.pending = []


def _logits_check(chunk) -> str | None:
    """A saved chunk of logits is a 2-D float array (images × classes)."""
    if chunk.ndim != 2 or chunk.dtype.kind != "f":
        return f"shape {chunk.shape} {chunk.dtype}, expected images × classes floats"
    return None
