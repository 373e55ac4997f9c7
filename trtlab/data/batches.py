"""The one batch source: float32 N×3×H×W batches of decoded crops, normalised per batch, with their dataset
indices. Calibration, evaluation, the literal-reference self-check, layer debugging and TensorRT's calibrator all
read images through it, so they see the same pixels and follow the same fixed-batch rule:

- a model exported with a fixed batch B runs batches of exactly B rows: the last, short batch is padded with
  copies of its last image, and `Batch.count` says how many rows are real (consumers keep `[:count]`);
- otherwise batches have `batch_size` rows and the last one is simply shorter.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np


@dataclass
class Batch:
    indices: np.ndarray  # dataset indices of the real rows, in order
    images: np.ndarray  # float32 N×3×H×W (uint8 N×H×W×3 crops if asked); N ≥ len(indices) when padded

    @property
    def count(self) -> int:
        """Real rows (the rest is padding)."""
        return len(self.indices)


def rows_per_batch(batch_size: int, fixed_batch: int | None = None) -> int:
    """A model's fixed batch wins over the requested batch size."""
    return int(fixed_batch) if fixed_batch else int(batch_size)


def pad_batch(images: np.ndarray, rows: int) -> np.ndarray:
    """`images` padded to `rows` with copies of its last row (nothing to do when it has `rows` already)."""
    missing = rows - len(images)
    if missing <= 0:
        return images
    return np.concatenate([images, np.repeat(images[-1:], missing, axis=0)])


def read_ahead(items: Iterable, produce: Callable) -> Iterator:
    """produce(item) for each item, in order, the next one computed in a background thread while the caller works
    on this one (one in flight: memory stays at two results). The read-ahead loop of every batch consumer: the
    decode cache's reads and ONNX Runtime's runs release the GIL, so they overlap the caller's work."""
    items = iter(items)
    with ThreadPoolExecutor(1) as pool:
        first = next(items, _END)
        pending = pool.submit(produce, first) if first is not _END else None
        while pending is not None:
            following = next(items, _END)
            result = pending.result()
            pending = pool.submit(produce, following) if following is not _END else None
            yield result


_END = object()


def iter_batches(cache, indices=None, batch_size: int = 32, fixed_batch: int | None = None,
                 prefetch: bool = False, crops: bool = False, into: Callable | None = None) -> Iterator[Batch]:
    """Batches of `indices` of the decode cache `cache` (default: every decoded image).

    `crops=True` yields the uint8 N×H×W×3 crops as they are (contiguous) for consumers that normalise on the device
    (the torch backend and calibration on torch); otherwise float32 batches normalised here. `into(shape)` (with
    crops) gives the buffer each batch of crops is read into — the torch backend's pinned ring slots —, so the
    crops are read once, straight where the GPU copies them from. `prefetch=True` reads the next batch in a
    background thread while the caller works on this one (`read_ahead`). `indices` may be a stream of rows still
    being decoded (data.decode_stream.RowStream): its rows are batched the same way as they are committed."""
    from trtlab.data.decode_files import read_rows
    from trtlab.data.preprocess import normalize_batch

    rows = rows_per_batch(batch_size, fixed_batch)
    if hasattr(indices, "batches"):
        chunks = indices.batches(rows)
    else:
        indices = cache.valid_indices if indices is None else np.asarray(indices, np.int64)
        chunks = (indices[start:start + rows] for start in range(0, len(indices), rows))

    def make(chunk: np.ndarray) -> Batch:
        if crops and into is not None:
            images = into((rows if fixed_batch else len(chunk),) + tuple(cache.crops.shape[1:]))
            read_rows(cache.crops, chunk, images[:len(chunk)])
            images[len(chunk):] = images[len(chunk) - 1]  # the fixed-batch rule: copies of the last image
            return Batch(chunk, images)
        images = np.ascontiguousarray(np.asarray(cache.crops[chunk]))
        if not crops:
            images = normalize_batch(images, cache.preprocess)
        return Batch(chunk, pad_batch(images, rows) if fixed_batch else images)

    yield from read_ahead(chunks, make) if prefetch else map(make, chunks)
